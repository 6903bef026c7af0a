//! End-to-end tests of the `uagate` command line: the contracts scripts use.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn help_documents_every_command() {
    let out = Command::new(env!("CARGO_BIN_EXE_uagate"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for cmd in [
        "run", "demo", "sim", "user", "trust", "config", "plan", "pair", "witness", "--data",
    ] {
        assert!(text.contains(cmd), "--help lacks {cmd}:\n{text}");
    }
}

#[test]
fn config_import_refuses_unknown_keys_and_names_bad_settings() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(&file, "[server]\nmax_sesions = 5\n").unwrap();
    let out = uagate(&dir.path().join("d"))
        .args(["config", "import"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("max_sesions"));

    std::fs::write(&file, "[isolation]\nhandshake_timeout = \"10m\"\n").unwrap();
    let out = uagate(&dir.path().join("d"))
        .args(["config", "import"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("isolation.handshake_timeout"));

    // Nothing was stored by the refused imports: export shows the defaults.
    let out = uagate(&dir.path().join("d"))
        .args(["config", "export"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("handshake_timeout = \"2m\""));

    std::fs::write(&file, "[server]\nmax_session_count = 7\n").unwrap();
    config_import(&dir.path().join("d"), &file);
    let out = uagate(&dir.path().join("d"))
        .args(["config", "export"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("max_session_count = 7"));
}

#[test]
fn config_export_prints_the_imported_document_with_its_per_appliance_settings() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let file = dir.path().join("c.toml");
    let doc = "[listen]\nopc_tcp = \"127.0.0.1:4840\"\npair = \"127.0.0.1:4999\"\n\n\
               [server]\napplication_uri = \"urn:plant:gw-a\"\nmax_session_count = 40\n";
    std::fs::write(&file, doc).unwrap();
    let import = |file: &std::path::Path| config_import(&data, file);
    let export = || {
        let out = uagate(&data).args(["config", "export"]).output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    import(&file);
    let first = export();
    assert_eq!(
        first,
        uagate_config::Config::from_toml(doc).unwrap().to_toml()
    );
    // Exported and imported again: the same document.
    std::fs::write(&file, &first).unwrap();
    import(&file);
    assert_eq!(export(), first);
    // plan reads the same merged document.
    let out = uagate(&data).arg("plan").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("Connection: total=103"));

    // A pair listener on another listener's address is refused by name.
    std::fs::write(
        &file,
        "[listen]\nopc_tcp = \"127.0.0.1:4840\"\npair = \"127.0.0.1:8443\"\n",
    )
    .unwrap();
    let out = uagate(&data)
        .args(["config", "import"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("listen.pair"));
    assert_eq!(export(), first);
}

#[test]
fn user_add_reads_password_from_stdin_and_refuses_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    for expect_ok in [true, false] {
        let mut child = uagate(dir.path())
            .args(["user", "add", "alice", "--role", "operator"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"correct horse\n")
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.success(), expect_ok);
    }
    let out = uagate(dir.path()).args(["user", "list"]).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "alice operator"
    );
}

#[test]
fn run_on_empty_data_dir_creates_database_and_key_and_serves() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("fresh");
    let file = dir.path().join("c.toml");
    std::fs::write(&file, "[listen]\nopc_tcp = \"127.0.0.1:0\"\n").unwrap();
    assert!(uagate(&data)
        .args(["config", "import"])
        .arg(&file)
        .status()
        .unwrap()
        .success());
    let mut child = uagate(&data)
        .arg("run")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let line = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert!(
        line.starts_with("READY opc.tcp=opc.tcp://127.0.0.1:"),
        "{line}"
    );
    let port: u16 = line
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // It accepts a TCP connection on the advertised port.
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(start.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(data.join("uagate.db").exists());
    assert!(data.join("pki/own/cert.der").exists());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(data.join("pki/private/private.pem"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let dmode = std::fs::metadata(data.join("pki/private"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(
            dmode & 0o077,
            0,
            "private dir must not be group/world accessible"
        );
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn plan_prints_one_reference_line_per_stage_and_exits_2_on_an_invalid_config() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    // Stored (default) configuration: Balanced with 100 sessions / 103 channels.
    let out = uagate(&data).arg("plan").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 8, "{text}");
    assert_eq!(
        lines[0],
        "Connection: total=103, shared=101, bootstrap=1, reconnect=1, control=0, trusted=0, ownerLimit=103"
    );
    assert!(lines[2].starts_with("ReassemblyBytes: total=67108864, shared=58458112, bootstrap=4325376, reconnect=4325376,"), "{text}");
    assert!(
        lines[4].starts_with("RequestQueue: total=103, shared=100,"),
        "{text}"
    );
    for (line, stage) in lines.iter().zip([
        "Connection",
        "Handshake",
        "ReassemblyBytes",
        "SessionEstablishment",
        "RequestQueue",
        "RequestExecution",
        "RequestQueueBytes",
        "ParkedRequest",
    ]) {
        assert!(line.starts_with(&format!("{stage}: total=")), "{line}");
        assert!(line.contains(", ownerLimit="), "{line}");
    }

    // --config FILE: the N+1 rule fails Balanced with 101 channels -> exit 2.
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        "[server]\nmax_session_count = 100\nmax_channel_count = 101\n",
    )
    .unwrap();
    let out = uagate(&data)
        .args(["plan", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("server.max_channel_count"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A document error (unknown owner in an ingress rule) also exits 2.
    std::fs::write(
        &file,
        "[[isolation.ingress]]\ncidr = \"10.0.0.0/8\"\nowner = \"nobody\"\n",
    )
    .unwrap();
    let out = uagate(&data)
        .args(["plan", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("isolation.ingress[0].owner"));

    // The same file with 103 channels and fair_share plans fine from --config.
    std::fs::write(
        &file,
        "[server]\nmax_channel_count = 101\n[isolation]\nmode = \"fair_share\"\n",
    )
    .unwrap();
    let out = uagate(&data)
        .args(["plan", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout)
        .starts_with("Connection: total=101, shared=101, bootstrap=0, reconnect=0,"));
}

#[test]
fn config_import_refuses_a_document_the_plan_cannot_honour() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    // Balanced needs max_session_count + reserves connections (N+1 rule).
    std::fs::write(
        &file,
        "[server]\nmax_session_count = 100\nmax_channel_count = 101\n",
    )
    .unwrap();
    let out = uagate(&dir.path().join("d"))
        .args(["config", "import"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("max_channel_count"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn config_import_tells_what_a_running_gateway_applies_live_and_what_needs_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let file = dir.path().join("c.toml");
    let doc = |weight: u32, sessions: u32| {
        format!(
            "[listen]\nopc_tcp = \"127.0.0.1:0\"\n\n[server]\nmax_session_count = {sessions}\n\
             max_channel_count = 110\n\n[isolation]\nmode = \"trusted_reservations\"\n\n\
             [[isolation.trusted_owners]]\nkey = \"scada\"\nweight = {weight}\n\n\
             [[isolation.ingress]]\ncidr = \"127.0.0.2/32\"\nowner = \"scada\"\n"
        )
    };
    let import = |text: String| {
        std::fs::write(&file, text).unwrap();
        let out = uagate(&data)
            .args(["config", "import"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    import(doc(2, 100));
    let (_child, err) = spawn_until_ready(uagate(&data).arg("run").env("RUST_LOG", "info"));

    let said = import(doc(6, 100));
    assert!(
        said.contains("applied live by a running gateway: isolation.trusted_owners"),
        "{said}"
    );
    // (The store logs each applied change too: wait for the watcher's line.)
    let logged = wait_for_line(&err, "applied live", Duration::from_secs(20));
    assert!(logged.contains("configuration change"), "{logged}");

    let said = import(doc(7, 90));
    assert!(
        said.contains("takes effect after a restart") && said.contains("server.max_session_count"),
        "{said}"
    );
    let logged = wait_for_line(&err, "configuration stored", Duration::from_secs(20));
    assert!(logged.contains("server.max_session_count"), "{logged}");

    let said = import(doc(7, 90));
    assert!(said.contains("no setting changed"), "{said}");
}

/// The `sha256: ` line of `uagate tls show` / `tls set` output.
fn tls_fingerprint(stdout: &[u8]) -> String {
    let text = String::from_utf8_lossy(stdout);
    let fp = text
        .lines()
        .find_map(|l| l.strip_prefix("sha256: "))
        .unwrap_or_else(|| panic!("no fingerprint in:\n{text}"))
        .to_string();
    assert_eq!(fp.len(), 64, "{fp}");
    assert!(fp
        .chars()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    fp
}

#[test]
fn tls_show_creates_a_certificate_and_tls_set_replaces_it_only_when_valid() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let help = Command::new(env!("CARGO_BIN_EXE_uagate"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("tls"));

    // First `tls show` generates the self-signed certificate, like a first start.
    let out = uagate(&data).args(["tls", "show"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("subject: CN=uagate TLS"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("sans: ") && l.contains("localhost") && l.contains("127.0.0.1")),
        "{text}"
    );
    assert!(text.contains("not_after: "), "{text}");
    let original = tls_fingerprint(&out.stdout);
    assert!(data.join("tls/cert.pem").exists() && data.join("tls/key.pem").exists());
    // A second show prints the same certificate.
    let out = uagate(&data).args(["tls", "show"]).output().unwrap();
    assert_eq!(tls_fingerprint(&out.stdout), original);

    let make = |host: &str| {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![host.to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (cert_a, key_a) = make("gw.example");
    let (_, key_b) = make("gw.example");
    let cert_file = dir.path().join("cert.pem");
    let key_file = dir.path().join("key.pem");
    std::fs::write(&cert_file, &cert_a).unwrap();

    // A key of another certificate is refused, naming the problem; nothing changes.
    std::fs::write(&key_file, &key_b).unwrap();
    let stored_key = std::fs::read(data.join("tls/key.pem")).unwrap();
    let out = uagate(&data)
        .args(["tls", "set"])
        .arg(&cert_file)
        .arg(&key_file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not match"), "{err}");
    assert_eq!(std::fs::read(data.join("tls/key.pem")).unwrap(), stored_key);
    let out = uagate(&data).args(["tls", "show"]).output().unwrap();
    assert_eq!(tls_fingerprint(&out.stdout), original);

    // The matching pair is installed and shown from then on.
    std::fs::write(&key_file, &key_a).unwrap();
    let out = uagate(&data)
        .args(["tls", "set"])
        .arg(&cert_file)
        .arg(&key_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("picks it up within a few seconds without dropping connections"),
        "{text}"
    );
    let installed = tls_fingerprint(&out.stdout);
    assert_ne!(installed, original);
    let out = uagate(&data).args(["tls", "show"]).output().unwrap();
    assert_eq!(tls_fingerprint(&out.stdout), installed);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("sans: gw.example"), "{text}");
    assert_eq!(
        std::fs::read_to_string(data.join("tls/cert.pem")).unwrap(),
        cert_a
    );
}

/// Starts `uagate run` on `data` (imported `[listen]` on 127.0.0.1, port 0)
/// and waits for its PAIR line.
#[allow(clippy::unwrap_used)]
/// Issue 18 item 1: `uagate pair invite` / `join` / `status` while the
/// gateways run, with the lines scripts rely on; a user added with the CLI
/// on the primary reaches the standby; on the standby the CLI is refused,
/// naming the leader.
#[test]
fn pair_invite_join_status_and_replicated_cli_changes() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let (_ga, a_pair) = run_gateway(&a, &dir.path().join("a.toml"));
    let (_gb, _) = run_gateway(&b, &dir.path().join("b.toml"));

    let status = ok(uagate(&a).args(["pair", "status"]).output().unwrap());
    assert!(status.starts_with("role=standalone leader="), "{status}");

    let invite = ok(uagate(&a).args(["pair", "invite"]).output().unwrap());
    let words: Vec<&str> = invite.split_whitespace().collect();
    assert_eq!(&words[..2], ["PAIRING", "CODE"], "{invite}");
    assert_eq!(words[3], "FINGERPRINT", "{invite}");
    assert_eq!(words[4].len(), 64, "{invite}");
    let code = words[2];

    // A wrong code: non-zero with the reason.
    let wrong = uagate(&b)
        .args(["pair", "join", &a_pair, "0000-0000-0000-0000-0000"])
        .output()
        .unwrap();
    assert!(!wrong.status.success());
    let why = String::from_utf8_lossy(&wrong.stderr);
    assert!(why.contains("wrong, used or expired"), "{why}");
    // In plain words first, with what to do; the raw refusal after it.
    assert!(
        why.contains("The other appliance refused the code")
            && why.contains("Press Invite on the other appliance for a new code"),
        "{why}"
    );
    // The other appliance refused: no hint that the local gateway is down.
    assert!(!why.contains("is `uagate run` running"), "{why}");
    let joined = ok(uagate(&b)
        .args(["pair", "join", &a_pair, code])
        .output()
        .unwrap());
    assert!(joined.starts_with("JOINED"), "{joined}");
    // The inviter's fingerprint, to compare with what `invite` printed.
    assert!(
        joined
            .trim_end()
            .ends_with(&format!("FINGERPRINT {}", words[4])),
        "{joined}"
    );

    // A user added with the CLI on the primary goes through the pair.
    ok(user_add(&a, "olga", "operator"));
    let t0 = Instant::now();
    loop {
        let users = ok(uagate(&b).args(["user", "list"]).output().unwrap());
        if users.contains("olga") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "olga never reached B: {users}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let sb = ok(uagate(&b).args(["pair", "status"]).output().unwrap());
    assert!(
        sb.starts_with(&format!("role=standby leader={a_pair} epoch=")),
        "{sb}"
    );
    let sa = ok(uagate(&a).args(["pair", "status"]).output().unwrap());
    assert!(
        sa.starts_with(&format!("role=primary leader={a_pair} epoch=")),
        "{sa}"
    );

    // On the standby the CLI's change is refused, naming the leader.
    let out = user_add(&b, "pete", "viewer");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not the configuration leader") && err.contains(&a_pair),
        "{err}"
    );

    // So are the other user changes (their refusal is the pair's, not the
    // store's: exit 1, like `user add`), naming the primary.
    for out in [
        uagate(&b)
            .args(["user", "role", "olga", "--role", "admin"])
            .output()
            .unwrap(),
        uagate(&b)
            .args(["user", "remove", "olga"])
            .output()
            .unwrap(),
        uagate_with_input(&b, &["user", "password", "OLGA"], "a new password 2\n"),
    ] {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("not the configuration leader") && err.contains(&a_pair),
            "{err}"
        );
    }
    // On the primary they go through the pair to the standby.
    ok(uagate(&a)
        .args(["user", "role", "OLGA", "--role", "viewer"])
        .output()
        .unwrap());
    let t0 = Instant::now();
    while !ok(uagate(&b).args(["user", "list"]).output().unwrap()).contains("olga viewer") {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "the role never reached B"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // The primary is gone: the standby leaves anyway, prints LEFT, says the
    // primary was not told and exits 3.
    drop(_ga);
    let out = uagate(&b).args(["pair", "leave"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "LEFT");
    assert!(
        err.contains(&format!("the primary ({a_pair}) was not told"))
            && err.contains("run `uagate pair leave` on the primary"),
        "{err}"
    );
    let sb = ok(uagate(&b).args(["pair", "status"]).output().unwrap());
    assert!(sb.starts_with("role=standalone "), "{sb}");
    // Only when this appliance's own gateway does not answer does the CLI
    // ask whether it runs.
    let out = uagate(&a).args(["pair", "status"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is `uagate run` running"), "{err}");
}

/// `uagate demo` rebuilds DATA/demo at every start, so it refuses a
/// `demo` directory it did not make (and leaves it as it was).
#[test]
fn demo_refuses_a_demo_directory_it_did_not_make() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    std::fs::create_dir_all(data.join("demo")).unwrap();
    std::fs::write(data.join("demo").join("mine.txt"), "keep me").unwrap();
    let out = uagate(&data)
        .args(["demo", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("was not made by `uagate demo`"), "{err}");
    assert_eq!(
        std::fs::read_to_string(data.join("demo").join("mine.txt")).unwrap(),
        "keep me"
    );
}

/// What the gateway writes to its log when nobody set `RUST_LOG` (the
/// appliance's journal): plain text without escape codes (the journal keeps
/// a line with them as binary), and no warning for the field sessions it
/// closes itself on a clean stop (async-opcua's "Transport disconnected:
/// Good"), while its own lines about the field links stay.
#[test]
fn default_log_is_plain_text_without_warnings_for_a_clean_stop() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let (mut child, err) = spawn_until_ready(
        uagate(&data)
            .args(["demo", "--listen", "127.0.0.1:0"])
            .env_remove("RUST_LOG")
            .env_remove("NO_COLOR"),
    );
    // Both field sessions of the demo's redundant pair up.
    let mut seen = Vec::new();
    let mut up = 0;
    let end = Instant::now() + Duration::from_secs(60);
    while up < 2 {
        let left = end.saturating_duration_since(Instant::now());
        let line = err
            .recv_timeout(left)
            .expect("two field sessions up within 60 s");
        up += usize::from(line.contains("field session up"));
        seen.push(line);
    }
    assert!(Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .unwrap()
        .success());
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match err.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(e) => panic!("the gateway did not stop within 30 s: {e}"),
        }
    }
    assert!(child.0.wait().unwrap().success());
    let log = seen.join("\n");
    assert!(log.contains(" INFO "), "info lines expected:\n{log}");
    assert!(!log.contains('\u{1b}'), "escape codes in the log:\n{log}");
    assert!(
        !log.contains("Transport disconnected"),
        "a warning for a clean stop:\n{log}"
    );
    assert!(
        !log.contains(" WARN "),
        "no warning expected for a clean demo run:\n{log}"
    );
}

/// A document whose listeners would clash (here opc_tcp and console on one
/// address) is refused by `config import`, naming both settings, and
/// nothing is stored; `plan --config` refuses it too.
#[test]
fn config_import_refuses_clashing_listeners_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let file = dir.path().join("c.toml");
    let export = || ok(uagate(&data).args(["config", "export"]).output().unwrap());
    std::fs::write(&file, "[listen]\nopc_tcp = \"127.0.0.1:24840\"\n").unwrap();
    config_import(&data, &file);
    let before = export();
    std::fs::write(
        &file,
        "[listen]\nopc_tcp = \"127.0.0.1:24840\"\nconsole = \"127.0.0.1:24840\"\n\
         [server]\nmax_session_count = 7\n",
    )
    .unwrap();
    let out = uagate(&data)
        .args(["config", "import"])
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted: {err}");
    assert!(
        err.contains("listen.console") && err.contains("listen.opc_tcp"),
        "{err}"
    );
    assert_eq!(export(), before);
    let out = uagate(&data)
        .args(["plan", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("listen.console"));
}

/// The output of `cmd`, or `None` (after killing it) when it is still
/// running after `limit`.
#[allow(clippy::unwrap_used)]
fn output_within(cmd: &mut Command, limit: Duration) -> Option<std::process::Output> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let end = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(child.wait_with_output().unwrap())
}

/// A second long-running command (`args` on `data`) asks for a directory
/// (`in_use`) that a running one holds: refused naming it and the pid.
fn assert_in_use(data: &std::path::Path, args: &[&str], holder: u32, in_use: &std::path::Path) {
    let out = output_within(uagate(data).args(args), Duration::from_secs(30))
        .unwrap_or_else(|| panic!("{args:?} on a data directory in use kept running"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} accepted: {err}");
    assert!(
        err.contains(&format!(
            "data directory {} is in use by another uagate (pid {holder})",
            in_use.display()
        )),
        "{args:?}: {err}"
    );
}

/// One long-running uagate per data directory: a second `run` (or
/// `witness`) on it is refused naming the pid of the first, which keeps
/// its pair listener file and stays reachable by the CLI; the short
/// commands work beside it; once it is gone the directory is free again.
#[test]
fn a_second_gateway_on_the_same_data_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let (gateway, pair) = run_gateway(&data, &dir.path().join("c.toml"));
    let listen_file = std::fs::read_to_string(data.join("pair/listen")).unwrap();
    assert_in_use(&data, &["run"], gateway.0.id(), &data);
    assert_in_use(
        &data,
        &["witness", "--listen", "127.0.0.1:0"],
        gateway.0.id(),
        &data,
    );
    assert_eq!(
        std::fs::read_to_string(data.join("pair/listen")).unwrap(),
        listen_file
    );
    let status = ok(uagate(&data).args(["pair", "status"]).output().unwrap());
    assert!(status.contains(&format!("leader={pair}")), "{status}");
    ok(user_add(&data, "ada", "admin"));
    assert!(ok(uagate(&data).args(["user", "list"]).output().unwrap()).contains("ada admin"));
    ok(uagate(&data).args(["config", "export"]).output().unwrap());
    drop(gateway);
    // Killed, its lock went with it.
    let (_again, _) = start_gateway(&data);
}

/// `uagate demo` holds its demo directory the same way: a second demo on
/// the same data directory is refused before it rebuilds the first one's.
#[test]
fn a_second_demo_on_the_same_data_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let (demo, _log) = spawn_until_ready(uagate(&data).args(["demo", "--listen", "127.0.0.1:0"]));
    let listen_file = std::fs::read_to_string(data.join("demo/pair/listen")).unwrap();
    assert_in_use(
        &data,
        &["demo", "--listen", "127.0.0.1:0"],
        demo.0.id(),
        &data.join("demo"),
    );
    // Refused before it touched the first demo's files.
    assert_eq!(
        std::fs::read_to_string(data.join("demo/pair/listen")).unwrap(),
        listen_file
    );
    ok(uagate(&data.join("demo"))
        .args(["pair", "status"])
        .output()
        .unwrap());
}

/// `sh -c 'umask 022; exec uagate --data DATA ARGS…'`: the permissive umask
/// of an operator's shell, whatever the test runner's is.
fn uagate_umask_022(data: &std::path::Path) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg("umask 022 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_uagate"))
        .arg("--data")
        .arg(data)
        .env("RUST_LOG", "warn");
    c
}

/// The permission bits of `path`.
fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Every SQLite file of `db` (the database, and its -wal/-shm while they
/// exist) is 0600.
fn assert_private_db(db: &std::path::Path) {
    assert_eq!(mode(db), 0o600, "{}", db.display());
    for suffix in ["-wal", "-shm"] {
        let f = std::path::PathBuf::from(format!("{}{suffix}", db.display()));
        if f.exists() {
            assert_eq!(mode(&f), 0o600, "{}", f.display());
        }
    }
}

/// The data directory (user passwords' hashes, field-server passwords) is
/// 0700 and its databases 0600 under a umask of 022: an existing 0755
/// directory after `user add`, a new one after `run`, a witness's.
#[test]
fn the_data_directory_and_its_databases_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // An existing directory of ours, 0755.
    let a = dir.path().join("a");
    std::fs::create_dir(&a).unwrap();
    std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut add = uagate_umask_022(&a)
        .args(["user", "add", "ada", "--role", "admin"])
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
    ok(add.wait_with_output().unwrap());
    assert_eq!(mode(&a), 0o700);
    assert_private_db(&a.join("uagate.db"));

    // A new one, made by `config import`, then a start.
    let b = dir.path().join("b");
    let file = dir.path().join("c.toml");
    std::fs::write(&file, "[listen]\nopc_tcp = \"127.0.0.1:0\"\n").unwrap();
    ok(uagate_umask_022(&b)
        .args(["config", "import"])
        .arg(&file)
        .output()
        .unwrap());
    let (_gateway, _) = spawn_until_ready(uagate_umask_022(&b).arg("run"));
    assert_eq!(mode(&b), 0o700);
    assert_private_db(&b.join("uagate.db"));
    assert_private_db(&b.join("pair/raft.db"));

    // A witness's directory.
    let w = dir.path().join("w");
    let mut witness = KillOnDrop(
        uagate_umask_022(&w)
            .args(["witness", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let out = lines(witness.0.stdout.take().unwrap());
    wait_for_line(&out, "PAIR ", Duration::from_secs(60));
    assert_eq!(mode(&w), 0o700);
    assert_private_db(&w.join("uagate.db"));
    assert_private_db(&w.join("pair/raft.db"));
}

/// A list or show command whose reader went away (`uagate user list |
/// head -1`) ends quietly: no panic, no exit code 101.
#[test]
fn output_to_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    ok(user_add(&data, "ada", "admin"));
    ok(user_add(&data, "bob", "viewer"));
    for args in [
        &["user", "list"][..],
        &["config", "export"],
        &["plan"],
        &["tls", "show"],
    ] {
        let mut child = uagate(&data)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The reader is gone before the command writes anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_ne!(out.status.code(), Some(101), "{args:?}: {err}");
        assert!(out.status.success(), "{args:?}: {:?} {err}", out.status);
    }
}

/// A command that only reads the data directory refuses one that does not
/// exist (a mistyped `--data`), instead of creating an empty store and
/// printing defaults as if they were the appliance's; nothing is created.
#[test]
fn a_read_only_command_on_a_missing_data_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("uagat");
    for args in [
        &["user", "list"][..],
        &["trust", "list"],
        &["trust", "rejected"],
        &["config", "export"],
    ] {
        // An operator's mistake is not a crash: one line, no backtrace
        // even with RUST_BACKTRACE set.
        let out = uagate(&data)
            .args(args)
            .env("RUST_BACKTRACE", "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains("no such data directory"), "{args:?}: {err}");
        assert!(!err.contains("backtrace"), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed something");
        assert!(!data.exists(), "{args:?} created {}", data.display());
    }
    // `plan` shows what the defaults give, and says that it does.
    let out = uagate(&data).arg("plan").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("Connection: total=103,"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such data directory"));
    assert!(!data.exists(), "plan created {}", data.display());
}

/// `uagate --data DATA ARGS…` with `stdin` written to its standard input.
#[allow(clippy::unwrap_used)]
fn uagate_with_input(data: &std::path::Path, args: &[&str], stdin: &str) -> std::process::Output {
    let mut child = uagate(data)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// A refusal: exit code 2 and the one line `expected` on stderr, nothing
/// on stdout.
fn assert_refused(out: &std::process::Output, expected: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err, format!("{expected}\n"));
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Whether `name` logs in with `password` in the store of `data` (read
/// directly, as the console's login does).
#[allow(clippy::unwrap_used)]
fn logs_in(data: &std::path::Path, name: &str, password: &str) -> bool {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let store = uagate_store::Store::open(&data.join("uagate.db"))
            .await
            .unwrap();
        let ok = store.login(name, password).await.unwrap().is_some();
        store.close().await;
        ok
    })
}

/// `user role`, `user password` and `user remove`, with the names as the
/// operator types them (any case, Unicode letters); the last admin can be
/// neither demoted nor removed (exit 2, one line), and an unknown user or a
/// blank password is refused the same way. Once with the gateway stopped,
/// once with it running (the change then goes through it).
#[test]
fn user_role_password_and_remove_refuse_to_lose_the_last_admin() {
    let dir = tempfile::tempdir().unwrap();
    for running in [false, true] {
        let data = dir.path().join(if running { "running" } else { "stopped" });
        let _gateway = running.then(|| run_gateway(&data, &dir.path().join("c.toml")));
        ok(user_add(&data, "Jürgen", "admin"));
        ok(user_add(&data, "bob", "viewer"));
        // The only admin: neither demoted nor removed, in any case.
        assert_refused(
            &uagate(&data)
                .args(["user", "role", "JÜRGEN", "--role", "operator"])
                .output()
                .unwrap(),
            "uagate user role: cannot demote Jürgen, the last admin (make another user admin first)",
        );
        assert_refused(
            &uagate(&data)
                .args(["user", "remove", "jürgen"])
                .output()
                .unwrap(),
            "uagate user remove: cannot remove Jürgen, the last admin (make another user admin first)",
        );
        assert_refused(
            &uagate(&data)
                .args(["user", "remove", "nobody"])
                .output()
                .unwrap(),
            "uagate user remove: no user named \"nobody\"",
        );
        // A forgotten password is reset from stdin's first line; a blank
        // one is refused.
        assert_refused(
            &uagate_with_input(
                &data,
                &["user", "password", "JÜRGEN"],
                "        \nignored\n",
            ),
            "uagate user password: the password must not be only spaces or other white space",
        );
        let out = uagate_with_input(&data, &["user", "password", "JÜRGEN"], "a new password 2\n");
        assert_eq!(
            ok(out),
            "password of JÜRGEN set; their console and OPC UA sessions have ended\n"
        );
        assert!(logs_in(&data, "Jürgen", "a new password 2"));
        assert!(!logs_in(&data, "Jürgen", "a long password 1"));
        // Another admin first, then the first one may go.
        let out = uagate(&data)
            .args(["user", "role", "BOB", "--role", "admin"])
            .output()
            .unwrap();
        assert_eq!(ok(out), "user BOB is now admin\n");
        let out = uagate(&data)
            .args(["user", "remove", "Jürgen"])
            .output()
            .unwrap();
        assert_eq!(ok(out), "user Jürgen removed\n");
        let users = ok(uagate(&data).args(["user", "list"]).output().unwrap());
        assert_eq!(users, "bob admin\n", "running={running}");
        // A second bob, in another case, is the same user.
        let out = user_add(&data, "BOB", "viewer");
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("user \"bob\" already exists"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Nothing to change on a data directory that does not exist: refused,
    // nothing created.
    let missing = dir.path().join("missing");
    for args in [
        &["user", "remove", "bob"][..],
        &["user", "role", "bob", "--role", "admin"],
        &["trust", "remove", &"0".repeat(40)],
        &["trust", "approve", &"0".repeat(40)],
    ] {
        let out = uagate(&missing).args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("no such data directory"),
            "{args:?}"
        );
        assert!(!missing.exists(), "{args:?} created it");
    }
}

/// A self-signed certificate (DER) with an application URI.
#[allow(clippy::unwrap_used)]
fn certificate(cn: &str) -> Vec<u8> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params.subject_alt_names.push(rcgen::SanType::URI(
        format!("urn:test:{cn}").as_str().try_into().unwrap(),
    ));
    let key = rcgen::KeyPair::generate().unwrap();
    params.self_signed(&key).unwrap().der().to_vec()
}

/// `trust approve` moves a rejected certificate (as `trust rejected` shows
/// it) to the trusted list, `trust remove` takes one off by the thumbprint
/// `trust list` shows; either in upper case and with colons. An unknown or
/// malformed thumbprint is refused naming it (exit 2).
#[test]
fn trust_approve_and_remove_by_thumbprint() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let der = certificate("stranger");
    // The engine's own record of a certificate it refused.
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        std::fs::create_dir_all(&data).unwrap();
        let store = uagate_store::Store::open(&data.join("uagate.db"))
            .await
            .unwrap();
        store.record_rejected(&der).await.unwrap();
        store.close().await;
    });
    let rejected = ok(uagate(&data).args(["trust", "rejected"]).output().unwrap());
    let thumbprint = rejected.split_whitespace().next().unwrap().to_string();
    assert_eq!(thumbprint.len(), 40, "{rejected}");
    let typed: String = thumbprint
        .to_uppercase()
        .as_bytes()
        .chunks(2)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect::<Vec<_>>()
        .join(":");
    let out = uagate(&data)
        .args(["trust", "approve", &typed])
        .output()
        .unwrap();
    assert_eq!(ok(out), format!("trusted {thumbprint} CN=stranger\n"));
    assert_eq!(
        ok(uagate(&data).args(["trust", "rejected"]).output().unwrap()),
        ""
    );
    assert_eq!(
        ok(uagate(&data).args(["trust", "list"]).output().unwrap()),
        format!("{thumbprint} CN=stranger urn:test:stranger\n")
    );
    // Trusted now: no longer a rejected one to approve.
    assert_refused(
        &uagate(&data)
            .args(["trust", "approve", &thumbprint])
            .output()
            .unwrap(),
        &format!("uagate trust approve: no rejected certificate with thumbprint {thumbprint}"),
    );
    let out = uagate(&data)
        .args(["trust", "remove", &typed])
        .output()
        .unwrap();
    assert_eq!(ok(out), format!("removed {typed}\n"));
    assert_eq!(
        ok(uagate(&data).args(["trust", "list"]).output().unwrap()),
        ""
    );
    assert_refused(
        &uagate(&data)
            .args(["trust", "remove", &thumbprint])
            .output()
            .unwrap(),
        &format!("uagate trust remove: no certificate with thumbprint {thumbprint}"),
    );
    assert_refused(
        &uagate(&data)
            .args(["trust", "remove", "12:34"])
            .output()
            .unwrap(),
        "uagate trust remove: \"12:34\" is not a thumbprint: expected 40 hexadecimal digits (SHA-1)",
    );
}

/// Every file and directory under `dir` whose mode lets the group or
/// others in (none may).
#[allow(clippy::unwrap_used)]
fn readable_by_others(dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.file_type().is_symlink() {
            continue;
        }
        if mode(&path) & 0o077 != 0 {
            found.push(format!("{} {:o}", path.display(), mode(&path)));
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                pending.push(entry.unwrap().path());
            }
        }
    }
    found.sort();
    found
}

/// Under a umask of 022, the gateway creates every file in its data
/// directory for its own user only (private keys 0600); files an older
/// version left readable by others (0644, 0755) are made private at the
/// next start.
#[test]
fn every_file_in_the_data_directory_is_private_and_mended_at_start() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    let file = dir.path().join("c.toml");
    std::fs::write(&file, "[listen]\nopc_tcp = \"127.0.0.1:0\"\n").unwrap();
    ok(uagate_umask_022(&data)
        .args(["config", "import"])
        .arg(&file)
        .output()
        .unwrap());
    let keys = [
        "pki/private/private.pem",
        "tls/key.pem",
        "pair/pair-key.der",
        "console/jwt.key",
    ];
    let run = || {
        let (gateway, _) = spawn_until_ready(uagate_umask_022(&data).arg("run"));
        // The console's key is made once the console starts.
        let t0 = Instant::now();
        while !data.join("console/jwt.key").exists() {
            assert!(t0.elapsed() < Duration::from_secs(30));
            std::thread::sleep(Duration::from_millis(50));
        }
        gateway
    };
    let gateway = run();
    for key in keys {
        assert_eq!(mode(&data.join(key)), 0o600, "{key}");
    }
    assert_eq!(readable_by_others(&data), Vec::<String>::new());
    drop(gateway);
    // As an older version left them: everything readable by everyone.
    let mut pending = vec![data.clone()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let mode = if meta.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                pending.push(entry.unwrap().path());
            }
        }
    }
    assert!(readable_by_others(&data).len() > keys.len());
    let _gateway = run();
    for key in keys {
        assert_eq!(mode(&data.join(key)), 0o600, "{key}");
    }
    assert_eq!(readable_by_others(&data), Vec::<String>::new());
}
