//! Field connections end to end: uagate's simulator as the field server(s),
//! the gateway in between, an async-opcua client northbound, all over real
//! loopback sockets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod fieldkit;

use std::time::{Duration, Instant};

use common::{bounded, TestGateway};
use fieldkit::{
    connect, field_toml, ns_of, sim_summary, start_sim, subscribe, wait_active_on, wait_connected,
};
use opcua_client::DataChangeCallback;
use opcua_types::{
    BrowseDescription, BrowseDirection, BrowsePath, BrowseResultMask, CallMethodRequest, DataValue,
    MonitoredItemCreateRequest, NodeClassMask, NodeId, QualifiedName, ReadValueId, RelativePath,
    RelativePathElement, StatusCode, TimestampsToReturn, Variant, WriteValue,
};
use tokio::sync::mpsc;
use uagate_sim::SimConfig;

#[tokio::test]
async fn read_write_browse_call_translate_through_the_mount() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), "a").await;
    let gw = TestGateway::start(&format!(
        "[server]\nallow_anonymous_write = true\n{}",
        field_toml("line1", "none", &[&sim.endpoint_url])
    ))
    .await;
    wait_connected(&gw, "line1").await;
    let (s, h) = connect(&gw, "field-ops").await;
    let ns = ns_of(&s, uagate_sim::NAMESPACE_URI).await;
    assert!(
        ns >= 3,
        "field namespace appended after the gateway's: {ns}"
    );

    // Read
    let counter = NodeId::new(ns, "Simulation.Counter");
    let v = s
        .read(
            &[ReadValueId::from(counter.clone())],
            TimestampsToReturn::Both,
            0.0,
        )
        .await
        .unwrap();
    assert!(v[0].status.is_none_or(|st| st.is_good()), "{v:?}");
    assert!(matches!(v[0].value, Some(Variant::UInt32(_))), "{v:?}");
    // A node of another namespace index that the field server lacks.
    let v = s
        .read(
            &[ReadValueId::from(NodeId::new(ns, "Nope"))],
            TimestampsToReturn::Both,
            0.0,
        )
        .await
        .unwrap();
    assert_eq!(v[0].status, Some(StatusCode::BadNodeIdUnknown));

    // Browse the mount folder: the field server's objects, not its Server object.
    let folder = NodeId::new(2, "Field.line1");
    let br = s
        .browse(
            &[BrowseDescription {
                node_id: folder.clone(),
                browse_direction: BrowseDirection::Forward,
                reference_type_id: NodeId::new(0, 33u32),
                include_subtypes: true,
                node_class_mask: NodeClassMask::all().bits(),
                result_mask: BrowseResultMask::All as u32,
            }],
            0,
            None,
        )
        .await
        .unwrap();
    let refs = br[0].references.clone().unwrap_or_default();
    let names: Vec<String> = refs
        .iter()
        .map(|r| r.browse_name.name.to_string())
        .collect();
    assert!(names.contains(&"Simulation".to_string()), "{names:?}");
    assert!(
        !names.contains(&"Server".to_string()),
        "field Server object hidden: {names:?}"
    );
    let sim_folder = refs
        .iter()
        .find(|r| r.browse_name.name.as_ref() == "Simulation")
        .unwrap();
    assert_eq!(sim_folder.node_id.node_id, NodeId::new(ns, "Simulation"));
    assert_eq!(sim_folder.browse_name.namespace_index, ns);

    // Write and read back
    let setpoint = NodeId::new(ns, "Simulation.Setpoint");
    let w = s
        .write(&[WriteValue {
            node_id: setpoint.clone(),
            attribute_id: 13,
            index_range: Default::default(),
            value: DataValue::new_now(42.5f64),
        }])
        .await
        .unwrap();
    assert_eq!(w, vec![StatusCode::Good]);
    let v = s
        .read(
            &[ReadValueId::from(setpoint)],
            TimestampsToReturn::Both,
            0.0,
        )
        .await
        .unwrap();
    assert_eq!(v[0].value, Some(Variant::Double(42.5)));

    // Call
    let r = s
        .call_one(CallMethodRequest {
            object_id: NodeId::new(ns, "Simulation"),
            method_id: NodeId::new(ns, "Simulation.Add"),
            input_arguments: Some(vec![Variant::Double(2.0), Variant::Double(3.5)]),
        })
        .await
        .unwrap();
    assert_eq!(r.status_code, StatusCode::Good, "{r:?}");
    assert_eq!(r.output_arguments, Some(vec![Variant::Double(5.5)]));

    // Translate across the mount: Objects / 2:line1 / ns:Simulation / ns:Counter
    let el = |ns: u16, name: &str| RelativePathElement {
        reference_type_id: NodeId::new(0, 33u32),
        is_inverse: false,
        include_subtypes: true,
        target_name: QualifiedName::new(ns, name),
    };
    let t = s
        .translate_browse_paths_to_node_ids(&[BrowsePath {
            starting_node: NodeId::new(0, 85u32),
            relative_path: RelativePath {
                elements: Some(vec![
                    el(2, "line1"),
                    el(ns, "Simulation"),
                    el(ns, "Counter"),
                ]),
            },
        }])
        .await
        .unwrap();
    assert_eq!(t[0].status_code, StatusCode::Good, "{t:?}");
    assert_eq!(t[0].targets.as_ref().unwrap()[0].target_id.node_id, counter);

    // Gateway status nodes
    let st = s
        .read(
            &[ReadValueId::from(NodeId::new(2, "FieldStatus.line1.State"))],
            TimestampsToReturn::Neither,
            0.0,
        )
        .await
        .unwrap();
    assert_eq!(st[0].value, Some(Variant::from("Connected")));

    let _ = s.disconnect().await;
    let _ = h.await;
    gw.stop().await;
    sim.cancel();
}

/// Paths that start on a mounted node and go back up through the mount
/// folder resolve like any other: to the folder itself (by the name the
/// gateway gives it), and on up into the gateway's own nodes and down
/// again, although no single server knows both sides.
#[tokio::test]
async fn translate_goes_up_out_of_a_mount_and_back() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), "a").await;
    let gw = TestGateway::start(&field_toml("line1", "none", &[&sim.endpoint_url])).await;
    wait_connected(&gw, "line1").await;
    let (s, h) = connect(&gw, "field-up").await;
    let ns = ns_of(&s, uagate_sim::NAMESPACE_URI).await;
    let step = |inverse: bool, ns: u16, name: &str| RelativePathElement {
        reference_type_id: NodeId::new(0, 33u32),
        is_inverse: inverse,
        include_subtypes: true,
        target_name: QualifiedName::new(ns, name),
    };
    let up = |ns: u16, name: &str| step(true, ns, name);
    let down = |ns: u16, name: &str| step(false, ns, name);
    let from_counter = |elements: Vec<RelativePathElement>| BrowsePath {
        starting_node: NodeId::new(ns, "Simulation.Counter"),
        relative_path: RelativePath {
            elements: Some(elements),
        },
    };
    // The mount folder's id, as the gateway's Objects folder lists it.
    let t = s
        .translate_browse_paths_to_node_ids(&[BrowsePath {
            starting_node: NodeId::new(0, 85u32),
            relative_path: RelativePath {
                elements: Some(vec![down(2, "line1")]),
            },
        }])
        .await
        .unwrap();
    let folder = t[0].targets.as_ref().unwrap()[0].target_id.node_id.clone();
    let paths = [
        // Up to the folder.
        from_counter(vec![up(ns, "Simulation"), up(2, "line1")]),
        // On up to the gateway's Objects folder.
        from_counter(vec![up(ns, "Simulation"), up(2, "line1"), up(0, "Objects")]),
        // Up and down into the gateway's own nodes.
        from_counter(vec![
            up(ns, "Simulation"),
            up(2, "line1"),
            up(0, "Objects"),
            down(0, "Server"),
            down(0, "ServerStatus"),
        ]),
        // Up to the folder and down the same mount again.
        from_counter(vec![
            up(ns, "Simulation"),
            up(2, "line1"),
            up(0, "Objects"),
            down(2, "line1"),
            down(ns, "Simulation"),
            down(ns, "Counter"),
        ]),
        // A name that is not there on the way: no match, as before.
        from_counter(vec![up(ns, "Simulation"), up(2, "line1"), up(0, "Nowhere")]),
        // A start that is not there: not resolved (the field server's
        // word for it).
        BrowsePath {
            starting_node: NodeId::new(ns, "Nope"),
            relative_path: RelativePath {
                elements: Some(vec![up(2, "line1"), up(0, "Objects")]),
            },
        },
    ];
    let t = s.translate_browse_paths_to_node_ids(&paths).await.unwrap();
    let target = |i: usize| {
        assert_eq!(t[i].status_code, StatusCode::Good, "path {i}: {:?}", t[i]);
        let targets = t[i].targets.as_ref().unwrap();
        assert_eq!(targets.len(), 1, "path {i}: {targets:?}");
        assert_eq!(targets[0].remaining_path_index, u32::MAX);
        targets[0].target_id.node_id.clone()
    };
    assert_eq!(target(0), folder);
    assert_eq!(target(1), NodeId::new(0, 85u32));
    assert_eq!(target(2), NodeId::new(0, 2256u32));
    assert_eq!(target(3), NodeId::new(ns, "Simulation.Counter"));
    assert_eq!(t[4].status_code, StatusCode::BadNoMatch, "{:?}", t[4]);
    assert!(
        [StatusCode::BadNodeIdUnknown, StatusCode::BadNoMatch].contains(&t[5].status_code),
        "{:?}",
        t[5]
    );
    let _ = s.disconnect().await;
    let _ = h.await;
    gw.stop().await;
    sim.cancel();
}

