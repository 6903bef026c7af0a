//! Field connections under faults: a TCP proxy between the gateway and the
//! simulator drops connections, stalls them, or accepts without ever
//! answering. The gateway must reconnect under its policy, answer
//! northbound calls within their timeout, and not pile up sessions on the
//! field server. A fake field server that refuses with an ERR carrying
//! `RetryAfterMs` checks that the hint bounds the next attempt, and so does
//! one that refuses CreateSession with a BadServerTooBusy ServiceFault whose
//! response header carries the hint. A slow link makes one server of a
//! redundant pair answer later than the other.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod fieldkit;
mod hand;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::TestGateway;
use fieldkit::{connect, ns_of, sim_summary, start_sim, subscribe, wait_active_on};
use opcua_client::services::Read;
use opcua_client::{Session, UARequest};
use opcua_types::{NodeId, ReadValueId, StatusCode, TimestampsToReturn, VariableId, Variant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use uagate_sim::SimHandle;

const FORWARD: u8 = 0;
/// Accept, read, never answer.
const BLACKHOLE: u8 = 1;
/// Forward nothing on existing connections (both directions stall).
const STALL: u8 = 2;

/// A TCP proxy with switchable faults.
struct Proxy {
    addr: std::net::SocketAddr,
    mode: Arc<AtomicU8>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

/// Copies bytes from `r` to `w` until either side closes, holding them
/// while the proxy is in STALL mode.
async fn pump(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    mode: Arc<AtomicU8>,
) {
    let mut buf = vec![0u8; 65536];
    while let Ok(n) = r.read(&mut buf).await {
        if n == 0 {
            break;
        }
        while mode.load(Ordering::SeqCst) == STALL {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if w.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
}

impl Proxy {
    async fn start(target: std::net::SocketAddr) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let mode = Arc::new(AtomicU8::new(FORWARD));
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (m, c) = (mode.clone(), conns.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((down, _)) = l.accept().await else {
                    return;
                };
                let mode = m.clone();
                let h = tokio::spawn(async move {
                    if mode.load(Ordering::SeqCst) == BLACKHOLE {
                        let mut down = down;
                        let mut buf = [0u8; 4096];
                        while let Ok(n) = down.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                        }
                        return;
                    }
                    let Ok(up) = TcpStream::connect(target).await else {
                        return;
                    };
                    let (dr, dw) = down.into_split();
                    let (ur, uw) = up.into_split();
                    let a = pump(dr, uw, mode.clone());
                    let b = pump(ur, dw, mode);
                    tokio::select! { _ = a => {}, _ = b => {} }
                });
                c.lock().await.push(h);
            }
        });
        Proxy {
            addr,
            mode,
            conns,
            accept,
        }
    }

    fn url(&self) -> String {
        format!("opc.tcp://127.0.0.1:{}/", self.addr.port())
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }

    /// Cuts every connection going through the proxy.
    async fn drop_all(&self) {
        for h in self.conns.lock().await.drain(..) {
            h.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

fn field_toml(url: &str) -> String {
    format!(
        "[[field_servers]]\nname = \"line1\"\nendpoints = [\"{url}\"]\nsecurity_mode = \"none\"\nsecurity_policy = \"None\"\nkeep_alive_interval = \"200ms\"\nrequest_timeout = \"1s\"\nsession_timeout = \"2s\"\n[field_servers.reconnect]\ninitial_delay = \"100ms\"\nmax_delay = \"500ms\"\njitter = 0.0\n"
    )
}

async fn wait_state(gw: &TestGateway, want: uagate_field::ConnState, within: Duration) {
    let t0 = Instant::now();
    loop {
        let st = gw.engine().field_status("line1").unwrap();
        if st.state == want {
            return;
        }
        assert!(
            t0.elapsed() < within,
            "not {want:?} within {within:?}: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Read with an explicit timeout hint; returns the value and how long it took.
async fn timed_read(
    s: &Session,
    node: &NodeId,
    hint: Duration,
) -> (opcua_types::DataValue, Duration) {
    let t0 = Instant::now();
    let r = Read::new(s)
        .nodes_to_read(vec![ReadValueId::from(node.clone())])
        .timestamps_to_return(TimestampsToReturn::Both)
        .timeout(hint)
        .send(s.channel())
        .await
        .expect("read answered");
    (r.results.unwrap().remove(0), t0.elapsed())
}

#[tokio::test]
async fn drop_stall_and_blackhole_are_survived_within_bounds() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), "chaos").await;
    let proxy = Proxy::start(sim.local_addr).await;
    let gw = TestGateway::start(&field_toml(&proxy.url())).await;
    wait_state(
        &gw,
        uagate_field::ConnState::Connected,
        Duration::from_secs(10),
    )
    .await;
    let (s, h) = connect(&gw, "chaos").await;
    let ns = ns_of(&s, uagate_sim::NAMESPACE_URI).await;
    let counter = NodeId::new(ns, "Simulation.Counter");
    let (dv, _) = timed_read(&s, &counter, Duration::from_secs(5)).await;
    assert!(dv.status.is_none_or(|st| st.is_good()), "{dv:?}");

    let rss_before = rss_kib();
    assert!(rss_before > 0, "VmRSS readable");
    // 1. Drop: five times in a row; the gateway re-activates its session
    // every time (issue 17: no new session).
    for n in 1..=5 {
        proxy.drop_all().await;
        let t0 = Instant::now();
        while gw.engine().field_status("line1").unwrap().reconnect_count < n {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "drop {n} not recovered"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        wait_state(
            &gw,
            uagate_field::ConnState::Connected,
            Duration::from_secs(5),
        )
        .await;
    }
    let (dv, _) = timed_read(&s, &counter, Duration::from_secs(5)).await;
    assert!(dv.status.is_none_or(|st| st.is_good()), "{dv:?}");
    assert!(gw.engine().field_status("line1").unwrap().reconnect_count >= 5);

    // 2. Blackhole: the connection is cut and every new one is accepted but
    // never answered. Northbound reads wait up to their timeout, then fail.
    proxy.set(BLACKHOLE);
    proxy.drop_all().await;
    wait_state(
        &gw,
        uagate_field::ConnState::Reconnecting,
        Duration::from_secs(5),
    )
    .await;
    let (dv, took) = timed_read(&s, &counter, Duration::from_millis(1500)).await;
    assert_eq!(dv.status, Some(StatusCode::BadNoCommunication));
    assert!(
        took >= Duration::from_millis(1000),
        "waited for the field server: {took:?}"
    );
    assert!(
        took < Duration::from_secs(3),
        "answered within the timeout: {took:?}"
    );
    // A local node is not held up by the field connection.
    let (dv, took) = timed_read(&s, &NodeId::new(0, 2258u32), Duration::from_millis(1500)).await;
    assert!(dv.status.is_none_or(|st| st.is_good()));
    assert!(took < Duration::from_millis(500), "{took:?}");

    // 3. Back to normal: reconnects.
    proxy.set(FORWARD);
    wait_state(
        &gw,
        uagate_field::ConnState::Connected,
        Duration::from_secs(10),
    )
    .await;

    // 4. Stall: bytes stop flowing both ways on the live connection; the
    // keep-alive notices and the gateway reconnects once traffic flows again.
    proxy.set(STALL);
    wait_state(
        &gw,
        uagate_field::ConnState::Reconnecting,
        Duration::from_secs(10),
    )
    .await;
    proxy.drop_all().await;
    proxy.set(FORWARD);
    wait_state(
        &gw,
        uagate_field::ConnState::Connected,
        Duration::from_secs(10),
    )
    .await;
    let (dv, _) = timed_read(&s, &counter, Duration::from_secs(5)).await;
    assert!(dv.status.is_none_or(|st| st.is_good()), "{dv:?}");

    // Memory stays bounded across the faults (the whole test process:
    // gateway, simulator and client; a leak per reconnect would show).
    let grown = rss_kib().saturating_sub(rss_before);
    assert!(grown < 64 * 1024, "resident memory grew by {grown} KiB");

    // 5. No sessions pile up on the field server: abandoned ones expire
    // (session_timeout 2 s) and one stays.
    let t0 = Instant::now();
    loop {
        let n = sim_summary(
            &sim,
            VariableId::Server_ServerDiagnostics_ServerDiagnosticsSummary_CurrentSessionCount,
        );
        if n == 1 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "field server still has {n} sessions"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = s.disconnect().await;
    let _ = h.await;
    gw.stop().await;
    sim.cancel();
}

/// A field server that refuses every connection with an ERR message
/// carrying a retry-after hint; records when each connection came.
async fn busy_server(
    hint_ms: u64,
) -> (
    std::net::SocketAddr,
    Arc<Mutex<Vec<Instant>>>,
    JoinHandle<()>,
) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let s2 = seen.clone();
    let h = tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = l.accept().await else {
                return;
            };
            s2.lock().await.push(Instant::now());
            tokio::spawn(async move {
                let mut hdr = [0u8; 8];
                if sock.read_exact(&mut hdr).await.is_err() {
                    return;
                }
                let len = u32::from_le_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]) as usize;
                let mut rest = vec![0u8; len.saturating_sub(8).min(65536)];
                let _ = sock.read_exact(&mut rest).await;
                let reason = format!("server busy RetryAfterMs={hint_ms}");
                let mut body = Vec::new();
                body.extend_from_slice(&StatusCode::BadTcpServerTooBusy.bits().to_le_bytes());
                body.extend_from_slice(&(reason.len() as i32).to_le_bytes());
                body.extend_from_slice(reason.as_bytes());
                let mut frame = b"ERRF".to_vec();
                frame.extend_from_slice(&((body.len() + 8) as u32).to_le_bytes());
                frame.extend_from_slice(&body);
                let _ = sock.write_all(&frame).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    (addr, seen, h)
}

/// Waits (at most 10 s) for three attempts recorded in `seen`, then checks
/// that each came at least 1.4 s after the previous one: the servers here
/// ask for 1.5 s, the policy alone would retry within 0.5 s.
async fn assert_attempts_spaced(gw: &TestGateway, seen: &Mutex<Vec<Instant>>, what: &str) {
    let t0 = Instant::now();
    while seen.lock().await.len() < 3 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "too few attempts: {:?}",
            gw.engine().field_status("line1")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let times = seen.lock().await.clone();
    for w in times.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            gap >= Duration::from_millis(1400),
            "{what} after {gap:?} despite RetryAfterMs=1500"
        );
    }
}

#[tokio::test]
async fn retry_after_hint_bounds_the_next_attempt() {
    let (addr, seen, server) = busy_server(1500).await;
    let url = format!("opc.tcp://127.0.0.1:{}/", addr.port());
    // Policy alone would retry after 100 ms, 200 ms, ...
    let gw = TestGateway::start(&field_toml(&url)).await;
    assert_attempts_spaced(&gw, &seen, "retried").await;
    // The client library reports an ERR before the ACK as a closed connection.
    let st = gw.engine().field_status("line1").unwrap();
    assert!(st.last_error.is_some_and(|e| e.is_bad()), "{st:?}");
    gw.stop().await;
    server.abort();
}

/// A field server (policy None) that lists its endpoint, opens channels,
/// and refuses every CreateSession with a BadServerTooBusy ServiceFault
/// whose response header carries `RetryAfterMs` = `hint_ms` (the
/// AdditionalParametersType form of Part 4 / the reference stack). Records
/// when each CreateSession arrived.
async fn busy_session_server(
    hint_ms: u32,
) -> (
    std::net::SocketAddr,
    Arc<Mutex<Vec<Instant>>>,
    JoinHandle<()>,
) {
    use opcua_core::comms::secure_channel::{Role, SecureChannel};
    use opcua_core::{RequestMessage, ResponseMessage};
    use opcua_types::{
        AdditionalParametersType, ContextOwned, EndpointDescription, ExtensionObject,
        GetEndpointsResponse, KeyValuePair, MessageSecurityMode, QualifiedName, ResponseHeader,
        ServiceFault, UserTokenPolicy,
    };
    use uagate_proto::{Event, Limits, ServerConnection};

    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let url = format!("opc.tcp://127.0.0.1:{}/", addr.port());
    let seen: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let s2 = seen.clone();
    let h = tokio::spawn(async move {
        let mut next_channel = 1u32;
        loop {
            let Ok((mut sock, _)) = l.accept().await else {
                return;
            };
            let channel = SecureChannel::new(
                Arc::new(opcua_core::sync::RwLock::new(
                    opcua_crypto::CertificateStore::new(std::path::Path::new(
                        "/nonexistent/uagate-busy-field",
                    )),
                )),
                Role::Server,
                Arc::new(opcua_core::sync::RwLock::new(ContextOwned::default())),
            );
            let mut conn = ServerConnection::new(
                Limits::default(),
                channel,
                Instant::now(),
                opcua_types::DateTime::now(),
            );
            let channel_id = next_channel;
            next_channel += 1;
            let seen = s2.clone();
            let url = url.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                loop {
                    let Ok(n) = sock.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    conn.handle_input(&buf[..n], Instant::now());
                    while let Some(ev) = conn.poll_event() {
                        match ev {
                            Event::OpenRequested(_) => conn.accept_open(channel_id, Instant::now()),
                            Event::Request {
                                request_id,
                                request,
                            } => {
                                let handle = request.request_header().request_handle;
                                let response: ResponseMessage = match *request {
                                    RequestMessage::GetEndpoints(_) => GetEndpointsResponse {
                                        response_header: ResponseHeader::new_good(handle),
                                        endpoints: Some(vec![EndpointDescription {
                                            endpoint_url: url.as_str().into(),
                                            security_mode: MessageSecurityMode::None,
                                            security_policy_uri:
                                                "http://opcfoundation.org/UA/SecurityPolicy#None"
                                                    .into(),
                                            user_identity_tokens: Some(vec![
                                                UserTokenPolicy::anonymous(),
                                            ]),
                                            transport_profile_uri: "http://opcfoundation.org/UA-Profile/Transport/uatcp-uasc-uabinary".into(),
                                            ..Default::default()
                                        }]),
                                    }
                                    .into(),
                                    RequestMessage::CreateSession(_) => {
                                        seen.lock().await.push(Instant::now());
                                        let mut header = ResponseHeader::new_service_result(
                                            handle,
                                            StatusCode::BadServerTooBusy,
                                        );
                                        header.additional_header =
                                            ExtensionObject::from_message(AdditionalParametersType {
                                                parameters: Some(vec![KeyValuePair {
                                                    key: QualifiedName::new(0, "RetryAfterMs"),
                                                    value: Variant::from(hint_ms),
                                                }]),
                                            });
                                        ServiceFault {
                                            response_header: header,
                                        }
                                        .into()
                                    }
                                    _ => ServiceFault {
                                        response_header: ResponseHeader::new_service_result(
                                            handle,
                                            StatusCode::BadServiceUnsupported,
                                        ),
                                    }
                                    .into(),
                                };
                                conn.send_response(request_id, response);
                            }
                            Event::Closed(_) => {
                                while let Some(out) = conn.poll_transmit() {
                                    let _ = sock.write_all(&out).await;
                                }
                                return;
                            }
                            Event::Renewed { .. } => {}
                        }
                    }
                    while let Some(out) = conn.poll_transmit() {
                        if sock.write_all(&out).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, seen, h)
}

#[tokio::test]
async fn busy_fault_header_hint_bounds_the_next_attempt() {
    let (addr, seen, server) = busy_session_server(1500).await;
    let url = format!("opc.tcp://127.0.0.1:{}/", addr.port());
    // The policy alone (100 ms initial, 500 ms max) would retry well inside 1.4 s.
    let gw = TestGateway::start(&field_toml(&url)).await;
    assert_attempts_spaced(&gw, &seen, "CreateSession retried").await;
    let st = gw.engine().field_status("line1").unwrap();
    assert_eq!(st.last_error, Some(StatusCode::BadServerTooBusy), "{st:?}");
    gw.stop().await;
    server.abort();
}

#[tokio::test]
async fn subscribers_see_bad_while_the_source_is_gone_then_good_again() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), "chaos").await;
    let proxy = Proxy::start(sim.local_addr).await;
    let gw = TestGateway::start(&field_toml(&proxy.url())).await;
    wait_state(
        &gw,
        uagate_field::ConnState::Connected,
        Duration::from_secs(10),
    )
    .await;
    let (s, h) = connect(&gw, "chaos").await;
    let ns = ns_of(&s, uagate_sim::NAMESPACE_URI).await;
    let mut rx = subscribe(&s, NodeId::new(ns, "Simulation.Counter"), 100).await;
    wait_for(true, &mut rx).await;
    proxy.set(BLACKHOLE);
    proxy.drop_all().await;
    let bad = wait_for(false, &mut rx).await;
    assert_eq!(status_of(&bad), StatusCode::BadNoCommunication);
    assert!(
        matches!(bad.value, Some(Variant::UInt32(_))),
        "last value kept: {bad:?}"
    );
    proxy.set(FORWARD);
    let good = wait_for(true, &mut rx).await;
    assert!(matches!(good.value, Some(Variant::UInt32(_))));
    let _ = s.disconnect().await;
    let _ = h.await;
    gw.stop().await;
    sim.cancel();
}

#[tokio::test]
async fn stop_is_bounded_while_a_connect_attempt_hangs() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), "chaos").await;
    let proxy = Proxy::start(sim.local_addr).await;
    proxy.set(BLACKHOLE);
    let gw = TestGateway::start(&field_toml(&proxy.url())).await;
    // Let an attempt start and hang on the silent peer.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        gw.engine().field_status("line1").unwrap().state,
        uagate_field::ConnState::Connecting
    );
    let t0 = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), gw.stop())
        .await
        .expect("gateway stop is bounded");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    sim.cancel();
}

