//! Slow and stuck peers (issue 21 item 3) against a real gateway on
//! 127.0.0.1: each is bounded and closed (or refused) with its documented
//! status while another client ("the victim") keeps reading. The victim's
//! Read latencies are printed (`--nocapture`), never asserted on: a test
//! asserts only that every victim Read succeeded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod hand;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::TestGateway;
use hand::{connect_from, HandClient};
use opcua_core::ResponseMessage;
use opcua_types::{
    CreateSubscriptionRequest, NodeId, PublishRequest, ReadRequest, ReadValueId, StatusCode,
    TimestampsToReturn,
};
use tokio::net::TcpSocket;

/// A victim reading CurrentTime back to back from its own address until
/// `stop`; returns every Read's latency. Panics on a Read that is not Good.
fn victim(gw: &TestGateway, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Vec<Duration>> {
    let addr = gw.addr;
    let url = gw.url.clone();
    tokio::spawn(async move {
        let mut c = HandClient::open(connect_from([127, 0, 0, 50], addr).await, &url).await;
        assert_eq!(c.session_and_read().await, StatusCode::Good);
        let mut latencies = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            assert_eq!(c.read_current_time().await, StatusCode::Good);
            latencies.push(t.elapsed());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        latencies
    })
}

/// Prints the victim's Read p50/p99 for `what`.
fn report(what: &str, mut latencies: Vec<Duration>) {
    assert!(!latencies.is_empty(), "{what}: the victim read nothing");
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    println!(
        "{what}: victim {} Reads, p50 {:?}, p99 {:?}, max {:?}",
        latencies.len(),
        at(0.5),
        at(0.99),
        latencies.last().unwrap()
    );
}

/// A Read of `n` operations on the NamespaceArray (about 100 bytes each in
/// the response).
fn big_read(c: &HandClient, n: usize) -> opcua_core::RequestMessage {
    ReadRequest {
        request_header: c.header(),
        max_age: 0.0,
        timestamps_to_return: TimestampsToReturn::Both,
        nodes_to_read: Some(vec![ReadValueId::from(NodeId::new(0, 2255u32)); n]),
    }
    .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_closed_and_the_others_go_on() {
    let gw = TestGateway::start("").await;
    let stop = Arc::new(AtomicBool::new(false));
    let victim = victim(&gw, stop.clone());
    // The stuck client: a tiny receive window, a session, then many large
    // Reads sent and no byte read ever again.
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.bind(SocketAddr::from(([127, 0, 0, 51], 0))).unwrap();
    let stream = socket.connect(gw.addr).await.unwrap();
    let mut stuck = HandClient::open(stream, &gw.url).await;
    assert_eq!(stuck.session_and_read().await, StatusCode::Good);
    let burst: Vec<_> = (0..400).map(|_| big_read(&stuck, 500)).collect();
    let started = Instant::now();
    let writer = tokio::spawn(async move {
        // Blocks once the gateway stops reading too; ends when it closes.
        stuck.send_burst(burst).await;
        stuck
    });
    // Closed within the stall bound once its socket is full.
    let bound = uagate_server::SEND_STALL + Duration::from_secs(30);
    let engine = gw.engine().clone();
    common::bounded("the stuck client closed", async {
        while engine.send_stalls() == 0 {
            assert!(started.elapsed() < bound, "not closed after {bound:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    let closed_after = started.elapsed();
    assert!(
        closed_after >= uagate_server::SEND_STALL,
        "closed after {closed_after:?}: before the stall bound"
    );
    println!("stuck reader closed after {closed_after:?}");
    stop.store(true, Ordering::Relaxed);
    report("a client that stopped reading", victim.await.unwrap());
    writer.abort();
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_publish_requests_are_refused_beyond_the_limit() {
    let gw = TestGateway::start("[server]\nmax_publish_requests_per_session = 10\n").await;
    let stop = Arc::new(AtomicBool::new(false));
    let victim = victim(&gw, stop.clone());
    let mut c = HandClient::open(connect_from([127, 0, 0, 52], gw.addr).await, &gw.url).await;
    assert_eq!(c.session_and_read().await, StatusCode::Good);
    let created = c
        .call(
            CreateSubscriptionRequest {
                request_header: c.header(),
                requested_publishing_interval: 1000.0,
                requested_lifetime_count: 300,
                requested_max_keep_alive_count: 10,
                max_notifications_per_publish: 0,
                publishing_enabled: true,
                priority: 0,
            }
            .into(),
        )
        .await;
    assert!(
        matches!(created, ResponseMessage::CreateSubscription(_)),
        "{created:?}"
    );
    const N: usize = 10_000;
    // In bursts of 500, so the gateway reads while they arrive.
    for _ in 0..N / 500 {
        let burst = (0..500)
            .map(|_| {
                PublishRequest {
                    request_header: c.header(),
                    subscription_acknowledgements: None,
                }
                .into()
            })
            .collect();
        c.send_burst(burst).await;
    }
    let (mut keep_alives, mut too_many, mut busy) = (0usize, 0usize, 0usize);
    let started = Instant::now();
    // Every refused one is answered at once; the parked ones (at most the
    // limit) answer with a keep-alive within the keep-alive interval each.
    while keep_alives + too_many + busy < N {
        match c.recv().await {
            ResponseMessage::Publish(_) => keep_alives += 1,
            ResponseMessage::ServiceFault(f) => match f.response_header.service_result {
                StatusCode::BadTooManyPublishRequests => too_many += 1,
                StatusCode::BadServerTooBusy => busy += 1,
                other => panic!("unexpected refusal {other}"),
            },
            other => panic!("unexpected response {other:?}"),
        }
        // Keep-alives come once per 10 s at most (1 s x 10): the ones still
        // parked are not waited for; what counts is that no more than the
        // limit were ever held.
        if too_many + busy >= N - 10 && keep_alives + too_many + busy < N {
            break;
        }
    }
    println!(
        "{N} Publish requests: {too_many} BadTooManyPublishRequests, {busy} BadServerTooBusy, {keep_alives} keep-alives in {:?}",
        started.elapsed()
    );
    assert!(too_many > 0, "the per-session limit refused none");
    assert!(
        too_many + busy >= N - 10,
        "more than the limit of 10 were held: {too_many} + {busy} refused"
    );
    // The channel and the session are still usable (keep-alives of the
    // parked requests may come first).
    let read = c.read_request();
    c.send(read).await;
    loop {
        match c.recv().await {
            ResponseMessage::Read(r) => {
                assert_eq!(r.results.unwrap()[0].status(), StatusCode::Good);
                break;
            }
            ResponseMessage::Publish(_) => {}
            other => panic!("unexpected response {other:?}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    report("10,000 Publish requests", victim.await.unwrap());
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_channels_without_a_session_lock_nobody_out() {
    use tokio::io::AsyncWriteExt;
    let gw = TestGateway::start("").await;
    let max = gw.engine().applied_config().server.max_channel_count as i64;
    let stop = Arc::new(AtomicBool::new(false));
    let victim = victim(&gw, stop.clone());
    let open_now = |gw: &TestGateway| -> i64 {
        gw.engine()
            .transport_stats()
            .iter()
            .map(|(_, connections, _)| *connections)
            .sum()
    };
    let (mut opened, mut refused) = (0usize, 0usize);
    let mut held = Vec::new();
    let started = Instant::now();
    for _ in 0..1000 {
        let mut s = connect_from([127, 0, 0, 53], gw.addr).await;
        s.write_all(&common::hello_bytes(&gw.url)).await.unwrap();
        let ack = common::read_frame(&mut s, hand::WAIT).await;
        let open = match ack {
            Some(f) if &f[..4] == b"ACKF" => {
                s.write_all(&common::opn_none_frame()).await.unwrap();
                matches!(common::read_frame(&mut s, hand::WAIT).await, Some(f) if &f[..4] == b"OPNF")
            }
            _ => false,
        };
        if open {
            opened += 1;
        } else {
            refused += 1;
        }
        held.push(s);
        // Never more connections than the channel limit (and the victim's).
        assert!(open_now(&gw) <= max + 1, "{} open", open_now(&gw));
    }
    println!(
        "1,000 channels without a session: {opened} opened, {refused} refused, {:?}; {} open at the end",
        started.elapsed(),
        open_now(&gw)
    );
    // Unused channels are reclaimed for new callers: a fresh client gets a
    // session and reads.
    let mut fresh = HandClient::open(connect_from([127, 0, 0, 54], gw.addr).await, &gw.url).await;
    assert_eq!(fresh.session_and_read().await, StatusCode::Good);
    stop.store(true, Ordering::Relaxed);
    report("1,000 channels without a session", victim.await.unwrap());
    drop(held);
    gw.stop().await;
}
