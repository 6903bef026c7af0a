//! opc.wss (OPC 10000-6 §7.5, subprotocol `opcua+uacp`) on the TLS
//! listener: a real async-opcua client reads and subscribes through a
//! test-local TCP→WSS bridge (None and Basic256Sha256 SignAndEncrypt on top
//! of TLS), upgrades without the subprotocol or with a bad version are
//! refused, an oversized message closes with 1009, a text message with
//! 1003, a reassembly refusal after the upgrade closes with 1013, and an
//! upgrade without Handshake capacity gets `HTTP 503` with `Retry-After`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod tlsclient;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{
    bounded, data_changes, demo, hello_bytes, read_frame, value_item, with_size, Chan, TestGateway,
};
use futures_util::{SinkExt, StreamExt};
use opcua_client::IdentityToken;
use opcua_core::comms::tcp_types::ErrorMessage;
use opcua_core::ResponseMessage;
use opcua_crypto::SecurityPolicy;
use opcua_types::{
    DataValue, DecodingOptions, EndpointDescription, MessageSecurityMode, NodeId, ReadValueId,
    ServerState, ServerStatusDataType, StatusCode, Variant,
};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Response;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{client_async_with_config, WebSocketStream};
use uagate_config::Stage;

const WAIT: Duration = Duration::from_secs(5);
const SUBPROTOCOL: &str = "opcua+uacp";
const COUNTER: &str = "Gateway.Demo.Counter";
/// Small buffers (see tests/reassembly.rs): ReassemblyBytes total 73728,
/// shared 24576; chunks are at most 8192 bytes, which is also the
/// WebSocket message limit.
const SMALL: &str = "[server]\nmax_buffer_size = 8192\nmax_message_size = 16384\n\
                     chunk_reassembly_budget = 73728\n";
const CHUNK: usize = 8192;

type Wss = WebSocketStream<TlsStream<TcpStream>>;

// ------------------------------------------------------------- helpers

fn tls_addr(gw: &TestGateway) -> SocketAddr {
    gw.gw.as_ref().unwrap().tls_addr
}

/// The gateway's stored TLS certificate (what clients pin).
fn leaf(gw: &TestGateway) -> CertificateDer<'static> {
    tlsclient::stored_leaf(&gw.tmp.path().join("data"))
}

/// TLS (pinned) + WebSocket upgrade offering `opcua+uacp`; asserts the
/// server selected that subprotocol.
async fn ws_connect(addr: SocketAddr, leaf: &CertificateDer<'static>) -> (Wss, Response) {
    let tls = bounded("tls connect", tlsclient::connect(addr, leaf))
        .await
        .expect("TLS handshake");
    ws_upgrade(tls, addr).await
}

async fn ws_upgrade(tls: TlsStream<TcpStream>, addr: SocketAddr) -> (Wss, Response) {
    let mut req = format!("wss://127.0.0.1:{}/", addr.port())
        .into_client_request()
        .unwrap();
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static(SUBPROTOCOL),
    );
    let (ws, resp) = bounded("ws upgrade", client_async_with_config(req, tls, None))
        .await
        .expect("WebSocket upgrade");
    assert_eq!(resp.status().as_u16(), 101);
    assert_eq!(
        resp.headers()
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok()),
        Some(SUBPROTOCOL),
        "the server selects opcua+uacp"
    );
    (ws, resp)
}

/// Waits (bounded) for the server's Close frame; returns its code (1005
/// when the frame has none).
async fn close_code_of(ws: &mut Wss) -> u16 {
    bounded("close frame", async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => {
                    return frame.map_or(1005, |f| u16::from(f.code));
                }
                Some(Ok(_)) => continue,
                other => panic!("connection ended without a close frame: {other:?}"),
            }
        }
    })
    .await
}

/// Usage of `stage` now.
fn usage(gw: &TestGateway, stage: Stage) -> u64 {
    gw.engine()
        .isolation_snapshot()
        .usage
        .iter()
        .find(|(s, _)| *s == stage)
        .map_or(0, |(_, u)| *u)
}

