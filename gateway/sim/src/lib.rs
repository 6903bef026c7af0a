#![forbid(unsafe_code)]
//! Simulated OPC UA field server for uagate.
//!
//! The simulator is a small async-opcua server that stands in for a real
//! field device. It is used by the `uagate sim` CLI subcommand, by the
//! integration tests (as the southbound server the gateway talks to) and by
//! the benchmarks (as the direct-access comparison server).
//!
//! Address space (namespace [`NAMESPACE_URI`], string node ids):
//!
//! ```text
//! Objects
//! └── Simulation                  ns=<sim>;s=Simulation           (FolderType)
//!     ├── Counter    UInt32       ns=<sim>;s=Simulation.Counter   (+1 per tick)
//!     ├── Sine       Double       ns=<sim>;s=Simulation.Sine      (period 10 s)
//!     ├── Random     Double       ns=<sim>;s=Simulation.Random    (0..100, AnalogItem)
//!     │   └── EURange Range       ns=<sim>;s=Simulation.Random.EURange
//!     ├── Toggle     Boolean      ns=<sim>;s=Simulation.Toggle
//!     ├── Text       String       ns=<sim>;s=Simulation.Text
//!     ├── Timestamp  DateTime     ns=<sim>;s=Simulation.Timestamp
//!     ├── Setpoint   Double (RW)  ns=<sim>;s=Simulation.Setpoint
//!     └── Add(a: Double, b: Double) -> Double   ns=<sim>;s=Simulation.Add
//! ```
//!
//! The standard namespace-0 `Server` object (ServerStatus, ServiceLevel,
//! ServerRedundancy, ...) is provided by async-opcua-server; [`SimHandle`]
//! lets callers change ServiceLevel and RedundancySupport at runtime.
//!
//! ```no_run
//! # async fn demo() -> Result<(), uagate_sim::SimError> {
//! let sim = uagate_sim::start(uagate_sim::SimConfig::default()).await?;
//! println!("simulator listening on {}", sim.endpoint_url);
//! sim.set_service_level(200);
//! sim.cancel();
//! sim.stopped().await;
//! # Ok(())
//! # }
//! ```

