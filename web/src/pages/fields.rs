//! Field connections (`/fields`): live state, active endpoint, per-server
//! ServiceLevel, counters, last error and recent events, with the live
//! table (`/partials/fields`) refreshed by htmx; an operator tests a
//! connection, forces a failover, asks for a reconnect now, and adds, edits
//! or removes an entry.

use askama::Template;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Form;
use serde::Deserialize;
use uagate_config::Config;
use uagate_store::Role;

use super::{change_notice, done, error_page, page, take_flash, Chrome, NameForm};
use crate::auth::Authed;
use crate::error::ApiError;
use crate::ops;
use crate::state::WebState;

/// One field connection's live row.
pub struct FieldRow {
    name: String,
    state: &'static str,
    active_endpoint: Option<String>,
    service_level: Option<u8>,
    reconnects: u64,
    failovers: u64,
    failed_attempts: u64,
    last_error: String,
    /// While the connection gave up: when its next reconnect cycle starts
    /// (UTC, `HH:MM:SS`).
    next_cycle: Option<String>,
    /// A server waits for its next attempt or gave up: "Reconnect now"
    /// makes sense.
    can_reconnect: bool,
    /// (url, session up, ServiceLevel) per server of the set.
    servers: Vec<(String, bool, Option<u8>)>,
}

fn field_rows(state: &WebState) -> Vec<FieldRow> {
    let engine = &state.engine;
    engine
        .applied_config()
        .field_servers
        .iter()
        .filter_map(|f| {
            let st = engine.field_status(&f.name)?;
            Some(FieldRow {
                name: f.name.clone(),
                state: ops::conn_state(st.state),
                active_endpoint: st.active_endpoint,
                service_level: st.service_level,
                reconnects: st.reconnect_count,
                failovers: st.failover_count,
                failed_attempts: st.failed_attempts,
                last_error: st.last_error.map(|e| e.to_string()).unwrap_or_default(),
                next_cycle: st
                    .next_cycle_at
                    .map(|t| t.as_chrono().format("%H:%M:%S UTC").to_string()),
                can_reconnect: matches!(
                    st.state,
                    uagate_field::ConnState::GaveUp
                        | uagate_field::ConnState::Reconnecting
                        | uagate_field::ConnState::Connecting
                ) || st.servers.iter().any(|v| !v.reachable),
                servers: st
                    .servers
                    .iter()
                    .map(|v| (v.url.clone(), v.reachable, v.service_level))
                    .collect(),
            })
        })
        .collect()
}

#[derive(Template)]
#[template(path = "fields.html")]
struct FieldsPage {
    chrome: Chrome,
    fields: Vec<FieldRow>,
    operator: bool,
    csrf: String,
    probe: Option<(String, Vec<ops::ProbeView>)>,
    histories: Vec<(String, Vec<ops::HistoryView>)>,
    /// (name, TOML of its entry, passwords redacted).
    entries: Vec<(String, String)>,
    template: &'static str,
}

#[derive(Template)]
#[template(path = "fields_live.html")]
struct FieldsLive {
    fields: Vec<FieldRow>,
    operator: bool,
    csrf: String,
}

/// What the add form starts with.
const FIELD_TEMPLATE: &str = r#"name = "line3"
security_mode = "sign_and_encrypt"
security_policy = "Basic256Sha256"
identity = { kind = "anonymous" }

[[endpoints]]
url = "opc.tcp://10.0.3.10:4840"
alternates = []
"#;

/// One `[[field_servers]]` entry as TOML (passwords redacted).
fn field_toml(f: &uagate_config::FieldServer) -> String {
    let mut c = Config::default();
    c.field_servers.push(f.clone());
    ops::redact(&mut c);
    toml::to_string(&c.field_servers[0]).unwrap_or_default()
}

