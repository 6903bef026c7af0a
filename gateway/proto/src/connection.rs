//! The per-connection opc.tcp state machine, sans-IO.
//!
//! The transport driver feeds it received bytes and the current time
//! ([`ServerConnection::handle_input`], [`ServerConnection::handle_timeout`]),
//! drains the bytes to write ([`ServerConnection::poll_transmit`]) and the
//! events for the engine ([`ServerConnection::poll_event`]), and sleeps until
//! [`ServerConnection::poll_timeout`]. Nothing here touches a socket or reads
//! a clock, so every path is unit-testable with simulated time.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use opcua_core::comms::chunker::Chunker;
use opcua_core::comms::message_chunk::MessageChunk;
use opcua_core::comms::secure_channel::SecureChannel;
use opcua_core::comms::security_header::SecurityHeader;
use opcua_core::comms::sequence_number::SequenceNumberHandle;
use opcua_core::comms::tcp_types::{AcknowledgeMessage, ErrorMessage, HelloMessage};
use opcua_core::{Message as _, RequestMessage, ResponseMessage};
use opcua_crypto::SecurityPolicy;
use opcua_types::{
    ByteString, ChannelSecurityToken, DateTime, DecodingOptions, MessageSecurityMode,
    OpenSecureChannelRequest, OpenSecureChannelResponse, ResponseHeader, SecurityTokenRequestType,
    ServiceFault, SimpleBinaryDecodable, SimpleBinaryEncodable, StatusCode,
};

use crate::error::ProtoError;
use crate::frame::{read_u32_at, ChunkType, Frame, FrameKind, FrameReader, HEADER_LEN};

/// Part 6: no transport buffer may be smaller than this.
pub const MIN_BUFFER_SIZE: u32 = 8192;
/// Largest Hello we accept before negotiation (header + fields + a 4096-byte URL).
const MAX_HELLO_SIZE: u32 = 8192;
/// Longest endpoint URL a Hello may carry (Part 6).
const MAX_URL_LEN: usize = 4096;
/// Most bytes of response-encoding room a connection keeps between
/// responses. Publish and small Read responses fit and reuse it; a larger
/// response (a CreateSession response is about 24 KiB) gets its own room,
/// given back once encoded, so an idle connection does not hold its
/// largest response's size for its whole life.
pub const SCRATCH_KEEP: usize = 8 * 1024;

/// Limits the server applies to one connection; from `[server]` and `[isolation]`.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest chunk we accept (advertised as ReceiveBufferSize).
    pub receive_buffer_size: u32,
    /// Largest chunk we send.
    pub send_buffer_size: u32,
    /// Largest reassembled request (advertised as MaxMessageSize; never 0).
    pub max_message_size: u32,
    /// Most chunks per request (advertised as MaxChunkCount; never 0).
    pub max_chunk_count: u32,
    /// Time from accept until the channel must be open.
    pub handshake_timeout: Duration,
    /// Upper bound for a revised security token lifetime.
    pub max_token_lifetime: Duration,
    /// Lower bound for a revised security token lifetime.
    pub min_token_lifetime: Duration,
    /// Longest String accepted in a request.
    pub max_string_length: usize,
    /// Longest ByteString accepted in a request.
    pub max_byte_string_length: usize,
    /// Most elements in any array of a request.
    pub max_array_length: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            receive_buffer_size: 65536,
            send_buffer_size: 65536,
            max_message_size: 4 * 1024 * 1024,
            max_chunk_count: 4 * 1024 * 1024 / 8192 + 1,
            handshake_timeout: Duration::from_secs(120),
            max_token_lifetime: Duration::from_secs(3600),
            min_token_lifetime: Duration::from_secs(10),
            max_string_length: 65535,
            max_byte_string_length: 4 * 1024 * 1024,
            max_array_length: 100_000,
        }
    }
}

/// Where the bytes retained by incomplete multi-chunk messages are
/// accounted (the ReassemblyBytes stage of resource isolation). The
/// connection calls [`ReassemblyBudget::reserve`] for every intermediate
/// chunk it keeps, before keeping it, and [`ReassemblyBudget::release`]
/// when the message completes, is aborted, or the connection closes. A
/// single-chunk message, and the final chunk of a multi-chunk message, are
/// decoded at once and never retained, so they are never charged. A refusal
/// never waits: the partial message is discarded and the connection closes
/// with BadTcpNotEnoughResources.
pub trait ReassemblyBudget: Send {
    /// Tries to retain `bytes` more for the message being reassembled.
    /// `message_start` is true for the first retained chunk of a message
    /// (the moment an implementation re-evaluates who the caller is; the
    /// decision then holds for the rest of that message). Returns false when
    /// the chunk does not fit; nothing is charged then.
    fn reserve(&mut self, bytes: usize, message_start: bool) -> bool;
    /// Releases everything retained for the current message. Called when it
    /// completes, is aborted, or the connection closes; idempotent.
    fn release(&mut self);
}

