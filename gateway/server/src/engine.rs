//! The engine: shared state of the running server, held as parts that each
//! own their state and methods (channels, sessions, request pipeline,
//! control, endpoints, address space). What needs several parts is an
//! `Engine` method: the services (`services.rs`, `routed.rs`,
//! `subscriptions.rs`, `methods.rs`), the dispatcher's loop
//! (`dispatch.rs`), reconfiguration (`reconfigure.rs`), field mounting
//! (`fields.rs`), and the operations below, which are also the engine's
//! interface to the console, the metrics and tests.

use std::sync::Arc;
use std::time::Duration;

use opcua_core::ResponseMessage;
use uagate_config::Config;
use uagate_store::Store;

use crate::channels::Channels;
use crate::control::ServerControl;
use crate::dispatch::Pipeline;
use crate::endpoints::{Endpoints, Offered};
use crate::sessions::SessionTable;
use crate::space::AddressSpace;
use crate::{stats, tls_cert, SessionSummary};

/// Shared state of the running server.
pub struct Engine {
    /// The start-up configuration (what is in force now: [`Engine::applied_config`]).
    pub(crate) config: Config,
    /// Users, the trust list, settings and the change log.
    pub(crate) store: Store,
    /// Certificates, application description and offered endpoints.
    pub(crate) endpoints: Endpoints,
    /// Open secure channels and reclaimable connections.
    pub(crate) channels: Channels,
    /// Northbound sessions and their subscriptions.
    pub(crate) sessions: SessionTable,
    /// Admission, the request queue and scheduler, statistics.
    pub(crate) pipeline: Pipeline,
    /// Server state, ServiceLevel and the configuration in force.
    pub(crate) control: ServerControl,
    /// The local address space and the mounted field connections.
    pub(crate) space: AddressSpace,
    /// Clients' condition refreshes in progress (see `alarms.rs`).
    pub(crate) refreshes: parking_lot::Mutex<crate::alarms::Refreshes>,
    /// What starting a field connection needs; set by `start_fields`.
    pub(crate) field_kit: std::sync::OnceLock<crate::fields::FieldKit>,
    /// The last quarter of an hour, sampled by housekeeping (dashboard).
    pub(crate) samples: parking_lot::Mutex<crate::samples::Samples>,
    /// When the gateway started (uptime).
    pub(crate) started: std::time::Instant,
    /// Milliseconds after `started` of housekeeping's last round (the
    /// service manager's watchdog is fed only while it goes round).
    pub(crate) heartbeat_ms: std::sync::atomic::AtomicU64,
}

impl Engine {
    /// The store the engine reads users and the trust list from.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The failed-login counting of OPC UA UserName logins; the console
    /// takes the same instance at start so that guesses through either
    /// door count against both.
    pub fn login_throttle(&self) -> std::sync::Arc<crate::throttle::LoginThrottle> {
        self.sessions.throttle().clone()
    }

    /// Number of sessions (created and active).
    pub fn session_count(&self) -> usize {
        self.sessions.count()
    }

    /// Sessions never activated that CreateSession evicted from a full
    /// session table since start (metrics).
    pub fn sessions_evicted(&self) -> u64 {
        self.sessions.evicted()
    }

    /// Connections closed because the peer stopped reading its socket for
    /// [`crate::driver::SEND_STALL`] (metrics).
    pub fn send_stalls(&self) -> u64 {
        self.channels.send_stalls()
    }

    /// Applies a changed configuration's isolation settings while running
    /// when only trusted owners' weights, the default weight and ingress
    /// rules changed. Anything else is refused, naming the settings that need
    /// a restart; nothing is half-applied.
    pub fn apply_isolation(&self, config: &Config) -> Result<(), String> {
        self.pipeline.apply_isolation(config)
    }

    /// Connections refused by the connection rate limiter (no owner keys).
    pub fn isolation_rate_rejections(&self) -> u64 {
        self.pipeline.admission().rate_rejections()
    }

