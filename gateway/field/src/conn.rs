//! The managed field connection: one per configured field server (or
//! redundant field-server set). It keeps sessions toward the servers the
//! redundancy mode needs, reconnects under the [`ReconnectPolicy`], makes
//! the server [`crate::redundancy`] picks the active one, keeps the shared
//! southbound monitored items of [`ItemTable`] on every connected server,
//! and gives northbound services the active [`LinkSession`] (waiting for it
//! up to the request's deadline).
//!
//! Which servers are connected, when, and which one is active is decided by
//! the sans-IO [`Failover`] machine; this module is its driver (one tokio
//! task per connection, `run`): it turns what the sessions report
//! (attempts that succeeded or failed, sessions lost or moved, status
//! notifications, an operator's request) into [`Event`]s, carries out the
//! [`Action`]s the machine returns (connect, close, activate, reconcile
//! items, move a session) and publishes the [`FieldStatus`].
//!
//! The protocol client is async-opcua-client. After a lost connection its
//! event loop re-activates the session, retrying failed attempts (a refused
//! connect, a channel closed during its handshake) within the link's
//! re-activation window; past the window, or when the session is gone, the
//! link is dropped and the machine decides what happens next. A first
//! connect is one attempt: its failure goes to the machine at once.
//!
//! States (reported in [`FieldStatus`]): `Disconnected` (not enabled, or not
//! started), `Connecting` (never connected yet), `Connected` (an active
//! server is serving), `Reconnecting` (the active server was lost and no
//! other one is usable yet), `GaveUp` (every server's reconnect cycle ran
//! out of retries or budget; a new cycle starts after `max_delay`, or at
//! once on [`FieldConnection::reconnect_now`]), `Closing` and `Closed`
//! (shut down).

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use opcua_client::services::{Call, Read, SetPublishingMode};
use opcua_client::{
    ClientBuilder, DataChangeCallback, EventCallback, IdentityToken, MonitoredItem, Session,
    SessionPollResult, UARequest,
};
use opcua_types::{
    AttributeId, CallMethodRequest, DataChangeFilter, DataValue, DateTime, DeadbandType,
    EndpointDescription, ExtensionObject, MessageSecurityMode, MonitoredItemCreateRequest,
    MonitoringMode, MonitoringParameters, NodeId, ReadValueId, ServerState, StatusCode,
    TimestampsToReturn, UserTokenType, VariableId, Variant,
};
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch, Notify};
use tokio_util::sync::CancellationToken;

pub use crate::failover::{ConnState, Handling};

use crate::events::{southbound_filter, Audience, EventKey, EventTable, Taken};
use crate::failover::{self, Action, Event, Failover, Note, Now, Phase, StatusReport};
use crate::items::{ItemKey, ItemTable};
use crate::limits::{batches, OperationLimits};
use crate::policy::{retry_after_from_header, retry_after_from_reason, Failure, ReconnectPolicy};
use crate::remap::{NamespaceTable, SessionMap};

/// The user identity presented to the field server.
#[derive(Clone)]
pub enum Identity {
    /// Anonymous.
    Anonymous,
    /// User name and password.
    UserName {
        /// User name.
        user: String,
        /// Password (never logged).
        password: String,
    },
    /// X.509 user certificate and key (PEM/DER files).
    Certificate {
        /// Certificate file.
        cert: PathBuf,
        /// Private key file.
        key: PathBuf,
    },
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Identity::Anonymous => f.write_str("Anonymous"),
            Identity::UserName { user, .. } => f
                .debug_struct("UserName")
                .field("user", user)
                .field("password", &"<redacted>")
                .finish(),
            Identity::Certificate { cert, .. } => {
                f.debug_struct("Certificate").field("cert", cert).finish()
            }
        }
    }
}

/// Everything a field connection needs from the configuration.
#[derive(Debug, Clone)]
pub struct FieldSettings {
    /// Mount name (`Objects/<name>`).
    pub name: String,
    /// Servers of the redundant set; each entry is the server's URL followed
    /// by its alternate network paths.
    pub servers: Vec<Vec<String>>,
    /// Security policy URI.
    pub security_policy_uri: String,
    /// Message security mode.
    pub security_mode: MessageSecurityMode,
    /// User identity.
    pub identity: Identity,
    /// Redundancy handling.
    pub handling: Handling,
    /// Reconnect policy.
    pub reconnect: ReconnectPolicy,
    /// Operator overrides of the operation limits (0 = the server's).
    pub overrides: OperationLimits,
    /// Timeout of each southbound request.
    pub request_timeout: Duration,
    /// Requested session timeout.
    pub session_timeout: Duration,
    /// Keep-alive interval, also the ServiceLevel subscription's publishing interval.
    pub keep_alive_interval: Duration,
}

/// Checks a field server's certificate (DER) against the gateway's trust
/// list; an unknown certificate is recorded as rejected and refused with
/// `BadCertificateUntrusted`.
pub type TrustCheck =
    Arc<dyn Fn(Vec<u8>) -> BoxFuture<'static, Result<(), StatusCode>> + Send + Sync>;

/// Called after new namespaces were allocated, with the whole table (the
/// gateway persists it and extends its NamespaceArray).
pub type NamespaceHook = Arc<dyn Fn(&NamespaceTable) + Send + Sync>;

/// The gateway's client identity and trust decisions, shared by all field connections.
#[derive(Clone)]
pub struct ClientSetup {
    /// PKI directory holding the gateway's application certificate
    /// (`own/cert.der`, `private/private.pem`).
    pub pki_dir: PathBuf,
    /// Application URI (must match the certificate).
    pub application_uri: String,
    /// Application name.
    pub application_name: String,
    /// Trust decision for field server certificates.
    pub trust: TrustCheck,
}

/// What the gateway shows about one server of the set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerView {
    /// URL currently used (or last tried).
    pub url: String,
    /// A session is up.
    pub reachable: bool,
    /// Last ServiceLevel seen.
    pub service_level: Option<u8>,
    /// Server.ServerRedundancy.RedundancySupport read at connect (0 none,
    /// 1 cold, 2 warm, 3 hot, 4 transparent, 5 hot and mirrored).
    pub redundancy_support: Option<i32>,
    /// Server.ServerRedundancy.ServerUriArray read at connect (the peers the
    /// server names for non-transparent redundancy).
    pub server_uris: Vec<String>,
}

/// The observable state of a field connection (gateway status nodes, metrics).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldStatus {
    /// State machine state.
    pub state: ConnState,
    /// Index of the active server in the configured set.
    pub active_server: Option<usize>,
    /// URL of the active server's session.
    pub active_endpoint: Option<String>,
    /// ServiceLevel of the active server.
    pub service_level: Option<u8>,
    /// Successful reconnects after a loss.
    pub reconnect_count: u64,
    /// Failed connect attempts.
    pub failed_attempts: u64,
    /// Changes of the active server.
    pub failover_count: u64,
    /// Reconnect cycles that ran out of retries or budget (any server).
    pub gave_up_count: u64,
    /// Notification gaps that could not be recovered (messages lost for
    /// good; each left a marker on the items it carried).
    pub notification_gaps: u64,
    /// Notification messages recovered with Republish after a reconnect.
    pub republished: u64,
    /// Subscriptions moved to a new session with TransferSubscriptions after
    /// the field server had ended the link's session.
    pub transferred: u64,
    /// While [`ConnState::GaveUp`]: when the next reconnect cycle starts.
    pub next_cycle_at: Option<DateTime>,
    /// Last protocol-level error.
    pub last_error: Option<StatusCode>,
    /// [`Self::last_error`] with what was said about it and the URL it
    /// concerns, for the console to explain.
    pub last_failure: Option<FieldError>,
    /// The connection serves nobody and is failing rather than still
    /// connecting (see [`Failover::failing`]).
    pub failing: bool,
    /// Connect attempts that failed since a server last served the
    /// connection (since the start when none ever did).
    pub failed_since_connected: u64,
    /// Since when the connection has served nobody after a failure: its
    /// first failed attempt, or the loss of the server that served; `None`
    /// while a server serves.
    pub failing_since: Option<DateTime>,
    /// Per-server view.
    pub servers: Vec<ServerView>,
}

/// Southbound subscriptions and items of one link.
#[derive(Debug, Default)]
struct LinkSubs {
    /// Sampling class (ms) → its subscriptions in creation order (more than
    /// one when the field server caps items per subscription).
    by_class: HashMap<u32, Vec<u32>>,
    /// Data subscription → how many of our items it holds.
    counts: HashMap<u32, u32>,
    /// How items are spread over a class's subscriptions.
    spread: crate::spread::Spread,
    /// Sampling classes whose short field-server queues were reported.
    short_queues: std::collections::HashSet<u32>,
    /// Our item id → (subscription id, server monitored item id).
    items: HashMap<u32, (u32, u32)>,
    /// Monitoring mode the items currently have.
    mode: Option<MonitoringMode>,
    /// The subscription of the event items, once one is wanted.
    events_sub: Option<u32>,
    /// Our event item id → server monitored item id.
    events: HashMap<u32, u32>,
}

/// Where the one session of a link connects: its current network path.
/// The link moves it to another path of the same server (network
/// redundancy), or to the next server of a hot-and-mirrored set, and the
/// client library then re-activates the same session over the new channel.
///
/// It also keeps the RetryAfterMs hint of the last BadServerTooBusy answer
/// to a session-establishment request (OpenSecureChannel, CreateSession,
/// ActivateSession): the client library reports such a refusal by its
/// status only, and the reconnect policy needs the hint as the lower bound
/// of its next delay.
#[derive(Clone)]
struct PathSwitch {
    url: Arc<Mutex<String>>,
    busy_hint: Arc<Mutex<Option<Duration>>>,
    /// How long a connect may wait for the server's Acknowledge (the
    /// link's request timeout).
    handshake: Duration,
}

impl PathSwitch {
    /// A switch whose connects wait at most `handshake` for the server's
    /// Acknowledge.
    fn new(handshake: Duration) -> PathSwitch {
        PathSwitch {
            url: Arc::default(),
            busy_hint: Arc::default(),
            handshake,
        }
    }

    fn get(&self) -> String {
        self.url.lock().clone()
    }

    fn set(&self, url: &str) {
        *self.url.lock() = url.to_string();
    }

    /// The hint of the last refusal, consumed (each refusal bounds one delay).
    fn take_busy_hint(&self) -> Option<Duration> {
        self.busy_hint.lock().take()
    }
}

impl opcua_client::transport::Connector for PathSwitch {
    type Transport = crate::tcp::FieldTransport;

    fn connect(
        &self,
        channel: Arc<opcua_client::transport::SecureChannelState>,
        outgoing_recv: opcua_client::transport::RequestRecv,
        config: opcua_client::transport::TransportConfiguration,
    ) -> impl std::future::Future<Output = Result<Self::Transport, opcua_types::Error>> + Send + Sync
    {
        let url = self.get();
        let hint = self.busy_hint.clone();
        let handshake = self.handshake;
        async move {
            if !opcua_core::comms::url::is_opc_ua_binary_url(&url) {
                return Err(opcua_types::Error::new(
                    StatusCode::BadTcpEndpointUrlInvalid,
                    format!("not an opc.tcp URL: {url}"),
                ));
            }
            let connector =
                opcua_client::transport::StreamConnector::new(crate::tcp::connect, url.clone());
            let (tx, rx) = mpsc::channel(RELAY_DEPTH);
            tokio::spawn(relay_outgoing(outgoing_recv, tx, hint));
            // A path that accepts and never answers the Hello (a stalled
            // network, a hung server) fails the attempt instead of holding
            // it: the next one goes when the path works again.
            match tokio::time::timeout(handshake, connector.connect(channel, rx, config)).await {
                Ok(r) => r,
                Err(_) => Err(opcua_types::Error::new(
                    StatusCode::BadTimeout,
                    format!("no answer to Hello from {url} within {handshake:?}"),
                )),
            }
        }
    }

    fn default_endpoint(&self) -> EndpointDescription {
        EndpointDescription::from(self.get().as_str())
    }
}

/// Requests queued between the session and the transport's relay.
const RELAY_DEPTH: usize = 64;

/// Passes the session's requests on to the transport. The answers to
/// session-establishment requests are looked at on their way back: a
/// BadServerTooBusy ServiceFault's RetryAfterMs hint is kept in `hint`.
/// Ends when either side closes (the transport lives for one connection).
async fn relay_outgoing(
    mut from: opcua_client::transport::RequestRecv,
    to: mpsc::Sender<opcua_client::transport::OutgoingMessage>,
    hint: Arc<Mutex<Option<Duration>>>,
) {
    while let Some(mut msg) = from.recv().await {
        let establishing = matches!(
            msg.request,
            opcua_core::RequestMessage::OpenSecureChannel(_)
                | opcua_core::RequestMessage::CreateSession(_)
                | opcua_core::RequestMessage::ActivateSession(_)
        );
        if establishing {
            if let Some(caller) = msg.callback.take() {
                let (answer, answered) = tokio::sync::oneshot::channel();
                msg.callback = Some(answer);
                let hint = hint.clone();
                tokio::spawn(async move {
                    let Ok(result) = answered.await else { return };
                    if let Ok(opcua_core::ResponseMessage::ServiceFault(f)) = &result {
                        let header = &f.response_header;
                        if header.service_result == StatusCode::BadServerTooBusy {
                            if let Some(ms) = retry_after_from_header(&header.additional_header) {
                                *hint.lock() = Some(ms);
                            }
                        }
                    }
                    let _ = caller.send(result);
                });
            }
        }
        if to.send(msg).await.is_err() {
            return;
        }
    }
}

/// The connection source handing the link's [`PathSwitch`] to the session.
struct PathSource(PathSwitch);

impl opcua_client::ConnectionSource for PathSource {
    type Builder = PathSwitch;

    fn get_connector(
        &self,
        _endpoint: &EndpointDescription,
    ) -> Result<PathSwitch, opcua_types::Error> {
        Ok(self.0.clone())
    }
}

/// One live session to one server of the set.
pub struct LinkSession {
    /// Index of the server in the set.
    pub server: usize,
    path: PathSwitch,
    session: Arc<Session>,
    /// Node id translation for this session.
    pub map: Arc<SessionMap>,
    /// Effective operation limits.
    pub limits: OperationLimits,
    /// RedundancySupport the server announced, if readable.
    pub redundancy_support: Option<i32>,
    /// ServerUriArray the server announced (empty if none).
    pub server_uris: Vec<String>,
    request_timeout: Duration,
    subs: tokio::sync::Mutex<LinkSubs>,
    /// The data subscriptions' deliveries (Republish after a reconnect).
    deliveries: Deliveries,
    /// Asks the link's repair task to republish a subscription's gap.
    repair: mpsc::UnboundedSender<u32>,
    /// The connection is lost and the session is being re-activated:
    /// northbound calls wait (see [`FieldConnection::link`]).
    interrupted: Arc<std::sync::atomic::AtomicBool>,
    /// Connection losses the session has seen (a retried call waits for the
    /// re-activation that follows a loss it saw).
    losses: Arc<std::sync::atomic::AtomicU64>,
    lost: CancellationToken,
    generation: u64,
    /// Merges concurrent northbound Reads into southbound ones.
    pub(crate) reads: crate::coalesce::ReadCoalescer,
    /// Publish answers (keep-alives included) the event subscription has
    /// delivered: a refresh window closes once two came after the
    /// southbound ConditionRefresh returned (see [`wait_refresh_end`]).
    event_publishes: Arc<std::sync::atomic::AtomicU64>,
    /// The active server of the connection's latest reconcile request for
    /// this link. Reconcile tasks may start in any order; each reads this
    /// once it holds the link's items, so the last request wins.
    reconcile_active: Mutex<Option<usize>>,
}

impl std::fmt::Debug for LinkSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkSession")
            .field("server", &self.server)
            .field("url", &self.path.get())
            .finish_non_exhaustive()
    }
}