/// Copies OPC UA TCP chunks from `r` to `w`: the first `pass` at once,
/// later ones each `delay` after it arrived (in order), or never (`None`).
async fn delay_after_chunks(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    pass: usize,
    delay: Option<Duration>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = async move {
        let mut seen = 0usize;
        loop {
            let mut chunk = vec![0u8; 8];
            if r.read_exact(&mut chunk).await.is_err() {
                return;
            }
            let size = u32::from_le_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]) as usize;
            chunk.resize(size.clamp(8, 1 << 20), 0);
            if r.read_exact(&mut chunk[8..]).await.is_err() {
                return;
            }
            let at = match delay {
                _ if seen < pass => Instant::now(),
                Some(delay) => Instant::now() + delay,
                None => {
                    seen += 1;
                    continue;
                }
            };
            seen += 1;
            if tx.send((at, chunk)).is_err() {
                return;
            }
        }
    };
    let write = async move {
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at.into()).await;
            if w.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    tokio::join!(read, write);
}

/// A proxy in front of `target` that passes everything the gateway sends
/// and, on each connection, the server's first four chunks (ACK,
/// OpenSecureChannel, CreateSession and ActivateSession responses) at
/// once, every later one `delay` late or never: a field server that takes
/// the session and then answers slowly (800 ms: within the gateway's 1 s
/// request timeout, but the first reads of a connect attempt outlast its
/// 3 s budget) or not at all.
async fn slow_after_activation(
    target: std::net::SocketAddr,
    delay: Option<Duration>,
) -> (String, JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("opc.tcp://127.0.0.1:{}/", l.local_addr().unwrap().port());
    let accept = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((down, _)) = l.accept().await {
            let Ok(up) = TcpStream::connect(target).await else {
                continue;
            };
            let (mut dr, dw) = down.into_split();
            let (ur, mut uw) = up.into_split();
            conns.push(tokio::spawn(async move {
                tokio::select! {
                    _ = tokio::io::copy(&mut dr, &mut uw) => {},
                    _ = delay_after_chunks(ur, dw, 4, delay) => {},
                }
            }));
        }
        for c in conns {
            c.abort();
        }
    });
    (url, accept)
}

