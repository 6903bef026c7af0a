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
