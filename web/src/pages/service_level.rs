//! ServiceLevel (`/service-level`): the published value and where it comes
//! from; an operator overrides it with an expiry and a reason, or returns
//! it to the computed value.

use askama::Template;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Form;
use serde::Deserialize;

use super::{done, page, take_flash, Chrome};
use crate::auth::Authed;
use crate::error::ApiError;
use crate::ops::{self, StatusView};
use crate::state::WebState;

#[derive(Template)]
#[template(path = "service_level.html")]
struct LevelPage {
    chrome: Chrome,
    status: StatusView,
    /// The override in force: who set it, when it ends (RFC 3339, and as
    /// `YYYY-MM-DD HH:MM UTC` until the browser shows its local time) and
    /// how long that is from now.
    until: Option<OverrideEnd>,
    /// What the override form shows: as entered when it was refused.
    form: LevelForm,
}

/// When the override in force ends, for the page.
struct OverrideEnd {
    by: String,
    at: String,
    at_utc: String,
    left: String,
}

impl OverrideEnd {
    fn of(status: &StatusView) -> Option<OverrideEnd> {
        let at = status.service_level_override_until.clone()?;
        let when = chrono::DateTime::parse_from_rfc3339(&at).ok()?;
        let minutes = (when.timestamp() - chrono::Utc::now().timestamp()).max(0) / 60;
        let left = match minutes {
            0 => "in less than a minute".to_string(),
            m if m < 120 => format!("in {m} min"),
            m if m < 48 * 60 => format!("in {} h {} min", m / 60, m % 60),
            m => format!("in {} days", m / (24 * 60)),
        };
        Some(OverrideEnd {
            by: status.service_level_override_by.clone().unwrap_or_default(),
            at_utc: when.format("%Y-%m-%d %H:%M UTC").to_string(),
            at,
            left,
        })
    }
}

fn render_level(
    state: &WebState,
    who: &Authed,
    flash: Option<String>,
    error: Option<ApiError>,
) -> Response {
    render_entered(state, who, flash, error, LevelForm::default())
}

/// The page with the override form showing `form` (what a refused post
/// entered, so nothing typed is lost).
fn render_entered(
    state: &WebState,
    who: &Authed,
    flash: Option<String>,
    error: Option<ApiError>,
    form: LevelForm,
) -> Response {
    let (chrome, status) = Chrome::with_error(who, "ServiceLevel", "/service-level", flash, error);
    let level = ops::status(state);
    page(
        &LevelPage {
            chrome,
            until: OverrideEnd::of(&level),
            status: level,
            form,
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
#[derive(Debug, Clone, Deserialize)]
pub struct LevelForm {
    level: String,
    expires_min: String,
    #[serde(default)]
    reason: String,
}

/// The empty form: no level, an hour.
impl Default for LevelForm {
    fn default() -> LevelForm {
        LevelForm {
            level: String::new(),
            expires_min: "60".to_string(),
            reason: String::new(),
        }
    }
}

/// Longest override the form takes, in its unit (minutes).
const MAX_OVERRIDE_MIN: u64 = crate::ops::MAX_OVERRIDE.as_secs() / 60;

/// The form's fields read in their labels' words and units.
fn parsed(f: &LevelForm) -> Result<(u8, u64), ApiError> {
    let level = f.level.trim().parse::<u8>().map_err(|_| {
        ApiError::invalid("level", "Fixed ServiceLevel: a whole number from 0 to 255.")
    })?;
    let minutes = f
        .expires_min
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|m| (1..=MAX_OVERRIDE_MIN).contains(m))
        .ok_or_else(|| {
            ApiError::invalid(
                "expires_min",
                format!("Expires after: between 1 and {MAX_OVERRIDE_MIN} minutes (7 days)."),
            )
        })?;
    Ok((level, minutes))
}

/// `POST /service-level`: sets the override.
pub async fn set(State(state): State<WebState>, who: Authed, Form(f): Form<LevelForm>) -> Response {
    let result = async {
        let (level, minutes) = parsed(&f)?;
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
        Err(e) => render_entered(&state, &who, None, Some(e), f),
    }
}

/// `POST /service-level/clear`: back to the computed value.
pub async fn clear(State(state): State<WebState>, who: Authed) -> Response {
    match ops::override_level(&state, &who, ops::LevelOverride::default()).await {
        Ok(()) => done("/service-level", "Override cleared."),
        Err(e) => render_level(&state, &who, None, Some(e)),
    }
}
