//! Field connections changed while the gateway runs: a connection
//! removed, added again with another endpoint, turned into a hot pair and
//! disabled, through the store (as `uagate config import` and the console
//! store it) and through `Engine::reconfigure`; the untouched connection
//! and its subscribers never notice. Simulators as field servers, an
//! async-opcua client northbound, real loopback sockets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod fieldkit;

use std::time::{Duration, Instant};

use common::{bounded, TestGateway};
use fieldkit::{
    children, connect, field_toml, sim_ns_of_mount, sim_summary, start_sim, subscribe,
    wait_connected,
};
use opcua_types::{DataValue, NodeId, ObjectId, StatusCode, VariableId};
use tokio::sync::mpsc;
use uagate_server::{ReconfigureStatus, CONFIG_KEY};

/// One `[[field_servers]]` entry as the configuration type.
fn entry(name: &str, redundancy: &str, urls: &[&str]) -> uagate_config::FieldServer {
    let c = uagate_config::Config::from_toml(&field_toml(name, redundancy, urls)).unwrap();
    c.field_servers.into_iter().next().unwrap()
}

/// The values that arrive within `window`.
async fn drain(rx: &mut mpsc::UnboundedReceiver<DataValue>, window: Duration) -> Vec<DataValue> {
    let mut out = Vec::new();
    let end = Instant::now() + window;
    while let Ok(Some(dv)) = tokio::time::timeout_at(end.into(), rx.recv()).await {
        out.push(dv);
    }
    out
}

/// Waits (bounded) for a value with a good status; returns the values
/// seen before it.
async fn until_good(rx: &mut mpsc::UnboundedReceiver<DataValue>, what: &str) -> Vec<DataValue> {
    bounded(what, async {
        let mut before = Vec::new();
        loop {
            let dv = rx.recv().await.expect("subscription open");
            if dv.status.is_none_or(|s| s.is_good()) {
                return before;
            }
            before.push(dv);
        }
    })
    .await
}

fn good(dv: &DataValue) -> bool {
    dv.status.is_none_or(|s| s.is_good())
}

