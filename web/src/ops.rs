//! The operations behind both the REST API and the console pages. Each
//! takes the caller and already-parsed input, does the work through the
//! store and the engine, and records it in the audit trail under the
//! caller's name; the REST handlers and the page handlers only translate
//! JSON or form fields in and JSON or HTML out, so the two can never
//! disagree. The caller's role was checked before any of this runs, once
//! per route, by the router (see [`crate::routes`]).

use std::net::IpAddr;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use uagate_config::{Config, ConfigError};
use uagate_isolation::plan::{Plan, PlanError};
use uagate_server::config_store::{self, ConfigStoreError};
use uagate_server::{ReconfigureStatus, CONFIG_KEY};
use uagate_store::Role;

use crate::auth::Authed;
use crate::error::ApiError;
use crate::field_text::{explain, Explained};
use crate::state::WebState;

// ------------------------------------------------------ login and setup

/// Checks a login against the store under the throttle: a token, 401, or
/// after repeated failures of the name from this address (or of this
/// address) 429 until the lockout ends; a name guessed at from elsewhere
/// is answered late, not refused (see [`crate::auth::LoginThrottle`]).
/// Shared by the REST login and the console's login form.
pub async fn check_login(
    state: &WebState,
    username: &str,
    password: &str,
    addr: Option<IpAddr>,
) -> Result<String, ApiError> {
    let now = Instant::now();
    // One name to the throttle in any case, as to the login itself.
    let key = uagate_store::user_key(username);
    let delay = state.throttle.check(&key, addr, now)?;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let login = state
        .store
        .login(username, password)
        .await
        .map_err(ApiError::internal)?;
    match login {
        Some(login) => {
            state.throttle.succeeded(&key, addr);
            tracing::info!(user = %login.name, "console login");
            state.keys.issue(&login.name, login.role, &login.stamp)
        }
        None => {
            state.throttle.failed(&key, addr, now);
            tracing::warn!(user = %username, "console login refused");
            Err(ApiError::BadCredentials)
        }
    }
}

/// `POST /api/v1/setup` body: the first administrator.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SetupRequest {
    /// The one-time code printed at first start.
    pub code: String,
    /// The new admin's user name.
    pub username: String,
    /// The new admin's password (at least 8 characters; never logged).
    pub password: String,
}

/// Creates the first admin with the one-time setup code and returns their
/// token. Refused (403, "wrong or expired setup code", logged with the
/// caller's address but not the code) once any user exists or with a wrong
/// code; wrong codes count towards the login lockout of the caller's
/// address. Shared by the REST call and the console's setup form.
pub async fn check_setup(
    state: &WebState,
    req: &SetupRequest,
    addr: Option<IpAddr>,
) -> Result<String, ApiError> {
    let now = Instant::now();
    let delay = state.throttle.check("(setup)", addr, now)?;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    // The code is taken while this request uses it: a second request with
    // it at the same time is refused, so setup creates one administrator.
    let taken = {
        let mut code = state.setup_code.lock();
        if code.as_deref() == Some(req.code.trim()) {
            code.take()
        } else {
            None
        }
    };
    let matches = taken.is_some();
    let give_back = |state: &WebState| {
        if let Some(code) = &taken {
            state.setup_code.lock().get_or_insert_with(|| code.clone());
        }
    };
    let no_users = match state.store.list_users().await {
        Ok(users) => users.is_empty(),
        Err(e) => {
            give_back(state);
            return Err(ApiError::internal(e));
        }
    };
    if !matches || !no_users {
        if no_users {
            give_back(state);
        }
        state.throttle.failed("(setup)", addr, now);
        // Who tried, never the code they sent.
        let from = addr.map_or_else(|| "unknown".to_string(), |a| a.to_string());
        tracing::warn!(
            client = %from,
            setup_pending = state.setup_code.lock().is_some(),
            "console setup refused: wrong or expired setup code"
        );
        return Err(ApiError::SetupCode);
    }
    let name = match state
        .store
        .add_user("setup", &req.username, &req.password, Role::Admin)
        .await
    {
        Ok(name) => name,
        Err(e) => {
            // Refused (a short password, say): the code stays usable.
            give_back(state);
            return Err(e.into());
        }
    };
    state.setup_done();
    tracing::info!(user = %name, "first console administrator created");
    let standing = state
        .store
        .user_standing(&name)
        .await
        .map_err(ApiError::internal)?
        .ok_or(ApiError::Unauthenticated)?;
    state.keys.issue(&name, standing.role, &standing.stamp)
}

// ------------------------------------------------------------------ status

/// One field connection in `GET /api/v1/status`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FieldView {
    /// The configured name (mounted as Objects/<name>).
    pub name: String,
    /// disconnected, connecting, connected, reconnecting, closing, closed.
    pub state: String,
    /// Whether the connection is switched on (`enabled` in its
    /// configuration); a disabled one is `disconnected` on purpose.
    #[serde(default = "switched_on")]
    pub enabled: bool,
    /// The URL of the active server's session.
    pub active_endpoint: Option<String>,
    /// The ServiceLevel the active server reports.
    pub service_level: Option<u8>,
    /// Successful reconnects after a loss.
    pub reconnect_count: u64,
    /// Changes of the active server.
    pub failover_count: u64,
    /// It serves nobody and is failing rather than still connecting:
    /// several connect attempts in a row failed (the first ones read as
    /// `connecting`), or it gave up.
    #[serde(default)]
    pub failing: bool,
    /// Connect attempts that failed since a server last served it (since
    /// the start when none ever did); 0 while it is served.
    #[serde(default)]
    pub failed_attempts_since_connected: u64,
    /// Since when it has served nobody after a failure (its first failed
    /// attempt, or the loss of the server that served), RFC 3339; absent
    /// while it is served.
    #[serde(default)]
    pub failing_since: Option<String>,
    /// Connect attempts that failed since the gateway started.
    #[serde(default)]
    pub failed_attempts: u64,
    /// The status code of the last error (e.g. `BadCommunicationError`).
    #[serde(default)]
    pub last_error: Option<String>,
    /// The last error in plain words: what happened and what to do.
    #[serde(default)]
    pub last_error_explained: Option<Explained>,
}

/// [`FieldView::enabled`] of an answer without it (an older version).
fn switched_on() -> bool {
    true
}

impl FieldView {
    /// The view of a running connection's status; `enabled` as configured.
    pub fn of(name: &str, enabled: bool, st: uagate_field::FieldStatus) -> FieldView {
        FieldView {
            name: name.to_string(),
            state: conn_state(st.state).to_string(),
            enabled,
            active_endpoint: st.active_endpoint,
            service_level: st.service_level,
            reconnect_count: st.reconnect_count,
            failover_count: st.failover_count,
            failing: st.failing,
            failed_attempts_since_connected: st.failed_since_connected,
            failing_since: st.failing_since.map(|t| {
                t.as_chrono()
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            }),
            failed_attempts: st.failed_attempts,
            last_error: st.last_error.map(|e| e.sub_code().name().to_string()),
            last_error_explained: st.last_failure.as_ref().map(explain),
        }
    }
}

/// `GET /api/v1/pair` answer: this appliance's place in the pair.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PairStatusView {
    /// `standalone`, `primary` or `standby`.
    pub role: String,
    /// This appliance's node id in the pair (0 before the pair node started).
    pub node_id: u64,
    /// The configuration leader's pair address (`host:port`), when known.
    pub leader: Option<String>,
    /// The replication epoch.
    pub epoch: i64,
    /// Index of the last replicated change applied here.
    pub applied: u64,
    /// Index of the last replicated change known committed here.
    pub committed: u64,
    /// SHA-256 fingerprint of this appliance's pair certificate.
    pub fingerprint: String,
    /// The members.
    pub members: Vec<PairMemberView>,
    /// Why replication stopped here (a forged or altered entry), if it did.
    pub integrity_fault: Option<String>,
    /// Cut off from the pair's quorum: configuration changes are not
    /// acknowledged here (pair with witness).
    pub quorum_lost: bool,
    /// Changes this appliance had that a later leader never got (it
    /// stepped down after the other appliance was force-promoted): kept
    /// for review, never applied.
    pub diverged: Vec<DivergedView>,
    /// Another appliance was promoted and this one could not yet drop its
    /// old log to follow it: why the last try failed. It tries again by
    /// itself; the primary's changes arrive once it succeeds.
    pub stepping_down: Option<String>,
}

/// One change of the diverged list in [`PairStatusView`].
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DivergedView {
    /// The epoch that replaced the one it was made in.
    pub superseded_by: i64,
    /// Its index in the old epoch's log.
    pub index: u64,
    /// The change-log kind, e.g. `user.add`.
    pub kind: String,
    /// Its subject (user, thumbprint, setting key); never a secret.
    pub subject: String,
    /// Who made it.
    pub actor: String,
    /// When (RFC 3339).
    pub at: String,
}

