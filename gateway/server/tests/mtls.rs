//! Mutual TLS on the opc.wss/opc.https listener: a client certificate is
//! checked against the SQLite trust list; an unknown one is refused (HTTP
//! 403) and listed for the operator, and is accepted once trusted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod tlsclient;

use common::{bounded, TestGateway};
use opcua_core::{Message as _, RequestMessage};
use opcua_types::{
    BinaryEncodable, ContextOwned, DateTime, GetEndpointsRequest, NodeId, RequestHeader,
};
use uagate_store::CertKind;

/// A GetEndpoints request as an opc.https body (type id + fields).
fn get_endpoints_body() -> Vec<u8> {
    let ctx = ContextOwned::default();
    let request = RequestMessage::from(GetEndpointsRequest {
        request_header: RequestHeader::new(&NodeId::null(), &DateTime::now(), 1),
        endpoint_url: "opc.https://127.0.0.1/".into(),
        locale_ids: None,
        profile_uris: None,
    });
    let mut body = Vec::new();
    request.type_id().encode(&mut body, &ctx.context()).unwrap();
    request.encode(&mut body, &ctx.context()).unwrap();
    body
}

#[tokio::test]
async fn an_unknown_client_certificate_is_refused_and_listed_then_accepted_once_trusted() {
    // Appended inside the harness's [listen] table.
    let gw = TestGateway::start("tls_client_auth = \"optional\"\n").await;
    let addr = gw.gw.as_ref().unwrap().tls_addr;
    let server_cert = tlsclient::stored_leaf(&gw.tmp.path().join("data"));
    let (cert, key) = tlsclient::client_identity();
    let body = get_endpoints_body();

    // Unknown certificate: every request is refused, and it is listed.
    let mut tls = bounded(
        "mTLS connect",
        tlsclient::connect_with_client_cert(
            addr,
            &server_cert,
            vec![cert.clone()],
            key.clone_key(),
        ),
    )
    .await
    .expect("TLS handshake completes; trust is decided afterwards");
    let (status, _, _) = bounded(
        "refused request",
        tlsclient::http1(&mut tls, "POST", "application/octet-stream", &body),
    )
    .await
    .unwrap();
    assert_eq!(status, 403);
    let rejected = gw.store.certs(CertKind::Rejected).await.unwrap();
    assert_eq!(rejected.len(), 1, "{rejected:?}");

    // Trusted by the operator: the same certificate is served.
    let trusted = gw
        .store
        .trust_add("test", cert.as_ref(), CertKind::Trusted)
        .await
        .unwrap();
    let mut tls = bounded(
        "mTLS connect (trusted)",
        tlsclient::connect_with_client_cert(
            addr,
            &server_cert,
            vec![cert.clone()],
            key.clone_key(),
        ),
    )
    .await
    .unwrap();
    let (status, headers, response) = bounded(
        "trusted request",
        tlsclient::http1(&mut tls, "POST", "application/octet-stream", &body),
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&response));
    assert!(headers
        .iter()
        .any(|(k, v)| k == "content-type" && v == "application/octet-stream"));
    assert!(response.len() > 100, "a GetEndpoints response");

    // Removed from the trust list: its open connection is closed (within
    // the second the re-check takes), and it is refused again.
    gw.store
        .trust_remove("test", &trusted.thumbprint)
        .await
        .unwrap();
    let t0 = std::time::Instant::now();
    loop {
        let answer = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            tlsclient::http1(&mut tls, "POST", "application/octet-stream", &body),
        )
        .await;
        if !matches!(answer, Ok(Ok((200, _, _)))) {
            break;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "the connection of a removed certificate is still served"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    // Optional: a client without a certificate is still served.
    let mut plain = bounded("TLS connect", tlsclient::connect(addr, &server_cert))
        .await
        .unwrap();
    let (status, _, _) = bounded(
        "request without a client certificate",
        tlsclient::http1(&mut plain, "POST", "application/octet-stream", &body),
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
}

#[tokio::test]
async fn required_client_auth_refuses_a_client_without_a_certificate() {
    // Appended inside the harness's [listen] table.
    let gw = TestGateway::start("tls_client_auth = \"required\"\n").await;
    let addr = gw.gw.as_ref().unwrap().tls_addr;
    let server_cert = tlsclient::stored_leaf(&gw.tmp.path().join("data"));
    let body = get_endpoints_body();
    // TLS 1.3 clients learn of the refusal on their first read.
    let outcome = bounded("TLS connect without a certificate", async {
        let mut tls = tlsclient::connect(addr, &server_cert).await?;
        tlsclient::http1(&mut tls, "POST", "application/octet-stream", &body).await
    })
    .await;
    assert!(
        outcome.is_err(),
        "served without a client certificate: {outcome:?}"
    );
}
