//! Router tests of the console pages and the REST routes added for them,
//! against a real gateway and a real SQLite store: the session cookie,
//! CSRF and same-origin checks, renewal and logout, roles on pages, trusted
//! owners and ingress, certificates, field connections, sessions, secrets
//! kept out of answers, and the OpenAPI document.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use common::{get, json_request, Fixture};
use serde_json::{json, Value};

/// A console session: the cookie header value and the CSRF token.
struct Browser {
    cookie: String,
    csrf: String,
}

fn set_cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(str::to_string)
}

fn form(uri: &str, fields: &[(&str, &str)], b: Option<&Browser>) -> Request<Body> {
    let mut r = Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(b) = b {
        r = r.header(header::COOKIE, &b.cookie);
    }
    r.body(Body::from(serde_urlencoded::to_string(fields).unwrap()))
        .unwrap()
}

fn page(uri: &str, b: &Browser) -> Request<Body> {
    Request::builder()
        .uri(uri)
        .header(header::COOKIE, &b.cookie)
        .body(Body::empty())
        .unwrap()
}

/// Logs in through the login form and reads the CSRF token off a page.
async fn browser(f: &Fixture, role: &str) -> Browser {
    let password = format!("correct horse {role}");
    let (s, _, h) = f
        .call(form(
            "/login",
            &[("username", role), ("password", &password), ("next", "/")],
            None,
        ))
        .await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    let cookie = set_cookie(&h, "uagate_token").expect("session cookie");
    for attr in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attr), "{cookie} lacks {attr}");
    }
    let cookie = cookie.split(';').next().unwrap().to_string();
    let (s, body, _) = f
        .call(
            Request::builder()
                .uri("/")
                .header(header::COOKIE, &cookie)
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let html = body.as_str().unwrap().to_string();
    let csrf = html
        .split("name=\"_csrf\" value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("a CSRF field on the page")
        .to_string();
    Browser { cookie, csrf }
}

#[tokio::test]
async fn pages_need_a_session_and_changes_need_the_csrf_token() {
    let f = Fixture::start().await;
    // No session: pages redirect to the login, htmx gets HX-Redirect.
    let (s, _, h) = f.call(get("/limits?x=1", None)).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    assert_eq!(h[header::LOCATION], "/login?next=%2Flimits%3Fx%3D1");
    let (s, _, h) = f
        .call(
            Request::builder()
                .uri("/partials/dashboard")
                .header("hx-request", "true")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert!(h["hx-redirect"].to_str().unwrap().starts_with("/login"));
    // A wrong password re-renders the form with the reason, no cookie.
    let (s, body, h) = f
        .call(form(
            "/login",
            &[("username", "operator"), ("password", "wrong password!")],
            None,
        ))
        .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert!(body
        .as_str()
        .unwrap()
        .contains("wrong user name or password"));
    assert!(set_cookie(&h, "uagate_token").is_none());
    // After login only local paths are followed.
    let (_, _, h) = f
        .call(form(
            "/login",
            &[
                ("username", "viewer"),
                ("password", "correct horse viewer"),
                ("next", "//evil.example/"),
            ],
            None,
        ))
        .await;
    assert_eq!(h[header::LOCATION], "/");

    let b = browser(&f, "operator").await;
    let set = |csrf: &str| {
        form(
            "/service-level",
            &[
                ("_csrf", csrf),
                ("level", "150"),
                ("expires_min", "5"),
                ("reason", "test"),
            ],
            Some(&b),
        )
    };
    // Without, or with a wrong, token: 403 and nothing changes; the browser
    // gets a page saying so (REST gets the JSON `csrf`, below).
    for bad in ["", "00000000000000000000000000000000"] {
        let (s, body, _) = f.call(set(bad)).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{body}");
        assert!(text_of(&body).contains("it was not saved"), "{body}");
        assert_ne!(f.state.engine.service_level(), 150);
    }
    // From another site: refused even with the right token.
    let mut cross = set(&b.csrf);
    cross
        .headers_mut()
        .insert(header::ORIGIN, "https://evil.example".parse().unwrap());
    cross
        .headers_mut()
        .insert(header::HOST, "gateway.local:8443".parse().unwrap());
    let (s, body, _) = f.call(cross).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert!(
        text_of(&body).contains("came from another web site"),
        "{body}"
    );
    assert_ne!(f.state.engine.service_level(), 150);
    // Same origin with the token: done, and the notice is shown once.
    let mut ok = set(&b.csrf);
    ok.headers_mut().insert(
        header::ORIGIN,
        "https://gateway.local:8443".parse().unwrap(),
    );
    ok.headers_mut()
        .insert(header::HOST, "gateway.local:8443".parse().unwrap());
    let (s, _, h) = f.call(ok).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    assert_eq!(f.state.engine.service_level(), 150);
    let flash = set_cookie(&h, "uagate_flash").unwrap();
    let flash = flash.split(';').next().unwrap();
    let (_, body, _) = f
        .call(
            Request::builder()
                .uri("/service-level")
                .header(header::COOKIE, format!("{}; {flash}", b.cookie))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert!(body.as_str().unwrap().contains("Override set."));
    // The cookie also authenticates REST calls, which then need the header.
    let rest = |csrf: Option<&str>| {
        let mut r = Request::builder()
            .method(Method::PUT)
            .uri("/api/v1/service-level")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::COOKIE, &b.cookie);
        if let Some(c) = csrf {
            r = r.header("x-csrf-token", c);
        }
        r.body(Body::from(json!({"level": null}).to_string()))
            .unwrap()
    };
    let (s, body, _) = f.call(rest(None)).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert_eq!(body["code"], "csrf");
    let (s, body, _) = f.call(rest(Some(&b.csrf))).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(body["service_level_source"], "computed");
    f.stop().await;
}

#[tokio::test]
async fn logout_ends_the_session_and_roles_apply_to_pages() {
    let f = Fixture::start().await;
    let viewer = browser(&f, "viewer").await;
    // A viewer reads the maintenance page but cannot change the state.
    let (s, body, _) = f.call(page("/maintenance", &viewer)).await;
    assert_eq!(s, StatusCode::OK);
    assert!(!body.as_str().unwrap().contains("maintenance-form"));
    let (s, _, _) = f
        .call(form(
            "/maintenance",
            &[
                ("_csrf", &viewer.csrf),
                ("state", "suspended"),
                ("confirm", "yes"),
            ],
            Some(&viewer),
        ))
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert_eq!(
        f.state.engine.server_state(),
        opcua_types::ServerState::Running
    );
    // Admin pages are refused to a viewer, and not in its navigation.
    let (s, _, _) = f.call(page("/users", &viewer)).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (_, body, _) = f.call(page("/", &viewer)).await;
    assert!(!body.as_str().unwrap().contains("href=\"/users\""));

    // An operator's maintenance needs the confirmation step.
    let op = browser(&f, "operator").await;
    let (s, body, _) = f
        .call(form(
            "/maintenance",
            &[
                ("_csrf", &op.csrf),
                ("state", "suspended"),
                ("reason", "pump swap"),
            ],
            Some(&op),
        ))
        .await;
    assert_eq!(s, StatusCode::OK);
    assert!(body.as_str().unwrap().contains("id=\"confirm\""));
    assert_eq!(
        f.state.engine.server_state(),
        opcua_types::ServerState::Running
    );
    let (s, _, _) = f
        .call(form(
            "/maintenance",
            &[
                ("_csrf", &op.csrf),
                ("state", "suspended"),
                ("reason", "pump swap"),
                ("drain", "on"),
                ("confirm", "yes"),
            ],
            Some(&op),
        ))
        .await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    assert_eq!(
        f.state.engine.server_state(),
        opcua_types::ServerState::Suspended
    );
    assert!(f.state.engine.draining());

    // Logout: the cookie is cleared and the old one no longer works.
    let (s, _, h) = f
        .call(form("/logout", &[("_csrf", &op.csrf)], Some(&op)))
        .await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    assert!(set_cookie(&h, "uagate_token")
        .unwrap()
        .contains("Max-Age=0"));
    let (s, _, h) = f.call(page("/", &op)).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    assert!(h[header::LOCATION].to_str().unwrap().starts_with("/login"));
    f.stop().await;
}

#[tokio::test]
async fn an_active_session_is_renewed_but_a_refresh_loop_does_not_keep_it() {
    let f = Fixture::start().await;
    // A token with one minute left, signed with the console's own key.
    let secret = std::fs::read(f.data_dir().join("console").join("jwt.key")).unwrap();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let cred = f
        .state
        .store
        .user_standing("viewer")
        .await
        .unwrap()
        .unwrap()
        .stamp;
    let claims = json!({"sub": "viewer", "role": "viewer", "cred": cred, "sid": "0123abcd",
                        "auth": now - 840, "iat": now - 840, "exp": now + 60});
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(&secret),
    )
    .unwrap();
    let b = Browser {
        cookie: format!("uagate_token={token}"),
        csrf: String::new(),
    };
    // A periodic refresh does not renew.
    let mut poll = page("/partials/dashboard", &b);
    poll.headers_mut()
        .insert("x-uagate-poll", "1".parse().unwrap());
    let (s, _, h) = f.call(poll).await;
    assert_eq!(s, StatusCode::OK);
    assert!(set_cookie(&h, "uagate_token").is_none());
    // Opening a page does; the session (and so its CSRF token) stays.
    let (s, _, h) = f.call(page("/limits", &b)).await;
    assert_eq!(s, StatusCode::OK);
    let renewed = set_cookie(&h, "uagate_token").expect("renewed cookie");
    let renewed = renewed
        .split(';')
        .next()
        .unwrap()
        .trim_start_matches("uagate_token=");
    let a = f.state.keys.verify(renewed).unwrap();
    assert_eq!(a.sid, "0123abcd");
    assert!(a.expires >= now + 14 * 60);
    f.stop().await;
}

#[tokio::test]
async fn trusted_owners_and_ingress_are_validated_against_the_plan() {
    let f = Fixture::start_with(true, "[server]\nmax_session_count = 50\n").await;
    let admin = f.token("admin").await;
    let op = f.token("operator").await;
    let owner = json!({"key": "scada", "weight": 4,
                       "reservations": [{"stage": "request_execution", "reserved": 2}]});
    let (s, _, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/owners",
            Some(&op),
            owner.clone(),
        ))
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    // The first owner needs an ingress rule: refused naming it, nothing stored.
    let (s, body, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/owners",
            Some(&admin),
            owner.clone(),
        ))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["field"], "isolation.ingress");
    let (_, owners, _) = f.call(get("/api/v1/owners", Some(&admin))).await;
    assert_eq!(owners, json!([]));
    let mut with_rule = owner.clone();
    with_rule["ingress"] = json!(["10.0.5.0/24"]);
    let (s, body, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/owners",
            Some(&admin),
            with_rule,
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert!(body["live"]
        .as_array()
        .unwrap()
        .iter()
        .chain(body["restart"].as_array().unwrap())
        .any(|v| v == "isolation.mode"));
    let (_, owners, _) = f.call(get("/api/v1/owners", Some(&op))).await;
    assert_eq!(owners[0]["key"], "scada");
    // A bad CIDR names the rule's setting.
    let (s, body, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/ingress",
            Some(&admin),
            json!({"cidr": "10.0.300.0/24", "owner": "scada"}),
        ))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(body["field"]
        .as_str()
        .unwrap()
        .starts_with("isolation.ingress"));
    let (s, _, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/ingress",
            Some(&admin),
            json!({"cidr": "10.0.6.7", "class": "reconnect"}),
        ))
        .await;
    assert_eq!(s, StatusCode::OK);
    let (_, rules, _) = f.call(get("/api/v1/ingress", Some(&op))).await;
    assert_eq!(rules.as_array().unwrap().len(), 2);
    let (s, _, _) = f
        .call(json_request(
            Method::DELETE,
            "/api/v1/ingress/1",
            Some(&admin),
            Value::Null,
        ))
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _, _) = f
        .call(json_request(
            Method::DELETE,
            "/api/v1/ingress/9",
            Some(&admin),
            Value::Null,
        ))
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // Removing the owner removes its rules and returns the profile.
    let (s, body, _) = f
        .call(json_request(
            Method::DELETE,
            "/api/v1/owners/scada",
            Some(&admin),
            Value::Null,
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let (_, config, _) = f.call(get("/api/v1/config", Some(&op))).await;
    assert_eq!(config["isolation"]["mode"], "balanced");
    assert_eq!(config["isolation"]["ingress"], json!([]));
    f.stop().await;
}

fn make_cert(cn: &str) -> Vec<u8> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params.subject_alt_names.push(rcgen::SanType::URI(
        format!("urn:test:{cn}").try_into().unwrap(),
    ));
    let key = rcgen::KeyPair::generate().unwrap();
    params.self_signed(&key).unwrap().der().to_vec()
}

