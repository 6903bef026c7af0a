//! The request dispatcher: decoded requests are charged to RequestQueue
//! and RequestQueueBytes (and ParkedRequest for Publish), queued per owner,
//! and started by a weighted fair scheduler when a RequestExecution slot is
//! free. A Publish that waits for notifications gives its execution slot
//! back and keeps its parked slot and bytes until it is answered.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use opcua_core::{RequestMessage, ResponseMessage};
use opcua_types::{
    AdditionalParametersType, ExtensionObject, KeyValuePair, QualifiedName, ResponseHeader,
    ServiceFault, StatusCode, Variant,
};
use parking_lot::Mutex;
use uagate_config::Stage;
use uagate_isolation::owner::{OwnerClass, OwnerKey};
use uagate_isolation::provider::Lease;
use uagate_isolation::scheduler::{FairScheduler, SchedulingMode};

use crate::admission::Caller;
use crate::{ChannelInfo, Engine};

/// A response on its way to the connection driver: (request id, response).
pub(crate) type Reply = (u32, ResponseMessage);

/// How long a refused client is told to wait before retrying.
pub const RETRY_AFTER: Duration = Duration::from_millis(250);

/// A queued request and the charges it holds until it is answered.
pub(crate) struct Job {
    chan: ChannelInfo,
    request_id: u32,
    request: Box<RequestMessage>,
    caller: Caller,
    charges: Charges,
}

/// Leases held by a request from queueing until its response is sent.
pub(crate) struct Charges {
    _queue: Option<Lease>,
    _bytes: Lease,
    _parked: Option<Lease>,
}

/// The queue of decoded requests and the parked ones' charges.
pub(crate) struct Dispatcher {
    queue: Mutex<FairScheduler<Job>>,
    pub(crate) wake: tokio::sync::Notify,
    /// Signalled whenever a request leaves the queue, so connections paused
    /// for per-owner backpressure look again.
    pub(crate) drained: tokio::sync::Notify,
    /// Whether reads are paused per owner (fair scheduling only).
    backpressure: bool,
    /// Queued requests an owner of weight 1 may have before its connections
    /// stop reading (scaled by weight).
    backlog_per_weight: usize,
    parked: Mutex<HashMap<(u32, u32), Charges>>,
}

