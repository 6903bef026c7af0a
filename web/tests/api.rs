//! Router tests of the REST API against a real gateway (127.0.0.1,
//! ephemeral ports) and a real SQLite store: authentication, roles,
//! validation errors naming the setting, and the fixed JSON shapes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use common::{get, json_request, Fixture};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;
use uagate_store::Role;
use uagate_web::app;

#[tokio::test]
async fn every_route_but_login_requires_a_valid_token() {
    let f = Fixture::start().await;
    for uri in ["/api/v1/status", "/api/v1/plan", "/api/v1/config"] {
        let (s, b, _) = f.call(get(uri, None)).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{uri}: {b}");
        assert_eq!(b["code"], "unauthenticated", "{uri}");
        let (s, _, _) = f.call(get(uri, Some("not.a.token"))).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{uri} with a forged token");
    }
    let (s, _, _) = f
        .call(json_request(Method::PUT, "/api/v1/config", None, json!({})))
        .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // A token signed with another key is refused.
    let foreign = uagate_web::TokenKeys::from_secret(&[1u8; 32])
        .issue("admin", Role::Admin, "stamp")
        .unwrap();
    let (s, _, _) = f.call(get("/api/v1/status", Some(&foreign))).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // The cookie carries the same token for the console.
    let t = f.token("viewer").await;
    let req = Request::builder()
        .uri("/api/v1/status")
        .header(header::COOKIE, format!("theme=dark; uagate_token={t}"))
        .body(Body::empty())
        .unwrap();
    let (s, b, _) = f.call(req).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    f.stop().await;
}

/// OPC UA ActivateSession and the console count failed logins in one
/// throttle: failures of a name at the OPC UA door lock the console's
/// login of that name from the same address.
#[tokio::test]
async fn opc_ua_login_failures_lock_the_console_login_too() {
    let f = Fixture::start().await;
    let throttle = f.state.engine.login_throttle();
    let key = uagate_store::user_key("operator");
    let guesser = [127, 0, 3, 1];
    // As ActivateSession records five wrong passwords from that address.
    for _ in 0..5 {
        throttle.failed(&key, Some(guesser.into()), std::time::Instant::now());
    }
    let body = json!({"username": "operator", "password": "correct horse operator"});
    let (s, b, h) = f
        .call_from(
            guesser,
            json_request(Method::POST, "/api/v1/login", None, body.clone()),
        )
        .await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{b}");
    assert!(h.get(header::RETRY_AFTER).is_some());
    let (s, b, _) = f
        .call_from(
            [127, 0, 3, 2],
            json_request(Method::POST, "/api/v1/login", None, body),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    f.stop().await;
}

#[tokio::test]
async fn login_gives_a_token_and_wrong_passwords_are_throttled() {
    let f = Fixture::start().await;
    let (s, b) = f.login("operator", "correct horse operator").await;
    assert_eq!(s, StatusCode::OK);
    assert!(b["token"]
        .as_str()
        .is_some_and(|t| t.split('.').count() == 3));
    let (s, b) = f.login("operator", "wrong password").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(b["code"], "bad_credentials");
    let (s, _) = f.login("nobody", "whatever1").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // Malformed body: 422 naming no secret.
    let (s, b, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/login",
            None,
            json!({"user": "x"}),
        ))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    // Five failures of one name, each from its own address, lock nobody
    // out: the right password from a sixth address still logs in (late).
    let attempt = |ip: [u8; 4], user: &str, password: &str| {
        let body = json!({"username": user, "password": password});
        f.call_from(ip, json_request(Method::POST, "/api/v1/login", None, body))
    };
    for ip in 1..=5 {
        let (s, b, _) = attempt([127, 0, 1, ip], "viewer", "wrong password").await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "attempt {ip}: {b}");
    }
    let (s, b, _) = attempt([127, 0, 1, 6], "viewer", "correct horse viewer").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    // Five failures of one name (in any case: it is one user) from one
    // address lock that pair: even the right password gets 429 there, and
    // the administrator still logs in from another address.
    for name in ["admin", "Admin", "ADMIN", "aDmin", "admiN"] {
        let (s, _, _) = attempt([127, 0, 2, 1], name, "wrong password").await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
    }
    let (s, b, h) = attempt([127, 0, 2, 1], "admin", "correct horse admin").await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{b}");
    assert_eq!(b["code"], "throttled");
    assert!(h.get(header::RETRY_AFTER).is_some());
    let (s, b, _) = attempt([127, 0, 2, 2], "admin", "correct horse admin").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    // The locked address may still log in as another user...
    let (s, b, _) = attempt([127, 0, 2, 1], "operator", "correct horse operator").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    // ...until it has guessed 20 times in all (password spraying): then the
    // address is locked for every name.
    for i in 0..15 {
        let (s, _, _) = attempt([127, 0, 2, 1], &format!("guess{i}"), "wrong password").await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
    }
    let (s, b, h) = attempt([127, 0, 2, 1], "operator", "correct horse operator").await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{b}");
    assert!(h.get(header::RETRY_AFTER).is_some());
    f.stop().await;
}

