//! The dashboard (`/`): the gateway at a glance for an operator (version,
//! uptime, role, ServiceLevel and why, server state, sessions, field
//! connections, memory), charts of the last quarter of an hour from the
//! gateway's own samples, and recently rejected certificates; its live
//! part (`/partials/dashboard`) is refreshed by htmx. The isolation
//! internals are on the Limits page.

use askama::Template;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use uagate_store::CertKind;

use super::charts::{self, line_chart, Series};
use super::{page, take_flash, Chrome};
use crate::auth::Authed;
use crate::ops::{self, StatusView};
use crate::state::WebState;

/// What the dashboard shows; refreshed every few seconds.
pub struct Live {
    status: StatusView,
    /// The product version.
    version: &'static str,
    /// Uptime, for people.
    uptime: String,
    /// Sessions, formatted, and the most allowed.
    sessions: String,
    max_sessions: String,
    /// "2 of 3 up", or empty without field connections.
    fields_up: String,
    /// Resident memory of the gateway process, when known.
    memory: Option<String>,
    /// The charts (title, inline SVG).
    charts: Vec<(&'static str, String)>,
    /// The field connections, each with its failing state in words.
    fields: Vec<(ops::FieldView, Option<super::fields::Failing>)>,
    rejected_certs: Vec<String>,
    /// Stored CRLs that are due soon or out of date, and certificates
    /// (this appliance's own, the CAs') that expire within 30 days or
    /// have: the page's class for each (`warn`, `error`) and what it means.
    alerts: Vec<(&'static str, String)>,
}

/// Resident memory of this process (Linux; `None` elsewhere).
fn resident_memory() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// The four charts of the last quarter of an hour, from the engine's
/// samples.
fn charts(state: &WebState) -> Vec<(&'static str, String)> {
    let samples = state.engine.samples();
    let at: Vec<i64> = samples.iter().map(|s| s.at).collect();
    let one = |label: &str, f: &dyn Fn(&uagate_server::samples::Sample) -> f64| {
        vec![Series {
            label: label.to_string(),
            values: samples.iter().map(|s| Some(f(s))).collect(),
        }]
    };
    let mut names: Vec<String> = Vec::new();
    for s in &samples {
        for (n, _) in &s.fields {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
    }
    let levels: Vec<Series> = names
        .iter()
        .map(|n| Series {
            label: n.clone(),
            values: samples
                .iter()
                .map(|s| {
                    s.fields
                        .iter()
                        .find(|(f, _)| f == n)
                        .and_then(|(_, l)| l.map(f64::from))
                })
                .collect(),
        })
        .collect();
    vec![
        (
            "Reads per second",
            line_chart(
                "Reads per second",
                &at,
                &one("Reads per second", &|s| s.reads_per_s),
                None,
                "/s",
            ),
        ),
        (
            "Notifications per second",
            line_chart(
                "Notifications per second",
                &at,
                &one("Notifications per second", &|s| s.notifications_per_s),
                None,
                "/s",
            ),
        ),
        (
            "Sessions",
            line_chart(
                "Sessions",
                &at,
                &one("Sessions", &|s| s.sessions as f64),
                None,
                "",
            ),
        ),
        (
            "Field connections' ServiceLevel",
            line_chart(
                "Field connections' ServiceLevel",
                &at,
                &levels,
                Some(255.0),
                "",
            ),
        ),
    ]
}

async fn live(state: &WebState) -> Live {
    let status = ops::status(state);
    let config = state.engine.applied_config();
    let enabled = config.field_servers.iter().filter(|f| f.enabled).count();
    let up = status
        .fields
        .iter()
        .filter(|f| f.state == "connected")
        .count();
    let rejected_certs = state
        .store
        .certs(CertKind::Rejected)
        .await
        .unwrap_or_default()
        .into_iter()
        .take(5)
        .map(|c| c.subject)
        .collect();
    let now = chrono::Utc::now();
    let mut alerts = state
        .store
        .crl_next_updates()
        .await
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(issuer, next)| {
            let (crl, words) = ops::crl_state(next.as_deref(), now);
            let class = match crl {
                ops::CrlState::Current => return None,
                ops::CrlState::DueSoon => "warn",
                ops::CrlState::OutOfDate => "error",
            };
            Some((class, format!("CRL of {issuer}: {words}.")))
        })
        .collect::<Vec<_>>();
    // A flood of new certificates: some were refused without a trace on
    // the Certificates page.
    let unlisted = state.store.unlisted_rejections();
    if let Some(ago) = unlisted
        .last
        .map(|t| t.elapsed())
        .filter(|ago| *ago < std::time::Duration::from_secs(3600))
    {
        let at = now - chrono::Duration::from_std(ago).unwrap_or_default();
        alerts.push((
            "warn",
            format!(
                "Too many new unknown certificates at once: {} were refused without being listed under Certificates, the last at {}. The list takes {} at once, then one a minute. Many new devices, or someone trying certificates; a device that connects again is listed when there is room.",
                unlisted.total,
                at.format("%Y-%m-%d %H:%M UTC"),
                uagate_store::NEW_REJECTED_BURST,
            ),
        ));
    }
    // What ends, when, and what stops with it.
    let mut expiring: Vec<(String, String, &str)> = Vec::new();
    if let Ok(app) = uagate_store::describe_certificate(&state.engine.application_certificate()) {
        expiring.push((
            "The OPC UA application instance certificate".into(),
            app.not_after,
            "clients and field servers refuse this gateway's secure channels",
        ));
    }
    if let Some(tls) = state.engine.tls_certificate() {
        expiring.push((
            "The TLS certificate (console, opc.wss, opc.https)".into(),
            tls.not_after.with_timezone(&chrono::Utc).to_rfc3339(),
            "browsers and clients refuse the console, opc.wss and opc.https",
        ));
    }
    for c in state
        .store
        .certs(CertKind::Issuer)
        .await
        .unwrap_or_default()
    {
        expiring.push((
            format!("The CA certificate {}", c.subject),
            c.not_after,
            "the certificates it issued are refused",
        ));
    }
    for (what, not_after, stops) in expiring {
        match ops::expiry(&not_after, now) {
            Some((true, _)) => alerts.push((
                "error",
                format!("{what} expired on {}: {stops}.", ops::when(&not_after)),
            )),
            Some((false, words)) => alerts.push((
                "warn",
                format!("{what} {words} ({}): {stops} then.", ops::when(&not_after)),
            )),
            None => {}
        }
    }
    Live {
        alerts,
        version: env!("CARGO_PKG_VERSION"),
        uptime: charts::uptime(state.engine.uptime()),
        sessions: charts::thousands(i64::try_from(status.sessions).unwrap_or(i64::MAX)),
        max_sessions: charts::thousands(i64::from(config.server.max_session_count)),
        fields_up: if config.field_servers.is_empty() {
            String::new()
        } else {
            let disabled = config.field_servers.len() - enabled;
            match (enabled, disabled) {
                (_, 0) => format!("{up} of {enabled} up"),
                (0, n) => format!("{n} disabled"),
                (_, n) => format!("{up} of {enabled} up, {n} disabled"),
            }
        },
        memory: resident_memory().map(charts::bytes),
        charts: charts(state),
        fields: status
            .fields
            .iter()
            .map(|f| (f.clone(), super::fields::failing(f).filter(|_| f.enabled)))
            .collect(),
        status,
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

/// `GET /`: the appliance at a glance.
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