/// Admission of OpenSecureChannel(Renew) work (the Handshake stage of
/// resource isolation): asked before a renewal is processed; `end` is
/// called when it is done, whatever the outcome.
pub trait RenewGate: Send {
    /// Whether a renewal may be processed now.
    fn try_begin(&mut self) -> bool;
    /// The renewal started by a successful `try_begin` is finished.
    fn end(&mut self);
}

/// The default gate: renewals are always processed.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenRenewGate;

impl RenewGate for OpenRenewGate {
    fn try_begin(&mut self) -> bool {
        true
    }

    fn end(&mut self) {}
}

/// The default budget: no limit beyond MaxMessageSize and MaxChunkCount.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnlimitedReassembly;

impl ReassemblyBudget for UnlimitedReassembly {
    fn reserve(&mut self, _bytes: usize, _message_start: bool) -> bool {
        true
    }

    fn release(&mut self) {}
}

/// What the client asked for in its OpenSecureChannel(Issue). The engine
/// decides (trust list, offered endpoints) and answers with
/// [`ServerConnection::accept_open`] or [`ServerConnection::reject_open`].
#[derive(Debug, Clone)]
pub struct OpenRequest {
    /// The requested security policy.
    pub policy: SecurityPolicy,
    /// The requested message security mode.
    pub mode: MessageSecurityMode,
    /// The client's certificate (DER), present when the policy is not None.
    pub client_certificate: Option<ByteString>,
}

/// Why a connection ended.
#[derive(Debug, Clone, PartialEq)]
pub enum CloseReason {
    /// The client sent CloseSecureChannel.
    ClientClosed,
    /// The peer misbehaved or a limit was hit; an Error message was sent.
    Error(ProtoError),
    /// The engine closed it (shutdown, admin action).
    Server(StatusCode),
}

/// Something the engine must act on.
#[derive(Debug)]
pub enum Event {
    /// The client asks to open a channel. Answer with accept/reject.
    OpenRequested(OpenRequest),
    /// The security token was renewed.
    Renewed {
        /// The new token id.
        token_id: u32,
    },
    /// A complete, decoded service request. Answer with [`ServerConnection::send_response`].
    Request {
        /// Id to echo in the response.
        request_id: u32,
        /// The decoded request.
        request: Box<RequestMessage>,
    },
    /// The connection is finished; flush [`ServerConnection::poll_transmit`] and close the socket.
    Closed(CloseReason),
}

/// Values fixed by the Hello/Acknowledge exchange.
#[derive(Debug, Clone)]
struct Negotiated {
    protocol_version: u32,
    /// Largest chunk we may send.
    send_chunk_size: u32,
    /// Largest message the client accepts (0 = no limit).
    peer_max_message_size: u32,
    /// Most chunks the client accepts (0 = no limit).
    peer_max_chunk_count: u32,
}

/// Waiting for the client's Hello.
#[derive(Debug)]
struct AwaitingHello {
    deadline: Instant,
}

/// Hello answered; waiting for OpenSecureChannel(Issue).
#[derive(Debug)]
struct AwaitingOpen {
    deadline: Instant,
    negotiated: Negotiated,
}

/// OpenSecureChannel received; waiting for the engine's decision.
#[derive(Debug)]
struct OpenPending {
    deadline: Instant,
    negotiated: Negotiated,
    request_id: u32,
    request: Box<OpenSecureChannelRequest>,
    sender_certificate: ByteString,
}

/// The channel is open and carries service messages.
#[derive(Debug)]
struct Open {
    negotiated: Negotiated,
    /// When the current token (plus the 25 % grace of Part 4) runs out.
    token_deadline: Instant,
    /// Chunks of the message being reassembled.
    pending: Vec<MessageChunk>,
    /// Body bytes held in `pending`.
    pending_bytes: usize,
    /// Bytes of the arrays held in `pending`, as charged to the budget.
    retained: usize,
    sender_certificate: ByteString,
}

#[derive(Debug)]
enum State {
    AwaitingHello(AwaitingHello),
    AwaitingOpen(AwaitingOpen),
    OpenPending(OpenPending),
    Open(Open),
    Closed,
}