#[tokio::test]
async fn status_and_plan_have_their_fixed_shapes() {
    let f = Fixture::start().await;
    let t = f.token("viewer").await;
    let (s, b, _) = f.call(get("/api/v1/status", Some(&t))).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["state"], "running");
    assert_eq!(b["role"], "standalone");
    assert!(b["service_level"].as_u64().is_some_and(|l| l <= 255));
    assert!(b["sessions"].is_u64());
    assert!(b["fields"].is_array());
    let (s, b, _) = f.call(get("/api/v1/plan", Some(&t))).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let stages = b.as_array().unwrap();
    assert_eq!(stages.len(), 8, "{b}");
    assert_eq!(stages[0]["stage"], "Connection");
    let line = stages[0]["line"].as_str().unwrap();
    assert!(line.starts_with("Connection: total="), "{line}");
    // The line and the fields agree.
    assert!(
        line.contains(&format!("shared={}", stages[0]["shared"])),
        "{line}"
    );
    f.stop().await;
}

#[tokio::test]
async fn config_put_is_admin_only_validated_as_a_unit_and_reports_its_effect() {
    let f = Fixture::start().await;
    let viewer = f.token("viewer").await;
    let operator = f.token("operator").await;
    let admin = f.token("admin").await;
    let (s, doc, _) = f.call(get("/api/v1/config", Some(&viewer))).await;
    assert_eq!(s, StatusCode::OK, "{doc}");
    assert!(doc["server"]["max_session_count"].is_u64(), "{doc}");
    for t in [&viewer, &operator] {
        let (s, b) = f.put_config(t, doc.clone()).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{b}");
        assert_eq!(b["code"], "forbidden");
    }
    // Invalid: 422 naming the setting; nothing stored.
    let mut bad = doc.clone();
    bad["server"]["max_buffer_size"] = json!(10);
    let (s, b) = f.put_config(&admin, bad).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(b["code"], "invalid");
    assert_eq!(b["field"], "server.max_buffer_size", "{b}");
    assert_eq!(
        f.state
            .store
            .setting(uagate_server::CONFIG_KEY)
            .await
            .unwrap(),
        None,
        "a refused document is not stored"
    );
    // Unknown key: refused too.
    let mut unknown = doc.clone();
    unknown["server"]["max_sesion_count"] = json!(5);
    let (s, b) = f.put_config(&admin, unknown).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    // Named by its path, like a refused value (it was "config").
    assert_eq!(b["field"], "server.max_sesion_count", "{b}");
    // A value of the wrong type, named the same way.
    let mut wrong_type = doc.clone();
    wrong_type["server"]["max_session_count"] = json!("many");
    let (s, b) = f.put_config(&admin, wrong_type).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(b["field"], "server.max_session_count", "{b}");
    // A live change (the default weight) applies at once.
    let mut live = doc.clone();
    live["isolation"]["default_weight"] = json!(3);
    let (s, b) = f.put_config(&admin, live).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["live"], json!(["isolation.default_weight"]), "{b}");
    assert_eq!(b["restart"], json!([]), "{b}");
    assert_eq!(f.state.engine.applied_config().isolation.default_weight, 3);
    // A restart-only change is stored, not applied.
    let (_, doc2, _) = f.call(get("/api/v1/config", Some(&viewer))).await;
    assert_eq!(doc2["isolation"]["default_weight"], 3);
    let mut restart = doc2.clone();
    restart["server"]["max_session_count"] = json!(50);
    let (s, b) = f.put_config(&admin, restart).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["live"], json!([]), "{b}");
    assert_eq!(b["restart"], json!(["server.max_session_count"]), "{b}");
    assert_eq!(
        f.state.engine.applied_config().server.max_session_count,
        100
    );
    let stored = f
        .state
        .store
        .setting(uagate_server::CONFIG_KEY)
        .await
        .unwrap()
        .unwrap();
    assert!(stored.contains("max_session_count = 50"), "{stored}");
    f.stop().await;
}

