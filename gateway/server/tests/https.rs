//! opc.https (OPC 10000-6 §7.4.4, UA Binary over HTTPS) on the TLS
//! listener, end to end with hand-written HTTP/1.1 and hyper's HTTP/2
//! client: sessions on the one logical channel shared by every HTTPS
//! connection, session-token checks, clear-text UserName passwords inside
//! TLS, the HTTP status codes of the transport (415, 413, 400, 405), the
//! ReassemblyBytes charge of a request body (503 + Retry-After), the
//! connection rate limiter (429 + Retry-After) and the TLS handshake
//! deadline.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod tlsclient;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{bounded, TestGateway};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use opcua_core::{Message, RequestMessage, ResponseMessage};
use opcua_types::{
    ActivateSessionRequest, AnonymousIdentityToken, BinaryDecodable, BinaryEncodable, ByteString,
    CloseSessionRequest, ContextOwned, CreateSessionRequest, DateTime, ExtensionObject,
    GetEndpointsRequest, Guid, MessageSecurityMode, NodeId, ReadRequest, ReadValueId,
    RequestHeader, StatusCode, TimestampsToReturn, UAString, UserNameIdentityToken,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::CertificateDer;
use uagate_config::Stage;
use uagate_isolation::provider::RejectReason;

const OCTET: &str = "application/octet-stream";
/// Small messages so that the size limits are cheap to reach.
const SMALL: &str = "[server]\nmax_message_size = 16384\nmax_buffer_size = 8192\n";
const MAX_MESSAGE: usize = 16384;

// ------------------------------------------------------------ the client

/// Where a test gateway's opc.https lives, and the certificate it presents.
struct Target {
    addr: SocketAddr,
    url: String,
    leaf: CertificateDer<'static>,
}

impl Target {
    fn of(gw: &TestGateway) -> Target {
        let running = gw.gw.as_ref().unwrap();
        Target {
            addr: running.tls_addr,
            url: running.https_url.clone(),
            leaf: tlsclient::stored_leaf(&gw.tmp.path().join("data")),
        }
    }

    /// A new TLS connection speaking HTTP/1.1.
    async fn h1(&self) -> TlsStream<TcpStream> {
        let tls = bounded("TLS connect", tlsclient::connect(self.addr, &self.leaf))
            .await
            .expect("TLS handshake");
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
        tls
    }

    /// A new TLS connection speaking HTTP/2 (ALPN h2), driven by a task.
    async fn h2(&self) -> (SendRequest<Full<Bytes>>, tokio::task::JoinHandle<()>) {
        let tls = bounded(
            "TLS connect (h2)",
            tlsclient::connect_alpn(self.addr, &self.leaf, &[b"h2"]),
        )
        .await
        .expect("TLS handshake");
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (sender, conn) = bounded(
            "HTTP/2 handshake",
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)),
        )
        .await
        .expect("HTTP/2 handshake");
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        (sender, task)
    }
}

/// An HTTP response as the tests see it.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The decoded UA response of an `HTTP 200` binary reply.
    fn message(&self) -> ResponseMessage {
        assert_eq!(
            self.status,
            200,
            "HTTP 200 expected: {:?}",
            String::from_utf8_lossy(&self.body)
        );
        assert_eq!(self.header("content-type"), Some(OCTET));
        decode(&self.body)
    }

    /// Asserts a refusal `status` with `Retry-After: 1`.
    fn assert_retry_after(&self, status: u16) {
        assert_eq!(self.status, status, "{self:?}");
        assert_eq!(self.header("retry-after"), Some("1"), "{self:?}");
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Reads one HTTP/1.1 response (status line, headers, Content-Length body).
async fn read_reply<S: AsyncRead + Unpin>(s: &mut S) -> Reply {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let end = loop {
        if let Some(p) = find(&buf, b"\r\n\r\n") {
            break p;
        }
        let n = s.read(&mut tmp).await.expect("response readable");
        assert!(
            n > 0,
            "connection closed before a response head: {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = std::str::from_utf8(&buf[..end]).expect("ASCII response head");
    let mut lines = head.split("\r\n");
    let mut status_line = lines.next().unwrap().splitn(3, ' ');
    assert_eq!(status_line.next(), Some("HTTP/1.1"));
    let status = status_line.next().unwrap().parse().expect("status code");
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (n, v) = l.split_once(':').expect("header line");
            (n.trim().to_string(), v.trim().to_string())
        })
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.parse().expect("numeric Content-Length"))
        .expect("responses carry a Content-Length");
    let mut body = buf[end + 4..].to_vec();
    while body.len() < len {
        let n = s.read(&mut tmp).await.expect("body readable");
        assert!(n > 0, "connection closed inside the response body");
        body.extend_from_slice(&tmp[..n]);
    }
    assert_eq!(body.len(), len, "nothing beyond the response");
    Reply {
        status,
        headers,
        body,
    }
}

