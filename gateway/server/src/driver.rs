//! The connection driver: one task per UACP connection (opc.tcp, opc.wss)
//! that moves bytes between its [`Transport`] and the sans-IO protocol core
//! ([`ServerConnection`]), and events between the protocol and the engine
//! (channel decisions, requests, responses produced later). I/O and timers
//! only; the protocol decisions are in `uagate-proto` and the services.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use opcua_core::comms::secure_channel::{Role, SecureChannel};
use opcua_core::RequestMessage;
use opcua_types::{ContextOwned, ResponseHeader, ServiceFault, StatusCode};
use parking_lot::RwLock;
use tokio::sync::mpsc;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;
use uagate_config::Config;
use uagate_proto::{CloseReason, Event, Limits, OpenRequest, ServerConnection};

use crate::admission::{Caller, ConnectionAdmission};
use crate::dispatch::Reply;
use crate::flows::{FlowClaim, FlowWait};
use crate::leases::{ReassemblyLeases, RenewLease};
use crate::stats::OpenCount;
use crate::{ChannelInfo, Engine};

/// Responses a channel can have waiting from outside its request flow.
const RESPONDER_CAPACITY: usize = 1024;

/// Longest one send to the peer may take: a whole UACP chunk (at most the
/// negotiated buffer size, 64 KiB by default), so 15 s allows a peer as
/// slow as about 4 KB/s. A peer that stops reading its socket (its window
/// closed, every send pending) is closed after this, so it holds neither
/// queued responses nor its session's charges for longer; the close is
/// logged with `BadTimeout`. Nothing can be sent to such a peer, so it
/// gets no Error message.
pub const SEND_STALL: std::time::Duration = std::time::Duration::from_secs(15);

/// The read buffer a connection starts with and keeps while its reads are
/// small: one page. Most requests (Publish, Read of a few nodes) fit, and
/// an idle connection, e.g. one of 10,000 sessions waiting for Publish
/// responses, holds no more (a fixed 64 KiB buffer was most of a session's
/// memory).
const READ_BUFFER_MIN: usize = 4 * 1024;

/// The read buffer of a connection that moves large messages: reached by
/// doubling from [`READ_BUFFER_MIN`] while reads fill the buffer.
const READ_BUFFER_MAX: usize = 64 * 1024;

/// Reads in a row that fit in [`READ_BUFFER_MIN`] before a grown buffer
/// goes back to it (so a connection alternating large and small messages
/// does not reallocate at every read).
const SHRINK_AFTER_SMALL_READS: u8 = 8;

/// A connection's read buffer, sized by its recent reads: it doubles (up
/// to [`READ_BUFFER_MAX`]) when a read fills it and returns to
/// [`READ_BUFFER_MIN`] after [`SHRINK_AFTER_SMALL_READS`] small reads in a
/// row. Resized only between reads, once the bytes were consumed.
struct ReadBuffer {
    buf: Vec<u8>,
    small_reads: u8,
}

impl ReadBuffer {
    fn new() -> Self {
        ReadBuffer {
            buf: vec![0u8; READ_BUFFER_MIN],
            small_reads: 0,
        }
    }

    /// A read of `n` bytes was consumed: adapts the size for the next one.
    fn consumed(&mut self, n: usize) {
        let len = self.buf.len();
        if n >= len && len < READ_BUFFER_MAX {
            self.buf = vec![0u8; (len * 2).min(READ_BUFFER_MAX)];
            self.small_reads = 0;
        } else if len > READ_BUFFER_MIN && n <= READ_BUFFER_MIN {
            self.small_reads += 1;
            if self.small_reads >= SHRINK_AFTER_SMALL_READS {
                self.buf.truncate(READ_BUFFER_MIN);
                self.buf.shrink_to_fit();
                self.small_reads = 0;
            }
        } else {
            self.small_reads = 0;
        }
    }
}

/// The byte transport under one UACP connection: a TCP socket (opc.tcp),
/// or a WebSocket carrying UACP messages in binary messages (opc.wss).
pub(crate) trait Transport: Send {
    /// The URL scheme of the endpoint this transport serves.
    const SCHEME: &'static str;