#[tokio::test]
async fn unknown_paths_are_json_404s() {
    let f = Fixture::start().await;
    let (s, b, _) = f.call(get("/api/v1/nothing", None)).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(b["code"], "not_found");
    f.stop().await;
}

#[tokio::test]
async fn first_start_setup_creates_one_admin_with_the_one_time_code() {
    let mut f = Fixture::start_with_users(false).await;
    // The appliance's login prompt shows the code from this file.
    let notice_dir = tempfile::tempdir().unwrap();
    let notice = notice_dir.path().join("setup.issue");
    f.state = f
        .state
        .clone()
        .with_setup_notice(Some(notice.clone()), 9443);
    let code = f
        .state
        .prepare_setup()
        .await
        .unwrap()
        .expect("a code while no user exists");
    let shown = std::fs::read_to_string(&notice).unwrap();
    assert!(shown.contains(&code), "{shown}");
    assert!(shown.contains("https://\\4:9443/setup"), "{shown}");
    let setup = |code: &str, user: &str, password: &str| {
        json_request(
            Method::POST,
            "/api/v1/setup",
            None,
            json!({"code": code, "username": user, "password": password}),
        )
    };
    let (s, b, _) = f.call(setup("0000", "root", "long enough pw")).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "wrong code: {b}");
    assert_eq!(
        b,
        json!({"code": "forbidden", "message": "wrong or expired setup code"})
    );
    let (s, b, _) = f.call(setup(&code, "root", "short")).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(b["field"], "password", "{b}");
    assert!(notice.exists(), "the code stays shown until it is used");
    let (s, b, _) = f.call(setup(&code, "root", "long enough pw")).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert!(!notice.exists(), "a spent code is no longer shown");
    let token = b["token"].as_str().unwrap().to_string();
    // The new admin may change the configuration.
    let (s, doc, _) = f.call(get("/api/v1/config", Some(&token))).await;
    assert_eq!(s, StatusCode::OK);
    let (s, b) = f.put_config(&token, doc).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    // The code is spent: no second admin through setup.
    let (s, b, _) = f.call(setup(&code, "eve", "long enough pw")).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert_eq!(b["message"], "wrong or expired setup code");
    assert_eq!(f.state.prepare_setup().await.unwrap(), None);
    let (s, _) = f.login("root", "long enough pw").await;
    assert_eq!(s, StatusCode::OK);
    f.stop().await;
}

