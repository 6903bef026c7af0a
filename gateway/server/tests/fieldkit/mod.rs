//! Shared pieces of the field connection tests (`field.rs`,
//! `field_chaos.rs`): simulators as field servers, a northbound client
//! session, namespace lookup and subscriptions. Every wait is bounded.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use opcua_client::{DataChangeCallback, IdentityToken, MonitoredItem, Session};
use opcua_types::{
    DataValue, MessageSecurityMode, MonitoredItemCreateRequest, NodeId, ReadValueId, StatusCode,
    TimestampsToReturn, UserTokenPolicy, VariableId, Variant,
};
use tokio::sync::mpsc;
use uagate_sim::{SimConfig, SimHandle};

use crate::common::{bounded, TestGateway};

/// A simulator (security None) for field connection tests; `name` picks its
/// PKI directory and application URI.
pub async fn start_sim(dir: &std::path::Path, name: &str) -> SimHandle {
    uagate_sim::start(SimConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        pki_dir: dir.join(format!("sim-{name}")),
        application_uri: format!("urn:uagate:sim:{name}"),
        security: false,
        update_interval: Duration::from_millis(50),
        max_nodes_per_read: 0,
    })
    .await
    .expect("simulator starts")
}

/// A northbound session (SecurityPolicy None, anonymous) to the gateway.
pub async fn connect(
    gw: &TestGateway,
    name: &str,
) -> (Arc<Session>, tokio::task::JoinHandle<StatusCode>) {
    let mut client = gw.client(name);
    let (session, event_loop) = bounded(
        "connect",
        client.connect_to_matching_endpoint(
            (
                gw.url.as_str(),
                "http://opcfoundation.org/UA/SecurityPolicy#None",
                MessageSecurityMode::None,
                UserTokenPolicy::anonymous(),
            ),
            IdentityToken::Anonymous,
        ),
    )
    .await
    .expect("endpoint");
    let h = event_loop.spawn();
    assert!(bounded("activate", session.wait_for_connection()).await);
    (session, h)
}

/// Index of namespace `uri` in the server's NamespaceArray.
pub async fn ns_of(session: &Session, uri: &str) -> u16 {
    let v = session
        .read(
            &[ReadValueId::from(NodeId::new(0, 2255u32))],
            TimestampsToReturn::Neither,
            0.0,
        )
        .await
        .unwrap();
    let Some(Variant::Array(a)) = &v[0].value else {
        panic!("NamespaceArray {v:?}")
    };
    let pos = a
        .values
        .iter()
        .position(|x| matches!(x, Variant::String(s) if s.as_ref() == uri))
        .unwrap_or_else(|| panic!("{uri} not in {:?}", a.values));
    pos as u16
}

/// Collects the data change values of one northbound subscription on `node`.
pub async fn subscribe(
    s: &Session,
    node: NodeId,
    interval_ms: u64,
) -> mpsc::UnboundedReceiver<DataValue> {
    let (tx, rx) = mpsc::unbounded_channel();
    let sub = s
        .create_subscription(
            Duration::from_millis(interval_ms),
            60,
            10,
            0,
            0,
            true,
            DataChangeCallback::new(move |dv: DataValue, _item: &MonitoredItem| {
                let _ = tx.send(dv);
            }),
        )
        .await
        .unwrap();
    let req = MonitoredItemCreateRequest {
        item_to_monitor: ReadValueId::from(node),
        monitoring_mode: opcua_types::MonitoringMode::Reporting,
        requested_parameters: opcua_types::MonitoringParameters {
            client_handle: 1,
            sampling_interval: interval_ms as f64,
            queue_size: 10,
            discard_oldest: true,
            ..Default::default()
        },
    };
    let r = s
        .create_monitored_items(sub, TimestampsToReturn::Both, vec![req])
        .await
        .unwrap();
    assert!(r[0].result.status_code.is_good(), "{r:?}");
    rx
}

/// A value of the simulator's diagnostics summary (session and
/// subscription counts).
pub fn sim_summary(sim: &SimHandle, id: VariableId) -> u32 {
    match sim
        .server_handle()
        .info()
        .summary()
        .get(id)
        .and_then(|dv| dv.value)
    {
        Some(Variant::UInt32(n)) => n,
        other => panic!("{id:?}: {other:?}"),
    }
}

/// Waits up to 5 s until field connection `name` is connected over `url`;
/// returns its status then.
pub async fn wait_active_on(gw: &TestGateway, name: &str, url: &str) -> uagate_field::FieldStatus {
    let t0 = Instant::now();
    loop {
        let st = gw.engine().field_status(name).unwrap();
        if st.active_endpoint.as_deref() == Some(url)
            && st.state == uagate_field::ConnState::Connected
        {
            return st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{name} not on {url}: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
