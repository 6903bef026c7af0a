//! Hand-built UA-TCP traffic on an open None channel: a valid request gets
//! its response, and mangled request bodies (a seeded pseudo-random sweep)
//! each get a response or an Error message before the close; a connection
//! that just drops would mean the connection task died.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{hello_bytes, raw, read_frame, TestGateway};
use opcua_types::{
    BinaryDecodable, BinaryEncodable, ByteString, ContextOwned, DateTime, GetEndpointsRequest,
    MessageSecurityMode, NodeId, OpenSecureChannelRequest, OpenSecureChannelResponse,
    RequestHeader, SecurityTokenRequestType, StatusCode,
};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(5);
const NONE_URI: &str = "http://opcfoundation.org/UA/SecurityPolicy#None";

/// Four-byte NodeId encoding of `ns=0;i=id`.
fn type_id(id: u16) -> Vec<u8> {
    let b = id.to_le_bytes();
    vec![0x01, 0x00, b[0], b[1]]
}

fn with_size(mut frame: Vec<u8>) -> Vec<u8> {
    let n = (frame.len() as u32).to_le_bytes();
    frame[4..8].copy_from_slice(&n);
    frame
}

/// An open None channel on a raw socket: (stream, channel id, token id).
async fn open_none(gw: &TestGateway) -> (TcpStream, u32, u32) {
    let ctx_owned = ContextOwned::default();
    let ctx = ctx_owned.context();
    let mut s = raw(gw.addr).await;
    s.write_all(&hello_bytes(&gw.url)).await.unwrap();
    let ack = read_frame(&mut s, WAIT).await.unwrap();
    assert_eq!(&ack[..4], b"ACKF");

    let mut opn = b"OPNF\0\0\0\0".to_vec();
    opn.extend_from_slice(&0u32.to_le_bytes());
    opn.extend_from_slice(&(NONE_URI.len() as i32).to_le_bytes());
    opn.extend_from_slice(NONE_URI.as_bytes());
    opn.extend_from_slice(&(-1i32).to_le_bytes()); // sender certificate
    opn.extend_from_slice(&(-1i32).to_le_bytes()); // receiver thumbprint
    opn.extend_from_slice(&1u32.to_le_bytes()); // sequence number
    opn.extend_from_slice(&1u32.to_le_bytes()); // request id
    opn.extend_from_slice(&type_id(446));
    OpenSecureChannelRequest {
        request_header: RequestHeader::new(&NodeId::null(), &DateTime::now(), 1),
        client_protocol_version: 0,
        request_type: SecurityTokenRequestType::Issue,
        security_mode: MessageSecurityMode::None,
        client_nonce: ByteString::null(),
        requested_lifetime: 60_000,
    }
    .encode(&mut opn, &ctx)
    .unwrap();
    s.write_all(&with_size(opn)).await.unwrap();
    let resp = read_frame(&mut s, WAIT).await.expect("OPN response");
    assert_eq!(&resp[..4], b"OPNF", "OpenSecureChannel response expected");
    let channel_id = u32::from_le_bytes(resp[8..12].try_into().unwrap());
    // Skip the asymmetric header, the sequence header and the type id.
    let uri_len = i32::from_le_bytes(resp[12..16].try_into().unwrap()).max(0) as usize;
    let mut at = 16 + uri_len;
    for _ in 0..2 {
        let n = i32::from_le_bytes(resp[at..at + 4].try_into().unwrap()).max(0) as usize;
        at += 4 + n;
    }
    at += 8 + 4;
    let body = OpenSecureChannelResponse::decode(&mut &resp[at..], &ctx).unwrap();
    assert_eq!(body.response_header.service_result, StatusCode::Good);
    assert_eq!(body.security_token.channel_id, channel_id);
    (s, channel_id, body.security_token.token_id)
}

fn msg(channel_id: u32, token_id: u32, seq: u32, body: &[u8]) -> Vec<u8> {
    let mut m = b"MSGF\0\0\0\0".to_vec();
    m.extend_from_slice(&channel_id.to_le_bytes());
    m.extend_from_slice(&token_id.to_le_bytes());
    m.extend_from_slice(&seq.to_le_bytes());
    m.extend_from_slice(&seq.to_le_bytes()); // request id
    m.extend_from_slice(body);
    with_size(m)
}

/// What the server did with one message.
#[derive(Debug, PartialEq)]
enum Outcome {
    Response,
    Error(StatusCode),
}

