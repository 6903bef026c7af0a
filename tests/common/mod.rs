//! What the end-to-end tests of the `uagate` binary share: running it on a
//! data directory, reading its output, the gateway and CLI steps the tests
//! repeat.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `uagate --data DATA` with quiet logs.
pub fn uagate(data: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_uagate"));
    let level = std::env::var("UAGATE_TEST_RUST_LOG").unwrap_or_else(|_| "warn".into());
    c.arg("--data").arg(data).env("RUST_LOG", level);
    c
}

/// Kills the child process when the test ends, even on a failed assertion.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends each line of `r` to the returned channel (from a thread).
pub fn lines(r: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

/// Waits (at most `limit`) for a line containing `needle`.
pub fn wait_for_line(
    rx: &std::sync::mpsc::Receiver<String>,
    needle: &str,
    limit: Duration,
) -> String {
    let end = Instant::now() + limit;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains(needle) => return line,
            Ok(_) => {}
            Err(_) => panic!("no line containing {needle:?} within {limit:?}"),
        }
    }
}

pub fn run_gateway(data: &std::path::Path, conf: &std::path::Path) -> (KillOnDrop, String) {
    run_gateway_with(data, conf, "[listen]\nopc_tcp = \"127.0.0.1:0\"\n")
}

/// Imports `toml` (written to `conf`) on `data`, then [`start_gateway`].
pub fn run_gateway_with(
    data: &std::path::Path,
    conf: &std::path::Path,
    toml: &str,
) -> (KillOnDrop, String) {
    std::fs::write(conf, toml).unwrap();
    config_import(data, conf);
    start_gateway(data)
}

/// `uagate config import FILE` on `data`, which must succeed.
pub fn config_import(data: &std::path::Path, file: &std::path::Path) {
    let out = uagate(data)
        .args(["config", "import"])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `uagate run` on `data` with what is stored there; the gateway and its
/// pair listener's address (from its `PAIR` line).
pub fn start_gateway(data: &std::path::Path) -> (KillOnDrop, String) {
    let mut child = KillOnDrop(
        uagate(data)
            .arg("run")
            .stdout(Stdio::piped())
            .stderr(log_sink(data))
            .spawn()
            .unwrap(),
    );
    let out = lines(child.0.stdout.take().unwrap());
    let pair = wait_for_line(&out, "PAIR ", Duration::from_secs(60));
    let addr = pair
        .split_whitespace()
        .nth(1)
        .expect("PAIR HOST:PORT")
        .to_string();
    (child, addr)
}

/// Starts `cmd` (a `uagate run` or `demo`) with its output read line by
/// line and waits (60 s) for its `READY opc.tcp=` line; the child and its
/// log (stderr) lines, for tests that check what the gateway logs.
pub fn spawn_until_ready(cmd: &mut Command) -> (KillOnDrop, std::sync::mpsc::Receiver<String>) {
    let mut child = KillOnDrop(
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let out = lines(child.0.stdout.take().unwrap());
    let err = lines(child.0.stderr.take().unwrap());
    wait_for_line(&out, "READY opc.tcp=", Duration::from_secs(60));
    (child, err)
}

/// A TCP port free on 127.0.0.1 now (for a listener that must keep its
/// address across restarts).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `uagate user add NAME --role ROLE` on `data` with a password on stdin.
#[allow(clippy::unwrap_used)]
pub fn user_add(data: &std::path::Path, name: &str, role: &str) -> std::process::Output {
    let mut add = uagate(data)
        .args(["user", "add", name, "--role", role])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    add.stdin
        .take()
        .unwrap()
        .write_all(b"a long password 1\n")
        .unwrap();
    add.wait_with_output().unwrap()
}

/// The standard output of a command that must have succeeded.
pub fn ok(out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Where a gateway's log goes: nowhere, or with `UAGATE_TEST_LOGS=DIR`
/// appended to `DIR/<data dir name>.log` (to read after a failure).
pub fn log_sink(data: &std::path::Path) -> Stdio {
    let Some(dir) = std::env::var_os("UAGATE_TEST_LOGS") else {
        return Stdio::null();
    };
    let name = data
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    std::fs::create_dir_all(&dir).unwrap();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::path::Path::new(&dir).join(format!("{name}.log")))
        .unwrap();
    Stdio::from(file)
}
