//! End-to-end tests of the simulator: start it on an ephemeral loopback port
//! and talk to it with a real async-opcua client over TCP.
#![allow(clippy::unwrap_used)]

use std::{future::Future, path::Path, sync::Arc, time::Duration};

use opcua_client::{Client, ClientBuilder, DataChangeCallback, IdentityToken, Session};
use opcua_crypto::SecurityPolicy;
use opcua_types::{
    AttributeId, CallMethodRequest, DataValue, MessageSecurityMode, MonitoredItemCreateRequest,
    NodeId, NumericRange, ReadValueId, StatusCode, TimestampsToReturn, UserTokenPolicy, VariableId,
    Variant, WriteValue,
};
use uagate_sim::{ids, RedundancySupport, SimConfig, SimHandle, NAMESPACE_URI};

const STEP: Duration = Duration::from_secs(20);

/// Run `fut` with a timeout so a hung server fails the test instead of hanging it.
async fn bounded<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(STEP, fut)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

async fn start_sim(pki: &Path, security: bool, application_uri: &str) -> SimHandle {
    let config = SimConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        pki_dir: pki.join("server"),
        application_uri: application_uri.to_owned(),
        security,
        update_interval: Duration::from_millis(50),
        max_nodes_per_read: 0,
        max_monitored_items_per_subscription: 0,
    };
    let sim = bounded("sim start", uagate_sim::start(config))
        .await
        .expect("simulator starts");
    assert!(sim.endpoint_url.starts_with("opc.tcp://127.0.0.1:"));
    assert_ne!(sim.local_addr.port(), 0);
    assert_eq!(
        sim.endpoint_url,
        format!("opc.tcp://127.0.0.1:{}/", sim.local_addr.port())
    );
    sim
}

fn client(pki: &Path) -> Client {
    ClientBuilder::new()
        .application_name("uagate-sim test client")
        .application_uri("urn:uagate:sim:test-client")
        .product_uri("urn:uagate:sim:test-client")
        .pki_dir(pki.join("client"))
        .create_sample_keypair(true)
        .trust_server_certs(true)
        .session_retry_limit(1)
        .request_timeout(Duration::from_secs(10))
        .client()
        .expect("client config")
}

async fn connect(
    pki: &Path,
    url: &str,
    policy: SecurityPolicy,
    mode: MessageSecurityMode,
) -> (Arc<Session>, tokio::task::JoinHandle<StatusCode>) {
    let mut client = client(pki);
    let (session, event_loop) = bounded(
        "connect",
        client.connect_to_matching_endpoint(
            (url, policy.to_str(), mode, UserTokenPolicy::anonymous()),
            IdentityToken::Anonymous,
        ),
    )
    .await
    .expect("endpoint matches");
    let loop_handle = event_loop.spawn();
    assert!(
        bounded("session activation", session.wait_for_connection()).await,
        "session connected"
    );
    (session, loop_handle)
}

async fn read(session: &Session, node: &NodeId) -> DataValue {
    let mut values = bounded(
        "read",
        session.read(
            &[ReadValueId::from(node.clone())],
            TimestampsToReturn::Both,
            0.0,
        ),
    )
    .await
    .expect("read service");
    assert_eq!(values.len(), 1);
    let dv = values.remove(0);
    assert!(
        dv.status.is_none_or(|s| s.is_good()),
        "reading {node}: bad status {:?}",
        dv.status
    );
    dv
}

fn value_of(dv: &DataValue) -> &Variant {
    assert!(
        dv.status.is_none_or(|s| s.is_good()),
        "bad status {:?}",
        dv.status
    );
    dv.value.as_ref().expect("value present")
}

