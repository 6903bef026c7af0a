//! The bodies of the fuzz targets, shared by `fuzz/fuzz_targets/*` (via
//! `#[path]`) and by `tests/fuzz_smoke.rs`, which runs them as a bounded,
//! deterministic loop on stable. Every function checks the invariants that
//! must hold for any input; a violation panics.
#![allow(dead_code)]

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use opcua_core::comms::chunker::Chunker;
use opcua_core::comms::message_chunk::{MessageChunk, MessageChunkType, MessageIsFinalType};
use opcua_core::comms::secure_channel::{Role, SecureChannel};
use opcua_core::comms::sequence_number::SequenceNumberHandle;
use opcua_core::comms::tcp_types::HelloMessage;
use opcua_core::sync::RwLock;
use opcua_core::{Message, RequestMessage, ResponseMessage};
use opcua_crypto::{CertificateStore, PrivateKey, SecurityPolicy, X509Data, X509};
use opcua_types::{
    ChannelSecurityToken, CloseSecureChannelRequest, ContextOwned, DateTime, MessageSecurityMode,
    NodeId, OpenSecureChannelRequest, ReadRequest, ReadValueId, RequestHeader,
    SecurityTokenRequestType, ServiceFault, SimpleBinaryEncodable, StatusCode, TimestampsToReturn,
};
use uagate_proto::frame::{ChunkType, FrameKind, FrameReader, HEADER_LEN};
use uagate_proto::{CloseReason, Event, Limits, ServerConnection};

/// Channel id the harness's engine assigns when it accepts an open.
pub const CHANNEL_ID: u32 = 1;

/// Splits `data` into pieces whose lengths are taken from `data` itself, so a
/// fuzzer controls both the bytes and how the transport delivers them.
pub fn splits(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    let mut i = 0usize;
    while !rest.is_empty() {
        let n = (usize::from(rest[0] ^ (i as u8)) % 97 + 1).min(rest.len());
        let (a, b) = rest.split_at(n);
        out.push(a);
        rest = b;
        i += 1;
    }
    out
}

/// Target `uacp_framing`: a FrameReader fed arbitrary bytes in arbitrary splits.
/// The first two bytes choose the frame limit (8 ..= 65543).
pub fn uacp_framing(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let limit = u32::from(u16::from_le_bytes([data[0], data[1]])) + HEADER_LEN as u32;
    let body = &data[2..];
    let mut reader = FrameReader::new(limit);
    let mut consumed = 0usize;
    let mut pushed = 0usize;
    'outer: for piece in splits(body) {
        reader.push(piece);
        pushed += piece.len();
        loop {
            match reader.next_frame() {
                Ok(Some(frame)) => {
                    let bytes = &frame.bytes[..];
                    assert!(bytes.len() >= HEADER_LEN);
                    assert!(bytes.len() <= limit as usize);
                    let declared = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
                    assert_eq!(declared as usize, bytes.len());
                    // The frame is exactly the next slice of the input.
                    assert_eq!(bytes, &body[consumed..consumed + bytes.len()]);
                    consumed += bytes.len();
                    match frame.chunk {
                        ChunkType::Final => assert_eq!(bytes[3], b'F'),
                        ChunkType::Intermediate => {
                            assert_eq!(frame.kind, FrameKind::Message);
                            assert_eq!(bytes[3], b'C');
                        }
                        ChunkType::Abort => {
                            assert_eq!(frame.kind, FrameKind::Message);
                            assert_eq!(bytes[3], b'A');
                        }
                    }
                }
                Ok(None) => {
                    assert_eq!(reader.buffered(), pushed - consumed);
                    // Never more than one (bounded) partial frame is held.
                    assert!(reader.buffered() < (limit as usize).max(HEADER_LEN));
                    break;
                }
                Err(_) => break 'outer,
            }
        }
    }
}

/// A server-role channel without certificates (policy None only).
pub fn none_server_channel() -> SecureChannel {
    SecureChannel::new(
        Arc::new(RwLock::new(CertificateStore::new(Path::new(
            "/nonexistent/uagate-fuzz-pki",
        )))),
        Role::Server,
        Arc::new(RwLock::new(ContextOwned::default())),
    )
}

/// A client-role channel for policy None, already carrying the token the
/// harness's engine will issue (channel [`CHANNEL_ID`], token 1).
fn none_client_channel() -> SecureChannel {
    let mut ch = SecureChannel::new(
        Arc::new(RwLock::new(CertificateStore::new(Path::new(
            "/nonexistent/uagate-fuzz-pki",
        )))),
        Role::Client,
        Arc::new(RwLock::new(ContextOwned::default())),
    );
    ch.set_security_token(ChannelSecurityToken {
        channel_id: CHANNEL_ID,
        token_id: 1,
        created_at: DateTime::now(),
        revised_lifetime: 60_000,
    });
    ch
}

