#![forbid(unsafe_code)]
//! `uagate-bench-notify`: data-change notification throughput of one OPC UA
//! server.
//!
//! Opens N sessions to one endpoint (security None, anonymous); each session
//! creates one subscription with M monitored items, all on the same
//! changing variable (distinct client handles, queue size 1, no filter, i.e.
//! the default DataChangeFilter `StatusValue`). After a warm-up it counts the
//! DataChange notifications received per second over the measured window and
//! prints one JSON line: notifications/s, the expected rate
//! (`sessions * items * 1000 / sampling_ms`), missing %, value skips and
//! repeats seen per item, latencies (publish time and source timestamp to
//! arrival, server and client share the clock), errors, and the server
//! process's CPU % and peak RSS over the window (from `/proc/<pid>`).
//!
//! The node is given as `ns=<index>;s=...` or as `nsu=<namespace uri>;s=...`;
//! the latter is resolved by reading the server's NamespaceArray.
//!
//! For a gateway in front of a field server (`bench/run-field.sh`):
//! `--change-ms` is the period at which the variable changes when that is
//! slower than sampling (the expected rate uses the slower of the two),
//! `--field-pid` reports the field server process's CPU % over the window,
//! and `--field-port` the bytes and TCP segments per second sent and
//! received by the established sockets on that local port (the field
//! server's side, from `ss -tin`), which shows whether the southbound side
//! carries one item or one per northbound item.
//!
//! This is a measuring tool, not a test: it asserts nothing about timing.
//! `bench/run-notify.sh` drives it against uagate and `opcua-ref-server`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use opcua_client::OnSubscriptionNotificationCore;
use opcua_client::{Client, ClientBuilder, IdentityToken, MonitoredItemMap, Session};
use opcua_crypto::SecurityPolicy;
use opcua_types::{
    DataChangeNotification, DataValue, DateTime, EndpointDescription, ExtensionObject,
    MessageSecurityMode, MonitoredItemCreateRequest, MonitoringMode, MonitoringParameters, NodeId,
    NotificationMessage, ReadValueId, StatusChangeNotification, TimestampsToReturn, Variant,
};
use uagate_bench::stats::cpu_ticks;
use uagate_bench::STEP;

/// Command line of the notification benchmark client.
#[derive(Parser)]
#[command(about = "Data-change notification throughput benchmark client")]
struct Args {
    /// Endpoint URL of the server, e.g. opc.tcp://127.0.0.1:4840/
    #[arg(long)]
    endpoint: String,
    /// Variable to monitor: `ns=2;s=Gateway.Demo.Counter` or
    /// `nsu=urn:uagate:gateway;s=Gateway.Demo.Counter` (index looked up in NamespaceArray).
    #[arg(long)]
    node: String,
    /// Concurrent sessions (each on its own secure channel, one subscription each).
    #[arg(long, default_value_t = 100)]
    sessions: usize,
    /// Monitored items per subscription (all on `--node`).
    #[arg(long, default_value_t = 100)]
    items: usize,
    /// Requested sampling interval in milliseconds.
    #[arg(long, default_value_t = 100)]
    sampling_ms: u64,
    /// Requested publishing interval in milliseconds.
    #[arg(long, default_value_t = 100)]
    publishing_ms: u64,
    /// Measured seconds (after the warm-up).
    #[arg(long, default_value_t = 30)]
    duration: u64,
    /// Warm-up seconds after all subscriptions exist, before measuring.
    #[arg(long, default_value_t = 5)]
    warmup: u64,
    /// Client PKI directory (a client certificate is created if missing).
    #[arg(long, default_value = "./uagate-bench-pki")]
    pki: PathBuf,
    /// PID of the server process: its CPU % and peak RSS over the window are reported.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Clock ticks per second for /proc/<pid>/stat (`getconf CLK_TCK`).
    #[arg(long, default_value_t = 100)]
    clk_tck: u64,
    /// Free-text label copied into the result line (e.g. the server name).
    #[arg(long, default_value = "")]
    label: String,
    /// Period (ms) at which the variable changes, if slower than sampling
    /// (e.g. 500 for `uagate sim`'s Simulation.Counter); 0 = every sample.
    #[arg(long, default_value_t = 0)]
    change_ms: u64,
    /// PID of a second process (e.g. the field server behind a gateway): its
    /// CPU % over the window is reported.
    #[arg(long)]
    field_pid: Option<u32>,
    /// Listening port of the field server: bytes and segments per second sent
    /// and received by the established TCP sockets with this local port over
    /// the window are reported (needs `ss` from iproute2).
    #[arg(long)]
    field_port: Option<u16>,
}