impl LinkSession {
    /// The async-opcua session (for the proxied services).
    pub(crate) fn session(&self) -> &Session {
        &self.session
    }

    /// Timeout for a southbound request: the session's, capped by the
    /// northbound deadline.
    pub(crate) fn timeout_until(&self, deadline: Instant) -> Duration {
        deadline
            .saturating_duration_since(Instant::now())
            .min(self.request_timeout)
            .max(Duration::from_millis(1))
    }

    /// The URL (network path) the session currently uses.
    pub fn url(&self) -> String {
        self.path.get()
    }

    /// Moves the session to the next path: closes the secure channel (not
    /// the session); the link then re-activates the session over the next
    /// path. Used when a hot-and-mirrored server goes into Maintenance.
    async fn move_path(&self) {
        self.session.channel().close_channel().await;
    }

    /// True once the connection behind this session is gone.
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// Connection losses this session has seen so far; read before a call
    /// that may be retried after a reconnect (see
    /// [`FieldConnection::link_after`]).
    pub fn losses(&self) -> u64 {
        self.losses.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// True while calls cannot go through it: lost, or its connection is
    /// down and the session is being re-activated.
    fn unavailable(&self) -> bool {
        self.is_lost() || self.interrupted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

struct Inner {
    settings: FieldSettings,
    setup: ClientSetup,
    mount_folder: NodeId,
    namespaces: Arc<Mutex<NamespaceTable>>,
    on_namespaces: NamespaceHook,
    status: watch::Sender<FieldStatus>,
    active: watch::Sender<Option<Arc<LinkSession>>>,
    items: Mutex<ItemTable>,
    /// Shared event items and the events on their way north.
    events: Mutex<EventTable>,
    /// Held by the condition refresh in progress: one at a time per
    /// connection (field servers refuse overlapping ones).
    refreshing: tokio::sync::Mutex<()>,
    /// (server, generation) of the last session the connection refreshed
    /// the conditions on by itself (see [`auto_refresh`]).
    refreshed_link: Mutex<Option<(usize, u64)>>,
    items_changed: Notify,
    cancel: CancellationToken,
    /// EURanges of field nodes, for percent deadband items.
    eu_ranges: Mutex<HashMap<NodeId, (f64, f64)>>,
    /// Recent events, newest last, at most [`HISTORY_LEN`].
    history: Mutex<std::collections::VecDeque<HistoryEvent>>,
    /// Attempts and recovery durations.
    stats: Mutex<ReconnectStats>,
    /// Reads merged and southbound Reads sent, over every session.
    read_stats: Arc<crate::coalesce::ReadStats>,
    /// Northbound requests that waited for the connection without an
    /// execution slot.
    requests_parked: std::sync::atomic::AtomicU64,
    /// Idempotent northbound requests retried once after a reconnect.
    requests_retried: std::sync::atomic::AtomicU64,
    /// An operator asked to leave the active server: the flag says so (it
    /// survives a wake-up lost to another select branch), the Notify wakes
    /// the task.
    force_requested: std::sync::atomic::AtomicBool,
    /// An operator's Reconnect now, not yet handed to the machine (the
    /// `force` wake-up also serves it).
    reconnect_requested: std::sync::atomic::AtomicBool,
    force: Notify,
}

impl Inner {
    /// Notifications of a link's subscription were lost for good (`missing`
    /// messages): the items they carried get a gap marker (see
    /// [`Inner::gap`]).
    fn notification_gap(
        &self,
        server: usize,
        missing: u32,
        seen: &str,
        handles: impl Iterator<Item = u32>,
    ) {
        tracing::warn!(field = %self.settings.name, server, missing, "field notifications lost");
        self.gap(
            server,
            handles,
            format!("{missing} notification message(s) lost ({seen})"),
        );
    }

    /// The field server dropped values of the items `handles` from their
    /// full queues (it set the Overflow bit), e.g. during a blip longer than
    /// its queues cover: a gap marker before the value that carries the bit.
    fn queue_overflow(&self, server: usize, handles: &[u32]) {
        tracing::warn!(field = %self.settings.name, server, items = handles.len(), "field server queue overflow");
        self.gap(
            server,
            handles.iter().copied(),
            format!(
                "the field server's queue overflowed for {} item(s): values were dropped there (its queues are shorter than the outage)",
                handles.len()
            ),
        );
    }

    /// A gap that cannot be recovered: the items `handles` get one value
    /// with UncertainNoCommunicationLastUsableValue (their last value), and
    /// the count and the history say `what` was lost.
    fn gap(&self, server: usize, handles: impl Iterator<Item = u32>, what: String) {
        self.items.lock().mark(
            handles,
            StatusCode::UncertainNoCommunicationLastUsableValue,
            DateTime::now(),
        );
        self.status.send_modify(|st| st.notification_gaps += 1);
        self.record(
            Some(server),
            "gap",
            format!("{what}; the items show UncertainNoCommunicationLastUsableValue once"),
        );
    }

    fn record(&self, server: Option<usize>, kind: &'static str, detail: impl Into<String>) {
        self.push_history(server, kind, detail.into(), None);
    }

    /// Records a failed attempt or a lost session in the history, and as
    /// the status's [`FieldStatus::last_failure`].
    fn record_failure(
        &self,
        server: Option<usize>,
        kind: &'static str,
        detail: impl Into<String>,
        failure: FieldError,
    ) {
        self.status
            .send_modify(|st| st.last_failure = Some(failure.clone()));
        self.push_history(server, kind, detail.into(), Some(failure));
    }

    fn push_history(
        &self,
        server: Option<usize>,
        kind: &'static str,
        detail: String,
        failure: Option<FieldError>,
    ) {
        let mut h = self.history.lock();
        if h.len() >= HISTORY_LEN {
            h.pop_front();
        }
        h.push_back(HistoryEvent {
            at: std::time::SystemTime::now(),
            server,
            kind,
            detail,
            failure,
        });
    }
}

/// [`FieldStatus::last_error_detail`] of an error that ended a session
/// that was up (rather than failing an attempt to make one).
pub const LOST: &str = "connection lost";

/// Most entries kept in a connection's history.
pub const HISTORY_LEN: usize = 100;

/// Upper bounds (seconds) of the reconnect-duration histogram buckets.
pub const RECONNECT_BUCKETS: [f64; 9] = [0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0];

/// One event in a field connection's history (shown by the console).
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryEvent {
    /// When it happened.
    pub at: std::time::SystemTime,
    /// Which server of the set (index into the configured servers).
    pub server: Option<usize>,
    /// `up`, `failed`, `lost`, `moved`, `failover`, `failover_requested`,
    /// `failover_unavailable`, `closed`, `gave_up`, `new_cycle`,
    /// `reconnect_requested`, `connection_lost`, `gap`, `items_spread` or
    /// `short_queues`.
    pub kind: &'static str,
    /// The URL, the status code, or who asked.
    pub detail: String,
    /// For a failed attempt or a lost session: what failed, for the console
    /// to explain.
    pub failure: Option<FieldError>,
}

/// An error toward a field server as the gateway saw it: what the console
/// explains in plain words (with the status code for the specialist).
/// Made when a connect attempt fails, a session is lost, or a probe (Test
/// connection) fails a step.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// The OPC UA status the stack, the field server or the gateway's checks
    /// gave; `None` when the gateway found the problem itself and
    /// [`Self::detail`] says it in plain words.
    pub status: Option<StatusCode>,
    /// What was said about it: the stack's message (with the operating
    /// system's, e.g. "Connection refused"), [`LOST`] for a session that
    /// was up, or the gateway's own sentence.
    pub detail: String,
    /// The URL it concerns: the path an attempt started with, the one a
    /// lost session used, or the one probed.
    pub url: String,
}

impl FieldError {
    /// The failure of a step toward `url` with `status` and what was said.
    fn new(status: StatusCode, detail: impl Into<String>, url: &str) -> FieldError {
        FieldError {
            status: Some(status),
            detail: detail.into(),
            url: url.to_string(),
        }
    }
}

/// Reconnect attempts and how long recoveries took.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReconnectStats {
    /// Connect attempts that brought a session up.
    pub attempts_ok: u64,
    /// Connect attempts that failed.
    pub attempts_failed: u64,
    /// Recoveries (session lost, then up again) per bucket of
    /// [`RECONNECT_BUCKETS`] (not cumulative), plus one for longer ones.
    pub duration_buckets: [u64; RECONNECT_BUCKETS.len() + 1],
    /// Sum of the recovery durations, seconds.
    pub duration_sum: f64,
}

impl ReconnectStats {
    fn observe(&mut self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = RECONNECT_BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(RECONNECT_BUCKETS.len());
        self.duration_buckets[i] += 1;
        self.duration_sum += secs;
    }
}

/// What probing one URL of a field server found.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    /// Index of the server in the configured set.
    pub server: usize,
    /// The URL probed.
    pub url: String,
    /// The endpoints it offers (`policy/mode`), or why it could not be asked.
    pub result: Result<Vec<String>, FieldError>,
    /// Whether an endpoint matches the configured security policy and mode.
    pub matches_config: bool,
    /// For a secured connection: whether the server's certificate is
    /// trusted (an unknown one is now on the rejected list).
    pub certificate: Option<Result<(), FieldError>>,
    /// The server's certificate (DER) when it is not trusted, for the
    /// operator to look at and trust.
    pub untrusted_der: Option<Vec<u8>>,
    /// Whether a session with the configured identity was accepted (and
    /// closed again), or why not; `None` when no login was tried (no
    /// endpoint with the configured security, or an untrusted certificate).
    pub login: Option<Result<(), FieldError>>,
}

