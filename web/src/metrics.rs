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
use prometheus::proto::{Bucket, Histogram, LabelPair, Metric, MetricFamily, MetricType};
use prometheus::{
    Encoder, GaugeVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use crate::error::ApiError;
use crate::ops::{conn_state, server_state, CONN_STATES, SERVER_STATES};
use crate::state::WebState;

/// Serves the scrape. Any role (a Bearer token is required on the console
/// listener).
pub async fn metrics(State(state): State<WebState>) -> Result<Response, ApiError> {
    scrape(&state).await
}

/// Serves the scrape without a token: only routed on the configured scrape
/// address (`[listen] metrics`), see [`scrape_app`].
pub async fn open_metrics(State(state): State<WebState>) -> Result<Response, ApiError> {
    scrape(&state).await
}

/// The router of the unauthenticated scrape listener: `GET /metrics` and
/// nothing else.
pub fn scrape_app(state: WebState) -> axum::Router {
    axum::Router::new()
        .route("/metrics", axum::routing::get(open_metrics))
        .fallback(crate::api::not_found)
        .with_state(state)
}

async fn scrape(state: &WebState) -> Result<Response, ApiError> {
    let registry = collect(state).map_err(ApiError::internal)?;
    // The stored CRLs' next updates: past one, the certificates its CA
    // issued are refused, so a plant alerts well before.
    match state.store.crl_infos().await {
        Ok(crls) => crl_metrics(&registry, &crls).map_err(ApiError::internal)?,
        Err(e) => tracing::warn!(error = %e, "CRLs not read for the metrics"),
    }
    let mut families = registry.gather();
    families.extend(histograms(state));
    families.sort_by(|a, b| a.name().cmp(b.name()));
    let mut out = Vec::new();
    TextEncoder::new()
        .encode(&families, &mut out)
        .map_err(ApiError::internal)?;
    Ok(([(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)], out).into_response())
}

/// The histograms, built from the engine's pre-aggregated buckets.
fn histograms(state: &WebState) -> Vec<MetricFamily> {
    let engine = &state.engine;
    let mut latency = family(
        "uagate_request_duration_seconds",
        "Time from a request's dispatch to its answer, per service (queued Publish not included).",
    );
    for s in engine.request_stats() {
        latency.mut_metric().push(histogram(
            &[("service", s.service)],
            &uagate_server::stats::LATENCY_BUCKETS,
            &s.cumulative,
            s.count,
            s.sum_s,
        ));
    }
    let mut recovery = family(
        "uagate_field_reconnect_duration_seconds",
        "Time from a field session's loss to its recovery, per field connection.",
    );
    for f in &engine.applied_config().field_servers {
        let Some(st) = engine.field_reconnect_stats(&f.name) else {
            continue;
        };
        let mut running = 0;
        let cumulative: Vec<u64> = st.duration_buckets[..uagate_field::RECONNECT_BUCKETS.len()]
            .iter()
            .map(|b| {
                running += b;
                running
            })
            .collect();
        let count = st.duration_buckets.iter().sum();
        recovery.mut_metric().push(histogram(
            &[("connection", f.name.as_str())],
            &uagate_field::RECONNECT_BUCKETS,
            &cumulative,
            count,
            st.duration_sum,
        ));
    }
    [latency, recovery]
        .into_iter()
        .filter(|f| !f.get_metric().is_empty())
        .collect()
}

fn family(name: &str, help: &str) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.to_string());
    f.set_help(help.to_string());
    f.set_field_type(MetricType::HISTOGRAM);
    f
}

fn histogram(
    labels: &[(&str, &str)],
    bounds: &[f64],
    cumulative: &[u64],
    count: u64,
    sum: f64,
) -> Metric {
    let mut h = Histogram::default();
    h.set_sample_count(count);
    h.set_sample_sum(sum);
    h.set_bucket(
        bounds
            .iter()
            .zip(cumulative)
            .map(|(b, c)| {
                let mut bucket = Bucket::default();
                bucket.set_upper_bound(*b);
                bucket.set_cumulative_count(*c);
                bucket
            })
            .collect(),
    );
    let mut m = Metric::default();
    m.set_label(
        labels
            .iter()
            .map(|(k, v)| {
                let mut l = LabelPair::default();
                l.set_name(k.to_string());
                l.set_value(v.to_string());
                l
            })
            .collect(),
    );
    m.set_histogram(h);
    m
}

