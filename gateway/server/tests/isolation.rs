//! Resource isolation over real sockets from several 127.x source
//! addresses: one address flooding connections cannot take the reserved
//! slots; a protected class and a trusted owner (both chosen by ingress
//! rules) still connect, open a session and read.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::TestGateway;
use hand::{connect_from, hello, HandClient};
use opcua_types::StatusCode;
use tokio::net::TcpStream;

mod hand;

/// Opens connections from `src` until one is refused; returns the held ones.
async fn flood(gw: &TestGateway, src: [u8; 4], max: usize) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for _ in 0..max {
        let mut s = connect_from(src, gw.addr).await;
        match hello(&mut s, &gw.url).await {
            Ok(()) => held.push(s),
            Err(status) => {
                assert_eq!(status, StatusCode::BadTcpNotEnoughResources);
                return held;
            }
        }
    }
    panic!("the flood from {src:?} was never refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_cannot_take_the_reserved_connection_slots() {
    // Connection: total 5 = shared 3 + bootstrap 1 + reconnect 1.
    let gw = TestGateway::start(
        "[server]\nmax_session_count = 2\nmax_channel_count = 5\n\
         [[isolation.ingress]]\ncidr = \"127.0.0.3/32\"\nclass = \"bootstrap\"\n",
    )
    .await;
    let held = flood(&gw, [127, 0, 0, 2], 10).await;
    assert_eq!(held.len(), 3, "the flood gets exactly the shared capacity");
    // Another ordinary address is refused too: shared capacity is gone.
    let mut other = connect_from([127, 0, 0, 5], gw.addr).await;
    assert_eq!(
        hello(&mut other, &gw.url).await,
        Err(StatusCode::BadTcpNotEnoughResources)
    );
    // The bootstrap class (ingress rule) still gets its reserved slot and works.
    let s = connect_from([127, 0, 0, 3], gw.addr).await;
    let mut client = HandClient::open(s, &gw.url).await;
    assert_eq!(client.session_and_read().await, StatusCode::Good);
    let snapshot = gw.engine().isolation_snapshot();
    assert!(
        format!("{snapshot:?}").contains("Connection"),
        "{snapshot:?}"
    );
    drop(held);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_owner_connects_and_reads_while_shared_capacity_is_exhausted() {
    // Connection: total 7 = shared 3 + bootstrap 1 + reconnect 1 + trusted 2.
    let gw = TestGateway::start(
        "[server]\nmax_session_count = 2\nmax_channel_count = 7\n\
         [isolation]\nmode = \"trusted_reservations\"\n\
         [[isolation.trusted_owners]]\nkey = \"plant\"\nweight = 4\n\
         reservations = [{ stage = \"connection\", reserved = 2, hard_limit = 4 }]\n\
         [[isolation.ingress]]\ncidr = \"127.0.0.4/32\"\nowner = \"plant\"\n",
    )
    .await;
    let held = flood(&gw, [127, 0, 0, 2], 10).await;
    assert_eq!(held.len(), 3);
    let s = connect_from([127, 0, 0, 4], gw.addr).await;
    let mut client = HandClient::open(s, &gw.url).await;
    assert_eq!(client.session_and_read().await, StatusCode::Good);
    // The flood is still refused while the trusted owner works.
    let mut again = connect_from([127, 0, 0, 2], gw.addr).await;
    assert_eq!(
        hello(&mut again, &gw.url).await,
        Err(StatusCode::BadTcpNotEnoughResources)
    );
    drop(held);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unused_channels_are_reclaimed_at_capacity_but_never_one_with_a_session() {
    // fair_share: three connections, all shared.
    let gw = TestGateway::start(
        "[server]\nmax_session_count = 2\nmax_channel_count = 3\n\
         [isolation]\nmode = \"fair_share\"\n",
    )
    .await;
    let mut with_session =
        HandClient::open(connect_from([127, 0, 0, 2], gw.addr).await, &gw.url).await;
    assert_eq!(with_session.session_and_read().await, StatusCode::Good);
    let idle_a = HandClient::open(connect_from([127, 0, 0, 2], gw.addr).await, &gw.url).await;
    let idle_b = HandClient::open(connect_from([127, 0, 0, 2], gw.addr).await, &gw.url).await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    // Capacity is full; two newcomers each get a reclaimed unused channel.
    let mut first = connect_from([127, 0, 0, 5], gw.addr).await;
    assert_eq!(hello(&mut first, &gw.url).await, Ok(()));
    let mut second = connect_from([127, 0, 0, 6], gw.addr).await;
    assert_eq!(hello(&mut second, &gw.url).await, Ok(()));
    // Nothing unused is left (the newcomers are mid-handshake): refused.
    let mut third = connect_from([127, 0, 0, 7], gw.addr).await;
    assert_eq!(
        hello(&mut third, &gw.url).await,
        Err(StatusCode::BadTcpNotEnoughResources)
    );
    // The channel with a session was never taken.
    assert_eq!(with_session.read_current_time().await, StatusCode::Good);
    drop((idle_a, idle_b));
    gw.stop().await;
}

const TRUSTED: &str = "[server]\nmax_session_count = 2\nmax_channel_count = 7\n\
     [isolation]\nmode = \"trusted_reservations\"\n\
     [[isolation.trusted_owners]]\nkey = \"plant\"\nweight = WEIGHT\n\
     reservations = [{ stage = \"connection\", reserved = 2, hard_limit = 4 }]\n\
     [[isolation.ingress]]\ncidr = \"CIDR\"\nowner = \"plant\"\n";

fn trusted_config(weight: u32, cidr: &str) -> String {
    TRUSTED
        .replace("WEIGHT", &weight.to_string())
        .replace("CIDR", cidr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_and_ingress_rules_change_at_runtime_capacities_need_a_restart() {
    let gw = TestGateway::start(&trusted_config(4, "127.0.0.4/32")).await;
    // Moving the plant's ingress rule to another address applies at once.
    let moved = uagate_config::Config::from_toml(&trusted_config(2, "127.0.0.8/32")).unwrap();
    gw.engine()
        .apply_isolation(&moved)
        .expect("weights and ingress are live");
    let held = flood(&gw, [127, 0, 0, 2], 10).await;
    assert_eq!(held.len(), 3);
    let mut old_address = connect_from([127, 0, 0, 4], gw.addr).await;
    assert_eq!(
        hello(&mut old_address, &gw.url).await,
        Err(StatusCode::BadTcpNotEnoughResources),
        "the old address is ordinary now"
    );
    let s = connect_from([127, 0, 0, 8], gw.addr).await;
    let mut plant = HandClient::open(s, &gw.url).await;
    assert_eq!(plant.session_and_read().await, StatusCode::Good);

    // A capacity change is refused as a whole, naming what needs a restart.
    let bigger =
        trusted_config(2, "127.0.0.8/32").replace("max_channel_count = 7", "max_channel_count = 9");
    let err = gw
        .engine()
        .apply_isolation(&uagate_config::Config::from_toml(&bigger).unwrap())
        .unwrap_err();
    assert!(err.contains("stage capacities"), "{err}");
    // ... and nothing of it was applied: the live ingress rule still holds.
    let s = connect_from([127, 0, 0, 8], gw.addr).await;
    let mut plant2 = HandClient::open(s, &gw.url).await;
    assert_eq!(plant2.session_and_read().await, StatusCode::Good);
    drop(held);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_rate_limiter_refuses_a_burst_and_counts_it() {
    // Balanced keeps one token each for bootstrap and reconnect: 5 - 2 = 3 shared.
    let gw =
        TestGateway::start("[server]\nconnections_per_second = 5\nconnection_burst = 5\n").await;
    let mut refused = 0;
    let mut held = Vec::new();
    for _ in 0..6 {
        let mut s = connect_from([127, 0, 0, 2], gw.addr).await;
        match hello(&mut s, &gw.url).await {
            Ok(()) => held.push(s),
            Err(status) => {
                assert_eq!(status, StatusCode::BadTcpNotEnoughResources);
                refused += 1;
            }
        }
    }
    assert!(
        refused >= 2,
        "a burst beyond the shared tokens is refused ({refused})"
    );
    assert_eq!(gw.engine().isolation_rate_rejections(), refused as u64);
    drop(held);
    gw.stop().await;
}