    /// Resource-isolation usage and rejections per stage (no owner keys).
    pub fn isolation_snapshot(&self) -> uagate_isolation::provider::LimiterSnapshot {
        self.pipeline.admission().snapshot()
    }

    /// How a peer address is classified now (ingress rules) and the
    /// scheduling weight it gets: (class label, weight). For the console's
    /// rule tester and for tests; never used as a metric label.
    pub fn classify_peer(&self, ip: std::net::IpAddr) -> (&'static str, u32) {
        let admission = self.pipeline.admission();
        let caller = admission.classify(ip);
        (caller.class.label(), admission.weight(&caller))
    }

    /// The offered endpoints.
    pub fn endpoints(&self) -> &[Offered] {
        self.endpoints.offered()
    }

    /// Sends a response to request `request_id` of channel `channel_id`
    /// from outside that channel's request flow. Dropped when the channel is
    /// gone or its queue is full (the client's request then times out).
    pub fn respond(&self, channel_id: u32, request_id: u32, response: ResponseMessage) {
        self.channels.send_later(channel_id, request_id, response);
        // A parked request (Publish) answered here releases its charges.
        self.pipeline.unpark(channel_id, request_id);
    }

    /// Answers the Publish requests that were queued on sessions that ended
    /// or moved to another channel (see [`crate::session::EndedPublish`])
    /// with a ServiceFault on the channel each came on, releasing its
    /// charges. Called after CloseSession, ActivateSession, an operator's
    /// close, a re-check of users and certificates, and by housekeeping
    /// every second (session timeouts).
    pub(crate) fn answer_ended_publishes(&self) {
        let ended = self.sessions.lock().take_ended_publishes();
        for e in ended {
            let fault = opcua_types::ServiceFault {
                response_header: opcua_types::ResponseHeader::new_service_result(
                    e.request_handle,
                    e.status,
                ),
            };
            self.respond(
                e.channel_id,
                e.request_id,
                ResponseMessage::ServiceFault(Box::new(fault)),
            );
        }
    }

    /// Publishes the current state and ServiceLevel on the Server object.
    /// Called at start, after every state change and by housekeeping.
    pub fn refresh_server_state(&self) {
        self.control.publish(&self.space);
    }

    /// Tells the engine the pair's state: its role and whether replication
    /// stopped on an integrity fault feed the computed ServiceLevel at the
    /// next housekeeping tick; REST and the metrics show the rest. Called
    /// every second by the pair's follower task.
    pub fn set_pair_view(&self, view: crate::level::PairView) {
        if self.control.set_pair_view(view) {
            // The membership drives Server.ServerRedundancy.
            self.refresh_server_state();
        }
    }

    /// Installs what the appliance pair does before this appliance goes
    /// into maintenance ([`crate::level::Handover`]): called once by
    /// `uagate run` after the pair node started; a standalone engine
    /// without it goes into maintenance at once.
    pub fn set_handover(&self, handover: crate::level::Handover) {
        self.control.set_handover(handover);
    }

    /// The pair's state, as last told.
    pub fn pair_view(&self) -> crate::level::PairView {
        self.control.pair_view()
    }

    /// This appliance's role in the pair, as last told.
    pub fn pair_role(&self) -> crate::level::PairRole {
        self.control.pair_health().0
    }

    /// Computes the ServiceLevel from the appliance's health now (its field
    /// connections, sessions and configuration; see [`crate::level`]) and
    /// publishes it when it changed. Called every second by housekeeping.
    pub fn update_service_level(&self) {
        let config = self.applied_config();
        let fields = config
            .field_servers
            .iter()
            .filter(|f| f.enabled)
            .map(|f| {
                let up = self
                    .field_status(&f.name)
                    .is_some_and(|st| st.state == uagate_field::ConnState::Connected);
                (f.name.clone(), up)
            })
            .collect();
        let (role, integrity_fault, quorum_lost) = self.control.pair_health();
        let health = crate::level::Health {
            role,
            config_loaded: true,
            integrity_fault,
            quorum_lost,
            fields,
            sessions: self.session_count(),
            max_sessions: usize::try_from(config.server.max_session_count).unwrap_or(usize::MAX),
        };
        if self.control.update_health(&health) {
            self.refresh_server_state();
        }
    }