impl DivergedView {
    /// The page's text of [`Self::at`] (see [`second_utc_text`]).
    pub fn at_utc(&self) -> String {
        second_utc_text(&self.at)
    }
}

/// One member of the pair in [`PairStatusView`].
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PairMemberView {
    /// Its node id.
    pub node_id: u64,
    /// Its pair address.
    pub addr: String,
    /// Whether it votes (the primary of a pair without witness is the only voter).
    pub voter: bool,
    /// Its OPC UA application URI.
    pub application_uri: String,
    /// It is a witness (votes, serves no OPC UA).
    pub witness: bool,
    /// Entries of the leader's log it lacks (on the leader only).
    pub lag_entries: Option<u64>,
    /// Age in seconds of the oldest change it lacks (on the leader only).
    pub lag_seconds: Option<f64>,
    /// Whether Raft messages went to or came from it in the last 3 s (on
    /// the leader for every member, on a follower for the leader; null for
    /// this appliance and where unknown).
    pub reachable: Option<bool>,
}

/// The word for a pair role in REST and the metrics.
pub fn role_name(role: uagate_server::level::PairRole) -> &'static str {
    match role {
        uagate_server::level::PairRole::Standalone => "standalone",
        uagate_server::level::PairRole::Leader => "primary",
        uagate_server::level::PairRole::Standby => "standby",
    }
}

/// What every console page says while an operator's state (maintenance,
/// shutdown, test, ...) is in force.
#[derive(Debug, Clone, PartialEq)]
pub struct StateBanner {
    /// The state, in words ("in maintenance (Suspended)").
    pub state: String,
    /// The operator's reason; empty when none was given.
    pub reason: String,
    /// When it is expected back: (RFC 3339 UTC, `HH:MM UTC` or a date and
    /// time when not today); `None` when not given.
    pub back_at: Option<(String, String)>,
    /// Whether new sessions are refused.
    pub draining: bool,
}

/// The banner of the state in force, `None` while running normally.
pub fn state_banner(state: &WebState) -> Option<StateBanner> {
    let r = state.engine.requested_state()?;
    use opcua_types::ServerState as S;
    let words = match r.state {
        S::Running => return None,
        S::Suspended => "in maintenance (Suspended)",
        S::Shutdown => "shutting down",
        S::Test => "in test mode",
        S::Failed => "marked failed",
        S::NoConfiguration => "marked without configuration",
        S::CommunicationFault => "marked with a communication fault",
        _ => "in an unknown state",
    };
    let back_at = (!r.estimated_return_time.is_null()).then(|| {
        let t = r.estimated_return_time.as_chrono();
        let shown = if t.date_naive() == chrono::Utc::now().date_naive() {
            t.format("%H:%M UTC").to_string()
        } else {
            t.format("%Y-%m-%d %H:%M UTC").to_string()
        };
        (t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true), shown)
    });
    Some(StateBanner {
        state: words.to_string(),
        reason: r.reason.text.to_string(),
        back_at,
        draining: r.drain,
    })
}

/// On a pair member that is not the configuration leader: the leader's
/// console URL (empty when no leader is known or it has none); `None` on
/// the leader and on a standalone appliance. Configuration changes are
/// made there: the console shows a read-only banner.
pub fn follower_of(state: &WebState) -> Option<String> {
    let v = state.engine.pair_view();
    if v.role != uagate_server::level::PairRole::Standby {
        return None;
    }
    // A standby that knows no leader right now (an election, a step-down
    // in progress) is read-only all the same.
    let leader = v.leader.as_deref().unwrap_or_default();
    Some(
        v.members
            .iter()
            .find(|m| m.addr == leader)
            .map(|m| m.console.clone())
            .unwrap_or_default(),
    )
}

/// This appliance's place in the pair.
pub fn pair(state: &WebState) -> PairStatusView {
    let v = state.engine.pair_view();
    PairStatusView {
        role: role_name(v.role).to_string(),
        node_id: v.node_id,
        leader: v.leader,
        epoch: v.epoch,
        applied: v.applied,
        committed: v.committed,
        fingerprint: v.fingerprint,
        members: v
            .members
            .into_iter()
            .map(|m| PairMemberView {
                node_id: m.node_id,
                addr: m.addr,
                voter: m.voter,
                application_uri: m.application_uri,
                witness: m.witness,
                lag_entries: m.lag_entries,
                lag_seconds: m.lag_seconds,
                reachable: m.reachable,
            })
            .collect(),
        integrity_fault: v.integrity_fault,
        quorum_lost: v.quorum_lost,
        stepping_down: v.stepping_down,
        diverged: v
            .diverged
            .into_iter()
            .map(|d| DivergedView {
                superseded_by: d.superseded_by,
                index: d.index,
                kind: d.kind,
                subject: d.subject,
                actor: d.actor,
                at: d.at,
            })
            .collect(),
    }
}

/// `GET /api/v1/status` answer.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StatusView {
    /// This appliance's role in a pair: `standalone` until a pair is set up.
    pub role: String,
    /// ServerStatus.State: running, suspended, ...
    pub state: String,
    /// Whether new sessions are refused (maintenance with drain).
    #[serde(default)]
    pub draining: bool,
    /// The ServiceLevel published.
    pub service_level: u8,
    /// Its subrange (Part 4 6.6.2.4.2): maintenance, no_data, degraded, healthy.
    pub service_level_subrange: String,
    /// Where it comes from: requested_state, override or computed.
    pub service_level_source: String,
    /// Why: the computed level's reason (e.g. "2 of 3 field connections up"), the operator's reason for an override, or the requested state.
    pub service_level_reason: String,
    /// With an operator's override in force (`service_level_source`
    /// `override`): when it ends and the computed value returns (RFC 3339).
    #[serde(default)]
    pub service_level_override_until: Option<String>,
    /// ... and who set it.
    #[serde(default)]
    pub service_level_override_by: Option<String>,
    /// Northbound sessions.
    pub sessions: usize,
    /// Field connections.
    pub fields: Vec<FieldView>,
    /// Stored settings not in force until the gateway restarts (empty
    /// when everything stored is in force).
    #[serde(default)]
    pub waiting_for_restart: Vec<String>,
}

/// The running gateway at a glance.
pub fn status(state: &WebState) -> StatusView {
    let engine = &state.engine;
    let level = engine.service_level();
    let (source, reason) = engine.service_level_source();
    let fields = engine
        .applied_config()
        .field_servers
        .iter()
        .filter_map(|f| {
            Some(FieldView::of(
                &f.name,
                f.enabled,
                engine.field_status(&f.name)?,
            ))
        })
        .collect();
    let note = state
        .level_override
        .lock()
        .clone()
        .filter(|n| source == "override" && n.until > chrono::Utc::now());
    StatusView {
        service_level_override_until: note
            .as_ref()
            .map(|n| n.until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        service_level_override_by: note.map(|n| n.by),
        role: role_name(engine.pair_role()).to_string(),
        state: server_state(engine.server_state()).to_string(),
        draining: engine.draining(),
        service_level: level,
        service_level_subrange: subrange(level).to_string(),
        service_level_source: source.to_string(),
        service_level_reason: reason,
        sessions: engine.session_count(),
        fields,
        waiting_for_restart: engine.waiting_for_restart(),
    }
}

/// Every field-connection state label.
pub(crate) const CONN_STATES: &[&str] = &[
    "disconnected",
    "connecting",
    "connected",
    "reconnecting",
    "closing",
    "closed",
    "gave_up",
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
        GaveUp => "gave_up",
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
    STATE_VALUES
        .iter()
        .position(|v| *v == s)
        .map(|i| SERVER_STATES[i])
        .unwrap_or("unknown")
}

/// The ServiceLevel subranges of Part 4 6.6.2.4.2.
pub(crate) fn subrange(level: u8) -> &'static str {
    match level {
        0 => "maintenance",
        1 => "no_data",
        2..=199 => "degraded",
        _ => "healthy",
    }
}

/// One stage of `GET /api/v1/plan`, the `uagate plan` line as JSON.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
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

/// The stage table of a plan, as `uagate plan` prints it.
pub fn plan_view(plan: &Plan) -> Vec<StageView> {
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
        .collect()
}

/// Validates a whole document and plans it: the plan, or the error that
/// names the offending setting. Used for the live preview and before
/// every change.
pub fn check_config(config: &Config) -> Result<Plan, ApiError> {
    config.validate().map_err(config_error)?;
    Plan::build(config).map_err(plan_error)
}

/// `PUT /api/v1/config` answer: what the change did.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConfigChange {
    /// Changed settings a running gateway applied now.
    pub live: Vec<String>,
    /// When not empty, nothing of this change was applied now: it takes
    /// effect at the next start. These are the stored settings that need
    /// the restart (this change's, or an earlier waiting change's that this
    /// one touches the same part as).
    pub restart: Vec<String>,
    /// Every stored setting not in force yet, this change's and earlier
    /// ones' (they take effect at the next start); empty when everything
    /// stored is in force.
    #[serde(default)]
    pub waiting: Vec<String>,
}

