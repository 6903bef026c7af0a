//! The pages without a session: the login form (`/login`), the first-start
//! setup form that creates the first administrator (`/setup`), and logout.

use std::net::SocketAddr;

use askama::Template;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use axum::{Extension, Form};
use serde::Deserialize;

use super::{done, page, see_other, status_of};
use crate::auth::{clear_cookie, session_cookie, Authed};
use crate::error::ApiError;
use crate::ops::{check_login, check_setup, SetupRequest};
use crate::state::WebState;

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    title: String,
    error: Option<String>,
    next: String,
    setup_pending: bool,
    /// Came here because the session ended (idle logout, logout in another
    /// tab): the page says so.
    expired: bool,
    /// The one-shot notice of the redirect that led here (the user's own
    /// password changed, their own user removed): said instead.
    notice: Option<String>,
    /// The user name of a refused login, shown again.
    username: String,
}

/// `GET /login?next=`: the login form.
#[derive(Debug, Deserialize)]
pub struct NextQuery {
    /// Where to go after logging in (a console path).
    #[serde(default)]
    pub next: Option<String>,
    /// Set when a page's session ended (see `pages::to_login`).
    #[serde(default)]
    pub expired: Option<String>,
}

/// `GET /login`.
pub async fn form(
    State(state): State<WebState>,
    Query(q): Query<NextQuery>,
    headers: axum::http::HeaderMap,
) -> Response {
    let notice = super::take_flash(&headers);
    let t = LoginPage {
        title: "Log in".into(),
        error: None,
        next: safe_next(q.next.as_deref()),
        setup_pending: state.setup_code.lock().is_some(),
        expired: q.expired.is_some() && notice.is_none(),
        notice,
        username: String::new(),
    };
    page(&t, StatusCode::OK)
}

/// Where to go after logging in: a console page, never a fragment or a
/// REST path, and never another site (no open redirect).
/// - a page of the navigation, with its query, as it is;
/// - a fragment a page refreshes (`/partials/fields`) or a form's address
///   (`/fields/check`): that page, without the query;
/// - anything else: the Dashboard.
pub(crate) fn safe_next(next: Option<&str>) -> String {
    let Some(n) = next else {
        return "/".to_string();
    };
    if !n.starts_with('/')
        || n.starts_with("//")
        || n.contains('\\')
        || n.chars().any(char::is_control)
    {
        return "/".to_string();
    }
    let path = n.split(['?', '#']).next().unwrap_or("/");
    if super::NAV.iter().any(|(p, _, _)| *p == path) {
        return n.to_string();
    }
    let page = match path.strip_prefix("/partials/") {
        Some("usage") => "/limits".to_string(),
        Some("dashboard") => "/".to_string(),
        Some(fragment) => format!("/{fragment}"),
        None => path.to_string(),
    };
    super::NAV
        .iter()
        .map(|(p, _, _)| *p)
        .filter(|p| *p != "/")
        .find(|p| {
            page == *p
                || page
                    .strip_prefix(p)
                    .is_some_and(|rest| rest.starts_with('/'))
        })
        .unwrap_or("/")
        .to_string()
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
pub async fn submit(
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
                expired: false,
                notice: None,
                username: f.username.clone(),
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
    /// The code and name as typed, given back with an error (never the
    /// password).
    code: String,
    username: String,
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
            code: String::new(),
            username: String::new(),
        },
        StatusCode::OK,
    )
}

/// `POST /setup`: creates the first admin and logs them in. A refusal
/// shows the form again with the error, the code and the name as typed,
/// and the status the REST setup gives (403 for the code, 422 for a name
/// or password refused).
pub async fn setup_submit(
    State(state): State<WebState>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    Form(f): Form<SetupRequest>,
) -> Response {
    let addr = peer.map(|Extension(ConnectInfo(a))| a.ip());
    match check_setup(&state, &f, addr).await {
        Ok(token) => with_session(done("/", "Administrator created."), &token),
        Err(e) => {
            let (status, _) = e.status_and_code();
            page(
                &SetupPage {
                    title: "First start".into(),
                    error: Some(match e {
                        ApiError::SetupCode => "Wrong or expired setup code.".to_string(),
                        other => super::sentence(&other.to_string()),
                    }),
                    code: f.code,
                    username: f.username,
                },
                status,
            )
        }
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
