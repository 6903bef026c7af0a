//! The router of the console and the REST API, built from one [`table`]:
//! every route's method and path, its handler, and the least role it
//! needs. That table is the only place a route's role is stated: the
//! router puts every route that needs a login behind the role check of
//! [`crate::access`], which refuses a caller below the route's role before
//! the handler runs (401 without a valid token, 403 `forbidden` for a role
//! too low), and the OpenAPI document's `x-uagate-role` is read from it.

use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::{Json, Router};
use serde_json::Value;
use uagate_store::Role;

use crate::access::{self, Access, Refusal};
use crate::api;
use crate::auth::Authed;
use crate::error::ApiError;
use crate::metrics;
use crate::openapi;
use crate::pages::{self, audit, certificates, dashboard, fields, limits, login, maintenance};
use crate::pages::{
    assets, owners, pair as pair_page, service_level, sessions, system, users as user_pages,
};
use crate::rest;
use crate::state::WebState;
use crate::users;

/// No token needed.
const PUBLIC: Access = Access::Public;
/// Any logged-in user.
const VIEWER: Access = Access::AtLeast(Role::Viewer);
/// An operator or an admin.
const OPERATOR: Access = Access::AtLeast(Role::Operator);
/// An admin.
const ADMIN: Access = Access::AtLeast(Role::Admin);

/// The methods the console routes.
#[derive(Debug, Clone, Copy)]
enum Verb {
    Get,
    Post,
    Put,
    Delete,
}

use Verb::{Delete as DELETE, Get as GET, Post as POST, Put as PUT};

impl Verb {
    fn method(self) -> Method {
        match self {
            Verb::Get => Method::GET,
            Verb::Post => Method::POST,
            Verb::Put => Method::PUT,
            Verb::Delete => Method::DELETE,
        }
    }

    fn filter(self) -> MethodFilter {
        match self {
            Verb::Get => MethodFilter::GET,
            Verb::Post => MethodFilter::POST,
            Verb::Put => MethodFilter::PUT,
            Verb::Delete => MethodFilter::DELETE,
        }
    }
}

/// Whether a route is part of the REST API or of the console; it decides
/// how a refusal is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// REST (and `/metrics`): a refusal is the JSON error.
    Api,
    /// A console page or form: without a session the login page; a role
    /// too low the error page, or the page re-rendered around the error.
    Page,
}

/// One route of [`table`].
pub struct Route {
    /// The method (`GET` also answers `HEAD`).
    pub method: Method,
    /// The path, with `{parameters}`.
    pub path: &'static str,
    /// Who may call it.
    pub access: Access,
    /// REST or console.
    pub kind: Kind,
    refusal: Refusal,
    endpoint: MethodRouter<WebState>,
}

