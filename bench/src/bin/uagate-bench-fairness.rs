#![forbid(unsafe_code)]
//! `uagate-bench-fairness`: how two owners share a uagate server.
//!
//! Owner A (`--a-sessions` sessions whose sockets are bound to `--a-addr`)
//! and owner B (`--b-sessions` sessions bound to `--b-addr`) each loop
//! `Read(10 ns0 nodes)` back-to-back, one outstanding request per session,
//! every session on its own TCP connection and secure channel. First A runs
//! alone (the solo phase), then A and B run together. For each phase a
//! warm-up is discarded and the measured window is counted: completed
//! requests and per-request latency per owner. Prints one JSON line with
//! A's share of all completed requests during the overlap and A's p99
//! (together) / A's p99 (solo).
//!
//! async-opcua-client cannot bind a source address, so this is a small
//! hand-made UA-TCP client for SecurityPolicy None: Hello, OpenSecureChannel,
//! CreateSession, anonymous ActivateSession, Read. It is a measuring tool,
//! not a test: it asserts nothing about timing. `bench/run-fairness.sh`
//! drives it over the isolation modes.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use opcua_types::{
    ActivateSessionRequest, ActivateSessionResponse, AnonymousIdentityToken, BinaryDecodable,
    BinaryEncodable, ByteString, ContextOwned, CreateSessionRequest, CreateSessionResponse,
    DateTime, ExtensionObject, MessageInfo, MessageSecurityMode, NodeId, ObjectId,
    OpenSecureChannelRequest, OpenSecureChannelResponse, ReadRequest, ReadResponse, ReadValueId,
    RequestHeader, SecurityTokenRequestType, ServiceFault, StatusCode, TimestampsToReturn,
    VariableId,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Command line of the fairness benchmark client.
#[derive(Parser)]
#[command(about = "Two-owner fairness benchmark (hand-made UA-TCP client, SecurityPolicy None)")]
struct Args {
    /// Endpoint URL of the server, e.g. opc.tcp://127.0.0.1:4840/
    #[arg(long)]
    endpoint: String,
    /// Source address of owner A's sockets.
    #[arg(long, default_value = "127.0.0.2")]
    a_addr: IpAddr,
    /// Source address of owner B's sockets.
    #[arg(long, default_value = "127.0.0.3")]
    b_addr: IpAddr,
    /// Sessions of owner A.
    #[arg(long, default_value_t = 8)]
    a_sessions: usize,
    /// Sessions of owner B.
    #[arg(long, default_value_t = 32)]
    b_sessions: usize,
    /// Measured seconds of A alone.
    #[arg(long, default_value_t = 10)]
    solo: u64,
    /// Measured seconds of A and B together.
    #[arg(long, default_value_t = 15)]
    together: u64,
    /// Discarded warm-up seconds before each measured window.
    #[arg(long, default_value_t = 2)]
    warmup: u64,
    /// PID of the server process: its CPU time over the overlap window is reported.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Clock ticks per second for /proc/<pid>/stat (`getconf CLK_TCK`).
    #[arg(long, default_value_t = 100)]
    clk_tck: u64,
    /// Free-text label copied into the result line (e.g. the isolation mode).
    #[arg(long, default_value = "")]
    label: String,
    /// Run both owners' sessions on one client runtime instead of one
    /// runtime (own worker threads) per owner. With a shared runtime B's
    /// completions compete with A's for the client's threads, which no
    /// server policy can correct; owners are normally different machines.
    #[arg(long)]
    shared_client_runtime: bool,
    /// Worker threads of each client runtime.
    #[arg(long, default_value_t = 2)]
    client_threads: usize,
}

/// The ten Value attributes read by every request (as in `uagate-bench`).
const NODES: [VariableId; 10] = [
    VariableId::Server_ServerArray,
    VariableId::Server_NamespaceArray,
    VariableId::Server_ServerStatus,
    VariableId::Server_ServerStatus_StartTime,
    VariableId::Server_ServerStatus_CurrentTime,
    VariableId::Server_ServerStatus_State,
    VariableId::Server_ServerStatus_BuildInfo_ProductName,
    VariableId::Server_ServerStatus_BuildInfo_ProductUri,
    VariableId::Server_ServerStatus_BuildInfo_ManufacturerName,
    VariableId::Server_ServiceLevel,
];

