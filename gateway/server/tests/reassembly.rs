//! ReassemblyBytes over real sockets: intermediate chunks held by
//! incomplete messages are charged to the plan's reassembly budget. With the
//! shared part full, an ordinary channel's next intermediate chunk gets
//! BadTcpNotEnoughResources and a close, while a channel carrying an
//! activated Session still completes multi-chunk requests from the reconnect
//! reserve, single-chunk traffic keeps working, and closing the flooding
//! connection frees the budget.
//!
//! Plan for the config below (Balanced): ReassemblyBytes total 73728,
//! shared 24576, bootstrap 24576, reconnect 24576. The footprint is
//! (max_chunk_count - 1) x max_buffer_size = (4 - 1) x 8192 = 24576, with
//! max_chunk_count = ceil(16384 / (8192 - 1024)) + 1 = 4; chunks are at most
//! 8192 bytes, and one message holds at most two full intermediate chunks
//! (their 2 x 8168 body bytes fit max_message_size, three would not), so
//! filling a footprint takes two channels.
//!
//! In shared_only (last test) there are no reserves; channels without an
//! activated session may hold only `isolation.max_bytes_without_session`
//! (default half the budget) together, session-bound ones the whole budget.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{
    bounded, decode_response, encode_request, hello_bytes, opn_none_frame, parse_opn_none,
    read_frame, with_size, TestGateway,
};
use opcua_core::{RequestMessage, ResponseMessage};
use opcua_types::{
    ActivateSessionRequest, AnonymousIdentityToken, CreateSessionRequest, DateTime,
    ExtensionObject, NodeId, ReadRequest, ReadValueId, RequestHeader, StatusCode,
    TimestampsToReturn,
};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use uagate_config::Stage;
use uagate_isolation::provider::RejectReason;

const WAIT: Duration = Duration::from_secs(5);
const CHUNK: usize = 8192;
/// Message header (8), channel id, token id, sequence number, request id.
const MSG_HEADER: usize = 24;
const CONFIG: &str = "[server]\nmax_buffer_size = 8192\nmax_message_size = 16384\n\
                      chunk_reassembly_budget = 73728\n";
/// shared_only: budget 49152, channels without a session 24576 (the default half).
const SHARED_ONLY: &str = "[server]\nmax_buffer_size = 8192\nmax_message_size = 16384\n\
                           chunk_reassembly_budget = 49152\n[isolation]\nmode = \"shared_only\"\n";
/// One retained-message footprint for both configurations.
const FOOTPRINT: u64 = 3 * CHUNK as u64;

/// A TCP connection to the gateway from source address `src`.
async fn connect_from(src: [u8; 4], to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((src, 0))).unwrap();
    bounded("connect", socket.connect(to)).await.unwrap()
}

/// A hand-made None channel that can send chunks of its choosing.
struct Chan {
    s: TcpStream,
    channel: u32,
    token: u32,
    seq: u32,
    next_request: u32,
    auth: NodeId,
}

impl Chan {
    /// Hello + OpenSecureChannel(None) from `src`.
    async fn open(gw: &TestGateway, src: [u8; 4]) -> Chan {
        let mut s = connect_from(src, gw.addr).await;
        s.write_all(&hello_bytes(&gw.url)).await.unwrap();
        let ack = read_frame(&mut s, WAIT).await.expect("ACK");
        assert_eq!(&ack[..4], b"ACKF");
        s.write_all(&opn_none_frame()).await.unwrap();
        let resp = read_frame(&mut s, WAIT).await.expect("OPN response");
        let (channel, token) = parse_opn_none(&resp);
        Chan {
            s,
            channel,
            token,
            seq: 2,
            next_request: 2,
            auth: NodeId::null(),
        }
    }