/// Writes a request head and `body` (write errors ignored: a server that
/// refuses early may close), then reads the response.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, head: &str, body: &[u8]) -> Reply {
    bounded("HTTP/1.1 exchange", async {
        let mut out = head.as_bytes().to_vec();
        out.extend_from_slice(body);
        let _ = s.write_all(&out).await;
        let _ = s.flush().await;
        read_reply(s).await
    })
    .await
}

/// The head of a POST with `content_type` (none when empty) and a
/// declared `len`.
fn post_head(content_type: &str, len: usize) -> String {
    let ct = if content_type.is_empty() {
        String::new()
    } else {
        format!("Content-Type: {content_type}\r\n")
    };
    format!("POST / HTTP/1.1\r\nHost: localhost\r\n{ct}Content-Length: {len}\r\n\r\n")
}

/// The head of a chunked POST of UA Binary.
const CHUNKED_HEAD: &str = "POST / HTTP/1.1\r\nHost: localhost\r\n\
                            Content-Type: application/octet-stream\r\n\
                            Transfer-Encoding: chunked\r\n\r\n";

/// A request over HTTP/1.1; the decoded response (HTTP 200 asserted).
async fn call_h1<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    request: impl Into<RequestMessage>,
) -> ResponseMessage {
    let body = encode(&request.into());
    exchange(s, &post_head(OCTET, body.len()), &body)
        .await
        .message()
}

/// A request over HTTP/2; the decoded response (HTTP 200 asserted).
async fn call_h2(
    sender: &mut SendRequest<Full<Bytes>>,
    request: impl Into<RequestMessage>,
) -> ResponseMessage {
    let body = encode(&request.into());
    let req = http::Request::post("https://localhost/")
        .header(http::header::CONTENT_TYPE, OCTET)
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let (parts, body) = bounded("HTTP/2 request", async {
        let resp = sender.send_request(req).await.expect("HTTP/2 response");
        let (parts, body) = resp.into_parts();
        (parts, body.collect().await.expect("HTTP/2 body").to_bytes())
    })
    .await;
    assert_eq!(parts.status, http::StatusCode::OK);
    assert_eq!(parts.version, http::Version::HTTP_2);
    assert_eq!(
        parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .map(|v| v.as_bytes()),
        Some(OCTET.as_bytes())
    );
    decode(&body)
}

// ----------------------------------------------------------- UA messages

/// Type id and body of `request`: the body of an opc.https POST.
fn encode(request: &RequestMessage) -> Vec<u8> {
    let ctx = ContextOwned::default();
    let mut body = Vec::new();
    request.type_id().encode(&mut body, &ctx.context()).unwrap();
    request.encode(&mut body, &ctx.context()).unwrap();
    body
}

fn decode(mut body: &[u8]) -> ResponseMessage {
    let ctx = ContextOwned::default();
    let ctx = ctx.context();
    let type_id = NodeId::decode(&mut body, &ctx).expect("response type id");
    let msg = ResponseMessage::decode_by_object_id(
        &mut body,
        type_id.as_object_id().expect("a known response type"),
        &ctx,
    )
    .expect("response decodes");
    assert!(body.is_empty(), "{} trailing bytes", body.len());
    msg
}

fn header(token: &NodeId) -> RequestHeader {
    static HANDLE: AtomicU32 = AtomicU32::new(1);
    RequestHeader::new(
        token,
        &DateTime::now(),
        HANDLE.fetch_add(1, Ordering::Relaxed),
    )
}

fn create_session(url: &str) -> CreateSessionRequest {
    CreateSessionRequest {
        request_header: header(&NodeId::null()),
        endpoint_url: url.into(),
        session_name: "https test".into(),
        requested_session_timeout: 60_000.0,
        ..Default::default()
    }
}

fn activate(token: &NodeId, identity: ExtensionObject) -> ActivateSessionRequest {
    ActivateSessionRequest {
        request_header: header(token),
        user_identity_token: identity,
        ..Default::default()
    }
}

fn anonymous() -> ExtensionObject {
    ExtensionObject::from_message(AnonymousIdentityToken {
        policy_id: "anonymous".into(),
    })
}

/// A UserName token with a clear-text password.
fn user_name(name: &str, password: &str) -> ExtensionObject {
    ExtensionObject::from_message(UserNameIdentityToken {
        policy_id: "username".into(),
        user_name: name.into(),
        password: ByteString::from(password.as_bytes().to_vec()),
        encryption_algorithm: UAString::null(),
    })
}

/// Server_ServerStatus_State and Server_ServiceLevel.
fn read_status(token: &NodeId) -> ReadRequest {
    ReadRequest {
        request_header: header(token),
        max_age: 0.0,
        timestamps_to_return: TimestampsToReturn::Neither,
        nodes_to_read: Some(vec![
            ReadValueId::from(NodeId::new(0, 2259u32)),
            ReadValueId::from(NodeId::new(0, 2267u32)),
        ]),
    }
}

fn get_endpoints(url: &str) -> GetEndpointsRequest {
    GetEndpointsRequest {
        request_header: header(&NodeId::null()),
        endpoint_url: url.into(),
        locale_ids: None,
        profile_uris: None,
    }
}

