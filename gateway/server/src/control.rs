//! The engine's control part: the server state an administrator requested
//! and the operator's ServiceLevel override ([`health::Control`]), the
//! computed ServiceLevel, what the Server object publishes of them, and the
//! configuration in force with the outcome of the last change.

use opcua_types::{DateTime, LocalizedText, ServerState};
use parking_lot::Mutex;
use uagate_config::{Config, Redundancy};
use uagate_store::Store;

use crate::health::{self, RequestedState};
use crate::level::{Computed, Handover, Health, LevelMachine, PairRole, PairView};
use crate::reconfigure::ReconfigureStatus;
use crate::space::AddressSpace;

/// Settings key under which a requested server state is persisted (and
/// audited); node-local, never replicated to the standby.
pub(crate) const STATE_SETTING: &str = uagate_store::REQUESTED_STATE_SETTING;

/// The externally controlled state of the server and its configuration.
pub(crate) struct ServerControl {
    /// The administrator-requested state and the operator's ServiceLevel override.
    control: Mutex<health::Control>,
    /// Computes ServiceLevel from the appliance's health, and its last
    /// result (what is published while running normally).
    level: Mutex<(LevelMachine, Computed)>,
    /// The appliance pair as the pair node last told.
    pair: Mutex<PairView>,
    /// What the pair does before this appliance goes into maintenance.
    handover: Mutex<Option<Handover>>,
    /// `[redundancy]` of the start-up configuration (ServerRedundancy).
    redundancy: Redundancy,
    /// This server's application URI (its entry in the redundant set).
    application_uri: String,
    /// The configuration in force (start-up document plus live changes).
    applied: Mutex<Config>,
    /// The outcome of the last stored configuration change.
    reconfigure: Mutex<ReconfigureStatus>,
    /// The last stored document the gateway looked at (the start-up one
    /// until a change comes), whether or not it is in force: what the
    /// next change is compared with to tell what that change alone did.
    stored: Mutex<Config>,
    /// The stored settings not in force (see
    /// [`crate::reconfigure::waiting_for_restart`]), worked out when
    /// `stored` or `applied` last changed.
    waiting: Mutex<Vec<String>>,
    /// Held while one stored change is decided and applied, so the store
    /// watcher and the console never apply two at once.
    pub(crate) reconfiguring: Mutex<()>,
}

impl ServerControl {
    /// The control state at start: `config` in force, `requested` the
    /// state persisted before a restart. Called once by [`crate::start`].
    pub(crate) fn new(
        config: &Config,
        application_uri: &str,
        requested: Option<RequestedState>,
    ) -> ServerControl {
        ServerControl {
            control: Mutex::new(health::Control {
                requested,
                override_level: None,
                ..Default::default()
            }),
            // Until housekeeping first looks: no field connection is up yet.
            level: {
                let mut machine = LevelMachine::new();
                let first = machine.compute(
                    &Health {
                        config_loaded: true,
                        fields: config
                            .field_servers
                            .iter()
                            .filter(|f| f.enabled)
                            .map(|f| (f.name.clone(), false))
                            .collect(),
                        max_sessions: usize::try_from(config.server.max_session_count)
                            .unwrap_or(usize::MAX),
                        ..Health::default()
                    },
                    std::time::Instant::now(),
                );
                Mutex::new((machine, first))
            },
            pair: Mutex::new(PairView::default()),
            handover: Mutex::new(None),
            redundancy: config.redundancy.clone(),
            application_uri: application_uri.to_string(),
            applied: Mutex::new(config.clone()),
            reconfigure: Mutex::new(ReconfigureStatus::Unchanged),
            stored: Mutex::new(config.clone()),
            waiting: Mutex::new(Vec::new()),
            reconfiguring: Mutex::new(()),
        }
    }