impl State {
    fn name(&self) -> &'static str {
        match self {
            State::AwaitingHello(_) => "awaiting Hello",
            State::AwaitingOpen(_) => "awaiting OpenSecureChannel",
            State::OpenPending(_) => "opening the channel",
            State::Open(_) => "channel open",
            State::Closed => "closed",
        }
    }
}

/// The server side of one opc.tcp connection: UACP framing, secure channel and
/// chunk reassembly. See the module docs for how a driver uses it.
pub struct ServerConnection {
    limits: Limits,
    reader: FrameReader,
    state: State,
    channel: SecureChannel,
    seq_in: SequenceNumberHandle,
    seq_out: SequenceNumberHandle,
    events: VecDeque<Event>,
    transmit: VecDeque<Vec<u8>>,
    scratch: BytesMut,
    next_token_id: u32,
    /// Accounting for the chunks held in `Open::pending`.
    budget: Box<dyn ReassemblyBudget>,
    renew_gate: Box<dyn RenewGate>,
    /// The `now` given to [`ServerConnection::new`] and the wall-clock time
    /// at that moment: a token's CreatedAt is derived from them (this crate
    /// reads no clock).
    started: (Instant, DateTime),
}

impl std::fmt::Debug for ServerConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConnection")
            .field("state", &self.state.name())
            .field("channel_id", &self.channel.secure_channel_id())
            .finish()
    }
}

impl ServerConnection {
    /// A connection accepted at `now` (monotonic) = `wall_now` (UTC, for the
    /// CreatedAt of the security tokens it issues). `channel` carries our
    /// certificate and private key (role Server); its decoding limits are
    /// set from `limits`.
    pub fn new(
        limits: Limits,
        mut channel: SecureChannel,
        now: Instant,
        wall_now: DateTime,
    ) -> Self {
        let mut decoding = DecodingOptions {
            max_message_size: limits.max_message_size as usize,
            max_chunk_count: limits.max_chunk_count as usize,
            max_string_length: limits.max_string_length,
            max_byte_string_length: limits.max_byte_string_length,
            max_array_length: limits.max_array_length,
            ..DecodingOptions::default()
        };
        decoding.client_offset = chrono::Duration::zero();
        channel.set_decoding_options(decoding);
        ServerConnection {
            reader: FrameReader::new(MAX_HELLO_SIZE),
            state: State::AwaitingHello(AwaitingHello {
                deadline: now + limits.handshake_timeout,
            }),
            limits,
            channel,
            seq_in: SequenceNumberHandle::new(true),
            seq_out: SequenceNumberHandle::new(true),
            events: VecDeque::new(),
            transmit: VecDeque::new(),
            scratch: BytesMut::new(),
            next_token_id: 1,
            budget: Box::new(UnlimitedReassembly),
            renew_gate: Box::new(OpenRenewGate),
            started: (now, wall_now),
        }
    }

    /// Installs the gate that OpenSecureChannel(Renew) work must pass (by
    /// default [`OpenRenewGate`]); a refused renewal closes the channel with
    /// BadTcpNotEnoughResources.
    pub fn set_renew_gate(&mut self, gate: Box<dyn RenewGate>) {
        self.renew_gate = gate;
    }

    /// Installs the budget that intermediate chunks are charged to (by
    /// default [`UnlimitedReassembly`]). The driver sets it before
    /// [`ServerConnection::accept_open`]. A budget replaced while a partial
    /// message is held is released, and the new one is charged what is
    /// held; if that does not fit, the connection fails with
    /// BadTcpNotEnoughResources.
    pub fn set_reassembly_budget(&mut self, budget: Box<dyn ReassemblyBudget>) {
        let mut old = std::mem::replace(&mut self.budget, budget);
        old.release();
        let held = match &self.state {
            State::Open(open) => open.retained,
            _ => 0,
        };
        if held > 0 && !self.budget.reserve(held, true) {
            self.fail(ProtoError::ReassemblyBudgetExceeded {
                requested: held,
                retained: 0,
            });
        }
    }

    /// Bytes currently retained (and charged) for a partial message.
    pub fn reassembly_retained(&self) -> usize {
        match &self.state {
            State::Open(open) => open.retained,
            _ => 0,
        }
    }

    /// The secure channel (policy, mode, keys, remote certificate); the
    /// session layer uses it to sign and verify session signatures.
    pub fn secure_channel(&self) -> &SecureChannel {
        &self.channel
    }

    /// Whether the channel is open for service messages.
    pub fn is_open(&self) -> bool {
        matches!(self.state, State::Open(_))
    }

