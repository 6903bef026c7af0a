//! The engine's request pipeline part: decoded requests are charged to
//! RequestQueue and RequestQueueBytes (and ParkedRequest for Publish),
//! queued per owner, and started by a weighted fair scheduler when a
//! RequestExecution slot is free. A Publish that waits for notifications
//! gives its execution slot back and keeps its parked slot and bytes until
//! it is answered. The pipeline also holds the resource-isolation
//! accounting every stage charges ([`Admission`]) and the request
//! statistics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use opcua_core::{RequestMessage, ResponseMessage};
use opcua_types::{
    AdditionalParametersType, ExtensionObject, KeyValuePair, QualifiedName, ResponseHeader,
    ServiceFault, StatusCode, Variant,
};
use parking_lot::Mutex;
use uagate_config::{Config, Stage};
use uagate_isolation::owner::OwnerClass;
use uagate_isolation::plan::Plan;
use uagate_isolation::provider::Lease;
use uagate_isolation::scheduler::{FairScheduler, SchedulingMode};

use crate::admission::{Admission, Caller};
use crate::flows::{FlowClaim, Flows};
use crate::park::ParkSink;
use crate::stats::Stats;
use crate::{ChannelInfo, Engine};

/// A response on its way to the connection driver: (request id, response,
/// the request's pipeline claim, released once the response is encoded).
pub(crate) type Reply = (u32, ResponseMessage, Option<FlowClaim>);

/// How long a refused client is told to wait before retrying.
pub const RETRY_AFTER: Duration = Duration::from_millis(250);

/// Bounds of the RetryAfterMs hint.
pub const RETRY_AFTER_MIN: Duration = Duration::from_millis(50);
/// See [`RETRY_AFTER_MIN`].
pub const RETRY_AFTER_MAX: Duration = Duration::from_secs(10);

/// How long a refused caller should wait before retrying: the time the
/// requests already queued take to drain through the execution slots at the
/// recent mean service time, plus one service time, within
/// [`RETRY_AFTER_MIN`]..[`RETRY_AFTER_MAX`] ([`RETRY_AFTER`] when no request
/// was timed yet). Called for every BadServerTooBusy answer.
pub fn retry_after_hint(queued: usize, slots: u64, mean: Duration) -> Duration {
    if mean.is_zero() {
        return RETRY_AFTER;
    }
    let rounds = u32::try_from(queued as u64 / slots.max(1) + 1).unwrap_or(u32::MAX);
    mean.saturating_mul(rounds)
        .clamp(RETRY_AFTER_MIN, RETRY_AFTER_MAX)
}

/// A queued request and the charges it holds until it is answered.
pub(crate) struct Job {
    /// Shared with the connection: a request holds a reference, not a copy
    /// (a copy made every job, and every spawned future, kilobytes larger).
    chan: Arc<ChannelInfo>,
    request_id: u32,
    request: Box<RequestMessage>,
    caller: Caller,
    charges: Charges,
    claim: Option<FlowClaim>,
}

/// Leases held by a request from queueing until its response is sent.
pub(crate) struct Charges {
    _queue: Option<Lease>,
    _bytes: Lease,
    _parked: Option<Lease>,
}

/// Admission, the queue of decoded requests, the parked ones' charges and
/// the request statistics.
pub(crate) struct Pipeline {
    /// Resource-isolation accounting (every stage).
    admission: Admission,
    queue: Mutex<FairScheduler<Job>>,
    /// Wakes the dispatch loop: a request was queued or a slot released.
    wake: tokio::sync::Notify,
    /// Per-owner shares of the request pipeline, enforced where connections
    /// read (fair scheduling only).
    flows: Option<Arc<Flows>>,
    parked: Mutex<uagate_isolation::FastMap<(u32, u32), Charges>>,
    /// Requests, latencies, connections and channels (metrics).
    stats: Stats,
    /// What a queued request is charged to RequestQueueBytes.
    max_message_size: u32,
}

