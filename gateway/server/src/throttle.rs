//! Slows down repeated failed logins per user name, so password guessing
//! over many sessions costs time. Called around every password check.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Failures older than this are forgotten.
const WINDOW: Duration = Duration::from_secs(300);
/// Longest delay imposed before a check.
const MAX_DELAY: Duration = Duration::from_secs(5);
/// Most user names tracked; the table is cleared when full.
const MAX_TRACKED: usize = 10_000;

/// Failure counters per user name.
#[derive(Debug, Default)]
pub struct Throttle {
    failures: Mutex<HashMap<String, (u32, Instant)>>,
}

impl Throttle {
    /// The delay owed before the next check for `name` at `now`: none for
    /// the first failure, then 250 ms doubling per failure up to 5 s.
    pub fn delay(&self, name: &str, now: Instant) -> Duration {
        match self.failures.lock().get(name) {
            Some((n, at)) if *n >= 1 && now.duration_since(*at) < WINDOW => {
                let d = Duration::from_millis(250u64 << (n - 1).min(5));
                d.min(MAX_DELAY)
            }
            _ => Duration::ZERO,
        }
    }

    /// Waits the delay owed for `name` (async, per request).
    pub async fn wait(&self, name: &str) {
        let d = self.delay(name, Instant::now());
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
    }

    /// Records a failed check.
    pub fn failure(&self, name: &str) {
        let mut map = self.failures.lock();
        if map.len() >= MAX_TRACKED {
            map.clear();
        }
        let now = Instant::now();
        let e = map.entry(name.to_string()).or_insert((0, now));
        if now.duration_since(e.1) >= WINDOW {
            e.0 = 0;
        }
        e.0 += 1;
        e.1 = now;
    }

    /// Forgets the failures of `name` after a successful check.
    pub fn success(&self, name: &str) {
        self.failures.lock().remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_grows_with_failures_and_resets_on_success() {
        let t = Throttle::default();
        let now = Instant::now();
        assert_eq!(t.delay("bob", now), Duration::ZERO);
        t.failure("bob");
        assert_eq!(t.delay("bob", Instant::now()), Duration::from_millis(250));
        t.failure("bob");
        t.failure("bob");
        assert_eq!(t.delay("bob", Instant::now()), Duration::from_millis(1000));
        for _ in 0..10 {
            t.failure("bob");
        }
        assert_eq!(t.delay("bob", Instant::now()), MAX_DELAY);
        assert_eq!(t.delay("alice", Instant::now()), Duration::ZERO);
        t.success("bob");
        assert_eq!(t.delay("bob", Instant::now()), Duration::ZERO);
    }
}
