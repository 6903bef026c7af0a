#![forbid(unsafe_code)]
//! The northbound OPC UA server engine: opc.tcp listener and connection
//! drivers around the sans-IO protocol core, sessions, and the services on
//! the local address space.

pub mod admission;
mod channels;
mod control;
pub mod dispatch;
mod driver;
pub mod endpoints;
pub mod error;
pub mod fields;
mod flows;
pub mod health;
mod leases;
mod methods;
mod open;
pub mod pki;
pub mod reclaim;
pub mod reconfigure;
mod routed;
mod services;
pub mod session;
mod sessions;
mod space;
mod split;
pub mod stats;
pub mod subscriptions;
pub mod tcp;
pub mod throttle;
pub mod tls;
pub mod tls_cert;
pub mod ws;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use opcua_core::ResponseMessage;
use opcua_crypto::{SecurityPolicy, X509};
use opcua_types::{ByteString, MessageSecurityMode, NodeId};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uagate_config::{Config, UserToken};
use uagate_isolation::owner::{OwnerClass, OwnerKey};
use uagate_space::{BuildInfo, LocalSpace, SpaceLimits};
use uagate_store::Store;

pub use error::{ServiceError, StartError};
pub use reconfigure::{classify_change, ChangeReport, ReconfigureStatus, CONFIG_KEY};

/// What the engine knows about an open secure channel; built when the
/// channel opens and passed to every service call on it.
#[derive(Debug, Clone)]
pub struct ChannelInfo {
    /// Server-assigned channel id.
    pub channel_id: u32,
    /// Channel security policy.
    pub policy: SecurityPolicy,
    /// Channel security mode.
    pub mode: MessageSecurityMode,
    /// Client certificate (DER) from the OpenSecureChannel; null on None.
    pub client_certificate: ByteString,
    /// The parsed client certificate.
    pub client_cert: Option<X509>,
    /// Identity tokens the matching endpoint offers.
    pub tokens: Vec<UserToken>,
    /// Who is charged for this channel's work (resource isolation).
    pub caller: Option<admission::Caller>,
    /// The transport itself is encrypted (opc.https inside TLS): a UserName
    /// password may then arrive without the token's own encryption.
    pub transport_encrypted: bool,
    /// The transport's URL scheme: `opc.tcp`, `opc.wss` or `opc.https`
    /// (shown on the console's sessions page; a bounded metric label).
    pub transport: &'static str,
}

impl ChannelInfo {
    /// Who is charged for a request on this channel: trusted and protected
    /// callers keep their class; an ordinary caller on a secured channel is
    /// grouped by its verified application certificate, otherwise by its
    /// address.
    pub(crate) fn request_caller(&self) -> admission::Caller {
        let base = self.caller.clone().unwrap_or_else(|| admission::Caller {
            owner: OwnerKey::from_addr(std::net::Ipv4Addr::UNSPECIFIED.into()),
            class: OwnerClass::Ordinary,
        });
        if base.class != OwnerClass::Ordinary {
            return base;
        }
        match &self.client_cert {
            Some(cert) => match OwnerKey::from_application_thumbprint(cert.thumbprint().value()) {
                Some(owner) => admission::Caller { owner, ..base },
                None => base,
            },
            None => base,
        }
    }
}

/// One northbound session as the console lists it.
#[derive(Debug, Clone)]
pub struct SessionSummary {
    /// The public SessionId (NodeId text form); what closing takes.
    pub id: String,
    /// The client's session name.
    pub name: String,
    /// `opc.tcp`, `opc.wss` or `opc.https`.
    pub transport: &'static str,
    /// The security policy's short name, e.g. `Basic256Sha256`.
    pub security_policy: String,
    /// None, Sign or SignAndEncrypt.
    pub security_mode: &'static str,
    /// The resource-isolation owner charged for it.
    pub owner: Option<String>,
    /// The user (name, `anonymous`, or the certificate's thumbprint).
    pub user: String,
    /// When it was created.
    pub created: Option<std::time::SystemTime>,
    /// Its subscriptions.
    pub subscriptions: usize,
}