    /// The TLS server configuration of the appliance's certificate (the one
    /// opc.wss / opc.https use; it follows `uagate tls set` while running).
    /// The console listener serves it too.
    pub fn tls_server_config(&self) -> Option<Arc<tokio_rustls::rustls::ServerConfig>> {
        self.endpoints.tls_server_config()
    }

    /// The application instance certificate (DER) the OPC UA endpoints
    /// present; shown on the console's certificates page.
    pub fn application_certificate(&self) -> Vec<u8> {
        self.endpoints.application_certificate()
    }

    /// Subject, names, validity and fingerprint of the TLS certificate in
    /// service, when a TLS listener runs.
    pub fn tls_certificate(&self) -> Option<tls_cert::TlsInfo> {
        self.endpoints.tls_certificate()
    }

    /// The northbound sessions, for the console: id, client name, where
    /// they came from, the user, and their subscriptions. Sorted by
    /// creation time.
    pub fn session_list(&self) -> Vec<SessionSummary> {
        self.sessions.list()
    }

    /// Closes the session with this SessionId (as printed by
    /// [`Engine::session_list`]); its subscriptions go with it and its next
    /// request gets BadSessionIdInvalid. Returns the closed session's client
    /// name, `None` when there is no such session.
    pub fn close_session_by_id(&self, id: &str) -> Option<String> {
        let id = id.parse::<opcua_types::NodeId>().ok()?;
        let (session, count) = self.sessions.remove_by_session_id(&id)?;
        self.answer_ended_publishes();
        tracing::info!(session = %session.id, "session closed by an operator");
        self.space.publish_session_count(count);
        self.sessions.notify_changed();
        Some(session.name)
    }

    /// Requests per service and status, their latencies, and open
    /// connections and channels per transport (the metrics endpoint).
    pub fn request_stats(&self) -> Vec<stats::ServiceStats> {
        self.pipeline.stats().services()
    }

    /// Notifications (data changes and events) sent to clients since start.
    pub fn notifications_sent(&self) -> u64 {
        self.pipeline.stats().notifications()
    }

    /// The samples of the last quarter of an hour, oldest first (see
    /// [`crate::samples`]).
    pub fn samples(&self) -> Vec<crate::samples::Sample> {
        self.samples.lock().all()
    }

    /// How long ago housekeeping last went round (once a second while the
    /// gateway's runtime is healthy). The systemd watchdog is fed only
    /// while this stays short, so a hung gateway is restarted.
    pub fn heartbeat_age(&self) -> Duration {
        let last =
            Duration::from_millis(self.heartbeat_ms.load(std::sync::atomic::Ordering::Relaxed));
        self.started.elapsed().saturating_sub(last)
    }

    /// Records a round of housekeeping (see [`Engine::heartbeat_age`]).
    pub(crate) fn beat(&self) {
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.heartbeat_ms
            .store(now, std::sync::atomic::Ordering::Relaxed);
    }

    /// How long the gateway has been running.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Takes a sample for the dashboard; called by housekeeping every
    /// [`crate::samples::SAMPLE_INTERVAL`].
    pub(crate) fn take_sample(&self) {
        let fields = self
            .applied_config()
            .field_servers
            .iter()
            .map(|f| {
                let level = self
                    .field_status(&f.name)
                    .filter(|st| st.state == uagate_field::ConnState::Connected)
                    .and_then(|st| st.service_level);
                (f.name.clone(), level)
            })
            .collect();
        let counters = crate::samples::Counters {
            reads: self.pipeline.stats().answered("Read"),
            notifications: self.notifications_sent(),
            sessions: self.session_count(),
            fields,
        };
        self.samples.lock().record(
            std::time::Instant::now(),
            chrono::Utc::now().timestamp(),
            counters,
        );
    }

