//! Notification sequence numbers of one southbound data subscription
//! (Part 4 §5.13.1, §7.25): which message comes next, which one was already
//! delivered, and when messages were lost. Sans-IO: the link's subscription
//! callback and its Republish after a reconnect feed every message's number
//! to [`Sequence::accept`] and act on the verdict.
//!
//! A data message's number is the one after the previous data message's
//! (wrapping from `u32::MAX` to 1; 0 is never used). A keep-alive message
//! carries the number the *next* data message will get, so it also shows
//! messages that never arrived.

/// What to do with a notification message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Deliver its data changes (it is the next one, or the first seen).
    Deliver,
    /// Already delivered (a republished or repeated message): drop it.
    Duplicate,
    /// Messages before it were lost (`missing` of them): mark the gap,
    /// then deliver this one.
    DeliverAfterGap {
        /// Number of data messages that never arrived.
        missing: u32,
    },
    /// A keep-alive: nothing to deliver, nothing lost.
    KeepAlive,
    /// A keep-alive showing that data messages were lost (`missing`).
    KeepAliveAfterGap {
        /// Number of data messages that never arrived.
        missing: u32,
    },
}

/// The sequence state of one subscription: the number of the last data
/// message delivered.
#[derive(Debug, Clone, Default)]
pub struct Sequence {
    last: Option<u32>,
}

/// The number after `n` (1 after `u32::MAX`; 0 is never used).
pub fn next(n: u32) -> u32 {
    if n == u32::MAX {
        1
    } else {
        n + 1
    }
}

/// How many numbers lie strictly between `from` and `to` going forward
/// (wrapping, skipping 0); `None` when `to` is not after `from` (within
/// half the number space).
fn between(from: u32, to: u32) -> Option<u32> {
    let mut d = to.wrapping_sub(from);
    // Crossing the wrap skips 0.
    if to < from && d > 0 {
        d -= 1;
    }
    (d > 0 && d < u32::MAX / 2).then(|| d - 1)
}

impl Sequence {
    /// The number of the last data message delivered.
    pub fn last(&self) -> Option<u32> {
        self.last
    }

    /// The number Republish asks for first after a reconnect: the one after
    /// the last delivered (`None` before anything was delivered).
    pub fn first_missing(&self) -> Option<u32> {
        self.last.map(next)
    }

    /// Takes message `seq`; `has_data` is false for a keep-alive. Called for
    /// each message of a Publish answer and for each republished message,
    /// in the order they arrive.
    pub fn accept(&mut self, seq: u32, has_data: bool) -> Verdict {
        let Some(last) = self.last else {
            if has_data {
                self.last = Some(seq);
                return Verdict::Deliver;
            }
            return Verdict::KeepAlive;
        };
        if !has_data {
            // The keep-alive names the next number.
            return match between(last, seq) {
                Some(0) | None => Verdict::KeepAlive,
                Some(missing) => {
                    // Those numbers will never be delivered: do not report
                    // them again with the next data message.
                    self.last = Some(seq.wrapping_sub(1).max(1));
                    if seq == 1 {
                        self.last = Some(u32::MAX);
                    }
                    Verdict::KeepAliveAfterGap { missing }
                }
            };
        }
        match between(last, seq) {
            None => Verdict::Duplicate,
            Some(0) => {
                self.last = Some(seq);
                Verdict::Deliver
            }
            Some(missing) => {
                self.last = Some(seq);
                Verdict::DeliverAfterGap { missing }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_messages_are_delivered_and_repeats_dropped() {
        let mut s = Sequence::default();
        assert_eq!(s.accept(7, false), Verdict::KeepAlive);
        assert_eq!(s.first_missing(), None);
        assert_eq!(s.accept(7, true), Verdict::Deliver);
        assert_eq!(s.accept(8, true), Verdict::Deliver);
        assert_eq!(s.accept(8, true), Verdict::Duplicate);
        assert_eq!(s.accept(5, true), Verdict::Duplicate);
        assert_eq!(s.accept(9, false), Verdict::KeepAlive);
        assert_eq!(s.first_missing(), Some(9));
        assert_eq!(s.last(), Some(8));
    }

    #[test]
    fn a_jump_is_a_gap_of_the_numbers_skipped() {
        let mut s = Sequence::default();
        s.accept(1, true);
        assert_eq!(s.accept(4, true), Verdict::DeliverAfterGap { missing: 2 });
        assert_eq!(s.accept(5, true), Verdict::Deliver);
        // A keep-alive naming 9 as next: 6, 7, 8 never came, reported once.
        assert_eq!(
            s.accept(9, false),
            Verdict::KeepAliveAfterGap { missing: 3 }
        );
        assert_eq!(s.accept(9, false), Verdict::KeepAlive);
        assert_eq!(s.accept(9, true), Verdict::Deliver);
    }

    #[test]
    fn numbers_wrap_from_max_to_one() {
        let mut s = Sequence::default();
        s.accept(u32::MAX - 1, true);
        assert_eq!(s.accept(u32::MAX, true), Verdict::Deliver);
        assert_eq!(s.first_missing(), Some(1));
        assert_eq!(s.accept(1, false), Verdict::KeepAlive);
        assert_eq!(s.accept(1, true), Verdict::Deliver);
        assert_eq!(s.accept(u32::MAX, true), Verdict::Duplicate);
        let mut s = Sequence::default();
        s.accept(u32::MAX - 1, true);
        assert_eq!(s.accept(2, true), Verdict::DeliverAfterGap { missing: 2 });
    }
}