/// Paths that go up and down inside a mount and end on a name that is not
/// there are walked again, but one request's walks make a bounded number of
/// calls to the field server, not one per element of every path.
#[tokio::test]
async fn walking_paths_cost_the_field_server_a_bounded_number_of_calls() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), "a").await;
    let link = fieldkit::SlowLink::start(&sim.endpoint_url).await;
    let gw = TestGateway::start(&field_toml("line1", "none", &[&link.url])).await;
    wait_connected(&gw, "line1").await;
    let (s, h) = connect(&gw, "field-walks").await;
    let ns = ns_of(&s, uagate_sim::NAMESPACE_URI).await;
    let step = |inverse: bool, name: &str| RelativePathElement {
        reference_type_id: NodeId::new(0, 33u32),
        is_inverse: inverse,
        include_subtypes: true,
        target_name: QualifiedName::new(ns, name),
    };
    // 20 paths of 21 elements: up and down ten times, then nowhere.
    let path = || {
        let mut elements = Vec::new();
        for _ in 0..10 {
            elements.push(step(true, "Simulation"));
            elements.push(step(false, "Counter"));
        }
        elements.push(step(false, "Nowhere"));
        BrowsePath {
            starting_node: NodeId::new(ns, "Simulation.Counter"),
            relative_path: RelativePath {
                elements: Some(elements),
            },
        }
    };
    let paths: Vec<BrowsePath> = (0..20).map(|_| path()).collect();
    let before = link.replies();
    let t = s.translate_browse_paths_to_node_ids(&paths).await.unwrap();
    let calls = link.replies() - before;
    assert!(
        t.iter().all(|r| r.status_code == StatusCode::BadNoMatch),
        "{t:?}"
    );
    // The first pass (one call) and at most 32 walking calls, with room
    // for a keep-alive; without the bound it was 20 x 21.
    assert!(
        calls <= 40,
        "{calls} replies from the field server for one request"
    );
    let _ = s.disconnect().await;
    let _ = h.await;
    gw.stop().await;
    sim.cancel();
}

/// The node ids of a Browse result's references, in order.
fn ref_ids(r: &opcua_types::BrowseResult) -> Vec<NodeId> {
    r.references
        .iter()
        .flatten()
        .map(|r| r.node_id.node_id.clone())
        .collect()
}

/// BrowseNext through the mount: the field server's continuation points
/// come back wrapped and page through exactly the references one Browse
/// returns; one BrowseNext can mix them with the gateway's own; a released
/// continuation point and one naming a mount that does not exist are
/// refused.
#[tokio::test]
async fn browse_next_pages_through_the_mount() {
    use opcua_types::ByteString;
    use uagate_field::proxy::CP_MARK;
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), "a").await;
    let gw = TestGateway::start(&field_toml("line1", "none", &[&sim.endpoint_url])).await;
    wait_connected(&gw, "line1").await;
    let (s, h) = connect(&gw, "field-browse").await;
    let ns = ns_of(&s, uagate_sim::NAMESPACE_URI).await;
    let forward = |node_id: NodeId| BrowseDescription {
        node_id,
        browse_direction: BrowseDirection::Forward,
        reference_type_id: NodeId::new(0, 33u32),
        include_subtypes: true,
        node_class_mask: NodeClassMask::all().bits(),
        result_mask: BrowseResultMask::All as u32,
    };
    let folder = forward(NodeId::new(ns, "Simulation"));
    let all = s
        .browse(std::slice::from_ref(&folder), 0, None)
        .await
        .unwrap();
    let all = ref_ids(&all[0]);
    assert!(all.len() >= 8, "{all:?}");
    assert!(all.iter().all(|id| id.namespace == ns), "{all:?}");

    // Pages of two, to the end.
    let mut r = s
        .browse(std::slice::from_ref(&folder), 2, None)
        .await
        .unwrap()
        .remove(0);
    let mut paged = Vec::new();
    let mut pages = 1;
    loop {
        assert_eq!(r.status_code, StatusCode::Good, "page {pages}: {r:?}");
        let ids = ref_ids(&r);
        assert!(ids.len() <= 2, "page {pages}: {ids:?}");
        paged.extend(ids);
        if r.continuation_point.is_null_or_empty() {
            break;
        }
        assert_eq!(
            r.continuation_point.value.as_ref().unwrap()[0],
            CP_MARK,
            "a field continuation point is wrapped"
        );
        assert!(pages < 20, "BrowseNext does not end");
        r = s
            .browse_next(false, &[r.continuation_point.clone()])
            .await
            .unwrap()
            .remove(0);
        pages += 1;
    }
    // The field server does not keep one order between Browse calls:
    // compare as sets, with nothing twice.
    let sorted = |mut v: Vec<NodeId>| {
        v.sort_by_key(|id| id.to_string());
        v
    };
    let (paged, all) = (sorted(paged), sorted(all));
    assert!(paged.windows(2).all(|w| w[0] != w[1]), "{paged:?}");
    assert_eq!(paged, all);
    assert!(pages >= all.len() / 2, "{pages} pages for {}", all.len());

    // One BrowseNext with a gateway continuation point and a field one.
    let both = s
        .browse(&[forward(NodeId::new(0, 2253u32)), folder.clone()], 1, None)
        .await
        .unwrap();
    let cps: Vec<ByteString> = both.iter().map(|r| r.continuation_point.clone()).collect();
    assert!(cps.iter().all(|cp| !cp.is_null_or_empty()), "{both:?}");
    assert_ne!(
        cps[0].value.as_ref().unwrap()[0],
        CP_MARK,
        "local stays local"
    );
    let next = s.browse_next(false, &cps).await.unwrap();
    assert_eq!(next.len(), 2);
    assert_eq!(next[0].status_code, StatusCode::Good, "{next:?}");
    assert_eq!(next[1].status_code, StatusCode::Good, "{next:?}");
    // Each page-2 result in its own place: a field reference after the
    // field page 1, a Server object reference after the local page 1.
    let (field_1, field_2) = (ref_ids(&both[1]), ref_ids(&next[1]));
    assert_eq!(field_2.len(), 1, "{next:?}");
    assert!(
        all.contains(&field_2[0]) && field_1 != field_2,
        "{field_1:?} {field_2:?}"
    );
    let server_refs = s
        .browse(&[forward(NodeId::new(0, 2253u32))], 0, None)
        .await
        .unwrap();
    let (local_1, local_2) = (ref_ids(&both[0]), ref_ids(&next[0]));
    assert_eq!(local_2.len(), 1, "{next:?}");
    assert!(
        ref_ids(&server_refs[0]).contains(&local_2[0]) && local_1 != local_2,
        "{local_1:?} {local_2:?}"
    );

    // Released, then used: the field server no longer knows it.
    let cp = next[1].continuation_point.clone();
    let released = s
        .browse_next(true, std::slice::from_ref(&cp))
        .await
        .unwrap();
    assert_eq!(released[0].status_code, StatusCode::Good, "{released:?}");
    assert!(ref_ids(&released[0]).is_empty(), "{released:?}");
    let again = s.browse_next(false, &[cp]).await.unwrap();
    assert_eq!(
        again[0].status_code,
        StatusCode::BadContinuationPointInvalid,
        "{again:?}"
    );
    // A continuation point that names mount 9 (there is one mount).
    let forged = ByteString::from(vec![CP_MARK, 9, 0, 1, 2, 3, 4]);
    let r = s.browse_next(false, &[forged]).await.unwrap();
    assert_eq!(r[0].status_code, StatusCode::BadContinuationPointInvalid);

    let _ = s.disconnect().await;
    let _ = h.await;
    gw.stop().await;
    sim.cancel();
}

