//! The fixture the router tests share: a real gateway on 127.0.0.1
//! (ephemeral ports) with a real SQLite store, and the router over it.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

pub mod fuzz_harness;

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;
use uagate_store::{Role, Store};
use uagate_web::{app, WebState};

/// A running gateway with users admin/operator/viewer (password
/// `correct horse <role>`), and the router over it.
pub struct Fixture {
    pub state: WebState,
    data: std::path::PathBuf,
    gateway: Option<uagate_server::Gateway>,
    _tmp: tempfile::TempDir,
}

impl Fixture {
    pub async fn start() -> Fixture {
        Self::start_with_users(true).await
    }

    pub async fn start_with_users(users: bool) -> Fixture {
        Self::start_with(users, "").await
    }

    pub async fn start_with(users: bool, extra: &str) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("uagate.db")).await.unwrap();
        let users: &[(&str, Role)] = if users {
            &[
                ("admin", Role::Admin),
                ("operator", Role::Operator),
                ("viewer", Role::Viewer),
            ]
        } else {
            &[]
        };
        for &(name, role) in users {
            store
                .add_user("test", name, &format!("correct horse {name}"), role)
                .await
                .unwrap();
        }
        let data = tmp.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let config = uagate_config::Config::from_toml(&format!(
            "[listen]\nopc_tcp = \"127.0.0.1:0\"\ntls = \"127.0.0.1:0\"\n{extra}"
        ))
        .unwrap();
        let gateway = tokio::time::timeout(
            Duration::from_secs(20),
            uagate_server::start(config, store.clone(), &data),
        )
        .await
        .expect("gateway starts in time")
        .expect("gateway starts");
        let state = WebState::new(store, gateway.engine.clone(), &data).unwrap();
        Fixture {
            state,
            data,
            gateway: Some(gateway),
            _tmp: tmp,
        }
    }

    /// Serves the console (`app` as `uagate run` serves it, TLS and all)
    /// on a loopback port and returns an HTTP/2 connection to it, the
    /// gateway's own certificate trusted. The server ends with the fixture's
    /// runtime.
    pub async fn http2(&self) -> hyper::client::conn::http2::SendRequest<Body> {
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
        use tokio_rustls::rustls::{ClientConfig, RootCertStore};
        let engine = &self.gateway.as_ref().expect("gateway runs").engine;
        let tls = engine.tls_server_config().expect("TLS configured");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(uagate_web::serve_tls(
            listener,
            tls,
            app(self.state.clone()),
            tokio_util::sync::CancellationToken::new(),
        ));
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(self.data.join("tls/cert.pem")).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        let provider = std::sync::Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec()];
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(b"h2".as_slice()));
        let (send, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(tls),
        )
        .await
        .unwrap();
        tokio::spawn(conn);
        send
    }

    /// The gateway's data directory.
    pub fn data_dir(&self) -> &std::path::Path {
        &self.data
    }

    pub async fn call(&self, req: Request<Body>) -> (StatusCode, Value, axum::http::HeaderMap) {
        self.call_from([127, 0, 0, 7], req).await
    }

    /// As if the request came from `ip` (login throttling counts per address).
    pub async fn call_from(
        &self,
        ip: [u8; 4],
        req: Request<Body>,
    ) -> (StatusCode, Value, axum::http::HeaderMap) {
        let mut req = req;
        req.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from((ip, 40000))));
        let resp = app(self.state.clone()).oneshot(req).await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        (status, body, headers)
    }

    pub async fn login(&self, user: &str, password: &str) -> (StatusCode, Value) {
        let (s, b, _) = self
            .call(json_request(
                Method::POST,
                "/api/v1/login",
                None,
                json!({"username": user, "password": password}),
            ))
            .await;
        (s, b)
    }

    pub async fn token(&self, role: &str) -> String {
        let (s, b) = self.login(role, &format!("correct horse {role}")).await;
        assert_eq!(s, StatusCode::OK, "{b}");
        b["token"].as_str().unwrap().to_string()
    }

    /// `PUT /api/v1/config` with `doc`, as the holder of `token`.
    pub async fn put_config(&self, token: &str, doc: Value) -> (StatusCode, Value) {
        let (s, b, _) = self
            .call(json_request(
                Method::PUT,
                "/api/v1/config",
                Some(token),
                doc,
            ))
            .await;
        (s, b)
    }

    pub async fn stop(mut self) {
        if let Some(gw) = self.gateway.take() {
            gw.shutdown().await;
        }
    }
}

pub fn json_request(method: Method, uri: &str, token: Option<&str>, body: Value) -> Request<Body> {
    let mut b = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(t) = token {
        b = b.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    b.body(Body::from(body.to_string())).unwrap()
}

pub fn get(uri: &str, token: Option<&str>) -> Request<Body> {
    let mut b = Request::builder().uri(uri);
    if let Some(t) = token {
        b = b.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    b.body(Body::empty()).unwrap()
}