impl Pipeline {
    /// The pipeline of the isolation `plan`: with fair scheduling, owners
    /// share the RequestExecution capacity; each queued request is charged
    /// `max_message_size` bytes. Built once at start.
    pub(crate) fn new(plan: Plan, max_message_size: u32) -> Pipeline {
        let fair = plan.fair_scheduling() && plan.is_enforced();
        let capacity = plan.stage(Stage::RequestQueue).total as usize;
        let shared = plan.stage(Stage::RequestExecution).shared;
        let mode = if fair {
            SchedulingMode::Fair
        } else {
            SchedulingMode::Fifo
        };
        Pipeline {
            queue: Mutex::new(FairScheduler::new(mode, capacity)),
            wake: tokio::sync::Notify::new(),
            flows: fair.then(|| Flows::new(shared)),
            parked: Mutex::new(Default::default()),
            admission: Admission::new(plan, Instant::now()),
            stats: Stats::default(),
            max_message_size,
        }
    }

    /// The resource-isolation accounting: who a caller is and what each
    /// stage has room for.
    pub(crate) fn admission(&self) -> &Admission {
        &self.admission
    }

    /// Wakes the dispatch loop: an execution slot was given back.
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    /// The per-owner pipeline shares, with fair scheduling only.
    pub(crate) fn flows(&self) -> Option<&Arc<Flows>> {
        self.flows.as_ref()
    }

    /// The request and connection statistics.
    pub(crate) fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Applies a changed configuration's isolation settings while running
    /// when only trusted owners' weights, the default weight and ingress
    /// rules changed. Anything else is refused, naming the settings that need
    /// a restart; nothing is half-applied.
    pub(crate) fn apply_isolation(&self, config: &Config) -> Result<(), String> {
        let plan = Plan::build(config).map_err(|e| e.to_string())?;
        self.admission
            .apply(plan)
            .map_err(|settings| format!("these settings need a restart: {}", settings.join(", ")))
    }

    /// Whether [`Pipeline::apply_isolation`] would take `config` now;
    /// changes nothing. Called first, so that a change of several parts is
    /// refused before any of them is applied.
    pub(crate) fn check_isolation(&self, config: &Config) -> Result<(), String> {
        let plan = Plan::build(config).map_err(|e| e.to_string())?;
        self.admission
            .check(&plan)
            .map_err(|settings| format!("these settings need a restart: {}", settings.join(", ")))
    }

    /// The RetryAfterMs hint for a refusal now (see [`retry_after_hint`]).
    pub(crate) fn retry_after(&self) -> Duration {
        let queued = self.queue.lock().len();
        let slots = self.admission.plan().stage(Stage::RequestExecution).total;
        retry_after_hint(queued, slots, self.stats.recent_latency())
    }

    /// Charges and queues a decoded request for `caller`. Returns the
    /// immediate answer when it cannot be queued (BadServerTooBusy with
    /// RetryAfterMs). Called through [`Engine::submit`].
    fn submit(
        &self,
        chan: &Arc<ChannelInfo>,
        caller: Caller,
        request_id: u32,
        request: Box<RequestMessage>,
        claim: Option<FlowClaim>,
    ) -> Result<(), ResponseMessage> {
        let handle = request.request_header().request_handle;
        let busy = |what: &str| {
            tracing::debug!(stage = what, "request refused: server too busy");
            too_busy(handle, self.retry_after())
        };
        let admission = &self.admission;
        let queue = admission
            .acquire(Stage::RequestQueue, &caller, 1)
            .map_err(|_| busy("request_queue"))?;
        let bytes = admission
            .acquire(
                Stage::RequestQueueBytes,
                &caller,
                u64::from(self.max_message_size),
            )
            .map_err(|_| busy("request_queue_bytes"))?;
        let parked = match *request {
            RequestMessage::Publish(_) => Some(
                admission
                    .acquire(Stage::ParkedRequest, &caller, 1)
                    .map_err(|_| busy("parked_request"))?,
            ),
            _ => None,
        };
        let weight = admission.weight(&caller);
        let job = Job {
            chan: Arc::clone(chan),
            request_id,
            request,
            caller: caller.clone(),
            claim,
            charges: Charges {
                _queue: Some(queue),
                _bytes: bytes,
                _parked: parked,
            },
        };
        self.queue
            .lock()
            .push(Instant::now(), &caller.owner, weight, job)
            .map_err(|_| busy("request_queue"))?;
        self.wake.notify_one();
        Ok(())
    }

