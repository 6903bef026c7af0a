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
pub mod openapi;
pub mod ops;
pub mod pages;
pub mod rest;
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
    /// Serialises changes of the configuration document, so two editors
    /// never lose each other's change.
    pub config_lock: Arc<tokio::sync::Mutex<()>>,
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
            config_lock: Arc::default(),
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

/// The router of the console and the REST API. Serve it with the
/// client's address as a `ConnectInfo` extension (see [`serve_tls`]) so
/// login throttling sees it.
pub fn app(state: WebState) -> Router {
    use axum::routing::{delete, put};
    let api = Router::new()
        .route("/api/v1/login", post(api::login))
        .route("/api/v1/setup", post(api::setup))
        .route("/api/v1/logout", post(api::logout))
        .route("/api/v1/status", get(api::status))
        .route("/api/v1/plan", get(api::plan))
        .route("/api/v1/plan/preview", post(api::preview_plan))
        .route("/api/v1/config", get(api::get_config).put(api::put_config))
        .route("/api/v1/maintenance", post(api::maintenance))
        .route("/api/v1/service-level", put(api::service_level))
        .route("/api/v1/users", get(users::list).post(users::add))
        .route(
            "/api/v1/users/{name}",
            put(users::change).delete(users::remove),
        )
        .route("/api/v1/audit", get(users::audit))
        .route("/api/v1/owners", get(rest::owners).post(rest::owner_put))
        .route("/api/v1/owners/{key}", delete(rest::owner_delete))
        .route(
            "/api/v1/ingress",
            get(rest::ingress).post(rest::ingress_add),
        )
        .route("/api/v1/ingress/{index}", delete(rest::ingress_delete))
        .route(
            "/api/v1/certificates",
            get(rest::certificates).post(rest::certificate_add),
        )
        .route(
            "/api/v1/certificates/{thumbprint}",
            delete(rest::certificate_delete),
        )
        .route(
            "/api/v1/certificates/{thumbprint}/trust",
            post(rest::certificate_trust),
        )
        .route("/api/v1/crls", post(rest::crl_add))
        .route("/api/v1/fields", get(rest::fields).post(rest::field_put))
        .route("/api/v1/fields/{name}", delete(rest::field_delete))
        .route("/api/v1/fields/{name}/history", get(rest::field_history))
        .route("/api/v1/fields/{name}/test", post(rest::field_test))
        .route("/api/v1/fields/{name}/failover", post(rest::field_failover))
        .route("/api/v1/sessions", get(rest::sessions))
        .route("/api/v1/sessions/{id}", delete(rest::session_delete))
        .route("/api/v1/openapi.json", get(openapi::document))
        .route("/metrics", get(metrics::metrics));
    let pages = Router::new()
        .route("/", get(pages::dashboard))
        .route("/partials/dashboard", get(pages::dashboard_partial))
        .route("/login", get(pages::login_form).post(pages::login_submit))
        .route("/setup", get(pages::setup_form).post(pages::setup_submit))
        .route("/logout", post(pages::logout))
        .route("/limits", get(pages::limits).post(pages::limits_apply))
        .route("/limits/preview", post(pages::limits_preview))
        .route("/owners", get(pages::owners).post(pages::owner_save))
        .route("/owners/remove", post(pages::owner_remove))
        .route("/ingress", post(pages::ingress_add))
        .route("/ingress/remove", post(pages::ingress_remove))
        .route(
            "/service-level",
            get(pages::service_level).post(pages::service_level_set),
        )
        .route("/service-level/clear", post(pages::service_level_clear))
        .route(
            "/maintenance",
            get(pages::maintenance).post(pages::maintenance_submit),
        )
        .route("/certificates", get(pages::certificates))
        .route("/certificates/trust", post(pages::certificate_trust))
        .route("/certificates/remove", post(pages::certificate_remove))
        .route("/certificates/crl", post(pages::certificate_crl))
        .route("/certificates/upload", post(pages::certificate_upload))
        .route("/users", get(pages::users).post(pages::user_add))
        .route("/users/role", post(pages::user_role))
        .route("/users/password", post(pages::user_password))
        .route("/users/remove", post(pages::user_remove))
        .route("/audit", get(pages::audit))
        .route("/fields", get(pages::fields).post(pages::field_save))
        .route("/partials/fields", get(pages::fields_partial))
        .route("/fields/remove", post(pages::field_remove))
        .route("/fields/test", post(pages::field_test))
        .route("/fields/failover", post(pages::field_failover))
        .route("/sessions", get(pages::sessions))
        .route("/sessions/close", post(pages::session_close))
        .route("/static/htmx.min.js", get(pages::htmx))
        .route("/static/console.css", get(pages::css));
    api.merge(pages)
        .fallback(api::not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::guard,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(17 << 20))
        .with_state(state)
}