    /// Open (connections, secure channels) per transport.
    pub fn transport_stats(&self) -> Vec<(&'static str, i64, i64)> {
        self.pipeline.stats().transports()
    }

    /// Subscriptions and monitored items of all sessions.
    pub fn subscription_counts(&self) -> (usize, usize) {
        self.sessions.subscription_counts()
    }

    /// The state an operator requested (RequestServerStateChange or the
    /// console) and that is in force now, with its reason and expected
    /// return time; `None` while running normally. Every console page
    /// shows it in a banner.
    pub fn requested_state(&self) -> Option<crate::health::RequestedState> {
        self.control.requested()
    }

    /// Whether new sessions are refused because a maintenance state was
    /// requested with drain.
    pub fn draining(&self) -> bool {
        self.control.draining()
    }

    /// The ServerStatus.State currently published (Running unless an
    /// operator requested another state).
    pub fn server_state(&self) -> opcua_types::ServerState {
        self.control.state()
    }

    /// Whether an operator put the appliance into maintenance (the pair
    /// hands the configuration leadership over then).
    pub fn in_maintenance(&self) -> bool {
        self.service_level() == crate::health::MAINTENANCE
    }

    /// The ServiceLevel currently published.
    pub fn service_level(&self) -> u8 {
        self.control.service_level()
    }

    /// Sets (or with `None` clears) the operator's fixed ServiceLevel.
    pub fn set_service_level_override(&self, level: Option<u8>) {
        self.control.set_override(level, String::new());
        self.refresh_server_state();
    }

