//! The console's attack surface (issue 21 item 5), against the real router
//! over a real gateway and SQLite store: forged tokens, path traversal,
//! oversized bodies, security headers on every kind of response, and no
//! secret in the log. Login throttling is in `api.rs`, CSRF in `console.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use base64::Engine as _;
use common::{get, json_request, Fixture};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use uagate_web::headers::{CONTENT_SECURITY_POLICY, STRICT_TRANSPORT_SECURITY};

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Claims shaped like the console's own, for `admin` whose credential
/// stamp (see `Store::user_standing`) is `cred`.
fn claims(exp: u64, cred: &str) -> Value {
    let t = now();
    json!({"sub": "admin", "role": "admin", "cred": cred,
           "sid": "00112233445566778899aabbccddeeff", "auth": t, "iat": t, "exp": exp})
}

fn b64(v: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v)
}

#[tokio::test]
async fn forged_expired_unsigned_and_foreign_tokens_are_refused() {
    let f = Fixture::start().await;
    let secret = std::fs::read(f.data_dir().join("console/jwt.key")).unwrap();
    let key = EncodingKey::from_secret(&secret);
    let cred = f
        .state
        .store
        .user_standing("admin")
        .await
        .unwrap()
        .unwrap()
        .stamp;
    // The control: a token made here with the gateway's key is accepted,
    // so every refusal below is for the one thing changed.
    let good = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims(now() + 600, &cred),
        &key,
    )
    .unwrap();
    let (s, b, _) = f.call(get("/api/v1/status", Some(&good))).await;
    assert_eq!(s, StatusCode::OK, "{b}");

    let mut refused: Vec<(&str, String)> = Vec::new();
    // Expired a minute ago (no leeway).
    refused.push((
        "expired",
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims(now() - 60, &cred),
            &key,
        )
        .unwrap(),
    ));
    // A session begun before the password was last set (another
    // credential stamp), and one from before stamps existed (none).
    refused.push((
        "older password",
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims(now() + 600, &"0".repeat(32)),
            &key,
        )
        .unwrap(),
    ));
    let mut unstamped = claims(now() + 600, &cred);
    unstamped.as_object_mut().unwrap().remove("cred");
    refused.push((
        "no credential stamp",
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &unstamped, &key).unwrap(),
    ));
    // `alg: none`, no signature.
    let body = b64(claims(now() + 600, &cred).to_string().as_bytes());
    refused.push((
        "alg none",
        format!("{}.{body}.", b64(br#"{"alg":"none","typ":"JWT"}"#)),
    ));
    // Another HMAC algorithm with the right key.
    refused.push((
        "HS512",
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS512),
            &claims(now() + 600, &cred),
            &key,
        )
        .unwrap(),
    ));
    // Another key.
    refused.push((
        "other key",
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims(now() + 600, &cred),
            &EncodingKey::from_secret(&[9u8; 32]),
        )
        .unwrap(),
    ));
    // A viewer's real token with its payload changed to admin.
    let viewer = f.token("viewer").await;
    let parts: Vec<&str> = viewer.split('.').collect();
    let payload: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(parts[1])
            .unwrap(),
    )
    .unwrap();
    let mut promoted = payload.clone();
    promoted["role"] = json!("admin");
    refused.push((
        "payload changed",
        format!(
            "{}.{}.{}",
            parts[0],
            b64(promoted.to_string().as_bytes()),
            parts[2]
        ),
    ));
    // Garbage and a truncated signature.
    refused.push(("garbage", "a.b.c".into()));
    refused.push(("truncated", viewer[..viewer.len() - 4].to_string()));
    for (what, token) in &refused {
        let (s, b, _) = f.call(get("/api/v1/status", Some(token))).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{what}: {b}");
        assert_eq!(b["code"], "unauthenticated", "{what}");
        // The same token as the console's cookie does not open a page.
        let req = Request::builder()
            .uri("/users")
            .header(header::COOKIE, format!("uagate_token={token}"))
            .body(Body::empty())
            .unwrap();
        let (s, _, h) = f.call(req).await;
        assert!(
            s == StatusCode::SEE_OTHER || s == StatusCode::UNAUTHORIZED,
            "{what} as a cookie: {s}"
        );
        if s == StatusCode::SEE_OTHER {
            let to = h.get(header::LOCATION).unwrap().to_str().unwrap();
            assert!(to.starts_with("/login"), "{what}: redirected to {to}");
        }
    }
    f.stop().await;
}

