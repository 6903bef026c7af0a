//! The body of the `rest_body` fuzz target, shared by
//! `fuzz/fuzz_targets/rest_body.rs` (via `#[path]` on `common`) and by
//! `tests/fuzz_smoke.rs` (a bounded loop on stable): arbitrary bytes as the
//! body of a REST call that takes one, sent by an administrator to the
//! real router over a real gateway and SQLite store. The first byte picks
//! the route. What must hold for any body: no panic, no 5xx, a refusal is
//! the JSON error with its `code`, and the gateway still answers after it.
//! Routes that would end the fixture (logout, maintenance, system, pair,
//! user changes by name), reach out to the network (field-test) or are
//! slowed on purpose after failures (login, setup: see `attack.rs` and
//! `api.rs`) are left out.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};

use super::{get, Fixture};

/// The routes fed, with their content type.
pub const ROUTES: &[(&str, &str, &str)] = &[
    ("PUT", "/api/v1/config", "application/json"),
    ("POST", "/api/v1/plan/preview", "application/json"),
    ("PUT", "/api/v1/service-level", "application/json"),
    ("POST", "/api/v1/users", "application/json"),
    ("POST", "/api/v1/owners", "application/json"),
    ("POST", "/api/v1/ingress", "application/json"),
    ("POST", "/api/v1/fields", "application/json"),
    (
        "POST",
        "/api/v1/certificates?kind=trusted",
        "application/octet-stream",
    ),
    ("POST", "/api/v1/crls", "application/octet-stream"),
];

/// A login's token is good for 15 minutes: the fixture logs in again
/// after this long (a fuzzing run lasts longer than a token).
const TOKEN_RENEWAL: std::time::Duration = std::time::Duration::from_secs(10 * 60);

/// The running gateway, its runtime and an admin's token, made once.
pub struct RestFixture {
    pub rt: tokio::runtime::Runtime,
    pub fixture: Fixture,
    admin: std::sync::Mutex<(String, std::time::Instant)>,
}

impl RestFixture {
    /// The admin's token, renewed by a fresh login when it gets old.
    pub async fn admin(&self) -> String {
        let current = self.admin.lock().unwrap().clone();
        if current.1.elapsed() < TOKEN_RENEWAL {
            return current.0;
        }
        let token = self.fixture.token("admin").await;
        *self.admin.lock().unwrap() = (token.clone(), std::time::Instant::now());
        token
    }
}

/// The process's fixture.
pub fn rest_fixture() -> &'static RestFixture {
    static FIXTURE: OnceLock<RestFixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (fixture, admin) = rt.block_on(async {
            let f = Fixture::start().await;
            // The seed CRL's CA, so that CRL uploads get past the check
            // that their issuer is a CA of the trust lists.
            f.state
                .store
                .trust_add(
                    "fuzz",
                    include_bytes!("../../../fuzz/seeds/trust_input/ca.der"),
                    uagate_store::CertKind::Issuer,
                )
                .await
                .unwrap();
            let admin = f.token("admin").await;
            (f, admin)
        });
        RestFixture {
            rt,
            fixture,
            admin: std::sync::Mutex::new((admin, std::time::Instant::now())),
        }
    })
}

/// One call: `data[0]` picks the route, the rest is the body.
pub fn rest_body(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let (method, uri, content_type) = ROUTES[usize::from(pick) % ROUTES.len()];
    call(method, uri, content_type, body.to_vec());
}

/// Sends `body` to `uri` as the admin and checks the answer.
pub fn call(
    method: &str,
    uri: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (StatusCode, serde_json::Value) {
    let r = rest_fixture();
    r.rt.block_on(async {
        let admin = r.admin().await;
        let req = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(uri)
            .header(header::CONTENT_TYPE, content_type)
            .header(header::AUTHORIZATION, format!("Bearer {admin}"))
            .body(Body::from(body))
            .unwrap();
        let (status, answer, _) = r.fixture.call(req).await;
        assert!(
            !status.is_server_error(),
            "{method} {uri}: {status} {answer}"
        );
        if status.is_client_error() && status != StatusCode::PAYLOAD_TOO_LARGE {
            assert!(
                answer.get("code").and_then(|c| c.as_str()).is_some(),
                "{method} {uri}: {status} without the JSON error: {answer}"
            );
        }
        let (alive, _, _) = r.fixture.call(get("/api/v1/status", Some(&admin))).await;
        assert_eq!(
            alive,
            StatusCode::OK,
            "the gateway stopped answering after {method} {uri}"
        );
        (status, answer)
    })
}
