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
//! server; and while others are outstanding, a new batch waits a few
//! runtime turns ([`GATHER_TURNS`]) for Reads already on their way. An idle
//! field session sends a Read at once.
//!
//! Operations that several callers ask (the same node, attribute, index
//! range and encoding) are read once per merged Read: HMIs polling the same
//! tags through the gateway cost the field server each tag once.
//!
//! Only Reads without operation-level diagnostics are merged: a merged
//! response's string table would carry other callers' texts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opcua_client::services::Read;
use opcua_client::{Session, UARequest};
use opcua_types::{DataValue, NodeId, ReadValueId, StatusCode, TimestampsToReturn};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_util::sync::CancellationToken;

/// Merged Reads outstanding per field session. Two kept the gateway
/// waiting on the field server's round trip under load (bench/run-field.sh:
/// 0.67-0.75x of direct); four keep both busy while a merged Read still
/// carries several callers' operations. Since batches are gathered
/// (see [`GATHER_TURNS`]), eight in flight measured no better than four.
pub const MAX_IN_FLIGHT: usize = 4;

/// Runtime turns the merger waits, at most, for more Reads to join a batch
/// while other merged Reads are in flight (see `merge_loop`). A turn lasts
/// until the runtime next polls its sockets (every few tasks, the event
/// interval), so the wait is bounded by work that was queued anyway.
/// Measured at 16 sessions (BENCHMARKS.md, issue 6): 1 turn merged 2 Reads
/// per southbound Read; 8 turns merged 5.7 and suited 1-node Reads, but
/// delayed 8-node Reads enough to lower their throughput; 2-3 turns were
/// best for both.
pub const GATHER_TURNS: usize = 3;

/// Operations per merged Read when the field server sets no limit.
const DEFAULT_MAX_NODES: usize = 5_000;

/// Waiting Reads per field session; beyond it callers wait for room.
const QUEUE: usize = 1_024;

/// Where merged Reads are sent: the field session (the unit tests use a
/// stand-in that holds Reads until they release them).
pub trait ReadTarget: Send + Sync + 'static {
    /// Sends one Read of `nodes` and returns its results, one per node in
    /// order; `Err` when the Read failed as a whole.
    fn read(
        &self,
        key: ReadKey,
        nodes: Vec<ReadValueId>,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<Vec<DataValue>, StatusCode>> + Send;
}

impl ReadTarget for Session {
    async fn read(
        &self,
        key: ReadKey,
        nodes: Vec<ReadValueId>,
        timeout: Duration,
    ) -> Result<Vec<DataValue>, StatusCode> {
        Read::new(self)
            .nodes_to_read(nodes)
            .timestamps_to_return(key.timestamps)
            .max_age(key.max_age)
            .timeout(timeout)
            .send(self.channel())
            .await
            .map(|r| r.results.unwrap_or_default())
            .map_err(|e| e.status())
    }
}

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

/// How many Reads were asked of the mergers of a field connection and how
/// many southbound Reads they sent (cumulative over its sessions).
#[derive(Debug, Default)]
pub struct ReadStats {
    /// Reads asked of the merger.
    pub jobs: AtomicU64,
    /// Southbound Reads it sent.
    pub sent: AtomicU64,
}

impl ReadStats {
    /// (Reads asked, southbound Reads sent) so far.
    pub fn get(&self) -> (u64, u64) {
        (
            self.jobs.load(Ordering::Relaxed),
            self.sent.load(Ordering::Relaxed),
        )
    }
}

