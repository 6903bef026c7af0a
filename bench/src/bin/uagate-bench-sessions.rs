#![forbid(unsafe_code)]
#![recursion_limit = "256"]
//! `uagate-bench-sessions`: many idle-ish sessions against one OPC UA
//! server (issue 21, "10,000 sessions").
//!
//! Opens `--sessions` N sessions, each on its own TCP connection and secure
//! channel (security None, anonymous), ramped at `--rate` new sessions per
//! second. Each creates one subscription (publishing `--publishing-ms`,
//! keep-alive count `--keepalive`, lifetime count `--lifetime`) with
//! `--items` monitored items (sampling `--sampling-ms`, queue size 1) and
//! then keeps two Publish requests outstanding, acknowledging every data
//! message in its next Publish. The client is the hand-made UACP client of
//! this crate (a few KiB per session), not async-opcua-client.
//!
//! **Which items.** One session in `--data-every` K ("data sessions")
//! monitors `--counter-node` (a variable that changes faster than it is
//! sampled) with one of its items, sampled at `--counter-sampling-ms`
//! (default half the publishing interval: with sampling = publishing,
//! uagate's sample lands just after the publishing tick in about one
//! cycle in eight, which then has no data and is not lateness), so it
//! receives one data message every publishing interval; every other item, and every item of the other
//! sessions ("keep-alive sessions"), monitors `--static-node`, which does
//! not change, so after the initial values those subscriptions send only
//! keep-alives (one every publishing x keep-alive count). With the default
//! K = 10 and 1 s publishing, 10,000 sessions are 1,000 data messages plus
//! 900 keep-alives per second: the server's and this client's Publish work
//! stays a fraction of two shared cores, while both kinds of message are
//! checked on every session. `--data-every 1` makes every session a data
//! session (10,000 Publish responses per second at 10,000 sessions).
//!
//! **What is checked, per subscription** (times are arrival times at this
//! client, on the same clock as the server's):
//! - *sequence gap*: a data message whose sequence number is above the one
//!   expected (the previous data message's + 1; a keep-alive carries the
//!   next number and must equal it), counted as the numbers skipped; a
//!   number below it is a *repeat*.
//! - *late keep-alive*: a message of a keep-alive session that arrives more
//!   than publishing x keep-alive count + `--slack-ms` after the previous
//!   message of its subscription.
//! - *late data*: a message of a data session that arrives more than
//!   publishing + `--slack-ms` after the previous one (a missed cycle), or
//!   whose counter value is older than its sampling interval + publishing +
//!   `--slack-ms`
//!   (source timestamp to arrival).
//! - *delivery lag*: arrival minus the message's PublishTime (p50/p99/max).
//! - *errors*: Bad service results and ServiceFaults of Publish,
//!   StatusChangeNotifications, sessions that could not be opened and
//!   sessions lost after opening (transport closed, no answer within
//!   2 x keep-alive period + 10 s).
//!
//! **Phases.** (1) The probe (a fresh session, its own connection, source
//! address `--probe-src`) reads the ten ns0 nodes of the Read benchmarks
//! every `--probe-interval-ms` for `--probe-secs` with no other load:
//! idle p50/p99. (2) Ramp: N sessions at `--rate`/s; the server's RSS is
//! taken just before. (3) Settle `--settle` seconds (at least one
//! keep-alive period, so every subscription is past its initial values).
//! (4) Hold `--hold` seconds: rates, lateness, server CPU and RSS are
//! measured; the probe runs again at its start (loaded p50/p99).
//! Lateness and errors are reported separately for ramp+settle and hold.
//!
//! Prints one JSON line on stdout and a readable summary on stderr. Needs
//! about N + 50 file descriptors (`ulimit -n`), and N local ports towards
//! the server (`net.ipv4.ip_local_port_range`, 28,232 by default) unless
//! `--src` spreads the connections over several loopback addresses.
//!
//! This is a measuring tool, not a test: it asserts nothing about timing.
//! `bench/run-sessions.sh` drives it against a fresh `uagate run`.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use opcua_types::{
    CreateMonitoredItemsRequest, CreateSubscriptionRequest, DataChangeNotification, DateTime,
    MonitoredItemCreateRequest, MonitoringMode, MonitoringParameters, NodeId, NotificationMessage,
    PublishRequest, ReadRequest, ReadValueId, StatusChangeNotification, StatusCode,
    SubscriptionAcknowledgement, TimestampsToReturn, VariableId, Variant,
};
use tokio::net::TcpStream;
use uagate_bench::service::{read, Call, Reply};
use uagate_bench::stats::{cpu_ticks, percentile};
use uagate_bench::uacp::{tcp_connect, Session};