#[tokio::test]
async fn a_connect_attempt_given_up_after_its_session_was_made_closes_that_session() {
    use opcua_types::VariableId::Server_ServerDiagnostics_ServerDiagnosticsSummary_CurrentSessionCount as SESSIONS;
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), "slow").await;
    let (url, proxy) =
        slow_after_activation(sim.local_addr, Some(Duration::from_millis(800))).await;
    // request_timeout 1 s: each attempt gives up after its 3 s budget.
    let gw = TestGateway::start(&field_toml(&url)).await;
    let timed_out = |gw: &TestGateway| {
        gw.engine()
            .field_history("line1")
            .unwrap_or_default()
            .iter()
            .filter(|e| e.kind == "failed" && e.detail.contains("BadTimeout"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while timed_out(&gw) < 3 {
        assert!(
            Instant::now() < deadline,
            "no three timed-out attempts in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Each given-up attempt closed the session it had made: at most the
    // current attempt's is left (a kept one would stay alive, its
    // keep-alives reaching the server, and they would add up).
    let settle = Instant::now() + Duration::from_secs(2);
    loop {
        let n = sim_summary(&sim, SESSIONS);
        if n <= 1 {
            break;
        }
        assert!(
            Instant::now() < settle,
            "{n} of the gateway's sessions on the field server after 3 given-up attempts"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Stopping closes the current attempt's session too, within the
    // request timeout.
    let t0 = Instant::now();
    gw.stop().await;
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "stop took {:?}",
        t0.elapsed()
    );
    let gone = Instant::now() + Duration::from_millis(500);
    while sim_summary(&sim, SESSIONS) != 0 {
        assert!(
            Instant::now() < gone,
            "{} sessions left on the field server after stop",
            sim_summary(&sim, SESSIONS)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.abort();
    sim.cancel();
}

#[tokio::test]
async fn attempts_failing_in_their_first_reads_back_off_and_give_up_under_the_policy() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), "unanswered").await;
    // The session is made, then its first read gets no answer: each attempt
    // fails after the 1 s request timeout and closes its session.
    let (url, proxy) = slow_after_activation(sim.local_addr, None).await;
    let toml = field_toml(&url).replace("jitter = 0.0\n", "jitter = 0.0\nmax_retries = 2\n");
    let gw = TestGateway::start(&toml).await;
    let kinds = |gw: &TestGateway| -> Vec<&'static str> {
        gw.engine()
            .field_history("line1")
            .unwrap_or_default()
            .iter()
            .map(|e| e.kind)
            .collect()
    };
    // Two failed attempts end the cycle: the failure of an attempt counts
    // once, and nothing starts the cycle over (a link that was never up
    // is not "lost").
    let deadline = Instant::now() + Duration::from_secs(20);
    while !kinds(&gw).contains(&"gave_up") {
        assert!(
            Instant::now() < deadline,
            "no gave_up within 20 s: {:?}",
            kinds(&gw)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let k = kinds(&gw);
    assert!(!k.contains(&"lost"), "{k:?}");
    assert_eq!(k.iter().filter(|k| **k == "failed").count(), 2, "{k:?}");
    gw.stop().await;
    proxy.abort();
    sim.cancel();
}

fn status_of(dv: &opcua_types::DataValue) -> StatusCode {
    dv.status.unwrap_or(StatusCode::Good)
}

/// The next value that is good (`want_good`) or bad, within 8 s.
async fn wait_for(
    want_good: bool,
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<opcua_types::DataValue>,
) -> opcua_types::DataValue {
    let t0 = Instant::now();
    loop {
        let left = Duration::from_secs(8).saturating_sub(t0.elapsed());
        let dv = tokio::time::timeout(left, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no {} value", if want_good { "good" } else { "bad" }))
            .expect("subscription alive");
        if status_of(&dv).is_good() == want_good {
            return dv;
        }
    }
}

/// A field connection `line1` over two proxies in front of one simulator,
/// and a northbound client subscribed to Simulation.Counter through it.
struct TwoPaths {
    a: Proxy,
    b: Proxy,
    gw: TestGateway,
    session: Arc<Session>,
    event_loop: JoinHandle<StatusCode>,
    rx: tokio::sync::mpsc::UnboundedReceiver<opcua_types::DataValue>,
}

impl TwoPaths {
    /// Starts the proxies and the gateway; `endpoints` gives the
    /// configuration lines that name the two proxy URLs (and the redundancy
    /// mode). Returns once the connection is up on the first URL and the
    /// subscription delivers.
    async fn start(sim: &SimHandle, endpoints: impl FnOnce(&str, &str) -> String) -> TwoPaths {
        let a = Proxy::start(sim.local_addr).await;
        let b = Proxy::start(sim.local_addr).await;
        let toml = format!(
            "[[field_servers]]\nname = \"line1\"\n{}\nsecurity_mode = \"none\"\nsecurity_policy = \"None\"\nkeep_alive_interval = \"200ms\"\nrequest_timeout = \"1s\"\n[field_servers.reconnect]\ninitial_delay = \"100ms\"\nmax_delay = \"500ms\"\n",
            endpoints(&a.url(), &b.url())
        );
        let gw = TestGateway::start(&toml).await;
        wait_state(
            &gw,
            uagate_field::ConnState::Connected,
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(
            gw.engine().field_status("line1").unwrap().active_endpoint,
            Some(a.url())
        );
        let (session, event_loop) = connect(&gw, "two-paths").await;
        let ns = ns_of(&session, uagate_sim::NAMESPACE_URI).await;
        let mut rx = subscribe(&session, NodeId::new(ns, "Simulation.Counter"), 100).await;
        wait_for(true, &mut rx).await;
        TwoPaths {
            a,
            b,
            gw,
            session,
            event_loop,
            rx,
        }
    }

    /// Disconnects the client and stops the gateway.
    async fn stop(self) {
        let _ = self.session.disconnect().await;
        let _ = self.event_loop.await;
        self.gw.stop().await;
    }
}

/// (Sessions, subscriptions) the field server has created so far.
fn created_on(sim: &SimHandle) -> (u32, u32) {
    (
        sim_summary(
            sim,
            VariableId::Server_ServerDiagnostics_ServerDiagnosticsSummary_CumulatedSessionCount,
        ),
        sim_summary(
            sim,
            VariableId::Server_ServerDiagnostics_ServerDiagnosticsSummary_CumulatedSubscriptionCount,
        ),
    )
}

#[tokio::test]
async fn a_lost_network_path_moves_the_same_session_to_the_alternate() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), "chaos").await;
    let mut t = TwoPaths::start(&sim, |a, b| {
        format!("endpoints = [{{ url = \"{a}\", alternates = [\"{b}\"] }}]")
    })
    .await;
    let before = created_on(&sim);

    // Path A goes silent and its connection is cut.
    t.a.set(BLACKHOLE);
    t.a.drop_all().await;
    let st = wait_active_on(&t.gw, "line1", &t.b.url()).await;
    assert!(st.reconnect_count >= 1, "{st:?}");
    // Values keep coming over path B...
    let dv = wait_for(true, &mut t.rx).await;
    assert!(matches!(dv.value, Some(Variant::UInt32(_))));
    // ...from the same session and subscriptions: none were created on the field server.
    assert_eq!(
        created_on(&sim),
        before,
        "(sessions, subscriptions) created: the session was re-activated, nothing recreated"
    );
    t.stop().await;
    sim.cancel();
}

/// A hot-and-mirrored set as a client sees it: two server addresses that
/// share their sessions (here one simulator behind two proxies). When the
/// active server reports Maintenance, the gateway moves its one session to
/// the other address by activating it there (Table 107): the field server
/// creates no session and no subscription, and values keep coming.
#[tokio::test]
async fn maintenance_on_a_mirrored_server_moves_the_same_session() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), "mirror").await;
    sim.set_redundancy_support(opcua_types::RedundancySupport::HotAndMirrored);
    let mut t = TwoPaths::start(&sim, |a, b| {
        format!("endpoints = [\"{a}\", \"{b}\"]\nredundancy = \"hot_and_mirrored\"")
    })
    .await;
    let before = created_on(&sim);
    let moves_before = t.gw.engine().field_status("line1").unwrap().reconnect_count;

    // Server A goes into Maintenance: the session moves to B. (B is the same
    // simulator, so it reports Maintenance too until the level is restored;
    // moving back and forth meanwhile is expected and must not create
    // sessions either.)
    sim.set_service_level(0);
    let st = wait_active_on(&t.gw, "line1", &t.b.url()).await;
    assert!(st.reconnect_count > moves_before, "{st:?}");
    // Both addresses report Maintenance: the gateway keeps looking for a
    // healthy server, but moves in a row are spaced by the reconnect backoff
    // (100, 200, 400, 500, 500 ms: 5 moves in 1.5 s), not repeated as fast
    // as the server answers (hundreds).
    let moves = || {
        t.gw.engine()
            .field_history("line1")
            .unwrap()
            .iter()
            .filter(|e| e.kind == "moved")
            .count()
    };
    let first = moves();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let in_a_row = moves() - first;
    assert!(
        (1..=6).contains(&in_a_row),
        "{in_a_row} more moves in 1.5 s while both servers were in Maintenance"
    );
    sim.set_service_level(255);
    // Values keep coming, from the same session and subscriptions.
    let dv = wait_for(true, &mut t.rx).await;
    assert!(matches!(dv.value, Some(Variant::UInt32(_))));
    tokio::time::sleep(Duration::from_millis(500)).await;
    wait_for(true, &mut t.rx).await;
    assert_eq!(
        created_on(&sim),
        before,
        "(sessions, subscriptions) created: the session was re-activated, nothing recreated"
    );
    // A healthy server again: the session stays where it is.
    let settled = moves();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(moves(), settled, "moved away from a healthy server");
    let st = t.gw.engine().field_status("line1").unwrap();
    assert_eq!(st.state, uagate_field::ConnState::Connected, "{st:?}");
    assert_eq!(st.service_level, Some(255), "{st:?}");
    t.stop().await;
    sim.cancel();
}

/// Issue 16: a restarted gateway in front of a healthy hot pair, both
/// servers up before it starts, makes the higher ServiceLevel server active
/// even when the other one answers first. A (255) is behind a slow link
/// (every chunk held 50 ms) and reports well after B (220); since a Healthy
/// server is never left, choosing B first would keep the pair on B for good.
#[tokio::test]
async fn a_restarted_gateway_starts_on_the_best_server_not_the_first_to_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let a = start_sim(tmp.path(), "a").await;
    let b = start_sim(tmp.path(), "b").await;
    for (sim, level) in [(&a, 255), (&b, 220)] {
        sim.set_redundancy_support(opcua_types::RedundancySupport::Hot);
        sim.set_service_level(level);
    }
    let slow = fieldkit::SlowLink::start(&a.endpoint_url).await;
    slow.set(Duration::from_millis(50));
    let toml = format!(
        "[[field_servers]]\nname = \"line1\"\nendpoints = [\"{}\", \"{}\"]\nredundancy = \"hot\"\nsecurity_mode = \"none\"\nsecurity_policy = \"None\"\nkeep_alive_interval = \"200ms\"\nrequest_timeout = \"3s\"\n[field_servers.reconnect]\ninitial_delay = \"100ms\"\nmax_delay = \"500ms\"\n",
        slow.url, b.endpoint_url
    );
    let gw = TestGateway::start(&toml).await;
    wait_state(
        &gw,
        uagate_field::ConnState::Connected,
        Duration::from_secs(15),
    )
    .await;
    let st = gw.engine().field_status("line1").unwrap();
    assert_eq!(
        st.active_endpoint.as_deref(),
        Some(slow.url.as_str()),
        "the first active server is the best one: {st:?}"
    );
    assert_eq!(st.service_level, Some(255), "{st:?}");
    assert_eq!(st.failover_count, 0, "{st:?}");
    // Both servers are connected and have reported; A stays active and no
    // failover happened.
    let t0 = Instant::now();
    loop {
        let st = gw.engine().field_status("line1").unwrap();
        if st
            .servers
            .iter()
            .all(|v| v.reachable && v.service_level.is_some())
        {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{st:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let st = gw.engine().field_status("line1").unwrap();
    assert_eq!(st.active_server, Some(0), "{st:?}");
    assert_eq!(st.failover_count, 0, "{st:?}");
    let history = gw.engine().field_history("line1").unwrap();
    assert!(!history.iter().any(|e| e.kind == "failover"), "{history:?}");
    gw.stop().await;
    a.cancel();
    b.cancel();
}

/// Resident set size of this test process in KiB (Linux).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// A relay in front of a field server that can be unplugged like a cable:
/// [`Cable::blip`] cuts every connection and closes the port (connects are
/// refused) for a while, then listens on the same port again. The field
/// server keeps running and keeps its sessions.
struct Cable {
    port: u16,
    target: std::net::SocketAddr,
    relay: std::sync::Mutex<Option<JoinHandle<()>>>,
}

impl Cable {
    async fn start(target: std::net::SocketAddr) -> Cable {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let relay = tokio::spawn(Cable::relay(l, target));
        Cable {
            port,
            target,
            relay: std::sync::Mutex::new(Some(relay)),
        }
    }

    fn url(&self) -> String {
        format!("opc.tcp://127.0.0.1:{}/", self.port)
    }

    /// Accepts and relays until aborted; aborting it drops the listener and
    /// every relayed connection (their tasks are owned by this one).
    async fn relay(l: TcpListener, target: std::net::SocketAddr) {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let Ok((down, _)) = l.accept().await else {
                return;
            };
            conns.spawn(async move {
                let Ok(up) = TcpStream::connect(target).await else {
                    return;
                };
                let (mut dr, mut dw) = down.into_split();
                let (mut ur, mut uw) = up.into_split();
                tokio::select! {
                    _ = tokio::io::copy(&mut dr, &mut uw) => {},
                    _ = tokio::io::copy(&mut ur, &mut dw) => {},
                }
            });
        }
    }

    /// Unplugs the cable for `down`, then plugs it back in.
    async fn blip(&self, down: Duration) {
        if let Some(r) = self.relay.lock().unwrap().take() {
            r.abort();
        }
        tokio::time::sleep(down).await;
        let l = TcpListener::bind(("127.0.0.1", self.port)).await.unwrap();
        *self.relay.lock().unwrap() = Some(tokio::spawn(Cable::relay(l, self.target)));
    }
}

impl Drop for Cable {
    fn drop(&mut self) {
        if let Some(r) = self.relay.lock().unwrap().take() {
            r.abort();
        }
    }
}

/// A northbound subscription on `node` (publishing and sampling every
/// `ms`, queue 100: deep enough for the burst a recovered link delivers);
/// its values go to the returned channel.
async fn subscribe_deep(
    session: &Session,
    node: NodeId,
    ms: u64,
) -> tokio::sync::mpsc::UnboundedReceiver<opcua_types::DataValue> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let sub = session
        .create_subscription(
            Duration::from_millis(ms),
            600,
            20,
            0,
            0,
            true,
            opcua_client::DataChangeCallback::new(
                move |dv: opcua_types::DataValue, _: &opcua_client::MonitoredItem| {
                    let _ = tx.send(dv);
                },
            ),
        )
        .await
        .unwrap();
    let created = session
        .create_monitored_items(
            sub,
            TimestampsToReturn::Both,
            vec![opcua_types::MonitoredItemCreateRequest {
                item_to_monitor: ReadValueId::from(node),
                monitoring_mode: opcua_types::MonitoringMode::Reporting,
                requested_parameters: opcua_types::MonitoringParameters {
                    client_handle: 1,
                    sampling_interval: ms as f64,
                    queue_size: 100,
                    discard_oldest: true,
                    ..Default::default()
                },
            }],
        )
        .await
        .unwrap();
    assert!(created[0].result.status_code.is_good(), "{created:?}");
    rx
}

/// Issue 17: a network blip costs no value. The field link re-activates
/// its session on a new channel (the field server creates no session and
/// no subscription), asks back what it missed with Republish, and the
/// southbound items' queues hold what was sampled meanwhile: a northbound
/// subscriber on a counter that changes every 200 ms sees every value,
/// once and in order, across ten 600 ms blips.
#[tokio::test]
async fn ten_network_blips_lose_no_value_and_keep_the_session() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = uagate_sim::start(uagate_sim::SimConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        pki_dir: tmp.path().join("sim-blips"),
        application_uri: "urn:uagate:sim:blips".into(),
        security: false,
        update_interval: Duration::from_millis(200),
        max_nodes_per_read: 0,
        max_monitored_items_per_subscription: 0,
    })
    .await
    .expect("simulator starts");
    let cable = Cable::start(sim.local_addr).await;
    let gw = TestGateway::start(&field_toml(&cable.url())).await;
    wait_state(
        &gw,
        uagate_field::ConnState::Connected,
        Duration::from_secs(10),
    )
    .await;
    let (session, event_loop) = connect(&gw, "blips").await;
    let ns = ns_of(&session, uagate_sim::NAMESPACE_URI).await;
    // Sampled four times per change: the northbound item sees each value.
    let mut rx = subscribe_deep(&session, NodeId::new(ns, "Simulation.Counter"), 50).await;
    wait_for(true, &mut rx).await;
    let before = created_on(&sim);

    for _ in 0..10 {
        cable.blip(Duration::from_millis(600)).await;
        tokio::time::sleep(Duration::from_millis(900)).await;
    }
    // Let the last recovered values through.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let mut values = Vec::new();
    let history = gw.engine().field_history("line1").unwrap_or_default();
    while let Ok(dv) = rx.try_recv() {
        assert!(
            status_of(&dv).is_good(),
            "a bad value: {dv:?}; history {history:?}"
        );
        match dv.value {
            Some(Variant::UInt32(v)) => values.push(v),
            other => panic!("not a counter value: {other:?}"),
        }
    }
    // 10 x 1.5 s at 5 changes/s: about 75 values.
    assert!(
        values.len() > 60,
        "only {} values: {values:?}",
        values.len()
    );
    let broken: Vec<(u32, u32)> = values
        .windows(2)
        .filter(|w| w[1] != w[0] + 1)
        .map(|w| (w[0], w[1]))
        .collect();
    assert!(
        broken.is_empty(),
        "values skipped or repeated across the blips (before, after): {broken:?}"
    );
    assert_eq!(
        created_on(&sim),
        before,
        "(sessions, subscriptions) created on the field server: the session was not kept"
    );
    let st = gw.engine().field_status("line1").unwrap();
    assert!(st.reconnect_count >= 10, "{st:?}");
    assert_eq!(st.notification_gaps, 0, "{st:?}");
    let _ = session.disconnect().await;
    let _ = event_loop.await;
    gw.stop().await;
    sim.cancel();
}

