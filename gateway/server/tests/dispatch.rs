//! The request dispatcher under resource isolation: a full request queue
//! answers BadServerTooBusy with a RetryAfterMs hint, and a Publish that
//! waits for notifications does not hold an execution slot.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod hand;

use common::TestGateway;
use hand::{connect_from, HandClient};
use opcua_core::ResponseMessage;
use opcua_types::{
    AdditionalParametersType, CreateSessionRequest, CreateSubscriptionRequest, PublishRequest,
    StatusCode, Variant,
};

async fn session(gw: &TestGateway, src: [u8; 4]) -> HandClient {
    let s = connect_from(src, gw.addr).await;
    let mut c = HandClient::open(s, &gw.url).await;
    let created = c
        .call(
            CreateSessionRequest {
                request_header: c.header(),
                session_name: "dispatch".into(),
                requested_session_timeout: 60_000.0,
                ..Default::default()
            }
            .into(),
        )
        .await;
    c.activate_anonymous(created).await;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_too_busy_with_a_retry_hint() {
    // One execution slot and a queue of two: pipelined reads overflow it.
    let gw = TestGateway::start(
        "[server]\nmax_request_thread_count = 1\nmax_queued_request_count = 2\n\
         [isolation]\nmode = \"fair_share\"\n",
    )
    .await;
    let mut c = session(&gw, [127, 0, 0, 2]).await;
    // All requests in one write: the gateway decodes them faster than one
    // slot executes them, whatever the machine's speed.
    const N: usize = 200;
    let burst = (0..N).map(|_| c.read_request()).collect();
    c.send_burst(burst).await;
    let (mut good, mut busy) = (0, 0);
    for _ in 0..N {
        match c.recv().await {
            ResponseMessage::Read(_) => good += 1,
            ResponseMessage::ServiceFault(f) => {
                assert_eq!(
                    f.response_header.service_result,
                    StatusCode::BadServerTooBusy
                );
                let params = f
                    .response_header
                    .additional_header
                    .inner_as::<AdditionalParametersType>()
                    .expect("RetryAfterMs hint in additionalHeader");
                let hint = params.parameters.as_ref().unwrap();
                assert_eq!(hint[0].key.name.as_ref(), "RetryAfterMs");
                assert!(
                    matches!(hint[0].value, Variant::Int64(ms) if ms >= 50),
                    "{:?}",
                    hint[0].value
                );
                busy += 1;
            }
            other => panic!("unexpected response {other:?}"),
        }
    }
    assert_eq!(good + busy, N, "every request is answered");
    assert!(busy > 0, "the queue of 2 must overflow ({good} good)");
    assert!(good > 0, "queued requests still run");
    // The gateway recovers: a new read after the burst succeeds.
    assert_eq!(c.read_current_time().await, StatusCode::Good);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_publish_does_not_occupy_an_execution_slot() {
    // A single execution slot: if the held Publish kept it, the Read would starve.
    let gw = TestGateway::start(
        "[server]\nmax_request_thread_count = 1\n[isolation]\nmode = \"fair_share\"\n",
    )
    .await;
    let mut c = session(&gw, [127, 0, 0, 2]).await;
    let created = c
        .call(
            CreateSubscriptionRequest {
                request_header: c.header(),
                requested_publishing_interval: 60_000.0,
                requested_lifetime_count: 30,
                requested_max_keep_alive_count: 10,
                publishing_enabled: true,
                ..Default::default()
            }
            .into(),
        )
        .await;
    assert!(
        matches!(created, ResponseMessage::CreateSubscription(_)),
        "{created:?}"
    );
    let publish_id = c
        .send(
            PublishRequest {
                request_header: c.header(),
                subscription_acknowledgements: None,
            }
            .into(),
        )
        .await;
    // The Publish is held (keep-alive only after a minute); a Read gets through.
    let read = c.read_request();
    let read_id = c.send(read).await;
    let (id, response) = c.recv_with_id().await;
    assert_eq!(id, read_id, "the Read is answered first");
    assert!(matches!(response, ResponseMessage::Read(_)), "{response:?}");
    assert_ne!(id, publish_id);
    let usage = gw.engine().isolation_snapshot();
    assert!(format!("{usage:?}").contains("ParkedRequest"), "{usage:?}");
    gw.stop().await;
}

/// Usage of one stage from the engine's isolation snapshot.
fn usage(gw: &TestGateway, stage: uagate_config::Stage) -> u64 {
    gw.engine()
        .isolation_snapshot()
        .usage
        .iter()
        .find(|(s, _)| *s == stage)
        .map(|(_, u)| *u)
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_answered_by_the_timer_releases_its_parked_charges() {
    let gw = TestGateway::start("").await;
    let mut c = session(&gw, [127, 0, 0, 2]).await;
    let created = c
        .call(
            CreateSubscriptionRequest {
                request_header: c.header(),
                requested_publishing_interval: 50.0,
                requested_lifetime_count: 300,
                requested_max_keep_alive_count: 1,
                publishing_enabled: true,
                ..Default::default()
            }
            .into(),
        )
        .await;
    assert!(
        matches!(created, ResponseMessage::CreateSubscription(_)),
        "{created:?}"
    );
    // Many Publish round trips, each answered later by the subscription timer.
    for _ in 0..30 {
        let publish = PublishRequest {
            request_header: c.header(),
            subscription_acknowledgements: None,
        };
        let response = c.call(publish.into()).await;
        assert!(
            matches!(response, ResponseMessage::Publish(_)),
            "{response:?}"
        );
    }
    // Nothing is parked any more: every answered Publish released its slot
    // and its RequestQueueBytes charge (a leak here stalls all sessions).
    assert_eq!(usage(&gw, uagate_config::Stage::ParkedRequest), 0);
    assert_eq!(usage(&gw, uagate_config::Stage::RequestQueueBytes), 0);
    gw.stop().await;
}
