#![forbid(unsafe_code)]
//! The declarative configuration document of uagate (one TOML file, see
//! docs/config.md). Parsed strictly: unknown keys are an error, and
//! [`Config::validate`] names the offending setting for every bad value.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};

mod field;
mod node;

pub use node::{SplitDocument, NODE_LOCAL_KEYS};

pub use field::{
    BackoffStrategy, FieldEndpoint, FieldIdentity, FieldRedundancy, FieldServer,
    OperationLimitOverrides, ReconnectSettings, MAX_ALTERNATES, MAX_FIELD_ENDPOINTS,
    MAX_FIELD_SERVERS, MAX_FIELD_SERVER_NAME_LEN,
};

/// Errors from parsing or validating a configuration document.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The text is not valid TOML or does not match the schema (unknown key, wrong type).
    #[error("configuration is not valid: {0}")]
    Parse(String),
    /// A value is out of range or inconsistent; `setting` is its dotted path.
    #[error("invalid setting `{setting}`: {message}")]
    Invalid {
        /// Dotted path of the offending setting, e.g. `server.max_buffer_size`.
        setting: String,
        /// What is wrong with it.
        message: String,
    },
    /// The document could not be written as TOML (not expected for a
    /// [`Config`]; reported instead of storing a partial text).
    #[error("configuration cannot be written as TOML: {0}")]
    Serialize(String),
}

/// Longest line, in bytes, and most lines kept from a parser's message: the
/// TOML error quotes the offending line (and a key it did not expect),
/// which a hostile document makes as long as it likes.
const MAX_PARSE_LINE: usize = 200;
const MAX_PARSE_LINES: usize = 12;

/// A parser's refusal as [`ConfigError::Parse`], each line shortened to
/// [`MAX_PARSE_LINE`] bytes (on a character boundary, marked with `…`).
pub(crate) fn parse_error<E: std::fmt::Display>(e: E) -> ConfigError {
    let text = e.to_string();
    let lines: Vec<String> = text
        .lines()
        .take(MAX_PARSE_LINES)
        .map(|line| {
            if line.len() <= MAX_PARSE_LINE {
                return line.to_string();
            }
            let mut end = MAX_PARSE_LINE;
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}…", &line[..end])
        })
        .collect();
    ConfigError::Parse(lines.join("\n"))
}

fn invalid(setting: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        setting: setting.to_string(),
        message: message.into(),
    }
}

/// The whole configuration document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Listening addresses.
    pub listen: Listen,
    /// Server-wide limits and identity.
    pub server: Server,
    /// Resource isolation: profile, stage overrides, trusted owners, ingress rules.
    pub isolation: Isolation,
    /// Endpoints offered; empty means the default set (see [`Config::effective_endpoints`]).
    pub endpoints: Vec<Endpoint>,
    /// How this server presents itself in a redundant set (Server.ServerRedundancy).
    pub redundancy: Redundancy,
    /// The field OPC UA servers the gateway connects to as a client
    /// (`[[field_servers]]`, at most [`MAX_FIELD_SERVERS`]).
    pub field_servers: Vec<FieldServer>,
}

/// The RedundancySupport this server announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedundancyMode {
    /// Standalone server.
    #[default]
    None,
    /// Cold failover.
    Cold,
    /// Warm failover.
    Warm,
    /// Hot failover.
    Hot,
    /// Transparent redundancy.
    Transparent,
    /// Hot and mirrored.
    HotAndMirrored,
}

/// `[redundancy]`: what Server.ServerRedundancy shows (Part 5 §6.3.7-6.3.9).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Redundancy {
    /// RedundancySupport; the node takes the matching subtype.
    pub support: RedundancyMode,
    /// ServerUriArray: application URIs of the other servers of the set
    /// (non-transparent modes only).
    pub server_uris: Vec<String>,
    /// CurrentServerId for transparent redundancy; default: our application URI.
    pub current_server_id: Option<String>,
}

/// `[listen]`: where each transport listens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Listen {
    /// opc.tcp listener.
    pub opc_tcp: SocketAddr,
    /// opc.wss + opc.https listener (one TLS port). Default: the opc_tcp
    /// address with port 4843, or an ephemeral port when opc_tcp uses port 0
    /// (see [`Listen::tls_addr`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<SocketAddr>,
    /// Mutual TLS on the opc.wss/opc.https listener: `off` (default; no
    /// client certificate is asked for), `optional` (a client may present
    /// one; it must then be on the trust list) or `required`.
    pub tls_client_auth: TlsClientAuth,
    /// Browser console and REST API (HTTPS). Default: the opc_tcp address
    /// with port 8443, or an ephemeral port when opc_tcp uses port 0 (see
    /// [`Listen::console_addr`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub console: Option<SocketAddr>,
    /// A scrape address for Prometheus: plain HTTP, `GET /metrics` only,
    /// no token. Unset (the default), metrics are served only on the
    /// console listener and need a Bearer token. Bind it to a management
    /// network address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<SocketAddr>,
    /// The appliance pair's replication listener (the standby and the
    /// primary reach each other here). Default: the opc_tcp address with
    /// port 4850, or an ephemeral port when opc_tcp uses port 0 (see
    /// [`Listen::pair_addr`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pair: Option<SocketAddr>,
    /// Host name put in endpoint URLs; default: the machine's host name, or
    /// the listen IP when it is not a wildcard address.
    pub public_host: Option<String>,
}

impl Default for Listen {
    fn default() -> Self {
        Listen {
            opc_tcp: ([0, 0, 0, 0], 4840).into(),
            tls: None,
            tls_client_auth: TlsClientAuth::Off,
            console: None,
            metrics: None,
            pair: None,
            public_host: None,
        }
    }
}

/// Whether the TLS listener asks clients for a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TlsClientAuth {
    /// No client certificate is asked for.
    #[default]
    Off,
    /// A client may present a certificate; it must be trusted.
    Optional,
    /// Every client must present a trusted certificate.
    Required,
}

/// The default console (HTTPS) port.
pub const DEFAULT_CONSOLE_PORT: u16 = 8443;

/// The default port of the opc.wss + opc.https listener.
pub const DEFAULT_TLS_PORT: u16 = 4843;

/// The default port of the appliance pair's replication listener.
pub const DEFAULT_PAIR_PORT: u16 = 4850;

impl Listen {
    /// A listener's default address: the opc_tcp IP with `port`, or port 0
    /// (ephemeral) when opc_tcp's port is 0, so test and side-by-side
    /// instances never collide.
    fn derived(&self, port: u16) -> SocketAddr {
        let port = if self.opc_tcp.port() == 0 { 0 } else { port };
        SocketAddr::new(self.opc_tcp.ip(), port)
    }

    /// Where the console binds: `console` if set, else the opc_tcp address
    /// with port 8443 (an ephemeral port when opc_tcp's port is 0).
    pub fn console_addr(&self) -> SocketAddr {
        self.console
            .unwrap_or_else(|| self.derived(DEFAULT_CONSOLE_PORT))
    }

    /// The opc.wss + opc.https listener address: `tls`, or the
    /// opc_tcp address with port 4843 (an ephemeral port when opc_tcp's
    /// port is 0, so test and side-by-side instances never collide).
    pub fn tls_addr(&self) -> SocketAddr {
        self.tls.unwrap_or_else(|| self.derived(DEFAULT_TLS_PORT))
    }

    /// Where the appliance pair's replication listener binds: `pair`, or
    /// the opc_tcp address with port 4850 (an ephemeral port when opc_tcp's
    /// port is 0). Read by the pair when it starts its listener.
    pub fn pair_addr(&self) -> SocketAddr {
        self.pair.unwrap_or_else(|| self.derived(DEFAULT_PAIR_PORT))
    }

