//! ConditionRefresh / ConditionRefresh2 northbound over real sockets, on a
//! gateway without field servers: the checks (ownership, arguments, items)
//! and the RefreshStart/RefreshEnd pair a subscription of local items gets.
//! The refresh through a field server is tested with node-opcua
//! (`tests/interop/node/alarms.test.mjs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{demo, events, select, server_event_item, value_item, Chan, TestGateway};
use opcua_types::{NodeId, StatusCode, Variant};

const CONDITION_TYPE: u32 = 2782;
const CONDITION_REFRESH: u32 = 3875;
const CONDITION_REFRESH2: u32 = 12912;
const REFRESH_START: u32 = 2787;
const REFRESH_END: u32 = 2788;
const BASE_EVENT_TYPE: u32 = 2041;

async fn refresh(chan: &Chan, token: &NodeId, method: u32, args: Vec<Variant>) -> StatusCode {
    chan.call(
        token,
        NodeId::new(0, CONDITION_TYPE),
        NodeId::new(0, method),
        args,
    )
    .await
    .status_code
}

/// The EventTypes of the events of item `handle` until `n` have come.
async fn event_types(chan: &Chan, token: &NodeId, handle: u32, n: usize) -> Vec<NodeId> {
    let mut seen = Vec::new();
    chan.publish_until(token, Duration::from_secs(10), |r| {
        for (h, fields) in events(r) {
            if h == handle {
                if let Some(Variant::NodeId(t)) = fields.first() {
                    seen.push((**t).clone());
                }
            }
        }
        (seen.len() >= n).then_some(())
    })
    .await;
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn condition_refresh_checks_and_frames_a_local_subscription() {
    let gw = TestGateway::start("[server]\nmin_publishing_interval = \"50ms\"\n").await;
    let (chan, token) = gw.anon_session("a").await;
    let (other, other_token) = gw.anon_session("b").await;
    let sub = chan.create_subscription(&token, 50.0, 300, 10).await;
    let id = sub.subscription_id;
    let data_only = chan.create_subscription(&token, 50.0, 300, 10).await;
    let data = chan
        .monitor(
            &token,
            data_only.subscription_id,
            vec![value_item(demo("Gateway.Demo.Setpoint"), 1, 0.0)],
        )
        .await;
    let ev = chan
        .monitor(
            &token,
            id,
            vec![server_event_item(
                7,
                vec![select(BASE_EVENT_TYPE, "EventType")],
            )],
        )
        .await;
    assert_eq!(ev[0].status_code, StatusCode::Good);
    let ev_id = ev[0].monitored_item_id;

    // Another session's subscription, an unknown one.
    let u = |v: u32| Variant::UInt32(v);
    assert_eq!(
        refresh(&other, &other_token, CONDITION_REFRESH, vec![u(id)]).await,
        StatusCode::BadSubscriptionIdInvalid
    );
    assert_eq!(
        refresh(&chan, &token, CONDITION_REFRESH, vec![u(id + 1000)]).await,
        StatusCode::BadSubscriptionIdInvalid
    );
    // Arguments.
    assert_eq!(
        refresh(&chan, &token, CONDITION_REFRESH, vec![]).await,
        StatusCode::BadArgumentsMissing
    );
    assert_eq!(
        refresh(&chan, &token, CONDITION_REFRESH, vec![u(id), u(1)]).await,
        StatusCode::BadTooManyArguments
    );
    assert_eq!(
        refresh(&chan, &token, CONDITION_REFRESH, vec![Variant::from("x")]).await,
        StatusCode::BadInvalidArgument
    );
    // No event item / not an event item.
    assert_eq!(
        refresh(
            &chan,
            &token,
            CONDITION_REFRESH,
            vec![u(data_only.subscription_id)]
        )
        .await,
        StatusCode::BadNothingToDo
    );
    assert_eq!(
        refresh(
            &chan,
            &token,
            CONDITION_REFRESH2,
            vec![u(data_only.subscription_id), u(data[0].monitored_item_id)]
        )
        .await,
        StatusCode::BadMonitoredItemIdInvalid
    );
    // Another object than ConditionType (or the Server object).
    let r = chan
        .call(
            &token,
            demo("Gateway.Demo"),
            NodeId::new(0, CONDITION_REFRESH),
            vec![u(id)],
        )
        .await;
    assert_eq!(r.status_code, StatusCode::BadMethodInvalid);

    // The local space has no conditions: Start, then End.
    assert_eq!(
        refresh(&chan, &token, CONDITION_REFRESH, vec![u(id)]).await,
        StatusCode::Good
    );
    assert_eq!(
        event_types(&chan, &token, 7, 2).await,
        vec![NodeId::new(0, REFRESH_START), NodeId::new(0, REFRESH_END)]
    );
    assert_eq!(
        refresh(&chan, &token, CONDITION_REFRESH2, vec![u(id), u(ev_id)]).await,
        StatusCode::Good
    );
    assert_eq!(
        event_types(&chan, &token, 7, 2).await,
        vec![NodeId::new(0, REFRESH_START), NodeId::new(0, REFRESH_END)]
    );
    chan.close().await;
    other.close().await;
    gw.stop().await;
}