fn encode_frames(
    ch: &SecureChannel,
    seq: &mut SequenceNumberHandle,
    request_id: u32,
    msg: &impl Message,
    chunk_size: usize,
) -> Vec<u8> {
    let chunks = Chunker::encode(seq.clone(), request_id, 0, chunk_size, ch, msg)
        .expect("encode seed message");
    seq.increment(chunks.len() as u32);
    let mut out = Vec::new();
    for c in &chunks {
        out.extend_from_slice(&c.data);
    }
    out
}

fn header(handle: u32) -> RequestHeader {
    RequestHeader::new(&NodeId::null(), &DateTime::now(), handle)
}

/// Valid streams: (Hello + OPN Issue prefix, then reads in 1 and in several
/// chunks, a Renew and a Close). Used as the fixed prefix of the
/// `secure_channel_input` target and as seeds for mutation.
pub fn seed_streams() -> &'static (Vec<u8>, Vec<u8>) {
    static SEEDS: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let ch = none_client_channel();
        let mut seq = SequenceNumberHandle::new(true);
        let mut prefix = Vec::new();
        HelloMessage::new("opc.tcp://fuzz:4840/", 65536, 65536, 0, 0)
            .encode(&mut prefix)
            .expect("hello");
        let open = |handle, kind| {
            RequestMessage::from(OpenSecureChannelRequest {
                request_header: header(handle),
                client_protocol_version: 0,
                request_type: kind,
                security_mode: MessageSecurityMode::None,
                client_nonce: opcua_types::ByteString::null(),
                requested_lifetime: 60_000,
            })
        };
        prefix.extend(encode_frames(
            &ch,
            &mut seq,
            1,
            &open(1, SecurityTokenRequestType::Issue),
            8192,
        ));
        let read = |handle, n: usize| {
            RequestMessage::from(ReadRequest {
                request_header: header(handle),
                max_age: 0.0,
                timestamps_to_return: TimestampsToReturn::Both,
                nodes_to_read: Some(
                    (0..n)
                        .map(|i| ReadValueId {
                            node_id: NodeId::new(2, i as u32),
                            attribute_id: 13,
                            ..Default::default()
                        })
                        .collect(),
                ),
            })
        };
        let mut rest = Vec::new();
        rest.extend(encode_frames(&ch, &mut seq, 2, &read(2, 3), 8192));
        rest.extend(encode_frames(&ch, &mut seq, 3, &read(3, 700), 8192));
        rest.extend(encode_frames(
            &ch,
            &mut seq,
            4,
            &open(4, SecurityTokenRequestType::Renew),
            8192,
        ));
        rest.extend(encode_frames(
            &ch,
            &mut seq,
            5,
            &RequestMessage::from(CloseSecureChannelRequest {
                request_header: header(5),
            }),
            8192,
        ));
        (prefix, rest)
    })
}

/// Small limits so that fuzz inputs can reach the size and count checks.
pub fn fuzz_limits() -> Limits {
    Limits {
        receive_buffer_size: 16384,
        send_buffer_size: 16384,
        max_message_size: 64 * 1024,
        max_chunk_count: 8,
        handshake_timeout: Duration::from_secs(10),
        max_token_lifetime: Duration::from_secs(60),
        min_token_lifetime: Duration::from_secs(10),
        max_string_length: 4096,
        max_byte_string_length: 4096,
        max_array_length: 1024,
    }
}

/// Checks one frame the server sent: well formed and of a server-side kind.
fn check_sent_frame(frame: &[u8], limits: &Limits) {
    assert!(frame.len() >= HEADER_LEN, "short frame sent");
    let declared = u32::from_le_bytes([frame[4], frame[5], frame[6], frame[7]]);
    assert_eq!(declared as usize, frame.len(), "sent frame size mismatch");
    assert!(frame.len() <= limits.send_buffer_size as usize + 1024);
    assert!(
        matches!(&frame[..3], b"ACK" | b"ERR" | b"OPN" | b"MSG"),
        "server sent {:?}",
        &frame[..3]
    );
}