async fn next_good(rx: &mut mpsc::UnboundedReceiver<DataValue>, within: Duration) -> DataValue {
    let t0 = Instant::now();
    loop {
        let left = within.saturating_sub(t0.elapsed());
        let dv = tokio::time::timeout(left, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no good value within {within:?}"))
            .expect("subscription alive");
        if dv.status.is_none_or(|s| s.is_good()) && dv.value.is_some() {
            return dv;
        }
    }
}

#[tokio::test]
async fn ten_subscribers_share_one_southbound_item() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), "a").await;
    let gw = TestGateway::start(&field_toml("line1", "none", &[&sim.endpoint_url])).await;
    wait_connected(&gw, "line1").await;
    let mut sessions = Vec::new();
    let mut streams = Vec::new();
    for i in 0..10 {
        let (s, h) = connect(&gw, &format!("sub-{i}")).await;
        let ns = ns_of(&s, uagate_sim::NAMESPACE_URI).await;
        streams.push(subscribe(&s, NodeId::new(ns, "Simulation.Counter"), 250).await);
        sessions.push((s, h));
    }
    for rx in streams.iter_mut() {
        let dv = next_good(rx, Duration::from_secs(5)).await;
        assert!(matches!(dv.value, Some(Variant::UInt32(_))));
    }
    assert_eq!(
        gw.engine().field_shared_items("line1"),
        Some(1),
        "one southbound item for ten subscribers"
    );
    // One more subscriber joins a node already served: its very first
    // notification carries the current value, not BadWaitingForInitialData.
    {
        let (s, _) = &sessions[0];
        let ns = ns_of(s, uagate_sim::NAMESPACE_URI).await;
        let mut rx = subscribe(s, NodeId::new(ns, "Simulation.Counter"), 250).await;
        let first = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(first.status.is_none_or(|st| st.is_good()), "{first:?}");
        assert!(matches!(first.value, Some(Variant::UInt32(_))), "{first:?}");
    }
    // The last subscriber gone → the shared item goes.
    for (s, h) in sessions {
        let _ = s.disconnect().await;
        let _ = h.await;
    }
    let t0 = Instant::now();
    while gw.engine().field_shared_items("line1") != Some(0) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "shared item not released"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gw.stop().await;
    sim.cancel();
}

