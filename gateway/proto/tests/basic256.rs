//! Basic256Sha256 SignAndEncrypt end to end: real certificates in a temp
//! PKI, asymmetric OPN, derived symmetric keys, encrypted MSG both ways.
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use std::path::Path;
use std::time::Instant;

use common::*;
use opcua_core::comms::secure_channel::SecureChannel;
use opcua_core::{Message, RequestMessage, ResponseMessage};
use opcua_crypto::{CertificateStore, SecurityPolicy, X509Data, X509};
use opcua_types::{
    ByteString, CloseSecureChannelRequest, DataValue, MessageSecurityMode, ReadResponse,
    ResponseHeader, SecurityTokenRequestType, StatusCode,
};
use uagate_proto::{CloseReason, Event, Limits, ServerConnection};

fn x509_data(name: &str) -> X509Data {
    X509Data {
        key_size: 2048,
        common_name: name.to_string(),
        organization: "uagate".to_string(),
        organizational_unit: "tests".to_string(),
        country: "DE".to_string(),
        state: "Berlin".to_string(),
        alt_host_names: vec![format!("urn:uagate:{name}"), "localhost".to_string()].into(),
        certificate_duration_days: 30,
    }
}

/// A server connection whose channel reads its own certificate from `pki`;
/// returns the server certificate for the client.
fn secure_server(pki: &Path, now: Instant) -> (ServerConnection, X509) {
    let store = CertificateStore::new(pki);
    let (cert, _key) = store
        .create_and_store_application_instance_cert(&x509_data("server"), false)
        .unwrap();
    let channel: SecureChannel = server_channel(pki);
    assert!(
        channel.cert().is_some(),
        "server channel has its certificate"
    );
    (
        ServerConnection::new(
            Limits::default(),
            channel,
            now,
            opcua_types::DateTime::now(),
        ),
        cert,
    )
}

fn secure_client(pki: &Path, server_cert: X509) -> (Client, X509) {
    let mut client = Client::new(
        pki,
        SecurityPolicy::Basic256Sha256,
        MessageSecurityMode::SignAndEncrypt,
    );
    let (cert, key) = X509::cert_and_pkey(&x509_data("client")).unwrap();
    client.channel.set_cert(Some(cert.clone()));
    client.channel.set_private_key(Some(key));
    client.channel.set_remote_cert(Some(server_cert));
    (client, cert)
}

/// Hello + OPN Issue; returns the OpenRequested event's certificate.
fn handshake_to_pending(
    conn: &mut ServerConnection,
    client: &mut Client,
    now: Instant,
    nonce: Option<ByteString>,
) -> Option<ByteString> {
    conn.handle_input(&hello(65536, 65536, 0, 0), now);
    decode_ack(&drain(conn).frames[0]);
    let opn = match nonce {
        Some(n) => client.open_with_nonce(SecurityTokenRequestType::Issue, 60_000, n),
        None => client.open(SecurityTokenRequestType::Issue, 60_000),
    };
    // The OPN is encrypted: the client nonce must not be visible in clear.
    let nonce = client.channel.local_nonce().to_vec();
    if !nonce.is_empty() {
        assert!(!opn.windows(nonce.len()).any(|w| w == nonce.as_slice()));
    }
    conn.handle_input(&opn, now);
    let out = drain(conn);
    assert!(
        out.frames.is_empty(),
        "{:?}",
        out.frames.first().map(|f| &f[..4])
    );
    match out.events.as_slice() {
        [Event::OpenRequested(req)] => {
            assert_eq!(req.policy, SecurityPolicy::Basic256Sha256);
            assert_eq!(req.mode, MessageSecurityMode::SignAndEncrypt);
            req.client_certificate.clone()
        }
        other => panic!("expected OpenRequested, got {other:?}"),
    }
}

