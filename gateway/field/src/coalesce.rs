//! Coalescing of concurrent Reads on one field session.
//!
//! Many northbound clients reading through one field session would each
//! cost a southbound request: an encode, a send, a round trip and a decode
//! in the gateway and in the field server. Instead, Reads that wait while
//! earlier ones are in flight are merged into one southbound Read (same
//! TimestampsToReturn and MaxAge, within MaxNodesPerRead), and the results
//! are handed back to each caller in its own order. At most
//! [`MAX_IN_FLIGHT`] merged Reads are outstanding per session, so a busy
//! session batches more rather than queueing more requests at the field
//! server.
//!
//! Only Reads without operation-level diagnostics are merged: a merged
//! response's string table would carry other callers' texts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opcua_client::services::Read;
use opcua_client::{Session, UARequest};
use opcua_types::{DataValue, ReadValueId, StatusCode, TimestampsToReturn};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_util::sync::CancellationToken;

/// Merged Reads outstanding per field session. Two kept the gateway
/// waiting on the field server's round trip under load (bench/run-field.sh:
/// 0.67-0.75x of direct); four keep both busy (0.71-0.81x) while a merged
/// Read still carries several callers' operations.
pub const MAX_IN_FLIGHT: usize = 4;

/// Operations per merged Read when the field server sets no limit.
const DEFAULT_MAX_NODES: usize = 5_000;

/// Waiting Reads per field session; beyond it callers wait for room.
const QUEUE: usize = 1_024;

/// What must be equal for two Reads to be merged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadKey {
    /// TimestampsToReturn of the request.
    pub timestamps: TimestampsToReturn,
    /// MaxAge of the request.
    pub max_age: f64,
}

struct Job {
    key: ReadKey,
    nodes: Vec<ReadValueId>,
    reply: oneshot::Sender<Result<Vec<DataValue>, StatusCode>>,
}

/// The Read merger of one field session; dropped with the session.
pub struct ReadCoalescer {
    tx: mpsc::Sender<Job>,
    max_nodes: usize,
    stats: Arc<ReadStats>,
}

/// How many Reads were asked of the merger and how many it sent.
#[derive(Debug, Default)]
pub struct ReadStats {
    /// Reads asked of the merger.
    pub jobs: AtomicU64,
    /// Southbound Reads it sent.
    pub sent: AtomicU64,
}

impl ReadCoalescer {
    /// Starts the merger for `session`, whose Reads may hold `max_nodes`
    /// operations (0 = no limit) and time out after `timeout`. It stops when
    /// `lost` is cancelled or the coalescer is dropped.
    pub fn start(
        session: Arc<Session>,
        max_nodes: u32,
        timeout: Duration,
        lost: CancellationToken,
    ) -> ReadCoalescer {
        let max_nodes = match max_nodes {
            0 => DEFAULT_MAX_NODES,
            n => usize::try_from(n).unwrap_or(DEFAULT_MAX_NODES),
        };
        let (tx, rx) = mpsc::channel(QUEUE);
        let stats = Arc::new(ReadStats::default());
        tokio::spawn(merge_loop(
            session,
            rx,
            max_nodes,
            timeout,
            lost,
            stats.clone(),
        ));
        ReadCoalescer {
            tx,
            max_nodes,
            stats,
        }
    }

    /// (Reads asked, southbound Reads sent) so far.
    pub fn stats(&self) -> (u64, u64) {
        (
            self.stats.jobs.load(Ordering::Relaxed),
            self.stats.sent.load(Ordering::Relaxed),
        )
    }

    /// The largest Read the merger takes; larger ones are sent on their own.
    pub fn max_nodes(&self) -> usize {
        self.max_nodes
    }

    /// Reads `nodes` (field node ids) as part of a merged Read. Results in
    /// order; `Err` when the southbound Read failed as a whole.
    pub async fn read(
        &self,
        key: ReadKey,
        nodes: Vec<ReadValueId>,
    ) -> Result<Vec<DataValue>, StatusCode> {
        let (reply, rx) = oneshot::channel();
        self.stats.jobs.fetch_add(1, Ordering::Relaxed);
        self.tx
            .send(Job { key, nodes, reply })
            .await
            .map_err(|_| StatusCode::BadConnectionClosed)?;
        rx.await.map_err(|_| StatusCode::BadConnectionClosed)?
    }
}

async fn merge_loop(
    session: Arc<Session>,
    mut rx: mpsc::Receiver<Job>,
    max_nodes: usize,
    timeout: Duration,
    lost: CancellationToken,
    stats: Arc<ReadStats>,
) {
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut carry: Option<Job> = None;
    let _report = StatsReport(stats.clone());
    // One wait on `lost` for the loop's life (it turns once per batch).
    let lost = lost.cancelled_owned();
    tokio::pin!(lost);
    loop {
        // Wait for room first: Reads arriving meanwhile join the next batch.
        let permit = tokio::select! {
            p = in_flight.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            _ = &mut lost => return,
        };
        let first = match carry.take() {
            Some(job) => job,
            None => tokio::select! {
                job = rx.recv() => match job {
                    Some(job) => job,
                    None => return,
                },
                _ = &mut lost => return,
            },
        };
        let key = first.key;
        let mut count = first.nodes.len();
        let mut batch = vec![first];
        while count < max_nodes {
            match rx.try_recv() {
                Ok(job) if job.key == key && count + job.nodes.len() <= max_nodes => {
                    count += job.nodes.len();
                    batch.push(job);
                }
                Ok(job) => {
                    carry = Some(job);
                    break;
                }
                Err(_) => break,
            }
        }
        let session = session.clone();
        stats.sent.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let _permit = permit;
            send_merged(&session, key, batch, count, timeout).await;
        });
    }
}

/// Logs the merger's totals when its loop ends (session lost or closed),
/// so a benchmark or a support case can see how well Reads were merged.
struct StatsReport(Arc<ReadStats>);

impl Drop for StatsReport {
    fn drop(&mut self) {
        tracing::debug!(
            reads = self.0.jobs.load(Ordering::Relaxed),
            southbound = self.0.sent.load(Ordering::Relaxed),
            "read merger stopped"
        );
    }
}

/// Sends one Read for every job of `batch` and answers each with its share.
async fn send_merged(
    session: &Session,
    key: ReadKey,
    batch: Vec<Job>,
    count: usize,
    timeout: Duration,
) {
    let mut nodes = Vec::with_capacity(count);
    let mut jobs = Vec::with_capacity(batch.len());
    for job in batch {
        let n = job.nodes.len();
        nodes.extend(job.nodes);
        jobs.push((n, job.reply));
    }
    let result = Read::new(session)
        .nodes_to_read(nodes)
        .timestamps_to_return(key.timestamps)
        .max_age(key.max_age)
        .timeout(timeout)
        .send(session.channel())
        .await
        .map_err(|e| e.status())
        .and_then(|r| {
            let values = r.results.unwrap_or_default();
            if values.len() == count {
                Ok(values)
            } else {
                Err(StatusCode::BadUnexpectedError)
            }
        });
    match result {
        Ok(values) => {
            let mut values = values.into_iter();
            for (n, reply) in jobs {
                let _ = reply.send(Ok(values.by_ref().take(n).collect()));
            }
        }
        Err(st) => {
            for (_, reply) in jobs {
                let _ = reply.send(Err(st));
            }
        }
    }
}
