//! Benchmark of the appliance pair's configuration writes (issue 18), not a
//! test: write latency (p50/p99) standalone, pair only and pair + witness,
//! the standby's replication lag under a steady 50 writes/s, and how long
//! maintenance takes to hand the configuration leadership over (pair +
//! witness), back and forth between the two appliances. Nodes run
//! in this process on loopback with real TLS, real SQLite files and the
//! real Raft log; each write is a user added through the pair.
//!
//! `cargo run --release -p uagate-bench --bin uagate-bench-pair -- --writes 300`

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Parser;
use uagate_pair::node::admin;
use uagate_pair::tls::Identity;
use uagate_pair::wire::{AdminRequest, AdminResponse};
use uagate_pair::{NodeSettings, PairNode};
use uagate_store::{Change, PasswordHash, Proposal, Role, Store};

#[derive(Parser)]
struct Args {
    /// Writes timed per topology.
    #[arg(long, default_value_t = 300)]
    writes: usize,
    /// Seconds of the steady-rate run.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Writes per second of the steady-rate run.
    #[arg(long, default_value_t = 50)]
    rate: u32,
    /// Hand-overs timed (pair + witness).
    #[arg(long, default_value_t = 10)]
    handovers: usize,
}

const HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHQ$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

struct Node {
    _dir: tempfile::TempDir,
    node: Arc<PairNode>,
    pair_dir: std::path::PathBuf,
}

