//! The opc.tcp transport adapter: accepts sockets and drives one
//! [`ServerConnection`] per socket. I/O only; all protocol decisions are in
//! `uagate-proto` and the services.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use opcua_core::comms::secure_channel::{Role, SecureChannel};
use opcua_core::comms::tcp_types::ErrorMessage;
use opcua_crypto::{SecurityPolicy, X509};
use opcua_types::SimpleBinaryEncodable;
use opcua_types::{ByteString, ContextOwned, StatusCode};
use parking_lot::RwLock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use uagate_config::Stage;
use uagate_isolation::owner::OwnerClass;
use uagate_isolation::provider::Lease;
use uagate_proto::{Event, Limits, OpenRequest, ReassemblyBudget, RenewGate, ServerConnection};

use crate::admission::{Caller, ConnectionAdmission};
use uagate_store::TrustVerdict;

use crate::{ChannelInfo, Engine};

/// Removes a connection from the reclaimer when its driver ends.
struct Registered<'a>(&'a Engine, u64);

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.0.reclaimer.unregister(self.1);
    }
}

/// Responses a channel can have waiting from outside its request flow.
const RESPONDER_CAPACITY: usize = 1024;

/// Accepts connections until `cancel`; one task per connection.
pub async fn accept_loop(engine: Arc<Engine>, listener: TcpListener, cancel: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => break,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, peer)) => {
                // Admission comes before any protocol or crypto state exists.
                match engine.admission.admit_connection(peer.ip(), Instant::now()) {
                    Ok(admitted) => {
                        let _ = stream.set_nodelay(true);
                        let engine = engine.clone();
                        let cancel = cancel.clone();
                        tokio::spawn(async move {
                            tracing::debug!(%peer, "connection accepted");
                            drive(engine, stream, cancel, admitted).await;
                            tracing::debug!(%peer, "connection closed");
                        });
                    }
                    Err(refusal) if refusal.is_connection_capacity() => {
                        // Full: an unused channel may make room (the rate
                        // limiter has already approved this caller).
                        let engine = engine.clone();
                        let cancel = cancel.clone();
                        tokio::spawn(async move {
                            match reclaim_for(&engine, peer.ip()).await {
                                Some(admitted) => {
                                    let _ = stream.set_nodelay(true);
                                    drive(engine, stream, cancel, admitted).await;
                                }
                                None => {
                                    tracing::debug!(%peer, %refusal, "connection refused");
                                    refuse(stream).await;
                                }
                            }
                        });
                    }
                    Err(refusal) => {
                        tracing::debug!(%peer, %refusal, "connection refused");
                        tokio::spawn(refuse(stream));
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

impl Engine {
    /// Limits for a new connection from the configuration.
    fn connection_limits(&self) -> Limits {
        let s = &self.config.server;
        Limits {
            receive_buffer_size: s.max_buffer_size,
            send_buffer_size: s.max_buffer_size,
            max_message_size: s.max_message_size,
            // The formula the isolation plan's reassembly footprint uses.
            max_chunk_count: s.max_chunk_count(),
            handshake_timeout: self.config.isolation.handshake_timeout,
            max_token_lifetime: s.max_token_lifetime,
            ..Limits::default()
        }
    }

    /// Decides an OpenSecureChannel: the policy and mode must be offered and,
    /// when secured, the client certificate valid and in the trust list. An
    /// unknown certificate is recorded as rejected for the operator.
    async fn decide_open(&self, req: &OpenRequest) -> Result<ChannelInfo, StatusCode> {
        let offered = self
            .offered
            .iter()
            .find(|o| o.policy == req.policy && o.mode == req.mode)
            .ok_or(StatusCode::BadSecurityPolicyRejected)?;
        let mut info = ChannelInfo {
            channel_id: self.next_channel_id.fetch_add(1, Ordering::Relaxed),
            policy: req.policy,
            mode: req.mode,
            client_certificate: ByteString::null(),
            client_cert: None,
            tokens: offered.tokens.clone(),
            caller: None,
            transport_encrypted: false,
            transport: "opc.tcp",
        };
        if req.policy == SecurityPolicy::None {
            return Ok(info);
        }
        let der = req
            .client_certificate
            .clone()
            .ok_or(StatusCode::BadCertificateInvalid)?;
        let cert = X509::from_byte_string(&der).map_err(|_| StatusCode::BadCertificateInvalid)?;
        let verdict = self
            .store
            .validate_certificate(der.as_ref(), chrono::Utc::now())
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "trust list lookup failed");
                StatusCode::BadInternalError
            })?;
        if verdict == TrustVerdict::Untrusted {
            // Listed for the operator to approve with `uagate trust add`.
            if let Err(e) = self.store.record_rejected(der.as_ref()).await {
                tracing::warn!(error = %e, "could not record rejected certificate");
            }
        }
        if !verdict.is_trusted() {
            tracing::warn!(
                thumbprint = %cert.thumbprint().as_hex_string(),
                subject = %cert.subject_name(),
                %verdict,
                "client certificate refused"
            );
            return Err(verdict_status(verdict));
        }
        info.client_certificate = der;
        info.client_cert = Some(cert);
        Ok(info)
    }
}

