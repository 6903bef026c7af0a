//! Measuring: the Read loop of one hand-made session, nearest-rank
//! percentiles, and process CPU time from /proc.

use std::time::{Duration, Instant};

use opcua_types::StatusCode;

use crate::service::{read, Call};

/// What one session measured in one window.
#[derive(Default)]
pub struct Measured {
    /// Latencies (µs) of Good requests that started and ended in the window.
    pub latencies_us: Vec<u64>,
    /// Failed reads in the window (Bad results, faults), plus one if the
    /// session broke.
    pub errors: u64,
    /// Of those, ServiceFault BadServerTooBusy.
    pub busy: u64,
    /// Whether the session broke (transport error), with the message.
    pub broke: Option<String>,
}

/// Loops [`read`]s back-to-back (one outstanding) until `end`, counting
/// those that start at or after `measure_from` and end by `end`; the
/// session is handed back unless it broke.
pub async fn session_loop<C: Call>(
    mut s: C,
    measure_from: Instant,
    end: Instant,
) -> (Option<C>, Measured) {
    let mut out = Measured::default();
    loop {
        let start = Instant::now();
        if start >= end {
            return (Some(s), out);
        }
        let r = read(&mut s).await;
        let done = Instant::now();
        let counted = start >= measure_from && done <= end;
        match r {
            Ok(Ok(true)) => {
                if counted {
                    out.latencies_us.push(
                        u64::try_from(done.duration_since(start).as_micros()).unwrap_or(u64::MAX),
                    );
                }
            }
            Ok(Ok(false)) | Ok(Err(_)) => {
                if counted {
                    out.errors += 1;
                    if matches!(r, Ok(Err(StatusCode::BadServerTooBusy))) {
                        out.busy += 1;
                    }
                }
                // Honour the server's hint loosely; do not spin.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => {
                out.broke = Some(format!("{e:#}"));
                out.errors += 1;
                return (None, out);
            }
        }
    }
}

/// utime + stime of a process in clock ticks, from /proc/<pid>/stat
/// (`pid` may be `self`).
pub fn cpu_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields after ')' are fixed.
    let after_name = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Field 3 (state) is index 0 here; utime and stime are fields 14 and 15.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Nearest-rank percentile of sorted values (0 when there are none).
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