async fn shutdown(
    sim: SimHandle,
    session: Arc<Session>,
    loop_handle: tokio::task::JoinHandle<StatusCode>,
) {
    let _ = bounded("disconnect", session.disconnect()).await;
    let _ = bounded("client event loop", loop_handle).await;
    sim.cancel();
    bounded("sim stop", sim.join())
        .await
        .expect("simulator stops cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn none_endpoint_read_write_call_service_level() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), false, "urn:uagate:sim").await;

    // Without security only the None endpoint is offered.
    let secure = bounded(
        "secure connect attempt",
        client(tmp.path()).connect_to_matching_endpoint(
            (
                sim.endpoint_url.as_str(),
                SecurityPolicy::Basic256Sha256.to_str(),
                MessageSecurityMode::SignAndEncrypt,
                UserTokenPolicy::anonymous(),
            ),
            IdentityToken::Anonymous,
        ),
    )
    .await;
    assert!(secure.is_err(), "secure endpoint offered with security off");

    let (session, loop_handle) = connect(
        tmp.path(),
        &sim.endpoint_url,
        SecurityPolicy::None,
        MessageSecurityMode::None,
    )
    .await;
    let ns = sim.namespace_index();

    // The namespace is published in the server's NamespaceArray at that index.
    let nsa = read(&session, &VariableId::Server_NamespaceArray.into()).await;
    let Variant::Array(arr) = value_of(&nsa) else {
        panic!("NamespaceArray is not an array: {nsa:?}");
    };
    assert_eq!(
        arr.values.get(usize::from(ns)),
        Some(&Variant::from(NAMESPACE_URI)),
        "namespace array {:?}",
        arr.values
    );

    // Counter increases over time.
    let counter = NodeId::new(ns, ids::COUNTER);
    let Variant::UInt32(first) = *value_of(&read(&session, &counter).await) else {
        panic!("Counter is not UInt32");
    };
    let mut second = first;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let Variant::UInt32(v) = *value_of(&read(&session, &counter).await) else {
            panic!("Counter is not UInt32");
        };
        second = v;
        if second > first {
            break;
        }
    }
    assert!(
        second > first,
        "counter did not increase: {first} -> {second}"
    );

    // The other simulated variables have the documented types and ranges.
    let Variant::Double(r) = *value_of(&read(&session, &NodeId::new(ns, ids::RANDOM)).await) else {
        panic!("Random is not Double");
    };
    assert!((0.0..=100.0).contains(&r), "Random out of range: {r}");
    let Variant::Double(s) = *value_of(&read(&session, &NodeId::new(ns, ids::SINE)).await) else {
        panic!("Sine is not Double");
    };
    assert!((-1.0..=1.0).contains(&s));
    assert!(matches!(
        value_of(&read(&session, &NodeId::new(ns, ids::TOGGLE)).await),
        Variant::Boolean(_)
    ));
    assert!(matches!(
        value_of(&read(&session, &NodeId::new(ns, ids::TEXT)).await),
        Variant::String(_)
    ));
    assert!(matches!(
        value_of(&read(&session, &NodeId::new(ns, ids::TIMESTAMP)).await),
        Variant::DateTime(_)
    ));
    assert!(matches!(
        value_of(&read(&session, &NodeId::new(ns, ids::RANDOM_EU_RANGE)).await),
        Variant::ExtensionObject(_)
    ));

    // Setpoint is writable and reads back; Counter is not writable.
    let setpoint = NodeId::new(ns, ids::SETPOINT);
    let write = |node: &NodeId, v: Variant| WriteValue {
        node_id: node.clone(),
        attribute_id: AttributeId::Value as u32,
        index_range: NumericRange::None,
        value: DataValue::value_only(v),
    };
    let results = bounded(
        "write",
        session.write(&[
            write(&setpoint, Variant::Double(42.5)),
            write(&counter, Variant::UInt32(7)),
        ]),
    )
    .await
    .expect("write service");
    assert_eq!(results.len(), 2);
    assert!(results[0].is_good(), "setpoint write: {}", results[0]);
    assert!(!results[1].is_good(), "counter write must fail");
    assert_eq!(
        value_of(&read(&session, &setpoint).await),
        &Variant::Double(42.5)
    );

    // Add(2, 3) = 5.
    let result = bounded(
        "call",
        session.call_one(CallMethodRequest {
            object_id: NodeId::new(ns, ids::FOLDER),
            method_id: NodeId::new(ns, ids::ADD),
            input_arguments: Some(vec![Variant::Double(2.0), Variant::Double(3.0)]),
        }),
    )
    .await
    .expect("call service");
    assert!(result.status_code.is_good(), "Add: {}", result.status_code);
    assert_eq!(result.output_arguments, Some(vec![Variant::Double(5.0)]));

    // Wrong argument count is rejected.
    let result = bounded(
        "call",
        session.call_one(CallMethodRequest {
            object_id: NodeId::new(ns, ids::FOLDER),
            method_id: NodeId::new(ns, ids::ADD),
            input_arguments: Some(vec![Variant::Double(2.0)]),
        }),
    )
    .await
    .expect("call service");
    assert!(!result.status_code.is_good());

    // ServiceLevel and RedundancySupport follow the handle.
    sim.set_service_level(100);
    assert_eq!(
        value_of(&read(&session, &VariableId::Server_ServiceLevel.into()).await),
        &Variant::Byte(100)
    );
    sim.set_service_level(7);
    assert_eq!(
        value_of(&read(&session, &VariableId::Server_ServiceLevel.into()).await),
        &Variant::Byte(7)
    );
    let redundancy: NodeId = VariableId::Server_ServerRedundancy_RedundancySupport.into();
    assert_eq!(
        value_of(&read(&session, &redundancy).await),
        &Variant::Int32(RedundancySupport::None as i32)
    );
    sim.set_redundancy_support(RedundancySupport::Warm);
    assert_eq!(
        value_of(&read(&session, &redundancy).await),
        &Variant::Int32(RedundancySupport::Warm as i32)
    );

    shutdown(sim, session, loop_handle).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secure_endpoint_sign_and_encrypt() {
    let tmp = tempfile::tempdir().unwrap();
    // A distinct ApplicationUri also enables the diagnostics node manager.
    let sim = start_sim(tmp.path(), true, "urn:uagate:sim:secure-test").await;
    assert!(tmp.path().join("server/own/cert.der").is_file());
    let (session, loop_handle) = connect(
        tmp.path(),
        &sim.endpoint_url,
        SecurityPolicy::Basic256Sha256,
        MessageSecurityMode::SignAndEncrypt,
    )
    .await;
    let setpoint = NodeId::new(sim.namespace_index(), ids::SETPOINT);
    assert_eq!(
        value_of(&read(&session, &setpoint).await),
        &Variant::Double(0.0)
    );
    let counter = NodeId::new(sim.namespace_index(), ids::COUNTER);
    assert!(matches!(
        value_of(&read(&session, &counter).await),
        Variant::UInt32(_)
    ));
    shutdown(sim, session, loop_handle).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_server_and_frees_port() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), false, "urn:uagate:sim").await;
    let addr = sim.local_addr;
    // An open client session must not keep the server alive.
    let (_session, loop_handle) = connect(
        tmp.path(),
        &sim.endpoint_url,
        SecurityPolicy::None,
        MessageSecurityMode::None,
    )
    .await;
    sim.cancel();
    bounded("sim stop", sim.join()).await.expect("clean stop");
    // Nothing is accepting any more: the port can be bound again.
    std::net::TcpListener::bind(addr).expect("port released after stop");
    loop_handle.abort();
}