/// The status a client sees for a certificate the trust list refuses.
fn verdict_status(verdict: TrustVerdict) -> StatusCode {
    match verdict {
        TrustVerdict::Trusted => StatusCode::Good,
        TrustVerdict::Untrusted => StatusCode::BadCertificateUntrusted,
        TrustVerdict::Revoked => StatusCode::BadCertificateRevoked,
        TrustVerdict::IssuerRevoked => StatusCode::BadCertificateIssuerRevoked,
        TrustVerdict::RevocationUnknown => StatusCode::BadCertificateRevocationUnknown,
        TrustVerdict::IssuerRevocationUnknown => StatusCode::BadCertificateIssuerRevocationUnknown,
        TrustVerdict::TimeInvalid => StatusCode::BadCertificateTimeInvalid,
        TrustVerdict::IssuerTimeInvalid => StatusCode::BadCertificateIssuerTimeInvalid,
        _ => StatusCode::BadCertificateInvalid,
    }
}

/// Closes the longest-unused channel and retries the caller's Connection
/// and Handshake charges for a short while; `None` when nothing could be
/// reclaimed or the room went to someone else.
async fn reclaim_for(engine: &Engine, ip: std::net::IpAddr) -> Option<ConnectionAdmission> {
    if !engine.reclaimer.reclaim_one() {
        return None;
    }
    let caller = engine.admission.classify(ip);
    for _ in 0..20 {
        // The reclaimed driver releases its lease when it ends.
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        if let Ok(admitted) = engine.admission.admit_stages(caller.clone()) {
            tracing::info!("unused channel reclaimed for a new connection");
            return Some(admitted);
        }
    }
    None
}

/// Answers a connection that was not admitted with an Error message
/// (BadTcpNotEnoughResources) and closes it, spending at most one second.
async fn refuse(mut stream: TcpStream) {
    let msg = ErrorMessage::new(
        StatusCode::BadTcpNotEnoughResources,
        "BadTcpNotEnoughResources",
    );
    let mut out = Vec::with_capacity(msg.byte_len());
    if msg.encode(&mut out).is_ok() {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
            let _ = stream.write_all(&out).await;
            let _ = stream.shutdown().await;
        })
        .await;
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

/// opc.tcp: the socket itself.
struct TcpTransport(TcpStream);

impl Transport for TcpTransport {
    const SCHEME: &'static str = "opc.tcp";

    async fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf).await
    }

    async fn send(&mut self, bytes: Vec<u8>) -> std::io::Result<()> {
        self.0.write_all(&bytes).await
    }

    async fn close(&mut self, _status: Option<StatusCode>) {
        let _ = self.0.shutdown().await;
    }
}

/// Drives one admitted opc.tcp connection (see [`drive_transport`]).
async fn drive(
    engine: Arc<Engine>,
    stream: TcpStream,
    cancel: CancellationToken,
    admitted: ConnectionAdmission,
) {
    drive_transport(engine, TcpTransport(stream), cancel, admitted).await
}