#[tokio::test]
async fn metrics_need_a_token_and_carry_bounded_labels() {
    // A field connection that cannot connect (nothing listens on port 1).
    let f = Fixture::start_with(
        true,
        "[[field_servers]]\nname = \"line9\"\nendpoints = [\"opc.tcp://127.0.0.1:1/\"]\nsecurity_mode = \"none\"\nsecurity_policy = \"None\"\n",
    )
    .await;
    let (s, _, _) = f.call(get("/metrics", None)).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let t = f.token("viewer").await;
    let resp = app(f.state.clone())
        .oneshot(get("/metrics", Some(&t)))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let ct = resp.headers()[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_string();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    let text = String::from_utf8(
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    for want in [
        "uagate_sessions 0",
        "uagate_server_state{state=\"running\"} 1",
        "uagate_server_state{state=\"suspended\"} 0",
        "uagate_isolation_usage{stage=\"connection\"}",
        "uagate_isolation_owners ",
        "uagate_field_reconnects_total{connection=\"line9\"} 0",
        "uagate_field_merged_reads_total{connection=\"line9\"} 0",
        "uagate_field_merged_read_requests_total{connection=\"line9\"} 0",
        "uagate_field_event_items{connection=\"line9\"} 0",
        "uagate_field_events_dropped_total{connection=\"line9\",reason=\"overflow\"} 0",
        "uagate_field_events_dropped_total{connection=\"line9\",reason=\"duplicate\"} 0",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    let level = text
        .lines()
        .find_map(|l| l.strip_prefix("uagate_service_level "))
        .and_then(|v| v.parse::<u32>().ok())
        .expect("service level sample");
    assert!(level <= 255);
    // Exactly one state is 1 for the field connection, and it is not connected.
    let states: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("uagate_field_connection_state{connection=\"line9\"") && l.ends_with(" 1")
        })
        .collect();
    assert_eq!(states.len(), 1, "{text}");
    assert!(!states[0].contains("state=\"connected\""), "{}", states[0]);
    // No user names or addresses in labels.
    assert!(
        !text.contains("viewer") && !text.contains("127.0.0"),
        "{text}"
    );
    f.stop().await;
}

#[tokio::test]
async fn maintenance_is_for_operators_and_takes_the_server_out_and_back() {
    let f = Fixture::start().await;
    let viewer = f.token("viewer").await;
    let operator = f.token("operator").await;
    let post =
        |t: &str, body: Value| json_request(Method::POST, "/api/v1/maintenance", Some(t), body);
    let (s, _, _) = f.call(post(&viewer, json!({"state": "suspended"}))).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, b, _) = f.call(post(&operator, json!({"state": "asleep"}))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(b["field"], "state");
    let (s, b, _) = f
        .call(post(
            &operator,
            json!({"state": "suspended", "estimated_return_time": "tomorrow"}),
        ))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(b["field"], "estimated_return_time");
    assert_eq!(
        f.state.engine.server_state(),
        opcua_types::ServerState::Running
    );
    let (s, b, _) = f
        .call(post(
            &operator,
            json!({"state": "suspended", "estimated_return_time": "2030-01-01T00:00:00Z", "reason": "firmware"}),
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["state"], "suspended");
    assert_eq!(b["service_level"], 0, "Maintenance subrange: {b}");
    assert_eq!(b["service_level_subrange"], "maintenance");
    // Persisted and audited under the operator's name.
    let log = f.state.store.change_log_since(0, 100).await.unwrap();
    assert!(
        log.iter().any(|e| e.actor == "operator"),
        "no change-log entry by the operator: {log:?}"
    );
    let (s, b, _) = f.call(post(&operator, json!({"state": "running"}))).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["state"], "running");
    assert!(b["service_level"].as_u64().unwrap() > 1, "{b}");
    f.stop().await;
}

#[tokio::test]
async fn admins_manage_users_and_read_the_audit_trail() {
    let f = Fixture::start().await;
    let admin = f.token("admin").await;
    let operator = f.token("operator").await;
    let (s, _, _) = f.call(get("/api/v1/users", Some(&operator))).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, b, _) = f.call(get("/api/v1/users", Some(&admin))).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b.as_array().unwrap().len(), 3, "{b}");
    assert!(!b.to_string().contains("argon2"), "no hashes: {b}");
    let add = |body: Value| json_request(Method::POST, "/api/v1/users", Some(&admin), body);
    let (s, b, _) = f
        .call(add(
            json!({"username": "nina", "password": "nina-pass-1", "role": "viewer"}),
        ))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (s, b, _) = f
        .call(add(
            json!({"username": "nina", "password": "nina-pass-1", "role": "viewer"}),
        ))
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    let (s, b, _) = f
        .call(add(
            json!({"username": "olga", "password": "x", "role": "viewer"}),
        ))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(b["field"], "password", "{b}");
    let (s, b, _) = f
        .call(add(
            json!({"username": "olga", "password": "olga-pass-1", "role": "root"}),
        ))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(b["field"], "role", "{b}");
    // nina's session, begun before her password is reset below.
    let (s, b) = f.login("nina", "nina-pass-1").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let nina = b["token"].as_str().unwrap().to_string();
    let (s, b, _) = f.call(get("/api/v1/status", Some(&nina))).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    // Promote and reset the password; the new one works, the old one not.
    let (s, b, _) = f
        .call(json_request(
            Method::PUT,
            "/api/v1/users/nina",
            Some(&admin),
            json!({"role": "operator", "password": "nina-pass-2"}),
        ))
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{b}");
    let (s, _) = f.login("nina", "nina-pass-1").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, b) = f.login("nina", "nina-pass-2").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    // The reset ended the session begun with the old password.
    let (s, b, _) = f.call(get("/api/v1/status", Some(&nina))).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{b}");
    // Names are one user whatever their case: NINA is nina (and logs in
    // as nina), a second Nina is refused; Unicode letters are names.
    let (s, b) = f.login("NINA", "nina-pass-2").await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let token = b["token"].as_str().unwrap().to_string();
    let (s, b, _) = f.call(get("/api/v1/status", Some(&token))).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, b, _) = f
        .call(add(
            json!({"username": "Nina", "password": "nina-pass-3", "role": "viewer"}),
        ))
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert_eq!(b["message"], "user \"nina\" already exists", "{b}");
    let (s, b, _) = f
        .call(add(
            json!({"username": "Jürgen", "password": "jürgen-pass-1", "role": "viewer"}),
        ))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (s, b, _) = f
        .call(add(
            json!({"username": "eight", "password": "        ", "role": "viewer"}),
        ))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(b["field"], "password", "{b}");
    let (s, b, _) = f
        .call(json_request(
            Method::PUT,
            "/api/v1/users/J%C3%9CRGEN",
            Some(&admin),
            json!({"role": "operator"}),
        ))
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{b}");
    // A role with an unacceptable password changes nothing: 422 naming
    // the password, and Jürgen is still an operator.
    let (s, b, _) = f
        .call(json_request(
            Method::PUT,
            "/api/v1/users/J%C3%9CRGEN",
            Some(&admin),
            json!({"role": "admin", "password": "short"}),
        ))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(b["field"], "password", "{b}");
    let (_, b, _) = f.call(get("/api/v1/users", Some(&admin))).await;
    let role = b
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "Jürgen")
        .map(|u| u["role"].clone());
    assert_eq!(role, Some(json!("operator")), "{b}");
    // The last admin can be neither demoted nor removed.
    let (s, b, _) = f
        .call(json_request(
            Method::PUT,
            "/api/v1/users/admin",
            Some(&admin),
            json!({"role": "viewer"}),
        ))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    let del = |name: &str| {
        Request::builder()
            .method(Method::DELETE)
            .uri(format!("/api/v1/users/{name}"))
            .header(header::AUTHORIZATION, format!("Bearer {admin}"))
            .body(Body::empty())
            .unwrap()
    };
    let (s, _, _) = f.call(del("admin")).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    let (s, _, _) = f.call(del("nina")).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, b, _) = f.call(del("nina")).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{b}");
    // The audit trail names the admin for each change, without secrets.
    let (s, b, _) = f
        .call(get("/api/v1/audit?actor=admin&kind=user.", Some(&admin)))
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let kinds: Vec<&str> = b
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    for k in ["user.add", "user.role", "user.password", "user.delete"] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    assert!(
        !b.to_string().contains("nina-pass"),
        "a password in the audit: {b}"
    );
    let (s, b, _) = f.call(get("/api/v1/audit?limit=2", Some(&admin))).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(b.as_array().unwrap().len(), 2);
    let (s, _, _) = f.call(get("/api/v1/audit", Some(&operator))).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    f.stop().await;
}

