#![forbid(unsafe_code)]
//! The northbound OPC UA server engine: opc.tcp listener and connection
//! drivers around the sans-IO protocol core, sessions, and the services on
//! the local address space.

pub mod admission;
mod alarms;
mod channels;
pub mod config_store;
mod control;
pub mod dispatch;
mod driver;
pub mod endpoints;
mod engine;
pub mod error;
pub mod fd_limit;
pub mod fields;
mod flows;
pub mod health;
mod leases;
pub mod level;
mod methods;
mod open;
mod park;
pub mod pki;
pub mod reclaim;
pub mod reconfigure;
mod routed;
pub mod samples;
mod services;
pub mod session;
mod session_diag;
mod sessions;
mod space;
mod split;
pub mod standing;
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

use opcua_crypto::{SecurityPolicy, X509};
use opcua_types::{ByteString, MessageSecurityMode, NodeId};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uagate_config::{Config, UserToken};
use uagate_isolation::owner::{OwnerClass, OwnerKey};
use uagate_space::{BuildInfo, LocalSpace, SpaceLimits};
use uagate_store::Store;

use crate::channels::Channels;
use crate::control::ServerControl;
use crate::dispatch::Pipeline;
use crate::endpoints::{Endpoints, Urls};
use crate::sessions::SessionTable;
use crate::space::AddressSpace;

pub use config_store::{CONFIG_KEY, NODE_CONFIG_KEY};
pub use driver::SEND_STALL;
pub use engine::Engine;
pub use error::{ServiceError, StartError};
pub use reconfigure::{classify_change, decide, ChangeReport, Decision, ReconfigureStatus};

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
    /// The accounting owner of that certificate (its application
    /// thumbprint), worked out once when the channel opens: every request
    /// is charged to it ([`ChannelInfo::request_caller`]).
    pub application_owner: Option<OwnerKey>,
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
    /// The client's address (`None` where unknown): what the login
    /// throttle locks out together with a user name.
    pub peer: Option<std::net::IpAddr>,
}

