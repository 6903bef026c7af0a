//! What `uagate run` tells systemd when it runs as a `Type=notify` service
//! (image/uagate.service): READY once it serves, the watchdog ping while
//! its runtime goes round, STOPPING when it stops. Outside systemd (no
//! `NOTIFY_SOCKET`) every call does nothing.

use std::sync::Arc;
use std::time::Duration;

use sd_notify::NotifyState;
use tokio_util::sync::CancellationToken;

/// Tells systemd the gateway serves; called once, after the READY line.
pub fn ready(status: &str) {
    if let Err(e) = sd_notify::notify(false, &[NotifyState::Ready, NotifyState::Status(status)]) {
        tracing::warn!(error = %e, "cannot tell systemd the gateway is ready");
    }
}

/// Tells systemd the gateway is stopping; called when a stop begins.
pub fn stopping() {
    let _ = sd_notify::notify(false, &[NotifyState::Stopping]);
}

/// The watchdog period systemd asked for (`WATCHDOG_USEC`), when it is
/// meant for this process (`WATCHDOG_PID` unset or ours), like
/// sd_watchdog_enabled(3).
pub fn watchdog_period() -> Option<Duration> {
    period_of(
        std::env::var("WATCHDOG_USEC").ok().as_deref(),
        std::env::var("WATCHDOG_PID").ok().as_deref(),
        std::process::id(),
    )
}

/// [`watchdog_period`] from the two variables' values and our process id.
fn period_of(usec: Option<&str>, pid: Option<&str>, me: u32) -> Option<Duration> {
    let usec: u64 = usec?.parse().ok()?;
    if let Some(pid) = pid {
        if pid.parse::<u32>().ok()? != me {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros(usec))
}

/// Whether the watchdog is fed when housekeeping last went round `age`
/// ago: only while that is at most half the period (at least 2 s, two
/// rounds of housekeeping).
fn feeds(age: Duration, period: Duration) -> bool {
    age <= (period / 2).max(Duration::from_secs(2))
}

/// Feeds systemd's watchdog at half its period until `cancel`, but only
/// while the engine's housekeeping goes round (its heartbeat is younger
/// than half the period, at least 2 s): a gateway whose runtime hangs stops
/// feeding it and systemd restarts it. Spawned by `uagate run` when
/// [`watchdog_period`] is set.
pub async fn watchdog(
    engine: Arc<uagate_server::Engine>,
    period: Duration,
    cancel: CancellationToken,
) {
    let half = period / 2;
    let mut tick = tokio::time::interval(half.max(Duration::from_millis(10)));
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let age = engine.heartbeat_age();
        if feeds(age, period) {
            let _ = sd_notify::notify(false, &[NotifyState::Watchdog]);
        } else {
            tracing::error!(
                age_ms = age.as_millis() as u64,
                "housekeeping is stuck: not feeding the watchdog (systemd restarts the gateway)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_period_is_ours_only_when_systemd_meant_this_process() {
        let s = Duration::from_secs;
        assert_eq!(period_of(Some("30000000"), None, 7), Some(s(30)));
        assert_eq!(period_of(Some("30000000"), Some("7"), 7), Some(s(30)));
        assert_eq!(
            period_of(Some("30000000"), Some("8"), 7),
            None,
            "another process's"
        );
        assert_eq!(period_of(Some("0"), None, 7), None);
        assert_eq!(period_of(Some("soon"), None, 7), None);
        assert_eq!(period_of(None, Some("7"), 7), None);
    }

    #[test]
    fn a_stuck_housekeeping_is_not_covered_for() {
        let s = Duration::from_secs;
        // WatchdogSec=30: fed while housekeeping went round in the last 15 s.
        assert!(feeds(s(1), s(30)));
        assert!(feeds(s(15), s(30)));
        assert!(!feeds(s(16), s(30)));
        // A short period still allows two rounds of housekeeping.
        assert!(feeds(
            Duration::from_millis(1900),
            Duration::from_millis(400)
        ));
        assert!(!feeds(s(3), Duration::from_millis(400)));
    }
}