#[tokio::test]
async fn hot_pair_failover_keeps_the_subscription_delivering() {
    let tmp = tempfile::tempdir().unwrap();
    let a = start_sim(tmp.path(), "a").await;
    let b = start_sim(tmp.path(), "b").await;
    a.set_redundancy_support(opcua_types::RedundancySupport::Hot);
    b.set_redundancy_support(opcua_types::RedundancySupport::Hot);
    let gw = TestGateway::start(&field_toml(
        "pair",
        "hot",
        &[&a.endpoint_url, &b.endpoint_url],
    ))
    .await;
    wait_connected(&gw, "pair").await;
    // Both servers connected; what they announce about redundancy is read.
    let t0 = Instant::now();
    loop {
        let st = gw.engine().field_status("pair").unwrap();
        if st.servers.iter().all(|v| v.reachable) {
            assert!(
                st.servers.iter().all(|v| v.redundancy_support == Some(3)),
                "{st:?}"
            );
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{st:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Both reachable and Healthy: whichever was chosen first stays active.
    let t0 = Instant::now();
    let first = loop {
        if let Some(a) = gw.engine().field_status("pair").unwrap().active_server {
            break a;
        }
        assert!(t0.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let other = 1 - first;
    let sims = [a, b];
    let (s, h) = connect(&gw, "failover").await;
    let ns = ns_of(&s, uagate_sim::NAMESPACE_URI).await;
    let mut rx = subscribe(&s, NodeId::new(ns, "Simulation.Counter"), 100).await;
    next_good(&mut rx, Duration::from_secs(5)).await;

    // Maintenance on the active server → handoff to the other one.
    sims[first].set_service_level(0);
    let t0 = Instant::now();
    while gw.engine().field_status("pair").unwrap().active_server != Some(other) {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "no handoff on Maintenance"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    next_good(&mut rx, Duration::from_secs(2)).await;
    // Back to Healthy: no flapping back while the other one is Healthy.
    sims[first].set_service_level(255);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        gw.engine().field_status("pair").unwrap().active_server,
        Some(other),
        "stays on the Healthy server"
    );

    // Stop the active server: the subscription keeps delivering from the first.
    sims[other].cancel();
    let stopped = Instant::now();
    let dv = loop {
        let dv = next_good(&mut rx, Duration::from_secs(2)).await;
        if dv
            .server_timestamp
            .is_some_and(|t| t.as_chrono() > chrono_now_minus(stopped))
        {
            break dv;
        }
    };
    assert!(
        stopped.elapsed() < Duration::from_secs(2),
        "delivering again after {:?}",
        stopped.elapsed()
    );
    assert!(matches!(dv.value, Some(Variant::UInt32(_))));
    let st = gw.engine().field_status("pair").unwrap();
    assert_eq!(st.active_server, Some(first));
    assert!(st.failover_count >= 2, "{st:?}");

    // What SCADA alarms on: the status nodes tell the same story.
    let t0 = Instant::now();
    loop {
        let v = read_field_status(&s, "pair").await;
        let settled = v["State"] == Variant::from("Connected")
            && v["ActiveEndpoint"] == Variant::from(sims[first].endpoint_url.as_str())
            && v["ServiceLevel"] == Variant::Byte(255)
            && matches!(v["FailoverCount"], Variant::UInt32(n) if n >= 2)
            && matches!(v["LastError"], Variant::StatusCode(e) if e.is_bad());
        if settled {
            assert!(matches!(v["ReconnectCount"], Variant::UInt32(_)), "{v:?}");
            assert_eq!(v["Enabled"], Variant::Boolean(true));
            assert_eq!(v["Failing"], Variant::Boolean(false), "served: {v:?}");
            assert_eq!(v["FailedAttempts"], Variant::UInt32(0), "served: {v:?}");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "status nodes: {v:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = s.disconnect().await;
    let _ = h.await;
    gw.stop().await;
    sims[first].cancel();
}

/// Every status variable of field connection `name`, read over OPC UA.
async fn read_field_status(
    s: &opcua_client::Session,
    name: &str,
) -> std::collections::HashMap<&'static str, Variant> {
    let ids: Vec<ReadValueId> = uagate_space::FIELD_STATUS_VARS
        .iter()
        .map(|var| ReadValueId::from(NodeId::new(2, format!("FieldStatus.{name}.{var}"))))
        .collect();
    let values = s
        .read(&ids, TimestampsToReturn::Neither, 0.0)
        .await
        .unwrap();
    uagate_space::FIELD_STATUS_VARS
        .iter()
        .zip(values)
        .map(|(var, dv)| {
            assert!(dv.status.is_none_or(|st| st.is_good()), "{var}: {dv:?}");
            (*var, dv.value.unwrap_or_default())
        })
        .collect()
}

fn chrono_now_minus(since: Instant) -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now() - chrono::Duration::from_std(since.elapsed()).unwrap()
}

#[tokio::test]
async fn unknown_field_certificate_is_rejected_listed_and_trusted_by_the_operator() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = uagate_sim::start(SimConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        pki_dir: tmp.path().join("sim-secure"),
        application_uri: "urn:uagate:sim:secure".into(),
        security: true,
        update_interval: Duration::from_millis(50),
        max_nodes_per_read: 0,
        max_monitored_items_per_subscription: 0,
    })
    .await
    .unwrap();
    // Secure by default: sign_and_encrypt with Basic256Sha256.
    let toml = format!(
        "[[field_servers]]\nname = \"secure\"\nendpoints = [\"{}\"]\nrequest_timeout = \"3s\"\n[field_servers.reconnect]\ninitial_delay = \"200ms\"\nmax_delay = \"500ms\"\n",
        sim.endpoint_url
    );
    let gw = TestGateway::start(&toml).await;
    let t0 = Instant::now();
    let rejected = loop {
        let list = gw
            .store
            .certs(uagate_store::CertKind::Rejected)
            .await
            .unwrap();
        if let Some(c) = list.into_iter().next() {
            break c;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "field server certificate not listed as rejected"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let st = gw.engine().field_status("secure").unwrap();
    assert_ne!(st.state, uagate_field::ConnState::Connected);
    assert_eq!(st.last_error, Some(StatusCode::BadCertificateUntrusted));
    // The operator trusts it: the next attempt connects.
    let der = std::fs::read(tmp.path().join("sim-secure/own/cert.der")).unwrap();
    assert_eq!(
        rejected.thumbprint,
        gw.store
            .trust_add("test", &der, uagate_store::CertKind::Trusted)
            .await
            .unwrap()
            .thumbprint
    );
    wait_connected(&gw, "secure").await;
    gw.stop().await;
    sim.cancel();
}

#[tokio::test]
async fn unreachable_field_server_keeps_retrying_and_reports_it() {
    // A port with nothing listening.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("opc.tcp://127.0.0.1:{port}/");
    let gw = TestGateway::start(&field_toml("gone", "none", &[&url])).await;
    let (s, h) = connect(&gw, "unreachable").await;
    // The mount folder is local and readable; a field node waits, then fails.
    let folder = s
        .read(
            &[ReadValueId {
                node_id: NodeId::new(2, "Field.gone"),
                attribute_id: 3,
                ..Default::default()
            }],
            TimestampsToReturn::Neither,
            0.0,
        )
        .await
        .unwrap();
    assert_eq!(
        folder[0].value,
        Some(Variant::from(QualifiedName::new(2, "gone"))),
        "{folder:?}"
    );
    let table = gw.engine().field_status("gone").unwrap();
    assert_eq!(table.state, uagate_field::ConnState::Connecting);
    // The connection keeps retrying under the policy; the status nodes report it.
    let t0 = Instant::now();
    loop {
        let st = gw.engine().field_status("gone").unwrap();
        if st.failed_attempts >= 2 {
            assert_eq!(st.state, uagate_field::ConnState::Connecting);
            assert!(st.last_error.is_some_and(|e| e.is_bad()));
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no retries: {st:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let v = s
        .read(
            &[ReadValueId::from(NodeId::new(2, "FieldStatus.gone.State"))],
            TimestampsToReturn::Neither,
            0.0,
        )
        .await
        .unwrap();
    assert_eq!(v[0].value, Some(Variant::from("Connecting")));
    // What a SCADA alarms on: Failing, with the attempts that failed,
    // while State still says Connecting.
    let t0 = Instant::now();
    loop {
        let v = read_field_status(&s, "gone").await;
        if v["Failing"] == Variant::Boolean(true) {
            assert!(
                matches!(v["FailedAttempts"], Variant::UInt32(n) if n >= 3),
                "{v:?}"
            );
            assert_eq!(v["State"], Variant::from("Connecting"));
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "not failing: {v:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = s.disconnect().await;
    let _ = h.await;
    gw.stop().await;
}

#[tokio::test]
async fn large_reads_are_split_within_the_field_servers_operation_limits() {
    let tmp = tempfile::tempdir().unwrap();
    // A small PLC: at most 2 nodes per Read.
    let sim = uagate_sim::start(SimConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        pki_dir: tmp.path().join("sim-small"),
        application_uri: "urn:uagate:sim:small".into(),
        security: false,
        update_interval: Duration::from_millis(50),
        max_nodes_per_read: 2,
        max_monitored_items_per_subscription: 0,
    })
    .await
    .unwrap();
    let gw = TestGateway::start(&field_toml("small", "none", &[&sim.endpoint_url])).await;
    wait_connected(&gw, "small").await;
    let (s, h) = connect(&gw, "batches").await;
    let ns = ns_of(&s, uagate_sim::NAMESPACE_URI).await;
    let ids = [
        NodeId::new(ns, "Simulation.Counter"),
        NodeId::new(0, 2259u32), // local: ServerStatus/State
        NodeId::new(ns, "Simulation.Sine"),
        NodeId::new(ns, "Simulation.Toggle"),
        NodeId::new(ns, "Simulation.Text"),
        NodeId::new(ns, "Simulation.Setpoint"),
    ];
    let nodes: Vec<ReadValueId> = ids.iter().cloned().map(ReadValueId::from).collect();
    let v = s.read(&nodes, TimestampsToReturn::Both, 0.0).await.unwrap();
    assert_eq!(v.len(), 6);
    for dv in &v {
        assert!(dv.status.is_none_or(|st| st.is_good()), "{v:?}");
    }
    assert!(matches!(v[0].value, Some(Variant::UInt32(_))), "{:?}", v[0]);
    assert!(matches!(v[1].value, Some(Variant::Int32(0))), "{:?}", v[1]);
    assert!(matches!(v[2].value, Some(Variant::Double(_))), "{:?}", v[2]);
    assert!(
        matches!(v[3].value, Some(Variant::Boolean(_))),
        "{:?}",
        v[3]
    );
    assert!(matches!(v[4].value, Some(Variant::String(_))), "{:?}", v[4]);
    assert!(matches!(v[5].value, Some(Variant::Double(_))), "{:?}", v[5]);
    let _ = s.disconnect().await;
    let _ = h.await;
    gw.stop().await;
    sim.cancel();
}

/// Cold, warm and hot-merge pairs: stop the active server, the northbound
/// subscription delivers good values again from the other one.
async fn failover_in_mode(mode: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let a = start_sim(tmp.path(), "a").await;
    let b = start_sim(tmp.path(), "b").await;
    let gw = TestGateway::start(&field_toml(
        "pair",
        mode,
        &[&a.endpoint_url, &b.endpoint_url],
    ))
    .await;
    wait_connected(&gw, "pair").await;
    let first = gw
        .engine()
        .field_status("pair")
        .unwrap()
        .active_server
        .unwrap();
    let sims = [a, b];
    let (s, h) = connect(&gw, mode).await;
    let ns = ns_of(&s, uagate_sim::NAMESPACE_URI).await;
    let mut rx = subscribe(&s, NodeId::new(ns, "Simulation.Counter"), 100).await;
    next_good(&mut rx, Duration::from_secs(5)).await;
    if mode == "cold" {
        // Only the active server has a session.
        let st = gw.engine().field_status("pair").unwrap();
        assert!(
            !st.servers[1 - first].reachable,
            "cold backup not connected: {st:?}"
        );
    }
    sims[first].cancel();
    let stopped = Instant::now();
    loop {
        let dv = next_good(&mut rx, Duration::from_secs(5)).await;
        if dv
            .server_timestamp
            .is_some_and(|t| t.as_chrono() > chrono_now_minus(stopped))
        {
            break;
        }
    }
    let took = stopped.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "{mode}: delivering again after {took:?}"
    );
    assert_eq!(
        gw.engine().field_status("pair").unwrap().active_server,
        Some(1 - first),
        "{mode}"
    );
    let _ = s.disconnect().await;
    let _ = h.await;
    gw.stop().await;
    sims[1 - first].cancel();
}

#[tokio::test]
async fn cold_pair_fails_over() {
    failover_in_mode("cold").await;
}

#[tokio::test]
async fn warm_pair_fails_over() {
    failover_in_mode("warm").await;
}

#[tokio::test]
async fn hot_merge_pair_fails_over() {
    failover_in_mode("hot_merge").await;
}

#[tokio::test]
async fn an_alternate_network_path_is_used_when_the_first_is_down() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), "a").await;
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let toml = format!(
        "[[field_servers]]\nname = \"line1\"\nendpoints = [{{ url = \"opc.tcp://127.0.0.1:{dead}/\", alternates = [\"{}\"] }}]\nsecurity_mode = \"none\"\nsecurity_policy = \"None\"\n[field_servers.reconnect]\ninitial_delay = \"100ms\"\nmax_delay = \"300ms\"\n",
        sim.endpoint_url
    );
    let gw = TestGateway::start(&toml).await;
    wait_connected(&gw, "line1").await;
    let st = gw.engine().field_status("line1").unwrap();
    assert_eq!(
        st.active_endpoint.as_deref(),
        Some(sim.endpoint_url.as_str())
    );
    assert!(st.failed_attempts >= 1, "the first path was tried: {st:?}");
    gw.stop().await;
    sim.cancel();
}

#[tokio::test]
async fn hot_and_mirrored_moves_its_one_session_and_falls_back_when_not_mirrored() {
    let tmp = tempfile::tempdir().unwrap();
    let a = start_sim(tmp.path(), "a").await;
    let b = start_sim(tmp.path(), "b").await;
    let gw = TestGateway::start(&field_toml(
        "mirror",
        "hot_and_mirrored",
        &[&a.endpoint_url, &b.endpoint_url],
    ))
    .await;
    wait_connected(&gw, "mirror").await;
    // One session, to the first server.
    let st = gw.engine().field_status("mirror").unwrap();
    assert_eq!(
        st.active_endpoint.as_deref(),
        Some(a.endpoint_url.as_str()),
        "{st:?}"
    );
    let (s, h) = connect(&gw, "mirror").await;
    let ns = ns_of(&s, uagate_sim::NAMESPACE_URI).await;
    let mut rx = subscribe(&s, NodeId::new(ns, "Simulation.Counter"), 100).await;
    next_good(&mut rx, Duration::from_secs(5)).await;
    let counter = ReadValueId::from(NodeId::new(ns, "Simulation.Counter"));
    let read_counter = || async {
        let r = s
            .read(
                std::slice::from_ref(&counter),
                TimestampsToReturn::Both,
                0.0,
            )
            .await
            .unwrap();
        assert!(r[0].status.unwrap_or(StatusCode::Good).is_good(), "{r:?}");
    };
    read_counter().await;
    read_counter().await;
    let (asked_on_a, _) = gw.engine().field_read_stats("mirror").unwrap();
    assert!(asked_on_a >= 2, "{asked_on_a}");

    // Maintenance on the active server: the session moves to b. The
    // simulators do not mirror sessions, so b creates a new one, the
    // gateway closes it and builds the link afresh on b.
    a.set_service_level(0);
    wait_active_on(&gw, "mirror", &b.endpoint_url).await;
    let moved = Instant::now();
    loop {
        let dv = next_good(&mut rx, Duration::from_secs(5)).await;
        if dv
            .server_timestamp
            .is_some_and(|t| t.as_chrono() > chrono_now_minus(moved))
        {
            break;
        }
    }
    a.set_service_level(255);
    // The Read counts are the connection's: the link built afresh on b
    // adds to them.
    read_counter().await;
    let (asked, sent) = gw.engine().field_read_stats("mirror").unwrap();
    assert!(asked > asked_on_a, "{asked} after {asked_on_a}");
    assert!((1..=asked).contains(&sent), "{sent} southbound for {asked}");

    // Maintenance on b, whose link was built afresh: the session moves
    // back to a.
    b.set_service_level(0);
    wait_active_on(&gw, "mirror", &a.endpoint_url).await;
    b.set_service_level(255);

    // Stop b: the session stays on a and keeps delivering.
    b.cancel();
    let stopped = Instant::now();
    loop {
        let dv = next_good(&mut rx, Duration::from_secs(5)).await;
        if dv
            .server_timestamp
            .is_some_and(|t| t.as_chrono() > chrono_now_minus(stopped))
        {
            break;
        }
    }
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "{:?}",
        stopped.elapsed()
    );
    let st = gw.engine().field_status("mirror").unwrap();
    assert_eq!(
        st.active_endpoint.as_deref(),
        Some(a.endpoint_url.as_str()),
        "{st:?}"
    );
    let _ = s.disconnect().await;
    let _ = h.await;
    gw.stop().await;
    a.cancel();
}

#[tokio::test]
async fn percent_deadband_on_a_field_node_uses_the_field_eurange() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), "a").await;
    let gw = TestGateway::start(&field_toml("line1", "none", &[&sim.endpoint_url])).await;
    wait_connected(&gw, "line1").await;
    let (s, h) = connect(&gw, "percent").await;
    let ns = ns_of(&s, uagate_sim::NAMESPACE_URI).await;
    let sub = s
        .create_subscription(
            Duration::from_millis(100),
            60,
            10,
            0,
            0,
            true,
            DataChangeCallback::new(|_, _| {}),
        )
        .await
        .unwrap();
    let item = |node: &str, percent: f64| MonitoredItemCreateRequest {
        item_to_monitor: ReadValueId::from(NodeId::new(ns, node)),
        monitoring_mode: opcua_types::MonitoringMode::Reporting,
        requested_parameters: opcua_types::MonitoringParameters {
            client_handle: 7,
            sampling_interval: 100.0,
            queue_size: 1,
            discard_oldest: true,
            filter: opcua_types::ExtensionObject::from_message(opcua_types::DataChangeFilter {
                trigger: opcua_types::DataChangeTrigger::StatusValue,
                deadband_type: opcua_types::DeadbandType::Percent as u32,
                deadband_value: percent,
            }),
        },
    };
    let r = s
        .create_monitored_items(
            sub,
            TimestampsToReturn::Both,
            vec![
                item("Simulation.Random", 10.0),
                item("Simulation.Counter", 10.0),
            ],
        )
        .await
        .unwrap();
    // Random is an AnalogItem with an EURange on the field server.
    assert_eq!(r[0].result.status_code, StatusCode::Good, "{r:?}");
    // Counter has no EURange: a percent deadband is not allowed there.
    assert_eq!(
        r[1].result.status_code,
        StatusCode::BadFilterNotAllowed,
        "{r:?}"
    );
    let _ = s.disconnect().await;
    let _ = h.await;
    gw.stop().await;
    sim.cancel();
}

#[tokio::test]
async fn concurrent_reads_are_merged_and_each_caller_gets_its_own_results() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), "a").await;
    let gw = TestGateway::start(&field_toml("line1", "none", &[&sim.endpoint_url])).await;
    wait_connected(&gw, "line1").await;
    let mut clients = Vec::new();
    for i in 0..8 {
        clients.push(connect(&gw, &format!("merge-{i}")).await);
    }
    let ns = ns_of(&clients[0].0, uagate_sim::NAMESPACE_URI).await;
    // Each client reads its own rotation of differently typed nodes, so a
    // result handed to the wrong caller or in the wrong order shows.
    let names = [
        "Simulation.Counter",
        "Simulation.Sine",
        "Simulation.Toggle",
        "Simulation.Text",
    ];
    let kinds = |v: &Variant, name: &str| match name {
        "Simulation.Counter" => matches!(v, Variant::UInt32(_)),
        "Simulation.Sine" => matches!(v, Variant::Double(_)),
        "Simulation.Toggle" => matches!(v, Variant::Boolean(_)),
        _ => matches!(v, Variant::String(_)),
    };
    let mut tasks = Vec::new();
    for (c, (s, _)) in clients.iter().enumerate() {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..40 {
                let order: Vec<&str> = (0..1 + (c + round) % 4)
                    .map(|k| names[(c + round + k) % 4])
                    .collect();
                let nodes: Vec<ReadValueId> = order
                    .iter()
                    .map(|n| ReadValueId::from(NodeId::new(ns, *n)))
                    .collect();
                let v = s.read(&nodes, TimestampsToReturn::Both, 0.0).await.unwrap();
                assert_eq!(v.len(), order.len());
                for (dv, name) in v.iter().zip(&order) {
                    let value = dv
                        .value
                        .as_ref()
                        .unwrap_or_else(|| panic!("{name}: {dv:?}"));
                    assert!(
                        kinds(value, name),
                        "client {c} round {round}: {name} got {value:?}"
                    );
                }
            }
        }));
    }
    for t in tasks {
        bounded("reader", t).await.unwrap();
    }
    let (jobs, sent) = gw.engine().field_read_stats("line1").unwrap();
    assert!(jobs >= 8 * 40, "every read went through the merger: {jobs}");
    assert!(
        sent <= jobs,
        "{sent} southbound Reads for {jobs} northbound ones"
    );
    println!("merged {jobs} northbound Reads into {sent} southbound Reads");
    for (s, h) in clients {
        let _ = s.disconnect().await;
        let _ = h.await;
    }
    gw.stop().await;
    sim.cancel();
}