/// Shared state of the running server.
pub struct Engine {
    config: Config,
    store: Store,
    /// Certificates, application description and offered endpoints.
    endpoints: endpoints::Endpoints,
    /// The local address space and the mounted field connections.
    space: space::AddressSpace,
    /// Northbound sessions and their subscriptions.
    sessions: sessions::SessionTable,
    /// Admission, the request queue and scheduler, statistics.
    pipeline: dispatch::Pipeline,
    /// Open secure channels and reclaimable connections.
    channels: channels::Channels,
    /// Server state, ServiceLevel and the configuration in force.
    control: control::ServerControl,
}

/// How often the TLS certificate files are checked for a replacement.
const TLS_WATCH_PERIOD: Duration = Duration::from_secs(2);

/// A running gateway; dropping it does not stop it, call [`Gateway::shutdown`].
pub struct Gateway {
    /// Where opc.tcp actually listens (the port is resolved when 0 was configured).
    pub opc_tcp_addr: SocketAddr,
    /// The opc.tcp endpoint URL advertised to clients.
    pub endpoint_url: String,
    /// Where the TLS listener (opc.wss + opc.https) actually listens.
    pub tls_addr: SocketAddr,
    /// The opc.wss endpoint URL advertised to clients.
    pub wss_url: String,
    /// The opc.https endpoint URL advertised to clients.
    pub https_url: String,
    /// The engine, for in-process inspection (tests, console).
    pub engine: Arc<Engine>,
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Gateway {
    /// Stops accepting, closes every connection and waits for the tasks.
    pub async fn shutdown(self) {
        self.engine.space.close_fields().await;
        self.cancel.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
    }

    /// A token cancelled when the gateway shuts down.
    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }
}

