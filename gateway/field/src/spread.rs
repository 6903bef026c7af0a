//! How a link spreads its shared data items of one sampling class over
//! southbound subscriptions when the field server caps monitored items per
//! subscription (issue 17 item 6): its announced
//! MaxMonitoredItemsPerSubscription (or the operator's override), and what
//! its refusals teach — BadTooManyMonitoredItems for the whole
//! CreateMonitoredItems call (as some servers answer when the call would
//! overflow the subscription) or for single items.
//!
//! Sans-IO: [`Spread`] says how many of the pending items to try on a
//! subscription holding `count` items, and learns from each answer; the
//! link does the calls and opens a new subscription of the class when the
//! ones it has are full.

/// What a refusal means for the next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Try again on the same subscription with fewer items.
    Smaller,
    /// The subscription is full: go on with the next (or a new) one.
    Full,
    /// Even one item on an empty subscription is refused: the items get the
    /// refusal as their status.
    Hopeless,
}

/// The per-subscription item cap of one link, as announced and as learned.
#[derive(Debug, Clone, Default)]
pub struct Spread {
    /// Most items per subscription (0: unknown, no cap seen yet).
    cap: u32,
    /// Most items to try in one call while probing after a whole-call
    /// refusal (0: no probing).
    probe: usize,
    /// Most items per CreateMonitoredItems call (0: no limit).
    per_call: u32,
}

impl Spread {
    /// A link's spread: `announced` is the field server's (or the
    /// operator's) MaxMonitoredItemsPerSubscription, `per_call` its
    /// MaxMonitoredItemsPerCall (0 = none). Made once per session.
    pub fn new(announced: u32, per_call: u32) -> Spread {
        Spread {
            cap: announced,
            probe: 0,
            per_call,
        }
    }

    /// The cap learned or announced (0: none known).
    pub fn cap(&self) -> u32 {
        self.cap
    }

    /// How many of `pending` items to try in one call on a subscription
    /// that holds `count`: 0 when it is full (use the next subscription).
    pub fn take(&self, count: u32, pending: usize) -> usize {
        let room = match self.cap {
            0 => usize::MAX,
            cap => cap.saturating_sub(count) as usize,
        };
        let mut n = pending.min(room);
        if self.per_call > 0 {
            n = n.min(self.per_call as usize);
        }
        if self.probe > 0 {
            n = n.min(self.probe);
        }
        n
    }

    /// The whole call of `tried` items on a subscription holding `count`
    /// was refused with BadTooManyMonitoredItems.
    pub fn refused(&mut self, count: u32, tried: usize) -> Refused {
        if tried > 1 {
            self.probe = tried / 2;
            return Refused::Smaller;
        }
        self.full_at(count)
    }

    /// `created` of the items tried were accepted and the next one was
    /// refused with BadTooManyMonitoredItems: the subscription, which now
    /// holds `count`, is full.
    pub fn item_refused(&mut self, count: u32) -> Refused {
        self.full_at(count)
    }

    fn full_at(&mut self, count: u32) -> Refused {
        self.probe = 0;
        if count == 0 {
            return Refused::Hopeless;
        }
        // Every subscription of the server has the same cap: fill the
        // next ones to it directly.
        self.cap = match self.cap {
            0 => count,
            cap => cap.min(count),
        };
        Refused::Full
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field server refusing a whole call that would put more than `cap`
    /// items on a subscription. Returns the subscriptions' item counts and
    /// the number of calls the link made.
    fn place(n: usize, cap: u32, announced: u32, per_call: u32) -> (Vec<u32>, usize, usize) {
        let mut spread = Spread::new(announced, per_call);
        let mut subs: Vec<u32> = vec![0];
        let mut pending = n;
        let mut calls = 0;
        let mut bad = 0;
        while pending > 0 {
            assert!(calls < 1000, "bounded");
            let cur = subs.len() - 1;
            let take = spread.take(subs[cur], pending);
            if take == 0 {
                subs.push(0);
                continue;
            }
            calls += 1;
            if subs[cur] + take as u32 > cap {
                match spread.refused(subs[cur], take) {
                    Refused::Smaller => {}
                    Refused::Full => subs.push(0),
                    Refused::Hopeless => {
                        bad = pending;
                        pending = 0;
                    }
                }
            } else {
                subs[cur] += take as u32;
                pending -= take;
            }
        }
        (subs.into_iter().filter(|c| *c > 0).collect(), calls, bad)
    }

    #[test]
    fn a_cap_learned_from_refusals_fills_each_subscription() {
        let (subs, calls, bad) = place(12, 5, 0, 0);
        assert_eq!(subs, vec![5, 5, 2]);
        assert_eq!(bad, 0);
        // Probing costs a few calls on the first subscription only.
        assert!(calls <= 10, "{calls}");
    }

    #[test]
    fn an_announced_cap_needs_no_refusal() {
        let (subs, calls, _) = place(12, 5, 5, 0);
        assert_eq!(subs, vec![5, 5, 2]);
        assert_eq!(calls, 3);
    }

    #[test]
    fn without_a_cap_one_subscription_takes_everything_in_calls_of_per_call() {
        let (subs, calls, _) = place(2500, u32::MAX, 0, 1000);
        assert_eq!(subs, vec![2500]);
        assert_eq!(calls, 3);
    }

    #[test]
    fn a_server_that_takes_nothing_makes_the_items_bad_not_a_loop() {
        let (subs, _, bad) = place(7, 0, 0, 0);
        assert!(subs.is_empty());
        assert_eq!(bad, 7);
    }

    #[test]
    fn a_single_item_refusal_marks_the_subscription_full() {
        let mut s = Spread::new(0, 0);
        assert_eq!(s.take(0, 10), 10);
        assert_eq!(s.item_refused(4), Refused::Full);
        assert_eq!(s.cap(), 4);
        assert_eq!(s.take(4, 10), 0);
        assert_eq!(s.take(0, 10), 4);
        assert_eq!(s.item_refused(0), Refused::Hopeless);
    }
}
