//! How fast certificates never seen before are put on the rejected list.
//!
//! Every first sighting writes a row and a `trust.reject` entry in the
//! append-only change log. Anyone who can reach an OPC UA port can present
//! a new certificate per connection at no cost (nothing is verified before
//! a certificate is refused as unknown): about 200 a second reach the
//! store, some 8 GB of change log a day. The budget lists
//! [`NEW_REJECTED_BURST`] new certificates at once and then one per
//! [`NEW_REJECTED_EVERY`]; beyond it a new certificate is still refused
//! but not listed, and counted. A certificate already listed is always
//! refreshed (no new entry), and one that was not listed is listed when
//! it comes back once the budget allows.

use std::time::{Duration, Instant};

/// New certificates listed at once before the budget runs dry.
pub const NEW_REJECTED_BURST: u32 = 200;
/// One more new certificate is listed per this once the burst is spent.
pub const NEW_REJECTED_EVERY: Duration = Duration::from_secs(60);
/// Least time between two log lines about unlisted certificates.
const TELL_EVERY: Duration = Duration::from_secs(60);

/// What the budget says about one new certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// List it.
    Listed,
    /// Refuse it without listing; `tell` when this is the first such since
    /// [`TELL_EVERY`] (log it then).
    Unlisted { tell: bool },
}

/// Certificates refused without being listed (see the module).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unlisted {
    /// How many since the store was opened.
    pub total: u64,
    /// When the last one was.
    pub last: Option<Instant>,
}

/// The token bucket of new listings. Sans-IO: time is passed in.
#[derive(Debug)]
pub struct ListingBudget {
    tokens: u32,
    refilled: Instant,
    unlisted: Unlisted,
    told: Option<Instant>,
}

impl ListingBudget {
    /// A full budget at `now`.
    pub fn new(now: Instant) -> ListingBudget {
        ListingBudget {
            tokens: NEW_REJECTED_BURST,
            refilled: now,
            unlisted: Unlisted::default(),
            told: None,
        }
    }

    /// Takes one listing for a new certificate at `now`. Called by
    /// [`crate::Store::record_rejected`] for a certificate not stored yet.
    pub fn take(&mut self, now: Instant) -> Listing {
        let every = NEW_REJECTED_EVERY.as_nanos();
        let earned = now.saturating_duration_since(self.refilled).as_nanos() / every;
        if earned > 0 {
            let earned = u32::try_from(earned).unwrap_or(u32::MAX);
            self.tokens = self.tokens.saturating_add(earned).min(NEW_REJECTED_BURST);
            self.refilled += NEW_REJECTED_EVERY * earned;
        }
        if self.tokens > 0 {
            self.tokens -= 1;
            return Listing::Listed;
        }
        self.unlisted.total += 1;
        self.unlisted.last = Some(now);
        let tell = self
            .told
            .is_none_or(|t| now.saturating_duration_since(t) >= TELL_EVERY);
        if tell {
            self.told = Some(now);
        }
        Listing::Unlisted { tell }
    }

    /// The certificates refused without being listed so far.
    pub fn unlisted(&self) -> Unlisted {
        self.unlisted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_listed_then_one_a_minute() {
        let t0 = Instant::now();
        let mut b = ListingBudget::new(t0);
        for _ in 0..NEW_REJECTED_BURST {
            assert_eq!(b.take(t0), Listing::Listed);
        }
        assert_eq!(b.take(t0), Listing::Unlisted { tell: true });
        assert_eq!(b.take(t0), Listing::Unlisted { tell: false });
        assert_eq!(b.unlisted().total, 2);
        assert_eq!(b.unlisted().last, Some(t0));
        // Under a minute later: still dry, and not told again.
        let t1 = t0 + Duration::from_secs(59);
        assert_eq!(b.take(t1), Listing::Unlisted { tell: false });
        // One more a minute.
        let t2 = t0 + Duration::from_secs(61);
        assert_eq!(b.take(t2), Listing::Listed);
        assert_eq!(b.take(t2), Listing::Unlisted { tell: true });
        // Three minutes on: three more, not a burst.
        let t3 = t0 + Duration::from_secs(241);
        for _ in 0..3 {
            assert_eq!(b.take(t3), Listing::Listed);
        }
        assert!(matches!(b.take(t3), Listing::Unlisted { .. }));
        // A long quiet time refills the burst, no more.
        let t4 = t3 + Duration::from_secs(24 * 3600);
        for _ in 0..NEW_REJECTED_BURST {
            assert_eq!(b.take(t4), Listing::Listed);
        }
        assert!(matches!(b.take(t4), Listing::Unlisted { .. }));
        assert_eq!(b.unlisted().total, 6);
    }
}
