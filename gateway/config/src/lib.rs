#![forbid(unsafe_code)]
//! The declarative configuration document of uagate (one TOML file, see
//! docs/config.md). Parsed strictly: unknown keys are an error, and
//! [`Config::validate`] names the offending setting for every bad value.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

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
    /// Resource isolation (only the handshake deadline is used so far).
    pub isolation: Isolation,
    /// Endpoints offered; empty means the default set (see [`Config::effective_endpoints`]).
    pub endpoints: Vec<Endpoint>,
    /// How this server presents itself in a redundant set (Server.ServerRedundancy).
    pub redundancy: Redundancy,
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
    /// opc.wss + opc.https listener (later issue).
    pub tls: SocketAddr,
    /// Browser console (later issue).
    pub console: SocketAddr,
    /// Host name put in endpoint URLs; default: the machine's host name, or
    /// the listen IP when it is not a wildcard address.
    pub public_host: Option<String>,
}

impl Default for Listen {
    fn default() -> Self {
        Listen {
            opc_tcp: ([0, 0, 0, 0], 4840).into(),
            tls: ([0, 0, 0, 0], 4843).into(),
            console: ([0, 0, 0, 0], 8443).into(),
            public_host: None,
        }
    }
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
        }
    }
}

/// `[isolation]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Isolation {
    /// shared_only | fair_share | balanced | trusted_reservations (used by a later issue).
    pub mode: String,
    /// Most distinct owners tracked (used by a later issue).
    pub max_tracked_owners: u32,
    /// Time from TCP accept until the secure channel must be open; at most 2 minutes.
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: Duration,
}

impl Default for Isolation {
    fn default() -> Self {
        Isolation {
            mode: "balanced".into(),
            max_tracked_owners: 4096,
            handshake_timeout: Duration::from_secs(120),
        }
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
        let cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The document as TOML (what `config export` prints).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }

    /// Checks every value; the error names the first offending setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
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
        if ![
            "shared_only",
            "fair_share",
            "balanced",
            "trusted_reservations",
        ]
        .contains(&i.mode.as_str())
        {
            return Err(invalid(
                "isolation.mode",
                "must be one of shared_only, fair_share, balanced, trusted_reservations",
            ));
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