    /// Every listener of the document in the order they are checked: its
    /// setting, the address it binds (its default when unset; `None` for
    /// an unset `metrics`), and the default's port when it is derived
    /// from opc_tcp (for the message).
    fn listeners(&self) -> [(&'static str, Option<SocketAddr>, Option<u16>); 5] {
        let derived = |set: Option<SocketAddr>, port: u16| set.is_none().then_some(port);
        [
            ("listen.opc_tcp", Some(self.opc_tcp), None),
            (
                "listen.tls",
                Some(self.tls_addr()),
                derived(self.tls, DEFAULT_TLS_PORT),
            ),
            (
                "listen.console",
                Some(self.console_addr()),
                derived(self.console, DEFAULT_CONSOLE_PORT),
            ),
            ("listen.metrics", self.metrics, None),
            (
                "listen.pair",
                Some(self.pair_addr()),
                derived(self.pair, DEFAULT_PAIR_PORT),
            ),
        ]
    }

    /// Refuses two listeners that could not both bind (see [`binds_clash`]),
    /// defaults included, so that a document `run` cannot start is refused
    /// when it is imported, planned or sent to the REST API. The error
    /// names the later setting of [`Listen::listeners`] and the message
    /// the earlier one it clashes with.
    fn validate_addresses(&self) -> Result<(), ConfigError> {
        let listeners = self.listeners();
        for (i, &(setting, addr, default_port)) in listeners.iter().enumerate() {
            let Some(addr) = addr else { continue };
            for &(other, other_addr, other_default) in &listeners[..i] {
                let Some(other_addr) = other_addr else {
                    continue;
                };
                if !binds_clash(addr, other_addr) {
                    continue;
                }
                let which = match default_port {
                    Some(port) => format!(
                        "{addr} (the default: listen.opc_tcp's IP, port {port}; set {setting})"
                    ),
                    None => addr.to_string(),
                };
                let its = if other_default.is_some() {
                    "its default "
                } else {
                    ""
                };
                return Err(invalid(
                    setting,
                    format!("{which} is already used by {other} ({its}{other_addr})"),
                ));
            }
        }
        Ok(())
    }
}

/// Whether two listeners could not both bind: the same nonzero port on the
/// same IP, or on a wildcard address (`0.0.0.0`, `::`) that covers the
/// other. Port 0 (ephemeral) never clashes.
fn binds_clash(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// `[server]`: identity and limits, named after the reference documents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Server {
    /// ApplicationName in the application description and certificate.
    pub application_name: String,
    /// ApplicationUri; default `urn:uagate:<hostname>`.
    pub application_uri: Option<String>,
    /// Most concurrent sessions (BadTooManySessions beyond).
    pub max_session_count: u32,
    /// Most concurrent secure channels / connections.
    pub max_channel_count: u32,
    /// Largest request message in bytes.
    pub max_message_size: u32,
    /// Largest chunk (transport buffer) in bytes.
    pub max_buffer_size: u32,
    /// Requests queued per server before BadTooManyOperations/BadServerTooBusy (later issue).
    pub max_queued_request_count: u32,
    /// Requests executing at once (later issue).
    pub max_request_thread_count: u32,
    /// Sessions being created or activated at once.
    pub max_concurrent_session_establishment: u32,
    /// Bytes of partially received messages across all connections (later issue).
    pub chunk_reassembly_budget: u64,
    /// New connections per second, sustained (later issue).
    pub connections_per_second: u32,
    /// New connections burst (later issue).
    pub connection_burst: u32,
    /// Upper bound for a session's revised timeout.
    #[serde(with = "humantime_serde")]
    pub max_session_timeout: Duration,
    /// Lower bound for a session's revised timeout.
    #[serde(with = "humantime_serde")]
    pub min_session_timeout: Duration,
    /// Upper bound for a secure channel token lifetime.
    #[serde(with = "humantime_serde")]
    pub max_token_lifetime: Duration,
    /// Most operations in one Read request.
    pub max_nodes_per_read: u32,
    /// Most nodes in one Browse/BrowseNext request.
    pub max_nodes_per_browse: u32,
    /// Most references per node in one Browse result.
    pub max_references_per_node: u32,
    /// Browse continuation points per session.
    pub max_browse_continuation_points: u16,
    /// Most browse paths in one TranslateBrowsePathsToNodeIds.
    pub max_nodes_per_translate: u32,
    /// Most nodes in one RegisterNodes/UnregisterNodes.
    pub max_nodes_per_register: u32,
    /// Most values in one Write.
    pub max_nodes_per_write: u32,
    /// Most method calls in one Call.
    pub max_nodes_per_method_call: u32,
    /// Most monitored items in one Create/Modify/Delete/SetMonitoringMode/SetTriggering.
    pub max_monitored_items_per_call: u32,
    /// Subscriptions per session.
    pub max_subscriptions_per_session: u32,
    /// Monitored items per subscription.
    pub max_monitored_items_per_subscription: u32,
    /// Publish requests queued per session (BadTooManyPublishRequests beyond).
    pub max_publish_requests_per_session: u32,
    /// Notification messages kept per subscription for Republish.
    pub max_retransmission_queue: u32,
    /// Fastest publishing interval granted.
    #[serde(with = "humantime_serde")]
    pub min_publishing_interval: Duration,
    /// Fastest sampling interval granted.
    #[serde(with = "humantime_serde")]
    pub min_sampling_interval: Duration,
    /// Largest monitored item queue.
    pub max_queue_size: u32,
    /// Whether anonymous sessions may write values (default: no).
    pub allow_anonymous_write: bool,
    /// Refuse new sessions (BadServerHalted) while the ServiceLevel is
    /// Maintenance; existing sessions keep working. Beyond Part 4, off by default.
    pub refuse_sessions_in_maintenance: bool,
    /// Install the `Objects/Gateway/Demo` object (writable variables, a
    /// counter driven every 100 ms, an Add method) for trying clients out.
    /// Off on an appliance; `uagate demo` turns it on.
    pub demo_nodes: bool,
    /// Quiet time after which an opc.wss client is pinged; a client that
    /// sends nothing for another such period (not even the pong) is closed
    /// with WebSocket close code 1001. Shorter than the idle timeout of the
    /// firewalls and proxies on the way.
    #[serde(with = "humantime_serde")]
    pub websocket_ping_interval: Duration,
}

impl Default for Server {
    fn default() -> Self {
        Server {
            application_name: "uagate".into(),
            application_uri: None,
            max_session_count: 100,
            max_channel_count: 103,
            max_message_size: 4 * 1024 * 1024,
            max_buffer_size: 65536,
            max_queued_request_count: 100,
            max_request_thread_count: 100,
            max_concurrent_session_establishment: 64,
            chunk_reassembly_budget: 64 * 1024 * 1024,
            connections_per_second: 500,
            connection_burst: 1000,
            max_session_timeout: Duration::from_secs(3600),
            min_session_timeout: Duration::from_secs(10),
            max_token_lifetime: Duration::from_secs(3600),
            max_nodes_per_read: 1000,
            max_nodes_per_browse: 1000,
            max_references_per_node: 1000,
            max_browse_continuation_points: 10,
            max_nodes_per_translate: 1000,
            max_nodes_per_register: 1000,
            max_nodes_per_write: 1000,
            max_nodes_per_method_call: 100,
            max_monitored_items_per_call: 1000,
            max_subscriptions_per_session: 100,
            max_monitored_items_per_subscription: 10_000,
            max_publish_requests_per_session: 20,
            max_retransmission_queue: 20,
            min_publishing_interval: Duration::from_millis(50),
            min_sampling_interval: Duration::from_millis(50),
            max_queue_size: 1000,
            allow_anonymous_write: false,
            refuse_sessions_in_maintenance: false,
            demo_nodes: false,
            websocket_ping_interval: Duration::from_secs(30),
        }
    }
}

/// Bytes of every chunk's room that [`Server::max_chunk_count`] does not
/// count as message body (headers, padding, signature).
pub const CHUNK_OVERHEAD_ALLOWANCE: u32 = 1024;

impl Server {
    /// MaxChunkCount advertised in the Acknowledge and enforced by the
    /// reassembler: `ceil(max_message_size / (max_buffer_size - 1024)) + 1`.
    /// The one place this formula lives (the opc.tcp listener and the
    /// isolation plan both use it). Never 0; saturates instead of
    /// overflowing for values [`Config::validate`] would refuse.
    pub fn max_chunk_count(&self) -> u32 {
        let room = self
            .max_buffer_size
            .saturating_sub(CHUNK_OVERHEAD_ALLOWANCE)
            .max(1);
        let n = u64::from(self.max_message_size).div_ceil(u64::from(room)) + 1;
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// The retained-message footprint: a proven upper bound of the bytes
    /// the reassembler can retain (and charge to ReassemblyBytes) for one
    /// incomplete message, `(max_chunk_count - 1) * max_buffer_size`.
    ///
    /// Why it holds: only intermediate chunks are retained (the final chunk
    /// is decoded at once). Each is charged with its bytes after security
    /// removal, never more than its frame, so at most one receive buffer
    /// (`max_buffer_size`). While a message can still complete it holds at
    /// most `max_chunk_count - 1` of them, hence the formula. The
    /// reassembler refuses only the chunk after the `max_chunk_count`-th,
    /// so a message that can no longer complete may hold `max_chunk_count`
    /// intermediate chunks; their bodies are then at most
    /// `max_message_size` together and each chunk adds 24 header bytes
    /// (padding and signature, under 100 bytes with any policy, are removed
    /// before the charge and would still fit): at most `max_message_size +
    /// 100 * max_chunk_count`, below `max_message_size + 1024 *
    /// (max_chunk_count - 1) <= (max_chunk_count - 1) * max_buffer_size`
    /// because `max_chunk_count >= 3` when `max_message_size >=
    /// max_buffer_size`.
    pub fn reassembly_footprint(&self) -> u64 {
        u64::from(self.max_chunk_count().saturating_sub(1))
            .saturating_mul(u64::from(self.max_buffer_size))
    }
}

/// `[isolation]`: the resource-isolation profile and its overrides (see
/// docs/config.md and the reference ResourceIsolation.md). The sizing
/// arithmetic is checked by `uagate_isolation::plan::Plan::build`; this
/// struct's [`Config::validate`] checks the structure (duplicates, key
/// lengths, CIDRs, which entries a mode allows, unknown owners).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Isolation {
    /// The profile; `balanced` by default.
    pub mode: IsolationMode,
    /// Most owners (caller groups) with resources charged at once; some
    /// entries are kept for protected classes and trusted owners.
    pub max_tracked_owners: u32,
    /// Time from TCP accept until the secure channel must be open; at most 2 minutes.
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: Duration,
    /// Longest owner key in bytes (trusted owner keys, derived keys).
    pub max_owner_key_length: u32,
    /// Scheduling weight of ordinary owners (1..=1000).
    pub default_weight: u32,
    /// Weighted fair scheduling of decoded requests; `false` keeps one FIFO
    /// queue (limits still apply, the head of the queue is never overtaken).
    /// Always off in `shared_only`.
    pub fair_scheduling: bool,
    /// Upper bound of the bytes one incomplete message can retain; default
    /// [`Server::reassembly_footprint`] (see docs/config.md, "reassembly
    /// footprint"). Must not be below it.
    pub max_retained_message_bytes: Option<u64>,
    /// ReassemblyBytes bootstrap reserve; default one footprint, never less
    /// (use a `reassembly_bytes` stage override to disable it).
    pub bootstrap_reserved_bytes: Option<u64>,
    /// ReassemblyBytes reconnect (session continuity) reserve; default one
    /// footprint, never less.
    pub reconnect_reserved_bytes: Option<u64>,
    /// `shared_only` only: most ReassemblyBytes that channels without an
    /// activated session may hold together (the reference's
    /// MaxBytesWithoutSession); default half the ReassemblyBytes total. At
    /// least one footprint, at most the total. Other modes refuse it (their
    /// class reserves replace the rule).
    pub max_bytes_without_session: Option<u64>,
    /// Per-stage overrides, at most one per stage.
    pub stages: Vec<StageOverride>,
    /// Provisioned trusted owners (`trusted_reservations` only).
    pub trusted_owners: Vec<TrustedOwner>,
    /// Operator-configured ingress classification (CIDR -> owner or class).
    pub ingress: Vec<IngressRule>,
}

impl Default for Isolation {
    fn default() -> Self {
        Isolation {
            mode: IsolationMode::Balanced,
            max_tracked_owners: 4096,
            handshake_timeout: Duration::from_secs(120),
            max_owner_key_length: 256,
            default_weight: 1,
            fair_scheduling: true,
            max_retained_message_bytes: None,
            bootstrap_reserved_bytes: None,
            reconnect_reserved_bytes: None,
            max_bytes_without_session: None,
            stages: Vec::new(),
            trusted_owners: Vec::new(),
            ingress: Vec::new(),
        }
    }
}

/// Largest weight of an owner (keeps the scheduler's arithmetic small).
pub const MAX_WEIGHT: u32 = 1000;
/// Largest allowed `isolation.max_owner_key_length`.
pub const MAX_OWNER_KEY_LENGTH: u32 = 4096;

/// The resource-isolation profile (reference: ServerResourceIsolationMode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IsolationMode {
    /// Configured limits shared by all callers; no owner accounting, FIFO.
    SharedOnly,
    /// Owner accounting, optional per-owner limits, weighted scheduling; no reserves.
    FairShare,
    /// FairShare plus bootstrap, reconnect and control reserves.
    #[default]
    Balanced,
    /// Balanced plus a reserve and weight per configured trusted owner.
    TrustedReservations,
}

