//! The reconnect policy of a managed field session (reference Sessions.md,
//! "reconnect policy"; .NET `ReconnectPolicy`): how long to wait before the
//! next connect attempt after a failure, and when to stop.
//!
//! Plain data: time and randomness are arguments. The caller passes
//! `jitter` in [-1, 1] (drawn uniformly) and the current instant.
//!
//! Rules:
//! - The base delay follows the strategy: exponential (`initial × 2^n`),
//!   linear (`initial × (n + 1)`) or constant (`initial`), never above
//!   `max_delay`. `n` is the number of failed attempts so far, minus one.
//! - When the last failure was a server overload signal (BadServerTooBusy,
//!   BadTcpServerTooBusy, BadTooManySessions, BadTooManyOperations,
//!   BadTooManyPublishRequests, BadTimeout), the delay is multiplied by 4,
//!   still capped at `max_delay`.
//! - Jitter spreads the delay by ± `jitter_factor`.
//! - A server retry-after hint (RetryAfterMs in a BadServerTooBusy
//!   response's additionalHeader, or `RetryAfterMs=N` in an ERR reason) is a
//!   lower bound on the delay.
//! - `max_retries` (0 = unlimited) stops retrying after that many failed
//!   attempts. One `max_total_reconnect_time` budget is shared by every
//!   attempt of one reconnect cycle: a delay never runs past it, and no
//!   attempt is scheduled once it is spent.

use std::time::{Duration, Instant};

use opcua_types::{AdditionalParametersType, ExtensionObject, StatusCode, Variant};

/// How the delay grows with the number of failed attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backoff {
    /// `initial × 2^n`.
    Exponential,
    /// `initial × (n + 1)`.
    Linear,
    /// `initial` every time.
    Constant,
}

/// Reconnect policy settings (the reference's defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct ReconnectPolicy {
    /// Growth of the delay.
    pub strategy: Backoff,
    /// Delay after the first failure (default 1 s).
    pub initial_delay: Duration,
    /// Largest delay (default 30 s).
    pub max_delay: Duration,
    /// Failed attempts after which to give up; 0 = unlimited (default).
    pub max_retries: u32,
    /// Spread of the delay, 0..=1 (default 0.1).
    pub jitter_factor: f64,
    /// Budget of one reconnect cycle (default 5 min).
    pub max_total_reconnect_time: Duration,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        ReconnectPolicy {
            strategy: Backoff::Exponential,
            initial_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
            max_retries: 0,
            jitter_factor: 0.1,
            max_total_reconnect_time: Duration::from_secs(300),
        }
    }
}

impl ReconnectPolicy {
    /// The delay after `n` earlier failures (0 for the first), by the
    /// strategy and capped at `max_delay`; before jitter and hints.
    pub fn backoff(&self, n: u32) -> Duration {
        let base = match self.strategy {
            Backoff::Exponential => self
                .initial_delay
                .saturating_mul(1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX)),
            Backoff::Linear => self.initial_delay.saturating_mul(n.saturating_add(1)),
            Backoff::Constant => self.initial_delay,
        };
        base.min(self.max_delay)
    }
}

/// Pacing of the moves of a hot-and-mirrored set's one session. A move
/// goes to the next server without knowing its ServiceLevel; if that one is
/// not healthy either (both servers in Maintenance, say), the session would
/// otherwise be moved back and forth as fast as the servers answer. Moves
/// in a row are spaced like reconnect attempts (the policy's backoff, up to
/// `max_delay`); seeing a healthy server starts over.
#[derive(Debug, Clone, Default)]
pub struct MovePacing {
    /// Moves since a healthy server was last seen.
    moves: u32,
    /// No move before this.
    not_before: Option<Instant>,
}

impl MovePacing {
    /// Whether a move may start at `now`.
    pub fn may_move(&self, now: Instant) -> bool {
        self.not_before.is_none_or(|t| t <= now)
    }

    /// Records a move started at `now`; the next one waits for the
    /// policy's backoff of the moves in a row so far.
    pub fn moved(&mut self, policy: &ReconnectPolicy, now: Instant) {
        self.not_before = Some(now + policy.backoff(self.moves));
        self.moves = self.moves.saturating_add(1);
    }