/// Asserts a successful Read of [`read_status`] (both values Good).
fn assert_status_read(resp: &ResponseMessage) {
    let ResponseMessage::Read(r) = resp else {
        panic!("Read failed: {:?}", resp.response_header().service_result);
    };
    assert_eq!(r.response_header.service_result, StatusCode::Good);
    let results = r.results.as_deref().unwrap_or_default();
    assert_eq!(results.len(), 2);
    for dv in results {
        assert_eq!(dv.status(), StatusCode::Good, "{dv:?}");
        assert!(dv.value.is_some(), "{dv:?}");
    }
}

/// The status of a ServiceFault (panics on any other response).
fn fault(resp: &ResponseMessage) -> StatusCode {
    assert!(
        matches!(resp, ResponseMessage::ServiceFault(_)),
        "ServiceFault expected: {resp:?}"
    );
    resp.response_header().service_result
}

/// CreateSession over `s`; returns the authentication token.
async fn new_session<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, url: &str) -> NodeId {
    let created = call_h1(s, create_session(url)).await;
    let ResponseMessage::CreateSession(created) = created else {
        panic!("CreateSession failed: {created:?}");
    };
    assert!(!created.authentication_token.is_null());
    created.authentication_token
}

// ----------------------------------------------------------------- tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_created_activated_and_used_over_https() {
    let gw = TestGateway::start("").await;
    let t = Target::of(&gw);
    assert!(t.url.starts_with("opc.https://"), "{}", t.url);

    // HTTP/1.1: the endpoint is advertised with policy None / mode None.
    let mut a = t.h1().await;
    let eps = call_h1(&mut a, get_endpoints(&t.url)).await;
    let ResponseMessage::GetEndpoints(eps) = eps else {
        panic!("GetEndpoints failed: {eps:?}");
    };
    let https = eps
        .endpoints
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|e| e.endpoint_url.as_ref().starts_with("opc.https://"))
        .expect("an opc.https endpoint is advertised");
    assert_eq!(https.security_mode, MessageSecurityMode::None);
    assert_eq!(
        https.security_policy_uri.as_ref(),
        "http://opcfoundation.org/UA/SecurityPolicy#None"
    );

    // CreateSession without a client certificate, anonymous activation,
    // and a Read, all on one keep-alive HTTP/1.1 connection.
    let token = new_session(&mut a, &t.url).await;
    let activated = call_h1(&mut a, activate(&token, anonymous())).await;
    assert!(
        matches!(activated, ResponseMessage::ActivateSession(_)),
        "ActivateSession failed: {activated:?}"
    );
    assert_status_read(&call_h1(&mut a, read_status(&token)).await);

    // A new TLS connection speaking HTTP/2 uses the same session: every
    // opc.https request is on the one logical channel.
    let (mut h2, h2_task) = t.h2().await;
    assert_status_read(&call_h2(&mut h2, read_status(&token)).await);
    // Several streams at once on that connection.
    let (r1, r2) = {
        let mut h2b = h2.clone();
        tokio::join!(
            call_h2(&mut h2, read_status(&token)),
            call_h2(&mut h2b, read_status(&token))
        )
    };
    assert_status_read(&r1);
    assert_status_read(&r2);

    // CloseSession over HTTP/2; the HTTP/1.1 connection then finds the
    // session gone.
    let closed = call_h2(
        &mut h2,
        CloseSessionRequest {
            request_header: header(&token),
            delete_subscriptions: true,
        },
    )
    .await;
    let ResponseMessage::CloseSession(closed) = closed else {
        panic!("CloseSession failed: {closed:?}");
    };
    assert_eq!(closed.response_header.service_result, StatusCode::Good);
    assert_eq!(
        fault(&call_h1(&mut a, read_status(&token)).await),
        StatusCode::BadSessionIdInvalid
    );
    assert_eq!(
        fault(&call_h2(&mut h2, read_status(&token)).await),
        StatusCode::BadSessionIdInvalid
    );
    assert_eq!(gw.session_count(), 0);

    drop(h2);
    h2_task.abort();
    drop(a);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_or_missing_auth_token_is_refused() {
    let gw = TestGateway::start("").await;
    let t = Target::of(&gw);
    let mut s = t.h1().await;

    // ServiceFaults travel as HTTP 200 with a binary body.
    assert_eq!(
        fault(&call_h1(&mut s, read_status(&NodeId::null())).await),
        StatusCode::BadSessionIdInvalid
    );
    assert_eq!(
        fault(&call_h1(&mut s, read_status(&NodeId::new(0, Guid::new()))).await),
        StatusCode::BadSessionIdInvalid
    );
    assert_eq!(
        fault(
            &call_h1(
                &mut s,
                read_status(&NodeId::new(0, ByteString::from(vec![7u8; 32])))
            )
            .await
        ),
        StatusCode::BadSessionIdInvalid
    );

    // Created but not activated.
    let token = new_session(&mut s, &t.url).await;
    assert_eq!(
        fault(&call_h1(&mut s, read_status(&token)).await),
        StatusCode::BadSessionNotActivated
    );
    // Activating it makes the same request work; an unknown token still fails.
    let activated = call_h1(&mut s, activate(&token, anonymous())).await;
    assert!(matches!(activated, ResponseMessage::ActivateSession(_)));
    assert_status_read(&call_h1(&mut s, read_status(&token)).await);
    assert_eq!(
        fault(&call_h1(&mut s, read_status(&NodeId::new(0, Guid::new()))).await),
        StatusCode::BadSessionIdInvalid
    );
    // ActivateSession of an unknown token.
    assert_eq!(
        fault(&call_h1(&mut s, activate(&NodeId::new(0, Guid::new()), anonymous())).await),
        StatusCode::BadSessionIdInvalid
    );

    let closed = call_h1(
        &mut s,
        CloseSessionRequest {
            request_header: header(&token),
            delete_subscriptions: true,
        },
    )
    .await;
    assert!(matches!(closed, ResponseMessage::CloseSession(_)));
    drop(s);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn username_login_over_https() {
    let gw = TestGateway::start("").await;
    gw.add_user("ops", "pw-1234-ok", uagate_store::Role::Operator)
        .await;
    let t = Target::of(&gw);
    let mut s = t.h1().await;

    // A clear-text password is fine inside TLS (the channel is None/None).
    let token = new_session(&mut s, &t.url).await;
    let activated = call_h1(&mut s, activate(&token, user_name("ops", "pw-1234-ok"))).await;
    let ResponseMessage::ActivateSession(activated) = activated else {
        panic!("ActivateSession failed: {activated:?}");
    };
    assert_eq!(activated.response_header.service_result, StatusCode::Good);
    assert_status_read(&call_h1(&mut s, read_status(&token)).await);

    // A policy id the endpoint does not offer is not a UserName login.
    let other = new_session(&mut s, &t.url).await;
    let mut wrong_policy = UserNameIdentityToken {
        policy_id: "anonymous".into(),
        user_name: "ops".into(),
        password: ByteString::from(b"pw-1234-ok".to_vec()),
        encryption_algorithm: UAString::null(),
    };
    assert_eq!(
        fault(
            &call_h1(
                &mut s,
                activate(&other, ExtensionObject::from_message(wrong_policy.clone()))
            )
            .await
        ),
        StatusCode::BadIdentityTokenInvalid
    );

    // A wrong password: BadUserAccessDenied, and the session stays unusable.
    let denied = fault(&call_h1(&mut s, activate(&other, user_name("ops", "wrong"))).await);
    assert!(
        [
            StatusCode::BadUserAccessDenied,
            StatusCode::BadIdentityTokenRejected
        ]
        .contains(&denied),
        "{denied}"
    );
    assert_eq!(denied, StatusCode::BadUserAccessDenied);
    assert_eq!(
        fault(&call_h1(&mut s, read_status(&other)).await),
        StatusCode::BadSessionNotActivated
    );
    // An unknown user is refused the same way.
    wrong_policy.policy_id = "username".into();
    wrong_policy.user_name = "nobody".into();
    assert_eq!(
        fault(
            &call_h1(
                &mut s,
                activate(&other, ExtensionObject::from_message(wrong_policy))
            )
            .await
        ),
        StatusCode::BadUserAccessDenied
    );
    // The first session is unaffected.
    assert_status_read(&call_h1(&mut s, read_status(&token)).await);

    drop(s);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transport_errors() {
    let gw = TestGateway::start(SMALL).await;
    let t = Target::of(&gw);
    let valid = encode(&get_endpoints(&t.url).into());

    // Wrong or missing Content-Type: 415.
    for ct in ["text/plain", "application/json", ""] {
        let mut s = t.h1().await;
        let r = exchange(&mut s, &post_head(ct, valid.len()), &valid).await;
        assert_eq!(r.status, 415, "Content-Type {ct:?}: {r:?}");
    }
    // Both binary content types are accepted (parameters and case ignored).
    for ct in [
        "application/octet-stream",
        "application/opcua+uabinary",
        "Application/Octet-Stream; charset=binary",
    ] {
        let mut s = t.h1().await;
        let r = exchange(&mut s, &post_head(ct, valid.len()), &valid).await;
        assert!(
            matches!(r.message(), ResponseMessage::GetEndpoints(_)),
            "Content-Type {ct:?}"
        );
    }

    // Declared length above max_message_size: 413 without the body.
    let mut s = t.h1().await;
    let r = exchange(&mut s, &post_head(OCTET, MAX_MESSAGE + 1), &[]).await;
    assert_eq!(r.status, 413, "{r:?}");
    // Exactly max_message_size is read (and then not decodable: 400).
    let mut s = t.h1().await;
    let r = exchange(
        &mut s,
        &post_head(OCTET, MAX_MESSAGE),
        &vec![0xFFu8; MAX_MESSAGE],
    )
    .await;
    assert_eq!(r.status, 400, "{r:?}");
    // A chunked body that grows beyond max_message_size: 413.
    let mut body = Vec::new();
    for piece in [MAX_MESSAGE, 16] {
        body.extend_from_slice(format!("{piece:x}\r\n").as_bytes());
        body.extend_from_slice(&vec![0xFFu8; piece]);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"0\r\n\r\n");
    let mut s = t.h1().await;
    let r = exchange(&mut s, CHUNKED_HEAD, &body).await;
    assert_eq!(r.status, 413, "{r:?}");
    // A chunked body within the limit is a request like any other.
    let mut body = format!("{:x}\r\n", valid.len()).into_bytes();
    body.extend_from_slice(&valid);
    body.extend_from_slice(b"\r\n0\r\n\r\n");
    let mut s = t.h1().await;
    let r = exchange(&mut s, CHUNKED_HEAD, &body).await;
    assert!(matches!(r.message(), ResponseMessage::GetEndpoints(_)));

    // Garbage: 400; a request cut after its header: a ServiceFault
    // (BadDecodingError, Part 4 5.3) with its request handle; the
    // connection stays usable.
    let mut s = t.h1().await;
    let garbage = [0xFFu8; 64];
    let r = exchange(&mut s, &post_head(OCTET, garbage.len()), &garbage).await;
    assert_eq!(r.status, 400, "{r:?}");
    let truncated = &valid[..valid.len() / 2];
    let r = exchange(&mut s, &post_head(OCTET, truncated.len()), truncated).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(fault(&r.message()), StatusCode::BadDecodingError);
    let r = exchange(&mut s, &post_head(OCTET, 0), &[]).await;
    assert_eq!(r.status, 400, "{r:?}");
    let r = exchange(&mut s, &post_head(OCTET, valid.len()), &valid).await;
    assert!(matches!(r.message(), ResponseMessage::GetEndpoints(_)));

    // GET without an upgrade, and other methods: 405 with Allow.
    for method in ["GET", "PUT", "DELETE"] {
        let r = exchange(
            &mut s,
            &format!("{method} / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n"),
            &[],
        )
        .await;
        assert_eq!(r.status, 405, "{method}: {r:?}");
        assert_eq!(r.header("allow"), Some("GET, POST"));
    }
    drop(s);

    // The same over HTTP/2: a wrong content type is 415 there too.
    let (mut h2, task) = t.h2().await;
    let req = http::Request::post("https://localhost/")
        .header(http::header::CONTENT_TYPE, "text/plain")
        .body(Full::new(Bytes::from(valid.clone())))
        .unwrap();
    let resp = bounded("HTTP/2 request", h2.send_request(req))
        .await
        .unwrap();
    assert_eq!(resp.status(), http::StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let eps = call_h2(&mut h2, get_endpoints(&t.url)).await;
    assert!(matches!(eps, ResponseMessage::GetEndpoints(_)));
    drop(h2);
    task.abort();
    gw.stop().await;
}

/// shared_only, 48 KiB of ReassemblyBytes, of which channels and HTTPS
/// callers without an activated session may hold one footprint (24576).
const BUDGET: &str = "[server]\nmax_message_size = 16384\nmax_buffer_size = 8192\n\
                      chunk_reassembly_budget = 49152\n\
                      [isolation]\nmode = \"shared_only\"\nmax_bytes_without_session = 24576\n";

/// Bytes charged to ReassemblyBytes.
fn reassembly_usage(gw: &TestGateway) -> u64 {
    gw.engine()
        .isolation_snapshot()
        .usage
        .iter()
        .find(|(s, _)| *s == Stage::ReassemblyBytes)
        .map_or(0, |(_, u)| *u)
}

async fn usage_becomes(gw: &TestGateway, want: u64) {
    bounded("ReassemblyBytes usage", async {
        while reassembly_usage(gw) != want {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

fn capacity_rejections(gw: &TestGateway) -> u64 {
    gw.engine()
        .isolation_snapshot()
        .rejections
        .iter()
        .find(|(s, r, _)| *s == Stage::ReassemblyBytes && *r == RejectReason::Capacity)
        .map_or(0, |(_, _, n)| *n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_larger_than_the_remaining_budget_gets_503() {
    // No configuration alone leaves an ordinary caller less than
    // max_message_size: the space must hold one footprint, which exceeds
    // max_message_size. So a first request that declares a large body and
    // sends none holds part of the space (the body is charged before it is
    // read), and the next body does not fit in the rest.
    let config = uagate_config::Config::from_toml(BUDGET).unwrap();
    let plan = uagate_isolation::plan::Plan::build(&config).unwrap();
    let footprint = plan.retained_message_bytes();
    assert_eq!(footprint, 24576);
    assert!(footprint > MAX_MESSAGE as u64);
    assert_eq!(plan.max_bytes_without_session(), Some(footprint));
    assert_eq!(plan.stage(Stage::ReassemblyBytes).shared, 49152);

    let gw = TestGateway::start(BUDGET).await;
    let t = Target::of(&gw);
    assert_eq!(reassembly_usage(&gw), 0);

    // The holder: headers of a max_message_size body, and no body yet.
    let mut holder = t.h1().await;
    holder
        .write_all(post_head(OCTET, MAX_MESSAGE).as_bytes())
        .await
        .unwrap();
    holder.flush().await.unwrap();
    usage_becomes(&gw, MAX_MESSAGE as u64).await;
    let free = footprint - MAX_MESSAGE as u64;

    // A body between the free space (8192) and max_message_size: 503.
    let len = 12_000;
    assert!(free < len as u64 && len < MAX_MESSAGE);
    let mut s = t.h1().await;
    let r = exchange(&mut s, &post_head(OCTET, len), &vec![0xFFu8; len]).await;
    r.assert_retry_after(503);
    assert_eq!(capacity_rejections(&gw), 1);
    assert_eq!(reassembly_usage(&gw), MAX_MESSAGE as u64, "nothing held");
    // A chunked body is charged max_message_size: 503 as well.
    let mut s = t.h1().await;
    let r = exchange(&mut s, CHUNKED_HEAD, b"10\r\n0123456789abcdef\r\n0\r\n\r\n").await;
    r.assert_retry_after(503);
    assert_eq!(capacity_rejections(&gw), 2);
    // Over HTTP/2 too.
    let (mut h2, task) = t.h2().await;
    let req = http::Request::post("https://localhost/")
        .header(http::header::CONTENT_TYPE, OCTET)
        .header(http::header::CONTENT_LENGTH, len)
        .body(Full::new(Bytes::from(vec![0xFFu8; len])))
        .unwrap();
    let resp = bounded("HTTP/2 request", h2.send_request(req))
        .await
        .unwrap();
    assert_eq!(resp.status(), http::StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        resp.headers()
            .get(http::header::RETRY_AFTER)
            .map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    assert_eq!(capacity_rejections(&gw), 3);
    // A small request fits in what is left.
    let eps = call_h2(&mut h2, get_endpoints(&t.url)).await;
    assert!(matches!(eps, ResponseMessage::GetEndpoints(_)));
    drop(h2);
    task.abort();

    // The holder's body arrives (garbage: 400); its charge is released.
    let r = exchange(&mut holder, "", &vec![0xFFu8; MAX_MESSAGE]).await;
    assert_eq!(r.status, 400, "{r:?}");
    usage_becomes(&gw, 0).await;
    // Now the same 12000-byte body is read (and found not decodable).
    let mut s = t.h1().await;
    let r = exchange(&mut s, &post_head(OCTET, len), &vec![0xFFu8; len]).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(capacity_rejections(&gw), 3);
    usage_becomes(&gw, 0).await;

    // A holder that goes away releases its charge as well.
    let mut gone = t.h1().await;
    gone.write_all(post_head(OCTET, MAX_MESSAGE).as_bytes())
        .await
        .unwrap();
    gone.flush().await.unwrap();
    usage_becomes(&gw, MAX_MESSAGE as u64).await;
    drop(gone);
    usage_becomes(&gw, 0).await;
    drop((s, holder));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_connections_get_429() {
    const RATE: &str = "[isolation]\nmode = \"fair_share\"\n\
                        [server]\nconnections_per_second = 1\nconnection_burst = 1\n";
    let config = uagate_config::Config::from_toml(RATE).unwrap();
    let plan = uagate_isolation::plan::Plan::build(&config).expect("the plan accepts it");
    assert!(plan.rate().enabled);
    let gw = TestGateway::start(RATE).await;
    let t = Target::of(&gw);

    // The burst of one admits the first connection; the second, right
    // after it, is refused by the limiter and answered 429 over TLS.
    let mut first = t.h1().await;
    let mut second = t.h1().await;
    let eps = call_h1(&mut first, get_endpoints(&t.url)).await;
    assert!(matches!(eps, ResponseMessage::GetEndpoints(_)));
    let valid = encode(&get_endpoints(&t.url).into());
    let r = exchange(&mut second, &post_head(OCTET, valid.len()), &valid).await;
    r.assert_retry_after(429);
    assert_eq!(r.header("connection"), Some("close"));
    // The refused connection is closed after its answer.
    let mut buf = [0u8; 16];
    let after = bounded("refused connection closes", second.read(&mut buf)).await;
    assert!(matches!(after, Ok(0) | Err(_)), "{after:?}");
    // The admitted connection keeps working.
    let eps = call_h1(&mut first, get_endpoints(&t.url)).await;
    assert!(matches!(eps, ResponseMessage::GetEndpoints(_)));

    // After Retry-After a new connection is admitted again.
    let wait = Duration::from_secs(r.header("retry-after").unwrap().parse().unwrap());
    let admitted = bounded("admitted after Retry-After", async {
        for _ in 0..5 {
            tokio::time::sleep(wait + Duration::from_millis(100)).await;
            let mut s = t.h1().await;
            let r = exchange(&mut s, &post_head(OCTET, valid.len()), &valid).await;
            if r.status == 200 {
                return r;
            }
            assert_eq!(r.status, 429, "{r:?}");
        }
        panic!("never admitted again");
    })
    .await;
    assert!(matches!(
        admitted.message(),
        ResponseMessage::GetEndpoints(_)
    ));
    drop(first);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_tls_handshake_is_closed_at_the_deadline() {
    let gw = TestGateway::start("[isolation]\nhandshake_timeout = \"1s\"\n").await;
    let t = Target::of(&gw);

    // One client sends nothing, one a TLS record header and then nothing.
    let start = Instant::now();
    let silent = common::raw(t.addr).await;
    let mut trickle = common::raw(t.addr).await;
    trickle
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00])
        .await
        .unwrap();
    // Whatever they read before the close, the server never sends a byte
    // to an unfinished handshake (a read of 0 or an error ends the wait).
    let (a, b) = tokio::join!(closed_within(silent, start), closed_within(trickle, start));
    assert_deadline("silent TCP", a);
    assert_deadline("trickled ClientHello", b);

    // A client that completes its handshake in time is served.
    let mut s = t.h1().await;
    let r = exchange(&mut s, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", &[]).await;
    assert_eq!(r.status, 405);
    drop(s);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_services_are_not_served_over_https() {
    let gw = TestGateway::start("").await;
    let t = Target::of(&gw);
    let mut s = t.h1().await;
    let token = new_session(&mut s, &t.url).await;
    let activated = call_h1(&mut s, activate(&token, anonymous())).await;
    assert!(matches!(activated, ResponseMessage::ActivateSession(_)));
    let open = |request_type| opcua_types::OpenSecureChannelRequest {
        request_header: header(&NodeId::null()),
        client_protocol_version: 0,
        request_type,
        security_mode: MessageSecurityMode::None,
        client_nonce: ByteString::null(),
        requested_lifetime: 60_000,
    };
    // The logical channel is not a UASC channel: nobody can close or renew
    // it for the others; the shared session keeps working.
    for request in [
        RequestMessage::from(opcua_types::CloseSecureChannelRequest {
            request_header: header(&token),
        }),
        RequestMessage::from(open(opcua_types::SecurityTokenRequestType::Issue)),
        RequestMessage::from(open(opcua_types::SecurityTokenRequestType::Renew)),
    ] {
        let body = encode(&request);
        let r = exchange(&mut s, &post_head(OCTET, body.len()), &body).await;
        assert_eq!(
            fault(&r.message()),
            StatusCode::BadServiceUnsupported,
            "{:?}",
            request.type_id()
        );
        let mut other = t.h1().await;
        assert_status_read(&call_h1(&mut other, read_status(&token)).await);
    }
    drop(s);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_stay_bound_to_their_channel_across_transports() {
    let gw = TestGateway::start("").await;
    let t = Target::of(&gw);
    let mut s = t.h1().await;
    let token = new_session(&mut s, &t.url).await;
    let activated = call_h1(&mut s, activate(&token, anonymous())).await;
    assert!(matches!(activated, ResponseMessage::ActivateSession(_)));
    let (chan, tcp_token) = gw.anon_session("cross").await;

    // A token is only good on the channel its session is bound to.
    assert_eq!(
        fault(&call_h1(&mut s, read_status(&tcp_token)).await),
        StatusCode::BadSecureChannelIdInvalid
    );
    assert_eq!(
        chan.read_status(&token).await,
        StatusCode::BadSecureChannelIdInvalid
    );
    // ActivateSession moves a session to the HTTPS channel (OPC 10000-4
    // §5.6.3: same (null) client certificate, same anonymous identity);
    // the old channel then loses it.
    let moved = call_h1(&mut s, activate(&tcp_token, anonymous())).await;
    assert!(
        matches!(moved, ResponseMessage::ActivateSession(_)),
        "{moved:?}"
    );
    assert_status_read(&call_h1(&mut s, read_status(&tcp_token)).await);
    assert_eq!(
        chan.read_status(&tcp_token).await,
        StatusCode::BadSecureChannelIdInvalid
    );
    chan.close().await;
    drop(s);
    gw.stop().await;
}

/// Waits (at most 6 s) for the server to close `s`; the time from `start`,
/// or `None` when it stayed open.
async fn closed_within<S: AsyncRead + Unpin>(mut s: S, start: Instant) -> Option<Duration> {
    let mut buf = [0u8; 256];
    tokio::time::timeout(Duration::from_secs(6), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return start.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
}

fn assert_deadline(what: &str, closed: Option<Duration>) {
    let elapsed = closed.unwrap_or_else(|| panic!("{what}: still open after 6 s"));
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed <= Duration::from_secs(5),
        "{what}: closed after {elapsed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http1_connection_is_closed_at_the_deadline() {
    let gw = TestGateway::start("[isolation]\nhandshake_timeout = \"1s\"\n").await;
    let t = Target::of(&gw);
    let valid = encode(&get_endpoints(&t.url).into());
    // After a request, the keep-alive connection waits at most the
    // deadline for the next request head; a trickled head is cut off too.
    let mut idle = t.h1().await;
    let r = exchange(&mut idle, &post_head(OCTET, valid.len()), &valid).await;
    assert_eq!(r.status, 200);
    let start = Instant::now();
    let mut partial = t.h1().await;
    partial
        .write_all(b"POST / HTTP/1.1\r\nHost: loc")
        .await
        .unwrap();
    let (a, b) = tokio::join!(closed_within(idle, start), closed_within(partial, start));
    assert_deadline("idle keep-alive", a);
    assert_deadline("partial request head", b);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_after_the_tls_handshake_is_closed() {
    let gw = TestGateway::start("[isolation]\nhandshake_timeout = \"1s\"\n").await;
    let t = Target::of(&gw);
    let start = Instant::now();
    let h1 = t.h1().await;
    let h2 = bounded(
        "TLS connect (h2)",
        tlsclient::connect_alpn(t.addr, &t.leaf, &[b"h2"]),
    )
    .await
    .unwrap();
    let (a, b) = tokio::join!(closed_within(h1, start), closed_within(h2, start));
    assert_deadline("silent after TLS (http/1.1)", a);
    assert_deadline("silent after TLS (h2)", b);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_request_body_releases_its_charge() {
    let gw = TestGateway::start("[isolation]\nhandshake_timeout = \"1s\"\n").await;
    let t = Target::of(&gw);
    let start = Instant::now();
    let mut stalled = t.h1().await;
    stalled
        .write_all(post_head(OCTET, 4096).as_bytes())
        .await
        .unwrap();
    usage_becomes(&gw, 4096).await;
    assert_deadline("stalled body", closed_within(stalled, start).await);
    assert_eq!(reassembly_usage(&gw), 0);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_sent_one_byte_a_second_is_cut_at_the_deadline_with_408() {
    let gw = TestGateway::start("[isolation]\nhandshake_timeout = \"2s\"\n").await;
    let t = Target::of(&gw);
    // A victim on opc.tcp reads meanwhile.
    let (chan, token) = gw.anon_session("victim").await;
    let mut trickle = t.h1().await;
    trickle
        .write_all(post_head(OCTET, 4096).as_bytes())
        .await
        .unwrap();
    let start = Instant::now();
    let writer = async {
        // One byte a second: each write keeps the connection alive, none
        // brings the body closer to done in time.
        for _ in 0..10 {
            if trickle.write_all(b"x").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            if start.elapsed() > Duration::from_secs(4) {
                break;
            }
        }
        trickle
    };
    let victim = async {
        let mut latencies = Vec::new();
        while start.elapsed() < Duration::from_secs(3) {
            let t0 = Instant::now();
            assert_eq!(chan.read_status(&token).await, StatusCode::Good);
            latencies.push(t0.elapsed());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        latencies
    };
    let (mut trickle, mut latencies) = tokio::join!(writer, victim);
    let reply = bounded("the 408", read_reply(&mut trickle)).await;
    assert_eq!(
        reply.status,
        408,
        "{:?}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(reassembly_usage(&gw), 0, "the body's charge is released");
    latencies.sort();
    println!(
        "trickled body: victim {} Reads, p50 {:?}, p99 {:?}",
        latencies.len(),
        latencies[latencies.len() / 2],
        latencies[(latencies.len() - 1) * 99 / 100]
    );
    chan.close().await;
    gw.stop().await;
}

/// A session created over a connection with a TLS client certificate ends
/// when the trust list refuses that certificate later, not only that
/// connection: the session's token is no use on any other connection
/// either (every opc.https connection shares one logical channel).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_of_a_client_certificate_refused_later_ends() {
    let gw = TestGateway::start("tls_client_auth = \"optional\"\n").await;
    let t = Target::of(&gw);
    let (cert, key) = tlsclient::client_identity();
    let trusted = gw
        .store
        .trust_add("test", cert.as_ref(), uagate_store::CertKind::Trusted)
        .await
        .unwrap();
    let mut certified = bounded(
        "mTLS connect",
        tlsclient::connect_with_client_cert(t.addr, &t.leaf, vec![cert.clone()], key),
    )
    .await
    .unwrap();
    let token = new_session(&mut certified, &t.url).await;
    let activated = call_h1(&mut certified, activate(&token, anonymous())).await;
    assert!(
        matches!(activated, ResponseMessage::ActivateSession(_)),
        "ActivateSession failed: {activated:?}"
    );
    // Another connection, without a client certificate, may use the token.
    let mut plain = t.h1().await;
    assert_status_read(&call_h1(&mut plain, read_status(&token)).await);

    gw.store
        .trust_remove("test", &trusted.thumbprint)
        .await
        .unwrap();
    // The re-check runs within the second the configuration watch takes.
    let t0 = Instant::now();
    loop {
        let answer = call_h1(&mut plain, read_status(&token)).await;
        if let ResponseMessage::ServiceFault(_) = answer {
            assert_eq!(fault(&answer), StatusCode::BadSessionIdInvalid);
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the session of a refused client certificate goes on: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(gw.session_count(), 0);
    gw.stop().await;
}