/// Timeout for connecting and for any single request.
const STEP: Duration = Duration::from_secs(30);
const NONE_URI: &str = "http://opcfoundation.org/UA/SecurityPolicy#None";
/// Receive/send buffer size offered in Hello; larger responses come in chunks.
const BUFFER: u32 = 65_536;
/// Largest frame accepted from the server.
const MAX_FRAME: usize = 1 << 24;

/// Puts the frame length into bytes 4..8 of a UA-TCP frame.
fn with_size(mut frame: Vec<u8>) -> Result<Vec<u8>> {
    let n = u32::try_from(frame.len()).context("frame too large")?;
    frame[4..8].copy_from_slice(&n.to_le_bytes());
    Ok(frame)
}

fn put_string(out: &mut Vec<u8>, s: &str) -> Result<()> {
    let n = i32::try_from(s.len()).context("string too long")?;
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

fn le_u32(b: &[u8], at: usize) -> Result<u32> {
    let s = b.get(at..at + 4).context("truncated frame")?;
    Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// What a response body decoded to.
enum Reply {
    Opn(Box<OpenSecureChannelResponse>),
    Created(Box<CreateSessionResponse>),
    Activated,
    Read(Box<ReadResponse>),
    Fault(StatusCode),
}

/// One session on its own TCP connection and secure channel.
struct HandSession {
    s: TcpStream,
    channel: u32,
    token: u32,
    seq: u32,
    auth: NodeId,
    ctx: ContextOwned,
}

impl HandSession {
    /// Connects from `src`, opens a channel (None) and an anonymous session.
    async fn connect(src: IpAddr, to: SocketAddr, url: &str) -> Result<HandSession> {
        let socket = if src.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket
            .bind(SocketAddr::new(src, 0))
            .with_context(|| format!("binding {src}"))?;
        let mut s = socket.connect(to).await.context("connect")?;
        s.set_nodelay(true)?;

        let mut hel = b"HELF\0\0\0\0".to_vec();
        for v in [0, BUFFER, BUFFER, 0, 0] {
            hel.extend_from_slice(&v.to_le_bytes());
        }
        put_string(&mut hel, url)?;
        s.write_all(&with_size(hel)?).await?;
        let ack = read_frame(&mut s).await?;
        match ack.get(..4) {
            Some(b"ACKF") => {}
            Some(b"ERRF") => bail!("Hello refused: {}", StatusCode::from(le_u32(&ack, 8)?)),
            _ => bail!("unexpected answer to Hello"),
        }

        let ctx = ContextOwned::default();
        let mut opn = b"OPNF\0\0\0\0".to_vec();
        opn.extend_from_slice(&0u32.to_le_bytes());
        put_string(&mut opn, NONE_URI)?;
        opn.extend_from_slice(&(-1i32).to_le_bytes());
        opn.extend_from_slice(&(-1i32).to_le_bytes());
        opn.extend_from_slice(&1u32.to_le_bytes());
        opn.extend_from_slice(&1u32.to_le_bytes());
        encode_body(
            &mut opn,
            &OpenSecureChannelRequest {
                request_header: RequestHeader::new(&NodeId::null(), &DateTime::now(), 1),
                client_protocol_version: 0,
                request_type: SecurityTokenRequestType::Issue,
                security_mode: MessageSecurityMode::None,
                client_nonce: ByteString::null(),
                requested_lifetime: 600_000,
            },
            &ctx,
        )?;
        s.write_all(&with_size(opn)?).await?;
        let resp = read_frame(&mut s).await?;
        if resp.get(..4) != Some(b"OPNF") {
            bail!("unexpected answer to OpenSecureChannel");
        }
        let channel = le_u32(&resp, 8)?;
        // Skip policy URI, sender certificate, receiver thumbprint, sequence header.
        let mut at = 12;
        for _ in 0..3 {
            let n = le_u32(&resp, at)? as i32;
            at += 4 + usize::try_from(n.max(0))?;
        }
        at += 8;
        let body = resp.get(at..).context("truncated OPN response")?;
        let Reply::Opn(r) = decode_body(body, &ctx)? else {
            bail!("OpenSecureChannel failed");
        };
        let mut session = HandSession {
            s,
            channel,
            token: r.security_token.token_id,
            seq: 2,
            auth: NodeId::null(),
            ctx,
        };
        session.open_session().await?;
        Ok(session)
    }

    fn header(&self) -> RequestHeader {
        RequestHeader::new(&self.auth, &DateTime::now(), self.seq)
    }

    async fn open_session(&mut self) -> Result<()> {
        let create = CreateSessionRequest {
            request_header: self.header(),
            session_name: "uagate-bench-fairness".into(),
            requested_session_timeout: 600_000.0,
            ..Default::default()
        };
        let Reply::Created(created) = self.call(&create).await? else {
            bail!("CreateSession failed");
        };
        self.auth = created.authentication_token.clone();
        let activate = ActivateSessionRequest {
            request_header: self.header(),
            user_identity_token: ExtensionObject::from_message(AnonymousIdentityToken {
                policy_id: "anonymous".into(),
            }),
            ..Default::default()
        };
        match self.call(&activate).await? {
            Reply::Activated => Ok(()),
            Reply::Fault(s) => bail!("ActivateSession failed: {s}"),
            _ => bail!("ActivateSession: unexpected response"),
        }
    }

    /// Sends one request (single chunk) and waits for its whole response.
    async fn call<M: BinaryEncodable + MessageInfo>(&mut self, request: &M) -> Result<Reply> {
        let mut m = b"MSGF\0\0\0\0".to_vec();
        m.extend_from_slice(&self.channel.to_le_bytes());
        m.extend_from_slice(&self.token.to_le_bytes());
        m.extend_from_slice(&self.seq.to_le_bytes());
        m.extend_from_slice(&self.seq.to_le_bytes());
        self.seq = self.seq.wrapping_add(1);
        encode_body(&mut m, request, &self.ctx)?;
        self.s.write_all(&with_size(m)?).await?;
        // Intermediate chunks (MSGC) are concatenated until the final one.
        let mut body = Vec::new();
        loop {
            let frame = read_frame(&mut self.s).await?;
            let part = frame.get(24..).context("truncated MSG frame")?;
            match frame.get(..4) {
                Some(b"MSGF") => {
                    body.extend_from_slice(part);
                    break;
                }
                Some(b"MSGC") => body.extend_from_slice(part),
                Some(b"ERRF") => bail!("server error {}", StatusCode::from(le_u32(&frame, 8)?)),
                _ => bail!("unexpected frame type"),
            }
        }
        decode_body(&body, &self.ctx)
    }

    /// One Read of the ten nodes: Ok(true) when every result is Good.
    async fn read(&mut self) -> Result<Result<bool, StatusCode>> {
        let request = ReadRequest {
            request_header: self.header(),
            max_age: 0.0,
            timestamps_to_return: TimestampsToReturn::Neither,
            nodes_to_read: Some(
                NODES
                    .iter()
                    .map(|v| ReadValueId::from(NodeId::from(*v)))
                    .collect(),
            ),
        };
        match self.call(&request).await? {
            Reply::Read(r) => {
                let results = r.results.unwrap_or_default();
                Ok(Ok(results.len() == NODES.len()
                    && results.iter().all(|dv| {
                        dv.status.is_none_or(|s| s.is_good()) && dv.value.is_some()
                    })))
            }
            Reply::Fault(s) => Ok(Err(s)),
            _ => bail!("Read: unexpected response"),
        }
    }
}

fn encode_body<M: BinaryEncodable + MessageInfo>(
    out: &mut Vec<u8>,
    message: &M,
    ctx: &ContextOwned,
) -> Result<()> {
    let ctx = ctx.context();
    NodeId::from(message.type_id())
        .encode(out, &ctx)
        .map_err(|e| anyhow::anyhow!("encoding type id: {e}"))?;
    message
        .encode(out, &ctx)
        .map_err(|e| anyhow::anyhow!("encoding request: {e}"))?;
    Ok(())
}

fn decode_body(mut body: &[u8], ctx: &ContextOwned) -> Result<Reply> {
    let ctx = ctx.context();
    let err = |e: opcua_types::Error| anyhow::anyhow!("decoding response: {e}");
    let type_id = NodeId::decode(&mut body, &ctx).map_err(err)?;
    let id = type_id
        .as_object_id()
        .map_err(|_| anyhow::anyhow!("response type {type_id} is not an ns0 object"))?;
    Ok(match id {
        ObjectId::OpenSecureChannelResponse_Encoding_DefaultBinary => Reply::Opn(Box::new(
            OpenSecureChannelResponse::decode(&mut body, &ctx).map_err(err)?,
        )),
        ObjectId::CreateSessionResponse_Encoding_DefaultBinary => Reply::Created(Box::new(
            CreateSessionResponse::decode(&mut body, &ctx).map_err(err)?,
        )),
        ObjectId::ActivateSessionResponse_Encoding_DefaultBinary => {
            let r = ActivateSessionResponse::decode(&mut body, &ctx).map_err(err)?;
            if r.response_header.service_result.is_good() {
                Reply::Activated
            } else {
                Reply::Fault(r.response_header.service_result)
            }
        }
        ObjectId::ReadResponse_Encoding_DefaultBinary => Reply::Read(Box::new(
            ReadResponse::decode(&mut body, &ctx).map_err(err)?,
        )),
        ObjectId::ServiceFault_Encoding_DefaultBinary => Reply::Fault(
            ServiceFault::decode(&mut body, &ctx)
                .map_err(err)?
                .response_header
                .service_result,
        ),
        other => bail!("unexpected response type {other:?}"),
    })
}

/// Reads one whole UA-TCP frame (header + body).
async fn read_frame(s: &mut TcpStream) -> Result<Vec<u8>> {
    tokio::time::timeout(STEP, async {
        let mut header = [0u8; 8];
        s.read_exact(&mut header).await?;
        let size = le_u32(&header, 4)? as usize;
        if !(8..=MAX_FRAME).contains(&size) {
            bail!("bad frame size {size}");
        }
        let mut frame = header.to_vec();
        frame.resize(size, 0);
        s.read_exact(&mut frame[8..]).await?;
        Ok(frame)
    })
    .await
    .context("no response within 30 s")?
}

/// What one session measured in one phase.
#[derive(Default)]
struct Measured {
    /// Latencies (µs) of Good requests that started and ended in the window.
    latencies_us: Vec<u64>,
    /// Failed reads in the window (Bad results, faults, transport errors).
    errors: u64,
    /// Of those, ServiceFault BadServerTooBusy.
    busy: u64,
}

/// Loops Reads until `end`; the session is handed back unless it broke.
async fn session_loop(
    mut s: HandSession,
    measure_from: Instant,
    end: Instant,
) -> (Option<HandSession>, Measured) {
    let mut out = Measured::default();
    loop {
        let start = Instant::now();
        if start >= end {
            return (Some(s), out);
        }
        let r = s.read().await;
        let done = Instant::now();
        let counted = start >= measure_from && done <= end;
        match r {
            Ok(Ok(true)) => {
                if counted {
                    out.latencies_us.push(
                        u64::try_from(done.duration_since(start).as_micros()).unwrap_or(u64::MAX),
                    );
                }
            }
            Ok(Ok(false)) | Ok(Err(_)) => {
                if counted {
                    out.errors += 1;
                    if matches!(r, Ok(Err(StatusCode::BadServerTooBusy))) {
                        out.busy += 1;
                    }
                }
                // Honour the server's hint loosely; do not spin.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => {
                eprintln!("session broke: {e:#}");
                out.errors += 1;
                return (None, out);
            }
        }
    }
}

/// One owner's totals in one phase.
struct OwnerStats {
    latencies_us: Vec<u64>,
    errors: u64,
    busy: u64,
    /// Per-session completed counts (min/max show within-owner fairness).
    per_session: Vec<usize>,
}

impl OwnerStats {
    fn json(&self, secs: u64) -> serde_json::Value {
        let l = &self.latencies_us;
        serde_json::json!({
            "sessions": self.per_session.len(),
            "requests": l.len(),
            "req_per_s": (l.len() as f64 / secs.max(1) as f64).round(),
            "p50_us": percentile(l, 50.0),
            "p99_us": percentile(l, 99.0),
            "max_us": l.last().copied().unwrap_or(0),
            "errors": self.errors,
            "busy": self.busy,
            "per_session_min": self.per_session.iter().min().copied().unwrap_or(0),
            "per_session_max": self.per_session.iter().max().copied().unwrap_or(0),
        })
    }
}

/// Runs one phase over the given owners' sessions; returns them with their stats.
async fn phase(
    owners: Vec<(tokio::runtime::Handle, Vec<HandSession>)>,
    warmup: u64,
    secs: u64,
    server_pid: Option<&str>,
) -> Result<(Vec<Vec<HandSession>>, Vec<OwnerStats>, [Option<u64>; 2])> {
    let begin = Instant::now();
    let measure_from = begin + Duration::from_secs(warmup);
    let end = measure_from + Duration::from_secs(secs);
    let tasks: Vec<Vec<_>> = owners
        .into_iter()
        .map(|(rt, sessions)| {
            sessions
                .into_iter()
                .map(|s| rt.spawn(session_loop(s, measure_from, end)))
                .collect()
        })
        .collect();
    tokio::time::sleep_until(measure_from.into()).await;
    let cpu0 = server_pid.and_then(cpu_ticks);
    let own0 = cpu_ticks("self");
    tokio::time::sleep_until(end.into()).await;
    let cpu1 = server_pid.and_then(cpu_ticks);
    let own1 = cpu_ticks("self");
    let mut back = Vec::new();
    let mut stats = Vec::new();
    for owner in tasks {
        let mut sessions = Vec::new();
        let mut st = OwnerStats {
            latencies_us: Vec::new(),
            errors: 0,
            busy: 0,
            per_session: Vec::new(),
        };
        for t in owner {
            let (s, m) = t.await.context("session task panicked")?;
            sessions.extend(s);
            st.per_session.push(m.latencies_us.len());
            st.latencies_us.extend(m.latencies_us);
            st.errors += m.errors;
            st.busy += m.busy;
        }
        st.latencies_us.sort_unstable();
        back.push(sessions);
        stats.push(st);
    }
    let delta = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    Ok((back, stats, [delta(cpu0, cpu1), delta(own0, own1)]))
}

/// utime + stime of a process in clock ticks, from /proc/<pid>/stat.
fn cpu_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Field 3 (state) is index 0 here; utime and stime are fields 14 and 15.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

async fn connect_owner(
    n: usize,
    src: IpAddr,
    to: SocketAddr,
    url: &str,
) -> Result<Vec<HandSession>> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut s = tokio::time::timeout(STEP, HandSession::connect(src, to, url))
            .await
            .with_context(|| format!("{src} session {i}: connect timed out"))?
            .with_context(|| format!("{src} session {i}"))?;
        match s.read().await? {
            Ok(true) => {}
            Ok(false) => bail!("{src} session {i}: a benchmark node does not read Good"),
            Err(status) => bail!("{src} session {i}: verification read failed: {status}"),
        }
        out.push(s);
    }
    Ok(out)
}