/// A managed field connection (see the module docs). Created with
/// [`FieldConnection::start`] by the gateway at start-up, one per enabled
/// `[[field_servers]]` entry.
pub struct FieldConnection {
    inner: Arc<Inner>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl FieldConnection {
    /// Starts the connection's driver task on the current tokio runtime
    /// (when `enabled`; a disabled connection stays `Disconnected`).
    /// Returns at once; the first connect runs in the background.
    pub fn start(
        settings: FieldSettings,
        setup: ClientSetup,
        mount_folder: NodeId,
        namespaces: Arc<Mutex<NamespaceTable>>,
        on_namespaces: NamespaceHook,
        enabled: bool,
    ) -> FieldConnection {
        let status = FieldStatus {
            state: if enabled {
                ConnState::Connecting
            } else {
                ConnState::Disconnected
            },
            servers: settings
                .servers
                .iter()
                .map(|urls| ServerView {
                    url: urls.first().cloned().unwrap_or_default(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let inner = Arc::new(Inner {
            settings,
            setup,
            mount_folder,
            namespaces,
            on_namespaces,
            status: watch::Sender::new(status),
            active: watch::Sender::new(None),
            items: Mutex::new(ItemTable::default()),
            events: Mutex::new(EventTable::default()),
            refreshing: tokio::sync::Mutex::new(()),
            refreshed_link: Mutex::new(None),
            items_changed: Notify::new(),
            cancel: CancellationToken::new(),
            eu_ranges: Mutex::new(HashMap::new()),
            history: Mutex::default(),
            stats: Mutex::default(),
            read_stats: Arc::default(),
            requests_parked: Default::default(),
            requests_retried: Default::default(),
            force_requested: std::sync::atomic::AtomicBool::new(false),
            reconnect_requested: std::sync::atomic::AtomicBool::new(false),
            force: Notify::new(),
        });
        let task = enabled.then(|| tokio::spawn(run(inner.clone())));
        FieldConnection {
            inner,
            task: Mutex::new(task),
        }
    }

    /// The mount name.
    pub fn name(&self) -> &str {
        &self.inner.settings.name
    }

    /// The gateway node standing for the field server's Objects folder.
    pub fn mount_folder(&self) -> &NodeId {
        &self.inner.mount_folder
    }

    /// A receiver of the connection's status.
    pub fn status(&self) -> watch::Receiver<FieldStatus> {
        self.inner.status.subscribe()
    }

    /// Recent events (connects, losses, failovers), oldest first.
    pub fn history(&self) -> Vec<HistoryEvent> {
        self.inner.history.lock().iter().cloned().collect()
    }

    /// Connect attempts and recovery durations so far.
    pub fn reconnect_stats(&self) -> ReconnectStats {
        self.inner.stats.lock().clone()
    }

    /// Asks the connection to leave its active server for the best other
    /// one of the set (an operator's maintenance step). The switch happens
    /// in the connection's task; the history says whether another server
    /// was available. Refused for a set of one server.
    pub fn force_failover(&self, actor: &str) -> Result<(), &'static str> {
        let s = &self.inner.settings;
        if let Some(why) = failover::forced_failover_refusal(s.handling, s.servers.len()) {
            return Err(why);
        }
        self.inner
            .record(None, "failover_requested", format!("by {actor}"));
        self.inner
            .force_requested
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.inner.force.notify_one();
        Ok(())
    }

    /// Starts a fresh reconnect cycle at once for every server of the set
    /// that waits for its next attempt or whose cycle ran out (the
    /// console's and REST's "Reconnect now"). Connected servers are not
    /// touched. Recorded in the history with `actor`.
    pub fn reconnect_now(&self, actor: &str) {
        self.inner
            .record(None, "reconnect_requested", format!("by {actor}"));
        self.inner
            .reconnect_requested
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.inner.force.notify_one();
    }

    /// Asks every configured URL for its endpoints (bounded by `timeout`
    /// each), and checks the server certificate against the trust list as
    /// a connect would: the console's "test connection". Does not touch
    /// the running sessions.
    pub async fn probe(&self, timeout: Duration) -> Vec<Probe> {
        let s = &self.inner.settings;
        let mut out = Vec::new();
        for (server, urls) in s.servers.iter().enumerate() {
            for url in urls {
                out.push(probe_url(&self.inner, server, url, timeout).await);
            }
        }
        out
    }

    /// Probes the URLs of `settings` like [`FieldConnection::probe`],
    /// without a running connection: the console's "Test connection" of a
    /// form not saved yet. Nothing is started and no session is made.
    pub async fn probe_settings(
        settings: FieldSettings,
        setup: ClientSetup,
        timeout: Duration,
    ) -> Vec<Probe> {
        let name = settings.name.clone();
        let idle = FieldConnection::start(
            settings,
            setup,
            NodeId::null(),
            Arc::new(Mutex::new(NamespaceTable::new(u16::MAX))),
            Arc::new(|_: &NamespaceTable| {}),
            false,
        );
        tracing::debug!(field = %name, "probing unsaved field settings");
        idle.probe(timeout).await
    }

    /// The active session when calls can go through it now, without
    /// waiting (the proxied services' fast path).
    pub fn link_now(&self) -> Option<Arc<LinkSession>> {
        self.inner
            .active
            .borrow()
            .as_ref()
            .filter(|l| !l.unavailable())
            .cloned()
    }

    /// The active session, waiting for one until `deadline`. While the
    /// connection is (re)connecting northbound calls wait here; past the
    /// deadline, or at once while closed or given up, they get
    /// `BadServerNotConnected`.
    pub async fn link(&self, deadline: Instant) -> Result<Arc<LinkSession>, StatusCode> {
        // The common case: connected. No timer, no receiver.
        if let Some(l) = self.link_now() {
            return Ok(l);
        }
        self.link_where(deadline, |_| true).await
    }

    /// A session to retry a call on that failed on `failed` because its
    /// connection was lost (`losses` is what [`LinkSession::losses`] said
    /// before the call): the same session once it has been re-activated on
    /// a new channel, or the link's next session; waits until `deadline`
    /// like [`FieldConnection::link`]. Called by the proxied services that
    /// retry an idempotent request once after a reconnect.
    pub async fn link_after(
        &self,
        failed: &Arc<LinkSession>,
        losses: u64,
        deadline: Instant,
    ) -> Result<Arc<LinkSession>, StatusCode> {
        self.link_where(deadline, |l| !Arc::ptr_eq(l, failed) || l.losses() > losses)
            .await
    }

    /// Waits until `deadline` for an available session that `accept` takes.
    async fn link_where(
        &self,
        deadline: Instant,
        accept: impl Fn(&Arc<LinkSession>) -> bool,
    ) -> Result<Arc<LinkSession>, StatusCode> {
        let mut rx = self.inner.active.subscribe();
        let wait = async {
            loop {
                if let Some(l) = rx.borrow_and_update().clone() {
                    if !l.unavailable() && accept(&l) {
                        return Ok(l);
                    }
                }
                if matches!(
                    self.inner.status.borrow().state,
                    ConnState::Closed
                        | ConnState::Closing
                        | ConnState::Disconnected
                        | ConnState::GaveUp
                ) {
                    return Err(StatusCode::BadServerNotConnected);
                }
                let closed = self.inner.status.subscribe();
                tokio::select! {
                    r = rx.changed() => if r.is_err() { return Err(StatusCode::BadServerNotConnected) },
                    _ = wait_closed(closed) => return Err(StatusCode::BadServerNotConnected),
                }
            }
        };
        match tokio::time::timeout_at(deadline.into(), wait).await {
            Ok(r) => r,
            Err(_) => Err(StatusCode::BadServerNotConnected),
        }
    }

    /// Counts a northbound request that gave its execution slot back to
    /// wait for this connection (`retried`: one retried after a reconnect
    /// instead); the metrics' source, see [`FieldConnection::request_stats`].
    pub fn count_request(&self, retried: bool) {
        let c = if retried {
            &self.inner.requests_retried
        } else {
            &self.inner.requests_parked
        };
        c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// (Northbound requests that waited for this connection without an
    /// execution slot, requests retried once after a reconnect) since start.
    pub fn request_stats(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.inner.requests_parked.load(Relaxed),
            self.inner.requests_retried.load(Relaxed),
        )
    }

    /// Takes over the shared items of `old`, the connection this one
    /// replaces when its settings changed while running (see
    /// [`ItemTable::carry_from`]); the southbound items are created on this
    /// connection's link as soon as it is up. Called by the gateway right
    /// after [`FieldConnection::start`].
    ///
    /// A disabled connection delivers nothing: its items get one value
    /// with `BadOutOfService` so that northbound clients see it.
    pub fn carry_items_from(&self, old: &FieldConnection) {
        let disabled = self.task.lock().is_none();
        let taken = {
            let from = old.inner.items.lock();
            let mut to = self.inner.items.lock();
            to.carry_from(&from);
            if disabled {
                to.mark_all(StatusCode::BadOutOfService, DateTime::now());
            }
            !to.is_empty()
        };
        if taken {
            self.inner.items_changed.notify_one();
        }
    }

    /// Replaces the demand for shared items (key → number of northbound
    /// items); the connection creates and deletes southbound items to match.
    pub fn set_demand(&self, demand: HashMap<ItemKey, usize>) {
        let changed = self.inner.items.lock().set_demand(demand);
        if changed {
            self.inner.items_changed.notify_one();
        }
    }

    /// Replaces the set of shared event items northbound event items need
    /// (see [`EventTable::set_demand`]); the connection creates and deletes
    /// southbound event items to match.
    pub fn set_event_demand(&self, keys: Vec<EventKey>) {
        let changed = self.inner.events.lock().set_demand(keys);
        if changed {
            self.inner.items_changed.notify_one();
        }
    }

    /// The events received since the last call, for the northbound items of
    /// their key, and the refresh markers among them. Called by the gateway
    /// before its subscriptions publish.
    pub fn take_events(&self) -> Vec<Taken> {
        self.inner.events.lock().take()
    }

    /// Refreshes the conditions of the shared event item of `key` for the
    /// gateway's refresh request `token` (a client's ConditionRefresh or
    /// ConditionRefresh2): calls ConditionRefresh2 southbound on the item
    /// (ConditionRefresh on its subscription when the field server lacks
    /// it) and tags the condition events that come back with the request.
    /// Waits for the active session and for the item to exist (a client
    /// may refresh right after creating its item), within the connection's
    /// connect timeout. Ends with [`Taken::RefreshEnd`] in every case,
    /// which the gateway counts. Refreshes of one connection run one at a
    /// time.
    pub async fn refresh(&self, key: &EventKey, token: u64) {
        let deadline = Instant::now() + connect_timeout(&self.inner.settings);
        let to = Audience::Request(token);
        let link = self.link(deadline).await.ok();
        refresh_key(&self.inner, link.as_ref(), key, to, deadline).await;
    }

    /// (Shared event items wanted, events dropped as duplicates, events
    /// dropped because they were not taken in time.)
    pub fn event_stats(&self) -> (usize, u64, u64) {
        let e = self.inner.events.lock();
        (e.len(), e.duplicates_suppressed(), e.dropped())
    }

    /// The latest value of a shared item.
    pub fn value(&self, key: &ItemKey) -> DataValue {
        self.inner.items.lock().value(key)
    }

    /// Every value of a shared item since `cursor` (see
    /// [`ItemTable::values_since`]); called by northbound monitored items
    /// at their sampling instants.
    pub fn values_since(&self, key: &ItemKey, cursor: &mut Option<u64>) -> Vec<DataValue> {
        self.inner.items.lock().values_since(key, cursor)
    }

    /// The freshest shared value for a node (see [`ItemTable::latest`]).
    pub fn latest(&self, node: &NodeId, attribute: u32, index_range: &str) -> Option<DataValue> {
        self.inner.items.lock().latest(node, attribute, index_range)
    }

    /// The EURange (low, high) of a field node, as fetched by
    /// [`FieldConnection::set_eu_range`] before a percent deadband item on it
    /// is created.
    pub fn eu_range(&self, node: &NodeId) -> Option<(f64, f64)> {
        self.inner.eu_ranges.lock().get(node).copied()
    }

    /// Remembers the EURange of a field node (bounded: the oldest half is
    /// dropped beyond 10,000 nodes).
    pub fn set_eu_range(&self, node: NodeId, range: (f64, f64)) {
        let mut m = self.inner.eu_ranges.lock();
        if m.len() >= 10_000 {
            let drop: Vec<NodeId> = m.keys().take(5_000).cloned().collect();
            for k in drop {
                m.remove(&k);
            }
        }
        m.insert(node, range);
    }

    /// (Reads asked of the Read merger, southbound Reads it sent) since the
    /// connection started, over all its sessions: the metrics' source.
    pub fn read_stats(&self) -> (u64, u64) {
        self.inner.read_stats.get()
    }

    /// Number of shared (southbound) items wanted.
    pub fn shared_item_count(&self) -> usize {
        self.inner.items.lock().len()
    }

    /// Duplicates dropped in hot-merge mode.
    pub fn duplicates_suppressed(&self) -> u64 {
        self.inner.items.lock().duplicates_suppressed()
    }

    /// Closes the connection: cancels any attempt in flight, closes the
    /// sessions, and returns within `timeout` (`BadTimeout` if the close did
    /// not settle in time; the sessions are then dropped).
    pub async fn close(&self, timeout: Duration) -> StatusCode {
        self.inner
            .status
            .send_modify(|s| s.state = ConnState::Closing);
        self.inner.cancel.cancel();
        let task = self.task.lock().take();
        let status = match task {
            Some(t) => match tokio::time::timeout(timeout, t).await {
                Ok(_) => StatusCode::Good,
                Err(_) => StatusCode::BadTimeout,
            },
            None => StatusCode::Good,
        };
        self.inner.active.send_replace(None);
        self.inner
            .status
            .send_modify(|s| s.state = ConnState::Closed);
        status
    }
}

impl Drop for FieldConnection {
    fn drop(&mut self) {
        self.inner.cancel.cancel();
        if let Some(t) = self.task.lock().take() {
            t.abort();
        }
    }
}

/// Returns once the connection is closing, closed or has given up (no
/// session will come for a waiting call).
async fn wait_closed(mut rx: watch::Receiver<FieldStatus>) {
    loop {
        if matches!(
            rx.borrow_and_update().state,
            ConnState::Closed | ConnState::Closing | ConnState::GaveUp
        ) {
            return;
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// The failover machine of one connection, over its live sessions.
type Machine = Failover<Arc<LinkSession>>;

/// What the connect and event-loop tasks and the status subscriptions
/// tell the machine.
type LinkEvent = Event<Arc<LinkSession>>;

/// A uniform sample in [-1, 1], the jitter of a reconnect delay.
fn jitter() -> f64 {
    rand::random::<f64>() * 2.0 - 1.0
}

/// Most events taken in before the machine decides.
const EVENT_BATCH: usize = 64;

/// The current time, read once for one turn of the driver.
fn clock() -> Now {
    Now {
        mono: Instant::now(),
        wall: DateTime::now(),
    }
}

/// The bound of one connect attempt (GetEndpoints, OpenSecureChannel,
/// CreateSession, ActivateSession and the first reads); it also bounds how
/// long the first selection of a set waits for its servers.
fn connect_timeout(s: &FieldSettings) -> Duration {
    s.request_timeout.saturating_mul(3)
}

/// The driver task of one connection: turns what the sessions report into
/// events for its [`Failover`] machine, carries out the actions it returns
/// and publishes the status, until the connection is closed.
async fn run(inner: Arc<Inner>) {
    let s = &inner.settings;
    let (tx, mut rx) = mpsc::unbounded_channel::<LinkEvent>();
    let mut machine: Machine = Failover::new(
        failover::Settings {
            handling: s.handling,
            servers: s.servers.clone(),
            reconnect: s.reconnect.clone(),
            connect_timeout: connect_timeout(s),
        },
        clock(),
    );
    // The connect attempt in flight per link, aborted on close.
    let mut attempts: Vec<Option<tokio::task::JoinHandle<()>>> =
        machine.links().iter().map(|_| None).collect();
    let mut items_rev_seen = (u64::MAX, u64::MAX);

    loop {
        let now = clock();
        // The flag survives a wake-up lost to another select branch.
        if inner
            .force_requested
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            machine.handle(Event::ForceFailover, now);
        }
        if inner
            .reconnect_requested
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            machine.handle(Event::ReconnectNow, now);
        }
        let rev = (
            inner.items.lock().revision(),
            inner.events.lock().revision(),
        );
        if rev != items_rev_seen {
            items_rev_seen = rev;
            machine.handle(Event::ItemsChanged, now);
        }
        for action in machine.poll(now) {
            perform(&inner, action, &tx, &mut attempts, now);
        }
        publish_status(&inner, &machine, now);

        // Wait for something to happen.
        let wake = machine.next_deadline();
        let sleep = async {
            match wake {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = inner.cancel.cancelled() => break,
            ev = rx.recv() => {
                let Some(ev) = ev else { break };
                let now = clock();
                machine.handle(ev, now);
                // Decide on everything already known (one publish brings a
                // server's State and ServiceLevel as separate events).
                for _ in 0..EVENT_BATCH {
                    let Ok(ev) = rx.try_recv() else { break };
                        machine.handle(ev, now);
                }
            }
            _ = inner.items_changed.notified() => {}
            _ = inner.force.notified() => {}
            _ = sleep => {}
        }
    }

    // Close: attempts and links see the cancel, and close their sessions.
    inner.active.send_replace(None);
    let mut closing = Vec::new();
    for link in machine.links() {
        if let Phase::Up(ls) = link.phase() {
            closing.push(ls.clone());
        }
    }
    // Each link's own task closes its session on the cancel (it polls the
    // session's event loop, which CloseSession needs), as does an attempt
    // that has created one; an attempt without a session ends at once.
    // Wait for all of them together, each bounded by the request timeout;
    // an attempt still running then is aborted.
    let bound = s.request_timeout;
    let links = futures_util::future::join_all(closing.iter().map(|ls| async {
        let _ = tokio::time::timeout(bound, ls.lost.cancelled()).await;
    }));
    let attempts =
        futures_util::future::join_all(attempts.into_iter().flatten().map(|mut h| async move {
            if tokio::time::timeout(bound, &mut h).await.is_err() {
                h.abort();
            }
        }));
    futures_util::future::join(links, attempts).await;
}

/// Carries out one action of the machine. A connect attempt's task is
/// kept in `attempts` (by link) so that closing can abort it.
fn perform(
    inner: &Arc<Inner>,
    action: Action<Arc<LinkSession>>,
    tx: &mpsc::UnboundedSender<LinkEvent>,
    attempts: &mut [Option<tokio::task::JoinHandle<()>>],
    now: Now,
) {
    let s = &inner.settings;
    match action {
        Action::Connect {
            link,
            paths,
            first,
            generation,
        } => {
            let h = start_connect(inner, link, paths, first, generation, tx);
            if let Some(slot) = attempts.get_mut(link) {
                *slot = Some(h);
            }
        }
        Action::Close(ls) => {
            tokio::spawn(async move { close_link(&ls).await });
        }
        Action::Activate(ls) => {
            let fresh = ls.clone().filter(|l| {
                let mut last = inner.refreshed_link.lock();
                let new = Some((l.server, l.generation));
                std::mem::replace(&mut *last, new) != new
            });
            inner.active.send_replace(ls);
            if let Some(ls) = fresh {
                tokio::spawn(auto_refresh(inner.clone(), ls));
            }
        }
        Action::MarkItemsBad => {
            let shared = {
                let mut items = inner.items.lock();
                items.mark_all(StatusCode::BadNoCommunication, now.wall);
                items.len()
            };
            if shared > 0 {
                // No server delivers: what changes until one does is lost
                // (a new session starts from current values). Said once.
                inner.status.send_modify(|st| st.notification_gaps += 1);
                inner.record(
                    None,
                    "gap",
                    format!("no server delivers; {shared} shared item(s) show BadNoCommunication until one does"),
                );
            }
        }
        Action::Reconcile { session, active } => spawn_reconcile(inner, session, active),
        Action::MovePath(ls) => {
            tracing::info!(field = %s.name, url = %ls.url(), "mirrored server not healthy; moving the session");
            tokio::spawn(async move { ls.move_path().await });
        }
        Action::RefreshStatus(ls) => {
            tokio::spawn(refresh_status(inner.clone(), ls, tx.clone()));
        }
        Action::Note(note) => record_note(inner, note),
    }
}

/// Shows what the machine noted in the counters, the history and the log.
fn record_note(inner: &Inner, note: Note<Arc<LinkSession>>) {
    let s = &inner.settings;
    match note {
        Note::Up {
            link,
            session,
            reconnect,
            recovered_after,
        } => {
            if reconnect {
                inner.status.send_modify(|st| st.reconnect_count += 1);
            }
            {
                let mut stats = inner.stats.lock();
                stats.attempts_ok += 1;
                if let Some(d) = recovered_after {
                    stats.observe(d);
                }
            }
            inner.record(Some(link), "up", session.url());
            tracing::info!(field = %s.name, server = link, url = %session.url(), "field session up");
        }
        Note::Failed {
            link,
            url,
            failure,
            detail,
        } => {
            inner.status.send_modify(|st| {
                st.failed_attempts += 1;
                st.last_error = Some(failure.status);
            });
            inner.stats.lock().attempts_failed += 1;
            inner.record_failure(
                Some(link),
                "failed",
                failure.status.to_string(),
                FieldError {
                    status: Some(failure.status),
                    detail: detail.clone(),
                    url,
                },
            );
            tracing::warn!(field = %s.name, server = link, status = %failure.status, %detail, "field connect failed");
        }
        Note::Lost { link, url, status } => {
            tracing::warn!(field = %s.name, server = link, %status, "field session lost");
            inner.status.send_modify(|st| st.last_error = Some(status));
            inner.record_failure(
                Some(link),
                "lost",
                status.to_string(),
                FieldError {
                    status: Some(status),
                    detail: LOST.to_string(),
                    url,
                },
            );
        }
        Note::Moved {
            link,
            session,
            transferred,
        } => {
            inner.status.send_modify(|st| st.reconnect_count += 1);
            if transferred {
                // The server had ended the session during the outage; its
                // subscriptions outlived it and moved to a new one.
                let url = session.as_ref().map(|ls| ls.url()).unwrap_or_default();
                inner.record(
                    Some(link),
                    "transferred",
                    format!("session ended by the field server; subscriptions moved to a new session on {url}"),
                );
                tracing::info!(field = %s.name, server = link, %url, "field subscriptions transferred to a new session");
            } else if let Some(ls) = session {
                let one_path = s.handling != Handling::HotAndMirrored
                    && s.servers.get(link).is_some_and(|p| p.len() < 2);
                if one_path {
                    // Same server, same path: the session survived a blip.
                    inner.record(Some(link), "reactivated", ls.url());
                    tracing::info!(field = %s.name, server = link, url = %ls.url(), "field session re-activated after a lost connection");
                } else {
                    inner.record(Some(link), "moved", ls.url());
                    tracing::info!(field = %s.name, server = link, url = %ls.url(), "field session moved to another path");
                }
            }
        }
        Note::Failover { from, to } => {
            inner.status.send_modify(|st| st.failover_count += 1);
            tracing::info!(field = %s.name, from, to, "field failover");
            inner.record(Some(to), "failover", format!("from server {}", from + 1));
        }
        Note::ForcedToNext { to } => {
            inner.record(Some(to), "failover", "cold: connecting the next server");
        }
        Note::NextCandidate { from, to } => {
            tracing::info!(field = %s.name, from, to, "cold failover candidate");
        }
        Note::FailoverUnavailable { active } => inner.record(
            active,
            "failover_unavailable",
            "no other server of the set is connected",
        ),
        Note::GaveUp {
            link,
            retry_in,
            status,
        } => {
            inner.status.send_modify(|st| st.gave_up_count += 1);
            let retry = humantime::format_duration(retry_in);
            tracing::warn!(field = %s.name, server = link, %status, %retry, "reconnect cycle ran out of retries or time; a new cycle starts later");
            inner.record(
                Some(link),
                "gave_up",
                format!("reconnect cycle ran out (last error {status}); next cycle in {retry}"),
            );
        }
        Note::NewCycle { link, requested } => {
            tracing::info!(field = %s.name, server = link, requested, "new reconnect cycle");
            inner.record(
                Some(link),
                "new_cycle",
                if requested {
                    "reconnect now (operator)"
                } else {
                    "after max_delay"
                },
            );
        }
    }
}

/// Publishes the machine's state, the active server and the per-server
/// view on the status channel (after every turn of the driver).
fn publish_status(inner: &Inner, machine: &Machine, now: Now) {
    let peers = machine.peers();
    let links = machine.links();
    let active = machine.active();
    let next_cycle_at = (machine.state() == ConnState::GaveUp)
        .then(|| {
            links
                .iter()
                .filter_map(|l| match l.phase() {
                    Phase::Exhausted(at) => Some(*at),
                    _ => None,
                })
                .min()
        })
        .flatten()
        .map(|at| {
            let ms = at.saturating_duration_since(now.mono).as_millis();
            let ticks = i64::try_from(ms).unwrap_or(i64::MAX / 20_000) * 10_000;
            DateTime::from(now.wall.ticks().saturating_add(ticks))
        });
    let outage = machine.outage();
    inner.status.send_modify(|st| {
        st.state = machine.state();
        st.failing = machine.failing();
        st.failed_since_connected = outage.map_or(0, |o| o.failed_attempts);
        st.failing_since = outage.map(|o| o.since);
        st.next_cycle_at = next_cycle_at;
        st.active_server = active;
        st.active_endpoint = active
            .and_then(|a| links.get(a)?.session())
            .map(|ls| ls.url());
        st.service_level = active.and_then(|a| peers.get(a)?.service_level);
        for (i, l) in links.iter().enumerate() {
            if let Some(v) = st.servers.get_mut(i) {
                v.url = match l.session() {
                    Some(ls) => ls.url(),
                    None => l.next_path().to_string(),
                };
                v.reachable = l.session().is_some();
                if let Some(ls) = l.session() {
                    v.redundancy_support = ls.redundancy_support;
                    v.server_uris = ls.server_uris.clone();
                }
                v.service_level = peers.get(i).and_then(|p| p.service_level);
            }
        }
    });
}

/// Starts connect attempt `generation` of link `i` over `paths[first]`;
/// its result comes back as an event.
fn start_connect(
    inner: &Arc<Inner>,
    i: usize,
    paths: Vec<String>,
    first: usize,
    generation: u64,
    tx: &mpsc::UnboundedSender<LinkEvent>,
) -> tokio::task::JoinHandle<()> {
    let inner = inner.clone();
    let tx = tx.clone();
    tokio::spawn(async move {
        let budget = connect_timeout(&inner.settings);
        let r = tokio::time::timeout(
            budget,
            connect(&inner, i, &paths, first, generation, tx.clone()),
        )
        .await;
        let (failure, detail) = match r {
            Ok(Ok(session)) => {
                let _ = tx.send(Event::Up {
                    link: i,
                    generation,
                    session,
                });
                return;
            }
            Ok(Err(e)) => e,
            Err(_) => (
                Failure {
                    status: StatusCode::BadTimeout,
                    retry_after: None,
                },
                "connect attempt timed out".into(),
            ),
        };
        let _ = tx.send(Event::Failed {
            link: i,
            generation,
            failure,
            detail,
            jitter: jitter(),
        });
    })
}

fn fail(status: StatusCode, detail: impl Into<String>) -> (Failure, String) {
    let detail = detail.into();
    (
        Failure {
            status,
            retry_after: retry_after_from_reason(&detail),
        },
        detail,
    )
}

fn client_error(e: opcua_types::Error) -> (Failure, String) {
    let detail = format!("{e} {e:?}");
    fail(e.status(), detail)
}

/// One connect attempt to server `i` at `url`.
/// One connect attempt to link `i` over path `paths[first]`. The link can
/// later move its session to the other paths (see [`PathSwitch`]).
async fn connect(
    inner: &Arc<Inner>,
    i: usize,
    paths: &[String],
    first: usize,
    generation: u64,
    tx: mpsc::UnboundedSender<LinkEvent>,
) -> Result<Arc<LinkSession>, (Failure, String)> {
    let url = paths.get(first).map(String::as_str).unwrap_or_default();
    let s = &inner.settings;
    let su = &inner.setup;
    // `retry`: how often the library retries a failed connect by itself
    // (-1: until stopped).
    let client_with = |retry: i32| {
        base_client(su, url)
            .recreate_subscriptions(false)
            .request_timeout(s.request_timeout)
            .session_timeout(u32::try_from(s.session_timeout.as_millis()).unwrap_or(u32::MAX))
            .keep_alive_interval(s.keep_alive_interval)
            // The link counts failed keep-alives itself and then drops the
            // channel, keeping the session (the library would close it).
            .max_failed_keep_alive_count(0)
            .session_retry_limit(retry)
            .session_retry_initial(s.reconnect.initial_delay.min(Duration::from_secs(1)))
            .session_retry_max(s.reconnect.max_delay.min(Duration::from_secs(5)))
            .session_name(format!("uagate:{}", s.name))
            .client()
            .map_err(|e| fail(StatusCode::BadConfigurationError, e.join("; ")))
    };
    // Endpoint discovery is one attempt; the session's event loop retries
    // a re-activation after a lost connection until the link's window
    // (the session timeout, at most the reconnect budget) ends, while a
    // first connect's failure is reported and ends the attempt.
    let discovery = client_with(0)?;
    let client = client_with(-1)?;
    // Closing does not wait for a server that does not answer: no session
    // exists yet.
    let endpoints = tokio::select! {
        r = discovery.get_server_endpoints_from_url(url) => r.map_err(client_error)?,
        _ = inner.cancel.cancelled() => return Err(fail(StatusCode::BadShutdown, "closing")),
    };
    let mut endpoint: EndpointDescription = endpoints
        .into_iter()
        .find(|e| {
            e.security_policy_uri.as_ref() == s.security_policy_uri
                && e.security_mode == s.security_mode
        })
        .ok_or_else(|| {
            fail(
                StatusCode::BadSecurityPolicyRejected,
                "the field server offers no endpoint with the configured security policy and mode",
            )
        })?;
    // Field servers often announce a host name the gateway cannot resolve;
    // the configured URL is the one that works.
    endpoint.endpoint_url = url.into();
    if s.security_mode != MessageSecurityMode::None {
        let der = endpoint.server_certificate.as_ref().to_vec();
        if der.is_empty() {
            return Err(fail(
                StatusCode::BadCertificateInvalid,
                "no server certificate",
            ));
        }
        (su.trust)(der)
            .await
            .map_err(|st| fail(st, "field server certificate not trusted"))?;
    }
    let token =
        identity_token(&s.identity).map_err(|e| fail(StatusCode::BadIdentityTokenInvalid, e))?;
    let path = PathSwitch::new(s.request_timeout);
    path.set(url);
    let (session, event_loop) = client
        .session_builder()
        .with_connector(PathSource(path.clone()))
        .connect_to_endpoint_directly(endpoint)
        .map_err(client_error)?
        .user_identity_token(token)
        .build(client.certificate_store().clone())
        .map_err(client_error)?;
    let mut stream = Box::pin(event_loop.enter());
    // From here on a session may exist on the field server, and only the
    // link task below (which polls the session's event loop) can close it.
    // `orphaned` tells that task that this attempt was given up (its
    // connect budget ran out, or the connection closed and aborted it)
    // before it handed the link over: the task then closes the session
    // and ends, instead of keeping a session nobody uses (small PLCs allow
    // only a few).
    let orphaned = CancellationToken::new();
    let orphan_guard = orphaned.clone().drop_guard();
    // Who has the link: see [`Handover`].
    let handover = Arc::new(Handover::default());
    // What establishing the session came to, told by the link task.
    let (established_tx, established) =
        tokio::sync::oneshot::channel::<Result<(), (Failure, String)>>();
    let lost = CancellationToken::new();
    let deliveries: Deliveries = Arc::default();
    let (repair_tx, repair_rx) = mpsc::unbounded_channel();
    let interrupted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let losses = Arc::new(std::sync::atomic::AtomicU64::new(0));
    {
        // Keep polling the event loop. A lost connection keeps the session:
        // the client library re-activates it on a new channel (over the
        // next path when the link has one), retrying failed attempts within
        // the re-activation window (the session timeout, at most the
        // reconnect budget), and the notifications missed meanwhile are
        // asked back with Republish before publishing resumes. When that
        // fails or the server no longer knows the session, the link ends
        // and the machine reconnects under its policy (new session, items
        // re-created, the gap marked).
        let lost = lost.clone();
        let tx = tx.clone();
        let cancel = inner.cancel.clone();
        let paths = paths.to_vec();
        let path = path.clone();
        let mut current = first;
        let session_for_loop = session.clone();
        let timeout = s.request_timeout;
        let deliveries = deliveries.clone();
        let weak = Arc::downgrade(inner);
        // Most failed re-activation attempts (the policy's max_retries; 0:
        // only the window bounds them).
        let max_attempts = s.reconnect.max_retries;
        let (session_timeout, budget) = (s.session_timeout, s.reconnect.max_total_reconnect_time);
        let mut failed_keep_alives = 0u32;
        // Failed re-activation attempts since the connection was lost.
        let mut failed_reactivations = 0u32;
        // Until when the re-activation after a lost connection may take
        // (also bounds an attempt that hangs, e.g. a server that accepts
        // and never answers); past it the link is lost.
        let mut reactivating_until: Option<tokio::time::Instant> = None;
        // The TransferSubscriptions in progress after the server made the
        // session anew; answers how many subscriptions moved, or why not.
        let mut transfer: Option<tokio::sync::oneshot::Receiver<Result<usize, String>>> = None;
        let interrupted = interrupted.clone();
        let losses = losses.clone();
        let orphaned = orphaned.clone();
        let handover = handover.clone();
        tokio::spawn(async move {
            // Establishing the session: CreateSession and ActivateSession.
            let established = loop {
                tokio::select! {
                    // Given up or closing: close what may have been created.
                    _ = orphaned.cancelled() => break None,
                    _ = cancel.cancelled() => break None,
                    ev = stream.next() => match ev {
                        Some(Ok(SessionPollResult::Reconnected(_))) => break Some(Ok(())),
                        Some(Ok(SessionPollResult::ReconnectFailed(st))) | Some(Err(st)) => {
                            let (mut failure, detail) = fail(st, "session establishment failed");
                            // A busy server's hint, carried in the refusal's response header.
                            if let Some(hint) = path.take_busy_hint() {
                                failure.retry_after = Some(failure.retry_after.map_or(hint, |h| h.max(hint)));
                            }
                            break Some(Err((failure, detail)));
                        }
                        None => break Some(Err(fail(StatusCode::BadConnectionClosed, "closed"))),
                        Some(Ok(_)) => {}
                    }
                }
            };
            let up = match established {
                // Unless the attempt is gone already (its guard fired).
                Some(Ok(())) => established_tx.send(Ok(())).is_ok(),
                Some(Err(e)) => {
                    let _ = established_tx.send(Err(e));
                    lost.cancel();
                    return;
                }
                None => false,
            };
            if !up {
                close_polling(&session_for_loop, &mut stream, timeout).await;
                lost.cancel();
                return;
            }
            // What ended the link, and whether its session must be closed
            // first (the connection is closing, the attempt was given up
            // before the link was handed over, or a new session whose
            // subscriptions could not move).
            let (status, close) = loop {
                let give_up = async {
                    match reactivating_until {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending::<()>().await,
                    }
                };
                tokio::select! {
                    _ = lost.cancelled() => break (StatusCode::BadConnectionClosed, false),
                    _ = orphaned.cancelled() => break (StatusCode::BadConnectionClosed, true),
                    // Closing: CloseSession reaches the field server
                    // (small PLCs allow only a few sessions) while this
                    // loop still polls the event loop below.
                    _ = cancel.cancelled() => break (StatusCode::BadShutdown, true),
                    _ = give_up => break (StatusCode::BadTimeout, transfer.is_some()),
                    moved = async { transfer.as_mut().expect("guarded by the condition").await }, if transfer.is_some() => {
                        transfer = None;
                        match moved.unwrap_or_else(|_| Err("the transfer task ended".into())) {
                            Ok(n) => {
                                resume(&session_for_loop, &deliveries, &weak, &interrupted);
                                reactivating_until = None;
                                failed_keep_alives = 0;
                                if let Some(inner) = weak.upgrade() {
                                    inner.status.send_modify(|st| st.transferred += u64::try_from(n).unwrap_or(0));
                                }
                                let _ = tx.send(Event::Moved { link: i, generation, transferred: true });
                            }
                            Err(why) => {
                                // Not ours to keep: close the new session and
                                // let the machine build the link afresh (items
                                // re-created, the gap marked).
                                tracing::info!(server = i, %why, "field subscriptions not transferred; re-creating the link");
                                if let Some(inner) = weak.upgrade() {
                                    inner.record(Some(i), "not_transferred", why);
                                }
                                break (StatusCode::BadSessionIdInvalid, true);
                            }
                        }
                    }
                    ev = stream.next() => match ev {
                        Some(Ok(SessionPollResult::ConnectionLost(st))) => {
                            let lost_url = paths.get(current).cloned().unwrap_or_default();
                            if paths.len() > 1 {
                                current = (current + 1) % paths.len();
                                path.set(&paths[current]);
                            }
                            let window = recovery_window(&session_for_loop, session_timeout, budget);
                            reactivating_until = Some(tokio::time::Instant::now() + window + timeout);
                            failed_reactivations = 0;
                            for d in deliveries.lock().values() {
                                d.lock().hold();
                            }
                            let _ = tx.send(Event::Interrupted { link: i, generation });
                            losses.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            interrupted.store(true, std::sync::atomic::Ordering::SeqCst);
                            if let Some(inner) = weak.upgrade() {
                                inner.status.send_modify(|s| s.last_error = Some(st));
                                inner.record_failure(
                                    Some(i),
                                    "connection_lost",
                                    format!("{st}; re-activating the session"),
                                    FieldError { status: Some(st), detail: LOST.to_string(), url: lost_url },
                                );
                            }
                        }
                        Some(Ok(SessionPollResult::SessionActivity(
                            opcua_client::SessionActivity::KeepAliveFailed(st),
                        ))) => {
                            failed_keep_alives += 1;
                            if failed_keep_alives == MAX_FAILED_KEEP_ALIVES {
                                // A stalled connection: drop the channel, keep
                                // the session (re-activated like after a loss).
                                tracing::warn!(server = i, %st, "field keep-alives failed; dropping the channel");
                                let s = session_for_loop.clone();
                                tokio::spawn(async move { s.channel().close_channel().await });
                            }
                        }
                        Some(Ok(SessionPollResult::SessionActivity(_))) => failed_keep_alives = 0,
                        Some(Ok(SessionPollResult::Reconnected(
                            opcua_client::SessionConnectMode::ReactivatedSession(_),
                        ))) => {
                            resume(&session_for_loop, &deliveries, &weak, &interrupted);
                            reactivating_until = None;
                            failed_keep_alives = 0;
                            let _ = tx.send(Event::Moved { link: i, generation, transferred: false });
                        }
                        Some(Ok(SessionPollResult::Reconnected(_))) => {
                            // The server no longer knew the session (it timed
                            // out during a long outage, or the server behind
                            // the new path is another one) and a new one was
                            // made. Its subscriptions may have outlived it:
                            // move them over; the link goes on as after a
                            // re-activation if they all move.
                            let session = session_for_loop.clone();
                            let (done, answer) = tokio::sync::oneshot::channel();
                            tokio::spawn(async move {
                                let _ = done.send(transfer_subscriptions(&session, timeout).await);
                            });
                            transfer = Some(answer);
                        }
                        Some(Ok(SessionPollResult::ReconnectFailed(st))) => {
                            // Within the window the library tries again, at
                            // most the policy's max_retries times.
                            failed_reactivations += 1;
                            tracing::debug!(server = i, %st, attempt = failed_reactivations, "re-activation attempt failed");
                            if reactivating_until.is_none()
                                || (max_attempts > 0 && failed_reactivations >= max_attempts)
                            {
                                break (st, false);
                            }
                        }
                        Some(Err(st)) => break (st, false),
                        None => break (StatusCode::BadConnectionClosed, false),
                        Some(Ok(_)) => {}
                    }
                }
            };
            if close {
                close_polling(&session_for_loop, &mut stream, timeout).await;
            }
            lost.cancel();
            if handover.end() {
                // Never handed over: the attempt reports its own failure,
                // there is no link to report lost.
                return;
            }
            let _ = tx.send(Event::Lost {
                link: i,
                generation,
                status,
                path: current,
                jitter: jitter(),
            });
        });
    }
    match established.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err(fail(StatusCode::BadShutdown, "closing")),
    }
    tokio::spawn(repair_gaps(
        session.clone(),
        deliveries.clone(),
        repair_rx,
        lost.clone(),
        Arc::downgrade(inner),
    ));
    let setup = async {
        // Namespaces → allocation → session map.
        let ns = read_values(
            &session,
            &[VariableId::Server_NamespaceArray.into()],
            s.request_timeout,
        )
        .await?;
        let uris: Vec<String> = match ns.first().and_then(|d| d.value.clone()) {
            Some(Variant::Array(a)) => a
                .values
                .iter()
                .map(|v| match v {
                    Variant::String(s) => s.as_ref().to_string(),
                    _ => String::new(),
                })
                .collect(),
            _ => {
                return Err(fail(
                    StatusCode::BadUnexpectedError,
                    "field server NamespaceArray unreadable",
                ))
            }
        };
        let map = {
            let mut table = inner.namespaces.lock();
            let mut added = false;
            for uri in uris.iter().skip(1) {
                let (_, new) = table
                    .allocate(&s.name, uri)
                    .map_err(|e| fail(StatusCode::BadUnexpectedError, e.to_string()))?;
                added |= new;
            }
            if added {
                (inner.on_namespaces)(&table);
            }
            SessionMap::new(&s.name, &table, &uris, inner.mount_folder.clone())
                .map_err(|e| fail(StatusCode::BadUnexpectedError, e.to_string()))?
        };
        let lim = read_limits(&session, s.request_timeout).await?;
        let client_max = u32::try_from(session.decoding_options().max_array_length).unwrap_or(0);
        let limits = OperationLimits::effective(
            &OperationLimits::from_values(&lim),
            client_max,
            &s.overrides,
        );
        // What the server says about its redundant set (informative: the
        // configured set is authoritative).
        let red = read_values(
            &session,
            &[
                VariableId::Server_ServerRedundancy_RedundancySupport.into(),
                VariableId::Server_ServerRedundancy_ServerUriArray.into(),
            ],
            s.request_timeout,
        )
        .await?;
        let support = match red.first().and_then(|d| d.value.clone()) {
            Some(Variant::Int32(v)) => Some(v),
            _ => None,
        };
        let server_uris = match red.get(1).and_then(|d| d.value.clone()) {
            Some(Variant::Array(a)) => a
                .values
                .iter()
                .filter_map(|v| match v {
                    Variant::String(s) => Some(s.as_ref().to_string()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        if support == Some(0) && s.handling != Handling::None {
            tracing::warn!(field = %s.name, url, mode = ?s.handling, "the field server announces no redundancy support but a redundant set is configured");
        }
        Ok((map, limits, support, server_uris))
    };
    let (map, limits, redundancy_support, server_uris) = match setup.await {
        Ok(x) => x,
        Err(e) => {
            abandon(&session, &lost, s.request_timeout).await;
            return Err(e);
        }
    };
    let ls = Arc::new(LinkSession {
        server: i,
        path,
        session: session.clone(),
        map: Arc::new(map),
        limits,
        redundancy_support,
        server_uris,
        request_timeout: s.request_timeout,
        subs: tokio::sync::Mutex::new(LinkSubs {
            spread: crate::spread::Spread::new(
                limits.max_monitored_items_per_subscription,
                limits.max_monitored_items_per_call,
            ),
            ..LinkSubs::default()
        }),
        deliveries: deliveries.clone(),
        repair: repair_tx,
        interrupted: interrupted.clone(),
        losses,
        lost: lost.clone(),
        generation,
        event_publishes: Arc::default(),
        reconcile_active: Mutex::new(None),
        reads: crate::coalesce::ReadCoalescer::start(
            session.clone(),
            limits.max_nodes_per_read,
            s.request_timeout,
            lost.clone(),
            inner.read_stats.clone(),
        ),
    });
    if let Err(e) = watch_server_status(inner, &ls, &tx).await {
        abandon(&session, &lost, s.request_timeout).await;
        return Err(e);
    }
    if !handover.hand_over() {
        // The session ended during the set-up (the link's task saw it).
        return Err(fail(
            StatusCode::BadConnectionClosed,
            "the session ended during set-up",
        ));
    }
    // The link task keeps the session from now on.
    orphan_guard.disarm();
    Ok(ls)
}

/// Who has a new link: its connect attempt hands it over once the set-up
/// succeeded; its task ends it when the session is lost or closed. The
/// first of the two decides whether that end is the attempt's failure
/// (reported by the attempt) or a lost link (reported by the task), so
/// exactly one of them is reported.
#[derive(Default)]
struct Handover(std::sync::atomic::AtomicU8);

impl Handover {
    const PENDING: u8 = 0;
    const HANDED: u8 = 1;
    const ENDED: u8 = 2;

    /// Called by the attempt after its set-up: whether the link is still
    /// alive and now handed over.
    fn hand_over(&self) -> bool {
        self.swap_from_pending(Self::HANDED)
    }

    /// Called by the link's task when its session ended: whether that came
    /// before the hand-over (the attempt then fails; nothing to report).
    fn end(&self) -> bool {
        self.swap_from_pending(Self::ENDED)
    }

    fn swap_from_pending(&self, to: u8) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        self.0
            .compare_exchange(Self::PENDING, to, SeqCst, SeqCst)
            .is_ok()
    }
}

/// Closes a session (CloseSession, with its subscriptions) while polling
/// its event loop, which the request needs, bounded by `timeout`. Called
/// by a link's task, the only one that polls that event loop.
async fn close_polling<S>(session: &Session, stream: &mut S, timeout: Duration)
where
    S: futures_util::Stream<Item = Result<SessionPollResult, StatusCode>> + Unpin,
{
    let close = session.disconnect();
    tokio::pin!(close);
    let _ = tokio::time::timeout(timeout, async {
        loop {
            tokio::select! {
                _ = &mut close => break,
                ev = stream.next() => if !matches!(ev, Some(Ok(_))) { break },
            }
        }
    })
    .await;
}

/// Closes a session whose set-up failed after it was created, so a
/// failing attempt does not leave a session behind on the field server
/// (small PLCs allow only a few), then ends its event loop.
async fn abandon(session: &Session, lost: &CancellationToken, timeout: Duration) {
    let _ = tokio::time::timeout(timeout, session.disconnect()).await;
    lost.cancel();
}

/// Reads the operation limits. The field server's MaxNodesPerRead is not
/// known yet, so when it refuses the whole set at once
/// (`BadTooManyOperations`) they are read one by one.
async fn read_limits(
    session: &Session,
    timeout: Duration,
) -> Result<Vec<DataValue>, (Failure, String)> {
    let ids = OperationLimits::node_ids();
    match read_values(session, &ids, timeout).await {
        Err((f, _)) if f.status == StatusCode::BadTooManyOperations => {
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                out.extend(read_values(session, std::slice::from_ref(&id), timeout).await?);
            }
            Ok(out)
        }
        other => other,
    }
}

async fn read_values(
    session: &Session,
    nodes: &[NodeId],
    timeout: Duration,
) -> Result<Vec<DataValue>, (Failure, String)> {
    let r = Read::new(session)
        .nodes_to_read(
            nodes
                .iter()
                .map(|n| ReadValueId {
                    node_id: n.clone(),
                    attribute_id: AttributeId::Value as u32,
                    ..Default::default()
                })
                .collect(),
        )
        .timeout(timeout)
        .send(session.channel())
        .await
        .map_err(client_error)?;
    Ok(r.results.unwrap_or_default())
}

/// Reads ServiceLevel, ServerStatus/State and EstimatedReturnTime of the
/// server behind `ls` and reports them to the machine (after a path move,
/// when the server behind the new path may be another one).
async fn refresh_status(
    inner: Arc<Inner>,
    ls: Arc<LinkSession>,
    tx: mpsc::UnboundedSender<LinkEvent>,
) {
    let ids: [NodeId; 3] = [
        VariableId::Server_ServiceLevel.into(),
        VariableId::Server_ServerStatus_State.into(),
        VariableId::Server_EstimatedReturnTime.into(),
    ];
    let Ok(values) = read_values(ls.session(), &ids, inner.settings.request_timeout).await else {
        return;
    };
    let value = |k: usize| values.get(k).and_then(|d| d.value.clone());
    let report = StatusReport::Read {
        service_level: match value(0) {
            Some(Variant::Byte(level)) => Some(level),
            _ => None,
        },
        state: match value(1) {
            Some(Variant::Int32(st)) => Some(server_state(st)),
            _ => None,
        },
        return_time: match value(2) {
            Some(Variant::DateTime(t)) => Some(*t),
            _ => None,
        },
    };
    let _ = tx.send(Event::Status {
        link: ls.server,
        generation: ls.generation,
        report,
    });
}

const SL_HANDLE: u32 = 1;
const STATE_HANDLE: u32 = 2;
const ERT_HANDLE: u32 = 3;

/// What one notification of the status subscription reports.
fn status_report(handle: u32, dv: DataValue) -> StatusReport {
    let good = dv.status.is_none_or(|s| s.is_good());
    match (handle, dv.value) {
        (SL_HANDLE, Some(Variant::Byte(level))) if good => StatusReport::ServiceLevel(level),
        (STATE_HANDLE, Some(Variant::Int32(st))) if good => StatusReport::State(server_state(st)),
        (ERT_HANDLE, Some(Variant::DateTime(t))) if good => StatusReport::ReturnTime(Some(*t)),
        (ERT_HANDLE, _) => StatusReport::ReturnTime(None),
        _ => StatusReport::Other,
    }
}

/// Subscribes to ServiceLevel, ServerStatus/State and EstimatedReturnTime
/// of the server behind `ls`, so a change is seen within one publishing
/// interval; each notification is reported to the machine.
async fn watch_server_status(
    inner: &Arc<Inner>,
    ls: &Arc<LinkSession>,
    tx: &mpsc::UnboundedSender<LinkEvent>,
) -> Result<(), (Failure, String)> {
    let s = &inner.settings;
    let (link, generation) = (ls.server, ls.generation);
    let lost = ls.lost.clone();
    let reports = tx.clone();
    let cb = DataChangeCallback::new(move |dv: DataValue, item: &MonitoredItem| {
        if lost.is_cancelled() {
            return;
        }
        let _ = reports.send(Event::Status {
            link,
            generation,
            report: status_report(item.client_handle(), dv),
        });
    });
    let session = ls.session();
    let sub = session
        .create_subscription(
            s.keep_alive_interval,
            lifetime_count(s.keep_alive_interval, 5, s.session_timeout),
            5,
            0,
            0,
            true,
            cb,
        )
        .await
        .map_err(client_error)?;
    let item = |id: VariableId, handle: u32| MonitoredItemCreateRequest {
        item_to_monitor: ReadValueId {
            node_id: id.into(),
            attribute_id: AttributeId::Value as u32,
            ..Default::default()
        },
        monitoring_mode: MonitoringMode::Reporting,
        requested_parameters: MonitoringParameters {
            client_handle: handle,
            sampling_interval: s.keep_alive_interval.as_secs_f64() * 1000.0,
            queue_size: 1,
            discard_oldest: true,
            ..Default::default()
        },
    };
    session
        .create_monitored_items(
            sub,
            TimestampsToReturn::Neither,
            vec![
                item(VariableId::Server_ServiceLevel, SL_HANDLE),
                item(VariableId::Server_ServerStatus_State, STATE_HANDLE),
                item(VariableId::Server_EstimatedReturnTime, ERT_HANDLE),
            ],
        )
        .await
        .map_err(client_error)?;
    // Reachable now; ServiceLevel/State arrive with the first publish.
    let _ = tx.send(Event::Status {
        link,
        generation,
        report: StatusReport::Watching,
    });
    Ok(())
}

fn server_state(v: i32) -> ServerState {
    match v {
        0 => ServerState::Running,
        1 => ServerState::Failed,
        2 => ServerState::NoConfiguration,
        3 => ServerState::Suspended,
        4 => ServerState::Shutdown,
        5 => ServerState::Test,
        6 => ServerState::CommunicationFault,
        _ => ServerState::Unknown,
    }
}

async fn close_link(ls: &LinkSession) {
    let _ = tokio::time::timeout(ls.request_timeout, ls.session.disconnect()).await;
    ls.lost.cancel();
}

/// The monitoring mode and publishing state items on `ls` should have.
fn desired_mode(
    handling: Handling,
    ls: &LinkSession,
    active: Option<usize>,
) -> (MonitoringMode, bool) {
    let is_active = active == Some(ls.server);
    match handling {
        _ if is_active => (MonitoringMode::Reporting, true),
        Handling::HotMerge => (MonitoringMode::Reporting, true),
        Handling::Hot => (MonitoringMode::Sampling, true),
        Handling::Warm => (MonitoringMode::Disabled, false),
        // Not active in a single-session mode: nothing reports until chosen.
        _ => (MonitoringMode::Sampling, true),
    }
}

/// Asks for a reconcile of `ls` with `active` as the active server
/// (called in the order the machine decided; the last request wins).
fn spawn_reconcile(inner: &Arc<Inner>, ls: Arc<LinkSession>, active: Option<usize>) {
    *ls.reconcile_active.lock() = active;
    let inner = inner.clone();
    tokio::spawn(async move {
        if let Err(st) = reconcile(&inner, &ls).await {
            tracing::debug!(field = %inner.settings.name, server = ls.server, %st, "item reconcile failed");
        }
    });
}

/// Brings the southbound items of `ls` in line with the item table and the
/// monitoring mode the link's role needs (the latest requested, see
/// [`LinkSession::reconcile_active`]). Serialized per link.
async fn reconcile(inner: &Arc<Inner>, ls: &Arc<LinkSession>) -> Result<(), StatusCode> {
    let s = &inner.settings;
    let mut subs = ls.subs.lock().await;
    if ls.is_lost() {
        return Ok(());
    }
    let active = *ls.reconcile_active.lock();
    let wanted: HashMap<u32, ItemKey> = inner.items.lock().keys().into_iter().collect();
    let session = ls.session();
    let (mode, publishing) = desired_mode(s.handling, ls, active);
    let merge = s.handling == Handling::HotMerge;

    // Delete items nobody needs.
    let mut gone: HashMap<u32, Vec<(u32, u32)>> = HashMap::new();
    for (id, (sub, mi)) in subs.items.iter() {
        if !wanted.contains_key(id) {
            gone.entry(*sub).or_default().push((*id, *mi));
        }
    }
    for (sub, list) in gone {
        let mis: Vec<u32> = list.iter().map(|(_, mi)| *mi).collect();
        delete_items(ls, sub, &mis).await?;
        for (id, _) in &list {
            subs.items.remove(id);
        }
        if let Some(c) = subs.counts.get_mut(&sub) {
            *c = c.saturating_sub(u32::try_from(list.len()).unwrap_or(u32::MAX));
        }
    }

    // Create missing items, grouped by class.
    let mut missing: HashMap<u32, Vec<(u32, ItemKey)>> = HashMap::new();
    for (id, key) in wanted.iter() {
        if !subs.items.contains_key(id) {
            missing
                .entry(key.class_ms)
                .or_default()
                .push((*id, key.clone()));
        }
    }
    for (class, list) in missing {
        let mut pending = VecDeque::with_capacity(list.len());
        for (id, key) in &list {
            let rvi = ReadValueId {
                node_id: key.node.clone(),
                attribute_id: key.attribute,
                index_range: key.index_range.parse().unwrap_or_default(),
                ..Default::default()
            };
            match ls.map.read_value_id_to_field(&rvi) {
                Ok(item_to_monitor) => pending.push_back(MonitoredItemCreateRequest {
                    item_to_monitor,
                    monitoring_mode: subs.mode.unwrap_or(mode),
                    requested_parameters: MonitoringParameters {
                        client_handle: *id,
                        sampling_interval: f64::from(class),
                        filter: filter_of(key),
                        queue_size: blip_queue_size(class),
                        discard_oldest: true,
                    },
                }),
                Err(st) => {
                    inner.items.lock().offer(*id, status_value(st), false);
                }
            }
        }
        place_items(inner, ls, &mut subs, class, pending, publishing, merge).await?;
    }

    reconcile_events(inner, ls, &mut subs, mode, publishing, merge).await?;

    // Role changes: monitoring mode and publishing.
    if subs.mode != Some(mode) {
        let mut per_sub: HashMap<u32, Vec<u32>> = HashMap::new();
        for (sub, mi) in subs.items.values() {
            per_sub.entry(*sub).or_default().push(*mi);
        }
        if let Some(sub) = subs.events_sub {
            per_sub
                .entry(sub)
                .or_default()
                .extend(subs.events.values().copied());
        }
        for (sub, mis) in per_sub {
            for chunk in batches(mis.len(), ls.limits.max_monitored_items_per_call) {
                session
                    .set_monitoring_mode(sub, mode, &mis[chunk])
                    .await
                    .map_err(|e| e.status())?;
            }
        }
        let sub_ids: Vec<u32> = subs
            .by_class
            .values()
            .flatten()
            .copied()
            .chain(subs.events_sub)
            .collect();
        if !sub_ids.is_empty() {
            SetPublishingMode::new(publishing, session)
                .subscription_ids(sub_ids)
                .send(session.channel())
                .await
                .map_err(|e| e.status())?;
        }
        subs.mode = Some(mode);
    }
    Ok(())
}

/// Most CreateMonitoredItems calls one class's placement makes in one
/// reconcile (a bound on probing a field server's cap).
const MAX_PLACEMENT_CALLS: usize = 256;

/// Creates the `pending` items of sampling class `class` on the class's
/// subscriptions, opening more when the field server caps items per
/// subscription (announced, or learned from BadTooManyMonitoredItems; see
/// [`crate::spread`]). Items the server refuses for another reason get
/// that status northbound. Called by [`reconcile`] for each class with
/// missing items.
async fn place_items(
    inner: &Arc<Inner>,
    ls: &Arc<LinkSession>,
    subs: &mut LinkSubs,
    class: u32,
    mut pending: VecDeque<MonitoredItemCreateRequest>,
    publishing: bool,
    merge: bool,
) -> Result<(), StatusCode> {
    use crate::spread::Refused;
    let mut next = 0usize;
    let mut calls = 0usize;
    let cap_before = subs.spread.cap();
    // The smallest item queue the field server granted.
    let mut granted: Option<u32> = None;
    while !pending.is_empty() {
        if calls == MAX_PLACEMENT_CALLS {
            // Left for the next reconcile.
            break;
        }
        let existing = subs.by_class.get(&class).and_then(|v| v.get(next)).copied();
        let sub = match existing {
            Some(sub) => sub,
            None => match open_data_subscription(inner, ls, subs, class, publishing, merge).await {
                Ok(sub) => sub,
                Err(st) => {
                    let mut items = inner.items.lock();
                    for r in pending.drain(..) {
                        items.offer(
                            r.requested_parameters.client_handle,
                            status_value(st),
                            false,
                        );
                    }
                    return Err(st);
                }
            },
        };
        let count = subs.counts.get(&sub).copied().unwrap_or(0);
        let take = subs.spread.take(count, pending.len());
        if take == 0 {
            next += 1;
            continue;
        }
        calls += 1;
        let chunk: Vec<MonitoredItemCreateRequest> = pending.drain(..take).collect();
        let refusal = match create_batch(ls, sub, chunk.clone()).await {
            Err(StatusCode::BadTooManyMonitoredItems) => {
                for r in chunk.into_iter().rev() {
                    pending.push_front(r);
                }
                Some(subs.spread.refused(count, take))
            }
            Err(st) => return Err(st),
            Ok(results) => {
                let mut held = count;
                let mut again = Vec::new();
                for (r, res) in chunk.into_iter().zip(results) {
                    let id = r.requested_parameters.client_handle;
                    match res {
                        Ok(c) => {
                            subs.items.insert(id, (sub, c.id));
                            held += 1;
                            granted =
                                Some(granted.map_or(c.queue_size, |g: u32| g.min(c.queue_size)));
                        }
                        Err(StatusCode::BadTooManyMonitoredItems) => again.push(r),
                        Err(st) => {
                            inner.items.lock().offer(id, status_value(st), false);
                        }
                    }
                }
                subs.counts.insert(sub, held);
                if again.is_empty() {
                    None
                } else {
                    for r in again.into_iter().rev() {
                        pending.push_front(r);
                    }
                    Some(subs.spread.item_refused(held))
                }
            }
        };
        match refusal {
            None | Some(Refused::Smaller) => {}
            Some(Refused::Full) => next += 1,
            Some(Refused::Hopeless) => {
                let mut items = inner.items.lock();
                for r in pending.drain(..) {
                    items.offer(
                        r.requested_parameters.client_handle,
                        status_value(StatusCode::BadTooManyMonitoredItems),
                        false,
                    );
                }
            }
        }
    }
    let asked = blip_queue_size(class);
    if let Some(q) = granted.filter(|q| *q < asked) {
        if subs.short_queues.insert(class) {
            inner.record(
                Some(ls.server),
                "short_queues",
                format!(
                    "the field server keeps {q} values per item (asked {asked}): class {class} ms rides out {} ms of outage; values of a longer one are lost there and shown as a gap",
                    u64::from(q) * u64::from(class)
                ),
            );
        }
    }
    let cap = subs.spread.cap();
    if cap != cap_before && cap != 0 {
        let n = subs.by_class.get(&class).map_or(0, Vec::len);
        inner.record(
            Some(ls.server),
            "items_spread",
            format!("the field server takes at most {cap} monitored items per subscription; class {class} ms uses {n} subscriptions"),
        );
    }
    Ok(())
}

/// Opens one more data subscription of sampling class `class` on `ls`
/// (publishing interval = the class, its notifications delivered in order
/// through a [`Delivery`]) and records it in `subs`.
async fn open_data_subscription(
    inner: &Arc<Inner>,
    ls: &Arc<LinkSession>,
    subs: &mut LinkSubs,
    class: u32,
    publishing: bool,
    merge: bool,
) -> Result<u32, StatusCode> {
    let gate = NotificationGate::new(inner, ls, merge);
    let delivery = Arc::new(Mutex::new(Delivery::new(
        gate,
        ls.map.clone(),
        merge,
        Some(ls.repair.clone()),
    )));
    let cb = Sequenced(delivery.clone());
    let interval = Duration::from_millis(u64::from(class));
    let keep_alive = u32::try_from(10_000 / u64::from(class).max(1))
        .unwrap_or(10)
        .clamp(3, 100);
    let sub = ls
        .session()
        .create_subscription(
            interval,
            lifetime_count(interval, keep_alive, inner.settings.session_timeout),
            keep_alive,
            0,
            0,
            publishing,
            cb,
        )
        .await
        .map_err(|e| e.status())?;
    subs.by_class.entry(class).or_default().push(sub);
    subs.counts.insert(sub, 0);
    delivery.lock().sub = sub;
    ls.deliveries.lock().insert(sub, delivery);
    Ok(sub)
}

/// One CreateMonitoredItems call of `reqs` on subscription `sub`: per
/// item, what the server created or the status it refused it with.
async fn create_batch(
    ls: &LinkSession,
    sub: u32,
    reqs: Vec<MonitoredItemCreateRequest>,
) -> Result<Vec<Result<Created, StatusCode>>, StatusCode> {
    let n = reqs.len();
    let created = ls
        .session()
        .create_monitored_items(sub, TimestampsToReturn::Both, reqs)
        .await
        .map_err(|e| e.status())?;
    if created.len() != n {
        return Err(StatusCode::BadUnexpectedError);
    }
    Ok(created
        .iter()
        .map(|c| {
            let st = c.result.status_code;
            if st.is_good() {
                Ok(Created {
                    id: c.result.monitored_item_id,
                    queue_size: c.result.revised_queue_size,
                })
            } else {
                Err(st)
            }
        })
        .collect())
}

/// A southbound monitored item the field server created: its id and the
/// queue size it granted.
#[derive(Debug, Clone, Copy)]
struct Created {
    id: u32,
    queue_size: u32,
}

/// Decides, in a southbound subscription's callback, whether a notification
/// of one link is delivered: not after the link was lost, and only from the
/// active server's link unless every server reports (hot_merge).
struct NotificationGate {
    inner: Weak<Inner>,
    lost: CancellationToken,
    server: usize,
    generation: u64,
    merge: bool,
}

impl NotificationGate {
    fn new(inner: &Arc<Inner>, ls: &LinkSession, merge: bool) -> Self {
        NotificationGate {
            inner: Arc::downgrade(inner),
            lost: ls.lost.clone(),
            server: ls.server,
            generation: ls.generation,
            merge,
        }
    }

    /// The connection, when the notification is to be delivered.
    fn open(&self) -> Option<Arc<Inner>> {
        let inner = self.inner.upgrade()?;
        if self.lost.is_cancelled() {
            return None;
        }
        let is_active = inner
            .active
            .borrow()
            .as_ref()
            .is_some_and(|a| a.server == self.server && a.generation == self.generation);
        (is_active || self.merge).then_some(inner)
    }
}

/// The southbound data subscriptions of one link by subscription id, with
/// what each delivered (shared by the subscriptions' callbacks and the
/// link's recovery after a reconnect).
type Deliveries = Arc<Mutex<HashMap<u32, Arc<Mutex<Delivery>>>>>;

/// What one southbound data subscription has delivered, by notification
/// sequence number: every message's data changes reach the item table once
/// and in order, whether they come with a Publish answer or, after a
/// re-activated session, from Republish; messages lost for good leave a
/// gap marker on the items they carried.
struct Delivery {
    gate: NotificationGate,
    map: Arc<SessionMap>,
    merge: bool,
    seq: crate::sequence::Sequence,
    /// Client handles of the items this subscription delivered (the items a
    /// gap affects).
    handles: std::collections::HashSet<u32>,
    /// While the session recovers after a lost connection, or a gap is
    /// being repaired, Publish answers wait here so the republished
    /// messages before them go first.
    held: Option<Vec<opcua_types::NotificationMessage>>,
    /// The subscription's id (set once it is created).
    sub: u32,
    /// Asks the link's repair task to republish what this subscription
    /// misses (by subscription id).
    repair: Option<mpsc::UnboundedSender<u32>>,
    /// The message whose gap was already asked back (asked once).
    repair_tried: Option<u32>,
}

impl Delivery {
    fn new(
        gate: NotificationGate,
        map: Arc<SessionMap>,
        merge: bool,
        repair: Option<mpsc::UnboundedSender<u32>>,
    ) -> Self {
        Delivery {
            sub: 0,
            repair,
            repair_tried: None,
            gate,
            map,
            merge,
            seq: Default::default(),
            handles: Default::default(),
            held: None,
        }
    }

    /// The connection was lost: Publish answers are held until
    /// [`Delivery::release`] (after the republished messages).
    fn hold(&mut self) {
        self.held.get_or_insert_with(Vec::new);
    }

    /// Ends the recovery: delivers the held Publish answers in sequence
    /// order (what Republish already delivered is dropped as a duplicate).
    fn release(&mut self) {
        let Some(mut held) = self.held.take() else {
            return;
        };
        let last = self.seq.last().unwrap_or(0);
        held.sort_by_key(|m| m.sequence_number.wrapping_sub(last));
        for m in held {
            self.process(m);
        }
    }

    /// A message from a Publish answer: held while recovering, else
    /// processed at once.
    fn accept(&mut self, msg: opcua_types::NotificationMessage) {
        match &mut self.held {
            Some(held) if held.len() < MAX_HELD => held.push(msg),
            _ => self.process(msg),
        }
    }

    /// Takes one notification message (a Publish answer's or a republished
    /// one): drops a duplicate, marks a gap before the message that follows
    /// it, and offers the data changes to the item table.
    fn process(&mut self, msg: opcua_types::NotificationMessage) {
        use crate::sequence::Verdict;
        let has_data = msg.notification_data.as_ref().is_some_and(|d| {
            d.iter().any(|o| {
                o.inner_as::<opcua_types::DataChangeNotification>()
                    .is_some_and(|c| c.monitored_items.as_ref().is_some_and(|m| !m.is_empty()))
            })
        });
        let before = self.seq.last();
        let mut probe = self.seq.clone();
        let verdict = probe.accept(msg.sequence_number, has_data);
        // A message after a gap: first ask the server for the missing ones
        // (a Publish answer may have been lost with the old channel after
        // the recovery had already asked), once per gap.
        if matches!(
            verdict,
            Verdict::DeliverAfterGap { .. } | Verdict::KeepAliveAfterGap { .. }
        ) && self.held.is_none()
            && self.repair_tried != Some(msg.sequence_number)
        {
            if let Some(repair) = &self.repair {
                if repair.send(self.sub).is_ok() {
                    self.repair_tried = Some(msg.sequence_number);
                    self.held = Some(vec![msg]);
                    return;
                }
            }
        }
        self.seq = probe;
        let changes: Vec<opcua_types::MonitoredItemNotification> = msg
            .notification_data
            .into_iter()
            .flatten()
            .filter_map(|obj| obj.into_inner_as::<opcua_types::DataChangeNotification>())
            .flat_map(|d| d.monitored_items.into_iter().flatten())
            .collect();
        let missing = match verdict {
            Verdict::Duplicate | Verdict::KeepAlive => None,
            Verdict::Deliver => Some(0),
            Verdict::DeliverAfterGap { missing } | Verdict::KeepAliveAfterGap { missing } => {
                Some(missing)
            }
        };
        let Some(missing) = missing else { return };
        let Some(inner) = self.gate.open() else {
            return;
        };
        if missing > 0 {
            let seen = match before {
                Some(n) => format!("after message #{n}, message #{} came", msg.sequence_number),
                None => format!("message #{} came", msg.sequence_number),
            };
            inner.notification_gap(
                self.gate.server,
                missing,
                &seen,
                self.handles.iter().copied(),
            );
        }
        // Values the field server dropped from a full item queue (its
        // Overflow bit on the value that follows): lost for good, said
        // like a lost message, before the value itself goes north (which
        // keeps the bit).
        let mut overflowed: Vec<u32> = changes
            .iter()
            .filter(|n| n.value.status.is_some_and(|st| st.overflow()))
            .map(|n| n.client_handle)
            .collect();
        overflowed.sort_unstable();
        overflowed.dedup();
        if !overflowed.is_empty() {
            inner.queue_overflow(self.gate.server, &overflowed);
        }
        let mut items = inner.items.lock();
        for n in changes {
            self.handles.insert(n.client_handle);
            let dv = self.map.data_value_to_gateway(n.value);
            items.offer(n.client_handle, dv, self.merge);
        }
    }
}

/// The callback of a link's event subscription: offers the events to the
/// connection's event table, then counts the Publish answer (a refresh
/// window waits for the answers after its southbound call).
struct CountedEvents {
    events: EventCallback,
    publishes: Arc<std::sync::atomic::AtomicU64>,
}

impl opcua_client::OnSubscriptionNotificationCore for CountedEvents {
    fn on_subscription_notification(
        &mut self,
        notification: opcua_types::NotificationMessage,
        items: opcua_client::MonitoredItemMap<'_>,
    ) {
        opcua_client::OnSubscriptionNotificationCore::on_subscription_notification(
            &mut self.events,
            notification,
            items,
        );
        self.publishes
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// The callback of a link's data subscription: hands every message to the
/// subscription's [`Delivery`] (it runs under the client library's lock:
/// no session call here).
struct Sequenced(Arc<Mutex<Delivery>>);

impl opcua_client::OnSubscriptionNotificationCore for Sequenced {
    fn on_subscription_notification(
        &mut self,
        notification: opcua_types::NotificationMessage,
        _items: opcua_client::MonitoredItemMap<'_>,
    ) {
        self.0.lock().accept(notification);
    }
}

/// Failed keep-alives in a row after which a link drops its channel (and
/// re-activates its session on a new one).
const MAX_FAILED_KEEP_ALIVES: u32 = 3;

/// Most Publish answers held per subscription while its session recovers.
const MAX_HELD: usize = 10_000;

/// Most messages asked back with Republish per subscription after one
/// reconnect.
const MAX_REPUBLISH: usize = 1_000;

/// Called when a link's session is back on a new channel (re-activated,
/// or its subscriptions moved to a new session): wakes the calls waiting
/// for the link, then asks back what the subscriptions missed with
/// Republish before publishing resumes (the publish loop restarts with the
/// new channel and sends nothing until triggered).
fn resume(
    session: &Arc<Session>,
    deliveries: &Deliveries,
    weak: &Weak<Inner>,
    interrupted: &std::sync::atomic::AtomicBool,
) {
    interrupted.store(false, std::sync::atomic::Ordering::SeqCst);
    if let Some(inner) = weak.upgrade() {
        inner.active.send_modify(|_| {});
    }
    let session = session.clone();
    let deliveries = deliveries.clone();
    let weak = weak.clone();
    tokio::spawn(async move {
        let n = recover_notifications(&session, &deliveries).await;
        session.trigger_publish_now();
        if let Some(inner) = weak.upgrade() {
            inner
                .status
                .send_modify(|st| st.republished += u64::from(n));
        }
    });
}

/// Called when the client library had to make a new session after a lost
/// connection (the field server no longer knew the old one): moves every
/// subscription of the link to it with TransferSubscriptions (Part 4
/// §5.13.7), without initial values since what was missed is asked back
/// with Republish. Returns how many moved, or why they did not all move
/// (the field server restarted, their lifetime ran out, or it refuses the
/// transfer, e.g. an anonymous session on a channel without signing).
async fn transfer_subscriptions(session: &Session, timeout: Duration) -> Result<usize, String> {
    let ids = session
        .subscription_state()
        .lock()
        .subscription_ids()
        .unwrap_or_default();
    if ids.is_empty() {
        return Err("the link had no subscriptions to move".into());
    }
    let results = tokio::time::timeout(timeout, session.transfer_subscriptions(&ids, false))
        .await
        .map_err(|_| "TransferSubscriptions timed out".to_string())?
        .map_err(|e| format!("TransferSubscriptions failed: {}", e.status()))?;
    let refused: Vec<String> = ids
        .iter()
        .enumerate()
        .filter_map(|(k, id)| {
            let st = results
                .get(k)
                .map_or(StatusCode::BadUnexpectedError, |r| r.status_code);
            (!st.is_good()).then(|| format!("subscription {id}: {st}"))
        })
        .collect();
    if refused.is_empty() {
        Ok(ids.len())
    } else {
        Err(format!("not transferred: {}", refused.join(", ")))
    }
}

/// How long a link keeps trying to get its session back after a lost
/// connection (called when the loss is seen): while the field server may
/// still hold the session (its timeout) or its subscriptions (their
/// lifetime, so they can move to a new session, but at most as long again
/// as the session timeout: meanwhile the items show no new value, and a
/// subscriber should learn of a dead source in bounded time), at most the
/// reconnect budget.
fn recovery_window(session: &Session, session_timeout: Duration, budget: Duration) -> Duration {
    let state = session.subscription_state().lock();
    let lifetime = state
        .subscription_ids()
        .unwrap_or_default()
        .iter()
        .filter_map(|id| state.get(*id))
        .map(|sub| sub.publishing_interval() * sub.lifetime_count())
        .max()
        .unwrap_or_default();
    session_timeout
        .max(lifetime.min(session_timeout.saturating_mul(2)))
        .min(budget)
}

/// Lifetime count asked for a southbound subscription publishing every
/// `interval` with `keep_alive` (called when one is created): it outlives
/// the session by three keep-alive periods, so that after an outage longer
/// than the session timeout it can still be moved to a new session, and a
/// re-activated session never finds its subscriptions gone.
fn lifetime_count(interval: Duration, keep_alive: u32, session_timeout: Duration) -> u32 {
    let per = interval.as_millis().max(1);
    u32::try_from(session_timeout.as_millis().div_ceil(per))
        .unwrap_or(u32::MAX)
        .saturating_add(keep_alive.saturating_mul(3))
}

/// After the session was re-activated on a new channel, and before
/// publishing resumes: asks every data subscription for the messages after
/// the last one it delivered (Republish), until the server has no more,
/// and delivers them in order. The client library sends no Publish until
/// [`Session::trigger_publish_now`], which the caller does afterwards.
async fn recover_notifications(session: &Session, deliveries: &Deliveries) -> u32 {
    let subs: Vec<(u32, Arc<Mutex<Delivery>>)> = deliveries
        .lock()
        .iter()
        .map(|(id, d)| (*id, d.clone()))
        .collect();
    let mut recovered = 0;
    for (sub, delivery) in subs {
        recovered += republish_missing(session, sub, &delivery).await;
    }
    recovered
}

/// Asks the server for the messages of subscription `sub` after the last
/// one `delivery` delivered, until it has no more, delivers them, then the
/// Publish answers held meanwhile. Returns how many were recovered.
async fn republish_missing(session: &Session, sub: u32, delivery: &Mutex<Delivery>) -> u32 {
    let mut recovered = 0;
    {
        let Some(mut n) = delivery.lock().seq.first_missing() else {
            delivery.lock().release();
            return 0;
        };
        for _ in 0..MAX_REPUBLISH {
            match session.republish(sub, n).await {
                Ok(msg) => {
                    delivery.lock().process(msg);
                    recovered += 1;
                    n = crate::sequence::next(n);
                }
                Err(e) => {
                    if e.status() != StatusCode::BadMessageNotAvailable {
                        tracing::debug!(sub, seq = n, status = %e.status(), "Republish failed");
                    }

                    break;
                }
            }
        }
        delivery.lock().release();
    }
    recovered
}

/// The repair task of one link: republishes what a subscription misses
/// when its [`Delivery`] sees a gap in the Publish answers. Ends when the
/// link's session is lost.
async fn repair_gaps(
    session: Arc<Session>,
    deliveries: Deliveries,
    mut asks: mpsc::UnboundedReceiver<u32>,
    lost: CancellationToken,
    inner: Weak<Inner>,
) {
    loop {
        let sub = tokio::select! {
            _ = lost.cancelled() => return,
            s = asks.recv() => match s { Some(s) => s, None => return },
        };
        let Some(d) = deliveries.lock().get(&sub).cloned() else {
            continue;
        };
        let n = republish_missing(&session, sub, &d).await;
        if let Some(inner) = inner.upgrade() {
            inner
                .status
                .send_modify(|st| st.republished += u64::from(n));
        }
    }
}

/// Publishing interval of the subscription that carries a link's event
/// items: events reach the gateway within it.
const EVENT_PUBLISHING_INTERVAL: Duration = Duration::from_millis(100);

/// Keep-alive count of a link's event subscription: an idle one answers a
/// Publish at least every second, which bounds how long a refresh without
/// RefreshStart on its item waits (see [`wait_refresh_end`]).
const EVENT_KEEP_ALIVE_COUNT: u32 = 10;

/// Queue size asked for each southbound event item (events between two
/// publishes, and those a hot backup keeps while it only samples).
const EVENT_QUEUE_SIZE: u32 = 1_000;

/// Brings the southbound event items of `ls` in line with the event table:
/// one event item (attribute EventNotifier, the key's filter remapped to the
/// field server) per key, on one subscription per link. Called by
/// [`reconcile`], which then applies role changes to these items too.
async fn reconcile_events(
    inner: &Arc<Inner>,
    ls: &Arc<LinkSession>,
    subs: &mut LinkSubs,
    mode: MonitoringMode,
    publishing: bool,
    merge: bool,
) -> Result<(), StatusCode> {
    let wanted: HashMap<u32, EventKey> = inner.events.lock().keys().into_iter().collect();
    let session = ls.session();
    let gone: Vec<(u32, u32)> = subs
        .events
        .iter()
        .filter(|(id, _)| !wanted.contains_key(id))
        .map(|(id, mi)| (*id, *mi))
        .collect();
    if let (Some(sub), false) = (subs.events_sub, gone.is_empty()) {
        let mis: Vec<u32> = gone.iter().map(|(_, mi)| *mi).collect();
        delete_items(ls, sub, &mis).await?;
        for (id, _) in gone {
            subs.events.remove(&id);
        }
    }
    let missing: Vec<(u32, EventKey)> = wanted
        .into_iter()
        .filter(|(id, _)| !subs.events.contains_key(id))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let sub = match subs.events_sub {
        Some(sub) => sub,
        None => {
            let gate = NotificationGate::new(inner, ls, merge);
            let map = ls.map.clone();
            let cb =
                EventCallback::new(move |fields: Option<Vec<Variant>>, item: &MonitoredItem| {
                    let Some(fields) = fields else { return };
                    let Some(inner) = gate.open() else { return };
                    let handle = item.client_handle();
                    let mut events = inner.events.lock();
                    let fields = map.event_fields_to_gateway(events.select_of(handle), &fields);
                    events.offer(handle, fields);
                });
            let cb = CountedEvents {
                events: cb,
                publishes: ls.event_publishes.clone(),
            };
            let sub = session
                .create_subscription(
                    EVENT_PUBLISHING_INTERVAL,
                    lifetime_count(
                        EVENT_PUBLISHING_INTERVAL,
                        EVENT_KEEP_ALIVE_COUNT,
                        inner.settings.session_timeout,
                    ),
                    EVENT_KEEP_ALIVE_COUNT,
                    0,
                    0,
                    publishing,
                    cb,
                )
                .await
                .map_err(|e| e.status())?;
            subs.events_sub = Some(sub);
            sub
        }
    };
    let mut reqs = Vec::with_capacity(missing.len());
    for (id, key) in &missing {
        let node_id = match ls.map.notifier_to_field(&key.node) {
            Ok(node) => node,
            Err(st) => {
                tracing::debug!(field = %inner.settings.name, node = %key.node, %st, "event item not created");
                continue;
            }
        };
        let filter = match ls
            .map
            .event_filter_to_field(&southbound_filter(&key.filter))
        {
            Ok(f) => f,
            Err(st) => {
                tracing::debug!(field = %inner.settings.name, node = %key.node, %st, "event filter not remapped");
                continue;
            }
        };
        reqs.push(MonitoredItemCreateRequest {
            item_to_monitor: ReadValueId {
                node_id,
                attribute_id: AttributeId::EventNotifier as u32,
                ..Default::default()
            },
            monitoring_mode: subs.mode.unwrap_or(mode),
            requested_parameters: MonitoringParameters {
                client_handle: *id,
                sampling_interval: 0.0,
                filter: ExtensionObject::from_message(filter),
                queue_size: EVENT_QUEUE_SIZE,
                discard_oldest: true,
            },
        });
    }
    for (id, created) in create_items(ls, sub, reqs).await? {
        match created {
            Ok(mi) => {
                subs.events.insert(id, mi);
            }
            Err(st) => {
                tracing::debug!(field = %inner.settings.name, status = %st, "event item refused by the field server");
            }
        }
    }
    Ok(())
}

/// ConditionType (Part 9 §5.5.2): the object of ConditionRefresh(2) calls.
pub const CONDITION_TYPE: u32 = 2782;
/// ConditionType.ConditionRefresh (Part 9 §5.5.7), input SubscriptionId.
pub const CONDITION_REFRESH: u32 = 3875;
/// ConditionType.ConditionRefresh2 (Part 9 §5.5.8), inputs SubscriptionId,
/// MonitoredItemId.
pub const CONDITION_REFRESH2: u32 = 12912;

/// How often a refresh looks whether its RefreshEnd came, or its item was
/// created.
const REFRESH_POLL: Duration = Duration::from_millis(20);

/// After a new session became the active one (first connect, reconnect
/// with a new session, failover): refreshes every shared event item on it
/// for all its northbound items, so that they get the current alarm states
/// framed by RefreshStart/RefreshEnd. A session re-activated after a blip
/// stays the same session and is not refreshed: Republish recovered what
/// it missed.
async fn auto_refresh(inner: Arc<Inner>, ls: Arc<LinkSession>) {
    let keys = inner.events.lock().keys();
    if keys.is_empty() {
        return;
    }
    inner.record(
        Some(ls.server),
        "refresh",
        format!(
            "ConditionRefresh of {} shared event item(s) on the new session",
            keys.len()
        ),
    );
    let deadline = Instant::now() + connect_timeout(&inner.settings);
    for (_, key) in keys {
        if ls.is_lost() {
            return;
        }
        refresh_key(&inner, Some(&ls), &key, Audience::Everyone, deadline).await;
    }
}

/// One condition refresh of the shared event item of `key` on `ls` for
/// `to`, within `deadline` (see [`FieldConnection::refresh`]). A request's
/// refresh always ends with a RefreshEnd marker; the connection's own
/// (`Everyone`) is framed by markers only when the field server took it.
async fn refresh_key(
    inner: &Arc<Inner>,
    ls: Option<&Arc<LinkSession>>,
    key: &EventKey,
    to: Audience,
    deadline: Instant,
) {
    let end = |refreshed| inner.events.lock().end_refresh(key, to, refreshed);
    let Ok(_one) = tokio::time::timeout_at(deadline.into(), inner.refreshing.lock()).await else {
        end(false);
        return;
    };
    let target = match ls {
        Some(ls) => southbound_item(inner, ls, key, deadline).await,
        None => None,
    };
    let (Some(ls), Some((sub, mi))) = (ls, target) else {
        end(false);
        return;
    };
    inner.events.lock().begin_refresh(key, to);
    let refreshed = match call_condition_refresh(ls, sub, mi, deadline).await {
        Ok(()) => {
            let answered = ls
                .event_publishes
                .load(std::sync::atomic::Ordering::Acquire);
            wait_refresh_end(inner, ls, key, answered, deadline).await;
            true
        }
        Err(st) => {
            tracing::debug!(field = %inner.settings.name, node = %key.node, %st, "condition refresh refused by the field server");
            false
        }
    };
    end(refreshed);
}

/// The (subscription, monitored item) of the southbound item of `key` on
/// `ls`, waiting until `deadline` for the item to be created and reporting; None when the
/// key is no longer wanted, the item was refused or the session is lost.
async fn southbound_item(
    inner: &Inner,
    ls: &LinkSession,
    key: &EventKey,
    deadline: Instant,
) -> Option<(u32, u32)> {
    loop {
        let id = inner.events.lock().id_of(key)?;
        // A reconcile in progress holds the lock: its result is awaited.
        let subs = tokio::time::timeout_at(deadline.into(), ls.subs.lock())
            .await
            .ok()?;
        // A refresh of an item that does not report yet (a link that just
        // came up is reconciled in Sampling until it becomes the active
        // one) is lost: field servers skip such items.
        let reporting = subs.mode == Some(MonitoringMode::Reporting);
        if let (Some(sub), Some(mi), true) = (subs.events_sub, subs.events.get(&id), reporting) {
            return Some((sub, *mi));
        }
        drop(subs);
        if ls.is_lost() || Instant::now() + REFRESH_POLL * 5 >= deadline {
            return None;
        }
        tokio::time::sleep(REFRESH_POLL * 5).await;
    }
}

/// Calls ConditionRefresh2 for item `mi` of subscription `sub` on `ls`;
/// when the field server lacks it (BadMethodInvalid, BadNotImplemented,
/// BadNotSupported), ConditionRefresh for the subscription.
async fn call_condition_refresh(
    ls: &LinkSession,
    sub: u32,
    mi: u32,
    deadline: Instant,
) -> Result<(), StatusCode> {
    let r2 = call_method(
        ls,
        CONDITION_REFRESH2,
        vec![Variant::from(sub), Variant::from(mi)],
        deadline,
    )
    .await?;
    match r2 {
        StatusCode::BadMethodInvalid
        | StatusCode::BadNotImplemented
        | StatusCode::BadNotSupported => {
            let r = call_method(ls, CONDITION_REFRESH, vec![Variant::from(sub)], deadline).await?;
            if r.is_good() {
                Ok(())
            } else {
                Err(r)
            }
        }
        st if st.is_good() => Ok(()),
        st => Err(st),
    }
}

/// Calls method `method` of ConditionType on `ls` with `args`; the
/// method's status.
async fn call_method(
    ls: &LinkSession,
    method: u32,
    args: Vec<Variant>,
    deadline: Instant,
) -> Result<StatusCode, StatusCode> {
    let call = CallMethodRequest {
        object_id: NodeId::new(0, CONDITION_TYPE),
        method_id: NodeId::new(0, method),
        input_arguments: Some(args),
    };
    let resp = Call::new(ls.session())
        .methods_to_call(vec![call])
        .timeout(ls.timeout_until(deadline))
        .send(ls.session().channel())
        .await
        .map_err(|e| e.status())?;
    Ok(resp
        .results
        .and_then(|r| r.into_iter().next())
        .map_or(StatusCode::BadUnexpectedError, |r| r.status_code))
}

/// Waits until the refresh window of `key` can close: the field server's
/// RefreshEnd reached the item; or, when its RefreshStart did not, the
/// event subscription delivered two Publish answers after the southbound
/// call returned (`answered` of them before): the refresh's events were
/// queued before the call's answer, so the second answer after it (the
/// first may have been under way) carries them, however slow the server
/// or the network, and an idle subscription answers within
/// [`EVENT_KEEP_ALIVE_COUNT`] publishing intervals. At the latest at
/// `deadline`.
async fn wait_refresh_end(
    inner: &Inner,
    ls: &LinkSession,
    key: &EventKey,
    answered: u64,
    deadline: Instant,
) {
    loop {
        let p = inner.events.lock().refresh_progress(key);
        let since = ls
            .event_publishes
            .load(std::sync::atomic::Ordering::Acquire)
            .saturating_sub(answered);
        if p.end_seen || Instant::now() >= deadline || (!p.start_seen && since >= 2) {
            return;
        }
        if ls.is_lost() {
            return;
        }
        tokio::time::sleep(REFRESH_POLL).await;
    }
}

/// Deletes the monitored items `mis` of subscription `sub` of `ls` in
/// batches within the field server's limit.
async fn delete_items(ls: &LinkSession, sub: u32, mis: &[u32]) -> Result<(), StatusCode> {
    for chunk in batches(mis.len(), ls.limits.max_monitored_items_per_call) {
        ls.session()
            .delete_monitored_items(sub, &mis[chunk])
            .await
            .map_err(|e| e.status())?;
    }
    Ok(())
}

/// Creates `reqs` on subscription `sub` of `ls` in batches within the field
/// server's limit; per item (our id, its client handle), the server's monitored
/// item id or the status it refused the item with.
async fn create_items(
    ls: &LinkSession,
    sub: u32,
    reqs: Vec<MonitoredItemCreateRequest>,
) -> Result<Vec<(u32, Result<u32, StatusCode>)>, StatusCode> {
    let mut out = Vec::with_capacity(reqs.len());
    for chunk in batches(reqs.len(), ls.limits.max_monitored_items_per_call) {
        let batch = reqs[chunk].to_vec();
        let ids: Vec<u32> = batch
            .iter()
            .map(|r| r.requested_parameters.client_handle)
            .collect();
        let created = create_batch(ls, sub, batch).await?;
        out.extend(
            ids.into_iter()
                .zip(created.into_iter().map(|c| c.map(|c| c.id))),
        );
    }
    Ok(out)
}

/// How long a network blip the southbound data items cover: the field
/// server queues the values sampled meanwhile, and the re-activated session
/// delivers them all.
const BLIP_COVER_MS: u32 = 10_000;

/// Queue size of a southbound data item of sampling class `class_ms`: the
/// values of [`BLIP_COVER_MS`] (1 to 100).
fn blip_queue_size(class_ms: u32) -> u32 {
    (BLIP_COVER_MS / class_ms.max(1)).clamp(1, 100)
}

fn status_value(st: StatusCode) -> DataValue {
    DataValue {
        status: Some(st),
        server_timestamp: Some(DateTime::now()),
        ..Default::default()
    }
}

fn filter_of(key: &ItemKey) -> ExtensionObject {
    let trigger = match key.trigger {
        0 => opcua_types::DataChangeTrigger::Status,
        2 => opcua_types::DataChangeTrigger::StatusValueTimestamp,
        _ => opcua_types::DataChangeTrigger::StatusValue,
    };
    let deadband = key.deadband();
    if trigger == opcua_types::DataChangeTrigger::StatusValue && deadband.is_none() {
        return ExtensionObject::null();
    }
    ExtensionObject::from_message(DataChangeFilter {
        trigger,
        deadband_type: if deadband.is_some() {
            DeadbandType::Absolute as u32
        } else {
            DeadbandType::None as u32
        },
        deadband_value: deadband.unwrap_or(0.0),
    })
}

/// The gateway's client identity for a field server connection or probe.
/// The server certificate is checked against the gateway's trust list by
/// the caller (exact certificate); the channel is then bound to it, so
/// the library's own checks are off. No retries: the reconnect policy
/// decides. `url` is the field server's (the client configuration's one
/// endpoint; the library warns about a configuration without any).
fn base_client(su: &ClientSetup, url: &str) -> ClientBuilder {
    ClientBuilder::new()
        .endpoint("field", opcua_client::ClientEndpoint::new(url))
        .application_name(su.application_name.clone())
        .application_uri(su.application_uri.clone())
        .product_uri("urn:uagate")
        .pki_dir(su.pki_dir.clone())
        .create_sample_keypair(false)
        .trust_server_certs(true)
        .verify_server_certs(false)
        .session_retry_limit(0)
}

/// The identity token the gateway's sessions present (a certificate
/// identity whose files cannot be read fails here, naming them).
fn identity_token(identity: &Identity) -> Result<IdentityToken, String> {
    Ok(match identity {
        Identity::Anonymous => IdentityToken::new_anonymous(),
        Identity::UserName { user, password } => {
            IdentityToken::new_user_name(user.clone(), password.clone())
        }
        Identity::Certificate { cert, key } => {
            IdentityToken::new_x509_path(cert, key).map_err(|e| e.to_string())?
        }
    })
}

/// A login kind as the console names it.
fn login_kind(t: UserTokenType) -> &'static str {
    match t {
        UserTokenType::Anonymous => "anonymous",
        UserTokenType::UserName => "user name and password",
        UserTokenType::Certificate => "user certificate",
        UserTokenType::IssuedToken => "issued token",
    }
}

/// Opens a session on `endpoint` (at `url`) with the configured identity
/// and closes it again: the login part of "test connection", so that a
/// wrong password or an unreadable certificate file shows before saving.
async fn probe_login(
    client: &mut opcua_client::Client,
    url: &str,
    mut endpoint: EndpointDescription,
    identity: &Identity,
    timeout: Duration,
) -> Result<(), FieldError> {
    endpoint.endpoint_url = url.into();
    // A login kind the endpoint does not offer, said plainly (the stack
    // would say BadSecurityPolicyRejected).
    let wanted = match identity {
        Identity::Anonymous => UserTokenType::Anonymous,
        Identity::UserName { .. } => UserTokenType::UserName,
        Identity::Certificate { .. } => UserTokenType::Certificate,
    };
    let offered: Vec<UserTokenType> = endpoint
        .user_identity_tokens
        .iter()
        .flatten()
        .map(|t| t.token_type)
        .collect();
    if !offered.contains(&wanted) {
        let names: Vec<&str> = offered.iter().map(|t| login_kind(*t)).collect();
        return Err(FieldError {
            status: None,
            detail: format!(
                "the server takes no {} login on this endpoint (it takes: {})",
                login_kind(wanted),
                names.join(", ")
            ),
            url: url.to_string(),
        });
    }
    let token = identity_token(identity)
        .map_err(|e| FieldError::new(StatusCode::BadIdentityTokenInvalid, e, url))?;
    let (session, event_loop) = client
        .connect_to_endpoint_directly(endpoint, token)
        .map_err(|e| FieldError::new(e.status(), e.to_string(), url))?;
    let mut running = event_loop.spawn();
    // The event loop ends with the reason when the server refuses the
    // session (it does not retry: `session_retry_limit(0)`).
    let result = tokio::select! {
        connected = session.wait_for_connection() => if connected {
            Ok(())
        } else {
            Err(FieldError::new(StatusCode::BadNotConnected, "the session was refused", url))
        },
        ended = &mut running => Err(match ended {
            Ok(status) => FieldError::new(status, status.to_string(), url),
            Err(_) => FieldError::new(StatusCode::BadNotConnected, "the session was refused", url),
        }),
        _ = tokio::time::sleep(timeout) => {
            Err(FieldError::new(
                StatusCode::BadTimeout,
                format!("no session within {} ms", timeout.as_millis()),
                url,
            ))
        }
    };
    if result.is_ok() {
        let _ = tokio::time::timeout(timeout, session.disconnect()).await;
    }
    running.abort();
    result
}

/// Asks one URL for its endpoints, checks the certificate of the one the
/// configuration would use and, when it can be used, logs in with the
/// configured identity (see [`FieldConnection::probe`]).
async fn probe_url(inner: &Arc<Inner>, server: usize, url: &str, timeout: Duration) -> Probe {
    let s = &inner.settings;
    let su = &inner.setup;
    let mut probe = Probe {
        server,
        url: url.to_string(),
        result: Ok(Vec::new()),
        matches_config: false,
        certificate: None,
        untrusted_der: None,
        login: None,
    };
    let client = base_client(su, url).request_timeout(timeout).client();
    let mut client = match client {
        Ok(c) => c,
        Err(e) => {
            probe.result = Err(FieldError::new(
                StatusCode::BadConfigurationError,
                e.join("; "),
                url,
            ));
            return probe;
        }
    };
    // The name first, with the budget a connect attempt gives it (room for
    // the resolver's retry of a lost DNS answer): a slow answer is then
    // reported as such, and does not eat the server's time to answer.
    if let Ok((host, port)) = opcua_core::comms::url::hostname_port_from_url(
        url,
        opcua_core::constants::DEFAULT_OPC_UA_SERVER_PORT,
    ) {
        let bound = crate::tcp::NAME_LOOKUP_BOUND;
        if let Err(e) = crate::tcp::resolve(url, &host, port, bound).await {
            probe.result = Err(FieldError::new(e.status(), e.to_string(), url));
            return probe;
        }
    }
    let endpoints =
        match tokio::time::timeout(timeout, client.get_server_endpoints_from_url(url)).await {
            Ok(Ok(e)) => e,
            Ok(Err(e)) => {
                probe.result = Err(FieldError::new(e.status(), format!("{e} {e:?}"), url));
                return probe;
            }
            Err(_) => {
                probe.result = Err(FieldError::new(
                    StatusCode::BadTimeout,
                    format!("no answer within {} ms", timeout.as_millis()),
                    url,
                ));
                return probe;
            }
        };
    let wanted = endpoints.iter().find(|e| {
        e.security_policy_uri.as_ref() == s.security_policy_uri
            && e.security_mode == s.security_mode
    });
    probe.matches_config = wanted.is_some();
    if let Some(e) = wanted.filter(|_| s.security_mode != MessageSecurityMode::None) {
        let der = e.server_certificate.as_ref().to_vec();
        probe.certificate = Some(if der.is_empty() {
            Err(FieldError::new(
                StatusCode::BadCertificateInvalid,
                "no server certificate",
                url,
            ))
        } else {
            let checked = (su.trust)(der.clone())
                .await
                .map_err(|st| FieldError::new(st, "field server certificate not trusted", url));
            if checked.is_err() {
                probe.untrusted_der = Some(der);
            }
            checked
        });
    }
    // Log in only where a connect would: the configured security is
    // offered and, when secured, the server's certificate is trusted.
    if let Some(e) = wanted.filter(|_| probe.certificate.as_ref().is_none_or(|c| c.is_ok())) {
        probe.login = Some(probe_login(&mut client, url, e.clone(), &s.identity, timeout).await);
    }
    probe.result = Ok(endpoints
        .iter()
        .map(|e| {
            let policy = e.security_policy_uri.as_ref();
            format!(
                "{}/{:?}",
                policy.rsplit('#').next().unwrap_or(policy),
                e.security_mode
            )
        })
        .collect());
    probe
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_outlive_the_session_by_three_keep_alives() {
        let minute = Duration::from_secs(60);
        // 1 s publishing, keep-alive 10: 60 + 30 intervals.
        let n = lifetime_count(Duration::from_secs(1), 10, minute);
        assert_eq!(n, 90);
        assert!(Duration::from_secs(1) * n > minute);
        // 50 ms publishing, keep-alive 100: the session's 1,200 intervals + 300.
        assert_eq!(
            lifetime_count(Duration::from_millis(50), 100, minute),
            1_500
        );
        // Part 4: at least three keep-alives, whatever the session timeout.
        assert_eq!(
            lifetime_count(Duration::from_secs(10), 5, Duration::ZERO),
            15
        );
        // No overflow on absurd inputs.
        assert_eq!(
            lifetime_count(Duration::from_millis(1), u32::MAX, Duration::MAX),
            u32::MAX
        );
    }
}