/// An operator's forced failover moves a healthy pair to the other server,
/// records it in the connection's history, and does not flap back.
async fn forced_failover_in_mode(mode: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let a = start_sim(tmp.path(), "a").await;
    let b = start_sim(tmp.path(), "b").await;
    let gw = TestGateway::start(&field_toml(
        "pair",
        mode,
        &[&a.endpoint_url, &b.endpoint_url],
    ))
    .await;
    wait_connected(&gw, "pair").await;
    let engine = gw.engine();
    if mode != "cold" {
        // The backup must be ready to take over (its ServiceLevel known);
        // before that a forced failover is refused as unavailable.
        let t0 = Instant::now();
        while !engine
            .field_status("pair")
            .unwrap()
            .servers
            .iter()
            .all(|s| s.reachable && s.service_level.is_some())
        {
            assert!(t0.elapsed() < Duration::from_secs(10), "backup never ready");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let first = engine.field_status("pair").unwrap().active_server.unwrap();
    let before = engine.field_status("pair").unwrap().failover_count;
    assert_eq!(engine.field_force_failover("pair", "tester"), Some(Ok(())));
    let t0 = Instant::now();
    loop {
        let st = engine.field_status("pair").unwrap();
        if st.active_server == Some(1 - first) && st.state == uagate_field::ConnState::Connected {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{mode}: still on server {first}: {st:?}\n{:?}",
            engine.field_history("pair")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let history = engine.field_history("pair").unwrap();
    let kinds: Vec<&str> = history.iter().map(|e| e.kind).collect();
    let asked = kinds.iter().position(|k| *k == "failover_requested");
    assert!(asked.is_some(), "{mode}: {kinds:?}");
    assert!(
        history[asked.unwrap()..]
            .iter()
            .any(|e| e.kind == "failover" && e.server == Some(1 - first)),
        "{mode}: {history:?}"
    );
    assert!(history[asked.unwrap()].detail.contains("tester"));
    // Both servers are healthy: the gateway stays on the new one.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let st = engine.field_status("pair").unwrap();
    assert_eq!(st.active_server, Some(1 - first), "{mode}: flapped back");
    if mode != "cold" {
        assert_eq!(st.failover_count, before + 1, "{mode}");
    }
    // Unknown connections and single-server sets are refused.
    assert_eq!(engine.field_force_failover("nope", "tester"), None);
    gw.stop().await;
    a.cancel();
    b.cancel();
}

#[tokio::test]
async fn an_operator_forces_a_hot_pair_to_the_other_server() {
    forced_failover_in_mode("hot").await;
}

#[tokio::test]
async fn an_operator_forces_a_cold_pair_to_the_other_server() {
    forced_failover_in_mode("cold").await;
}

#[tokio::test]
async fn a_single_server_connection_cannot_be_forced_over() {
    let tmp = tempfile::tempdir().unwrap();
    let a = start_sim(tmp.path(), "a").await;
    let gw = TestGateway::start(&field_toml("one", "none", &[&a.endpoint_url])).await;
    wait_connected(&gw, "one").await;
    assert!(matches!(
        gw.engine().field_force_failover("one", "tester"),
        Some(Err(_))
    ));
    let st = gw.engine().field_reconnect_stats("one").unwrap();
    assert_eq!(st.attempts_ok, 1);
    gw.stop().await;
    a.cancel();
}

/// The status a service call was refused with, Good when it was answered.
fn refusal<T>(r: Result<T, opcua_types::Error>) -> StatusCode {
    r.err().map_or(StatusCode::Good, |e| e.status())
}

/// Operation limits hold for the whole request, whatever mix of local and
/// mounted nodes it holds (they were checked per part, so 6 local + 6
/// mounted nodes passed a limit of 10).
#[tokio::test]
async fn operation_limits_hold_for_any_mix_of_local_and_mounted_nodes() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), "a").await;
    let gw = TestGateway::start(&format!(
        "[server]\nallow_anonymous_write = true\nmax_nodes_per_read = 10\nmax_nodes_per_browse = 10\nmax_nodes_per_write = 10\nmax_nodes_per_method_call = 10\nmax_nodes_per_translate = 10\n{}",
        field_toml("line1", "none", &[&sim.endpoint_url])
    ))
    .await;
    wait_connected(&gw, "line1").await;
    let (s, h) = connect(&gw, "limits").await;
    let ns = ns_of(&s, uagate_sim::NAMESPACE_URI).await;
    let local = || ReadValueId::from(NodeId::new(0, 2258u32));
    let mounted = || ReadValueId::from(NodeId::new(ns, "Simulation.Counter"));
    let read = |n_local: usize, n_mounted: usize| {
        let nodes: Vec<ReadValueId> = (0..n_local)
            .map(|_| local())
            .chain((0..n_mounted).map(|_| mounted()))
            .collect();
        let s = s.clone();
        async move { s.read(&nodes, TimestampsToReturn::Both, 0.0).await }
    };
    for (l, m) in [(6, 6), (1, 11), (0, 12), (12, 0), (11, 1)] {
        assert_eq!(
            refusal(read(l, m).await),
            StatusCode::BadTooManyOperations,
            "Read of {l} local + {m} mounted nodes"
        );
    }
    // The limits the gateway publishes are the ones it enforces.
    let published = s
        .read(
            &[
                opcua_types::VariableId::Server_ServerCapabilities_OperationLimits_MaxNodesPerRead,
                opcua_types::VariableId::Server_ServerCapabilities_OperationLimits_MaxNodesPerWrite,
                opcua_types::VariableId::Server_ServerCapabilities_OperationLimits_MaxNodesPerMethodCall,
                opcua_types::VariableId::Server_ServerCapabilities_OperationLimits_MaxNodesPerBrowse,
            ]
            .map(|v| ReadValueId::from(NodeId::from(v))),
            TimestampsToReturn::Neither,
            0.0,
        )
        .await
        .unwrap();
    for dv in &published {
        assert_eq!(dv.value, Some(Variant::UInt32(10)), "{published:?}");
    }
    let ok = read(5, 5).await.unwrap();
    assert_eq!(ok.len(), 10);
    assert!(
        ok.iter().all(|v| v.status.is_none_or(|st| st.is_good())),
        "{ok:?}"
    );

    let browse = |node: NodeId| BrowseDescription {
        node_id: node,
        browse_direction: BrowseDirection::Forward,
        reference_type_id: NodeId::new(0, 33u32),
        include_subtypes: true,
        node_class_mask: NodeClassMask::all().bits(),
        result_mask: BrowseResultMask::All as u32,
    };
    let twelve: Vec<_> = (0..12)
        .map(|_| browse(NodeId::new(ns, "Simulation")))
        .collect();
    assert_eq!(
        refusal(s.browse(&twelve, 0, None).await),
        StatusCode::BadTooManyOperations,
        "Browse of 12 mounted nodes"
    );
    let mixed: Vec<_> = (0..6)
        .map(|_| browse(NodeId::new(0, 85u32)))
        .chain((0..6).map(|_| browse(NodeId::new(ns, "Simulation"))))
        .collect();
    assert_eq!(
        refusal(s.browse(&mixed, 0, None).await),
        StatusCode::BadTooManyOperations,
        "Browse of 6 local + 6 mounted nodes"
    );

    let write = |node: NodeId| WriteValue {
        node_id: node,
        attribute_id: 13,
        index_range: Default::default(),
        value: DataValue::new_now(1.0f64),
    };
    let writes: Vec<_> = (0..11)
        .map(|_| write(NodeId::new(ns, "Simulation.Setpoint")))
        .chain(std::iter::once(write(NodeId::new(0, 2258u32))))
        .collect();
    assert_eq!(
        refusal(s.write(&writes).await),
        StatusCode::BadTooManyOperations,
        "Write of 11 mounted + 1 local nodes"
    );

    let calls: Vec<_> = (0..11)
        .map(|_| CallMethodRequest {
            object_id: NodeId::new(ns, "Simulation"),
            method_id: NodeId::new(ns, "Simulation.Add"),
            input_arguments: Some(vec![Variant::Double(1.0), Variant::Double(2.0)]),
        })
        .collect();
    assert_eq!(
        refusal(s.call(calls).await),
        StatusCode::BadTooManyOperations,
        "Call of 11 mounted methods"
    );

    let path = |start: NodeId| BrowsePath {
        starting_node: start,
        relative_path: RelativePath {
            elements: Some(vec![RelativePathElement {
                reference_type_id: NodeId::new(0, 33u32),
                is_inverse: false,
                include_subtypes: true,
                target_name: QualifiedName::new(ns, "Counter"),
            }]),
        },
    };
    let paths: Vec<_> = (0..11)
        .map(|_| path(NodeId::new(ns, "Simulation")))
        .collect();
    assert_eq!(
        refusal(s.translate_browse_paths_to_node_ids(&paths).await),
        StatusCode::BadTooManyOperations,
        "TranslateBrowsePaths of 11 mounted paths"
    );

    // Nothing ran: the refused Write changed no value.
    let sp = s
        .read(
            &[ReadValueId::from(NodeId::new(ns, "Simulation.Setpoint"))],
            TimestampsToReturn::Neither,
            0.0,
        )
        .await
        .unwrap();
    assert_ne!(sp[0].value, Some(Variant::Double(1.0)), "{sp:?}");
    let _ = s.disconnect().await;
    let _ = h.await;
    gw.stop().await;
    sim.cancel();
}

/// A request touching four mounts waits for the slowest of them, not for
/// the sum: the mounts are served concurrently, results in request order.
#[tokio::test]
async fn a_read_over_four_mounts_waits_for_the_slowest_not_the_sum() {
    const DELAY: Duration = Duration::from_millis(500);
    let tmp = tempfile::tempdir().unwrap();
    let mut sims = Vec::new();
    let mut links = Vec::new();
    let mut toml = String::new();
    for i in 1..=4 {
        let sim = start_sim(tmp.path(), &format!("m{i}")).await;
        let link = fieldkit::SlowLink::start(&sim.endpoint_url).await;
        toml.push_str(&field_toml(&format!("line{i}"), "none", &[&link.url]));
        sims.push(sim);
        links.push(link);
    }
    let gw = TestGateway::start(&toml).await;
    for i in 1..=4 {
        wait_connected(&gw, &format!("line{i}")).await;
    }
    let (s, h) = connect(&gw, "four-mounts").await;
    let mut nodes = Vec::new();
    for i in 1..=4 {
        let ns = fieldkit::sim_ns_of_mount(&s, &format!("line{i}")).await;
        nodes.push(ReadValueId::from(NodeId::new(ns, "Simulation.Counter")));
        nodes.push(ReadValueId::from(NodeId::new(ns, "Simulation.Text")));
    }
    // The local part runs alongside.
    nodes.push(ReadValueId::from(NodeId::new(0, 2259u32)));
    for l in &links {
        l.set(DELAY);
    }
    let t0 = Instant::now();
    let v = s.read(&nodes, TimestampsToReturn::Both, 0.0).await.unwrap();
    let took = t0.elapsed();
    assert_eq!(v.len(), 9);
    for (k, dv) in v.iter().enumerate() {
        assert!(dv.status.is_none_or(|st| st.is_good()), "{k}: {dv:?}");
    }
    for pair in v[..8].chunks(2) {
        assert!(
            matches!(pair[0].value, Some(Variant::UInt32(_))),
            "{pair:?}"
        );
        assert!(
            matches!(pair[1].value, Some(Variant::String(_))),
            "{pair:?}"
        );
    }
    assert!(matches!(v[8].value, Some(Variant::Int32(0))), "{:?}", v[8]);
    // One after another would take 4 x 500 ms at least.
    assert!(took >= DELAY, "{took:?}");
    assert!(
        took < DELAY * 2,
        "mounts served one after another: {took:?}"
    );
    for l in &links {
        l.set(Duration::ZERO);
    }
    let _ = s.disconnect().await;
    let _ = h.await;
    gw.stop().await;
    for sim in sims {
        sim.cancel();
    }
}

/// Issue 17 item 6: a PLC that takes at most 3 monitored items per
/// subscription (it refuses a CreateMonitoredItems call that would exceed
/// that with BadTooManyMonitoredItems, and does not announce the cap): the
/// gateway spreads 7 shared items over 3 southbound subscriptions and every
/// northbound item gets Good values.
#[tokio::test]
async fn items_are_spread_over_subscriptions_when_the_plc_caps_them() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = uagate_sim::start(SimConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        pki_dir: tmp.path().join("sim-capped"),
        application_uri: "urn:uagate:sim:capped".into(),
        security: false,
        update_interval: Duration::from_millis(50),
        max_nodes_per_read: 0,
        max_monitored_items_per_subscription: 3,
    })
    .await
    .unwrap();
    let gw = TestGateway::start(&field_toml("capped", "none", &[&sim.endpoint_url])).await;
    wait_connected(&gw, "capped").await;
    let (s, h) = connect(&gw, "spread").await;
    let ns = ns_of(&s, uagate_sim::NAMESPACE_URI).await;
    let names = [
        "Simulation.Counter",
        "Simulation.Sine",
        "Simulation.Random",
        "Simulation.Toggle",
        "Simulation.Text",
        "Simulation.Timestamp",
        "Simulation.Setpoint",
    ];
    let (tx, mut rx) = mpsc::unbounded_channel();
    let sub = s
        .create_subscription(
            Duration::from_millis(100),
            60,
            10,
            0,
            0,
            true,
            DataChangeCallback::new(move |dv: DataValue, item: &opcua_client::MonitoredItem| {
                let _ = tx.send((item.client_handle(), dv));
            }),
        )
        .await
        .unwrap();
    let reqs: Vec<MonitoredItemCreateRequest> = names
        .iter()
        .enumerate()
        .map(|(i, n)| MonitoredItemCreateRequest {
            item_to_monitor: ReadValueId::from(NodeId::new(ns, *n)),
            monitoring_mode: opcua_types::MonitoringMode::Reporting,
            requested_parameters: opcua_types::MonitoringParameters {
                client_handle: i as u32 + 1,
                sampling_interval: 100.0,
                queue_size: 10,
                discard_oldest: true,
                ..Default::default()
            },
        })
        .collect();
    let created = s
        .create_monitored_items(sub, TimestampsToReturn::Both, reqs)
        .await
        .unwrap();
    assert!(
        created.iter().all(|c| c.result.status_code.is_good()),
        "{created:?}"
    );
    // Every item delivers a Good value.
    let mut good = std::collections::BTreeSet::new();
    let t0 = Instant::now();
    while good.len() < names.len() {
        let left = Duration::from_secs(10).saturating_sub(t0.elapsed());
        let Ok(Some((handle, dv))) = tokio::time::timeout(left, rx.recv()).await else {
            panic!("only items {good:?} of 1..=7 delivered Good values");
        };
        if dv.status.is_none_or(|st| st.is_good()) && dv.value.is_some() {
            good.insert(handle);
        }
    }
    // The simulator holds the gateway's status subscription and three for
    // the seven items.
    let subs = fieldkit::sim_summary(
        &sim,
        opcua_types::VariableId::Server_ServerDiagnostics_ServerDiagnosticsSummary_CurrentSubscriptionCount,
    );
    assert_eq!(subs, 4, "status subscription + 3 data subscriptions");
    let history = gw.engine().field_history("capped").unwrap();
    assert!(
        history
            .iter()
            .any(|e| e.kind == "items_spread" && e.detail.contains("at most 3")),
        "{history:?}"
    );
    let _ = s.disconnect().await;
    let _ = h.await;
    gw.stop().await;
    sim.cancel();
}