/// Drives one admitted UACP connection over `stream` until it closes or
/// the server stops. The admission's leases are released when this returns.
pub(crate) async fn drive_transport<T: Transport>(
    engine: Arc<Engine>,
    mut stream: T,
    cancel: CancellationToken,
    mut admitted: ConnectionAdmission,
) {
    let channel = SecureChannel::new(
        engine.identity.store.clone(),
        Role::Server,
        Arc::new(RwLock::new(ContextOwned::default())),
    );
    let mut conn = ServerConnection::new(
        engine.connection_limits(),
        channel,
        Instant::now(),
        opcua_types::DateTime::now(),
    );
    // Cancelled by server shutdown or when this channel is reclaimed.
    let server_cancel = cancel;
    let cancel = server_cancel.child_token();
    let reclaim_id = engine.reclaimer.register(cancel.clone());
    let _registered = Registered(&engine, reclaim_id);
    let _open = crate::stats::OpenCount::new(engine.clone(), T::SCHEME, false);
    let mut _open_channel: Option<crate::stats::OpenCount> = None;
    let mut in_flight: usize = 0;
    // Who this channel's requests are charged to, and its weight.
    let mut owner: Option<(crate::admission::Caller, u32)> = None;
    let mut info: Option<Arc<ChannelInfo>> = None;
    // The pipeline claim of the last read (fair scheduling), and the wait
    // while the owner is at its share.
    let mut read_claim: Option<crate::flows::FlowClaim> = None;
    let mut flow_wait: Option<crate::flows::FlowWait> = None;
    // Bytes read into `buf` and held until the owner may have a request in.
    let mut held: usize = 0;
    // Why the protocol closed the connection (for the WebSocket close code).
    let mut close_status: Option<StatusCode> = None;
    let mut buf = vec![0u8; 64 * 1024];
    // Responses produced later (Publish) arrive here; bounded per channel.
    let (responder, mut later) = tokio::sync::mpsc::channel(RESPONDER_CAPACITY);
    // One timer and one cancellation wait for the connection's life, re-armed
    // only when the protocol's deadline changes: this loop turns twice per
    // request, and registering a fresh timer and waiter each time showed in
    // profiles of the proxied Read benchmark.
    let timer = tokio::time::sleep_until(tokio::time::Instant::now());
    tokio::pin!(timer);
    let mut armed: Option<Instant> = None;
    let cancelled = cancel.clone().cancelled_owned();
    tokio::pin!(cancelled);
    let mut cancel_seen = false;
    loop {
        // Flush what the protocol wants to send, then act on its events.
        while let Some(bytes) = conn.poll_transmit() {
            if stream.send(bytes).await.is_err() {
                return finish(&engine, info);
            }
        }
        if let Some(event) = conn.poll_event() {
            match event {
                Event::OpenRequested(req) => match engine.decide_open(&req).await {
                    Ok(mut i) => {
                        let id = i.channel_id;
                        i.caller = Some(admitted.caller.clone());
                        i.transport = T::SCHEME;
                        _open_channel = Some(crate::stats::OpenCount::new(
                            engine.clone(),
                            T::SCHEME,
                            true,
                        ));
                        let caller = engine.request_caller(&i);
                        let weight = engine.admission.weight(&caller);
                        owner = Some((caller, weight));
                        // The handshake is over: its stage slot is released.
                        admitted.handshake = None;
                        info = Some(Arc::new(i));
                        engine.responders.lock().insert(id, responder.clone());
                        // Set before accept_open: frames buffered behind the
                        // OPN are processed as soon as the channel is open.
                        conn.set_reassembly_budget(Box::new(ReassemblyLeases::new(
                            engine.clone(),
                            admitted.caller.clone(),
                            id,
                        )));
                        conn.set_renew_gate(Box::new(RenewLease {
                            engine: engine.clone(),
                            caller: admitted.caller.clone(),
                            lease: None,
                        }));
                        conn.accept_open(id, Instant::now());
                        tracing::debug!(channel = id, policy = ?req.policy, mode = ?req.mode, "secure channel open");
                    }
                    Err(status) => conn.reject_open(status),
                },
                Event::Request {
                    request_id,
                    request,
                } => {
                    if let Some(chan) = &info {
                        // The read's claim goes with its first request; a
                        // further request from the same read is counted too.
                        let claim = read_claim.take().or_else(|| {
                            let (flows, (caller, weight)) =
                                engine.dispatcher.flows.as_ref().zip(owner.as_ref())?;
                            Some(flows.add(
                                &caller.owner,
                                *weight,
                                engine.admission.reserved_execution(caller),
                            ))
                        });
                        // Queued for the dispatcher; answered through `later`.
                        match engine.submit(chan, request_id, request, claim) {
                            Ok(()) => in_flight += 1,
                            Err(refusal) => conn.send_response(request_id, refusal),
                        }
                    }
                }
                Event::Renewed { .. } => {}
                Event::Closed(reason) => {
                    tracing::debug!(?reason, "connection finished");
                    close_status = Some(match reason {
                        uagate_proto::CloseReason::ClientClosed => StatusCode::Good,
                        uagate_proto::CloseReason::Error(e) => e.status(),
                        uagate_proto::CloseReason::Server(s) => s,
                    });
                }
            }
            continue;
        }
        if conn.is_closed() {
            stream.close(close_status).await;
            return finish(&engine, info);
        }
        // Quiet: open, nothing partial or unread, nothing in flight, no session.
        let quiet = in_flight == 0
            && conn.is_quiet()
            && info
                .as_ref()
                .is_some_and(|i| !engine.sessions.lock().has_channel(i.channel_id));
        engine
            .reclaimer
            .set_quiet(reclaim_id, quiet, Instant::now());
        // The read's claim covers only requests decoded from it.
        read_claim = None;
        let deadline = conn.poll_timeout();
        if deadline != armed {
            if let Some(d) = deadline {
                timer.as_mut().reset(d.into());
            }
            armed = deadline;
        }
        // With fair scheduling the bytes of an open channel are processed
        // only while its owner is under its share of the request pipeline;
        // otherwise the last read is held (and nothing more is read, so the
        // rest waits in the socket) until a request of the owner leaves.
        let gated = engine.dispatcher.flows.is_some() && owner.is_some();
        tokio::select! {
            r = stream.read(&mut buf), if held == 0 && flow_wait.is_none() => match r {
                Err(_) | Ok(0) => return finish(&engine, info),
                Ok(n) if gated => {
                    held = n;
                    take_held(&engine, &owner, &buf, &mut held, &mut read_claim, &mut flow_wait, &mut conn);
                }
                Ok(n) => conn.handle_input(&buf[..n], Instant::now()),
            },
            _ = async { if let Some(w) = &flow_wait { w.woken().await } }, if flow_wait.is_some() => {
                flow_wait = None;
                take_held(&engine, &owner, &buf, &mut held, &mut read_claim, &mut flow_wait, &mut conn);
            }
            _ = &mut cancelled, if !cancel_seen => {
                cancel_seen = true;
                conn.close(if server_cancel.is_cancelled() {
                    StatusCode::BadServerHalted
                } else {
                    // Reclaimed: this unused channel made room for a new caller.
                    StatusCode::BadTcpNotEnoughResources
                })
            }
            _ = &mut timer, if armed.is_some() => {
                // Fired: re-armed above from the protocol's next deadline.
                armed = None;
                conn.handle_timeout(Instant::now());
            }
            Some((request_id, response, claim)) = later.recv() => {
                in_flight = in_flight.saturating_sub(1);
                conn.send_response(request_id, response);
                // Encoded: the request has left the server's pipeline.
                drop(claim);
            }
        }
    }
}