/// Issue 17: a field server that restarts loses its sessions, so what
/// changed meanwhile cannot be asked back. The gap is visible exactly once:
/// one BadNoCommunication value (with the last good value), then good
/// values from the restarted server, and the connection counts and lists
/// the gap.
#[tokio::test]
async fn a_field_server_restart_leaves_exactly_one_gap_marker() {
    let tmp = tempfile::tempdir().unwrap();
    let config = |listen: std::net::SocketAddr| uagate_sim::SimConfig {
        listen,
        pki_dir: tmp.path().join("sim-restart"),
        application_uri: "urn:uagate:sim:restart".into(),
        security: false,
        update_interval: Duration::from_millis(200),
        max_nodes_per_read: 0,
        max_monitored_items_per_subscription: 0,
    };
    let sim = uagate_sim::start(config("127.0.0.1:0".parse().unwrap()))
        .await
        .expect("simulator starts");
    let addr = sim.local_addr;
    let gw = TestGateway::start(&field_toml(&sim.endpoint_url)).await;
    wait_state(
        &gw,
        uagate_field::ConnState::Connected,
        Duration::from_secs(10),
    )
    .await;
    let (session, event_loop) = connect(&gw, "restart").await;
    let ns = ns_of(&session, uagate_sim::NAMESPACE_URI).await;
    let mut rx = subscribe(&session, NodeId::new(ns, "Simulation.Counter"), 100).await;
    wait_for(true, &mut rx).await;

    sim.cancel();
    sim.stopped().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sim = uagate_sim::start(config(addr))
        .await
        .expect("simulator restarts on the same port");
    // Good values from the restarted server (its counter starts over).
    let t0 = Instant::now();
    let mut statuses = Vec::new();
    let mut good_after_bad = 0;
    while good_after_bad < 5 {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "no good values after the restart: {statuses:?}"
        );
        let Ok(Some(dv)) = tokio::time::timeout(Duration::from_secs(15), rx.recv()).await else {
            panic!("subscription ended: {statuses:?}");
        };
        let st = status_of(&dv);
        statuses.push(st);
        if st.is_good() && statuses.iter().any(|s| !s.is_good()) {
            good_after_bad += 1;
        }
    }
    let bad: Vec<&StatusCode> = statuses.iter().filter(|s| !s.is_good()).collect();
    assert_eq!(
        bad,
        vec![&StatusCode::BadNoCommunication],
        "exactly one gap marker: {statuses:?}"
    );
    let st = gw.engine().field_status("line1").unwrap();
    assert_eq!(st.notification_gaps, 1, "{st:?}");
    let history = gw.engine().field_history("line1").unwrap_or_default();
    assert_eq!(
        history.iter().filter(|h| h.kind == "gap").count(),
        1,
        "{history:?}"
    );
    let _ = session.disconnect().await;
    let _ = event_loop.await;
    gw.stop().await;
    sim.cancel();
}