/// The stored configuration document, this appliance's overlay merged
/// over the replicated document (the applied one when none was stored
/// yet).
pub async fn stored_config(state: &WebState) -> Result<Config, ApiError> {
    match config_store::load(&state.store)
        .await
        .map_err(ApiError::internal)?
    {
        Some(config) => Ok(config),
        None => Ok(state.engine.applied_config()),
    }
}

/// Replaces the whole configuration document, validated and planned as a
/// unit: an invalid document is refused naming the setting and nothing is
/// stored; a valid one is stored (audited with before and after) and, when
/// every change can be applied live, applied now.
pub async fn apply_config(
    state: &WebState,
    who: &Authed,
    new: Config,
) -> Result<ConfigChange, ApiError> {
    let _serial = state.config_lock.lock().await;
    let previous = stored_config(state).await?;
    apply_locked(state, who, &previous, new).await
}

/// Changes the stored document with `edit` and applies it like
/// [`apply_config`]; concurrent edits are serialised so none is lost.
pub async fn edit_config(
    state: &WebState,
    who: &Authed,
    edit: impl FnOnce(&mut Config) -> Result<(), ApiError>,
) -> Result<ConfigChange, ApiError> {
    let _serial = state.config_lock.lock().await;
    let previous = stored_config(state).await?;
    let mut config = previous.clone();
    edit(&mut config)?;
    apply_locked(state, who, &previous, config).await
}

/// The audit actor of the configuration the gateway was started with,
/// stored before the first change (see [`apply_locked`]).
pub const STARTED_WITH_ACTOR: &str = "gateway";

/// Validates `new` against the stored `previous` (passwords sent as
/// [`KEEP_PASSWORD`] are taken from it), stores and applies it. Called
/// with the configuration lock held.
async fn apply_locked(
    state: &WebState,
    who: &Authed,
    previous: &Config,
    mut new: Config,
) -> Result<ConfigChange, ApiError> {
    restore_secrets(&mut new, previous)?;
    new.validate().map_err(config_error)?;
    let report = uagate_server::classify_change(previous, &new).map_err(plan_error)?;
    if report.is_empty() {
        return Ok(ConfigChange {
            live: Vec::new(),
            restart: Vec::new(),
            waiting: state.engine.waiting_for_restart(),
        });
    }
    let store_error = |e| match e {
        ConfigStoreError::Config(e) => config_error(e),
        ConfigStoreError::Store(e) => ApiError::from(e),
        other => ApiError::internal(other),
    };
    // The first change stored: the configuration the gateway was started
    // with is stored first, as the gateway's, so that the audit log shows
    // this change as the change it is (not as "set up the configuration").
    if config_store::load(&state.store)
        .await
        .map_err(ApiError::internal)?
        .is_none()
    {
        config_store::save(&state.store, STARTED_WITH_ACTOR, previous)
            .await
            .map_err(store_error)?;
    }
    // Node-local settings into this appliance's overlay, the rest into the
    // replicated document, all or nothing.
    config_store::save(&state.store, &who.user, &new)
        .await
        .map_err(store_error)?;
    // Applied now rather than at the store watcher's next look; the answer
    // says what the running gateway did.
    let status = state.engine.reconfigure(&new);
    let waiting = state.engine.waiting_for_restart();
    let (live, restart) = match status {
        ReconfigureStatus::Applied(live) => (live, Vec::new()),
        ReconfigureStatus::RestartRequired(restart) => (Vec::new(), restart),
        // Applied already (the store watcher was first), or what is in
        // force is the stored document again (a waiting change undone).
        ReconfigureStatus::Unchanged => {
            let changed: Vec<String> = report.live.into_iter().chain(report.restart).collect();
            if changed.iter().any(|s| waiting.contains(s)) {
                (
                    Vec::new(),
                    uagate_server::classify_change(&state.engine.applied_config(), &new)
                        .map(|r| r.restart)
                        .unwrap_or_default(),
                )
            } else {
                (changed, Vec::new())
            }
        }
        ReconfigureStatus::Refused(e) => {
            // Not applicable after all: the previous document goes back,
            // so that nothing of the change stays stored.
            config_store::save(&state.store, &who.user, previous)
                .await
                .map_err(ApiError::internal)?;
            state.engine.reconfigure(previous);
            return Err(ApiError::invalid("field_servers", e));
        }
    };
    tracing::info!(user = %who.user, ?live, ?restart, ?waiting, "configuration replaced");
    Ok(ConfigChange {
        live,
        restart,
        waiting,
    })
}

/// `POST /api/v1/maintenance` body: Server.RequestServerStateChange's
/// arguments in JSON.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
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
    /// Refuse new sessions while in this state (not with running).
    #[serde(default)]
    pub drain: bool,
}

/// Why an expected return time cannot be announced: it is already past
/// (the rest of the sentence after the time); `None` when it is still to
/// come.
pub fn return_time_past(at: chrono::DateTime<chrono::Utc>) -> Option<&'static str> {
    (at <= chrono::Utc::now())
        .then_some("is already past: enter a time still to come, or leave it empty")
}

/// Changes the server state like Server.RequestServerStateChange, through
/// the same engine call (persisted, audited, evented; a maintenance state
/// first hands the pair's configuration leadership over). Answers what the
/// hand-over did, if there was one, for the operator.
pub async fn change_state(
    state: &WebState,
    who: &Authed,
    req: &MaintenanceRequest,
) -> Result<Option<String>, ApiError> {
    let requested = checked_state_request(req)?;
    state
        .engine
        .change_server_state(&who.user, requested)
        .await
        .map_err(ApiError::internal)
}

/// A state change request checked as [`change_state`] takes it (the
/// state known, no drain with running, a return time ahead, a reason of
/// at most 256 bytes), without changing anything: also called by the
/// console's confirmation step, so that it never confirms what would be
/// refused.
pub fn checked_state_request(
    req: &MaintenanceRequest,
) -> Result<uagate_server::health::RequestedState, ApiError> {
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
    if req.drain && running {
        return Err(ApiError::invalid(
            "drain",
            "draining applies to a maintenance state, not to running",
        ));
    }
    let estimated_return_time = match (req.estimated_return_time.as_deref(), running) {
        (Some(t), false) if !t.trim().is_empty() => {
            let at = chrono::DateTime::parse_from_rfc3339(t.trim())
                .map(|d| d.with_timezone(&chrono::Utc))
                .map_err(|e| {
                    ApiError::invalid(
                        "estimated_return_time",
                        format!("not an RFC 3339 time: {e}"),
                    )
                })?;
            if let Some(past) = return_time_past(at) {
                return Err(ApiError::invalid(
                    "estimated_return_time",
                    format!("{} {past}", at.format("%Y-%m-%d %H:%M UTC")),
                ));
            }
            opcua_types::DateTime::from(at)
        }
        _ => opcua_types::DateTime::null(),
    };
    let seconds_till_shutdown = match server_state {
        opcua_types::ServerState::Shutdown => req.seconds_till_shutdown.unwrap_or(0),
        _ => 0,
    };
    let reason_text = req.reason.as_deref().unwrap_or("").trim();
    if reason_text.len() > 256 {
        return Err(ApiError::invalid("reason", "at most 256 bytes"));
    }
    let reason = if reason_text.is_empty() {
        opcua_types::LocalizedText::null()
    } else {
        opcua_types::LocalizedText::new("", reason_text)
    };
    Ok(uagate_server::health::RequestedState {
        state: server_state,
        estimated_return_time,
        seconds_till_shutdown,
        reason,
        drain: req.drain,
    })
}

/// Longest override the console accepts (a forgotten override should not
/// pin the ServiceLevel for weeks).
pub const MAX_OVERRIDE: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// Who set the operator's ServiceLevel override in force and when it
/// ends (the engine keeps the level and the reason).
#[derive(Debug, Clone)]
pub struct OverrideNote {
    /// The user who set it.
    pub by: String,
    /// When the computed value returns.
    pub until: chrono::DateTime<chrono::Utc>,
}

/// `PUT /api/v1/service-level` body.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
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

/// Sets or clears the operator's ServiceLevel override, and records it in
/// the audit trail (`event.service_level`).
pub async fn override_level(
    state: &WebState,
    who: &Authed,
    req: LevelOverride,
) -> Result<(), ApiError> {
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
    let before = state.engine.service_level();
    let (source_before, _) = state.engine.service_level_source();
    state
        .store
        .record_event(
            &who.user,
            "event.service_level",
            &serde_json::json!({
                "level": req.level,
                "expires_in_s": expires.map(|d| d.as_secs()),
                "reason": reason,
                "before": { "level": before, "source": source_before },
            }),
        )
        .await?;
    tracing::info!(user = %who.user, level = ?req.level, ?expires, "ServiceLevel override");
    let mut note = state.level_override.lock();
    state
        .engine
        .override_service_level(req.level, reason, expires);
    *note = match (req.level, expires) {
        (Some(_), Some(after)) => Some(OverrideNote {
            by: who.user.clone(),
            until: chrono::Utc::now()
                + chrono::Duration::from_std(after).unwrap_or(chrono::Duration::zero()),
        }),
        _ => None,
    };
    Ok(())
}