    /// Sets the operator's fixed ServiceLevel with a reason, for `expires`
    /// (then the computed value returns), or clears it with `None`. Called
    /// by the console; a later call replaces an earlier one and its expiry.
    pub fn override_service_level(
        self: &Arc<Self>,
        level: Option<u8>,
        reason: String,
        expires: Option<Duration>,
    ) {
        let generation = self.control.set_override(level, reason);
        self.refresh_server_state();
        if let (Some(_), Some(after)) = (level, expires) {
            let engine = Arc::downgrade(self);
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                if engine.control.expire_override(generation) {
                    tracing::info!("operator ServiceLevel override expired");
                    engine.refresh_server_state();
                }
            });
        }
    }

    /// Where the published ServiceLevel comes from (`requested_state`,
    /// `override` or `computed`) and the override's reason.
    pub fn service_level_source(&self) -> (&'static str, String) {
        self.control.level_source()
    }

    /// The configuration in force: the one the gateway started with plus
    /// every change applied live since.
    pub fn applied_config(&self) -> Config {
        self.control.applied()
    }

    /// What happened to the last stored configuration change.
    pub fn reconfigure_status(&self) -> crate::ReconfigureStatus {
        self.control.reconfigure_status()
    }

    /// Recent events of the field connection `name` (console).
    pub fn field_history(&self, name: &str) -> Option<Vec<uagate_field::HistoryEvent>> {
        Some(self.space.field(name)?.history())
    }

    /// Connect attempts and recovery durations of a field connection.
    pub fn field_reconnect_stats(&self, name: &str) -> Option<uagate_field::ReconnectStats> {
        Some(self.space.field(name)?.reconnect_stats())
    }

    /// Asks a field connection to leave its active server (console). `None`
    /// for an unknown (or not running) connection.
    pub fn field_force_failover(
        &self,
        name: &str,
        actor: &str,
    ) -> Option<Result<(), &'static str>> {
        Some(self.space.field(name)?.force_failover(actor))
    }

    /// Starts a new reconnect cycle now for every server of a field
    /// connection that waits or gave up (console and REST "Reconnect
    /// now"); `None` when no such connection runs.
    pub fn field_reconnect_now(&self, name: &str, actor: &str) -> Option<()> {
        self.space.field(name)?.reconnect_now(actor);
        Some(())
    }

    /// Probes every URL of a field connection (console "test connection").
    pub async fn field_probe(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Option<Vec<uagate_field::Probe>> {
        let conn = self.space.field(name)?;
        Some(conn.probe(timeout).await)
    }

    /// Probes every URL of a field connection entry that is not saved yet
    /// (the console's "Test connection" before saving): GetEndpoints on
    /// each, and the server certificate checked against the trust list as
    /// a connect would (an unknown one lands on the rejected list).
    pub async fn field_probe_settings(
        &self,
        entry: &uagate_config::FieldServer,
        timeout: Duration,
    ) -> Vec<uagate_field::Probe> {
        let Some(kit) = self.field_kit.get() else {
            return Vec::new();
        };
        uagate_field::FieldConnection::probe_settings(
            crate::fields::settings(entry),
            kit.setup(),
            timeout,
        )
        .await
    }

    /// The status of a running field connection, `None` for an unknown one.
    pub fn field_status(&self, name: &str) -> Option<uagate_field::FieldStatus> {
        let c = self.space.field(name)?;
        let st = c.status().borrow().clone();
        Some(st)
    }

    /// (Reads asked, southbound Reads sent) of the field connection `name`
    /// since it started (concurrent Reads are merged); `None` for an
    /// unknown connection.
    pub fn field_read_stats(&self, name: &str) -> Option<(u64, u64)> {
        Some(self.space.field(name)?.read_stats())
    }

    /// (Northbound requests that waited for the field connection `name`
    /// without an execution slot, idempotent requests retried once after
    /// one of its reconnects); `None` for an unknown connection.
    pub fn field_request_stats(&self, name: &str) -> Option<(u64, u64)> {
        Some(self.space.field(name)?.request_stats())
    }

    /// (Shared event items, events dropped as duplicates, events dropped
    /// on overflow) of the field connection `name`; `None` for an unknown
    /// connection.
    pub fn field_event_stats(&self, name: &str) -> Option<(usize, u64, u64)> {
        Some(self.space.field(name)?.event_stats())
    }

    /// Number of shared southbound items of the field connection `name`.
    pub fn field_shared_items(&self, name: &str) -> Option<usize> {
        Some(self.space.field(name)?.shared_item_count())
    }

    /// Removes timed-out sessions and refreshes
    /// Server/ServerDiagnostics/ServerDiagnosticsSummary; run every second
    /// by the housekeeping task.
    pub(crate) fn expire_sessions(&self) {
        self.sessions.expire(std::time::Instant::now());
        self.answer_ended_publishes();
        self.publish_diagnostics();
    }

    /// Sets ServerDiagnosticsSummary (Part 5 6.3.3, 12.9) from the session
    /// table and the answers counted since start, and the per-session
    /// diagnostics arrays (6.3.4) from the session table.
    pub(crate) fn publish_diagnostics(&self) {
        let table = self.sessions.diagnostics();
        let answered = self.pipeline.stats().answer_counts();
        let n = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        let summary = opcua_types::ServerDiagnosticsSummaryDataType {
            // The gateway has no views.
            server_view_count: 0,
            current_session_count: n(table.current as u64),
            cumulated_session_count: n(answered.sessions_created),
            security_rejected_session_count: n(answered.security_rejected_sessions),
            rejected_session_count: n(answered.rejected_sessions),
            session_timeout_count: n(table.timed_out),
            session_abort_count: n(table.aborted),
            current_subscription_count: n(table.subscriptions as u64),
            cumulated_subscription_count: n(answered.subscriptions_created),
            publishing_interval_count: n(table.publishing_intervals as u64),
            security_rejected_requests_count: n(answered.security_rejected_requests),
            rejected_requests_count: n(answered.rejected_requests),
        };
        self.space.publish_diagnostics(summary);
        self.space
            .publish_session_diagnostics(self.sessions.session_diagnostics());
    }

    /// Forgets channel `channel_id` everywhere: its responder, its parked
    /// requests' charges and its unactivated sessions. Called by its
    /// connection driver when the connection ends.
    pub(crate) fn channel_closed(&self, channel_id: u32) {
        self.channels.close(channel_id);
        self.pipeline.channel_closed(channel_id);
        self.sessions.channel_closed(channel_id);
    }
}
