//! Two appliances on loopback, each with its own store, Raft log and pair
//! certificate: pairing with a one-time code over mutual TLS, the standby
//! catching up from the primary's snapshot and then from its log, and what
//! is refused (wrong or reused code, unknown certificates, administration
//! from another appliance, writes on the standby).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use tempfile::TempDir;
use uagate_pair::node::admin;
use uagate_pair::tls::Identity;
use uagate_pair::wire::{AdminRequest, AdminResponse, Conn, Request, Response};
use uagate_pair::{ApplyResponse, Handover, NodeSettings, PairNode, PairRole, HANDOVER_TIMEOUT};
use uagate_store::{Change, PasswordHash, Proposal, Role, Store};

const HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHQ$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

struct Appliance {
    _dir: TempDir,
    store: Store,
    node: Arc<PairNode>,
    pair_dir: std::path::PathBuf,
}

async fn appliance(name: &str) -> Appliance {
    node(name, false).await
}

async fn witness(name: &str) -> Appliance {
    node(name, true).await
}

async fn node(name: &str, witness: bool) -> Appliance {
    node_at(name, witness, "127.0.0.1:0".parse().unwrap(), None).await
}

async fn node_at(
    name: &str,
    witness: bool,
    listen: std::net::SocketAddr,
    advertise: Option<String>,
) -> Appliance {
    let console = format!("https://{name}.example:8443/");
    node_with(name, witness, listen, advertise, console).await
}

/// A node as [`node_at`] makes it, with this console URL.
async fn node_with(
    name: &str,
    witness: bool,
    listen: std::net::SocketAddr,
    advertise: Option<String>,
    console: String,
) -> Appliance {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("config.db")).await.unwrap();
    let pair_dir = dir.path().join("pair");
    let node = PairNode::start(
        NodeSettings {
            dir: pair_dir.clone(),
            name: name.into(),
            listen,
            advertise,
            application_uri: format!("urn:uagate:{name}"),
            witness,
            console,
        },
        store.clone(),
    )
    .await
    .unwrap();
    Appliance {
        _dir: dir,
        store,
        node,
        pair_dir,
    }
}

fn add_user(name: &str) -> Proposal<Change> {
    Proposal {
        actor: "alice".into(),
        at: "2026-12-02T10:00:00.000Z".into(),
        change: Change::AddUser {
            name: name.into(),
            password_hash: PasswordHash::new(HASH),
            role: Role::Operator,
        },
    }
}

/// A self-signed client certificate (DER) to trust.
fn client_cert() -> Vec<u8> {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["client.example".to_string()]).unwrap();
    params.subject_alt_names.push(rcgen::SanType::URI(
        "urn:example:client".try_into().unwrap(),
    ));
    params.self_signed(&key).unwrap().der().to_vec()
}

async fn users(store: &Store) -> Vec<String> {
    store
        .list_users()
        .await
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}