/// Waits until the gateway publishes ServiceLevel `want` for the reason
/// `why`, read over OPC UA (Server.ServiceLevel) and from the console's view.
async fn wait_level(gw: &TestGateway, s: &opcua_client::Session, want: u8, why: &str) {
    let t0 = Instant::now();
    loop {
        let read = s
            .read(
                &[ReadValueId::from(NodeId::new(0, 2267u32))],
                TimestampsToReturn::Neither,
                0.0,
            )
            .await
            .unwrap();
        let (source, reason) = gw.engine().service_level_source();
        if read[0].value == Some(Variant::Byte(want)) && reason == why {
            assert_eq!(source, "computed");
            assert_eq!(gw.engine().service_level(), want);
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "ServiceLevel {:?} ({reason}), not {want} ({why})",
            read[0].value
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Issue 18 item 5: a standalone gateway computes its ServiceLevel from its
/// health. Two field connections, one of them to nothing: Degraded (2 +
/// 197 x 1/2) with the reason; the other's field server stops: NoData once
/// the grace for a lost connection is over.
#[tokio::test]
async fn service_level_follows_the_field_connections() {
    let tmp = tempfile::tempdir().unwrap();
    let sim = start_sim(tmp.path(), "level").await;
    let nothing = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("opc.tcp://127.0.0.1:{}/", l.local_addr().unwrap().port())
    };
    let gw = TestGateway::start(&format!(
        "{}{}",
        field_toml("up", "none", &[&sim.endpoint_url]),
        field_toml("gone", "none", &[&nothing])
    ))
    .await;
    wait_connected(&gw, "up").await;
    let (s, h) = connect(&gw, "level").await;
    wait_level(&gw, &s, 100, "1 of 2 field connections up").await;
    // Taken before the field server stops: the connection cannot be lost
    // earlier, so the level cannot drop before the grace from here.
    let lost = Instant::now();
    sim.cancel();
    sim.stopped().await;
    wait_level(&gw, &s, 1, "all 2 field connections are down").await;
    assert!(
        lost.elapsed() >= uagate_server::level::FIELD_DOWN_GRACE,
        "counted down before the grace: {:?}",
        lost.elapsed()
    );
    let _ = s.disconnect().await;
    let _ = h.await;
    gw.stop().await;
}

/// A gateway that stops closes its sessions on the field servers
/// (CloseSession, not left to time out: a small PLC allows only a few), and
/// closes its connections together rather than one after another.
#[tokio::test]
async fn stopping_the_gateway_closes_its_field_sessions_promptly() {
    use opcua_types::VariableId::Server_ServerDiagnostics_ServerDiagnosticsSummary_CurrentSessionCount as SESSIONS;
    let tmp = tempfile::tempdir().unwrap();
    let a = start_sim(tmp.path(), "stop-a").await;
    let b = start_sim(tmp.path(), "stop-b").await;
    let gw = TestGateway::start(&format!(
        "{}{}",
        field_toml("line1", "none", &[&a.endpoint_url]),
        field_toml("line2", "none", &[&b.endpoint_url])
    ))
    .await;
    wait_connected(&gw, "line1").await;
    wait_connected(&gw, "line2").await;
    assert_eq!(sim_summary(&a, SESSIONS), 1, "the gateway's session on A");
    assert_eq!(sim_summary(&b, SESSIONS), 1, "the gateway's session on B");

    let t0 = Instant::now();
    gw.stop().await;
    let took = t0.elapsed();
    // Each connection may take up to 2 s to close; two in sequence would
    // take longer than this even when both hang.
    assert!(took < Duration::from_millis(1900), "stop took {took:?}");
    assert_eq!(
        sim_summary(&a, SESSIONS),
        0,
        "A still has the gateway's session after stop"
    );
    assert_eq!(
        sim_summary(&b, SESSIONS),
        0,
        "B still has the gateway's session after stop"
    );
    a.cancel();
    b.cancel();
}

/// A gateway with one field connection `line1` to a fresh simulator
/// (`extra` configuration before it), connected, and an anonymous session
/// on it: the start of the tests below. The simulator and its directory
/// live as long as this.
struct OneField {
    _tmp: tempfile::TempDir,
    _sim: uagate_sim::SimHandle,
    gw: TestGateway,
    s: std::sync::Arc<opcua_client::Session>,
    h: tokio::task::JoinHandle<StatusCode>,
    /// The simulator's namespace index in the gateway.
    ns: u16,
}

impl OneField {
    async fn start(extra: &str, session_name: &str) -> OneField {
        let tmp = tempfile::tempdir().unwrap();
        let sim = start_sim(tmp.path(), "a").await;
        let gw = TestGateway::start(&format!(
            "{extra}{}",
            field_toml("line1", "none", &[&sim.endpoint_url])
        ))
        .await;
        wait_connected(&gw, "line1").await;
        let (s, h) = connect(&gw, session_name).await;
        let ns = ns_of(&s, uagate_sim::NAMESPACE_URI).await;
        OneField {
            _tmp: tmp,
            _sim: sim,
            gw,
            s,
            h,
            ns,
        }
    }

    async fn stop(self) {
        self.s.disconnect().await.unwrap();
        self.h.abort();
        self.gw.stop().await;
    }
}

/// A Browse whose View carries a Timestamp (the address space "as of" a
/// time; asyncua's raw BrowseRequest sends one) is answered on mounted
/// nodes as on local ones, with the address space as it is now. Before, the
/// Timestamp went to the field server, which faulted the Browse: the mount
/// folder looked empty and its children BadServerNotConnected.
#[tokio::test]
async fn a_browse_with_a_view_timestamp_reaches_mounted_nodes() {
    use opcua_types::ViewDescription;
    let f = OneField::start("", "field-view").await;
    let (s, ns) = (&f.s, f.ns);
    let forward = |node_id: NodeId| BrowseDescription {
        node_id,
        browse_direction: BrowseDirection::Forward,
        reference_type_id: NodeId::new(0, 33u32),
        include_subtypes: true,
        node_class_mask: NodeClassMask::all().bits(),
        result_mask: BrowseResultMask::All as u32,
    };
    let nodes = [
        forward(NodeId::new(2, "Field.line1")),
        forward(NodeId::new(ns, "Simulation")),
    ];
    let now = s.browse(&nodes, 0, None).await.unwrap();
    let view = ViewDescription {
        timestamp: opcua_types::DateTime::now(),
        ..Default::default()
    };
    let as_of = s.browse(&nodes, 0, Some(view)).await.unwrap();
    for (plain, timed) in now.iter().zip(&as_of) {
        assert_eq!(timed.status_code, StatusCode::Good, "{timed:?}");
        assert!(!ref_ids(plain).is_empty(), "{plain:?}");
        assert_eq!(ref_ids(timed), ref_ids(plain));
    }
    f.stop().await;
}

/// A Browse of a mounted node with a browse direction that is none of
/// the three, or a standard reference type id that names no reference
/// type, is refused by the gateway with the Part 4 status, whatever the
/// field server would have said (the demo's simulator answers Good).
#[tokio::test]
async fn a_browse_of_a_mounted_node_with_an_invalid_direction_or_reference_type_is_refused() {
    let f = OneField::start("", "field-browse-checks").await;
    let (s, ns) = (&f.s, f.ns);
    let node = |browse_direction, reference_type_id| BrowseDescription {
        node_id: NodeId::new(ns, "Simulation"),
        browse_direction,
        reference_type_id,
        include_subtypes: true,
        node_class_mask: NodeClassMask::all().bits(),
        result_mask: BrowseResultMask::All as u32,
    };
    let nodes = [
        node(BrowseDirection::Invalid, NodeId::new(0, 33u32)),
        // ObjectsFolder: a node of namespace 0, not a reference type.
        node(BrowseDirection::Forward, NodeId::new(0, 85u32)),
        node(BrowseDirection::Forward, NodeId::new(0, 33u32)),
    ];
    let results = s.browse(&nodes, 0, None).await.unwrap();
    let statuses: Vec<StatusCode> = results.iter().map(|r| r.status_code).collect();
    assert_eq!(
        statuses,
        [
            StatusCode::BadBrowseDirectionInvalid,
            StatusCode::BadReferenceTypeIdInvalid,
            StatusCode::Good
        ]
    );
    assert!(!ref_ids(&results[2]).is_empty(), "{:?}", results[2]);
    f.stop().await;
}

/// Reads `attribute` of each node through the gateway.
async fn read_attribute(
    s: &opcua_client::Session,
    nodes: &[NodeId],
    attribute: u32,
) -> Vec<DataValue> {
    let ids: Vec<ReadValueId> = nodes
        .iter()
        .map(|n| ReadValueId {
            node_id: n.clone(),
            attribute_id: attribute,
            ..Default::default()
        })
        .collect();
    s.read(&ids, TimestampsToReturn::Neither, 0.0)
        .await
        .unwrap()
}

/// A caller without the right to write (here anonymous, the default) may
/// not call a field server's methods (they may start or change a machine),
/// and what it reads of UserAccessLevel and UserExecutable says so, so that
/// an HMI offers no input that would fail (Part 3 5.6.2, 5.7). With the
/// right (allow_anonymous_write), the same reads keep the write bit and the
/// method is executable.
#[tokio::test]
async fn a_caller_without_write_rights_reads_its_own_access_and_may_not_call_field_methods() {
    for anonymous_write in [false, true] {
        let f = OneField::start(
            &format!("[server]\nallow_anonymous_write = {anonymous_write}\n"),
            "field-rights",
        )
        .await;
        let (s, ns) = (&f.s, f.ns);
        let setpoint = NodeId::new(ns, "Simulation.Setpoint");
        let add = NodeId::new(ns, "Simulation.Add");
        let state_change = NodeId::new(0, 12886u32);

        let level = read_attribute(s, std::slice::from_ref(&setpoint), 17).await;
        assert_eq!(
            level[0].value,
            Some(Variant::Byte(3)),
            "AccessLevel: {level:?}"
        );
        let user_level = read_attribute(s, std::slice::from_ref(&setpoint), 18).await;
        let expected = if anonymous_write { 3 } else { 1 };
        assert_eq!(
            user_level[0].value,
            Some(Variant::Byte(expected)),
            "UserAccessLevel, anonymous_write {anonymous_write}: {user_level:?}"
        );
        let executable = read_attribute(s, &[add.clone(), state_change], 22).await;
        assert_eq!(
            executable[0].value,
            Some(Variant::Boolean(anonymous_write)),
            "{executable:?}"
        );
        assert_eq!(
            executable[1].value,
            Some(Variant::Boolean(false)),
            "RequestServerStateChange is an administrator's: {executable:?}"
        );
        let r = s
            .call_one(CallMethodRequest {
                object_id: NodeId::new(ns, "Simulation"),
                method_id: add,
                input_arguments: Some(vec![Variant::Double(2.0), Variant::Double(3.5)]),
            })
            .await
            .unwrap();
        let expected = if anonymous_write {
            StatusCode::Good
        } else {
            StatusCode::BadUserAccessDenied
        };
        assert_eq!(r.status_code, expected, "{r:?}");
        f.stop().await;
    }
}

/// The mount folder shows the field server's content and nothing of the
/// field server's own standard nodes: one HasTypeDefinition (not the
/// folder's and the field Objects folder's), no Locations or Aliases of
/// the field server (in the gateway those ids are the gateway's own nodes),
/// and a mounted node's inverse reference up to it names it as the gateway
/// does (`2:line1`, not the field server's `0:Objects`).
#[tokio::test]
async fn the_mount_folder_shows_the_field_content_once_and_under_its_own_name() {
    use opcua_types::{BrowseDirection as D, NodeClass};
    let f = OneField::start("", "field-folder").await;
    let (s, ns) = (&f.s, f.ns);
    let all = |node_id: NodeId, browse_direction: D| BrowseDescription {
        node_id,
        browse_direction,
        reference_type_id: NodeId::null(),
        include_subtypes: true,
        node_class_mask: NodeClassMask::all().bits(),
        result_mask: BrowseResultMask::All as u32,
    };
    let folder = NodeId::new(2, "Field.line1");
    let r = s
        .browse(&[all(folder.clone(), D::Forward)], 0, None)
        .await
        .unwrap()
        .remove(0);
    let refs = r.references.unwrap_or_default();
    let type_definitions = refs
        .iter()
        .filter(|rd| rd.reference_type_id == NodeId::new(0, 40u32))
        .count();
    assert_eq!(type_definitions, 1, "{refs:#?}");
    assert!(
        !refs.iter().any(|rd| rd.node_id.node_id.namespace == 0
            && matches!(rd.node_class, NodeClass::Object | NodeClass::Variable)),
        "a standard instance of the field server: {refs:#?}"
    );
    assert!(
        refs.iter()
            .any(|rd| rd.node_id.node_id == NodeId::new(ns, "Simulation")),
        "{refs:#?}"
    );
    let up = s
        .browse(&[all(NodeId::new(ns, "Simulation"), D::Inverse)], 0, None)
        .await
        .unwrap()
        .remove(0)
        .references
        .unwrap_or_default();
    let parent = up
        .iter()
        .find(|rd| rd.node_id.node_id == folder)
        .unwrap_or_else(|| panic!("no reference up to the mount folder: {up:#?}"));
    assert_eq!(parent.browse_name, QualifiedName::new(2, "line1"));
    assert_eq!(parent.display_name.text.as_ref(), "line1");
    f.stop().await;
}

/// CreateMonitoredItems on a mounted node with an attribute no node has is
/// refused at once (BadAttributeIdInvalid), as on a local node; before it
/// was created Good and never reported anything.
#[tokio::test]
async fn a_monitored_item_with_an_unknown_attribute_on_a_mounted_node_is_refused() {
    let f = OneField::start("", "field-attr").await;
    let (s, ns) = (&f.s, f.ns);
    let sub = s
        .create_subscription(
            Duration::from_millis(100),
            60,
            10,
            0,
            0,
            true,
            DataChangeCallback::new(|_, _| {}),
        )
        .await
        .unwrap();
    let item = |attribute_id: u32| MonitoredItemCreateRequest {
        item_to_monitor: ReadValueId {
            node_id: NodeId::new(ns, "Simulation.Counter"),
            attribute_id,
            ..Default::default()
        },
        monitoring_mode: opcua_types::MonitoringMode::Reporting,
        requested_parameters: opcua_types::MonitoringParameters {
            client_handle: attribute_id,
            sampling_interval: 100.0,
            queue_size: 1,
            discard_oldest: true,
            ..Default::default()
        },
    };
    let results = s
        .create_monitored_items(sub, TimestampsToReturn::Both, vec![item(99), item(13)])
        .await
        .unwrap();
    assert_eq!(
        results[0].result.status_code,
        StatusCode::BadAttributeIdInvalid
    );
    assert_eq!(results[1].result.status_code, StatusCode::Good);
    f.stop().await;
}