use std::{
    f64::consts::PI,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use opcua_crypto::SecurityPolicy;
use opcua_nodes::AccessLevel;
use opcua_server::{
    address_space::{AddressSpace, MethodBuilder, VariableBuilder},
    diagnostics::{DiagnosticsNodeManagerBuilder, NamespaceMetadata},
    node_manager::memory::{
        simple_node_manager, CoreNodeManager, CoreNodeManagerBuilder, InMemoryNodeManagerBuilder,
        SimpleNodeManager,
    },
    ServerBuilder, ServerEndpoint, ServerHandle, ANONYMOUS_USER_TOKEN_ID,
};
use opcua_types::{
    Argument, DataTypeId, DataValue, DateTime, ExtensionObject, MessageSecurityMode, NodeId,
    ObjectId, QualifiedName, Range, StatusCode, UAString, VariableId, VariableTypeId, Variant,
};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

pub use opcua_types::{RedundancySupport, ServerState};

/// Namespace URI of the simulator's own nodes.
pub const NAMESPACE_URI: &str = "urn:uagate:sim";

/// String identifiers (the `s=` part) of the simulator's nodes.
///
/// Combine with [`SimHandle::namespace_index`] (or use [`SimHandle::node_id`])
/// to get a full [`NodeId`].
pub mod ids {
    /// The `Simulation` folder under Objects; also the object to call `Add` on.
    pub const FOLDER: &str = "Simulation";
    /// UInt32 counter, incremented on every update tick.
    pub const COUNTER: &str = "Simulation.Counter";
    /// Double sine wave, amplitude 1, period 10 s.
    pub const SINE: &str = "Simulation.Sine";
    /// Double uniformly random in 0..100.
    pub const RANDOM: &str = "Simulation.Random";
    /// EURange property (Range 0..100) of `Random`.
    pub const RANDOM_EU_RANGE: &str = "Simulation.Random.EURange";
    /// Boolean flipped on every update tick.
    pub const TOGGLE: &str = "Simulation.Toggle";
    /// String describing the current tick.
    pub const TEXT: &str = "Simulation.Text";
    /// DateTime of the last update tick.
    pub const TIMESTAMP: &str = "Simulation.Timestamp";
    /// Writable Double (CurrentRead | CurrentWrite), not touched by the simulation.
    pub const SETPOINT: &str = "Simulation.Setpoint";
    /// Method `Add(a: Double, b: Double) -> Double`, component of the folder.
    pub const ADD: &str = "Simulation.Add";
    /// InputArguments property of `Add`.
    pub const ADD_INPUT_ARGS: &str = "Simulation.Add.InputArguments";
    /// OutputArguments property of `Add`.
    pub const ADD_OUTPUT_ARGS: &str = "Simulation.Add.OutputArguments";
}

/// Period of the `Sine` variable.
const SINE_PERIOD_SECS: f64 = 10.0;

/// Configuration of a simulator instance, passed to [`start`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimConfig {
    /// Address to listen on. Port 0 picks a free ephemeral port; the port
    /// actually bound is reported in [`SimHandle::endpoint_url`].
    pub listen: SocketAddr,
    /// Directory for the server's PKI (own certificate, private key, trusted
    /// and rejected client certificates). Created if missing.
    pub pki_dir: PathBuf,
    /// ApplicationUri of the server (also put into its certificate).
    pub application_uri: String,
    /// When true, Basic256Sha256 Sign and SignAndEncrypt endpoints are offered
    /// in addition to None, a self-signed certificate is created if needed and
    /// client certificates are trusted automatically. None is always offered.
    pub security: bool,
    /// How often the simulated values change. Must be non-zero.
    pub update_interval: Duration,
    /// Server/ServerCapabilities/OperationLimits/MaxNodesPerRead to announce
    /// and enforce (a small PLC); 0 keeps the library default.
    pub max_nodes_per_read: u32,
    /// Most monitored items per subscription to enforce (a PLC that caps
    /// them; CreateMonitoredItems beyond it is refused with
    /// BadTooManyMonitoredItems); 0 keeps the library default.
    pub max_monitored_items_per_subscription: u32,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 4841),
            pki_dir: PathBuf::from("./uagate-sim-pki"),
            application_uri: NAMESPACE_URI.to_owned(),
            security: true,
            update_interval: Duration::from_millis(500),
            max_nodes_per_read: 0,
            max_monitored_items_per_subscription: 0,
        }
    }
}

/// Errors of the simulator.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The configuration cannot be used (e.g. a zero update interval).
    #[error("invalid simulator configuration: {0}")]
    InvalidConfig(String),
    /// The listen socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// Address that was requested.
        addr: SocketAddr,
        /// Underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// async-opcua-server rejected the configuration or failed to set up.
    #[error("cannot build OPC UA server: {0}")]
    Build(String),
    /// The address space could not be populated.
    #[error("cannot populate simulator address space: {0}")]
    AddressSpace(String),
    /// The server task ended with an error.
    #[error("simulator server failed: {0}")]
    Server(String),
    /// A background task panicked or was aborted.
    #[error("simulator task failed: {0}")]
    Task(String),
}

/// Handle to a running simulator, returned by [`start`].
///
/// Dropping the handle does not stop the server; call [`SimHandle::cancel`]
/// and then [`SimHandle::stopped`] for an orderly shutdown.
pub struct SimHandle {
    /// URL clients connect to, e.g. `opc.tcp://127.0.0.1:4841/`.
    pub endpoint_url: String,
    /// Socket address actually bound.
    pub local_addr: SocketAddr,
    ns: u16,
    server: ServerHandle,
    core: Arc<CoreNodeManager>,
    server_task: JoinHandle<Result<(), String>>,
    updater_task: JoinHandle<()>,
}

impl std::fmt::Debug for SimHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimHandle")
            .field("endpoint_url", &self.endpoint_url)
            .field("local_addr", &self.local_addr)
            .field("namespace_index", &self.ns)
            .finish_non_exhaustive()
    }
}

impl SimHandle {
    /// Namespace index of [`NAMESPACE_URI`] on this server.
    pub fn namespace_index(&self) -> u16 {
        self.ns
    }

    /// Full node id of one of the simulator's nodes, e.g.
    /// `node_id(ids::COUNTER)` is `ns=<sim>;s=Simulation.Counter`.
    pub fn node_id(&self, id: &str) -> NodeId {
        NodeId::new(self.ns, id)
    }

