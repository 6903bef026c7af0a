//! REST handlers under `/api/v1`. Each one states the least role it needs;
//! the fixed points scripts rely on (login, status, plan, config) keep
//! their JSON shapes.

use std::net::SocketAddr;
use std::time::Instant;

use axum::extract::rejection::JsonRejection;
use axum::extract::{ConnectInfo, State};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use uagate_config::{Config, ConfigError};
use uagate_isolation::plan::{Plan, PlanError};
use uagate_server::CONFIG_KEY;
use uagate_store::Role;

use crate::auth::Authed;
use crate::error::ApiError;
use crate::WebState;

/// `POST /api/v1/login` body.
#[derive(Debug, Deserialize)]
pub struct LoginRequest {
    /// The user name.
    pub username: String,
    /// The password (never logged).
    pub password: String,
}

/// `POST /api/v1/login` answer.
#[derive(Debug, Serialize, Deserialize)]
pub struct LoginResponse {
    /// A token for `Authorization: Bearer`.
    pub token: String,
}

/// Answers a login with a token, or 401; after repeated failures for a
/// user name or address, 429 with Retry-After until the lockout ends.
pub async fn login(
    State(state): State<WebState>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    body: Result<Json<LoginRequest>, JsonRejection>,
) -> Result<Json<LoginResponse>, ApiError> {
    let Json(req) = body.map_err(json_error)?;
    let addr = peer.map(|Extension(ConnectInfo(a))| a.ip());
    let now = Instant::now();
    state.throttle.check(&req.username, addr, now)?;
    let role = state
        .store
        .verify_user(&req.username, &req.password)
        .await
        .map_err(ApiError::internal)?;
    match role {
        Some(role) => {
            state.throttle.succeeded(&req.username);
            tracing::info!(user = %req.username, "console login");
            Ok(Json(LoginResponse {
                token: state.keys.issue(&req.username, role)?,
            }))
        }
        None => {
            state.throttle.failed(&req.username, addr, now);
            tracing::warn!(user = %req.username, "console login refused");
            Err(ApiError::BadCredentials)
        }
    }
}

/// `POST /api/v1/setup` body: the first administrator.
#[derive(Debug, Deserialize)]
pub struct SetupRequest {
    /// The one-time code printed at first start.
    pub code: String,
    /// The new admin's user name.
    pub username: String,
    /// The new admin's password (at least 8 characters; never logged).
    pub password: String,
}

/// Creates the first admin with the one-time setup code, then signs them
/// in. Refused (403) once any user exists or with a wrong code; wrong codes
/// count towards the login lockout of the caller's address.
pub async fn setup(
    State(state): State<WebState>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    body: Result<Json<SetupRequest>, JsonRejection>,
) -> Result<Json<LoginResponse>, ApiError> {
    let Json(req) = body.map_err(json_error)?;
    let addr = peer.map(|Extension(ConnectInfo(a))| a.ip());
    let now = Instant::now();
    state.throttle.check("(setup)", addr, now)?;
    let matches = state
        .setup_code
        .lock()
        .as_deref()
        .is_some_and(|c| c == req.code);
    let no_users = state
        .store
        .list_users()
        .await
        .map_err(ApiError::internal)?
        .is_empty();
    if !matches || !no_users {
        state.throttle.failed("(setup)", addr, now);
        return Err(ApiError::Forbidden { role: "setup" });
    }
    state
        .store
        .add_user("setup", &req.username, &req.password, Role::Admin)
        .await?;
    *state.setup_code.lock() = None;
    tracing::info!(user = %req.username, "first console administrator created");
    Ok(Json(LoginResponse {
        token: state.keys.issue(&req.username, Role::Admin)?,
    }))
}

/// One field connection in `GET /api/v1/status`.
#[derive(Debug, Serialize, Deserialize)]
pub struct FieldView {
    /// The configured name (mounted as Objects/<name>).
    pub name: String,
    /// disconnected, connecting, connected, reconnecting, closing, closed.
    pub state: String,
    /// The URL of the active server's session.
    pub active_endpoint: Option<String>,
    /// The ServiceLevel the active server reports.
    pub service_level: Option<u8>,
    /// Successful reconnects after a loss.
    pub reconnect_count: u64,
    /// Changes of the active server.
    pub failover_count: u64,
}