    /// One MSG chunk of type `kind` (b'C', b'F' or b'A') for `request_id`.
    fn chunk(&mut self, kind: u8, request_id: u32, body: &[u8]) -> Vec<u8> {
        let mut m = vec![b'M', b'S', b'G', kind, 0, 0, 0, 0];
        m.extend_from_slice(&self.channel.to_le_bytes());
        m.extend_from_slice(&self.token.to_le_bytes());
        m.extend_from_slice(&self.seq.to_le_bytes());
        m.extend_from_slice(&request_id.to_le_bytes());
        m.extend_from_slice(body);
        self.seq += 1;
        with_size(m)
    }

    fn request_id(&mut self) -> u32 {
        let id = self.next_request;
        self.next_request += 1;
        id
    }

    /// Sends one full-size intermediate chunk (`CHUNK` bytes) of a message
    /// that never completes.
    async fn send_intermediate(&mut self, request_id: u32) {
        let frame = self.chunk(b'C', request_id, &[0u8; CHUNK - MSG_HEADER]);
        assert_eq!(frame.len(), CHUNK);
        let _ = self.s.write_all(&frame).await;
    }

    /// Sends `request` split into `parts` chunks.
    async fn send_split(&mut self, request: RequestMessage, parts: usize) {
        let body = encode_request(&request);
        let id = self.request_id();
        let size = body.len().div_ceil(parts);
        let pieces: Vec<&[u8]> = body.chunks(size).collect();
        assert_eq!(pieces.len(), parts);
        for (i, piece) in pieces.iter().enumerate() {
            let kind = if i + 1 == parts { b'F' } else { b'C' };
            let frame = self.chunk(kind, id, piece);
            self.s.write_all(&frame).await.unwrap();
        }
    }

    /// The next response, reassembled from its chunks.
    async fn recv(&mut self) -> ResponseMessage {
        let mut body = Vec::new();
        loop {
            let frame = read_frame(&mut self.s, WAIT).await.expect("a response");
            assert_eq!(
                &frame[..3],
                b"MSG",
                "response expected, got {:?}",
                &frame[..4]
            );
            body.extend_from_slice(&frame[MSG_HEADER..]);
            if frame[3] == b'F' {
                return decode_response(&body);
            }
        }
    }

    async fn call(&mut self, request: RequestMessage, parts: usize) -> ResponseMessage {
        self.send_split(request, parts).await;
        self.recv().await
    }

    fn header(&self) -> RequestHeader {
        RequestHeader::new(&self.auth, &DateTime::now(), self.next_request)
    }

    /// CreateSession + anonymous ActivateSession (single chunks).
    async fn session(&mut self) {
        let created = self
            .call(
                CreateSessionRequest {
                    request_header: self.header(),
                    session_name: "reassembly".into(),
                    requested_session_timeout: 60_000.0,
                    ..Default::default()
                }
                .into(),
                1,
            )
            .await;
        let ResponseMessage::CreateSession(created) = created else {
            panic!("CreateSession failed: {created:?}");
        };
        self.auth = created.authentication_token.clone();
        let activated = self
            .call(
                ActivateSessionRequest {
                    request_header: self.header(),
                    user_identity_token: ExtensionObject::from_message(AnonymousIdentityToken {
                        policy_id: "anonymous".into(),
                    }),
                    ..Default::default()
                }
                .into(),
                1,
            )
            .await;
        assert!(
            matches!(activated, ResponseMessage::ActivateSession(_)),
            "ActivateSession failed: {activated:?}"
        );
    }

    /// Reads CurrentTime with the request split into `parts` chunks.
    async fn read(&mut self, parts: usize) -> StatusCode {
        let request = ReadRequest {
            request_header: self.header(),
            max_age: 0.0,
            timestamps_to_return: TimestampsToReturn::Both,
            nodes_to_read: Some(vec![ReadValueId::from(NodeId::new(0, 2258u32))]),
        };
        match self.call(request.into(), parts).await {
            ResponseMessage::Read(r) => r.results.unwrap()[0].status(),
            other => panic!("Read failed: {other:?}"),
        }
    }

