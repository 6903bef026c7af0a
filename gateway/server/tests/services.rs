//! View, attribute and discovery services over the wire, with their
//! operation limits.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;

use common::{bounded, Chan, TestGateway};
use opcua_core::ResponseMessage;
use opcua_crypto::SecurityPolicy;
use opcua_types::MessageSecurityMode;
use opcua_types::{
    AttributeId, BrowseDescription, BrowseDirection, BrowseNextRequest, BrowsePath, BrowseRequest,
    BrowseResult, ByteString, ExpandedNodeId, NodeId, QualifiedName, ReadValueId,
    RegisterNodesRequest, RelativePath, RelativePathElement, StatusCode,
    TranslateBrowsePathsToNodeIdsRequest, UnregisterNodesRequest, ViewDescription,
};

const SERVER_OBJECT: u32 = 2253;

fn browse_request(chan: &Chan, token: &NodeId, node: NodeId, max: u32) -> BrowseRequest {
    BrowseRequest {
        request_header: chan.header(token),
        view: ViewDescription::default(),
        requested_max_references_per_node: max,
        nodes_to_browse: Some(vec![BrowseDescription {
            node_id: node,
            browse_direction: BrowseDirection::Both,
            reference_type_id: NodeId::null(),
            include_subtypes: true,
            node_class_mask: 0,
            result_mask: 0x3f,
        }]),
    }
}

fn one_browse_result(resp: ResponseMessage) -> BrowseResult {
    let mut results = match resp {
        ResponseMessage::Browse(r) => r.results.unwrap(),
        ResponseMessage::BrowseNext(r) => r.results.unwrap(),
        other => panic!("unexpected response {}", other.type_name()),
    };
    assert_eq!(results.len(), 1);
    results.remove(0)
}

type RefKey = (String, bool, String);