/// `GET /api/v1/status` answer.
#[derive(Debug, Serialize, Deserialize)]
pub struct StatusView {
    /// This appliance's role in a pair: `standalone` until a pair is set up.
    pub role: String,
    /// ServerStatus.State: running, suspended, ...
    pub state: String,
    /// The ServiceLevel published.
    pub service_level: u8,
    /// Its subrange (Part 4 6.6.2.4.2): maintenance, no_data, degraded, healthy.
    pub service_level_subrange: String,
    /// Where it comes from: requested_state, override or computed.
    pub service_level_source: String,
    /// The operator's reason for an override (empty otherwise).
    pub service_level_reason: String,
    /// Northbound sessions.
    pub sessions: usize,
    /// Field connections.
    pub fields: Vec<FieldView>,
}

/// The running gateway at a glance. Any role.
pub async fn status(State(state): State<WebState>, _who: Authed) -> Json<StatusView> {
    let engine = &state.engine;
    let level = engine.service_level();
    let (source, reason) = engine.service_level_source();
    let fields = engine
        .applied_config()
        .field_servers
        .iter()
        .filter_map(|f| {
            let st = engine.field_status(&f.name)?;
            Some(FieldView {
                name: f.name.clone(),
                state: conn_state(st.state).to_string(),
                active_endpoint: st.active_endpoint,
                service_level: st.service_level,
                reconnect_count: st.reconnect_count,
                failover_count: st.failover_count,
            })
        })
        .collect();
    Json(StatusView {
        role: "standalone".to_string(),
        state: server_state(engine.server_state()).to_string(),
        service_level: level,
        service_level_subrange: subrange(level).to_string(),
        service_level_source: source.to_string(),
        service_level_reason: reason,
        sessions: engine.session_count(),
        fields,
    })
}

/// Every field-connection state label.
pub(crate) const CONN_STATES: &[&str] = &[
    "disconnected",
    "connecting",
    "connected",
    "reconnecting",
    "closing",
    "closed",
];

/// The label of a field-connection state.
pub(crate) fn conn_state(s: uagate_field::ConnState) -> &'static str {
    use uagate_field::ConnState::*;
    match s {
        Disconnected => "disconnected",
        Connecting => "connecting",
        Connected => "connected",
        Reconnecting => "reconnecting",
        Closing => "closing",
        Closed => "closed",
    }
}

/// Every server-state label.
pub(crate) const SERVER_STATES: &[&str] = &[
    "running",
    "failed",
    "no_configuration",
    "suspended",
    "shutdown",
    "test",
    "communication_fault",
    "unknown",
];

/// The states of [`SERVER_STATES`], in the same order.
const STATE_VALUES: [opcua_types::ServerState; 8] = [
    opcua_types::ServerState::Running,
    opcua_types::ServerState::Failed,
    opcua_types::ServerState::NoConfiguration,
    opcua_types::ServerState::Suspended,
    opcua_types::ServerState::Shutdown,
    opcua_types::ServerState::Test,
    opcua_types::ServerState::CommunicationFault,
    opcua_types::ServerState::Unknown,
];

/// The label of a ServerStatus.State.
pub(crate) fn server_state(s: opcua_types::ServerState) -> &'static str {
    use opcua_types::ServerState::*;
    match s {
        Running => "running",
        Failed => "failed",
        NoConfiguration => "no_configuration",
        Suspended => "suspended",
        Shutdown => "shutdown",
        Test => "test",
        CommunicationFault => "communication_fault",
        Unknown => "unknown",
    }
}

/// The ServiceLevel subranges of Part 4 6.6.2.4.2.
fn subrange(level: u8) -> &'static str {
    match level {
        0 => "maintenance",
        1 => "no_data",
        2..=199 => "degraded",
        _ => "healthy",
    }
}

/// One stage of `GET /api/v1/plan`, the `uagate plan` line as JSON.
#[derive(Debug, Serialize, Deserialize)]
pub struct StageView {
    /// The stage's reference name, e.g. `RequestExecution`.
    pub stage: String,
    /// Total capacity, reserves included.
    pub total: u64,
    /// Capacity any caller may use.
    pub shared: u64,
    /// Bootstrap reserve.
    pub bootstrap: u64,
    /// Reconnect reserve.
    pub reconnect: u64,
    /// Control-work reserve.
    pub control: u64,
    /// Sum of the trusted owners' reserves.
    pub trusted: u64,
    /// Hard limit of an owner without a trusted reservation.
    pub owner_limit: u64,
    /// The `uagate plan` line.
    pub line: String,
}

