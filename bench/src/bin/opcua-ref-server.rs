#![forbid(unsafe_code)]
//! `opcua-ref-server`: the plain async-opcua-server the Read benchmark
//! compares uagate against.
//!
//! It is built like `uagate sim` (core namespace-0 node manager, anonymous
//! None and Basic256Sha256 SignAndEncrypt endpoints, client certificates
//! trusted automatically) but with a session limit high enough for 64
//! concurrent sessions (`uagate sim` keeps the async-opcua default of 20).
//! For the notification benchmark it also has `Objects/Bench/Counter`
//! (`nsu=urn:uagate:bench:ref-server;s=Bench.Counter`, UInt32), incremented
//! every `--counter-ms` (100 ms) by a tokio interval through the node
//! manager's `set_value`, which notifies monitored items.
//! Prints `READY opc.tcp=<url>` on stdout once listening; stops on
//! SIGTERM / Ctrl-C. Used only by `bench/run.sh`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use opcua_crypto::SecurityPolicy;
use opcua_server::{
    address_space::{AccessLevel, Variable},
    diagnostics::NamespaceMetadata,
    node_manager::memory::{
        simple_node_manager, CoreNodeManagerBuilder, InMemoryNodeManagerBuilder, SimpleNodeManager,
    },
    ServerBuilder, ServerEndpoint, ANONYMOUS_USER_TOKEN_ID,
};
use opcua_types::{DataValue, DateTime, MessageSecurityMode, NodeId, ObjectId};

/// Namespace of the benchmark nodes (its index is whatever the server assigns).
const BENCH_NS: &str = "urn:uagate:bench:ref-server";

/// Command line of the reference server.
#[derive(Parser)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
    /// PKI directory (own certificate is created if missing).
    #[arg(long)]
    pki: PathBuf,
    /// Most concurrent sessions.
    #[arg(long, default_value_t = 200)]
    max_sessions: usize,
    /// Period of the `Bench.Counter` increments, in milliseconds.
    #[arg(long, default_value_t = 100)]
    counter_ms: u64,
    /// Stamp each counter value with its nominal tick time (start + n x period)
    /// instead of the wall clock at the update. async-opcua drops or delays a
    /// sample whose SourceTimestamp is less than one sampling interval after
    /// the previous one, so timer jitter alone makes it skip values when the
    /// sampling interval equals the change period; this option removes that jitter.
    #[arg(long)]
    nominal_timestamps: bool,
    /// Also add `Bench.D0` .. `Bench.D{N-1}`: N read-only Double variables
    /// with fixed values, the field server of `bench/run-field.sh FIELD=ref`.
    #[arg(long, default_value_t = 0)]
    doubles: u32,
}

#[tokio::main]
async fn main() -> Result<()> {
    uagate_bench::init_logging("warn");
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot bind {}", args.listen))?;
    let addr = listener.local_addr()?;
    let host = addr.ip().to_string();
    let url = format!("opc.tcp://{host}:{}/", addr.port());
    let tokens = [ANONYMOUS_USER_TOKEN_ID];
    let builder = ServerBuilder::new()
        .without_node_managers()
        .with_node_manager(InMemoryNodeManagerBuilder::new(CoreNodeManagerBuilder))
        .with_node_manager(simple_node_manager(
            NamespaceMetadata {
                namespace_uri: BENCH_NS.to_owned(),
                ..Default::default()
            },
            "bench",
        ))
        .application_name("async-opcua reference server")
        .application_uri("urn:uagate:bench:ref-server")
        .product_uri("urn:uagate:bench:ref-server")
        .pki_dir(args.pki)
        .create_sample_keypair(true)
        .trust_client_certs(true)
        .host(host)
        .port(addr.port())
        .discovery_urls(vec![url.clone()])
        .max_sessions(args.max_sessions)
        .add_endpoint(
            "none",
            ServerEndpoint::new_none("/", &[ANONYMOUS_USER_TOKEN_ID.to_owned()]),
        )
        .add_endpoint(
            "basic256sha256_sign_encrypt",
            (
                "/",
                SecurityPolicy::Basic256Sha256,
                MessageSecurityMode::SignAndEncrypt,
                &tokens as &[&str],
            ),
        )
        .default_endpoint("none");
    // Building may generate an RSA key pair; nothing else runs yet, so
    // blocking this thread briefly is harmless.
    let (server, handle) = builder
        .build()
        .map_err(|e| anyhow::anyhow!("cannot build server: {e}"))?;
    let counter = add_counter(&handle, args.doubles)?;
    let task = tokio::spawn(server.run_with(listener));
    tokio::spawn(drive_counter(
        handle.clone(),
        counter,
        args.counter_ms,
        args.nominal_timestamps,
    ));
    println!("READY opc.tcp={url}");

    uagate_bench::stop_signal().await?;
    handle.cancel();
    match task.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(anyhow::anyhow!("server failed: {e}")),
        Err(e) => Err(anyhow::anyhow!("server task: {e}")),
    }
}