    /// Waits for input and reads it into `buf` (0 at the end).
    fn read(
        &mut self,
        buf: &mut [u8],
    ) -> impl std::future::Future<Output = std::io::Result<usize>> + Send;
    /// Sends bytes the protocol produced (whole UACP messages).
    fn send(
        &mut self,
        bytes: Vec<u8>,
    ) -> impl std::future::Future<Output = std::io::Result<()>> + Send;
    /// Ends the connection after the protocol closed it; `status` is why
    /// (the WebSocket close code follows from it).
    fn close(&mut self, status: Option<StatusCode>)
        -> impl std::future::Future<Output = ()> + Send;
}

/// Limits for a new connection from the configuration.
fn connection_limits(config: &Config) -> Limits {
    let s = &config.server;
    Limits {
        receive_buffer_size: s.max_buffer_size,
        send_buffer_size: s.max_buffer_size,
        max_message_size: s.max_message_size,
        // The formula the isolation plan's reassembly footprint uses.
        max_chunk_count: s.max_chunk_count(),
        handshake_timeout: config.isolation.handshake_timeout,
        max_token_lifetime: s.max_token_lifetime,
        ..Limits::default()
    }
}

/// Drives one admitted UACP connection over `stream` until it closes or
/// the server stops. The admission's leases are released when this returns.
pub(crate) async fn drive_transport<T: Transport>(
    engine: Arc<Engine>,
    stream: T,
    cancel: CancellationToken,
    admitted: ConnectionAdmission,
) {
    ConnectionDriver::new(engine, stream, cancel, admitted)
        .run()
        .await
}

/// One connection between the turns of its loop.
struct ConnectionDriver<T: Transport> {
    engine: Arc<Engine>,
    stream: T,
    conn: ServerConnection,
    /// The connection's Connection charge, and its Handshake charge until
    /// the channel opens.
    admitted: ConnectionAdmission,
    /// Cancelled when the server stops.
    server_cancel: CancellationToken,
    /// Cancelled by server shutdown or when this channel is reclaimed.
    cancel: CancellationToken,
    /// Whether `cancel` was acted on (the protocol is closing).
    cancel_seen: bool,
    /// This connection in the reclaimer.
    reclaim_id: u64,
    /// Counts the connection, and its channel once open, under its transport.
    _open: OpenCount,
    _open_channel: Option<OpenCount>,
    /// The open channel.
    info: Option<Arc<ChannelInfo>>,
    /// Who this channel's requests are charged to, and its weight.
    owner: Option<(Caller, u32)>,
    /// Requests submitted and not answered yet.
    in_flight: usize,
    /// The pipeline claim of the last read (fair scheduling).
    read_claim: Option<FlowClaim>,
    /// The wait while the owner is at its share of the pipeline.
    flow_wait: Option<FlowWait>,
    /// Bytes read into `buf` and held until the owner may have a request in.
    held: usize,
    buf: ReadBuffer,
    /// Why the protocol closed the connection (for the WebSocket close code).
    close_status: Option<StatusCode>,
    /// Where responses produced later (Publish) are sent, bounded per
    /// channel; they arrive on `later`.
    responder: mpsc::Sender<Reply>,
    later: mpsc::Receiver<Reply>,
    /// The protocol deadline the timer is armed for.
    armed: Option<Instant>,
    /// Request ids of this channel's Publish requests in the server (queued,
    /// running or parked), at most [`Self::max_publishes`]: one more is
    /// refused at once with BadTooManyPublishRequests, so a client sending
    /// thousands of Publish requests never fills the shared request queue.
    /// Below that bound Part 4's rule holds: the session's subscriptions
    /// answer the oldest parked Publish with BadTooManyPublishRequests when
    /// a new one exceeds `server.max_publish_requests_per_session`.
    publishes: std::collections::HashSet<u32>,
    /// Twice `server.max_publish_requests_per_session` when the connection
    /// began (room for the limit parked and as many on their way).
    max_publishes: usize,
}

impl<T: Transport> Drop for ConnectionDriver<T> {
    fn drop(&mut self) {
        self.engine.channels.reclaimer().unregister(self.reclaim_id);
    }
}