/// The isolation plan of the configuration in force. Any role.
pub async fn plan(
    State(state): State<WebState>,
    _who: Authed,
) -> Result<Json<Vec<StageView>>, ApiError> {
    let plan = Plan::build(&state.engine.applied_config()).map_err(plan_error)?;
    Ok(Json(
        plan.stages()
            .iter()
            .map(|s| StageView {
                stage: s.stage.name().to_string(),
                total: s.total,
                shared: s.shared,
                bootstrap: s.bootstrap,
                reconnect: s.reconnect,
                control: s.control,
                trusted: s.trusted_reserved(),
                owner_limit: s.owner_limit,
                line: s.line(),
            })
            .collect(),
    ))
}

/// The stored configuration document as JSON. Any role (it holds no
/// secrets: field-server passwords are write-only, see docs/config.md).
pub async fn get_config(
    State(state): State<WebState>,
    _who: Authed,
) -> Result<Json<serde_json::Value>, ApiError> {
    let config = stored_config(&state).await?;
    serde_json::to_value(&config)
        .map(Json)
        .map_err(ApiError::internal)
}

/// `PUT /api/v1/config` answer: what the change did.
#[derive(Debug, Serialize, Deserialize)]
pub struct ConfigChange {
    /// Changed settings a running gateway applied now.
    pub live: Vec<String>,
    /// Changed settings that need a restart; when not empty nothing was
    /// applied now and the whole document takes effect at the next start.
    pub restart: Vec<String>,
}

/// Replaces the whole configuration document, validated as a unit: an
/// invalid document is refused with 422 naming the setting and nothing is
/// stored. Admin only.
pub async fn put_config(
    State(state): State<WebState>,
    who: Authed,
    body: Result<Json<serde_json::Value>, JsonRejection>,
) -> Result<Json<ConfigChange>, ApiError> {
    who.require(Role::Admin)?;
    let Json(value) = body.map_err(json_error)?;
    let new: Config = serde_json::from_value(value)
        .map_err(|e| ApiError::invalid("config", format!("configuration is not valid: {e}")))?;
    new.validate().map_err(config_error)?;
    let previous = stored_config(&state).await?;
    let report = uagate_server::classify_change(&previous, &new).map_err(plan_error)?;
    state
        .store
        .set_setting(&who.user, CONFIG_KEY, &new.to_toml())
        .await
        .map_err(ApiError::internal)?;
    // Applied now rather than at the store watcher's next look.
    state.engine.reconfigure(&new);
    tracing::info!(user = %who.user, live = ?report.live, restart = ?report.restart, "configuration replaced");
    Ok(Json(ConfigChange {
        live: if report.applies_live() {
            report.live
        } else {
            Vec::new()
        },
        restart: report.restart,
    }))
}

/// `POST /api/v1/maintenance` body: Server.RequestServerStateChange's
/// arguments in JSON.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceRequest {
    /// running, suspended, shutdown, test, failed, no_configuration,
    /// communication_fault or unknown.
    pub state: String,
    /// RFC 3339 time the server expects to be back (not for running).
    #[serde(default)]
    pub estimated_return_time: Option<String>,
    /// For shutdown: seconds until the server stops.
    #[serde(default)]
    pub seconds_till_shutdown: Option<u32>,
    /// Why (ShutdownReason).
    #[serde(default)]
    pub reason: Option<String>,
    /// Refuse new sessions while in this state (not supported yet: only
    /// `false` is accepted).
    #[serde(default)]
    pub drain: bool,
}

