//! The browser console: server-rendered pages (askama templates in
//! `templates/`), htmx for live refresh and partial updates, plain form
//! posts when JavaScript is off. Every page handler reads through the same
//! [`crate::ops`] the REST API uses; every form post is a state change
//! guarded by the session cookie's CSRF token (see [`crate::access::guard`])
//! and answered with a redirect carrying a one-shot notice, or with the
//! page re-rendered around the error.

use std::net::SocketAddr;

use askama::Template;
use axum::extract::{ConnectInfo, FromRequestParts, Multipart, Query, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::{Extension, Form};
use serde::Deserialize;
use uagate_config::{
    Config, IngressClass, IngressRule, IsolationMode, Reservation, Stage, StageOverride,
    TrustedOwner,
};
use uagate_store::{CertInfo, CertKind, CertSummary, Role};

use crate::access::FLASH;
use crate::auth::{clear_cookie, session_cookie, Authed};
use crate::error::ApiError;
use crate::ops::{self, check_login, check_setup, SetupRequest, StatusView};
use crate::state::WebState;

/// The navigation, in order: (path, label, least role).
const NAV: &[(&str, &str, Role)] = &[
    ("/", "Dashboard", Role::Viewer),
    ("/limits", "Limits", Role::Viewer),
    ("/owners", "Trusted owners", Role::Viewer),
    ("/service-level", "ServiceLevel", Role::Viewer),
    ("/maintenance", "Maintenance", Role::Viewer),
    ("/fields", "Field connections", Role::Viewer),
    ("/certificates", "Certificates", Role::Viewer),
    ("/sessions", "Sessions", Role::Viewer),
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
    /// A one-shot notice (after a successful change).
    pub notice: Option<String>,
    /// An error to show above the content.
    pub error: Option<String>,
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
            notice,
            error: None,
        }
    }
}

impl Chrome {
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

/// A logged-in console user. A request without a valid session is sent
/// to the login page (htmx requests get `HX-Redirect`).
pub struct Viewer(pub Authed);

impl FromRequestParts<WebState> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &WebState) -> Result<Self, Response> {
        match Authed::from_request_parts(parts, state).await {
            Ok(a) => Ok(Viewer(a)),
            Err(ApiError::Unauthenticated) => {
                let next = parts
                    .uri
                    .path_and_query()
                    .map(|p| p.as_str())
                    .unwrap_or("/");
                let to = format!("/login?next={}", urlencode(next));
                if parts.headers.contains_key("hx-request") {
                    let mut r = StatusCode::OK.into_response();
                    if let Ok(v) = HeaderValue::from_str(&to) {
                        r.headers_mut().insert("hx-redirect", v);
                    }
                    Err(r)
                } else {
                    Err(see_other(&to))
                }
            }
            Err(e) => Err(error_page(e)),
        }
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

/// The status a refused form post is re-rendered with.
fn status_of(e: &ApiError) -> StatusCode {
    e.status_and_code().0
}

// ------------------------------------------------------------ login, setup

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    title: String,
    error: Option<String>,
    next: String,
    setup_pending: bool,
}

/// `GET /login?next=`: the login form.
#[derive(Debug, Deserialize)]
pub struct NextQuery {
    /// Where to go after logging in (a console path).
    #[serde(default)]
    pub next: Option<String>,
}

/// `GET /login`.
pub async fn login_form(State(state): State<WebState>, Query(q): Query<NextQuery>) -> Response {
    let t = LoginPage {
        title: "Log in".into(),
        error: None,
        next: safe_next(q.next.as_deref()),
        setup_pending: state.setup_code.lock().is_some(),
    };
    page(&t, StatusCode::OK)
}

/// Only local console paths are followed after login (no open redirect).
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') => n.to_string(),
        _ => "/".to_string(),
    }
}

/// `POST /login` form.
#[derive(Debug, Deserialize)]
pub struct LoginForm {
    username: String,
    password: String,
    #[serde(default)]
    next: Option<String>,
}

/// `POST /login`: sets the session cookie and goes to `next`; a wrong
/// password or a lockout re-renders the form with the reason.
pub async fn login_submit(
    State(state): State<WebState>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    Form(f): Form<LoginForm>,
) -> Response {
    let addr = peer.map(|Extension(ConnectInfo(a))| a.ip());
    match check_login(&state, &f.username, &f.password, addr).await {
        Ok(token) => with_session(see_other(&safe_next(f.next.as_deref())), &token),
        Err(e) => {
            let t = LoginPage {
                title: "Log in".into(),
                error: Some(e.to_string()),
                next: safe_next(f.next.as_deref()),
                setup_pending: state.setup_code.lock().is_some(),
            };
            page(&t, status_of(&e))
        }
    }
}

