//! The browser console: server-rendered pages (askama templates in
//! `templates/`), htmx for live refresh and partial updates, plain form
//! posts when JavaScript is off. Every page handler reads through the same
//! [`crate::ops`] the REST API uses; every form post is a state change
//! guarded by the session cookie's CSRF token (see [`crate::access::guard`])
//! and answered with a redirect carrying a one-shot notice, or with the
//! page re-rendered around the error.
//!
//! One module per page; this one holds what they share: the [`Chrome`]
//! around every page (navigation, user, CSRF token, notice or error), the
//! redirect with a one-shot notice, the error page, and how a page answers
//! a request the router refused ([`refusal`]). The least role of every
//! page and form is declared in [`crate::routes`], not here; the pages
//! only ask the caller's role to show or hide controls.

pub mod assets;
pub mod audit;
pub mod certificates;
pub mod charts;
pub mod dashboard;
pub mod field_form;
pub mod fields;
pub mod limits;
pub mod limits_text;
pub mod login;
pub mod maintenance;
pub mod owners;
pub mod pair;
pub mod service_level;
pub mod sessions;
pub mod system;
pub mod usage;
pub mod users;

use std::future::Future;

use askama::Template;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;
use uagate_store::Role;

use crate::access::{Refusal, Refused, FLASH};
use crate::auth::Authed;
use crate::error::ApiError;
use crate::ops;
use crate::state::WebState;

/// The navigation, in order: (path, label, least role).
const NAV: &[(&str, &str, Role)] = &[
    ("/", "Dashboard", Role::Viewer),
    ("/limits", "Limits", Role::Viewer),
    ("/owners", "Trusted owners", Role::Viewer),
    ("/service-level", "ServiceLevel", Role::Viewer),
    ("/maintenance", "Maintenance", Role::Viewer),
    ("/pair", "Pair", Role::Viewer),
    ("/fields", "Field connections", Role::Viewer),
    ("/certificates", "Certificates", Role::Viewer),
    ("/sessions", "Sessions", Role::Viewer),
    ("/system", "System", Role::Viewer),
    ("/users", "Users", Role::Admin),
    ("/audit", "Audit log", Role::Admin),
];

/// What every page around its content shows: the navigation, who is
/// logged in, the CSRF token for its forms, and a notice or an error.
pub struct Chrome {
    /// Page title.
    pub title: &'static str,
    /// The current page's path (highlighted in the navigation).
    pub active: &'static str,
    /// Navigation entries the caller may open.
    pub nav: Vec<(&'static str, &'static str)>,
    /// The user name.
    pub user: String,
    /// The role name.
    pub role: &'static str,
    /// The session's CSRF token.
    pub csrf: String,
    /// Whether operator controls are shown.
    pub operator: bool,
    /// Whether admin controls are shown.
    pub admin: bool,
    /// Whether operator controls that change what the pair shares (field
    /// connections, trusted certificates, CRLs) are shown: an operator on
    /// the primary or a standalone appliance; never on the standby, which
    /// refuses those changes (they are made on the primary).
    pub shared_operator: bool,
    /// Whether admin controls that change what the pair shares (users,
    /// limits, trusted owners, ingress rules) are shown: like
    /// [`Chrome::shared_operator`], for an admin.
    pub shared_admin: bool,
    /// A one-shot notice (after a successful change).
    pub notice: Option<String>,
    /// An error to show above the content.
    pub error: Option<String>,
    /// The raw cause of `error` (an I/O or protocol error), shown under
    /// it in small print.
    pub error_detail: Option<String>,
    /// On a pair member that is not the leader: the leader's console URL
    /// (empty when unknown); the page shows a read-only banner.
    pub follower_of: Option<String>,
    /// While an operator's state is in force: the banner every page shows.
    pub state_banner: Option<ops::StateBanner>,
    /// Stored settings that take effect at the next restart (empty when
    /// everything stored is in force): every page shows them in a banner.
    pub waiting_for_restart: Vec<String>,
}

