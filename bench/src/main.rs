#![forbid(unsafe_code)]
//! `uagate-bench`: Read throughput of one OPC UA server.
//!
//! Opens N sessions to one endpoint, checks once that all ten benchmark nodes
//! read Good, then lets every session loop `Read(10 nodes)` back-to-back for a
//! warm-up followed by the measured window. Prints one JSON line with
//! requests/s, latency percentiles, errors and (optionally) the CPU time the
//! server process spent during the measured window.
//!
//! With `--node` (repeatable) the request reads those Value attributes
//! instead of the ten ns0 nodes, e.g. a field server's variables through a
//! gateway; `nsu=<namespace uri>;s=...` is resolved through the server's
//! NamespaceArray (`bench/run-field.sh`).
//!
//! This is a measuring tool, not a test: it asserts nothing about timing.
//! `bench/run.sh` drives it over the whole matrix.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use opcua_client::{Client, ClientBuilder, IdentityToken, Session};
use opcua_crypto::SecurityPolicy;
use opcua_types::{EndpointDescription, MessageSecurityMode, ReadValueId, TimestampsToReturn};
use uagate_bench::stats::{cpu_ticks, percentile};
use uagate_bench::{nodes_to_read, STEP};

/// Command line of the benchmark client.
#[derive(Parser)]
#[command(about = "Read throughput benchmark client (10 ns0 Server nodes per Read)")]
struct Args {
    /// Endpoint URL of the server, e.g. opc.tcp://127.0.0.1:4840/
    #[arg(long)]
    endpoint: Option<String>,
    /// Connect the sessions to this URL instead of the endpoint URL the
    /// server returned from GetEndpoints (e.g. a relay in front of it; the
    /// endpoint's policy and certificate stay the server's).
    #[arg(long)]
    connect_url: Option<String>,
    /// Concurrent sessions (each on its own secure channel).
    #[arg(long, default_value_t = 1)]
    sessions: usize,
    /// Measured seconds (after the warm-up).
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Warm-up seconds before measuring.
    #[arg(long, default_value_t = 2)]
    warmup: u64,
    /// Message security.
    #[arg(long, value_enum, default_value_t = Security::None)]
    security: Security,
    /// Client PKI directory; the client certificate is created in `<pki>/own/cert.der`.
    #[arg(long, default_value = "./uagate-bench-pki")]
    pki: PathBuf,
    /// Only create the client certificate (if missing), print its path and exit.
    #[arg(long)]
    init_pki: bool,
    /// PID of the server process: its CPU time over the measured window is reported.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Clock ticks per second for /proc/<pid>/stat (`getconf CLK_TCK`).
    #[arg(long, default_value_t = 100)]
    clk_tck: u64,
    /// Free-text label copied into the result line (e.g. the server name).
    #[arg(long, default_value = "")]
    label: String,
    /// Value attribute to read instead of the ten ns0 nodes; repeat for more
    /// nodes per request (duplicates allowed). `ns=<i>;s=...` or
    /// `nsu=<namespace uri>;s=...` (index looked up in the NamespaceArray).
    #[arg(long = "node")]
    nodes: Vec<String>,
    /// PID of a second process (e.g. the field server behind a gateway): its
    /// CPU time over the measured window is reported as `field_cpu_s`.
    #[arg(long)]
    field_pid: Option<u32>,
    /// Do not check that the nodes read Good first: a load of requests that
    /// fail (e.g. clients polling a dead PLC through a gateway); they count
    /// as errors.
    #[arg(long)]
    any_status: bool,
}

/// Security configurations the matrix covers.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Security {
    /// SecurityPolicy None, mode None.
    None,
    /// Basic256Sha256 with SignAndEncrypt.
    Basic256sha256,
}

impl Security {
    fn policy(self) -> SecurityPolicy {
        match self {
            Security::None => SecurityPolicy::None,
            Security::Basic256sha256 => SecurityPolicy::Basic256Sha256,
        }
    }
    fn mode(self) -> MessageSecurityMode {
        match self {
            Security::None => MessageSecurityMode::None,
            Security::Basic256sha256 => MessageSecurityMode::SignAndEncrypt,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Security::None => "none",
            Security::Basic256sha256 => "basic256sha256",
        }
    }
}

