//! Maintenance (`/maintenance`): the server state; an operator requests a
//! state change (RequestServerStateChange) through a confirmation step,
//! and the way back to Running.

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

/// The request shown on the confirmation step.
pub struct Confirm {
    state: String,
    estimated_return_time: String,
    /// The return time to show: RFC 3339 for the browser to show in its
    /// time zone, and `YYYY-MM-DD HH:MM UTC` without JavaScript.
    return_shown: Option<(String, String)>,
    seconds_till_shutdown: String,
    reason: String,
    drain: bool,
    /// For shutdown: when the server stops (", shutting down in 30 s").
    countdown: String,
    effect: String,
}

/// What the form shows: what was entered (kept when a field is refused),
/// and the refused field's message next to it.
#[derive(Default)]
struct Entered {
    state: String,
    return_local: String,
    seconds_till_shutdown: String,
    reason: String,
    drain: bool,
    /// The message next to "Expected back at".
    return_error: Option<String>,
}

impl Entered {
    fn blank() -> Entered {
        Entered {
            state: "suspended".to_string(),
            ..Entered::default()
        }
    }

    /// What `f` entered, shown again when it is refused.
    fn of(f: &MaintenanceForm) -> Entered {
        Entered {
            state: f.state.clone(),
            return_local: f.return_local.clone(),
            seconds_till_shutdown: f.seconds_till_shutdown.clone(),
            reason: f.reason.clone(),
            drain: f.drain.is_some(),
            return_error: None,
        }
    }
}

#[derive(Template)]
#[template(path = "maintenance.html")]
struct MaintenancePage {
    chrome: Chrome,
    status: StatusView,
    states: &'static [&'static str],
    confirm: Option<Confirm>,
    entered: Entered,
}

impl MaintenancePage {
    /// A server state in words for the state list (its value stays the
    /// state's name, as OPC UA and REST call it).
    fn state_label(&self, state: &str) -> &'static str {
        match state {
            "running" => "Running",
            "suspended" => "Suspended (maintenance: clients should move to the partner)",
            "shutdown" => "Shutdown (maintenance, with a countdown)",
            "test" => "Test (maintenance)",
            "failed" => "Failed",
            "no_configuration" => "No configuration",
            "communication_fault" => "Communication fault",
            "unknown" => "Unknown",
            _ => "",
        }
    }
}

fn render_maintenance(
    state: &WebState,
    who: &Authed,
    flash: Option<String>,
    confirm: Option<Confirm>,
    error: Option<ApiError>,
) -> Response {
    render_entered(state, who, flash, confirm, error, Entered::blank())
}

/// The page with the form showing `entered` (what a refused post
/// entered, so nothing typed is lost).
fn render_entered(
    state: &WebState,
    who: &Authed,
    flash: Option<String>,
    confirm: Option<Confirm>,
    error: Option<ApiError>,
    entered: Entered,
) -> Response {
    let (chrome, status) = Chrome::with_error(who, "Maintenance", "/maintenance", flash, error);
    page(
        &MaintenancePage {
            chrome,
            status: ops::status(state),
            states: ops::SERVER_STATES,
            confirm,
            entered,
        },
        status,
    )
}

/// The form again with what was entered and `message` next to the return
/// time (422).
fn refuse_return_time(
    state: &WebState,
    who: &Authed,
    f: MaintenanceForm,
    message: String,
) -> Response {
    let (chrome, _) = Chrome::with_error(who, "Maintenance", "/maintenance", None, None);
    page(
        &MaintenancePage {
            chrome,
            status: ops::status(state),
            states: ops::SERVER_STATES,
            confirm: None,
            entered: Entered {
                return_error: Some(message),
                ..Entered::of(&f)
            },
        },
        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
    )
}