async fn node(name: &str, witness: bool) -> Result<Node> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(&dir.path().join("config.db")).await?;
    let pair_dir = dir.path().join("pair");
    let node = PairNode::start(
        NodeSettings {
            dir: pair_dir.clone(),
            name: name.into(),
            listen: "127.0.0.1:0".parse()?,
            advertise: None,
            application_uri: format!("urn:uagate:{name}"),
            witness,
            console: String::new(),
        },
        store,
    )
    .await?;
    // A one-member log elects itself within moments of starting.
    let t0 = Instant::now();
    while !witness && node.raft_metrics().await.current_leader != Some(node.id()) {
        if t0.elapsed() > Duration::from_secs(10) {
            bail!("{name} never led its own log");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(Node {
        _dir: dir,
        node,
        pair_dir,
    })
}

async fn join(joiner: &Node, leader: &Node) -> Result<()> {
    let cli = |n: &Node| Identity::load_or_create(&n.pair_dir, "cli");
    let code = match admin(
        &cli(leader)?,
        &leader.node.local_addr().to_string(),
        AdminRequest::Invite,
    )
    .await?
    {
        AdminResponse::Invite { code, .. } => code,
        other => bail!("{other:?}"),
    };
    admin(
        &cli(joiner)?,
        &joiner.node.local_addr().to_string(),
        AdminRequest::Join {
            addr: leader.node.local_addr().to_string(),
            code,
        },
    )
    .await?;
    Ok(())
}

fn user(i: usize) -> Proposal<Change> {
    Proposal::now(
        "bench",
        Change::AddUser {
            name: format!("u{i}"),
            password_hash: PasswordHash::new(HASH),
            role: Role::Viewer,
        },
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Times `n` writes on `leader` one after another; prints p50/p99.
async fn latency(what: &str, leader: &PairNode, first: usize, n: usize) -> Result<()> {
    let mut took = Vec::with_capacity(n);
    let mut not_replicated = 0;
    for i in 0..n {
        let t0 = Instant::now();
        let (_, replicated) = leader.write_reported(user(first + i)).await?;
        took.push(t0.elapsed());
        if replicated == Some(false) {
            not_replicated += 1;
        }
    }
    took.sort();
    println!(
        "{what}: {n} writes, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, answered replicated=false {not_replicated}",
        ms(percentile(&took, 0.5)),
        ms(percentile(&took, 0.99)),
        ms(*took.last().unwrap_or(&Duration::ZERO)),
    );
    Ok(())
}

/// Waits until every member of `leader`'s pair has everything (bounded).
async fn settle(leader: &PairNode) -> Result<()> {
    let t0 = Instant::now();
    loop {
        let st = leader.status().await?;
        if st.members.iter().all(|m| m.lag_entries.unwrap_or(0) == 0) {
            return Ok(());
        }
        if t0.elapsed() > Duration::from_secs(30) {
            bail!("the members did not catch up: {st:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Maintenance on the leader, `n` times, alternating between the two
/// appliances: the time [`PairNode::hand_over`] takes until the other one
/// leads. The leader has led for 3 s each time (a leader younger than
/// openraft's leader lease, 2 s, cannot vote for its successor at once;
/// then the successor is elected when the lease ends).
async fn handovers(a: &Arc<PairNode>, b: &Arc<PairNode>, n: usize) -> Result<()> {
    let mut took = Vec::new();
    let (mut from, mut to) = (a, b);
    for _ in 0..n {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let t0 = Instant::now();
        let outcome = from.hand_over(uagate_pair::HANDOVER_TIMEOUT).await;
        took.push(t0.elapsed());
        if outcome != uagate_pair::Handover::HandedTo(to.local_addr().to_string()) {
            bail!("hand-over: {outcome:?}");
        }
        from.set_maintenance(false).await;
        std::mem::swap(&mut from, &mut to);
    }
    took.sort_unstable();
    println!(
        "pair + witness: maintenance hand-over, {n} times: p50 {:.1} ms, max {:.1} ms",
        ms(percentile(&took, 0.5)),
        ms(*took.last().unwrap_or(&Duration::ZERO)),
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    uagate_bench::init_logging("error");
    let args = Args::parse();
    println!(
        "uagate-bench-pair: {} writes per topology, then {} writes/s for {} s",
        args.writes, args.rate, args.seconds
    );

    // Standalone: a one-member log.
    let a = node("a", false).await?;
    latency("standalone", &a.node, 0, args.writes).await?;

    // Pair only: the primary commits alone, the answer waits up to 1 s for
    // the standby (replicated true|false).
    let b = node("b", false).await?;
    join(&b, &a).await?;
    settle(&a.node).await?;
    latency("pair only", &a.node, 100_000, args.writes).await?;
    settle(&a.node).await?;

    // Steady rate: the standby's lag, sampled on the leader every 20 ms.
    let stop = Instant::now() + Duration::from_secs(args.seconds);
    let period = Duration::from_secs_f64(1.0 / f64::from(args.rate));
    let writer = {
        let leader = a.node.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            let mut i = 200_000;
            while Instant::now() < stop {
                tick.tick().await;
                let _ = leader.write_reported(user(i)).await;
                i += 1;
            }
            i - 200_000
        })
    };
    let mut lag_s = Vec::new();
    let mut lag_n = Vec::new();
    while Instant::now() < stop {
        let st = a.node.status().await?;
        if let Some(m) = st.members.iter().find(|m| m.node_id == b.node.id()) {
            lag_s.push(m.lag_seconds.unwrap_or(0.0));
            lag_n.push(m.lag_entries.unwrap_or(0));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let written = writer.await?;
    lag_s.sort_by(f64::total_cmp);
    lag_n.sort_unstable();
    let pick = |v: &[f64], p: f64| v[((v.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "pair only, {} writes/s for {} s ({written} writes): standby lag p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; entries behind p99 {}, max {}",
        args.rate,
        args.seconds,
        pick(&lag_s, 0.5) * 1e3,
        pick(&lag_s, 0.99) * 1e3,
        lag_s.last().copied().unwrap_or(0.0) * 1e3,
        lag_n[((lag_n.len() - 1) as f64 * 0.99) as usize],
        lag_n.last().copied().unwrap_or(0),
    );

    // Pair + witness: three voters, a write waits for a quorum.
    let w = node("w", true).await?;
    join(&w, &a).await?;
    let t0 = Instant::now();
    loop {
        let st = a.node.status().await?;
        if st.members.len() == 3 && st.members.iter().all(|m| m.voter) {
            break;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            bail!("the witness never became a voter");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    settle(&a.node).await?;
    latency("pair + witness", &a.node, 300_000, args.writes).await?;
    handovers(&a.node, &b.node, args.handovers).await?;

    a.node.stop().await;
    b.node.stop().await;
    w.node.stop().await;
    Ok(())
}