/// Command line of the many-sessions benchmark client.
#[derive(Parser)]
#[command(about = "Many-sessions benchmark client (sessions, subscriptions, keep-alives, probe)")]
struct Args {
    /// Endpoint URL of the server, e.g. opc.tcp://127.0.0.1:4840/
    #[arg(long)]
    endpoint: String,
    /// Sessions to open, each on its own connection and secure channel.
    #[arg(long, default_value_t = 1000)]
    sessions: usize,
    /// New sessions per second during the ramp.
    #[arg(long, default_value_t = 200.0)]
    rate: f64,
    /// Monitored items per subscription.
    #[arg(long, default_value_t = 10)]
    items: usize,
    /// One session in this many monitors `--counter-node` with one item
    /// (a data session); 0: none does.
    #[arg(long, default_value_t = 10)]
    data_every: usize,
    /// The changing variable (`nsu=<uri>;s=...` or `ns=<i>;s=...`).
    #[arg(long, default_value = "nsu=urn:uagate:gateway;s=Gateway.Demo.Counter")]
    counter_node: String,
    /// The variable that does not change (all other items).
    #[arg(long, default_value = "nsu=urn:uagate:gateway;s=Gateway.Demo.Setpoint")]
    static_node: String,
    /// Requested publishing interval (ms).
    #[arg(long, default_value_t = 1000)]
    publishing_ms: u64,
    /// Requested max keep-alive count.
    #[arg(long, default_value_t = 10)]
    keepalive: u32,
    /// Requested lifetime count (at least 3 x keep-alive count).
    #[arg(long, default_value_t = 60)]
    lifetime: u32,
    /// Requested sampling interval (ms) of the items on `--static-node`.
    #[arg(long, default_value_t = 1000)]
    sampling_ms: u64,
    /// Requested sampling interval (ms) of the item on `--counter-node`
    /// (default: half the publishing interval, so that every publishing
    /// cycle has a new sample whatever the phase of the two timers).
    #[arg(long)]
    counter_sampling_ms: Option<u64>,
    /// Allowance on top of the expected interval before a message is late (ms).
    #[arg(long, default_value_t = 1000)]
    slack_ms: u64,
    /// Seconds after the ramp before measuring (default: one keep-alive
    /// period + 5 s).
    #[arg(long)]
    settle: Option<u64>,
    /// Measured seconds with all sessions up.
    #[arg(long, default_value_t = 60)]
    hold: u64,
    /// Seconds the probe reads, idle and loaded.
    #[arg(long, default_value_t = 30)]
    probe_secs: u64,
    /// Period of the probe's Reads (ms).
    #[arg(long, default_value_t = 10)]
    probe_interval_ms: u64,
    /// Source address of the probe's connection (e.g. 127.0.0.2, so it is
    /// another owner for the server's isolation than the sessions).
    #[arg(long)]
    probe_src: Option<IpAddr>,
    /// Source addresses of the sessions' connections, used in turn
    /// (comma-separated; default: the system's choice).
    #[arg(long, value_delimiter = ',')]
    src: Vec<IpAddr>,
    /// The server's process id: CPU % and RSS (VmRSS) from /proc.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Clock ticks per second of /proc/<pid>/stat (`getconf CLK_TCK`).
    #[arg(long, default_value_t = 100)]
    clk_tck: u64,
    /// Label in the JSON line.
    #[arg(long, default_value = "uagate")]
    label: String,
}

/// Phases whose counters are kept apart.
const RAMP: usize = 0;
const HOLD: usize = 1;
/// After the hold: nothing is counted any more.
const DONE: usize = 2;

/// Event counters of one phase.
#[derive(Default)]
struct Counters {
    data_msgs: AtomicU64,
    keepalives: AtomicU64,
    notifications: AtomicU64,
    seq_gaps: AtomicU64,
    seq_repeats: AtomicU64,
    late_keepalives: AtomicU64,
    late_data: AtomicU64,
    stale_values: AtomicU64,
    bad_publish: AtomicU64,
    status_changes: AtomicU64,
    lost: AtomicU64,
}

/// A histogram of milliseconds, 1 ms buckets up to a minute (more is
/// counted in the last bucket).
struct Histo(Vec<AtomicU64>);