    /// The next queued request the scheduler picks that gets a
    /// RequestExecution slot, with that slot.
    fn next_ready(&self) -> Option<(Job, Lease)> {
        let next = self.queue.lock().pop_with(Instant::now(), |_, job| {
            self.admission
                .acquire(Stage::RequestExecution, &job.caller, 1)
                .ok()
        });
        next.map(|d| (d.item, d.admitted))
    }

    /// Releases the charges of a parked request once its response is sent.
    pub(crate) fn unpark(&self, channel_id: u32, request_id: u32) {
        self.parked.lock().remove(&(channel_id, request_id));
    }

    /// Drops every parked charge of a closed channel.
    pub(crate) fn channel_closed(&self, channel_id: u32) {
        self.parked.lock().retain(|(c, _), _| *c != channel_id);
    }
}

/// A ServiceFault BadServerTooBusy carrying a RetryAfterMs hint (Int64,
/// milliseconds) in the response header's additionalHeader
/// (AdditionalParametersType).
pub fn too_busy(request_handle: u32, retry_after: Duration) -> ResponseMessage {
    let mut header =
        ResponseHeader::new_service_result(request_handle, StatusCode::BadServerTooBusy);
    header.additional_header = ExtensionObject::from_message(AdditionalParametersType {
        parameters: Some(vec![KeyValuePair {
            key: QualifiedName::new(0, "RetryAfterMs"),
            value: Variant::Int64(i64::try_from(retry_after.as_millis()).unwrap_or(i64::MAX)),
        }]),
    });
    ServiceFault {
        response_header: header,
    }
    .into()
}

impl Engine {
    /// Charges and queues a decoded request (every transport calls this).
    /// The caller is the channel's, except that recovery and control work
    /// of a verified live session may use the reconnect and control reserves
    /// at the decoded-request stages (see
    /// [`crate::sessions::SessionTable::work_class`]; a trusted owner keeps
    /// its own reservation). Returns the immediate answer when the request
    /// cannot be queued (BadServerTooBusy with RetryAfterMs).
    pub(crate) fn submit(
        &self,
        chan: &Arc<ChannelInfo>,
        request_id: u32,
        request: Box<RequestMessage>,
        claim: Option<FlowClaim>,
    ) -> Result<(), ResponseMessage> {
        let mut caller = chan.request_caller();
        if matches!(
            caller.class,
            OwnerClass::Ordinary | OwnerClass::SessionBound
        ) {
            if let Some(class) = self.sessions.work_class(chan, &request) {
                caller.class = class;
            }
        }
        self.pipeline
            .submit(chan, caller, request_id, request, claim)
    }

    /// Starts queued requests while execution slots are free; runs for the
    /// life of the server.
    pub(crate) async fn dispatch_loop(
        self: Arc<Self>,
        cancel: tokio_util::sync::CancellationToken,
    ) {
        // One cancellation wait and one fallback timer for the loop's life:
        // the loop wakes once per request, and a fresh timer each time
        // showed in profiles of the proxied Read benchmark.
        let cancelled = cancel.cancelled_owned();
        tokio::pin!(cancelled);
        let fallback = tokio::time::sleep(Duration::from_millis(50));
        tokio::pin!(fallback);
        loop {
            while let Some((job, execution)) = self.pipeline.next_ready() {
                let engine = self.clone();
                tokio::spawn(async move { engine.execute(job, execution).await });
            }
            tokio::select! {
                _ = &mut cancelled => break,
                _ = self.pipeline.wake.notified() => {},
                // A lease released elsewhere (e.g. an owner limit) is picked
                // up within 50 ms.
                _ = &mut fallback => {
                    fallback.as_mut().reset(tokio::time::Instant::now() + Duration::from_millis(50));
                },
            }
        }
    }