impl Dispatcher {
    /// A dispatcher queueing at most `capacity` requests.
    pub(crate) fn new(fair: bool, capacity: usize, execution_slots: usize) -> Dispatcher {
        let mode = if fair {
            SchedulingMode::Fair
        } else {
            SchedulingMode::Fifo
        };
        Dispatcher {
            queue: Mutex::new(FairScheduler::new(mode, capacity)),
            wake: tokio::sync::Notify::new(),
            drained: tokio::sync::Notify::new(),
            backpressure: fair,
            backlog_per_weight: execution_slots.max(1),
            parked: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `owner` (of `weight`) already has its share of queued work,
    /// so its connections should stop reading until the queue drains. This
    /// is what keeps an owner with many connections from flooding the fair
    /// queue: its excess waits in its own sockets.
    pub(crate) fn over_share(&self, owner: &OwnerKey, weight: u32) -> bool {
        self.backpressure
            && self.queue.lock().owner_len(owner)
                >= self
                    .backlog_per_weight
                    .saturating_mul(weight.max(1) as usize)
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

/// A ServiceFault BadServerTooBusy carrying a RetryAfterMs hint in the
/// response header's additionalHeader (AdditionalParametersType).
pub fn too_busy(request_handle: u32) -> ResponseMessage {
    let mut header =
        ResponseHeader::new_service_result(request_handle, StatusCode::BadServerTooBusy);
    header.additional_header = ExtensionObject::from_message(AdditionalParametersType {
        parameters: Some(vec![KeyValuePair {
            key: QualifiedName::new(0, "RetryAfterMs"),
            value: Variant::from(RETRY_AFTER.as_millis() as u32),
        }]),
    });
    ServiceFault {
        response_header: header,
    }
    .into()
}

impl Engine {
    /// Who is charged for a request: trusted and protected callers keep
    /// their class; an ordinary caller on a secured channel is grouped by its
    /// verified application certificate, otherwise by its address.
    pub(crate) fn request_caller(&self, chan: &ChannelInfo) -> Caller {
        let base = chan.caller.clone().unwrap_or_else(|| Caller {
            owner: OwnerKey::from_addr(std::net::Ipv4Addr::UNSPECIFIED.into()),
            class: OwnerClass::Ordinary,
        });
        if base.class != OwnerClass::Ordinary {
            return base;
        }
        match &chan.client_cert {
            Some(cert) => match OwnerKey::from_application_thumbprint(cert.thumbprint().value()) {
                Some(owner) => Caller { owner, ..base },
                None => base,
            },
            None => base,
        }
    }

    /// Charges and queues a decoded request. Returns the immediate answer
    /// when it cannot be queued (BadServerTooBusy with RetryAfterMs).
    pub(crate) fn submit(
        &self,
        chan: &ChannelInfo,
        request_id: u32,
        request: Box<RequestMessage>,
    ) -> Result<(), ResponseMessage> {
        let handle = request.request_header().request_handle;
        let caller = self.request_caller(chan);
        let busy = |what: &str| {
            tracing::debug!(stage = what, "request refused: server too busy");
            too_busy(handle)
        };
        let admission = &self.admission;
        let queue = admission
            .acquire(Stage::RequestQueue, &caller, 1)
            .map_err(|_| busy("request_queue"))?;
        let bytes = admission
            .acquire(
                Stage::RequestQueueBytes,
                &caller,
                u64::from(self.config.server.max_message_size),
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
            chan: chan.clone(),
            request_id,
            request,
            caller: caller.clone(),
            charges: Charges {
                _queue: Some(queue),
                _bytes: bytes,
                _parked: parked,
            },
        };
        self.dispatcher
            .queue
            .lock()
            .push(Instant::now(), &caller.owner, weight, job)
            .map_err(|_| busy("request_queue"))?;
        self.dispatcher.wake.notify_one();
        Ok(())
    }

    /// Starts queued requests while execution slots are free; runs for the
    /// life of the server.
    pub(crate) async fn dispatch_loop(
        self: Arc<Self>,
        cancel: tokio_util::sync::CancellationToken,
    ) {
        loop {
            loop {
                let next = self
                    .dispatcher
                    .queue
                    .lock()
                    .pop_with(Instant::now(), |_, job| {
                        self.admission
                            .acquire(Stage::RequestExecution, &job.caller, 1)
                            .ok()
                    });
                let Some(d) = next else { break };
                self.dispatcher.drained.notify_waiters();
                let engine = self.clone();
                tokio::spawn(async move { engine.execute(d.item, d.admitted).await });
            }
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = self.dispatcher.wake.notified() => {},
                // A lease released elsewhere (e.g. an owner limit) is picked up soon.
                _ = tokio::time::sleep(Duration::from_millis(50)) => {},
            }
        }
    }

    /// Runs one request with its execution slot; the slot is released as
    /// soon as the handler returns (a parked Publish returns at once).
    async fn execute(self: Arc<Self>, mut job: Job, execution: Lease) {
        // The request has left the queue: its queue slot is free again.
        job.charges._queue = None;
        let channel_id = job.chan.channel_id;
        let key = (channel_id, job.request_id);
        // A Publish may be answered by the subscription timer as soon as it
        // is queued there, so its charges are parked before it runs.
        let is_publish = matches!(*job.request, RequestMessage::Publish(_));
        let charges = if is_publish {
            self.dispatcher.parked.lock().insert(key, job.charges);
            None
        } else {
            Some(job.charges)
        };
        let response = self
            .handle_request(&job.chan, job.request_id, *job.request)
            .await;
        // The slot is released as soon as the handler is done. Holding it
        // until the response is written let one slow reader (a client not
        // draining its socket) pin execution slots and stall every session.
        drop(execution);
        self.dispatcher.wake.notify_one();
        if let Some(response) = response {
            let tx = self.responders.lock().get(&channel_id).cloned();
            if let Some(tx) = tx {
                let _ = tx.send((job.request_id, response)).await;
            }
            self.dispatcher.unpark(channel_id, job.request_id);
        }
        drop(charges);
    }
}