impl ChannelInfo {
    /// The accounting owner of a verified client certificate (see
    /// [`ChannelInfo::application_owner`]). Called when a channel opens
    /// (and when an opc.https connection presents one): its thumbprint
    /// re-encodes and hashes the certificate, too much to do per request.
    pub(crate) fn owner_of(cert: &X509) -> Option<OwnerKey> {
        OwnerKey::from_application_thumbprint(cert.thumbprint().value())
    }

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
        match &self.application_owner {
            Some(owner) => admission::Caller {
                owner: owner.clone(),
                ..base
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

/// How often the TLS certificate files are checked for a replacement.
const TLS_WATCH_PERIOD: Duration = Duration::from_secs(2);

/// This machine's host name (the default application URI and endpoint host).
pub fn host_name() -> String {
    opcua_crypto::hostname().unwrap_or_else(|_| "localhost".into())
}

/// Binds a listener on `addr`; returns it with the address it actually
/// listens on (the port is resolved when 0 was configured).
async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), StartError> {
    let failed = |source| StartError::Bind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(failed)?;
    let local = listener.local_addr().map_err(failed)?;
    Ok((listener, local))
}

/// When this build was made (BuildInfo.BuildDate): recorded by the build
/// script, see `build.rs`. Clients show it beside the version to tell two
/// builds of one version apart.
fn build_date() -> opcua_types::DateTime {
    let seconds: i64 = env!("UAGATE_BUILD_EPOCH").parse().unwrap_or(0);
    chrono::DateTime::from_timestamp(seconds, 0)
        .map(opcua_types::DateTime::from)
        .unwrap_or_else(opcua_types::DateTime::null)
}

/// The host names and addresses the instance and TLS certificates name:
/// the host name, localhost, the listen address when specific, and the
/// advertised `host`.
fn certificate_hosts(hostname: &str, host: &str, addr: SocketAddr) -> Vec<String> {
    let mut hosts = vec![
        hostname.to_string(),
        "localhost".to_string(),
        "127.0.0.1".to_string(),
    ];
    if !addr.ip().is_unspecified() && !hosts.contains(&addr.ip().to_string()) {
        hosts.push(addr.ip().to_string());
    }
    if !hosts.iter().any(|h| h == host) {
        hosts.push(host.to_string());
    }
    hosts
}

/// The gateway's OPC UA application URI: `[server] application_uri`, or
/// `urn:uagate:<hostname>`. Called at start (and by the pair, which names
/// the appliance by it).
pub fn application_uri(config: &Config, hostname: &str) -> String {
    config
        .server
        .application_uri
        .clone()
        .unwrap_or_else(|| format!("urn:uagate:{hostname}"))
}

/// The local address space at start: the Server object with the limits
/// of `[server]` and this build, the gateway namespace, and the demo nodes
/// when configured.
fn local_space(config: &Config, application_uri: &str, hostname: &str) -> LocalSpace {
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
        // What CreateMonitoredItems grants: a client reading 100 ms here
        // while 50 ms items are revised to 50 ms was told two things.
        min_supported_sample_rate: s.min_sampling_interval.as_secs_f64() * 1000.0,
        max_subscriptions_per_session: s.max_subscriptions_per_session,
        max_monitored_items_per_subscription: s.max_monitored_items_per_subscription,
        max_monitored_items_queue_size: s.max_queue_size,
        ..SpaceLimits::default()
    };
    let build = BuildInfo {
        product_uri: "urn:uagate".into(),
        manufacturer_name: "uagate".into(),
        product_name: "uagate OPC UA gateway".into(),
        software_version: env!("CARGO_PKG_VERSION").into(),
        build_number: env!("CARGO_PKG_VERSION").into(),
        build_date: build_date(),
    };
    let mut space = LocalSpace::new(
        application_uri,
        build,
        &limits,
        opcua_types::DateTime::now(),
        s.demo_nodes,
    );
    space.set_hostname(hostname);
    space
}

/// Creates the application instance certificate `start` would create for
/// `config` in `data_dir` (or loads the one there) and returns it (DER),
/// before the gateway starts: `uagate demo` places it in its simulators'
/// trust lists first. `start` then finds and uses it (same names: the
/// listen address's IP, the host name, localhost).
pub fn prepare_instance_certificate(
    config: &Config,
    data_dir: &Path,
) -> Result<Vec<u8>, StartError> {
    let addr = config.listen.opc_tcp;
    let hostname = host_name();
    let host = match &config.listen.public_host {
        Some(h) => h.clone(),
        None if addr.ip().is_unspecified() => hostname.clone(),
        None => addr.ip().to_string(),
    };
    let identity = pki::load_or_create(
        data_dir,
        &config.server.application_name,
        &application_uri(config, &hostname),
        &certificate_hosts(&hostname, &host, addr),
    )?;
    identity
        .cert
        .to_der()
        .map_err(|e| StartError::DataDir(e.to_string()))
}

/// Starts the gateway: binds the listeners, loads or creates the instance
/// certificate in `data_dir`, and spawns the accept loop and housekeeping.
pub async fn start(config: Config, store: Store, data_dir: &Path) -> Result<Gateway, StartError> {
    let plan = uagate_isolation::plan::Plan::build(&config)
        .map_err(|e| StartError::Plan(e.to_string()))?;
    // One descriptor per channel: the soft limit is often far below what
    // max_channel_count needs (and the hard limit allows).
    fd_limit::raise_for(&config);
    let (listener, addr) = bind(config.listen.opc_tcp).await?;
    let hostname = host_name();
    let host = match &config.listen.public_host {
        Some(h) => h.clone(),
        None if addr.ip().is_unspecified() => hostname.clone(),
        None => addr.ip().to_string(),
    };
    let (tls_listener, tls_addr) = bind(config.listen.tls_addr()).await?;
    let urls = Urls {
        tcp: format!("opc.tcp://{host}:{}/", addr.port()),
        wss: format!("opc.wss://{host}:{}/", tls_addr.port()),
        https: format!("opc.https://{host}:{}/", tls_addr.port()),
    };
    let application_uri = application_uri(&config, &hostname);
    let hosts = certificate_hosts(&hostname, &host, addr);
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
        &[urls.tcp.clone(), urls.wss.clone(), urls.https.clone()],
    );
    let endpoints = Endpoints::new(
        identity,
        tls_identity,
        application,
        &urls,
        &config.effective_endpoints(),
    );
    // The logical channel of opc.https; its responses are routed by request id.
    let (https_tx, https_rx) = mpsc::channel(1024);
    // A maintenance state requested before a restart stays in force.
    let requested = control::stored_state(&store).await;
    let space = local_space(&config, &application_uri, &hostname);
    let engine = Arc::new(Engine {
        endpoints,
        channels: Channels::new(https_tx),
        sessions: SessionTable::new(config.server.max_session_count as usize),
        pipeline: Pipeline::new(plan, config.server.max_message_size),
        control: ServerControl::new(&config, &application_uri, requested),
        space: AddressSpace::new(space),
        refreshes: Default::default(),
        field_kit: Default::default(),
        samples: Default::default(),
        started: std::time::Instant::now(),
        heartbeat_ms: Default::default(),
        config,
        store,
    });
    engine.refresh_server_state();
    let cancel = CancellationToken::new();
    engine
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
    let tls_watch = spawn_tls_watch(&engine, data_dir, &cancel);
    let tls_accept = spawn_tls_accept(&engine, tls_listener, &cancel)?;
    let housekeeping = tokio::spawn(housekeeping(engine.clone(), cancel.clone()));
    // The demo counter gives newcomers (and the notification benchmark) a
    // value that changes every 100 ms; only with the demo nodes.
    let demo_counter = engine
        .config
        .server
        .demo_nodes
        .then(|| tokio::spawn(demo_counter(engine.clone(), cancel.clone())));
    let subscription_timer = tokio::spawn(engine.clone().subscription_timer(cancel.clone()));
    tracing::info!(endpoint_url = %urls.tcp, "opc.tcp listening");
    tracing::info!(wss_url = %urls.wss, https_url = %urls.https, "opc.wss and opc.https listening");
    // The router ends with the engine's responder; it is not waited for.
    drop(https_router);
    Ok(Gateway {
        opc_tcp_addr: addr,
        endpoint_url: urls.tcp,
        tls_addr,
        wss_url: urls.wss,
        https_url: urls.https,
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
        .collect(),
    })
}

