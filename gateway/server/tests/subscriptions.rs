//! Subscriptions, Write and Call over real sockets: publishing, keep-alive,
//! lifetime, Publish queue limits, Republish, transfers, GetMonitoredItems.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{data_changes, demo, is_keep_alive, status_change, value_item, TestGateway};
use opcua_client::IdentityToken;
use opcua_core::ResponseMessage;
use opcua_crypto::SecurityPolicy;
use opcua_types::{
    DeleteSubscriptionsRequest, MessageSecurityMode, NodeId, RepublishRequest, StatusCode,
    TransferSubscriptionsRequest, Variant,
};
use uagate_store::Role;

const COUNTER: &str = "Gateway.Demo.Counter";
const SETPOINT: &str = "Gateway.Demo.Setpoint";

fn counter_value(v: &opcua_types::DataValue) -> u32 {
    match v.value {
        Some(Variant::UInt32(n)) => n,
        ref other => panic!("counter value {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_subscription_delivers_increasing_values() {
    let gw = TestGateway::start("[server]\nmin_publishing_interval = \"50ms\"\n").await;
    let (chan, token) = gw.anon_session("c").await;
    let sub = chan.create_subscription(&token, 10.0, 300, 10).await;
    assert_eq!(
        sub.revised_publishing_interval, 50.0,
        "revised up to the minimum"
    );
    assert!(sub.revised_lifetime_count >= 3 * sub.revised_max_keep_alive_count);
    let results = chan
        .monitor(
            &token,
            sub.subscription_id,
            vec![value_item(demo(COUNTER), 7, 0.0)],
        )
        .await;
    assert_eq!(results[0].status_code, StatusCode::Good);
    assert!(results[0].revised_sampling_interval >= 50.0);

    let mut seen: Vec<u32> = Vec::new();
    chan.publish_until(&token, Duration::from_secs(10), |r| {
        assert_eq!(r.subscription_id, sub.subscription_id);
        for (handle, value) in data_changes(r) {
            assert_eq!(handle, 7);
            seen.push(counter_value(&value));
        }
        (seen.len() >= 4).then_some(())
    })
    .await;
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing counter values {seen:?}"
    );
    chan.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alives_for_an_unchanging_node() {
    let gw = TestGateway::start("[server]\nmin_publishing_interval = \"50ms\"\n").await;
    let (chan, token) = gw.anon_session("c").await;
    let sub = chan.create_subscription(&token, 50.0, 60, 2).await;
    assert_eq!(sub.revised_max_keep_alive_count, 2);
    let id = sub.subscription_id;
    chan.monitor(&token, id, vec![value_item(demo(SETPOINT), 1, 0.0)])
        .await;
    // The first message carries the initial value.
    let first = chan.publish(&token, &[]).await.unwrap();
    assert_eq!(data_changes(&first).len(), 1);
    let seq = first.notification_message.sequence_number;
    let started = std::time::Instant::now();
    let mut keep_alives = 0;
    let mut acks = vec![(id, seq)];
    while started.elapsed() < Duration::from_secs(1) {
        let r = chan.publish(&token, &acks).await.unwrap();
        acks.clear();
        assert!(is_keep_alive(&r), "only keep-alives for an unchanging node");
        // A keep-alive carries the next sequence number without using it.
        assert_eq!(r.notification_message.sequence_number, seq + 1);
        keep_alives += 1;
    }
    // One keep-alive every 2 x 50 ms: about 10 in a second, not 20.
    assert!(
        (4..=13).contains(&keep_alives),
        "{keep_alives} keep-alives in 1 s"
    );
    chan.close().await;
    gw.stop().await;
}

/// A queued Publish request times out on time although a Publish no
/// longer wakes the subscription timer for nothing: it wakes it only when
/// its timeout falls before the timer's next planned wake (at most 1 s
/// away, here 1 s, as the only subscription publishes every 5 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_publish_times_out_at_its_timeout_hint() {
    let gw = TestGateway::start("").await;
    let (chan, token) = gw.anon_session("c").await;
    chan.create_subscription(&token, 5000.0, 30, 10).await;
    let mut req = chan.publish_request(&token, &[]);
    req.request_header.timeout_hint = 200;
    let sent = std::time::Instant::now();
    let resp = chan.send(req).await.unwrap();
    let took = sent.elapsed();
    assert_eq!(
        resp.response_header().service_result,
        StatusCode::BadTimeout
    );
    assert!(
        took >= Duration::from_millis(190) && took < Duration::from_millis(700),
        "BadTimeout after {took:?}, the hint was 200 ms"
    );
    chan.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_lifetime_expires_without_publish() {
    let gw = TestGateway::start("").await;
    let (chan, token) = gw.anon_session("c").await;
    let sub = chan.create_subscription(&token, 50.0, 3, 1).await;
    assert_eq!(sub.revised_lifetime_count, 3);
    let id = sub.subscription_id;
    // Lifetime 3 x 50 ms: long gone after a second without Publish.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let r = chan.publish(&token, &[]).await.unwrap();
    assert_eq!(r.subscription_id, id);
    assert_eq!(status_change(&r), Some(StatusCode::BadTimeout));
    assert_eq!(
        chan.publish(&token, &[]).await.err(),
        Some(StatusCode::BadNoSubscription)
    );
    let resp = chan
        .send(DeleteSubscriptionsRequest {
            request_header: chan.header(&token),
            subscription_ids: Some(vec![id]),
        })
        .await
        .unwrap();
    let ResponseMessage::DeleteSubscriptions(resp) = resp else {
        panic!("unexpected response");
    };
    assert_eq!(
        resp.results.unwrap(),
        vec![StatusCode::BadSubscriptionIdInvalid]
    );
    chan.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_publish_requests_and_no_subscription() {
    let gw = TestGateway::start("[server]\nmax_publish_requests_per_session = 2\n").await;
    let (chan, token) = gw.anon_session("c").await;
    assert_eq!(
        chan.publish(&token, &[]).await.err(),
        Some(StatusCode::BadNoSubscription)
    );
    // One keep-alive per second: three queued requests outrun it.
    let sub = chan.create_subscription(&token, 1000.0, 30, 1).await;
    let started = std::time::Instant::now();
    let (a, b, c) = tokio::join!(
        chan.publish(&token, &[]),
        async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            chan.publish(&token, &[]).await
        },
        async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            chan.publish(&token, &[]).await
        },
    );
    let results = [a, b, c];
    let refused = results
        .iter()
        .filter(|r| r.as_ref().err() == Some(&StatusCode::BadTooManyPublishRequests))
        .count();
    assert_eq!(refused, 1, "{results:?}");
    for r in results.iter().filter_map(|r| r.as_ref().ok()) {
        assert_eq!(r.subscription_id, sub.subscription_id);
        assert!(is_keep_alive(r));
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    chan.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn republish_until_acknowledged() {
    let gw = TestGateway::start("").await;
    let (chan, token) = gw.anon_session("c").await;
    let sub = chan.create_subscription(&token, 100.0, 300, 10).await;
    let id = sub.subscription_id;
    chan.monitor(&token, id, vec![value_item(demo(COUNTER), 3, 0.0)])
        .await;
    let msg = chan.publish(&token, &[]).await.unwrap();
    assert!(!data_changes(&msg).is_empty());
    let seq = msg.notification_message.sequence_number;
    assert!(msg
        .available_sequence_numbers
        .as_deref()
        .unwrap()
        .contains(&seq));
    let republish = |seq: u32| RepublishRequest {
        request_header: chan.header(&token),
        subscription_id: id,
        retransmit_sequence_number: seq,
    };
    let again = chan.send(republish(seq)).await.unwrap();
    let ResponseMessage::Republish(again) = again else {
        panic!(
            "Republish failed: {}",
            again.response_header().service_result
        );
    };
    assert_eq!(again.notification_message, msg.notification_message);

    // Acknowledged messages are gone.
    let next = chan.publish(&token, &[(id, seq)]).await.unwrap();
    assert_eq!(next.results, Some(vec![StatusCode::Good]));
    assert_eq!(
        chan.status(republish(seq)).await,
        StatusCode::BadMessageNotAvailable
    );
    chan.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_subscriptions_between_sessions_of_one_user() {
    let gw = TestGateway::start("").await;
    gw.add_user("op", "operator password", Role::Operator).await;
    gw.add_user("other", "another password", Role::Operator)
        .await;
    let (a, ta) = gw.user_session("a", "op", "operator password").await;
    let (b, tb) = gw.user_session("b", "op", "operator password").await;
    let (c, tc) = gw.user_session("c", "other", "another password").await;
    let sub = a.create_subscription(&ta, 100.0, 300, 10).await;
    let id = sub.subscription_id;
    a.monitor(&ta, id, vec![value_item(demo(COUNTER), 5, 0.0)])
        .await;
    let transfer = |chan: &common::Chan, token: &NodeId| TransferSubscriptionsRequest {
        request_header: chan.header(token),
        subscription_ids: Some(vec![id]),
        send_initial_values: true,
    };

    let resp = c.send(transfer(&c, &tc)).await.unwrap();
    let ResponseMessage::TransferSubscriptions(resp) = resp else {
        panic!("unexpected response");
    };
    assert_eq!(
        resp.results.unwrap()[0].status_code,
        StatusCode::BadUserAccessDenied
    );
    assert_eq!(
        c.publish(&tc, &[]).await.err(),
        Some(StatusCode::BadNoSubscription),
        "nothing moved to the other user"
    );

    let resp = b.send(transfer(&b, &tb)).await.unwrap();
    let ResponseMessage::TransferSubscriptions(resp) = resp else {
        panic!("unexpected response");
    };
    assert_eq!(resp.results.unwrap()[0].status_code, StatusCode::Good);
    // The old session learns of the transfer, the new one gets the data.
    let old = a.publish(&ta, &[]).await.unwrap();
    assert_eq!(
        status_change(&old),
        Some(StatusCode::GoodSubscriptionTransferred)
    );
    let value = b
        .publish_until(&tb, Duration::from_secs(10), |r| {
            assert_eq!(r.subscription_id, id);
            data_changes(r).into_iter().find(|(h, _)| *h == 5)
        })
        .await;
    assert!(counter_value(&value.1) > 0);
    for chan in [a, b, c] {
        chan.close().await;
    }
    gw.stop().await;
}

/// A TransferSubscriptions into a session that has no room for another
/// subscription is refused with BadTooManySubscriptions and the
/// subscription stays where it was (it was taken from its session first,
/// then dropped when the target refused it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_transfer_leaves_the_subscription_where_it_was() {
    let gw = TestGateway::start("[server]\nmax_subscriptions_per_session = 1\n").await;
    gw.add_user("op", "operator password", Role::Operator).await;
    let (a, ta) = gw.user_session("a", "op", "operator password").await;
    let (b, tb) = gw.user_session("b", "op", "operator password").await;
    let id = a
        .create_subscription(&ta, 100.0, 300, 10)
        .await
        .subscription_id;
    b.create_subscription(&tb, 100.0, 300, 10).await;
    let resp = b
        .send(TransferSubscriptionsRequest {
            request_header: b.header(&tb),
            subscription_ids: Some(vec![id]),
            send_initial_values: false,
        })
        .await
        .unwrap();
    let ResponseMessage::TransferSubscriptions(resp) = resp else {
        panic!("unexpected response");
    };
    assert_eq!(
        resp.results.unwrap()[0].status_code,
        StatusCode::BadTooManySubscriptions
    );
    // Still the first session's: its Publish is answered by it.
    let kept = a.publish(&ta, &[]).await.unwrap();
    assert_eq!(kept.subscription_id, id);
    assert_eq!(status_change(&kept), None);
    for chan in [a, b] {
        chan.close().await;
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_follows_the_session_to_a_new_channel() {
    let gw = TestGateway::start("").await;
    let (first, token) = gw.anon_session("a").await;
    let sub = first.create_subscription(&token, 100.0, 300, 10).await;
    let id = sub.subscription_id;
    first
        .monitor(&token, id, vec![value_item(demo(COUNTER), 9, 0.0)])
        .await;
    let before = first
        .publish_until(&token, Duration::from_secs(10), |r| {
            data_changes(r).into_iter().next()
        })
        .await;
    let second = gw
        .chan("b", SecurityPolicy::None, MessageSecurityMode::None)
        .await;
    second
        .activate(&token, IdentityToken::Anonymous)
        .await
        .expect("session moves to the new channel");
    first.close().await;
    let after = second
        .publish_until(&token, Duration::from_secs(10), |r| {
            assert_eq!(r.subscription_id, id);
            data_changes(r).into_iter().next()
        })
        .await;
    assert_eq!(after.0, 9);
    assert!(counter_value(&after.1) > counter_value(&before.1));
    second.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_monitored_items_and_delete_subscriptions() {
    let gw = TestGateway::start("").await;
    let (chan, token) = gw.anon_session("c").await;
    let (other, other_token) = gw.anon_session("d").await;
    let sub = chan.create_subscription(&token, 2000.0, 300, 10).await;
    let id = sub.subscription_id;
    let results = chan
        .monitor(
            &token,
            id,
            vec![
                value_item(demo(COUNTER), 11, 0.0),
                value_item(demo(SETPOINT), 12, 0.0),
            ],
        )
        .await;
    let server_handles: Vec<u32> = results.iter().map(|r| r.monitored_item_id).collect();
    let get = NodeId::new(0, 11492u32);
    let server = NodeId::new(0, 2253u32);
    let r = chan
        .call(
            &token,
            server.clone(),
            get.clone(),
            vec![Variant::UInt32(id)],
        )
        .await;
    assert_eq!(r.status_code, StatusCode::Good);
    let out = r.output_arguments.unwrap();
    assert_eq!(out.len(), 2);
    let as_u32 = |v: &Variant| -> Vec<u32> {
        let Variant::Array(a) = v else {
            panic!("array expected, got {v:?}");
        };
        let mut vals: Vec<u32> = a
            .values
            .iter()
            .map(|v| match v {
                Variant::UInt32(n) => *n,
                other => panic!("UInt32 expected, got {other:?}"),
            })
            .collect();
        vals.sort();
        vals
    };
    let mut expected = server_handles.clone();
    expected.sort();
    assert_eq!(as_u32(&out[0]), expected);
    assert_eq!(as_u32(&out[1]), vec![11, 12]);
    // Another session's subscription is refused as not the caller's (Part 5 9.1).
    let r = other
        .call(&other_token, server, get, vec![Variant::UInt32(id)])
        .await;
    assert_eq!(r.status_code, StatusCode::BadUserAccessDenied);

    // The first message (after one 2 s interval) carries the initial values.
    let first = chan.publish(&token, &[]).await.unwrap();
    let mut handles: Vec<u32> = data_changes(&first).iter().map(|(h, _)| *h).collect();
    handles.sort();
    handles.dedup();
    assert_eq!(handles, vec![11, 12]);
    // An outstanding Publish is answered when the last subscription goes.
    let (waiting, delete) = tokio::join!(chan.publish(&token, &[]), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        chan.status(DeleteSubscriptionsRequest {
            request_header: chan.header(&token),
            subscription_ids: Some(vec![id]),
        })
        .await
    });
    assert_eq!(delete, StatusCode::Good);
    assert_eq!(waiting.err(), Some(StatusCode::BadNoSubscription));
    assert_eq!(
        chan.publish(&token, &[]).await.err(),
        Some(StatusCode::BadNoSubscription)
    );
    chan.close().await;
    other.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_needs_a_writing_user_and_the_right_type() {
    let gw = TestGateway::start("").await;
    gw.add_user("op", "operator password", Role::Operator).await;
    gw.add_user("viewer", "viewer password", Role::Viewer).await;
    let (anon, anon_token) = gw.anon_session("a").await;
    let (op, op_token) = gw.user_session("o", "op", "operator password").await;
    let (viewer, viewer_token) = gw.user_session("v", "viewer", "viewer password").await;
    let setpoint = demo(SETPOINT);

    assert_eq!(
        anon.write_value(&anon_token, setpoint.clone(), Variant::Double(1.5))
            .await,
        StatusCode::BadUserAccessDenied
    );
    assert_eq!(
        viewer
            .write_value(&viewer_token, setpoint.clone(), Variant::Double(1.5))
            .await,
        StatusCode::BadUserAccessDenied
    );
    assert_eq!(
        op.write_value(&op_token, setpoint.clone(), Variant::Double(42.25))
            .await,
        StatusCode::Good
    );
    let read = anon.read_value(&anon_token, setpoint.clone()).await;
    assert_eq!(read.value, Some(Variant::Double(42.25)));
    assert_eq!(
        op.write_value(&op_token, setpoint.clone(), Variant::from("text"))
            .await,
        StatusCode::BadTypeMismatch
    );
    assert_eq!(
        op.write_value(&op_token, NodeId::new(0, 2267u32), Variant::Byte(7))
            .await,
        StatusCode::BadNotWritable
    );
    assert_eq!(
        op.write_value(&op_token, demo(COUNTER), Variant::UInt32(7))
            .await,
        StatusCode::BadNotWritable
    );
    let read = anon.read_value(&anon_token, setpoint).await;
    assert_eq!(
        read.value,
        Some(Variant::Double(42.25)),
        "failed writes changed nothing"
    );
    for chan in [anon, op, viewer] {
        chan.close().await;
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_write_when_allowed() {
    let gw = TestGateway::start("[server]\nallow_anonymous_write = true\n").await;
    let (chan, token) = gw.anon_session("a").await;
    assert_eq!(
        chan.write_value(&token, demo("Gateway.Demo.Level"), Variant::Double(12.0))
            .await,
        StatusCode::Good
    );
    let read = chan.read_value(&token, demo("Gateway.Demo.Level")).await;
    assert_eq!(read.value, Some(Variant::Double(12.0)));
    chan.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_demo_add() {
    let gw = TestGateway::start("").await;
    let (chan, token) = gw.anon_session("a").await;
    let add = |args: Vec<Variant>| {
        chan.call(&token, demo("Gateway.Demo"), demo("Gateway.Demo.Add"), args)
    };
    let r = add(vec![Variant::Double(2.0), Variant::Double(3.0)]).await;
    assert_eq!(r.status_code, StatusCode::Good);
    assert_eq!(r.output_arguments, Some(vec![Variant::Double(5.0)]));

    let r = add(vec![Variant::Double(2.0)]).await;
    assert_eq!(r.status_code, StatusCode::BadArgumentsMissing);

    let r = add(vec![Variant::from("two"), Variant::Double(3.0)]).await;
    assert_eq!(r.status_code, StatusCode::BadInvalidArgument);
    assert_eq!(
        r.input_argument_results,
        Some(vec![StatusCode::BadTypeMismatch, StatusCode::Good])
    );
    assert_eq!(r.output_arguments, None);
    chan.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_transfer_needs_the_same_client_on_a_signed_channel() {
    let gw = TestGateway::start("").await;
    let transfer = |chan: &common::Chan, token: &NodeId, id: u32| TransferSubscriptionsRequest {
        request_header: chan.header(token),
        subscription_ids: Some(vec![id]),
        send_initial_values: false,
    };
    let result = |resp: ResponseMessage| match resp {
        ResponseMessage::TransferSubscriptions(r) => r.results.unwrap()[0].status_code,
        other => panic!(
            "TransferSubscriptions failed: {}",
            other.response_header().service_result
        ),
    };

    // Any anonymous client on a None channel could otherwise take it.
    let (a, ta) = gw.anon_session("a").await;
    let (b, tb) = gw.anon_session("b").await;
    let id = a
        .create_subscription(&ta, 100.0, 300, 10)
        .await
        .subscription_id;
    assert_eq!(
        result(b.send(transfer(&b, &tb, id)).await.unwrap()),
        StatusCode::BadUserAccessDenied
    );

    // The same client application on SignAndEncrypt may; another may not.
    let first = gw.secure_chan("app").await;
    let t1 = first.session(IdentityToken::Anonymous).await;
    let id = first
        .create_subscription(&t1, 100.0, 300, 10)
        .await
        .subscription_id;
    let other = gw.secure_chan("other-app").await;
    let t3 = other.session(IdentityToken::Anonymous).await;
    assert_eq!(
        result(other.send(transfer(&other, &t3, id)).await.unwrap()),
        StatusCode::BadUserAccessDenied
    );
    let second = common::Chan::open(
        &gw.client("app"),
        gw.endpoint(
            SecurityPolicy::Basic256Sha256,
            MessageSecurityMode::SignAndEncrypt,
        ),
    )
    .await
    .unwrap();
    let t2 = second.session(IdentityToken::Anonymous).await;
    assert_eq!(
        result(second.send(transfer(&second, &t2, id)).await.unwrap()),
        StatusCode::Good
    );
    for chan in [a, b, first, second, other] {
        chan.close().await;
    }
    gw.stop().await;
}

/// Sends `n` Publish requests of `token` on `chan` without waiting for
/// them; each task yields its answer (or the client's timeout).
fn queue_publishes(
    chan: &common::Chan,
    token: &NodeId,
    n: usize,
) -> Vec<tokio::task::JoinHandle<Result<ResponseMessage, opcua_types::Error>>> {
    (0..n)
        .map(|_| {
            let req = chan.publish_request(token, &[]);
            let channel = chan.channel.clone();
            tokio::spawn(async move { channel.send(req, Duration::from_secs(8)).await })
        })
        .collect()
}

/// The status each queued Publish was answered with.
async fn answers(
    waiting: Vec<tokio::task::JoinHandle<Result<ResponseMessage, opcua_types::Error>>>,
) -> Vec<Result<StatusCode, String>> {
    let mut out = Vec::new();
    for w in waiting {
        let r = common::bounded("publish answer", w).await.unwrap();
        out.push(
            r.map(|m| m.response_header().service_result)
                .map_err(|e| e.to_string()),
        );
    }
    out
}

/// Part 4 5.7.4: when a session ends, its outstanding requests are
/// answered with Bad_SessionClosed. Queued Publish requests used to be
/// dropped unanswered (the client waited for its timeout, and the
/// connection kept their charges until it closed); those queued on a
/// channel the session leaves get Bad_SecureChannelIdInvalid there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_publish_requests_are_answered_when_their_session_ends_or_moves() {
    let gw = TestGateway::start("").await;
    // CloseSession: the queued Publish requests get Bad_SessionClosed.
    let (chan, token) = gw.anon_session("c").await;
    // Nothing to publish for a minute: every Publish stays queued.
    chan.create_subscription(&token, 5_000.0, 120, 12).await;
    let waiting = queue_publishes(&chan, &token, 5);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let close = opcua_types::CloseSessionRequest {
        request_header: chan.header(&token),
        delete_subscriptions: true,
    };
    assert_eq!(chan.status(close).await, StatusCode::Good);
    assert_eq!(
        answers(waiting).await,
        vec![Ok(StatusCode::BadSessionClosed); 5]
    );

    // The session moves to another channel (ActivateSession there): the
    // Publish requests queued on the old one are answered there.
    let token = chan.session(IdentityToken::Anonymous).await;
    chan.create_subscription(&token, 5_000.0, 120, 12).await;
    let waiting = queue_publishes(&chan, &token, 3);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let other = gw
        .chan("c", SecurityPolicy::None, MessageSecurityMode::None)
        .await;
    other
        .activate(&token, IdentityToken::Anonymous)
        .await
        .expect("the session moves to the other channel");
    assert_eq!(
        answers(waiting).await,
        vec![Ok(StatusCode::BadSecureChannelIdInvalid); 3]
    );
    // The session works on its new channel.
    assert_eq!(other.read_status(&token).await, StatusCode::Good);
    other.close().await;
    chan.close().await;
    gw.stop().await;
}