#[tokio::test]
async fn zero_update_interval_is_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let config = SimConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        pki_dir: tmp.path().to_path_buf(),
        security: false,
        update_interval: Duration::ZERO,
        ..SimConfig::default()
    };
    let err = uagate_sim::start(config).await.unwrap_err();
    assert!(
        matches!(err, uagate_sim::SimError::InvalidConfig(_)),
        "{err}"
    );
}

#[tokio::test]
async fn port_in_use_is_a_bind_error() {
    let tmp = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let config = SimConfig {
        listen: taken.local_addr().unwrap(),
        pki_dir: tmp.path().to_path_buf(),
        security: false,
        ..SimConfig::default()
    };
    let err = uagate_sim::start(config).await.unwrap_err();
    assert!(matches!(err, uagate_sim::SimError::Bind { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_receives_counter_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), false, "urn:uagate:sim").await;
    let (session, loop_handle) = connect(
        tmp.path(),
        &sim.endpoint_url,
        SecurityPolicy::None,
        MessageSecurityMode::None,
    )
    .await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let sub = bounded(
        "create subscription",
        session.create_subscription(
            Duration::from_millis(100),
            100,
            10,
            0,
            0,
            true,
            DataChangeCallback::new(move |dv, _item| {
                let _ = tx.send(dv);
            }),
        ),
    )
    .await
    .expect("subscription created");
    let created = bounded(
        "create monitored items",
        session.create_monitored_items(
            sub,
            TimestampsToReturn::Both,
            vec![MonitoredItemCreateRequest::from(NodeId::new(
                sim.namespace_index(),
                ids::COUNTER,
            ))],
        ),
    )
    .await
    .expect("monitored item created");
    assert_eq!(created.len(), 1);

    let mut seen = Vec::new();
    while seen.len() < 3 {
        let dv = bounded("data change", rx.recv())
            .await
            .expect("callback alive");
        let Some(Variant::UInt32(v)) = dv.value else {
            panic!("unexpected notification {dv:?}");
        };
        seen.push(v);
    }
    assert!(
        seen.windows(2).all(|w| w[1] > w[0]),
        "counter notifications not increasing: {seen:?}"
    );
    shutdown(sim, session, loop_handle).await;
}