    /// The underlying async-opcua server handle, for anything not wrapped here.
    pub fn server_handle(&self) -> &ServerHandle {
        &self.server
    }

    /// Set `Server.ServiceLevel` (ns=0;i=2267), notifying subscribers.
    /// Used to simulate a degraded or failing-over server.
    pub fn set_service_level(&self, level: u8) {
        self.server.set_service_level(level);
    }

    /// Set `Server.ServerRedundancy.RedundancySupport` (ns=0;i=3709),
    /// notifying subscribers.
    pub fn set_redundancy_support(&self, support: RedundancySupport) {
        if let Err(e) = set_redundancy(&self.core, &self.server, support) {
            warn!("cannot set RedundancySupport: {e}");
        }
    }

    /// Set `Server.ServerStatus.State`, notifying subscribers.
    pub fn set_server_state(&self, state: ServerState) {
        self.server.set_server_state(state);
    }

    /// Ask the server to stop: open connections are closed and the value
    /// updates stop. Returns immediately; await [`SimHandle::stopped`] to wait.
    pub fn cancel(&self) {
        self.server.cancel();
    }

    /// Wait until the server and its update task have ended (after
    /// [`SimHandle::cancel`], or after a fatal server error), logging any
    /// failure. Use [`SimHandle::join`] to get the failure as an error.
    pub async fn stopped(self) {
        if let Err(e) = self.join().await {
            warn!("{e}");
        }
    }

    /// Like [`SimHandle::stopped`] but reports how the server ended.
    pub async fn join(self) -> Result<(), SimError> {
        let server = self.server_task.await;
        // The updater watches the same token; make sure it ends even if the
        // server stopped on its own.
        self.server.cancel();
        let updater = self.updater_task.await;
        match server {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(SimError::Server(e)),
            Err(e) => return Err(SimError::Task(e.to_string())),
        }
        updater.map_err(|e| SimError::Task(e.to_string()))
    }
}

/// Start a simulator on a tokio task and return once it is listening.
///
/// Called by the `uagate sim` CLI, tests and benchmarks. Binding happens
/// before this returns, so the endpoint in the returned handle is connectable
/// immediately.
pub async fn start(config: SimConfig) -> Result<SimHandle, SimError> {
    if config.update_interval.is_zero() {
        return Err(SimError::InvalidConfig(
            "update_interval must be greater than zero".to_owned(),
        ));
    }

    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| SimError::Bind {
            addr: config.listen,
            source,
        })?;
    let local_addr = listener.local_addr().map_err(|source| SimError::Bind {
        addr: config.listen,
        source,
    })?;
    let host = advertised_host(local_addr.ip());
    let endpoint_url = format!("opc.tcp://{host}:{}/", local_addr.port());

    // Building may generate an RSA key pair, which is slow: keep it off the
    // async worker threads.
    let (server, handle) = {
        let config = config.clone();
        let host = host.clone();
        let url = endpoint_url.clone();
        let port = local_addr.port();
        tokio::task::spawn_blocking(move || server_builder(&config, &host, port, &url).build())
    }
    .await
    .map_err(|e| SimError::Task(e.to_string()))?
    .map_err(SimError::Build)?;

    let ns = handle
        .get_namespace_index(NAMESPACE_URI)
        .ok_or_else(|| SimError::Build(format!("namespace {NAMESPACE_URI} not registered")))?;
    let sim_nm = handle
        .node_managers()
        .get_of_type::<SimpleNodeManager>()
        .ok_or_else(|| SimError::Build("simulator node manager missing".to_owned()))?;
    let core = handle
        .node_managers()
        .get_of_type::<CoreNodeManager>()
        .ok_or_else(|| SimError::Build("core node manager missing".to_owned()))?;

    populate(&sim_nm, ns)?;
    set_redundancy(&core, &handle, RedundancySupport::None).map_err(SimError::AddressSpace)?;

    let server_task = tokio::spawn(server.run_with(listener));
    let updater_task = tokio::spawn(run_updates(
        sim_nm,
        handle.clone(),
        ns,
        config.update_interval,
    ));
    info!(
        "uagate simulator listening on {endpoint_url} (security: {})",
        config.security
    );

    Ok(SimHandle {
        endpoint_url,
        local_addr,
        ns,
        server: handle,
        core,
        server_task,
        updater_task,
    })
}