#[tokio::test]
async fn static_files_cannot_be_reached_around() {
    let f = Fixture::start().await;
    let (s, b, _) = f.call(get("/static/console.css", None)).await;
    assert_eq!(s, StatusCode::OK);
    assert!(b.as_str().is_some_and(|css| css.contains(".legend")));
    for uri in [
        "/static/../uagate.db",
        "/static/%2e%2e/%2e%2e/etc/passwd",
        "/static/..%2f..%2fetc%2fpasswd",
        "/static/..%5c..%5cuagate.db",
        "/static/console.css/../../console/jwt.key",
        "/static//etc/passwd",
        "/../../etc/passwd",
        "/console/jwt.key",
        "/static/%00console.css",
    ] {
        let (s, b, _) = f.call(get(uri, None)).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{uri}: {b}");
        let text = b.to_string();
        assert!(!text.contains("root:"), "{uri}: {text}");
    }
    f.stop().await;
}

#[tokio::test]
async fn oversized_bodies_are_refused_before_a_handler_reads_them() {
    let f = Fixture::start().await;
    let admin = f.token("admin").await;
    let big = "x".repeat(2 << 20);
    // A JSON body past 1 MiB, with a valid token.
    let (s, b, _) = f
        .call(json_request(
            Method::PUT,
            "/api/v1/config",
            Some(&admin),
            json!({"padding": big}),
        ))
        .await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE, "{b}");
    // The login, before any password check.
    let (s, _, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/login",
            None,
            json!({"username": "admin", "password": big}),
        ))
        .await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    // A form post.
    let req = Request::builder()
        .method(Method::POST)
        .uri("/login")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("username=admin&password={big}")))
        .unwrap();
    let (s, _, _) = f.call(req).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    // A certificate upload may be larger than a form (a CRL of a large CA),
    // and is judged by its content: 2 MiB of garbage is refused as not a
    // certificate, not for its size.
    let req = Request::builder()
        .method(Method::POST)
        .uri("/api/v1/certificates?kind=trusted")
        .header(header::AUTHORIZATION, format!("Bearer {admin}"))
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .body(Body::from(vec![0x30u8; 2 << 20]))
        .unwrap();
    let (s, b, _) = f.call(req).await;
    assert!(
        s.is_client_error() && s != StatusCode::PAYLOAD_TOO_LARGE,
        "{s}: {b}"
    );
    // The gateway is still fine, and nothing was changed.
    let (s, b, _) = f.call(get("/api/v1/config", Some(&admin))).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert!(b.get("padding").is_none());
    f.stop().await;
}

