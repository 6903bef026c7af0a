//! Resource-isolation usage now (per stage used of total, owners tracked,
//! rejections since start): the engineering view of the request pipeline,
//! shown on the Limits page next to the limits it measures and refreshed
//! by htmx (`/partials/usage`).

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::charts::thousands;
use super::page;
use crate::state::WebState;

/// One stage's use of its capacity.
pub struct UsageBar {
    pub(crate) stage: &'static str,
    pub(crate) used: String,
    pub(crate) total: String,
    pub(crate) percent: u64,
}

/// What the usage section shows.
pub struct Usage {
    pub(crate) bars: Vec<UsageBar>,
    pub(crate) owners: String,
    pub(crate) rejections: Vec<(&'static str, &'static str, String)>,
}

/// The usage now, from the engine's isolation snapshot and the plan in force.
pub fn usage(state: &WebState) -> Usage {
    let snap = state.engine.isolation_snapshot();
    let plan = uagate_isolation::plan::Plan::build(&state.engine.applied_config()).ok();
    let bars = snap
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
                used: thousands(i64::try_from(*used).unwrap_or(i64::MAX)),
                total: thousands(i64::try_from(total).unwrap_or(i64::MAX)),
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
        .map(|(s, r, n)| {
            (
                s.name(),
                r.label(),
                thousands(i64::try_from(*n).unwrap_or(i64::MAX)),
            )
        })
        .collect();
    Usage {
        bars,
        owners: thousands(i64::try_from(snap.tracked_owners).unwrap_or(i64::MAX)),
        rejections,
    }
}

#[derive(Template)]
#[template(path = "usage_live.html")]
struct UsageLive {
    usage: Usage,
}

/// `GET /partials/usage`: the usage section, refreshed by htmx.
pub async fn partial(State(state): State<WebState>) -> Response {
    page(
        &UsageLive {
            usage: usage(&state),
        },
        StatusCode::OK,
    )
}