/// Host string used in endpoint URLs: the bound IP, with wildcard addresses
/// replaced by loopback and IPv6 in brackets.
fn advertised_host(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) if v4.is_unspecified() => Ipv4Addr::LOCALHOST.to_string(),
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) if v6.is_unspecified() => Ipv4Addr::LOCALHOST.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

fn server_builder(config: &SimConfig, host: &str, port: u16, endpoint_url: &str) -> ServerBuilder {
    let tokens = [ANONYMOUS_USER_TOKEN_ID.to_owned()];
    let mut builder = ServerBuilder::new()
        .without_node_managers()
        .with_node_manager(InMemoryNodeManagerBuilder::new(CoreNodeManagerBuilder));
    // The diagnostics node manager owns the namespace named after the
    // ApplicationUri. With the default config that is also the simulator's
    // namespace, and the first owner wins, so only add it when they differ.
    if config.application_uri != NAMESPACE_URI {
        builder = builder.with_node_manager(DiagnosticsNodeManagerBuilder);
    }
    builder = builder
        .application_name("uagate simulator")
        .application_uri(config.application_uri.clone())
        .product_uri("urn:uagate:sim:product")
        .pki_dir(config.pki_dir.clone())
        .host(host)
        .port(port)
        .discovery_urls(vec![endpoint_url.to_owned()])
        // Session counts in Server/ServerDiagnostics (tests check that the
        // gateway does not pile up sessions on a field server).
        .diagnostics_enabled(true)
        .with_node_manager(simple_node_manager(
            NamespaceMetadata {
                namespace_uri: NAMESPACE_URI.to_owned(),
                ..Default::default()
            },
            "uagate-sim",
        ))
        .add_endpoint("none", ServerEndpoint::new_none("/", &tokens))
        .default_endpoint("none");
    if config.max_nodes_per_read > 0 {
        builder.limits_mut().operational.max_nodes_per_read = config.max_nodes_per_read as usize;
    }
    if config.max_monitored_items_per_subscription > 0 {
        builder
            .limits_mut()
            .subscriptions
            .max_monitored_items_per_sub = config.max_monitored_items_per_subscription as usize;
    }
    if config.security {
        builder = builder
            .create_sample_keypair(true)
            .trust_client_certs(true)
            .add_endpoint(
                "basic256sha256_sign",
                (
                    "/",
                    SecurityPolicy::Basic256Sha256,
                    MessageSecurityMode::Sign,
                    &[ANONYMOUS_USER_TOKEN_ID] as &[&str],
                ),
            )
            .add_endpoint(
                "basic256sha256_sign_encrypt",
                (
                    "/",
                    SecurityPolicy::Basic256Sha256,
                    MessageSecurityMode::SignAndEncrypt,
                    &[ANONYMOUS_USER_TOKEN_ID] as &[&str],
                ),
            );
    }
    builder
}

/// Insert `node` and fail with a readable error if the id is taken.
fn insert_ok(inserted: bool, what: &str) -> Result<(), SimError> {
    if inserted {
        Ok(())
    } else {
        Err(SimError::AddressSpace(format!("cannot insert {what}")))
    }
}