/// Adds `Objects/Bench`, `Bench/Counter` (UInt32, read-only) and `doubles`
/// Double variables `Bench.D<i>` (read-only, value i + 0.5) to the bench
/// namespace; returns the counter's node id. Called once before the server runs.
fn add_counter(handle: &opcua_server::ServerHandle, doubles: u32) -> Result<NodeId> {
    let manager = handle
        .node_managers()
        .get_of_type::<SimpleNodeManager>()
        .context("bench node manager missing")?;
    let ns = manager
        .namespaces()
        .iter()
        .find(|(_, uri)| uri.as_str() == BENCH_NS)
        .map(|(i, _)| *i)
        .context("bench namespace missing")?;
    let folder = NodeId::new(ns, "Bench");
    let counter = NodeId::new(ns, "Bench.Counter");
    let mut space = manager.address_space().write();
    space.add_folder(&folder, "Bench", "Bench", &ObjectId::ObjectsFolder.into());
    let mut var = Variable::new(&counter, "Counter", "Counter", 0u32);
    var.set_access_level(AccessLevel::CURRENT_READ);
    var.set_user_access_level(AccessLevel::CURRENT_READ);
    let mut vars = vec![var];
    for i in 0..doubles {
        let name = format!("D{i}");
        let id = NodeId::new(ns, format!("Bench.{name}"));
        let mut var = Variable::new(&id, name.as_str(), name.as_str(), f64::from(i) + 0.5);
        var.set_access_level(AccessLevel::CURRENT_READ);
        var.set_user_access_level(AccessLevel::CURRENT_READ);
        vars.push(var);
    }
    space.add_variables(vars, &folder);
    Ok(counter)
}

/// Increments `Bench.Counter` every `period_ms` until the process ends,
/// notifying monitored items through the node manager. Source timestamps are
/// the wall clock, or the nominal tick time with `--nominal-timestamps`.
async fn drive_counter(
    handle: opcua_server::ServerHandle,
    counter: NodeId,
    period_ms: u64,
    nominal: bool,
) {
    let Some(manager) = handle.node_managers().get_of_type::<SimpleNodeManager>() else {
        return;
    };
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(period_ms.max(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut value = 0u32;
    let period_ticks = i64::try_from(period_ms.max(1)).unwrap_or(i64::MAX / 2) * 10_000;
    let start = DateTime::now().ticks();
    loop {
        tick.tick().await;
        value = value.wrapping_add(1);
        let at = if nominal {
            DateTime::from(start.saturating_add(i64::from(value).saturating_mul(period_ticks)))
        } else {
            DateTime::now()
        };
        let dv = DataValue::new_at(value, at);
        if let Err(e) = manager.set_value(handle.subscriptions(), &counter, None, dv) {
            tracing::warn!("cannot update Bench.Counter: {e}");
        }
    }
}