    /// Publishes the current state and ServiceLevel on the Server object of
    /// `space`. Called at start, after every state change and by housekeeping.
    pub(crate) fn publish(&self, space: &AddressSpace) {
        let computed = self.computed().level;
        let control = self.control.lock().clone();
        let level = control.service_level(computed);
        let mut space = space.local_mut();
        space.set_state(control.state());
        space.set_service_level(level);
        let r = &self.redundancy;
        let own_uri = self.application_uri.clone();
        let current = r
            .current_server_id
            .clone()
            .unwrap_or_else(|| own_uri.clone());
        // A pair without hand-written [redundancy]: a Hot set of its
        // members (non-transparent, Part 4 §6.6.2), each serving with its
        // own field sessions.
        let pair = self.pair.lock().clone();
        let (support, server_uris) = if r.support == uagate_config::RedundancyMode::None
            && pair.members.iter().filter(|m| !m.witness).count() > 1
        {
            // A witness serves no OPC UA: not a server of the set.
            let others: Vec<String> = pair
                .members
                .iter()
                .filter(|m| {
                    m.node_id != pair.node_id && !m.witness && !m.application_uri.is_empty()
                })
                .map(|m| m.application_uri.clone())
                .collect();
            (opcua_types::RedundancySupport::Hot, others)
        } else {
            (redundancy_support(r.support), r.server_uris.clone())
        };
        space.set_redundancy(
            support,
            &server_uris,
            &current,
            &[(own_uri, level, control.state())],
        );
        match &control.requested {
            Some(r) => {
                space.set_shutdown(r.seconds_till_shutdown, r.reason.clone());
                space.set_estimated_return_time(r.estimated_return_time);
            }
            None => {
                space.set_shutdown(0, LocalizedText::null());
                space.set_estimated_return_time(DateTime::null());
            }
        }
    }

    /// Whether new sessions are refused because a maintenance state was
    /// requested with drain.
    pub(crate) fn draining(&self) -> bool {
        self.control.lock().draining()
    }

    /// Whether CreateSession is refused now: draining, or (with
    /// `in_maintenance`, the `refuse_sessions_in_maintenance` setting) in
    /// the Maintenance subrange.
    pub(crate) fn refuses_sessions(&self, in_maintenance: bool) -> bool {
        let control = self.control.lock();
        control.draining() || (in_maintenance && control.in_maintenance(self.computed().level))
    }

    /// The ServerStatus.State currently published.
    pub(crate) fn state(&self) -> ServerState {
        self.control.lock().state()
    }

    /// The ServiceLevel currently published.
    pub(crate) fn service_level(&self) -> u8 {
        let computed = self.computed().level;
        self.control.lock().service_level(computed)
    }

    /// Where the published ServiceLevel comes from and why: the reason of
    /// the computed level, the operator's reason for an override, or the
    /// requested state.
    pub(crate) fn level_source(&self) -> (&'static str, String) {
        let computed = self.computed().reason;
        let c = self.control.lock();
        let source = c.level_source();
        let reason = match source {
            "override" => c.override_reason.clone(),
            "requested_state" => format!("{:?} requested", c.state()),
            _ => computed.to_string(),
        };
        (source, reason)
    }

    /// Records the pair's state (see [`crate::Engine::set_pair_view`]).
    /// Returns whether the membership changed (then ServerRedundancy must
    /// be published again).
    pub(crate) fn set_pair_view(&self, view: PairView) -> bool {
        let mut pair = self.pair.lock();
        // The servers of the set (lag figures change every second).
        let servers = |v: &PairView| -> Vec<(u64, String, bool)> {
            v.members
                .iter()
                .map(|m| (m.node_id, m.application_uri.clone(), m.witness))
                .collect()
        };
        let changed = servers(&pair) != servers(&view) || pair.node_id != view.node_id;
        *pair = view;
        changed
    }

    /// Installs what the pair does before maintenance.
    pub(crate) fn set_handover(&self, handover: Handover) {
        *self.handover.lock() = Some(handover);
    }

    /// What the pair does before maintenance, if a pair node told it.
    pub(crate) fn handover(&self) -> Option<Handover> {
        self.handover.lock().clone()
    }

    /// The pair's state as last recorded.
    pub(crate) fn pair_view(&self) -> PairView {
        self.pair.lock().clone()
    }

    /// The pair role, whether an integrity fault stopped replication and
    /// whether the appliance is cut off from the quorum.
    pub(crate) fn pair_health(&self) -> (PairRole, bool, bool) {
        let p = self.pair.lock();
        (p.role, p.integrity_fault.is_some(), p.quorum_lost)
    }

    /// The last computed ServiceLevel and its reason.
    pub(crate) fn computed(&self) -> Computed {
        self.level.lock().1
    }

    /// Computes the ServiceLevel for `health`; true when the level or its
    /// reason changed (then the Server object must be published again).
    /// Called every second by housekeeping.
    pub(crate) fn update_health(&self, health: &Health) -> bool {
        let mut level = self.level.lock();
        let next = level.0.compute(health, std::time::Instant::now());
        let changed = next != level.1;
        if changed && next.level != level.1.level {
            tracing::info!(from = level.1.level, to = next.level, reason = %next.reason, "computed ServiceLevel changed");
        }
        level.1 = next;
        changed
    }