/// Changes the server state like Server.RequestServerStateChange, through
/// the same code path (persisted, audited, evented). Operator or admin.
pub async fn maintenance(
    State(state): State<WebState>,
    who: Authed,
    body: Result<Json<MaintenanceRequest>, JsonRejection>,
) -> Result<Json<StatusView>, ApiError> {
    who.require(Role::Operator)?;
    let Json(req) = body.map_err(json_error)?;
    let wanted = SERVER_STATES
        .iter()
        .position(|s| *s == req.state)
        .ok_or_else(|| {
            ApiError::invalid(
                "state",
                format!(
                    "unknown state {:?}; one of {}",
                    req.state,
                    SERVER_STATES.join(", ")
                ),
            )
        })?;
    let server_state = STATE_VALUES[wanted];
    let running = server_state == opcua_types::ServerState::Running;
    if req.drain {
        return Err(ApiError::invalid(
            "drain",
            "draining new sessions is not supported by this version",
        ));
    }
    let estimated_return_time = match (&req.estimated_return_time, running) {
        (Some(t), false) => chrono::DateTime::parse_from_rfc3339(t)
            .map(|d| opcua_types::DateTime::from(d.with_timezone(&chrono::Utc)))
            .map_err(|e| {
                ApiError::invalid(
                    "estimated_return_time",
                    format!("not an RFC 3339 time: {e}"),
                )
            })?,
        _ => opcua_types::DateTime::null(),
    };
    let seconds_till_shutdown = match server_state {
        opcua_types::ServerState::Shutdown => req.seconds_till_shutdown.unwrap_or(0),
        _ => 0,
    };
    let reason = req
        .reason
        .as_deref()
        .map(|r| opcua_types::LocalizedText::new("", r))
        .unwrap_or_else(opcua_types::LocalizedText::null);
    state
        .engine
        .change_server_state(
            &who.user,
            uagate_server::health::RequestedState {
                state: server_state,
                estimated_return_time,
                seconds_till_shutdown,
                reason,
            },
        )
        .await
        .map_err(ApiError::internal)?;
    Ok(status(State(state), who).await)
}

/// Longest override the console accepts (a forgotten override should not
/// pin the ServiceLevel for weeks).
pub const MAX_OVERRIDE: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// `PUT /api/v1/service-level` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LevelOverride {
    /// The fixed ServiceLevel, 0-255; `null` returns to the computed value.
    pub level: Option<u8>,
    /// Seconds until the computed value returns (at most 7 days); required
    /// with a level.
    #[serde(default)]
    pub expires_in_s: Option<u64>,
    /// Why (shown in the console and the status).
    #[serde(default)]
    pub reason: Option<String>,
}

/// Sets or clears the operator's ServiceLevel override. Operator or admin.
pub async fn service_level(
    State(state): State<WebState>,
    who: Authed,
    body: Result<Json<LevelOverride>, JsonRejection>,
) -> Result<Json<StatusView>, ApiError> {
    who.require(Role::Operator)?;
    let Json(req) = body.map_err(json_error)?;
    let expires = match (req.level, req.expires_in_s) {
        (None, _) => None,
        (Some(_), None) => {
            return Err(ApiError::invalid(
                "expires_in_s",
                "an override needs an expiry",
            ))
        }
        (Some(_), Some(s)) => {
            let d = std::time::Duration::from_secs(s);
            if s == 0 || d > MAX_OVERRIDE {
                return Err(ApiError::invalid(
                    "expires_in_s",
                    format!("between 1 and {} seconds", MAX_OVERRIDE.as_secs()),
                ));
            }
            Some(d)
        }
    };
    let reason = req.reason.unwrap_or_default();
    if reason.len() > 256 {
        return Err(ApiError::invalid("reason", "at most 256 bytes"));
    }
    tracing::info!(user = %who.user, level = ?req.level, ?expires, "ServiceLevel override");
    state
        .engine
        .override_service_level(req.level, reason, expires);
    Ok(status(State(state), who).await)
}

/// Unknown paths: a JSON 404 with a stable code.
pub async fn not_found() -> (axum::http::StatusCode, Json<serde_json::Value>) {
    (
        axum::http::StatusCode::NOT_FOUND,
        Json(serde_json::json!({"code": "not_found", "message": "no such resource"})),
    )
}

async fn stored_config(state: &WebState) -> Result<Config, ApiError> {
    match state
        .store
        .setting(CONFIG_KEY)
        .await
        .map_err(ApiError::internal)?
    {
        Some(text) => Config::from_toml(&text).map_err(ApiError::internal),
        None => Ok(state.engine.applied_config()),
    }
}

fn config_error(e: ConfigError) -> ApiError {
    match e {
        ConfigError::Invalid { setting, message } => ApiError::Invalid {
            message: format!("invalid setting `{setting}`: {message}"),
            field: Some(setting),
        },
        other => ApiError::Invalid {
            field: None,
            message: other.to_string(),
        },
    }
}

fn plan_error(e: PlanError) -> ApiError {
    ApiError::Invalid {
        field: e.setting().map(str::to_string),
        message: e.to_string(),
    }
}

pub(crate) fn json_error(e: JsonRejection) -> ApiError {
    ApiError::Invalid {
        field: None,
        message: format!(
            "the request body is not valid JSON for this call: {}",
            e.body_text()
        ),
    }
}