/// A REST route.
fn api<H, T>(verb: Verb, path: &'static str, access: Access, handler: H) -> Route
where
    H: Handler<T, WebState>,
    T: 'static,
{
    Route {
        method: verb.method(),
        path,
        access,
        kind: Kind::Api,
        refusal: Refusal::json(),
        endpoint: on(verb.filter(), handler),
    }
}

/// A console route; a role too low gets the error page unless
/// [`Route::shown_by`] names the page to show it on.
fn page<H, T>(verb: Verb, path: &'static str, access: Access, handler: H) -> Route
where
    H: Handler<T, WebState>,
    T: 'static,
{
    Route {
        method: verb.method(),
        path,
        access,
        kind: Kind::Page,
        refusal: pages::refusal(),
        endpoint: on(verb.filter(), handler),
    }
}

impl Route {
    /// A console form whose refusal for a role too low is `shown`: the
    /// page the form is on, re-rendered with the error above it.
    fn shown_by<F, Fut>(mut self, shown: F) -> Route
    where
        F: Fn(WebState, Authed, ApiError, axum::extract::Request) -> Fut
            + Clone
            + Send
            + Sync
            + 'static,
        Fut: std::future::Future<Output = axum::response::Response> + Send + 'static,
    {
        self.refusal = pages::refusal_on(shown);
        self
    }

    /// A route that receives a certificate or a CRL: up to
    /// [`MAX_CERTIFICATE_BODY`] (a large CA's CRL), past [`MAX_BODY`].
    fn certificate_upload(mut self) -> Route {
        self.endpoint = self
            .endpoint
            .layer(axum::extract::DefaultBodyLimit::max(MAX_CERTIFICATE_BODY));
        self
    }

    /// A route that receives an update bundle: its body may be as large
    /// as [`uagate_system::MAX_BUNDLE_BYTES`] (plus a multipart form's
    /// framing), past the router's default limit.
    fn uploads(mut self) -> Route {
        let limit = uagate_system::MAX_BUNDLE_BYTES + (1 << 20);
        self.endpoint = self.endpoint.layer(axum::extract::DefaultBodyLimit::max(
            usize::try_from(limit).unwrap_or(usize::MAX),
        ));
        self
    }
}

/// Largest request body of any route not marked otherwise (forms, JSON,
/// the configuration document): larger ones are refused with 413 before a
/// handler reads them.
pub const MAX_BODY: usize = 1 << 20;

/// Largest body of a certificate or CRL upload (16 MiB of file and the
/// multipart framing).
pub const MAX_CERTIFICATE_BODY: usize = 17 << 20;

/// Every route of the console and the REST API with the least role it
/// needs (see docs/console.md). Roles: viewer < operator < admin.
pub fn table() -> Vec<Route> {
    vec![
        // REST API: JSON in and out, errors as JSON.
        api(POST, "/api/v1/login", PUBLIC, api::login),
        api(POST, "/api/v1/setup", PUBLIC, api::setup),
        api(POST, "/api/v1/logout", VIEWER, api::logout),
        api(GET, "/api/v1/status", VIEWER, api::status),
        api(GET, "/api/v1/pair", VIEWER, api::pair),
        api(GET, "/api/v1/plan", VIEWER, api::plan),
        api(POST, "/api/v1/plan/preview", VIEWER, api::preview_plan),
        api(GET, "/api/v1/config", VIEWER, api::get_config),
        api(PUT, "/api/v1/config", ADMIN, api::put_config),
        api(POST, "/api/v1/maintenance", OPERATOR, api::maintenance),
        api(PUT, "/api/v1/service-level", OPERATOR, api::service_level),
        api(GET, "/api/v1/users", ADMIN, users::list),
        api(POST, "/api/v1/users", ADMIN, users::add),
        api(PUT, "/api/v1/users/{name}", ADMIN, users::change),
        api(DELETE, "/api/v1/users/{name}", ADMIN, users::remove),
        api(GET, "/api/v1/audit", ADMIN, users::audit),
        api(GET, "/api/v1/owners", VIEWER, rest::owners),
        api(POST, "/api/v1/owners", ADMIN, rest::owner_put),
        api(DELETE, "/api/v1/owners/{key}", ADMIN, rest::owner_delete),
        api(GET, "/api/v1/ingress", VIEWER, rest::ingress),
        api(POST, "/api/v1/ingress", ADMIN, rest::ingress_add),
        api(
            DELETE,
            "/api/v1/ingress/{index}",
            ADMIN,
            rest::ingress_delete,
        ),
        api(GET, "/api/v1/certificates", VIEWER, rest::certificates),
        api(
            POST,
            "/api/v1/certificates",
            OPERATOR,
            rest::certificate_add,
        )
        .certificate_upload(),
        api(
            DELETE,
            "/api/v1/certificates/{thumbprint}",
            OPERATOR,
            rest::certificate_delete,
        ),
        api(
            POST,
            "/api/v1/certificates/{thumbprint}/trust",
            OPERATOR,
            rest::certificate_trust,
        ),
        api(GET, "/api/v1/crls", VIEWER, rest::crls),
        api(POST, "/api/v1/crls", OPERATOR, rest::crl_add).certificate_upload(),
        api(GET, "/api/v1/fields", VIEWER, rest::fields),
        api(POST, "/api/v1/fields", OPERATOR, rest::field_put),
        api(POST, "/api/v1/field-test", OPERATOR, rest::field_test_entry),
        api(
            DELETE,
            "/api/v1/fields/{name}",
            OPERATOR,
            rest::field_delete,
        ),
        api(
            GET,
            "/api/v1/fields/{name}/history",
            VIEWER,
            rest::field_history,
        ),
        api(
            POST,
            "/api/v1/fields/{name}/test",
            OPERATOR,
            rest::field_test,
        ),
        api(
            POST,
            "/api/v1/fields/{name}/failover",
            OPERATOR,
            rest::field_failover,
        ),
        api(
            POST,
            "/api/v1/fields/{name}/reconnect",
            OPERATOR,
            rest::field_reconnect,
        ),
        api(GET, "/api/v1/sessions", VIEWER, rest::sessions),
        api(
            DELETE,
            "/api/v1/sessions/{id}",
            OPERATOR,
            rest::session_delete,
        ),
        api(GET, "/api/v1/system", VIEWER, rest::system),
        api(POST, "/api/v1/system/update", ADMIN, rest::system_update).uploads(),
        api(POST, "/api/v1/system/reboot", ADMIN, rest::system_reboot),
        api(GET, "/api/v1/openapi.json", PUBLIC, openapi_document),
        api(GET, "/metrics", VIEWER, metrics::metrics),
        // Console pages and their forms.
        page(GET, "/", VIEWER, dashboard::show),
        page(GET, "/partials/dashboard", VIEWER, dashboard::partial),
        page(GET, "/partials/usage", VIEWER, pages::usage::partial),
        page(GET, "/login", PUBLIC, login::form),
        page(POST, "/login", PUBLIC, login::submit),
        page(GET, "/setup", PUBLIC, login::setup_form),
        page(POST, "/setup", PUBLIC, login::setup_submit),
        page(POST, "/logout", PUBLIC, login::logout),
        page(GET, "/limits", VIEWER, limits::show),
        page(POST, "/limits", ADMIN, limits::apply).shown_by(limits::refused),
        page(POST, "/limits/preview", VIEWER, limits::preview),
        page(GET, "/owners", VIEWER, owners::show),
        page(POST, "/owners", ADMIN, owners::save).shown_by(owners::refused),
        page(POST, "/owners/remove", ADMIN, owners::remove).shown_by(owners::refused),
        page(POST, "/ingress", ADMIN, owners::ingress_add).shown_by(owners::refused),
        page(POST, "/ingress/remove", ADMIN, owners::ingress_remove).shown_by(owners::refused),
        page(GET, "/service-level", VIEWER, service_level::show),
        page(POST, "/service-level", OPERATOR, service_level::set).shown_by(service_level::refused),
        page(POST, "/service-level/clear", OPERATOR, service_level::clear)
            .shown_by(service_level::refused),
        page(GET, "/maintenance", VIEWER, maintenance::show),
        page(POST, "/maintenance", OPERATOR, maintenance::submit).shown_by(maintenance::refused),
        page(GET, "/pair", VIEWER, pair_page::show),
        page(POST, "/pair/invite", ADMIN, pair_page::invite).shown_by(pair_page::refused),
        page(POST, "/pair/join", ADMIN, pair_page::join).shown_by(pair_page::refused),
        page(POST, "/pair/leave", ADMIN, pair_page::leave).shown_by(pair_page::refused),
        page(POST, "/pair/promote", ADMIN, pair_page::promote).shown_by(pair_page::refused),
        page(
            POST,
            "/pair/diverged/clear",
            ADMIN,
            pair_page::clear_diverged,
        )
        .shown_by(pair_page::refused),
        page(GET, "/certificates", VIEWER, certificates::show),
        page(POST, "/certificates/trust", OPERATOR, certificates::trust)
            .shown_by(certificates::refused),
        page(POST, "/certificates/remove", OPERATOR, certificates::remove)
            .shown_by(certificates::refused),
        page(POST, "/certificates/crl", OPERATOR, certificates::crl)
            .certificate_upload()
            .shown_by(certificates::refused),
        page(POST, "/certificates/upload", OPERATOR, certificates::upload)
            .certificate_upload()
            .shown_by(certificates::refused),
        page(GET, "/users", ADMIN, user_pages::show),
        page(POST, "/users", ADMIN, user_pages::add),
        page(POST, "/users/role", ADMIN, user_pages::role),
        page(POST, "/users/password", ADMIN, user_pages::password),
        page(POST, "/users/remove", ADMIN, user_pages::remove),
        page(GET, "/audit", ADMIN, audit::show),
        page(GET, "/audit.csv", ADMIN, audit::export_csv),
        page(GET, "/fields", VIEWER, fields::show),
        page(POST, "/fields", OPERATOR, fields::save).shown_by(fields::refused),
        page(GET, "/partials/fields", VIEWER, fields::partial),
        page(POST, "/fields/remove", OPERATOR, fields::remove).shown_by(fields::refused),
        page(POST, "/fields/test", OPERATOR, fields::test).shown_by(fields::refused),
        page(POST, "/fields/check", OPERATOR, fields::check).shown_by(fields::refused),
        page(POST, "/fields/failover", OPERATOR, fields::failover).shown_by(fields::refused),
        page(POST, "/fields/reconnect", OPERATOR, fields::reconnect).shown_by(fields::refused),
        page(GET, "/sessions", VIEWER, sessions::show),
        page(POST, "/sessions/close", OPERATOR, sessions::close).shown_by(sessions::refused),
        page(GET, "/system", VIEWER, system::show),
        page(GET, "/partials/system", VIEWER, system::partial),
        page(POST, "/system/update", ADMIN, system::update)
            .uploads()
            .shown_by(system::refused),
        page(POST, "/system/reboot", ADMIN, system::reboot).shown_by(system::refused),
        page(GET, "/static/htmx.min.js", PUBLIC, assets::htmx),
        page(GET, "/static/console.css", PUBLIC, assets::css),
        page(GET, "/static/console.js", PUBLIC, assets::script),
        page(GET, "/static/favicon.svg", PUBLIC, assets::favicon),
        page(GET, "/favicon.ico", PUBLIC, assets::favicon),
    ]
}

/// `GET /api/v1/openapi.json` (no token needed: it describes, it holds
/// nothing); each operation's `x-uagate-role` is its access in [`table`].
async fn openapi_document() -> Json<Value> {
    let table = table();
    Json(openapi::build(|method, path| {
        table
            .iter()
            .find(|r| r.path == path && r.method.as_str().eq_ignore_ascii_case(method))
            .map(|r| r.access.name())
    }))
}

/// The router of the console and the REST API: the routes of [`table`],
/// each behind the check of its access, for anything else a 404 (JSON for
/// the REST API, a page for a browser), [`access::guard`] around all of
/// it, and the security headers of
/// [`crate::headers`] on every response. Serve it with the client's address
/// as a `ConnectInfo` extension (see [`crate::serve_tls`]) so login
/// throttling sees it.
pub fn app(state: WebState) -> Router {
    let mut router = Router::new();
    for route in table() {
        let endpoint = access::require(route.endpoint, route.access, &state, route.refusal);
        router = router.route(route.path, endpoint);
    }
    router
        .fallback(pages::not_found)
        .layer(axum::middleware::from_fn(crate::replicated::answer))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            access::guard,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn(crate::headers::add))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_declared_once() {
        let table = table();
        for (i, r) in table.iter().enumerate() {
            assert!(
                !table[..i]
                    .iter()
                    .any(|o| o.method == r.method && o.path == r.path),
                "{} {} is declared twice",
                r.method,
                r.path
            );
        }
    }

    #[test]
    fn rest_routes_answer_in_json_and_pages_in_html() {
        for r in table() {
            let rest = r.path.starts_with("/api/") || r.path == "/metrics";
            assert_eq!(
                r.kind == Kind::Api,
                rest,
                "{} {} has the wrong kind",
                r.method,
                r.path
            );
        }
    }

    #[test]
    fn the_openapi_document_describes_exactly_the_rest_routes() {
        let table = table();
        let mut routed: Vec<(String, &str)> = table
            .iter()
            .filter(|r| r.path.starts_with("/api/v1/"))
            .map(|r| (r.method.as_str().to_ascii_lowercase(), r.path))
            .collect();
        let mut described: Vec<(String, &str)> = openapi::described()
            .into_iter()
            .map(|(m, p)| (m.to_string(), p))
            .collect();
        routed.sort();
        described.sort();
        assert_eq!(routed, described);
    }
}