/// A field connection named `name` to `url` (the chaos tests' settings).
fn field_toml_named(name: &str, url: &str) -> String {
    field_toml(url).replacen("name = \"line1\"", &format!("name = \"{name}\""), 1)
}

/// Issue 17 item 3: Reads waiting for a field server that is reconnecting
/// give their execution slot back. With 4 execution slots, 50 Reads of a
/// dead PLC all wait at once (parked) and Reads of a healthy PLC and of a
/// local node are answered Good meanwhile; without parking the 50 would
/// hold the 4 slots in turn for their whole timeout and the healthy Reads
/// would time out behind them. The dead Reads end with BadNoCommunication.
#[tokio::test]
async fn fifty_reads_waiting_for_a_dead_plc_block_nobody() {
    let tmp = tempfile::tempdir().unwrap();
    let healthy = start_sim(tmp.path(), "healthy").await;
    let dead = start_sim(tmp.path(), "dead").await;
    let proxy = Proxy::start(dead.local_addr).await;
    let toml = format!(
        "[server]\nmax_request_thread_count = 4\nmax_session_count = 20\n\n{}{}",
        field_toml_named("line1", &healthy.endpoint_url),
        field_toml_named("line2", &proxy.url())
    );
    let gw = TestGateway::start(&toml).await;
    wait_state(
        &gw,
        uagate_field::ConnState::Connected,
        Duration::from_secs(10),
    )
    .await;
    let t0 = Instant::now();
    while gw.engine().field_status("line2").unwrap().state != uagate_field::ConnState::Connected {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "line2 not connected"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut sessions = Vec::new();
    for k in 0..10 {
        sessions.push(connect(&gw, &format!("poller{k}")).await);
    }
    let (s, _h) = connect(&gw, "healthy-reader").await;
    let ns = ns_of(&s, uagate_sim::NAMESPACE_URI).await;
    // Each mount publishes the simulator's namespace under its own index:
    // look both up through the mount folders.
    let healthy_ns = fieldkit::sim_ns_of_mount(&s, "line1").await;
    let dead_ns = fieldkit::sim_ns_of_mount(&s, "line2").await;
    assert!(
        ns == healthy_ns || ns == dead_ns,
        "{ns} {healthy_ns} {dead_ns}"
    );
    let healthy_node = NodeId::new(healthy_ns, "Simulation.Counter");
    let dead_node = NodeId::new(dead_ns, "Simulation.Counter");
    let local_node = common::current_time();
    let (dv, _) = timed_read(&s, &dead_node, Duration::from_secs(5)).await;
    assert!(dv.status.is_none_or(|st| st.is_good()), "{dv:?}");

    // The PLC dies: its connection is cut and nothing answers any more.
    proxy.set(BLACKHOLE);
    proxy.drop_all().await;
    let t0 = Instant::now();
    while gw.engine().field_status("line2").unwrap().reconnect_count == 0
        && gw
            .engine()
            .field_status("line2")
            .unwrap()
            .last_error
            .is_none()
    {
        assert!(t0.elapsed() < Duration::from_secs(5), "loss not seen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (parked_before, _) = gw.engine().field_request_stats("line2").unwrap();
    let mut polls = Vec::new();
    for k in 0..50 {
        let session = sessions[k % sessions.len()].0.clone();
        let node = dead_node.clone();
        polls.push(tokio::spawn(async move {
            let (dv, took) = timed_read(&session, &node, Duration::from_secs(4)).await;
            (dv.status.unwrap_or(StatusCode::Good), took)
        }));
    }
    // All fifty wait at once although only four may execute.
    let t0 = Instant::now();
    loop {
        let (parked, _) = gw.engine().field_request_stats("line2").unwrap();
        if parked - parked_before >= 50 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "only {} of 50 Reads of the dead PLC are waiting",
            parked - parked_before
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Meanwhile the healthy PLC and local nodes answer.
    for _ in 0..10 {
        for node in [&healthy_node, &local_node] {
            let (dv, _) = timed_read(&s, node, Duration::from_secs(1)).await;
            assert!(
                dv.status.is_none_or(|st| st.is_good()),
                "{node} while the dead PLC is polled: {dv:?}"
            );
        }
    }
    assert!(
        polls.iter().all(|p| !p.is_finished()),
        "the dead PLC's Reads wait for their timeout"
    );
    for p in polls {
        let (status, took) = p.await.unwrap();
        assert_eq!(status, StatusCode::BadNoCommunication);
        assert!(
            took < Duration::from_secs(4),
            "answered within its timeout: {took:?}"
        );
    }
    // The PLC comes back: Reads of it work again.
    proxy.set(FORWARD);
    let t0 = Instant::now();
    loop {
        let (dv, _) = timed_read(&s, &dead_node, Duration::from_secs(2)).await;
        if dv.status.is_none_or(|st| st.is_good()) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "line2 not back: {dv:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (session, h) in sessions {
        let _ = session.disconnect().await;
        h.abort();
    }
    gw.stop().await;
}

/// A gateway whose field connection `line1` goes through a fault [`Proxy`]
/// in front of `target`, with `server` (TOML) before the field section;
/// returned once the connection is Connected.
async fn behind_proxy(target: std::net::SocketAddr, server: &str) -> (Proxy, TestGateway) {
    let proxy = Proxy::start(target).await;
    let gw = TestGateway::start(&format!("{server}\n{}", field_toml(&proxy.url()))).await;
    wait_state(
        &gw,
        uagate_field::ConnState::Connected,
        Duration::from_secs(10),
    )
    .await;
    (proxy, gw)
}

/// Issue 17 item 4: a Read cut off by a lost connection is retried once on
/// the re-activated session and answered Good within its timeout; a Write
/// cut off the same way is not retried and gets BadServerNotConnected.
#[tokio::test]
async fn a_read_cut_off_by_a_lost_link_is_retried_once_and_a_write_is_not() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), "cut").await;
    let (proxy, gw) =
        behind_proxy(sim.local_addr, "[server]\nallow_anonymous_write = true\n").await;
    let (s, _h) = connect(&gw, "cut").await;
    let ns = ns_of(&s, uagate_sim::NAMESPACE_URI).await;
    let counter = NodeId::new(ns, "Simulation.Counter");
    let setpoint = NodeId::new(ns, "Simulation.Setpoint");
    let (dv, _) = timed_read(&s, &counter, Duration::from_secs(5)).await;
    assert!(dv.status.is_none_or(|st| st.is_good()), "{dv:?}");
    let session_before = sim_summary(
        &sim,
        VariableId::Server_ServerDiagnostics_ServerDiagnosticsSummary_CurrentSessionCount,
    );

    // Read: in flight when the connection stalls, then is cut.
    let (_, retried_before) = gw.engine().field_request_stats("line1").unwrap();
    proxy.set(STALL);
    let read = {
        let s = s.clone();
        let counter = counter.clone();
        tokio::spawn(async move { timed_read(&s, &counter, Duration::from_secs(5)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !read.is_finished(),
        "the Read waits for the stalled field server"
    );
    proxy.set(FORWARD);
    proxy.drop_all().await;
    let (dv, took) = read.await.unwrap();
    assert!(
        dv.status.is_none_or(|st| st.is_good()),
        "the cut-off Read is retried and answered: {dv:?}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    let (_, retried) = gw.engine().field_request_stats("line1").unwrap();
    assert_eq!(retried - retried_before, 1, "retried exactly once");

    // Write: not retried.
    proxy.set(STALL);
    let write = {
        let s = s.clone();
        let setpoint = setpoint.clone();
        tokio::spawn(async move {
            opcua_client::services::Write::new(&s)
                .nodes_to_write(vec![opcua_types::WriteValue {
                    node_id: setpoint,
                    attribute_id: 13,
                    index_range: Default::default(),
                    value: opcua_types::DataValue::new_now(7.5f64),
                }])
                .timeout(Duration::from_secs(5))
                .send(s.channel())
                .await
                .expect("write answered")
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !write.is_finished(),
        "the Write waits for the stalled field server"
    );
    proxy.set(FORWARD);
    proxy.drop_all().await;
    let w = write.await.unwrap();
    assert_eq!(
        w.results.unwrap(),
        vec![StatusCode::BadServerNotConnected],
        "a cut-off Write is not retried"
    );
    let (_, retried_after) = gw.engine().field_request_stats("line1").unwrap();
    assert_eq!(retried_after, retried, "the Write was not retried");
    // The session survived both cuts (re-activated, not re-created).
    assert_eq!(
        sim_summary(
            &sim,
            VariableId::Server_ServerDiagnostics_ServerDiagnosticsSummary_CurrentSessionCount
        ),
        session_before
    );
    gw.stop().await;
}

/// Issue 17 item 7: the one shared execution slot (4 minus the bootstrap,
/// reconnect and control reserves of `balanced`) is held by a Read waiting
/// for a stalled PLC and the shared request queue (2) is full. An ordinary Read
/// gets BadServerTooBusy; a Republish of the caller's activated session
/// (recovery work) is queued in the reconnect reserve, a second one finds
/// it taken; a Call of RequestServerStateChange (maintenance, control work)
/// is queued in the control reserve. Both are answered once the slot is
/// free, with their own service's status rather than BadServerTooBusy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_and_control_work_use_their_reserves_when_the_queue_is_full() {
    use opcua_core::{RequestMessage, ResponseMessage};
    use opcua_types::{
        CallMethodRequest, CallRequest, CreateSessionRequest, ReadRequest, RepublishRequest,
    };
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), "reserve").await;
    let (proxy, gw) = behind_proxy(
        sim.local_addr,
        "[server]\nmax_request_thread_count = 4\nmax_queued_request_count = 2\n[isolation]\nfair_scheduling = false\n",
    )
    .await;
    let (s, _h) = connect(&gw, "ns-lookup").await;
    let ns = ns_of(&s, uagate_sim::NAMESPACE_URI).await;
    let _ = s.disconnect().await;

    let mut c =
        hand::HandClient::open(hand::connect_from([127, 0, 0, 2], gw.addr).await, &gw.url).await;
    let created = c
        .call(
            CreateSessionRequest {
                request_header: c.header(),
                session_name: "reserves".into(),
                requested_session_timeout: 60_000.0,
                ..Default::default()
            }
            .into(),
        )
        .await;
    c.activate_anonymous(created).await;

    proxy.set(STALL);
    let mut header = c.header();
    header.timeout_hint = 3000;
    let slow = c
        .send(
            ReadRequest {
                request_header: header,
                max_age: 0.0,
                timestamps_to_return: TimestampsToReturn::Both,
                nodes_to_read: Some(vec![ReadValueId::from(NodeId::new(
                    ns,
                    "Simulation.Counter",
                ))]),
            }
            .into(),
        )
        .await;
    // The stalled Read holds the slot (its field server is connected, it
    // just does not answer).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let queued = [
        c.send(c.read_request()).await,
        c.send(c.read_request()).await,
    ];
    let busy_read = c.send(c.read_request()).await;
    let republish = |c: &hand::HandClient| -> RequestMessage {
        RepublishRequest {
            request_header: c.header(),
            subscription_id: 77,
            retransmit_sequence_number: 1,
        }
        .into()
    };
    let recovery = c.send(republish(&c)).await;
    let busy_recovery = c.send(republish(&c)).await;
    let control = c
        .send(
            CallRequest {
                request_header: c.header(),
                methods_to_call: Some(vec![CallMethodRequest {
                    object_id: NodeId::new(0, 2253u32),
                    method_id: NodeId::new(0, 12886u32),
                    input_arguments: Some(vec![
                        Variant::Int32(3),
                        Variant::Byte(0),
                        Variant::UInt32(0),
                        Variant::Boolean(false),
                    ]),
                }]),
            }
            .into(),
        )
        .await;
    let mut answers = std::collections::HashMap::new();
    for _ in 0..7 {
        let (id, r) = common::bounded("answers", c.recv_with_id()).await;
        answers.insert(id, r);
    }
    proxy.set(FORWARD);
    let too_busy = |r: &ResponseMessage| {
        matches!(r, ResponseMessage::ServiceFault(f)
            if f.response_header.service_result == StatusCode::BadServerTooBusy)
    };
    assert!(
        too_busy(&answers[&busy_read]),
        "shared queue full: {:?}",
        answers[&busy_read]
    );
    assert!(
        too_busy(&answers[&busy_recovery]),
        "the reconnect reserve holds one: {:?}",
        answers[&busy_recovery]
    );
    for id in queued {
        assert!(
            matches!(answers[&id], ResponseMessage::Read(_)),
            "{:?}",
            answers[&id]
        );
    }
    assert!(
        matches!(answers[&slow], ResponseMessage::Read(_)),
        "{:?}",
        answers[&slow]
    );
    assert!(
        !too_busy(&answers[&recovery]),
        "recovery work uses the reconnect reserve: {:?}",
        answers[&recovery]
    );
    assert!(
        matches!(answers[&control], ResponseMessage::Call(_)),
        "control work uses the control reserve: {:?}",
        answers[&control]
    );
    gw.stop().await;
}

/// Issue 17: an outage longer than the field server's item queues cover.
/// While the path is a black hole (connects accepted, never answered) the
/// link's re-activation attempts fail and are retried within its window,
/// so the session survives a 2.5 s outage; the simulator keeps 10 values
/// per item (1 s at 100 ms) and drops the rest, which it flags with the
/// Overflow bit. The subscriber sees exactly one gap marker
/// (UncertainNoCommunicationLastUsableValue) before the value that carries
/// the bit, and the connection counts and lists the gap: never silent.
#[tokio::test]
async fn an_outage_longer_than_the_field_queues_is_one_visible_gap_not_a_new_session() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = uagate_sim::start(uagate_sim::SimConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        pki_dir: tmp.path().join("sim-overflow"),
        application_uri: "urn:uagate:sim:overflow".into(),
        security: false,
        update_interval: Duration::from_millis(100),
        max_nodes_per_read: 0,
        max_monitored_items_per_subscription: 0,
    })
    .await
    .expect("simulator starts");
    let proxy = Proxy::start(sim.local_addr).await;
    let gw = TestGateway::start(
        &field_toml(&proxy.url()).replace("session_timeout = \"2s\"", "session_timeout = \"10s\""),
    )
    .await;
    wait_state(
        &gw,
        uagate_field::ConnState::Connected,
        Duration::from_secs(10),
    )
    .await;
    let (session, _event_loop) = connect(&gw, "overflow").await;
    let ns = ns_of(&session, uagate_sim::NAMESPACE_URI).await;
    let mut rx = subscribe_deep(&session, NodeId::new(ns, "Simulation.Counter"), 100).await;
    wait_for(true, &mut rx).await;
    let before = created_on(&sim);
    let gaps_before = gw.engine().field_status("line1").unwrap().notification_gaps;

    proxy.set(BLACKHOLE);
    proxy.drop_all().await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    proxy.set(FORWARD);
    // Recovered: good values flow again.
    let t0 = Instant::now();
    while gw.engine().field_status("line1").unwrap().reconnect_count == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "not recovered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let mut markers = 0;
    let mut values = Vec::new();
    while let Ok(dv) = rx.try_recv() {
        let st = status_of(&dv);
        if st == StatusCode::UncertainNoCommunicationLastUsableValue {
            markers += 1;
        } else {
            assert!(st.is_good(), "{dv:?}");
            if let Some(Variant::UInt32(v)) = dv.value {
                values.push(v);
            }
        }
    }
    let history = gw.engine().field_history("line1").unwrap_or_default();
    assert_eq!(markers, 1, "one gap marker; history {history:?}");
    assert!(
        values.windows(2).any(|w| w[1] > w[0] + 1),
        "values were dropped by the field server: {values:?}"
    );
    assert_eq!(created_on(&sim), before, "the session was kept");
    let st = gw.engine().field_status("line1").unwrap();
    assert_eq!(st.notification_gaps, gaps_before + 1, "{st:?}");
    assert!(
        history
            .iter()
            .any(|e| e.kind == "gap" && e.detail.contains("queue overflowed")),
        "{history:?}"
    );
    // The short queues were said when the item was created.
    assert!(
        history.iter().any(|e| e.kind == "short_queues"
            && e.detail.contains("keeps 10 values per item (asked 100)")),
        "{history:?}"
    );
    let _ = session.disconnect().await;
    gw.stop().await;
    sim.cancel();
}

/// Issue 17: an outage longer than the field session's timeout. The field
/// server ends the session but keeps its subscriptions (their lifetime
/// outlasts the session); the link makes a new session, moves the
/// subscriptions to it with TransferSubscriptions, and asks back what they
/// queued with Republish. The field server creates a session and no
/// subscription, and a northbound subscriber on a counter sees every value
/// once, in order, without a gap marker. (An anonymous session's
/// subscriptions move only over a signed channel: Part 4 §5.13.7.)
#[tokio::test]
async fn an_outage_that_outlives_the_field_session_moves_its_subscriptions_to_a_new_one() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = uagate_sim::start(uagate_sim::SimConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        pki_dir: tmp.path().join("sim-transfer"),
        application_uri: "urn:uagate:sim:transfer".into(),
        security: true,
        // Slow enough that the field server's item queues (10 values, 5 s)
        // hold the whole outage with room to spare.
        update_interval: Duration::from_millis(500),
        max_nodes_per_read: 0,
        max_monitored_items_per_subscription: 0,
    })
    .await
    .expect("simulator starts");
    let cable = Cable::start(sim.local_addr).await;
    let toml = field_toml(&cable.url())
        .replace("security_mode = \"none\"", "security_mode = \"sign\"")
        .replace(
            "security_policy = \"None\"",
            "security_policy = \"Basic256Sha256\"",
        );
    let gw = TestGateway::start(&toml).await;
    let der = std::fs::read(tmp.path().join("sim-transfer/own/cert.der")).unwrap();
    gw.store
        .trust_add("test", &der, uagate_store::CertKind::Trusted)
        .await
        .unwrap();
    wait_state(
        &gw,
        uagate_field::ConnState::Connected,
        Duration::from_secs(15),
    )
    .await;
    let (session, event_loop) = connect(&gw, "transfer").await;
    let ns = ns_of(&session, uagate_sim::NAMESPACE_URI).await;
    let mut rx = subscribe_deep(&session, NodeId::new(ns, "Simulation.Counter"), 100).await;
    wait_for(true, &mut rx).await;
    let (sessions_before, subscriptions_before) = created_on(&sim);

    // Longer than the session timeout (2 s): the field server ends the
    // session; the link keeps trying for up to twice that (plus the
    // request timeout), which leaves it more than 2 s to reconnect.
    cable.blip(Duration::from_millis(2600)).await;
    let t0 = Instant::now();
    while gw.engine().field_status("line1").unwrap().transferred == 0 {
        let history = gw.engine().field_history("line1").unwrap_or_default();
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "subscriptions not transferred: {history:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Let the recovered and the new values through.
    tokio::time::sleep(Duration::from_millis(2000)).await;

    let history = gw.engine().field_history("line1").unwrap_or_default();
    let mut values = Vec::new();
    while let Ok(dv) = rx.try_recv() {
        assert!(
            status_of(&dv).is_good(),
            "a bad value: {dv:?}; history {history:?}"
        );
        match dv.value {
            Some(Variant::UInt32(v)) => values.push(v),
            other => panic!("not a counter value: {other:?}"),
        }
    }
    // About 5 s at 2 changes/s.
    assert!(values.len() >= 8, "only {values:?}; history {history:?}");
    let broken: Vec<(u32, u32)> = values
        .windows(2)
        .filter(|w| w[1] != w[0] + 1)
        .map(|w| (w[0], w[1]))
        .collect();
    assert!(
        broken.is_empty(),
        "values skipped or repeated across the outage (before, after): {broken:?}; {values:?}; history {history:?}"
    );
    let (sessions_after, subscriptions_after) = created_on(&sim);
    assert_eq!(
        sessions_after,
        sessions_before + 1,
        "one new session on the field server; history {history:?}"
    );
    assert_eq!(
        subscriptions_after, subscriptions_before,
        "no subscription re-created: they moved; history {history:?}"
    );
    let st = gw.engine().field_status("line1").unwrap();
    assert_eq!(st.notification_gaps, 0, "{st:?}");
    assert!(
        history
            .iter()
            .any(|e| e.kind == "transferred" && e.detail.contains("moved to a new session")),
        "{history:?}"
    );
    assert!(!history.iter().any(|e| e.kind == "gap"), "{history:?}");
    let _ = session.disconnect().await;
    let _ = event_loop.await;
    gw.stop().await;
    sim.cancel();
}