/// Spawns the watch of the TLS certificate files: a certificate replaced
/// on disk (`uagate tls set`) is picked up without dropping any connection.
fn spawn_tls_watch(engine: &Engine, data_dir: &Path, cancel: &CancellationToken) -> JoinHandle<()> {
    match engine.endpoints.tls_identity().cloned() {
        Some(identity) => {
            let dir = data_dir.to_path_buf();
            let cancel = cancel.clone();
            tokio::spawn(async move { identity.watch(&dir, TLS_WATCH_PERIOD, cancel).await })
        }
        None => tokio::spawn(async {}),
    }
}

/// Spawns the accept loop of the TLS listener (opc.wss and opc.https),
/// with client certificates as `[listen] tls_client_auth` asks.
fn spawn_tls_accept(
    engine: &Arc<Engine>,
    listener: TcpListener,
    cancel: &CancellationToken,
) -> Result<JoinHandle<()>, StartError> {
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
    Ok(tokio::spawn(tls::accept_loop(
        engine.clone(),
        listener,
        acceptor,
        cancel.clone(),
    )))
}

/// Once a second until `cancel`: expires idle sessions and hands the
/// field connections the items the sessions need.
async fn housekeeping(engine: Arc<Engine>, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let every = samples::SAMPLE_INTERVAL.as_secs().max(1);
    let mut n: u64 = 0;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tick.tick() => {
                engine.expire_sessions();
                engine.sync_field_demand();
                engine.update_service_level();
                engine.beat();
                if n.is_multiple_of(every) {
                    engine.take_sample();
                }
                n += 1;
            }
        }
    }
}

/// Every 100 ms until `cancel`: counts the demo counter node up. After a
/// stall (a busy host) the next step comes 100 ms after the late one, not
/// as a burst of the missed ones, so that a client sampling the counter
/// sees it step by one.
async fn demo_counter(engine: Arc<Engine>, cancel: CancellationToken) {
    let node = NodeId::new(2, uagate_space::DEMO_COUNTER);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// BuildInfo.BuildDate is when the build was made, not when the
    /// gateway started: two starts a second apart report the same date,
    /// and it is not in the future.
    #[test]
    fn the_build_date_is_the_builds_not_the_starts() {
        let read = || {
            let space = local_space(&Config::default(), "urn:uagate:test", "test");
            let read = opcua_types::ReadValueId {
                node_id: opcua_types::NodeId::new(0, 2266u32), // BuildInfo.BuildDate
                attribute_id: opcua_types::AttributeId::Value as u32,
                ..Default::default()
            };
            let value = space.read(
                opcua_types::DateTime::now(),
                &read,
                opcua_types::TimestampsToReturn::Neither,
                0.0,
            );
            match value.value {
                Some(opcua_types::Variant::DateTime(date)) => *date,
                other => panic!("BuildDate: {other:?}"),
            }
        };
        let first = read();
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let second = read();
        assert_eq!(first, second);
        assert!(first.as_chrono() <= chrono::Utc::now());
        assert!(first.as_chrono().timestamp() > 1_700_000_000, "{first:?}");
    }
}