/// Drives a connection through `input` like a driver plus a trivial engine
/// would: accepts opens, answers requests with a ServiceFault, follows
/// `poll_timeout`. `clock` bytes of the input also advance simulated time.
/// Returns why the connection closed while the input was fed, if it did
/// (a close by the final deadline is not reported).
fn drive(
    conn: &mut ServerConnection,
    input: &[u8],
    mut now: Instant,
    limits: &Limits,
) -> Option<CloseReason> {
    let mut closed = false;
    let mut reason = None;
    let mut pump = |conn: &mut ServerConnection, now: Instant, closed: &mut bool| {
        while let Some(ev) = conn.poll_event() {
            assert!(!*closed, "event after Closed: {ev:?}");
            match ev {
                Event::OpenRequested(_) => conn.accept_open(CHANNEL_ID, now),
                Event::Request {
                    request_id,
                    request,
                } => {
                    let fault = ServiceFault {
                        response_header: opcua_types::ResponseHeader::new_service_result(
                            request.request_handle(),
                            opcua_types::StatusCode::BadServiceUnsupported,
                        ),
                    };
                    conn.send_response(request_id, ResponseMessage::ServiceFault(Box::new(fault)));
                }
                Event::Renewed { token_id } => assert!(token_id > 1),
                Event::Closed(why) => {
                    reason.get_or_insert(why);
                    *closed = true;
                    assert!(conn.is_closed());
                }
            }
        }
        while let Some(f) = conn.poll_transmit() {
            check_sent_frame(&f, limits);
        }
        if *closed {
            assert!(conn.poll_timeout().is_none());
        }
    };
    pump(conn, now, &mut closed);
    for (i, piece) in splits(input).into_iter().enumerate() {
        conn.handle_input(piece, now);
        pump(conn, now, &mut closed);
        // Every few pieces, let simulated time pass.
        if i % 4 == 3 {
            now += Duration::from_millis(u64::from(piece[0]) * 20);
            if let Some(t) = conn.poll_timeout() {
                if now >= t {
                    conn.handle_timeout(now);
                }
            }
            pump(conn, now, &mut closed);
        }
    }
    if closed {
        return reason;
    }
    // Finally, the handshake or token deadline must close the connection.
    if let Some(t) = conn.poll_timeout() {
        conn.handle_timeout(t);
        pump(conn, t, &mut closed);
        assert!(closed, "deadline passed but the connection stayed open");
    }
    None
}

/// Target `secure_channel_input`: a ServerConnection fed arbitrary bytes.
/// With `prefix`, the bytes follow a valid Hello + OPN(None) handshake that
/// the harness accepts, so they reach the open channel's MSG/OPN/CLO paths.
pub fn secure_channel_input(data: &[u8], prefix: bool) {
    let limits = fuzz_limits();
    let now = Instant::now();
    let mut conn =
        ServerConnection::new(limits.clone(), none_server_channel(), now, DateTime::now());
    if prefix {
        let (p, _) = seed_streams();
        conn.handle_input(p, now);
        let Some(Event::OpenRequested(_)) = conn.poll_event() else {
            panic!("valid prefix did not request an open");
        };
        conn.accept_open(CHANNEL_ID, now);
        assert!(conn.is_open(), "valid prefix did not open the channel");
        while let Some(f) = conn.poll_transmit() {
            check_sent_frame(&f, &limits);
        }
    }
    drive(&mut conn, data, now, &limits);
}

/// The policy and mode combinations the gateway can offer (see
/// `uagate_server::endpoints::security_policy`); the first byte of a
/// `secure_channel_policies` input picks one (low three bits, modulo 7).
pub const POLICIES: [(SecurityPolicy, MessageSecurityMode); 7] = [
    (SecurityPolicy::None, MessageSecurityMode::None),
    (SecurityPolicy::Basic256Sha256, MessageSecurityMode::Sign),
    (
        SecurityPolicy::Basic256Sha256,
        MessageSecurityMode::SignAndEncrypt,
    ),
    (
        SecurityPolicy::Aes128Sha256RsaOaep,
        MessageSecurityMode::Sign,
    ),
    (
        SecurityPolicy::Aes128Sha256RsaOaep,
        MessageSecurityMode::SignAndEncrypt,
    ),
    (
        SecurityPolicy::Aes256Sha256RsaPss,
        MessageSecurityMode::Sign,
    ),
    (
        SecurityPolicy::Aes256Sha256RsaPss,
        MessageSecurityMode::SignAndEncrypt,
    ),
];

/// Bit of the first byte of a `secure_channel_policies` input that makes
/// the harness seal the rest as the body of MSG chunks (instead of feeding
/// it raw after the handshake).
pub const SEALED: u8 = 0x08;