fn keys(r: &BrowseResult) -> Vec<RefKey> {
    r.references
        .as_deref()
        .unwrap_or(&[])
        .iter()
        .map(|d| {
            (
                d.reference_type_id.to_string(),
                d.is_forward,
                d.node_id.to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paged_browse_equals_unlimited_browse() {
    let gw = TestGateway::start("").await;
    let (chan, token) = gw.anon_session("c").await;
    let server = NodeId::new(0, SERVER_OBJECT);

    let all = one_browse_result(
        chan.send(browse_request(&chan, &token, server.clone(), 0))
            .await
            .unwrap(),
    );
    assert_eq!(all.status_code, StatusCode::Good);
    assert!(all.continuation_point.is_null());
    let all = keys(&all);
    assert!(all.len() > 4, "the Server object has many references");

    let mut paged = Vec::new();
    let mut page = one_browse_result(
        chan.send(browse_request(&chan, &token, server, 2))
            .await
            .unwrap(),
    );
    let mut pages = 0;
    loop {
        assert_eq!(page.status_code, StatusCode::Good);
        let k = keys(&page);
        assert!(k.len() <= 2, "page of {} references", k.len());
        paged.extend(k);
        pages += 1;
        assert!(pages <= all.len(), "BrowseNext does not terminate");
        if page.continuation_point.is_null() {
            break;
        }
        page = one_browse_result(
            chan.send(BrowseNextRequest {
                request_header: chan.header(&token),
                release_continuation_points: false,
                continuation_points: Some(vec![page.continuation_point.clone()]),
            })
            .await
            .unwrap(),
        );
    }
    assert!(pages >= all.len().div_ceil(2));
    assert_eq!(paged.len(), all.len(), "no duplicates or losses");
    assert_eq!(
        paged.iter().collect::<BTreeSet<_>>(),
        all.iter().collect::<BTreeSet<_>>()
    );

    // A used-up or made-up continuation point is invalid.
    let bogus = one_browse_result(
        chan.send(BrowseNextRequest {
            request_header: chan.header(&token),
            release_continuation_points: false,
            continuation_points: Some(vec![ByteString::from(b"not a continuation point".to_vec())]),
        })
        .await
        .unwrap(),
    );
    assert_eq!(bogus.status_code, StatusCode::BadContinuationPointInvalid);

    // Released points are gone.
    let first = one_browse_result(
        chan.send(browse_request(
            &chan,
            &token,
            NodeId::new(0, SERVER_OBJECT),
            1,
        ))
        .await
        .unwrap(),
    );
    assert!(!first.continuation_point.is_null());
    let released = one_browse_result(
        chan.send(BrowseNextRequest {
            request_header: chan.header(&token),
            release_continuation_points: true,
            continuation_points: Some(vec![first.continuation_point.clone()]),
        })
        .await
        .unwrap(),
    );
    assert_eq!(released.status_code, StatusCode::Good);
    let again = one_browse_result(
        chan.send(BrowseNextRequest {
            request_header: chan.header(&token),
            release_continuation_points: false,
            continuation_points: Some(vec![first.continuation_point]),
        })
        .await
        .unwrap(),
    );
    assert_eq!(again.status_code, StatusCode::BadContinuationPointInvalid);

    // Browse of an unknown node, and an empty Browse.
    let unknown = one_browse_result(
        chan.send(browse_request(&chan, &token, NodeId::new(0, 999_999u32), 0))
            .await
            .unwrap(),
    );
    assert_eq!(unknown.status_code, StatusCode::BadNodeIdUnknown);
    let mut empty = browse_request(&chan, &token, NodeId::null(), 0);
    empty.nodes_to_browse = Some(vec![]);
    assert_eq!(chan.status(empty).await, StatusCode::BadNothingToDo);
    chan.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn translate_path_to_current_time() {
    let gw = TestGateway::start("").await;
    let (chan, token) = gw.anon_session("c").await;
    let element = |name: &str| RelativePathElement {
        reference_type_id: NodeId::new(0, 33u32), // HierarchicalReferences
        is_inverse: false,
        include_subtypes: true,
        target_name: QualifiedName::new(0, name),
    };
    let path = |names: &[&str]| BrowsePath {
        starting_node: NodeId::new(0, 84u32), // Root
        relative_path: RelativePath {
            elements: Some(names.iter().map(|n| element(n)).collect()),
        },
    };
    let resp = chan
        .send(TranslateBrowsePathsToNodeIdsRequest {
            request_header: chan.header(&token),
            browse_paths: Some(vec![
                path(&["Objects", "Server", "ServerStatus", "CurrentTime"]),
                path(&["Objects", "NoSuchThing"]),
            ]),
        })
        .await
        .unwrap();
    let ResponseMessage::TranslateBrowsePathsToNodeIds(resp) = resp else {
        panic!("unexpected response {}", resp.type_name());
    };
    let results = resp.results.unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].status_code, StatusCode::Good);
    let targets = results[0].targets.as_deref().unwrap();
    assert_eq!(targets.len(), 1);
    assert_eq!(
        targets[0].target_id,
        ExpandedNodeId::from(NodeId::new(0, 2258u32))
    );
    assert_eq!(targets[0].remaining_path_index, u32::MAX);
    assert_eq!(results[1].status_code, StatusCode::BadNoMatch);
    chan.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_limits_and_per_item_errors() {
    let gw = TestGateway::start("[server]\nmax_nodes_per_read = 5\n").await;
    let (chan, token) = gw.anon_session("c").await;
    let ct = || ReadValueId::from(common::current_time());

    let too_many = chan.read(&token, (0..6).map(|_| ct()).collect()).await;
    assert_eq!(
        too_many.unwrap().response_header().service_result,
        StatusCode::BadTooManyOperations
    );
    let empty = chan.read(&token, vec![]).await.unwrap();
    assert_eq!(
        empty.response_header().service_result,
        StatusCode::BadNothingToDo
    );

    let resp = chan
        .read(
            &token,
            vec![
                ct(),
                ReadValueId::from(NodeId::new(0, 999_999u32)),
                ReadValueId {
                    attribute_id: 999,
                    ..ct()
                },
                ReadValueId {
                    attribute_id: AttributeId::BrowseName as u32,
                    ..ReadValueId::from(NodeId::new(0, SERVER_OBJECT))
                },
                ReadValueId::from(NodeId::new(7, "nowhere")),
            ],
        )
        .await
        .unwrap();
    assert_eq!(resp.response_header().service_result, StatusCode::Good);
    let ResponseMessage::Read(resp) = resp else {
        panic!("unexpected response");
    };
    let results = resp.results.unwrap();
    assert_eq!(results.len(), 5);
    assert!(results[0].status.is_none_or(|s| s.is_good()));
    assert!(results[0].value.is_some());
    assert_eq!(results[1].status, Some(StatusCode::BadNodeIdUnknown));
    assert_eq!(results[2].status, Some(StatusCode::BadAttributeIdInvalid));
    assert!(results[3].status.is_none_or(|s| s.is_good()));
    assert_eq!(
        results[3].value,
        Some(QualifiedName::new(0, "Server").into())
    );
    assert_eq!(results[4].status, Some(StatusCode::BadNodeIdUnknown));
    // Exactly the limit is fine.
    let five = chan.read(&token, (0..5).map(|_| ct()).collect()).await;
    assert_eq!(
        five.unwrap().response_header().service_result,
        StatusCode::Good
    );
    chan.close().await;
    gw.stop().await;
}

/// A request that decodes within the message limits but exceeds an
/// operation limit is a ServiceFault; the channel and session stay usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_far_over_the_operation_limit_keeps_the_channel() {
    let gw = TestGateway::start("").await;
    let (chan, token) = gw.anon_session_sending_up_to("c", 4 * 1024 * 1024).await;
    // About 1 MB: 50,000 numeric node ids, inside MaxMessageSize (4 MB).
    let nodes: Vec<ReadValueId> = (0..50_000u32)
        .map(|i| ReadValueId::from(NodeId::new(0, i)))
        .collect();
    let resp = chan
        .read(&token, nodes)
        .await
        .expect("an answer, not a closed channel");
    assert_eq!(
        resp.response_header().service_result,
        StatusCode::BadTooManyOperations
    );
    assert!(!chan.is_closed());
    assert_eq!(chan.read_status(&token).await, StatusCode::Good);
    chan.close().await;
    gw.stop().await;
}

/// An appliance's address space has no demo object unless the
/// configuration asks for it (`uagate demo` does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_object_is_there_only_when_configured() {
    for (config, present) in [("[server]\ndemo_nodes = false\n", false), ("", true)] {
        let gw = TestGateway::start(config).await;
        let (chan, token) = gw.anon_session("c").await;
        let counter = chan
            .read_value(&token, common::demo("Gateway.Demo.Counter"))
            .await;
        let browsed = one_browse_result(
            chan.send(browse_request(&chan, &token, NodeId::new(2, "Gateway"), 0))
                .await
                .unwrap(),
        );
        let names: Vec<String> = browsed
            .references
            .unwrap_or_default()
            .iter()
            .map(|r| r.browse_name.name.to_string())
            .collect();
        if present {
            assert!(counter.status.is_none_or(|s| s.is_good()), "{counter:?}");
            assert!(names.contains(&"Demo".to_string()), "{names:?}");
        } else {
            assert_eq!(counter.status, Some(StatusCode::BadNodeIdUnknown));
            assert!(!names.contains(&"Demo".to_string()), "{names:?}");
            assert!(!names.is_empty(), "the Gateway folder has its own nodes");
        }
        chan.close().await;
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_nodes_returns_the_ids() {
    let gw = TestGateway::start("").await;
    let (chan, token) = gw.anon_session("c").await;
    let ids = vec![
        common::current_time(),
        NodeId::new(0, SERVER_OBJECT),
        NodeId::new(1, "anything"),
    ];
    let resp = chan
        .send(RegisterNodesRequest {
            request_header: chan.header(&token),
            nodes_to_register: Some(ids.clone()),
        })
        .await
        .unwrap();
    let ResponseMessage::RegisterNodes(resp) = resp else {
        panic!("unexpected response {}", resp.type_name());
    };
    assert_eq!(resp.registered_node_ids, Some(ids.clone()));
    let status = chan
        .status(UnregisterNodesRequest {
            request_header: chan.header(&token),
            nodes_to_unregister: Some(ids),
        })
        .await;
    assert_eq!(status, StatusCode::Good);
    let status = chan
        .status(RegisterNodesRequest {
            request_header: chan.header(&token),
            nodes_to_register: Some(vec![]),
        })
        .await;
    assert_eq!(status, StatusCode::BadNothingToDo);
    chan.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_lists_endpoints_and_our_application() {
    let gw = TestGateway::start("[server]\napplication_uri = \"urn:uagate:test-gateway\"\n").await;
    let client = gw.client("discovery");
    let endpoints = bounded(
        "get endpoints",
        client.get_server_endpoints_from_url(gw.url.as_str()),
    )
    .await
    .unwrap();
    // 7 opc.tcp, the same 7 on opc.wss, and one opc.https endpoint.
    assert_eq!(endpoints.len(), 15);
    let (wss, https) = {
        let g = gw.gw.as_ref().unwrap();
        (g.wss_url.clone(), g.https_url.clone())
    };
    let mut combos = BTreeSet::new();
    for e in &endpoints {
        let (url, profile) = (e.endpoint_url.as_ref(), e.transport_profile_uri.as_ref());
        match profile {
            "http://opcfoundation.org/UA-Profile/Transport/uatcp-uasc-uabinary" => {
                assert_eq!(url, gw.url)
            }
            "http://opcfoundation.org/UA-Profile/Transport/wss-uasc-uabinary" => {
                assert_eq!(url, wss)
            }
            "http://opcfoundation.org/UA-Profile/Transport/https-uabinary" => {
                assert_eq!(url, https);
                assert_eq!(e.security_mode, MessageSecurityMode::None);
            }
            other => panic!("unexpected transport profile {other}"),
        }
        assert_eq!(e.server.application_uri.as_ref(), "urn:uagate:test-gateway");
        assert!(!e.server_certificate.is_null());
        combos.insert((
            profile.to_string(),
            e.security_policy_uri.to_string(),
            e.security_mode as i32,
        ));
    }
    assert_eq!(combos.len(), 15, "no duplicate endpoints");
    // Asked for one transport only: just its endpoints.
    let only_https = gw
        .chan(
            "discovery-https",
            SecurityPolicy::None,
            MessageSecurityMode::None,
        )
        .await
        .send(opcua_types::GetEndpointsRequest {
            request_header: opcua_types::RequestHeader::new(
                &NodeId::null(),
                &opcua_types::DateTime::now(),
                1,
            ),
            endpoint_url: gw.url.as_str().into(),
            locale_ids: None,
            profile_uris: Some(vec![
                "http://opcfoundation.org/UA-Profile/Transport/https-uabinary".into(),
            ]),
        })
        .await
        .expect("GetEndpoints answered");
    let ResponseMessage::GetEndpoints(only_https) = only_https else {
        panic!("GetEndpoints failed: {only_https:?}");
    };
    assert_eq!(only_https.endpoints.as_deref().map(<[_]>::len), Some(1));

    let servers = bounded(
        "find servers",
        client.find_servers(gw.url.as_str(), None, None),
    )
    .await
    .unwrap();
    assert_eq!(servers.len(), 1);
    assert_eq!(
        servers[0].application_uri.as_ref(),
        "urn:uagate:test-gateway"
    );
    let urls: Vec<String> = servers[0]
        .discovery_urls
        .as_deref()
        .unwrap()
        .iter()
        .map(|u| u.to_string())
        .collect();
    assert_eq!(urls[0], gw.url);
    assert_eq!(urls.len(), 3, "{urls:?}");
    let none = bounded(
        "find servers (other uri)",
        client.find_servers(gw.url.as_str(), None, Some(vec!["urn:someone:else".into()])),
    )
    .await
    .unwrap();
    assert!(none.is_empty());
    gw.stop().await;
}
