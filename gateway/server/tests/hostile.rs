//! Hostile input over real sockets: every case must end with an Error
//! message carrying the right status, then a closed socket, and the gateway
//! must keep serving normal clients afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{expect_closed, expect_error, hello_bytes, raw, read_frame, send_raw, TestGateway};
use opcua_types::StatusCode;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(5);
const SHORT_HANDSHAKE: &str = "[isolation]\nhandshake_timeout = \"1s\"\n";

/// A frame with a four-byte type+chunk tag and a correct size field.
fn frame(tag: &[u8; 4], body: &[u8]) -> Vec<u8> {
    let mut out = tag.to_vec();
    out.extend_from_slice(&((8 + body.len()) as u32).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// A connection that completed Hello/Acknowledge.
async fn hello_done(gw: &TestGateway) -> TcpStream {
    let mut s = raw(gw.addr).await;
    s.write_all(&hello_bytes(&gw.url)).await.unwrap();
    let ack = read_frame(&mut s, WAIT).await.expect("an answer to Hello");
    assert_eq!(&ack[..4], b"ACKF", "Acknowledge expected");
    s
}

/// The gateway still opens a channel and a session and answers a Read.
async fn still_serves(gw: &TestGateway) {
    let (chan, token) = gw.anon_session("after").await;
    assert_eq!(chan.read_status(&token).await, StatusCode::Good);
    chan.close().await;
}

async fn refused_with(s: &mut TcpStream, status: StatusCode) {
    assert_eq!(expect_error(s, WAIT).await, status);
    expect_closed(s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_bad_frame_headers() {
    let gw = TestGateway::start("").await;

    let mut s = raw(gw.addr).await;
    send_raw(&mut s, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    refused_with(&mut s, StatusCode::BadTcpMessageTypeInvalid).await;

    let mut s = raw(gw.addr).await;
    send_raw(&mut s, &[0xff; 64]).await;
    refused_with(&mut s, StatusCode::BadTcpMessageTypeInvalid).await;

    // A header declaring 4 GiB: refused before any body is buffered.
    let mut s = raw(gw.addr).await;
    let mut huge = b"HELF".to_vec();
    huge.extend_from_slice(&u32::MAX.to_le_bytes());
    send_raw(&mut s, &huge).await;
    refused_with(&mut s, StatusCode::BadTcpMessageTooLarge).await;

    // A Hello larger than any valid Hello.
    let mut s = raw(gw.addr).await;
    let mut big = b"HELF".to_vec();
    big.extend_from_slice(&9000u32.to_le_bytes());
    send_raw(&mut s, &big).await;
    refused_with(&mut s, StatusCode::BadTcpMessageTooLarge).await;

    // The same 4 GiB header after the handshake started.
    let mut s = hello_done(&gw).await;
    let mut huge = b"OPNF".to_vec();
    huge.extend_from_slice(&u32::MAX.to_le_bytes());
    send_raw(&mut s, &huge).await;
    refused_with(&mut s, StatusCode::BadTcpMessageTooLarge).await;

    // A size below the header itself.
    let mut s = raw(gw.addr).await;
    let mut tiny = b"HELF".to_vec();
    tiny.extend_from_slice(&4u32.to_le_bytes());
    send_raw(&mut s, &tiny).await;
    assert!(expect_error(&mut s, WAIT).await.is_bad());
    expect_closed(&mut s).await;

    still_serves(&gw).await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_out_of_order() {
    let gw = TestGateway::start("").await;

    // A second Hello.
    let mut s = hello_done(&gw).await;
    send_raw(&mut s, &hello_bytes(&gw.url)).await;
    refused_with(&mut s, StatusCode::BadTcpMessageTypeInvalid).await;

    // A MSG before OpenSecureChannel (after Hello, and instead of Hello).
    let msg = frame(b"MSGF", &[1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0]);
    let mut s = hello_done(&gw).await;
    send_raw(&mut s, &msg).await;
    refused_with(&mut s, StatusCode::BadTcpMessageTypeInvalid).await;

    let mut s = raw(gw.addr).await;
    send_raw(&mut s, &msg).await;
    refused_with(&mut s, StatusCode::BadTcpMessageTypeInvalid).await;

    // CLO and OPN before Hello; ACK/ERR/RHE from a client.
    for tag in [b"CLOF", b"OPNF", b"ACKF", b"ERRF", b"RHEF"] {
        let mut s = raw(gw.addr).await;
        send_raw(&mut s, &frame(tag, &[0u8; 24])).await;
        refused_with(&mut s, StatusCode::BadTcpMessageTypeInvalid).await;
    }

    // A Hello with an intermediate chunk type.
    let mut s = raw(gw.addr).await;
    let mut h = hello_bytes(&gw.url);
    h[3] = b'C';
    send_raw(&mut s, &h).await;
    refused_with(&mut s, StatusCode::BadTcpMessageTypeInvalid).await;

    still_serves(&gw).await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_with_invalid_contents() {
    let gw = TestGateway::start("").await;

    let hello_body = |url: &[u8], buffers: u32| {
        let mut b = Vec::new();
        b.extend_from_slice(&0u32.to_le_bytes()); // protocol version
        b.extend_from_slice(&buffers.to_le_bytes()); // receive buffer
        b.extend_from_slice(&buffers.to_le_bytes()); // send buffer
        b.extend_from_slice(&0u32.to_le_bytes()); // max message size
        b.extend_from_slice(&0u32.to_le_bytes()); // max chunk count
        b.extend_from_slice(&(url.len() as i32).to_le_bytes());
        b.extend_from_slice(url);
        b
    };

    // Invalid UTF-8 in the endpoint URL.
    let mut s = raw(gw.addr).await;
    send_raw(
        &mut s,
        &frame(b"HELF", &hello_body(b"opc.tcp://\xff\xfe\xc3(/", 65536)),
    )
    .await;
    refused_with(&mut s, StatusCode::BadTcpEndpointUrlInvalid).await;

    // A URL of another scheme, and a URL length beyond the body.
    let mut s = raw(gw.addr).await;
    send_raw(&mut s, &frame(b"HELF", &hello_body(b"http://x/", 65536))).await;
    refused_with(&mut s, StatusCode::BadTcpEndpointUrlInvalid).await;

    let mut s = raw(gw.addr).await;
    let mut body = hello_body(b"opc.tcp://x/", 65536);
    let n = body.len();
    body[n - 16..n - 12].copy_from_slice(&1000i32.to_le_bytes());
    send_raw(&mut s, &frame(b"HELF", &body)).await;
    assert!(expect_error(&mut s, WAIT).await.is_bad());
    expect_closed(&mut s).await;

    // Buffers below the 8192-byte minimum.
    let mut s = raw(gw.addr).await;
    send_raw(&mut s, &frame(b"HELF", &hello_body(b"opc.tcp://x/", 1024))).await;
    assert!(expect_error(&mut s, WAIT).await.is_bad());
    expect_closed(&mut s).await;

    still_serves(&gw).await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_client_times_out() {
    let gw = TestGateway::start(SHORT_HANDSHAKE).await;
    let t = Instant::now();
    let mut s = raw(gw.addr).await;
    refused_with(&mut s, StatusCode::BadTimeout).await;
    let elapsed = t.elapsed();
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(4),
        "handshake timeout after {elapsed:?}"
    );

    // The deadline covers the whole handshake, not just the Hello.
    let t = Instant::now();
    let mut s = hello_done(&gw).await;
    refused_with(&mut s, StatusCode::BadTimeout).await;
    assert!(t.elapsed() < Duration::from_secs(4));

    still_serves(&gw).await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickling_hello_times_out() {
    let gw = TestGateway::start(SHORT_HANDSHAKE).await;
    let s = raw(gw.addr).await;
    let (mut rd, mut wr) = s.into_split();
    let hello = hello_bytes(&gw.url);
    let trickle = tokio::spawn(async move {
        for b in hello {
            if wr.write_all(&[b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    let t = Instant::now();
    let status = tokio::time::timeout(WAIT, async {
        use tokio::io::AsyncReadExt;
        let mut header = [0u8; 8];
        rd.read_exact(&mut header).await.unwrap();
        assert_eq!(&header[..4], b"ERRF", "Error message expected");
        let size = u32::from_le_bytes(header[4..8].try_into().unwrap()) as usize;
        let mut body = vec![0u8; size - 8];
        rd.read_exact(&mut body).await.unwrap();
        let code = u32::from_le_bytes(body[..4].try_into().unwrap());
        // The socket is closed afterwards.
        let mut rest = [0u8; 16];
        assert!(matches!(rd.read(&mut rest).await, Ok(0) | Err(_)));
        StatusCode::from(code)
    })
    .await
    .expect("trickle cut off within the wait");
    assert_eq!(status, StatusCode::BadTimeout);
    assert!(t.elapsed() < Duration::from_secs(4));
    trickle.abort();
    still_serves(&gw).await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_max_channel_count_are_refused() {
    // shared_only: all three connections are shared capacity.
    let gw = TestGateway::start(
        "[server]\nmax_channel_count = 3\nmax_session_count = 2\n[isolation]\nmode = \"shared_only\"\n",
    )
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(hello_done(&gw).await);
    }
    let mut s = raw(gw.addr).await;
    refused_with(&mut s, StatusCode::BadTcpNotEnoughResources).await;

    // A freed slot is usable again.
    drop(held.pop());
    let slot = common::bounded("slot released", async {
        loop {
            let mut s = raw(gw.addr).await;
            s.write_all(&hello_bytes(&gw.url)).await.unwrap();
            match read_frame(&mut s, WAIT).await {
                Some(f) if &f[..4] == b"ACKF" => return s,
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await;
    drop(slot);
    drop(held);
    let served = common::bounded("normal client after the flood", async {
        loop {
            let client = gw.client("after");
            match common::Chan::open(
                &client,
                gw.endpoint(
                    opcua_crypto::SecurityPolicy::None,
                    opcua_types::MessageSecurityMode::None,
                ),
            )
            .await
            {
                Ok(chan) => return chan,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await;
    served.close().await;
    still_serves(&gw).await;
    gw.stop().await;
}