impl ReadCoalescer {
    /// Starts the merger for `session` (the field session; a test's
    /// stand-in in unit tests), whose Reads may hold `max_nodes` operations
    /// (0 = no limit) and time out after `timeout`. It counts into `stats`
    /// (the field connection's, so the totals outlive the session). It
    /// stops when `lost` is cancelled or the coalescer is dropped.
    pub fn start<T: ReadTarget>(
        session: Arc<T>,
        max_nodes: u32,
        timeout: Duration,
        lost: CancellationToken,
        stats: Arc<ReadStats>,
    ) -> ReadCoalescer {
        let max_nodes = match max_nodes {
            0 => DEFAULT_MAX_NODES,
            n => usize::try_from(n).unwrap_or(DEFAULT_MAX_NODES),
        };
        let (tx, rx) = mpsc::channel(QUEUE);
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

async fn merge_loop<T: ReadTarget>(
    session: Arc<T>,
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
        let mut batch = Batch::new(first);
        carry = batch.take_waiting(&mut rx, max_nodes);
        // While the field server is busy with other merged Reads, give Reads
        // that are already on their way (decoded, or in socket buffers) a few
        // turns of the runtime to join this batch; an idle field server gets
        // the Read at once. A yield lets every other ready task run and the
        // sockets be polled once, so it costs no timer and adds no latency
        // beyond the work that was queued anyway.
        for _ in 0..GATHER_TURNS {
            let field_idle = in_flight.available_permits() + 1 >= MAX_IN_FLIGHT;
            if field_idle || carry.is_some() || batch.count >= max_nodes {
                break;
            }
            tokio::task::yield_now().await;
            carry = batch.take_waiting(&mut rx, max_nodes);
        }
        let session = session.clone();
        stats.sent.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let _permit = permit;
            send_merged(&*session, batch, timeout).await;
        });
    }
}

/// The Reads gathered into one southbound Read.
struct Batch {
    key: ReadKey,
    jobs: Vec<Job>,
    /// Operations in `jobs`.
    count: usize,
}

impl Batch {
    fn new(first: Job) -> Batch {
        Batch {
            key: first.key,
            count: first.nodes.len(),
            jobs: vec![first],
        }
    }