/// Create the `Simulation` folder, its variables and the `Add` method.
fn populate(nm: &SimpleNodeManager, ns: u16) -> Result<(), SimError> {
    let folder = NodeId::new(ns, ids::FOLDER);
    let now = DateTime::now();
    {
        let mut guard = nm.address_space().write();
        let space: &mut AddressSpace = &mut guard;

        insert_ok(
            space.add_folder(
                &folder,
                QualifiedName::new(ns, "Simulation"),
                "Simulation",
                &ObjectId::ObjectsFolder.into(),
            ),
            ids::FOLDER,
        )?;

        let read_only: [(&str, &str, DataTypeId, Variant); 6] = [
            (
                ids::COUNTER,
                "Counter",
                DataTypeId::UInt32,
                Variant::UInt32(0),
            ),
            (ids::SINE, "Sine", DataTypeId::Double, Variant::Double(0.0)),
            (
                ids::RANDOM,
                "Random",
                DataTypeId::Double,
                Variant::Double(0.0),
            ),
            (
                ids::TOGGLE,
                "Toggle",
                DataTypeId::Boolean,
                Variant::Boolean(false),
            ),
            (
                ids::TEXT,
                "Text",
                DataTypeId::String,
                Variant::String(UAString::from("tick 0")),
            ),
            (
                ids::TIMESTAMP,
                "Timestamp",
                DataTypeId::DateTime,
                Variant::DateTime(Box::new(now)),
            ),
        ];
        for (id, name, data_type, value) in read_only {
            let type_def = if id == ids::RANDOM {
                VariableTypeId::AnalogItemType
            } else {
                VariableTypeId::BaseDataVariableType
            };
            insert_ok(
                VariableBuilder::new(&NodeId::new(ns, id), QualifiedName::new(ns, name), name)
                    .data_type(data_type)
                    .value(value)
                    .access_level(AccessLevel::CURRENT_READ)
                    .user_access_level(AccessLevel::CURRENT_READ)
                    .has_type_definition(type_def)
                    .component_of(folder.clone())
                    .insert(space),
                id,
            )?;
        }

        insert_ok(
            VariableBuilder::new(
                &NodeId::new(ns, ids::RANDOM_EU_RANGE),
                QualifiedName::new(0, "EURange"),
                "EURange",
            )
            .data_type(DataTypeId::Range)
            .value(Variant::from(ExtensionObject::from_message(Range {
                low: 0.0,
                high: 100.0,
            })))
            .has_type_definition(VariableTypeId::PropertyType)
            .property_of(NodeId::new(ns, ids::RANDOM))
            .insert(space),
            ids::RANDOM_EU_RANGE,
        )?;

        let rw = AccessLevel::CURRENT_READ | AccessLevel::CURRENT_WRITE;
        insert_ok(
            VariableBuilder::new(
                &NodeId::new(ns, ids::SETPOINT),
                QualifiedName::new(ns, "Setpoint"),
                "Setpoint",
            )
            .data_type(DataTypeId::Double)
            .value(Variant::Double(0.0))
            .access_level(rw)
            .user_access_level(rw)
            .has_type_definition(VariableTypeId::BaseDataVariableType)
            .component_of(folder.clone())
            .insert(space),
            ids::SETPOINT,
        )?;

        let add_id = NodeId::new(ns, ids::ADD);
        let inputs: [Argument; 2] = [
            ("a", DataTypeId::Double).into(),
            ("b", DataTypeId::Double).into(),
        ];
        let outputs: [Argument; 1] = [("sum", DataTypeId::Double).into()];
        let method = MethodBuilder::new(&add_id, QualifiedName::new(ns, "Add"), "Add")
            .component_of(folder.clone())
            .executable(true)
            .user_executable(true)
            .input_args(space, &NodeId::new(ns, ids::ADD_INPUT_ARGS), &inputs)
            .output_args(space, &NodeId::new(ns, ids::ADD_OUTPUT_ARGS), &outputs);
        insert_ok(method.insert(space), ids::ADD)?;
    }

    nm.inner()
        .add_method_callback(NodeId::new(ns, ids::ADD), add_method);
    Ok(())
}

/// Implementation of `Add(a, b) -> a + b`.
fn add_method(args: &[Variant]) -> Result<Vec<Variant>, StatusCode> {
    match args {
        [a, b] => {
            let (Some(a), Some(b)) = (as_f64(a), as_f64(b)) else {
                return Err(StatusCode::BadTypeMismatch);
            };
            Ok(vec![Variant::Double(a + b)])
        }
        [] | [_] => Err(StatusCode::BadArgumentsMissing),
        _ => Err(StatusCode::BadTooManyArguments),
    }
}

fn as_f64(v: &Variant) -> Option<f64> {
    match v {
        Variant::Double(d) => Some(*d),
        Variant::Float(f) => Some(f64::from(*f)),
        _ => None,
    }
}

fn set_redundancy(
    core: &CoreNodeManager,
    server: &ServerHandle,
    support: RedundancySupport,
) -> Result<(), String> {
    core.set_value(
        server.subscriptions(),
        &VariableId::Server_ServerRedundancy_RedundancySupport.into(),
        None,
        DataValue::new_now(support as i32),
    )
    .map_err(|e| e.to_string())
}

/// Values of the simulated variables at one tick.
#[derive(Debug, Clone, PartialEq)]
struct Tick {
    counter: u32,
    sine: f64,
    random: f64,
    toggle: bool,
    text: String,
}