/// The socket address of an opc.tcp URL with a literal IP host.
fn socket_addr(url: &str) -> Result<SocketAddr> {
    let rest = url
        .strip_prefix("opc.tcp://")
        .context("endpoint must start with opc.tcp://")?;
    let host_port = rest.split('/').next().unwrap_or(rest);
    host_port
        .parse()
        .with_context(|| format!("endpoint host must be a literal IP:port, got {host_port}"))
}

fn runtime(threads: usize) -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .context("client runtime")
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.a_sessions == 0 || args.b_sessions == 0 || args.solo == 0 || args.together == 0 {
        bail!("session counts and durations must be at least 1");
    }
    // Each owner's sessions live on their own runtime (like clients on two
    // machines) unless asked otherwise; a small runtime coordinates.
    let rt_a = runtime(args.client_threads)?;
    let rt_b = if args.shared_client_runtime {
        None
    } else {
        Some(runtime(args.client_threads)?)
    };
    let handle_a = rt_a.handle().clone();
    let handle_b = rt_b
        .as_ref()
        .map_or_else(|| handle_a.clone(), |r| r.handle().clone());
    let control = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("control runtime")?;
    let result = control.block_on(run(args, handle_a, handle_b));
    drop(control);
    drop(rt_b);
    drop(rt_a);
    result
}

