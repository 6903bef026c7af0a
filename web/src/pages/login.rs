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
}

/// `GET /login?next=`: the login form.
#[derive(Debug, Deserialize)]
pub struct NextQuery {
    /// Where to go after logging in (a console path).
    #[serde(default)]
    pub next: Option<String>,
}

/// `GET /login`.
pub async fn form(State(state): State<WebState>, Query(q): Query<NextQuery>) -> Response {
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