    /// The session is on a healthy server: the next move is not delayed.
    pub fn settled(&mut self) {
        *self = MovePacing::default();
    }

    /// When the state machine must look again (a move is being held
    /// back), if later than `now`.
    pub fn wake_at(&self, now: Instant) -> Option<Instant> {
        self.not_before.filter(|t| *t > now)
    }
}

/// Multiplier of the delay after a server overload signal.
pub const BUSY_FACTOR: u32 = 4;

/// Whether a failure status says the server is overloaded (back off more).
pub fn is_server_busy(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::BadServerTooBusy
            | StatusCode::BadTcpServerTooBusy
            | StatusCode::BadTooManySessions
            | StatusCode::BadTooManyOperations
            | StatusCode::BadTooManyPublishRequests
            | StatusCode::BadTimeout
    )
}

/// One failed attempt, as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// The status of the failure.
    pub status: StatusCode,
    /// The server's retry-after hint, if it gave one.
    pub retry_after: Option<Duration>,
}

/// The state of one reconnect cycle: attempts so far and the shared budget.
#[derive(Debug, Clone)]
pub struct ReconnectCycle {
    started: Instant,
    failures: u32,
}

impl ReconnectCycle {
    /// A cycle starting `now` (the moment the connection was lost, or the
    /// first connect attempt).
    pub fn start(now: Instant) -> ReconnectCycle {
        ReconnectCycle {
            started: now,
            failures: 0,
        }
    }

    /// Failed attempts so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Budget left at `now`.
    pub fn remaining(&self, policy: &ReconnectPolicy, now: Instant) -> Duration {
        policy
            .max_total_reconnect_time
            .saturating_sub(now.saturating_duration_since(self.started))
    }

    /// Records a failed attempt and returns how long to wait before the
    /// next one, or `None` to give up (retries or budget exhausted).
    /// `jitter` is a uniform sample in [-1, 1].
    pub fn next_delay(
        &mut self,
        policy: &ReconnectPolicy,
        failure: Failure,
        now: Instant,
        jitter: f64,
    ) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        if policy.max_retries > 0 && self.failures >= policy.max_retries {
            return None;
        }
        let remaining = self.remaining(policy, now);
        if remaining.is_zero() {
            return None;
        }
        let mut delay = policy.backoff(self.failures - 1);
        if is_server_busy(failure.status) {
            delay = delay.saturating_mul(BUSY_FACTOR).min(policy.max_delay);
        }
        let spread = policy.jitter_factor.clamp(0.0, 1.0) * jitter.clamp(-1.0, 1.0);
        delay = delay.mul_f64((1.0 + spread).max(0.0));
        if let Some(hint) = failure.retry_after {
            delay = delay.max(hint);
        }
        // Never past the cycle's budget.
        Some(delay.min(remaining))
    }
}

/// The RetryAfterMs hint of a response header's additionalHeader
/// (AdditionalParametersType with a `RetryAfterMs` key), as uagate and the
/// reference server send it with BadServerTooBusy.
pub fn retry_after_from_header(additional_header: &ExtensionObject) -> Option<Duration> {
    let params = additional_header.inner_as::<AdditionalParametersType>()?;
    params.parameters.as_ref()?.iter().find_map(|p| {
        if p.key.name.as_ref() != "RetryAfterMs" {
            return None;
        }
        let ms = match &p.value {
            Variant::UInt32(v) => u64::from(*v),
            Variant::Int32(v) => u64::try_from(*v).ok()?,
            Variant::UInt64(v) => *v,
            Variant::Int64(v) => u64::try_from(*v).ok()?,
            Variant::UInt16(v) => u64::from(*v),
            _ => return None,
        };
        Some(Duration::from_millis(ms))
    })
}