pub(crate) fn config_error(e: ConfigError) -> ApiError {
    match e {
        ConfigError::Invalid { setting, message } => ApiError::Invalid {
            message: format!("invalid setting `{setting}`: {message}"),
            field: Some(setting),
        },
        e @ ConfigError::Serialize(_) => ApiError::internal(e),
        other => ApiError::Invalid {
            field: None,
            message: other.to_string(),
        },
    }
}

pub(crate) fn plan_error(e: PlanError) -> ApiError {
    ApiError::Invalid {
        field: e.setting().map(str::to_string),
        message: e.to_string(),
    }
}

// ------------------------------------------------ trusted owners, ingress

/// Adds a trusted owner, or replaces the one with the same key, together
/// with ingress rules (CIDRs) that map callers to it; validated against the
/// plan with the rest of the document, as one change. The first owner
/// switches the isolation profile to `trusted_reservations` (the only
/// profile with owners; it needs an ingress rule naming an owner), so one
/// step does what the operator asked.
pub async fn upsert_owner(
    state: &WebState,
    who: &Authed,
    owner: uagate_config::TrustedOwner,
    ingress: Vec<String>,
) -> Result<ConfigChange, ApiError> {
    if owner.key.is_empty() {
        return Err(ApiError::invalid("key", "an owner key is required"));
    }
    edit_config(state, who, |c| {
        put_owner(c, owner, ingress);
        Ok(())
    })
    .await
}

/// `c` with `owner` added (or replacing the owner of its key), its callers
/// from `ingress`, and the profile that gives owners their reserves.
pub fn put_owner(c: &mut Config, owner: uagate_config::TrustedOwner, ingress: Vec<String>) {
    c.isolation.mode = uagate_config::IsolationMode::TrustedReservations;
    for cidr in ingress {
        c.isolation.ingress.push(uagate_config::IngressRule {
            cidr,
            owner: Some(owner.key.clone()),
            class: None,
        });
    }
    let owners = &mut c.isolation.trusted_owners;
    match owners.iter_mut().find(|o| o.key == owner.key) {
        Some(o) => *o = owner,
        None => owners.push(owner),
    }
}

/// Removes a trusted owner and the ingress rules that map to it, as one
/// change. Removing the last one returns the profile to `balanced`.
pub async fn remove_owner(
    state: &WebState,
    who: &Authed,
    key: &str,
) -> Result<ConfigChange, ApiError> {
    edit_config(state, who, |c| {
        let before = c.isolation.trusted_owners.len();
        c.isolation.trusted_owners.retain(|o| o.key != key);
        if c.isolation.trusted_owners.len() == before {
            return Err(ApiError::NotFound(format!("no trusted owner {key:?}")));
        }
        c.isolation
            .ingress
            .retain(|r| r.owner.as_deref() != Some(key));
        if c.isolation.trusted_owners.is_empty() {
            c.isolation.mode = uagate_config::IsolationMode::Balanced;
        }
        Ok(())
    })
    .await
}

/// Appends an ingress rule; validated against the plan.
pub async fn add_ingress(
    state: &WebState,
    who: &Authed,
    rule: uagate_config::IngressRule,
) -> Result<ConfigChange, ApiError> {
    edit_config(state, who, |c| {
        c.isolation.ingress.push(rule);
        Ok(())
    })
    .await
}

/// Removes the ingress rule at `index` (0-based, document order).
pub async fn remove_ingress(
    state: &WebState,
    who: &Authed,
    index: usize,
) -> Result<ConfigChange, ApiError> {
    edit_config(state, who, |c| {
        if index >= c.isolation.ingress.len() {
            return Err(ApiError::NotFound(format!("no ingress rule {index}")));
        }
        c.isolation.ingress.remove(index);
        Ok(())
    })
    .await
}

// ------------------------------------------------------------ certificates

/// Moves a rejected certificate to the trusted list (see
/// [`uagate_store::Store::approve_rejected`], which `uagate trust approve`
/// calls too): the next handshake with it succeeds.
pub async fn trust_rejected(
    state: &WebState,
    who: &Authed,
    thumbprint: &str,
) -> Result<uagate_store::CertInfo, ApiError> {
    state
        .store
        .approve_rejected(&who.user, thumbprint)
        .await
        .map_err(|e| match e {
            uagate_store::StoreError::UnknownCert(t) => {
                ApiError::NotFound(format!("no rejected certificate {t}"))
            }
            other => other.into(),
        })
}

/// Removes a certificate from whichever list holds it.
pub async fn remove_certificate(
    state: &WebState,
    who: &Authed,
    thumbprint: &str,
) -> Result<(), ApiError> {
    state
        .store
        .trust_remove(&who.user, thumbprint)
        .await
        .map_err(|e| match e {
            uagate_store::StoreError::UnknownCert(t) => {
                ApiError::NotFound(format!("no certificate {t}"))
            }
            other => other.into(),
        })
}

/// Adds a certificate (DER or PEM) to the trusted or issuer list.
pub async fn add_certificate(
    state: &WebState,
    who: &Authed,
    der_or_pem: &[u8],
    kind: &str,
) -> Result<uagate_store::CertInfo, ApiError> {
    let kind = match kind {
        "trusted" => uagate_store::CertKind::Trusted,
        "issuer" => uagate_store::CertKind::Issuer,
        _ => return Err(ApiError::invalid("kind", "trusted or issuer")),
    };
    Ok(state
        .store
        .trust_add_pem_or_der(&who.user, der_or_pem, kind)
        .await?)
}

/// Stores a CRL (DER or PEM).
pub async fn add_crl(state: &WebState, who: &Authed, der_or_pem: &[u8]) -> Result<(), ApiError> {
    Ok(state.store.add_crl(&who.user, der_or_pem).await?)
}

// ----------------------------------------------------------------- secrets

/// What the console shows instead of a stored field-server password;
/// sending it back keeps the stored password.
pub const KEEP_PASSWORD: &str = "<stored>";

/// Replaces every field-server password with [`KEEP_PASSWORD`], so no
/// console or REST answer carries one.
pub fn redact(config: &mut Config) {
    for f in &mut config.field_servers {
        if let uagate_config::FieldIdentity::Username { password, .. } = &mut f.identity {
            *password = KEEP_PASSWORD.to_string();
        }
    }
}

/// The password stored for the field connection `name`, if it logs in with
/// one: what [`KEEP_PASSWORD`] stands for.
fn stored_password(stored: &Config, name: &str) -> Option<String> {
    match &stored
        .field_servers
        .iter()
        .find(|f| f.name == name)?
        .identity
    {
        uagate_config::FieldIdentity::Username { password, .. } => Some(password.clone()),
        _ => None,
    }
}

/// Puts the stored passwords back where a document sent [`KEEP_PASSWORD`]
/// (matched by field-server name); refused naming the setting when there
/// is no stored password to keep.
pub fn restore_secrets(new: &mut Config, stored: &Config) -> Result<(), ApiError> {
    for (i, f) in new.field_servers.iter_mut().enumerate() {
        if let uagate_config::FieldIdentity::Username { password, .. } = &mut f.identity {
            if password != KEEP_PASSWORD {
                continue;
            }
            let kept = stored_password(stored, &f.name).ok_or_else(|| {
                ApiError::invalid(
                    format!("field_servers[{i}].identity.password"),
                    "no stored password to keep; enter the password",
                )
            })?;
            *password = kept;
        }
    }
    Ok(())
}

/// A configuration document (TOML) with its passwords redacted; other
/// text is returned unchanged. Used for audit entries.
pub fn redact_document(text: &str) -> String {
    match Config::from_toml(text) {
        Ok(mut c) => {
            redact(&mut c);
            c.to_toml()
        }
        Err(_) => text.to_string(),
    }
}

/// An audit payload as the console and REST show it: a configuration
/// document's before and after values have their passwords redacted.
pub fn redact_payload(payload: &str) -> serde_json::Value {
    let Ok(mut v) = serde_json::from_str::<serde_json::Value>(payload) else {
        return serde_json::Value::Null;
    };
    if v.get("key").and_then(|k| k.as_str()) == Some(CONFIG_KEY) {
        for k in ["value", "before"] {
            if let Some(text) = v.get(k).and_then(|t| t.as_str()).map(redact_document) {
                v[k] = serde_json::Value::String(text);
            }
        }
    }
    v
}