/// "Seconds till shutdown" as entered: empty is none; a number for
/// shutdown only (elsewhere it would be ignored without a word).
fn seconds_till_shutdown(f: &MaintenanceForm) -> Result<Option<u32>, ApiError> {
    let v = f.seconds_till_shutdown.trim();
    if v.is_empty() {
        return Ok(None);
    }
    let seconds = v.parse::<u32>().map_err(|_| {
        ApiError::invalid(
            "seconds_till_shutdown",
            format!("Seconds till shutdown: “{v}” is not a whole number of seconds (0 or more)."),
        )
    })?;
    if f.state != "shutdown" {
        return Err(ApiError::invalid(
            "seconds_till_shutdown",
            format!(
                "Seconds till shutdown applies to the state shutdown only: leave it empty for {}.",
                f.state
            ),
        ));
    }
    Ok(Some(seconds))
}

/// How the page shows a form post the router refused for the caller's
/// role: the page again, with the error above it.
pub async fn refused(state: WebState, who: Authed, error: ApiError, _: Request) -> Response {
    render_maintenance(&state, &who, None, None, Some(error))
}

/// `GET /maintenance`.
pub async fn show(State(state): State<WebState>, who: Authed, headers: HeaderMap) -> Response {
    let flash = take_flash(&headers);
    render_maintenance(&state, &who, flash, None, None)
}

/// `POST /maintenance` form; without `confirm=yes` it only shows the
/// confirmation step.
#[derive(Debug, Deserialize)]
pub struct MaintenanceForm {
    state: String,
    /// RFC 3339 (the confirmation step carries it so).
    #[serde(default)]
    estimated_return_time: String,
    /// The date-time picker's value (`YYYY-MM-DDTHH:MM`, browser local time).
    #[serde(default)]
    return_local: String,
    /// The browser's offset from UTC at that time, minutes (JavaScript's
    /// `getTimezoneOffset`: UTC minus local); 0 without JavaScript.
    #[serde(default)]
    tz_offset: String,
    #[serde(default)]
    seconds_till_shutdown: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    drain: Option<String>,
    #[serde(default)]
    confirm: Option<String>,
}

/// What maintenance does to the pair's configuration leadership, for the
/// confirmation step: `None` when this appliance does not lead a pair.
fn handover_effect(pair: &uagate_server::level::PairView) -> Option<String> {
    if pair.role != uagate_server::level::PairRole::Leader {
        return None;
    }
    let other_votes = pair
        .members
        .iter()
        .any(|m| m.node_id != pair.node_id && m.voter && !m.witness);
    Some(if other_votes {
        format!(
            "This appliance leads the pair's configuration: the leadership moves to the other \
             appliance first (within {} s), then the state changes.",
            uagate_pair::HANDOVER_TIMEOUT.as_secs()
        )
    } else {
        "This appliance leads the pair's configuration and keeps it (without a witness the \
         standby cannot take it over): configuration changes are still made here."
            .to_string()
    })
}

/// The picker's local date-time in UTC, as a time and as RFC 3339, with
/// the browser's offset (minutes, UTC minus local).
fn picked_time(
    local: &str,
    offset: &str,
) -> Result<(chrono::DateTime<chrono::Utc>, String), ApiError> {
    let minutes: i32 = offset.trim().parse().unwrap_or(0);
    if minutes.abs() > 18 * 60 {
        return Err(ApiError::invalid("tz_offset", "not a time zone offset"));
    }
    // The audit filter's reading of a picker's value; its offset is
    // minutes east of UTC, the opposite sign of getTimezoneOffset.
    let (utc, _) = super::audit::bound("estimated_return_time", local, -minutes)?
        .ok_or_else(|| ApiError::invalid("estimated_return_time", "no date and time given"))?;
    Ok((utc, utc.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)))
}