fn client(pki: &Path) -> Result<Client> {
    ClientBuilder::new()
        .application_name("uagate-bench-notify")
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

fn none_endpoint(endpoints: &[EndpointDescription]) -> Result<EndpointDescription> {
    let uri = SecurityPolicy::None.to_uri();
    endpoints
        .iter()
        .find(|e| {
            e.security_policy_uri.as_ref() == uri && e.security_mode == MessageSecurityMode::None
        })
        .cloned()
        .context("server offers no SecurityPolicy None endpoint")
}

/// Counters shared by every session's subscription callback.
struct Shared {
    /// Reference point for `begin_ms`.
    base: Instant,
    /// Milliseconds after `base` at which per-second bucket 0 starts (when
    /// every subscription exists); `u64::MAX` until then.
    begin_ms: AtomicU64,
    /// First measured bucket (= warm-up seconds).
    first: usize,
    /// Notifications received per second since `begin` (warm-up and window).
    buckets: Vec<AtomicU64>,
    /// Notifications in the measured window whose status was not Good.
    bad_status: AtomicU64,
    /// Values that jumped by more than 1 since the item's previous value (window only):
    /// the sum of the skipped counter values.
    value_skips: AtomicU64,
    /// Notifications repeating the item's previous value (window only).
    value_repeats: AtomicU64,
    /// Notifications whose value is not a UInt32 (window only).
    not_u32: AtomicU64,
    /// StatusChangeNotifications (e.g. subscription timed out).
    status_changes: AtomicU64,
    /// Gaps in NotificationMessage sequence numbers (window only).
    seq_gaps: AtomicU64,
}

impl Shared {
    /// Bucket index for `now`, `None` before `begin` or past the window.
    fn bucket(&self, now: Instant) -> Option<usize> {
        let since_base = u64::try_from(now.checked_duration_since(self.base)?.as_millis()).ok()?;
        let since_begin = since_base.checked_sub(self.begin_ms.load(Ordering::Relaxed))?;
        let i = usize::try_from(since_begin / 1000).ok()?;
        (i < self.buckets.len()).then_some(i)
    }
    fn in_window(&self, bucket: usize) -> bool {
        bucket >= self.first
    }
}

/// Latency samples of one session, in microseconds (window only).
#[derive(Default)]
struct Latencies {
    /// NotificationMessage.PublishTime to arrival, one per message.
    publish_us: Vec<u64>,
    /// DataValue.SourceTimestamp to arrival, one per notification.
    source_us: Vec<u64>,
}

/// The subscription callback of one session.
struct Counter {
    shared: Arc<Shared>,
    lat: Arc<Mutex<Latencies>>,
    /// Previous counter value per client handle.
    last: HashMap<u32, u32>,
    last_seq: Option<u32>,
}

/// Microseconds from `t` to `now` (both server/client wall clock; 0 if negative).
fn since_us(now: &DateTime, t: &DateTime) -> u64 {
    u64::try_from((now.ticks() - t.ticks()) / 10).unwrap_or(0)
}

impl OnSubscriptionNotificationCore for Counter {
    fn on_subscription_notification(
        &mut self,
        notification: NotificationMessage,
        _items: MonitoredItemMap<'_>,
    ) {
        let now = Instant::now();
        let wall = DateTime::now();
        let bucket = self.shared.bucket(now);
        let measured = bucket.is_some_and(|b| self.shared.in_window(b));
        if let Some(prev) = self.last_seq {
            let gap = notification.sequence_number.wrapping_sub(prev);
            if measured && gap > 1 {
                self.shared
                    .seq_gaps
                    .fetch_add(u64::from(gap - 1), Ordering::Relaxed);
            }
        }
        self.last_seq = Some(notification.sequence_number);
        let mut publish_us = None;
        let mut source_us = Vec::new();
        let mut count = 0u64;
        for obj in notification.notification_data.into_iter().flatten() {
            if let Some(dc) = obj.inner_as::<DataChangeNotification>() {
                for n in dc.monitored_items.iter().flatten() {
                    count += 1;
                    if measured {
                        self.check_value(n.client_handle, &n.value);
                        if let Some(ts) = &n.value.source_timestamp {
                            source_us.push(since_us(&wall, ts));
                        }
                    } else if let Some(Variant::UInt32(v)) = &n.value.value {
                        self.last.insert(n.client_handle, *v);
                    }
                }
                if measured && !notification.publish_time.is_null() {
                    publish_us = Some(since_us(&wall, &notification.publish_time));
                }
            } else if obj.inner_as::<StatusChangeNotification>().is_some() {
                self.shared.status_changes.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(b) = bucket {
            self.shared.buckets[b].fetch_add(count, Ordering::Relaxed);
        }
        if measured {
            if let Ok(mut lat) = self.lat.lock() {
                lat.publish_us.extend(publish_us);
                lat.source_us.extend(source_us);
            }
        }
    }
}

impl Counter {
    /// Status and counter-sequence checks for one notification in the window.
    fn check_value(&mut self, handle: u32, dv: &DataValue) {
        if dv.status.is_some_and(|s| !s.is_good()) {
            self.shared.bad_status.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Some(Variant::UInt32(v)) = &dv.value else {
            self.shared.not_u32.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if let Some(prev) = self.last.insert(handle, *v) {
            let step = v.wrapping_sub(prev);
            if step == 0 {
                self.shared.value_repeats.fetch_add(1, Ordering::Relaxed);
            } else if step > 1 && step < u32::MAX / 2 {
                self.shared
                    .value_skips
                    .fetch_add(u64::from(step - 1), Ordering::Relaxed);
            }
        }
    }
}

async fn read_one(session: &Session, node: NodeId) -> Result<DataValue> {
    let mut values = tokio::time::timeout(
        STEP,
        session.read(
            &[ReadValueId::from(node.clone())],
            TimestampsToReturn::Both,
            0.0,
        ),
    )
    .await
    .context("read timed out")?
    .context("read failed")?;
    let dv = values.pop().context("empty read result")?;
    if let Some(s) = dv.status {
        if !s.is_good() {
            bail!("{node} reads {s}");
        }
    }
    Ok(dv)
}

/// VmRSS of a process in KiB, from /proc/<pid>/status.
fn rss_kib(pid: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Totals over the established TCP sockets with local port `port`, from
/// `ss -tin`: [bytes_sent, bytes_received, segs_out, segs_in].
fn socket_totals(port: u16) -> Option<[u64; 4]> {
    let out = std::process::Command::new("ss")
        .args([
            "-tinH",
            "state",
            "established",
            &format!("( sport = :{port} )"),
        ])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut totals = [0u64; 4];
    for word in text.split_whitespace() {
        let Some((key, value)) = word.split_once(':') else {
            continue;
        };
        let slot = match key {
            "bytes_sent" => 0,
            "bytes_received" => 1,
            "segs_out" => 2,
            "segs_in" => 3,
            _ => continue,
        };
        if let Ok(v) = value.parse::<u64>() {
            totals[slot] += v;
        }
    }
    Some(totals)
}

/// Nearest-rank percentile of sorted values; None when there are none.
fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    (!sorted.is_empty()).then(|| uagate_bench::stats::percentile(sorted, p))
}

fn ms(v: Option<u64>) -> serde_json::Value {
    v.map_or(serde_json::Value::Null, |us| {
        serde_json::json!((us as f64 / 100.0).round() / 10.0)
    })
}

/// One connected session.
struct Conn {
    session: Arc<Session>,
    event_loop: tokio::task::JoinHandle<opcua_types::StatusCode>,
    lat: Arc<Mutex<Latencies>>,
}

async fn connect(client: &mut Client, endpoint: &EndpointDescription, i: usize) -> Result<Conn> {
    let (session, event_loop) = client
        .connect_to_endpoint_directly(endpoint.clone(), IdentityToken::Anonymous)
        .with_context(|| format!("session {i}: building"))?;
    let event_loop = event_loop.spawn();
    let ok = tokio::time::timeout(STEP, session.wait_for_connection())
        .await
        .with_context(|| format!("session {i}: connect timed out"))?;
    if !ok {
        bail!("session {i}: could not connect (session limit? channel limit?)");
    }
    Ok(Conn {
        session,
        event_loop,
        lat: Arc::default(),
    })
}

/// Revised intervals reported by the server for the first session.
#[derive(Default)]
struct Revised {
    publishing_ms: Option<f64>,
    sampling_ms: Option<f64>,
    queue_size: Option<u32>,
}

async fn subscribe(
    conn: &Conn,
    args: &Args,
    node: &NodeId,
    shared: &Arc<Shared>,
    i: usize,
) -> Result<Revised> {
    let callback = Counter {
        shared: shared.clone(),
        lat: conn.lat.clone(),
        last: HashMap::new(),
        last_seq: None,
    };
    let sub = tokio::time::timeout(
        STEP,
        conn.session.create_subscription(
            Duration::from_millis(args.publishing_ms),
            30,
            10,
            0,
            0,
            true,
            callback,
        ),
    )
    .await
    .with_context(|| format!("session {i}: CreateSubscription timed out"))?
    .with_context(|| format!("session {i}: CreateSubscription failed"))?;
    let items: Vec<_> = (1..=args.items)
        .map(|h| MonitoredItemCreateRequest {
            item_to_monitor: ReadValueId::from(node.clone()),
            monitoring_mode: MonitoringMode::Reporting,
            requested_parameters: MonitoringParameters {
                client_handle: u32::try_from(h).unwrap_or(u32::MAX),
                sampling_interval: args.sampling_ms as f64,
                filter: ExtensionObject::null(),
                queue_size: 1,
                discard_oldest: true,
            },
        })
        .collect();
    let mut created = Vec::with_capacity(items.len());
    // Stay under the usual MaxMonitoredItemsPerCall (1000).
    for chunk in items.chunks(500) {
        let r = tokio::time::timeout(
            STEP,
            conn.session
                .create_monitored_items(sub, TimestampsToReturn::Both, chunk.to_vec()),
        )
        .await
        .with_context(|| format!("session {i}: CreateMonitoredItems timed out"))?
        .with_context(|| format!("session {i}: CreateMonitoredItems failed"))?;
        created.extend(r);
    }
    if let Some(bad) = created.iter().find(|c| !c.result.status_code.is_good()) {
        bail!(
            "session {i}: monitored item rejected: {}",
            bad.result.status_code
        );
    }
    let revised_pub = conn
        .session
        .subscription_state()
        .lock()
        .get(sub)
        .map(|s| s.publishing_interval().as_secs_f64() * 1000.0);
    Ok(Revised {
        publishing_ms: revised_pub,
        sampling_ms: created.first().map(|c| c.result.revised_sampling_interval),
        queue_size: created.first().map(|c| c.result.revised_queue_size),
    })
}

#[tokio::main]
async fn main() -> Result<()> {
    uagate_bench::init_logging("error");
    let args = Args::parse();
    if args.sessions == 0 || args.items == 0 || args.duration == 0 || args.sampling_ms == 0 {
        bail!("--sessions, --items, --duration and --sampling-ms must be at least 1");
    }

    let mut client = client(&args.pki)?;
    let endpoints =
        tokio::time::timeout(STEP, client.get_server_endpoints_from_url(&*args.endpoint))
            .await
            .context("GetEndpoints timed out")?
            .context("GetEndpoints failed")?;
    let endpoint = none_endpoint(&endpoints)?;

    let setup_start = Instant::now();
    let mut conns = Vec::with_capacity(args.sessions);
    for i in 0..args.sessions {
        conns.push(connect(&mut client, &endpoint, i).await?);
    }
    let first = &conns[0].session;
    let node = uagate_bench::resolve_node(first, &args.node, STEP).await?;
    // The variable must exist, be a UInt32 and change.
    let v0 = read_one(first, node.clone()).await?;
    if !matches!(v0.value, Some(Variant::UInt32(_))) {
        bail!("{node} is not a UInt32: {:?}", v0.value);
    }
    let settle_ms = 3 * args.sampling_ms.max(args.change_ms).max(100);
    tokio::time::sleep(Duration::from_millis(settle_ms)).await;
    let v1 = read_one(first, node.clone()).await?;
    if v0.value == v1.value {
        bail!("{node} did not change within {settle_ms} ms");
    }

    let secs = usize::try_from(args.warmup + args.duration).unwrap_or(usize::MAX);
    let shared = Arc::new(Shared {
        base: Instant::now(),
        begin_ms: AtomicU64::new(u64::MAX),
        first: usize::try_from(args.warmup).unwrap_or(usize::MAX),
        buckets: (0..secs).map(|_| AtomicU64::new(0)).collect(),
        bad_status: AtomicU64::new(0),
        value_skips: AtomicU64::new(0),
        value_repeats: AtomicU64::new(0),
        not_u32: AtomicU64::new(0),
        status_changes: AtomicU64::new(0),
        seq_gaps: AtomicU64::new(0),
    });
    let mut revised = Revised::default();
    let subscribe_start = Instant::now();
    for (i, c) in conns.iter().enumerate() {
        let r = subscribe(c, &args, &node, &shared, i).await?;
        if i == 0 {
            revised = r;
        }
    }
    let setup_s = setup_start.elapsed().as_secs_f64();
    let subscribe_s = subscribe_start.elapsed().as_secs_f64();
    // Bucket 0 (the first warm-up second) starts now that every subscription exists.
    let begin = Instant::now();
    let begin_ms = u64::try_from(begin.duration_since(shared.base).as_millis()).unwrap_or(0);
    shared.begin_ms.store(begin_ms, Ordering::Relaxed);

    let measure_from = begin + Duration::from_secs(args.warmup);
    let end = measure_from + Duration::from_secs(args.duration);
    let pid = args.server_pid.map(|p| p.to_string());
    let field_pid = args.field_pid.map(|p| p.to_string());
    tokio::time::sleep_until(measure_from.into()).await;
    let server_before = pid.as_deref().and_then(cpu_ticks);
    let field_before = field_pid.as_deref().and_then(cpu_ticks);
    let field_io_before = args.field_port.and_then(socket_totals);
    let client_before = cpu_ticks("self");
    let rss_start = pid.as_deref().and_then(rss_kib);
    let mut rss_max = rss_start;
    let mut sessions_lost = 0usize;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(500).min(end - Instant::now())).await;
        if let Some(r) = pid.as_deref().and_then(rss_kib) {
            rss_max = Some(rss_max.map_or(r, |m| m.max(r)));
        }
    }
    let server_after = pid.as_deref().and_then(cpu_ticks);
    let field_after = field_pid.as_deref().and_then(cpu_ticks);
    let field_io_after = args.field_port.and_then(socket_totals);
    let client_after = cpu_ticks("self");
    for c in &conns {
        if c.event_loop.is_finished() {
            sessions_lost += 1;
        }
    }

    let window: Vec<u64> = shared.buckets[shared.first..]
        .iter()
        .map(|b| b.load(Ordering::Relaxed))
        .collect();
    let mut publish_us = Vec::new();
    let mut source_us = Vec::new();
    for c in &conns {
        if let Ok(mut l) = c.lat.lock() {
            publish_us.append(&mut l.publish_us);
            source_us.append(&mut l.source_us);
        }
    }
    publish_us.sort_unstable();
    source_us.sort_unstable();

    for c in conns {
        let _ = tokio::time::timeout(Duration::from_secs(5), c.session.disconnect()).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), c.event_loop).await;
    }

    let total: u64 = window.iter().sum();
    let wall = args.duration as f64;
    let per_s = total as f64 / wall;
    let expected =
        (args.sessions * args.items) as f64 * 1000.0 / args.sampling_ms.max(args.change_ms) as f64;
    let tick = args.clk_tck.max(1) as f64;
    let pct = |b: Option<u64>, a: Option<u64>| match (b, a) {
        (Some(b), Some(a)) => {
            serde_json::json!((a.saturating_sub(b) as f64 / tick / wall * 1000.0).round() / 10.0)
        }
        _ => serde_json::Value::Null,
    };
    // Sockets that closed during the window drop out of the totals; the
    // difference is taken as is (saturating), which is exact when the set of
    // connections is stable, as it is while measuring.
    let io_rate = |i: usize| match (field_io_before, field_io_after) {
        (Some(b), Some(a)) => serde_json::json!((a[i].saturating_sub(b[i]) as f64 / wall).round()),
        _ => serde_json::Value::Null,
    };
    let load = |o: Option<u64>| o.map_or(serde_json::Value::Null, |v| serde_json::json!(v));
    let line = serde_json::json!({
        "label": args.label,
        "endpoint": args.endpoint,
        "node": node.to_string(),
        "sessions": args.sessions,
        "items": args.items,
        "sampling_ms": args.sampling_ms,
        "publishing_ms": args.publishing_ms,
        "revised_sampling_ms": revised.sampling_ms,
        "revised_publishing_ms": revised.publishing_ms,
        "revised_queue_size": revised.queue_size,
        "warmup_s": args.warmup,
        "duration_s": args.duration,
        "notifications": total,
        "notif_per_s": per_s.round(),
        "expected_per_s": expected.round(),
        "missing_pct": ((expected - per_s) / expected * 1000.0).round() / 10.0,
        "per_s_min": window.iter().min().copied().unwrap_or(0),
        "per_s_max": window.iter().max().copied().unwrap_or(0),
        "value_skips": shared.value_skips.load(Ordering::Relaxed),
        "value_repeats": shared.value_repeats.load(Ordering::Relaxed),
        "bad_status": shared.bad_status.load(Ordering::Relaxed),
        "not_u32": shared.not_u32.load(Ordering::Relaxed),
        "status_changes": shared.status_changes.load(Ordering::Relaxed),
        "seq_gaps": shared.seq_gaps.load(Ordering::Relaxed),
        "sessions_lost": sessions_lost,
        "publish_lat_p50_ms": ms(percentile(&publish_us, 50.0)),
        "publish_lat_p99_ms": ms(percentile(&publish_us, 99.0)),
        "source_lat_p50_ms": ms(percentile(&source_us, 50.0)),
        "source_lat_p99_ms": ms(percentile(&source_us, 99.0)),
        "setup_s": (setup_s * 100.0).round() / 100.0,
        "subscribe_s": (subscribe_s * 100.0).round() / 100.0,
        "server_cpu_pct": pct(server_before, server_after),
        "server_rss_start_kib": load(rss_start),
        "server_rss_max_kib": load(rss_max),
        "client_cpu_pct": pct(client_before, client_after),
        "change_ms": args.change_ms,
        "field_cpu_pct": pct(field_before, field_after),
        "load_avg": std::fs::read_to_string("/proc/loadavg").ok()
            .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" ")),
    });
    let mut line = line;
    if let Some(obj) = line.as_object_mut() {
        obj.insert("field_port".into(), serde_json::json!(args.field_port));
        for (i, key) in [
            "field_sent_bytes_per_s",
            "field_received_bytes_per_s",
            "field_segs_out_per_s",
            "field_segs_in_per_s",
        ]
        .into_iter()
        .enumerate()
        {
            obj.insert(key.into(), io_rate(i));
        }
    }
    println!("{line}");
    Ok(())
}