impl IsolationMode {
    /// The snake_case name used in the document.
    pub fn as_str(self) -> &'static str {
        match self {
            IsolationMode::SharedOnly => "shared_only",
            IsolationMode::FairShare => "fair_share",
            IsolationMode::Balanced => "balanced",
            IsolationMode::TrustedReservations => "trusted_reservations",
        }
    }

    /// Whether the profile keeps bootstrap/reconnect/control reserves.
    pub fn has_reserves(self) -> bool {
        matches!(
            self,
            IsolationMode::Balanced | IsolationMode::TrustedReservations
        )
    }
}

/// One separately counted resource (reference: ResourceIsolationStage), in
/// the reference's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Physical connections, until actual closure.
    Connection,
    /// Initial protocol startup (deadline-bound) and OpenSecureChannel renewals.
    Handshake,
    /// Bytes retained by incomplete multi-chunk messages.
    ReassemblyBytes,
    /// Concurrent CreateSession/ActivateSession processing.
    SessionEstablishment,
    /// Decoded requests waiting for dispatch.
    RequestQueue,
    /// Running request handlers.
    RequestExecution,
    /// One `max_message_size` charge per retained decoded request.
    RequestQueueBytes,
    /// Requests waiting without a worker (Publish).
    ParkedRequest,
}

impl Stage {
    /// Every stage, in the reference's order (the order of `uagate plan`).
    pub const ALL: [Stage; 8] = [
        Stage::Connection,
        Stage::Handshake,
        Stage::ReassemblyBytes,
        Stage::SessionEstablishment,
        Stage::RequestQueue,
        Stage::RequestExecution,
        Stage::RequestQueueBytes,
        Stage::ParkedRequest,
    ];