#[tokio::test]
async fn a_service_level_override_has_a_reason_and_expires() {
    let f = Fixture::start().await;
    let viewer = f.token("viewer").await;
    let operator = f.token("operator").await;
    let put =
        |t: &str, body: Value| json_request(Method::PUT, "/api/v1/service-level", Some(t), body);
    let (s, _, _) = f
        .call(put(&viewer, json!({"level": 150, "expires_in_s": 60})))
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, b, _) = f.call(put(&operator, json!({"level": 150}))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(b["field"], "expires_in_s");
    let (s, b, _) = f
        .call(put(
            &operator,
            json!({"level": 150, "expires_in_s": 999_999_999}),
        ))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    let (s, b, _) = f
        .call(put(&operator, json!({"level": 300, "expires_in_s": 60})))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "out of range: {b}");
    let (s, b, _) = f
        .call(put(
            &operator,
            json!({"level": 150, "expires_in_s": 1, "reason": "pump swap"}),
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["service_level"], 150);
    assert_eq!(b["service_level_subrange"], "degraded");
    assert_eq!(b["service_level_source"], "override");
    assert_eq!(b["service_level_reason"], "pump swap");
    assert_eq!(f.state.engine.service_level(), 150);
    // It expires on its own.
    let t0 = std::time::Instant::now();
    while f.state.engine.service_level() == 150 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "override did not expire"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, b, _) = f.call(get("/api/v1/status", Some(&viewer))).await;
    assert_eq!(b["service_level_source"], "computed", "{b}");
    assert_eq!(b["service_level"], 255, "{b}");
    // A long one is cleared with null.
    let (s, _, _) = f
        .call(put(&operator, json!({"level": 10, "expires_in_s": 3600})))
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, b, _) = f.call(put(&operator, json!({"level": null}))).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["service_level"], 255, "{b}");
    // Back to the computed value, with its own reason.
    assert_eq!(b["service_level_reason"], "all healthy", "{b}");
    f.stop().await;
}

