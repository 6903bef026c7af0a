//! Happy paths: a real opcua-core client channel talks to `ServerConnection`
//! frame by frame, with simulated time.
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use std::time::Instant;

use common::*;
use opcua_core::{Message, RequestMessage, ResponseMessage};
use opcua_types::{
    CloseSecureChannelRequest, DataValue, ReadResponse, ResponseHeader, SecurityTokenRequestType,
    StatusCode,
};
use uagate_proto::{CloseReason, Event, Limits, ServerConnection, MIN_BUFFER_SIZE, SCRATCH_KEEP};

#[test]
fn hello_negotiates_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let limits = Limits::default();
    // Client receives 30000, sends 20000, no message/chunk limits.
    let mut conn = server(limits.clone(), dir.path(), now);
    conn.handle_input(&hello(30000, 20000, 0, 0), now);
    let out = drain(&mut conn);
    assert!(out.events.is_empty());
    assert_eq!(out.frames.len(), 1);
    let ack = decode_ack(&out.frames[0]);
    assert_eq!(ack.protocol_version, 0);
    // Our receive buffer is bounded by what the client sends and vice versa.
    assert_eq!(
        ack.receive_buffer_size,
        limits.receive_buffer_size.min(20000)
    );
    assert_eq!(ack.send_buffer_size, limits.send_buffer_size.min(30000));
    assert_eq!(ack.max_message_size, limits.max_message_size);
    assert_eq!(ack.max_chunk_count, limits.max_chunk_count);
    for v in [
        ack.receive_buffer_size,
        ack.send_buffer_size,
        ack.max_message_size,
        ack.max_chunk_count,
    ] {
        assert_ne!(v, 0);
    }

    // A client with huge buffers gets ours.
    let mut conn = server(limits.clone(), dir.path(), now);
    conn.handle_input(&hello(u32::MAX, u32::MAX, 0, 0), now);
    let ack = decode_ack(&drain(&mut conn).frames[0]);
    assert_eq!(ack.receive_buffer_size, limits.receive_buffer_size);
    assert_eq!(ack.send_buffer_size, limits.send_buffer_size);
    assert!(ack.receive_buffer_size >= MIN_BUFFER_SIZE);
}

#[test]
fn hello_split_byte_by_byte_is_acknowledged_once() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let mut conn = server(Limits::default(), dir.path(), now);
    for b in hello(65536, 65536, 0, 0) {
        conn.handle_input(&[b], now);
    }
    let out = drain(&mut conn);
    assert_eq!(out.frames.len(), 1);
    decode_ack(&out.frames[0]);
    assert!(!conn.is_open() && !conn.is_closed());
}