impl<T: Transport> ConnectionDriver<T> {
    /// A driver for a connection just admitted; registers it with the
    /// reclaimer and counts it as open.
    fn new(
        engine: Arc<Engine>,
        stream: T,
        server_cancel: CancellationToken,
        admitted: ConnectionAdmission,
    ) -> Self {
        let channel = SecureChannel::new(
            engine.endpoints.identity().store.clone(),
            Role::Server,
            Arc::new(RwLock::new(ContextOwned::default())),
        );
        let conn = ServerConnection::new(
            connection_limits(&engine.config),
            channel,
            Instant::now(),
            opcua_types::DateTime::now(),
        );
        let cancel = server_cancel.child_token();
        let reclaim_id = engine.channels.reclaimer().register(cancel.clone());
        let open = OpenCount::new(engine.clone(), T::SCHEME, false);
        let (responder, later) = mpsc::channel(RESPONDER_CAPACITY);
        let engine_max_publishes = engine.config.server.max_publish_requests_per_session;
        ConnectionDriver {
            engine,
            stream,
            conn,
            admitted,
            server_cancel,
            cancel,
            cancel_seen: false,
            reclaim_id,
            _open: open,
            _open_channel: None,
            info: None,
            owner: None,
            in_flight: 0,
            read_claim: None,
            flow_wait: None,
            held: 0,
            buf: ReadBuffer::new(),
            close_status: None,
            responder,
            later,
            armed: None,
            publishes: std::collections::HashSet::new(),
            max_publishes: usize::try_from(engine_max_publishes)
                .unwrap_or(usize::MAX / 2)
                .max(1)
                .saturating_mul(2),
        }
    }

    /// The connection's loop: flush, act on protocol events, then wait for
    /// input, a wake-up, cancellation, the protocol's deadline or a later
    /// response. Returns when the connection ends.
    async fn run(mut self) {
        // One timer and one cancellation wait for the connection's life,
        // re-armed only when the protocol's deadline changes: this loop turns
        // twice per request, and registering a fresh timer and waiter each
        // time showed in profiles of the proxied Read benchmark.
        let timer = tokio::time::sleep_until(tokio::time::Instant::now());
        tokio::pin!(timer);
        let cancelled = self.cancel.clone().cancelled_owned();
        tokio::pin!(cancelled);
        loop {
            // Flush what the protocol wants to send, then act on its events.
            while let Some(bytes) = self.conn.poll_transmit() {
                match tokio::time::timeout(SEND_STALL, self.stream.send(bytes)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return self.finish(),
                    Err(_) => {
                        tracing::warn!(
                            channel = self.info.as_ref().map(|i| i.channel_id),
                            status = %StatusCode::BadTimeout,
                            "peer stopped reading: nothing could be sent for {} s; connection closed",
                            SEND_STALL.as_secs()
                        );
                        self.engine.channels.count_send_stall();
                        return self.finish();
                    }
                }
            }
            if let Some(event) = self.conn.poll_event() {
                match event {
                    Event::OpenRequested(req) => self.on_open_requested(req).await,
                    Event::Request {
                        request_id,
                        request,
                    } => self.on_request(request_id, request),
                    Event::Renewed { .. } => {}
                    Event::Closed(reason) => self.on_closed(reason),
                }
                continue;
            }
            if self.conn.is_closed() {
                // A peer that does not read cannot hold the close open.
                let _ =
                    tokio::time::timeout(SEND_STALL, self.stream.close(self.close_status)).await;
                return self.finish();
            }
            self.before_wait(timer.as_mut());
            // With fair scheduling the bytes of an open channel are processed
            // only while its owner is under its share of the request pipeline;
            // otherwise the last read is held (and nothing more is read, so the
            // rest waits in the socket) until a request of the owner leaves.
            tokio::select! {
                r = self.stream.read(&mut self.buf.buf), if self.held == 0 && self.flow_wait.is_none() => {
                    if !self.on_read(r) {
                        return self.finish();
                    }
                }
                _ = woken(&self.flow_wait), if self.flow_wait.is_some() => self.on_flow_woken(),
                _ = &mut cancelled, if !self.cancel_seen => self.on_cancelled(),
                _ = &mut timer, if self.armed.is_some() => self.on_timer(),
                Some(reply) = self.later.recv() => self.on_reply(reply),
            }
        }
    }

    /// OpenSecureChannel (Issue): opens the channel the engine decides on,
    /// or rejects it with the engine's status.
    async fn on_open_requested(&mut self, req: OpenRequest) {
        match self.engine.decide_open(&req).await {
            Ok(info) => self.open(info, &req),
            Err(status) => self.conn.reject_open(status),
        }
    }

