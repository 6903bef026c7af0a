//! The appliance pair as processes: two `uagate run` and a `uagate
//! witness` on loopback, paired with the CLI, then a leader killed with
//! SIGKILL in the middle of a burst of writes (issue 18, proof of the
//! pair + witness topology).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// `uagate witness` on `data`; its pair address.
fn run_witness(data: &std::path::Path) -> (KillOnDrop, String) {
    let mut child = KillOnDrop(
        uagate(data)
            .args(["witness", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let out = lines(child.0.stdout.take().unwrap());
    let pair = wait_for_line(&out, "PAIR ", Duration::from_secs(60));
    let addr = pair.split_whitespace().nth(1).unwrap().to_string();
    (child, addr)
}

/// `uagate pair status` on `data`.
fn status(data: &std::path::Path) -> String {
    let out = uagate(data).args(["pair", "status"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits (bounded) until the status line of `data` contains every word.
fn wait_status(data: &std::path::Path, words: &[&str], limit: Duration) -> String {
    let t0 = Instant::now();
    loop {
        let st = status(data);
        if words.iter().all(|w| st.contains(w)) {
            return st;
        }
        assert!(t0.elapsed() < limit, "status never had {words:?}: {st}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Joins `joiner` to the appliance `leader` (reached at `leader_pair`).
fn join(joiner: &std::path::Path, leader: &std::path::Path, leader_pair: &str) {
    let invite = ok(uagate(leader).args(["pair", "invite"]).output().unwrap());
    let code = invite.split_whitespace().nth(2).unwrap().to_string();
    let joined = ok(uagate(joiner)
        .args(["pair", "join", leader_pair, &code])
        .output()
        .unwrap());
    assert!(joined.starts_with("JOINED"), "{joined}");
}

/// The users `uagate user list` shows on `data`.
fn users(data: &std::path::Path) -> Vec<String> {
    ok(uagate(data).args(["user", "list"]).output().unwrap())
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Pair + witness: every write acknowledged before the leader was killed
/// (SIGKILL, mid-burst) is on both survivors, once; the other appliance is
/// elected by itself and takes writes.
#[test]
fn kill_9_of_the_leader_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, w) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("w"),
    );
    let (mut ga, a_pair) = run_gateway(&a, &dir.path().join("a.toml"));
    let (_gb, b_pair) = run_gateway(&b, &dir.path().join("b.toml"));
    let (_gw, _w_pair) = run_witness(&w);
    assert!(
        status(&w).starts_with("role=witness leader=- "),
        "{}",
        status(&w)
    );

    join(&b, &a, &a_pair);
    join(&w, &a, &a_pair);
    wait_status(
        &a,
        &["role=primary", "members=3", "voters=3"],
        Duration::from_secs(30),
    );
    wait_status(&b, &["role=standby", "voters=3"], Duration::from_secs(15));
    wait_status(&w, &["voters=3"], Duration::from_secs(15));
    wait_status(
        &w,
        &["role=witness", &format!("leader={a_pair}")],
        Duration::from_secs(15),
    );

    // A burst of writes on A; A is killed after the fifth acknowledged one.
    let mut acknowledged = Vec::new();
    let mut refused = 0;
    for i in 0..40 {
        let name = format!("user{i:02}");
        let out = user_add(&a, &name, "viewer");
        if out.status.success() {
            acknowledged.push(name);
        } else {
            // A dead gateway: the CLI must not write beside the pair's log.
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("paired and its gateway is not running"),
                "{err}"
            );
            refused += 1;
        }
        if acknowledged.len() == 5 && ga.0.id() > 0 {
            ga.0.kill().unwrap(); // SIGKILL
            ga.0.wait().unwrap();
        }
        if refused >= 3 {
            break;
        }
    }
    assert!(acknowledged.len() >= 5, "{acknowledged:?}");

    // B is elected by itself (the witness votes, never leads).
    let sb = wait_status(
        &b,
        &["role=primary", &format!("leader={b_pair}")],
        Duration::from_secs(30),
    );
    assert!(sb.contains("voters=3"), "{sb}");
    wait_status(&w, &[&format!("leader={b_pair}")], Duration::from_secs(15));
    for data in [&b, &w] {
        let t0 = Instant::now();
        loop {
            let have = users(data);
            let missing: Vec<&String> = acknowledged.iter().filter(|u| !have.contains(u)).collect();
            let mut unique = have.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(unique.len(), have.len(), "a user twice: {have:?}");
            if missing.is_empty() {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(15),
                "acknowledged writes missing on {}: {missing:?}",
                data.display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // The new leader takes writes; the witness gets them.
    ok(user_add(&b, "after", "viewer"));
    let t0 = Instant::now();
    while !users(&w).contains(&"after".to_string()) {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "the write on B never reached the witness"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `diverged=N` of a status line.
fn diverged_count(st: &str) -> usize {
    st.split_whitespace()
        .find_map(|w| w.strip_prefix("diverged="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX)
}

/// Pair only: the primary makes a change the standby never gets and is
/// killed; the standby is force-promoted (a new epoch) and takes writes;
/// the old primary comes back, sees the higher epoch, steps down, keeps
/// its unreplicated change in the diverged list and ends with the new
/// leader's state.
#[test]
fn a_forced_promotion_and_the_old_primary_stepping_down() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    // Fixed pair ports: a restarted appliance is reached where it was.
    let conf =
        |port: u16| format!("[listen]\nopc_tcp = \"127.0.0.1:0\"\npair = \"127.0.0.1:{port}\"\n");
    let (ga, a_pair) = run_gateway_with(&a, &dir.path().join("a.toml"), &conf(free_port()));
    let (gb, b_pair) = run_gateway_with(&b, &dir.path().join("b.toml"), &conf(free_port()));
    join(&b, &a, &a_pair);
    ok(user_add(&a, "anna", "operator"));
    let t0 = Instant::now();
    while !users(&b).contains(&"anna".to_string()) {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "anna never reached B"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Without --force: refused, nothing changes.
    let out = uagate(&b).args(["pair", "promote"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));

    // B is down while A makes a change (A, the only voter, commits it).
    drop(gb);
    ok(user_add(&a, "zed", "viewer"));
    drop(ga); // SIGKILL

    // B comes back alone and is promoted.
    let (_gb, _) = start_gateway(&b);
    let st = status(&b);
    assert!(st.starts_with("role=standby"), "{st}");
    let epoch = |st: &str| -> i64 {
        st.split_whitespace()
            .find_map(|w| w.strip_prefix("epoch="))
            .unwrap()
            .parse()
            .unwrap()
    };
    let before = epoch(&st);
    let promoted = ok(uagate(&b)
        .args(["pair", "promote", "--force"])
        .output()
        .unwrap());
    assert_eq!(promoted.trim(), format!("PROMOTED epoch={}", before + 1));
    let sb = wait_status(
        &b,
        &["role=primary", &format!("leader={b_pair}")],
        Duration::from_secs(15),
    );
    assert_eq!(epoch(&sb), before + 1, "{sb}");
    ok(user_add(&b, "bert", "viewer"));

    // The old primary returns: it steps down, keeps "zed" as diverged and
    // takes B's state.
    let (_ga, _) = start_gateway(&a);
    let sa = wait_status(
        &a,
        &[
            "role=standby",
            &format!("leader={b_pair}"),
            &format!("epoch={}", before + 1),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(diverged_count(&sa), 1, "{sa}");
    let t0 = Instant::now();
    loop {
        let (ua, ub) = (users(&a), users(&b));
        if ua == ub && ua.contains(&"bert".to_string()) {
            assert!(!ua.contains(&"zed".to_string()), "{ua:?}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "A {ua:?} vs B {ub:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Both members are listed on B, A as the standby; writes on A are
    // refused naming B.
    let sb = status(&b);
    assert!(sb.contains("members=2"), "{sb}");
    let out = user_add(&a, "late", "viewer");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(&b_pair));

    // The operator reviews A's diverged change and clears it.
    let listed = ok(uagate(&a).args(["pair", "diverged"]).output().unwrap());
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert!(listed.contains("kind=user.add"), "{listed}");
    assert!(listed.contains("zed"), "{listed}");
    let cleared = ok(uagate(&a)
        .args(["pair", "diverged", "--clear"])
        .output()
        .unwrap());
    assert!(cleared.trim_end().ends_with("CLEARED 1"), "{cleared}");
    assert_eq!(diverged_count(&status(&a)), 0);
    assert_eq!(
        ok(uagate(&a).args(["pair", "diverged"]).output().unwrap()),
        ""
    );
}

/// A TCP relay in front of one member (what the others dial: its
/// advertised address), on its own thread. It drops connections from
/// blocked source addresses (or all) and cuts the live ones whenever the
/// blocking changes: a network partition between processes.
struct Relay {
    state: std::sync::Arc<std::sync::Mutex<RelayState>>,
}

#[derive(Default)]
struct RelayState {
    all: bool,
    blocked: Vec<std::net::IpAddr>,
    live: Vec<std::net::TcpStream>,
}

impl Relay {
    fn start(listen: std::net::SocketAddr, target: std::net::SocketAddr) -> Relay {
        let listener = std::net::TcpListener::bind(listen).unwrap();
        let state: std::sync::Arc<std::sync::Mutex<RelayState>> = std::sync::Arc::default();
        let s = state.clone();
        std::thread::spawn(move || {
            for inbound in listener.incoming() {
                let Ok(inbound) = inbound else { continue };
                let Ok(peer) = inbound.peer_addr() else {
                    continue;
                };
                let mut st = s.lock().unwrap();
                if st.all || st.blocked.contains(&peer.ip()) {
                    continue;
                }
                let Ok(outbound) = std::net::TcpStream::connect(target) else {
                    continue;
                };
                for stream in [&inbound, &outbound] {
                    if let Ok(c) = stream.try_clone() {
                        st.live.push(c);
                    }
                }
                drop(st);
                let (mut a, mut b) = (inbound.try_clone().unwrap(), outbound.try_clone().unwrap());
                let (mut c, mut d) = (inbound, outbound);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut a, &mut b);
                    let _ = b.shutdown(std::net::Shutdown::Both);
                });
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut d, &mut c);
                    let _ = c.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        Relay { state }
    }

    /// Blocks everything (`all`) or the sources in `from`, and cuts every
    /// live connection.
    fn set(&self, all: bool, from: Vec<std::net::IpAddr>) {
        let mut st = self.state.lock().unwrap();
        st.all = all;
        st.blocked = from;
        for s in st.live.drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Pair + witness as processes on 127.x addresses, each member behind a
/// relay: the leader is cut off. It stops acknowledging writes (the CLI's
/// change is refused as not acknowledged) and says quorum=lost; the others
/// elect a leader and take writes; after healing all three converge on
/// the new leader's state, without the unacknowledged write.
#[test]
fn a_partitioned_leader_stops_acknowledging_and_the_others_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, w) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("w"),
    );
    let ip = |s: &str| -> std::net::IpAddr { s.parse().unwrap() };
    let (pa, pb, pw) = (free_port(), free_port(), free_port());
    // Each member listens on its own address and is advertised (and
    // reached) at its relay's.
    let conf = |own: &str, relay: &str, port: u16| {
        format!("[listen]\nopc_tcp = \"127.0.0.1:0\"\npair = \"{own}:{port}\"\npublic_host = \"{relay}\"\n")
    };
    let (_ga, _) = run_gateway_with(
        &a,
        &dir.path().join("a.toml"),
        &conf("127.0.0.11", "127.0.0.21", pa),
    );
    let (_gb, _) = run_gateway_with(
        &b,
        &dir.path().join("b.toml"),
        &conf("127.0.0.12", "127.0.0.22", pb),
    );
    let mut gw = KillOnDrop(
        uagate(&w)
            .args(["witness", "--listen", &format!("127.0.0.13:{pw}")])
            .args(["--advertise", &format!("127.0.0.23:{pw}")])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let out = lines(gw.0.stdout.take().unwrap());
    wait_for_line(&out, "PAIR ", Duration::from_secs(60));
    let relay = |r: &str, own: &str, port: u16| {
        Relay::start(
            format!("{r}:{port}").parse().unwrap(),
            format!("{own}:{port}").parse().unwrap(),
        )
    };
    let ra = relay("127.0.0.21", "127.0.0.11", pa);
    let rb = relay("127.0.0.22", "127.0.0.12", pb);
    let rw = relay("127.0.0.23", "127.0.0.13", pw);
    let (a_pair, b_pair) = (format!("127.0.0.21:{pa}"), format!("127.0.0.22:{pb}"));

    join(&b, &a, &a_pair);
    join(&w, &a, &a_pair);
    for data in [&a, &b, &w] {
        wait_status(data, &["voters=3", "quorum=ok"], Duration::from_secs(30));
    }
    assert!(
        status(&a).starts_with(&format!("role=primary leader={a_pair} ")),
        "{}",
        status(&a)
    );
    ok(user_add(&a, "anna", "operator"));

    // A is cut off: nobody reaches it, it reaches nobody.
    ra.set(true, Vec::new());
    rb.set(false, vec![ip("127.0.0.11")]);
    rw.set(false, vec![ip("127.0.0.11")]);
    let lost = user_add(&a, "lost", "viewer");
    assert!(!lost.status.success());
    let err = String::from_utf8_lossy(&lost.stderr);
    assert!(err.contains("not acknowledged"), "{err}");
    wait_status(&a, &["quorum=lost"], Duration::from_secs(15));
    wait_status(
        &b,
        &["role=primary", &format!("leader={b_pair}")],
        Duration::from_secs(30),
    );
    ok(user_add(&b, "bert", "viewer"));

    // Healed: A follows B; all three end with the same users.
    ra.set(false, Vec::new());
    rb.set(false, Vec::new());
    rw.set(false, Vec::new());
    wait_status(
        &a,
        &["role=standby", &format!("leader={b_pair}"), "quorum=ok"],
        Duration::from_secs(30),
    );
    let t0 = Instant::now();
    loop {
        let all: Vec<Vec<String>> = [&a, &b, &w].iter().map(|d| users(d)).collect();
        if all.iter().all(|u| u.contains(&"bert".to_string())) {
            for u in &all {
                assert!(
                    u.contains(&"anna".to_string()) && !u.contains(&"lost".to_string()),
                    "{all:?}"
                );
            }
            assert!(all.windows(2).all(|p| p[0] == p[1]), "{all:?}");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "{all:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