/// A registry filled from the engine's current state.
/// `uagate_crl_next_update_timestamp_seconds{issuer}`: one series per
/// stored CRL that names its next update.
fn crl_metrics(r: &Registry, crls: &[uagate_store::CrlInfo]) -> prometheus::Result<()> {
    let next = IntGaugeVec::new(
        Opts::new(
            "crl_next_update_timestamp_seconds",
            "When each stored CRL's next update is due (Unix time); after it the certificates its CA issued are refused until a newer CRL is uploaded.",
        ),
        &["issuer"],
    )?;
    for c in crls {
        if let Some(due) = c
            .next_update
            .as_deref()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        {
            next.with_label_values(&[c.issuer.as_str()])
                .set(due.timestamp());
        }
    }
    r.register(Box::new(next))
}

fn collect(state: &WebState) -> prometheus::Result<Registry> {
    let engine = &state.engine;
    let r = Registry::new_custom(Some("uagate".into()), None)?;

    let sessions = IntGauge::new("sessions", "Northbound sessions (created and active).")?;
    sessions.set(i64::try_from(engine.session_count()).unwrap_or(i64::MAX));
    r.register(Box::new(sessions))?;

    let evicted = IntCounter::new(
        "sessions_evicted_total",
        "Sessions never activated that were evicted to make room for a new one when the session table was full.",
    )?;
    evicted.inc_by(engine.sessions_evicted());
    r.register(Box::new(evicted))?;

    let unlisted = IntCounter::new(
        "rejected_certificates_unlisted_total",
        "Unknown certificates refused without being put on the rejected list: more new ones arrived than the list takes (200 at once, then one a minute).",
    )?;
    unlisted.inc_by(state.store.unlisted_rejections().total);
    r.register(Box::new(unlisted))?;

    let stalls = IntCounter::new(
        "send_stalls_total",
        "OPC UA connections closed because the client stopped reading its socket (nothing could be sent for 15 s).",
    )?;
    stalls.inc_by(engine.send_stalls());
    r.register(Box::new(stalls))?;

    let notifications = IntCounter::new(
        "notifications_sent_total",
        "Notifications (data changes and events) sent to clients in Publish responses.",
    )?;
    notifications.inc_by(engine.notifications_sent());
    r.register(Box::new(notifications))?;

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

    let pair = engine.pair_view();
    let pair_role = IntGaugeVec::new(
        Opts::new(
            "pair_role",
            "This appliance's role in the pair: 1 for the current one (standalone, primary, standby).",
        ),
        &["role"],
    )?;
    let current = crate::ops::role_name(pair.role);
    for role in ["standalone", "primary", "standby"] {
        pair_role
            .with_label_values(&[role])
            .set(i64::from(role == current));
    }
    r.register(Box::new(pair_role))?;
    let pair_epoch = IntGauge::new("pair_epoch", "The pair's replication epoch.")?;
    pair_epoch.set(pair.epoch);
    r.register(Box::new(pair_epoch))?;
    let pair_applied = IntGauge::new(
        "pair_applied_index",
        "Index of the last replicated change applied here (compare across the pair for the lag).",
    )?;
    pair_applied.set(i64::try_from(pair.applied).unwrap_or(i64::MAX));
    r.register(Box::new(pair_applied))?;
    let pair_members = IntGauge::new("pair_members", "Members of the pair (1 when standalone).")?;
    pair_members.set(i64::try_from(pair.members.len()).unwrap_or(i64::MAX));
    r.register(Box::new(pair_members))?;
    let pair_fault = IntGauge::new(
        "pair_integrity_fault",
        "1 while replication is stopped here on an integrity fault (a forged or altered entry).",
    )?;
    pair_fault.set(i64::from(pair.integrity_fault.is_some()));
    r.register(Box::new(pair_fault))?;
    let pair_quorum = IntGauge::new(
        "pair_quorum_lost",
        "1 while this appliance is cut off from the pair's quorum (its configuration changes are not acknowledged).",
    )?;
    pair_quorum.set(i64::from(pair.quorum_lost));
    r.register(Box::new(pair_quorum))?;
    let stepping_down = IntGauge::new(
        "pair_step_down_failing",
        "1 while another appliance was promoted and this one cannot drop its old log to follow it (retried by itself; the leader's changes wait).",
    )?;
    stepping_down.set(i64::from(pair.stepping_down.is_some()));
    r.register(Box::new(stepping_down))?;
    // Known on the leader only: one series per other member.
    let lag_entries = IntGaugeVec::new(
        Opts::new(
            "pair_replication_lag_entries",
            "Entries of the leader's log a member lacks (exported by the leader).",
        ),
        &["member"],
    )?;
    let lag_seconds = GaugeVec::new(
        Opts::new(
            "pair_replication_lag_seconds",
            "Age of the oldest change a member lacks, in seconds (exported by the leader).",
        ),
        &["member"],
    )?;
    for m in pair.members.iter().filter(|m| m.node_id != pair.node_id) {
        if let Some(n) = m.lag_entries {
            lag_entries
                .with_label_values(&[m.addr.as_str()])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        if let Some(s) = m.lag_seconds {
            lag_seconds.with_label_values(&[m.addr.as_str()]).set(s);
        }
    }
    r.register(Box::new(lag_entries))?;
    r.register(Box::new(lag_seconds))?;
    let commit = IntGauge::new(
        "pair_commit_index",
        "Index of the last replicated change known committed here (compare with pair_applied_index).",
    )?;
    commit.set(i64::try_from(pair.committed).unwrap_or(i64::MAX));
    r.register(Box::new(commit))?;
    let reachable = IntGaugeVec::new(
        Opts::new(
            "pair_peer_reachable",
            "1 while Raft messages go to or come from the member (the leader knows every member, a follower its leader).",
        ),
        &["member"],
    )?;
    for m in &pair.members {
        if let Some(r) = m.reachable {
            reachable
                .with_label_values(&[m.addr.as_str()])
                .set(i64::from(r));
        }
    }
    r.register(Box::new(reachable))?;

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
    let gave_up = IntCounterVec::new(
        Opts::new(
            "field_gave_up_total",
            "Reconnect cycles of a field connection's servers that ran out of retries or time (a new cycle starts after max_delay).",
        ),
        &["connection"],
    )?;
    let gaps = IntCounterVec::new(
        Opts::new(
            "field_notification_gaps_total",
            "Notification gaps of a field connection that could not be recovered (the affected items got one Uncertain/Bad marker value).",
        ),
        &["connection"],
    )?;
    let republished = IntCounterVec::new(
        Opts::new(
            "field_republished_total",
            "Notification messages of a field connection asked back with Republish after a lost connection or a sequence gap.",
        ),
        &["connection"],
    )?;
    let transferred = IntCounterVec::new(
        Opts::new(
            "field_subscriptions_transferred_total",
            "Southbound subscriptions moved to a new session with TransferSubscriptions after the field server had ended the connection's session.",
        ),
        &["connection"],
    )?;
    for f in &engine.applied_config().field_servers {
        let Some(st) = engine.field_status(&f.name) else {
            continue;
        };
        gave_up
            .with_label_values(&[f.name.as_str()])
            .inc_by(st.gave_up_count);
        gaps.with_label_values(&[f.name.as_str()])
            .inc_by(st.notification_gaps);
        republished
            .with_label_values(&[f.name.as_str()])
            .inc_by(st.republished);
        transferred
            .with_label_values(&[f.name.as_str()])
            .inc_by(st.transferred);
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
    r.register(Box::new(gave_up))?;
    r.register(Box::new(gaps))?;
    r.register(Box::new(republished))?;
    r.register(Box::new(transferred))?;

    let attempts = IntCounterVec::new(
        Opts::new(
            "field_reconnect_attempts_total",
            "Connect attempts of a field connection, by outcome (success, failure).",
        ),
        &["connection", "outcome"],
    )?;
    for f in &engine.applied_config().field_servers {
        if let Some(st) = engine.field_reconnect_stats(&f.name) {
            attempts
                .with_label_values(&[f.name.as_str(), "success"])
                .inc_by(st.attempts_ok);
            attempts
                .with_label_values(&[f.name.as_str(), "failure"])
                .inc_by(st.attempts_failed);
        }
    }
    r.register(Box::new(attempts))?;

    let parked = IntCounterVec::new(
        Opts::new(
            "field_requests_parked_total",
            "Northbound requests that waited for a field connection that was not available, without holding an execution slot.",
        ),
        &["connection"],
    )?;
    let retried = IntCounterVec::new(
        Opts::new(
            "field_requests_retried_total",
            "Idempotent northbound requests (Read, Browse, BrowseNext, TranslateBrowsePaths, HistoryRead) cut off by a lost field connection and retried once after the reconnect.",
        ),
        &["connection"],
    )?;
    for f in &engine.applied_config().field_servers {
        if let Some((p, t)) = engine.field_request_stats(&f.name) {
            parked.with_label_values(&[f.name.as_str()]).inc_by(p);
            retried.with_label_values(&[f.name.as_str()]).inc_by(t);
        }
    }
    r.register(Box::new(parked))?;
    r.register(Box::new(retried))?;

    let merged = IntCounterVec::new(
        Opts::new(
            "field_merged_reads_total",
            "Reads of field nodes handed to a field connection's Read merger.",
        ),
        &["connection"],
    )?;
    let southbound = IntCounterVec::new(
        Opts::new(
            "field_merged_read_requests_total",
            "Read requests the merger sent to the field server; concurrent Reads share one, so this grows slower than field_merged_reads_total under load.",
        ),
        &["connection"],
    )?;
    for f in &engine.applied_config().field_servers {
        if let Some((asked, sent)) = engine.field_read_stats(&f.name) {
            merged.with_label_values(&[f.name.as_str()]).inc_by(asked);
            southbound
                .with_label_values(&[f.name.as_str()])
                .inc_by(sent);
        }
    }
    r.register(Box::new(merged))?;
    r.register(Box::new(southbound))?;

    let event_items = IntGaugeVec::new(
        Opts::new(
            "field_event_items",
            "Shared southbound event items a field connection keeps (one per notifier node and event filter).",
        ),
        &["connection"],
    )?;
    let data_items = IntGaugeVec::new(
        Opts::new(
            "field_items",
            "Shared southbound data items a field connection keeps (one per node, attribute, sampling class and filter that northbound items want).",
        ),
        &["connection"],
    )?;
    let events_dropped = IntCounterVec::new(
        Opts::new(
            "field_events_dropped_total",
            "Field events not delivered north: duplicate (EventId already delivered), overflow (the connection's event queue was full).",
        ),
        &["connection", "reason"],
    )?;
    for f in &engine.applied_config().field_servers {
        if let Some(items) = engine.field_shared_items(&f.name) {
            data_items
                .with_label_values(&[f.name.as_str()])
                .set(i64::try_from(items).unwrap_or(i64::MAX));
        }
        if let Some((items, duplicates, overflow)) = engine.field_event_stats(&f.name) {
            event_items
                .with_label_values(&[f.name.as_str()])
                .set(i64::try_from(items).unwrap_or(i64::MAX));
            events_dropped
                .with_label_values(&[f.name.as_str(), "duplicate"])
                .inc_by(duplicates);
            events_dropped
                .with_label_values(&[f.name.as_str(), "overflow"])
                .inc_by(overflow);
        }
    }
    r.register(Box::new(data_items))?;
    r.register(Box::new(event_items))?;
    r.register(Box::new(events_dropped))?;

    let connections = IntGaugeVec::new(
        Opts::new("connections", "Open client connections, per transport."),
        &["transport"],
    )?;
    let channels = IntGaugeVec::new(
        Opts::new("secure_channels", "Open secure channels, per transport."),
        &["transport"],
    )?;
    for (transport, conns, chans) in engine.transport_stats() {
        connections.with_label_values(&[transport]).set(conns);
        channels.with_label_values(&[transport]).set(chans);
    }
    r.register(Box::new(connections))?;
    r.register(Box::new(channels))?;

    let requests = IntCounterVec::new(
        Opts::new(
            "requests_total",
            "Answered requests, per service and StatusCode of the answer.",
        ),
        &["service", "status"],
    )?;
    for s in engine.request_stats() {
        for (status, n) in &s.by_status {
            requests.with_label_values(&[s.service, status]).inc_by(*n);
        }
    }
    r.register(Box::new(requests))?;

    let (subs, items) = engine.subscription_counts();
    let subscriptions = IntGauge::new("subscriptions", "Subscriptions of all sessions.")?;
    subscriptions.set(i64::try_from(subs).unwrap_or(i64::MAX));
    r.register(Box::new(subscriptions))?;
    let monitored = IntGauge::new("monitored_items", "Data monitored items of all sessions.")?;
    monitored.set(i64::try_from(items).unwrap_or(i64::MAX));
    r.register(Box::new(monitored))?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    /// The metric names of docs/console.md's table.
    fn documented() -> Vec<String> {
        include_str!("../../docs/console.md")
            .lines()
            .filter_map(|l| l.strip_prefix("| `uagate_"))
            .filter_map(|l| l.split('`').next())
            .map(|n| format!("uagate_{n}"))
            .collect()
    }

    #[test]
    fn the_dashboard_uses_only_documented_metrics_and_all_of_them() {
        let docs = documented();
        assert!(docs.len() >= 17, "{docs:?}");
        let dash = include_str!("../../dashboards/uagate.json");
        let parsed: serde_json::Value = serde_json::from_str(dash).expect("valid JSON");
        assert!(parsed["panels"].as_array().is_some_and(|p| !p.is_empty()));
        let mut used = std::collections::BTreeSet::new();
        for (i, _) in dash.match_indices("uagate_") {
            let name: String = dash[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let base = ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(&name)
                .to_string();
            used.insert(base);
        }
        used.remove("uagate_"); // the tag
        for u in &used {
            assert!(
                docs.contains(u),
                "{u} is on the dashboard but not documented"
            );
        }
        for d in &docs {
            assert!(
                used.contains(d),
                "{d} is documented but not on the dashboard"
            );
        }
    }
}
