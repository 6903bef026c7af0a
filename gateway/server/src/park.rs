//! Requests that wait for a field server without holding an execution slot
//! (issue 17 item 3; ResourceIsolation.md, "Letting a custom handler release
//! its worker while waiting").
//!
//! The dispatcher runs every request inside a [`ParkSink`] scope. When a
//! proxied service finds its field connection unavailable (reconnecting,
//! its session being re-activated), it parks the request before it waits:
//! the request takes a ParkedRequest slot and gives its RequestExecution
//! slot back, so a dead PLC polled by many clients does not starve Reads of
//! healthy PLCs and of local nodes. The parked slot, like a parked
//! Publish's, is held until the response is sent; its place in its owner's
//! pipeline share is given back with the execution slot. When no parked slot is
//! free the request does not wait at all: the mount's operations fail at
//! once with BadServerNotConnected (BadNoCommunication for values). After
//! the wait the request finishes without an execution slot: what is left is
//! bounded (one southbound call, the merge of its results).

use std::sync::Arc;

use opcua_types::StatusCode;
use parking_lot::Mutex;
use uagate_config::Stage;
use uagate_field::{FieldConnection, LinkSession};
use uagate_isolation::provider::Lease;

use crate::admission::Caller;
use crate::flows::FlowClaim;
use crate::Engine;

tokio::task_local! {
    /// The running request's sink (set by the dispatcher for each request).
    static SINK: Arc<ParkSink>;
}

/// The execution slot of a running request and, once parked, its
/// ParkedRequest slot.
pub(crate) struct ParkSink {
    engine: Arc<Engine>,
    caller: Caller,
    slots: Mutex<Slots>,
}

struct Slots {
    execution: Option<Lease>,
    /// The request's place in its owner's pipeline share (fair
    /// scheduling): given back with the execution slot when it parks, as a
    /// held Publish's is.
    claim: Option<FlowClaim>,
    parked: Option<Lease>,
}

impl ParkSink {
    /// The sink of a request that starts with `execution`.
    pub(crate) fn new(
        engine: Arc<Engine>,
        caller: Caller,
        execution: Lease,
        claim: Option<FlowClaim>,
    ) -> Arc<ParkSink> {
        Arc::new(ParkSink {
            engine,
            caller,
            slots: Mutex::new(Slots {
                execution: Some(execution),
                claim,
                parked: None,
            }),
        })
    }

    /// The pipeline claim to release once the response is encoded; `None`
    /// when the request parked (it gave the claim back then).
    pub(crate) fn take_claim(&self) -> Option<FlowClaim> {
        self.slots.lock().claim.take()
    }

    /// Runs a request's handler inside this sink's scope.
    pub(crate) async fn scope<F: std::future::Future>(self: &Arc<Self>, f: F) -> F::Output {
        SINK.scope(self.clone(), f).await
    }

    /// Gives the execution slot back (the handler returned, or the request
    /// parked) and wakes the dispatcher for the next request.
    pub(crate) fn release_execution(&self) {
        let slot = self.slots.lock().execution.take();
        if slot.is_some() {
            drop(slot);
            self.engine.pipeline.wake();
        }
    }

    /// Trades the execution slot for a ParkedRequest slot. True when the
    /// request holds a parked slot now (or already did); false when none is
    /// free (the request must not wait).
    fn park(&self) -> bool {
        let mut slots = self.slots.lock();
        if slots.parked.is_some() {
            return true;
        }
        let admission = self.engine.pipeline.admission();
        match admission.acquire(Stage::ParkedRequest, &self.caller, 1) {
            Ok(lease) => {
                slots.parked = Some(lease);
                let execution = slots.execution.take();
                let claim = slots.claim.take();
                drop(slots);
                drop(execution);
                drop(claim);
                self.engine.pipeline.wake();
                true
            }
            Err(_) => false,
        }
    }
}

/// Parks the running request before it waits (see the module docs). True
/// when it may wait; outside a dispatched request (nothing to give back)
/// always true.
fn park_running_request() -> bool {
    SINK.try_with(|s| s.park()).unwrap_or(true)
}

/// The active session of `conn` for a proxied call: at once when
/// connected; otherwise the request is parked and waits until `deadline`
/// (or fails at once with BadServerNotConnected when no parked slot is
/// free).
pub(crate) async fn field_link(
    conn: &FieldConnection,
    deadline: std::time::Instant,
) -> Result<Arc<LinkSession>, StatusCode> {
    if let Some(l) = conn.link_now() {
        return Ok(l);
    }
    if !park_running_request() {
        return Err(StatusCode::BadServerNotConnected);
    }
    conn.count_request(false);
    conn.link(deadline).await
}

/// The session to retry a call on after it failed on `failed` because the
/// connection was lost (`losses` as read before the call): the request is
/// parked while it waits for the re-activated or next session until
/// `deadline`.
pub(crate) async fn field_link_after(
    conn: &FieldConnection,
    failed: &Arc<LinkSession>,
    losses: u64,
    deadline: std::time::Instant,
) -> Result<Arc<LinkSession>, StatusCode> {
    if !park_running_request() {
        return Err(StatusCode::BadServerNotConnected);
    }
    conn.count_request(true);
    conn.link_after(failed, losses, deadline).await
}

/// True for the statuses of a southbound call cut off by a lost connection
/// or session (as the client library reports them), which an idempotent
/// request retries once after the reconnect.
pub(crate) fn is_link_loss(st: StatusCode) -> bool {
    matches!(
        st,
        StatusCode::BadConnectionClosed
            | StatusCode::BadNotConnected
            | StatusCode::BadSecureChannelClosed
            | StatusCode::BadSecureChannelIdInvalid
            | StatusCode::BadTcpSecureChannelUnknown
            | StatusCode::BadCommunicationError
            | StatusCode::BadDisconnect
            | StatusCode::BadEndOfStream
            | StatusCode::BadSessionClosed
            | StatusCode::BadSessionIdInvalid
            | StatusCode::BadSessionNotActivated
            | StatusCode::BadServerNotConnected
    )
}