#[tokio::test]
async fn certificates_are_trusted_removed_and_listed() {
    let f = Fixture::start().await;
    let op = f.token("operator").await;
    let viewer = f.token("viewer").await;
    let stranger = make_cert("stranger");
    f.state.store.record_rejected(&stranger).await.unwrap();
    let (s, certs, _) = f.call(get("/api/v1/certificates", Some(&viewer))).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(certs["rejected"].as_array().unwrap().len(), 1);
    assert!(certs["application"]["thumbprint"].is_string());
    let thumb = certs["rejected"][0]["thumbprint"]
        .as_str()
        .unwrap()
        .to_string();
    let trust = format!("/api/v1/certificates/{thumb}/trust");
    let (s, _, _) = f
        .call(json_request(
            Method::POST,
            &trust,
            Some(&viewer),
            Value::Null,
        ))
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, body, _) = f
        .call(json_request(Method::POST, &trust, Some(&op), Value::Null))
        .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(body["kind"], "trusted");
    let (s, _, _) = f
        .call(json_request(Method::POST, &trust, Some(&op), Value::Null))
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(
        f.state.store.cert_status(&stranger).await.unwrap(),
        Some(uagate_store::CertKind::Trusted)
    );
    // Upload (DER body) and garbage.
    let upload = |body: Vec<u8>| {
        Request::builder()
            .method(Method::POST)
            .uri("/api/v1/certificates?kind=issuer")
            .header(header::AUTHORIZATION, format!("Bearer {op}"))
            .body(Body::from(body))
            .unwrap()
    };
    // The issuer list takes CA certificates only: an application
    // certificate there would be no trust at all for its own client.
    let (s, body, _) = f.call(upload(make_cert("app"))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("not a CA certificate")),
        "{body}"
    );
    let ca = {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "Plant CA");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    };
    let (s, body, _) = f.call(upload(ca)).await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    assert_eq!(body["kind"], "issuer");
    let (s, body, _) = f.call(upload(b"not a certificate".to_vec())).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let del = format!("/api/v1/certificates/{thumb}");
    let (s, _, _) = f
        .call(json_request(Method::DELETE, &del, Some(&op), Value::Null))
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _, _) = f
        .call(json_request(Method::DELETE, &del, Some(&op), Value::Null))
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _, _) = f
        .call(
            Request::builder()
                .method(Method::POST)
                .uri("/api/v1/crls")
                .header(header::AUTHORIZATION, format!("Bearer {op}"))
                .body(Body::from("junk"))
                .unwrap(),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    f.stop().await;
}

const FIELD: &str = r#"
[[field_servers]]
name = "plc1"
security_mode = "none"
security_policy = "None"
identity = { kind = "username", username = "op", password = "plc-secret-42" }
reconnect = { initial_delay = "100ms", max_delay = "1h", max_retries = 2 }
[[field_servers.endpoints]]
url = "opc.tcp://127.0.0.1:1"
"#;

/// The recent events of field connection plc1, newest first.
async fn plc1_history(f: &Fixture, token: &str) -> Value {
    f.call(get("/api/v1/fields/plc1/history", Some(token)))
        .await
        .1
}

#[tokio::test]
async fn field_connections_sessions_and_secrets() {
    let f = Fixture::start_with(true, FIELD).await;
    let op = f.token("operator").await;
    let viewer = f.token("viewer").await;
    // The password never appears in an answer.
    let (_, config, _) = f.call(get("/api/v1/config", Some(&viewer))).await;
    assert_eq!(
        config["field_servers"][0]["identity"]["password"],
        "<stored>"
    );
    let (s, fields, _) = f.call(get("/api/v1/fields", Some(&viewer))).await;
    assert_eq!(s, StatusCode::OK);
    assert!(!fields.to_string().contains("plc-secret-42"));
    assert_eq!(fields[0]["config"]["name"], "plc1");
    assert!(fields[0]["status"]["state"].is_string());
    // Nothing waits for a restart yet: no banner.
    let b = browser(&f, "viewer").await;
    let (_, html, _) = f.call(page("/", &b)).await;
    assert!(!html.as_str().unwrap().contains("restart-banner"));
    // Sending the config back keeps the stored password.
    let mut doc = config.clone();
    doc["server"]["max_queue_size"] = json!(500);
    let (s, body) = f.put_config(&f.token("admin").await, doc).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let stored = f
        .state
        .store
        .setting(uagate_server::CONFIG_KEY)
        .await
        .unwrap()
        .unwrap();
    assert!(stored.contains("plc-secret-42"));
    // ... and the audit trail shows it redacted.
    let (_, audit, _) = f
        .call(get(
            "/api/v1/audit?kind=setting.set",
            Some(&f.token("admin").await),
        ))
        .await;
    assert!(!audit.to_string().contains("plc-secret-42"));
    // The unreachable server: failed attempts in the history; a probe says why.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, h, _) = f
            .call(get("/api/v1/fields/plc1/history", Some(&viewer)))
            .await;
        if h.as_array()
            .is_some_and(|a| a.iter().any(|e| e["kind"] == "failed"))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no failed attempt recorded: {h}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (s, probe, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/fields/plc1/test",
            Some(&op),
            Value::Null,
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{probe}");
    assert_eq!(probe[0]["reachable"], false);
    assert!(probe[0]["error"].is_string());
    let (s, _, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/fields/plc1/test",
            Some(&viewer),
            Value::Null,
        ))
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    // One server: no failover, said why.
    let (s, body, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/fields/plc1/failover",
            Some(&op),
            Value::Null,
        ))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (s, _, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/fields/nope/failover",
            Some(&op),
            Value::Null,
        ))
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // Two failed attempts use up the cycle: the connection says it gave up,
    // when it tries next (an hour later), and counts it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, st, _) = f.call(get("/api/v1/status", Some(&viewer))).await;
        if st["fields"][0]["state"] == "gave_up" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not gave_up: {st}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let h = plc1_history(&f, &viewer).await;
    let gave_up: Vec<&Value> = h
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "gave_up")
        .collect();
    assert_eq!(gave_up.len(), 1, "{h}");
    assert!(
        gave_up[0]["detail"]
            .as_str()
            .unwrap()
            .contains("next cycle in 1h"),
        "{h}"
    );
    let (_, metrics, _) = f.call(get("/metrics", Some(&viewer))).await;
    let metrics = metrics
        .as_str()
        .map(str::to_owned)
        .unwrap_or(metrics.to_string());
    assert!(
        metrics.contains("uagate_field_gave_up_total{connection=\"plc1\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("uagate_field_connection_state{connection=\"plc1\",state=\"gave_up\"} 1")
    );
    // The recovery counters are there from the start (a connection that
    // never came up recovered nothing and lost nothing it had).
    for zero in [
        "uagate_field_notification_gaps_total{connection=\"plc1\"} 0",
        "uagate_field_republished_total{connection=\"plc1\"} 0",
        "uagate_field_subscriptions_transferred_total{connection=\"plc1\"} 0",
    ] {
        assert!(metrics.contains(zero), "{zero} missing: {metrics}");
    }
    let (_, page, _) = f.call(get("/partials/fields", Some(&viewer))).await;
    let page = page.as_str().map(str::to_owned).unwrap_or(page.to_string());
    assert!(
        page.contains("gave up") && page.contains("next try"),
        "{page}"
    );
    // Reconnect now: a viewer may not; an operator starts a new cycle at
    // once (new attempts fail again, long before the hour is over).
    for (who, expect) in [
        (&viewer, StatusCode::FORBIDDEN),
        (&op, StatusCode::ACCEPTED),
    ] {
        let (s, body, _) = f
            .call(json_request(
                Method::POST,
                "/api/v1/fields/plc1/reconnect",
                Some(who),
                Value::Null,
            ))
            .await;
        assert_eq!(s, expect, "{body}");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let h = plc1_history(&f, &viewer).await;
        let kinds: Vec<&str> = h
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap())
            .collect();
        // Newest first: gave up again after the requested cycle.
        if kinds.iter().position(|k| *k == "gave_up") < kinds.iter().position(|k| *k == "new_cycle")
            && kinds.iter().filter(|k| **k == "gave_up").count() == 2
        {
            assert!(kinds.contains(&"reconnect_requested"), "{h}");
            assert!(h.to_string().contains("reconnect now (operator)"), "{h}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no new cycle: {h}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (s, _, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/fields/nope/reconnect",
            Some(&op),
            Value::Null,
        ))
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // Add one, and an invalid one naming the setting. Field connections
    // change live even while the restart-only change above
    // (max_queue_size) waits for a restart: the answer says what is live
    // now and what still waits, and so do the status and every page.

    let (s, body, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/fields",
            Some(&op),
            json!({"name": "plc2", "security_mode": "none", "security_policy": "None",
                   "endpoints": [{"url": "opc.tcp://127.0.0.1:2"}]}),
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(body["live"], json!(["field_servers"]), "{body}");
    assert_eq!(body["restart"], json!([]), "{body}");
    assert_eq!(body["waiting"], json!(["server.max_queue_size"]), "{body}");
    assert!(
        f.state.engine.field_status("plc2").is_some(),
        "plc2 not live"
    );
    assert_eq!(
        f.state.engine.applied_config().server.max_queue_size,
        uagate_config::Config::default().server.max_queue_size,
        "the waiting limit came in force without a restart"
    );
    let (_, status, _) = f.call(get("/api/v1/status", Some(&viewer))).await;
    assert_eq!(
        status["waiting_for_restart"],
        json!(["server.max_queue_size"]),
        "{status}"
    );
    let b = browser(&f, "viewer").await;
    let (s, html, _) = f.call(self::page("/fields", &b)).await;
    assert_eq!(s, StatusCode::OK);
    let html = html.as_str().unwrap();
    let banner = html
        .split("id=\"restart-banner\"")
        .nth(1)
        .and_then(|r| r.split("</p>").next())
        .unwrap_or_else(|| panic!("no restart banner on the Fields page: {html}"));
    assert!(
        banner.contains("not in force until the gateway restarts")
            && banner.contains("server.max_queue_size")
            && !banner.contains("field_servers"),
        "{banner}"
    );
    // Tested before saving: its URL does not answer.
    let (s, probes, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/field-test",
            Some(&op),
            json!({"name": "plc3", "security_mode": "none", "security_policy": "None",
                   "endpoints": [{"url": "opc.tcp://127.0.0.1:2"}]}),
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{probes}");
    assert_eq!(probes[0]["url"], "opc.tcp://127.0.0.1:2", "{probes}");
    assert_eq!(probes[0]["reachable"], false, "{probes}");
    // The password placeholder of a connection that was never saved is no
    // password to log in with: refused, naming the setting (it was tried
    // as the password "<stored>", a failed login on the PLC).
    let (s, body, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/field-test",
            Some(&op),
            json!({"name": "plc3", "security_mode": "none", "security_policy": "None",
                   "endpoints": [{"url": "opc.tcp://127.0.0.1:2"}],
                   "identity": {"kind": "username", "username": "u", "password": "<stored>"}}),
        ))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["field"], "identity.password", "{body}");
    let (s, body, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/fields",
            Some(&op),
            json!({"name": "bad name!", "endpoints": [{"url": "opc.tcp://127.0.0.1:2"}]}),
        ))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["field"].as_str().unwrap().starts_with("field_servers"));
    let (s, _, _) = f
        .call(json_request(
            Method::DELETE,
            "/api/v1/fields/plc2",
            Some(&op),
            Value::Null,
        ))
        .await;
    assert_eq!(s, StatusCode::OK);
    // Sessions: none yet; closing an unknown one is a 404, and for operators.
    let (s, sessions, _) = f.call(get("/api/v1/sessions", Some(&viewer))).await;
    assert_eq!((s, sessions), (StatusCode::OK, json!([])));
    let (s, _, _) = f
        .call(json_request(
            Method::DELETE,
            "/api/v1/sessions/ns=1;i=5",
            Some(&viewer),
            Value::Null,
        ))
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _, _) = f
        .call(json_request(
            Method::DELETE,
            "/api/v1/sessions/ns=1;i=5",
            Some(&op),
            Value::Null,
        ))
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    f.stop().await;
}