    /// Position in [`Stage::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The reference's name (`ReassemblyBytes`), used in plan lines and logs.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Connection => "Connection",
            Stage::Handshake => "Handshake",
            Stage::ReassemblyBytes => "ReassemblyBytes",
            Stage::SessionEstablishment => "SessionEstablishment",
            Stage::RequestQueue => "RequestQueue",
            Stage::RequestExecution => "RequestExecution",
            Stage::RequestQueueBytes => "RequestQueueBytes",
            Stage::ParkedRequest => "ParkedRequest",
        }
    }

    /// The document's name (`reassembly_bytes`), also a bounded metric label.
    pub fn key(self) -> &'static str {
        match self {
            Stage::Connection => "connection",
            Stage::Handshake => "handshake",
            Stage::ReassemblyBytes => "reassembly_bytes",
            Stage::SessionEstablishment => "session_establishment",
            Stage::RequestQueue => "request_queue",
            Stage::RequestExecution => "request_execution",
            Stage::RequestQueueBytes => "request_queue_bytes",
            Stage::ParkedRequest => "parked_request",
        }
    }

    /// Whether the stage counts bytes rather than slots.
    pub fn is_bytes(self) -> bool {
        matches!(self, Stage::ReassemblyBytes | Stage::RequestQueueBytes)
    }

    /// Whether the stage holds decoded requests (the only stages with a
    /// control reserve).
    pub fn is_decoded_request(self) -> bool {
        matches!(
            self,
            Stage::RequestQueue
                | Stage::RequestExecution
                | Stage::RequestQueueBytes
                | Stage::ParkedRequest
        )
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `[[isolation.stages]]`: overrides for one stage; omitted values keep the
/// profile default. Values are counts, or bytes for `reassembly_bytes` and
/// `request_queue_bytes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageOverride {
    /// Which stage.
    pub stage: Stage,
    /// Absolute total including the reserves; can only lower the default total.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    /// Bootstrap reserve; 0 disables it on this stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_reserved: Option<u64>,
    /// Reconnect reserve; 0 disables it on this stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconnect_reserved: Option<u64>,
    /// Control reserve (decoded-request stages only); 0 disables it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_reserved: Option<u64>,
    /// Hard limit of each ordinary owner on this stage; default: the total.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_hard_limit: Option<u64>,
}

/// `[[isolation.trusted_owners]]`: a provisioned owner with its own reserves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustedOwner {
    /// The owner key (what ingress rules name); never a metric label.
    pub key: String,
    /// Scheduling weight relative to `isolation.default_weight` (1..=1000).
    #[serde(default = "default_trusted_weight")]
    pub weight: u32,
    /// Per-stage reserves; omitted stages reserve one operation / message.
    #[serde(default)]
    pub reservations: Vec<Reservation>,
}

fn default_trusted_weight() -> u32 {
    1
}

/// A trusted owner's reserve on one stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reservation {
    /// Which stage.
    pub stage: Stage,
    /// Reserved amount; 0 removes the guarantee.
    pub reserved: u64,
    /// The owner's hard limit on this stage; default: the stage's owner limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard_limit: Option<u64>,
}

/// A protected class an ingress rule can map to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IngressClass {
    /// Initial startup of connections and sessions.
    Bootstrap,
    /// Recovery of connections and sessions.
    Reconnect,
}

/// `[[isolation.ingress]]`: callers whose observed address is in `cidr`
/// belong to a trusted owner or a protected class. The deployment must make
/// that address range a protected path; an address alone is not identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngressRule {
    /// `10.0.5.0/24`, `fd00::/64`, or one address.
    pub cidr: String,
    /// A configured trusted owner key (exclusive with `class`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// A protected class (exclusive with `owner`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<IngressClass>,
}

/// An IP network (address + prefix length). IPv4-mapped IPv6 addresses are
/// treated as their IPv4 form, in the network and in [`Cidr::contains`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

/// The IPv4 form of an IPv4-mapped IPv6 address, else the address itself.
pub fn normalize_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}

fn prefix_mask(bits: u32, prefix: u8) -> u128 {
    // A mask of `prefix` leading ones within a `bits`-wide integer.
    if prefix == 0 {
        0
    } else {
        (u128::MAX << (128 - u32::from(prefix))) >> (128 - bits)
    }
}

fn ip_bits(ip: IpAddr) -> (u32, u128) {
    match ip {
        IpAddr::V4(v4) => (32, u128::from(u32::from(v4))),
        IpAddr::V6(v6) => (128, u128::from(v6)),
    }
}