/// Largest plaintext body the harness puts into one sealed MSG chunk; a
/// longer body is sent as intermediate chunks plus a final one.
const SEALED_CHUNK_BODY: usize = 4096;

/// Server and client key pairs, generated once per process (RSA key
/// generation is far slower than a handshake).
struct Keys {
    server: (X509, PrivateKey),
    client: (X509, PrivateKey),
}

fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let make = |name: &str| {
            X509::cert_and_pkey(&X509Data {
                key_size: 2048,
                common_name: name.to_string(),
                organization: "uagate".to_string(),
                organizational_unit: "fuzz".to_string(),
                country: "DE".to_string(),
                state: "Berlin".to_string(),
                alt_host_names: vec![format!("urn:uagate:fuzz:{name}"), "localhost".to_string()]
                    .into(),
                certificate_duration_days: 3650,
            })
            .expect("generate fuzz key pair")
        };
        Keys {
            server: make("server"),
            client: make("client"),
        }
    })
}

/// The client end of a channel that the harness opens with a given policy
/// and then uses to seal fuzz bytes as MSG bodies.
pub struct SealingClient {
    channel: SecureChannel,
    seq: SequenceNumberHandle,
    next_request_id: u32,
}

impl SealingClient {
    fn new(policy: SecurityPolicy, mode: MessageSecurityMode) -> Self {
        let mut channel = SecureChannel::new(
            Arc::new(RwLock::new(CertificateStore::new(Path::new(
                "/nonexistent/uagate-fuzz-pki",
            )))),
            Role::Client,
            Arc::new(RwLock::new(ContextOwned::default())),
        );
        channel.set_security_policy(policy);
        channel.set_security_mode(mode);
        if policy != SecurityPolicy::None {
            let k = keys();
            channel.set_cert(Some(k.client.0.clone()));
            channel.set_private_key(Some(k.client.1.clone()));
            channel.set_remote_cert(Some(k.server.0.clone()));
        }
        SealingClient {
            channel,
            seq: SequenceNumberHandle::new(true),
            next_request_id: 1,
        }
    }

    /// Secured frames carrying `msg`.
    fn encode(&mut self, msg: &impl Message) -> Vec<u8> {
        let request_id = self.next_request_id;
        self.next_request_id += 1;
        let chunks = Chunker::encode(self.seq.clone(), request_id, 0, 8192, &self.channel, msg)
            .expect("encode handshake message");
        self.seq.increment(chunks.len() as u32);
        chunks.iter().flat_map(|c| self.secure(c)).collect()
    }

    fn secure(&self, chunk: &MessageChunk) -> Vec<u8> {
        let mut dst = vec![0u8; chunk.data.len() * 2 + 8192];
        let n = self
            .channel
            .apply_security(chunk, &mut dst)
            .expect("apply security");
        dst.truncate(n);
        dst
    }

    /// `body` (the encoded request, type id first) as correctly secured MSG
    /// chunks of one request: whatever the server finds wrong with them, it
    /// is past the signature and decryption.
    pub fn seal(&mut self, body: &[u8]) -> Vec<u8> {
        let request_id = self.next_request_id;
        self.next_request_id += 1;
        let pieces: Vec<&[u8]> = if body.is_empty() {
            vec![body]
        } else {
            body.chunks(SEALED_CHUNK_BODY).collect()
        };
        let last = pieces.len() - 1;
        let mut out = Vec::new();
        for (i, piece) in pieces.into_iter().enumerate() {
            let fin = if i == last {
                MessageIsFinalType::Final
            } else {
                MessageIsFinalType::Intermediate
            };
            let chunk = MessageChunk::new(
                self.seq.current(),
                request_id,
                MessageChunkType::Message,
                fin,
                &self.channel,
                piece,
            )
            .expect("make MSG chunk");
            self.seq.increment(1);
            out.extend(self.secure(&chunk));
        }
        out
    }
}

