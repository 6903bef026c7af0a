//! `uagate run` as a systemd `Type=notify` service: it says READY once it
//! serves, feeds the watchdog while it runs, and says STOPPING on SIGTERM.
//! systemd's side is a Unix datagram socket named by `NOTIFY_SOCKET`, as
//! the service manager passes it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The notification messages that arrive within `limit` until `until`
/// returns true for one of them.
fn messages_until(
    sock: &UnixDatagram,
    limit: Duration,
    until: impl Fn(&str) -> bool,
) -> Vec<String> {
    let end = Instant::now() + limit;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < end {
        sock.set_read_timeout(Some(
            end.saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1)),
        ))
        .unwrap();
        match sock.recv(&mut buf) {
            Ok(n) => {
                let m = String::from_utf8_lossy(&buf[..n]).to_string();
                let done = until(&m);
                got.push(m);
                if done {
                    return got;
                }
            }
            Err(_) => break,
        }
    }
    panic!("not within {limit:?}; got {got:?}");
}

#[test]
fn run_says_ready_feeds_the_watchdog_and_says_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let conf = dir.path().join("c.toml");
    std::fs::write(&conf, "[listen]\nopc_tcp = \"127.0.0.1:0\"\n").unwrap();
    config_import(&data, &conf);
    let socket = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&socket).unwrap();
    let child = KillOnDrop(
        uagate(&data)
            .arg("run")
            .env("NOTIFY_SOCKET", &socket)
            .env("WATCHDOG_USEC", "400000")
            .env_remove("WATCHDOG_PID")
            .stdout(Stdio::null())
            .stderr(log_sink(&data))
            .spawn()
            .unwrap(),
    );
    let ready = messages_until(&sock, Duration::from_secs(60), |m| m.contains("READY=1"));
    let last = ready.last().unwrap();
    assert!(last.contains("STATUS=serving opc.tcp://"), "{last}");
    // 400 ms watchdog: fed every 200 ms while the gateway runs.
    let t0 = Instant::now();
    let pings = messages_until(&sock, Duration::from_secs(5), |_| false_after(t0));
    let fed = pings.iter().filter(|m| m.contains("WATCHDOG=1")).count();
    assert!(fed >= 5, "watchdog fed {fed} times in 1.5 s: {pings:?}");
    let pid = child.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    messages_until(&sock, Duration::from_secs(20), |m| m.contains("STOPPING=1"));
}

/// True once 1.5 s have passed since `t0` (collects the pings of that time).
fn false_after(t0: Instant) -> bool {
    t0.elapsed() >= Duration::from_millis(1500)
}

#[test]
fn the_unit_file_is_hardened_and_watched() {
    let unit =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/image/uagate.service"))
            .unwrap();
    let lines: Vec<&str> = unit.lines().map(str::trim).collect();
    for wanted in [
        "Type=notify",
        "WatchdogSec=30s",
        "Restart=always",
        "User=uagate",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "CapabilityBoundingSet=CAP_NET_BIND_SERVICE",
        "SystemCallFilter=@system-service",
        "StandardOutput=journal",
    ] {
        assert!(
            lines.contains(&wanted),
            "{wanted} missing from image/uagate.service"
        );
    }
    // systemd's own rating, where systemd-analyze is installed (docs/appliance.md records it).
    let Ok(out) = Command::new("systemd-analyze")
        .args(["security", "--offline=true"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/image/uagate.service"))
        .output()
    else {
        eprintln!("systemd-analyze not installed: rating not checked");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let score: f64 = text
        .lines()
        .find_map(|l| l.split("uagate.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{text}"));
    assert!(
        score <= 2.0,
        "exposure {score} (docs/appliance.md records 1.6):\n{text}"
    );
}