#[tokio::test]
async fn every_kind_of_response_carries_the_security_headers() {
    let f = Fixture::start().await;
    let viewer = f.token("viewer").await;
    let cookie = |uri: &str| {
        Request::builder()
            .uri(uri)
            .header(header::COOKIE, format!("uagate_token={viewer}"))
            .body(Body::empty())
            .unwrap()
    };
    let cases: Vec<(&str, Request<Body>)> = vec![
        ("login page", get("/login", None)),
        ("a page", cookie("/")),
        ("a partial", cookie("/partials/system")),
        ("a page without a session", get("/users", None)),
        ("a role too low", cookie("/users")),
        ("static", get("/static/htmx.min.js", None)),
        ("REST", get("/api/v1/status", Some(&viewer))),
        ("REST 401", get("/api/v1/status", None)),
        ("404", get("/no/such/page", None)),
        (
            "413",
            json_request(
                Method::POST,
                "/api/v1/login",
                None,
                json!({"username": "x", "password": "y".repeat(2 << 20)}),
            ),
        ),
        ("metrics", get("/metrics", Some(&viewer))),
    ];
    for (what, req) in cases {
        let (s, _, h) = f.call(req).await;
        let value = |name: header::HeaderName| {
            h.get(&name)
                .unwrap_or_else(|| panic!("{what} ({s}): no {name}"))
                .to_str()
                .unwrap()
                .to_string()
        };
        let csp = value(header::CONTENT_SECURITY_POLICY);
        assert_eq!(csp, CONTENT_SECURITY_POLICY, "{what}");
        assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"));
        assert!(csp.contains("frame-ancestors 'none'"));
        assert_eq!(value(header::X_FRAME_OPTIONS), "DENY", "{what}");
        assert_eq!(value(header::X_CONTENT_TYPE_OPTIONS), "nosniff", "{what}");
        assert_eq!(value(header::REFERRER_POLICY), "same-origin", "{what}");
        assert_eq!(
            value(header::STRICT_TRANSPORT_SECURITY),
            STRICT_TRANSPORT_SECURITY,
            "{what}"
        );
    }
    // And the pages hold no inline script or style for the policy to block.
    for uri in [
        "/",
        "/fields",
        "/maintenance",
        "/system",
        "/limits",
        "/certificates",
    ] {
        let (s, b, _) = f.call(cookie(uri)).await;
        assert_eq!(s, StatusCode::OK, "{uri}");
        let html = b.as_str().unwrap();
        for inline in ["<script>", " onsubmit=", " onclick=", " style=", "<style"] {
            assert!(!html.contains(inline), "{uri} has {inline}");
        }
    }
    f.stop().await;
}

/// A `MakeWriter` that keeps everything logged, for the test to read.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

#[tokio::test]
async fn refusals_are_logged_without_the_secrets() {
    let log = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(log.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let f = Fixture::start().await;
    let wrong = "Tr0ub4dor&3-not-the-password";
    // Wrong passwords up to and past the lockout.
    for _ in 0..6 {
        let body = json!({"username": "admin", "password": wrong});
        f.call_from(
            [127, 0, 3, 1],
            json_request(Method::POST, "/api/v1/login", None, body),
        )
        .await;
    }
    let token = f.token("admin").await;
    let forged = format!("{}x", &token[..token.len() - 1]);
    let (s, _, _) = f.call(get("/api/v1/status", Some(&forged))).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // A user added with a password, and a setup attempt with a wrong code.
    let (s, b, _) = f
        .call(json_request(
            Method::POST,
            "/api/v1/users",
            Some(&token),
            json!({"username": "newop", "password": "s3cret-new-user-pw", "role": "operator"}),
        ))
        .await;
    assert!(s.is_success(), "{s}: {b}");
    f.call(json_request(
        Method::POST,
        "/api/v1/setup",
        None,
        json!({"code": "c0de-guess-123", "username": "x", "password": "setup-secret-pw"}),
    ))
    .await;
    f.stop().await;
    let text = String::from_utf8_lossy(&log.0.lock().unwrap()).into_owned();
    assert!(
        text.contains("console login refused"),
        "the refusals are logged: {text}"
    );
    assert!(
        text.contains("console setup refused: wrong or expired setup code")
            && text.contains("client=127.0.0.7"),
        "a wrong setup code is logged with who sent it: {text}"
    );
    for secret in [
        wrong,
        &token,
        &forged,
        "s3cret-new-user-pw",
        "setup-secret-pw",
        "c0de-guess-123",
    ] {
        assert!(!text.contains(secret), "the log holds a secret: {secret}");
    }
}