    /// Adds the waiting Reads that fit; returns the first one that does not
    /// (other key, or too many operations), which starts the next batch.
    fn take_waiting(&mut self, rx: &mut mpsc::Receiver<Job>, max_nodes: usize) -> Option<Job> {
        while self.count < max_nodes {
            match rx.try_recv() {
                Ok(job) if job.key == self.key && self.count + job.nodes.len() <= max_nodes => {
                    self.count += job.nodes.len();
                    self.jobs.push(job);
                }
                Ok(job) => return Some(job),
                Err(_) => return None,
            }
        }
        None
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
/// An operation asked by several callers (the same node and attribute, as
/// HMIs polling the same tags do) is read once and its value given to each.
async fn send_merged<T: ReadTarget>(target: &T, batch: Batch, timeout: Duration) {
    let Batch {
        key,
        jobs: batch,
        count,
    } = batch;
    let mut nodes = Vec::with_capacity(count);
    let mut jobs = Vec::with_capacity(batch.len());
    for job in batch {
        let n = job.nodes.len();
        nodes.extend(job.nodes);
        jobs.push((n, job.reply));
    }
    let (nodes, slots) = if jobs.len() > 1 {
        unique_operations(nodes)
    } else {
        (nodes, None)
    };
    let expected = nodes.len();
    let result = target.read(key, nodes, timeout).await.and_then(|values| {
        if values.len() == expected {
            Ok(values)
        } else {
            Err(StatusCode::BadUnexpectedError)
        }
    });
    match (result, slots) {
        (Ok(values), None) => {
            let mut values = values.into_iter();
            for (n, reply) in jobs {
                let _ = reply.send(Ok(values.by_ref().take(n).collect()));
            }
        }
        (Ok(values), Some(slots)) => {
            let mut slots = slots.into_iter();
            for (n, reply) in jobs {
                let share = slots.by_ref().take(n).map(|s| values[s].clone());
                let _ = reply.send(Ok(share.collect()));
            }
        }
        (Err(st), _) => {
            for (_, reply) in jobs {
                let _ = reply.send(Err(st));
            }
        }
    }
}

/// Folds equal operations of a merged Read into one. Returns the operations
/// to send (first occurrences, in order) and, when any were folded, the
/// position in them of each operation asked; `None` when all were distinct.
fn unique_operations(nodes: Vec<ReadValueId>) -> (Vec<ReadValueId>, Option<Vec<usize>>) {
    let mut slots = Vec::with_capacity(nodes.len());
    let mut distinct = 0;
    {
        // Operations asked so far, by node: their indexes in `nodes`.
        // foldhash: SipHash over NodeIds showed in profiles of this path.
        let mut by_node: HashMap<&NodeId, Vec<usize>, foldhash::fast::RandomState> =
            HashMap::with_capacity_and_hasher(nodes.len(), foldhash::fast::RandomState::default());
        for (i, op) in nodes.iter().enumerate() {
            let seen = by_node.entry(&op.node_id).or_default();
            match seen.iter().find(|&&j| nodes[j] == *op) {
                Some(&j) => slots.push(slots[j]),
                None => {
                    seen.push(i);
                    slots.push(distinct);
                    distinct += 1;
                }
            }
        }
    }
    if distinct == nodes.len() {
        return (nodes, None);
    }
    // First occurrences got the positions 0, 1, 2, ... in order.
    let mut unique = Vec::with_capacity(distinct);
    for (op, &slot) in nodes.into_iter().zip(&slots) {
        if slot == unique.len() {
            unique.push(op);
        }
    }
    (unique, Some(slots))
}

#[cfg(test)]
mod tests {
    use super::*;
    use opcua_types::{AttributeId, Variant};
    use parking_lot::Mutex;

    /// A field session stand-in: records each Read it is sent (its node
    /// ids) and answers every node with its own numeric id as the value,
    /// once the test releases it.
    #[derive(Default)]
    struct HeldTarget {
        sent: Mutex<Vec<Vec<u32>>>,
        release: tokio::sync::Notify,
        held: std::sync::atomic::AtomicBool,
    }

    impl ReadTarget for HeldTarget {
        async fn read(
            &self,
            _key: ReadKey,
            nodes: Vec<ReadValueId>,
            _timeout: Duration,
        ) -> Result<Vec<DataValue>, StatusCode> {
            let ids: Vec<u32> = nodes.iter().map(|n| id_of(&n.node_id)).collect();
            self.sent.lock().push(ids.clone());
            if self.held.load(Ordering::SeqCst) {
                self.release.notified().await;
            }
            Ok(ids
                .into_iter()
                .map(|i| DataValue::value_only(Variant::UInt32(i)))
                .collect())
        }
    }

    fn id_of(n: &NodeId) -> u32 {
        match &n.identifier {
            opcua_types::Identifier::Numeric(i) => *i,
            other => panic!("numeric ids only: {other:?}"),
        }
    }

    fn nodes(ids: &[u32]) -> Vec<ReadValueId> {
        ids.iter()
            .map(|i| ReadValueId::from(NodeId::new(1, *i)))
            .collect()
    }

    fn values(r: Result<Vec<DataValue>, StatusCode>) -> Vec<u32> {
        r.unwrap()
            .into_iter()
            .map(|dv| match dv.value {
                Some(Variant::UInt32(v)) => v,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    const KEY: ReadKey = ReadKey {
        timestamps: TimestampsToReturn::Both,
        max_age: 0.0,
    };

    impl HeldTarget {
        /// Answers the held Reads, and later ones at once.
        fn release_all(&self) {
            self.held.store(false, Ordering::SeqCst);
            self.release.notify_waiters();
        }
    }

    /// A merger (Reads of at most `max_nodes` operations, 0 = no limit)
    /// whose target holds every Read until the test releases it.
    fn held_merger(max_nodes: u32) -> (Arc<HeldTarget>, Arc<ReadCoalescer>, CancellationToken) {
        let target = Arc::new(HeldTarget::default());
        target.held.store(true, Ordering::SeqCst);
        let lost = CancellationToken::new();
        let merger = ReadCoalescer::start(
            target.clone(),
            max_nodes,
            Duration::from_secs(5),
            lost.clone(),
            Arc::default(),
        );
        (target, Arc::new(merger), lost)
    }

    /// Yields until `cond` holds, at most `turns` times.
    async fn within(turns: usize, mut cond: impl FnMut() -> bool) {
        for _ in 0..turns {
            if cond() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("condition not reached in {turns} turns");
    }

    /// Yields until `cond` holds (bounded: the merger needs a few turns).
    async fn until(cond: impl FnMut() -> bool) {
        within(1_000, cond).await
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_idle_field_session_gets_a_read_at_once_and_busy_ones_gather() {
        let (target, merger, lost) = held_merger(0);
        // Nothing in flight: the first Read goes out alone, without waiting
        // for company.
        let first = {
            let m = merger.clone();
            tokio::spawn(async move { m.read(KEY, nodes(&[1])).await })
        };
        within(2, || target.sent.lock().len() == 1).await;
        assert_eq!(target.sent.lock()[0], vec![1]);
        // While it is in flight, Reads of five callers arriving over two
        // turns of the runtime are gathered into one southbound Read, in
        // arrival order.
        let mut callers = Vec::new();
        for c in 0..5u32 {
            let m = merger.clone();
            let ids = vec![10 * (c + 1), 10 * (c + 1) + 1];
            callers.push(tokio::spawn(async move {
                (ids.clone(), m.read(KEY, nodes(&ids)).await)
            }));
            if c == 2 {
                tokio::task::yield_now().await;
            }
        }
        until(|| target.sent.lock().len() == 2).await;
        assert_eq!(
            target.sent.lock()[1],
            vec![10, 11, 20, 21, 30, 31, 40, 41, 50, 51],
            "the five Reads were not merged into one"
        );
        target.release_all();
        assert_eq!(values(first.await.unwrap()), vec![1]);
        // Each caller gets exactly its own values, in its own order.
        for c in callers {
            let (ids, got) = c.await.unwrap();
            assert_eq!(values(got), ids);
        }
        assert_eq!(merger.stats.get(), (6, 2));
        lost.cancel();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn reads_with_another_key_or_beyond_the_limit_start_a_new_batch() {
        // At most 4 operations per southbound Read.
        let (target, merger, lost) = held_merger(4);
        let read = |key: ReadKey, ids: Vec<u32>| {
            let m = merger.clone();
            tokio::spawn(async move { m.read(key, nodes(&ids)).await })
        };
        let busy = read(KEY, vec![1]);
        until(|| target.sent.lock().len() == 1).await;
        let other_key = ReadKey {
            timestamps: TimestampsToReturn::Source,
            max_age: 0.0,
        };
        let a = read(KEY, vec![2, 3]);
        let b = read(KEY, vec![4, 5]);
        let c = read(KEY, vec![6]);
        let d = read(other_key, vec![7]);
        until(|| target.sent.lock().len() == 4).await;
        assert_eq!(
            target.sent.lock()[1..].to_vec(),
            vec![vec![2, 3, 4, 5], vec![6], vec![7]],
            "a batch stops at the operation limit and at another key"
        );
        target.release_all();
        for (task, want) in [
            (busy, vec![1]),
            (a, vec![2, 3]),
            (b, vec![4, 5]),
            (c, vec![6]),
            (d, vec![7]),
        ] {
            assert_eq!(values(task.await.unwrap()), want);
        }
        lost.cancel();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_operation_several_callers_ask_is_read_once_and_given_to_each() {
        let (target, merger, lost) = held_merger(0);
        let read = |ids: Vec<u32>| {
            let m = merger.clone();
            tokio::spawn(async move { (ids.clone(), m.read(KEY, nodes(&ids)).await) })
        };
        let busy = read(vec![1]);
        until(|| target.sent.lock().len() == 1).await;
        // Three HMIs poll overlapping tags while the field server is busy.
        let callers = vec![read(vec![5, 6]), read(vec![6, 5, 7]), read(vec![5, 5])];
        until(|| target.sent.lock().len() == 2).await;
        assert_eq!(
            target.sent.lock()[1],
            vec![5, 6, 7],
            "each tag once, in the order first asked"
        );
        target.release_all();
        assert_eq!(values(busy.await.unwrap().1), vec![1]);
        for c in callers {
            let (ids, got) = c.await.unwrap();
            assert_eq!(values(got), ids, "a caller got another's share");
        }
        assert_eq!(merger.stats.get(), (4, 2));
        lost.cancel();
    }

    #[test]
    fn only_equal_operations_are_folded() {
        let value = |i: u32| ReadValueId::from(NodeId::new(1, i));
        let mut name = value(1);
        name.attribute_id = AttributeId::DisplayName as u32;
        let mut ranged = value(1);
        ranged.index_range = "0:1".parse().unwrap();
        // All distinct (same node, other attribute or index range): sent as
        // they are, no positions.
        let ops = vec![value(1), name.clone(), ranged.clone(), value(2)];
        let (sent, slots) = unique_operations(ops.clone());
        assert_eq!((sent, slots), (ops, None));
        // Repeats point at the first occurrence.
        let ops = vec![
            value(2),
            name.clone(),
            value(2),
            ranged.clone(),
            name.clone(),
        ];
        let (sent, slots) = unique_operations(ops);
        assert_eq!(sent, vec![value(2), name, ranged]);
        assert_eq!(slots, Some(vec![0, 1, 0, 2, 1]));
    }
}