    /// Opens the channel `info`: charges its requests to the connection's
    /// caller, releases the Handshake charge and takes responses for it.
    fn open(&mut self, mut info: ChannelInfo, req: &OpenRequest) {
        let id = info.channel_id;
        info.caller = Some(self.admitted.caller.clone());
        info.peer = Some(self.admitted.peer);
        info.transport = T::SCHEME;
        self._open_channel = Some(OpenCount::new(self.engine.clone(), T::SCHEME, true));
        let caller = info.request_caller();
        let weight = self.engine.pipeline.admission().weight(&caller);
        self.owner = Some((caller, weight));
        // The handshake is over: its stage slot is released.
        self.admitted.handshake = None;
        if !info.client_certificate.is_null() {
            self.engine
                .channels
                .certify(id, info.client_certificate.clone(), self.cancel.clone());
        }
        self.info = Some(Arc::new(info));
        self.engine.channels.open(id, self.responder.clone());
        // Set before accept_open: frames buffered behind the OPN are
        // processed as soon as the channel is open.
        let caller = &self.admitted.caller;
        self.conn
            .set_reassembly_budget(Box::new(ReassemblyLeases::new(
                self.engine.clone(),
                caller.clone(),
                id,
            )));
        self.conn.set_renew_gate(Box::new(RenewLease::new(
            self.engine.clone(),
            caller.clone(),
        )));
        self.conn.accept_open(id, Instant::now());
        tracing::debug!(channel = id, policy = ?req.policy, mode = ?req.mode, "secure channel open");
    }

    /// A decoded request: queued for the dispatcher (answered through
    /// `later`) with the read's claim, or refused at once.
    fn on_request(&mut self, request_id: u32, request: Box<RequestMessage>) {
        let Some(chan) = &self.info else {
            return;
        };
        // The read's claim goes with its first request; a further request
        // from the same read is counted too.
        let is_publish = matches!(*request, RequestMessage::Publish(_));
        if is_publish && self.publishes.len() >= self.max_publishes {
            let handle = request.request_header().request_handle;
            let fault = ServiceFault {
                response_header: ResponseHeader::new_service_result(
                    handle,
                    StatusCode::BadTooManyPublishRequests,
                ),
            };
            self.conn.send_response(request_id, fault.into());
            return;
        }
        let claim = self.read_claim.take().or_else(|| self.further_claim());
        match self.engine.submit(chan, request_id, request, claim) {
            Ok(()) => {
                self.in_flight += 1;
                if is_publish {
                    self.publishes.insert(request_id);
                }
            }
            Err(refusal) => self.conn.send_response(request_id, refusal),
        }
    }

    /// A pipeline claim for a further request decoded from the same read
    /// (fair scheduling, open channel only).
    fn further_claim(&self) -> Option<FlowClaim> {
        let pipeline = &self.engine.pipeline;
        let (flows, (caller, weight)) = pipeline.flows().zip(self.owner.as_ref())?;
        let reserved = pipeline.admission().reserved_execution(caller);
        Some(flows.add(&caller.owner, *weight, reserved))
    }

    /// The protocol closed the connection; remembers why.
    fn on_closed(&mut self, reason: CloseReason) {
        tracing::debug!(?reason, "connection finished");
        self.close_status = Some(match reason {
            CloseReason::ClientClosed => StatusCode::Good,
            CloseReason::Error(e) => e.status(),
            CloseReason::Server(s) => s,
        });
    }

    /// Before waiting: tells the reclaimer whether the connection is quiet,
    /// ends the last read's claim, and re-arms `timer` when the protocol's
    /// deadline changed.
    fn before_wait(&mut self, timer: Pin<&mut Sleep>) {
        // Quiet: open, nothing partial or unread, nothing in flight, no session.
        let quiet = self.in_flight == 0
            && self.conn.is_quiet()
            && self
                .info
                .as_ref()
                .is_some_and(|i| !self.engine.sessions.has_channel(i.channel_id));
        let reclaimer = self.engine.channels.reclaimer();
        reclaimer.set_quiet(self.reclaim_id, quiet, Instant::now());
        // The read's claim covers only requests decoded from it.
        self.read_claim = None;
        let deadline = self.conn.poll_timeout();
        if deadline != self.armed {
            if let Some(d) = deadline {
                timer.reset(d.into());
            }
            self.armed = deadline;
        }
    }

