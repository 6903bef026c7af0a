//! Shared test harness: a real opcua-core client-role secure channel that
//! produces and consumes frames, and helpers to drive a [`ServerConnection`]
//! with simulated time.
#![allow(dead_code)]

pub mod fuzz_harness;
pub mod mutate;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use opcua_core::comms::chunker::Chunker;
use opcua_core::comms::secure_channel::{Role, SecureChannel};
use opcua_core::comms::sequence_number::SequenceNumberHandle;
use opcua_core::comms::tcp_types::{AcknowledgeMessage, ErrorMessage, HelloMessage};
use opcua_core::sync::RwLock;
use opcua_core::{Message, RequestMessage, ResponseMessage};
use opcua_crypto::{CertificateStore, SecurityPolicy};
use opcua_types::{
    ContextOwned, DateTime, DecodingOptions, MessageSecurityMode, NodeId, OpenSecureChannelRequest,
    OpenSecureChannelResponse, ReadRequest, ReadValueId, RequestHeader, SecurityTokenRequestType,
    SimpleBinaryDecodable, SimpleBinaryEncodable, StatusCode, TimestampsToReturn,
};
use uagate_proto::{CloseReason, Event, Limits, ServerConnection};

pub const URL: &str = "opc.tcp://localhost:4840/";

/// Decoding options generous enough for every test message.
pub fn generous_decoding() -> DecodingOptions {
    DecodingOptions {
        client_offset: chrono::Duration::zero(),
        max_message_size: 0,
        max_chunk_count: 0,
        max_array_length: 1_000_000,
        ..DecodingOptions::default()
    }
}

/// A server-role secure channel whose certificate store lives in `pki`.
pub fn server_channel(pki: &Path) -> SecureChannel {
    let store = CertificateStore::new(pki);
    SecureChannel::new(
        Arc::new(RwLock::new(store)),
        Role::Server,
        Arc::new(RwLock::new(ContextOwned::default())),
    )
}

/// A fresh server connection accepted at `now`, with no certificate (policy None only).
pub fn server(limits: Limits, pki: &Path, now: Instant) -> ServerConnection {
    ServerConnection::new(limits, server_channel(pki), now, DateTime::now())
}

/// Encodes a HEL frame. Note the argument order of this helper: receive first.
pub fn hello(recv: u32, send: u32, max_msg: u32, max_chunks: u32) -> Vec<u8> {
    hello_url(URL, recv, send, max_msg, max_chunks)
}

pub fn hello_url(url: &str, recv: u32, send: u32, max_msg: u32, max_chunks: u32) -> Vec<u8> {
    let msg = HelloMessage::new(
        url,
        send as usize,
        recv as usize,
        max_msg as usize,
        max_chunks as usize,
    );
    let mut out = Vec::new();
    msg.encode(&mut out).unwrap();
    out
}

/// Everything a connection produced since the last drain.
#[derive(Debug, Default)]
pub struct Output {
    pub frames: Vec<Vec<u8>>,
    pub events: Vec<Event>,
}

pub fn drain(conn: &mut ServerConnection) -> Output {
    let mut out = Output::default();
    while let Some(f) = conn.poll_transmit() {
        out.frames.push(f);
    }
    while let Some(e) = conn.poll_event() {
        out.events.push(e);
    }
    out
}

/// Decodes an ERR frame and returns its status.
pub fn error_status(frame: &[u8]) -> StatusCode {
    assert_eq!(&frame[..4], b"ERRF", "not an ERR frame: {:?}", &frame[..4]);
    let size = u32::from_le_bytes([frame[4], frame[5], frame[6], frame[7]]) as usize;
    assert_eq!(size, frame.len(), "ERR frame size mismatch");
    let msg = ErrorMessage::decode(&mut &frame[..], &DecodingOptions::default()).unwrap();
    msg.error
}