/// Charges OpenSecureChannel(Renew) work to the Handshake stage while it
/// is processed (resource isolation).
struct RenewLease {
    engine: Arc<Engine>,
    caller: Caller,
    lease: Option<Lease>,
}

impl RenewGate for RenewLease {
    fn try_begin(&mut self) -> bool {
        self.lease = self
            .engine
            .admission
            .acquire(uagate_config::Stage::Handshake, &self.caller, 1)
            .ok();
        self.lease.is_some()
    }

    fn end(&mut self) {
        self.lease = None;
    }
}

/// Processes the held bytes of a read when the connection's owner may
/// have one more request in the server (the claim goes with the requests
/// they decode); otherwise keeps them and waits for the owner's turn.
fn take_held(
    engine: &Engine,
    owner: &Option<(Caller, u32)>,
    buf: &[u8],
    held: &mut usize,
    read_claim: &mut Option<crate::flows::FlowClaim>,
    flow_wait: &mut Option<crate::flows::FlowWait>,
    conn: &mut ServerConnection,
) {
    if *held == 0 {
        return;
    }
    let (Some(flows), Some((caller, weight))) = (engine.dispatcher.flows.as_ref(), owner.as_ref())
    else {
        return;
    };
    let reserved = engine.admission.reserved_execution(caller);
    match flows.try_claim(&caller.owner, *weight, reserved) {
        Ok(claim) => {
            *read_claim = Some(claim);
            conn.handle_input(&buf[..*held], Instant::now());
            *held = 0;
        }
        Err(wait) => *flow_wait = Some(wait),
    }
}

