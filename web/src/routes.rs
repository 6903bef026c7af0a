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
        .route("/", get(pages::dashboard::show))
        .route("/partials/dashboard", get(pages::dashboard::partial))
        .route("/login", get(pages::login::form).post(pages::login::submit))
        .route(
            "/setup",
            get(pages::login::setup_form).post(pages::login::setup_submit),
        )
        .route("/logout", post(pages::login::logout))
        .route(
            "/limits",
            get(pages::limits::show).post(pages::limits::apply),
        )
        .route("/limits/preview", post(pages::limits::preview))
        .route(
            "/owners",
            get(pages::owners::show).post(pages::owners::save),
        )
        .route("/owners/remove", post(pages::owners::remove))
        .route("/ingress", post(pages::owners::ingress_add))
        .route("/ingress/remove", post(pages::owners::ingress_remove))
        .route(
            "/service-level",
            get(pages::service_level::show).post(pages::service_level::set),
        )
        .route("/service-level/clear", post(pages::service_level::clear))
        .route(
            "/maintenance",
            get(pages::maintenance::show).post(pages::maintenance::submit),
        )
        .route("/certificates", get(pages::certificates::show))
        .route("/certificates/trust", post(pages::certificates::trust))
        .route("/certificates/remove", post(pages::certificates::remove))
        .route("/certificates/crl", post(pages::certificates::crl))
        .route("/certificates/upload", post(pages::certificates::upload))
        .route("/users", get(pages::users::show).post(pages::users::add))
        .route("/users/role", post(pages::users::role))
        .route("/users/password", post(pages::users::password))
        .route("/users/remove", post(pages::users::remove))
        .route("/audit", get(pages::audit::show))
        .route(
            "/fields",
            get(pages::fields::show).post(pages::fields::save),
        )
        .route("/partials/fields", get(pages::fields::partial))
        .route("/fields/remove", post(pages::fields::remove))
        .route("/fields/test", post(pages::fields::test))
        .route("/fields/failover", post(pages::fields::failover))
        .route("/sessions", get(pages::sessions::show))
        .route("/sessions/close", post(pages::sessions::close))
        .route("/static/htmx.min.js", get(pages::assets::htmx))
        .route("/static/console.css", get(pages::assets::css));
    api.merge(pages)
        .fallback(api::not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            access::guard,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(17 << 20))
        .with_state(state)
}