/// `POST /maintenance`: first the confirmation step, then the
/// state change through the same engine call as the OPC UA method.
pub async fn submit(
    State(state): State<WebState>,
    who: Authed,
    Form(mut f): Form<MaintenanceForm>,
) -> Response {
    if !f.return_local.trim().is_empty() && f.state != "running" {
        match picked_time(&f.return_local, &f.tz_offset) {
            Ok((t, _)) if ops::return_time_past(t).is_some() => {
                let message = format!(
                    "{} {}.",
                    f.return_local.trim().replacen('T', " ", 1),
                    ops::return_time_past(t).unwrap_or_default()
                );
                return refuse_return_time(&state, &who, f, message);
            }
            Ok((_, t)) => f.estimated_return_time = t,
            Err(e) => {
                let message = e.to_string();
                return refuse_return_time(&state, &who, f, message);
            }
        }
    }
    let req = match seconds_till_shutdown(&f) {
        Ok(seconds) => ops::MaintenanceRequest {
            state: f.state.clone(),
            estimated_return_time: Some(f.estimated_return_time.clone()),
            seconds_till_shutdown: seconds,
            reason: Some(f.reason.clone()),
            drain: f.drain.is_some(),
        },
        Err(e) => return render_entered(&state, &who, None, None, Some(e), Entered::of(&f)),
    };
    if f.confirm.as_deref() != Some("yes") {
        // The confirmation step confirms only what the change takes.
        if let Err(e) = ops::checked_state_request(&req) {
            return render_entered(&state, &who, None, None, Some(e), Entered::of(&f));
        }
        let countdown = match (f.state.as_str(), req.seconds_till_shutdown) {
            ("shutdown", Some(s)) if s > 0 => format!(", shutting down in {s} s"),
            ("shutdown", _) => ", shutting down at once".to_string(),
            _ => String::new(),
        };
        let maintenance = matches!(f.state.as_str(), "suspended" | "shutdown" | "test");
        let mut effect = if f.state == "running" {
            "Clients will see ServiceLevel return to its computed value.".to_string()
        } else if maintenance {
            "Clients will see ServiceLevel 0 (maintenance) and should fail over to the partner."
                .to_string()
        } else {
            "Clients will see ServiceLevel 1 (no data) and should fail over to the partner."
                .to_string()
        };
        if maintenance {
            if let Some(pair) = handover_effect(&state.engine.pair_view()) {
                effect = format!("{pair} {effect}");
            }
        }
        let return_shown = chrono::DateTime::parse_from_rfc3339(f.estimated_return_time.trim())
            .ok()
            .map(|t| {
                let t = t.with_timezone(&chrono::Utc);
                (
                    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    t.format("%Y-%m-%d %H:%M UTC").to_string(),
                )
            });
        let confirm = Confirm {
            state: f.state,
            return_shown,
            estimated_return_time: f.estimated_return_time,
            seconds_till_shutdown: f.seconds_till_shutdown,
            reason: f.reason,
            drain: req.drain,
            countdown,
            effect,
        };
        return render_maintenance(&state, &who, None, Some(confirm), None);
    }
    match ops::change_state(&state, &who, &req).await {
        Ok(handover) => done(
            "/maintenance",
            &match handover {
                Some(note) => format!("{note} Server state is now {}.", req.state),
                None => format!("Server state is now {}.", req.state),
            },
        ),
        Err(e) => render_entered(&state, &who, None, None, Some(e), Entered::of(&f)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_picked_local_time_becomes_utc() {
        // Berlin in winter: getTimezoneOffset() is -60.
        assert_eq!(
            picked_time("2026-12-02T14:30", "-60")
                .ok()
                .map(|t| t.1)
                .as_deref(),
            Some("2026-12-02T13:30:00Z")
        );
        // New York: +300; without JavaScript: 0 (UTC).
        assert_eq!(
            picked_time("2026-12-02T14:30", "300")
                .ok()
                .map(|t| t.1)
                .as_deref(),
            Some("2026-12-02T19:30:00Z")
        );
        assert_eq!(
            picked_time("2026-12-02T14:30", "")
                .ok()
                .map(|t| t.1)
                .as_deref(),
            Some("2026-12-02T14:30:00Z")
        );
        assert!(picked_time("tomorrow", "0").is_err());
        assert!(picked_time("2026-12-02T14:30", "5000").is_err());
    }
}
