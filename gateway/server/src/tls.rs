//! The TLS listener (default port 4843) serving opc.wss and opc.https
//! through the same engine, dispatcher and isolation policy as opc.tcp.
//!
//! Order of admission for every TCP connection:
//! 1. The connection rate limiter and the Connection and Handshake stages,
//!    before any TLS state exists. A capacity refusal closes the socket. A
//!    rate refusal is answered `HTTP 429` with `Retry-After`, which needs a
//!    TLS handshake; at most [`MAX_RATE_REFUSALS`] of those run at once
//!    (beyond that the socket is just closed).
//! 2. The TLS handshake, under the Handshake stage and `handshake_timeout`.
//! 3. HTTP/1.1 or HTTP/2 (ALPN). `GET` with a WebSocket upgrade offering
//!    `opcua+uacp` becomes an opc.wss connection: its UACP handshake is
//!    charged to the Handshake stage again (refused: `HTTP 503`), then the
//!    connection runs through the opc.tcp driver. `POST` of a binary request
//!    is opc.https: the body is charged to ReassemblyBytes before it is read
//!    (refused: `HTTP 503`), limited to `max_message_size` (`HTTP 413`),
//!    decoded with the same guarded decoder, and queued like any request.
//!
//! Owners are the same as on opc.tcp: the peer address (ingress rules
//! apply), then the session's verified certificate where there is one. All
//! opc.https requests share one logical secure channel (OPC 10000-6 §7.4):
//! a session created over HTTPS is bound to it, whichever TCP connection a
//! later request arrives on; each request is charged to the connection's
//! caller and is never taken as a lasting client identity.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode as HttpStatus};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use opcua_core::ResponseMessage;
use opcua_crypto::{SecurityPolicy, X509};
use opcua_types::{ByteString, ContextOwned, MessageSecurityMode, ResponseHeader, ServiceFault};
use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_rustls::TlsAcceptor;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;
use uagate_config::{Stage, UserToken};

use crate::admission::{Caller, ConnectionAdmission, Refusal};
use crate::dispatch::Reply;
use crate::{ChannelInfo, Engine};

/// Rate-limited connections answered `HTTP 429` at the same time; more are
/// closed without a handshake (the limiter exists to save that work).
pub const MAX_RATE_REFUSALS: usize = 16;

/// What a refused caller is told to wait before retrying, in seconds.
pub const RETRY_AFTER_SECS: u32 = 1;

/// Read buffer of a WebSocket connection (UACP chunks are small).
const WS_READ_BUFFER: usize = 16 * 1024;

/// Ping interval and timeout of HTTP/2 connections (dead peers are dropped).
pub const HTTP2_KEEP_ALIVE: Duration = Duration::from_secs(30);

/// Longest an opc.https request may wait for its response.
pub const MAX_REQUEST_WAIT: Duration = Duration::from_secs(300);

/// Content types of a binary opc.https request (the second is the legacy
/// name, OPC 10000-6 Table 78).
const BINARY_TYPES: [&str; 2] = ["application/octet-stream", "application/opcua+uabinary"];

/// The single logical secure channel shared by every opc.https request:
/// its channel id, the user tokens of the endpoint, and the requests
/// waiting for their responses by request id.
pub(crate) struct HttpsChannel {
    pub(crate) channel_id: u32,
    pub(crate) tokens: Vec<UserToken>,
    next_request: AtomicU32,
    waiting: Mutex<HashMap<u32, oneshot::Sender<ResponseMessage>>>,
}

impl HttpsChannel {
    pub(crate) fn new(channel_id: u32, tokens: Vec<UserToken>) -> HttpsChannel {
        HttpsChannel {
            channel_id,
            tokens,
            next_request: AtomicU32::new(1),
            waiting: Mutex::new(HashMap::new()),
        }
    }

    /// Forwards responses from the dispatcher (and the subscription timer,
    /// for Publish) to the HTTP requests waiting for them; runs for the
    /// life of the server.
    pub(crate) async fn route(self: Arc<Self>, mut replies: mpsc::Receiver<Reply>) {
        while let Some((request_id, response, _claim)) = replies.recv().await {
            if let Some(tx) = self.waiting.lock().remove(&request_id) {
                let _ = tx.send(response);
            }
        }
    }
}