    /// Runs one request with its execution slot; the slot is released as
    /// soon as the handler returns (a parked Publish returns at once), or
    /// earlier when the request parks to wait for a field server (see
    /// [`crate::park`]).
    async fn execute(self: Arc<Self>, mut job: Job, execution: Lease) {
        // The request has left the queue: its queue slot is free again.
        job.charges._queue = None;
        let channel_id = job.chan.channel_id;
        let key = (channel_id, job.request_id);
        // A Publish may be answered by the subscription timer as soon as it
        // is queued there, so its charges are parked before it runs.
        let is_publish = matches!(*job.request, RequestMessage::Publish(_));
        let charges = if is_publish {
            self.pipeline.parked.lock().insert(key, job.charges);
            None
        } else {
            Some(job.charges)
        };
        let sink = ParkSink::new(self.clone(), job.caller, execution, job.claim.take());
        let response = sink
            .scope(self.handle_request(&job.chan, job.request_id, *job.request))
            .await;
        let mut claim = sink.take_claim();
        if is_publish {
            // A held Publish waits for notifications, not for the server.
            claim = None;
        }
        // The slot is released as soon as the handler is done. Holding it
        // until the response is written let one slow reader (a client not
        // draining its socket) pin execution slots and stall every session.
        sink.release_execution();
        if let Some(response) = response {
            let tx = self.channels.responder(channel_id);
            if let Some(tx) = tx {
                let _ = tx.send((job.request_id, response, claim.take())).await;
            }
            self.pipeline.unpark(channel_id, job.request_id);
        }
        // A parked request's slot, like its other charges, is held until
        // the response is sent.
        drop(sink);
        drop(charges);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retry_hint_follows_the_queue_it_would_wait_behind() {
        let ms = Duration::from_millis;
        // Nothing timed yet: the fixed default.
        assert_eq!(retry_after_hint(10, 4, Duration::ZERO), RETRY_AFTER);
        // An empty queue: one service time, at least the minimum.
        assert_eq!(retry_after_hint(0, 4, ms(200)), ms(200));
        assert_eq!(retry_after_hint(0, 4, ms(1)), RETRY_AFTER_MIN);
        // 100 queued behind 4 slots at 20 ms: 26 rounds.
        assert_eq!(retry_after_hint(100, 4, ms(20)), ms(520));
        // A longer queue asks for a longer wait, up to the maximum.
        assert!(retry_after_hint(400, 4, ms(20)) > retry_after_hint(100, 4, ms(20)));
        assert_eq!(retry_after_hint(100_000, 1, ms(20)), RETRY_AFTER_MAX);
        // Zero slots count as one.
        assert_eq!(retry_after_hint(3, 0, ms(100)), ms(400));
    }

    #[test]
    fn the_too_busy_fault_carries_the_hint_as_int64_milliseconds() {
        let f = too_busy(9, Duration::from_millis(1500));
        let ResponseMessage::ServiceFault(f) = f else {
            panic!("not a ServiceFault")
        };
        assert_eq!(
            f.response_header.service_result,
            StatusCode::BadServerTooBusy
        );
        let params = f
            .response_header
            .additional_header
            .inner_as::<AdditionalParametersType>()
            .expect("additional parameters");
        let p = &params.parameters.as_ref().expect("parameters")[0];
        assert_eq!(p.key.name.as_ref(), "RetryAfterMs");
        assert_eq!(p.value, Variant::Int64(1500));
    }
}