// -------------------------------------------------------- field connections

/// Adds a field connection, or replaces the one with the same name (the
/// name is case-insensitive); validated with the whole document and
/// applied at once (the running gateway remounts it, see docs/field.md).
pub async fn upsert_field(
    state: &WebState,
    who: &Authed,
    field: uagate_config::FieldServer,
) -> Result<ConfigChange, ApiError> {
    edit_config(state, who, |c| {
        let servers = &mut c.field_servers;
        match servers
            .iter_mut()
            .find(|f| f.name.eq_ignore_ascii_case(&field.name))
        {
            Some(f) => *f = field,
            None => servers.push(field),
        }
        Ok(())
    })
    .await
}

/// Saves the field connection `field` from the console's form: replaces
/// the entry named `original` (renaming it when the name changed) or adds
/// a new one when `original` is empty; one validated change, applied at
/// once. Refused when a new name is taken by another entry.
pub async fn save_field(
    state: &WebState,
    who: &Authed,
    original: &str,
    field: uagate_config::FieldServer,
) -> Result<ConfigChange, ApiError> {
    edit_config(state, who, |c| {
        let servers = &mut c.field_servers;
        let taken = servers.iter().any(|f| {
            f.name.eq_ignore_ascii_case(&field.name) && !f.name.eq_ignore_ascii_case(original)
        });
        if taken {
            return Err(ApiError::invalid(
                "name",
                format!("a field connection named {:?} exists already", field.name),
            ));
        }
        match servers
            .iter_mut()
            .find(|f| !original.is_empty() && f.name.eq_ignore_ascii_case(original))
        {
            Some(f) => {
                if let (
                    uagate_config::FieldIdentity::Username { password, .. },
                    uagate_config::FieldIdentity::Username { password: kept, .. },
                ) = (&field.identity, &f.identity)
                {
                    // A renamed entry keeps its stored password too.
                    if password == KEEP_PASSWORD && f.name != field.name {
                        let mut field = field.clone();
                        if let uagate_config::FieldIdentity::Username { password, .. } =
                            &mut field.identity
                        {
                            *password = kept.clone();
                        }
                        *f = field;
                        return Ok(());
                    }
                }
                *f = field;
            }
            None if original.is_empty() => servers.push(field),
            None => {
                return Err(ApiError::NotFound(format!(
                    "no field connection {original:?}"
                )))
            }
        }
        Ok(())
    })
    .await
}

/// Removes a field connection; applied at once (unmounted, closed).
pub async fn remove_field(
    state: &WebState,
    who: &Authed,
    name: &str,
) -> Result<ConfigChange, ApiError> {
    edit_config(state, who, |c| {
        let before = c.field_servers.len();
        c.field_servers
            .retain(|f| !f.name.eq_ignore_ascii_case(name));
        if c.field_servers.len() == before {
            return Err(ApiError::NotFound(format!("no field connection {name:?}")));
        }
        Ok(())
    })
    .await
}

/// Asks a running field connection to leave its active server; audited
/// as `event.field_failover`.
pub async fn force_failover(state: &WebState, who: &Authed, name: &str) -> Result<(), ApiError> {
    match state.engine.field_force_failover(name, &who.user) {
        None => Err(ApiError::NotFound(format!(
            "no running field connection {name:?}"
        ))),
        Some(Err(why)) => Err(ApiError::invalid("name", why)),
        Some(Ok(())) => {
            state
                .store
                .record_event(
                    &who.user,
                    "event.field_failover",
                    &serde_json::json!({ "connection": name }),
                )
                .await?;
            Ok(())
        }
    }
}

/// Asks a field connection to start a fresh reconnect cycle at once for
/// every server that waits or gave up (Reconnect now); audited as
/// `event.field_reconnect`.
pub async fn reconnect_field(state: &WebState, who: &Authed, name: &str) -> Result<(), ApiError> {
    if state.engine.field_reconnect_now(name, &who.user).is_none() {
        return Err(ApiError::NotFound(format!(
            "no running field connection {name:?}"
        )));
    }
    state
        .store
        .record_event(
            &who.user,
            "event.field_reconnect",
            &serde_json::json!({ "connection": name }),
        )
        .await?;
    Ok(())
}

/// How long "test connection" waits for each URL.
pub const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// One probed URL in `POST /api/v1/fields/{name}/test`.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeView {
    /// 1-based server number in the set.
    pub server: usize,
    /// The URL asked.
    pub url: String,
    /// Whether it answered GetEndpoints.
    pub reachable: bool,
    /// Its endpoints (`policy/mode`) when reachable.
    pub endpoints: Vec<String>,
    /// Why not, when not reachable: the status code (e.g.
    /// `BadTcpEndpointUrlInvalid`), or `no answer within N ms`.
    pub error: Option<String>,
    /// The same in plain words: what happened and what to do.
    #[serde(default)]
    pub error_explained: Option<Explained>,
    /// Whether an endpoint matches the configured policy and mode.
    pub matches_config: bool,
    /// For a secured connection: `trusted`, or why the certificate is not
    /// (an unknown certificate is now on the rejected list).
    pub certificate: Option<String>,
    /// Why the certificate is not trusted, in plain words.
    #[serde(default)]
    pub certificate_explained: Option<Explained>,
    /// The server's certificate when it is not trusted: what the operator
    /// checks before trusting it (with its OPC UA thumbprint, which
    /// `POST /api/v1/certificates/{thumbprint}/trust` takes).
    pub untrusted: Option<OfferedCert>,
    /// `accepted` when a session with the configured identity was opened
    /// (and closed), or why it was refused; absent when none was tried (no
    /// endpoint with the chosen security, or an untrusted certificate).
    pub login: Option<String>,
    /// Why the login was refused, in plain words.
    #[serde(default)]
    pub login_explained: Option<Explained>,
}

/// A field server certificate the gateway does not trust yet, as "Test
/// connection" shows it for one-click trust.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OfferedCert {
    /// Subject distinguished name.
    pub subject: String,
    /// The application URI it names, if any.
    pub application_uri: Option<String>,
    /// End of validity (`YYYY-MM-DD HH:MM UTC`).
    pub not_after: String,
    /// SHA-256 fingerprint, colon-separated upper-case hex (compare it with
    /// the one the field server shows).
    pub sha256: String,
    /// SHA-1 thumbprint, lower-case hex: the OPC UA thumbprint the trust
    /// list is keyed by.
    pub thumbprint: String,
}

impl OfferedCert {
    /// What `der` says about itself; `None` when it cannot be parsed.
    pub fn of(der: &[u8]) -> Option<OfferedCert> {
        let summary = uagate_store::describe_certificate(der).ok()?;
        Some(OfferedCert {
            subject: summary.subject,
            application_uri: summary.application_uri,
            not_after: when(&summary.not_after),
            sha256: crate::digest::Digest::fingerprint(der).to_string(),
            thumbprint: summary.thumbprint,
        })
    }

    /// [`Self::sha256`] for an HTML page: breaking between pairs (see
    /// [`crate::digest::Digest::html`]).
    pub fn fingerprint_html(&self) -> String {
        crate::digest::Digest::from_hex(&self.sha256).html()
    }
}

/// A time still left, for a warning: "12 days" (from 48 hours on),
/// "30 hours", "10 minutes" (at least 1).
fn time_left(left: chrono::Duration) -> String {
    if left.num_hours() >= 48 {
        format!("{} days", left.num_days())
    } else if left.num_hours() >= 1 {
        format!("{} hours", left.num_hours())
    } else {
        format!("{} minutes", left.num_minutes().max(1))
    }
}

/// How long before a certificate's end of validity the console warns.
pub const CERT_EXPIRES_SOON: chrono::Duration = chrono::Duration::days(30);

/// Whether a certificate valid until `not_after` (RFC 3339) is still
/// valid at `now`: `None` while more than [`CERT_EXPIRES_SOON`] is left,
/// `Some(words)` otherwise ("expires in 12 days", "expired"), and whether
/// it has expired. Called by the Certificates page and the dashboard.
pub fn expiry(not_after: &str, now: chrono::DateTime<chrono::Utc>) -> Option<(bool, String)> {
    let end = chrono::DateTime::parse_from_rfc3339(not_after)
        .ok()?
        .with_timezone(&chrono::Utc);
    if end <= now {
        return Some((true, "expired".into()));
    }
    let left = end - now;
    if left > CERT_EXPIRES_SOON {
        return None;
    }
    let within = time_left(left);
    Some((false, format!("expires in {within}")))
}

/// How long before a CRL's next update the console warns.
pub const CRL_DUE_SOON: chrono::Duration = chrono::Duration::days(7);

/// Where a stored CRL stands ([`crl_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrlState {
    /// Its next update is more than [`CRL_DUE_SOON`] away, or not named.
    Current,
    /// Its next update is due within [`CRL_DUE_SOON`].
    DueSoon,
    /// Its next update has passed: the certificates its CA issued are
    /// refused (revocation unknown) until a newer CRL is stored.
    OutOfDate,
}