async fn outcome(s: &mut TcpStream) -> Outcome {
    let frame = read_frame(s, WAIT)
        .await
        .expect("a response or an Error message, not a silent close");
    match &frame[..3] {
        b"MSG" => Outcome::Response,
        b"ERR" => {
            let code = u32::from_le_bytes(frame[8..12].try_into().unwrap());
            Outcome::Error(StatusCode::from(code))
        }
        other => panic!("unexpected frame {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_request_on_hand_made_channel() {
    let gw = TestGateway::start("").await;
    let ctx_owned = ContextOwned::default();
    let ctx = ctx_owned.context();
    let (mut s, channel_id, token_id) = open_none(&gw).await;
    let mut body = type_id(428);
    GetEndpointsRequest {
        request_header: RequestHeader::new(&NodeId::null(), &DateTime::now(), 7),
        endpoint_url: gw.url.as_str().into(),
        locale_ids: None,
        profile_uris: None,
    }
    .encode(&mut body, &ctx)
    .unwrap();
    s.write_all(&msg(channel_id, token_id, 2, &body))
        .await
        .unwrap();
    assert_eq!(outcome(&mut s).await, Outcome::Response);

    // A wrong channel id is refused.
    s.write_all(&msg(channel_id + 1000, token_id, 3, &body))
        .await
        .unwrap();
    assert_eq!(
        outcome(&mut s).await,
        Outcome::Error(StatusCode::BadTcpSecureChannelUnknown)
    );
    common::expect_closed(&mut s).await;

    // A replayed sequence number is refused.
    let (mut s, channel_id, token_id) = open_none(&gw).await;
    s.write_all(&msg(channel_id, token_id, 2, &body))
        .await
        .unwrap();
    assert_eq!(outcome(&mut s).await, Outcome::Response);
    s.write_all(&msg(channel_id, token_id, 2, &body))
        .await
        .unwrap();
    assert!(matches!(outcome(&mut s).await, Outcome::Error(c) if c.is_bad()));
    common::expect_closed(&mut s).await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mangled_request_bodies_never_kill_the_connection_task() {
    let gw = TestGateway::start("").await;
    let ctx_owned = ContextOwned::default();
    let ctx = ctx_owned.context();
    let mut valid = Vec::new();
    GetEndpointsRequest {
        request_header: RequestHeader::new(&NodeId::null(), &DateTime::now(), 7),
        endpoint_url: gw.url.as_str().into(),
        locale_ids: None,
        profile_uris: None,
    }
    .encode(&mut valid, &ctx)
    .unwrap();
    // Binary encoding ids of requests the engine decodes (and some it does not).
    let types: [u16; 14] = [
        428, 422, 461, 467, 473, 479, 527, 533, 554, 560, 566, 631, 673, 787,
    ];
    let mut seed: u64 = 0x5eed_1234_abcd_0001;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut s, mut channel_id, mut token_id) = open_none(&gw).await;
    let mut seq = 2;
    let mut errors = 0;
    for round in 0..150 {
        let r = next();
        let mut body = type_id(types[(r % types.len() as u64) as usize]);
        match round % 3 {
            // Random bytes after a real type id.
            0 => body.extend((0..(r >> 8) % 300).map(|_| next() as u8)),
            // A valid header body truncated at a random point.
            1 => body.extend_from_slice(&valid[..(r >> 8) as usize % valid.len()]),
            // A valid body with random bytes flipped.
            _ => {
                let mut v = valid.clone();
                for _ in 0..1 + (r >> 8) % 4 {
                    let i = next() as usize % v.len();
                    v[i] = next() as u8;
                }
                body.extend_from_slice(&v);
            }
        }
        s.write_all(&msg(channel_id, token_id, seq, &body))
            .await
            .unwrap();
        seq += 1;
        match outcome(&mut s).await {
            Outcome::Response => {}
            Outcome::Error(code) => {
                assert!(code.is_bad(), "round {round}: {code}");
                common::expect_closed(&mut s).await;
                errors += 1;
                (s, channel_id, token_id) = open_none(&gw).await;
                seq = 2;
            }
        }
    }
    eprintln!("{errors} of 150 mangled requests closed the channel");
    // Most mangled requests are answered with a ServiceFault on the same channel.
    assert!(errors < 150, "every mangled request closed the channel");
    let (chan, token) = gw.anon_session("after").await;
    assert_eq!(chan.read_status(&token).await, StatusCode::Good);
    chan.close().await;
    gw.stop().await;
}
