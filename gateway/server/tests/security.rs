//! Secured channels: the trust list in the store decides, and changes to it
//! apply to the next connection without a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Chan, TestGateway};
use opcua_client::IdentityToken;
use opcua_crypto::SecurityPolicy;
use opcua_types::{
    ActivateSessionRequest, AnonymousIdentityToken, ExtensionObject, MessageSecurityMode,
    SignatureData, StatusCode,
};
use uagate_store::CertKind;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_client_certificate_is_rejected_until_trusted() {
    let gw = TestGateway::start("").await;
    let client = gw.client("secure");
    let endpoint = gw.endpoint(
        SecurityPolicy::Basic256Sha256,
        MessageSecurityMode::SignAndEncrypt,
    );
    let own = client.certificate_store().read().read_own_cert().unwrap();
    let thumbprint = own.thumbprint().as_hex_string().to_lowercase();

    let refused = Chan::open(&client, endpoint.clone()).await;
    let err = refused.err().expect("untrusted client refused");
    assert_eq!(err.status(), StatusCode::BadCertificateUntrusted);
    let rejected = gw.store.certs(CertKind::Rejected).await.unwrap();
    assert!(
        rejected.iter().any(|c| c.thumbprint == thumbprint),
        "rejected list {:?} lacks {thumbprint}",
        rejected.iter().map(|c| &c.thumbprint).collect::<Vec<_>>()
    );

    gw.store
        .trust_add("test", &own.to_der().unwrap(), CertKind::Trusted)
        .await
        .unwrap();
    assert!(gw
        .store
        .certs(CertKind::Rejected)
        .await
        .unwrap()
        .iter()
        .all(|c| c.thumbprint != thumbprint));

    let chan = Chan::open(&client, endpoint.clone())
        .await
        .expect("trusted client connects without a gateway restart");
    let created = chan.create_session(60_000.0).await.unwrap();
    let token = created.authentication_token;
    let activated = chan
        .activate(&token, IdentityToken::Anonymous)
        .await
        .unwrap();
    assert_eq!(chan.read_status(&token).await, StatusCode::Good);

    // The session moves to a second channel of the same client certificate,
    // but not to a channel of another (trusted) client.
    let again = Chan::open(&client, endpoint.clone()).await.unwrap();
    // Part 4: the client signs the nonce of the last ActivateSession response.
    let key = client.certificate_store().read().read_own_pkey().unwrap();
    let signature = opcua_crypto::create_signature_data(
        &key,
        SecurityPolicy::Basic256Sha256,
        &created.server_certificate,
        &activated.server_nonce,
    )
    .unwrap();
    let transfer = |chan: &Chan, signature: SignatureData| ActivateSessionRequest {
        request_header: chan.header(&token),
        client_signature: signature,
        client_software_certificates: None,
        locale_ids: None,
        user_identity_token: ExtensionObject::from_message(AnonymousIdentityToken {
            policy_id: "anonymous".into(),
        }),
        user_token_signature: SignatureData::null(),
    };
    // A signature over a stale nonce is refused.
    let stale = opcua_crypto::create_signature_data(
        &key,
        SecurityPolicy::Basic256Sha256,
        &created.server_certificate,
        &created.server_nonce,
    )
    .unwrap();
    assert_eq!(
        again.status(transfer(&again, stale)).await,
        StatusCode::BadApplicationSignatureInvalid
    );
    assert_eq!(
        again.status(transfer(&again, signature.clone())).await,
        StatusCode::Good
    );
    assert_eq!(again.read_status(&token).await, StatusCode::Good);
    assert_eq!(
        chan.read_status(&token).await,
        StatusCode::BadSecureChannelIdInvalid
    );
    let other = gw.client("other");
    let other_cert = other.certificate_store().read().read_own_cert().unwrap();
    gw.store
        .trust_add("test", &other_cert.to_der().unwrap(), CertKind::Trusted)
        .await
        .unwrap();
    let foreign = Chan::open(&other, endpoint).await.unwrap();
    assert_eq!(
        foreign.status(transfer(&foreign, signature)).await,
        StatusCode::BadSecureChannelIdInvalid,
        "session taken over by another certificate"
    );
    assert_eq!(again.read_status(&token).await, StatusCode::Good);

    chan.close().await;
    again.close().await;
    foreign.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn username_over_sign_and_encrypt() {
    let gw = TestGateway::start("").await;
    gw.store
        .add_user(
            "test",
            "bob",
            "a long enough password",
            uagate_store::Role::Viewer,
        )
        .await
        .unwrap();
    let client = gw.client("secure");
    let own = client.certificate_store().read().read_own_cert().unwrap();
    gw.store
        .trust_add("test", &own.to_der().unwrap(), CertKind::Trusted)
        .await
        .unwrap();
    for policy in [
        SecurityPolicy::Basic256Sha256,
        SecurityPolicy::Aes128Sha256RsaOaep,
        SecurityPolicy::Aes256Sha256RsaPss,
    ] {
        for mode in [
            MessageSecurityMode::Sign,
            MessageSecurityMode::SignAndEncrypt,
        ] {
            let chan = Chan::open(&client, gw.endpoint(policy, mode))
                .await
                .unwrap_or_else(|e| panic!("{policy:?}/{mode:?}: {e}"));
            let token = chan
                .session(IdentityToken::new_user_name(
                    "bob",
                    "a long enough password",
                ))
                .await;
            assert_eq!(chan.read_status(&token).await, StatusCode::Good);
            chan.close().await;
        }
    }
    gw.stop().await;
}