    /// The Error message the server sends before it closes the channel.
    async fn expect_error(&mut self) -> StatusCode {
        common::expect_error(&mut self.s, WAIT).await
    }
}

/// Bytes currently charged to ReassemblyBytes.
fn usage(gw: &TestGateway) -> u64 {
    gw.engine()
        .isolation_snapshot()
        .usage
        .iter()
        .find(|(s, _)| *s == Stage::ReassemblyBytes)
        .map_or(0, |(_, u)| *u)
}

/// Waits (bounded) until ReassemblyBytes usage is `want`.
async fn usage_becomes(gw: &TestGateway, want: u64) {
    bounded("ReassemblyBytes usage", async {
        while usage(gw) != want {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_flood_is_refused_while_sessions_keep_working() {
    let gw = TestGateway::start(CONFIG).await;
    let plan = plan_of(CONFIG);
    let r = plan.stage(Stage::ReassemblyBytes);
    assert_eq!(plan.retained_message_bytes(), FOOTPRINT);
    assert_eq!(
        (r.total, r.shared, r.bootstrap, r.reconnect),
        (3 * FOOTPRINT, FOOTPRINT, FOOTPRINT, FOOTPRINT)
    );
    // The listener advertises the MaxChunkCount the footprint is computed from.
    let mut s = connect_from([127, 0, 0, 9], gw.addr).await;
    s.write_all(&hello_bytes(&gw.url)).await.unwrap();
    let ack = read_frame(&mut s, WAIT).await.expect("ACK");
    assert_eq!(&ack[..4], b"ACKF");
    let advertised = u32::from_le_bytes(ack[24..28].try_into().unwrap());
    let server = uagate_config::Config::from_toml(CONFIG).unwrap().server;
    assert_eq!((advertised, server.max_chunk_count()), (4, 4));
    drop(s);

    // The flooders fill the shared part: two full chunks of a message that
    // never completes (the most one message may hold), and one more on a
    // second channel of the same owner.
    let mut flood = Chan::open(&gw, [127, 0, 0, 2]).await;
    let id = flood.request_id();
    flood.send_intermediate(id).await;
    flood.send_intermediate(id).await;
    usage_becomes(&gw, 2 * CHUNK as u64).await;
    let mut flood_b = Chan::open(&gw, [127, 0, 0, 2]).await;
    let id = flood_b.request_id();
    flood_b.send_intermediate(id).await;
    usage_becomes(&gw, FOOTPRINT).await;

    // Its next channel's intermediate chunk does not fit: Error and close.
    let mut flood2 = Chan::open(&gw, [127, 0, 0, 2]).await;
    let id = flood2.request_id();
    flood2.send_intermediate(id).await;
    assert_eq!(
        flood2.expect_error().await,
        StatusCode::BadTcpNotEnoughResources
    );
    common::expect_closed(&mut flood2.s).await;
    assert_eq!(usage(&gw), FOOTPRINT, "the refused chunk holds nothing");

    // Another ordinary caller without a Session cannot use the reserves either.
    let mut other = Chan::open(&gw, [127, 0, 0, 5]).await;
    other.send_split(other_read(&other), 2).await;
    assert_eq!(
        other.expect_error().await,
        StatusCode::BadTcpNotEnoughResources
    );
    common::expect_closed(&mut other.s).await;

    // A client with an activated Session on its channel keeps working:
    // single-chunk requests are never charged, and a multi-chunk Read is
    // carried by the reconnect reserve (session-bound channel).
    let mut worker = Chan::open(&gw, [127, 0, 0, 4]).await;
    worker.session().await;
    assert_eq!(worker.read(1).await, StatusCode::Good);
    assert_eq!(worker.read(2).await, StatusCode::Good);
    assert_eq!(worker.read(3).await, StatusCode::Good);
    assert_eq!(usage(&gw), FOOTPRINT, "completion released its charge");

    // Closing the flooding connections releases their charges.
    drop(flood);
    usage_becomes(&gw, CHUNK as u64).await;
    drop(flood_b);
    usage_becomes(&gw, 0).await;

    // With the budget free again, an ordinary caller's multi-chunk request works.
    let mut late = Chan::open(&gw, [127, 0, 0, 6]).await;
    late.session().await;
    assert_eq!(late.read(2).await, StatusCode::Good);
    let mut fresh = Chan::open(&gw, [127, 0, 0, 7]).await;
    let id = fresh.request_id();
    fresh.send_intermediate(id).await;
    fresh.send_intermediate(id).await;
    usage_becomes(&gw, 2 * CHUNK as u64).await;
    // An abort chunk releases the partial message; the channel stays open.
    let abort = fresh.chunk(b'A', id, &[]);
    fresh.s.write_all(&abort).await.unwrap();
    usage_becomes(&gw, 0).await;
    let snapshot = gw.engine().isolation_snapshot();
    assert!(
        snapshot
            .rejections
            .iter()
            .any(|(s, _, n)| *s == Stage::ReassemblyBytes && *n >= 2),
        "{snapshot:?}"
    );
    gw.stop().await;
}

/// A Read request without a session token (its chunks are refused before it is decoded).
fn other_read(chan: &Chan) -> RequestMessage {
    ReadRequest {
        request_header: chan.header(),
        max_age: 0.0,
        timestamps_to_return: TimestampsToReturn::Both,
        nodes_to_read: Some(vec![ReadValueId::from(NodeId::new(0, 2258u32))]),
    }
    .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_bound_channel_has_only_the_reconnect_reserve_beyond_shared() {
    let gw = TestGateway::start(CONFIG).await;
    // Shared full: two chunks on one channel, one on another (24576).
    let mut flood = Chan::open(&gw, [127, 0, 0, 2]).await;
    let id = flood.request_id();
    flood.send_intermediate(id).await;
    flood.send_intermediate(id).await;
    let mut flood_b = Chan::open(&gw, [127, 0, 0, 3]).await;
    let id = flood_b.request_id();
    flood_b.send_intermediate(id).await;
    usage_becomes(&gw, FOOTPRINT).await;

    // A session-bound channel holds two full chunks from the reconnect
    // reserve (16384 of its 24576 bytes); a second session-bound channel
    // gets the last 8192, and its next chunk finds both shared and
    // reconnect capacity taken.
    let mut a = Chan::open(&gw, [127, 0, 0, 4]).await;
    a.session().await;
    let id = a.request_id();
    a.send_intermediate(id).await;
    a.send_intermediate(id).await;
    usage_becomes(&gw, FOOTPRINT + 2 * CHUNK as u64).await;
    let mut b = Chan::open(&gw, [127, 0, 0, 5]).await;
    b.session().await;
    let id = b.request_id();
    b.send_intermediate(id).await;
    usage_becomes(&gw, 2 * FOOTPRINT).await;
    b.send_intermediate(id).await;
    assert_eq!(b.expect_error().await, StatusCode::BadTcpNotEnoughResources);
    // The bootstrap reserve was never available to either of them; b's
    // partial message is released with its channel.
    common::expect_closed(&mut b.s).await;
    usage_becomes(&gw, FOOTPRINT + 2 * CHUNK as u64).await;
    drop(a);
    drop(flood);
    drop(flood_b);
    usage_becomes(&gw, 0).await;
    gw.stop().await;
}

/// The plan the gateway builds for `extra` (on top of the test listener).
fn plan_of(extra: &str) -> uagate_isolation::plan::Plan {
    let config = uagate_config::Config::from_toml(extra).unwrap();
    uagate_isolation::plan::Plan::build(&config).unwrap()
}

/// ReassemblyBytes refusals so far for lack of capacity.
fn capacity_rejections(gw: &TestGateway) -> u64 {
    gw.engine()
        .isolation_snapshot()
        .rejections
        .iter()
        .find(|(s, r, _)| *s == Stage::ReassemblyBytes && *r == RejectReason::Capacity)
        .map_or(0, |(_, _, n)| *n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_only_caps_channels_without_a_session_at_max_bytes_without_session() {
    let plan = plan_of(SHARED_ONLY);
    let r = plan.stage(Stage::ReassemblyBytes);
    assert_eq!(
        (r.total, r.shared, r.reconnect),
        (2 * FOOTPRINT, 2 * FOOTPRINT, 0)
    );
    assert_eq!(plan.max_bytes_without_session(), Some(FOOTPRINT));
    let gw = TestGateway::start(SHARED_ONLY).await;

    // Channels without a session fill their part: 16384 + 8192 = 24576.
    let mut s1 = Chan::open(&gw, [127, 0, 0, 2]).await;
    let id = s1.request_id();
    s1.send_intermediate(id).await;
    s1.send_intermediate(id).await;
    let mut s2 = Chan::open(&gw, [127, 0, 0, 3]).await;
    let id = s2.request_id();
    s2.send_intermediate(id).await;
    usage_becomes(&gw, FOOTPRINT).await;

    // Another sessionless channel is refused although half the budget is
    // free: Error BadTcpNotEnoughResources and close, nothing held.
    let mut s3 = Chan::open(&gw, [127, 0, 0, 4]).await;
    let id = s3.request_id();
    s3.send_intermediate(id).await;
    assert_eq!(
        s3.expect_error().await,
        StatusCode::BadTcpNotEnoughResources
    );
    common::expect_closed(&mut s3.s).await;
    assert_eq!(usage(&gw), FOOTPRINT);
    assert_eq!(capacity_rejections(&gw), 1);

    // A channel with an activated session still reassembles multi-chunk
    // messages, and may hold more than the sessionless part.
    let mut worker = Chan::open(&gw, [127, 0, 0, 5]).await;
    worker.session().await;
    assert_eq!(worker.read(3).await, StatusCode::Good);
    assert_eq!(worker.read(2).await, StatusCode::Good);
    assert_eq!(usage(&gw), FOOTPRINT, "completion released its charge");
    let id = worker.request_id();
    worker.send_intermediate(id).await;
    worker.send_intermediate(id).await;
    usage_becomes(&gw, FOOTPRINT + 2 * CHUNK as u64).await;

    // The budget stays the ceiling for session-bound channels too.
    let mut other = Chan::open(&gw, [127, 0, 0, 6]).await;
    other.session().await;
    let id = other.request_id();
    other.send_intermediate(id).await;
    usage_becomes(&gw, 2 * FOOTPRINT).await;
    other.send_intermediate(id).await;
    assert_eq!(
        other.expect_error().await,
        StatusCode::BadTcpNotEnoughResources
    );
    common::expect_closed(&mut other.s).await;
    usage_becomes(&gw, FOOTPRINT + 2 * CHUNK as u64).await;
    assert_eq!(capacity_rejections(&gw), 2);

    // Closing a sessionless channel frees its share of the sessionless part.
    drop(s2);
    usage_becomes(&gw, 2 * FOOTPRINT - 2 * CHUNK as u64).await;
    let mut s4 = Chan::open(&gw, [127, 0, 0, 7]).await;
    let id = s4.request_id();
    s4.send_intermediate(id).await;
    usage_becomes(&gw, 2 * FOOTPRINT - CHUNK as u64).await;
    // ... and no more than that.
    let mut s5 = Chan::open(&gw, [127, 0, 0, 8]).await;
    let id = s5.request_id();
    s5.send_intermediate(id).await;
    assert_eq!(
        s5.expect_error().await,
        StatusCode::BadTcpNotEnoughResources
    );
    assert_eq!(capacity_rejections(&gw), 3);

    drop((s1, s4, worker));
    usage_becomes(&gw, 0).await;
    gw.stop().await;
}