/// Stores the document as `uagate config import` does and waits for the
/// running gateway to apply it.
async fn import(gw: &TestGateway, config: &uagate_config::Config) -> ReconfigureStatus {
    let before = gw.engine().reconfigure_status();
    let text = toml::to_string(config).unwrap();
    gw.store
        .set_setting("test", CONFIG_KEY, &text)
        .await
        .expect("document stored");
    bounded("configuration change noticed", async {
        loop {
            let s = gw.engine().reconfigure_status();
            if s != before {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

#[tokio::test]
async fn field_connections_change_live_and_the_untouched_one_never_notices() {
    let tmp = tempfile::tempdir().unwrap();
    let sim_a = start_sim(tmp.path(), "a").await;
    let sim_b = start_sim(tmp.path(), "b").await;
    let sim_c = start_sim(tmp.path(), "c").await;
    let gw = TestGateway::start(&format!(
        "{}{}",
        field_toml("line1", "none", &[&sim_a.endpoint_url]),
        field_toml("line2", "none", &[&sim_b.endpoint_url])
    ))
    .await;
    wait_connected(&gw, "line1").await;
    wait_connected(&gw, "line2").await;
    let (s, _h) = connect(&gw, "live-change").await;
    let ns1 = sim_ns_of_mount(&s, "line1").await;
    let ns2 = sim_ns_of_mount(&s, "line2").await;
    let mut rx1 = subscribe(&s, NodeId::new(ns1, "Simulation.Counter"), 100).await;
    let mut rx2 = subscribe(&s, NodeId::new(ns2, "Simulation.Counter"), 100).await;
    until_good(&mut rx1, "line1 delivers").await;
    until_good(&mut rx2, "line2 delivers").await;
    let sessions_a = sim_summary(
        &sim_a,
        VariableId::Server_ServerDiagnostics_ServerDiagnosticsSummary_CumulatedSessionCount,
    );
    let attempts_a = gw.engine().field_reconnect_stats("line1").unwrap();
    let folder2 = NodeId::new(2, "Field.line2");
    assert!(children(&s, ObjectId::ObjectsFolder.into())
        .await
        .contains(&folder2));

    // 1. line2 removed, through the store like `uagate config import`.
    let mut config = gw.engine().applied_config();
    config.field_servers.retain(|f| f.name != "line2");
    let status = import(&gw, &config).await;
    assert!(
        matches!(&status, ReconfigureStatus::Applied(s) if s.iter().any(|s| s.starts_with("field_servers"))),
        "{status:?}"
    );
    assert!(gw.engine().field_status("line2").is_none());
    assert!(!children(&s, ObjectId::ObjectsFolder.into())
        .await
        .contains(&folder2));
    // Its item gets BadNodeIdUnknown once, then nothing.
    let after_removal = drain(&mut rx2, Duration::from_millis(1500)).await;
    let unknown: Vec<&DataValue> = after_removal
        .iter()
        .filter(|dv| dv.status == Some(StatusCode::BadNodeIdUnknown))
        .collect();
    assert_eq!(unknown.len(), 1, "{after_removal:?}");
    assert_eq!(
        after_removal.last().and_then(|dv| dv.status),
        Some(StatusCode::BadNodeIdUnknown),
        "nothing after the removal: {after_removal:?}"
    );
    // line1 goes on.
    assert!(drain(&mut rx1, Duration::from_millis(500))
        .await
        .iter()
        .any(good));

    // 2. line2 added again, now on the third server.
    config
        .field_servers
        .push(entry("line2", "none", &[&sim_c.endpoint_url]));
    let status = gw.engine().reconfigure(&config);
    assert!(
        matches!(status, ReconfigureStatus::Applied(_)),
        "{status:?}"
    );
    assert!(children(&s, ObjectId::ObjectsFolder.into())
        .await
        .contains(&folder2));
    wait_connected(&gw, "line2").await;
    // The same northbound item receives again, from the new server.
    until_good(&mut rx2, "line2 delivers again").await;
    assert_eq!(
        gw.engine().field_status("line2").unwrap().active_endpoint,
        Some(sim_c.endpoint_url.clone())
    );

    // 3. line2 changed from no redundancy to a hot pair: its items carry
    //    over to the new link without a bad value.
    config.field_servers.retain(|f| f.name != "line2");
    config.field_servers.push(entry(
        "line2",
        "hot",
        &[&sim_c.endpoint_url, &sim_b.endpoint_url],
    ));
    let status = gw.engine().reconfigure(&config);
    assert!(
        matches!(status, ReconfigureStatus::Applied(_)),
        "{status:?}"
    );
    wait_connected(&gw, "line2").await;
    let carried = drain(&mut rx2, Duration::from_millis(1500)).await;
    assert!(carried.iter().any(good), "{carried:?}");
    assert!(
        carried.iter().all(good),
        "no bad value on carry-over: {carried:?}"
    );
    let st = gw.engine().field_status("line2").unwrap();
    assert_eq!(st.servers.len(), 2, "{st:?}");

    // 4. line2 disabled: its item says so once.
    config
        .field_servers
        .iter_mut()
        .filter(|f| f.name == "line2")
        .for_each(|f| f.enabled = false);
    let status = gw.engine().reconfigure(&config);
    assert!(
        matches!(status, ReconfigureStatus::Applied(_)),
        "{status:?}"
    );
    let disabled = drain(&mut rx2, Duration::from_millis(1500)).await;
    assert_eq!(
        disabled
            .iter()
            .filter(|dv| dv.status == Some(StatusCode::BadOutOfService))
            .count(),
        1,
        "{disabled:?}"
    );
    assert_eq!(
        gw.engine().field_status("line2").map(|s| s.state),
        Some(uagate_field::ConnState::Disconnected)
    );

    // line1 was never touched: same session on its server, no reconnect,
    // and it delivered throughout.
    assert!(drain(&mut rx1, Duration::from_millis(500))
        .await
        .iter()
        .any(good));
    assert_eq!(
        sim_summary(
            &sim_a,
            VariableId::Server_ServerDiagnostics_ServerDiagnosticsSummary_CumulatedSessionCount,
        ),
        sessions_a,
        "no new session on the untouched field server"
    );
    assert_eq!(
        gw.engine()
            .field_reconnect_stats("line1")
            .unwrap()
            .attempts_ok,
        attempts_a.attempts_ok
    );
    gw.stop().await;
    sim_a.cancel();
    sim_b.cancel();
    sim_c.cancel();
}

#[tokio::test]
async fn a_field_connection_that_cannot_be_mounted_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), "a").await;
    let gw = TestGateway::start(&field_toml("line1", "none", &[&sim.endpoint_url])).await;
    wait_connected(&gw, "line1").await;
    let before = gw.engine().applied_config();
    // "Gateway" is taken under Objects by the gateway's own folder (the
    // configuration's validation refuses it too; the engine must hold
    // even without that).
    let mut config = before.clone();
    let mut taken = entry("line2", "none", &[&sim.endpoint_url]);
    taken.name = "Gateway".into();
    config.field_servers.push(taken);
    config.isolation.default_weight += 1;
    let status = gw.engine().reconfigure(&config);
    assert!(
        matches!(&status, ReconfigureStatus::Refused(e) if e.contains("Gateway")),
        "{status:?}"
    );
    assert_eq!(gw.engine().applied_config(), before, "nothing applied");
    assert!(gw.engine().field_status("Gateway").is_none());
    gw.stop().await;
    sim.cancel();
}

/// A change that needs a restart waits for it without holding back a later
/// change that alone is live: a field connection added after a server limit
/// was stored connects at once; the limit stays out of force and listed as
/// waiting. A field change stored together with a limit waits as a whole,
/// and so does a later field change (it touches the same part).
#[tokio::test]
async fn a_field_connection_added_while_a_restart_change_waits_connects_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let sim_a = start_sim(tmp.path(), "a").await;
    let sim_b = start_sim(tmp.path(), "b").await;
    let sim_c = start_sim(tmp.path(), "c").await;
    let gw = TestGateway::start(&field_toml("line1", "none", &[&sim_a.endpoint_url])).await;
    wait_connected(&gw, "line1").await;
    let start = gw.engine().applied_config();
    assert!(gw.engine().waiting_for_restart().is_empty());

    // 1. A server limit: waits for the restart.
    let mut config = start.clone();
    config.server.max_session_count -= 1;
    let status = import(&gw, &config).await;
    assert_eq!(
        status,
        ReconfigureStatus::RestartRequired(vec!["server.max_session_count".into()])
    );
    assert_eq!(
        gw.engine().waiting_for_restart(),
        vec!["server.max_session_count".to_string()]
    );

    // 2. Then line2 alone: connected now; the limit still waits.
    config
        .field_servers
        .push(entry("line2", "none", &[&sim_b.endpoint_url]));
    let status = import(&gw, &config).await;
    assert_eq!(
        status,
        ReconfigureStatus::Applied(vec!["field_servers".into()])
    );
    wait_connected(&gw, "line2").await;
    let applied = gw.engine().applied_config();
    assert_eq!(applied.field_servers, config.field_servers);
    assert_eq!(
        applied.server.max_session_count, start.server.max_session_count,
        "the waiting limit came in force without a restart"
    );
    assert_eq!(
        gw.engine().waiting_for_restart(),
        vec!["server.max_session_count".to_string()]
    );

    // 3. line3 stored together with another server limit: all of it waits.
    let mut together = config.clone();
    together
        .field_servers
        .push(entry("line3", "none", &[&sim_c.endpoint_url]));
    together.server.max_subscriptions_per_session += 1;
    let status = gw.engine().reconfigure(&together);
    assert!(
        matches!(&status, ReconfigureStatus::RestartRequired(r) if r.contains(&"server.max_subscriptions_per_session".to_string())),
        "{status:?}"
    );
    assert!(gw.engine().field_status("line3").is_none(), "half-applied");

    // 4. line1 disabled next: it touches `field_servers`, which the
    //    waiting change of step 3 touched too, so it waits with it (taking
    //    the part now would bring line3 in force without its limit).
    let mut later = together.clone();
    later.field_servers[0].enabled = false;
    let status = gw.engine().reconfigure(&later);
    assert!(
        matches!(status, ReconfigureStatus::RestartRequired(_)),
        "{status:?}"
    );
    assert!(gw.engine().field_status("line3").is_none(), "half-applied");
    assert_eq!(gw.engine().applied_config(), applied, "nothing applied");
    let waiting = gw.engine().waiting_for_restart();
    assert!(
        waiting.contains(&"field_servers".to_string())
            && waiting.contains(&"server.max_session_count".to_string()),
        "{waiting:?}"
    );
    gw.stop().await;
    for sim in [sim_a, sim_b, sim_c] {
        sim.cancel();
    }
}