/// A server connection with the harness's server certificate, opened by a
/// full Hello + OpenSecureChannel(Issue) handshake with `policy`/`mode`,
/// and the client that opened it (keys derived, token set).
pub fn open_secured(
    policy: SecurityPolicy,
    mode: MessageSecurityMode,
    limits: &Limits,
    now: Instant,
) -> (ServerConnection, SealingClient) {
    let k = keys();
    let mut server_channel = none_server_channel();
    server_channel.set_cert(Some(k.server.0.clone()));
    server_channel.set_private_key(Some(k.server.1.clone()));
    let mut conn = ServerConnection::new(limits.clone(), server_channel, now, DateTime::now());
    let mut hello = Vec::new();
    HelloMessage::new("opc.tcp://fuzz:4840/", 65536, 65536, 0, 0)
        .encode(&mut hello)
        .expect("hello");
    conn.handle_input(&hello, now);
    let ack = conn.poll_transmit().expect("ACK");
    assert_eq!(&ack[..4], b"ACKF");

    let mut client = SealingClient::new(policy, mode);
    let nonce = policy.random_nonce();
    client.channel.set_local_nonce(nonce.as_ref());
    let open = RequestMessage::from(OpenSecureChannelRequest {
        request_header: header(1),
        client_protocol_version: 0,
        request_type: SecurityTokenRequestType::Issue,
        security_mode: mode,
        client_nonce: nonce,
        requested_lifetime: 60_000,
    });
    let opn = client.encode(&open);
    conn.handle_input(&opn, now);
    match conn.poll_event() {
        Some(Event::OpenRequested(req)) => {
            assert_eq!((req.policy, req.mode), (policy, mode));
        }
        other => panic!("{policy:?}/{mode:?}: expected OpenRequested, got {other:?}"),
    }
    conn.accept_open(CHANNEL_ID, now);
    assert!(conn.is_open(), "{policy:?}/{mode:?}: channel did not open");
    let mut chunks = Vec::new();
    while let Some(f) = conn.poll_transmit() {
        check_sent_frame(&f, limits);
        assert_eq!(&f[..3], b"OPN");
        chunks.push(
            client
                .channel
                .verify_and_remove_security(Bytes::from(f))
                .expect("client verifies the OPN response"),
        );
    }
    let response = match Chunker::decode(&chunks, &client.channel, None) {
        Ok(ResponseMessage::OpenSecureChannel(r)) => r,
        other => panic!("expected OpenSecureChannelResponse, got {other:?}"),
    };
    client
        .channel
        .set_security_token(response.security_token.clone());
    if policy != SecurityPolicy::None {
        client
            .channel
            .set_remote_nonce_from_byte_string(&response.server_nonce)
            .expect("server nonce");
        client.channel.derive_keys();
    }
    (conn, client)
}

/// Target `secure_channel_policies`: a channel opened with the policy and
/// mode that `data[0]` picks (see [`POLICIES`]), then the rest of `data`
/// either fed raw (forged frames: bad signatures, padding, lengths) or,
/// with [`SEALED`] set, sealed by the client as the plaintext body of MSG
/// chunks, so the server's request decoding after successful crypto is
/// reached. Sealed input never fails the security checks.
pub fn secure_channel_policies(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let (policy, mode) = POLICIES[usize::from(pick & 0x07) % POLICIES.len()];
    let limits = fuzz_limits();
    let now = Instant::now();
    let (mut conn, mut client) = open_secured(policy, mode, &limits, now);
    if pick & SEALED == 0 {
        drive(&mut conn, rest, now, &limits);
        return;
    }
    let sealed = client.seal(rest);
    if let Some(CloseReason::Error(e)) = drive(&mut conn, &sealed, now, &limits) {
        assert!(
            !matches!(
                e.status(),
                StatusCode::BadSecurityChecksFailed
                    | StatusCode::BadSequenceNumberInvalid
                    | StatusCode::BadSecureChannelTokenUnknown
            ),
            "{policy:?}/{mode:?}: correctly sealed input failed the security checks: {e:?}"
        );
    }
}

/// The body of a MSG carrying `msg`: its binary encoding id, then the
/// message.
pub fn encode_body(msg: &RequestMessage) -> Vec<u8> {
    let owned = ContextOwned::default();
    let ctx = owned.context();
    let mut out = Vec::new();
    opcua_types::BinaryEncodable::encode(&msg.type_id(), &mut out, &ctx).expect("encode type id");
    opcua_types::BinaryEncodable::encode(msg, &mut out, &ctx).expect("encode seed body");
    out
}

/// Valid bodies for the sealed half of `secure_channel_policies`: encoded
/// requests (type id first) as a client sends them.
pub fn sealed_seed_bodies() -> Vec<Vec<u8>> {
    let read = RequestMessage::from(ReadRequest {
        request_header: header(2),
        max_age: 0.0,
        timestamps_to_return: TimestampsToReturn::Both,
        nodes_to_read: Some(vec![ReadValueId {
            node_id: NodeId::new(2, "Device1.Temperature"),
            attribute_id: 13,
            ..Default::default()
        }]),
    });
    let close = RequestMessage::from(CloseSecureChannelRequest {
        request_header: header(3),
    });
    [read, close].iter().map(encode_body).collect()
}
