//! `GET /metrics`: the gateway's state in the Prometheus text format.
//!
//! Values are read from the engine when scraped (one registry per scrape,
//! so a scrape sees one consistent snapshot and nothing accumulates between
//! scrapes). Label values are bounded sets: stage and reason names, states,
//! and configured field-connection names; never owner keys, addresses,
//! tokens or user names.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use prometheus::{Encoder, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder};

use crate::auth::Authed;
use crate::error::ApiError;
use crate::ops::{conn_state, server_state, CONN_STATES, SERVER_STATES};
use crate::WebState;

/// Serves the scrape. Any role (a Bearer token is required on the console
/// listener).
pub async fn metrics(State(state): State<WebState>, _who: Authed) -> Result<Response, ApiError> {
    let registry = collect(&state).map_err(ApiError::internal)?;
    let mut out = Vec::new();
    TextEncoder::new()
        .encode(&registry.gather(), &mut out)
        .map_err(ApiError::internal)?;
    Ok(([(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)], out).into_response())
}

/// A registry filled from the engine's current state.
fn collect(state: &WebState) -> prometheus::Result<Registry> {
    let engine = &state.engine;
    let r = Registry::new_custom(Some("uagate".into()), None)?;

    let sessions = IntGauge::new("sessions", "Northbound sessions (created and active).")?;
    sessions.set(i64::try_from(engine.session_count()).unwrap_or(i64::MAX));
    r.register(Box::new(sessions))?;

    let level = IntGauge::new("service_level", "The ServiceLevel published (0-255).")?;
    level.set(i64::from(engine.service_level()));
    r.register(Box::new(level))?;

    let server = IntGaugeVec::new(
        Opts::new("server_state", "1 for the ServerStatus.State in force."),
        &["state"],
    )?;
    let current = server_state(engine.server_state());
    for s in SERVER_STATES {
        server.with_label_values(&[s]).set(i64::from(*s == current));
    }
    r.register(Box::new(server))?;

    let snap = engine.isolation_snapshot();
    let usage = IntGaugeVec::new(
        Opts::new(
            "isolation_usage",
            "Units held per isolation stage (bytes for byte stages).",
        ),
        &["stage"],
    )?;
    for (stage, used) in &snap.usage {
        usage
            .with_label_values(&[stage.key()])
            .set(i64::try_from(*used).unwrap_or(i64::MAX));
    }
    r.register(Box::new(usage))?;
    let owners = IntGauge::new(
        "isolation_owners",
        "Owners (caller groups) holding a charge.",
    )?;
    owners.set(i64::try_from(snap.tracked_owners).unwrap_or(i64::MAX));
    r.register(Box::new(owners))?;
    let rejections = IntCounterVec::new(
        Opts::new(
            "isolation_rejections_total",
            "Admissions refused, per stage and reason.",
        ),
        &["stage", "reason"],
    )?;
    for (stage, reason, n) in &snap.rejections {
        rejections
            .with_label_values(&[stage.key(), reason.label()])
            .inc_by(*n);
    }
    r.register(Box::new(rejections))?;

    let field_state = IntGaugeVec::new(
        Opts::new(
            "field_connection_state",
            "1 for each field connection's current state.",
        ),
        &["connection", "state"],
    )?;
    let reconnects = IntCounterVec::new(
        Opts::new(
            "field_reconnects_total",
            "Reconnects of a field connection after a loss.",
        ),
        &["connection"],
    )?;
    let failovers = IntCounterVec::new(
        Opts::new(
            "field_failovers_total",
            "Changes of a field connection's active server.",
        ),
        &["connection"],
    )?;
    for f in &engine.applied_config().field_servers {
        let Some(st) = engine.field_status(&f.name) else {
            continue;
        };
        let current = conn_state(st.state);
        for s in CONN_STATES {
            field_state
                .with_label_values(&[f.name.as_str(), s])
                .set(i64::from(*s == current));
        }
        reconnects
            .with_label_values(&[f.name.as_str()])
            .inc_by(st.reconnect_count);
        failovers
            .with_label_values(&[f.name.as_str()])
            .inc_by(st.failover_count);
    }
    r.register(Box::new(field_state))?;
    r.register(Box::new(reconnects))?;
    r.register(Box::new(failovers))?;
    Ok(r)
}