/// Removes a waiting request's entry when its HTTP request ends early.
struct Waiting<'a>(&'a HttpsChannel, u32);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.lock().remove(&self.1);
    }
}

/// Accepts TLS connections until `cancel`; one task per connection.
pub(crate) async fn accept_loop(
    engine: Arc<Engine>,
    listener: TcpListener,
    acceptor: TlsAcceptor,
    cancel: CancellationToken,
) {
    let refusals = Arc::new(Semaphore::new(MAX_RATE_REFUSALS));
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => break,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "TLS accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Admission comes before any TLS state exists.
        match engine
            .pipeline
            .admission()
            .admit_connection(peer.ip(), Instant::now())
        {
            Ok(admitted) => {
                let _ = stream.set_nodelay(true);
                let engine = engine.clone();
                let acceptor = acceptor.clone();
                let cancel = cancel.clone();
                tokio::spawn(async move {
                    serve(engine, stream, peer, acceptor, admitted, cancel).await;
                });
            }
            Err(Refusal::Rate) => match refusals.clone().try_acquire_owned() {
                Ok(permit) => {
                    let engine = engine.clone();
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        refuse_rate(&engine, stream, acceptor).await;
                        drop(permit);
                    });
                }
                Err(_) => drop(stream),
            },
            Err(refusal) => {
                tracing::debug!(%peer, %refusal, "TLS connection refused");
                drop(stream);
            }
        }
    }
}

/// Answers every request of a rate-limited connection with `HTTP 429` and
/// `Retry-After`, within the handshake deadline.
async fn refuse_rate(engine: &Engine, stream: TcpStream, acceptor: TlsAcceptor) {
    let deadline = engine.config.isolation.handshake_timeout;
    let _ = tokio::time::timeout(deadline, async {
        let Ok(tls) = acceptor.accept(stream).await else {
            return;
        };
        refuse_all(
            tls,
            HttpStatus::TOO_MANY_REQUESTS,
            "connection rate exceeded",
        )
        .await;
    })
    .await;
}

/// Per-connection state shared by its HTTP requests.
struct Conn {
    engine: Arc<Engine>,
    caller: Caller,
    /// The client's address.
    peer: std::net::IpAddr,
    /// The connection's leases; taken by a WebSocket upgrade, which then
    /// owns the connection.
    admission: Mutex<Option<ConnectionAdmission>>,
    /// The verified TLS client certificate (mutual TLS), DER and parsed.
    client_cert: Option<(ByteString, X509)>,
    /// The accounting owner of that certificate, worked out once.
    application_owner: Option<uagate_isolation::owner::OwnerKey>,
    /// Counts the connection under opc.https until a WebSocket upgrade
    /// takes it over (it is then counted under opc.wss).
    open: Mutex<Option<crate::stats::OpenCount>>,
    /// Cancelled when the trust list refuses the client certificate now
    /// (a child of `cancel`); a WebSocket upgrade takes it along.
    refused: CancellationToken,
    /// The re-check registration of the client certificate (see
    /// `Channels::certify`): closed when the HTTP connection ends, or by
    /// the WebSocket that took it over when that ends.
    certified: Mutex<Option<u32>>,
}

/// Checks a TLS client certificate against the trust list; an unknown one
/// is recorded as rejected so the operator can approve it.
async fn client_certificate(engine: &Engine, der: &[u8]) -> Result<X509, String> {
    let cert = X509::from_der(der).map_err(|e| format!("unparsable certificate: {e}"))?;
    let verdict = engine
        .store
        .validate_certificate(der, chrono::Utc::now())
        .await
        .map_err(|e| format!("trust list lookup failed: {e}"))?;
    if verdict == uagate_store::TrustVerdict::Untrusted {
        if let Err(e) = engine.store.record_rejected(der).await {
            tracing::warn!(error = %e, "could not record rejected certificate");
        }
    }
    if verdict.is_trusted() {
        Ok(cert)
    } else {
        Err(verdict.to_string())
    }
}

/// Answers every request on `tls` with `status` (429 and 503 with
/// `Retry-After`) and closes.
async fn refuse_all<S>(tls: S, status: HttpStatus, why: &'static str)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |_req: Request<Incoming>| async move {
        let mut r = text(status, why);
        if matches!(
            status,
            HttpStatus::TOO_MANY_REQUESTS | HttpStatus::SERVICE_UNAVAILABLE
        ) {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        Ok::<_, Infallible>(r)
    });
    let _ = tokio::time::timeout(
        Duration::from_secs(10),
        Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(tls), service),
    )
    .await;
}

