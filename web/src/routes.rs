//! The router of the console and the REST API: every route, its handler,
//! and the middleware around them.

use axum::routing::{delete, get, post, put};
use axum::Router;

use crate::state::WebState;
use crate::{access, api, metrics, openapi, pages, rest, users};

/// The router of the console and the REST API. Serve it with the
/// client's address as a `ConnectInfo` extension (see [`crate::serve_tls`]) so
/// login throttling sees it.
pub fn app(state: WebState) -> Router {
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
            access::guard,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(17 << 20))
        .with_state(state)
}