async fn render_fields(
    state: &WebState,
    who: &Authed,
    flash: Option<String>,
    probe: Option<(String, Vec<ops::ProbeView>)>,
    error: Option<ApiError>,
) -> Response {
    let config = match ops::stored_config(state).await {
        Ok(c) => c,
        Err(e) => return error_page(e),
    };
    let fields = field_rows(state);
    let histories = fields
        .iter()
        .map(|f| {
            let mut h = ops::field_history(state, &f.name).unwrap_or_default();
            h.truncate(30);
            (f.name.clone(), h)
        })
        .collect();
    let (chrome, status) = Chrome::with_error(who, "Field connections", "/fields", flash, error);
    page(
        &FieldsPage {
            operator: who.can(Role::Operator),
            csrf: who.csrf.clone(),
            chrome,
            fields,
            probe,
            histories,
            entries: config
                .field_servers
                .iter()
                .map(|f| (f.name.clone(), field_toml(f)))
                .collect(),
            template: FIELD_TEMPLATE,
        },
        status,
    )
}

/// How the page shows a form post the router refused for the caller's
/// role: the page again, with the error above it.
pub async fn refused(state: WebState, who: Authed, error: ApiError, _: Request) -> Response {
    render_fields(&state, &who, None, None, Some(error)).await
}

/// `GET /fields`.
pub async fn show(State(state): State<WebState>, who: Authed, headers: HeaderMap) -> Response {
    let flash = take_flash(&headers);
    render_fields(&state, &who, flash, None, None).await
}

/// `GET /partials/fields`: the live table, refreshed by htmx.
pub async fn partial(State(state): State<WebState>, who: Authed) -> Response {
    page(
        &FieldsLive {
            fields: field_rows(&state),
            operator: who.can(Role::Operator),
            csrf: who.csrf.clone(),
        },
        StatusCode::OK,
    )
}

/// `POST /fields` form: one entry as TOML.
#[derive(Debug, Deserialize)]
pub struct FieldForm {
    toml: String,
}

/// Parses one `[[field_servers]]` entry; errors name `field_servers`.
pub fn parse_field(text: &str) -> Result<uagate_config::FieldServer, ApiError> {
    toml::from_str(text).map_err(|e| {
        ApiError::invalid(
            "field_servers",
            format!("not a valid field server entry: {}", e.message()),
        )
    })
}

/// `POST /fields`: adds or replaces a field connection.
pub async fn save(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<FieldForm>,
) -> Response {
    let result = async {
        let field = parse_field(&f.toml)?;
        ops::upsert_field(&state, &who, field).await
    }
    .await;
    match result {
        Ok(change) => done("/fields", &change_notice(&change)),
        Err(e) => render_fields(&state, &who, None, None, Some(e)).await,
    }
}

/// `POST /fields/remove`.
pub async fn remove(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<NameForm>,
) -> Response {
    match ops::remove_field(&state, &who, &f.name).await {
        Ok(change) => done("/fields", &change_notice(&change)),
        Err(e) => render_fields(&state, &who, None, None, Some(e)).await,
    }
}

/// `POST /fields/test`: probes the connection's URLs and shows
/// what each answered.
pub async fn test(State(state): State<WebState>, who: Authed, Form(f): Form<NameForm>) -> Response {
    match ops::probe_field(&state, &f.name).await {
        Ok(p) => render_fields(&state, &who, None, Some((f.name, p)), None).await,
        Err(e) => render_fields(&state, &who, None, None, Some(e)).await,
    }
}

/// `POST /fields/reconnect`: Reconnect now.
pub async fn reconnect(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<NameForm>,
) -> Response {
    match ops::reconnect_field(&state, &who, &f.name).await {
        Ok(()) => done(
            "/fields",
            &format!("Reconnect of {} started; see its recent events.", f.name),
        ),
        Err(e) => render_fields(&state, &who, None, None, Some(e)).await,
    }
}

/// `POST /fields/failover`.
pub async fn failover(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<NameForm>,
) -> Response {
    match ops::force_failover(&state, &who, &f.name).await {
        Ok(()) => done(
            "/fields",
            &format!("Failover of {} requested; see its recent events.", f.name),
        ),
        Err(e) => render_fields(&state, &who, None, None, Some(e)).await,
    }
}