impl Histo {
    fn new() -> Self {
        Histo((0..=60_000).map(|_| AtomicU64::new(0)).collect())
    }

    fn add(&self, d: Duration) {
        let ms = usize::try_from(d.as_millis()).unwrap_or(usize::MAX);
        let i = ms.min(self.0.len() - 1);
        self.0[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Nearest-rank percentile in ms (`None` when empty).
    fn percentile(&self, p: f64) -> Option<u64> {
        let counts: Vec<u64> = self.0.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((p / 100.0) * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (ms, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(ms as u64);
            }
        }
        None
    }
}

/// What every session task shares.
struct Shared {
    phase: AtomicUsize,
    counters: [Counters; 2],
    /// Sessions whose subscription answered its first Publish, minus
    /// those lost since.
    active: AtomicUsize,
    /// Sessions that could not be opened, and the first such errors.
    open_failures: AtomicU64,
    failure_samples: Mutex<Vec<String>>,
    /// Hold phase: delivery lag (arrival - PublishTime), gaps between
    /// messages of keep-alive and data sessions, counter value age.
    lag: Histo,
    keepalive_gap: Histo,
    data_gap: Histo,
    value_age: Histo,
}

impl Shared {
    fn counters(&self) -> Option<&Counters> {
        self.counters.get(self.phase.load(Ordering::Relaxed))
    }

    fn hold(&self) -> bool {
        self.phase.load(Ordering::Relaxed) == HOLD
    }

    fn failed(&self, what: String) {
        self.open_failures.fetch_add(1, Ordering::Relaxed);
        let mut s = self
            .failure_samples
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if s.len() < 5 {
            s.push(what);
        }
    }
}

/// The subscription settings every session requests.
#[derive(Clone, Copy)]
struct Plan {
    publishing: Duration,
    keepalive: u32,
    lifetime: u32,
    sampling_ms: u64,
    counter_sampling_ms: u64,
    items: usize,
    slack: Duration,
}

/// Where one session connects and what it monitors.
struct Target {
    server: SocketAddr,
    url: String,
    counter: NodeId,
    fixed: NodeId,
}

#[tokio::main]
async fn main() -> Result<()> {
    uagate_bench::init_logging("error");
    let args = Args::parse();
    if args.sessions == 0 || args.items == 0 || args.rate <= 0.0 {
        bail!("--sessions, --items and --rate must be above zero");
    }
    if args.lifetime < 3 * args.keepalive {
        bail!("--lifetime must be at least 3 x --keepalive");
    }
    let server = endpoint_addr(&args.endpoint)?;
    let plan = Plan {
        publishing: Duration::from_millis(args.publishing_ms),
        keepalive: args.keepalive,
        lifetime: args.lifetime,
        sampling_ms: args.sampling_ms,
        counter_sampling_ms: args
            .counter_sampling_ms
            .unwrap_or(args.publishing_ms / 2)
            .max(1),
        items: args.items,
        slack: Duration::from_millis(args.slack_ms),
    };
    let keepalive_period = plan.publishing * plan.keepalive;
    let settle = Duration::from_secs(
        args.settle
            .unwrap_or(keepalive_period.as_secs().saturating_add(5)),
    );

    // Resolve the two nodes once, on the probe's first session.
    let (counter, fixed) = {
        let mut s = open(server, args.probe_src, &args.endpoint, "bench-resolve").await?;
        let c = resolve(&mut s, &args.counter_node).await?;
        let f = resolve(&mut s, &args.static_node).await?;
        let _ = s.close().await;
        (c, f)
    };
    let target = Arc::new(Target {
        server,
        url: args.endpoint.clone(),
        counter,
        fixed,
    });

    eprintln!("probe (idle): {} s", args.probe_secs);
    let probe_idle = probe(&args, server).await?;
    eprintln!("  {}", probe_idle.summary());
    tokio::time::sleep(Duration::from_secs(2)).await;

    let shared = Arc::new(Shared {
        phase: AtomicUsize::new(RAMP),
        counters: Default::default(),
        active: AtomicUsize::new(0),
        open_failures: AtomicU64::new(0),
        failure_samples: Mutex::new(Vec::new()),
        lag: Histo::new(),
        keepalive_gap: Histo::new(),
        data_gap: Histo::new(),
        value_age: Histo::new(),
    });
    let pid = args.server_pid.map(|p| p.to_string());
    let rss0 = pid.as_deref().and_then(rss_kib);
    let client_rss0 = rss_kib("self");

    // Ramp.
    eprintln!(
        "ramp: {} sessions at {}/s, {} items each, one in {} a data session",
        args.sessions, args.rate, args.items, args.data_every
    );
    let start = Instant::now();
    for i in 0..args.sessions {
        let due = start + Duration::from_secs_f64(i as f64 / args.rate);
        tokio::time::sleep_until(due.into()).await;
        let src = (!args.src.is_empty()).then(|| args.src[i % args.src.len()]);
        let data = args.data_every > 0 && i % args.data_every == 0;
        tokio::spawn(run_session(
            i,
            data,
            src,
            target.clone(),
            plan,
            shared.clone(),
        ));
        if i > 0 && i % 1000 == 0 {
            eprintln!(
                "  {i} started, {} active, {} failed, {:.0} s",
                shared.active.load(Ordering::Relaxed),
                shared.open_failures.load(Ordering::Relaxed),
                start.elapsed().as_secs_f64()
            );
        }
    }
    // Until every session is up, failed, or 60 s after the last start.
    let last_start = Instant::now();
    loop {
        let up = shared.active.load(Ordering::Relaxed)
            + shared.open_failures.load(Ordering::Relaxed) as usize
            + shared.counters[RAMP].lost.load(Ordering::Relaxed) as usize;
        if up >= args.sessions || last_start.elapsed() > Duration::from_secs(60) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ramp_s = start.elapsed().as_secs_f64();
    let ramped = shared.active.load(Ordering::Relaxed);
    eprintln!(
        "ramp done: {ramped} active after {ramp_s:.1} s; settling {} s",
        settle.as_secs()
    );
    tokio::time::sleep(settle).await;

    // Hold: measure; the loaded probe runs during its first part.
    let rss_n = pid.as_deref().and_then(rss_kib);
    let cpu0 = pid.as_deref().and_then(cpu_ticks);
    let self0 = cpu_ticks("self");
    let hold_start = Instant::now();
    shared.phase.store(HOLD, Ordering::Relaxed);
    eprintln!(
        "hold: {} s (probe while loaded: {} s)",
        args.hold, args.probe_secs
    );
    let probe_loaded = probe(&args, server).await;
    let hold_end = hold_start + Duration::from_secs(args.hold);
    let mut rss_max = rss_n;
    while Instant::now() < hold_end {
        rss_max = rss_max.max(pid.as_deref().and_then(rss_kib));
        tokio::time::sleep(Duration::from_secs(1).min(hold_end - Instant::now())).await;
    }
    shared.phase.store(DONE, Ordering::Relaxed);
    let held = hold_start.elapsed().as_secs_f64();
    let cpu1 = pid.as_deref().and_then(cpu_ticks);
    let self1 = cpu_ticks("self");
    let rss_end = pid.as_deref().and_then(rss_kib);
    rss_max = rss_max.max(rss_end);
    let client_rss = rss_kib("self");
    let active_end = shared.active.load(Ordering::Relaxed);

    let cpu_pct = |a: Option<u64>, b: Option<u64>| -> Option<f64> {
        Some((b? - a?) as f64 / args.clk_tck as f64 / held * 100.0)
    };
    let h = &shared.counters[HOLD];
    let r = &shared.counters[RAMP];
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let per_session = match (rss0, rss_end) {
        (Some(a), Some(b)) if active_end > 0 => Some((b as f64 - a as f64) / active_end as f64),
        _ => None,
    };
    let probe_loaded = match probe_loaded {
        Ok(p) => p,
        Err(e) => {
            eprintln!("loaded probe failed: {e:#}");
            ProbeResult::failed(format!("{e:#}"))
        }
    };
    let failures = shared
        .failure_samples
        .lock()
        .map(|v| v.clone())
        .unwrap_or_default();
    let data_sessions = if args.data_every == 0 {
        0
    } else {
        args.sessions.div_ceil(args.data_every)
    };
    let out = serde_json::json!({
        "label": args.label,
        "sessions": args.sessions,
        "data_sessions": data_sessions,
        "items": args.items,
        "publishing_ms": args.publishing_ms,
        "keepalive": args.keepalive,
        "sampling_ms": args.sampling_ms,
        "counter_sampling_ms": plan.counter_sampling_ms,
        "slack_ms": args.slack_ms,
        "rate": args.rate,
        "sessions_up": ramped,
        "sessions_up_end": active_end,
        "ramp_s": ramp_s,
        "hold_s": held,
        "open_failures": get(&shared.open_failures),
        "open_failure_samples": failures,
        "server_rss_idle_kib": rss0,
        "server_rss_loaded_kib": rss_end,
        "server_rss_max_kib": rss_max,
        "server_rss_after_ramp_kib": rss_n,
        "rss_per_session_kib": per_session,
        "server_cpu_pct": cpu_pct(cpu0, cpu1),
        "client_cpu_pct": cpu_pct(self0, self1),
        "client_rss_idle_kib": client_rss0,
        "client_rss_kib": client_rss,
        "data_msgs_per_s": get(&h.data_msgs) as f64 / held,
        "keepalives_per_s": get(&h.keepalives) as f64 / held,
        "notifications_per_s": get(&h.notifications) as f64 / held,
        "hold": counters_json(h),
        "ramp": counters_json(r),
        "lag_p50_ms": shared.lag.percentile(50.0),
        "lag_p99_ms": shared.lag.percentile(99.0),
        "lag_max_ms": shared.lag.percentile(100.0),
        "keepalive_gap_p50_ms": shared.keepalive_gap.percentile(50.0),
        "keepalive_gap_max_ms": shared.keepalive_gap.percentile(100.0),
        "data_gap_p50_ms": shared.data_gap.percentile(50.0),
        "data_gap_p99_ms": shared.data_gap.percentile(99.0),
        "data_gap_max_ms": shared.data_gap.percentile(100.0),
        "value_age_p50_ms": shared.value_age.percentile(50.0),
        "value_age_p99_ms": shared.value_age.percentile(99.0),
        "value_age_max_ms": shared.value_age.percentile(100.0),
        "probe_idle": probe_idle.json(),
        "probe_loaded": probe_loaded.json(),
    });
    println!("{out}");
    let mib = |k: Option<u64>| k.map_or("n/a".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0));
    eprintln!(
        "sessions up {ramped}/{} (end {active_end}), ramp {ramp_s:.1} s, open failures {}",
        args.sessions,
        get(&shared.open_failures)
    );
    eprintln!(
        "server RSS idle {} -> loaded {} (max {}), {} KiB per session; server CPU {:.0} %, client CPU {:.0} %, client RSS {}",
        mib(rss0),
        mib(rss_end),
        mib(rss_max),
        per_session.map_or("n/a".into(), |v| format!("{v:.1}")),
        cpu_pct(cpu0, cpu1).unwrap_or(f64::NAN),
        cpu_pct(self0, self1).unwrap_or(f64::NAN),
        mib(client_rss),
    );
    eprintln!(
        "hold: {:.0} data msgs/s, {:.0} keep-alives/s, {:.0} notifications/s; late keep-alives {}, late data {}, stale values {}, gaps {}, bad publish {}, lost {}",
        get(&h.data_msgs) as f64 / held,
        get(&h.keepalives) as f64 / held,
        get(&h.notifications) as f64 / held,
        get(&h.late_keepalives),
        get(&h.late_data),
        get(&h.stale_values),
        get(&h.seq_gaps),
        get(&h.bad_publish),
        get(&h.lost),
    );
    eprintln!(
        "probe Read: idle {}; loaded {}",
        probe_idle.summary(),
        probe_loaded.summary()
    );
    // The sessions end with the process (the server sees the connections close).
    std::process::exit(0);
}

/// The counters of one phase as JSON.
fn counters_json(c: &Counters) -> serde_json::Value {
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    serde_json::json!({
        "data_msgs": g(&c.data_msgs),
        "keepalives": g(&c.keepalives),
        "notifications": g(&c.notifications),
        "seq_gaps": g(&c.seq_gaps),
        "seq_repeats": g(&c.seq_repeats),
        "late_keepalives": g(&c.late_keepalives),
        "late_data": g(&c.late_data),
        "stale_values": g(&c.stale_values),
        "bad_publish": g(&c.bad_publish),
        "status_changes": g(&c.status_changes),
        "lost": g(&c.lost),
    })
}

/// The socket address of an `opc.tcp://host:port/...` URL.
fn endpoint_addr(url: &str) -> Result<SocketAddr> {
    let rest = url
        .strip_prefix("opc.tcp://")
        .context("endpoint must be an opc.tcp:// URL")?;
    let hostport = rest.split('/').next().unwrap_or(rest);
    hostport
        .to_socket_addrs()
        .with_context(|| format!("resolving {hostport}"))?
        .next()
        .with_context(|| format!("no address for {hostport}"))
}

/// VmRSS of a process in KiB (`pid` may be `self`).
fn rss_kib(pid: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Connects and opens an anonymous session named `name`.
async fn open(
    server: SocketAddr,
    src: Option<IpAddr>,
    url: &str,
    name: &str,
) -> Result<Session<TcpStream>> {
    let stream = tokio::time::timeout(uagate_bench::STEP, tcp_connect(server, src))
        .await
        .context("connect timed out")??;
    Session::open(stream, url, name).await
}

/// `nsu=<uri>;<id>` resolved through the server's NamespaceArray, or
/// `ns=<i>;<id>` as it is.
async fn resolve(s: &mut Session<TcpStream>, spec: &str) -> Result<NodeId> {
    let Some(rest) = spec.strip_prefix("nsu=") else {
        return NodeId::from_str(spec).map_err(|e| anyhow::anyhow!("bad node {spec:?}: {e:?}"));
    };
    let (uri, id) = rest
        .split_once(';')
        .with_context(|| format!("bad node {spec:?}: expected nsu=<uri>;<id>"))?;
    let request = ReadRequest {
        request_header: s.header(),
        max_age: 0.0,
        timestamps_to_return: TimestampsToReturn::Neither,
        nodes_to_read: Some(vec![ReadValueId::from(NodeId::from(
            VariableId::Server_NamespaceArray,
        ))]),
    };
    let Reply::Read(r) = s.call(&request).await? else {
        bail!("reading the NamespaceArray failed");
    };
    uagate_bench::node_in_namespace_array(
        r.results
            .unwrap_or_default()
            .into_iter()
            .next()
            .and_then(|dv| dv.value),
        uri,
        id,
        spec,
    )
}

/// One session's whole life: open, subscribe, then Publish until the
/// process ends. Failures are counted in `shared`.
async fn run_session(
    n: usize,
    data: bool,
    src: Option<IpAddr>,
    target: Arc<Target>,
    plan: Plan,
    shared: Arc<Shared>,
) {
    let (mut s, sub) = match setup(n, data, src, &target, plan).await {
        Ok(v) => v,
        Err(e) => {
            shared.failed(format!("session {n}: {e:#}"));
            return;
        }
    };
    if let Err(e) = publish_loop(&mut s, sub, data, plan, &shared).await {
        tracing::warn!(session = n, error = %format!("{e:#}"), "session lost");
        if let Some(c) = shared.counters() {
            c.lost.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Opens session `n` and creates its subscription and items; returns the
/// session and the subscription id.
async fn setup(
    n: usize,
    data: bool,
    src: Option<IpAddr>,
    target: &Target,
    plan: Plan,
) -> Result<(Session<TcpStream>, u32)> {
    let mut s = open(target.server, src, &target.url, &format!("bench-{n}")).await?;
    let create = CreateSubscriptionRequest {
        request_header: s.header(),
        requested_publishing_interval: plan.publishing.as_millis() as f64,
        requested_lifetime_count: plan.lifetime,
        requested_max_keep_alive_count: plan.keepalive,
        max_notifications_per_publish: 0,
        publishing_enabled: true,
        priority: 0,
    };
    let sub = match s.call(&create).await? {
        Reply::Subscribed(r) if r.response_header.service_result.is_good() => r.subscription_id,
        Reply::Subscribed(r) => bail!("CreateSubscription: {}", r.response_header.service_result),
        Reply::Fault(st) => bail!("CreateSubscription: {st}"),
        _ => bail!("CreateSubscription: unexpected response"),
    };
    let items = (0..plan.items)
        .map(|i| {
            let (node, sampling) = if data && i == 0 {
                (target.counter.clone(), plan.counter_sampling_ms)
            } else {
                (target.fixed.clone(), plan.sampling_ms)
            };
            MonitoredItemCreateRequest {
                item_to_monitor: ReadValueId::from(node),
                monitoring_mode: MonitoringMode::Reporting,
                requested_parameters: MonitoringParameters {
                    client_handle: i as u32,
                    sampling_interval: sampling as f64,
                    queue_size: 1,
                    discard_oldest: true,
                    ..Default::default()
                },
            }
        })
        .collect();
    let request = CreateMonitoredItemsRequest {
        request_header: s.header(),
        subscription_id: sub,
        timestamps_to_return: TimestampsToReturn::Both,
        items_to_create: Some(items),
    };
    match s.call(&request).await? {
        Reply::Monitored(r) => {
            let results = r.results.unwrap_or_default();
            if results.len() != plan.items {
                bail!("CreateMonitoredItems: {} results", results.len());
            }
            if let Some(bad) = results.iter().find(|r| !r.status_code.is_good()) {
                bail!("CreateMonitoredItems: {}", bad.status_code);
            }
        }
        Reply::Fault(st) => bail!("CreateMonitoredItems: {st}"),
        _ => bail!("CreateMonitoredItems: unexpected response"),
    }
    Ok((s, sub))
}

/// A Publish request acknowledging `acks` of subscription `sub`.
fn publish_request(s: &Session<TcpStream>, sub: u32, acks: &mut Vec<u32>) -> PublishRequest {
    let acks: Vec<SubscriptionAcknowledgement> = acks
        .drain(..)
        .map(|sequence_number| SubscriptionAcknowledgement {
            subscription_id: sub,
            sequence_number,
        })
        .collect();
    PublishRequest {
        request_header: s.header(),
        subscription_acknowledgements: (!acks.is_empty()).then_some(acks),
    }
}

/// Keeps two Publish requests outstanding and checks every message until
/// the session breaks (the error says how).
async fn publish_loop(
    s: &mut Session<TcpStream>,
    sub: u32,
    data: bool,
    plan: Plan,
    shared: &Shared,
) -> Result<()> {
    let mut acks = Vec::new();
    for _ in 0..2 {
        let p = publish_request(s, sub, &mut acks);
        s.send_request(&p).await?;
    }
    let keepalive_period = plan.publishing * plan.keepalive;
    let wait = keepalive_period * 2 + Duration::from_secs(10);
    let max_gap = if data {
        plan.publishing + plan.slack
    } else {
        keepalive_period + plan.slack
    };
    let max_age = Duration::from_millis(plan.counter_sampling_ms) + plan.publishing + plan.slack;
    let mut expected_seq: Option<u32> = None;
    let mut last: Option<Instant> = None;
    let mut counted_up = false;
    loop {
        let (_, reply) = s.recv_reply(wait).await?;
        let now = Instant::now();
        let now_dt = DateTime::now();
        let c = shared.counters();
        let r = match reply {
            Reply::Published(r) => r,
            Reply::Fault(st) => {
                if let Some(c) = c {
                    c.bad_publish.fetch_add(1, Ordering::Relaxed);
                }
                if matches!(
                    st,
                    StatusCode::BadSessionIdInvalid
                        | StatusCode::BadSessionClosed
                        | StatusCode::BadNoSubscription
                ) {
                    bail!("Publish: {st}");
                }
                // Keep two outstanding; do not spin on a refusal.
                tokio::time::sleep(Duration::from_millis(100)).await;
                let p = publish_request(s, sub, &mut acks);
                s.send_request(&p).await?;
                continue;
            }
            _ => bail!("Publish: unexpected response"),
        };
        let p = publish_request(s, sub, &mut acks);
        if !r.response_header.service_result.is_good() {
            if let Some(c) = c {
                c.bad_publish.fetch_add(1, Ordering::Relaxed);
            }
            s.send_request(&p).await?;
            continue;
        }
        if !counted_up {
            counted_up = true;
            shared.active.fetch_add(1, Ordering::Relaxed);
        }
        let msg = &r.notification_message;
        let seq = msg.sequence_number;
        let is_data = msg
            .notification_data
            .as_ref()
            .is_some_and(|d| !d.is_empty());
        // Gaps between consecutive messages, and lateness.
        if let Some(prev) = last {
            let gap = now.duration_since(prev);
            if shared.hold() {
                if data {
                    shared.data_gap.add(gap);
                } else {
                    shared.keepalive_gap.add(gap);
                }
            }
            if gap > max_gap {
                if let Some(c) = c {
                    if data {
                        c.late_data.fetch_add(1, Ordering::Relaxed);
                    } else {
                        c.late_keepalives.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        last = Some(now);
        if shared.hold() {
            shared.lag.add(age(now_dt, msg.publish_time));
        }
        let Some(c) = c else {
            acks_for(&mut acks, is_data, seq);
            s.send_request(&p).await?;
            continue;
        };
        // Sequence numbers: a data message uses the expected number, a
        // keep-alive announces it.
        if let Some(e) = expected_seq {
            if seq > e {
                c.seq_gaps.fetch_add(u64::from(seq - e), Ordering::Relaxed);
            } else if seq < e {
                c.seq_repeats.fetch_add(1, Ordering::Relaxed);
            }
        }
        if is_data {
            expected_seq = Some(seq.wrapping_add(1));
            c.data_msgs.fetch_add(1, Ordering::Relaxed);
            check_data(msg, now_dt, max_age, c, shared);
        } else {
            expected_seq = Some(seq.max(expected_seq.unwrap_or(0)));
            c.keepalives.fetch_add(1, Ordering::Relaxed);
        }
        acks_for(&mut acks, is_data, seq);
        s.send_request(&p).await?;
    }
}

/// Remembers a data message's sequence number for the next Publish's
/// acknowledgements.
fn acks_for(acks: &mut Vec<u32>, is_data: bool, seq: u32) {
    if is_data {
        acks.push(seq);
    }
}

/// Counts the notifications of a data message, its stale counter values
/// and status changes.
fn check_data(
    msg: &NotificationMessage,
    now: DateTime,
    max_age: Duration,
    c: &Counters,
    shared: &Shared,
) {
    for ext in msg.notification_data.iter().flatten() {
        if let Some(dc) = ext.inner_as::<DataChangeNotification>() {
            for item in dc.monitored_items.iter().flatten() {
                c.notifications.fetch_add(1, Ordering::Relaxed);
                // Only the counter (handle 0 of a data session) changes;
                // the initial values of the other items are old by design.
                let is_counter = item.client_handle == 0
                    && matches!(
                        item.value.value,
                        Some(Variant::UInt32(_) | Variant::UInt64(_))
                    );
                if let (true, Some(ts)) = (is_counter, item.value.source_timestamp) {
                    let a = age(now, ts);
                    if shared.hold() {
                        shared.value_age.add(a);
                    }
                    if a > max_age {
                        c.stale_values.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        } else if ext.inner_as::<StatusChangeNotification>().is_some() {
            c.status_changes.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// `now - then` (zero when `then` is later, e.g. clock steps).
fn age(now: DateTime, then: DateTime) -> Duration {
    let ms = now.as_chrono().timestamp_millis() - then.as_chrono().timestamp_millis();
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// What one probe run measured.
struct ProbeResult {
    open_ms: f64,
    latencies_us: Vec<u64>,
    errors: u64,
    failed: Option<String>,
}

impl ProbeResult {
    fn failed(why: String) -> Self {
        ProbeResult {
            open_ms: 0.0,
            latencies_us: Vec::new(),
            errors: 0,
            failed: Some(why),
        }
    }

    fn json(&self) -> serde_json::Value {
        let p = |q| percentile(&self.latencies_us, q) as f64 / 1000.0;
        serde_json::json!({
            "open_ms": self.open_ms,
            "reads": self.latencies_us.len(),
            "errors": self.errors,
            "p50_ms": p(50.0),
            "p99_ms": p(99.0),
            "max_ms": p(100.0),
            "failed": self.failed,
        })
    }

    fn summary(&self) -> String {
        if let Some(f) = &self.failed {
            return format!("FAILED ({f})");
        }
        let p = |q| percentile(&self.latencies_us, q) as f64 / 1000.0;
        format!(
            "Read p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms ({} reads, {} errors; session opened in {:.0} ms)",
            p(50.0),
            p(99.0),
            p(100.0),
            self.latencies_us.len(),
            self.errors,
            self.open_ms
        )
    }
}

/// A fresh session that Reads the ten benchmark nodes every
/// `--probe-interval-ms` for `--probe-secs` (a Read that takes longer
/// delays the next), then closes.
async fn probe(args: &Args, server: SocketAddr) -> Result<ProbeResult> {
    let t0 = Instant::now();
    let mut s = open(server, args.probe_src, &args.endpoint, "bench-probe").await?;
    let open_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let mut out = ProbeResult {
        open_ms,
        latencies_us: Vec::new(),
        errors: 0,
        failed: None,
    };
    let mut tick = tokio::time::interval(Duration::from_millis(args.probe_interval_ms.max(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let end = Instant::now() + Duration::from_secs(args.probe_secs);
    while Instant::now() < end {
        tick.tick().await;
        let start = Instant::now();
        match read(&mut s).await? {
            Ok(true) => out
                .latencies_us
                .push(u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)),
            _ => out.errors += 1,
        }
    }
    out.latencies_us.sort_unstable();
    let _ = s.close().await;
    Ok(out)
}