    /// Sets (or with `None` clears) the operator's fixed ServiceLevel and
    /// its reason (kept only with a level). Returns the override's
    /// generation, which [`ServerControl::expire_override`] takes.
    pub(crate) fn set_override(&self, level: Option<u8>, reason: String) -> u64 {
        let mut c = self.control.lock();
        c.override_level = level;
        c.override_reason = if level.is_some() {
            reason
        } else {
            String::new()
        };
        c.override_generation += 1;
        c.override_generation
    }

    /// Clears the override of `generation` when no later change replaced
    /// it; true when it was cleared (called when its expiry is due).
    pub(crate) fn expire_override(&self, generation: u64) -> bool {
        let mut c = self.control.lock();
        let current = c.override_generation == generation;
        if current {
            c.override_level = None;
            c.override_reason.clear();
            c.override_generation += 1;
        }
        current
    }

    /// The state an operator requested and that is in force, if any.
    pub(crate) fn requested(&self) -> Option<RequestedState> {
        self.control.lock().requested.clone()
    }

    /// Applies a requested state (Running clears the request).
    pub(crate) fn request(&self, requested: RequestedState) {
        self.control.lock().request(requested);
    }

    /// The configuration in force: the one the gateway started with plus
    /// every change applied live since.
    pub(crate) fn applied(&self) -> Config {
        self.applied.lock().clone()
    }

    /// Records `config` as the configuration in force (applied live).
    pub(crate) fn set_applied(&self, config: Config) {
        *self.applied.lock() = config;
    }

    /// The last stored document the gateway looked at (see
    /// [`crate::reconfigure`]).
    pub(crate) fn stored(&self) -> Config {
        self.stored.lock().clone()
    }

    /// Records `config` as the last stored document looked at, and
    /// `waiting`, its settings not in force.
    pub(crate) fn set_stored(&self, config: Config, waiting: Vec<String>) {
        *self.stored.lock() = config;
        *self.waiting.lock() = waiting;
    }

    /// The stored settings not in force, as of the last change.
    pub(crate) fn waiting(&self) -> Vec<String> {
        self.waiting.lock().clone()
    }

    /// What happened to the last stored configuration change.
    pub(crate) fn reconfigure_status(&self) -> ReconfigureStatus {
        self.reconfigure.lock().clone()
    }

    /// Records what happened to the last stored configuration change.
    pub(crate) fn set_reconfigure_status(&self, status: ReconfigureStatus) {
        *self.reconfigure.lock() = status;
    }
}

/// The wire RedundancySupport for the configured mode.
fn redundancy_support(mode: uagate_config::RedundancyMode) -> opcua_types::RedundancySupport {
    use opcua_types::RedundancySupport as R;
    use uagate_config::RedundancyMode as M;
    match mode {
        M::None => R::None,
        M::Cold => R::Cold,
        M::Warm => R::Warm,
        M::Hot => R::Hot,
        M::Transparent => R::Transparent,
        M::HotAndMirrored => R::HotAndMirrored,
    }
}

/// The persisted form of a requested state.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredState {
    state: i32,
    estimated_return_ticks: i64,
    seconds_till_shutdown: u32,
    reason_locale: String,
    reason_text: String,
    #[serde(default)]
    drain: bool,
}

/// The text a requested state is persisted as (setting [`STATE_SETTING`]).
pub(crate) fn encode_state(r: &RequestedState) -> String {
    let stored = StoredState {
        state: r.state as i32,
        estimated_return_ticks: r.estimated_return_time.checked_ticks(),
        seconds_till_shutdown: r.seconds_till_shutdown,
        reason_locale: r.reason.locale.to_string(),
        reason_text: r.reason.text.to_string(),
        drain: r.drain,
    };
    serde_json::to_string(&stored).unwrap_or_default()
}

fn decode_state(text: &str) -> Option<RequestedState> {
    let s: StoredState = serde_json::from_str(text).ok()?;
    Some(RequestedState {
        state: crate::methods::server_state(s.state)?,
        estimated_return_time: DateTime::from(s.estimated_return_ticks),
        seconds_till_shutdown: s.seconds_till_shutdown,
        reason: LocalizedText::new(&s.reason_locale, &s.reason_text),
        drain: s.drain,
    })
}

/// The state requested before a restart, which stays in force; read once
/// at start.
pub(crate) async fn stored_state(store: &Store) -> Option<RequestedState> {
    match store.setting(STATE_SETTING).await {
        Ok(Some(text)) => decode_state(&text),
        _ => None,
    }
}