#[test]
fn open_read_renew_close_policy_none() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    // The wall-clock time at `now`; the connection reads no clock itself.
    let wall = opcua_types::DateTime::ymd_hms(2024, 5, 1, 12, 0, 0);
    let mut conn = ServerConnection::new(
        Limits::default(),
        common::server_channel(dir.path()),
        now,
        wall,
    );
    let mut client = Client::none(dir.path());

    // Hello with an 8192-byte send buffer so multi-chunk requests are possible.
    conn.handle_input(&hello(65536, 8192, 0, 0), now);
    let ack = decode_ack(&drain(&mut conn).frames[0]);
    assert_eq!(ack.receive_buffer_size, 8192);

    // OPN Issue.
    conn.handle_input(
        &client.open(SecurityTokenRequestType::Issue, 600_000),
        at(now, 1),
    );
    let out = drain(&mut conn);
    assert!(
        out.frames.is_empty(),
        "nothing is sent before the engine decides"
    );
    match out.events.as_slice() {
        [Event::OpenRequested(req)] => {
            assert_eq!(req.policy, opcua_crypto::SecurityPolicy::None);
            assert_eq!(req.mode, opcua_types::MessageSecurityMode::None);
            assert!(req.client_certificate.is_none());
        }
        other => panic!("expected OpenRequested, got {other:?}"),
    }
    assert!(!conn.is_open());
    conn.accept_open(42, at(now, 1));
    let out = drain(&mut conn);
    let resp = client.accept_open_response(&out.frames);
    assert_eq!(resp.security_token.channel_id, 42);
    assert_ne!(resp.security_token.token_id, 0);
    assert_eq!(
        resp.security_token.created_at,
        opcua_types::DateTime::ymd_hms(2024, 5, 1, 12, 0, 1),
        "CreatedAt is the given wall time plus the time since"
    );
    // 600 s lies within the default bounds (10 s ..= 3600 s), so it is kept.
    assert_eq!(resp.security_token.revised_lifetime, 600_000);
    assert!(conn.is_open());
    assert_eq!(conn.secure_channel().secure_channel_id(), 42);
    // Token deadline: lifetime plus 25 %.
    assert_eq!(conn.poll_timeout(), Some(at(now, 1 + 750)));

    // A ReadRequest in a single chunk.
    let req = client.read_request(3);
    let (rid, frames) = client.encode(&req, 8192);
    assert_eq!(frames.len(), 1);
    conn.handle_input(&frames[0], at(now, 2));
    let out = drain(&mut conn);
    let Some(Event::Request {
        request_id,
        request,
    }) = out.events.into_iter().next()
    else {
        panic!("expected a request");
    };
    assert_eq!(request_id, rid);
    assert_eq!(*request, req);

    // The response goes back and the client decodes it.
    let handle = request.request_handle();
    let response = ReadResponse {
        response_header: ResponseHeader::new_good(handle),
        results: Some(vec![DataValue::new_now(21.5f64); 3]),
        diagnostic_infos: None,
    };
    conn.send_response(
        request_id,
        ResponseMessage::Read(Box::new(response.clone())),
    );
    let out = drain(&mut conn);
    assert_eq!(out.frames.len(), 1);
    match client.decode(&out.frames) {
        ResponseMessage::Read(r) => {
            assert_eq!(r.response_header.request_handle, handle);
            assert_eq!(r.results, response.results);
        }
        other => panic!("unexpected {other:?}"),
    }

    // A ReadRequest in several chunks, delivered in odd splits.
    let req = client.read_request(1500);
    let (rid, frames) = client.encode(&req, 8192);
    assert!(frames.len() >= 3, "{} chunks", frames.len());
    for f in &frames[..frames.len() - 1] {
        assert_eq!(f[3], b'C');
    }
    let all: Vec<u8> = frames.concat();
    for piece in all.chunks(1000) {
        conn.handle_input(piece, at(now, 3));
    }
    let out = drain(&mut conn);
    assert_eq!(out.events.len(), 1, "{:?}", out.events);
    match &out.events[0] {
        Event::Request {
            request_id,
            request,
        } => {
            assert_eq!(*request_id, rid);
            assert_eq!(**request, req);
        }
        other => panic!("unexpected {other:?}"),
    }

    // A large response is chunked to the client's receive size and decodes.
    let big = ReadResponse {
        response_header: ResponseHeader::new_good(req.request_handle()),
        results: Some(vec![DataValue::new_now(1.0f64); 6000]),
        diagnostic_infos: None,
    };
    conn.send_response(rid, ResponseMessage::Read(Box::new(big.clone())));
    let out = drain(&mut conn);
    assert!(out.frames.len() > 1);
    assert!(out.frames.iter().all(|f| f.len() <= 65536));
    match client.decode(&out.frames) {
        ResponseMessage::Read(r) => assert_eq!(r.results, big.results),
        other => panic!("unexpected {other:?}"),
    }
    // The room the large response needed is not kept with the connection.
    assert!(conn.encode_room() <= SCRATCH_KEEP, "{}", conn.encode_room());

    // Renew at t=500 s: new token, deadline moves.
    conn.handle_input(
        &client.open(SecurityTokenRequestType::Renew, 600_000),
        at(now, 500),
    );
    let out = drain(&mut conn);
    let renewed = match out.events.as_slice() {
        [Event::Renewed { token_id }] => *token_id,
        other => panic!("expected Renewed, got {other:?}"),
    };
    let resp = client.accept_open_response(&out.frames);
    assert_eq!(resp.security_token.token_id, renewed);
    assert_eq!(resp.security_token.channel_id, 42);
    assert_eq!(
        resp.security_token.created_at,
        opcua_types::DateTime::ymd_hms(2024, 5, 1, 12, 8, 20)
    );
    assert_eq!(conn.poll_timeout(), Some(at(now, 500 + 750)));
    // The old deadline passing does nothing now.
    conn.handle_timeout(at(now, 751));
    assert!(conn.is_open());

    // Requests still flow after the renew.
    let req = client.read_request(1);
    let (_, frames) = client.encode(&req, 8192);
    conn.handle_input(&frames.concat(), at(now, 800));
    let out = drain(&mut conn);
    assert!(matches!(out.events.as_slice(), [Event::Request { .. }]));

    // CloseSecureChannel.
    let close = RequestMessage::from(CloseSecureChannelRequest {
        request_header: client.header(),
    });
    let (_, frames) = client.encode(&close, 8192);
    assert_eq!(&frames[0][..4], b"CLOF");
    conn.handle_input(&frames[0], at(now, 801));
    let out = drain(&mut conn);
    assert!(out.frames.is_empty());
    assert!(matches!(
        out.events.as_slice(),
        [Event::Closed(CloseReason::ClientClosed)]
    ));
    assert!(conn.is_closed());
    assert_eq!(conn.poll_timeout(), None);
}

