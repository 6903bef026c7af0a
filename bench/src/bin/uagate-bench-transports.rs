#![forbid(unsafe_code)]
//! `uagate-bench-transports`: Read throughput of one uagate server over
//! opc.tcp, opc.wss and opc.https, the same sessions count and nodes on each.
//!
//! For each transport in turn `--sessions` sessions are opened, every one on
//! its own TCP (opc.tcp) or TLS (opc.wss, opc.https) connection, and each
//! loops `Read(10 ns0 nodes, TimestampsToReturn Neither)` back-to-back with
//! one outstanding request. After `--warmup` seconds, `--secs` seconds are
//! measured: completed Good reads, per-request latency, and the server's CPU
//! time from /proc/<pid>/stat. Prints one JSON line per transport, then a
//! Markdown table with the ratio of each transport's req/s to opc.tcp's.
//!
//! Clients (hand-made, SecurityPolicy None, anonymous):
//! - opc.tcp: UACP over TCP (Hello, OPN, CreateSession, ActivateSession,
//!   Read; the same client as `uagate-bench-fairness`).
//! - opc.wss: the same UACP bytes over a WebSocket (subprotocol
//!   `opcua+uacp`, tokio-tungstenite) over TLS (tokio-rustls), one UACP
//!   message per binary WebSocket message.
//! - opc.https: HTTP/1.1 POST (hyper client connection, keep-alive) over TLS
//!   per session; the body is the request's type NodeId and fields, the
//!   response comes back the same way. All HTTPS sessions share the server's
//!   one logical HTTPS channel; each has its own connection and session.
//!
//! TLS: the server certificate is pinned to `--cert` (the exact DER of the
//! first certificate in the PEM file; handshake signatures are verified with
//! ring); without `--cert` any certificate is accepted (loopback measuring
//! tool only). It is a measuring tool, not a test: it asserts nothing about
//! timing. `bench/run-transports.sh` drives it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use bytes::Bytes;
use clap::Parser;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use opcua_types::{
    BinaryEncodable, CloseSessionRequest, ContextOwned, DateTime, MessageInfo, NodeId,
    RequestHeader,
};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{
    ring as ring_provider, verify_tls12_signature, verify_tls13_signature,
    WebPkiSupportedAlgorithms,
};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{DigitallySignedStruct, SignatureScheme};
use tokio_rustls::TlsConnector;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use uagate_bench::service::{decode_body, encode_body, open_session, read, Call, Reply};
use uagate_bench::stats::{cpu_ticks, percentile, session_loop};
use uagate_bench::uacp::{self, Frames, MAX_FRAME};
use uagate_bench::{NODES, STEP};

/// Command line of the transport benchmark client.
#[derive(Parser)]
#[command(about = "Read throughput over opc.tcp, opc.wss and opc.https (SecurityPolicy None)")]
struct Args {
    /// opc.tcp endpoint, e.g. opc.tcp://127.0.0.1:4840/
    #[arg(long)]
    tcp_url: Option<String>,
    /// opc.wss endpoint, e.g. opc.wss://127.0.0.1:4843/
    #[arg(long)]
    wss_url: Option<String>,
    /// opc.https endpoint, e.g. opc.https://127.0.0.1:4843/
    #[arg(long)]
    https_url: Option<String>,
    /// The server's TLS certificate (PEM) to pin; without it any
    /// certificate is accepted.
    #[arg(long)]
    cert: Option<std::path::PathBuf>,
    /// Sessions per transport, each on its own connection.
    #[arg(long, default_value_t = 16)]
    sessions: usize,
    /// Measured seconds per transport.
    #[arg(long, default_value_t = 10)]
    secs: u64,
    /// Discarded warm-up seconds before each measured window.
    #[arg(long, default_value_t = 2)]
    warmup: u64,
    /// Transports to run, in this order (tcp, wss, https).
    #[arg(long, default_value = "tcp,wss,https", value_delimiter = ',')]
    transports: Vec<String>,
    /// PID of the server process: its CPU time over each window is reported.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Clock ticks per second for /proc/<pid>/stat (`getconf CLK_TCK`).
    #[arg(long, default_value_t = 100)]
    clk_tck: u64,
    /// Worker threads of the client runtime.
    #[arg(long, default_value_t = 1)]
    client_threads: usize,
    /// tungstenite read buffer of the opc.wss client (bytes; the library
    /// default is 128 KiB, which tungstenite zero-fills on every read).
    #[arg(long, default_value_t = 128 * 1024)]
    ws_read_buffer: usize,
    /// Free-text label copied into the result lines (e.g. the run number).
    #[arg(long, default_value = "")]
    label: String,
}