impl Cidr {
    /// Parses `addr/prefix` or a single address (all bits significant).
    /// Host bits below the prefix must be zero.
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let (addr_text, prefix_text) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: IpAddr = addr_text
            .trim()
            .parse()
            .map_err(|_| format!("`{text}` is not an IP address or network"))?;
        let (bits, _) = ip_bits(addr);
        let prefix: u8 = match prefix_text {
            Some(p) => match p.trim().parse::<u8>() {
                Ok(n) if u32::from(n) <= bits => n,
                _ => return Err(format!("`{text}`: prefix length must be 0..={bits}")),
            },
            None => bits as u8,
        };
        let (addr, prefix) = match (addr, normalize_ip(addr)) {
            (IpAddr::V6(_), IpAddr::V4(v4)) if prefix >= 96 => (IpAddr::V4(v4), prefix - 96),
            _ => (addr, prefix),
        };
        let (bits, value) = ip_bits(addr);
        if value & !prefix_mask(bits, prefix) & (u128::MAX >> (128 - bits)) != 0 {
            return Err(format!(
                "`{text}` has host bits set below the /{prefix} prefix"
            ));
        }
        Ok(Cidr { addr, prefix })
    }

    /// Prefix length (after IPv4-mapped normalisation).
    pub fn prefix_len(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` (normalised) is in the network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = normalize_ip(ip);
        let (bits, net) = ip_bits(self.addr);
        let (ip_width, value) = ip_bits(ip);
        if bits != ip_width {
            return false;
        }
        let mask = prefix_mask(bits, self.prefix);
        value & mask == net & mask
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl std::str::FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Cidr, String> {
        Cidr::parse(s)
    }
}

/// Message security mode of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecurityMode {
    /// No security (only with policy None).
    None,
    /// Signed messages.
    Sign,
    /// Signed and encrypted messages.
    SignAndEncrypt,
}

/// A user identity token type an endpoint may accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UserToken {
    /// No user identity.
    Anonymous,
    /// User name and password from the store.
    Username,
    /// A trusted X.509 user certificate.
    X509,
}

/// The security policies the engine implements, by their short names.
pub const POLICIES: [&str; 4] = [
    "None",
    "Basic256Sha256",
    "Aes128_Sha256_RsaOaep",
    "Aes256_Sha256_RsaPss",
];

/// `[[endpoints]]`: one offered security policy + mode and its user tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    /// One of [`POLICIES`].
    pub security_policy: String,
    /// Message security mode.
    pub security_mode: SecurityMode,
    /// Accepted user tokens.
    pub user_tokens: Vec<UserToken>,
}

impl Config {
    /// Parses and validates a TOML document.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(parse_error)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The document as TOML (what `config export` prints).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }

    /// Checks every value; the error names the first offending setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.listen.validate_addresses()?;
        let s = &self.server;
        if s.application_name.trim().is_empty() {
            return Err(invalid("server.application_name", "must not be empty"));
        }
        if let Some(uri) = &s.application_uri {
            if !uri.contains(':') {
                return Err(invalid("server.application_uri", "must be a URI"));
            }
        }
        if s.max_session_count == 0 {
            return Err(invalid("server.max_session_count", "must be at least 1"));
        }
        if s.max_channel_count == 0 {
            return Err(invalid("server.max_channel_count", "must be at least 1"));
        }
        if !(8192..=16 * 1024 * 1024).contains(&s.max_buffer_size) {
            return Err(invalid(
                "server.max_buffer_size",
                "must be between 8192 and 16777216 bytes",
            ));
        }
        if s.max_message_size < s.max_buffer_size || s.max_message_size > 256 * 1024 * 1024 {
            return Err(invalid(
                "server.max_message_size",
                "must be at least server.max_buffer_size and at most 268435456 bytes",
            ));
        }
        if s.min_session_timeout.is_zero() || s.min_session_timeout > s.max_session_timeout {
            return Err(invalid(
                "server.min_session_timeout",
                "must be above zero and not above server.max_session_timeout",
            ));
        }
        if s.max_token_lifetime < Duration::from_secs(10) {
            return Err(invalid("server.max_token_lifetime", "must be at least 10s"));
        }
        for (name, v) in [
            ("server.max_nodes_per_read", s.max_nodes_per_read),
            ("server.max_nodes_per_browse", s.max_nodes_per_browse),
            ("server.max_references_per_node", s.max_references_per_node),
            ("server.max_nodes_per_translate", s.max_nodes_per_translate),
            ("server.max_nodes_per_register", s.max_nodes_per_register),
            ("server.max_nodes_per_write", s.max_nodes_per_write),
            (
                "server.max_monitored_items_per_call",
                s.max_monitored_items_per_call,
            ),
            (
                "server.max_subscriptions_per_session",
                s.max_subscriptions_per_session,
            ),
            (
                "server.max_monitored_items_per_subscription",
                s.max_monitored_items_per_subscription,
            ),
            (
                "server.max_publish_requests_per_session",
                s.max_publish_requests_per_session,
            ),
            (
                "server.max_retransmission_queue",
                s.max_retransmission_queue,
            ),
            ("server.max_queue_size", s.max_queue_size),
            (
                "server.max_nodes_per_method_call",
                s.max_nodes_per_method_call,
            ),
            (
                "server.max_concurrent_session_establishment",
                s.max_concurrent_session_establishment,
            ),
        ] {
            if v == 0 {
                return Err(invalid(name, "must be at least 1"));
            }
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&s.websocket_ping_interval)
        {
            return Err(invalid(
                "server.websocket_ping_interval",
                "must be between 1s and 10m",
            ));
        }
        if s.min_publishing_interval < Duration::from_millis(10) {
            return Err(invalid(
                "server.min_publishing_interval",
                "must be at least 10ms",
            ));
        }
        if s.min_sampling_interval < Duration::from_millis(10) {
            return Err(invalid(
                "server.min_sampling_interval",
                "must be at least 10ms",
            ));
        }
        let i = &self.isolation;
        if i.handshake_timeout.is_zero() || i.handshake_timeout > Duration::from_secs(120) {
            return Err(invalid(
                "isolation.handshake_timeout",
                "must be above zero and at most 2m",
            ));
        }
        self.validate_isolation()?;
        let r = &self.redundancy;
        match r.support {
            RedundancyMode::None if !r.server_uris.is_empty() => {
                return Err(invalid(
                    "redundancy.server_uris",
                    "needs redundancy.support cold, warm, hot or hot_and_mirrored",
                ))
            }
            RedundancyMode::Transparent if !r.server_uris.is_empty() => {
                return Err(invalid(
                    "redundancy.server_uris",
                    "is not used with transparent redundancy (use current_server_id)",
                ))
            }
            _ => {}
        }
        if r.current_server_id.is_some() && r.support != RedundancyMode::Transparent {
            return Err(invalid(
                "redundancy.current_server_id",
                "only applies to redundancy.support = \"transparent\"",
            ));
        }
        if r.server_uris.iter().any(|u| !u.contains(':')) {
            return Err(invalid(
                "redundancy.server_uris",
                "every entry must be a URI",
            ));
        }
        for (n, e) in self.endpoints.iter().enumerate() {
            let at = |f: &str| format!("endpoints[{n}].{f}");
            if !POLICIES.contains(&e.security_policy.as_str()) {
                return Err(invalid(
                    &at("security_policy"),
                    format!("must be one of {}", POLICIES.join(", ")),
                ));
            }
            let none_policy = e.security_policy == "None";
            if none_policy != (e.security_mode == SecurityMode::None) {
                return Err(invalid(
                    &at("security_mode"),
                    "policy None requires mode none, and other policies require sign or sign_and_encrypt",
                ));
            }
            if e.user_tokens.is_empty() {
                return Err(invalid(
                    &at("user_tokens"),
                    "must list at least one token type",
                ));
            }
        }
        field::validate_field_servers(&self.field_servers)?;
        Ok(())
    }

    /// The endpoints to offer: the configured ones, or by default policy None
    /// (anonymous, username) plus every secure policy with Sign and
    /// SignAndEncrypt (anonymous, username, x509).
    pub fn effective_endpoints(&self) -> Vec<Endpoint> {
        if !self.endpoints.is_empty() {
            return self.endpoints.clone();
        }
        let mut v = vec![Endpoint {
            security_policy: "None".into(),
            security_mode: SecurityMode::None,
            user_tokens: vec![UserToken::Anonymous, UserToken::Username],
        }];
        for p in &POLICIES[1..] {
            for m in [SecurityMode::Sign, SecurityMode::SignAndEncrypt] {
                v.push(Endpoint {
                    security_policy: (*p).into(),
                    security_mode: m,
                    user_tokens: vec![UserToken::Anonymous, UserToken::Username, UserToken::X509],
                });
            }
        }
        v
    }
}

impl Config {
    /// The structural checks of `[isolation]`: bounds of the accounting
    /// settings, duplicate stages / owners / reservations / networks, owner
    /// keys bounded in length, trusted owners only in `trusted_reservations`
    /// (and required there), ingress rules naming exactly one configured
    /// owner or one class, well-formed CIDRs. Sizing is checked by the plan.
    fn validate_isolation(&self) -> Result<(), ConfigError> {
        let i = &self.isolation;
        if i.max_tracked_owners == 0 {
            return Err(invalid(
                "isolation.max_tracked_owners",
                "must be at least 1",
            ));
        }
        if !(1..=MAX_OWNER_KEY_LENGTH).contains(&i.max_owner_key_length) {
            return Err(invalid(
                "isolation.max_owner_key_length",
                format!("must be between 1 and {MAX_OWNER_KEY_LENGTH}"),
            ));
        }
        if !(1..=MAX_WEIGHT).contains(&i.default_weight) {
            return Err(invalid(
                "isolation.default_weight",
                format!("must be between 1 and {MAX_WEIGHT}"),
            ));
        }
        if i.max_retained_message_bytes == Some(0) {
            return Err(invalid(
                "isolation.max_retained_message_bytes",
                "must be above zero",
            ));
        }
        if let Some(v) = i.max_bytes_without_session {
            if i.mode != IsolationMode::SharedOnly {
                return Err(invalid(
                    "isolation.max_bytes_without_session",
                    format!(
                        "only applies to mode shared_only (mode is {}); the class reserves replace it in the other modes",
                        i.mode.as_str()
                    ),
                ));
            }
            if v == 0 {
                return Err(invalid(
                    "isolation.max_bytes_without_session",
                    "must be above zero",
                ));
            }
        }
        for (n, st) in i.stages.iter().enumerate() {
            if i.stages[..n].iter().any(|o| o.stage == st.stage) {
                return Err(invalid(
                    &format!("isolation.stages[{n}].stage"),
                    format!("stage {} is listed twice", st.stage.key()),
                ));
            }
        }
        let trusted_mode = i.mode == IsolationMode::TrustedReservations;
        if trusted_mode && i.trusted_owners.is_empty() {
            return Err(invalid(
                "isolation.trusted_owners",
                "mode trusted_reservations needs at least one trusted owner",
            ));
        }
        if !trusted_mode && !i.trusted_owners.is_empty() {
            return Err(invalid(
                "isolation.trusted_owners",
                format!(
                    "trusted owners need mode trusted_reservations (mode is {})",
                    i.mode.as_str()
                ),
            ));
        }
        for (n, o) in i.trusted_owners.iter().enumerate() {
            let at = |f: &str| format!("isolation.trusted_owners[{n}].{f}");
            if o.key.is_empty() || o.key.chars().any(char::is_control) {
                return Err(invalid(
                    &at("key"),
                    "must be non-empty without control characters",
                ));
            }
            if o.key.len() > i.max_owner_key_length as usize {
                return Err(invalid(
                    &at("key"),
                    format!(
                        "is longer than isolation.max_owner_key_length ({} bytes)",
                        i.max_owner_key_length
                    ),
                ));
            }
            if i.trusted_owners[..n].iter().any(|p| p.key == o.key) {
                return Err(invalid(&at("key"), "duplicate trusted owner key"));
            }
            if !(1..=MAX_WEIGHT).contains(&o.weight) {
                return Err(invalid(
                    &at("weight"),
                    format!("must be between 1 and {MAX_WEIGHT}"),
                ));
            }
            for (m, r) in o.reservations.iter().enumerate() {
                if o.reservations[..m].iter().any(|q| q.stage == r.stage) {
                    return Err(invalid(
                        &at(&format!("reservations[{m}].stage")),
                        format!("stage {} is listed twice", r.stage.key()),
                    ));
                }
                if r.hard_limit == Some(0) {
                    return Err(invalid(
                        &at(&format!("reservations[{m}].hard_limit")),
                        "must be above zero",
                    ));
                }
            }
        }
        let mut nets: Vec<Cidr> = Vec::with_capacity(i.ingress.len());
        for (n, r) in i.ingress.iter().enumerate() {
            let at = |f: &str| format!("isolation.ingress[{n}].{f}");
            let net = Cidr::parse(&r.cidr).map_err(|m| invalid(&at("cidr"), m))?;
            if nets.contains(&net) {
                return Err(invalid(&at("cidr"), format!("{net} is listed twice")));
            }
            nets.push(net);
            match (&r.owner, r.class) {
                (Some(owner), None) => {
                    if !i.trusted_owners.iter().any(|o| &o.key == owner) {
                        return Err(invalid(
                            &at("owner"),
                            "is not a configured trusted owner (isolation.trusted_owners)",
                        ));
                    }
                }
                (None, Some(_)) => {
                    if !i.mode.has_reserves() {
                        return Err(invalid(
                            &at("class"),
                            format!(
                                "protected classes need mode balanced or trusted_reservations (mode is {})",
                                i.mode.as_str()
                            ),
                        ));
                    }
                }
                _ => {
                    return Err(invalid(
                        &format!("isolation.ingress[{n}]"),
                        "needs exactly one of owner or class",
                    ))
                }
            }
        }
        if trusted_mode && !i.ingress.iter().any(|r| r.owner.is_some()) {
            return Err(invalid(
                "isolation.ingress",
                "mode trusted_reservations needs an ingress rule mapping callers to a trusted owner",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_quotes_at_most_a_bounded_part_of_the_document() {
        // A 6 KB line that is not TOML: the parser's message quotes it.
        let doc = format!("[server]\nmax_session_count = 1{}\n", "é~".repeat(2_000));
        let Err(ConfigError::Parse(m)) = Config::from_toml(&doc) else {
            panic!("refused as a parse error");
        };
        assert!(
            m.len() <= MAX_PARSE_LINE * MAX_PARSE_LINES + 64,
            "{} bytes",
            m.len()
        );
        assert!(m.contains("line 2"), "still says where: {m}");
        assert!(m.contains('…'), "marks the cut: {m}");
    }

    fn refused_setting(c: &Config) -> Option<(String, String)> {
        match c.validate() {
            Err(ConfigError::Invalid { setting, message }) => Some((setting, message)),
            _ => None,
        }
    }

    #[test]
    fn the_pair_listener_defaults_like_the_others() {
        let mut c = Config::default();
        assert_eq!(c.listen.pair_addr().to_string(), "0.0.0.0:4850");
        c.listen.opc_tcp = "10.0.0.1:4840".parse().unwrap();
        assert_eq!(c.listen.pair_addr().to_string(), "10.0.0.1:4850");
        c.listen.opc_tcp = "127.0.0.1:0".parse().unwrap();
        assert_eq!(c.listen.pair_addr().to_string(), "127.0.0.1:0");
        c.validate().unwrap();
        c.listen.pair = Some("192.168.50.1:4900".parse().unwrap());
        assert_eq!(c.listen.pair_addr().to_string(), "192.168.50.1:4900");
        let back = Config::from_toml(&c.to_toml()).unwrap();
        assert_eq!(back.listen.pair, c.listen.pair);
        assert!(Config::default().to_toml().find("pair").is_none());
    }

    #[test]
    fn a_pair_listener_clash_is_refused_naming_listen_pair() {
        for (other, setting) in [
            ("opc_tcp", "listen.opc_tcp"),
            ("tls", "listen.tls"),
            ("console", "listen.console"),
            ("metrics", "listen.metrics"),
        ] {
            let doc = format!(
                "[listen]\nopc_tcp = \"10.0.0.1:4840\"\nmetrics = \"10.0.0.1:9464\"\npair = \"{}\"\n",
                match other {
                    "opc_tcp" => "10.0.0.1:4840",
                    "tls" => "10.0.0.1:4843",
                    "console" => "10.0.0.1:8443",
                    _ => "10.0.0.1:9464",
                }
            );
            match Config::from_toml(&doc) {
                Err(ConfigError::Invalid {
                    setting: s,
                    message,
                }) => {
                    assert_eq!(s, "listen.pair", "{doc}");
                    assert!(message.contains(setting), "{message}");
                }
                other => panic!("{doc}: {other:?}"),
            }
        }
        // A wildcard address covers every IP of the same port.
        let mut c = Config::default();
        c.listen.opc_tcp = "10.0.0.1:4840".parse().unwrap();
        c.listen.pair = Some("0.0.0.0:8443".parse().unwrap());
        let (s, m) = refused_setting(&c).unwrap();
        assert_eq!(s, "listen.pair");
        assert!(m.contains("listen.console"), "{m}");
        // The default pair address is checked too, and the message says so.
        let mut c = Config::default();
        c.listen.console = Some("0.0.0.0:4850".parse().unwrap());
        let (s, m) = refused_setting(&c).unwrap();
        assert_eq!(s, "listen.pair");
        assert!(m.contains("the default"), "{m}");
        // Another port, another IP, or ephemeral ports do not clash.
        let mut c = Config::default();
        c.listen.opc_tcp = "10.0.0.1:4840".parse().unwrap();
        c.listen.pair = Some("10.0.0.2:4840".parse().unwrap());
        c.validate().unwrap();
        c.listen.opc_tcp = "10.0.0.1:0".parse().unwrap();
        c.listen.pair = Some("10.0.0.1:0".parse().unwrap());
        c.validate().unwrap();
    }

    #[test]
    fn listeners_that_would_clash_are_refused_naming_both_settings() {
        // ([listen] lines, the setting refused, the other one it names).
        let clashes = [
            (
                "opc_tcp = \"127.0.0.1:24840\"\nconsole = \"127.0.0.1:24840\"",
                "listen.console",
                "listen.opc_tcp",
            ),
            (
                "opc_tcp = \"127.0.0.1:14840\"\ntls = \"127.0.0.1:14840\"",
                "listen.tls",
                "listen.opc_tcp",
            ),
            // A wildcard address covers every IP of its port.
            (
                "opc_tcp = \"0.0.0.0:14840\"\ntls = \"127.0.0.1:14840\"",
                "listen.tls",
                "listen.opc_tcp",
            ),
            (
                "opc_tcp = \"10.0.0.1:4840\"\nconsole = \"[::]:4843\"",
                "listen.console",
                "listen.tls",
            ),
            (
                "opc_tcp = \"127.0.0.1:0\"\nconsole = \"127.0.0.1:5555\"\ntls = \"127.0.0.1:5555\"",
                "listen.console",
                "listen.tls",
            ),
            (
                "opc_tcp = \"127.0.0.1:4840\"\nmetrics = \"0.0.0.0:4843\"",
                "listen.metrics",
                "listen.tls",
            ),
            // A default address clashes too, and the message says so.
            (
                "opc_tcp = \"0.0.0.0:8443\"",
                "listen.console",
                "listen.opc_tcp",
            ),
        ];
        for (lines, setting, other) in clashes {
            let doc = format!("[listen]\n{lines}\n");
            match Config::from_toml(&doc) {
                Err(ConfigError::Invalid {
                    setting: s,
                    message,
                }) => {
                    assert_eq!(s, setting, "{doc}: {message}");
                    assert!(message.contains(other), "{doc}: {message}");
                }
                other => panic!("{doc}: expected a refusal, got {other:?}"),
            }
        }
        let mut c = Config::default();
        c.listen.opc_tcp = "0.0.0.0:8443".parse().unwrap();
        let (_, m) = refused_setting(&c).unwrap();
        assert!(m.contains("the default"), "{m}");
        // Another port, another IP, or port 0 (ephemeral) never clash.
        for lines in [
            "opc_tcp = \"127.0.0.1:4840\"\nconsole = \"127.0.0.2:4840\"",
            "opc_tcp = \"127.0.0.1:4840\"\ntls = \"[::1]:4840\"",
            "opc_tcp = \"127.0.0.1:0\"\nconsole = \"127.0.0.1:0\"\ntls = \"0.0.0.0:0\"\nmetrics = \"127.0.0.1:0\"",
            "opc_tcp = \"127.0.0.1:4840\"\ntls = \"127.0.0.1:4841\"\nconsole = \"127.0.0.1:4842\"",
        ] {
            let doc = format!("[listen]\n{lines}\n");
            if let Err(e) = Config::from_toml(&doc) {
                panic!("{doc}: {e}");
            }
        }
    }

    #[test]
    fn the_scrape_address_must_not_take_another_listeners_port() {
        let mut c = Config::default();
        c.listen.metrics = Some("0.0.0.0:8443".parse().unwrap());
        match c.validate() {
            Err(ConfigError::Invalid { setting, .. }) => assert_eq!(setting, "listen.metrics"),
            other => panic!("expected listen.metrics to be refused, got {other:?}"),
        }
        c.listen.metrics = Some("127.0.0.1:9464".parse().unwrap());
        c.validate().unwrap();
        let back = Config::from_toml(&c.to_toml()).unwrap();
        assert_eq!(back.listen.metrics, c.listen.metrics);
    }

    #[test]
    fn design_example_core_keys_parse() {
        let cfg = Config::from_toml(
            r#"
[listen]
opc_tcp = "0.0.0.0:4840"
tls = "0.0.0.0:4843"
console = "0.0.0.0:8443"

[server]
application_name = "uagate"
max_session_count = 100
max_channel_count = 103
max_message_size = 4194304
max_buffer_size = 65536
max_queued_request_count = 100
max_request_thread_count = 100
max_concurrent_session_establishment = 64
chunk_reassembly_budget = 67108864
connections_per_second = 500
connection_burst = 1000

[isolation]
handshake_timeout = "30s"
"#,
        )
        .unwrap();
        assert_eq!(cfg.isolation.handshake_timeout, Duration::from_secs(30));
        assert_eq!(cfg.effective_endpoints().len(), 7);
        let again = Config::from_toml(&cfg.to_toml()).unwrap();
        assert_eq!(again, cfg);
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = Config::from_toml("[server]\nmax_sessions = 3\n").unwrap_err();
        assert!(err.to_string().contains("max_sessions"), "{err}");
    }

    #[test]
    fn invalid_values_name_the_setting() {
        for (doc, setting) in [
            ("[server]\nmax_buffer_size = 100\n", "server.max_buffer_size"),
            (
                "[server]\nwebsocket_ping_interval = \"500ms\"\n",
                "server.websocket_ping_interval",
            ),
            (
                "[server]\nwebsocket_ping_interval = \"11m\"\n",
                "server.websocket_ping_interval",
            ),
            ("[isolation]\nhandshake_timeout = \"5m\"\n", "isolation.handshake_timeout"),
            ("[server]\nmax_session_count = 0\n", "server.max_session_count"),
            (
                "[[endpoints]]\nsecurity_policy = \"None\"\nsecurity_mode = \"sign\"\nuser_tokens = [\"anonymous\"]\n",
                "endpoints[0].security_mode",
            ),
            (
                "[redundancy]\nserver_uris = [\"urn:peer\"]\n",
                "redundancy.server_uris",
            ),
            (
                "[redundancy]\nsupport = \"warm\"\ncurrent_server_id = \"x\"\n",
                "redundancy.current_server_id",
            ),
        ] {
            match Config::from_toml(doc) {
                Err(ConfigError::Invalid { setting: s, .. }) => assert_eq!(s, setting),
                other => panic!("{doc}: {other:?}"),
            }
        }
    }
}

#[cfg(test)]
mod doc_example {
    /// The full example in docs/config.md must stay valid.
    #[test]
    fn docs_example_parses() {
        let doc = include_str!("../../../docs/config.md");
        let start = doc.find("```toml\n").expect("example present") + 8;
        let end = start + doc[start..].find("```").expect("example closed");
        let cfg = super::Config::from_toml(&doc[start..end]).expect("docs example is valid");
        assert_eq!(cfg.effective_endpoints().len(), 2);
        let fs = &cfg.field_servers;
        assert_eq!(fs.len(), 1);
        assert_eq!(fs[0].redundancy, super::FieldRedundancy::Hot);
        assert_eq!(fs[0].endpoints.len(), 2);
        assert_eq!(fs[0].endpoints[0].alternates.len(), 1);
        assert!(matches!(
            fs[0].identity,
            super::FieldIdentity::Username { .. }
        ));
    }
}