pub fn decode_ack(frame: &[u8]) -> AcknowledgeMessage {
    assert_eq!(&frame[..4], b"ACKF");
    AcknowledgeMessage::decode(&mut &frame[..], &DecodingOptions::default()).unwrap()
}

/// Asserts that the connection sent exactly one ERR with `status` as its last
/// frame, reported Closed(Error) with that status, and is closed.
pub fn assert_failed(conn: &mut ServerConnection, status: StatusCode) -> Output {
    let out = drain(conn);
    let last = out.frames.last().expect("an ERR frame");
    assert_eq!(error_status(last), status, "ERR status");
    let closes: Vec<_> = out
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Closed(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        closes.len(),
        1,
        "exactly one Closed event: {:?}",
        out.events
    );
    match &closes[0] {
        CloseReason::Error(e) => assert_eq!(e.status(), status, "close reason {e:?}"),
        other => panic!("unexpected close reason {other:?}"),
    }
    assert!(conn.is_closed());
    assert!(conn.poll_timeout().is_none());
    // A closed connection ignores everything.
    conn.handle_input(&hello(65536, 65536, 0, 0), Instant::now());
    assert!(conn.poll_transmit().is_none());
    assert!(conn.poll_event().is_none());
    out
}

/// The client end of a channel, built on opcua-core's own client-role SecureChannel.
pub struct Client {
    pub channel: SecureChannel,
    send_seq: SequenceNumberHandle,
    recv_seq: SequenceNumberHandle,
    next_request_id: u32,
    next_handle: u32,
}

impl Client {
    /// A client for `policy`/`mode`; `pki` holds no certificate (use `with_cert` for secure policies).
    pub fn new(pki: &Path, policy: SecurityPolicy, mode: MessageSecurityMode) -> Self {
        let mut channel = SecureChannel::new(
            Arc::new(RwLock::new(CertificateStore::new(pki))),
            Role::Client,
            Arc::new(RwLock::new(ContextOwned::default())),
        );
        channel.set_security_policy(policy);
        channel.set_security_mode(mode);
        channel.set_decoding_options(generous_decoding());
        Client {
            channel,
            send_seq: SequenceNumberHandle::new(true),
            recv_seq: SequenceNumberHandle::new(true),
            next_request_id: 1,
            next_handle: 1,
        }
    }

    pub fn none(pki: &Path) -> Self {
        Self::new(pki, SecurityPolicy::None, MessageSecurityMode::None)
    }

    pub fn header(&mut self) -> RequestHeader {
        let h = self.next_handle;
        self.next_handle += 1;
        RequestHeader::new(&NodeId::null(), &DateTime::now(), h)
    }

    /// An OpenSecureChannel request frame (single chunk).
    pub fn open(&mut self, kind: SecurityTokenRequestType, lifetime_ms: u32) -> Vec<u8> {
        let nonce = self.channel.security_policy().random_nonce();
        self.open_with_nonce(kind, lifetime_ms, nonce)
    }

    /// Like [`Client::open`] with a chosen client nonce.
    pub fn open_with_nonce(
        &mut self,
        kind: SecurityTokenRequestType,
        lifetime_ms: u32,
        nonce: opcua_types::ByteString,
    ) -> Vec<u8> {
        self.channel.set_local_nonce(nonce.as_ref());
        let request = OpenSecureChannelRequest {
            request_header: self.header(),
            client_protocol_version: 0,
            request_type: kind,
            security_mode: self.channel.security_mode(),
            client_nonce: nonce,
            requested_lifetime: lifetime_ms,
        };
        let (_, mut frames) = self.encode(&RequestMessage::from(request), 8192);
        assert_eq!(frames.len(), 1);
        frames.remove(0)
    }