const FAILING: &str = r#"
[[field_servers]]
name = "refused"
security_mode = "none"
security_policy = "None"
reconnect = { initial_delay = "100ms", max_delay = "200ms", jitter = 0.0 }
[[field_servers.endpoints]]
url = "opc.tcp://127.0.0.1:1"
[[field_servers]]
name = "unknown"
security_mode = "none"
security_policy = "None"
reconnect = { initial_delay = "100ms", max_delay = "200ms", jitter = 0.0 }
[[field_servers.endpoints]]
url = "opc.tcp://plc-7.invalid:4840"
"#;

/// A field connection that keeps failing reads as failing, not as
/// connecting: in words with its count, since when and its last reason,
/// which is said plainly (host name not found, connection refused) with
/// the status code kept for the specialist; the REST status has the same
/// facts besides the fields it had (`state` still says `connecting`).
#[tokio::test]
async fn a_failing_field_connection_says_so_in_plain_words() {
    let f = Fixture::start_with(true, FAILING).await;
    let viewer = f.token("viewer").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        let (_, st, _) = f.call(get("/api/v1/status", Some(&viewer))).await;
        let failing = |n: usize| {
            st["fields"][n]["failing"] == true
                && st["fields"][n]["failed_attempts_since_connected"]
                    .as_u64()
                    .is_some_and(|c| c >= 3)
        };
        if failing(0) && failing(1) {
            break st;
        }
        assert!(std::time::Instant::now() < deadline, "not failing: {st}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let refused = &status["fields"][0];
    assert_eq!(refused["name"], "refused");
    assert_eq!(
        refused["state"], "connecting",
        "the old field keeps its meaning"
    );
    assert_eq!(refused["last_error"], "BadCommunicationError", "{refused}");
    assert_eq!(
        refused["last_error_explained"]["what"], "connection refused by 127.0.0.1:1",
        "{refused}"
    );
    assert_eq!(
        refused["last_error_explained"]["todo"],
        "check that the OPC UA server runs there and listens on port 1"
    );
    let since = refused["failing_since"].as_str().unwrap_or_default();
    assert!(
        chrono::DateTime::parse_from_rfc3339(since).is_ok(),
        "{refused}"
    );
    let unknown = &status["fields"][1];
    assert_eq!(
        unknown["last_error"], "BadTcpEndpointUrlInvalid",
        "{unknown}"
    );
    assert_eq!(
        unknown["last_error_explained"]["what"],
        "the host name plc-7.invalid was not found"
    );
    assert_eq!(
        unknown["last_error_explained"]["todo"],
        "check the address or DNS"
    );
    // The Fields page: "not connected", the count and since when, the
    // reason in words, the code in small print.
    let (_, html, _) = f.call(get("/partials/fields", Some(&viewer))).await;
    let html = text_of(&html);
    let row = |name: &str| {
        html.split(&format!(r#"data-connection="{name}""#))
            .nth(1)
            .and_then(|r| r.split("</tr>").next())
            .unwrap_or_default()
            .to_string()
    };
    let r = row("refused");
    assert!(r.contains(r#"class="state-failing""#), "{r}");
    assert!(r.contains("<strong>not connected</strong>"), "{r}");
    assert!(r.contains(" attempts failed since <time datetime="), "{r}");
    assert!(r.contains("connection refused by 127.0.0.1:1"), "{r}");
    assert!(
        r.contains(r#"<small class="status-code""#) && r.contains(">BadCommunicationError</small>"),
        "{r}"
    );
    let u = row("unknown");
    assert!(
        u.contains("the host name plc-7.invalid was not found"),
        "{u}"
    );
    assert!(u.contains("check the address or DNS"), "{u}");
    assert!(!u.contains(">connecting<"), "{u}");
    // Its recent events say the same.
    let (_, page, _) = f.call(get("/fields", Some(&viewer))).await;
    let history = text_of(&page);
    let history = history
        .split(r#"class="history stack-narrow" data-connection="unknown">"#)
        .nth(1)
        .and_then(|r| r.split("</table>").next())
        .unwrap_or_default();
    assert!(
        history.contains("the host name plc-7.invalid was not found"),
        "{history}"
    );
    // The Dashboard.
    let (_, html, _) = f.call(get("/partials/dashboard", Some(&viewer))).await;
    let html = text_of(&html);
    let r = html
        .split(r#"data-connection="refused""#)
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .unwrap_or_default();
    assert!(r.contains("<strong>not connected</strong> — "), "{r}");
    assert!(
        r.contains(", last: <span class=\"what\">connection refused by 127.0.0.1:1</span>"),
        "{r}"
    );
    // Test connection: the same words.
    let op = f.token("operator").await;
    let (s, probe, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/fields/unknown/test",
            Some(&op),
            Value::Null,
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{probe}");
    assert_eq!(probe[0]["error"], "BadTcpEndpointUrlInvalid", "{probe}");
    assert_eq!(
        probe[0]["error_explained"]["what"], "the host name plc-7.invalid was not found",
        "{probe}"
    );
    f.stop().await;
}

/// A described path with its parameters filled in.
fn concrete(path: &str) -> String {
    path.replace("{key}", "k")
        .replace("{index}", "0")
        .replace("{name}", "n")
        .replace("{thumbprint}", "00")
        .replace("{id}", "i")
}

#[tokio::test]
async fn the_openapi_document_describes_every_api_route() {
    let f = Fixture::start().await;
    let (s, doc, _) = f.call(get("/api/v1/openapi.json", None)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(doc["openapi"], "3.1.0");
    let admin = f.token("admin").await;
    for (method, path) in uagate_web::openapi::described() {
        assert!(
            doc["paths"][path][method].is_object(),
            "{method} {path} missing from the document"
        );
        // Every described operation is routed (not a 404/405 from the router).
        let uri = concrete(path);
        let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let (s, body, _) = f
            .call(json_request(m, &uri, Some(&admin), Value::Null))
            .await;
        assert_ne!(s, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
        if s == StatusCode::NOT_FOUND {
            assert_ne!(
                body["message"], "no such resource",
                "{method} {uri} is not routed"
            );
        }
    }
    f.stop().await;
}

#[tokio::test]
async fn every_api_route_needs_a_token_and_its_role() {
    let f = Fixture::start().await;
    let viewer = f.token("viewer").await;
    let operator = f.token("operator").await;
    let rank = |r: &str| match r {
        "viewer" => 0,
        "operator" => 1,
        "admin" => 2,
        _ => -1,
    };
    let routes = uagate_web::routes::table();
    for r in routes.iter().filter(|r| r.path.starts_with("/api/v1/")) {
        let (m, method, role) = (r.method.clone(), r.method.as_str(), r.access.name());
        let uri = concrete(r.path);
        let (s, body, _) = f
            .call(json_request(m.clone(), &uri, None, Value::Null))
            .await;
        if role == "none" {
            assert_ne!(s, StatusCode::UNAUTHORIZED, "{method} {uri} needs no token");
            continue;
        }
        assert_eq!(
            s,
            StatusCode::UNAUTHORIZED,
            "{method} {uri} without a token: {body}"
        );
        // A lesser role is refused before the body is even looked at.
        for (token, has) in [(&viewer, "viewer"), (&operator, "operator")] {
            if rank(has) >= rank(role) {
                continue;
            }
            let (s, body, _) = f
                .call(json_request(m.clone(), &uri, Some(token), Value::Null))
                .await;
            assert_eq!(
                (s, body["code"].as_str()),
                (StatusCode::FORBIDDEN, Some("forbidden")),
                "{method} {uri} as {has}: {body}"
            );
        }
    }
    f.stop().await;
}

#[tokio::test]
async fn every_page_needs_a_session() {
    let f = Fixture::start().await;
    for uri in [
        "/",
        "/limits",
        "/owners",
        "/service-level",
        "/maintenance",
        "/fields",
        "/certificates",
        "/sessions",
        "/system",
        "/users",
        "/audit",
    ] {
        let (s, _, h) = f.call(get(uri, None)).await;
        assert_eq!(s, StatusCode::SEE_OTHER, "{uri}");
        assert!(h[header::LOCATION]
            .to_str()
            .unwrap()
            .starts_with("/login?next="));
    }
    for uri in [
        "/limits",
        "/limits/preview",
        "/owners",
        "/owners/remove",
        "/ingress",
        "/ingress/remove",
        "/service-level",
        "/service-level/clear",
        "/maintenance",
        "/certificates/trust",
        "/certificates/remove",
        "/users",
        "/users/role",
        "/users/password",
        "/users/remove",
        "/fields",
        "/fields/remove",
        "/fields/test",
        "/fields/check",
        "/fields/failover",
        "/fields/reconnect",
        "/sessions/close",
        "/system/reboot",
    ] {
        let (s, _, h) = f.call(form(uri, &[("x", "1")], None)).await;
        assert_eq!(s, StatusCode::SEE_OTHER, "POST {uri}");
        assert!(
            h[header::LOCATION].to_str().unwrap().starts_with("/login"),
            "POST {uri}"
        );
    }
    f.stop().await;
}

/// Reads a body that is not JSON (HTML, CSV) as text.
fn text_of(body: &Value) -> String {
    body.as_str()
        .map(str::to_string)
        .unwrap_or_else(|| body.to_string())
}

#[tokio::test]
async fn the_audit_log_reads_as_sentences_filters_and_exports_csv() {
    let f = Fixture::start().await;
    let admin = f.token("admin").await;
    let operator = f.token("operator").await;
    // A first configuration, then one setting changed.
    let (_, doc, _) = f.call(get("/api/v1/config", Some(&admin))).await;
    for count in [41, 42] {
        let mut changed = doc.clone();
        changed["server"]["max_session_count"] = json!(count);
        let (s, b) = f.put_config(&admin, changed).await;
        assert_eq!(s, StatusCode::OK, "{b}");
    }
    // Maintenance with a reason and a return time, by the operator.
    let (s, b, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/maintenance",
            Some(&operator),
            json!({"state": "suspended", "reason": "PLC firmware update, line 3",
                   "estimated_return_time": "2030-01-01T14:30:00Z"}),
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let ticks = opcua_types::DateTime::from(
        chrono::DateTime::parse_from_rfc3339("2030-01-01T14:30:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc),
    )
    .checked_ticks();

    let b = browser(&f, "admin").await;
    // The maintenance kind: the sentence, its return time as a time, no ticks.
    let (s, html, _) = f.call(page("/audit?kind=maintenance", &b)).await;
    assert_eq!(s, StatusCode::OK);
    let html = text_of(&html);
    assert!(
        html.contains(
            "operator put the gateway into maintenance (suspended): PLC firmware update, line 3, back at "
        ),
        "{html}"
    );
    assert!(
        html.contains(r#"<time datetime="2030-01-01T14:30:00.000Z" title="2030-01-01 14:30 UTC""#),
        "{html}"
    );
    assert!(
        !html.contains(&ticks.to_string()),
        "ticks on the page: {html}"
    );
    // (The page's content only: the banner above it lists the stored
    // max_session_count, which waits for a restart.)
    let content = html.split("<h1>").nth(1).unwrap_or_default();
    assert!(
        !content.contains("max_session_count"),
        "another kind shown: {html}"
    );
    assert!(html.contains(r#"<option value="maintenance" selected>"#));
    assert!(
        html.contains(r#"href="/audit.csv?kind=maintenance""#),
        "{html}"
    );
    // Entry times: UTC in the title and the text, the machine form in datetime.
    assert!(html.contains("UTC</time>"));

    // The configuration kind: the second change lists only the changed setting.
    let (_, html, _) = f.call(page("/audit?kind=configuration", &b)).await;
    let html = text_of(&html);
    assert!(
        html.contains("admin changed the configuration: server.max_session_count"),
        "{html}"
    );
    // The first change is that change: the configuration the gateway was
    // started with is stored before it, as the gateway's.
    assert!(
        html.contains("The gateway stored the configuration it was started with ("),
        "{html}"
    );
    assert!(!html.contains("admin set up the configuration"), "{html}");
    assert_eq!(
        html.matches("admin changed the configuration: server.max_session_count")
            .count(),
        2,
        "{html}"
    );
    let second = html
        .split("admin changed the configuration")
        .nth(1)
        .and_then(|rest| rest.split("</tr>").next())
        .unwrap();
    assert!(
        second.contains("<code class=\"setting\">server.max_session_count</code>"),
        "{second}"
    );
    assert!(
        second.contains("<span class=\"before\">41</span>"),
        "{second}"
    );
    assert!(
        second.contains("<span class=\"after\">42</span>"),
        "{second}"
    );
    assert_eq!(
        second.matches("<li>").count(),
        1,
        "unchanged settings listed: {second}"
    );
    assert!(!html.contains("operator put the gateway"), "{html}");

    // By user.
    let (_, html, _) = f.call(page("/audit?actor=operator", &b)).await;
    let html = text_of(&html);
    assert!(html.contains("operator put the gateway into maintenance"));
    assert!(!html.contains("admin changed the configuration"), "{html}");

    // By time: a range in the future is empty, the last hour (written in
    // the browser's zone, UTC+2 here) holds them.
    let (_, html, _) = f
        .call(page("/audit?from=2099-01-01T00%3A00&to=&tz=0", &b))
        .await;
    let html = text_of(&html);
    assert!(html.contains("id=\"audit-empty\""), "{html}");
    let local = (chrono::Utc::now() + chrono::Duration::hours(2) - chrono::Duration::hours(1))
        .format("%Y-%m-%dT%H:%M")
        .to_string();
    let (_, html, _) = f
        .call(page(
            &format!(
                "/audit?kind=maintenance&from={}&tz=120",
                local.replace(':', "%3A")
            ),
            &b,
        ))
        .await;
    let html = text_of(&html);
    assert!(
        html.contains("operator put the gateway into maintenance"),
        "{html}"
    );
    let earlier = (chrono::Utc::now() - chrono::Duration::hours(1))
        .format("%Y-%m-%dT%H:%M")
        .to_string();
    let (_, html, _) = f
        .call(page(
            &format!("/audit?to={}&tz=0", earlier.replace(':', "%3A")),
            &b,
        ))
        .await;
    assert!(text_of(&html).contains("id=\"audit-empty\""));
    // A time that is none: the page says which field.
    let (s, html, _) = f.call(page("/audit?from=yesterday", &b)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(text_of(&html).contains("from"), "{html}");

    // CSV: the same filter, as an attachment, properly quoted.
    let (s, csv, h) = f.call(page("/audit.csv?kind=maintenance", &b)).await;
    assert_eq!(s, StatusCode::OK);
    assert!(h[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .starts_with("text/csv"));
    let disposition = h[header::CONTENT_DISPOSITION].to_str().unwrap();
    assert!(disposition.starts_with("attachment"), "{disposition}");
    assert!(disposition.contains(".csv"), "{disposition}");
    let csv = text_of(&csv);
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("time_utc,user,kind,sentence,changes"));
    let row = lines.next().expect("a maintenance row");
    assert!(row.contains(",operator,maintenance,\"operator put the gateway into maintenance (suspended): PLC firmware update, line 3, back at 2030-01-01 14:30 UTC\","), "{row}");
    assert_eq!(lines.next(), None, "only the maintenance entry: {csv}");
    let (_, csv, _) = f.call(page("/audit.csv?kind=configuration", &b)).await;
    let csv = text_of(&csv);
    assert!(csv.contains("server.max_session_count: "), "{csv}");
    assert!(csv.contains("server.max_session_count: 41 -> 42"), "{csv}");

    // Admin only, like /audit.
    let ob = browser(&f, "operator").await;
    let (s, _, _) = f.call(page("/audit.csv", &ob)).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _, h) = f.call(get("/audit.csv", None)).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    assert!(h[header::LOCATION].to_str().unwrap().starts_with("/login"));

    // REST carries the sentence too.
    let (s, entries, _) = f
        .call(get("/api/v1/audit?actor=operator", Some(&admin)))
        .await;
    assert_eq!(s, StatusCode::OK);
    let e = entries
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["group"] == "maintenance")
        .expect("the maintenance entry");
    assert_eq!(
        e["sentence"],
        "operator put the gateway into maintenance (suspended): PLC firmware update, line 3, \
         back at 2030-01-01 14:30 UTC"
    );
    f.stop().await;
}

/// An htmx request, as a page's periodic refresh sends it from `current`
/// (the page the browser shows), with the session cookie `cookie`.
fn htmx(uri: &str, current: Option<&str>, cookie: Option<&str>) -> Request<Body> {
    let mut r = Request::builder()
        .uri(uri)
        .header("hx-request", "true")
        .header("x-uagate-poll", "1");
    if let Some(c) = current {
        r = r.header("hx-current-url", c);
    }
    if let Some(c) = cookie {
        r = r.header(header::COOKIE, c);
    }
    r.body(Body::empty()).unwrap()
}

#[tokio::test]
async fn an_ended_session_takes_the_whole_page_to_the_login_and_back() {
    let f = Fixture::start().await;
    let b = browser(&f, "operator").await;
    // Logged out in another tab: this tab's cookie is no longer valid.
    let (s, _, _) = f
        .call(form("/logout", &[("_csrf", &b.csrf)], Some(&b)))
        .await;
    assert_eq!(s, StatusCode::SEE_OTHER);

    // The Dashboard's refresh: the whole window goes to the login page,
    // which comes back to the Dashboard, not to the fragment.
    let (s, _, h) = f
        .call(htmx(
            "/partials/dashboard",
            Some("https://127.0.0.1:8443/"),
            Some(&b.cookie),
        ))
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(h["hx-redirect"], "/login?next=%2F&expired=1");
    // The Field connections page opened on an entry comes back to it.
    let (_, _, h) = f
        .call(htmx(
            "/partials/fields",
            Some("https://127.0.0.1:8443/fields?edit=line1"),
            Some(&b.cookie),
        ))
        .await;
    assert_eq!(
        h["hx-redirect"],
        "/login?next=%2Ffields%3Fedit%3Dline1&expired=1"
    );
    // Without the page's address (the cookie was cleared by the logout):
    // the fragment's page.
    for (partial, page) in [
        ("/partials/fields", "%2Ffields"),
        ("/partials/usage", "%2Flimits"),
        ("/partials/system", "%2Fsystem"),
        ("/partials/dashboard", "%2F"),
    ] {
        let (_, _, h) = f.call(htmx(partial, None, None)).await;
        assert_eq!(
            h["hx-redirect"],
            format!("/login?next={page}&expired=1").as_str(),
            "{partial}"
        );
    }
    // A form posted after the session ended: back to the page it was on.
    let mut post = form(
        "/service-level",
        &[("_csrf", &b.csrf), ("level", "150"), ("expires_min", "5")],
        None,
    );
    post.headers_mut().insert(
        header::REFERER,
        "https://127.0.0.1:8443/service-level".parse().unwrap(),
    );
    let (s, _, h) = f.call(post).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    assert_eq!(
        h[header::LOCATION],
        "/login?next=%2Fservice-level&expired=1"
    );
    // A first visit is no expired session.
    let (_, _, h) = f.call(get("/fields", None)).await;
    assert_eq!(h[header::LOCATION], "/login?next=%2Ffields");

    // The login page says why, and never leads to a fragment, a REST
    // path or another site.
    let (s, body, _) = f
        .call(get("/login?next=%2Fpartials%2Fdashboard&expired=1", None))
        .await;
    assert_eq!(s, StatusCode::OK);
    let html = text_of(&body);
    assert!(html.contains("Your session expired"), "{html}");
    assert!(html.contains(r#"name="next" value="/""#), "{html}");
    let (_, body, _) = f.call(get("/login?next=%2Ffields", None)).await;
    assert!(!text_of(&body).contains("Your session expired"));
    for (next, to) in [
        ("/partials/fields", "/fields"),
        ("/partials/dashboard", "/"),
        ("/fields/check", "/fields"),
        ("/fields?edit=line1", "/fields?edit=line1"),
        ("/api/v1/status", "/"),
        ("https://evil.example/", "/"),
        ("//evil.example/", "/"),
        ("/nowhere", "/"),
    ] {
        let (s, _, h) = f
            .call(form(
                "/login",
                &[
                    ("username", "viewer"),
                    ("password", "correct horse viewer"),
                    ("next", next),
                ],
                None,
            ))
            .await;
        assert_eq!(s, StatusCode::SEE_OTHER, "{next}");
        assert_eq!(h[header::LOCATION], to, "{next}");
    }
    f.stop().await;
}

#[tokio::test]
async fn a_browser_gets_pages_for_unknown_addresses_and_stale_forms() {
    let f = Fixture::start().await;
    let b = browser(&f, "operator").await;
    // An unknown address: a page in the console's layout with the way on.
    let (s, body, h) = f.call(page("/nonexistent", &b)).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(h[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let html = text_of(&body);
    assert!(html.contains("Page not found"), "{html}");
    assert!(html.contains(r#"id="way-on" href="/">Back to the Dashboard"#));
    assert!(html.contains(r#"href="/fields""#), "the navigation: {html}");
    assert!(!html.contains("not_found"));
    // Without a session: the small page, still no JSON.
    let (s, body, _) = f.call(get("/nonexistent", None)).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(text_of(&body).contains("Page not found"));
    // REST clients keep JSON.
    let (s, body, _) = f.call(get("/api/v1/nonexistent", None)).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(body["code"], "not_found");

    // A form opened before the user logged in again (in another tab):
    // not saved, said in words, with the way back to its page.
    let again = browser(&f, "operator").await;
    let mut stale = form(
        "/service-level",
        &[
            ("_csrf", &b.csrf),
            ("level", "150"),
            ("expires_min", "5"),
            ("reason", "test"),
        ],
        Some(&again),
    );
    stale.headers_mut().insert(
        header::REFERER,
        "https://127.0.0.1:8443/service-level".parse().unwrap(),
    );
    let (s, body, _) = f.call(stale).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let html = text_of(&body);
    assert!(
        html.contains("This form was opened before you last logged in, so it was not saved."),
        "{html}"
    );
    assert!(html.contains(r#"id="way-on" href="/service-level">Back to ServiceLevel"#));
    assert!(html.contains("<nav>"), "in the console's layout: {html}");
    assert_ne!(f.state.engine.service_level(), 150);
    f.stop().await;
}

/// The error a page shows above its content.
fn error_of(html: &str) -> String {
    html.split(r#"id="error">"#)
        .nth(1)
        .and_then(|r| r.split("</p>").next())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn the_service_level_override_speaks_minutes_and_shows_when_it_ends() {
    let f = Fixture::start().await;
    let b = browser(&f, "operator").await;
    let set = |level: &str, minutes: &str| {
        form(
            "/service-level",
            &[
                ("_csrf", &b.csrf),
                ("level", level),
                ("expires_min", minutes),
                ("reason", "pump test"),
            ],
            Some(&b),
        )
    };
    // The field is in minutes: so is its error, which names the field.
    for minutes in ["0", "99999999", "20000"] {
        let (s, body, _) = f.call(set("42", minutes)).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{minutes}");
        let html = text_of(&body);
        assert!(
            html.contains("Expires after: between 1 and 10080 minutes (7 days)"),
            "{minutes}: {html}"
        );
        let error = error_of(&html);
        assert!(!error.contains("seconds"), "{minutes}: {error}");
        assert!(!error.contains("expires_min"), "{minutes}: {error}");
    }
    let (s, body, _) = f.call(set("300", "5")).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    let html = text_of(&body);
    assert!(
        html.contains("Fixed ServiceLevel: a whole number from 0 to 255"),
        "{html}"
    );
    assert!(!error_of(&html).contains("`level`"), "{html}");

    // An override in force says who set it and until when.
    let asked = SystemTime::now();
    let (s, _, _) = f.call(set("42", "30")).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    let (_, body, _) = f.call(page("/service-level", &b)).await;
    let html = text_of(&body);
    let until = html
        .split(r#"id="override-until""#)
        .nth(1)
        .and_then(|r| r.split(r#"datetime=""#).nth(1))
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("no expiry shown: {html}"));
    let until = chrono::DateTime::parse_from_rfc3339(until).unwrap();
    let expected = chrono::DateTime::<chrono::Utc>::from(asked) + chrono::Duration::minutes(30);
    assert!(
        (until.timestamp() - expected.timestamp()).abs() <= 5,
        "{until} vs {expected}"
    );
    assert!(html.contains("Set by operator"), "{html}");
    // REST says it too.
    let token = f.token("viewer").await;
    let (_, status, _) = f.call(get("/api/v1/status", Some(&token))).await;
    assert_eq!(status["service_level_source"], "override");
    assert_eq!(status["service_level_override_by"], "operator");
    let rest_until = chrono::DateTime::parse_from_rfc3339(
        status["service_level_override_until"].as_str().unwrap(),
    )
    .unwrap();
    assert_eq!(rest_until, until);
    // Cleared: nothing about an expiry any more.
    let (s, _, _) = f
        .call(form(
            "/service-level/clear",
            &[("_csrf", &b.csrf)],
            Some(&b),
        ))
        .await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    let (_, body, _) = f.call(page("/service-level", &b)).await;
    assert!(!text_of(&body).contains("override-until"));
    let (_, status, _) = f.call(get("/api/v1/status", Some(&token))).await;
    assert!(status["service_level_override_until"].is_null());
    f.stop().await;
}

#[tokio::test]
async fn maintenance_shows_the_return_time_as_entered_and_refuses_one_past() {
    let f = Fixture::start().await;
    let b = browser(&f, "operator").await;
    let ask = |local: &str, offset: &str| {
        form(
            "/maintenance",
            &[
                ("_csrf", &b.csrf),
                ("state", "suspended"),
                ("return_local", local),
                ("tz_offset", offset),
                ("reason", "pump swap"),
            ],
            Some(&b),
        )
    };
    // Berlin in winter (getTimezoneOffset -60): 15:30 there is 14:30 UTC;
    // the confirmation gives the time for the browser to show in its zone,
    // not the raw UTC string.
    let (s, body, _) = f.call(ask("2030-12-07T15:30", "-60")).await;
    assert_eq!(s, StatusCode::OK);
    let html = text_of(&body);
    let summary = html
        .split(r#"id="confirm-summary""#)
        .nth(1)
        .and_then(|r| r.split("</p>").next())
        .unwrap_or_else(|| panic!("no confirmation: {html}"));
    assert!(
        summary.contains(r#"back by <time datetime="2030-12-07T14:30:00Z" data-precision="minute">2030-12-07 14:30 UTC</time>"#),
        "{summary}"
    );
    // A return time already past: refused next to its field, the form keeps
    // what was typed, nothing asked to confirm.
    let (s, body, _) = f.call(ask("2020-01-01T10:00", "0")).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    let html = text_of(&body);
    assert!(!html.contains(r#"id="confirm""#), "{html}");
    let field = html
        .split(r#"id="maintenance-return""#)
        .nth(1)
        .and_then(|r| r.split("</label>").next())
        .unwrap_or_else(|| panic!("no return field: {html}"));
    assert!(field.contains(r#"value="2020-01-01T10:00""#), "{field}");
    assert!(
        field.contains(r#"class="field-error""#) && field.contains("is already past"),
        "{field}"
    );
    assert!(html.contains(r#"value="pump swap""#), "{html}");
    assert_eq!(
        f.state.engine.server_state(),
        opcua_types::ServerState::Running
    );
    // REST refuses it too, naming the field.
    let token = f.token("operator").await;
    let (s, body, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/maintenance",
            Some(&token),
            json!({"state": "suspended", "estimated_return_time": "2020-01-01T10:00:00Z"}),
        ))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["field"], "estimated_return_time");
    assert_eq!(
        f.state.engine.server_state(),
        opcua_types::ServerState::Running
    );
    f.stop().await;
}

/// The Limits form's fields for `extra` on the default profile.
fn limits_form<'a>(b: &'a Browser, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut fields = vec![
        ("_csrf", b.csrf.as_str()),
        ("mode", "balanced"),
        ("default_weight", "1"),
        ("max_tracked_owners", "4096"),
    ];
    fields.extend_from_slice(extra);
    fields
}

/// A refused limit is shown next to its input, which is marked invalid and
/// keeps what was typed, besides the plan's summary; also for an error
/// that names a stage override by its position in the document
/// (`isolation.stages[0].capacity`).
#[tokio::test]
async fn a_refused_limit_is_shown_at_its_input_and_keeps_what_was_typed() {
    let f = Fixture::start().await;
    let b = browser(&f, "admin").await;
    let typed = limits_form(&b, &[("connection.capacity", "110")]);
    // The preview htmx asks for as the form changes names the input.
    let mut r = form("/limits/preview", &typed, Some(&b));
    r.headers_mut()
        .insert("hx-request", "true".parse().unwrap());
    let (s, body, _) = f.call(r).await;
    assert_eq!(s, StatusCode::OK);
    let html = text_of(&body);
    assert!(
        html.contains(r#"data-input="connection.capacity""#),
        "{html}"
    );
    assert!(
        html.contains("Connection Capacity can only be lowered: enter 1 to 103"),
        "{html}"
    );
    assert!(!html.contains("isolation.stages"), "{html}");
    // Applied anyway (or without JavaScript): the page again with the
    // error at the input, in the plan's summary and at the top.
    let (s, body, _) = f.call(form("/limits", &typed, Some(&b))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    let html = text_of(&body);
    let cell = html
        .split(r#"name="connection.capacity""#)
        .nth(1)
        .and_then(|r| r.split("</td>").next())
        .unwrap_or_else(|| panic!("no Connection capacity input: {html}"));
    assert!(cell.contains(r#"value="110""#), "{cell}");
    assert!(cell.contains(r#"aria-invalid="true""#), "{cell}");
    assert!(
        cell.contains(r#"<span class="field-error plan" role="alert">"#)
            && cell.contains("Connection Capacity can only be lowered: enter 1 to 103"),
        "{cell}"
    );
    assert_eq!(html.matches(r#"aria-invalid="true""#).count(), 1, "{html}");
    assert!(html.contains(r#"id="plan-error""#), "{html}");
    assert!(error_of(&html).contains("Connection Capacity can only be lowered: enter 1 to 103"));
    assert!(!error_of(&html).contains("isolation.stages"));
    // REST keeps the plan's message naming the setting.
    let admin = f.token("admin").await;
    let (_, mut doc, _) = f.call(get("/api/v1/config", Some(&admin))).await;
    doc["isolation"]["stages"] = json!([{"stage": "connection", "capacity": 110}]);
    let (s, body) = f.put_config(&admin, doc).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["field"], "isolation.stages[0].capacity", "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("can only lower the Connection total"),
        "{body}"
    );
    f.stop().await;
}

/// On the default limits (100 sessions, 103 connections) the first trusted
/// owner's connection reserve leaves too few connections: the Owners page
/// says so in plain words with the numbers that fit, REST keeps naming the
/// setting, and Max connections raised on the Limits page (a restart-only
/// setting, and the page says so) makes room.
#[tokio::test]
async fn an_owner_without_room_is_explained_and_the_limits_page_makes_room() {
    let f = Fixture::start().await;
    let b = browser(&f, "admin").await;
    let owner = [
        ("_csrf", b.csrf.as_str()),
        ("key", "scada"),
        ("weight", "5"),
        ("reservations", "request_execution 4"),
        ("ingress", "10.0.5.0/24"),
    ];
    let (s, body, _) = f.call(form("/owners", &owner, Some(&b))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    let error = error_of(&text_of(&body));
    for words in [
        "The 1 connection scada is kept of its own (every trusted owner is, unless its reservations say connection 0) needs room the gateway does not have",
        "it allows 103 connections (Max connections) and keeps 101 of them for its 100 sessions (one each, plus one to reconnect)",
        "Raise Max connections to 104 or more, or lower Max sessions to 99, on the Limits page",
        "takes effect after the gateway restarts. Nothing was saved.",
    ] {
        assert!(error.contains(words), "{words:?} not in {error}");
    }
    assert!(!error.contains("server.max_channel_count"), "{error}");
    // REST answers as before: 422 naming the setting.
    let admin = f.token("admin").await;
    let (s, body, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/owners",
            Some(&admin),
            json!({"key": "scada", "weight": 5, "ingress": ["10.0.5.0/24"],
                   "reservations": [{"stage": "request_execution", "reserved": 4}]}),
        ))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["field"], "server.max_channel_count");
    // The Limits page edits both, and says when they take effect.
    let (s, body, _) = f.call(page("/limits", &b)).await;
    assert_eq!(s, StatusCode::OK);
    let html = text_of(&body);
    assert!(
        html.contains(r#"name="server.max_channel_count" id="max_channel_count" inputmode="numeric" value="103""#),
        "{html}"
    );
    assert!(
        html.contains(r#"name="server.max_session_count" id="max_session_count" inputmode="numeric" value="100""#),
        "{html}"
    );
    assert!(html.contains("A change here takes effect after the gateway restarts."));
    let raised = limits_form(
        &b,
        &[
            ("server.max_session_count", "100"),
            ("server.max_channel_count", "104"),
        ],
    );
    let (s, _, h) = f.call(form("/limits", &raised, Some(&b))).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    let (_, config, _) = f.call(get("/api/v1/config", Some(&admin))).await;
    assert_eq!(config["server"]["max_channel_count"], 104, "{h:?}");
    let (_, status, _) = f.call(get("/api/v1/status", Some(&admin))).await;
    assert!(
        status["waiting_for_restart"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "server.max_channel_count"),
        "{status}"
    );
    // Now the owner fits.
    let (s, body, _) = f.call(form("/owners", &owner, Some(&b))).await;
    assert_eq!(s, StatusCode::SEE_OTHER, "{}", error_of(&text_of(&body)));
    f.stop().await;
}

/// The input of `id` in `html` (up to the end of its tag, or of its
/// textarea), and the field error that follows it inside its label.
fn input_and_error(html: &str, id: &str) -> (String, String) {
    let at = html
        .split(&format!(r#"id="{id}""#))
        .nth(1)
        .unwrap_or_else(|| panic!("no #{id}: {html}"));
    let label = at.split("</label>").next().unwrap_or_default();
    let input = label.split('>').next().unwrap_or_default().to_string();
    let error = label
        .split(r#"class="field-error""#)
        .nth(1)
        .map(|e| e.split("</span>").next().unwrap_or_default().to_string())
        .unwrap_or_default();
    (input, error)
}

/// A refused owner form comes back with what was typed and the error at
/// the input it concerns: the reservations that leave no room, a weight
/// that is not a number, an address range that is not one.
#[tokio::test]
async fn a_refused_owner_keeps_what_was_typed_and_says_where() {
    let f = Fixture::start().await;
    let b = browser(&f, "admin").await;
    let owner = |weight: &'static str, ingress: &'static str| {
        vec![
            ("_csrf", b.csrf.clone()),
            ("key", "scada".to_string()),
            ("weight", weight.to_string()),
            ("reservations", "request_execution 4".to_string()),
            ("ingress", ingress.to_string()),
        ]
    };
    let post = |fields: Vec<(&'static str, String)>| {
        let pairs: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        form("/owners", &pairs, Some(&b))
    };
    // No room for its connection reserve (default limits).
    let (s, body, _) = f.call(post(owner("5", "10.0.5.0/24"))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    let html = text_of(&body);
    let (key, e) = input_and_error(&html, "owner-key");
    assert!(key.contains(r#"value="scada""#), "{key}");
    assert_eq!(e, "", "nothing wrong with the key");
    let (weight, _) = input_and_error(&html, "owner-weight");
    assert!(weight.contains(r#"value="5""#), "{weight}");
    let (ingress, _) = input_and_error(&html, "owner-ingress");
    assert!(ingress.contains(r#"value="10.0.5.0/24""#), "{ingress}");
    assert!(
        html.contains(r#"rows="4" aria-invalid="true" aria-describedby="owner-reservations-error">request_execution 4</textarea>"#),
        "{html}"
    );
    let (_, e) = input_and_error(&html, "owner-reservations");
    assert!(
        e.contains("The 1 connection scada is kept of its own (every trusted owner is, unless its reservations say connection 0) needs room the gateway does not have"),
        "{e}"
    );
    assert_eq!(html.matches(r#"aria-invalid="true""#).count(), 1, "{html}");
    // A weight that is not a number: at the weight, the rest kept.
    let (s, body, _) = f.call(post(owner("heavy", "10.0.5.0/24"))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    let html = text_of(&body);
    let (weight, e) = input_and_error(&html, "owner-weight");
    assert!(
        weight.contains(r#"value="heavy""#) && weight.contains("aria-invalid"),
        "{weight}"
    );
    assert!(e.contains("heavy"), "{e}");
    let (key, _) = input_and_error(&html, "owner-key");
    assert!(key.contains(r#"value="scada""#), "{key}");
    // An address range that is not one: at the address ranges.
    let (s, body, _) = f.call(post(owner("5", "10.0.5.0/99"))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    let html = text_of(&body);
    let (ingress, e) = input_and_error(&html, "owner-ingress");
    assert!(
        ingress.contains(r#"value="10.0.5.0/99""#) && ingress.contains("aria-invalid"),
        "{ingress}"
    );
    assert!(!e.is_empty(), "{html}");
    f.stop().await;
}

/// The first-start page: a refusal shows the form again with the code and
/// the name as typed (never the password), with the status the REST
/// setup answers (403 for the code, 422 for a refused password or name).
#[tokio::test]
async fn the_setup_page_keeps_what_was_typed_and_answers_like_the_api() {
    let f = Fixture::start_with_users(false).await;
    let code = f
        .state
        .prepare_setup()
        .await
        .unwrap()
        .expect("a code while no user exists");
    let submit = |code: &str, password: &str| {
        form(
            "/setup",
            &[
                ("code", code),
                ("username", "Jürgen"),
                ("password", password),
            ],
            None,
        )
    };
    let (s, body, _) = f.call(submit(&code, "sh0rt!")).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let html = body.as_str().unwrap();
    assert!(
        html.contains(&format!("value=\"{code}\"")),
        "code not kept: {html}"
    );
    assert!(html.contains("value=\"Jürgen\""), "name not kept: {html}");
    assert!(!html.contains("sh0rt!"), "the password came back: {html}");
    assert!(html.contains("role=\"alert\""), "{html}");
    let (s, body, _) = f.call(submit("0000-wrong", "long enough pw")).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{body}");
    let html = body.as_str().unwrap();
    assert!(html.contains("Wrong or expired setup code."), "{html}");
    assert!(html.contains("value=\"0000-wrong\""), "{html}");
    assert!(html.contains("value=\"Jürgen\""), "{html}");
    let (s, _, _) = f.call(submit(&code, "long enough pw")).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    f.stop().await;
}

/// A connection switched off on purpose reads as "disabled" (grey) on the
/// dashboard, as on the Field connections page, and does not count as down.
#[tokio::test]
async fn a_disabled_connection_reads_as_disabled_on_the_dashboard() {
    let f = Fixture::start_with(
        true,
        "[[field_servers]]\nname = \"spare\"\nenabled = false\nendpoints = [\"opc.tcp://127.0.0.1:1/\"]\nsecurity_mode = \"none\"\nsecurity_policy = \"None\"\n",
    )
    .await;
    let b = browser(&f, "viewer").await;
    let (s, body, _) = f.call(page("/partials/dashboard", &b)).await;
    assert_eq!(s, StatusCode::OK);
    let html = body.as_str().unwrap();
    let row = html
        .split("<tr data-connection=\"spare\">")
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .unwrap_or_else(|| panic!("no row for the connection: {html}"));
    assert!(
        row.contains("class=\"state-disabled\">disabled</td>"),
        "a disabled connection reads as broken: {row}"
    );
    assert!(
        html.contains(">1 disabled<"),
        "the count does not say the connection is disabled: {html}"
    );
    let (_, st, _) = f
        .call(get("/api/v1/status", Some(&f.token("viewer").await)))
        .await;
    assert_eq!(st["fields"][0]["enabled"], false, "{st}");
    f.stop().await;
}

/// A restart-only limit applied on the Limits page: the notice and the
/// restart banner name it as the page does ("Max sessions"), with its key.
#[tokio::test]
async fn a_limit_waiting_for_a_restart_is_named_in_the_pages_words() {
    let f = Fixture::start().await;
    let b = browser(&f, "admin").await;
    let typed = limits_form(&b, &[("server.max_session_count", "50")]);
    let (s, body, h) = f.call(form("/limits", &typed, Some(&b))).await;
    assert_eq!(s, StatusCode::SEE_OTHER, "{body}");
    let flash = set_cookie(&h, "uagate_flash").expect("a notice");
    let flash = flash.split(';').next().unwrap();
    let (_, body, _) = f
        .call(
            Request::builder()
                .uri("/limits")
                .header(header::COOKIE, format!("{}; {flash}", b.cookie))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    let html = body.as_str().unwrap();
    assert!(
        html.contains(
            "Stored; takes effect at the next restart, needed by: Max sessions (server.max_session_count)."
        ),
        "{html}"
    );
    let banner = html
        .split("id=\"restart-banner\"")
        .nth(1)
        .and_then(|r| r.split("</p>").next())
        .unwrap_or_else(|| panic!("no restart banner: {html}"));
    assert!(
        banner.contains("Max sessions (server.max_session_count)"),
        "{banner}"
    );
    f.stop().await;
}

/// A pair member stepping down that cannot drop its old log says so on the
/// Pair page, in words, with the reason.
#[tokio::test]
async fn the_pair_page_says_when_stepping_down_fails() {
    let f = Fixture::start().await;
    let b = browser(&f, "viewer").await;
    f.state
        .engine
        .set_pair_view(uagate_server::level::PairView {
            role: uagate_server::level::PairRole::Standby,
            node_id: 7,
            epoch: 3,
            stepping_down: Some("to epoch 4: I/O error: No space left on device".into()),
            ..Default::default()
        });
    let (s, body, _) = f.call(page("/pair", &b)).await;
    assert_eq!(s, StatusCode::OK);
    let html = body.as_str().unwrap();
    assert!(
        html.contains("id=\"pair-stepping-down\">failing<"),
        "{html}"
    );
    assert!(
        html.contains(
            "cannot yet drop its old log to follow it: <span class=\"long\">to epoch 4: I/O error: No space left on device</span>"
        ),
        "{html}"
    );
    f.state
        .engine
        .set_pair_view(uagate_server::level::PairView {
            role: uagate_server::level::PairRole::Standby,
            node_id: 7,
            epoch: 4,
            ..Default::default()
        });
    let (_, body, _) = f.call(page("/pair", &b)).await;
    assert!(!body.as_str().unwrap().contains("pair-stepping-down"));
}

/// A new CA named `cn` (its certificate, DER) and its CRL, issued at
/// `this` and promising its next update at `next` (year, month, day each).
fn crl_of_new_ca(cn: &str, this: (i32, u8, u8), next: (i32, u8, u8)) -> (Vec<u8>, Vec<u8>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let ca = params.self_signed(&key).unwrap();
    let crl = rcgen::CertificateRevocationListParams {
        this_update: rcgen::date_time_ymd(this.0, this.1, this.2),
        next_update: rcgen::date_time_ymd(next.0, next.1, next.2),
        crl_number: rcgen::SerialNumber::from(1u64),
        issuing_distribution_point: None,
        revoked_certs: vec![rcgen::RevokedCertParams {
            serial_number: rcgen::SerialNumber::from(7u64),
            revocation_time: rcgen::date_time_ymd(this.0, this.1, this.2),
            reason_code: None,
            invalidity_date: None,
        }],
        key_identifier_method: rcgen::KeyIdMethod::Sha256,
    }
    .signed_by(&ca, &key)
    .unwrap()
    .der()
    .to_vec();
    (ca.der().to_vec(), crl)
}

/// Stored CRLs are listed with their state: one due within days warns in
/// words, one out of date says what it stops; REST answers the same.
#[tokio::test]
async fn the_certificates_page_says_which_crls_are_due_or_out_of_date() {
    use chrono::Datelike;
    let f = Fixture::start().await;
    let op = f.token("operator").await;
    let ymd = |d: chrono::DateTime<chrono::Utc>| (d.year(), d.month() as u8, d.day() as u8);
    let now = chrono::Utc::now();
    for crl in [
        crl_of_new_ca("Old CA", (2025, 1, 1), (2025, 6, 1)),
        crl_of_new_ca(
            "Soon CA",
            ymd(now - chrono::Duration::days(20)),
            ymd(now + chrono::Duration::days(4)),
        ),
        crl_of_new_ca(
            "Fine CA",
            ymd(now - chrono::Duration::days(1)),
            (2035, 1, 1),
        ),
    ] {
        let (ca, crl) = crl;
        f.state
            .store
            .trust_add("test", &ca, uagate_store::CertKind::Issuer)
            .await
            .unwrap();
        let (s, body, _) = f
            .call(
                Request::builder()
                    .method(Method::POST)
                    .uri("/api/v1/crls")
                    .header(header::AUTHORIZATION, format!("Bearer {op}"))
                    .body(Body::from(crl))
                    .unwrap(),
            )
            .await;
        assert_eq!(s, StatusCode::NO_CONTENT, "{body}");
    }
    let viewer = f.token("viewer").await;
    let (s, list, _) = f.call(get("/api/v1/crls", Some(&viewer))).await;
    assert_eq!(s, StatusCode::OK, "{list}");
    let state_of = |cn: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|c| c["issuer"] == format!("CN={cn}"))
            .map(|c| (c["state"].clone(), c["revoked"].clone()))
            .unwrap_or_else(|| panic!("{cn} not listed: {list}"))
    };
    assert_eq!(state_of("Old CA"), (json!("out_of_date"), json!(1)));
    assert_eq!(state_of("Soon CA").0, json!("due_soon"));
    assert_eq!(state_of("Fine CA").0, json!("current"));
    let (_, metrics, _) = f.call(get("/metrics", Some(&viewer))).await;
    assert!(
        metrics
            .as_str()
            .unwrap_or_default()
            .contains("uagate_crl_next_update_timestamp_seconds{issuer=\"CN=Old CA\"} 1748736000"),
        "{metrics}"
    );

    let b = browser(&f, "viewer").await;
    let (s, body, _) = f.call(page("/certificates", &b)).await;
    assert_eq!(s, StatusCode::OK);
    let html = body.as_str().unwrap();
    assert!(
        html.contains("<td class=\"crl-bad\">out of date since 2025-06-01 00:00 UTC: the certificates this CA issued are refused until its next CRL is uploaded</td>"),
        "{html}"
    );
    assert!(
        ["3 days", "4 days"].iter().any(|d| html.contains(&format!(
            "<td class=\"crl-warn\">next update due in {d}: upload the CA&#39;s next CRL before then, or the certificates it issued are refused</td>"
        ))),
        "{html}"
    );
    assert!(html.contains("<td class=\"crl-ok\">current</td>"), "{html}");
    // The dashboard says it at a glance, with the way to the Certificates page.
    let (_, body, _) = f.call(page("/", &b)).await;
    let html = body.as_str().unwrap();
    assert!(
        html.contains("<p class=\"error trust-alert\">CRL of CN=Old CA: out of date since 2025-06-01 00:00 UTC: the certificates this CA issued are refused until its next CRL is uploaded. <a href=\"/certificates\">Certificates</a></p>"),
        "{html}"
    );
    assert!(
        html.contains("<p class=\"warn trust-alert\">CRL of CN=Soon CA: next update due in "),
        "{html}"
    );
    assert!(!html.contains("CRL of CN=Fine CA"), "{html}");
    f.stop().await;
}

/// A CA certificate that ends within 30 days is marked on the Certificates
/// page and named on the dashboard with what its end stops.
#[tokio::test]
async fn a_ca_certificate_near_its_end_is_named_on_the_dashboard() {
    use chrono::Datelike;
    let f = Fixture::start().await;
    let end = chrono::Utc::now() + chrono::Duration::days(10);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Short CA");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    params.not_before = rcgen::date_time_ymd(2026, 1, 1);
    params.not_after = rcgen::date_time_ymd(end.year(), end.month() as u8, end.day() as u8);
    let ca = params.self_signed(&key).unwrap();
    f.state
        .store
        .trust_add("test", ca.der(), uagate_store::CertKind::Issuer)
        .await
        .unwrap();
    let b = browser(&f, "viewer").await;
    let (_, body, _) = f.call(page("/certificates", &b)).await;
    let html = body.as_str().unwrap();
    assert!(
        ["(expires in 9 days)", "(expires in 10 days)"]
            .iter()
            .any(|w| html.contains(w)),
        "{html}"
    );
    assert!(
        html.contains("<td data-label=\"Valid\" class=\"soon\">"),
        "{html}"
    );
    let (_, body, _) = f.call(page("/", &b)).await;
    let html = body.as_str().unwrap();
    assert!(
        html.contains("<p class=\"warn trust-alert\">The CA certificate CN=Short CA expires in "),
        "{html}"
    );
    assert!(
        html.contains("the certificates it issued are refused then. <a href=\"/certificates\">Certificates</a></p>"),
        "{html}"
    );
    // The appliance's own certificates are years from their end: no line.
    assert!(!html.contains("application instance certificate"), "{html}");
    f.stop().await;
}

/// The rejected list says when a certificate was last presented (not when
/// it was first seen) and, on the primary of a pair, that the other
/// appliance refused it; the REST answer says the same.
#[tokio::test]
async fn the_rejected_list_says_when_and_by_which_appliance() {
    use uagate_store::{LocalChange, Proposal};
    let f = Fixture::start().await;
    let visitor = make_cert("visitor");
    for at in ["2026-01-02T03:04:05.000Z", "2026-03-04T05:06:07.000Z"] {
        f.state
            .store
            .apply(Proposal {
                actor: "engine".into(),
                at: at.into(),
                change: LocalChange::RecordRejected {
                    der: visitor.clone(),
                    by: None,
                    report: false,
                },
            })
            .await
            .unwrap();
    }
    let stranger = make_cert("stranger");
    f.state
        .store
        .record_rejected_by(&stranger, "10.0.3.12:4850")
        .await
        .unwrap();
    // Refused here on a standby whose report waits for the primary.
    f.state
        .store
        .apply(Proposal::now(
            "engine",
            LocalChange::RecordRejected {
                der: make_cert("waiting"),
                by: None,
                report: true,
            },
        ))
        .await
        .unwrap();
    let b = browser(&f, "viewer").await;
    let (_, body, _) = f.call(page("/certificates", &b)).await;
    let html = body.as_str().unwrap();
    let row = |cn: &str| {
        let at = html.find(&format!("CN={cn}")).expect(cn);
        let end = html[at..].find("</tr>").unwrap();
        html[at..at + end].to_string()
    };
    let visitor_row = row("visitor");
    assert!(
        visitor_row.contains("<td data-label=\"Last seen\">2026-03-04 05:06 UTC</td>"),
        "{visitor_row}"
    );
    assert!(!visitor_row.contains("refused-by"), "{visitor_row}");
    assert!(
        row("stranger").contains(
            "<small class=\"hint refused-by\">by the other appliance 10.0.3.12:4850</small>"
        ),
        "{}",
        row("stranger")
    );
    assert!(
        row("waiting").contains("<small class=\"hint refused-by\">not on the primary&#39;s list yet: sent when the primary can be reached</small>"),
        "{}",
        row("waiting")
    );
    let viewer = f.token("viewer").await;
    let (_, certs, _) = f.call(get("/api/v1/certificates", Some(&viewer))).await;
    let rejected = certs["rejected"].as_array().unwrap();
    let of = |cn: &str| {
        rejected
            .iter()
            .find(|c| c["subject"].as_str().unwrap().contains(cn))
            .unwrap()
            .clone()
    };
    assert_eq!(of("visitor")["last_seen"], "2026-03-04T05:06:07.000Z");
    assert_eq!(of("visitor")["refused_here"], true);
    assert!(of("visitor").get("refused_by").is_none());
    assert_eq!(of("stranger")["refused_here"], false);
    assert_eq!(of("stranger")["refused_by"], "10.0.3.12:4850");
    assert_eq!(of("stranger")["report_pending"], false);
    assert_eq!(of("waiting")["report_pending"], true);
    f.stop().await;
}

/// Unknown certificates refused without being listed (a flood of new
/// ones) are counted in the metrics and named on the dashboard.
#[tokio::test]
async fn a_flood_of_unknown_certificates_is_named_on_the_dashboard() {
    let f = Fixture::start().await;
    let burst = uagate_store::NEW_REJECTED_BURST as usize;
    let key = rcgen::KeyPair::generate().unwrap();
    for i in 0..burst + 3 {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, format!("Flood {i}"));
        let der = p.self_signed(&key).unwrap().der().to_vec();
        f.state.store.record_rejected(&der).await.unwrap();
    }
    let viewer = f.token("viewer").await;
    let (_, metrics, _) = f.call(get("/metrics", Some(&viewer))).await;
    assert!(
        metrics
            .as_str()
            .unwrap_or_default()
            .contains("uagate_rejected_certificates_unlisted_total 3"),
        "{metrics}"
    );
    let b = browser(&f, "viewer").await;
    let (_, body, _) = f.call(page("/", &b)).await;
    let html = body.as_str().unwrap();
    assert!(
        html.contains("<p class=\"warn trust-alert\">Too many new unknown certificates at once: 3 were refused without being listed under Certificates, the last at "),
        "{html}"
    );
    assert!(
        html.contains("The list takes 200 at once, then one a minute."),
        "{html}"
    );
    f.stop().await;
}

/// A refused form comes back with what was typed (never a password), the
/// refused input named by its label; the maintenance confirmation step
/// confirms only what the change takes.
#[tokio::test]
async fn refused_forms_keep_what_was_typed() {
    let f = Fixture::start().await;
    let admin = browser(&f, "admin").await;
    let text = |b: &Value| b.as_str().unwrap().to_string();
    // Users: a short password.
    let (s, body, _) = f
        .call(form(
            "/users",
            &[
                ("_csrf", &admin.csrf),
                ("username", "Grete"),
                ("password", "short"),
                ("role", "operator"),
            ],
            Some(&admin),
        ))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    let html = text(&body);
    assert!(
        html.contains("name=\"username\" required autocomplete=\"off\" value=\"Grete\""),
        "{html}"
    );
    assert!(
        html.contains("<option value=\"operator\" selected>"),
        "{html}"
    );
    assert!(
        html.contains("Password: must be at least 8 characters"),
        "{html}"
    );
    assert!(!html.contains("value=\"short\""), "the password came back");

    // ServiceLevel override: a level out of range.
    let (s, body, _) = f
        .call(form(
            "/service-level",
            &[
                ("_csrf", &admin.csrf),
                ("level", "256"),
                ("expires_min", "30"),
                ("reason", "pump swap"),
            ],
            Some(&admin),
        ))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    let html = text(&body);
    for kept in ["value=\"256\"", "value=\"30\"", "value=\"pump swap\""] {
        assert!(html.contains(kept), "{kept} lost: {html}");
    }

    // Maintenance: a negative countdown keeps state, countdown and reason.
    let post = |fields: Vec<(&'static str, &'static str)>| {
        let mut all = vec![("_csrf", admin.csrf.as_str())];
        all.extend(fields);
        form("/maintenance", &all, Some(&admin))
    };
    let (s, body, _) = f
        .call(post(vec![
            ("state", "shutdown"),
            ("seconds_till_shutdown", "-5"),
            ("reason", "new firmware"),
        ]))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    let html = text(&body);
    assert!(
        html.contains("<option value=\"shutdown\" selected>"),
        "{html}"
    );
    assert!(
        html.contains("value=\"-5\"") && html.contains("value=\"new firmware\""),
        "{html}"
    );
    assert!(
        html.contains("Seconds till shutdown: “-5” is not a whole number"),
        "{html}"
    );
    // A countdown for another state is refused, not ignored.
    let (s, body, _) = f
        .call(post(vec![
            ("state", "suspended"),
            ("seconds_till_shutdown", "30"),
        ]))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    // Draining with running is refused before the confirmation step.
    let (s, body, _) = f
        .call(post(vec![("state", "running"), ("drain", "on")]))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(!text(&body).contains("id=\"confirm\""));
    // The shutdown confirmation says when.
    let (s, body, _) = f
        .call(post(vec![
            ("state", "shutdown"),
            ("seconds_till_shutdown", "30"),
        ]))
        .await;
    assert_eq!(s, StatusCode::OK);
    assert!(text(&body).contains("shutting down in 30 s"), "{body}");
    assert_eq!(
        f.state.engine.server_state(),
        opcua_types::ServerState::Running
    );
    f.stop().await;
}

/// Changing one's own password, or removing one's own user, lands on the
/// login page saying so (not "your session expired"); a refused login
/// keeps the user name.
#[tokio::test]
async fn ones_own_password_change_says_so_at_the_login() {
    let f = Fixture::start().await;
    let admin = browser(&f, "admin").await;
    // The same role again changes nothing and is not audited as a change.
    let (s, _, h) = f
        .call(form(
            "/users/role",
            &[
                ("_csrf", &admin.csrf),
                ("name", "operator"),
                ("role", "operator"),
            ],
            Some(&admin),
        ))
        .await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    assert!(set_cookie(&h, "uagate_flash")
        .unwrap()
        .contains("already+operator"));
    let log = f.state.store.change_log_since(0, 1000).await.unwrap();
    assert!(!log.iter().any(|e| e.kind == "user.role"), "{log:?}");
    let (s, _, h) = f
        .call(form(
            "/users/password",
            &[
                ("_csrf", &admin.csrf),
                ("name", "ADMIN"),
                ("password", "a brand new password"),
            ],
            Some(&admin),
        ))
        .await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    assert_eq!(h[header::LOCATION], "/login");
    let flash = set_cookie(&h, "uagate_flash").unwrap();
    let cookie = flash.split(';').next().unwrap().to_string();
    let (s, body, _) = f
        .call(
            Request::builder()
                .uri("/login")
                .header(header::COOKIE, cookie)
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let html = body.as_str().unwrap();
    assert!(html.contains("Your password was changed"), "{html}");
    assert!(!html.contains("Your session expired"), "{html}");
    // A wrong password keeps the name typed.
    let (s, body, _) = f
        .call(form(
            "/login",
            &[
                ("username", "admin"),
                ("password", "correct horse admin"),
                ("next", "/"),
            ],
            None,
        ))
        .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert!(body.as_str().unwrap().contains("value=\"admin\""), "{body}");
    f.stop().await;
}

/// The first trusted owner without "Callers from" is asked for them in
/// the form's words; a refusal naming a document setting reads with the
/// input's label above the form, not the setting's path.
#[tokio::test]
async fn the_owner_form_speaks_in_its_own_words() {
    let f = Fixture::start().await;
    let b = browser(&f, "admin").await;
    let owner = |weight: &'static str, ingress: &'static str| {
        [
            ("_csrf", b.csrf.as_str()),
            ("key", "scada"),
            ("weight", weight),
            ("reservations", "connection 0"),
            ("ingress", ingress),
        ]
    };
    let (s, body, _) = f.call(form("/owners", &owner("5", ""), Some(&b))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    let html = text_of(&body);
    let error = error_of(&html);
    assert!(
        error.starts_with("Callers from: the first trusted owner needs"),
        "{error}"
    );
    assert!(!error.contains("trusted_reservations"), "{error}");
    let (_, e) = input_and_error(&html, "owner-ingress");
    assert!(e.contains("address range"), "{e}");
    // A weight out of range: the document's message, with the label.
    let (s, body, _) = f
        .call(form("/owners", &owner("5000", "10.0.5.0/24"), Some(&b)))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    let error = error_of(&text_of(&body));
    assert!(error.starts_with("Not saved: Weight: "), "{error}");
    assert!(!error.contains("isolation."), "{error}");
    f.stop().await;
}

/// A certificate or CRL form sent without a file chosen says to choose
/// one (the browser sends the part, empty), not that the data is no DER.
#[tokio::test]
async fn an_upload_without_a_file_says_to_choose_one() {
    let f = Fixture::start().await;
    let b = browser(&f, "operator").await;
    for (uri, part, said) in [
        (
            "/certificates/upload",
            "certificate",
            "Choose the certificate file first.",
        ),
        ("/certificates/crl", "crl", "Choose the CRL file first."),
    ] {
        let body = format!(
            "--x\r\nContent-Disposition: form-data; name=\"{part}\"; filename=\"\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n\r\n--x--\r\n"
        );
        let req = Request::builder()
            .method(Method::POST)
            .uri(format!("{uri}?_csrf={}", b.csrf))
            .header(header::COOKIE, &b.cookie)
            .header(header::CONTENT_TYPE, "multipart/form-data; boundary=x")
            .body(Body::from(body))
            .unwrap();
        let (s, html, _) = f.call(req).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{uri}: {html}");
        let error = error_of(&text_of(&html));
        assert_eq!(error, said, "{uri}");
    }
    f.stop().await;
}

/// Off the appliance image the System page says how to restart (the
/// banner of settings waiting for a restart sends the operator there).
#[tokio::test]
async fn off_the_image_the_system_page_says_how_to_restart() {
    let f = Fixture::start().await;
    let b = browser(&f, "viewer").await;
    let (s, body, _) = f.call(page("/system", &b)).await;
    assert_eq!(s, StatusCode::OK);
    let html = text_of(&body);
    assert!(html.contains("id=\"not-appliance\""), "{html}");
    assert!(
        html.contains("id=\"restart-how\"") && html.contains("systemctl restart uagate"),
        "{html}"
    );
    f.stop().await;
}