impl Engine {
    /// The store the engine reads users and the trust list from.
    pub fn store(&self) -> &Store {
        &self.store
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
    pub fn endpoints(&self) -> &[endpoints::Offered] {
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

    /// Publishes the current state and ServiceLevel on the Server object.
    /// Called at start, after every state change and by housekeeping.
    pub fn refresh_server_state(&self) {
        self.control.publish(&self.space);
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

    /// Open (connections, secure channels) per transport.
    pub fn transport_stats(&self) -> Vec<(&'static str, i64, i64)> {
        self.pipeline.stats().transports()
    }

    /// Subscriptions and monitored items of all sessions.
    pub fn subscription_counts(&self) -> (usize, usize) {
        self.sessions.subscription_counts()
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

    /// Probes every URL of a field connection (console "test connection").
    pub async fn field_probe(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Option<Vec<uagate_field::Probe>> {
        let conn = self.space.field(name)?;
        Some(conn.probe(timeout).await)
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

    /// Forgets channel `channel_id` everywhere: its responder, its parked
    /// requests' charges and its unactivated sessions. Called by its
    /// connection driver when the connection ends.
    pub(crate) fn channel_closed(&self, channel_id: u32) {
        self.channels.close(channel_id);
        self.pipeline.channel_closed(channel_id);
        self.sessions.channel_closed(channel_id);
    }

    /// Removes timed-out sessions; run every second by the housekeeping task.
    fn expire_sessions(&self) {
        let count = self.sessions.expire(std::time::Instant::now());
        self.space.publish_session_count(count);
    }
}

fn host_name() -> String {
    opcua_crypto::hostname().unwrap_or_else(|_| "localhost".into())
}

/// Starts the gateway: binds the listeners, loads or creates the instance
/// certificate in `data_dir`, and spawns the accept loop and housekeeping.
pub async fn start(config: Config, store: Store, data_dir: &Path) -> Result<Gateway, StartError> {
    let plan = uagate_isolation::plan::Plan::build(&config)
        .map_err(|e| StartError::Plan(e.to_string()))?;
    let listener = tokio::net::TcpListener::bind(config.listen.opc_tcp)
        .await
        .map_err(|source| StartError::Bind {
            addr: config.listen.opc_tcp,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        addr: config.listen.opc_tcp,
        source,
    })?;
    let hostname = host_name();
    let host = match &config.listen.public_host {
        Some(h) => h.clone(),
        None if addr.ip().is_unspecified() => hostname.clone(),
        None => addr.ip().to_string(),
    };
    let endpoint_url = format!("opc.tcp://{host}:{}/", addr.port());
    let tls_bind = config.listen.tls_addr();
    let tls_listener = tokio::net::TcpListener::bind(tls_bind)
        .await
        .map_err(|source| StartError::Bind {
            addr: tls_bind,
            source,
        })?;
    let tls_addr = tls_listener
        .local_addr()
        .map_err(|source| StartError::Bind {
            addr: tls_bind,
            source,
        })?;
    let wss_url = format!("opc.wss://{host}:{}/", tls_addr.port());
    let https_url = format!("opc.https://{host}:{}/", tls_addr.port());
    let application_uri = config
        .server
        .application_uri
        .clone()
        .unwrap_or_else(|| format!("urn:uagate:{hostname}"));
    let mut hosts = vec![
        hostname.clone(),
        "localhost".to_string(),
        "127.0.0.1".to_string(),
    ];
    if !addr.ip().is_unspecified() && !hosts.contains(&addr.ip().to_string()) {
        hosts.push(addr.ip().to_string());
    }
    if !hosts.contains(&host) {
        hosts.push(host.clone());
    }
    let identity = pki::load_or_create(
        data_dir,
        &config.server.application_name,
        &application_uri,
        &hosts,
    )?;
    let tls_identity = tls_cert::TlsIdentity::load_or_create(data_dir, &hosts)
        .map_err(|e| StartError::Tls(e.to_string()))?;
    let application = endpoints::application(
        &config.server.application_name,
        &application_uri,
        &[endpoint_url.clone(), wss_url.clone(), https_url.clone()],
    );
    let urls = endpoints::Urls {
        tcp: endpoint_url.clone(),
        wss: wss_url.clone(),
        https: https_url.clone(),
    };
    let endpoints = endpoints::Endpoints::new(
        identity,
        tls_identity,
        application,
        &urls,
        &config.effective_endpoints(),
    );
    // The logical channel of opc.https; its responses are routed by request id.
    let (https_tx, https_rx) = mpsc::channel(1024);
    let s = &config.server;
    let limits = SpaceLimits {
        max_nodes_per_read: s.max_nodes_per_read,
        max_nodes_per_browse: s.max_nodes_per_browse,
        max_nodes_per_translate: s.max_nodes_per_translate,
        max_nodes_per_register: s.max_nodes_per_register,
        max_nodes_per_write: s.max_nodes_per_write,
        max_nodes_per_method_call: s.max_nodes_per_method_call,
        max_monitored_items_per_call: s.max_monitored_items_per_call,
        max_references_per_node: s.max_references_per_node,
        max_browse_continuation_points: s.max_browse_continuation_points,
        max_sessions: s.max_session_count,
        max_byte_string_length: s.max_message_size,
        ..SpaceLimits::default()
    };
    let build = BuildInfo {
        product_uri: "urn:uagate".into(),
        manufacturer_name: "uagate".into(),
        product_name: "uagate OPC UA gateway".into(),
        software_version: env!("CARGO_PKG_VERSION").into(),
        build_number: env!("CARGO_PKG_VERSION").into(),
        build_date: opcua_types::DateTime::now(),
    };
    // A maintenance state requested before a restart stays in force.
    let requested = control::stored_state(&store).await;
    let mut space = LocalSpace::new(
        &application_uri,
        build,
        &limits,
        opcua_types::DateTime::now(),
        config.server.demo_nodes,
    );
    space.set_hostname(&hostname);
    let engine = Arc::new(Engine {
        control: control::ServerControl::new(&config, &application_uri, requested),
        pipeline: dispatch::Pipeline::new(plan, s.max_message_size),
        sessions: sessions::SessionTable::new(s.max_session_count as usize),
        config,
        store,
        endpoints,
        space: space::AddressSpace::new(space),
        channels: channels::Channels::new(https_tx),
    });
    engine.refresh_server_state();
    let cancel = CancellationToken::new();
    let field_tasks = engine
        .start_fields(&application_uri, &data_dir.join("pki"), &cancel)
        .await;
    let accept = tokio::spawn(tcp::accept_loop(engine.clone(), listener, cancel.clone()));
    let dispatcher = tokio::spawn(engine.clone().dispatch_loop(cancel.clone()));
    let seen = engine.config_seen().await;
    let config_watch = tokio::spawn(engine.clone().watch_config(seen, cancel.clone()));
    let https_router = engine
        .endpoints
        .https()
        .map(|https| tokio::spawn(https.clone().route(https_rx)));
    // A TLS certificate replaced on disk (`uagate tls set`) is picked up
    // without dropping any connection.
    let tls_watch = match engine.endpoints.tls_identity().cloned() {
        Some(identity) => {
            let dir = data_dir.to_path_buf();
            let cancel = cancel.clone();
            tokio::spawn(async move { identity.watch(&dir, TLS_WATCH_PERIOD, cancel).await })
        }
        None => tokio::spawn(async {}),
    };
    let tls_accept = {
        let identity = engine
            .endpoints
            .tls_identity()
            .ok_or_else(|| StartError::Tls("no TLS identity".into()))?;
        let server_config = match engine.config.listen.tls_client_auth {
            uagate_config::TlsClientAuth::Off => identity.server_config(),
            uagate_config::TlsClientAuth::Optional => identity
                .server_config_with_client_auth(false)
                .map_err(|e| StartError::Tls(e.to_string()))?,
            uagate_config::TlsClientAuth::Required => identity
                .server_config_with_client_auth(true)
                .map_err(|e| StartError::Tls(e.to_string()))?,
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(server_config);
        tokio::spawn(tls::accept_loop(
            engine.clone(),
            tls_listener,
            acceptor,
            cancel.clone(),
        ))
    };
    let housekeeping = {
        let engine = engine.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tick.tick() => {
                        engine.expire_sessions();
                        engine.sync_field_demand();
                    }
                }
            }
        })
    };
    // The demo counter gives newcomers (and the notification benchmark) a
    // value that changes every 100 ms; only with the demo nodes.
    let demo_counter = engine.config.server.demo_nodes.then(|| {
        let engine = engine.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let node = NodeId::new(2, uagate_space::DEMO_COUNTER);
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            let mut n: u32 = 0;
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tick.tick() => {
                        n = n.wrapping_add(1);
                        let value = opcua_types::DataValue::new_now(n);
                        if let Err(e) = engine.space.local_mut().set_value(&node, value) {
                            tracing::warn!(error = %e, "demo counter update failed");
                            break;
                        }
                    }
                }
            }
        })
    });
    let subscription_timer = {
        let engine = engine.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            loop {
                let next = engine.tick_subscriptions();
                // Sleep until the next deadline, at most 1 s, or until woken.
                let wake = next
                    .unwrap_or_else(|| std::time::Instant::now() + Duration::from_secs(1))
                    .min(std::time::Instant::now() + Duration::from_secs(1));
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = engine.sessions.changed() => {},
                    _ = tokio::time::sleep_until(wake.into()) => {},
                }
            }
        })
    };
    tracing::info!(%endpoint_url, "opc.tcp listening");
    tracing::info!(%wss_url, %https_url, "opc.wss and opc.https listening");
    // The router ends with the engine's responder; it is not waited for.
    drop(https_router);
    Ok(Gateway {
        opc_tcp_addr: addr,
        endpoint_url,
        tls_addr,
        wss_url,
        https_url,
        engine,
        cancel,
        tasks: [
            accept,
            dispatcher,
            housekeeping,
            subscription_timer,
            config_watch,
            tls_accept,
            tls_watch,
        ]
        .into_iter()
        .chain(demo_counter)
        .chain(field_tasks)
        .collect(),
    })
}