impl CrlState {
    /// The word REST answers with.
    pub fn as_str(self) -> &'static str {
        match self {
            CrlState::Current => "current",
            CrlState::DueSoon => "due_soon",
            CrlState::OutOfDate => "out_of_date",
        }
    }

    /// The page's colour class for it (`crl-ok`, `crl-warn`, `crl-bad`).
    pub fn class(self) -> &'static str {
        match self {
            CrlState::Current => "ok",
            CrlState::DueSoon => "warn",
            CrlState::OutOfDate => "bad",
        }
    }
}

/// The state of a CRL whose next update is due at `next_update` (RFC
/// 3339) at `now`, and the words the Certificates page shows for it. Past
/// that time the certificates its CA issued are refused, which stops every
/// client and field server holding one: within [`CRL_DUE_SOON`] the page
/// warns. Called by the page and `GET /api/v1/crls`.
pub fn crl_state(
    next_update: Option<&str>,
    now: chrono::DateTime<chrono::Utc>,
) -> (CrlState, String) {
    let Some(due) = next_update.and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()) else {
        return (
            CrlState::Current,
            "current (it names no next update)".into(),
        );
    };
    let due = due.with_timezone(&chrono::Utc);
    if due <= now {
        return (
            CrlState::OutOfDate,
            format!(
                "out of date since {}: the certificates this CA issued are refused until its \
                 next CRL is uploaded",
                due.format("%Y-%m-%d %H:%M UTC")
            ),
        );
    }
    let left = due - now;
    if left > CRL_DUE_SOON {
        return (CrlState::Current, "current".into());
    }
    let within = time_left(left);
    (
        CrlState::DueSoon,
        format!(
            "next update due in {within}: upload the CA's next CRL before then, or the \
             certificates it issued are refused"
        ),
    )
}

/// An RFC 3339 time as the console shows times: `YYYY-MM-DD HH:MM UTC`
/// (the text unchanged when it is not RFC 3339).
pub fn when(rfc3339: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .map(|d| {
            d.with_timezone(&chrono::Utc)
                .format("%Y-%m-%d %H:%M UTC")
                .to_string()
        })
        .unwrap_or_else(|_| rfc3339.to_string())
}

/// The view of what a probe found.
fn probe_views(probes: Vec<uagate_field::Probe>) -> Vec<ProbeView> {
    // What the REST answer said before the plain words: the status code,
    // or the gateway's own sentence.
    let said = |e: &uagate_field::FieldError| match e.status {
        Some(st) if st != opcua_types::StatusCode::BadTimeout => st.to_string(),
        _ => e.detail.clone(),
    };
    probes
        .into_iter()
        .map(|p| ProbeView {
            server: p.server + 1,
            url: p.url,
            reachable: p.result.is_ok(),
            error: p.result.as_ref().err().map(said),
            error_explained: p.result.as_ref().err().map(explain),
            endpoints: p.result.unwrap_or_default(),
            matches_config: p.matches_config,
            certificate: p.certificate.as_ref().map(|c| match c {
                Ok(()) => "trusted".to_string(),
                Err(e) => said(e),
            }),
            certificate_explained: p
                .certificate
                .as_ref()
                .and_then(|c| c.as_ref().err())
                .map(explain),
            untrusted: p.untrusted_der.as_deref().and_then(OfferedCert::of),
            login: p.login.as_ref().map(|l| match l {
                Ok(()) => "accepted".to_string(),
                Err(e) => e.detail.clone(),
            }),
            login_explained: p.login.as_ref().and_then(|l| l.as_ref().err()).map(explain),
        })
        .collect()
}

/// Probes every URL of a field connection entry that is not saved (the
/// form's or REST's "Test connection" before saving), after checking it
/// with the stored document as saving would (errors name the setting).
/// A password sent as [`KEEP_PASSWORD`] logs in with the password stored
/// for the entry `original` (the one being edited), as saving would keep
/// it.
pub async fn probe_entry(
    state: &WebState,
    entry: &uagate_config::FieldServer,
    original: Option<&str>,
) -> Result<Vec<ProbeView>, ApiError> {
    let mut config = stored_config(state).await?;
    let probed = with_kept_password(entry, &config, original)?;
    let servers = &mut config.field_servers;
    match servers
        .iter_mut()
        .find(|f| f.name.eq_ignore_ascii_case(&entry.name))
    {
        Some(f) => *f = entry.clone(),
        None => servers.push(entry.clone()),
    }
    config.validate().map_err(config_error)?;
    Ok(probe_views(
        state
            .engine
            .field_probe_settings(&probed, PROBE_TIMEOUT)
            .await,
    ))
}

/// `entry` with the password stored for the entry named `original` where
/// it sends [`KEEP_PASSWORD`] (the probe logs in: testing with the
/// placeholder itself would report a refused login and count a failed
/// login on the PLC). Refused naming the setting when there is no stored
/// password to keep.
fn with_kept_password(
    entry: &uagate_config::FieldServer,
    stored: &Config,
    original: Option<&str>,
) -> Result<uagate_config::FieldServer, ApiError> {
    let mut probed = entry.clone();
    if let uagate_config::FieldIdentity::Username { password, .. } = &mut probed.identity {
        if password == KEEP_PASSWORD {
            *password = original
                .and_then(|name| stored_password(stored, name))
                .ok_or_else(|| {
                    ApiError::invalid(
                        "identity.password",
                        "no stored password to keep; enter the password",
                    )
                })?;
        }
    }
    Ok(probed)
}

/// Probes every URL of a running field connection.
pub async fn probe_field(state: &WebState, name: &str) -> Result<Vec<ProbeView>, ApiError> {
    let probes = state
        .engine
        .field_probe(name, PROBE_TIMEOUT)
        .await
        .ok_or_else(|| ApiError::NotFound(format!("no running field connection {name:?}")))?;
    Ok(probe_views(probes))
}

/// One history event in the REST answer and on the page.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HistoryView {
    /// When (RFC 3339 UTC).
    pub at: String,
    /// 1-based server number in the set, when the event concerns one.
    pub server: Option<usize>,
    /// up, failed, lost, moved, failover, failover_requested,
    /// failover_unavailable, gave_up, new_cycle, reconnect_requested,
    /// connection_lost, gap, items_spread, short_queues.
    pub kind: String,
    /// URL, status code or who asked.
    pub detail: String,
    /// For a failed attempt or a lost session: the error in plain words.
    #[serde(default)]
    pub explained: Option<Explained>,
}

impl HistoryView {
    /// The page's text of [`Self::at`]: `2025-06-01 14:30:05 UTC` (the
    /// console's script shows it in the browser's time zone).
    pub fn at_utc(&self) -> String {
        second_utc_text(&self.at)
    }

    /// [`Self::kind`] in words for the page (REST keeps the kind itself).
    pub fn kind_text(&self) -> &str {
        match self.kind.as_str() {
            "up" => "connected",
            "failed" => "attempt failed",
            "lost" => "session lost",
            "connection_lost" => "connection lost",
            "moved" => "moved to another network path",
            "failover" => "failed over",
            "failover_requested" => "failover asked for",
            "failover_unavailable" => "no server to fail over to",
            "gave_up" => "gave up for now",
            "new_cycle" => "trying again",
            "reconnect_requested" => "reconnect asked for",
            "reactivated" => "session taken back",
            "transferred" => "subscriptions kept",
            "not_transferred" => "subscriptions recreated",
            "gap" => "data gap",
            "items_spread" => "items spread over servers",
            "short_queues" => "queues shortened",
            other => other,
        }
    }
}

/// `2025-06-01 14:30:05 UTC` for an RFC 3339 time (the text unchanged when
/// it is not one): what a page shows where no browser converts the time.
pub fn second_utc_text(rfc3339: &str) -> String {
    crate::audit_text::parse_time(rfc3339)
        .map(crate::audit_text::second_utc)
        .unwrap_or_else(|| rfc3339.to_string())
}

/// The recent events of a running field connection, newest first.
pub fn field_history(state: &WebState, name: &str) -> Result<Vec<HistoryView>, ApiError> {
    let h = state
        .engine
        .field_history(name)
        .ok_or_else(|| ApiError::NotFound(format!("no running field connection {name:?}")))?;
    Ok(h.into_iter()
        .rev()
        .map(|e| HistoryView {
            at: rfc3339(e.at),
            server: e.server.map(|s| s + 1),
            kind: e.kind.to_string(),
            explained: e.failure.as_ref().map(explain),
            detail: e.detail,
        })
        .collect())
}