/// Waits (bounded) until `stage` usage is `want`.
async fn usage_becomes(gw: &TestGateway, stage: Stage, want: u64) {
    bounded("stage usage", async {
        while usage(gw, stage) != want {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

fn plan_of(extra: &str) -> uagate_isolation::plan::Plan {
    let config = uagate_config::Config::from_toml(extra).unwrap();
    uagate_isolation::plan::Plan::build(&config).expect("the plan accepts the config")
}

// -------------------------------------------------------------- bridge

/// A test-local TCP→WSS bridge: every TCP connection accepted on
/// 127.0.0.1 gets its own TLS + WebSocket (`opcua+uacp`) connection to the
/// gateway; the TCP byte stream is cut into UACP messages, each sent as one
/// binary message, and each binary message received is written to TCP.
struct Bridge {
    /// Where the bridge listens.
    addr: SocketAddr,
    /// `opc.tcp://127.0.0.1:PORT/` of the bridge.
    url: String,
    /// The code of the last close frame received from the server.
    close: Arc<Mutex<Option<u16>>>,
    /// TCP connections accepted (each one WebSocket to the gateway).
    accepted: Arc<AtomicUsize>,
    /// Binary messages from the server that were not exactly one UACP
    /// message (the size in the header must be the message length).
    misframed: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Bridge {
    async fn start(gw: &TestGateway) -> Bridge {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let port = addr.port();
        let target = tls_addr(gw);
        let leaf = leaf(gw);
        let close = Arc::new(Mutex::new(None));
        let accepted = Arc::new(AtomicUsize::new(0));
        let misframed = Arc::new(AtomicUsize::new(0));
        let (c, a, m) = (close.clone(), accepted.clone(), misframed.clone());
        let task = tokio::spawn(async move {
            // Dropped with the task: every pump ends with the bridge.
            let mut pumps = JoinSet::new();
            while let Ok((tcp, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                pumps.spawn(pump(tcp, target, leaf.clone(), c.clone(), m.clone()));
            }
        });
        Bridge {
            addr,
            url: format!("opc.tcp://127.0.0.1:{port}/"),
            close,
            accepted,
            misframed,
            task,
        }
    }

    fn close_code(&self) -> Option<u16> {
        *self.close.lock()
    }

    /// Waits (bounded) until a close frame was received.
    async fn closed_with(&self) -> u16 {
        bounded("bridge close frame", async {
            loop {
                if let Some(code) = self.close_code() {
                    return code;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
    }

    /// `endpoint` with its URL pointing at the bridge.
    fn endpoint(&self, mut endpoint: EndpointDescription) -> EndpointDescription {
        endpoint.endpoint_url = self.url.as_str().into();
        endpoint
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pump(
    tcp: TcpStream,
    target: SocketAddr,
    leaf: CertificateDer<'static>,
    close: Arc<Mutex<Option<u16>>>,
    misframed: Arc<AtomicUsize>,
) {
    let (ws, _) = ws_connect(target, &leaf).await;
    let (mut sink, mut stream) = ws.split();
    let (mut rd, mut wr) = tcp.into_split();
    let up = async move {
        let mut pending: Vec<u8> = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            pending.extend_from_slice(&buf[..n]);
            // One UACP message (8-byte header, size at 4..8) per binary message.
            while pending.len() >= 8 {
                let size = u32::from_le_bytes(pending[4..8].try_into().unwrap()) as usize;
                let take = if size < 8 {
                    pending.len()
                } else if pending.len() >= size {
                    size
                } else {
                    break;
                };
                let msg: Vec<u8> = pending.drain(..take).collect();
                if sink.send(Message::Binary(msg.into())).await.is_err() {
                    return;
                }
            }
        }
        let _ = sink.close().await;
    };
    let down = async move {
        while let Some(m) = stream.next().await {
            match m {
                Ok(Message::Binary(b)) => {
                    let size = b
                        .get(4..8)
                        .map(|s| u32::from_le_bytes(s.try_into().unwrap()) as usize);
                    if size != Some(b.len()) {
                        misframed.fetch_add(1, Ordering::SeqCst);
                    }
                    if wr.write_all(&b).await.is_err() {
                        break;
                    }
                }
                Ok(Message::Close(frame)) => {
                    *close.lock() = Some(frame.map_or(1005, |f| u16::from(f.code)));
                    break;
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let _ = wr.shutdown().await;
    };
    tokio::join!(up, down);
}

// ----------------------------------------------- hand-made UACP channel

/// A hand-made None channel over TCP (here: to the bridge) that can send
/// chunks of its choosing.
struct RawChan {
    s: TcpStream,
    channel: u32,
    token: u32,
    seq: u32,
    next_request: u32,
}

impl RawChan {
    /// Hello + OpenSecureChannel(None) to `url` at `addr`.
    async fn open(addr: SocketAddr, url: &str) -> RawChan {
        let mut s = common::raw(addr).await;
        s.write_all(&hello_bytes(url)).await.unwrap();
        let ack = read_frame(&mut s, WAIT).await.expect("ACK");
        assert_eq!(&ack[..4], b"ACKF");
        s.write_all(&common::opn_none_frame()).await.unwrap();
        let resp = read_frame(&mut s, WAIT).await.expect("OPN response");
        let (channel, token) = common::parse_opn_none(&resp);
        RawChan {
            s,
            channel,
            token,
            seq: 2,
            next_request: 2,
        }
    }

    fn request_id(&mut self) -> u32 {
        let id = self.next_request;
        self.next_request += 1;
        id
    }

    /// Sends one full-size intermediate chunk (`CHUNK` bytes) of a message
    /// that never completes.
    async fn send_intermediate(&mut self, request_id: u32) {
        let mut m = b"MSGC\0\0\0\0".to_vec();
        m.extend_from_slice(&self.channel.to_le_bytes());
        m.extend_from_slice(&self.token.to_le_bytes());
        m.extend_from_slice(&self.seq.to_le_bytes());
        m.extend_from_slice(&request_id.to_le_bytes());
        m.resize(CHUNK, 0);
        self.seq += 1;
        let frame = with_size(m);
        assert_eq!(frame.len(), CHUNK);
        let _ = self.s.write_all(&frame).await;
    }
}

// ---------------------------------------------------------- raw HTTP

/// Sends `request` on a fresh pinned TLS connection and returns the
/// response head (status line and headers, lower-cased header names kept
/// as sent).
async fn http_head(gw: &TestGateway, request: &str) -> String {
    let mut tls = bounded("tls connect", tlsclient::connect(tls_addr(gw), &leaf(gw)))
        .await
        .expect("TLS handshake");
    http_head_on(&mut tls, request).await
}

async fn http_head_on(tls: &mut TlsStream<TcpStream>, request: &str) -> String {
    tls.write_all(request.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    bounded("HTTP response head", async {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let n = tls.read(&mut byte).await.expect("response bytes");
            assert_eq!(n, 1, "connection closed before the response head: {head:?}");
            head.push(byte[0]);
        }
        String::from_utf8(head).unwrap()
    })
    .await
}

/// A GET upgrade request with `extra` header lines (each ending in CRLF).
fn upgrade_request(version: &str, extra: &str) -> String {
    format!(
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: {version}\r\n\
         {extra}\r\n"
    )
}

fn status_line(head: &str) -> &str {
    head.split("\r\n").next().unwrap()
}

/// The value of header `name` (case-insensitive) in a response head.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

// ---------------------------------------------------------------- tests

fn counter_value(v: &DataValue) -> u32 {
    match v.value {
        Some(Variant::UInt32(n)) => n,
        ref other => panic!("counter value {other:?}"),
    }
}

/// Read ServerStatus and ServiceLevel, then subscribe to the counter and
/// see at least two increasing values, over `chan`.
async fn read_and_subscribe(chan: &Chan, token: &NodeId) {
    let values = match chan
        .read(
            token,
            vec![
                ReadValueId::from(NodeId::new(0, 2256u32)),
                ReadValueId::from(NodeId::new(0, 2267u32)),
            ],
        )
        .await
        .expect("Read answered")
    {
        ResponseMessage::Read(r) => r.results.unwrap_or_default(),
        other => panic!("Read failed: {:?}", other.response_header().service_result),
    };
    assert_eq!(values.len(), 2);
    assert_eq!(values[0].status(), StatusCode::Good);
    let Some(Variant::ExtensionObject(eo)) = &values[0].value else {
        panic!("ServerStatus value {:?}", values[0].value);
    };
    let status = eo
        .inner_as::<ServerStatusDataType>()
        .expect("a ServerStatusDataType");
    assert_eq!(status.state, ServerState::Running);
    assert_eq!(values[1].status(), StatusCode::Good);
    assert!(
        matches!(values[1].value, Some(Variant::Byte(_))),
        "ServiceLevel {:?}",
        values[1].value
    );

    let sub = chan.create_subscription(token, 50.0, 300, 10).await;
    let results = chan
        .monitor(
            token,
            sub.subscription_id,
            vec![value_item(demo(COUNTER), 7, 0.0)],
        )
        .await;
    assert_eq!(results[0].status_code, StatusCode::Good);
    let mut seen: Vec<u32> = Vec::new();
    chan.publish_until(token, Duration::from_secs(10), |r| {
        assert_eq!(r.subscription_id, sub.subscription_id);
        for (handle, value) in data_changes(r) {
            assert_eq!(handle, 7);
            seen.push(counter_value(&value));
        }
        (seen.len() >= 2).then_some(())
    })
    .await;
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing counter values {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opcua_client_reads_and_subscribes_over_wss() {
    let gw = TestGateway::start("[server]\nmin_publishing_interval = \"50ms\"\n").await;
    let bridge = Bridge::start(&gw).await;
    let endpoint = bridge.endpoint(gw.endpoint(SecurityPolicy::None, MessageSecurityMode::None));
    let client = gw.client("wss");
    let chan = Chan::open(&client, endpoint)
        .await
        .expect("channel opens over wss");
    let token = chan.session(IdentityToken::Anonymous).await;
    read_and_subscribe(&chan, &token).await;
    assert_eq!(bridge.accepted.load(Ordering::SeqCst), 1);
    assert_eq!(
        bridge.misframed.load(Ordering::SeqCst),
        0,
        "one UACP message per binary message"
    );
    assert_eq!(bridge.close_code(), None, "still open");
    // CloseSecureChannel: the server ends the WebSocket with 1000.
    chan.close().await;
    assert_eq!(bridge.closed_with().await, 1000);
    drop(bridge);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_and_encrypt_channel_runs_on_top_of_wss() {
    let gw = TestGateway::start("[server]\nmin_publishing_interval = \"50ms\"\n").await;
    let bridge = Bridge::start(&gw).await;
    let client = gw.client("secure-wss");
    let own = client.certificate_store().read().read_own_cert().unwrap();
    gw.store
        .trust_add(
            "test",
            &own.to_der().unwrap(),
            uagate_store::CertKind::Trusted,
        )
        .await
        .unwrap();
    let endpoint = bridge.endpoint(gw.endpoint(
        SecurityPolicy::Basic256Sha256,
        MessageSecurityMode::SignAndEncrypt,
    ));
    let chan = Chan::open(&client, endpoint)
        .await
        .expect("secure channel opens over wss");
    let token = chan.session(IdentityToken::Anonymous).await;
    read_and_subscribe(&chan, &token).await;
    assert_eq!(bridge.accepted.load(Ordering::SeqCst), 1);
    assert_eq!(
        bridge.misframed.load(Ordering::SeqCst),
        0,
        "one UACP message per binary message"
    );
    chan.close().await;
    assert_eq!(bridge.closed_with().await, 1000);
    drop(bridge);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_naming_the_opc_wss_url_is_acknowledged() {
    // A native opc.wss client names the URL it connected to in its Hello
    // (OPC 10000-6 §7.1.2.3: the Endpoint the client wishes to connect to).
    let gw = TestGateway::start("").await;
    let wss_url = gw.gw.as_ref().unwrap().wss_url.clone();
    assert!(wss_url.starts_with("opc.wss://"), "{wss_url}");
    let (mut ws, _) = ws_connect(tls_addr(&gw), &leaf(&gw)).await;
    ws.send(Message::Binary(hello_bytes(&wss_url).into()))
        .await
        .unwrap();
    let reply = bounded("reply to Hello", async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Binary(b))) => return b,
                Some(Ok(Message::Close(f))) => panic!("closed instead of ACK: {f:?}"),
                Some(Ok(_)) => continue,
                other => panic!("no reply: {other:?}"),
            }
        }
    })
    .await;
    if &reply[..4] == b"ERRF" {
        let err = <ErrorMessage as opcua_types::SimpleBinaryDecodable>::decode(
            &mut &reply[..],
            &DecodingOptions::default(),
        )
        .expect("Error message decodes");
        panic!("Hello with {wss_url} refused with {}", err.error);
    }
    assert_eq!(&reply[..4], b"ACKF");
    let _ = ws.close(None).await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_without_opcua_uacp_is_refused_with_400() {
    let gw = TestGateway::start("").await;
    // Control: the well-formed upgrade is accepted with the subprotocol.
    let ok = http_head(
        &gw,
        &upgrade_request("13", "Sec-WebSocket-Protocol: opcua+uacp\r\n"),
    )
    .await;
    assert_eq!(status_line(&ok), "HTTP/1.1 101 Switching Protocols", "{ok}");
    assert_eq!(header(&ok, "sec-websocket-protocol"), Some(SUBPROTOCOL));
    assert_eq!(
        header(&ok, "sec-websocket-accept"),
        Some("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        "RFC 6455 accept key"
    );

    // No subprotocol.
    let head = http_head(&gw, &upgrade_request("13", "")).await;
    assert_eq!(status_line(&head), "HTTP/1.1 400 Bad Request", "{head}");
    assert_eq!(header(&head, "sec-websocket-protocol"), None);
    // Only the JSON mapping, which the gateway does not serve.
    let head = http_head(
        &gw,
        &upgrade_request("13", "Sec-WebSocket-Protocol: opcua+uajson\r\n"),
    )
    .await;
    assert_eq!(status_line(&head), "HTTP/1.1 400 Bad Request", "{head}");
    // A bad version, with the right subprotocol: 400 naming version 13.
    let head = http_head(
        &gw,
        &upgrade_request("8", "Sec-WebSocket-Protocol: opcua+uacp\r\n"),
    )
    .await;
    assert_eq!(status_line(&head), "HTTP/1.1 400 Bad Request", "{head}");
    assert_eq!(header(&head, "sec-websocket-version"), Some("13"));
    // A GET without an upgrade.
    let head = http_head(
        &gw,
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(
        status_line(&head),
        "HTTP/1.1 405 Method Not Allowed",
        "{head}"
    );
    assert_eq!(header(&head, "allow"), Some("GET, POST"));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_limit_closes_with_1009() {
    let config = "[server]\nmax_buffer_size = 8192\nmax_message_size = 16384\n";
    plan_of(config);
    let gw = TestGateway::start(config).await;
    let (mut ws, _) = ws_connect(tls_addr(&gw), &leaf(&gw)).await;
    ws.send(Message::Binary(vec![0u8; 20_000].into()))
        .await
        .unwrap();
    assert_eq!(close_code_of(&mut ws).await, 1009);

    // A message of exactly the limit is no WebSocket error: it reaches the
    // UACP framer (garbage, so the protocol closes it with 1000).
    let (mut ws, _) = ws_connect(tls_addr(&gw), &leaf(&gw)).await;
    let mut garbage = b"XXXF".to_vec();
    garbage.extend_from_slice(&8192u32.to_le_bytes());
    garbage.resize(8192, 0);
    ws.send(Message::Binary(garbage.into())).await.unwrap();
    assert_eq!(close_code_of(&mut ws).await, 1000);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_message_closes_with_1003() {
    let gw = TestGateway::start("").await;
    let (mut ws, _) = ws_connect(tls_addr(&gw), &leaf(&gw)).await;
    ws.send(Message::Text("HELF".into())).await.unwrap();
    assert_eq!(close_code_of(&mut ws).await, 1003);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_is_answered_before_the_uacp_handshake() {
    let gw = TestGateway::start("").await;
    let (mut ws, _) = ws_connect(tls_addr(&gw), &leaf(&gw)).await;
    ws.send(Message::Ping(b"uagate".to_vec().into()))
        .await
        .unwrap();
    let pong = bounded("pong", async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Pong(p))) => return p,
                Some(Ok(Message::Close(f))) => panic!("closed instead of Pong: {f:?}"),
                Some(Ok(_)) => continue,
                other => panic!("no Pong: {other:?}"),
            }
        }
    })
    .await;
    assert_eq!(&pong[..], b"uagate");
    // The connection still speaks UACP afterwards.
    let url = gw.url.clone();
    ws.send(Message::Binary(hello_bytes(&url).into()))
        .await
        .unwrap();
    let ack = bounded("ACK", async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Binary(b))) => return b,
                Some(Ok(Message::Close(f))) => panic!("closed instead of ACK: {f:?}"),
                Some(Ok(_)) => continue,
                other => panic!("no ACK: {other:?}"),
            }
        }
    })
    .await;
    assert_eq!(&ack[..4], b"ACKF");
    let _ = ws.close(None).await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_refusal_after_the_upgrade_closes_with_1013() {
    let plan = plan_of(SMALL);
    let r = plan.stage(Stage::ReassemblyBytes);
    assert_eq!((r.total, r.shared), (73728, 3 * CHUNK as u64));
    let gw = TestGateway::start(SMALL).await;
    // All bridged connections come from 127.0.0.1: one owner. Two full
    // intermediate chunks on one channel and one on another fill the
    // shared part.
    let fill = Bridge::start(&gw).await;
    let mut a = RawChan::open(fill.addr, &fill.url).await;
    let id = a.request_id();
    a.send_intermediate(id).await;
    a.send_intermediate(id).await;
    usage_becomes(&gw, Stage::ReassemblyBytes, 2 * CHUNK as u64).await;
    let mut b = RawChan::open(fill.addr, &fill.url).await;
    let id = b.request_id();
    b.send_intermediate(id).await;
    usage_becomes(&gw, Stage::ReassemblyBytes, 3 * CHUNK as u64).await;

    // The next channel's intermediate chunk does not fit: ERR, then the
    // WebSocket is closed with 1013 (Try Again Later).
    let refused = Bridge::start(&gw).await;
    let mut c = RawChan::open(refused.addr, &refused.url).await;
    let id = c.request_id();
    c.send_intermediate(id).await;
    assert_eq!(
        common::expect_error(&mut c.s, WAIT).await,
        StatusCode::BadTcpNotEnoughResources
    );
    common::expect_closed(&mut c.s).await;
    assert_eq!(refused.closed_with().await, 1013);
    assert_eq!(fill.close_code(), None, "the holders stay open");
    assert_eq!(usage(&gw, Stage::ReassemblyBytes), 3 * CHUNK as u64);

    // A normal opc.tcp client still reads.
    let (chan, token) = gw.anon_session("tcp").await;
    assert_eq!(chan.read_status(&token).await, StatusCode::Good);
    chan.close().await;

    // Closing the holders releases their charges.
    drop((a, b));
    usage_becomes(&gw, Stage::ReassemblyBytes, 0).await;
    drop((fill, refused));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_without_handshake_capacity_gets_503() {
    let config = "[isolation]\nmode = \"fair_share\"\n\n\
                  [[isolation.stages]]\nstage = \"handshake\"\ncapacity = 1\n";
    assert_eq!(plan_of(config).stage(Stage::Handshake).total, 1);
    let gw = TestGateway::start(config).await;
    let addr = tls_addr(&gw);
    let leaf = leaf(&gw);
    // Connection #2 finishes its TLS handshake first (its Handshake lease
    // ends with TLS) ...
    let mut second = bounded("tls connect", tlsclient::connect(addr, &leaf))
        .await
        .expect("TLS handshake");
    usage_becomes(&gw, Stage::Handshake, 0).await;
    // ... then connection #1 upgrades and sends no Hello: its UACP
    // handshake holds the only Handshake slot.
    let (first, _) = ws_connect(addr, &leaf).await;
    usage_becomes(&gw, Stage::Handshake, 1).await;
    let head = http_head_on(
        &mut second,
        &upgrade_request("13", "Sec-WebSocket-Protocol: opcua+uacp\r\n"),
    )
    .await;
    assert_eq!(
        status_line(&head),
        "HTTP/1.1 503 Service Unavailable",
        "{head}"
    );
    assert_eq!(header(&head, "retry-after"), Some("1"));
    assert_eq!(header(&head, "upgrade"), None);

    // Once #1 is gone the slot is free again and an upgrade succeeds.
    drop(first);
    usage_becomes(&gw, Stage::Handshake, 0).await;
    let (mut third, _) = ws_connect(addr, &leaf).await;
    usage_becomes(&gw, Stage::Handshake, 1).await;
    let _ = third.close(None).await;
    drop(second);
    gw.stop().await;
}

/// Issue 21 item 3: an opc.wss client that never answers pings (it upgrades
/// and then neither sends nor reads) is pinged after
/// `websocket_ping_interval` of silence and closed with 1001 (Going Away)
/// after as long again, returning its handshake capacity; a victim reading
/// over opc.tcp meanwhile gets every Read answered. The victim's p50/p99
/// are printed (`--nocapture`), not asserted on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_client_that_never_answers_pings_is_closed_with_1001() {
    let gw = TestGateway::start("[server]\nwebsocket_ping_interval = \"1s\"\n").await;
    let (victim, token) = gw.anon_session("victim").await;
    let (mut silent, _) = ws_connect(tls_addr(&gw), &leaf(&gw)).await;
    assert_eq!(
        usage(&gw, Stage::Handshake),
        1,
        "the silent client holds a handshake"
    );
    let started = std::time::Instant::now();
    let mut latencies = Vec::new();
    // Long past ping + as long again (2 s); the silent client reads nothing.
    while started.elapsed() < Duration::from_secs(3) {
        let t = std::time::Instant::now();
        assert_eq!(victim.read_status(&token).await, StatusCode::Good);
        latencies.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    usage_becomes(&gw, Stage::Handshake, 0).await;
    // What the silent client would have seen: the ping, then Close 1001.
    let first = bounded("ping", silent.next()).await;
    assert!(matches!(first, Some(Ok(Message::Ping(_)))), "{first:?}");
    assert_eq!(close_code_of(&mut silent).await, 1001);
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    println!(
        "a WebSocket client that never answers pings: victim {} Reads, p50 {:?}, p99 {:?}",
        latencies.len(),
        at(0.5),
        at(0.99)
    );
    victim.close().await;
    gw.stop().await;
}

/// A WebSocket opened with a TLS client certificate ends when the trust
/// list refuses that certificate, as its opc.https connection would: the
/// upgrade takes the certificate's re-check along (before, the WebSocket
/// went on and could open new sessions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_ends_when_its_client_certificate_is_removed() {
    // Inside the harness's [listen] table; a long handshake deadline, so
    // that only the refusal can end the idle WebSocket within the test.
    let gw = TestGateway::start(
        "tls_client_auth = \"optional\"\n\n[isolation]\nhandshake_timeout = \"90s\"\n",
    )
    .await;
    let (cert, key) = tlsclient::client_identity();
    let trusted = gw
        .store
        .trust_add("test", cert.as_ref(), uagate_store::CertKind::Trusted)
        .await
        .unwrap();
    let tls = bounded(
        "mTLS connect",
        tlsclient::connect_with_client_cert(tls_addr(&gw), &leaf(&gw), vec![cert], key),
    )
    .await
    .unwrap();
    let (mut ws, _) = ws_upgrade(tls, tls_addr(&gw)).await;
    // Open and idle: nothing arrives for a while.
    let idle = tokio::time::timeout(Duration::from_millis(1500), ws.next()).await;
    assert!(idle.is_err(), "the WebSocket ended by itself: {idle:?}");
    gw.store
        .trust_remove("test", &trusted.thumbprint)
        .await
        .unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => continue,
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the WebSocket of a removed client certificate is still open"
    );
    gw.stop().await;
}