/// Session name of every session.
const SESSION_NAME: &str = "uagate-bench-transports";
/// The WebSocket subprotocol of UACP.
const SUBPROTOCOL: &str = "opcua+uacp";

// --------------------------------------------------------------------- TLS

/// Accepts exactly the pinned certificate (or any, when none is pinned);
/// handshake signatures are still checked against the presented key.
#[derive(Debug)]
struct Pinned {
    cert: Option<CertificateDer<'static>>,
    algs: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.cert {
            Some(pinned) if pinned.as_ref() != end_entity.as_ref() => Err(rustls::Error::General(
                "server certificate is not the pinned one".into(),
            )),
            _ => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// A TLS connector offering only `http/1.1` (WebSocket and HTTP/1.1 both).
fn tls_connector(cert: Option<&std::path::Path>) -> Result<TlsConnector> {
    let pinned = match cert {
        Some(path) => Some(
            CertificateDer::pem_file_iter(path)
                .with_context(|| format!("reading {}", path.display()))?
                .next()
                .with_context(|| format!("no certificate in {}", path.display()))?
                .with_context(|| format!("parsing {}", path.display()))?,
        ),
        None => None,
    };
    let provider = Arc::new(ring_provider::default_provider());
    let verifier = Arc::new(Pinned {
        cert: pinned,
        algs: provider.signature_verification_algorithms,
    });
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

async fn tls_connect(
    connector: &TlsConnector,
    to: SocketAddr,
) -> Result<(TlsStream<TcpStream>, String)> {
    let tcp = uacp::tcp_connect(to, None).await?;
    let name = ServerName::from(to.ip());
    let tls = connector
        .connect(name, tcp)
        .await
        .context("TLS handshake")?;
    let version = tls
        .get_ref()
        .1
        .protocol_version()
        .map_or_else(|| "?".to_string(), |v| format!("{v:?}"));
    Ok((tls, version))
}

// -------------------------------------------------------------- UACP session

/// The byte pipe of a UACP connection: TCP, or one UACP message per
/// binary WebSocket message over TLS.
enum Pipe {
    Tcp(TcpStream),
    Wss {
        ws: Box<WebSocketStream<TlsStream<TcpStream>>>,
        /// Bytes received but not yet returned as a frame.
        buf: Vec<u8>,
    },
}

impl Frames for Pipe {
    async fn send(&mut self, frame: Vec<u8>) -> Result<()> {
        match self {
            Pipe::Tcp(s) => s.send(frame).await,
            Pipe::Wss { ws, .. } => ws
                .send(Message::Binary(Bytes::from(frame)))
                .await
                .context("WebSocket send"),
        }
    }

    async fn recv(&mut self) -> Result<Vec<u8>> {
        match self {
            Pipe::Tcp(s) => s.recv().await,
            Pipe::Wss { ws, buf } => loop {
                // A frame may in principle span or share messages;
                // the server sends exactly one per message.
                if buf.len() >= 8 {
                    let size = uacp::frame_size(buf)?;
                    if buf.len() >= size {
                        let rest = buf.split_off(size);
                        return Ok(std::mem::replace(buf, rest));
                    }
                }
                match ws.next().await {
                    Some(Ok(Message::Binary(b))) => {
                        if buf.is_empty() {
                            *buf = b.to_vec();
                        } else {
                            buf.extend_from_slice(&b);
                        }
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                    Some(Ok(Message::Text(_))) => bail!("text message on opcua+uacp"),
                    Some(Ok(Message::Close(c))) => bail!("WebSocket closed by server: {c:?}"),
                    Some(Err(e)) => bail!("WebSocket: {e}"),
                    None => bail!("WebSocket ended"),
                }
            },
        }
    }
}

/// One session on its own UACP connection and secure channel.
type UacpSession = uacp::Session<Pipe>;

// ------------------------------------------------------------- HTTPS session

/// One session on its own HTTP/1.1 keep-alive connection over TLS.
struct HttpsSession {
    sender: SendRequest<Full<Bytes>>,
    /// The connection task (driven by the runtime); aborted on drop.
    conn: tokio::task::JoinHandle<()>,
    host: String,
    path: String,
    handle: u32,
    auth: NodeId,
    ctx: ContextOwned,
}

impl Drop for HttpsSession {
    fn drop(&mut self) {
        self.conn.abort();
    }
}

impl HttpsSession {
    async fn open(tls: TlsStream<TcpStream>, host: String, path: String) -> Result<HttpsSession> {
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .context("HTTP/1.1 handshake")?;
        let conn = tokio::spawn(async move {
            if let Err(e) = conn.await {
                eprintln!("https connection ended: {e}");
            }
        });
        let mut s = HttpsSession {
            sender,
            conn,
            host,
            path,
            handle: 1,
            auth: NodeId::null(),
            ctx: ContextOwned::default(),
        };
        s.auth = open_session(&mut s, SESSION_NAME).await?;
        Ok(s)
    }

    async fn close(mut self) -> Result<()> {
        let header = self.header();
        let _ = self
            .call(&CloseSessionRequest {
                request_header: header,
                delete_subscriptions: true,
            })
            .await?;
        Ok(())
    }
}

impl Call for HttpsSession {
    fn header(&self) -> RequestHeader {
        RequestHeader::new(&self.auth, &DateTime::now(), self.handle)
    }

    async fn call<M: BinaryEncodable + MessageInfo + Sync>(
        &mut self,
        request: &M,
    ) -> Result<Reply> {
        let mut body = Vec::new();
        encode_body(&mut body, request, &self.ctx)?;
        self.handle = self.handle.wrapping_add(1);
        let req = hyper::Request::post(self.path.as_str())
            .header(hyper::header::HOST, self.host.as_str())
            .header(hyper::header::CONTENT_TYPE, "application/octet-stream")
            .body(Full::new(Bytes::from(body)))
            .context("building the HTTP request")?;
        let r = tokio::time::timeout(STEP, async {
            self.sender.ready().await.context("connection not ready")?;
            let resp = self
                .sender
                .send_request(req)
                .await
                .context("HTTP request")?;
            let status = resp.status();
            let body = http_body_util::Limited::new(resp.into_body(), MAX_FRAME)
                .collect()
                .await
                .map_err(|e| anyhow::anyhow!("HTTP response body: {e}"))?
                .to_bytes();
            anyhow::Ok((status, body))
        })
        .await
        .context("no response within 30 s")??;
        let (status, body) = r;
        if status != hyper::StatusCode::OK {
            bail!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            );
        }
        decode_body(&body, &self.ctx)
    }
}

// ------------------------------------------------------------ both sessions

enum Session {
    Uacp(Box<UacpSession>),
    Https(Box<HttpsSession>),
}

impl Call for Session {
    fn header(&self) -> RequestHeader {
        match self {
            Session::Uacp(s) => s.header(),
            Session::Https(s) => s.header(),
        }
    }

    async fn call<M: BinaryEncodable + MessageInfo + Sync>(
        &mut self,
        request: &M,
    ) -> Result<Reply> {
        match self {
            Session::Uacp(s) => s.call(request).await,
            Session::Https(s) => s.call(request).await,
        }
    }
}

impl Session {
    async fn close(self) -> Result<()> {
        match self {
            Session::Uacp(s) => {
                if let Pipe::Wss { ws, .. } = &mut s.close().await? {
                    let _ = WebSocketStream::close(ws.as_mut(), None).await;
                }
                Ok(())
            }
            Session::Https(s) => s.close().await,
        }
    }
}

// ---------------------------------------------------------------- transports

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Tcp,
    Wss,
    Https,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Tcp => "opc.tcp",
            Kind::Wss => "opc.wss",
            Kind::Https => "opc.https",
        }
    }
}