/// Runs the TLS handshake and then HTTP on one admitted connection.
async fn serve(
    engine: Arc<Engine>,
    stream: TcpStream,
    peer: SocketAddr,
    acceptor: TlsAcceptor,
    mut admitted: ConnectionAdmission,
    cancel: CancellationToken,
) {
    let deadline = engine.config.isolation.handshake_timeout;
    let tls = match tokio::time::timeout(deadline, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake not finished in time");
            return;
        }
    };
    // Mutual TLS: a presented client certificate must be on the trust list
    // (an unknown one is listed for the operator); a refused client gets
    // HTTP 403 for every request and no upgrade.
    let presented = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.as_ref().to_vec());
    let client_cert = match presented {
        None => None,
        Some(der) => match client_certificate(&engine, &der).await {
            Ok(cert) => Some((ByteString::from(der), cert)),
            Err(why) => {
                tracing::warn!(%peer, %why, "TLS client certificate refused");
                refuse_all(tls, HttpStatus::FORBIDDEN, "client certificate not trusted").await;
                return;
            }
        },
    };
    // The TLS handshake is over; a WebSocket's UACP handshake charges again.
    admitted.handshake = None;
    // A connection with a client certificate ends when the trust list
    // refuses that certificate later (`standing.rs`), like a secure channel.
    let refused = cancel.child_token();
    let certified = client_cert.as_ref().map(|(der, _)| {
        let id = engine.channels.allocate_id();
        engine.channels.certify(id, der.clone(), refused.clone());
        id
    });
    let conn = Arc::new(Conn {
        engine: engine.clone(),
        caller: admitted.caller.clone(),
        peer: admitted.peer,
        admission: Mutex::new(Some(admitted)),
        refused: refused.clone(),
        certified: Mutex::new(certified),
        application_owner: client_cert
            .as_ref()
            .and_then(|(_, c)| ChannelInfo::owner_of(c)),
        client_cert,
        open: Mutex::new(Some(crate::stats::OpenCount::new(
            engine.clone(),
            "opc.https",
            false,
        ))),
    });
    // A connection must start its first request within the handshake
    // deadline (HTTP/1 heads after that are bounded by hyper's header
    // timeout; an HTTP/2 connection stays while it is used and answers
    // keep-alive pings).
    let started = Arc::new(tokio::sync::Notify::new());
    let this = conn.clone();
    let service = {
        let started = started.clone();
        hyper::service::service_fn(move |req| {
            started.notify_one();
            let conn = conn.clone();
            async move { Ok::<_, Infallible>(route(conn, req).await) }
        })
    };
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(deadline)
        .max_buf_size(64 * 1024);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(64)
        .keep_alive_interval(Some(HTTP2_KEEP_ALIVE))
        .keep_alive_timeout(HTTP2_KEEP_ALIVE);
    // ALPN decides the protocol, so no unbounded sniffing of the first bytes.
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
    let builder = if h2 {
        builder.http2_only()
    } else {
        builder.http1_only()
    };
    let served = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
    // Resolves only when no request started within the deadline.
    let no_request_in_time = async {
        if tokio::time::timeout(deadline, started.notified())
            .await
            .is_ok()
        {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        r = served => {
            if let Err(e) = r {
                tracing::debug!(%peer, error = %e, "HTTP connection ended");
            }
        }
        _ = refused.cancelled() => {}
        _ = no_request_in_time => {
            tracing::debug!(%peer, "no HTTP request in time after the TLS handshake");
        }
    }
    // Unless a WebSocket took the registration over.
    let registered = this.certified.lock().take();
    if let Some(id) = registered {
        engine.channels.close(id);
    }
}