fn with_session(mut r: Response, token: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(&session_cookie(token)) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

#[derive(Template)]
#[template(path = "setup.html")]
struct SetupPage {
    title: String,
    error: Option<String>,
}

/// `GET /setup`: the first-start form (only while no user exists).
pub async fn setup_form(State(state): State<WebState>) -> Response {
    if state.setup_code.lock().is_none() {
        return see_other("/login");
    }
    page(
        &SetupPage {
            title: "First start".into(),
            error: None,
        },
        StatusCode::OK,
    )
}

/// `POST /setup`: creates the first admin and logs them in.
pub async fn setup_submit(
    State(state): State<WebState>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    Form(f): Form<SetupRequest>,
) -> Response {
    let addr = peer.map(|Extension(ConnectInfo(a))| a.ip());
    match check_setup(&state, &f, addr).await {
        Ok(token) => with_session(done("/", "Administrator created."), &token),
        Err(e) => page(
            &SetupPage {
                title: "First start".into(),
                error: Some(match e {
                    ApiError::Forbidden { .. } => "Wrong setup code.".to_string(),
                    other => other.to_string(),
                }),
            },
            StatusCode::FORBIDDEN,
        ),
    }
}

/// `POST /logout`: ends the session and clears the cookie.
pub async fn logout(State(state): State<WebState>, who: Result<Authed, ApiError>) -> Response {
    if let Ok(who) = who {
        state.keys.revoke(&who);
        tracing::info!(user = %who.user, "console logout");
    }
    let mut r = see_other("/login");
    if let Ok(v) = HeaderValue::from_str(&clear_cookie()) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

// --------------------------------------------------------------- dashboard

/// One stage's usage bar.
pub struct UsageBar {
    stage: &'static str,
    used: u64,
    total: u64,
    percent: u64,
}

/// What the dashboard's live part shows.
pub struct Live {
    status: StatusView,
    usage: Vec<UsageBar>,
    owners: usize,
    rejections: Vec<(&'static str, &'static str, u64)>,
    rejected_certs: Vec<String>,
}

async fn live(state: &WebState) -> Live {
    let snap = state.engine.isolation_snapshot();
    let plan = uagate_isolation::plan::Plan::build(&state.engine.applied_config()).ok();
    let usage = snap
        .usage
        .iter()
        .map(|(stage, used)| {
            let total = plan
                .as_ref()
                .and_then(|p| p.stages().iter().find(|s| s.stage == *stage))
                .map(|s| s.total)
                .unwrap_or(0);
            UsageBar {
                stage: stage.name(),
                used: *used,
                total,
                percent: (used.saturating_mul(100))
                    .checked_div(total)
                    .unwrap_or(0)
                    .min(100),
            }
        })
        .collect();
    let rejections = snap
        .rejections
        .iter()
        .filter(|(_, _, n)| *n > 0)
        .map(|(s, r, n)| (s.name(), r.label(), *n))
        .collect();
    let rejected_certs = state
        .store
        .certs(CertKind::Rejected)
        .await
        .unwrap_or_default()
        .into_iter()
        .take(5)
        .map(|c| c.subject)
        .collect();
    Live {
        status: ops::status(state),
        usage,
        owners: snap.tracked_owners,
        rejections,
        rejected_certs,
    }
}

#[derive(Template)]
#[template(path = "dashboard.html")]
struct DashboardPage {
    chrome: Chrome,
    live: Live,
}

#[derive(Template)]
#[template(path = "dashboard_live.html")]
struct DashboardLive {
    live: Live,
}

/// `GET /`: the dashboard.
pub async fn dashboard(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    headers: HeaderMap,
) -> Response {
    let flash = take_flash(&headers);
    let t = DashboardPage {
        chrome: Chrome::new(&who, "Dashboard", "/", flash),
        live: live(&state).await,
    };
    page(&t, StatusCode::OK)
}

/// `GET /partials/dashboard`: the live part, refreshed by htmx.
pub async fn dashboard_partial(State(state): State<WebState>, _who: Viewer) -> Response {
    page(
        &DashboardLive {
            live: live(&state).await,
        },
        StatusCode::OK,
    )
}

// ------------------------------------------------------------------ limits

/// One stage row of the limits form (empty = profile default).
pub struct StageForm {
    name: &'static str,
    key: &'static str,
    capacity: String,
    bootstrap_reserved: String,
    reconnect_reserved: String,
    control_reserved: String,
    owner_hard_limit: String,
    /// What an empty field means (the profile's value), as placeholders:
    /// capacity, bootstrap, reconnect, control, owner hard limit.
    defaults: [String; 5],
}

/// The profile's value of every stage field, with no stage override.
fn stage_defaults(config: &Config) -> Vec<[String; 5]> {
    let mut bare = config.clone();
    bare.isolation.stages.clear();
    let plan = uagate_isolation::plan::Plan::build(&bare).ok();
    Stage::ALL
        .iter()
        .map(|stage| {
            plan.as_ref()
                .and_then(|p| p.stages().iter().find(|s| s.stage == *stage))
                .map(|s| {
                    [s.total, s.bootstrap, s.reconnect, s.control, s.owner_limit]
                        .map(|v| v.to_string())
                })
                .unwrap_or_default()
        })
        .collect()
}

/// The limits form's values.
pub struct LimitsForm {
    mode: String,
    default_weight: String,
    max_tracked_owners: String,
    stages: Vec<StageForm>,
}

impl LimitsForm {
    fn of(config: &Config) -> LimitsForm {
        let iso = &config.isolation;
        let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        let defaults = stage_defaults(config);
        LimitsForm {
            mode: iso.mode.as_str().to_string(),
            default_weight: iso.default_weight.to_string(),
            max_tracked_owners: iso.max_tracked_owners.to_string(),
            stages: Stage::ALL
                .iter()
                .zip(defaults)
                .map(|(stage, defaults)| {
                    let o = iso.stages.iter().find(|o| o.stage == *stage);
                    StageForm {
                        defaults,
                        name: stage.name(),
                        key: stage.key(),
                        capacity: opt(o.and_then(|o| o.capacity)),
                        bootstrap_reserved: opt(o.and_then(|o| o.bootstrap_reserved)),
                        reconnect_reserved: opt(o.and_then(|o| o.reconnect_reserved)),
                        control_reserved: opt(o.and_then(|o| o.control_reserved)),
                        owner_hard_limit: opt(o.and_then(|o| o.owner_hard_limit)),
                    }
                })
                .collect(),
        }
    }

    /// The posted values (without placeholders; see [`Self::with_defaults`]).
    fn from_fields(fields: &[(String, String)]) -> LimitsForm {
        let get = |k: &str| {
            fields
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.trim().to_string())
                .unwrap_or_default()
        };
        LimitsForm {
            mode: get("mode"),
            default_weight: get("default_weight"),
            max_tracked_owners: get("max_tracked_owners"),
            stages: Stage::ALL
                .iter()
                .map(|s| StageForm {
                    defaults: Default::default(),
                    name: s.name(),
                    key: s.key(),
                    capacity: get(&format!("{}.capacity", s.key())),
                    bootstrap_reserved: get(&format!("{}.bootstrap_reserved", s.key())),
                    reconnect_reserved: get(&format!("{}.reconnect_reserved", s.key())),
                    control_reserved: get(&format!("{}.control_reserved", s.key())),
                    owner_hard_limit: get(&format!("{}.owner_hard_limit", s.key())),
                })
                .collect(),
        }
    }

    /// The form with the profile's values of `base` as placeholders; only
    /// a whole page shows them.
    fn with_defaults(mut self, base: &Config) -> LimitsForm {
        for (stage, defaults) in self.stages.iter_mut().zip(stage_defaults(base)) {
            stage.defaults = defaults;
        }
        self
    }

    /// `base` with this form's isolation settings; a value that is not a
    /// number is refused naming its setting.
    fn apply_to(&self, mut base: Config) -> Result<Config, ApiError> {
        let iso = &mut base.isolation;
        iso.mode = MODES
            .iter()
            .zip(MODE_VALUES)
            .find(|(n, _)| **n == self.mode)
            .map(|(_, m)| m)
            .ok_or_else(|| ApiError::invalid("isolation.mode", "unknown isolation mode"))?;
        iso.default_weight = number("isolation.default_weight", &self.default_weight)?
            .ok_or_else(|| ApiError::invalid("isolation.default_weight", "required"))?;
        iso.max_tracked_owners = number("isolation.max_tracked_owners", &self.max_tracked_owners)?
            .ok_or_else(|| ApiError::invalid("isolation.max_tracked_owners", "required"))?;
        let mut stages = Vec::new();
        for (stage, f) in Stage::ALL.iter().zip(&self.stages) {
            let n = |field: &str, v: &str| {
                number::<u64>(&format!("isolation.stages.{}.{field}", stage.key()), v)
            };
            let o = StageOverride {
                stage: *stage,
                capacity: n("capacity", &f.capacity)?,
                bootstrap_reserved: n("bootstrap_reserved", &f.bootstrap_reserved)?,
                reconnect_reserved: n("reconnect_reserved", &f.reconnect_reserved)?,
                control_reserved: n("control_reserved", &f.control_reserved)?,
                owner_hard_limit: n("owner_hard_limit", &f.owner_hard_limit)?,
            };
            let empty = o.capacity.is_none()
                && o.bootstrap_reserved.is_none()
                && o.reconnect_reserved.is_none()
                && o.control_reserved.is_none()
                && o.owner_hard_limit.is_none();
            if !empty {
                stages.push(o);
            }
        }
        iso.stages = stages;
        Ok(base)
    }
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

const MODES: [&str; 4] = [
    "shared_only",
    "fair_share",
    "balanced",
    "trusted_reservations",
];
const MODE_VALUES: [IsolationMode; 4] = [
    IsolationMode::SharedOnly,
    IsolationMode::FairShare,
    IsolationMode::Balanced,
    IsolationMode::TrustedReservations,
];

/// The plan preview (or the error that names the setting).
pub struct Preview {
    lines: Vec<String>,
    error: Option<String>,
    /// Also swap the Apply button (enabled only for a valid plan).
    oob: bool,
}

impl Preview {
    fn of(config: Result<Config, ApiError>, oob: bool) -> Preview {
        match config.and_then(|c| ops::check_config(&c)) {
            Ok(plan) => Preview {
                lines: ops::plan_view(&plan).into_iter().map(|s| s.line).collect(),
                error: None,
                oob,
            },
            Err(e) => Preview {
                lines: Vec::new(),
                error: Some(e.to_string()),
                oob,
            },
        }
    }
}

#[derive(Template)]
#[template(path = "limits.html")]
struct LimitsPage {
    chrome: Chrome,
    modes: [&'static str; 4],
    form: LimitsForm,
    preview: Preview,
    chrome_admin: bool,
}

#[derive(Template)]
#[template(path = "plan_table.html")]
struct PlanPartial {
    preview: Preview,
    chrome_admin: bool,
}

/// `GET /limits`: the isolation settings of the stored document and its plan.
pub async fn limits(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    headers: HeaderMap,
) -> Response {
    let flash = take_flash(&headers);
    let config = match ops::stored_config(&state).await {
        Ok(c) => c,
        Err(e) => return error_page(e),
    };
    let t = LimitsPage {
        chrome_admin: who.can(Role::Admin),
        chrome: Chrome::new(&who, "Limits", "/limits", flash),
        modes: MODES,
        form: LimitsForm::of(&config),
        preview: Preview::of(Ok(config), false),
    };
    page(&t, StatusCode::OK)
}

/// `POST /limits/preview`: the plan of the form's values without storing
/// anything. htmx gets the plan fragment (and the Apply button, enabled
/// only when the plan is valid); a plain post gets the whole page.
pub async fn limits_preview(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    headers: HeaderMap,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let base = match ops::stored_config(&state).await {
        Ok(c) => c,
        Err(e) => return error_page(e),
    };
    let form = LimitsForm::from_fields(&fields);
    let candidate = form.apply_to(base.clone());
    if headers.contains_key("hx-request") {
        return page(
            &PlanPartial {
                preview: Preview::of(candidate, true),
                chrome_admin: who.can(Role::Admin),
            },
            StatusCode::OK,
        );
    }
    let form = form.with_defaults(&base);
    let t = LimitsPage {
        chrome_admin: who.can(Role::Admin),
        chrome: Chrome::new(&who, "Limits", "/limits", None),
        modes: MODES,
        form,
        preview: Preview::of(candidate, false),
    };
    page(&t, StatusCode::OK)
}

/// `POST /limits`: applies the form (admin). Says which changes took
/// effect live and which wait for a restart; an invalid form is shown
/// again with the named error and nothing is stored.
pub async fn limits_apply(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let form = LimitsForm::from_fields(&fields);
    let result = async {
        who.require(Role::Admin)?;
        let base = ops::stored_config(&state).await?;
        let candidate = form.apply_to(base)?;
        ops::apply_config(&state, &who, candidate).await
    }
    .await;
    match result {
        Ok(change) => done("/limits", &change_notice(&change)),
        Err(e) => {
            let (form, preview) = match ops::stored_config(&state).await {
                Ok(base) => {
                    let preview = Preview::of(form.apply_to(base.clone()), false);
                    (form.with_defaults(&base), preview)
                }
                Err(_) => (
                    form,
                    Preview {
                        lines: Vec::new(),
                        error: None,
                        oob: false,
                    },
                ),
            };
            let (chrome, status) = Chrome::with_error(&who, "Limits", "/limits", None, Some(e));
            let t = LimitsPage {
                chrome_admin: who.can(Role::Admin),
                chrome,
                modes: MODES,
                form,
                preview,
            };
            page(&t, status)
        }
    }
}

/// What a stored change did, in words.
fn change_notice(change: &ops::ConfigChange) -> String {
    match (change.live.is_empty(), change.restart.is_empty()) {
        (true, true) => "Nothing changed.".to_string(),
        (false, true) => format!("Applied live: {}.", change.live.join(", ")),
        (_, false) => format!(
            "Stored; takes effect at the next restart: {}.",
            change.restart.join(", ")
        ),
    }
}

// ---------------------------------------------------------- trusted owners

/// A trusted owner as the page lists it.
pub struct OwnerRow {
    key: String,
    weight: u32,
    reservations: String,
}

/// An ingress rule as the page lists it.
pub struct IngressRow {
    cidr: String,
    target: String,
}

#[derive(Template)]
#[template(path = "owners.html")]
struct OwnersPage {
    chrome: Chrome,
    owners: Vec<OwnerRow>,
    ingress: Vec<IngressRow>,
    /// The owner whose values prefill the form (`?edit=KEY`).
    editing: Option<OwnerRow>,
}

async fn render_owners(
    state: &WebState,
    who: &Authed,
    flash: Option<String>,
    error: Option<ApiError>,
) -> Response {
    render_owners_editing(state, who, flash, error, None).await
}

async fn render_owners_editing(
    state: &WebState,
    who: &Authed,
    flash: Option<String>,
    error: Option<ApiError>,
    edit: Option<&str>,
) -> Response {
    let config = match ops::stored_config(state).await {
        Ok(c) => c,
        Err(e) => return error_page(e),
    };
    let (chrome, status) = Chrome::with_error(who, "Trusted owners", "/owners", flash, error);
    let editing = edit.and_then(|k| {
        config
            .isolation
            .trusted_owners
            .iter()
            .find(|o| o.key == k)
            .map(|o| OwnerRow {
                key: o.key.clone(),
                weight: o.weight,
                reservations: reservations_text(&o.reservations),
            })
    });
    let t = OwnersPage {
        chrome,
        editing,
        owners: config
            .isolation
            .trusted_owners
            .iter()
            .map(|o| OwnerRow {
                key: o.key.clone(),
                weight: o.weight,
                reservations: reservations_text(&o.reservations),
            })
            .collect(),
        ingress: config
            .isolation
            .ingress
            .iter()
            .map(|r| IngressRow {
                cidr: r.cidr.clone(),
                target: match (&r.owner, r.class) {
                    (Some(o), _) => format!("owner {o}"),
                    (None, Some(IngressClass::Bootstrap)) => "class bootstrap".into(),
                    (None, Some(IngressClass::Reconnect)) => "class reconnect".into(),
                    (None, None) => "—".into(),
                },
            })
            .collect(),
    };
    page(&t, status)
}

/// `stage reserved [hard]` lines.
fn reservations_text(rs: &[Reservation]) -> String {
    rs.iter()
        .map(|r| match r.hard_limit {
            Some(h) => format!("{} {} {h}", r.stage.key(), r.reserved),
            None => format!("{} {}", r.stage.key(), r.reserved),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Parses `stage reserved [hard]` lines.
pub fn parse_reservations(text: &str) -> Result<Vec<Reservation>, ApiError> {
    let field = "reservations";
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let stage = parts
            .first()
            .and_then(|k| Stage::ALL.iter().find(|s| s.key() == *k || s.name() == *k))
            .ok_or_else(|| {
                ApiError::invalid(
                    field,
                    format!("`{line}`: the first word must be a stage, e.g. request_execution"),
                )
            })?;
        let reserved = parts.get(1).and_then(|v| v.parse().ok()).ok_or_else(|| {
            ApiError::invalid(field, format!("`{line}`: a reserved amount is required"))
        })?;
        let hard_limit = match parts.get(2) {
            Some(v) => Some(v.parse().map_err(|_| {
                ApiError::invalid(field, format!("`{line}`: the hard limit is not a number"))
            })?),
            None => None,
        };
        if parts.len() > 3 {
            return Err(ApiError::invalid(
                field,
                format!("`{line}`: at most three words"),
            ));
        }
        out.push(Reservation {
            stage: *stage,
            reserved,
            hard_limit,
        });
    }
    Ok(out)
}

/// `GET /owners?edit=` query.
#[derive(Debug, Deserialize)]
pub struct EditQuery {
    #[serde(default)]
    edit: Option<String>,
}

/// `GET /owners` (`?edit=KEY` prefills the form with that owner).
pub async fn owners(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    headers: HeaderMap,
    Query(q): Query<EditQuery>,
) -> Response {
    let flash = take_flash(&headers);
    render_owners_editing(&state, &who, flash, None, q.edit.as_deref()).await
}

/// After a change on the owners page: back to it with what the change
/// did, or the page again with the error.
async fn owners_outcome(
    state: &WebState,
    who: &Authed,
    result: Result<ops::ConfigChange, ApiError>,
) -> Response {
    match result {
        Ok(change) => done("/owners", &change_notice(&change)),
        Err(e) => render_owners(state, who, None, Some(e)).await,
    }
}

/// `POST /owners` form: add or replace an owner.
#[derive(Debug, Deserialize)]
pub struct OwnerForm {
    key: String,
    #[serde(default)]
    weight: String,
    #[serde(default)]
    reservations: String,
    #[serde(default)]
    ingress: String,
}

/// `POST /owners`: adds or replaces a trusted owner (admin), validated
/// against the plan.
pub async fn owner_save(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    Form(f): Form<OwnerForm>,
) -> Response {
    let result = async {
        who.require(Role::Admin)?;
        let owner = TrustedOwner {
            key: f.key.trim().to_string(),
            weight: number("weight", &f.weight)?.unwrap_or(1),
            reservations: parse_reservations(&f.reservations)?,
        };
        let ingress = f
            .ingress
            .split([',', '\n', ' '])
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect();
        ops::upsert_owner(&state, &who, owner, ingress).await
    }
    .await;
    owners_outcome(&state, &who, result).await
}

/// `POST /owners/remove` form.
#[derive(Debug, Deserialize)]
pub struct KeyForm {
    key: String,
}

/// `POST /owners/remove` (admin).
pub async fn owner_remove(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    Form(f): Form<KeyForm>,
) -> Response {
    let result = async {
        who.require(Role::Admin)?;
        ops::remove_owner(&state, &who, &f.key).await
    }
    .await;
    owners_outcome(&state, &who, result).await
}

/// `POST /ingress` form: `target` is `owner:<key>` or `class:<name>`.
#[derive(Debug, Deserialize)]
pub struct IngressForm {
    cidr: String,
    target: String,
}

/// Builds an ingress rule from the form's target.
pub fn ingress_rule(cidr: &str, target: &str) -> Result<IngressRule, ApiError> {
    let (owner, class) = match target.split_once(':') {
        Some(("owner", key)) => (Some(key.to_string()), None),
        Some(("class", "bootstrap")) => (None, Some(IngressClass::Bootstrap)),
        Some(("class", "reconnect")) => (None, Some(IngressClass::Reconnect)),
        _ => {
            return Err(ApiError::invalid(
                "target",
                "an owner key or the class bootstrap or reconnect",
            ))
        }
    };
    Ok(IngressRule {
        cidr: cidr.trim().to_string(),
        owner,
        class,
    })
}

/// `POST /ingress` (admin).
pub async fn ingress_add(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    Form(f): Form<IngressForm>,
) -> Response {
    let result = async {
        who.require(Role::Admin)?;
        let rule = ingress_rule(&f.cidr, &f.target)?;
        ops::add_ingress(&state, &who, rule).await
    }
    .await;
    owners_outcome(&state, &who, result).await
}

/// `POST /ingress/remove` form.
#[derive(Debug, Deserialize)]
pub struct IndexForm {
    index: usize,
}

/// `POST /ingress/remove` (admin).
pub async fn ingress_remove(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    Form(f): Form<IndexForm>,
) -> Response {
    let result = async {
        who.require(Role::Admin)?;
        ops::remove_ingress(&state, &who, f.index).await
    }
    .await;
    owners_outcome(&state, &who, result).await
}

// ------------------------------------------------------------ ServiceLevel

#[derive(Template)]
#[template(path = "service_level.html")]
struct LevelPage {
    chrome: Chrome,
    status: StatusView,
}

fn render_level(
    state: &WebState,
    who: &Authed,
    flash: Option<String>,
    error: Option<ApiError>,
) -> Response {
    let (chrome, status) = Chrome::with_error(who, "ServiceLevel", "/service-level", flash, error);
    page(
        &LevelPage {
            chrome,
            status: ops::status(state),
        },
        status,
    )
}

/// `GET /service-level`.
pub async fn service_level(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    headers: HeaderMap,
) -> Response {
    let flash = take_flash(&headers);
    render_level(&state, &who, flash, None)
}

/// `POST /service-level` form.
#[derive(Debug, Deserialize)]
pub struct LevelForm {
    level: String,
    expires_min: String,
    #[serde(default)]
    reason: String,
}

/// `POST /service-level`: sets the override (operator).
pub async fn service_level_set(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    Form(f): Form<LevelForm>,
) -> Response {
    let result = async {
        let level: u8 = number("level", &f.level)?
            .ok_or_else(|| ApiError::invalid("level", "a level 0-255 is required"))?;
        let minutes: u64 = number("expires_min", &f.expires_min)?
            .ok_or_else(|| ApiError::invalid("expires_min", "an expiry is required"))?;
        ops::override_level(
            &state,
            &who,
            ops::LevelOverride {
                level: Some(level),
                expires_in_s: Some(minutes.saturating_mul(60)),
                reason: Some(f.reason.trim().to_string()),
            },
        )
        .await
    }
    .await;
    match result {
        Ok(()) => done("/service-level", "Override set."),
        Err(e) => render_level(&state, &who, None, Some(e)),
    }
}

/// `POST /service-level/clear`: back to the computed value (operator).
pub async fn service_level_clear(State(state): State<WebState>, Viewer(who): Viewer) -> Response {
    match ops::override_level(&state, &who, ops::LevelOverride::default()).await {
        Ok(()) => done("/service-level", "Override cleared."),
        Err(e) => render_level(&state, &who, None, Some(e)),
    }
}

// ------------------------------------------------------------- maintenance

/// The request shown on the confirmation step.
pub struct Confirm {
    state: String,
    estimated_return_time: String,
    seconds_till_shutdown: String,
    reason: String,
    drain: bool,
    effect: &'static str,
}

#[derive(Template)]
#[template(path = "maintenance.html")]
struct MaintenancePage {
    chrome: Chrome,
    status: StatusView,
    states: &'static [&'static str],
    confirm: Option<Confirm>,
}

fn render_maintenance(
    state: &WebState,
    who: &Authed,
    flash: Option<String>,
    confirm: Option<Confirm>,
    error: Option<ApiError>,
) -> Response {
    let (chrome, status) = Chrome::with_error(who, "Maintenance", "/maintenance", flash, error);
    page(
        &MaintenancePage {
            chrome,
            status: ops::status(state),
            states: ops::SERVER_STATES,
            confirm,
        },
        status,
    )
}

/// `GET /maintenance`.
pub async fn maintenance(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    headers: HeaderMap,
) -> Response {
    let flash = take_flash(&headers);
    render_maintenance(&state, &who, flash, None, None)
}

/// `POST /maintenance` form; without `confirm=yes` it only shows the
/// confirmation step.
#[derive(Debug, Deserialize)]
pub struct MaintenanceForm {
    state: String,
    #[serde(default)]
    estimated_return_time: String,
    #[serde(default)]
    seconds_till_shutdown: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    drain: Option<String>,
    #[serde(default)]
    confirm: Option<String>,
}

/// `POST /maintenance` (operator): first the confirmation step, then the
/// state change through the same engine call as the OPC UA method.
pub async fn maintenance_submit(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    Form(f): Form<MaintenanceForm>,
) -> Response {
    let req = match number::<u32>("seconds_till_shutdown", &f.seconds_till_shutdown) {
        Ok(seconds) => ops::MaintenanceRequest {
            state: f.state.clone(),
            estimated_return_time: Some(f.estimated_return_time.clone()),
            seconds_till_shutdown: seconds,
            reason: Some(f.reason.clone()),
            drain: f.drain.is_some(),
        },
        Err(e) => return render_maintenance(&state, &who, None, None, Some(e)),
    };
    if let Err(e) = who.require(Role::Operator) {
        return render_maintenance(&state, &who, None, None, Some(e));
    }
    if f.confirm.as_deref() != Some("yes") {
        let effect = if f.state == "running" {
            "Clients will see ServiceLevel return to its computed value."
        } else if matches!(f.state.as_str(), "suspended" | "shutdown" | "test") {
            "Clients will see ServiceLevel 0 (maintenance) and should fail over to the partner."
        } else {
            "Clients will see ServiceLevel 1 (no data) and should fail over to the partner."
        };
        let confirm = Confirm {
            state: f.state,
            estimated_return_time: f.estimated_return_time,
            seconds_till_shutdown: f.seconds_till_shutdown,
            reason: f.reason,
            drain: req.drain,
            effect,
        };
        return render_maintenance(&state, &who, None, Some(confirm), None);
    }
    match ops::change_state(&state, &who, &req).await {
        Ok(()) => done(
            "/maintenance",
            &format!("Server state is now {}.", req.state),
        ),
        Err(e) => render_maintenance(&state, &who, None, None, Some(e)),
    }
}

// ------------------------------------------------------------ certificates

/// One certificate list on the page.
pub struct CertList {
    title: &'static str,
    kind: &'static str,
    certs: Vec<CertInfo>,
}

/// The TLS certificate as the page shows it.
pub struct TlsRow {
    subject: String,
    fingerprint: String,
    not_after: String,
}

#[derive(Template)]
#[template(path = "certificates.html")]
struct CertificatesPage {
    chrome: Chrome,
    app_cert: Option<CertSummary>,
    tls: Option<TlsRow>,
    lists: Vec<CertList>,
    crl_count: usize,
}

async fn render_certificates(
    state: &WebState,
    who: &Authed,
    flash: Option<String>,
    error: Option<ApiError>,
) -> Response {
    let mut lists = Vec::new();
    for (title, kind) in [
        ("Rejected (awaiting a decision)", CertKind::Rejected),
        ("Trusted", CertKind::Trusted),
        ("Issuers (CAs)", CertKind::Issuer),
    ] {
        match state.store.certs(kind).await {
            Ok(certs) => lists.push(CertList {
                title,
                kind: kind.as_str(),
                certs,
            }),
            Err(e) => return error_page(e.into()),
        }
    }
    let crl_count = state.store.crls().await.map(|c| c.len()).unwrap_or(0);
    let (chrome, status) = Chrome::with_error(who, "Certificates", "/certificates", flash, error);
    let t = CertificatesPage {
        chrome,
        app_cert: uagate_store::describe_certificate(&state.engine.application_certificate()).ok(),
        tls: state.engine.tls_certificate().map(|t| TlsRow {
            subject: t.subject,
            fingerprint: t.fingerprint,
            not_after: t.not_after.to_rfc3339(),
        }),
        lists,
        crl_count,
    };
    page(&t, status)
}

/// `GET /certificates`.
pub async fn certificates(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    headers: HeaderMap,
) -> Response {
    let flash = take_flash(&headers);
    render_certificates(&state, &who, flash, None).await
}

/// A form naming one certificate.
#[derive(Debug, Deserialize)]
pub struct ThumbprintForm {
    thumbprint: String,
}

/// `POST /certificates/trust`: moves a rejected certificate to the
/// trusted list (operator).
pub async fn certificate_trust(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    Form(f): Form<ThumbprintForm>,
) -> Response {
    match ops::trust_rejected(&state, &who, &f.thumbprint).await {
        Ok(c) => done("/certificates", &format!("Trusted {}.", c.subject)),
        Err(e) => render_certificates(&state, &who, None, Some(e)).await,
    }
}

/// `POST /certificates/remove` (operator).
pub async fn certificate_remove(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    Form(f): Form<ThumbprintForm>,
) -> Response {
    match ops::remove_certificate(&state, &who, &f.thumbprint).await {
        Ok(()) => done("/certificates", "Certificate removed."),
        Err(e) => render_certificates(&state, &who, None, Some(e)).await,
    }
}

/// Most bytes of an uploaded certificate or CRL.
const MAX_UPLOAD: usize = 16 << 20;

/// Reads the multipart fields of an upload: (field name, bytes).
async fn read_upload(mut m: Multipart) -> Result<Vec<(String, Vec<u8>)>, ApiError> {
    let mut out = Vec::new();
    let mut total = 0usize;
    while let Some(field) = m
        .next_field()
        .await
        .map_err(|e| ApiError::invalid("upload", e.body_text()))?
    {
        let name = field.name().unwrap_or("").to_string();
        let bytes = field
            .bytes()
            .await
            .map_err(|e| ApiError::invalid("upload", e.body_text()))?;
        total += bytes.len();
        if total > MAX_UPLOAD {
            return Err(ApiError::invalid("upload", "larger than 16 MiB"));
        }
        out.push((name, bytes.to_vec()));
    }
    Ok(out)
}

/// `POST /certificates/crl` (multipart, operator): stores a CRL.
pub async fn certificate_crl(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    m: Multipart,
) -> Response {
    let result = async {
        let fields = read_upload(m).await?;
        let crl = fields
            .into_iter()
            .find(|(n, _)| n == "crl")
            .map(|(_, b)| b)
            .ok_or_else(|| ApiError::invalid("crl", "choose a CRL file"))?;
        ops::add_crl(&state, &who, &crl).await
    }
    .await;
    match result {
        Ok(()) => done("/certificates", "CRL stored."),
        Err(e) => render_certificates(&state, &who, None, Some(e)).await,
    }
}

/// `POST /certificates/upload` (multipart, operator): adds a trusted or
/// issuer certificate.
pub async fn certificate_upload(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    m: Multipart,
) -> Response {
    let result = async {
        let fields = read_upload(m).await?;
        let kind = fields
            .iter()
            .find(|(n, _)| n == "kind")
            .map(|(_, b)| String::from_utf8_lossy(b).to_string())
            .unwrap_or_else(|| "trusted".into());
        let cert = fields
            .into_iter()
            .find(|(n, _)| n == "certificate")
            .map(|(_, b)| b)
            .ok_or_else(|| ApiError::invalid("certificate", "choose a certificate file"))?;
        ops::add_certificate(&state, &who, &cert, &kind).await
    }
    .await;
    match result {
        Ok(c) => done("/certificates", &format!("Added {}.", c.subject)),
        Err(e) => render_certificates(&state, &who, None, Some(e)).await,
    }
}

// ------------------------------------------------------------------- users

#[derive(Template)]
#[template(path = "users.html")]
struct UsersPage {
    chrome: Chrome,
    users: Vec<(String, &'static str)>,
    roles: [&'static str; 3],
}

async fn render_users(
    state: &WebState,
    who: &Authed,
    flash: Option<String>,
    error: Option<ApiError>,
) -> Response {
    if let Err(e) = who.require(Role::Admin) {
        return error_page(e);
    }
    let users = match state.store.list_users().await {
        Ok(u) => u.into_iter().map(|(n, r)| (n, r.as_str())).collect(),
        Err(e) => return error_page(e.into()),
    };
    let (chrome, status) = Chrome::with_error(who, "Users", "/users", flash, error);
    page(
        &UsersPage {
            chrome,
            users,
            roles: ["viewer", "operator", "admin"],
        },
        status,
    )
}

/// `GET /users` (admin).
pub async fn users(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    headers: HeaderMap,
) -> Response {
    let flash = take_flash(&headers);
    render_users(&state, &who, flash, None).await
}

/// `POST /users` form.
#[derive(Debug, Deserialize)]
pub struct NewUserForm {
    username: String,
    password: String,
    role: String,
}

fn role_field(s: &str) -> Result<Role, ApiError> {
    crate::auth::role_from_str(s)
        .ok_or_else(|| ApiError::invalid("role", "one of viewer, operator, admin"))
}

/// `POST /users` (admin).
pub async fn user_add(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    Form(f): Form<NewUserForm>,
) -> Response {
    let result = async {
        who.require(Role::Admin)?;
        let role = role_field(&f.role)?;
        state
            .store
            .add_user(&who.user, f.username.trim(), &f.password, role)
            .await
            .map_err(ApiError::from)
    }
    .await;
    match result {
        Ok(()) => done("/users", &format!("User {} added.", f.username.trim())),
        Err(e) => render_users(&state, &who, None, Some(e)).await,
    }
}

/// `POST /users/role` form.
#[derive(Debug, Deserialize)]
pub struct RoleForm {
    name: String,
    role: String,
}

/// `POST /users/role` (admin).
pub async fn user_role(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    Form(f): Form<RoleForm>,
) -> Response {
    let result = async {
        who.require(Role::Admin)?;
        let role = role_field(&f.role)?;
        state
            .store
            .set_role(&who.user, &f.name, role)
            .await
            .map_err(ApiError::from)
    }
    .await;
    match result {
        Ok(()) => done("/users", &format!("{} is now {}.", f.name, f.role)),
        Err(e) => render_users(&state, &who, None, Some(e)).await,
    }
}

/// `POST /users/password` form.
#[derive(Debug, Deserialize)]
pub struct PasswordForm {
    name: String,
    password: String,
}

/// `POST /users/password` (admin).
pub async fn user_password(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    Form(f): Form<PasswordForm>,
) -> Response {
    let result = async {
        who.require(Role::Admin)?;
        state
            .store
            .set_password(&who.user, &f.name, &f.password)
            .await
            .map_err(ApiError::from)
    }
    .await;
    match result {
        Ok(()) => done("/users", &format!("Password of {} reset.", f.name)),
        Err(e) => render_users(&state, &who, None, Some(e)).await,
    }
}

/// `POST /users/remove` form.
#[derive(Debug, Deserialize)]
pub struct NameForm {
    name: String,
}

/// `POST /users/remove` (admin).
pub async fn user_remove(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    Form(f): Form<NameForm>,
) -> Response {
    let result = async {
        who.require(Role::Admin)?;
        state
            .store
            .delete_user(&who.user, &f.name)
            .await
            .map_err(ApiError::from)
    }
    .await;
    match result {
        Ok(()) => done("/users", &format!("User {} removed.", f.name)),
        Err(e) => render_users(&state, &who, None, Some(e)).await,
    }
}

// ------------------------------------------------------------------- audit

/// One audit row.
pub struct AuditRow {
    seq: i64,
    at: String,
    actor: String,
    kind: String,
    summary: String,
    changes: Vec<(String, String, String)>,
}

#[derive(Template)]
#[template(path = "audit.html")]
struct AuditPage {
    chrome: Chrome,
    entries: Vec<AuditRow>,
    actor: String,
    kind: String,
    older: Option<i64>,
}

/// `GET /audit` query: newest first, before a sequence number.
#[derive(Debug, Deserialize)]
pub struct AuditPageQuery {
    #[serde(default)]
    actor: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    before: Option<i64>,
}

/// Entries per audit page.
const AUDIT_PAGE: usize = 100;

/// `GET /audit` (admin): the change log, newest first, with each change's
/// before and after values.
pub async fn audit(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    Query(q): Query<AuditPageQuery>,
) -> Response {
    if let Err(e) = who.require(Role::Admin) {
        return error_page(e);
    }
    let actor = q.actor.trim();
    let kind = q.kind.trim();
    let entries = match ops::audit_entries(
        &state,
        (!actor.is_empty()).then_some(actor),
        (!kind.is_empty()).then_some(kind),
        q.before,
        AUDIT_PAGE + 1,
    )
    .await
    {
        Ok(e) => e,
        Err(e) => return error_page(e),
    };
    let older = (entries.len() > AUDIT_PAGE).then(|| entries[AUDIT_PAGE - 1].seq);
    let rows = entries
        .into_iter()
        .take(AUDIT_PAGE)
        .map(|e| {
            let changes = ops::setting_changes(&e.payload);
            let summary = ops::audit_summary(&e.payload);
            AuditRow {
                seq: e.seq,
                at: e.at,
                actor: e.actor,
                kind: e.kind,
                summary,
                changes,
            }
        })
        .collect();
    page(
        &AuditPage {
            chrome: Chrome::new(&who, "Audit log", "/audit", None),
            entries: rows,
            actor: actor.to_string(),
            kind: kind.to_string(),
            older,
        },
        StatusCode::OK,
    )
}

// ------------------------------------------------------- field connections

/// One field connection's live row.
pub struct FieldRow {
    name: String,
    state: &'static str,
    active_endpoint: Option<String>,
    service_level: Option<u8>,
    reconnects: u64,
    failovers: u64,
    failed_attempts: u64,
    last_error: String,
    /// (url, session up, ServiceLevel) per server of the set.
    servers: Vec<(String, bool, Option<u8>)>,
}

fn field_rows(state: &WebState) -> Vec<FieldRow> {
    let engine = &state.engine;
    engine
        .applied_config()
        .field_servers
        .iter()
        .filter_map(|f| {
            let st = engine.field_status(&f.name)?;
            Some(FieldRow {
                name: f.name.clone(),
                state: ops::conn_state(st.state),
                active_endpoint: st.active_endpoint,
                service_level: st.service_level,
                reconnects: st.reconnect_count,
                failovers: st.failover_count,
                failed_attempts: st.failed_attempts,
                last_error: st.last_error.map(|e| e.to_string()).unwrap_or_default(),
                servers: st
                    .servers
                    .iter()
                    .map(|v| (v.url.clone(), v.reachable, v.service_level))
                    .collect(),
            })
        })
        .collect()
}

#[derive(Template)]
#[template(path = "fields.html")]
struct FieldsPage {
    chrome: Chrome,
    fields: Vec<FieldRow>,
    operator: bool,
    csrf: String,
    probe: Option<(String, Vec<ops::ProbeView>)>,
    histories: Vec<(String, Vec<ops::HistoryView>)>,
    /// (name, TOML of its entry, passwords redacted).
    entries: Vec<(String, String)>,
    template: &'static str,
}

#[derive(Template)]
#[template(path = "fields_live.html")]
struct FieldsLive {
    fields: Vec<FieldRow>,
    operator: bool,
    csrf: String,
}

/// What the add form starts with.
const FIELD_TEMPLATE: &str = r#"name = "line3"
security_mode = "sign_and_encrypt"
security_policy = "Basic256Sha256"
identity = { kind = "anonymous" }

[[endpoints]]
url = "opc.tcp://10.0.3.10:4840"
alternates = []
"#;

/// One `[[field_servers]]` entry as TOML (passwords redacted).
fn field_toml(f: &uagate_config::FieldServer) -> String {
    let mut c = Config::default();
    c.field_servers.push(f.clone());
    ops::redact(&mut c);
    toml::to_string(&c.field_servers[0]).unwrap_or_default()
}

async fn render_fields(
    state: &WebState,
    who: &Authed,
    flash: Option<String>,
    probe: Option<(String, Vec<ops::ProbeView>)>,
    error: Option<ApiError>,
) -> Response {
    let config = match ops::stored_config(state).await {
        Ok(c) => c,
        Err(e) => return error_page(e),
    };
    let fields = field_rows(state);
    let histories = fields
        .iter()
        .map(|f| {
            let mut h = ops::field_history(state, &f.name).unwrap_or_default();
            h.truncate(30);
            (f.name.clone(), h)
        })
        .collect();
    let (chrome, status) = Chrome::with_error(who, "Field connections", "/fields", flash, error);
    page(
        &FieldsPage {
            operator: who.can(Role::Operator),
            csrf: who.csrf.clone(),
            chrome,
            fields,
            probe,
            histories,
            entries: config
                .field_servers
                .iter()
                .map(|f| (f.name.clone(), field_toml(f)))
                .collect(),
            template: FIELD_TEMPLATE,
        },
        status,
    )
}

/// `GET /fields`.
pub async fn fields(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    headers: HeaderMap,
) -> Response {
    let flash = take_flash(&headers);
    render_fields(&state, &who, flash, None, None).await
}

/// `GET /partials/fields`: the live table, refreshed by htmx.
pub async fn fields_partial(State(state): State<WebState>, Viewer(who): Viewer) -> Response {
    page(
        &FieldsLive {
            fields: field_rows(&state),
            operator: who.can(Role::Operator),
            csrf: who.csrf.clone(),
        },
        StatusCode::OK,
    )
}

/// `POST /fields` form: one entry as TOML.
#[derive(Debug, Deserialize)]
pub struct FieldForm {
    toml: String,
}

/// Parses one `[[field_servers]]` entry; errors name `field_servers`.
pub fn parse_field(text: &str) -> Result<uagate_config::FieldServer, ApiError> {
    toml::from_str(text).map_err(|e| {
        ApiError::invalid(
            "field_servers",
            format!("not a valid field server entry: {}", e.message()),
        )
    })
}

/// `POST /fields`: adds or replaces a field connection (operator).
pub async fn field_save(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    Form(f): Form<FieldForm>,
) -> Response {
    let result = async {
        who.require(Role::Operator)?;
        let field = parse_field(&f.toml)?;
        ops::upsert_field(&state, &who, field).await
    }
    .await;
    match result {
        Ok(change) => done("/fields", &change_notice(&change)),
        Err(e) => render_fields(&state, &who, None, None, Some(e)).await,
    }
}

/// `POST /fields/remove` (operator).
pub async fn field_remove(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    Form(f): Form<NameForm>,
) -> Response {
    match ops::remove_field(&state, &who, &f.name).await {
        Ok(change) => done("/fields", &change_notice(&change)),
        Err(e) => render_fields(&state, &who, None, None, Some(e)).await,
    }
}

/// `POST /fields/test` (operator): probes the connection's URLs and shows
/// what each answered.
pub async fn field_test(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    Form(f): Form<NameForm>,
) -> Response {
    match ops::probe_field(&state, &who, &f.name).await {
        Ok(p) => render_fields(&state, &who, None, Some((f.name, p)), None).await,
        Err(e) => render_fields(&state, &who, None, None, Some(e)).await,
    }
}

/// `POST /fields/failover` (operator).
pub async fn field_failover(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    Form(f): Form<NameForm>,
) -> Response {
    match ops::force_failover(&state, &who, &f.name).await {
        Ok(()) => done(
            "/fields",
            &format!("Failover of {} requested; see its recent events.", f.name),
        ),
        Err(e) => render_fields(&state, &who, None, None, Some(e)).await,
    }
}

// ---------------------------------------------------------------- sessions

#[derive(Template)]
#[template(path = "sessions.html")]
struct SessionsPage {
    chrome: Chrome,
    sessions: Vec<ops::SessionView>,
}

fn render_sessions(
    state: &WebState,
    who: &Authed,
    flash: Option<String>,
    error: Option<ApiError>,
) -> Response {
    let (chrome, status) = Chrome::with_error(who, "Sessions", "/sessions", flash, error);
    page(
        &SessionsPage {
            chrome,
            sessions: ops::sessions(state),
        },
        status,
    )
}

/// `GET /sessions`.
pub async fn sessions(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    headers: HeaderMap,
) -> Response {
    let flash = take_flash(&headers);
    render_sessions(&state, &who, flash, None)
}

/// `POST /sessions/close` form.
#[derive(Debug, Deserialize)]
pub struct SessionForm {
    id: String,
}

/// `POST /sessions/close` (operator).
pub async fn session_close(
    State(state): State<WebState>,
    Viewer(who): Viewer,
    Form(f): Form<SessionForm>,
) -> Response {
    match ops::close_session(&state, &who, &f.id).await {
        Ok(()) => done("/sessions", "Session closed."),
        Err(e) => render_sessions(&state, &who, None, Some(e)),
    }
}

// ------------------------------------------------------------------ static

/// `GET /static/htmx.min.js` (vendored from the npm package htmx.org).
pub async fn htmx() -> Response {
    static_asset(
        include_bytes!("../../static/htmx.min.js"),
        "text/javascript",
    )
}

/// `GET /static/console.css`.
pub async fn css() -> Response {
    static_asset(include_bytes!("../../static/console.css"), "text/css")
}

fn static_asset(body: &'static [u8], content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        body,
    )
        .into_response()
}
