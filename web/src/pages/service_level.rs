//! ServiceLevel (`/service-level`): the published value and where it comes
//! from; an operator overrides it with an expiry and a reason, or returns
//! it to the computed value.

use askama::Template;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Form;
use serde::Deserialize;

use super::{done, number, page, take_flash, Chrome};
use crate::auth::Authed;
use crate::error::ApiError;
use crate::ops::{self, StatusView};
use crate::state::WebState;

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

/// How the page shows a form post the router refused for the caller's
/// role: the page again, with the error above it.
pub async fn refused(state: WebState, who: Authed, error: ApiError, _: Request) -> Response {
    render_level(&state, &who, None, Some(error))
}

/// `GET /service-level`.
pub async fn show(State(state): State<WebState>, who: Authed, headers: HeaderMap) -> Response {
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

/// `POST /service-level`: sets the override.
pub async fn set(State(state): State<WebState>, who: Authed, Form(f): Form<LevelForm>) -> Response {
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

/// `POST /service-level/clear`: back to the computed value.
pub async fn clear(State(state): State<WebState>, who: Authed) -> Response {
    match ops::override_level(&state, &who, ops::LevelOverride::default()).await {
        Ok(()) => done("/service-level", "Override cleared."),
        Err(e) => render_level(&state, &who, None, Some(e)),
    }
}