async fn run(
    args: Args,
    handle_a: tokio::runtime::Handle,
    handle_b: tokio::runtime::Handle,
) -> Result<()> {
    let to = socket_addr(&args.endpoint)?;
    let connect_start = Instant::now();
    // Sessions are connected on the runtime that will drive them.
    let url = args.endpoint.clone();
    let (n_a, addr_a) = (args.a_sessions, args.a_addr);
    let a = handle_a
        .spawn(async move { connect_owner(n_a, addr_a, to, &url).await })
        .await
        .context("connect task")??;
    let url = args.endpoint.clone();
    let (n_b, addr_b) = (args.b_sessions, args.b_addr);
    let b = handle_b
        .spawn(async move { connect_owner(n_b, addr_b, to, &url).await })
        .await
        .context("connect task")??;
    let connect_s = connect_start.elapsed().as_secs_f64();
    let pid = args.server_pid.map(|p| p.to_string());
    let tick = args.clk_tck.max(1) as f64;

    // A alone (B's sessions are open but idle).
    let (mut back, solo, solo_cpu) = phase(
        vec![(handle_a.clone(), a)],
        args.warmup,
        args.solo,
        pid.as_deref(),
    )
    .await?;
    let a = back.pop().unwrap_or_default();
    if a.len() != args.a_sessions {
        bail!(
            "{} of A's sessions broke in the solo phase",
            args.a_sessions - a.len()
        );
    }
    // A and B together.
    let (_back, together, together_cpu) = phase(
        vec![(handle_a, a), (handle_b, b)],
        args.warmup,
        args.together,
        pid.as_deref(),
    )
    .await?;
    let [solo_a] = &solo[..] else {
        bail!("solo phase lost its owner");
    };
    let [ta, tb] = &together[..] else {
        bail!("overlap phase lost an owner");
    };
    let (na, nb) = (ta.latencies_us.len(), tb.latencies_us.len());
    let share = if na + nb > 0 {
        na as f64 / (na + nb) as f64
    } else {
        0.0
    };
    let solo_p99 = percentile(&solo_a.latencies_us, 99.0);
    let together_p99 = percentile(&ta.latencies_us, 99.0);
    let ratio = if solo_p99 > 0 {
        serde_json::json!((together_p99 as f64 / solo_p99 as f64 * 100.0).round() / 100.0)
    } else {
        serde_json::Value::Null
    };
    let cpu = |t: Option<u64>| t.map(|t| (t as f64 / tick * 100.0).round() / 100.0);
    let line = serde_json::json!({
        "label": args.label,
        "client_runtimes": if args.shared_client_runtime { "shared" } else { "per_owner" },
        "endpoint": args.endpoint,
        "a_addr": args.a_addr.to_string(),
        "b_addr": args.b_addr.to_string(),
        "nodes_per_request": NODES.len(),
        "solo_s": args.solo,
        "together_s": args.together,
        "warmup_s": args.warmup,
        "connect_s": (connect_s * 1000.0).round() / 1000.0,
        "a_share": (share * 10_000.0).round() / 10_000.0,
        "a_p99_ratio": ratio,
        "solo_a": solo_a.json(args.solo),
        "together_a": ta.json(args.together),
        "together_b": tb.json(args.together),
        "server_cpu_s_solo": cpu(solo_cpu[0]),
        "server_cpu_s_together": cpu(together_cpu[0]),
        "client_cpu_s_solo": cpu(solo_cpu[1]),
        "client_cpu_s_together": cpu(together_cpu[1]),
    });
    println!("{line}");
    Ok(())
}