/// Waits until `store` has user `name`.
async fn wait_user(store: &Store, name: &str) {
    let t0 = Instant::now();
    while !users(store).await.iter().any(|u| u == name) {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "{name} never arrived: {:?}",
            users(store).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The appliance's own CLI asking its running node.
async fn cli(a: &Appliance, request: AdminRequest) -> Result<AdminResponse, String> {
    let id = Identity::load_or_create(&a.pair_dir, "cli").unwrap();
    admin(&id, &a.node.local_addr().to_string(), request)
        .await
        .map_err(|e| e.to_string())
}

async fn invite(a: &Appliance) -> (String, String) {
    match cli(a, AdminRequest::Invite).await.unwrap() {
        AdminResponse::Invite { code, fingerprint } => (code, fingerprint),
        other => panic!("{other:?}"),
    }
}

/// Two appliances, "a" the primary and "b" joined as its standby.
async fn paired() -> (Appliance, Appliance) {
    let a = appliance("a").await;
    let b = appliance("b").await;
    let (code, _) = invite(&a).await;
    join(&b, &a, &code).await.unwrap();
    (a, b)
}

async fn join(b: &Appliance, a: &Appliance, code: &str) -> Result<AdminResponse, String> {
    cli(
        b,
        AdminRequest::Join {
            addr: a.node.local_addr().to_string(),
            code: code.into(),
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_joins_with_a_code_and_follows_the_primary() {
    let a = appliance("a").await;
    let b = appliance("b").await;
    // Both start standalone; A has state from before the pair (a user made
    // through its one-member log) and B has its own.
    assert_eq!(a.node.status().await.unwrap().role, PairRole::Standalone);
    assert!(matches!(
        a.node.write(add_user("anna")).await.unwrap(),
        ApplyResponse::Applied { .. }
    ));
    b.node.write(add_user("bert")).await.unwrap();

    let (code, fingerprint) = invite(&a).await;
    assert_eq!(fingerprint, a.node.fingerprint());
    assert_eq!(code.len(), 24, "{code}");

    // A wrong code: refused, nothing changes on either side.
    let wrong = uagate_pair::pairing::PairingCode::generate().to_string();
    let refused = join(&b, &a, &wrong).await.unwrap_err();
    assert!(refused.contains("wrong, used or expired"), "{refused}");
    assert_eq!(b.node.status().await.unwrap().role, PairRole::Standalone);
    assert_eq!(a.node.status().await.unwrap().members.len(), 1);
    assert_eq!(users(&b.store).await, vec!["bert"]);
    // A malformed one: refused before any connection.
    let malformed = join(&b, &a, "1234").await.unwrap_err();
    assert!(malformed.contains("malformed"), "{malformed}");

    // The right code: B joins and takes A's state (its own user is gone:
    // the pair has one configuration, the primary's).
    match join(&b, &a, &code).await.unwrap() {
        AdminResponse::Joined {
            leader,
            fingerprint,
        } => {
            assert_eq!(leader, a.node.id());
            assert_eq!(
                fingerprint,
                a.node.fingerprint(),
                "the inviter's, as printed by invite"
            );
        }
        other => panic!("{other:?}"),
    }
    wait_user(&b.store, "anna").await;
    assert_eq!(users(&b.store).await, vec!["anna"]);

    // Later changes on A reach B through the log.
    a.node.write(add_user("carl")).await.unwrap();
    wait_user(&b.store, "carl").await;
    let sa = a.node.status().await.unwrap();
    assert_eq!(sa.role, PairRole::Primary);
    assert_eq!(sa.members.len(), 2);
    // Each member is known by its OPC UA application URI (ServerRedundancy).
    let mut uris: Vec<&str> = sa
        .members
        .iter()
        .map(|m| m.application_uri.as_str())
        .collect();
    uris.sort_unstable();
    assert_eq!(uris, ["urn:uagate:a", "urn:uagate:b"]);
    assert!(sa
        .members
        .iter()
        .any(|m| m.node_id == a.node.id() && m.voter));
    assert!(sa
        .members
        .iter()
        .any(|m| m.node_id == b.node.id() && !m.voter));
    // A may append more after `sa` was taken (B's start-up entry with its
    // console URL): compare with A's status of the same moment.
    let t0 = Instant::now();
    let (sa, sb) = loop {
        let sa = a.node.status().await.unwrap();
        let sb = b.node.status().await.unwrap();
        if sb.applied == sa.applied || t0.elapsed() > Duration::from_secs(10) {
            break (sa, sb);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(sb.role, PairRole::Standby, "{sb:?}");
    assert_eq!(
        sb.leader.as_deref(),
        Some(a.node.local_addr().to_string().as_str())
    );
    assert_eq!(sb.applied, sa.applied);
    assert!(sb.line().starts_with(&format!(
        "role=standby leader={} epoch=",
        a.node.local_addr()
    )));

    // Every writer of the store goes through the pair: the console's
    // add_user and trust_add on A reach B; a refusal comes back as the
    // store's own error; on B they are refused, naming the leader.
    a.store
        .add_user("admin", "erik", "a long password 1", Role::Viewer)
        .await
        .unwrap();
    wait_user(&b.store, "erik").await;
    let taken = a
        .store
        .add_user("admin", "erik", "a long password 1", Role::Viewer)
        .await
        .unwrap_err();
    assert!(
        matches!(taken, uagate_store::StoreError::UserExists(ref n) if n == "erik"),
        "{taken:?}"
    );
    let der = client_cert();
    let info = a
        .store
        .trust_add("admin", &der, uagate_store::CertKind::Trusted)
        .await
        .unwrap();
    assert_eq!(info.der, der);
    let t0 = Instant::now();
    while b.store.cert_status(&der).await.unwrap() != Some(uagate_store::CertKind::Trusted) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "trust never reached B"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let on_b = b
        .store
        .add_user("admin", "fred", "a long password 1", Role::Viewer)
        .await
        .unwrap_err();
    // Refused naming the leader: its pair address and its console.
    match &on_b {
        uagate_store::StoreError::NotLeader { leader, console } => {
            assert_eq!(
                leader.as_deref(),
                Some(a.node.local_addr().to_string().as_str())
            );
            assert_eq!(console.as_deref(), Some("https://a.example:8443/"));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        on_b.to_string().contains("console https://a.example:8443/"),
        "{on_b}"
    );
    // Node-local changes stay on their appliance.
    b.store
        .record_event("admin", "event.test", &serde_json::json!({}))
        .await
        .unwrap();

    // A write on the standby is refused, naming the leader.
    let e = b
        .node
        .write(add_user("dora"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not the configuration leader") && e.contains(&a.node.local_addr().to_string()),
        "{e}"
    );

    // Pair only, maintenance on the primary keeps the leadership there
    // (the standby is a learner); a standby has nothing to hand over.
    assert_eq!(
        a.node.hand_over(HANDOVER_TIMEOUT).await,
        Handover::NoOtherVoter
    );
    assert_eq!(a.node.status().await.unwrap().role, PairRole::Primary);
    a.node.set_maintenance(false).await;
    assert_eq!(
        b.node.hand_over(HANDOVER_TIMEOUT).await,
        Handover::NotLeading
    );
    b.node.set_maintenance(false).await;

    // The code was single use: a third appliance cannot reuse it.
    let c = appliance("c").await;
    let reused = join(&c, &a, &code).await.unwrap_err();
    assert!(reused.contains("wrong, used or expired"), "{reused}");
    // And B, already paired, cannot join again.
    let (code2, _) = invite(&a).await;
    let again = join(&b, &a, &code2).await.unwrap_err();
    assert!(again.contains("already paired"), "{again}");

    // `uagate pair leave` on the standby: standalone again with the
    // configuration it had; the primary drops it; they go separate ways.
    assert!(matches!(
        cli(&b, AdminRequest::Leave).await.unwrap(),
        AdminResponse::Left
    ));
    let t0 = Instant::now();
    while a.node.status().await.unwrap().members.len() != 1 {
        assert!(t0.elapsed() < Duration::from_secs(10), "A still lists B");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sb = b.node.status().await.unwrap();
    assert_eq!(sb.role, PairRole::Standalone, "{sb:?}");
    assert_eq!(sa.epoch, sb.epoch);
    assert!(users(&b.store).await.contains(&"erik".to_string()));
    b.node.write(add_user("gina")).await.unwrap();
    a.node.write(add_user("hans")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!users(&b.store).await.contains(&"hans".to_string()));
    assert!(!users(&a.store).await.contains(&"gina".to_string()));
    // Leaving again: not paired.
    let e = cli(&b, AdminRequest::Leave).await.unwrap_err();
    assert!(e.contains("not paired"), "{e}");

    a.node.stop().await;
    b.node.stop().await;
    c.node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_are_refused_on_the_pair_listener() {
    let a = appliance("a").await;
    let stranger = tempfile::tempdir().unwrap();
    let other = Identity::load_or_create(stranger.path(), "stranger").unwrap();
    // Administration with another certificate.
    let e = admin(
        &other,
        &a.node.local_addr().to_string(),
        AdminRequest::Invite,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("another certificate"), "{e}");
    // A Raft message from an unknown certificate (a forged vote).
    // A stranger gets one answer per connection: each request on its own.
    let addr = a.node.local_addr();
    let fresh = || pair_conn(&other, addr);
    let mut conn = fresh().await;
    let vote = openraft::raft::VoteRequest::new(
        openraft::Vote::new(99, 424242),
        Some(openraft::LogId::new(
            openraft::CommittedLeaderId::new(99, 424242),
            1000,
        )),
    );
    conn.send(&Request::Vote {
        rpc: vote,
        mark: Default::default(),
    })
    .await
    .unwrap();
    match conn.recv::<Response>().await.unwrap() {
        Some(Response::Refused(why)) => assert!(why.contains("not a member"), "{why}"),
        other => panic!("{other:?}"),
    }
    // A forged leave for A's own node id: refused.
    let mut conn = fresh().await;
    conn.send(&Request::Leave {
        node_id: a.node.id(),
    })
    .await
    .unwrap();
    match conn.recv::<Response>().await.unwrap() {
        Some(Response::Left(Err(why))) => assert!(why.contains("only a member"), "{why}"),
        other => panic!("{other:?}"),
    }
    // A forged take-over (as if this were A's leader): refused, no
    // election.
    let mut conn = fresh().await;
    conn.send(&Request::TakeOver {
        leader: a.node.id(),
    })
    .await
    .unwrap();
    match conn.recv::<Response>().await.unwrap() {
        Some(Response::TakingOver(Err(why))) => assert!(why.contains("only the leader"), "{why}"),
        other => panic!("{other:?}"),
    }
    // A forged announcement: A's own entry is not re-pointed to another
    // console.
    let mut conn = fresh().await;
    conn.send(&Request::Announce {
        node_id: a.node.id(),
        console: "https://evil.example/".into(),
        application_uri: "urn:evil".into(),
    })
    .await
    .unwrap();
    match conn.recv::<Response>().await.unwrap() {
        Some(Response::Announced(Err(why))) => assert!(why.contains("only a member"), "{why}"),
        other => panic!("{other:?}"),
    }
    // A is unaffected: still the leader of its term, and writes work.
    let st = a.node.status().await.unwrap();
    assert!(
        st.members
            .iter()
            .all(|m| m.console == "https://a.example:8443/" && m.application_uri == "urn:uagate:a"),
        "{:?}",
        st.members
    );
    assert_eq!(st.role, PairRole::Standalone);
    a.node.write(add_user("anna")).await.unwrap();
    a.node.stop().await;
}

/// Waits (bounded) until `f` holds for the status of `a`.
async fn wait_status(a: &Appliance, what: &str, f: impl Fn(&uagate_pair::PairStatus) -> bool) {
    let t0 = Instant::now();
    loop {
        let st = a.node.status().await.unwrap();
        if f(&st) {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "{what}: {st:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_witness_the_pair_elects_its_leader() {
    let a = appliance("a").await;
    let b = appliance("b").await;
    let w = witness("w").await;
    // A witness alone is not a cluster: it waits to be joined.
    let sw = w.node.status().await.unwrap();
    assert_eq!(sw.role, PairRole::Witness);
    assert!(
        sw.line().starts_with("role=witness leader=- "),
        "{}",
        sw.line()
    );
    a.node.write(add_user("anna")).await.unwrap();

    // B joins: the pair without witness (A votes, B learns).
    let (code, _) = invite(&a).await;
    join(&b, &a, &code).await.unwrap();
    wait_user(&b.store, "anna").await;
    // The witness joins like an appliance; then all three vote.
    let (code, _) = invite(&a).await;
    join(&w, &a, &code).await.unwrap();
    wait_status(&a, "three voters", |st| {
        st.members.len() == 3 && st.members.iter().all(|m| m.voter)
    })
    .await;
    wait_user(&w.store, "anna").await;
    let sa = a.node.status().await.unwrap();
    assert_eq!(sa.role, PairRole::Primary);
    assert!(sa
        .members
        .iter()
        .any(|m| m.witness && m.node_id == w.node.id()));
    // A second witness or a third appliance is refused.
    let w2 = witness("w2").await;
    let (code, _) = invite(&a).await;
    let e = join(&w2, &a, &code).await.unwrap_err();
    assert!(e.contains("already has a witness"), "{e}");
    // A third appliance, not paired at all, is told the set is full (not
    // that it is paired).
    let c = appliance("c").await;
    let (code, _) = invite(&a).await;
    let e = join(&c, &a, &code).await.unwrap_err();
    assert!(
        e.contains("the pair is full") && e.contains("at most 2 appliances and one witness"),
        "{e}"
    );
    assert!(!e.contains("already paired"), "{e}");

    // A write is acknowledged by a quorum: every node has it.
    a.node.write(add_user("bert")).await.unwrap();
    wait_user(&b.store, "bert").await;
    wait_user(&w.store, "bert").await;

    // A goes into maintenance: the leadership moves to B first (the
    // witness votes, never leads); back to Running A follows B.
    for n in [&a, &b, &w] {
        wait_status(n, "three voters everywhere", |st| {
            st.members.iter().filter(|m| m.voter).count() == 3
        })
        .await;
    }
    // A standby has nothing to hand over (and stops standing for
    // election until it is back).
    assert_eq!(
        b.node.hand_over(HANDOVER_TIMEOUT).await,
        Handover::NotLeading
    );
    b.node.set_maintenance(false).await;
    let t0 = Instant::now();
    let handed = a.node.hand_over(HANDOVER_TIMEOUT).await;
    let took = t0.elapsed();
    assert_eq!(
        handed,
        Handover::HandedTo(b.node.local_addr().to_string()),
        "A's hand-over after {took:?}"
    );
    // When the hand-over returns, B already leads: not eventually.
    let sb = b.node.status().await.unwrap();
    assert_eq!(sb.role, PairRole::Primary, "{sb:?}");
    wait_status(&w, "the witness follows B", |st| {
        st.role == PairRole::Witness && st.leader == Some(b.node.local_addr().to_string())
    })
    .await;
    b.node.write(add_user("carl")).await.unwrap();
    wait_user(&a.store, "carl").await;
    a.node.set_maintenance(false).await;
    wait_status(&a, "A follows B", |st| st.role == PairRole::Standby).await;

    // The leader goes away: A is elected by itself and takes writes.
    b.node.stop().await;
    wait_status(&a, "A leads again", |st| st.role == PairRole::Primary).await;
    a.node.write(add_user("dora")).await.unwrap();
    wait_user(&w.store, "dora").await;

    a.node.stop().await;
    w.node.stop().await;
    w2.node.stop().await;
    c.node.stop().await;
}

/// A TCP relay in front of one node: what the others dial. It drops
/// connections from blocked source addresses (or all), and cuts the live
/// ones whenever the blocking changes: a network partition.
struct Relay {
    addr: std::net::SocketAddr,
    blocked: Arc<parking_lot::Mutex<(bool, Vec<std::net::IpAddr>)>>,
    cut: tokio::sync::watch::Sender<u64>,
    target: Arc<std::sync::OnceLock<std::net::SocketAddr>>,
}

impl Relay {
    async fn start(ip: &str) -> Relay {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let blocked: Arc<parking_lot::Mutex<(bool, Vec<std::net::IpAddr>)>> = Arc::default();
        let (cut, _) = tokio::sync::watch::channel(0u64);
        let target: Arc<std::sync::OnceLock<std::net::SocketAddr>> = Arc::default();
        let (b, c, t) = (blocked.clone(), cut.clone(), target.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, peer)) = listener.accept().await else {
                    return;
                };
                let refused = {
                    let b = b.lock();
                    b.0 || b.1.contains(&peer.ip())
                };
                let Some(to) = t.get().copied() else { continue };
                if refused {
                    continue;
                }
                let mut cut = c.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Relay {
            addr,
            blocked,
            cut,
            target,
        }
    }

    fn set(&self, all: bool, from: Vec<std::net::IpAddr>) {
        *self.blocked.lock() = (all, from);
        self.cut.send_modify(|n| *n += 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_stops_acknowledging_and_the_others_go_on() {
    let (ra, rb, rw) = (
        Relay::start("127.0.0.21").await,
        Relay::start("127.0.0.22").await,
        Relay::start("127.0.0.23").await,
    );
    let listen = |ip: &str| format!("{ip}:0").parse().unwrap();
    let a = node_at("a", false, listen("127.0.0.11"), Some(ra.addr.to_string())).await;
    let b = node_at("b", false, listen("127.0.0.12"), Some(rb.addr.to_string())).await;
    let w = node_at("w", true, listen("127.0.0.13"), Some(rw.addr.to_string())).await;
    for (r, n) in [(&ra, &a), (&rb, &b), (&rw, &w)] {
        r.target.set(n.node.local_addr()).unwrap();
    }
    a.node.write(add_user("anna")).await.unwrap();
    let (code, _) = invite(&a).await;
    join(&b, &a, &code).await.unwrap();
    let (code, _) = invite(&a).await;
    join(&w, &a, &code).await.unwrap();
    for n in [&a, &b, &w] {
        wait_status(n, "three voters everywhere", |st| {
            st.members.len() == 3 && st.members.iter().all(|m| m.voter)
        })
        .await;
    }
    wait_user(&w.store, "anna").await;
    wait_user(&b.store, "anna").await;

    // A is cut off: nobody reaches it, it reaches nobody.
    let a_ip: std::net::IpAddr = "127.0.0.11".parse().unwrap();
    ra.set(true, Vec::new());
    rb.set(false, vec![a_ip]);
    rw.set(false, vec![a_ip]);
    let lost = {
        let node = a.node.clone();
        tokio::spawn(async move { node.write(add_user("lost")).await })
    };
    // The others elect B (the witness votes) and take writes.
    wait_status(&b, "B leads", |st| st.role == PairRole::Primary).await;
    b.node.write(add_user("bert")).await.unwrap();
    wait_user(&w.store, "bert").await;
    // A's write is not acknowledged, and A says it is cut off.
    let e = lost.await.unwrap().unwrap_err().to_string();
    assert!(e.contains("not acknowledged"), "{e}");
    wait_status(&a, "A cut off", |st| st.quorum_lost).await;
    // A (still the leader of its term) sees the others unreachable.
    wait_status(&a, "A sees B unreachable", |st| {
        st.members
            .iter()
            .any(|m| m.node_id == b.node.id() && m.reachable == Some(false))
    })
    .await;
    assert!(a
        .node
        .status()
        .await
        .unwrap()
        .line()
        .contains("quorum=lost"));
    assert!(!b.node.status().await.unwrap().quorum_lost);

    // Healed: A follows B and ends with the same state; its write that no
    // quorum acknowledged is nowhere.
    ra.set(false, Vec::new());
    rb.set(false, Vec::new());
    rw.set(false, Vec::new());
    wait_status(&a, "A follows B", |st| {
        st.role == PairRole::Standby && st.leader == Some(rb.addr.to_string()) && !st.quorum_lost
    })
    .await;
    wait_user(&a.store, "bert").await;
    for n in [&a, &b, &w] {
        assert_eq!(users(&n.store).await, vec!["anna", "bert"]);
    }
    // B, the leader now, reaches both; what is applied is committed.
    wait_status(&b, "B reaches A and the witness", |st| {
        st.members
            .iter()
            .filter(|m| m.node_id != b.node.id())
            .all(|m| m.reachable == Some(true))
    })
    .await;
    let sb = b.node.status().await.unwrap();
    assert!(sb.committed >= sb.applied && sb.applied > 0, "{sb:?}");
    a.node.stop().await;
    b.node.stop().await;
    w.node.stop().await;
}

/// Issue 18 item 4: an entry forged on the wire — sent by a peer holding
/// the leader's own pair certificate, but not signed with its key — is
/// refused by the follower's state machine, which stops replicating (fail
/// closed) and reports the fault; the leader is unaffected.
/// An AppendEntries in the name of the leader of `ma` (its vote and term)
/// carrying one change at the next index: `proposal`, by `proposer`,
/// signed with `signer`'s key.
fn forged_append(
    ma: &openraft::RaftMetrics<uagate_pair::NodeId, uagate_pair::PeerNode>,
    leader: uagate_pair::NodeId,
    proposal: Proposal<Change>,
    proposer: uagate_pair::NodeId,
    epoch: i64,
    signer: &Identity,
) -> openraft::raft::AppendEntriesRequest<uagate_pair::PairConfig> {
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};
    let last = ma.last_applied.expect("applied");
    let signature = signer
        .sign(&uagate_pair::Signed::signed_bytes(
            &proposal, proposer, epoch,
        ))
        .unwrap();
    let forged = Entry::<uagate_pair::PairConfig> {
        log_id: LogId::new(
            CommittedLeaderId::new(ma.current_term, leader),
            last.index + 1,
        ),
        payload: EntryPayload::Normal(uagate_pair::Signed {
            proposal,
            proposer,
            epoch,
            signature,
        }),
    };
    openraft::raft::AppendEntriesRequest {
        vote: ma.vote,
        prev_log_id: Some(last),
        leader_commit: Some(forged.log_id),
        entries: vec![forged],
    }
}

/// A pair connection to `addr` with `identity`'s certificate (the TLS
/// handshake's error when the listener does not serve it).
async fn try_pair_conn(
    identity: &Identity,
    addr: std::net::SocketAddr,
) -> std::io::Result<Conn<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>> {
    let connector = tokio_rustls::TlsConnector::from(identity.client_config().unwrap());
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let tls = connector
        .connect(
            tokio_rustls::rustls::pki_types::ServerName::try_from("uagate-pair").unwrap(),
            tcp,
        )
        .await?;
    Ok(Conn::new(tls))
}

/// A pair connection to `addr` with `identity`'s certificate.
async fn pair_conn(
    identity: &Identity,
    addr: std::net::SocketAddr,
) -> Conn<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    try_pair_conn(identity, addr).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_entry_on_the_wire_stops_the_follower_not_the_leader() {
    let (a, b) = paired().await;
    a.node.write(add_user("anna")).await.unwrap();
    wait_user(&b.store, "anna").await;
    let ma = a.node.raft_metrics().await;
    let last = ma.last_applied.expect("applied");
    wait_status(&b, "B caught up", |st| st.applied == last.index).await;

    // The forged entry: A's certificate on the wire, a signature by
    // another key.
    let forger = tempfile::tempdir().unwrap();
    let other = Identity::load_or_create(forger.path(), "forger").unwrap();
    let epoch = a.store.epoch().await.unwrap();
    let rpc = forged_append(
        &ma,
        a.node.id(),
        add_user("mallory"),
        a.node.id(),
        epoch,
        &other,
    );
    let as_a = Identity::load_or_create(&a.pair_dir, "a").unwrap();
    let mut conn = pair_conn(&as_a, b.node.local_addr()).await;
    let mark = uagate_pair::wire::EpochMark { epoch, since: 0 };
    conn.send(&Request::Append { rpc, mark }).await.unwrap();
    let _ = conn.recv::<Response>().await;

    // B refuses it, stops and says so; mallory is nowhere.
    wait_status(&b, "B reports the fault", |st| st.integrity_fault.is_some()).await;
    let sb = b.node.status().await.unwrap();
    assert!(sb.line().contains("integrity=fault"), "{}", sb.line());
    assert!(!users(&b.store).await.contains(&"mallory".to_string()));
    // A is unaffected and goes on taking writes.
    let sa = a.node.status().await.unwrap();
    assert!(sa.integrity_fault.is_none(), "{sa:?}");
    a.node.write(add_user("bert")).await.unwrap();
    assert!(users(&a.store).await.contains(&"bert".to_string()));
    assert!(!users(&a.store).await.contains(&"mallory".to_string()));
    a.node.stop().await;
    b.node.stop().await;
}

/// Issue 18 item 4: a byte flipped in a follower's stored log. The stored
/// log is read for entries not applied yet (here: the follower stopped
/// after persisting the last entry and before applying it) and for entries
/// it serves to others; each is checked against its proposer's signature.
/// The tampered entry is refused, the follower stops (fail closed) and
/// reports it; the leader is unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_byte_flipped_in_a_followers_stored_log_is_refused() {
    let (a, b) = paired().await;
    a.node.write(add_user("anna")).await.unwrap();
    a.node.write(add_user("bert")).await.unwrap();
    wait_user(&b.store, "bert").await;
    let last = a.node.raft_metrics().await.last_applied.unwrap();
    wait_status(&b, "B caught up", |st| st.applied == last.index).await;
    let b_addr = b.node.local_addr();
    b.node.stop().await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The byte: "bert" -> "bers" in B's stored entry.
    let opts = |p: std::path::PathBuf| sqlx::sqlite::SqliteConnectOptions::new().filename(p);
    let raft_db = sqlx::SqlitePool::connect_with(opts(b.pair_dir.join("raft.db")))
        .await
        .unwrap();
    let idx = i64::try_from(last.index).unwrap();
    let entry: String = sqlx::query_scalar("SELECT entry FROM raft_log WHERE idx = ?1")
        .bind(idx)
        .fetch_one(&raft_db)
        .await
        .unwrap();
    assert!(entry.contains("\"bert\""), "{entry}");
    let flipped = entry.replacen("\"bert\"", "\"bers\"", 1);
    sqlx::query("UPDATE raft_log SET entry = ?1 WHERE idx = ?2")
        .bind(&flipped)
        .bind(idx)
        .execute(&raft_db)
        .await
        .unwrap();
    raft_db.close().await;
    // Not applied yet: the store's position one entry back.
    let store_db = sqlx::SqlitePool::connect_with(opts(b._dir.path().join("config.db")))
        .await
        .unwrap();
    let pos: String = sqlx::query_scalar("SELECT last_applied FROM replica WHERE id = 1")
        .fetch_one(&store_db)
        .await
        .unwrap();
    let mut pos: serde_json::Value = serde_json::from_str(&pos).unwrap();
    pos["index"] = serde_json::json!(last.index - 1);
    sqlx::query("UPDATE replica SET last_applied = ?1 WHERE id = 1")
        .bind(pos.to_string())
        .execute(&store_db)
        .await
        .unwrap();
    sqlx::query("DELETE FROM users WHERE name = 'bert'")
        .execute(&store_db)
        .await
        .unwrap();
    store_db.close().await;

    // B starts again where it was: it refuses the entry and says so.
    let store = Store::open(&b._dir.path().join("config.db")).await.unwrap();
    let node = PairNode::start(
        NodeSettings {
            dir: b.pair_dir.clone(),
            name: "b".into(),
            listen: b_addr,
            advertise: None,
            application_uri: "urn:uagate:b".into(),
            witness: false,
            console: String::new(),
        },
        store.clone(),
    )
    .await
    .unwrap();
    let t0 = Instant::now();
    let st = loop {
        let st = node.status().await.unwrap();
        if st.integrity_fault.is_some() {
            break st;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "no fault: {st:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(st.line().contains("integrity=fault"), "{}", st.line());
    let users_b = users(&store).await;
    assert!(!users_b.contains(&"bers".to_string()), "{users_b:?}");
    assert!(!users_b.contains(&"bert".to_string()), "{users_b:?}");
    // A is unaffected.
    assert!(a.node.status().await.unwrap().integrity_fault.is_none());
    a.node.write(add_user("carl")).await.unwrap();
    a.node.stop().await;
    node.stop().await;
}

/// A PairNode for an appliance's existing directory (a restart), on
/// `listen`, known by `console` and `application_uri` this time.
async fn restart(
    a: &Appliance,
    listen: std::net::SocketAddr,
    console: &str,
    uri: &str,
) -> Arc<PairNode> {
    a.node.stop().await;
    let store = Store::open(&a._dir.path().join("config.db")).await.unwrap();
    PairNode::start(
        NodeSettings {
            dir: a.pair_dir.clone(),
            name: "restarted".into(),
            listen,
            advertise: None,
            application_uri: uri.into(),
            witness: false,
            console: console.into(),
        },
        store,
    )
    .await
    .unwrap()
}

/// Waits until `node`'s view of the membership has member `id` with this
/// console URL and application URI.
async fn wait_member(node: &PairNode, id: u64, console: &str, uri: &str) {
    let t0 = Instant::now();
    loop {
        let s = node.status().await.unwrap();
        if s.members
            .iter()
            .any(|m| m.node_id == id && m.console == console && m.application_uri == uri)
        {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "member {id} never became {console} {uri}: {:?}",
            s.members
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An appliance restarted with another console port and application URI
/// (both settings need a restart) is known by the new ones to the other:
/// the standby tells the primary, the primary updates its own entry; the
/// pair keeps replicating.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_restarted_with_a_new_console_url_is_known_by_it() {
    let (a, b) = paired().await;
    let (a_id, b_id) = (a.node.id(), b.node.id());
    wait_member(&a.node, b_id, "https://b.example:8443/", "urn:uagate:b").await;

    // The standby comes back with another console port and URI.
    let b2 = restart(
        &b,
        b.node.local_addr(),
        "https://b.example:9443/",
        "urn:uagate:b2",
    )
    .await;
    wait_member(&a.node, b_id, "https://b.example:9443/", "urn:uagate:b2").await;
    wait_member(&b2, b_id, "https://b.example:9443/", "urn:uagate:b2").await;

    // The primary too: it updates its own entry, and the standby sees it.
    let a2 = restart(
        &a,
        a.node.local_addr(),
        "https://a.example:9443/",
        "urn:uagate:a",
    )
    .await;
    wait_member(&b2, a_id, "https://a.example:9443/", "urn:uagate:a").await;

    // Still one pair: a change on the primary reaches the standby.
    a2.write(add_user("dora")).await.unwrap();
    wait_user(&b.store, "dora").await;
    a2.stop().await;
    b2.stop().await;
}

/// Two appliances and a witness, all three voting on every member.
async fn with_a_witness() -> (Appliance, Appliance, Appliance) {
    let (a, b) = paired().await;
    let w = witness("w").await;
    let (code, _) = invite(&a).await;
    join(&w, &a, &code).await.unwrap();
    for n in [&a, &b, &w] {
        wait_status(n, "three voters everywhere", |st| {
            st.members.len() == 3 && st.members.iter().all(|m| m.voter)
        })
        .await;
    }
    (a, b, w)
}

/// The node ids of the members of `st` that vote.
fn voters(st: &uagate_pair::PairStatus) -> Vec<u64> {
    st.members
        .iter()
        .filter(|m| m.voter)
        .map(|m| m.node_id)
        .collect()
}

/// `uagate pair leave` on a standby that votes (a set with a witness):
/// the primary drops it and votes alone, the witness stays (a new standby
/// makes three voters again), the standby is standalone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voting_standby_leaves_a_set_with_a_witness() {
    let (a, b, w) = with_a_witness().await;
    let (a_id, b_id, w_id) = (a.node.id(), b.node.id(), w.node.id());
    assert!(matches!(
        cli(&b, AdminRequest::Leave).await.unwrap(),
        AdminResponse::Left
    ));
    wait_status(&a, "A drops B and votes alone; the witness stays", |st| {
        st.members.len() == 2
            && st.members.iter().all(|m| m.node_id != b_id)
            && voters(st) == [a_id]
    })
    .await;
    let sb = b.node.status().await.unwrap();
    assert_eq!(sb.role, PairRole::Standalone, "{sb:?}");
    // A takes changes and the witness still follows; B's stay its own.
    a.node.write(add_user("erik")).await.unwrap();
    wait_user(&w.store, "erik").await;
    b.node.write(add_user("gina")).await.unwrap();
    assert!(!users(&b.store).await.contains(&"erik".to_string()));
    // A new standby joins the primary and the witness: three voters again.
    let c = appliance("c").await;
    let (code, _) = invite(&a).await;
    join(&c, &a, &code).await.unwrap();
    let c_id = c.node.id();
    wait_status(&a, "A, the witness and C vote", |st| {
        let mut v = voters(st);
        v.sort_unstable();
        let mut want = vec![a_id, w_id, c_id];
        want.sort_unstable();
        v == want
    })
    .await;
    wait_user(&c.store, "erik").await;
    for n in [a, b, c, w] {
        n.node.stop().await;
    }
}

/// `uagate pair leave` on the primary of a set with a witness drops the
/// other appliance (a voter) and keeps the witness; the dropped standby's
/// own leave is then answered done; with only the witness left, leave on
/// the primary drops the witness and the primary is standalone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primary_drops_a_voting_standby_and_then_the_witness() {
    let (a, b, w) = with_a_witness().await;
    let (a_id, b_id, w_id) = (a.node.id(), b.node.id(), w.node.id());
    let left = cli(&a, AdminRequest::Leave).await;
    assert!(matches!(left, Ok(AdminResponse::Left)), "{left:?}");
    wait_status(&a, "A votes alone, beside the witness", |st| {
        let mut ids: Vec<u64> = st.members.iter().map(|m| m.node_id).collect();
        ids.sort_unstable();
        let mut want = vec![a_id, w_id];
        want.sort_unstable();
        ids == want && voters(st) == [a_id] && st.role == PairRole::Primary
    })
    .await;
    a.node.write(add_user("erik")).await.unwrap();
    wait_user(&w.store, "erik").await;
    // B, dropped, leaves too: the primary has nothing more to drop.
    let left = cli(&b, AdminRequest::Leave).await;
    assert!(matches!(left, Ok(AdminResponse::Left)), "{left:?}");
    assert_eq!(b.node.status().await.unwrap().role, PairRole::Standalone);
    assert!(!users(&b.store).await.contains(&"erik".to_string()));
    // Only the witness is left: leave on A drops it; A is standalone.
    let left = cli(&a, AdminRequest::Leave).await;
    assert!(matches!(left, Ok(AdminResponse::Left)), "{left:?}");
    wait_status(&a, "A standalone", |st| {
        st.role == PairRole::Standalone && st.members.len() == 1
    })
    .await;
    let left = cli(&w, AdminRequest::Leave).await;
    assert!(matches!(left, Ok(AdminResponse::Left)), "{left:?}");
    let e = cli(&a, AdminRequest::Leave).await.unwrap_err();
    assert!(e.contains("not paired"), "{e}");
    assert!(w
        .node
        .status()
        .await
        .unwrap()
        .members
        .iter()
        .all(|m| m.node_id != b_id));
    for n in [a, b, w] {
        n.node.stop().await;
    }
}

/// A standby that leaves while the primary does not answer leaves anyway
/// and says the primary was not told (the CLI tells the operator to run
/// `pair leave` there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_leaving_an_unreachable_primary_says_it_was_not_told() {
    let (a, b) = paired().await;
    let a_addr = a.node.local_addr().to_string();
    wait_status(&b, "B follows A", |st| {
        st.members.len() == 2 && st.leader.as_deref() == Some(a_addr.as_str())
    })
    .await;
    a.node.stop().await;
    match cli(&b, AdminRequest::Leave).await {
        Ok(AdminResponse::LeftUntold {
            primary: Some(primary),
            reason,
        }) => {
            assert_eq!(primary, a_addr);
            assert!(!reason.is_empty());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(b.node.status().await.unwrap().role, PairRole::Standalone);
    b.node.stop().await;
}

/// A member that refuses the primary's messages (it left without the
/// primary being told; here a listener with its certificate that refuses
/// like a former member does) is not called in a loop, also after the
/// primary restarts: the primary waits longer after every refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_refuses_is_not_called_in_a_loop() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let (a, b) = paired().await;
    a.node.write(add_user("anna")).await.unwrap();
    wait_user(&b.store, "anna").await;
    let b_addr = b.node.local_addr();
    let identity = Identity::load_or_create(&b.pair_dir, "b").unwrap();
    b.node.stop().await;
    let t0 = Instant::now();
    let listener = loop {
        match tokio::net::TcpListener::bind(b_addr).await {
            Ok(l) => break l,
            Err(e) => {
                assert!(t0.elapsed() < Duration::from_secs(10), "{b_addr}: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(identity.server_config().unwrap());
    let calls = Arc::new(AtomicU64::new(0));
    let counted = calls.clone();
    let server = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, counted) = (acceptor.clone(), counted.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut conn = Conn::new(tls);
                while let Ok(Some(_)) = conn.recv::<Request>().await {
                    counted.fetch_add(1, Ordering::SeqCst);
                    let no =
                        Response::Refused("this certificate is not a member of the pair".into());
                    if conn.send(&no).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    // The primary restarts (it sends B its log again) and makes a change
    // B does not have: it keeps trying to send them.
    let a2 = restart(
        &a,
        a.node.local_addr(),
        "https://a.example:8443/",
        "urn:uagate:a",
    )
    .await;
    a2.write(add_user("bert")).await.unwrap();
    let before = calls.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let n = calls.load(Ordering::SeqCst) - before;
    assert!(n <= 12, "{n} messages in 4 s to a member that refuses them");
    // The primary itself is unaffected.
    a2.write(add_user("carl")).await.unwrap();
    server.abort();
    a2.stop().await;
}

/// A free port on 127.0.0.1 (bound, read, released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Appliances whose pair listener is on every address and that have no
/// public_host (the appliance image's default) name themselves 0.0.0.0;
/// the other member would dial 0.0.0.0, which is itself. The pair knows
/// each by the address the other reached it at instead: the joiner by the
/// address its connection came from, the primary by the one the joiner
/// dialled; console URLs likewise. (Simulated on 127.0.0.1: the nodes
/// listen there and advertise 0.0.0.0, as a wildcard listener would.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appliances_listening_on_every_address_are_known_by_the_address_they_were_reached_at() {
    let start = |name: &'static str, port: u16| {
        node_with(
            name,
            false,
            format!("127.0.0.1:{port}").parse().unwrap(),
            Some(format!("0.0.0.0:{port}")),
            "https://0.0.0.0:8443/".into(),
        )
    };
    let (pa, pb) = (free_port(), free_port());
    let a = start("a", pa).await;
    let b = start("b", pb).await;
    let (code, _) = invite(&a).await;
    join(&b, &a, &code).await.unwrap();
    let (a_id, b_id) = (a.node.id(), b.node.id());
    let t0 = Instant::now();
    loop {
        let members = b.node.status().await.unwrap().members;
        let addr = |id: u64| {
            members
                .iter()
                .find(|m| m.node_id == id)
                .map(|m| (m.addr.clone(), m.console.clone()))
        };
        let want_a = Some((
            format!("127.0.0.1:{pa}"),
            "https://127.0.0.1:8443/".to_string(),
        ));
        let want_b = Some((
            format!("127.0.0.1:{pb}"),
            "https://127.0.0.1:8443/".to_string(),
        ));
        if addr(a_id) == want_a && addr(b_id) == want_b {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "members never named by the addresses they were reached at: {members:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    a.node.write(add_user("erik")).await.unwrap();
    wait_user(&b.store, "erik").await;
    a.node.stop().await;
    b.node.stop().await;
}

/// Promotes B (the standby of `paired`) while the step-down of A, the old
/// primary, cannot drop its Raft log (its snapshot directory replaced by a
/// file). Returns once A has taken the new epoch and owes the drop; the
/// sabotage is still in place.
async fn promotion_with_a_failing_step_down(a: &Appliance, b: &Appliance) -> String {
    a.node.write(add_user("anna")).await.unwrap();
    wait_user(&b.store, "anna").await;
    let snaps = a.pair_dir.join(uagate_pair::node::SNAPSHOT_DIR);
    let _ = std::fs::remove_dir_all(&snaps);
    std::fs::write(&snaps, b"not a directory").unwrap();
    let mark = b.node.promote(true).await.unwrap();
    wait_status(b, "B leads", |s| s.role == PairRole::Primary).await;
    let leader = b.node.status().await.unwrap().leader.unwrap();
    b.node.write(add_user("bert")).await.unwrap();
    // A took the new epoch and owes the drop of its old log.
    let file = a.pair_dir.join(uagate_pair::node::NODE_FILE);
    let t0 = Instant::now();
    loop {
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        if json["mark"]["epoch"] == mark.epoch && json["reset_owed"] == true {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "A never took epoch {}: {json}",
            mark.epoch
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Meanwhile A refuses the new leader's log: its old log does not run
    // in the new epoch, and B's change does not reach it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!users(&a.store).await.contains(&"bert".to_string()));
    // And says so: no longer the primary, no leader known, and why.
    let st = a.node.status().await.unwrap();
    assert_eq!(st.role, PairRole::Standby, "{st:?}");
    assert_eq!(st.leader, None, "{st:?}");
    let why = st.stepping_down.clone().unwrap_or_default();
    assert!(
        why.starts_with(&format!("to epoch {}: ", mark.epoch)),
        "{st:?}"
    );
    assert!(st.line().ends_with("step_down=failing"), "{}", st.line());
    leader
}

/// Ends the sabotage of [`promotion_with_a_failing_step_down`].
fn unblock(a: &Appliance) {
    std::fs::remove_file(a.pair_dir.join(uagate_pair::node::SNAPSHOT_DIR)).unwrap();
}

/// A step-down that fails after taking the new epoch is tried again until
/// the old log is dropped; then the old primary follows the promoted one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_step_down_is_retried_until_the_old_log_is_dropped() {
    let (a, b) = paired().await;
    let leader = promotion_with_a_failing_step_down(&a, &b).await;
    unblock(&a);
    wait_status(&a, "A follows B", |s| {
        s.role == PairRole::Standby && s.leader.as_deref() == Some(leader.as_str())
    })
    .await;
    wait_user(&a.store, "bert").await;
    b.node.write(add_user("carl")).await.unwrap();
    wait_user(&a.store, "carl").await;
    let json: serde_json::Value = serde_json::from_slice(
        &std::fs::read(a.pair_dir.join(uagate_pair::node::NODE_FILE)).unwrap(),
    )
    .unwrap();
    assert_eq!(json["reset_owed"], false, "{json}");
    let st = a.node.status().await.unwrap();
    assert_eq!(st.stepping_down, None, "{st:?}");
    assert!(st.line().ends_with("step_down=ok"), "{}", st.line());
}

/// An appliance stopped while it owes the drop of its old log drops it at
/// the next start, before openraft runs it, and follows the new leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_finishes_a_step_down_the_last_run_did_not() {
    let (a, b) = paired().await;
    let leader = promotion_with_a_failing_step_down(&a, &b).await;
    // Stopped while it owes the drop; the cause is gone by the next start,
    // where B reaches it (the same address).
    let addr = a.node.local_addr();
    a.node.stop().await;
    unblock(&a);
    let node = restart(&a, addr, "https://a.example:8443/", "urn:uagate:a").await;
    let t0 = Instant::now();
    loop {
        let st = node.status().await.unwrap();
        if st.role == PairRole::Standby && st.leader.as_deref() == Some(leader.as_str()) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "A never followed B: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_user(&a.store, "bert").await;
    node.stop().await;
}

/// A certificate the standby refused while the primary was down is listed
/// on the primary once it is back (the report waits and is sent again),
/// so the operator can approve it where approvals are made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_refused_while_the_primary_is_down_is_listed_there_later() {
    let (a, b) = paired().await;
    a.node.write(add_user("anna")).await.unwrap();
    wait_user(&b.store, "anna").await;
    let addr = a.node.local_addr();
    a.node.stop().await;
    let cert = client_cert();
    b.store.record_rejected(&cert).await.unwrap();
    // Longer than a report takes to fail while A is down.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let a2 = restart(&a, addr, "https://a.example:8443/", "urn:uagate:a").await;
    let listed = wait_rejected(&a.store, &cert).await;
    // A says that B refused it, not A itself.
    assert!(!listed.refused_here, "{listed:?}");
    assert_eq!(
        listed.refused_by.as_deref(),
        Some(b.node.local_addr().to_string().as_str())
    );
    // B no longer keeps it as waiting.
    wait_none_unreported(&b.store).await;
    a2.stop().await;
}

/// Waits until `store` lists `cert` as rejected (the other appliance's
/// report arrived) and returns how it is listed.
async fn wait_rejected(store: &Store, cert: &[u8]) -> uagate_store::CertInfo {
    let t0 = Instant::now();
    loop {
        let listed = store
            .certs(uagate_store::CertKind::Rejected)
            .await
            .unwrap()
            .into_iter()
            .find(|c| c.der == cert);
        if let Some(listed) = listed {
            return listed;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the certificate the other appliance refused never reached this rejected list"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `store` has no refused certificate waiting to be reported.
async fn wait_none_unreported(store: &Store) {
    let t0 = Instant::now();
    while !store.rejected_unreported(64).await.unwrap().is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "a reported certificate is still marked as waiting"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A standby that restarts while its report waits (the primary down)
/// still sends it once the primary is back: the wait is kept in its store,
/// not only in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_certificate_is_reported_after_the_standby_restarts() {
    let (a, b) = paired().await;
    a.node.write(add_user("anna")).await.unwrap();
    wait_user(&b.store, "anna").await;
    let a_addr = a.node.local_addr();
    let b_addr = b.node.local_addr();
    a.node.stop().await;
    let cert = client_cert();
    b.store.record_rejected(&cert).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let b2 = restart(&b, b_addr, "https://b.example:8443/", "urn:uagate:b").await;
    let a2 = restart(&a, a_addr, "https://a.example:8443/", "urn:uagate:a").await;
    let listed = wait_rejected(&a.store, &cert).await;
    assert_eq!(listed.refused_by, Some(b_addr.to_string()));
    wait_none_unreported(&b.store).await;
    a2.stop().await;
    b2.stop().await;
}

/// A member speaks for itself only: the witness, with its own valid
/// certificate and key, sends the standby an Append in the leader's name
/// carrying a change it signed. The standby refuses it (the message is not
/// from the leader, and a witness proposes nothing); before, the change was
/// applied on the standby.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_witness_cannot_pass_entries_off_as_the_leaders() {
    let a = appliance("a").await;
    let b = appliance("b").await;
    let w = witness("w").await;
    let (code, _) = invite(&a).await;
    join(&b, &a, &code).await.unwrap();
    let (code, _) = invite(&a).await;
    join(&w, &a, &code).await.unwrap();
    wait_status(&a, "three voters", |st| {
        st.members.len() == 3 && st.members.iter().all(|m| m.voter)
    })
    .await;
    a.node.write(add_user("anna")).await.unwrap();
    wait_user(&b.store, "anna").await;
    let caught_up = |ma: &openraft::RaftMetrics<_, _>| ma.last_applied.expect("applied").index;
    let ma = a.node.raft_metrics().await;
    wait_status(&b, "B caught up", |st| st.applied == caught_up(&ma)).await;

    // Signed by the witness with its own key, as its own proposal, on the
    // witness's own certificate.
    let as_w = Identity::load_or_create(&w.pair_dir, "w").unwrap();
    let epoch = a.store.epoch().await.unwrap();
    let mark = uagate_pair::wire::EpochMark { epoch, since: 0 };
    let rpc = forged_append(
        &ma,
        a.node.id(),
        add_user("mallory"),
        w.node.id(),
        epoch,
        &as_w,
    );
    let mut conn = pair_conn(&as_w, b.node.local_addr()).await;
    conn.send(&Request::Append { rpc, mark }).await.unwrap();
    let answer = conn.recv::<Response>().await;
    assert!(
        matches!(answer, Ok(Some(Response::Refused(_)))),
        "the witness's Append in the leader's name was taken: {answer:?}"
    );
    // The leader's next change arrives; mallory never does.
    a.node.write(add_user("bert")).await.unwrap();
    wait_user(&b.store, "bert").await;
    assert!(!users(&b.store).await.contains(&"mallory".to_string()));
    assert!(b.node.status().await.unwrap().integrity_fault.is_none());

    // In the leader's own message (its certificate on the wire), an entry
    // proposed and signed by the witness is no leader's change either: the
    // standby stops on it (fail closed) instead of applying it.
    let ma = a.node.raft_metrics().await;
    wait_status(&b, "B caught up", |st| st.applied == caught_up(&ma)).await;
    let rpc = forged_append(
        &ma,
        a.node.id(),
        add_user("mallory"),
        w.node.id(),
        epoch,
        &as_w,
    );
    let as_a = Identity::load_or_create(&a.pair_dir, "a").unwrap();
    let mut conn = pair_conn(&as_a, b.node.local_addr()).await;
    conn.send(&Request::Append { rpc, mark }).await.unwrap();
    let _ = conn.recv::<Response>().await;
    wait_status(&b, "B reports the fault", |st| st.integrity_fault.is_some()).await;
    assert!(!users(&b.store).await.contains(&"mallory".to_string()));
    a.node.stop().await;
    b.node.stop().await;
    w.node.stop().await;
}

/// Anyone can finish a TLS handshake with the pair listener (joiners are
/// strangers), so it bounds what strangers hold: a connection that sends
/// no request is closed after a few seconds, and at most 64 are served at
/// once (before, idle connections stayed open for good, without limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_strangers_cannot_hold_the_pair_listener() {
    let a = appliance("a").await;
    let stranger = tempfile::tempdir().unwrap();
    let other = Identity::load_or_create(stranger.path(), "stranger").unwrap();
    let addr = a.node.local_addr();
    let mut held = Vec::new();
    for _ in 0..64 {
        held.push(pair_conn(&other, addr).await);
    }
    // The 65th is closed at once: its TLS handshake does not complete, or
    // the connection ends before any answer.
    let refused = tokio::time::timeout(Duration::from_secs(3), async {
        match try_pair_conn(&other, addr).await {
            Err(_) => true,
            Ok(mut c) => matches!(c.recv::<Response>().await, Ok(None) | Err(_)),
        }
    })
    .await;
    assert_eq!(refused, Ok(true), "a 65th connection was served");
    // The idle ones are closed within seconds.
    let t0 = Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(12), async {
        for c in &mut held {
            let _ = c.recv::<Response>().await;
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "idle connections still open after {:?}",
        t0.elapsed()
    );
    // Then the listener serves again: the CLI asks and is answered.
    cli(&a, AdminRequest::Invite).await.unwrap();
    a.node.stop().await;
}

/// A member's snapshot chunk far beyond any snapshot (offset 2^40) is
/// refused: openraft would grow its buffer to that offset, and the failed
/// allocation aborted the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_chunk_beyond_any_snapshot_is_refused() {
    let (a, b) = paired().await;
    a.node.write(add_user("anna")).await.unwrap();
    wait_user(&b.store, "anna").await;
    let ma = a.node.raft_metrics().await;
    let epoch = a.store.epoch().await.unwrap();
    let rpc = openraft::raft::InstallSnapshotRequest::<uagate_pair::PairConfig> {
        vote: ma.vote,
        meta: openraft::SnapshotMeta {
            last_log_id: ma.last_applied,
            last_membership: Default::default(),
            snapshot_id: "huge".into(),
        },
        offset: 1 << 40,
        data: vec![0],
        done: false,
    };
    let as_a = Identity::load_or_create(&a.pair_dir, "a").unwrap();
    let mut conn = pair_conn(&as_a, b.node.local_addr()).await;
    let mark = uagate_pair::wire::EpochMark { epoch, since: 0 };
    conn.send(&Request::Snapshot { rpc, mark }).await.unwrap();
    let answer = conn.recv::<Response>().await;
    assert!(
        matches!(answer, Ok(Some(Response::Refused(_)))),
        "{answer:?}"
    );
    // B lives on and follows A.
    a.node.write(add_user("bert")).await.unwrap();
    wait_user(&b.store, "bert").await;
    a.node.stop().await;
    b.node.stop().await;
}
