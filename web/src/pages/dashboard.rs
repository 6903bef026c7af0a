//! The dashboard (`/`): the gateway at a glance (role, ServiceLevel,
//! server state, sessions, isolation usage per stage, field connections,
//! rejections, recently rejected certificates), with its live part
//! (`/partials/dashboard`) refreshed by htmx.

use askama::Template;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use uagate_store::CertKind;

use super::{page, take_flash, Chrome};
use crate::auth::Authed;
use crate::ops::{self, StatusView};
use crate::state::WebState;

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
pub async fn show(State(state): State<WebState>, who: Authed, headers: HeaderMap) -> Response {
    let flash = take_flash(&headers);
    let t = DashboardPage {
        chrome: Chrome::new(&who, "Dashboard", "/", flash),
        live: live(&state).await,
    };
    page(&t, StatusCode::OK)
}

/// `GET /partials/dashboard`: the live part, refreshed by htmx.
pub async fn partial(State(state): State<WebState>) -> Response {
    page(
        &DashboardLive {
            live: live(&state).await,
        },
        StatusCode::OK,
    )
}