/// Issue 18 item 7: `GET /api/v1/pair` and the pair metrics show what the
/// pair node last told the engine; the role and an integrity fault feed
/// the computed ServiceLevel (standby 230; a fault: Degraded, at most 150).
#[tokio::test]
async fn the_pair_is_shown_by_rest_and_metrics_and_moves_the_service_level() {
    let f = Fixture::start().await;
    let viewer = f.token("viewer").await;
    let (s, b, _) = f.call(get("/api/v1/pair", Some(&viewer))).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["role"], "standalone", "{b}");
    assert_eq!(b["integrity_fault"], Value::Null, "{b}");

    let engine = f.state.engine.clone();
    let mut view = uagate_server::level::PairView {
        role: uagate_server::level::PairRole::Standby,
        node_id: 7,
        leader: Some("10.0.0.1:4850".into()),
        epoch: 3,
        applied: 42,
        committed: 44,
        fingerprint: "ab".repeat(32),
        members: vec![
            uagate_server::level::PairMember {
                node_id: 1,
                addr: "10.0.0.1:4850".into(),
                voter: true,
                application_uri: "urn:uagate:a".into(),
                witness: false,
                console: "https://10.0.0.1:8443/".into(),
                lag_entries: Some(0),
                lag_seconds: Some(0.0),
                reachable: Some(true),
            },
            uagate_server::level::PairMember {
                node_id: 7,
                addr: "10.0.0.2:4850".into(),
                voter: false,
                application_uri: "urn:uagate:b".into(),
                witness: false,
                console: "https://10.0.0.2:8443/".into(),
                lag_entries: Some(3),
                lag_seconds: Some(1.5),
                reachable: None,
            },
        ],
        integrity_fault: None,
        quorum_lost: false,
        stepping_down: None,
        diverged: vec![uagate_server::level::PairDiverged {
            superseded_by: 4,
            index: 17,
            kind: "user.add".into(),
            subject: "zed (viewer)".into(),
            actor: "alice".into(),
            at: "2026-12-02T10:00:00.000Z".into(),
        }],
    };
    engine.set_pair_view(view.clone());
    engine.update_service_level();
    let (_, b, _) = f.call(get("/api/v1/pair", Some(&viewer))).await;
    assert_eq!(b["role"], "standby", "{b}");
    assert_eq!(b["leader"], "10.0.0.1:4850", "{b}");
    assert_eq!(b["applied"], 42, "{b}");
    assert_eq!(b["members"][1]["voter"], false, "{b}");
    assert_eq!(b["members"][1]["lag_entries"], 3, "{b}");
    assert_eq!(b["members"][1]["lag_seconds"], 1.5, "{b}");
    assert_eq!(b["members"][0]["reachable"], true, "{b}");
    assert_eq!(b["committed"], 44, "{b}");
    assert_eq!(b["diverged"][0]["kind"], "user.add", "{b}");
    assert_eq!(b["diverged"][0]["subject"], "zed (viewer)", "{b}");

    let (_, st, _) = f.call(get("/api/v1/status", Some(&viewer))).await;
    assert_eq!(st["role"], "standby", "{st}");
    assert_eq!(st["service_level"], 230, "{st}");
    assert_eq!(st["service_level_reason"], "standby, all healthy", "{st}");

    // Cut off from the quorum: Degraded, said in REST and the metrics.
    view.quorum_lost = true;
    engine.set_pair_view(view.clone());
    engine.update_service_level();
    let (_, st, _) = f.call(get("/api/v1/status", Some(&viewer))).await;
    assert_eq!(st["service_level"], 150, "{st}");
    assert_eq!(
        st["service_level_reason"], "cut off from the other pair members (no quorum)",
        "{st}"
    );
    let (_, b, _) = f.call(get("/api/v1/pair", Some(&viewer))).await;
    assert_eq!(b["quorum_lost"], true, "{b}");
    view.quorum_lost = false;

    // Stepping down and unable to drop the old log: said in REST and the
    // metrics.
    view.stepping_down = Some("to epoch 4: disk full".into());
    engine.set_pair_view(view.clone());
    let (_, b, _) = f.call(get("/api/v1/pair", Some(&viewer))).await;
    assert_eq!(b["stepping_down"], "to epoch 4: disk full", "{b}");
    let (_, metrics, _) = f.call(get("/metrics", Some(&viewer))).await;
    assert!(
        metrics
            .as_str()
            .unwrap_or_default()
            .contains("uagate_pair_step_down_failing 1"),
        "{metrics}"
    );
    view.stepping_down = None;

    view.integrity_fault =
        Some("an entry proposed by node 1 does not carry its valid signature".into());
    engine.set_pair_view(view);
    engine.update_service_level();
    let (_, st, _) = f.call(get("/api/v1/status", Some(&viewer))).await;
    assert_eq!(st["service_level"], 150, "{st}");
    assert_eq!(st["service_level_subrange"], "degraded", "{st}");
    let (_, metrics, _) = f.call(get("/metrics", Some(&viewer))).await;
    let metrics = metrics
        .as_str()
        .map(str::to_owned)
        .unwrap_or(metrics.to_string());
    for line in [
        "uagate_pair_role{role=\"standby\"} 1",
        "uagate_pair_role{role=\"primary\"} 0",
        "uagate_pair_epoch 3",
        "uagate_pair_applied_index 42",
        "uagate_pair_members 2",
        "uagate_pair_integrity_fault 1",
        "uagate_pair_replication_lag_entries{member=\"10.0.0.1:4850\"} 0",
        "uagate_pair_commit_index 44",
        "uagate_pair_peer_reachable{member=\"10.0.0.1:4850\"} 1",
        "uagate_pair_replication_lag_seconds{member=\"10.0.0.1:4850\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} missing: {metrics}");
    }
    f.stop().await;
}

