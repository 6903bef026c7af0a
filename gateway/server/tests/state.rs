//! Server state and ServiceLevel over the wire: RequestServerStateChange
//! (who may call it, what it changes, its event, persistence and audit),
//! the maintenance drain option and the operator override.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{data_changes, events, select, server_event_item, value_item, Chan, TestGateway};
use opcua_client::IdentityToken;
use opcua_types::{CallMethodResult, DateTime, LocalizedText, NodeId, StatusCode, Variant};
use uagate_store::Role;

const SERVICE_LEVEL: u32 = 2267;
const STATE: u32 = 2259;
const ESTIMATED_RETURN_TIME: u32 = 12885;
const ADMIN: &str = "root";
const ADMIN_PW: &str = "admin password 1";
const SUSPENDED: i32 = 3;
const FAILED: i32 = 1;
const RUNNING: i32 = 0;

/// An estimated return time an hour ahead, whole ticks so it survives the wire.
fn return_time() -> DateTime {
    let t = DateTime::now() + chrono::Duration::hours(1);
    DateTime::from(t.checked_ticks())
}

async fn request_state(
    chan: &Chan,
    token: &NodeId,
    state: i32,
    ert: DateTime,
    reason: &str,
) -> CallMethodResult {
    chan.call(
        token,
        NodeId::new(0, 2253u32),
        NodeId::new(0, 12886u32),
        vec![
            Variant::Int32(state),
            Variant::DateTime(Box::new(ert)),
            Variant::UInt32(0),
            Variant::LocalizedText(Box::new(LocalizedText::new("en", reason))),
            Variant::Boolean(false),
        ],
    )
    .await
}

async fn read(chan: &Chan, token: &NodeId, id: u32) -> Option<Variant> {
    chan.read_value(token, NodeId::new(0, id)).await.value
}

async fn service_level(chan: &Chan, token: &NodeId) -> u8 {
    match read(chan, token, SERVICE_LEVEL).await {
        Some(Variant::Byte(b)) => b,
        other => panic!("ServiceLevel {other:?}"),
    }
}

async fn state(chan: &Chan, token: &NodeId) -> i32 {
    match read(chan, token, STATE).await {
        Some(Variant::Int32(s)) => s,
        other => panic!("State {other:?}"),
    }
}

/// An administrator session on a Basic256Sha256 SignAndEncrypt channel.
/// Opens a channel for a new client and asserts that its CreateSession is
/// refused with BadServerHalted (the drained maintenance state); returns
/// the channel for a later attempt.
async fn newcomer_refused(gw: &TestGateway) -> Chan {
    let newcomer = gw
        .chan(
            "newcomer",
            opcua_crypto::SecurityPolicy::None,
            opcua_types::MessageSecurityMode::None,
        )
        .await;
    let refused = newcomer.create_session(60_000.0).await;
    assert_eq!(
        refused.err().map(|e| e.status()),
        Some(StatusCode::BadServerHalted)
    );
    newcomer
}