impl Chrome {
    fn new(
        who: &Authed,
        title: &'static str,
        active: &'static str,
        notice: Option<String>,
    ) -> Self {
        Chrome {
            title,
            active,
            nav: NAV
                .iter()
                .filter(|(_, _, r)| who.can(*r))
                .map(|(p, l, _)| (*p, *l))
                .collect(),
            user: who.user.clone(),
            role: who.role.as_str(),
            csrf: who.csrf.clone(),
            operator: who.can(Role::Operator),
            admin: who.can(Role::Admin),
            shared_operator: who.can(Role::Operator) && who.follower_of.is_none(),
            shared_admin: who.can(Role::Admin) && who.follower_of.is_none(),
            notice,
            error: None,
            error_detail: None,
            follower_of: who.follower_of.clone(),
            state_banner: who.state_banner.clone(),
            waiting_for_restart: who
                .waiting_for_restart
                .iter()
                .map(|k| setting_words(k))
                .collect(),
        }
    }
}

impl Chrome {
    /// On the standby: the address of this page on the primary's console
    /// (where its settings are changed), empty when the primary's console
    /// is not known; `None` elsewhere.
    pub fn on_primary(&self) -> Option<String> {
        let console = self.follower_of.as_deref()?;
        if console.is_empty() {
            return Some(String::new());
        }
        Some(format!(
            "{}/{}",
            console.trim_end_matches('/'),
            self.active.trim_start_matches('/')
        ))
    }

    /// The chrome of a page shown after `error` (if any), and the HTTP
    /// status the page is answered with.
    fn with_error(
        who: &Authed,
        title: &'static str,
        active: &'static str,
        notice: Option<String>,
        error: Option<ApiError>,
    ) -> (Chrome, StatusCode) {
        let mut chrome = Chrome::new(who, title, active, notice);
        let status = error.as_ref().map(status_of).unwrap_or(StatusCode::OK);
        chrome.error = error.map(|e| e.to_string());
        (chrome, status)
    }
}

/// How a console route answers a request the router refused (see
/// [`crate::access`]): without a valid session, the login page, coming
/// back here afterwards (htmx requests get `HX-Redirect` to it); a role
/// too low, the error page (403).
pub fn refusal() -> Refusal {
    refusal_on(|_, _, error, _| async move { error_page(error) })
}

/// Like [`refusal`], but a role too low is shown by `shown`: the page the
/// form is on, re-rendered with the error above it (each page module's
/// `refused`).
pub fn refusal_on<F, Fut>(shown: F) -> Refusal
where
    F: Fn(WebState, Authed, ApiError, Request) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response> + Send + 'static,
{
    Refusal::new(move |refused: Refused| {
        let shown = shown.clone();
        async move {
            match (refused.who, refused.error) {
                (_, ApiError::Unauthenticated) => to_login(&refused.request),
                (Some(who), error @ ApiError::Forbidden { .. }) => {
                    shown(refused.state, who, error, refused.request).await
                }
                (_, error) => error_page(error),
            }
        }
    })
}

/// The login page, then back to the page the user was on.
///
/// - An htmx request (a page's periodic refresh or a button on it) makes
///   the whole window go there (`HX-Redirect`), coming back to the page
///   the browser shows (`HX-Current-URL`), never to the fragment.
/// - A form post comes back to the page it was posted from (`Referer`).
/// - A page comes back to itself.
///
/// Where a session existed (an htmx request or a form post comes from a
/// page opened with one; or the request carries a session cookie no longer
/// valid) the login page says the session expired (`expired=1`).
fn to_login(request: &Request) -> Response {
    let headers = request.headers();
    let htmx = headers.contains_key("hx-request");
    let get = matches!(*request.method(), Method::GET | Method::HEAD);
    let url_path = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(path_of_url)
    };
    let came_from = if htmx {
        url_path(header::HeaderName::from_static("hx-current-url"))
    } else if get {
        request.uri().path_and_query().map(|p| p.to_string())
    } else {
        url_path(header::REFERER)
    };
    // A refreshed fragment without the page's address: that fragment's page.
    let came_from = came_from.or_else(|| Some(request.uri().path().to_string()));
    let next = login::safe_next(came_from.as_deref());
    let had_cookie =
        crate::auth::cookie_value(headers, crate::auth::COOKIE).is_some_and(|v| !v.is_empty());
    let expired = htmx || !get || had_cookie;
    let to = format!(
        "/login?next={}{}",
        urlencode(&next),
        if expired { "&expired=1" } else { "" }
    );
    if htmx {
        let mut r = StatusCode::OK.into_response();
        if let Ok(v) = HeaderValue::from_str(&to) {
            r.headers_mut().insert("hx-redirect", v);
        }
        r
    } else {
        see_other(&to)
    }
}