/// The `RetryAfterMs=N` token of an ERR message's reason text (also found
/// inside an error description that quotes the reason). N is the run of
/// digits right after the `=`.
pub fn retry_after_from_reason(reason: &str) -> Option<Duration> {
    const KEY: &str = "RetryAfterMs=";
    let start = reason.find(KEY)? + KEY.len();
    let digits: String = reason[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .take(20)
        .collect();
    digits.parse::<u64>().ok().map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opcua_types::{KeyValuePair, QualifiedName};

    fn fail(status: StatusCode) -> Failure {
        Failure {
            status,
            retry_after: None,
        }
    }

    fn delays(policy: &ReconnectPolicy, n: usize) -> Vec<Option<Duration>> {
        let now = Instant::now();
        let mut cycle = ReconnectCycle::start(now);
        (0..n)
            .map(|_| cycle.next_delay(policy, fail(StatusCode::BadNotConnected), now, 0.0))
            .collect()
    }

    fn secs(v: &[u64]) -> Vec<Option<Duration>> {
        v.iter().map(|s| Some(Duration::from_secs(*s))).collect()
    }

    #[test]
    fn moves_in_a_row_are_spaced_by_the_backoff_until_a_healthy_server() {
        let policy = ReconnectPolicy::default();
        let t0 = Instant::now();
        let mut pace = MovePacing::default();
        assert!(pace.may_move(t0), "the first move is not delayed");
        assert_eq!(pace.wake_at(t0), None);
        pace.moved(&policy, t0);
        // Second move: after initial_delay (1 s); third: 2 s after it.
        assert!(!pace.may_move(t0 + Duration::from_millis(999)));
        assert_eq!(pace.wake_at(t0), Some(t0 + Duration::from_secs(1)));
        let t1 = t0 + Duration::from_secs(1);
        assert!(pace.may_move(t1));
        pace.moved(&policy, t1);
        assert!(!pace.may_move(t1 + Duration::from_millis(1_999)));
        assert!(pace.may_move(t1 + Duration::from_secs(2)));
        // Capped at max_delay (30 s) however many moves.
        let mut t = t1;
        for _ in 0..20 {
            t += Duration::from_secs(60);
            pace.moved(&policy, t);
        }
        assert_eq!(pace.wake_at(t), Some(t + Duration::from_secs(30)));
        // A healthy server starts over.
        pace.settled();
        assert!(pace.may_move(t));
        pace.moved(&policy, t);
        assert_eq!(pace.wake_at(t), Some(t + Duration::from_secs(1)));
    }

    #[test]
    fn exponential_doubles_up_to_the_maximum() {
        let p = ReconnectPolicy::default();
        assert_eq!(delays(&p, 7), secs(&[1, 2, 4, 8, 16, 30, 30]));
    }

    #[test]
    fn linear_and_constant() {
        let linear = ReconnectPolicy {
            strategy: Backoff::Linear,
            max_delay: Duration::from_secs(3),
            ..ReconnectPolicy::default()
        };
        assert_eq!(delays(&linear, 4), secs(&[1, 2, 3, 3]));
        let constant = ReconnectPolicy {
            strategy: Backoff::Constant,
            ..ReconnectPolicy::default()
        };
        assert_eq!(delays(&constant, 3), secs(&[1, 1, 1]));
    }

    #[test]
    fn max_retries_gives_up_and_zero_means_unlimited() {
        let p = ReconnectPolicy {
            max_retries: 3,
            ..ReconnectPolicy::default()
        };
        let d = delays(&p, 4);
        assert_eq!(&d[..2], &secs(&[1, 2])[..]);
        assert_eq!(d[2], None, "the third failure is the last attempt");
        let unlimited = delays(&ReconnectPolicy::default(), 100);
        assert!(unlimited.iter().all(Option::is_some));
    }

    #[test]
    fn overload_signals_back_off_four_times_longer_within_the_maximum() {
        let p = ReconnectPolicy::default();
        let now = Instant::now();
        let mut c = ReconnectCycle::start(now);
        let busy = fail(StatusCode::BadServerTooBusy);
        assert_eq!(
            c.next_delay(&p, busy, now, 0.0),
            Some(Duration::from_secs(4))
        );
        assert_eq!(
            c.next_delay(&p, busy, now, 0.0),
            Some(Duration::from_secs(8))
        );
        assert_eq!(
            c.next_delay(&p, busy, now, 0.0),
            Some(Duration::from_secs(16))
        );
        for _ in 0..4 {
            assert_eq!(
                c.next_delay(&p, busy, now, 0.0),
                Some(Duration::from_secs(30))
            );
        }
        assert!(!is_server_busy(StatusCode::BadCertificateUntrusted));
        assert!(is_server_busy(StatusCode::BadTooManySessions));
    }

    #[test]
    fn jitter_spreads_within_the_factor() {
        let p = ReconnectPolicy::default();
        let now = Instant::now();
        for (j, want_ms) in [(-1.0, 900), (0.0, 1000), (1.0, 1100), (5.0, 1100)] {
            let mut c = ReconnectCycle::start(now);
            let d = c.next_delay(&p, fail(StatusCode::BadNotConnected), now, j);
            assert_eq!(d, Some(Duration::from_millis(want_ms)), "jitter {j}");
        }
    }

    #[test]
    fn a_retry_after_hint_is_a_lower_bound() {
        let p = ReconnectPolicy::default();
        let now = Instant::now();
        let mut c = ReconnectCycle::start(now);
        let hinted = Failure {
            status: StatusCode::BadServerTooBusy,
            retry_after: Some(Duration::from_secs(12)),
        };
        assert_eq!(
            c.next_delay(&p, hinted, now, 0.0),
            Some(Duration::from_secs(12))
        );
        // A hint shorter than the computed delay changes nothing.
        let short = Failure {
            status: StatusCode::BadNotConnected,
            retry_after: Some(Duration::from_millis(10)),
        };
        assert_eq!(
            c.next_delay(&p, short, now, 0.0),
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn the_shared_budget_bounds_delays_and_ends_the_cycle() {
        let p = ReconnectPolicy {
            max_total_reconnect_time: Duration::from_secs(30),
            ..ReconnectPolicy::default()
        };
        let t0 = Instant::now();
        let mut c = ReconnectCycle::start(t0);
        let f = fail(StatusCode::BadNotConnected);
        // 27 s spent (e.g. a long channel reopen): 3 s left, the delay shrinks.
        let later = t0 + Duration::from_secs(27);
        for _ in 0..4 {
            c.next_delay(&p, f, t0, 0.0);
        }
        assert_eq!(
            c.next_delay(&p, f, later, 0.0),
            Some(Duration::from_secs(3))
        );
        // A hint cannot push past the budget either.
        let hinted = Failure {
            status: StatusCode::BadServerTooBusy,
            retry_after: Some(Duration::from_secs(60)),
        };
        assert_eq!(
            c.next_delay(&p, hinted, later, 0.0),
            Some(Duration::from_secs(3))
        );
        assert_eq!(c.next_delay(&p, f, t0 + Duration::from_secs(30), 0.0), None);
        assert_eq!(c.failures(), 7);
    }

    #[test]
    fn retry_after_hints_are_read_from_headers_and_err_reasons() {
        let header = ExtensionObject::from_message(AdditionalParametersType {
            parameters: Some(vec![
                KeyValuePair {
                    key: QualifiedName::new(0, "Other"),
                    value: Variant::from(5u32),
                },
                KeyValuePair {
                    key: QualifiedName::new(0, "RetryAfterMs"),
                    value: Variant::from(250u32),
                },
            ]),
        });
        assert_eq!(
            retry_after_from_header(&header),
            Some(Duration::from_millis(250))
        );
        assert_eq!(retry_after_from_header(&ExtensionObject::null()), None);
        assert_eq!(
            retry_after_from_reason("server busy; RetryAfterMs=1500"),
            Some(Duration::from_millis(1500))
        );
        // As quoted inside a client library's error description.
        assert_eq!(
            retry_after_from_reason(
                r#"got Some(Ok(Error(ErrorMessage { reason: "busy RetryAfterMs=1500" })))"#
            ),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(retry_after_from_reason("RetryAfterMs=x"), None);
        assert_eq!(retry_after_from_reason("BadTcpServerTooBusy"), None);
    }
}