/// A system time as RFC 3339 UTC, seconds precision.
pub fn rfc3339(t: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

// ---------------------------------------------------------------- sessions

/// One northbound session in `GET /api/v1/sessions`.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SessionView {
    /// SessionId (what `DELETE /api/v1/sessions/{id}` takes).
    pub id: String,
    /// The client's session name.
    pub name: String,
    /// opc.tcp, opc.wss or opc.https.
    pub transport: String,
    /// Security policy short name.
    pub security_policy: String,
    /// None, Sign or SignAndEncrypt.
    pub security_mode: String,
    /// Resource-isolation owner.
    pub owner: Option<String>,
    /// User, `anonymous`, or the certificate.
    pub user: String,
    /// Created (RFC 3339 UTC).
    pub created: Option<String>,
    /// Subscriptions.
    pub subscriptions: usize,
}

impl SessionView {
    /// The page's text of [`Self::created`] (see [`second_utc_text`]).
    pub fn created_utc(&self) -> Option<String> {
        self.created.as_deref().map(second_utc_text)
    }
}

/// The northbound sessions.
pub fn sessions(state: &WebState) -> Vec<SessionView> {
    state
        .engine
        .session_list()
        .into_iter()
        .map(|s| SessionView {
            id: s.id,
            name: s.name,
            transport: s.transport.to_string(),
            security_policy: s.security_policy,
            security_mode: s.security_mode.to_string(),
            owner: s.owner,
            user: s.user,
            created: s.created.map(rfc3339),
            subscriptions: s.subscriptions,
        })
        .collect()
}

/// Closes a northbound session; audited as `event.session_close`.
pub async fn close_session(state: &WebState, who: &Authed, id: &str) -> Result<(), ApiError> {
    let name = state
        .engine
        .close_session_by_id(id)
        .ok_or_else(|| ApiError::NotFound(format!("no session {id}")))?;
    state
        .store
        .record_event(
            &who.user,
            "event.session_close",
            &serde_json::json!({ "session": id, "name": name }),
        )
        .await?;
    Ok(())
}

// ------------------------------------------------------------------ system

/// `GET /api/v1/system` answer: the appliance image underneath the
/// gateway, its two root slots and the update in progress.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SystemView {
    /// Whether the gateway runs on the appliance image (the `rauc` program
    /// is there). Off the appliance there are no slots, and updates are
    /// made by replacing the uagate program.
    pub appliance: bool,
    /// This gateway program's version.
    pub version: String,
    /// The appliance image's version (os-release `IMAGE_VERSION`, else
    /// `VERSION_ID`).
    pub image_version: Option<String>,
    /// The appliance's RAUC `compatible`: bundles must be made for it.
    pub compatible: Option<String>,
    /// The bootname of the slot the system runs from (`A` or `B`).
    pub booted_slot: Option<String>,
    /// The root slots, A then B.
    pub slots: Vec<SlotView>,
    /// The update: idle, receiving, installing, installed or failed.
    pub update: UpdateView,
    /// Off the appliance, why; on it, why RAUC did not report the slots
    /// (when it did not), in plain words.
    pub message: Option<String>,
    /// What RAUC itself said when it did not report the slots (its last
    /// line, e.g. a D-Bus error); the page shows it in small print.
    #[serde(default)]
    pub detail: Option<String>,
}

/// One root slot in [`SystemView`].
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SlotView {
    /// Its bootname: `A` or `B`.
    pub slot: String,
    /// RAUC's slot name, e.g. `rootfs.1`.
    pub name: String,
    /// `booted`, `active` (boots next) or `inactive`.
    pub state: String,
    /// `good` or `bad` (the boot loader's verdict); null when unknown.
    pub boot_status: Option<String>,
    /// The version of the bundle installed into it; null when RAUC knows
    /// of none (never installed).
    pub version: Option<String>,
    /// When that bundle was installed (RFC 3339 UTC).
    pub installed: Option<String>,
}

/// The update in [`SystemView`].
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UpdateView {
    /// `idle`, `receiving`, `installing`, `installed` or `failed`.
    pub state: String,
    /// The state in words ("Installing uagate 0.2.0 into slot B…").
    pub message: Option<String>,
    /// When the state began (RFC 3339 UTC).
    pub since: Option<String>,
}

impl From<&uagate_system::UpdateState> for UpdateView {
    fn from(s: &uagate_system::UpdateState) -> UpdateView {
        UpdateView {
            state: s.name().to_string(),
            message: s.message(),
            since: s.since().map(rfc3339),
        }
    }
}

/// What the System page and `GET /api/v1/system` show: asks RAUC for the
/// slots (on the appliance) and reads the image version.
pub async fn system(state: &WebState) -> SystemView {
    let updater = &state.system;
    let appliance = updater.on_appliance();
    let update = UpdateView::from(&updater.state());
    let mut view = SystemView {
        appliance,
        version: env!("CARGO_PKG_VERSION").to_string(),
        image_version: updater.image_version().await,
        compatible: None,
        booted_slot: None,
        slots: Vec::new(),
        update,
        message: None,
        detail: None,
    };
    if !appliance {
        view.message = Some(
            "This gateway is not running on the appliance image: there are no slots, and it is \
             updated by replacing the uagate program."
                .into(),
        );
        return view;
    }
    match updater.status().await {
        Ok(status) => {
            view.booted_slot = status.booted_slot().map(|s| s.bootname.clone());
            view.compatible = status.compatible.clone();
            view.slots = status
                .slots
                .iter()
                .map(|s| SlotView {
                    slot: s.bootname.clone(),
                    name: s.name.clone(),
                    state: s.state.as_str().to_string(),
                    boot_status: s.boot_status.map(|b| b.as_str().to_string()),
                    version: s.version.clone(),
                    installed: s.installed.clone(),
                })
                .collect();
        }
        Err(e) => {
            tracing::warn!(error = %e, "rauc status failed");
            let detail = match e {
                uagate_system::SystemError::Status(line) => line,
                other => other.to_string(),
            };
            let trouble = rauc_trouble(&detail, updater.on_appliance_image().await);
            view.appliance = trouble.appliance;
            view.message = Some(trouble.message);
            view.detail = Some(detail);
        }
    }
    view
}

/// What the System page makes of a failed `rauc status`: whether to treat
/// the host as the appliance, and what to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaucTrouble {
    /// Still the appliance (its slots could not be read now); `false`: a
    /// host with RAUC installed that is not the appliance image (nothing
    /// to show or install).
    pub appliance: bool,
    /// What it means and what to do, in plain words.
    pub message: String,
}

/// Maps RAUC's answer to `rauc status` (`detail`, its last line) on a host
/// that is the appliance image (`image`, see
/// [`uagate_system::os_release::is_appliance_image`]) or not, to words
/// for the System page and `GET /api/v1/system`. Off the image, RAUC has
/// no service and no slots there (typically "Error retrieving slot status
/// via D-Bus: … Could not connect"): updates are the appliance image's
/// business. On the image, a service that does not answer is said so.
pub fn rauc_trouble(detail: &str, image: bool) -> RaucTrouble {
    let no_service = [
        "D-Bus",
        "DBus",
        "dbus",
        "de.pengutronix.rauc",
        "system.conf",
        "system config",
    ]
    .iter()
    .any(|s| detail.contains(s));
    if !image {
        return RaucTrouble {
            appliance: false,
            message: "RAUC is installed on this host, but the host is not the uagate appliance \
                      image: updates are managed by the appliance image (its RAUC service and \
                      its two system slots), which this host does not have. There are no slots \
                      to show and nothing to install here: update uagate on this host by \
                      replacing the uagate program."
                .into(),
        };
    }
    let message = if no_service {
        "RAUC's service on this appliance does not answer, so its slots cannot be shown and no \
         update can be installed now. Restart the appliance; if this stays after a restart, the \
         appliance needs its image flashed again (see Recovery in the appliance guide)."
    } else {
        "RAUC did not report the slots, so they cannot be shown now. Reload this page in a \
         moment; if this stays, restart the appliance."
    };
    RaucTrouble {
        appliance: true,
        message: message.into(),
    }
}

/// Starts receiving an update bundle of `declared` bytes (when the
/// request says): 413 past [`uagate_system::MAX_BUNDLE_BYTES`], 409 off
/// the appliance or while another update runs. Write the body into the
/// returned upload, then hand it to [`install_update`].
pub async fn begin_update(
    state: &WebState,
    declared: Option<u64>,
) -> Result<uagate_system::Upload, ApiError> {
    if declared.is_some_and(|n| n > uagate_system::MAX_BUNDLE_BYTES) {
        return Err(uagate_system::SystemError::TooLarge {
            limit: uagate_system::MAX_BUNDLE_BYTES,
        }
        .into());
    }
    Ok(state.system.receive().await?)
}