/// The path and query of a URL (`https://host:8443/fields?edit=a` gives
/// `/fields?edit=a`); a value that is a path already stays as it is.
pub(crate) fn path_of_url(url: &str) -> String {
    match url.split_once("://") {
        Some((_, rest)) => match rest.find('/') {
            Some(i) => rest[i..].to_string(),
            None => "/".to_string(),
        },
        None => url.to_string(),
    }
}

/// Percent-encodes a value for a query string.
fn urlencode(s: &str) -> String {
    serde_urlencoded::to_string([("", s)])
        .map(|v| v.trim_start_matches('=').to_string())
        .unwrap_or_default()
}

fn see_other(to: &str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

/// Redirects to `to` with `notice` shown once there.
fn done(to: &str, notice: &str) -> Response {
    let mut r = see_other(to);
    let cookie = format!(
        "{FLASH}={}; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=60",
        urlencode(notice)
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

/// The one-shot notice of a redirect, if any (the guard clears it).
fn take_flash(headers: &HeaderMap) -> Option<String> {
    crate::auth::cookie_value(headers, FLASH)
        .filter(|v| !v.is_empty())
        .and_then(|v| {
            serde_urlencoded::from_str::<Vec<(String, String)>>(&format!("n={v}"))
                .ok()?
                .into_iter()
                .next()
                .map(|(_, v)| v)
        })
}

/// Renders a template into a response. (A notice shown from the flash
/// cookie is cleared by [`crate::access::guard`] for every page.)
fn page(t: &impl Template, status: StatusCode) -> Response {
    match t.render() {
        Ok(body) => (status, Html(body)).into_response(),
        Err(e) => error_page(ApiError::internal(e)),
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    title: String,
    error: Option<String>,
}

/// An error as a small HTML page with the API error's status.
pub fn error_page(e: ApiError) -> Response {
    let (status, _) = e.status_and_code();
    let t = ErrorPage {
        title: status.canonical_reason().unwrap_or("Error").to_string(),
        error: Some(e.to_string()),
    };
    match t.render() {
        Ok(body) => (status, Html(body)).into_response(),
        Err(_) => (status, e.to_string()).into_response(),
    }
}

#[derive(Template)]
#[template(path = "problem.html")]
struct ProblemPage {
    chrome: Chrome,
    message: String,
    /// Where to go from here: (path, link text).
    way_on: (String, String),
}

/// Whether a request is for the REST API (or `/metrics`), whose errors are
/// JSON; everything else is the browser console's and gets pages.
pub(crate) fn is_api(path: &str) -> bool {
    path == "/api" || path.starts_with("/api/") || path == "/metrics"
}

/// A browser request that went nowhere, explained on a page: in the
/// console's layout (navigation, the user) for a logged-in user, else the
/// small page without navigation; with a link on (`way_on`: path and
/// text) and the status.
pub(crate) async fn problem(
    state: &WebState,
    parts: &mut axum::http::request::Parts,
    status: StatusCode,
    title: &'static str,
    message: String,
    way_on: (String, String),
) -> Response {
    use axum::extract::FromRequestParts;
    match Authed::from_request_parts(parts, state).await {
        Ok(who) => page(
            &ProblemPage {
                chrome: Chrome::new(&who, title, "", None),
                message,
                way_on,
            },
            status,
        ),
        Err(_) => page(
            &ErrorPage {
                title: title.to_string(),
                error: Some(message),
            },
            status,
        ),
    }
}

/// The way back to the console page `path` (see [`login::safe_next`]):
/// its address and "Back to <its name>".
pub(crate) fn back_to(path: Option<&str>) -> (String, String) {
    let next = login::safe_next(path);
    let page = next.split(['?', '#']).next().unwrap_or("/");
    let label = match NAV.iter().find(|(p, _, _)| *p == page) {
        Some((_, label, _)) if page != "/" => format!("Back to {label}"),
        _ => "Back to the Dashboard".to_string(),
    };
    (next, label)
}

/// The router's fallback: an unknown address. The REST API answers
/// 404 `not_found` in JSON; a browser gets the "Page not found" page with
/// the way back to the Dashboard.
pub async fn not_found(
    axum::extract::State(state): axum::extract::State<WebState>,
    request: Request,
) -> Response {
    if is_api(request.uri().path()) {
        return crate::api::not_found().await.into_response();
    }
    let (mut parts, _) = request.into_parts();
    problem(
        &state,
        &mut parts,
        StatusCode::NOT_FOUND,
        "Page not found",
        "There is no console page at this address: it may have been mistyped, or the link is \
         out of date."
            .to_string(),
        ("/".to_string(), "Back to the Dashboard".to_string()),
    )
    .await
}

/// The status a refused form post is re-rendered with.
fn status_of(e: &ApiError) -> StatusCode {
    e.status_and_code().0
}

/// An optional number field: empty is `None`, anything else must parse.
fn number<T: std::str::FromStr>(setting: &str, v: &str) -> Result<Option<T>, ApiError> {
    let v = v.trim();
    if v.is_empty() {
        return Ok(None);
    }
    v.parse().map(Some).map_err(|_| {
        ApiError::invalid(
            setting,
            format!("`{v}` is not a valid number for `{setting}`"),
        )
    })
}

/// What a page says above a form that was refused at one of its inputs:
/// the input's label and the message (marked at the input too).
fn not_saved_at(label: &str, message: &str) -> String {
    format!("Not saved: {label}: {message} (marked below).")
}

/// What a stored change did, in words.
fn change_notice(change: &ops::ConfigChange) -> String {
    match (change.live.is_empty(), change.restart.is_empty()) {
        (true, true) => "Nothing changed.".to_string(),
        (false, true) => format!(
            "Applied live: {}.{}",
            words_of(&change.live),
            still_waiting(change)
        ),
        (_, false) => format!(
            "Stored; takes effect at the next restart, needed by: {}.",
            words_of(&change.restart)
        ),
    }
}

/// After a change applied live: the sentence about earlier stored changes
/// that still wait for a restart (empty when none does).
fn still_waiting(change: &ops::ConfigChange) -> String {
    if change.waiting.is_empty() {
        String::new()
    } else {
        format!(
            " Earlier saved changes still wait for a restart: {}.",
            words_of(&change.waiting)
        )
    }
}

/// [`setting_words`] of each setting, joined with commas.
fn words_of(settings: &[String]) -> String {
    settings
        .iter()
        .map(|k| setting_words(k))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A setting of the configuration document as the console names it: the
/// label of its input with the key (`Max sessions
/// (server.max_session_count)`), so that a notice or the restart banner
/// reads as the page the operator used; a setting no page edits by its key
/// alone. Called for the Apply notices and the restart banner.
pub(crate) fn setting_words(key: &str) -> String {
    let label = match key {
        "isolation.mode" => Some("Isolation mode".to_string()),
        "isolation.stages" => Some("Stage limits".to_string()),
        "isolation.trusted_owners" => Some("Trusted owners".to_string()),
        "isolation.ingress" => Some("Ingress rules".to_string()),
        // The Limits page's own inputs, by the labels it shows.
        _ => limits_text::label(key.strip_prefix("isolation.").unwrap_or(key)),
    };
    match label {
        Some(label) => format!("{label} ({key})"),
        None => key.to_string(),
    }
}

/// `?edit=NAME`: a page opens its form on that entry (trusted owners,
/// field connections).
#[derive(Debug, Default, Deserialize)]
pub struct EditQuery {
    #[serde(default)]
    edit: Option<String>,
}

/// A form naming one user or field connection.
#[derive(Debug, Deserialize)]
pub struct NameForm {
    name: String,
}

/// `the bundle` -> `The bundle`.
pub(crate) fn upper_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// A message for a page, as a sentence: `user name must not be empty`
/// -> `User name must not be empty.`
pub(crate) fn sentence(s: &str) -> String {
    let s = upper_first(s.trim());
    if s.ends_with(['.', '!', '?']) {
        s
    } else {
        format!("{s}.")
    }
}
