//! Server.ServerRedundancy follows `[redundancy]`: the subtype and its
//! members are what a redundancy-aware client reads (Part 5 §6.3.7-6.3.9).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::TestGateway;
use opcua_types::{ExtensionObject, NodeId, RedundantServerDataType, Variant};

const REDUNDANCY_SUPPORT: u32 = 3709;
const SERVER_URI_ARRAY: u32 = 11314;
const CURRENT_SERVER_ID: u32 = 11312;
const REDUNDANT_SERVER_ARRAY: u32 = 11313;

async fn value(gw: &TestGateway, id: u32) -> Option<Variant> {
    let (chan, token) = gw.anon_session("redundancy").await;
    let v = chan.read_value(&token, NodeId::new(0, id)).await.value;
    chan.close().await;
    v
}

#[tokio::test]
async fn default_is_standalone() {
    let gw = TestGateway::start("").await;
    assert_eq!(
        value(&gw, REDUNDANCY_SUPPORT).await,
        Some(Variant::Int32(0))
    );
    gw.stop().await;
}

#[tokio::test]
async fn warm_set_lists_its_peers() {
    let gw = TestGateway::start(
        "[redundancy]\nsupport = \"warm\"\nserver_uris = [\"urn:uagate:peer-b\"]\n",
    )
    .await;
    assert_eq!(
        value(&gw, REDUNDANCY_SUPPORT).await,
        Some(Variant::Int32(2))
    );
    match value(&gw, SERVER_URI_ARRAY).await {
        Some(Variant::Array(a)) => {
            assert_eq!(a.values, vec![Variant::from("urn:uagate:peer-b")]);
        }
        other => panic!("ServerUriArray: {other:?}"),
    }
    gw.stop().await;
}

#[tokio::test]
async fn transparent_set_names_the_current_server_and_its_level() {
    let gw = TestGateway::start(
        "[redundancy]\nsupport = \"transparent\"\ncurrent_server_id = \"urn:uagate:pair\"\n",
    )
    .await;
    assert_eq!(
        value(&gw, REDUNDANCY_SUPPORT).await,
        Some(Variant::Int32(4))
    );
    assert_eq!(
        value(&gw, CURRENT_SERVER_ID).await,
        Some(Variant::from("urn:uagate:pair"))
    );
    gw.engine().set_service_level_override(Some(180));
    let members = match value(&gw, REDUNDANT_SERVER_ARRAY).await {
        Some(Variant::Array(a)) => a.values,
        other => panic!("RedundantServerArray: {other:?}"),
    };
    assert_eq!(members.len(), 1);
    let Variant::ExtensionObject(eo) = &members[0] else {
        panic!("not a structure: {:?}", members[0]);
    };
    let eo: &ExtensionObject = eo;
    let member = eo
        .inner_as::<RedundantServerDataType>()
        .expect("RedundantServerDataType");
    assert_eq!(member.service_level, 180);
    gw.stop().await;
}

/// Issue 18 item 5: without hand-written `[redundancy]`, the pair's
/// membership drives ServerRedundancy: a Hot set whose ServerUriArray lists
/// the other appliance; back to standalone when the pair is one member.
#[tokio::test]
async fn the_pair_membership_makes_a_hot_set() {
    use uagate_server::level::{PairMember, PairRole, PairView};
    let gw = TestGateway::start("[server]\napplication_uri = \"urn:uagate:a\"\n").await;
    let member = |node_id: u64, uri: &str| PairMember {
        node_id,
        addr: format!("10.0.0.{node_id}:4850"),
        voter: node_id == 1,
        application_uri: uri.into(),
        ..PairMember::default()
    };
    // A witness serves no OPC UA: never in ServerUriArray.
    let witness = PairMember {
        witness: true,
        ..member(3, "")
    };
    gw.engine().set_pair_view(PairView {
        role: PairRole::Leader,
        node_id: 1,
        members: vec![
            member(1, "urn:uagate:a"),
            member(2, "urn:uagate:b"),
            witness.clone(),
        ],
        ..PairView::default()
    });
    assert_eq!(
        value(&gw, REDUNDANCY_SUPPORT).await,
        Some(Variant::Int32(3)),
        "Hot"
    );
    assert_eq!(
        value(&gw, SERVER_URI_ARRAY).await,
        Some(Variant::from(vec!["urn:uagate:b".to_string()]))
    );
    gw.engine().set_pair_view(PairView {
        role: PairRole::Standalone,
        node_id: 1,
        members: vec![member(1, "urn:uagate:a"), witness],
        ..PairView::default()
    });
    assert_eq!(
        value(&gw, REDUNDANCY_SUPPORT).await,
        Some(Variant::Int32(0))
    );
    gw.stop().await;
}