fn text(status: HttpStatus, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn unavailable(body: &'static str) -> Response<Full<Bytes>> {
    let mut r = text(HttpStatus::SERVICE_UNAVAILABLE, body);
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    r
}

async fn route(conn: Arc<Conn>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() == Method::POST {
        return https(&conn, req).await;
    }
    if req.method() == Method::GET && is_upgrade(&req) {
        return websocket(&conn, req);
    }
    let mut r = text(
        HttpStatus::METHOD_NOT_ALLOWED,
        "opc.https: POST a binary request; opc.wss: GET with a WebSocket upgrade (opcua+uacp)",
    );
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET, POST"));
    r
}

/// Whether the request asks for a WebSocket upgrade.
fn is_upgrade(req: &Request<Incoming>) -> bool {
    let has = |name: header::HeaderName, token: &str| {
        req.headers().get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    has(header::UPGRADE, "websocket") && has(header::CONNECTION, "upgrade")
}

/// Answers a WebSocket upgrade: 101 with `opcua+uacp`, then the UACP
/// connection runs on the upgraded stream; 400 without that subprotocol or
/// a valid handshake; 503 when the Handshake stage has no room.
fn websocket(conn: &Arc<Conn>, mut req: Request<Incoming>) -> Response<Full<Bytes>> {
    let version_ok = req
        .headers()
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_some_and(|v| v.as_bytes() == b"13");
    let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY).cloned() else {
        return text(HttpStatus::BAD_REQUEST, "missing Sec-WebSocket-Key");
    };
    if !version_ok {
        let mut r = text(HttpStatus::BAD_REQUEST, "WebSocket version 13 required");
        r.headers_mut().insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        return r;
    }
    let offered = req
        .headers()
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == crate::ws::SUBPROTOCOL);
    if !offered {
        return text(
            HttpStatus::BAD_REQUEST,
            "the WebSocket subprotocol opcua+uacp is required",
        );
    }
    let engine = &conn.engine;
    // The UACP handshake ahead is charged like an opc.tcp connection's.
    let handshake = match engine
        .pipeline
        .admission()
        .acquire(Stage::Handshake, &conn.caller, 1)
    {
        Ok(lease) => lease,
        Err(rejection) => {
            tracing::debug!(%rejection, "WebSocket upgrade refused");
            return unavailable("no capacity for a new channel; try again later");
        }
    };
    let Some(mut admitted) = conn.admission.lock().take() else {
        return text(HttpStatus::BAD_REQUEST, "connection already upgraded");
    };
    conn.open.lock().take();
    admitted.handshake = Some(handshake);
    let on_upgrade = hyper::upgrade::on(&mut req);
    let limit = engine.config.server.max_buffer_size as usize;
    let engine = engine.clone();
    // The WebSocket ends when the trust list refuses the TLS client
    // certificate, as the HTTP connection it came from would: it takes the
    // certificate's re-check registration along.
    let cancel = conn.refused.clone();
    let certified = conn.certified.lock().take();
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(error = %e, "WebSocket upgrade failed");
                if let Some(id) = certified {
                    engine.channels.close(id);
                }
                return;
            }
        };
        // One UACP chunk per message: at most the receive buffer size.
        // The read buffer is cleared on every read attempt, so a small one
        // (messages are single chunks) saves zero-filling 128 KiB per read.
        let config = WebSocketConfig::default()
            .max_message_size(Some(limit))
            .max_frame_size(Some(limit))
            .read_buffer_size(WS_READ_BUFFER);
        let ws =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config))
                .await;
        let ping_after = engine.config.server.websocket_ping_interval;
        let transport = crate::ws::WsTransport::with_keepalive(ws, ping_after);
        crate::driver::drive_transport(engine.clone(), transport, cancel, admitted).await;
        if let Some(id) = certified {
            engine.channels.close(id);
        }
    });
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = HttpStatus::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    if let Ok(v) = HeaderValue::from_str(&derive_accept_key(key.as_bytes())) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    h.insert(
        header::SEC_WEBSOCKET_PROTOCOL,
        HeaderValue::from_static(crate::ws::SUBPROTOCOL),
    );
    r
}

