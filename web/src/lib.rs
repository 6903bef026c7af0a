#![forbid(unsafe_code)]
//! `uagate-web`: the operator-facing HTTP side of the appliance: the REST
//! API under `/api/v1` (and, built on it, the browser console).
//!
//! [`app`] builds the router over a [`WebState`]: the store (users, the
//! configuration document, the audit trail), the running engine (status,
//! live reconfiguration), the token keys and the login throttle. Every
//! route except login requires a token; each handler states the least role
//! it needs. Errors are [`ApiError`]s: JSON with a stable code.

pub mod api;
pub mod auth;
pub mod error;
pub mod listener;
pub mod metrics;
pub mod users;

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;
use uagate_server::Engine;
use uagate_store::Store;

pub use auth::{Authed, LoginThrottle, TokenKeys};
pub use error::ApiError;
pub use listener::serve_tls;

/// What every handler shares; cheap to clone.
#[derive(Clone)]
pub struct WebState {
    /// The configuration store (users, documents, change log).
    pub store: Store,
    /// The running gateway.
    pub engine: Arc<Engine>,
    /// Signs and checks tokens.
    pub keys: Arc<TokenKeys>,
    /// Failed-login counting.
    pub throttle: Arc<LoginThrottle>,
    /// The one-time code that lets the first administrator be created;
    /// set while the store has no user (see [`WebState::prepare_setup`]).
    pub setup_code: Arc<parking_lot::Mutex<Option<String>>>,
}

impl WebState {
    /// State for the console of `engine`, with token keys from `data_dir`.
    pub fn new(
        store: Store,
        engine: Arc<Engine>,
        data_dir: &std::path::Path,
    ) -> std::io::Result<WebState> {
        Ok(WebState {
            store,
            engine,
            keys: Arc::new(TokenKeys::load_or_create(data_dir)?),
            throttle: Arc::new(LoginThrottle::default()),
            setup_code: Arc::default(),
        })
    }

    /// Called once when the console starts: when no user exists yet, makes
    /// a one-time setup code (printed to the log by the caller) with which
    /// `POST /api/v1/setup` creates the first admin. `None` once users exist.
    pub async fn prepare_setup(&self) -> Result<Option<String>, uagate_store::StoreError> {
        if !self.store.list_users().await?.is_empty() {
            return Ok(None);
        }
        let code = hex::encode(rand::random::<[u8; 8]>());
        *self.setup_code.lock() = Some(code.clone());
        Ok(Some(code))
    }
}

/// The router of the REST API. Serve it with
/// `into_make_service_with_connect_info::<SocketAddr>()` so login
/// throttling sees the client's address.
pub fn app(state: WebState) -> Router {
    Router::new()
        .route("/api/v1/login", post(api::login))
        .route("/api/v1/setup", post(api::setup))
        .route("/api/v1/status", get(api::status))
        .route("/api/v1/plan", get(api::plan))
        .route("/api/v1/config", get(api::get_config).put(api::put_config))
        .route("/api/v1/maintenance", post(api::maintenance))
        .route(
            "/api/v1/service-level",
            axum::routing::put(api::service_level),
        )
        .route("/api/v1/users", get(users::list).post(users::add))
        .route(
            "/api/v1/users/{name}",
            axum::routing::put(users::change).delete(users::remove),
        )
        .route("/api/v1/audit", get(users::audit))
        .route("/metrics", get(metrics::metrics))
        .fallback(api::not_found)
        .with_state(state)
}
