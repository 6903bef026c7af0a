//! The gateway's own short history for the console's dashboard charts:
//! every [`SAMPLE_INTERVAL`] housekeeping records Reads per second,
//! notifications per second, sessions and each field connection's
//! ServiceLevel; the last [`SAMPLE_WINDOW`] of them are kept (no
//! Prometheus needed to see the last quarter of an hour).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How often a sample is taken.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);

/// How far back the samples go.
pub const SAMPLE_WINDOW: Duration = Duration::from_secs(15 * 60);

/// Samples kept: [`SAMPLE_WINDOW`] / [`SAMPLE_INTERVAL`].
pub const SAMPLES_KEPT: usize = (SAMPLE_WINDOW.as_secs() / SAMPLE_INTERVAL.as_secs()) as usize;

/// One sample of the running gateway.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// When it was taken (UTC, seconds since the Unix epoch).
    pub at: i64,
    /// Read requests answered per second since the previous sample.
    pub reads_per_s: f64,
    /// Notifications (data changes and events) sent per second since the
    /// previous sample.
    pub notifications_per_s: f64,
    /// Northbound sessions at that moment.
    pub sessions: usize,
    /// (field connection, its active server's ServiceLevel; `None` while it
    /// has no session) at that moment.
    pub fields: Vec<(String, Option<u8>)>,
}

/// The running counters a sample is made from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    /// Read requests answered since start.
    pub reads: u64,
    /// Notifications sent since start.
    pub notifications: u64,
    /// Sessions now.
    pub sessions: usize,
    /// Field connections' ServiceLevels now.
    pub fields: Vec<(String, Option<u8>)>,
}

/// The ring of samples; turns counter readings into rates.
#[derive(Debug, Default)]
pub struct Samples {
    kept: VecDeque<Sample>,
    last: Option<(Instant, u64, u64)>,
}

impl Samples {
    /// Records the counters read at `now` (wall time `at`) as a sample; the
    /// first reading only sets the base for the rates. Called by
    /// housekeeping every [`SAMPLE_INTERVAL`].
    pub fn record(&mut self, now: Instant, at: i64, c: Counters) {
        let Some((then, reads, notifications)) = self.last.replace((now, c.reads, c.notifications))
        else {
            return;
        };
        let secs = now.duration_since(then).as_secs_f64();
        if secs <= 0.0 {
            return;
        }
        let rate = |now: u64, before: u64| now.saturating_sub(before) as f64 / secs;
        if self.kept.len() == SAMPLES_KEPT {
            self.kept.pop_front();
        }
        self.kept.push_back(Sample {
            at,
            reads_per_s: rate(c.reads, reads),
            notifications_per_s: rate(c.notifications, notifications),
            sessions: c.sessions,
            fields: c.fields,
        });
    }

    /// The samples, oldest first.
    pub fn all(&self) -> Vec<Sample> {
        self.kept.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(reads: u64, notifications: u64) -> Counters {
        Counters {
            reads,
            notifications,
            sessions: 3,
            fields: vec![("plc".into(), Some(200))],
        }
    }

    #[test]
    fn rates_come_from_the_counters_and_the_window_is_bounded() {
        let mut s = Samples::default();
        let t0 = Instant::now();
        s.record(t0, 0, counters(100, 10));
        assert!(s.all().is_empty(), "the first reading is the base");
        s.record(t0 + Duration::from_secs(5), 5, counters(150, 60));
        let got = s.all();
        assert_eq!(got.len(), 1);
        assert!((got[0].reads_per_s - 10.0).abs() < 1e-9, "{got:?}");
        assert!((got[0].notifications_per_s - 10.0).abs() < 1e-9, "{got:?}");
        assert_eq!(got[0].sessions, 3);
        for i in 2..(SAMPLES_KEPT as u64 + 10) {
            s.record(
                t0 + Duration::from_secs(5 * i),
                5 * i as i64,
                counters(150, 60),
            );
        }
        let got = s.all();
        assert_eq!(got.len(), SAMPLES_KEPT);
        assert_eq!(got.last().map(|s| s.reads_per_s), Some(0.0));
        assert!(got.windows(2).all(|w| w[0].at < w[1].at));
    }
}
