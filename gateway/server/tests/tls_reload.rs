//! Replacing the TLS certificate of a running gateway: new TLS handshakes
//! get the new certificate within a few seconds, while an opc.tcp session
//! and an established TLS connection keep working.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod tlsclient;

use std::time::Duration;

use common::{bounded, TestGateway};
use opcua_types::NodeId;
use uagate_server::tls_cert::install;

/// A fresh self-signed pair for 127.0.0.1, valid from an hour ago for 30 days.
fn new_pair() -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

#[tokio::test]
async fn a_replaced_tls_certificate_is_served_without_dropping_connections() {
    let gw = TestGateway::start("").await;
    let data = gw.tmp.path().join("data");
    let addr = gw.gw.as_ref().unwrap().tls_addr;
    let old = tlsclient::stored_leaf(&data);

    // An opc.tcp session and an established HTTPS connection, before.
    let (chan, token) = gw.anon_session("reload").await;
    let state = NodeId::new(0, 2259u32);
    assert!(chan
        .read_value(&token, state.clone())
        .await
        .status()
        .is_good());
    let mut https = bounded("TLS connect", tlsclient::connect(addr, &old))
        .await
        .unwrap();
    let (status, _, _) = bounded(
        "GET before",
        tlsclient::http1(&mut https, "GET", "text/plain", b""),
    )
    .await
    .unwrap();
    assert_eq!(status, 405, "the listener answers");

    // The operator installs a new certificate (what `uagate tls set` does).
    let (cert_pem, key_pem) = new_pair();
    install(
        &data,
        cert_pem.as_bytes(),
        key_pem.as_bytes(),
        chrono::Utc::now(),
    )
    .unwrap();
    let new = tlsclient::leaf_of(cert_pem.as_bytes());
    assert_ne!(new, old);

    // New handshakes present it within a few seconds (bounded polling).
    bounded("new certificate served", async {
        loop {
            if let Ok(s) = tlsclient::connect(addr, &new).await {
                assert_eq!(tlsclient::presented(&s), new);
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    // A client pinned to the old certificate is now refused.
    assert!(tlsclient::connect(addr, &old).await.is_err());

    // Nothing was dropped: the opc.tcp session and the old TLS connection work.
    assert!(chan.read_value(&token, state).await.status().is_good());
    let (status, _, _) = bounded(
        "GET after",
        tlsclient::http1(&mut https, "GET", "text/plain", b""),
    )
    .await
    .unwrap();
    assert_eq!(status, 405);
}