    /// Encodes a message into secured chunks of at most `chunk_size` bytes.
    pub fn encode(&mut self, msg: &impl Message, chunk_size: usize) -> (u32, Vec<Vec<u8>>) {
        let request_id = self.next_request_id;
        self.next_request_id += 1;
        let chunks = Chunker::encode(
            self.send_seq.clone(),
            request_id,
            0,
            chunk_size,
            &self.channel,
            msg,
        )
        .unwrap();
        self.send_seq.increment(chunks.len() as u32);
        let frames = chunks
            .iter()
            .map(|c| {
                let mut dst = vec![0u8; c.data.len() * 2 + 8192];
                let n = self.channel.apply_security(c, &mut dst).unwrap();
                dst.truncate(n);
                dst
            })
            .collect();
        (request_id, frames)
    }

    /// A ReadRequest for `n` nodes.
    pub fn read_request(&mut self, n: usize) -> RequestMessage {
        let nodes = (0..n)
            .map(|i| ReadValueId {
                node_id: NodeId::new(2, format!("Device{i}.Temperature")),
                attribute_id: 13,
                ..Default::default()
            })
            .collect();
        ReadRequest {
            request_header: self.header(),
            max_age: 0.0,
            timestamps_to_return: TimestampsToReturn::Both,
            nodes_to_read: Some(nodes),
        }
        .into()
    }

    /// Removes security from server frames and decodes the response they carry.
    pub fn decode(&mut self, frames: &[Vec<u8>]) -> ResponseMessage {
        let chunks: Vec<_> = frames
            .iter()
            .map(|f| {
                let c = self
                    .channel
                    .verify_and_remove_security(Bytes::from(f.clone()))
                    .unwrap();
                let info = c.chunk_info(&self.channel).unwrap();
                self.recv_seq
                    .validate_and_increment(info.sequence_header.sequence_number)
                    .unwrap();
                c
            })
            .collect();
        Chunker::decode(&chunks, &self.channel, None).unwrap()
    }

    /// Applies an OpenSecureChannel response: token, and keys when secured.
    pub fn finish_open(&mut self, response: &OpenSecureChannelResponse) {
        assert!(response.response_header.service_result.is_good());
        self.channel
            .set_security_token(response.security_token.clone());
        if self.channel.security_policy() != SecurityPolicy::None {
            self.channel
                .set_remote_nonce_from_byte_string(&response.server_nonce)
                .unwrap();
            self.channel.derive_keys();
        }
    }

    /// Decodes an OPN response from `frames` and applies it.
    pub fn accept_open_response(&mut self, frames: &[Vec<u8>]) -> OpenSecureChannelResponse {
        for f in frames {
            assert_eq!(&f[..3], b"OPN", "expected OPN, got {:?}", &f[..4]);
        }
        match self.decode(frames) {
            ResponseMessage::OpenSecureChannel(r) => {
                self.finish_open(&r);
                *r
            }
            other => panic!("expected OpenSecureChannelResponse, got {other:?}"),
        }
    }
}

/// Runs Hello + OPN(Issue, None) + accept; returns the open connection and client.
pub fn open_none(limits: Limits, pki: &Path, now: Instant) -> (ServerConnection, Client) {
    let mut conn = server(limits, pki, now);
    conn.handle_input(&hello(65536, 65536, 0, 0), now);
    let out = drain(&mut conn);
    assert_eq!(out.frames.len(), 1);
    decode_ack(&out.frames[0]);
    let mut client = Client::none(pki);
    conn.handle_input(&client.open(SecurityTokenRequestType::Issue, 60_000), now);
    let out = drain(&mut conn);
    assert!(
        matches!(out.events.as_slice(), [Event::OpenRequested(_)]),
        "{:?}",
        out.events
    );
    conn.accept_open(7, now);
    let out = drain(&mut conn);
    assert!(out.events.is_empty(), "{:?}", out.events);
    client.accept_open_response(&out.frames);
    assert!(conn.is_open());
    (conn, client)
}

/// `base + secs`, the simulated clock.
pub fn at(base: Instant, secs: u64) -> Instant {
    base + Duration::from_secs(secs)
}
