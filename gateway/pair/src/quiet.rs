//! Keeps a failure that repeats from flooding the log: a member that stays
//! unreachable, a former member that keeps calling, a retry that keeps
//! failing. The first occurrence is logged, then at most one line per
//! interval saying how many were not.

use std::time::{Duration, Instant};

/// How often a failure that goes on is logged again (with the count of
/// occurrences not logged meanwhile).
pub const REPEAT_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Decides whether one occurrence of a repeated failure is logged. Plain
/// data: the caller passes `now` and does the logging.
#[derive(Debug, Clone)]
pub struct LogThrottle {
    interval: Duration,
    /// When the last line was logged, while the failure goes on.
    last: Option<Instant>,
    /// Occurrences not logged since that line.
    quiet: u64,
}

impl LogThrottle {
    /// A throttle logging at most once per `interval`.
    pub fn new(interval: Duration) -> LogThrottle {
        LogThrottle {
            interval,
            last: None,
            quiet: 0,
        }
    }

    /// One occurrence at `now`: `Some(n)` when it is to be logged (`n`
    /// occurrences were not logged since the previous line), `None` when it
    /// is to stay quiet.
    pub fn hit(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(at) if now.saturating_duration_since(at) < self.interval => {
                self.quiet += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.quiet))
            }
        }
    }

    /// The failure is over: true when it had been logged (the caller then
    /// logs that it is over). The next occurrence is logged at once.
    pub fn clear(&mut self) -> bool {
        self.quiet = 0;
        self.last.take().is_some()
    }
}

impl Default for LogThrottle {
    fn default() -> LogThrottle {
        LogThrottle::new(REPEAT_LOG_INTERVAL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_the_first_then_once_per_interval_with_the_count() {
        let t0 = Instant::now();
        let mut t = LogThrottle::new(Duration::from_secs(60));
        assert_eq!(t.hit(t0), Some(0));
        for s in 1..60 {
            assert_eq!(t.hit(t0 + Duration::from_secs(s)), None);
        }
        assert_eq!(t.hit(t0 + Duration::from_secs(60)), Some(59));
        assert_eq!(t.hit(t0 + Duration::from_secs(61)), None);
        assert!(t.clear());
        assert!(!t.clear());
        assert_eq!(t.hit(t0 + Duration::from_secs(62)), Some(0));
    }
}
