//! Reclaiming unused channels at connection capacity (ResourceIsolation:
//! "Unused established channels without a session may be reclaimed at
//! capacity, never one with a handshake, partial message, queued write or
//! in-flight request, and only after the rate limiter approved").
//!
//! Every connection driver registers here and reports whether it is quiet
//! (open, no session bound, nothing partial, unread, unwritten or in flight).
//! When a new caller finds the Connection stage full, the longest-quiet
//! channel is closed to make room.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use uagate_isolation::FastMap;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

struct Entry {
    quiet_since: Option<Instant>,
    cancel: CancellationToken,
}

/// The registry of live connections and their quiet state.
#[derive(Default)]
pub struct Reclaimer {
    next: AtomicU64,
    conns: Mutex<FastMap<u64, Entry>>,
}

impl Reclaimer {
    /// Registers a connection; `cancel` closes it when it is reclaimed.
    pub fn register(&self, cancel: CancellationToken) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.conns.lock().insert(
            id,
            Entry {
                quiet_since: None,
                cancel,
            },
        );
        id
    }

    /// Updates whether connection `id` is quiet (called by its driver each turn).
    pub fn set_quiet(&self, id: u64, quiet: bool, now: Instant) {
        if let Some(e) = self.conns.lock().get_mut(&id) {
            match (quiet, e.quiet_since) {
                (true, None) => e.quiet_since = Some(now),
                (false, Some(_)) => e.quiet_since = None,
                _ => {}
            }
        }
    }

    /// Forgets connection `id` (its driver ended).
    pub fn unregister(&self, id: u64) {
        self.conns.lock().remove(&id);
    }

    /// Closes the longest-quiet connection; false when none is quiet.
    pub fn reclaim_one(&self) -> bool {
        let mut conns = self.conns.lock();
        let victim = conns
            .iter()
            .filter_map(|(id, e)| e.quiet_since.map(|t| (t, *id)))
            .min()
            .map(|(_, id)| id);
        match victim.and_then(|id| conns.remove(&id)) {
            Some(e) => {
                e.cancel.cancel();
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn only_quiet_connections_are_reclaimed_longest_quiet_first() {
        let r = Reclaimer::default();
        let (a, b, c) = (
            CancellationToken::new(),
            CancellationToken::new(),
            CancellationToken::new(),
        );
        let ia = r.register(a.clone());
        let ib = r.register(b.clone());
        let _ic = r.register(c.clone());
        let t0 = Instant::now();
        assert!(!r.reclaim_one(), "nothing is quiet yet");
        r.set_quiet(ib, true, t0);
        r.set_quiet(ia, true, t0 + Duration::from_secs(1));
        assert!(r.reclaim_one());
        assert!(b.is_cancelled() && !a.is_cancelled());
        r.set_quiet(ia, false, t0 + Duration::from_secs(2));
        assert!(!r.reclaim_one(), "a is busy again, c never quiet");
        assert!(!a.is_cancelled() && !c.is_cancelled());
    }
}