/// A pair stand-in for the store: applies each replicated change at the
/// next log position (as the pair's state machine does), answers that the
/// other member does not have it yet, or refuses as a standby would.
struct FakePair {
    store: uagate_store::Store,
    next: std::sync::atomic::AtomicU64,
    leader: bool,
}

impl uagate_store::Replicator for FakePair {
    fn propose(
        &self,
        proposal: uagate_store::Proposal<uagate_store::Change>,
    ) -> uagate_store::Replicated {
        let index = self.next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let store = self.store.clone();
        let leader = self.leader;
        Box::pin(async move {
            if !leader {
                return Err(uagate_store::StoreError::NotLeader {
                    leader: Some("10.0.0.1:4850".into()),
                    console: Some("https://10.0.0.1:8443/".into()),
                });
            }
            let position = uagate_store::LogPosition {
                index,
                term: 1,
                leader: 1,
            };
            match store.apply_at(position, proposal).await? {
                uagate_store::LogApplied::Applied { seq, epoch } => {
                    Ok(uagate_store::Applied::replicated(seq, epoch, Some(false)))
                }
                uagate_store::LogApplied::Refused(e) => Err(e),
                other => panic!("{other:?}"),
            }
        })
    }
}

/// Issue 18: a write's answer says whether the other member already has it
/// (`replicated` in the JSON body and the `x-uagate-replicated` header);
/// on a member that is not the leader a write is refused with 409
/// `not_leader` naming the leader's console; reads carry neither.
#[tokio::test]
async fn write_answers_say_whether_the_pair_has_the_change() {
    let f = Fixture::start().await;
    let admin = f.token("admin").await;
    let add = |name: &str| {
        json_request(
            Method::POST,
            "/api/v1/users",
            Some(&admin),
            json!({"username": name, "password": "a long password 1", "role": "viewer"}),
        )
    };
    // Standalone: no replication to report.
    let (s, b, h) = f.call(add("solo")).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert!(b.get("replicated").is_none(), "{b}");
    assert!(h.get(uagate_web::replicated::REPLICATED_HEADER).is_none());

    // Paired, the standby not caught up within the wait.
    let store = f.state.store.clone();
    let start = store
        .replica_state()
        .await
        .unwrap()
        .last_applied
        .map_or(0, |p| p.index + 1);
    store.set_replicator(Some(std::sync::Arc::new(FakePair {
        store: store.clone(),
        next: std::sync::atomic::AtomicU64::new(start),
        leader: true,
    })));
    let (s, b, h) = f.call(add("paired")).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert_eq!(b["replicated"], false, "{b}");
    assert_eq!(h[uagate_web::replicated::REPLICATED_HEADER], "false");
    let (_, users, h) = f.call(get("/api/v1/users", Some(&admin))).await;
    assert!(users.to_string().contains("paired"), "{users}");
    assert!(h.get(uagate_web::replicated::REPLICATED_HEADER).is_none());

    // On the standby: 409, naming the leader and its console.
    store.set_replicator(Some(std::sync::Arc::new(FakePair {
        store: store.clone(),
        next: std::sync::atomic::AtomicU64::new(0),
        leader: false,
    })));
    let (s, b, _) = f.call(add("refused")).await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert_eq!(b["code"], "not_leader", "{b}");
    assert_eq!(b["leader_console"], "https://10.0.0.1:8443/", "{b}");
    assert!(
        b["message"].as_str().unwrap().contains("10.0.0.1:4850"),
        "{b}"
    );
    store.set_replicator(None);
}

