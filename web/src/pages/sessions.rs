//! Sessions (`/sessions`): the northbound sessions; an operator closes
//! one.

use askama::Template;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Form;
use serde::Deserialize;

use super::{done, page, take_flash, Chrome};
use crate::auth::Authed;
use crate::error::ApiError;
use crate::ops;
use crate::state::WebState;

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

/// How the page shows a form post the router refused for the caller's
/// role: the page again, with the error above it.
pub async fn refused(state: WebState, who: Authed, error: ApiError, _: Request) -> Response {
    render_sessions(&state, &who, None, Some(error))
}

/// `GET /sessions`.
pub async fn show(State(state): State<WebState>, who: Authed, headers: HeaderMap) -> Response {
    let flash = take_flash(&headers);
    render_sessions(&state, &who, flash, None)
}

/// `POST /sessions/close` form.
#[derive(Debug, Deserialize)]
pub struct SessionForm {
    id: String,
}

/// `POST /sessions/close`.
pub async fn close(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<SessionForm>,
) -> Response {
    match ops::close_session(&state, &who, &f.id).await {
        Ok(()) => done("/sessions", "Session closed."),
        Err(e) => render_sessions(&state, &who, None, Some(e)),
    }
}