/// The ReassemblyBytes budget of one channel: one lease per retained
/// intermediate chunk (a lease cannot grow), all dropped when the protocol
/// layer releases the message, and with the connection.
///
/// Who is charged is decided when a message starts and kept for the rest of
/// that message: the connection's caller, except that an ordinary caller
/// whose channel carries an activated Session is charged as
/// [`OwnerClass::SessionBound`] (it may use the reconnect reserve at this
/// stage only). Protected and trusted callers keep their own class. In
/// shared_only (no reserves, every caller ordinary) the same split decides
/// which charges count against `isolation.max_bytes_without_session`: the
/// ordinary ones.
struct ReassemblyLeases {
    engine: Arc<Engine>,
    caller: Caller,
    channel_id: u32,
    /// The caller for the message being reassembled.
    current: Caller,
    leases: Vec<Lease>,
}

impl ReassemblyLeases {
    fn new(engine: Arc<Engine>, caller: Caller, channel_id: u32) -> Self {
        ReassemblyLeases {
            engine,
            current: caller.clone(),
            caller,
            channel_id,
            leases: Vec::new(),
        }
    }

    /// The caller a message starting now is charged to.
    fn caller_for_message(&self) -> Caller {
        if !matches!(self.caller.class, OwnerClass::Ordinary) {
            return self.caller.clone();
        }
        let session_bound = self
            .engine
            .sessions
            .lock()
            .iter_mut()
            .any(|s| s.channel_id == self.channel_id && s.is_active());
        Caller {
            owner: self.caller.owner.clone(),
            class: if session_bound {
                OwnerClass::SessionBound
            } else {
                OwnerClass::Ordinary
            },
        }
    }
}

impl ReassemblyBudget for ReassemblyLeases {
    fn reserve(&mut self, bytes: usize, message_start: bool) -> bool {
        if message_start {
            self.leases.clear();
            self.current = self.caller_for_message();
        }
        match self
            .engine
            .admission
            .acquire(Stage::ReassemblyBytes, &self.current, bytes as u64)
        {
            Ok(lease) => {
                self.leases.push(lease);
                true
            }
            Err(rejection) => {
                tracing::debug!(
                    channel = self.channel_id,
                    class = self.current.class.label(),
                    bytes,
                    %rejection,
                    "intermediate chunk refused"
                );
                false
            }
        }
    }

    fn release(&mut self) {
        self.leases.clear();
    }
}

fn finish(engine: &Engine, info: Option<Arc<ChannelInfo>>) {
    if let Some(i) = info {
        engine.responders.lock().remove(&i.channel_id);
        engine.dispatcher.channel_closed(i.channel_id);
        engine.sessions.lock().channel_closed(i.channel_id);
    }
}