#[test]
fn token_lifetime_is_clamped() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    for (requested, expected) in [(0u32, 10_000u32), (1, 10_000), (u32::MAX, 3_600_000)] {
        let mut conn = server(Limits::default(), dir.path(), now);
        let mut client = Client::none(dir.path());
        conn.handle_input(&hello(65536, 65536, 0, 0), now);
        decode_ack(&drain(&mut conn).frames[0]);
        conn.handle_input(
            &client.open(SecurityTokenRequestType::Issue, requested),
            now,
        );
        conn.accept_open(1, now);
        let out = drain(&mut conn);
        let resp = client.accept_open_response(&out.frames);
        assert_eq!(resp.security_token.revised_lifetime, expected);
    }
}

#[test]
fn frames_after_open_in_one_read_wait_for_the_engine() {
    // OPN and a MSG arrive in one read: the MSG must not be processed until
    // the engine accepted the open, then it must be.
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let mut conn = server(Limits::default(), dir.path(), now);
    let mut client = Client::none(dir.path());
    let mut input = hello(65536, 65536, 0, 0);
    input.extend(client.open(SecurityTokenRequestType::Issue, 60_000));
    // The client knows the channel id only after the response; pre-set it.
    client
        .channel
        .set_security_token(opcua_types::ChannelSecurityToken {
            channel_id: 9,
            token_id: 1,
            created_at: opcua_types::DateTime::now(),
            revised_lifetime: 60_000,
        });
    let req = client.read_request(2);
    let (rid, frames) = client.encode(&req, 8192);
    input.extend(frames.concat());
    conn.handle_input(&input, now);
    let out = drain(&mut conn);
    assert_eq!(out.events.len(), 1);
    assert!(matches!(out.events[0], Event::OpenRequested(_)));
    conn.accept_open(9, now);
    let out = drain(&mut conn);
    assert_eq!(out.events.len(), 1, "{:?}", out.events);
    assert!(matches!(&out.events[0], Event::Request { request_id, .. } if *request_id == rid));
}

#[test]
fn server_close_sends_error() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let (mut conn, _client) = open_none(Limits::default(), dir.path(), now);
    conn.close(StatusCode::BadShutdown);
    let out = drain(&mut conn);
    assert_eq!(
        error_status(out.frames.last().unwrap()),
        StatusCode::BadShutdown
    );
    assert!(matches!(
        out.events.as_slice(),
        [Event::Closed(CloseReason::Server(StatusCode::BadShutdown))]
    ));
    assert!(conn.is_closed());
}

#[test]
fn engine_calls_in_the_wrong_state_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let (mut conn, mut client) = open_none(Limits::default(), dir.path(), now);
    // A duplicate accept or a late reject must not disturb an open channel.
    conn.accept_open(99, now);
    conn.reject_open(StatusCode::BadCertificateUntrusted);
    let out = drain(&mut conn);
    assert!(out.frames.is_empty() && out.events.is_empty());
    assert!(conn.is_open());
    assert_eq!(conn.secure_channel().secure_channel_id(), 7);
    let req = client.read_request(1);
    let (_, frames) = client.encode(&req, 8192);
    conn.handle_input(&frames[0], now);
    assert!(matches!(
        drain(&mut conn).events.as_slice(),
        [Event::Request { .. }]
    ));
    // send_response before open / after close does nothing.
    let mut fresh = server(Limits::default(), dir.path(), now);
    fresh.send_response(1, ResponseMessage::ServiceFault(Box::default()));
    assert!(fresh.poll_transmit().is_none());
}
