//! Session services over real sockets: limits, timeouts, close, transfer,
//! activation rules and user identity tokens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{bounded, TestGateway};
use opcua_client::IdentityToken;
use opcua_core::ResponseMessage;
use opcua_crypto::{SecurityPolicy, X509Data, X509};
use opcua_types::{
    ActivateSessionRequest, AnonymousIdentityToken, CloseSessionRequest, ExtensionObject,
    MessageSecurityMode, SignatureData, StatusCode,
};
use uagate_store::{CertKind, Role};

fn status_of(r: Result<impl Sized, opcua_types::Error>) -> StatusCode {
    match r {
        Ok(_) => StatusCode::Good,
        Err(e) => e.status(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn third_session_is_refused_when_max_is_two_activated() {
    let gw = TestGateway::start("[server]\nmax_session_count = 2\n").await;
    let chan = gw
        .chan("c", SecurityPolicy::None, MessageSecurityMode::None)
        .await;
    for _ in 0..2 {
        let created = chan.create_session(60_000.0).await.expect("session");
        chan.activate(&created.authentication_token, IdentityToken::Anonymous)
            .await
            .unwrap();
    }
    let third = chan.create_session(60_000.0).await;
    assert_eq!(status_of(third), StatusCode::BadTooManySessions);
    assert_eq!(gw.session_count(), 2);
    assert_eq!(gw.engine().sessions_evicted(), 0);
    chan.close().await;
    gw.stop().await;
}

/// One peer fills the session table with sessions it never activates, one
/// connection each, and keeps doing so: a newcomer still gets a session
/// (the oldest unactivated one makes room), and once activated that
/// session is never the one evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unactivated_sessions_locks_nobody_out() {
    let gw = TestGateway::start("[server]\nmax_session_count = 10\nmax_channel_count = 40\n").await;
    let mut flood = Vec::new();
    let mut flood_tokens = Vec::new();
    for i in 0..15 {
        let c = gw
            .chan(
                &format!("flood{i}"),
                SecurityPolicy::None,
                MessageSecurityMode::None,
            )
            .await;
        let created = c.create_session(60_000.0).await.expect("flood session");
        flood_tokens.push(created.authentication_token);
        flood.push(c);
    }
    assert_eq!(gw.session_count(), 10);
    assert_eq!(gw.engine().sessions_evicted(), 5);
    // The first flood sessions were evicted: their tokens are gone.
    let evicted = flood[0]
        .activate(&flood_tokens[0], IdentityToken::Anonymous)
        .await;
    assert_eq!(status_of(evicted), StatusCode::BadSessionIdInvalid);

    let (newcomer, token) = gw.anon_session("newcomer").await;
    assert_eq!(newcomer.read_status(&token).await, StatusCode::Good);
    // The flood goes on; the activated newcomer stays.
    for (i, c) in flood.iter().enumerate() {
        for _ in 0..2 {
            c.create_session(60_000.0)
                .await
                .unwrap_or_else(|e| panic!("flood {i} refused: {e:?}"));
        }
    }
    assert_eq!(newcomer.read_status(&token).await, StatusCode::Good);
    assert_eq!(gw.session_count(), 10);
    assert_eq!(gw.engine().sessions_evicted(), 5 + 1 + 30);
    newcomer.close().await;
    for c in flood {
        c.close().await;
    }
    gw.stop().await;
}

/// A session that is never activated expires after the activation bound
/// (10 s), not after its revised timeout (an hour here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unactivated_session_expires_after_ten_seconds() {
    let gw = TestGateway::start("").await;
    let chan = gw
        .chan("c", SecurityPolicy::None, MessageSecurityMode::None)
        .await;
    let created = chan.create_session(3_600_000.0).await.unwrap();
    assert!(created.revised_session_timeout > 10_000.0);
    let t0 = Instant::now();
    while gw.session_count() > 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(14),
            "unactivated session still there after {:?}",
            t0.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(t0.elapsed() >= Duration::from_secs(9), "{:?}", t0.elapsed());
    let late = chan
        .activate(&created.authentication_token, IdentityToken::Anonymous)
        .await;
    assert_eq!(status_of(late), StatusCode::BadSessionIdInvalid);
    chan.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_session_times_out() {
    let gw = TestGateway::start("[server]\nmin_session_timeout = \"1s\"\n").await;
    let chan = gw
        .chan("c", SecurityPolicy::None, MessageSecurityMode::None)
        .await;
    let created = chan.create_session(1000.0).await.unwrap();
    assert_eq!(created.revised_session_timeout, 1000.0);
    let token = created.authentication_token;
    chan.activate(&token, IdentityToken::Anonymous)
        .await
        .unwrap();
    assert_eq!(chan.read_status(&token).await, StatusCode::Good);
    // Activity refreshes the timer: 3 requests 500 ms apart keep it alive.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(chan.read_status(&token).await, StatusCode::Good);
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        chan.read_status(&token).await,
        StatusCode::BadSessionIdInvalid
    );
    assert_eq!(gw.session_count(), 0);
    chan.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_session_token_is_invalid() {
    let gw = TestGateway::start("").await;
    let (chan, token) = gw.anon_session("c").await;
    assert_eq!(chan.read_status(&token).await, StatusCode::Good);
    let status = chan
        .status(CloseSessionRequest {
            request_header: chan.header(&token),
            delete_subscriptions: true,
        })
        .await;
    assert_eq!(status, StatusCode::Good);
    assert_eq!(
        chan.read_status(&token).await,
        StatusCode::BadSessionIdInvalid
    );
    assert_eq!(gw.session_count(), 0);
    chan.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_transfers_to_a_second_channel() {
    let gw = TestGateway::start("").await;
    let (first, token) = gw.anon_session("a").await;
    let second = gw
        .chan("b", SecurityPolicy::None, MessageSecurityMode::None)
        .await;
    // Not usable on the new channel before the transfer.
    assert_eq!(
        second.read_status(&token).await,
        StatusCode::BadSecureChannelIdInvalid
    );
    second
        .activate(&token, IdentityToken::Anonymous)
        .await
        .expect("transfer with the same anonymous identity");
    assert_eq!(second.read_status(&token).await, StatusCode::Good);
    assert_eq!(
        first.read_status(&token).await,
        StatusCode::BadSecureChannelIdInvalid,
        "the old channel lost the session"
    );
    // A transfer after the old channel closed works too (the session outlives it).
    first.close().await;
    let third = gw
        .chan("c", SecurityPolicy::None, MessageSecurityMode::None)
        .await;
    third
        .activate(&token, IdentityToken::Anonymous)
        .await
        .unwrap();
    assert_eq!(third.read_status(&token).await, StatusCode::Good);
    assert_eq!(gw.session_count(), 1);
    second.close().await;
    third.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unactivated_session_refuses_services_and_cannot_be_transferred() {
    let gw = TestGateway::start("").await;
    let chan = gw
        .chan("c", SecurityPolicy::None, MessageSecurityMode::None)
        .await;
    let token = chan
        .create_session(60_000.0)
        .await
        .unwrap()
        .authentication_token;
    assert_eq!(
        chan.read_status(&token).await,
        StatusCode::BadSessionNotActivated
    );
    let other = gw
        .chan("d", SecurityPolicy::None, MessageSecurityMode::None)
        .await;
    assert_eq!(
        status_of(other.activate(&token, IdentityToken::Anonymous).await),
        StatusCode::BadSecureChannelIdInvalid
    );
    chan.activate(&token, IdentityToken::Anonymous)
        .await
        .unwrap();
    assert_eq!(chan.read_status(&token).await, StatusCode::Good);
    // A session of a closed channel that was never activated goes away with it.
    let orphan = other.create_session(60_000.0).await.unwrap();
    assert_eq!(gw.session_count(), 2);
    other.close().await;
    let gone = bounded("orphan dropped", async {
        while gw.session_count() != 1 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    gone.await;
    assert_eq!(
        chan.read_status(&orphan.authentication_token).await,
        StatusCode::BadSessionIdInvalid
    );
    chan.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn username_login_and_throttled_failures() {
    let gw = TestGateway::start("").await;
    gw.store
        .add_user("test", "alice", "correct horse battery", Role::Operator)
        .await
        .unwrap();
    let chan = gw
        .chan("c", SecurityPolicy::None, MessageSecurityMode::None)
        .await;
    let token = chan
        .create_session(60_000.0)
        .await
        .unwrap()
        .authentication_token;
    // The name in any case is the user alice.
    chan.activate(
        &token,
        IdentityToken::new_user_name("ALICE", "correct horse battery"),
    )
    .await
    .expect("right password");
    assert_eq!(chan.read_status(&token).await, StatusCode::Good);

    let token = chan
        .create_session(60_000.0)
        .await
        .unwrap()
        .authentication_token;
    // Another case of the name is no new name to the throttle: five
    // failures of alice from this address lock that pair out (the
    // console's rule, one counter for both doors).
    for name in ["alice", "Alice", "ALICE", "aLiCe", "alicE"] {
        let r = chan
            .activate(
                &token,
                IdentityToken::new_user_name(name, "wrong password!"),
            )
            .await;
        assert_eq!(status_of(r), StatusCode::BadUserAccessDenied);
    }
    // Now even the right password is refused from here, without a check.
    let r = chan
        .activate(
            &token,
            IdentityToken::new_user_name("alice", "correct horse battery"),
        )
        .await;
    assert_eq!(status_of(r), StatusCode::BadUserAccessDenied);
    // The lockout is the engine's one throttle, which the console shares
    // (a console login of alice from this address gets 429).
    let peer: std::net::IpAddr = [127, 0, 0, 1].into();
    let throttle = gw.engine().login_throttle();
    assert!(
        throttle.check("alice", Some(peer), Instant::now()).is_err(),
        "the OPC UA failures did not lock alice out in the shared throttle"
    );
    assert!(throttle
        .check("alice", Some([127, 0, 0, 2].into()), Instant::now())
        .is_ok());
    // An unknown user is denied the same way.
    let r = chan
        .activate(
            &token,
            IdentityToken::new_user_name("mallory", "whatever123"),
        )
        .await;
    assert_eq!(status_of(r), StatusCode::BadUserAccessDenied);
    assert_eq!(
        chan.read_status(&token).await,
        StatusCode::BadSessionNotActivated
    );
    chan.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_refused_when_not_offered() {
    let gw = TestGateway::start(
        "[[endpoints]]\nsecurity_policy = \"None\"\nsecurity_mode = \"none\"\nuser_tokens = [\"username\"]\n",
    )
    .await;
    let chan = gw
        .chan("c", SecurityPolicy::None, MessageSecurityMode::None)
        .await;
    let token = chan
        .create_session(60_000.0)
        .await
        .unwrap()
        .authentication_token;
    // async-opcua refuses to build an anonymous token the endpoint does not
    // list, so the request is made by hand.
    for identity in [
        ExtensionObject::from_message(AnonymousIdentityToken {
            policy_id: "anonymous".into(),
        }),
        ExtensionObject::null(),
    ] {
        let resp = chan
            .send(ActivateSessionRequest {
                request_header: chan.header(&token),
                client_signature: SignatureData::null(),
                client_software_certificates: None,
                locale_ids: None,
                user_identity_token: identity,
                user_token_signature: SignatureData::null(),
            })
            .await
            .unwrap();
        assert!(matches!(resp, ResponseMessage::ServiceFault(_)));
        assert_eq!(
            resp.response_header().service_result,
            StatusCode::BadIdentityTokenInvalid
        );
    }
    assert_eq!(
        chan.read_status(&token).await,
        StatusCode::BadSessionNotActivated
    );
    chan.close().await;
    gw.stop().await;
}

/// A None endpoint offering anonymous and X509 user tokens.
const X509_ENDPOINT: &str = "[[endpoints]]\nsecurity_policy = \"None\"\nsecurity_mode = \"none\"\nuser_tokens = [\"anonymous\", \"x509\"]\n";

fn user_cert(name: &str) -> (X509, opcua_crypto::PrivateKey) {
    X509::cert_and_pkey(&X509Data {
        key_size: 2048,
        common_name: name.into(),
        organization: "uagate tests".into(),
        organizational_unit: "users".into(),
        country: "DE".into(),
        state: "-".into(),
        alt_host_names: vec![format!("urn:uagate:test:user:{name}")].into(),
        certificate_duration_days: 30,
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x509_user_token_needs_a_trusted_certificate() {
    let gw = TestGateway::start(X509_ENDPOINT).await;
    let (cert, key) = user_cert("carol");
    let chan = gw
        .chan("c", SecurityPolicy::None, MessageSecurityMode::None)
        .await;
    let token = chan
        .create_session(60_000.0)
        .await
        .unwrap()
        .authentication_token;
    let r = chan
        .activate(&token, IdentityToken::new_x509(cert.clone(), key.clone()))
        .await;
    assert_eq!(status_of(r), StatusCode::BadIdentityTokenRejected);
    let rejected = gw.store.certs(CertKind::Rejected).await.unwrap();
    let thumbprint = cert.thumbprint().as_hex_string().to_lowercase();
    assert!(
        rejected.iter().any(|c| c.thumbprint == thumbprint),
        "untrusted user cert recorded as rejected"
    );

    gw.store
        .trust_add("test", &cert.to_der().unwrap(), CertKind::Trusted)
        .await
        .unwrap();
    let trusted = cert.clone();
    chan.activate(&token, IdentityToken::new_x509(cert, key))
        .await
        .expect("trusted user certificate accepted");
    assert_eq!(chan.read_status(&token).await, StatusCode::Good);

    // The trusted certificate with a signature from another key is refused.
    let (_, other_key) = user_cert("mallory");
    let token = chan
        .create_session(60_000.0)
        .await
        .unwrap()
        .authentication_token;
    let r = chan
        .activate(&token, IdentityToken::new_x509(trusted, other_key))
        .await;
    assert_eq!(status_of(r), StatusCode::BadUserSignatureInvalid);
    chan.close().await;
    gw.stop().await;
}

async fn current_session_count(chan: &common::Chan, token: &opcua_types::NodeId) -> u32 {
    let resp = chan
        .read(
            token,
            vec![opcua_types::ReadValueId::from(opcua_types::NodeId::new(
                0, 2277u32,
            ))],
        )
        .await
        .unwrap();
    let ResponseMessage::Read(resp) = resp else {
        panic!("unexpected response {}", resp.type_name());
    };
    match resp.results.unwrap()[0].value {
        Some(opcua_types::Variant::UInt32(n)) => n,
        ref other => panic!("CurrentSessionCount is {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn current_session_count_follows_create_close_and_expiry() {
    let gw = TestGateway::start("[server]\nmin_session_timeout = \"1s\"\n").await;
    let (chan, token) = gw.anon_session("c").await;
    assert_eq!(current_session_count(&chan, &token).await, 1);
    let short = chan.create_session(1000.0).await.unwrap();
    let other = chan.create_session(60_000.0).await.unwrap();
    assert_eq!(current_session_count(&chan, &token).await, 3);
    let status = chan
        .status(CloseSessionRequest {
            request_header: chan.header(&other.authentication_token),
            delete_subscriptions: true,
        })
        .await;
    assert_eq!(status, StatusCode::Good);
    assert_eq!(current_session_count(&chan, &token).await, 2);
    // The short one expires (the long one is kept alive by the reads).
    let _ = short;
    bounded("expiry", async {
        while current_session_count(&chan, &token).await != 1 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert_eq!(gw.session_count(), 1);
    chan.close().await;
    gw.stop().await;
}

/// A requested session timeout that is no duration (NaN, infinite, beyond
/// what a `Duration` holds, negative) is revised to the nearest limit. Such
/// a request once panicked the task serving it (found by the
/// `service_request` fuzzer; its input is in `fuzz/regressions/`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requested_timeout_that_is_no_duration_is_revised_to_a_limit() {
    let gw = TestGateway::start(
        "[server]\nmin_session_timeout = \"5s\"\nmax_session_timeout = \"1h\"\n",
    )
    .await;
    let chan = gw
        .chan("c", SecurityPolicy::None, MessageSecurityMode::None)
        .await;
    for (requested, revised) in [
        (1e300, 3_600_000.0),
        (f64::MAX, 3_600_000.0),
        (f64::INFINITY, 3_600_000.0),
        (f64::NAN, 5_000.0),
        (-1.0, 5_000.0),
        (f64::NEG_INFINITY, 5_000.0),
        (60_000.0, 60_000.0),
    ] {
        let created = chan
            .create_session(requested)
            .await
            .unwrap_or_else(|e| panic!("CreateSession with {requested}: {e}"));
        assert_eq!(created.revised_session_timeout, revised, "{requested}");
    }
    let (after, token) = gw.anon_session("after").await;
    let now = after.read_value(&token, common::current_time()).await;
    assert!(now.status.is_none_or(|s| s.is_good()), "{now:?}");
    after.close().await;
    chan.close().await;
    gw.stop().await;
}

/// Polls `check` every 100 ms until it returns `want` (at most 10 s: the
/// re-check follows the change log within a second); returns the last
/// answer.
async fn eventually<F, Fut>(want: StatusCode, mut check: F) -> StatusCode
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = StatusCode>,
{
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let got = check().await;
        if got == want || Instant::now() > until {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Writes the demo setpoint; returns the operation status.
async fn write(chan: &common::Chan, token: &opcua_types::NodeId) -> StatusCode {
    let setpoint = opcua_types::NodeId::new(2, uagate_space::DEMO_SETPOINT);
    chan.write_value(token, setpoint, opcua_types::Variant::Double(1.5))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_sessions_follow_their_users_role_password_and_removal() {
    let gw = TestGateway::start("").await;
    gw.add_user("otto", "otto's password 1", Role::Operator)
        .await;
    gw.add_user("anna", "anna's password 1", Role::Operator)
        .await;
    let (otto_chan, otto) = gw.user_session("o", "otto", "otto's password 1").await;
    let (anna_chan, anna) = gw.user_session("a", "anna", "anna's password 1").await;
    assert_eq!(write(&otto_chan, &otto).await, StatusCode::Good);

    // A demoted operator's session goes on, without the right to write.
    gw.store
        .set_role("test", "otto", Role::Viewer)
        .await
        .unwrap();
    assert_eq!(
        eventually(StatusCode::BadUserAccessDenied, || write(&otto_chan, &otto)).await,
        StatusCode::BadUserAccessDenied,
        "the session kept the role it logged in with"
    );
    assert_eq!(otto_chan.read_status(&otto).await, StatusCode::Good);
    gw.store
        .set_role("test", "otto", Role::Operator)
        .await
        .unwrap();
    assert_eq!(
        eventually(StatusCode::Good, || write(&otto_chan, &otto)).await,
        StatusCode::Good
    );

    // A new password ends the sessions begun with the old one.
    gw.store
        .set_password("test", "otto", "otto's password 2")
        .await
        .unwrap();
    assert_eq!(
        eventually(StatusCode::BadSessionIdInvalid, || otto_chan
            .read_status(&otto))
        .await,
        StatusCode::BadSessionIdInvalid,
        "a session begun with the old password goes on"
    );
    assert_eq!(
        anna_chan.read_status(&anna).await,
        StatusCode::Good,
        "another user's session is untouched"
    );
    // The new password logs in.
    let token = otto_chan
        .session(IdentityToken::new_user_name("otto", "otto's password 2"))
        .await;
    assert_eq!(write(&otto_chan, &token).await, StatusCode::Good);

    // A removed user's session ends.
    gw.store.delete_user("test", "anna").await.unwrap();
    assert_eq!(
        eventually(StatusCode::BadSessionIdInvalid, || anna_chan
            .read_status(&anna))
        .await,
        StatusCode::BadSessionIdInvalid,
        "a removed user's session goes on"
    );
    assert_eq!(otto_chan.read_status(&token).await, StatusCode::Good);
    otto_chan.close().await;
    anna_chan.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_whose_certificate_leaves_the_trust_list_is_closed() {
    let gw = TestGateway::start("").await;
    let chan = gw.secure_chan("c").await;
    let token = chan.session(IdentityToken::Anonymous).await;
    assert_eq!(chan.read_status(&token).await, StatusCode::Good);
    let other = gw.secure_chan("d").await;
    let other_token = other.session(IdentityToken::Anonymous).await;
    let own = gw
        .client("c")
        .certificate_store()
        .read()
        .read_own_cert()
        .unwrap();
    gw.store
        .trust_remove("test", &own.thumbprint().as_hex_string())
        .await
        .unwrap();
    assert_eq!(
        chan.closed_by_server(Duration::from_secs(10)).await,
        Some(StatusCode::BadCertificateUntrusted),
        "the channel of a certificate removed from the trust list stays open"
    );
    assert_eq!(
        other.read_status(&other_token).await,
        StatusCode::Good,
        "a channel of another certificate is untouched"
    );
    assert_eq!(gw.session_count(), 1, "the closed channel's session ended");
    // And it cannot come back.
    let again = common::Chan::open(
        &gw.client("c"),
        gw.endpoint(
            SecurityPolicy::Basic256Sha256,
            MessageSecurityMode::SignAndEncrypt,
        ),
    )
    .await;
    assert!(again.is_err(), "a removed certificate opened a channel");
    other.close().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_user_certificate_leaves_the_trust_list_ends() {
    let gw = TestGateway::start(X509_ENDPOINT).await;
    let (cert, key) = user_cert("carol");
    gw.store
        .trust_add("test", &cert.to_der().unwrap(), CertKind::Trusted)
        .await
        .unwrap();
    let chan = gw
        .chan("c", SecurityPolicy::None, MessageSecurityMode::None)
        .await;
    let token = chan
        .session(IdentityToken::new_x509(cert.clone(), key))
        .await;
    assert_eq!(chan.read_status(&token).await, StatusCode::Good);
    gw.store
        .trust_remove("test", &cert.thumbprint().as_hex_string())
        .await
        .unwrap();
    assert_eq!(
        eventually(StatusCode::BadSessionIdInvalid, || chan.read_status(&token)).await,
        StatusCode::BadSessionIdInvalid,
        "a session of a removed user certificate goes on"
    );
    chan.close().await;
    gw.stop().await;
}

/// A client's RSA public key, taken from its own certificate, for a test
/// CA (rcgen) to issue it a certificate.
struct RsaPublic(Vec<u8>);

impl rcgen::PublicKeyData for RsaPublic {
    fn der_bytes(&self) -> &[u8] {
        &self.0
    }

    fn algorithm(&self) -> &rcgen::SignatureAlgorithm {
        &rcgen::PKCS_RSA_SHA256
    }
}

/// A CRL of `ca` numbered `number`, issued in `year`, revoking `serials`.
fn crl_of(
    ca: &rcgen::Certificate,
    key: &rcgen::KeyPair,
    number: u64,
    year: i32,
    serials: &[u64],
) -> Vec<u8> {
    rcgen::CertificateRevocationListParams {
        this_update: rcgen::date_time_ymd(year, 1, 1),
        next_update: rcgen::date_time_ymd(2040, 1, 1),
        crl_number: rcgen::SerialNumber::from(number),
        issuing_distribution_point: None,
        revoked_certs: serials
            .iter()
            .map(|s| rcgen::RevokedCertParams {
                serial_number: rcgen::SerialNumber::from(*s),
                revocation_time: rcgen::date_time_ymd(year, 1, 1),
                reason_code: Some(rcgen::RevocationReason::KeyCompromise),
                invalidity_date: None,
            })
            .collect(),
        key_identifier_method: rcgen::KeyIdMethod::Sha256,
    }
    .signed_by(ca, key)
    .unwrap()
    .der()
    .to_vec()
}

/// A plant CA's certificate revoked by a new CRL: the secure channel it
/// opened (the CA trusted, its CRL current, the leaf itself never listed)
/// is closed with BadCertificateRevoked, its session ends, and it cannot
/// open another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_whose_certificate_a_crl_revokes_is_closed() {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
        KeyUsagePurpose, SanType, SerialNumber,
    };
    use x509_cert::der::Decode;
    let gw = TestGateway::start("").await;
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "Plant CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = ca_params.self_signed(&ca_key).unwrap();

    // Client "e" keeps its key; the CA issues its certificate (serial 7).
    let own = gw
        .client("e")
        .certificate_store()
        .read()
        .read_own_cert()
        .unwrap()
        .to_der()
        .unwrap();
    let spki = x509_cert::Certificate::from_der(&own)
        .unwrap()
        .tbs_certificate
        .subject_public_key_info;
    let public = RsaPublic(spki.subject_public_key.raw_bytes().to_vec());
    let mut leaf = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    leaf.distinguished_name
        .push(DnType::CommonName, "uagate test e");
    leaf.subject_alt_names
        .push(SanType::URI("urn:uagate:test:e".try_into().unwrap()));
    leaf.serial_number = Some(SerialNumber::from(7u64));
    leaf.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::ContentCommitment,
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::DataEncipherment,
    ];
    leaf.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let leaf = leaf.signed_by(&public, &ca, &ca_key).unwrap();
    let pki = gw.tmp.path().join("clients").join("e");
    std::fs::write(pki.join("own").join("cert.der"), leaf.der()).unwrap();
    gw.store
        .trust_add("test", ca.der(), CertKind::Trusted)
        .await
        .unwrap();
    gw.store
        .add_crl("test", &crl_of(&ca, &ca_key, 1, 2026, &[]))
        .await
        .unwrap();
    let endpoint = gw.endpoint(
        SecurityPolicy::Basic256Sha256,
        MessageSecurityMode::SignAndEncrypt,
    );
    let chan = common::Chan::open(&gw.client("e"), endpoint.clone())
        .await
        .expect("a certificate of a trusted CA with a current CRL opens a channel");
    let token = chan.session(IdentityToken::Anonymous).await;
    assert_eq!(chan.read_status(&token).await, StatusCode::Good);

    // The CA's next CRL revokes it.
    gw.store
        .add_crl("test", &crl_of(&ca, &ca_key, 2, 2026, &[7]))
        .await
        .unwrap();
    assert_eq!(
        chan.closed_by_server(Duration::from_secs(10)).await,
        Some(StatusCode::BadCertificateRevoked),
        "the channel of a revoked certificate stays open"
    );
    assert_eq!(gw.session_count(), 0, "its session ended");
    let again = common::Chan::open(&gw.client("e"), endpoint).await;
    assert!(again.is_err(), "a revoked certificate opened a channel");
    gw.stop().await;
}