/// Installs a received bundle in the background (audited as
/// `event.system_update_started`, then `..._finished` or `..._failed`
/// under the caller's name). An empty upload is refused (422).
pub async fn install_update(
    state: &WebState,
    who: &Authed,
    upload: uagate_system::Upload,
) -> Result<(), ApiError> {
    if upload.written() == 0 {
        return Err(ApiError::invalid("bundle", "the update bundle is empty"));
    }
    state
        .store
        .record_event(
            &who.user,
            "event.system_update_started",
            &serde_json::json!({ "bytes": upload.written() }),
        )
        .await?;
    let store = state.store.clone();
    let user = who.user.clone();
    tokio::spawn(async move {
        let (kind, payload) = match upload.install().await {
            Ok(update) => (
                "event.system_update_finished",
                serde_json::json!({ "version": update.version, "slot": update.slot }),
            ),
            Err(e) => (
                "event.system_update_failed",
                serde_json::json!({ "message": e.to_string() }),
            ),
        };
        if let Err(e) = store.record_event(&user, kind, &payload).await {
            tracing::warn!(error = %e, "cannot record the end of an update in the audit trail");
        }
    });
    Ok(())
}

/// How long a restart request waits, so the answer reaches the browser
/// before the appliance goes down.
const REBOOT_DELAY: std::time::Duration = std::time::Duration::from_millis(500);

/// Asks for a restart of the appliance (audited as `event.system_reboot`):
/// 409 off the appliance or while an update is under way; otherwise the
/// request file is created a moment after this returns.
pub async fn reboot(state: &WebState, who: &Authed) -> Result<(), ApiError> {
    state.system.can_reboot()?;
    state
        .store
        .record_event(&who.user, "event.system_reboot", &serde_json::json!({}))
        .await?;
    let system = state.system.clone();
    tokio::spawn(async move {
        tokio::time::sleep(REBOOT_DELAY).await;
        if let Err(e) = system.reboot().await {
            tracing::error!(error = %e, "the restart request failed");
        }
    });
    tracing::warn!(user = %who.user, "appliance restart requested");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every history kind a field connection records reads in words on
    /// the page (the raw kind stays in REST and the cell's title).
    #[test]
    fn history_kinds_read_in_words() {
        for kind in [
            "up",
            "failed",
            "lost",
            "connection_lost",
            "moved",
            "failover",
            "failover_requested",
            "failover_unavailable",
            "gave_up",
            "new_cycle",
            "reconnect_requested",
            "reactivated",
            "transferred",
            "not_transferred",
            "gap",
            "items_spread",
            "short_queues",
        ] {
            let view = HistoryView {
                at: String::new(),
                server: None,
                kind: kind.to_string(),
                detail: String::new(),
                explained: None,
            };
            assert!(
                view.kind_text() != kind && !view.kind_text().contains('_'),
                "{kind} is not in words"
            );
        }
    }

    /// Test connection of an edited entry logs in with the stored password
    /// where the form or REST sends the placeholder; a new entry, or one
    /// whose stored identity has no password, gets an error naming the
    /// password setting; a typed password is used as typed.
    #[test]
    fn test_connection_uses_the_stored_password_for_the_placeholder() {
        let user = |password: &str| uagate_config::FieldIdentity::Username {
            username: "plc-user".into(),
            password: password.into(),
        };
        let stored_entry = uagate_config::FieldServer {
            identity: user("the stored secret"),
            ..uagate_config::FieldServer::new("line1", Vec::new())
        };
        let stored = Config {
            field_servers: vec![stored_entry.clone()],
            ..Config::default()
        };
        let edited = uagate_config::FieldServer {
            identity: user(KEEP_PASSWORD),
            ..stored_entry.clone()
        };
        let probed = with_kept_password(&edited, &stored, Some("line1")).unwrap();
        assert_eq!(probed.identity, user("the stored secret"));
        // Renamed while edited: the original name finds the password.
        let renamed = uagate_config::FieldServer {
            name: "line1b".into(),
            ..edited.clone()
        };
        let probed = with_kept_password(&renamed, &stored, Some("line1")).unwrap();
        assert_eq!(probed.identity, user("the stored secret"));
        // A new entry has no stored password.
        let e = with_kept_password(&edited, &stored, None).unwrap_err();
        assert!(e.to_string().contains("enter the password"), "{e}");
        let e = with_kept_password(&edited, &stored, Some("line2")).unwrap_err();
        assert!(e.to_string().contains("enter the password"), "{e}");
        // A typed password is tested as typed.
        let typed = uagate_config::FieldServer {
            identity: user("typed now"),
            ..stored_entry
        };
        let probed = with_kept_password(&typed, &stored, Some("line1")).unwrap();
        assert_eq!(probed.identity, user("typed now"));
    }

    /// A certificate is fine until 30 days before its end, then "expires
    /// in …", then "expired".
    #[test]
    fn certificate_expiry_in_words() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-07T12:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        assert_eq!(expiry("2027-01-06T12:00:01Z", now), None);
        assert_eq!(
            expiry("2027-01-06T12:00:00Z", now),
            Some((false, "expires in 30 days".into()))
        );
        assert_eq!(
            expiry("2026-12-08T18:00:00Z", now),
            Some((false, "expires in 30 hours".into()))
        );
        assert_eq!(
            expiry("2026-12-07T12:00:00Z", now),
            Some((true, "expired".into()))
        );
        assert_eq!(expiry("not a time", now), None);
    }

    /// A CRL is current until 7 days before its next update, due soon
    /// then (in days, hours, minutes), out of date from that moment on.
    #[test]
    fn crl_states_by_time_left() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-07T12:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let at = |t: &str| crl_state(Some(t), now);
        assert_eq!(at("2026-12-20T12:00:00Z").0, CrlState::Current);
        assert_eq!(at("2026-12-14T12:00:01Z").0, CrlState::Current);
        let (state, words) = at("2026-12-14T12:00:00Z");
        assert_eq!(state, CrlState::DueSoon);
        assert!(words.starts_with("next update due in 7 days"), "{words}");
        assert!(at("2026-12-08T17:00:00Z")
            .1
            .starts_with("next update due in 29 hours"));
        assert!(at("2026-12-07T12:10:00Z")
            .1
            .starts_with("next update due in 10 minutes"));
        let (state, words) = at("2026-12-07T12:00:00Z");
        assert_eq!(state, CrlState::OutOfDate);
        assert!(
            words.starts_with("out of date since 2026-12-07 12:00 UTC: the certificates this CA issued are refused"),
            "{words}"
        );
        assert_eq!(crl_state(None, now).0, CrlState::Current);
        assert_eq!(CrlState::DueSoon.as_str(), "due_soon");
        assert_eq!(CrlState::OutOfDate.class(), "bad");
    }

    #[test]
    fn page_times_read_as_date_and_time_of_day_in_utc() {
        assert_eq!(
            second_utc_text("2026-12-04T17:02:44Z"),
            "2026-12-04 17:02:44 UTC"
        );
        // Another zone is shown in UTC.
        assert_eq!(
            second_utc_text("2026-12-04T18:02:44+01:00"),
            "2026-12-04 17:02:44 UTC"
        );
        // Not a time: shown as it is.
        assert_eq!(second_utc_text("soon"), "soon");
        let s = SessionView {
            id: "ns=1;i=1".into(),
            name: "c".into(),
            transport: "opc.tcp".into(),
            security_policy: "None".into(),
            security_mode: "None".into(),
            owner: None,
            user: "anonymous".into(),
            created: Some("2026-12-04T17:02:44Z".into()),
            subscriptions: 0,
        };
        assert_eq!(s.created_utc().as_deref(), Some("2026-12-04 17:02:44 UTC"));
    }

    #[test]
    fn rauc_without_the_appliance_image_is_said_in_plain_words() {
        // What `rauc status` prints on a Debian host with the rauc package
        // but no RAUC service.
        let dbus = "Error retrieving slot status via D-Bus: error creating proxy: Could not \
                    connect: No such file or directory";
        let t = rauc_trouble(dbus, false);
        assert!(!t.appliance);
        assert!(
            t.message.contains("not the uagate appliance image"),
            "{}",
            t.message
        );
        assert!(
            t.message.contains("managed by the appliance image"),
            "{}",
            t.message
        );
        assert!(
            !t.message.contains("D-Bus"),
            "the raw error is the detail: {}",
            t.message
        );
        // Any other failure off the image: the same.
        assert_eq!(rauc_trouble("exit status 1", false), t);
    }

    #[test]
    fn rauc_on_the_image_that_does_not_answer() {
        let t = rauc_trouble(
            "Error retrieving slot status via D-Bus: The name de.pengutronix.rauc was not \
             provided by any .service files",
            true,
        );
        assert!(t.appliance);
        assert!(
            t.message
                .contains("service on this appliance does not answer"),
            "{}",
            t.message
        );
        assert!(t.message.contains("Restart the appliance"), "{}", t.message);
        let t = rauc_trouble("Failed to parse status", true);
        assert!(t.appliance);
        assert!(
            t.message.contains("did not report the slots"),
            "{}",
            t.message
        );
    }
}