#[cfg(test)]
mod isolation_tests {
    use super::*;

    const FULL: &str = r#"
[server]
max_channel_count = 104

[isolation]
mode = "trusted_reservations"
max_tracked_owners = 4096
handshake_timeout = "30s"
max_owner_key_length = 64
default_weight = 1
fair_scheduling = true
max_retained_message_bytes = 4325376
bootstrap_reserved_bytes = 4325376
reconnect_reserved_bytes = 8650752

[[isolation.stages]]
stage = "request_execution"
owner_hard_limit = 8

[[isolation.stages]]
stage = "connection"
owner_hard_limit = 16
capacity = 104
bootstrap_reserved = 1
reconnect_reserved = 1
control_reserved = 0

[[isolation.trusted_owners]]
key = "plant-control"
weight = 4
reservations = [{ stage = "request_execution", reserved = 2, hard_limit = 8 }]

[[isolation.ingress]]
cidr = "10.0.5.0/24"
owner = "plant-control"

[[isolation.ingress]]
cidr = "192.168.7.10"
class = "reconnect"
"#;

    #[test]
    fn full_isolation_section_parses_and_round_trips() {
        let cfg = Config::from_toml(FULL).unwrap();
        let i = &cfg.isolation;
        assert_eq!(i.mode, IsolationMode::TrustedReservations);
        assert_eq!(i.stages.len(), 2);
        assert_eq!(i.stages[0].stage, Stage::RequestExecution);
        assert_eq!(i.stages[0].owner_hard_limit, Some(8));
        assert_eq!(i.stages[1].capacity, Some(104));
        assert_eq!(i.trusted_owners[0].weight, 4);
        assert_eq!(
            i.trusted_owners[0].reservations[0],
            Reservation {
                stage: Stage::RequestExecution,
                reserved: 2,
                hard_limit: Some(8)
            }
        );
        assert_eq!(i.ingress[1].class, Some(IngressClass::Reconnect));
        let text = cfg.to_toml();
        let again = Config::from_toml(&text).unwrap_or_else(|e| panic!("{text}\n{e}"));
        assert_eq!(again, cfg);
    }