#[test]
fn basic256sha256_sign_and_encrypt_happy_path() {
    let dir = tempfile::tempdir().unwrap();
    let client_pki = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let (mut conn, server_cert) = secure_server(dir.path(), now);
    let (mut client, client_cert) = secure_client(client_pki.path(), server_cert);

    let presented = handshake_to_pending(&mut conn, &mut client, now, None);
    assert_eq!(presented, Some(client_cert.as_byte_string()));
    conn.accept_open(3, now);
    let out = drain(&mut conn);
    assert!(out.events.is_empty(), "{:?}", out.events);
    let resp = client.accept_open_response(&out.frames);
    assert_eq!(resp.security_token.channel_id, 3);
    assert_eq!(resp.server_nonce.len(), 32);
    assert!(conn.is_open());
    assert_eq!(
        conn.secure_channel().security_mode(),
        MessageSecurityMode::SignAndEncrypt
    );

    // Encrypted request, single and multi chunk.
    for n in [2usize, 3000] {
        let req = client.read_request(n);
        let (rid, frames) = client.encode(&req, 8192);
        let clear_name = b"Device1.Temperature";
        for f in &frames {
            assert!(!f.windows(clear_name.len()).any(|w| w == clear_name));
        }
        conn.handle_input(&frames.concat(), now);
        let out = drain(&mut conn);
        let (request_id, request) = match out.events.into_iter().next() {
            Some(Event::Request {
                request_id,
                request,
            }) => (request_id, request),
            other => panic!("expected a request, got {other:?}"),
        };
        assert_eq!(request_id, rid);
        assert_eq!(*request, req);
        let response = ReadResponse {
            response_header: ResponseHeader::new_good(request.request_handle()),
            results: Some(vec![DataValue::new_now(n as f64); n]),
            diagnostic_infos: None,
        };
        conn.send_response(
            request_id,
            ResponseMessage::Read(Box::new(response.clone())),
        );
        let out = drain(&mut conn);
        match client.decode(&out.frames) {
            ResponseMessage::Read(r) => assert_eq!(r.results, response.results),
            other => panic!("unexpected {other:?}"),
        }
    }

    // Renew: new nonces, new keys; traffic continues with the new token.
    conn.handle_input(
        &client.open(SecurityTokenRequestType::Renew, 60_000),
        at(now, 30),
    );
    let out = drain(&mut conn);
    assert!(matches!(out.events.as_slice(), [Event::Renewed { .. }]));
    let resp = client.accept_open_response(&out.frames);
    assert_eq!(resp.security_token.channel_id, 3);
    let req = client.read_request(1);
    let (_, frames) = client.encode(&req, 8192);
    conn.handle_input(&frames.concat(), at(now, 31));
    assert!(matches!(
        drain(&mut conn).events.as_slice(),
        [Event::Request { .. }]
    ));

    // A tampered encrypted chunk fails the signature check.
    let req = client.read_request(1);
    let (_, mut frames) = client.encode(&req, 8192);
    let f = &mut frames[0];
    let n = f.len();
    f[n - 40] ^= 0x55;
    conn.handle_input(f, at(now, 32));
    let out = drain(&mut conn);
    assert!(conn.is_closed());
    assert_eq!(
        error_status(out.frames.last().unwrap()),
        StatusCode::BadSecurityChecksFailed
    );
}

#[test]
fn basic256sha256_close() {
    let dir = tempfile::tempdir().unwrap();
    let client_pki = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let (mut conn, server_cert) = secure_server(dir.path(), now);
    let (mut client, _) = secure_client(client_pki.path(), server_cert);
    handshake_to_pending(&mut conn, &mut client, now, None);
    conn.accept_open(3, now);
    client.accept_open_response(&drain(&mut conn).frames);
    let close = RequestMessage::from(CloseSecureChannelRequest {
        request_header: client.header(),
    });
    let (_, frames) = client.encode(&close, 8192);
    conn.handle_input(&frames[0], now);
    assert!(matches!(
        drain(&mut conn).events.as_slice(),
        [Event::Closed(CloseReason::ClientClosed)]
    ));
}

#[test]
fn basic256sha256_wrong_nonce_length_fails_on_accept() {
    let dir = tempfile::tempdir().unwrap();
    let client_pki = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let (mut conn, server_cert) = secure_server(dir.path(), now);
    let (mut client, _) = secure_client(client_pki.path(), server_cert);
    handshake_to_pending(
        &mut conn,
        &mut client,
        now,
        Some(ByteString::from(vec![1u8; 5])),
    );
    conn.accept_open(3, now);
    assert_failed(&mut conn, StatusCode::BadNonceInvalid);
}

#[test]
fn basic256sha256_short_msg_frames_do_not_panic() {
    // MSG frames shorter than header + signature on a secured channel.
    let mut x = 0x1234_5678_9abc_def0u64;
    let dir = tempfile::tempdir().unwrap();
    let client_pki = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let (_, server_cert) = secure_server(dir.path(), now);
    let (client_cert, client_key) = X509::cert_and_pkey(&x509_data("client")).unwrap();
    for len in (16usize..=140)
        .step_by(3)
        .chain([16, 20, 47, 48, 55, 56, 63, 64, 100])
    {
        let mut conn = ServerConnection::new(
            Limits::default(),
            server_channel(dir.path()),
            now,
            opcua_types::DateTime::now(),
        );
        let mut client = Client::new(
            client_pki.path(),
            SecurityPolicy::Basic256Sha256,
            MessageSecurityMode::SignAndEncrypt,
        );
        client.channel.set_cert(Some(client_cert.clone()));
        client.channel.set_private_key(Some(client_key.clone()));
        client.channel.set_remote_cert(Some(server_cert.clone()));
        handshake_to_pending(&mut conn, &mut client, now, None);
        conn.accept_open(3, now);
        let resp = client.accept_open_response(&drain(&mut conn).frames);
        let mut f = b"MSGF".to_vec();
        f.extend_from_slice(&(len as u32).to_le_bytes());
        f.extend_from_slice(&3u32.to_le_bytes());
        f.extend_from_slice(&resp.security_token.token_id.to_le_bytes());
        while f.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            f.push(x as u8);
        }
        f.truncate(len);
        conn.handle_input(&f, now);
        let out = drain(&mut conn);
        assert!(conn.is_closed(), "len {len}");
        let status = error_status(out.frames.last().unwrap());
        assert!(status.is_bad(), "len {len}: {status}");
    }
}
