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
//! async-opcua-client cannot bind a source address, so this uses the small
//! hand-made UA-TCP client of `uagate_bench::uacp` for SecurityPolicy None
//! (Hello, OpenSecureChannel, CreateSession, anonymous ActivateSession,
//! Read) over sockets bound to the owner's address. It is a measuring tool,
//! not a test: it asserts nothing about timing. `bench/run-fairness.sh`
//! drives it over the isolation modes.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use tokio::net::TcpStream;
use uagate_bench::service::read;
use uagate_bench::stats::{cpu_ticks, percentile, session_loop};
use uagate_bench::{uacp, NODES, STEP};

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

/// One session on its own TCP connection and secure channel.
type HandSession = uacp::Session<TcpStream>;

/// Connects from `src`, opens a channel (None) and an anonymous session.
async fn connect(src: IpAddr, to: SocketAddr, url: &str) -> Result<HandSession> {
    let s = uacp::tcp_connect(to, Some(src)).await?;
    uacp::Session::open(s, url, "uagate-bench-fairness").await
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
            if let Some(e) = &m.broke {
                eprintln!("session broke: {e}");
            }
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

async fn connect_owner(
    n: usize,
    src: IpAddr,
    to: SocketAddr,
    url: &str,
) -> Result<Vec<HandSession>> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut s = tokio::time::timeout(STEP, connect(src, to, url))
            .await
            .with_context(|| format!("{src} session {i}: connect timed out"))?
            .with_context(|| format!("{src} session {i}"))?;
        match read(&mut s).await? {
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