    /// Bytes read (or the end of the connection: false). With fair
    /// scheduling on an open channel they are held until the owner may have
    /// one more request in.
    fn on_read(&mut self, read: std::io::Result<usize>) -> bool {
        let gated = self.engine.pipeline.flows().is_some() && self.owner.is_some();
        match read {
            Err(_) | Ok(0) => return false,
            Ok(n) if gated => {
                self.held = n;
                self.take_held();
            }
            Ok(n) => {
                self.conn.handle_input(&self.buf.buf[..n], Instant::now());
                self.buf.consumed(n);
            }
        }
        true
    }

    /// The owner's wait ended: tries the held bytes again.
    fn on_flow_woken(&mut self) {
        self.flow_wait = None;
        self.take_held();
    }

    /// Processes the held bytes of a read when the connection's owner may
    /// have one more request in the server (the claim goes with the requests
    /// they decode); otherwise keeps them and waits for the owner's turn.
    fn take_held(&mut self) {
        if self.held == 0 {
            return;
        }
        let pipeline = &self.engine.pipeline;
        let (Some(flows), Some((caller, weight))) = (pipeline.flows(), self.owner.as_ref()) else {
            return;
        };
        let reserved = pipeline.admission().reserved_execution(caller);
        match flows.try_claim(&caller.owner, *weight, reserved) {
            Ok(claim) => {
                self.read_claim = Some(claim);
                self.conn
                    .handle_input(&self.buf.buf[..self.held], Instant::now());
                self.buf.consumed(self.held);
                self.held = 0;
            }
            Err(wait) => self.flow_wait = Some(wait),
        }
    }

    /// The server stops, this unused channel was reclaimed to make room
    /// for a new caller, or its client certificate is refused now
    /// ([`crate::standing`]): the protocol closes the connection.
    fn on_cancelled(&mut self) {
        self.cancel_seen = true;
        let refused = self
            .info
            .as_ref()
            .and_then(|i| self.engine.channels.refused(i.channel_id));
        self.conn.close(if self.server_cancel.is_cancelled() {
            StatusCode::BadServerHalted
        } else if let Some(status) = refused {
            status
        } else {
            // Reclaimed: this unused channel made room for a new caller.
            StatusCode::BadTcpNotEnoughResources
        })
    }

    /// The protocol's deadline passed.
    fn on_timer(&mut self) {
        // Fired: re-armed before the next wait from the protocol's deadline.
        self.armed = None;
        self.conn.handle_timeout(Instant::now());
    }

    /// A response produced by the dispatcher or later (Publish) is sent.
    fn on_reply(&mut self, (request_id, response, claim): Reply) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.publishes.remove(&request_id);
        self.conn.send_response(request_id, response);
        // Encoded: the request has left the server's pipeline.
        drop(claim);
    }

    /// The connection ended: the engine forgets its channel.
    fn finish(&mut self) {
        if let Some(i) = self.info.take() {
            self.engine.channel_closed(i.channel_id);
        }
    }
}

/// Resolves when the owner a connection waits for may have room again
/// (re-check with a claim); the branch runs only while there is a wait.
async fn woken(wait: &Option<FlowWait>) {
    if let Some(w) = wait {
        w.woken().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_buffer_starts_small_grows_on_full_reads_and_shrinks_back() {
        let mut b = ReadBuffer::new();
        assert_eq!(b.buf.len(), READ_BUFFER_MIN);
        // Small reads keep it small.
        b.consumed(100);
        assert_eq!(b.buf.len(), READ_BUFFER_MIN);
        // Full reads double it, up to the maximum.
        let mut sizes = Vec::new();
        for _ in 0..6 {
            let full = b.buf.len();
            b.consumed(full);
            sizes.push(b.buf.len());
        }
        assert_eq!(
            sizes,
            [8192, 16384, 32768, 65536, 65536, 65536].map(|n: usize| n.min(READ_BUFFER_MAX))
        );
        // A read between the minimum and the size does not count as small.
        for _ in 0..20 {
            b.consumed(READ_BUFFER_MIN + 1);
        }
        assert_eq!(b.buf.len(), READ_BUFFER_MAX);
        // Back to one page after enough small reads in a row, not before.
        for _ in 0..SHRINK_AFTER_SMALL_READS - 1 {
            b.consumed(50);
        }
        assert_eq!(b.buf.len(), READ_BUFFER_MAX);
        b.consumed(READ_BUFFER_MIN);
        assert_eq!(b.buf.len(), READ_BUFFER_MIN);
        assert!(b.buf.capacity() < 2 * READ_BUFFER_MIN);
    }
}