fn client(pki: &Path) -> Result<Client> {
    ClientBuilder::new()
        .application_name("uagate-bench")
        .application_uri("urn:uagate:bench")
        .product_uri("urn:uagate:bench")
        .pki_dir(pki)
        .create_sample_keypair(true)
        .trust_server_certs(true)
        .session_retry_limit(1)
        .request_timeout(STEP)
        .session_timeout(600_000)
        .client()
        .map_err(|e| anyhow::anyhow!("client configuration: {}", e.join("; ")))
}

/// Pick the server endpoint with the wanted policy and mode.
fn pick_endpoint(endpoints: &[EndpointDescription], sec: Security) -> Result<EndpointDescription> {
    let uri = sec.policy().to_uri();
    endpoints
        .iter()
        .find(|e| e.security_policy_uri.as_ref() == uri && e.security_mode == sec.mode())
        .cloned()
        .with_context(|| format!("server offers no {} endpoint", sec.name()))
}

/// One connected session with its event loop task.
struct Conn {
    session: Arc<Session>,
    event_loop: tokio::task::JoinHandle<opcua_types::StatusCode>,
}

async fn connect_all(
    client: &mut Client,
    endpoint: &EndpointDescription,
    n: usize,
) -> Result<Vec<Conn>> {
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        let (session, event_loop) = client
            .connect_to_endpoint_directly(endpoint.clone(), IdentityToken::Anonymous)
            .with_context(|| format!("session {i}: building"))?;
        let event_loop = event_loop.spawn();
        let ok = tokio::time::timeout(STEP, session.wait_for_connection())
            .await
            .with_context(|| format!("session {i}: connect timed out"))?;
        if !ok {
            bail!("session {i}: could not connect (rejected certificate? session limit?)");
        }
        conns.push(Conn {
            session,
            event_loop,
        });
    }
    Ok(conns)
}

/// Read the nodes once and fail loudly if any is not Good.
async fn verify_nodes(session: &Session, nodes: &[ReadValueId]) -> Result<()> {
    let values = tokio::time::timeout(STEP, session.read(nodes, TimestampsToReturn::Neither, 0.0))
        .await
        .context("verification read timed out")?
        .context("verification read failed")?;
    if values.len() != nodes.len() {
        bail!("expected {} results, got {}", nodes.len(), values.len());
    }
    for (node, dv) in nodes.iter().map(|r| &r.node_id).zip(&values) {
        if let Some(s) = dv.status {
            if !s.is_good() {
                bail!("benchmark node {node} reads {s}");
            }
        }
        if dv.value.is_none() {
            bail!("benchmark node {node} has no value");
        }
    }
    Ok(())
}

/// What one session measured.
#[derive(Default)]
struct SessionResult {
    /// Latencies in microseconds of requests completed in the measured window.
    latencies_us: Vec<u64>,
    errors: u64,
}