/// One opc.https request: a binary-encoded service request in, its
/// binary-encoded response out (`HTTP 200` also for a ServiceFault).
async fn https(conn: &Arc<Conn>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let engine = &conn.engine;
    let Some(channel) = engine.endpoints.https() else {
        return text(HttpStatus::NOT_FOUND, "opc.https is not enabled");
    };
    let binary = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .is_some_and(|t| BINARY_TYPES.contains(&t.as_str()));
    if !binary {
        return text(
            HttpStatus::UNSUPPORTED_MEDIA_TYPE,
            "opc.https takes application/octet-stream (UA Binary)",
        );
    }
    let max = engine.config.server.max_message_size as usize;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > max) {
        return text(
            HttpStatus::PAYLOAD_TOO_LARGE,
            "request body exceeds max_message_size",
        );
    }
    // The body is charged before it is read: its length when declared,
    // else the largest message it could be.
    let charge = declared.unwrap_or(max) as u64;
    let retained =
        match engine
            .pipeline
            .admission()
            .acquire(Stage::ReassemblyBytes, &conn.caller, charge)
        {
            Ok(lease) => lease,
            Err(rejection) => {
                tracing::debug!(%rejection, "opc.https body refused");
                return unavailable("no room for the request body; try again later");
            }
        };
    // The body must arrive within the handshake deadline: a stalled body
    // would otherwise keep its ReassemblyBytes charge forever.
    let deadline = engine.config.isolation.handshake_timeout;
    let read = tokio::time::timeout(deadline, Limited::new(req.into_body(), max).collect()).await;
    let Ok(read) = read else {
        return text(
            HttpStatus::REQUEST_TIMEOUT,
            "request body not received in time",
        );
    };
    let body = match read {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return text(
                HttpStatus::PAYLOAD_TOO_LARGE,
                "request body exceeds max_message_size",
            )
        }
        Err(_) => return text(HttpStatus::BAD_REQUEST, "request body could not be read"),
    };
    let ctx = ContextOwned::default();
    let request = match uagate_proto::decode::decode_request_body(&body, &ctx.context()) {
        Ok(r) => r,
        // The header decoded: a ServiceFault answers the request, as on
        // opc.tcp (the body, not the transport, is wrong).
        Err(e @ uagate_proto::ProtoError::RequestUndecodable { request_handle, .. }) => {
            tracing::debug!(error = %e, "opc.https request not decodable");
            let fault = ServiceFault {
                response_header: ResponseHeader::new_service_result(request_handle, e.status()),
            };
            return ua_body(&ResponseMessage::ServiceFault(Box::new(fault)), &ctx);
        }
        Err(e) => {
            tracing::debug!(error = %e, "opc.https request not decodable");
            return text(
                HttpStatus::BAD_REQUEST,
                "request body is not a UA Binary request",
            );
        }
    };
    drop(body);
    drop(retained);
    let chan = ChannelInfo {
        channel_id: channel.channel_id,
        policy: SecurityPolicy::None,
        mode: MessageSecurityMode::None,
        // A verified TLS client certificate makes the caller that
        // application (owner by certificate); otherwise its address.
        client_certificate: conn
            .client_cert
            .as_ref()
            .map_or_else(ByteString::null, |(der, _)| der.clone()),
        client_cert: conn.client_cert.as_ref().map(|(_, c)| c.clone()),
        application_owner: conn.application_owner.clone(),
        tokens: channel.tokens.clone(),
        caller: Some(conn.caller.clone()),
        transport_encrypted: true,
        transport: "opc.https",
        peer: Some(conn.peer),
    };
    let request_id = channel.next_request.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = oneshot::channel();
    channel.waiting.lock().insert(request_id, tx);
    let _waiting = Waiting(channel, request_id);
    let chan = Arc::new(chan);
    let response = match engine.submit(&chan, request_id, Box::new(request), None) {
        Err(refusal) => refusal,
        Ok(()) => match tokio::time::timeout(MAX_REQUEST_WAIT, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) | Err(_) => return text(HttpStatus::GATEWAY_TIMEOUT, "no response in time"),
        },
    };
    ua_body(&response, &ctx)
}

/// The HTTP response carrying `response` as a UA Binary body.
fn ua_body(response: &ResponseMessage, ctx: &ContextOwned) -> Response<Full<Bytes>> {
    match uagate_proto::decode::encode_response_body(response, &ctx.context()) {
        Ok(bytes) => {
            let mut r = Response::new(Full::new(Bytes::from(bytes)));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            r
        }
        Err(e) => {
            tracing::warn!(error = %e, "opc.https response not encodable");
            text(
                HttpStatus::INTERNAL_SERVER_ERROR,
                "response could not be encoded",
            )
        }
    }
}