async fn admin_session(gw: &TestGateway, client: &str) -> (Chan, NodeId) {
    let chan = gw.secure_chan(client).await;
    let token = chan
        .session(IdentityToken::new_user_name(ADMIN, ADMIN_PW))
        .await;
    (chan, token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_by_admin_updates_state_level_and_notifies() {
    let gw = TestGateway::start("").await;
    gw.add_user(ADMIN, ADMIN_PW, Role::Admin).await;
    let (admin, admin_token) = admin_session(&gw, "admin").await;
    assert_eq!(service_level(&admin, &admin_token).await, 255);
    assert_eq!(state(&admin, &admin_token).await, RUNNING);

    // A second session watches ServiceLevel and the Server's events.
    let (watcher, wt) = gw.anon_session("watcher").await;
    let interval = Duration::from_millis(200);
    let sub = watcher
        .create_subscription(&wt, interval.as_millis() as f64, 300, 10)
        .await;
    let results = watcher
        .monitor(
            &wt,
            sub.subscription_id,
            vec![
                value_item(NodeId::new(0, SERVICE_LEVEL), 1, 0.0),
                server_event_item(
                    2,
                    vec![
                        select(2041, "EventType"),
                        select(2041, "Message"),
                        select(11446, "SystemState"),
                    ],
                ),
            ],
        )
        .await;
    assert!(
        results.iter().all(|r| r.status_code.is_good()),
        "{results:?}"
    );
    let initial = watcher
        .publish_until(&wt, Duration::from_secs(10), |r| {
            data_changes(r).into_iter().find(|(h, _)| *h == 1)
        })
        .await;
    assert_eq!(initial.1.value, Some(Variant::Byte(255)));

    let ert = return_time();
    let (outcome, (level_after, event)) = tokio::join!(
        async {
            // Let the watcher's Publish get queued first.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let started = Instant::now();
            let r = request_state(&admin, &admin_token, SUSPENDED, ert, "maintenance").await;
            (r, started)
        },
        async {
            let mut level = None;
            let mut event = None;
            watcher
                .publish_until(&wt, Duration::from_secs(10), |r| {
                    for (h, v) in data_changes(r) {
                        if h == 1 && v.value == Some(Variant::Byte(0)) {
                            level = Some(Instant::now());
                        }
                    }
                    for (h, fields) in events(r) {
                        assert_eq!(h, 2);
                        if fields.first() == Some(&Variant::from(NodeId::new(0, 11446u32))) {
                            event = Some(fields);
                        }
                    }
                    (level.is_some() && event.is_some()).then_some(())
                })
                .await;
            (level.unwrap(), event.unwrap())
        }
    );
    let (result, called_at) = outcome;
    assert_eq!(result.status_code, StatusCode::Good);
    let delay = level_after.saturating_duration_since(called_at);
    assert!(
        delay <= interval + Duration::from_millis(1500),
        "ServiceLevel 0 arrived after {delay:?}"
    );
    assert!(matches!(&event[1], Variant::LocalizedText(t) if !t.text.is_empty()));
    assert_eq!(event[2], Variant::Int32(SUSPENDED));

    assert_eq!(service_level(&admin, &admin_token).await, 0);
    assert_eq!(state(&admin, &admin_token).await, SUSPENDED);
    assert_eq!(
        read(&admin, &admin_token, ESTIMATED_RETURN_TIME).await,
        Some(Variant::DateTime(Box::new(ert)))
    );
    assert_eq!(gw.engine().service_level(), 0);

    // Audited in the change log under the administrator's name.
    let log = gw.store.change_log_since(0, 1000).await.unwrap();
    let entry = log
        .iter()
        .rev()
        .find(|e| e.kind == "setting.set" && e.payload.contains("server.requested_state"))
        .expect("state change in the change log");
    assert_eq!(entry.actor, ADMIN);

    // Failed is NoData (1); Running returns to the computed 255.
    let r = request_state(&admin, &admin_token, FAILED, DateTime::null(), "broken").await;
    assert_eq!(r.status_code, StatusCode::Good);
    assert_eq!(service_level(&admin, &admin_token).await, 1);
    assert_eq!(state(&admin, &admin_token).await, FAILED);
    let r = request_state(&admin, &admin_token, RUNNING, DateTime::null(), "").await;
    assert_eq!(r.status_code, StatusCode::Good);
    assert_eq!(service_level(&admin, &admin_token).await, 255);
    assert_eq!(state(&admin, &admin_token).await, RUNNING);
    admin.close().await;
    watcher.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_secure_admin_may_change_the_state() {
    let gw = TestGateway::start("").await;
    gw.add_user(ADMIN, ADMIN_PW, Role::Admin).await;
    gw.add_user("op", "operator password", Role::Operator).await;
    let ert = return_time();

    // An operator on SignAndEncrypt.
    let chan = gw.secure_chan("operator").await;
    let token = chan
        .session(IdentityToken::new_user_name("op", "operator password"))
        .await;
    let r = request_state(&chan, &token, SUSPENDED, ert, "no").await;
    assert_eq!(r.status_code, StatusCode::BadUserAccessDenied);
    chan.close().await;

    // An administrator on a None channel.
    let (chan, token) = gw.user_session("plain", ADMIN, ADMIN_PW).await;
    let r = request_state(&chan, &token, SUSPENDED, ert, "no").await;
    assert_eq!(r.status_code, StatusCode::BadUserAccessDenied);
    // Anonymous.
    let (anon, anon_token) = gw.anon_session("anon").await;
    let r = request_state(&anon, &anon_token, SUSPENDED, ert, "no").await;
    assert_eq!(r.status_code, StatusCode::BadUserAccessDenied);

    assert_eq!(service_level(&chan, &token).await, 255);
    assert_eq!(state(&chan, &token).await, RUNNING);
    assert_eq!(
        gw.store.setting("server.requested_state").await.unwrap(),
        None
    );
    chan.close().await;
    anon.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_refuses_new_sessions_when_configured() {
    let gw = TestGateway::start("[server]\nrefuse_sessions_in_maintenance = true\n").await;
    gw.add_user(ADMIN, ADMIN_PW, Role::Admin).await;
    let (admin, admin_token) = admin_session(&gw, "admin").await;
    let (existing, et) = gw.anon_session("existing").await;
    let r = request_state(&admin, &admin_token, SUSPENDED, return_time(), "drain").await;
    assert_eq!(r.status_code, StatusCode::Good);

    let newcomer = newcomer_refused(&gw).await;
    assert_eq!(existing.read_status(&et).await, StatusCode::Good);
    assert_eq!(service_level(&existing, &et).await, 0);

    let r = request_state(&admin, &admin_token, RUNNING, DateTime::null(), "").await;
    assert_eq!(r.status_code, StatusCode::Good);
    let again = newcomer.create_session(60_000.0).await;
    assert!(again.is_ok(), "sessions accepted again when Running");
    newcomer.close().await;
    existing.close().await;
    admin.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_does_not_refuse_sessions_by_default() {
    let gw = TestGateway::start("").await;
    gw.add_user(ADMIN, ADMIN_PW, Role::Admin).await;
    let (admin, admin_token) = admin_session(&gw, "admin").await;
    let r = request_state(&admin, &admin_token, SUSPENDED, return_time(), "").await;
    assert_eq!(r.status_code, StatusCode::Good);
    let (chan, token) = gw.anon_session("newcomer").await;
    assert_eq!(service_level(&chan, &token).await, 0);
    chan.close().await;
    admin.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requested_state_survives_a_restart() {
    let gw = TestGateway::start("").await;
    gw.add_user(ADMIN, ADMIN_PW, Role::Admin).await;
    let (admin, admin_token) = admin_session(&gw, "admin").await;
    let ert = return_time();
    let r = request_state(&admin, &admin_token, SUSPENDED, ert, "upgrade").await;
    assert_eq!(r.status_code, StatusCode::Good);
    admin.close().await;

    let gw = gw.restart().await;
    assert_eq!(gw.engine().service_level(), 0);
    let (chan, token) = gw.anon_session("after").await;
    assert_eq!(service_level(&chan, &token).await, 0);
    assert_eq!(state(&chan, &token).await, SUSPENDED);
    assert_eq!(
        read(&chan, &token, ESTIMATED_RETURN_TIME).await,
        Some(Variant::DateTime(Box::new(ert)))
    );
    chan.close().await;

    // Back to Running, and that is remembered too.
    let (admin, admin_token) = admin_session(&gw, "admin2").await;
    let r = request_state(&admin, &admin_token, RUNNING, DateTime::null(), "").await;
    assert_eq!(r.status_code, StatusCode::Good);
    admin.close().await;
    let gw = gw.restart().await;
    let (chan, token) = gw.anon_session("later").await;
    assert_eq!(service_level(&chan, &token).await, 255);
    assert_eq!(state(&chan, &token).await, RUNNING);
    chan.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_level_override_applies_only_while_running() {
    let gw = TestGateway::start("").await;
    gw.add_user(ADMIN, ADMIN_PW, Role::Admin).await;
    let (admin, admin_token) = admin_session(&gw, "admin").await;
    gw.engine().set_service_level_override(Some(150));
    assert_eq!(gw.engine().service_level(), 150);
    assert_eq!(service_level(&admin, &admin_token).await, 150);

    let r = request_state(&admin, &admin_token, SUSPENDED, return_time(), "").await;
    assert_eq!(r.status_code, StatusCode::Good);
    assert_eq!(gw.engine().service_level(), 0);
    assert_eq!(service_level(&admin, &admin_token).await, 0);

    let r = request_state(&admin, &admin_token, RUNNING, DateTime::null(), "").await;
    assert_eq!(r.status_code, StatusCode::Good);
    assert_eq!(service_level(&admin, &admin_token).await, 150);
    gw.engine().set_service_level_override(None);
    assert_eq!(service_level(&admin, &admin_token).await, 255);
    admin.close().await;
    gw.stop().await;
}

/// The console's drain: a maintenance state requested with `drain` refuses
/// new sessions even when the configuration does not; existing sessions
/// keep working, and the drain survives a restart with the state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_maintenance_state_refuses_new_sessions() {
    let gw = TestGateway::start("").await;
    let (existing, et) = gw.anon_session("existing").await;
    gw.engine()
        .change_server_state(
            "console-user",
            uagate_server::health::RequestedState {
                state: opcua_types::ServerState::Suspended,
                estimated_return_time: return_time(),
                seconds_till_shutdown: 0,
                reason: opcua_types::LocalizedText::new("", "swap"),
                drain: true,
            },
        )
        .await
        .unwrap();
    assert!(gw.engine().draining());
    let newcomer = newcomer_refused(&gw).await;
    assert_eq!(existing.read_status(&et).await, StatusCode::Good);
    // Persisted with the state: the stored request says drain.
    let stored = gw
        .engine()
        .store()
        .setting("server.requested_state")
        .await
        .unwrap()
        .unwrap();
    assert!(stored.contains("\"drain\":true"), "{stored}");
    // Running again: sessions are accepted.
    gw.engine()
        .change_server_state(
            "console-user",
            uagate_server::health::RequestedState {
                state: opcua_types::ServerState::Running,
                estimated_return_time: DateTime::null(),
                seconds_till_shutdown: 0,
                reason: opcua_types::LocalizedText::null(),
                drain: false,
            },
        )
        .await
        .unwrap();
    assert!(!gw.engine().draining());
    assert!(newcomer.create_session(60_000.0).await.is_ok());
    newcomer.close().await;
    existing.close().await;
    gw.stop().await;
}

/// With a pair installed, maintenance first lets the pair hand the
/// configuration leadership over and waits for it: while the hand-over
/// runs, clients still read Running and the ServiceLevel of before; once
/// it is done the level is 0. Only maintenance states (level 0) hand over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_waits_for_the_pair_to_hand_over_first() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let gw = TestGateway::start("").await;
    gw.add_user(ADMIN, ADMIN_PW, Role::Admin).await;
    let (admin, admin_token) = admin_session(&gw, "admin").await;
    let (watcher, wt) = gw.anon_session("watcher").await;
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<()>();
    let release = Arc::new(tokio::sync::Notify::new());
    let calls = Arc::new(AtomicUsize::new(0));
    let left = Arc::new(AtomicUsize::new(0));
    {
        let (release, calls, left) = (release.clone(), calls.clone(), left.clone());
        gw.engine()
            .set_handover(uagate_server::level::handover(move |entering| {
                let (started, release) = (started_tx.clone(), release.clone());
                if !entering {
                    left.fetch_add(1, Ordering::SeqCst);
                    return futures_util::future::Either::Left(async { None });
                }
                calls.fetch_add(1, Ordering::SeqCst);
                futures_util::future::Either::Right(async move {
                    let _ = started.send(());
                    release.notified().await;
                    Some("moved first".to_string())
                })
            }));
    }
    let before = service_level(&watcher, &wt).await;
    assert!(before > 0, "{before}");

    let call = request_state(&admin, &admin_token, SUSPENDED, return_time(), "swap");
    let during = async {
        tokio::time::timeout(Duration::from_secs(10), started.recv())
            .await
            .expect("the hand-over was never asked for");
        // The hand-over is still running: nothing has changed yet.
        let seen = (
            service_level(&watcher, &wt).await,
            state(&watcher, &wt).await,
        );
        release.notify_one();
        seen
    };
    let (result, seen) = tokio::join!(call, during);
    assert_eq!(result.status_code, StatusCode::Good);
    assert_eq!(seen, (before, RUNNING));
    assert_eq!(service_level(&watcher, &wt).await, 0);
    assert_eq!(state(&watcher, &wt).await, SUSPENDED);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // NoData states and Running do not hand over; they tell the pair the
    // appliance stands again.
    for s in [FAILED, RUNNING] {
        let r = request_state(&admin, &admin_token, s, DateTime::null(), "").await;
        assert_eq!(r.status_code, StatusCode::Good);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(left.load(Ordering::SeqCst), 2);
    assert_eq!(service_level(&watcher, &wt).await, before);

    // The console's path answers the hand-over's sentence.
    release.notify_one();
    let note = gw
        .engine()
        .change_server_state(
            "console-user",
            uagate_server::health::RequestedState {
                state: opcua_types::ServerState::Test,
                estimated_return_time: DateTime::null(),
                seconds_till_shutdown: 0,
                reason: LocalizedText::null(),
                drain: false,
            },
        )
        .await
        .unwrap();
    assert_eq!(note.as_deref(), Some("moved first"));
    assert_eq!(service_level(&watcher, &wt).await, 0);
    admin.close().await;
    watcher.close().await;
    gw.stop().await;
}