async fn session_loop(
    session: Arc<Session>,
    nodes: Arc<Vec<ReadValueId>>,
    measure_from: Instant,
    end: Instant,
) -> SessionResult {
    let mut out = SessionResult::default();
    loop {
        let start = Instant::now();
        if start >= end {
            break;
        }
        let r = tokio::time::timeout(STEP, session.read(&nodes, TimestampsToReturn::Neither, 0.0))
            .await;
        let done = Instant::now();
        let good = match &r {
            Ok(Ok(values)) => {
                values.len() == nodes.len()
                    && values
                        .iter()
                        .all(|dv| dv.status.is_none_or(|s| s.is_good()))
            }
            _ => false,
        };
        if start < measure_from || done > end {
            if !good {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            continue;
        }
        if good {
            let us = u64::try_from(done.duration_since(start).as_micros()).unwrap_or(u64::MAX);
            out.latencies_us.push(us);
        } else {
            out.errors += 1;
            // Do not spin on a broken connection.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    out
}

#[tokio::main]
async fn main() -> Result<()> {
    uagate_bench::init_logging("error");
    let args = Args::parse();

    let mut client = client(&args.pki)?;
    if args.init_pki {
        let cert = args.pki.join("own").join("cert.der");
        if !cert.is_file() {
            bail!("client certificate was not created at {}", cert.display());
        }
        println!("{}", cert.display());
        return Ok(());
    }
    let Some(url) = args.endpoint.as_deref() else {
        bail!("--endpoint is required");
    };
    if args.sessions == 0 || args.duration == 0 {
        bail!("--sessions and --duration must be at least 1");
    }

    let endpoints = tokio::time::timeout(STEP, client.get_server_endpoints_from_url(url))
        .await
        .context("GetEndpoints timed out")?
        .context("GetEndpoints failed")?;
    let mut endpoint = pick_endpoint(&endpoints, args.security)?;
    if let Some(via) = &args.connect_url {
        endpoint.endpoint_url = via.as_str().into();
    }

    let connect_start = Instant::now();
    let conns = connect_all(&mut client, &endpoint, args.sessions).await?;
    let connect_s = connect_start.elapsed().as_secs_f64();
    let nodes = if args.nodes.is_empty() {
        nodes_to_read()
    } else {
        let mut v = Vec::with_capacity(args.nodes.len());
        for spec in &args.nodes {
            v.push(ReadValueId::from(
                uagate_bench::resolve_node(&conns[0].session, spec, STEP).await?,
            ));
        }
        v
    };
    let nodes = Arc::new(nodes);
    if !args.any_status {
        for c in &conns {
            verify_nodes(&c.session, &nodes).await?;
        }
    }

    let begin = Instant::now();
    let measure_from = begin + Duration::from_secs(args.warmup);
    let end = measure_from + Duration::from_secs(args.duration);
    let tasks: Vec<_> = conns
        .iter()
        .map(|c| {
            tokio::spawn(session_loop(
                c.session.clone(),
                nodes.clone(),
                measure_from,
                end,
            ))
        })
        .collect();

    // Sample CPU time of the server and of this client around the measured window.
    let pid = args.server_pid.map(|p| p.to_string());
    let field_pid = args.field_pid.map(|p| p.to_string());
    tokio::time::sleep_until(measure_from.into()).await;
    let server_before = pid.as_deref().and_then(cpu_ticks);
    let field_before = field_pid.as_deref().and_then(cpu_ticks);
    let client_before = cpu_ticks("self");
    tokio::time::sleep_until(end.into()).await;
    let server_after = pid.as_deref().and_then(cpu_ticks);
    let field_after = field_pid.as_deref().and_then(cpu_ticks);
    let client_after = cpu_ticks("self");

    let mut latencies = Vec::new();
    let mut errors = 0u64;
    for t in tasks {
        let r = t.await.context("session task panicked")?;
        latencies.extend(r.latencies_us);
        errors += r.errors;
    }
    latencies.sort_unstable();

    for c in conns {
        let _ = tokio::time::timeout(Duration::from_secs(5), c.session.disconnect()).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), c.event_loop).await;
    }

    let secs = args.duration as f64;
    let requests = latencies.len() as u64;
    let tick = args.clk_tck.max(1) as f64;
    let cpu = |b: Option<u64>, a: Option<u64>| match (b, a) {
        (Some(b), Some(a)) => serde_json::json!(a.saturating_sub(b) as f64 / tick),
        _ => serde_json::Value::Null,
    };
    let server_cpu = cpu(server_before, server_after);
    let server_cpu_us_per_req = match server_cpu.as_f64() {
        Some(c) if requests > 0 => serde_json::json!((c * 1e6 / requests as f64).round()),
        _ => serde_json::Value::Null,
    };
    let line = serde_json::json!({
        "label": args.label,
        "endpoint": url,
        "security": args.security.name(),
        "sessions": args.sessions,
        "nodes_per_request": nodes.len(),
        "nodes": nodes.iter().map(|r| r.node_id.to_string()).collect::<Vec<_>>(),
        "duration_s": args.duration,
        "requests": requests,
        "req_per_s": (requests as f64 / secs).round(),
        "p50_us": percentile(&latencies, 50.0),
        "p99_us": percentile(&latencies, 99.0),
        "max_us": latencies.last().copied().unwrap_or(0),
        "errors": errors,
        "connect_s": (connect_s * 1000.0).round() / 1000.0,
        "server_cpu_s": server_cpu,
        "server_cpu_us_per_req": server_cpu_us_per_req,
        "client_cpu_s": cpu(client_before, client_after),
        "field_cpu_s": cpu(field_before, field_after),
    });
    println!("{line}");
    Ok(())
}