impl Tick {
    /// Compute the values for tick number `counter`, `elapsed` after start.
    fn at(counter: u32, elapsed: Duration, random: f64) -> Self {
        Self {
            counter,
            sine: (2.0 * PI * elapsed.as_secs_f64() / SINE_PERIOD_SECS).sin(),
            random: random.clamp(0.0, 100.0),
            toggle: counter % 2 == 1,
            text: format!("tick {counter}"),
        }
    }
}

/// Update the simulated variables every `interval` until the server token is
/// cancelled.
async fn run_updates(
    nm: Arc<SimpleNodeManager>,
    server: ServerHandle,
    ns: u16,
    interval: Duration,
) {
    let ids = [
        ids::COUNTER,
        ids::SINE,
        ids::RANDOM,
        ids::TOGGLE,
        ids::TEXT,
        ids::TIMESTAMP,
    ]
    .map(|id| NodeId::new(ns, id));
    let token = server.token().clone();
    let started = Instant::now();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    // The first tick completes immediately; values already hold tick 0.
    ticker.tick().await;
    let mut counter: u32 = 0;
    loop {
        tokio::select! {
            _ = token.cancelled() => break,
            _ = ticker.tick() => {}
        }
        counter = counter.wrapping_add(1);
        let tick = Tick::at(counter, started.elapsed(), rand::random::<f64>() * 100.0);
        let now = DateTime::now();
        let values = [
            Variant::UInt32(tick.counter),
            Variant::Double(tick.sine),
            Variant::Double(tick.random),
            Variant::Boolean(tick.toggle),
            Variant::String(UAString::from(tick.text)),
            Variant::DateTime(Box::new(now)),
        ];
        let updates = ids.iter().zip(values).map(|(id, v)| {
            (
                id,
                None,
                DataValue {
                    value: Some(v),
                    status: Some(StatusCode::Good),
                    source_timestamp: Some(now),
                    server_timestamp: Some(now),
                    ..Default::default()
                },
            )
        });
        if let Err(e) = nm.set_values(server.subscriptions(), updates) {
            warn!("simulator update failed: {e}");
        }
    }
    debug!("simulator updates stopped");
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn tick_values_follow_counter() {
        let t1 = Tick::at(1, Duration::from_millis(2500), 42.0);
        assert_eq!(t1.counter, 1);
        assert!(t1.toggle);
        assert_eq!(t1.text, "tick 1");
        // Quarter period of a 10 s sine is its maximum.
        assert!((t1.sine - 1.0).abs() < 1e-9);
        assert_eq!(t1.random, 42.0);
        let t2 = Tick::at(2, Duration::ZERO, 250.0);
        assert!(!t2.toggle);
        assert_eq!(t2.random, 100.0);
        assert_eq!(t2.sine, 0.0);
    }

    #[test]
    fn add_method_checks_arguments() {
        assert_eq!(
            add_method(&[Variant::Double(2.0), Variant::Double(3.0)]),
            Ok(vec![Variant::Double(5.0)])
        );
        assert_eq!(
            add_method(&[Variant::Double(2.0)]),
            Err(StatusCode::BadArgumentsMissing)
        );
        assert_eq!(
            add_method(&[Variant::Double(2.0), Variant::from("x")]),
            Err(StatusCode::BadTypeMismatch)
        );
        assert_eq!(
            add_method(&vec![Variant::Double(1.0); 3]),
            Err(StatusCode::BadTooManyArguments)
        );
    }

    #[test]
    fn advertised_host_replaces_wildcards() {
        assert_eq!(advertised_host("0.0.0.0".parse().unwrap()), "127.0.0.1");
        assert_eq!(advertised_host("10.1.2.3".parse().unwrap()), "10.1.2.3");
        assert_eq!(advertised_host("::1".parse().unwrap()), "[::1]");
    }

    #[test]
    fn default_config_matches_documented_values() {
        let c = SimConfig::default();
        assert_eq!(c.listen, "127.0.0.1:4841".parse().unwrap());
        assert_eq!(c.pki_dir, PathBuf::from("./uagate-sim-pki"));
        assert_eq!(c.application_uri, "urn:uagate:sim");
        assert!(c.security);
        assert_eq!(c.update_interval, Duration::from_millis(500));
    }
}