    #[test]
    fn mode_is_an_enum_with_snake_case_names() {
        for (name, mode) in [
            ("shared_only", IsolationMode::SharedOnly),
            ("fair_share", IsolationMode::FairShare),
            ("balanced", IsolationMode::Balanced),
        ] {
            let cfg = Config::from_toml(&format!("[isolation]\nmode = \"{name}\"\n")).unwrap();
            assert_eq!(cfg.isolation.mode, mode);
            assert_eq!(mode.as_str(), name);
        }
        assert_eq!(Config::default().isolation.mode, IsolationMode::Balanced);
        assert!(matches!(
            Config::from_toml("[isolation]\nmode = \"Balanced\"\n"),
            Err(ConfigError::Parse(_))
        ));
    }

    #[test]
    fn unknown_keys_in_new_tables_are_refused() {
        for doc in [
            "[[isolation.stages]]\nstage = \"connection\"\nowner_limit = 3\n",
            "[isolation]\nmode = \"trusted_reservations\"\n[[isolation.trusted_owners]]\nkey = \"a\"\nreservations = [{ stage = \"connection\", reserved = 1, limit = 2 }]\n",
            "[[isolation.ingress]]\ncidr = \"10.0.0.0/8\"\nclass = \"bootstrap\"\nport = 4840\n",
            "[[isolation.ingress]]\ncidr = \"10.0.0.0/8\"\nclass = \"control\"\n",
        ] {
            assert!(matches!(Config::from_toml(doc), Err(ConfigError::Parse(_))), "{doc}");
        }
    }