/// Refusals decided before a body arrives (no token, a declared length
/// over the limit) reach an HTTP/2 client whose upload is still running
/// (RFC 9113 8.1: the whole answer, then RST_STREAM(NO_ERROR)), and its
/// connection stays usable for the next request.
#[tokio::test]
async fn early_refusals_reach_http2_clients_mid_upload() {
    let f = Fixture::start().await;
    let token = f.token("admin").await;
    let mut h2 = f.http2().await;
    // Larger than the flow-control windows: the upload is still running
    // when the answer is decided.
    let upload = vec![b' '; 4 << 20];
    let put = |token: Option<&str>| {
        let mut req = Request::builder()
            .method(Method::PUT)
            .uri("https://localhost/api/v1/config")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, upload.len());
        if let Some(t) = token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        req.body(Body::from(upload.clone())).unwrap()
    };
    for (token, status, code) in [
        (None, StatusCode::UNAUTHORIZED, "unauthenticated"),
        (
            Some(token.as_str()),
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
        ),
    ] {
        let resp = tokio::time::timeout(Duration::from_secs(20), h2.send_request(put(token)))
            .await
            .expect("answered in time")
            .unwrap_or_else(|e| panic!("no answer to a refused upload ({status}): {e}"));
        assert_eq!(resp.status(), status);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["code"], code, "{body}");
    }
    let status = Request::builder()
        .uri("https://localhost/api/v1/status")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    let resp = h2.send_request(status).await.unwrap();
    assert_eq!(
        resp.status(),
        StatusCode::OK,
        "the connection is still usable"
    );
}

/// Two setup requests with the right code at the same time create one
/// administrator: the second is refused like a spent code.
#[tokio::test]
async fn concurrent_setups_create_one_admin() {
    let f = Fixture::start_with_users(false).await;
    let code = f.state.prepare_setup().await.unwrap().unwrap();
    let setup = |user: &str| {
        json_request(
            Method::POST,
            "/api/v1/setup",
            None,
            json!({"code": code, "username": user, "password": "long enough pw"}),
        )
    };
    let ((s1, b1, _), (s2, b2, _)) = tokio::join!(f.call(setup("root")), f.call(setup("eve")));
    let mut statuses = [s1, s2];
    statuses.sort();
    assert_eq!(
        statuses,
        [StatusCode::OK, StatusCode::FORBIDDEN],
        "{b1} {b2}"
    );
    assert_eq!(f.state.store.list_users().await.unwrap().len(), 1);
    f.stop().await;
}