    /// Whether the channel is open with nothing in progress: no partially
    /// reassembled message and no unread bytes. Only such a channel may be
    /// reclaimed when connection capacity runs out.
    pub fn is_quiet(&self) -> bool {
        matches!(&self.state, State::Open(o) if o.pending.is_empty()) && self.reader.buffered() == 0
    }

    /// Bytes of response-encoding room the connection keeps between
    /// responses (at most about [`SCRATCH_KEEP`]).
    pub fn encode_room(&self) -> usize {
        self.scratch.capacity()
    }

    /// Whether the connection has ended; the driver closes the socket after
    /// flushing what [`ServerConnection::poll_transmit`] still holds.
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// Next event for the engine, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Next bytes to write to the socket, if any.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.transmit.pop_front()
    }

    /// When [`ServerConnection::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.state {
            State::AwaitingHello(s) => Some(s.deadline),
            State::AwaitingOpen(s) => Some(s.deadline),
            State::OpenPending(s) => Some(s.deadline),
            State::Open(s) => Some(s.token_deadline),
            State::Closed => None,
        }
    }

    /// Called by the driver when the time from `poll_timeout` has come.
    pub fn handle_timeout(&mut self, now: Instant) {
        let err = match &self.state {
            State::AwaitingHello(s) if now >= s.deadline => ProtoError::HandshakeTimeout,
            State::AwaitingOpen(s) if now >= s.deadline => ProtoError::HandshakeTimeout,
            State::OpenPending(s) if now >= s.deadline => ProtoError::HandshakeTimeout,
            State::Open(s) if now >= s.token_deadline => ProtoError::TokenExpired,
            _ => return,
        };
        self.fail(err);
    }

    /// Called by the driver with every batch of bytes read from the socket.
    pub fn handle_input(&mut self, data: &[u8], now: Instant) {
        if self.is_closed() {
            return;
        }
        self.reader.push(data);
        self.process_frames(now);
    }

    /// Closes the connection from the server side with `status`, sending an Error message.
    pub fn close(&mut self, status: StatusCode) {
        if self.is_closed() {
            return;
        }
        self.send_error(status, "closed by server");
        self.state = State::Closed;
        self.budget.release();
        self.events
            .push_back(Event::Closed(CloseReason::Server(status)));
    }

    fn process_frames(&mut self, now: Instant) {
        loop {
            if matches!(self.state, State::OpenPending(_) | State::Closed) {
                // Frames wait in the reader until the engine has decided.
                return;
            }
            let frame = match self.reader.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => return,
                Err(e) => return self.fail(e),
            };
            if let Err(e) = self.process_frame(frame, now) {
                return self.fail(e);
            }
        }
    }

    fn process_frame(&mut self, frame: Frame, now: Instant) -> Result<(), ProtoError> {
        match (&self.state, frame.kind) {
            (State::AwaitingHello(_), FrameKind::Hello) => self.on_hello(&frame),
            (State::AwaitingOpen(_), FrameKind::Open) => self.on_open_issue(frame),
            (State::Open(_), FrameKind::Open) => self.on_open_renew(frame, now),
            (State::Open(_), FrameKind::Message) => self.on_message(frame),
            (State::Open(_), FrameKind::Close) => self.on_close(frame),
            (state, kind) => Err(ProtoError::Unexpected {
                state: state.name(),
                expected: match state {
                    State::AwaitingHello(_) => "Hello",
                    State::AwaitingOpen(_) => "OpenSecureChannel",
                    _ => "Message, OpenSecureChannel(Renew) or CloseSecureChannel",
                },
                got: kind.name(),
            }),
        }
    }

    fn on_hello(&mut self, frame: &Frame) -> Result<(), ProtoError> {
        let State::AwaitingHello(AwaitingHello { deadline }) = self.state else {
            return Err(ProtoError::Unexpected {
                state: self.state.name(),
                expected: "Hello",
                got: "Hello",
            });
        };
        let opts = DecodingOptions {
            max_string_length: MAX_URL_LEN,
            ..DecodingOptions::minimal()
        };
        let hello = HelloMessage::decode(&mut &frame.bytes[..], &opts)
            .map_err(|_| ProtoError::EndpointUrlInvalid)?;
        if hello.protocol_version > 0 {
            return Err(ProtoError::ProtocolVersion(hello.protocol_version));
        }
        if hello.receive_buffer_size < MIN_BUFFER_SIZE || hello.send_buffer_size < MIN_BUFFER_SIZE {
            return Err(ProtoError::InvalidBufferSizes);
        }
        match hello.endpoint_url.value() {
            // UACP runs over TCP (opc.tcp) and WebSocket (opc.wss); a client
            // behind a TCP-to-WebSocket bridge names the bridge's opc.tcp URL.
            Some(url)
                if url.len() <= MAX_URL_LEN
                    && (url.starts_with("opc.tcp://") || url.starts_with("opc.wss://")) => {}
            _ => return Err(ProtoError::EndpointUrlInvalid),
        }
        let receive = self.limits.receive_buffer_size.min(hello.send_buffer_size);
        let send = self.limits.send_buffer_size.min(hello.receive_buffer_size);
        let ack = AcknowledgeMessage::new(
            0,
            receive,
            send,
            self.limits.max_message_size,
            self.limits.max_chunk_count,
        );
        let mut out = Vec::with_capacity(ack.byte_len());
        ack.encode(&mut out)
            .map_err(|e| ProtoError::Encoding(e.status()))?;
        self.transmit.push_back(out);
        self.reader.set_limit(receive);
        self.state = State::AwaitingOpen(AwaitingOpen {
            deadline,
            negotiated: Negotiated {
                protocol_version: hello.protocol_version,
                send_chunk_size: send,
                peer_max_message_size: hello.max_message_size,
                peer_max_chunk_count: hello.max_chunk_count,
            },
        });
        Ok(())
    }

    /// Removes security from an OPN frame and decodes its request.
    fn decode_open(
        &mut self,
        frame: Frame,
    ) -> Result<(u32, Box<OpenSecureChannelRequest>, ByteString), ProtoError> {
        let previous_policy = self.channel.security_policy();
        let chunk = self
            .channel
            .verify_and_remove_security_server(frame.bytes)?;
        let info = chunk.chunk_info(&self.channel)?;
        let SecurityHeader::Asymmetric(header) = info.security_header else {
            return Err(ProtoError::Security(StatusCode::BadSecurityChecksFailed));
        };
        if self.is_open() && self.channel.security_policy() != previous_policy {
            return Err(ProtoError::PolicyRejected);
        }
        self.seq_in
            .validate_and_increment(info.sequence_header.sequence_number)?;
        let request = crate::decode::decode_request(&[chunk], &self.channel)?;
        let RequestMessage::OpenSecureChannel(request) = request else {
            return Err(ProtoError::Unexpected {
                state: self.state.name(),
                expected: "OpenSecureChannelRequest",
                got: "another service request in an OPN frame",
            });
        };
        Ok((
            info.sequence_header.request_id,
            request,
            header.sender_certificate,
        ))
    }

    fn on_open_issue(&mut self, frame: Frame) -> Result<(), ProtoError> {
        let (request_id, request, sender_certificate) = self.decode_open(frame)?;
        let State::AwaitingOpen(AwaitingOpen { negotiated, .. }) = &self.state else {
            return Err(ProtoError::Unexpected {
                state: self.state.name(),
                expected: "OpenSecureChannel",
                got: "OpenSecureChannel",
            });
        };
        if request.request_type != SecurityTokenRequestType::Issue {
            return Err(ProtoError::Unexpected {
                state: "awaiting OpenSecureChannel",
                expected: "OpenSecureChannel(Issue)",
                got: "OpenSecureChannel(Renew)",
            });
        }
        if request.client_protocol_version != negotiated.protocol_version {
            return Err(ProtoError::ProtocolVersion(request.client_protocol_version));
        }
        let policy = self.channel.security_policy();
        let mode = request.security_mode;
        let consistent = match (policy, mode) {
            (_, MessageSecurityMode::Invalid) => false,
            (SecurityPolicy::None, m) => m == MessageSecurityMode::None,
            (_, m) => m != MessageSecurityMode::None,
        };
        if !consistent {
            return Err(ProtoError::ModeRejected);
        }
        // Only now leave AwaitingOpen: the checks above must fail while the
        // state is still open, or `fail` would skip the Error message.
        let State::AwaitingOpen(AwaitingOpen {
            deadline,
            negotiated,
        }) = std::mem::replace(&mut self.state, State::Closed)
        else {
            return Err(ProtoError::Unexpected {
                state: "closed",
                expected: "OpenSecureChannel",
                got: "OpenSecureChannel",
            });
        };
        self.events.push_back(Event::OpenRequested(OpenRequest {
            policy,
            mode,
            client_certificate: (!sender_certificate.is_null()).then(|| sender_certificate.clone()),
        }));
        self.state = State::OpenPending(OpenPending {
            deadline,
            negotiated,
            request_id,
            request,
            sender_certificate,
        });
        Ok(())
    }

    /// The engine accepts the pending OpenSecureChannel: the channel gets
    /// `channel_id`, keys are derived and the response is queued.
    pub fn accept_open(&mut self, channel_id: u32, now: Instant) {
        if !matches!(self.state, State::OpenPending(_)) {
            return;
        }
        let State::OpenPending(pending) = std::mem::replace(&mut self.state, State::Closed) else {
            return;
        };
        self.channel.set_secure_channel_id(channel_id);
        self.channel
            .set_security_mode(pending.request.security_mode);
        let result = self
            .channel
            .set_remote_cert_from_byte_string(&pending.sender_certificate)
            .map_err(ProtoError::from)
            .and_then(|_| {
                self.issue_token(
                    pending.request_id,
                    &pending.request,
                    &pending.negotiated,
                    now,
                )
            });
        match result {
            Ok(token_deadline) => {
                self.state = State::Open(Open {
                    negotiated: pending.negotiated,
                    token_deadline,
                    pending: Vec::new(),
                    pending_bytes: 0,
                    retained: 0,
                    sender_certificate: pending.sender_certificate,
                });
                self.process_frames(now);
            }
            Err(e) => self.fail_now(e),
        }
    }

    /// The engine refuses the pending OpenSecureChannel with `status`
    /// (for example BadCertificateUntrusted); an Error message is sent and
    /// the connection closes.
    pub fn reject_open(&mut self, status: StatusCode) {
        if matches!(self.state, State::OpenPending(_)) {
            self.fail(ProtoError::Refused(status));
        }
    }

    /// The wall-clock time at monotonic `now`.
    fn wall_time(&self, now: Instant) -> DateTime {
        let (mono, wall) = self.started;
        let since = chrono::Duration::from_std(now.saturating_duration_since(mono))
            .unwrap_or(chrono::Duration::zero());
        DateTime::from(wall.as_chrono() + since)
    }

    /// Sets nonces, token and keys from an Issue or Renew request and queues
    /// the response. Returns the new token's deadline.
    fn issue_token(
        &mut self,
        request_id: u32,
        request: &OpenSecureChannelRequest,
        negotiated: &Negotiated,
        now: Instant,
    ) -> Result<Instant, ProtoError> {
        let lifetime_ms = Duration::from_millis(u64::from(request.requested_lifetime))
            .clamp(
                self.limits.min_token_lifetime,
                self.limits.max_token_lifetime,
            )
            .as_millis() as u32;
        self.channel
            .validate_secure_channel_nonce_length(&request.client_nonce)?;
        self.channel
            .set_remote_nonce_from_byte_string(&request.client_nonce)?;
        self.channel.create_random_nonce();
        let token = ChannelSecurityToken {
            channel_id: self.channel.secure_channel_id(),
            token_id: self.next_token_id,
            created_at: self.wall_time(now),
            revised_lifetime: lifetime_ms,
        };
        self.next_token_id = self.next_token_id.wrapping_add(1).max(1);
        self.channel.set_security_token(token.clone());
        if self.channel.security_policy() != SecurityPolicy::None
            && self.channel.security_mode() != MessageSecurityMode::None
        {
            self.channel.derive_keys();
        }
        let response = OpenSecureChannelResponse {
            response_header: ResponseHeader::new_good(&request.request_header),
            server_protocol_version: 0,
            security_token: token,
            server_nonce: self.channel.local_nonce_as_byte_string(),
        };
        self.encode_and_queue(
            request_id,
            &ResponseMessage::OpenSecureChannel(Box::new(response)),
            negotiated,
        )?;
        // Part 4: a token stays usable for 25 % beyond its lifetime.
        Ok(now + Duration::from_millis(u64::from(lifetime_ms) * 5 / 4))
    }

    fn on_open_renew(&mut self, frame: Frame, now: Instant) -> Result<(), ProtoError> {
        if !self.renew_gate.try_begin() {
            return Err(ProtoError::RenewRefused);
        }
        let result = self.renew(frame, now);
        self.renew_gate.end();
        result
    }

    fn renew(&mut self, frame: Frame, now: Instant) -> Result<(), ProtoError> {
        let previous_nonce = self.channel.remote_nonce().to_vec();
        let (request_id, request, sender_certificate) = self.decode_open(frame)?;
        if request.request_type != SecurityTokenRequestType::Renew {
            return Err(ProtoError::Unexpected {
                state: "channel open",
                expected: "OpenSecureChannel(Renew)",
                got: "OpenSecureChannel(Issue)",
            });
        }
        let State::Open(open) = &self.state else {
            return Err(ProtoError::Unexpected {
                state: self.state.name(),
                expected: "OpenSecureChannel(Issue)",
                got: "OpenSecureChannel(Renew)",
            });
        };
        if sender_certificate != open.sender_certificate {
            return Err(ProtoError::Security(StatusCode::BadCertificateInvalid));
        }
        if request.security_mode != self.channel.security_mode() {
            return Err(ProtoError::ModeRejected);
        }
        if self.channel.security_policy() != SecurityPolicy::None
            && request.client_nonce.as_ref() == previous_nonce.as_slice()
        {
            return Err(ProtoError::Security(StatusCode::BadNonceInvalid));
        }
        let negotiated = open.negotiated.clone();
        let deadline = self.issue_token(request_id, &request, &negotiated, now)?;
        if let State::Open(open) = &mut self.state {
            open.token_deadline = deadline;
        }
        self.events.push_back(Event::Renewed {
            token_id: self.channel.token_id(),
        });
        Ok(())
    }

    fn check_channel_id(&self, frame: &Frame) -> Result<(), ProtoError> {
        let id = read_u32_at(&frame.bytes, 8).ok_or(ProtoError::FrameTooSmall(8))?;
        if id != self.channel.secure_channel_id() {
            return Err(ProtoError::ChannelIdInvalid(id));
        }
        // opcua-core 0.19 subtracts the signature size from the frame size
        // unchecked when removing symmetric security (a panic on a short
        // frame), so a secured frame must hold at least message header,
        // token id, sequence header and signature.
        if self.channel.security_policy() != SecurityPolicy::None
            && self.channel.security_mode() != MessageSecurityMode::None
        {
            let min =
                HEADER_LEN + 4 + 4 + 8 + self.channel.security_policy().symmetric_signature_size();
            if frame.bytes.len() < min {
                return Err(ProtoError::Decoding(format!(
                    "secured frame of {} bytes is shorter than {min}",
                    frame.bytes.len()
                )));
            }
        }
        Ok(())
    }

    fn on_message(&mut self, frame: Frame) -> Result<(), ProtoError> {
        self.check_channel_id(&frame)?;
        let chunk_type = frame.chunk;
        let chunk = self
            .channel
            .verify_and_remove_security_server(frame.bytes)?;
        let info = chunk.chunk_info(&self.channel)?;
        self.seq_in
            .validate_and_increment(info.sequence_header.sequence_number)?;
        let max_chunks = self.limits.max_chunk_count as usize;
        let max_size = self.limits.max_message_size as usize;
        let State::Open(open) = &mut self.state else {
            return Ok(());
        };
        if chunk_type == ChunkType::Abort {
            open.pending.clear();
            open.pending_bytes = 0;
            open.retained = 0;
            self.budget.release();
            return Ok(());
        }
        if let Some(first) = open.pending.first() {
            let first_id = first
                .chunk_info(&self.channel)
                .map(|i| i.sequence_header.request_id)?;
            if first_id != info.sequence_header.request_id {
                return Err(ProtoError::Security(StatusCode::BadSequenceNumberInvalid));
            }
        }
        open.pending_bytes += info.body_length;
        if open.pending.len() + 1 > max_chunks {
            return Err(ProtoError::TooManyChunks {
                limit: max_chunks as u32,
            });
        }
        if open.pending_bytes > max_size {
            return Err(ProtoError::MessageTooLarge {
                limit: max_size as u32,
            });
        }
        if chunk_type == ChunkType::Intermediate {
            // Kept in an array of its own, so the charge is exactly what the
            // chunk holds (the frame would otherwise pin the reader's buffer).
            let kept = MessageChunk {
                data: Bytes::copy_from_slice(&chunk.data),
            };
            let requested = kept.data.len();
            if !self.budget.reserve(requested, open.pending.is_empty()) {
                return Err(ProtoError::ReassemblyBudgetExceeded {
                    requested,
                    retained: open.retained,
                });
            }
            open.retained += requested;
            open.pending.push(kept);
            return Ok(());
        }
        open.pending.push(chunk);
        let chunks = std::mem::take(&mut open.pending);
        open.pending_bytes = 0;
        open.retained = 0;
        self.budget.release();
        let request_id = info.sequence_header.request_id;
        match crate::decode::decode_request(&chunks, &self.channel) {
            Ok(request) => {
                self.events.push_back(Event::Request {
                    request_id,
                    request: Box::new(request),
                });
                Ok(())
            }
            // A request whose header decoded gets a ServiceFault and the
            // channel stays usable; anything else closes the channel.
            Err(ProtoError::RequestUndecodable { request_handle, .. }) => {
                let fault = ServiceFault {
                    response_header: ResponseHeader::new_service_result(
                        request_handle,
                        StatusCode::BadDecodingError,
                    ),
                };
                self.send_response(request_id, ResponseMessage::ServiceFault(Box::new(fault)));
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn on_close(&mut self, frame: Frame) -> Result<(), ProtoError> {
        self.check_channel_id(&frame)?;
        let _ = self
            .channel
            .verify_and_remove_security_server(frame.bytes)?;
        self.state = State::Closed;
        self.budget.release();
        self.events
            .push_back(Event::Closed(CloseReason::ClientClosed));
        Ok(())
    }

    /// Queues the response to request `request_id`. A response that does not
    /// fit the client's limits becomes a ServiceFault (BadResponseTooLarge).
    pub fn send_response(&mut self, request_id: u32, response: ResponseMessage) {
        let State::Open(open) = &self.state else {
            return;
        };
        let negotiated = open.negotiated.clone();
        if let Err(e) = self.encode_and_queue(request_id, &response, &negotiated) {
            let fault = ServiceFault {
                response_header: ResponseHeader::new_service_result(
                    response.request_handle(),
                    e.status(),
                ),
            };
            if let Err(e) = self.encode_and_queue(
                request_id,
                &ResponseMessage::ServiceFault(Box::new(fault)),
                &negotiated,
            ) {
                self.fail(e);
            }
        }
    }

    fn encode_and_queue(
        &mut self,
        request_id: u32,
        message: &ResponseMessage,
        negotiated: &Negotiated,
    ) -> Result<(), ProtoError> {
        let mut chunks = Vec::new();
        self.scratch.clear();
        let count = Chunker::encode_into(
            self.seq_out.clone(),
            request_id,
            negotiated.peer_max_message_size as usize,
            negotiated.send_chunk_size as usize,
            &self.channel,
            message,
            &mut self.scratch,
            &mut chunks,
        )
        .map_err(|e| ProtoError::Encoding(e.status()))?;
        if negotiated.peer_max_chunk_count > 0 && count > negotiated.peer_max_chunk_count as usize {
            return Err(ProtoError::Encoding(StatusCode::BadResponseTooLarge));
        }
        self.seq_out.increment(count as u32);
        let options = self.channel.decoding_options();
        for chunk in &chunks {
            // Symmetric security adds at most a block of padding and a
            // signature; only the asymmetric (OpenSecureChannel) encryption
            // can grow a chunk by more. Sizing the buffer to that keeps every
            // response from zero-filling a whole extra chunk.
            let room = if chunk.is_open_secure_channel(&options) {
                negotiated.send_chunk_size as usize + 1024
            } else {
                1024
            };
            let mut dst = vec![0u8; chunk.data.len() + room];
            let n = self
                .channel
                .apply_security(chunk, &mut dst)
                .map_err(ProtoError::Encoding)?;
            dst.truncate(n);
            self.transmit.push_back(dst);
        }
        // The chunks were copied out: a scratch grown by a large response
        // (a CreateSession response with the endpoints and their
        // certificates is about 24 KiB) is given back instead of staying
        // with the connection for its life.
        drop(chunks);
        if self.scratch.capacity() > SCRATCH_KEEP {
            self.scratch = BytesMut::new();
        }
        Ok(())
    }

    fn send_error(&mut self, status: StatusCode, reason: &str) {
        let msg = ErrorMessage::new(status, reason);
        let mut out = Vec::with_capacity(msg.byte_len());
        if msg.encode(&mut out).is_ok() {
            self.transmit.push_back(out);
        }
    }

    /// Sends an Error message with the error's status and closes. The reason
    /// text on the wire is the status name only; details stay in our logs.
    fn fail(&mut self, err: ProtoError) {
        if self.is_closed() {
            return;
        }
        self.fail_now(err);
    }

    /// Like [`ServerConnection::fail`], for callers that already moved the
    /// state out (and so left `Closed` behind) before the error happened.
    fn fail_now(&mut self, err: ProtoError) {
        tracing::debug!(error = %err, "closing connection");
        let status = err.status();
        self.send_error(status, &status.to_string());
        self.state = State::Closed;
        self.budget.release();
        self.events
            .push_back(Event::Closed(CloseReason::Error(err)));
    }
}