/// Socket address and path of `scheme://IP:PORT/path` (literal IP host).
fn split_url(url: &str, scheme: &str) -> Result<(SocketAddr, String)> {
    let rest = url
        .strip_prefix(scheme)
        .and_then(|r| r.strip_prefix("://"))
        .with_context(|| format!("{url}: expected a {scheme}:// URL"))?;
    let (host_port, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = host_port
        .parse()
        .with_context(|| format!("{url}: host must be a literal IP:port"))?;
    Ok((addr, path.to_string()))
}

/// Opens one session of `kind` at `url` and checks one Read is all Good.
/// Returns the session and the TLS version used (if any).
async fn connect(
    kind: Kind,
    url: &str,
    tls: &TlsConnector,
    ws_read_buffer: usize,
) -> Result<(Session, Option<String>)> {
    let (mut session, version) = match kind {
        Kind::Tcp => {
            let (to, _) = split_url(url, "opc.tcp")?;
            let s = uacp::tcp_connect(to, None).await?;
            (
                Session::Uacp(Box::new(
                    UacpSession::open(Pipe::Tcp(s), url, SESSION_NAME).await?,
                )),
                None,
            )
        }
        Kind::Wss => {
            let (to, path) = split_url(url, "opc.wss")?;
            let (stream, version) = tls_connect(tls, to).await?;
            let mut req = format!("wss://{to}{path}")
                .into_client_request()
                .context("WebSocket request")?;
            req.headers_mut().insert(
                "Sec-WebSocket-Protocol",
                HeaderValue::from_static(SUBPROTOCOL),
            );
            let config = WebSocketConfig::default()
                .max_message_size(Some(MAX_FRAME))
                .max_frame_size(Some(MAX_FRAME))
                .read_buffer_size(ws_read_buffer.max(64));
            let (ws, resp) = tokio_tungstenite::client_async_with_config(req, stream, Some(config))
                .await
                .context("WebSocket upgrade")?;
            let proto = resp
                .headers()
                .get("Sec-WebSocket-Protocol")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if proto != SUBPROTOCOL {
                bail!("server chose WebSocket subprotocol {proto:?}");
            }
            let pipe = Pipe::Wss {
                ws: Box::new(ws),
                buf: Vec::new(),
            };
            (
                Session::Uacp(Box::new(UacpSession::open(pipe, url, SESSION_NAME).await?)),
                Some(version),
            )
        }
        Kind::Https => {
            let (to, path) = split_url(url, "opc.https")?;
            let (stream, version) = tls_connect(tls, to).await?;
            (
                Session::Https(Box::new(
                    HttpsSession::open(stream, to.to_string(), path).await?,
                )),
                Some(version),
            )
        }
    };
    match read(&mut session).await? {
        Ok(true) => Ok((session, version)),
        Ok(false) => bail!("a benchmark node does not read Good"),
        Err(status) => bail!("verification read failed: {status}"),
    }
}

/// Opens the sessions of one transport, measures, closes them; one JSON line.
async fn run_transport(
    args: &Args,
    kind: Kind,
    url: &str,
    tls: &TlsConnector,
) -> Result<serde_json::Value> {
    let connect_start = Instant::now();
    let mut sessions = Vec::with_capacity(args.sessions);
    let mut tls_version = None;
    for i in 0..args.sessions {
        let (s, v) = tokio::time::timeout(STEP, connect(kind, url, tls, args.ws_read_buffer))
            .await
            .with_context(|| format!("{} session {i}: connect timed out", kind.name()))?
            .with_context(|| format!("{} session {i}", kind.name()))?;
        tls_version = v;
        sessions.push(s);
    }
    let connect_s = connect_start.elapsed().as_secs_f64();
    let pid = args.server_pid.map(|p| p.to_string());

    let begin = Instant::now();
    let measure_from = begin + Duration::from_secs(args.warmup);
    let end = measure_from + Duration::from_secs(args.secs);
    let tasks: Vec<_> = sessions
        .into_iter()
        .map(|s| tokio::spawn(session_loop(s, measure_from, end)))
        .collect();
    tokio::time::sleep_until(measure_from.into()).await;
    let cpu0 = pid.as_deref().and_then(cpu_ticks);
    let own0 = cpu_ticks("self");
    tokio::time::sleep_until(end.into()).await;
    let cpu1 = pid.as_deref().and_then(cpu_ticks);
    let own1 = cpu_ticks("self");

    let mut latencies = Vec::new();
    let mut per_session = Vec::new();
    let mut errors = 0;
    let mut broken = Vec::new();
    let mut back = Vec::new();
    for t in tasks {
        let (s, m) = t.await.context("session task panicked")?;
        back.extend(s);
        per_session.push(m.latencies_us.len());
        latencies.extend(m.latencies_us);
        errors += m.errors;
        broken.extend(m.broke);
    }
    latencies.sort_unstable();
    for e in &broken {
        eprintln!("{}: session broke: {e}", kind.name());
    }
    let mut close_errors = 0;
    for s in back {
        if let Err(e) = tokio::time::timeout(STEP, s.close())
            .await
            .map_err(anyhow::Error::from)
            .and_then(|r| r)
        {
            close_errors += 1;
            eprintln!("{}: close failed: {e:#}", kind.name());
        }
    }

    let tick = args.clk_tck.max(1) as f64;
    let delta = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / tick),
        _ => None,
    };
    let server_cpu = delta(cpu0, cpu1);
    let client_cpu = delta(own0, own1);
    let n = latencies.len();
    let secs = args.secs.max(1) as f64;
    let per_req_us = |cpu: Option<f64>| {
        cpu.filter(|_| n > 0)
            .map(|c| (c * 1e6 / n as f64 * 10.0).round() / 10.0)
    };
    let round2 = |v: Option<f64>| v.map(|v| (v * 100.0).round() / 100.0);
    Ok(serde_json::json!({
        "label": args.label,
        "transport": kind.name(),
        "url": url,
        "tls": tls_version,
        "cert_pinned": args.cert.is_some(),
        "ws_read_buffer": (kind == Kind::Wss).then_some(args.ws_read_buffer),
        "sessions": args.sessions,
        "nodes_per_request": NODES.len(),
        "warmup_s": args.warmup,
        "secs": args.secs,
        "connect_s": (connect_s * 1000.0).round() / 1000.0,
        "requests": n,
        "req_per_s": (n as f64 / secs).round(),
        "p50_us": percentile(&latencies, 50.0),
        "p99_us": percentile(&latencies, 99.0),
        "max_us": latencies.last().copied().unwrap_or(0),
        "errors": errors,
        "broken_sessions": broken.len(),
        "close_errors": close_errors,
        "per_session_min": per_session.iter().min().copied().unwrap_or(0),
        "per_session_max": per_session.iter().max().copied().unwrap_or(0),
        "server_cpu_s": round2(server_cpu),
        "client_cpu_s": round2(client_cpu),
        "server_cpu_us_per_req": per_req_us(server_cpu),
        "client_cpu_us_per_req": per_req_us(client_cpu),
    }))
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.sessions == 0 || args.secs == 0 {
        bail!("--sessions and --secs must be at least 1");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.client_threads.max(1))
        .enable_all()
        .build()
        .context("client runtime")?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> Result<()> {
    let tls = tls_connector(args.cert.as_deref())?;
    let mut lines = Vec::new();
    for t in &args.transports {
        let (kind, url) = match t.trim() {
            "tcp" => (Kind::Tcp, args.tcp_url.as_deref()),
            "wss" => (Kind::Wss, args.wss_url.as_deref()),
            "https" => (Kind::Https, args.https_url.as_deref()),
            other => bail!("unknown transport {other:?} (tcp, wss, https)"),
        };
        let url = url.with_context(|| format!("--{}-url is required for {t}", t.trim()))?;
        let line = run_transport(&args, kind, url, &tls)
            .await
            .with_context(|| kind.name())?;
        println!("{line}");
        lines.push(line);
    }
    // Markdown table with each transport's ratio to opc.tcp.
    let tcp_rps = lines
        .iter()
        .find(|l| l["transport"] == "opc.tcp")
        .and_then(|l| l["req_per_s"].as_f64())
        .filter(|v| *v > 0.0);
    println!();
    println!("| transport | req/s | p50 ms | p99 ms | server CPU s | server CPU µs/req | client CPU s | errors | ratio to tcp |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let f = |v: &serde_json::Value| v.as_f64().map_or("n/a".to_string(), |v| format!("{v}"));
    for l in &lines {
        let rps = l["req_per_s"].as_f64().unwrap_or(0.0);
        let ratio = tcp_rps.map_or("n/a".to_string(), |t| format!("{:.2}", rps / t));
        println!(
            "| {} | {:.0} | {:.2} | {:.2} | {} | {} | {} | {} | {} |",
            l["transport"].as_str().unwrap_or("?"),
            rps,
            l["p50_us"].as_f64().unwrap_or(0.0) / 1000.0,
            l["p99_us"].as_f64().unwrap_or(0.0) / 1000.0,
            f(&l["server_cpu_s"]),
            f(&l["server_cpu_us_per_req"]),
            f(&l["client_cpu_s"]),
            l["errors"],
            ratio
        );
    }
    Ok(())
}