    #[test]
    fn structural_errors_name_the_setting() {
        let long_key = "k".repeat(257);
        for (doc, setting) in [
            (
                FULL.replace("owner = \"plant-control\"", "owner = \"nobody\""),
                "isolation.ingress[0].owner",
            ),
            (
                FULL.replace("10.0.5.0/24", "10.0.5.0/24x"),
                "isolation.ingress[0].cidr",
            ),
            (
                FULL.replace("max_owner_key_length = 64", "max_owner_key_length = 5"),
                "isolation.trusted_owners[0].key",
            ),
            (
                FULL.replace("max_owner_key_length = 64\n", "")
                    .replace("\"plant-control\"", &format!("\"{long_key}\"")),
                "isolation.trusted_owners[0].key",
            ),
            (
                FULL.replace("key = \"plant-control\"", "key = \"\"")
                    .replace("owner = \"plant-control\"", "owner = \"\""),
                "isolation.trusted_owners[0].key",
            ),
            (
                FULL.replace("weight = 4", "weight = 1001"),
                "isolation.trusted_owners[0].weight",
            ),
            (
                FULL.replace("hard_limit = 8 }", "hard_limit = 0 }"),
                "isolation.trusted_owners[0].reservations[0].hard_limit",
            ),
            (
                FULL.replace("stage = \"connection\"", "stage = \"request_execution\""),
                "isolation.stages[1].stage",
            ),
            (
                FULL.replace("default_weight = 1", "default_weight = 0"),
                "isolation.default_weight",
            ),
            (
                FULL.replace("max_tracked_owners = 4096", "max_tracked_owners = 0"),
                "isolation.max_tracked_owners",
            ),
            (
                FULL.replace("192.168.7.10", "10.0.5.0/24"),
                "isolation.ingress[1].cidr",
            ),
            (
                FULL.replace("class = \"reconnect\"", ""),
                "isolation.ingress[1]",
            ),
            (
                FULL.replace("mode = \"trusted_reservations\"", "mode = \"balanced\""),
                "isolation.trusted_owners",
            ),
        ] {
            match Config::from_toml(&doc) {
                Err(ConfigError::Invalid { setting: s, .. }) => assert_eq!(s, setting, "{doc}"),
                other => panic!("{doc}: {other:?}"),
            }
        }
    }

    #[test]
    fn chunk_count_and_footprint_formulas() {
        let s = Server::default();
        // ceil(4194304 / (65536 - 1024)) + 1 = 66 + 1.
        assert_eq!(s.max_chunk_count(), 67);
        assert_eq!(s.reassembly_footprint(), 66 * 65536);
        assert_eq!(s.reassembly_footprint(), 4_325_376);
        let small = Server {
            max_buffer_size: 8192,
            max_message_size: 16384,
            ..Server::default()
        };
        // ceil(16384 / 7168) + 1 = 3 + 1.
        assert_eq!(small.max_chunk_count(), 4);
        assert_eq!(small.reassembly_footprint(), 3 * 8192);
        // An exact multiple needs no extra chunk beyond the +1.
        let exact = Server {
            max_buffer_size: 8192,
            max_message_size: 7168 * 5,
            ..Server::default()
        };
        assert_eq!(exact.max_chunk_count(), 6);
        // The bound covers max_chunk_count full-header chunks whose bodies
        // fill max_message_size (the worst a message that cannot complete holds).
        for srv in [&s, &small, &exact] {
            let n = u64::from(srv.max_chunk_count());
            assert!(n >= 3);
            assert!(
                u64::from(srv.max_message_size) + 100 * n <= srv.reassembly_footprint(),
                "{srv:?}"
            );
        }
        // Values validate() refuses never panic.
        let odd = Server {
            max_buffer_size: 0,
            max_message_size: u32::MAX,
            ..Server::default()
        };
        assert_eq!(odd.max_chunk_count(), u32::MAX);
        assert_eq!(odd.reassembly_footprint(), 0);
    }

    #[test]
    fn max_bytes_without_session_only_in_shared_only() {
        let cfg = Config::from_toml(
            "[isolation]\nmode = \"shared_only\"\nmax_bytes_without_session = 1048576\n",
        )
        .unwrap();
        assert_eq!(cfg.isolation.max_bytes_without_session, Some(1_048_576));
        let again = Config::from_toml(&cfg.to_toml()).unwrap();
        assert_eq!(again, cfg);
        assert_eq!(Config::default().isolation.max_bytes_without_session, None);
        for mode in ["fair_share", "balanced"] {
            match Config::from_toml(&format!(
                "[isolation]\nmode = \"{mode}\"\nmax_bytes_without_session = 1048576\n"
            )) {
                Err(ConfigError::Invalid { setting, message }) => {
                    assert_eq!(setting, "isolation.max_bytes_without_session");
                    assert!(
                        message.contains("only applies to mode shared_only"),
                        "{message}"
                    );
                }
                other => panic!("{mode}: {other:?}"),
            }
        }
        match Config::from_toml(
            "[isolation]\nmode = \"shared_only\"\nmax_bytes_without_session = 0\n",
        ) {
            Err(ConfigError::Invalid { setting, .. }) => {
                assert_eq!(setting, "isolation.max_bytes_without_session")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn cidr_parsing_and_matching() {
        let net = Cidr::parse("10.0.5.0/24").unwrap();
        assert!(net.contains("10.0.5.255".parse().unwrap()));
        assert!(net.contains("::ffff:10.0.5.1".parse().unwrap()));
        assert!(!net.contains("10.0.6.1".parse().unwrap()));
        assert!(!net.contains("fd00::1".parse().unwrap()));
        let host = Cidr::parse("192.168.7.10").unwrap();
        assert_eq!(host.prefix_len(), 32);
        assert!(host.contains("192.168.7.10".parse().unwrap()));
        assert!(!host.contains("192.168.7.11".parse().unwrap()));
        let mapped = Cidr::parse("::ffff:10.1.0.0/112").unwrap();
        assert_eq!(mapped.to_string(), "10.1.0.0/16");
        assert!(mapped.contains("10.1.2.3".parse().unwrap()));
        let v6 = Cidr::parse("fd00:1::/32").unwrap();
        assert!(v6.contains("fd00:1::9".parse().unwrap()));
        assert!(!v6.contains("fd00:2::9".parse().unwrap()));
        let all = Cidr::parse("0.0.0.0/0").unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
        for bad in [
            "10.0.5.1/24",
            "10.0.0.0/33",
            "10.0.0.0/",
            "fd00::1/64",
            "host/8",
            "",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }
}
