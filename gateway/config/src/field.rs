//! `[[field_servers]]`: the OPC UA servers in the field that the gateway
//! connects to as a client, each possibly a redundant set with alternate
//! network paths, and how it connects, authenticates and reconnects.

use std::net::Ipv6Addr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{invalid, ConfigError, SecurityMode, POLICIES};

/// Most `[[field_servers]]` entries in one document.
pub const MAX_FIELD_SERVERS: usize = 64;
/// Most servers (endpoints) in one field server's redundant set.
pub const MAX_FIELD_ENDPOINTS: usize = 8;
/// Most alternate network paths of one endpoint.
pub const MAX_ALTERNATES: usize = 4;
/// Longest field server name, in characters.
pub const MAX_FIELD_SERVER_NAME_LEN: usize = 32;

/// `[[field_servers]]`: one field OPC UA server (or redundant set of
/// servers) the gateway connects to as a client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldServer {
    /// Identifies the field server in logs, metrics and the address space;
    /// 1..=32 characters of `[A-Za-z0-9_-]`, unique ignoring case.
    pub name: String,
    /// The servers of the redundant set (1..=8), each with its alternate
    /// network paths.
    pub endpoints: Vec<FieldEndpoint>,
    /// Message security mode of the sessions; default `sign_and_encrypt`.
    #[serde(default = "default_security_mode")]
    pub security_mode: SecurityMode,
    /// Security policy, one of [`POLICIES`]; `None` exactly when
    /// `security_mode` is `none`. Default `Basic256Sha256`.
    #[serde(default = "default_security_policy")]
    pub security_policy: String,
    /// The user identity the gateway activates its sessions with.
    #[serde(default)]
    pub identity: FieldIdentity,
    /// How the servers of `endpoints` form a redundant set.
    #[serde(default)]
    pub redundancy: FieldRedundancy,
    /// How lost connections are re-established.
    #[serde(default)]
    pub reconnect: ReconnectSettings,
    /// Lower operation limits than the field server announces (0: use its value).
    #[serde(default)]
    pub operation_limits: OperationLimitOverrides,
    /// Whether the gateway connects to this field server at all.
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    /// Timeout of one service request (100ms..=10m).
    #[serde(with = "humantime_serde", default = "default_request_timeout")]
    pub request_timeout: Duration,
    /// Requested session timeout (1s..=1h).
    #[serde(with = "humantime_serde", default = "default_session_timeout")]
    pub session_timeout: Duration,
    /// Keep-alive interval (100ms..=60s); also the publishing interval of
    /// the subscription watching the servers' ServiceLevel.
    #[serde(with = "humantime_serde", default = "default_keep_alive_interval")]
    pub keep_alive_interval: Duration,
}

fn default_security_mode() -> SecurityMode {
    SecurityMode::SignAndEncrypt
}

fn default_security_policy() -> String {
    "Basic256Sha256".into()
}

fn default_enabled() -> bool {
    true
}

fn default_request_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_session_timeout() -> Duration {
    Duration::from_secs(60)
}

fn default_keep_alive_interval() -> Duration {
    Duration::from_secs(1)
}

impl FieldServer {
    /// A field server with the given name and endpoints and every other
    /// setting at its default (what a document omitting them gives).
    pub fn new(name: impl Into<String>, endpoints: Vec<FieldEndpoint>) -> FieldServer {
        FieldServer {
            name: name.into(),
            endpoints,
            security_mode: default_security_mode(),
            security_policy: default_security_policy(),
            identity: FieldIdentity::default(),
            redundancy: FieldRedundancy::default(),
            reconnect: ReconnectSettings::default(),
            operation_limits: OperationLimitOverrides::default(),
            enabled: default_enabled(),
            request_timeout: default_request_timeout(),
            session_timeout: default_session_timeout(),
            keep_alive_interval: default_keep_alive_interval(),
        }
    }

    /// Every URL of the field server: first each endpoint's `url` in order,
    /// then every endpoint's `alternates` in order.
    pub fn all_urls(&self) -> impl Iterator<Item = &str> {
        self.endpoints.iter().map(|e| e.url.as_str()).chain(
            self.endpoints
                .iter()
                .flat_map(|e| e.alternates.iter().map(String::as_str)),
        )
    }
}

/// One server of the redundant set with its alternate network paths
/// (network redundancy: same server, other route). In TOML either a plain
/// URL string or `{ url = "...", alternates = ["..."] }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "EndpointForm", into = "EndpointForm")]
pub struct FieldEndpoint {
    /// The server's `opc.tcp://host:port[/path]` URL.
    pub url: String,
    /// Other `opc.tcp://` URLs reaching the same server (at most 4).
    pub alternates: Vec<String>,
}

impl FieldEndpoint {
    /// An endpoint reached by one URL, without alternates.
    pub fn new(url: impl Into<String>) -> FieldEndpoint {
        FieldEndpoint {
            url: url.into(),
            alternates: Vec::new(),
        }
    }
}

/// How an endpoint is written in TOML: a plain URL or a table.
#[derive(Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "an opc.tcp:// URL or a table { url = \"opc.tcp://...\", alternates = [...] } without other keys"
)]
enum EndpointForm {
    /// `"opc.tcp://host:port"`.
    Url(String),
    /// `{ url = "...", alternates = [...] }`.
    Table(EndpointTable),
}

/// The table form of an endpoint.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EndpointTable {
    url: String,
    #[serde(default)]
    alternates: Vec<String>,
}

impl From<EndpointForm> for FieldEndpoint {
    fn from(form: EndpointForm) -> FieldEndpoint {
        match form {
            EndpointForm::Url(url) => FieldEndpoint::new(url),
            EndpointForm::Table(t) => FieldEndpoint {
                url: t.url,
                alternates: t.alternates,
            },
        }
    }
}

impl From<FieldEndpoint> for EndpointForm {
    fn from(e: FieldEndpoint) -> EndpointForm {
        if e.alternates.is_empty() {
            EndpointForm::Url(e.url)
        } else {
            EndpointForm::Table(EndpointTable {
                url: e.url,
                alternates: e.alternates,
            })
        }
    }
}

/// The user identity the gateway presents to a field server. In TOML:
/// `identity = { kind = "username", username = "op", password = "secret" }`.
#[derive(Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", from = "IdentityForm")]
pub enum FieldIdentity {
    /// No user identity.
    #[default]
    Anonymous,
    /// User name and password.
    Username {
        /// The user name; not empty.
        username: String,
        /// The password; never printed by `Debug`.
        password: String,
    },
    /// An X.509 user certificate and its private key (files).
    Certificate {
        /// The user certificate file (DER or PEM).
        certificate: PathBuf,
        /// The certificate's private key file.
        private_key: PathBuf,
    },
}

/// How an identity is read from TOML: like [`FieldIdentity`], except that
/// `anonymous` is a struct variant so that unknown keys beside
/// `kind = "anonymous"` are refused too.
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum IdentityForm {
    Anonymous {},
    Username {
        username: String,
        password: String,
    },
    Certificate {
        certificate: PathBuf,
        private_key: PathBuf,
    },
}

impl From<IdentityForm> for FieldIdentity {
    fn from(form: IdentityForm) -> FieldIdentity {
        match form {
            IdentityForm::Anonymous {} => FieldIdentity::Anonymous,
            IdentityForm::Username { username, password } => {
                FieldIdentity::Username { username, password }
            }
            IdentityForm::Certificate {
                certificate,
                private_key,
            } => FieldIdentity::Certificate {
                certificate,
                private_key,
            },
        }
    }
}

impl std::fmt::Debug for FieldIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FieldIdentity::Anonymous => f.write_str("Anonymous"),
            FieldIdentity::Username { username, .. } => f
                .debug_struct("Username")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
            FieldIdentity::Certificate {
                certificate,
                private_key,
            } => f
                .debug_struct("Certificate")
                .field("certificate", certificate)
                .field("private_key", private_key)
                .finish(),
        }
    }
}

/// How the servers of a field server's `endpoints` form a redundant set
/// (Part 4 §6.6 client failover).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldRedundancy {
    /// One server (exactly one endpoint; its alternates are network paths).
    #[default]
    None,
    /// Cold failover: connect to a backup only after the active server failed.
    Cold,
    /// Warm failover: sessions open on the backups, data only from the active one.
    Warm,
    /// Hot failover: every server samples, only the active one reports (reporting handoff).
    Hot,
    /// Hot failover where every server reports and the gateway suppresses duplicates.
    HotMerge,
    /// Hot and mirrored: one session, re-activated on a backup after a failure.
    HotAndMirrored,
}

impl FieldRedundancy {
    /// The snake_case name used in the document.
    pub fn as_str(self) -> &'static str {
        match self {
            FieldRedundancy::None => "none",
            FieldRedundancy::Cold => "cold",
            FieldRedundancy::Warm => "warm",
            FieldRedundancy::Hot => "hot",
            FieldRedundancy::HotMerge => "hot_merge",
            FieldRedundancy::HotAndMirrored => "hot_and_mirrored",
        }
    }
}

/// How the delay between reconnect attempts grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackoffStrategy {
    /// The delay doubles after each failed attempt, up to `max_delay`.
    #[default]
    Exponential,
    /// The delay grows by `initial_delay` after each failed attempt, up to `max_delay`.
    Linear,
    /// Always `initial_delay`.
    Constant,
}

/// `[field_servers.reconnect]`: how a lost connection to a field server is
/// re-established.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReconnectSettings {
    /// How the delay between attempts grows.
    pub strategy: BackoffStrategy,
    /// Delay before the first attempt; above zero.
    #[serde(with = "humantime_serde")]
    pub initial_delay: Duration,
    /// Longest delay between attempts; at least `initial_delay`.
    #[serde(with = "humantime_serde")]
    pub max_delay: Duration,
    /// Attempts before giving up; 0 means unlimited.
    pub max_retries: u32,
    /// Random spread of each delay as a fraction of it (0.0..=1.0).
    pub jitter: f64,
    /// Longest time spent reconnecting before giving up; above zero.
    #[serde(with = "humantime_serde")]
    pub max_total_reconnect_time: Duration,
}

impl Default for ReconnectSettings {
    fn default() -> Self {
        ReconnectSettings {
            strategy: BackoffStrategy::Exponential,
            initial_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
            max_retries: 0,
            jitter: 0.1,
            max_total_reconnect_time: Duration::from_secs(300),
        }
    }
}

/// `[field_servers.operation_limits]`: operation limits the gateway uses
/// towards a field server instead of the ones it announces; 0 takes the
/// field server's value.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OperationLimitOverrides {
    /// Most nodes in one Read.
    pub max_nodes_per_read: u32,
    /// Most values in one Write.
    pub max_nodes_per_write: u32,
    /// Most nodes in one Browse/BrowseNext.
    pub max_nodes_per_browse: u32,
    /// Most calls in one Call.
    pub max_nodes_per_method_call: u32,
    /// Most browse paths in one TranslateBrowsePathsToNodeIds.
    pub max_nodes_per_translate: u32,
    /// Most nodes in one HistoryRead of raw, processed or at-time data.
    pub max_nodes_per_history_read_data: u32,
    /// Most monitored items in one Create/Modify/DeleteMonitoredItems.
    pub max_monitored_items_per_call: u32,
    /// Longest array in a value.
    pub max_array_length: u32,
    /// Most monitored items in one subscription (the gateway spreads its
    /// items over more subscriptions beyond it).
    pub max_monitored_items_per_subscription: u32,
}

/// The parts of an `opc.tcp://host:port[/path]` URL that make two URLs the
/// same: lower-cased host, port, path without a trailing `/`.
#[derive(PartialEq, Eq)]
struct UrlKey {
    host: String,
    port: u16,
    path: String,
}

/// Parses an `opc.tcp://host:port[/path]` URL (host may be a bracketed IPv6
/// address) into its [`UrlKey`], or says what is wrong.
fn parse_opc_tcp_url(url: &str) -> Result<UrlKey, String> {
    let rest = url
        .strip_prefix("opc.tcp://")
        .ok_or_else(|| format!("`{url}` must start with opc.tcp://"))?;
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("`{url}` contains whitespace or control characters"));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    if authority.contains('@') {
        return Err(format!("`{url}` must not contain user information"));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (addr, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("`{url}`: unclosed `[` in the host"))?;
        addr.parse::<Ipv6Addr>()
            .map_err(|_| format!("`{url}`: `{addr}` is not an IPv6 address"))?;
        let port = after
            .strip_prefix(':')
            .ok_or_else(|| format!("`{url}` needs a port (host:port)"))?;
        (addr, port)
    } else {
        let (host, port) = authority
            .rsplit_once(':')
            .ok_or_else(|| format!("`{url}` needs a port (host:port)"))?;
        if !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        {
            return Err(format!(
                "`{url}`: `{host}` is not a host name or IPv4 address"
            ));
        }
        (host, port)
    };
    if host.is_empty() {
        return Err(format!("`{url}` needs a host"));
    }
    let port = match port.parse::<u16>() {
        Ok(p) if p != 0 && port.bytes().all(|b| b.is_ascii_digit()) => p,
        _ => return Err(format!("`{url}`: the port must be 1..=65535")),
    };
    Ok(UrlKey {
        host: host.to_ascii_lowercase(),
        port,
        path: path.trim_end_matches('/').to_string(),
    })
}

/// Checks a duration against an inclusive range, naming `setting`.
fn check_range(
    setting: &str,
    value: Duration,
    min: Duration,
    max: Duration,
    range: &str,
) -> Result<(), ConfigError> {
    if value < min || value > max {
        return Err(invalid(setting, format!("must be {range}")));
    }
    Ok(())
}

/// The checks of `[[field_servers]]`; the error names the first offending
/// setting, e.g. `field_servers[1].reconnect.max_delay`.
/// Names a field connection cannot have: the gateway's own folders under
/// Objects, where each mount folder goes too.
pub const RESERVED_FIELD_NAMES: [&str; 1] = ["Gateway"];

pub(crate) fn validate_field_servers(servers: &[FieldServer]) -> Result<(), ConfigError> {
    if servers.len() > MAX_FIELD_SERVERS {
        return Err(invalid(
            "field_servers",
            format!("at most {MAX_FIELD_SERVERS} field servers"),
        ));
    }
    for (i, fs) in servers.iter().enumerate() {
        let at = |f: &str| format!("field_servers[{i}].{f}");
        let name_ok = (1..=MAX_FIELD_SERVER_NAME_LEN).contains(&fs.name.chars().count())
            && fs
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
        if !name_ok {
            return Err(invalid(
                &at("name"),
                format!(
                    "must be 1 to {MAX_FIELD_SERVER_NAME_LEN} characters of A-Z, a-z, 0-9, _ and -"
                ),
            ));
        }
        if RESERVED_FIELD_NAMES
            .iter()
            .any(|r| r.eq_ignore_ascii_case(&fs.name))
        {
            return Err(invalid(
                &at("name"),
                format!(
                    "`{}` is the name of the gateway's own folder under Objects; choose another",
                    fs.name
                ),
            ));
        }
        if servers[..i]
            .iter()
            .any(|o| o.name.eq_ignore_ascii_case(&fs.name))
        {
            return Err(invalid(
                &at("name"),
                format!(
                    "`{}` is used by another field server (names ignore case)",
                    fs.name
                ),
            ));
        }
        if !(1..=MAX_FIELD_ENDPOINTS).contains(&fs.endpoints.len()) {
            return Err(invalid(
                &at("endpoints"),
                format!("must list 1 to {MAX_FIELD_ENDPOINTS} servers"),
            ));
        }
        let mut seen: Vec<UrlKey> = Vec::new();
        for (j, e) in fs.endpoints.iter().enumerate() {
            if e.alternates.len() > MAX_ALTERNATES {
                return Err(invalid(
                    &at(&format!("endpoints[{j}].alternates")),
                    format!("at most {MAX_ALTERNATES} alternates per endpoint"),
                ));
            }
            let urls = std::iter::once((format!("endpoints[{j}].url"), &e.url)).chain(
                e.alternates
                    .iter()
                    .enumerate()
                    .map(|(k, a)| (format!("endpoints[{j}].alternates[{k}]"), a)),
            );
            for (setting, url) in urls {
                let key = parse_opc_tcp_url(url).map_err(|m| invalid(&at(&setting), m))?;
                if seen.contains(&key) {
                    return Err(invalid(
                        &at(&setting),
                        format!("`{url}` appears twice in this field server"),
                    ));
                }
                seen.push(key);
            }
        }
        match fs.redundancy {
            FieldRedundancy::None if fs.endpoints.len() != 1 => {
                return Err(invalid(
                    &at("redundancy"),
                    format!(
                        "redundancy none needs exactly one endpoint ({} listed); use alternates for other network paths or choose a redundancy mode",
                        fs.endpoints.len()
                    ),
                ));
            }
            r if r != FieldRedundancy::None && fs.endpoints.len() < 2 => {
                return Err(invalid(
                    &at("redundancy"),
                    format!("redundancy {} needs at least two endpoints", r.as_str()),
                ));
            }
            _ => {}
        }
        if !POLICIES.contains(&fs.security_policy.as_str()) {
            return Err(invalid(
                &at("security_policy"),
                format!("must be one of {}", POLICIES.join(", ")),
            ));
        }
        if (fs.security_policy == "None") != (fs.security_mode == SecurityMode::None) {
            return Err(invalid(
                &at("security_mode"),
                "policy None requires mode none, and other policies require sign or sign_and_encrypt",
            ));
        }
        match &fs.identity {
            FieldIdentity::Anonymous => {}
            FieldIdentity::Username { username, .. } => {
                if username.is_empty() {
                    return Err(invalid(&at("identity.username"), "must not be empty"));
                }
            }
            FieldIdentity::Certificate {
                certificate,
                private_key,
            } => {
                if certificate.as_os_str().is_empty() {
                    return Err(invalid(&at("identity.certificate"), "must not be empty"));
                }
                if private_key.as_os_str().is_empty() {
                    return Err(invalid(&at("identity.private_key"), "must not be empty"));
                }
            }
        }
        let r = &fs.reconnect;
        if r.initial_delay.is_zero() {
            return Err(invalid(
                &at("reconnect.initial_delay"),
                "must be above zero",
            ));
        }
        if r.max_delay < r.initial_delay {
            return Err(invalid(
                &at("reconnect.max_delay"),
                "must not be below reconnect.initial_delay",
            ));
        }
        if !(0.0..=1.0).contains(&r.jitter) {
            return Err(invalid(
                &at("reconnect.jitter"),
                "must be between 0.0 and 1.0",
            ));
        }
        if r.max_total_reconnect_time.is_zero() {
            return Err(invalid(
                &at("reconnect.max_total_reconnect_time"),
                "must be above zero",
            ));
        }
        check_range(
            &at("request_timeout"),
            fs.request_timeout,
            Duration::from_millis(100),
            Duration::from_secs(600),
            "between 100ms and 10m",
        )?;
        check_range(
            &at("session_timeout"),
            fs.session_timeout,
            Duration::from_secs(1),
            Duration::from_secs(3600),
            "between 1s and 1h",
        )?;
        check_range(
            &at("keep_alive_interval"),
            fs.keep_alive_interval,
            Duration::from_millis(100),
            Duration::from_secs(60),
            "between 100ms and 60s",
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    /// A hot pair, the first server with an alternate network path.
    const HOT_PAIR: &str = r#"
[[field_servers]]
name = "line-1"
endpoints = [
    { url = "opc.tcp://10.0.1.5:4840", alternates = ["opc.tcp://10.1.1.5:4840"] },
    "opc.tcp://10.0.1.6:4840",
]
security_mode = "sign"
security_policy = "Aes256_Sha256_RsaPss"
identity = { kind = "username", username = "op", password = "secret" }
redundancy = "hot"
enabled = true
request_timeout = "5s"
session_timeout = "2m"
keep_alive_interval = "500ms"

[field_servers.reconnect]
strategy = "linear"
initial_delay = "2s"
max_delay = "1m"
max_retries = 10
jitter = 0.25
max_total_reconnect_time = "10m"

[field_servers.operation_limits]
max_nodes_per_read = 500
max_array_length = 65536
"#;

    fn parse(doc: &str) -> Config {
        Config::from_toml(doc).unwrap_or_else(|e| panic!("{doc}\n{e}"))
    }

    fn expect_invalid(doc: &str, setting: &str) {
        match Config::from_toml(doc) {
            Err(ConfigError::Invalid { setting: s, .. }) => assert_eq!(s, setting, "{doc}"),
            other => panic!("{doc}: expected invalid {setting}, got {other:?}"),
        }
    }

    fn round_trip(cfg: &Config) {
        let text = cfg.to_toml();
        let again = Config::from_toml(&text).unwrap_or_else(|e| panic!("{text}\n{e}"));
        assert_eq!(&again, cfg, "{text}");
    }

    #[test]
    fn full_example_parses() {
        let cfg = parse(HOT_PAIR);
        assert_eq!(cfg.field_servers.len(), 1);
        let fs = &cfg.field_servers[0];
        assert_eq!(fs.name, "line-1");
        assert_eq!(
            fs.endpoints,
            vec![
                FieldEndpoint {
                    url: "opc.tcp://10.0.1.5:4840".into(),
                    alternates: vec!["opc.tcp://10.1.1.5:4840".into()],
                },
                FieldEndpoint::new("opc.tcp://10.0.1.6:4840"),
            ]
        );
        assert_eq!(fs.security_mode, SecurityMode::Sign);
        assert_eq!(fs.security_policy, "Aes256_Sha256_RsaPss");
        assert_eq!(
            fs.identity,
            FieldIdentity::Username {
                username: "op".into(),
                password: "secret".into()
            }
        );
        assert_eq!(fs.redundancy, FieldRedundancy::Hot);
        assert_eq!(
            fs.reconnect,
            ReconnectSettings {
                strategy: BackoffStrategy::Linear,
                initial_delay: Duration::from_secs(2),
                max_delay: Duration::from_secs(60),
                max_retries: 10,
                jitter: 0.25,
                max_total_reconnect_time: Duration::from_secs(600),
            }
        );
        assert_eq!(
            fs.operation_limits,
            OperationLimitOverrides {
                max_nodes_per_read: 500,
                max_array_length: 65536,
                ..OperationLimitOverrides::default()
            }
        );
        assert!(fs.enabled);
        assert_eq!(fs.request_timeout, Duration::from_secs(5));
        assert_eq!(fs.session_timeout, Duration::from_secs(120));
        assert_eq!(fs.keep_alive_interval, Duration::from_millis(500));
        assert_eq!(
            fs.all_urls().collect::<Vec<_>>(),
            [
                "opc.tcp://10.0.1.5:4840",
                "opc.tcp://10.0.1.6:4840",
                "opc.tcp://10.1.1.5:4840"
            ]
        );
    }

    #[test]
    fn defaults() {
        assert!(Config::default().field_servers.is_empty());
        assert!(parse("").field_servers.is_empty());
        let cfg =
            parse("[[field_servers]]\nname = \"plc\"\nendpoints = [\"opc.tcp://plc:4840\"]\n");
        let fs = &cfg.field_servers[0];
        assert_eq!(
            fs,
            &FieldServer::new("plc", vec![FieldEndpoint::new("opc.tcp://plc:4840")])
        );
        assert_eq!(fs.security_mode, SecurityMode::SignAndEncrypt);
        assert_eq!(fs.security_policy, "Basic256Sha256");
        assert_eq!(fs.identity, FieldIdentity::Anonymous);
        assert_eq!(fs.redundancy, FieldRedundancy::None);
        assert!(fs.enabled);
        assert_eq!(fs.request_timeout, Duration::from_secs(10));
        assert_eq!(fs.session_timeout, Duration::from_secs(60));
        assert_eq!(fs.keep_alive_interval, Duration::from_secs(1));
        let r = &fs.reconnect;
        assert_eq!(r.strategy, BackoffStrategy::Exponential);
        assert_eq!(r.initial_delay, Duration::from_secs(1));
        assert_eq!(r.max_delay, Duration::from_secs(30));
        assert_eq!(r.max_retries, 0);
        assert_eq!(r.jitter, 0.1);
        assert_eq!(r.max_total_reconnect_time, Duration::from_secs(300));
        assert_eq!(r, &ReconnectSettings::default());
        assert_eq!(fs.operation_limits, OperationLimitOverrides::default());
        assert_eq!(fs.operation_limits.max_nodes_per_history_read_data, 0);
        // A partial reconnect table keeps the other defaults.
        let cfg = parse(
            "[[field_servers]]\nname = \"plc\"\nendpoints = [\"opc.tcp://plc:4840\"]\n[field_servers.reconnect]\nmax_retries = 3\n",
        );
        assert_eq!(
            cfg.field_servers[0].reconnect,
            ReconnectSettings {
                max_retries: 3,
                ..ReconnectSettings::default()
            }
        );
    }

    #[test]
    fn endpoint_string_or_table_forms() {
        let cfg = parse(
            r#"
[[field_servers]]
name = "a"
endpoints = ["opc.tcp://a:4840"]

[[field_servers]]
name = "b"
endpoints = [{ url = "opc.tcp://b:4840" }]

[[field_servers]]
name = "c"
endpoints = [{ url = "opc.tcp://c:4840", alternates = ["opc.tcp://c2:4840", "opc.tcp://[fd00::c]:4840/ua"] }]

[[field_servers]]
name = "d"
redundancy = "cold"
[[field_servers.endpoints]]
url = "opc.tcp://d1:4840"
[[field_servers.endpoints]]
url = "opc.tcp://d2:4840"
alternates = ["opc.tcp://d2b:4840"]
"#,
        );
        let f = &cfg.field_servers;
        assert_eq!(f[0].endpoints, [FieldEndpoint::new("opc.tcp://a:4840")]);
        assert_eq!(f[1].endpoints, [FieldEndpoint::new("opc.tcp://b:4840")]);
        assert_eq!(
            f[2].endpoints[0].alternates,
            ["opc.tcp://c2:4840", "opc.tcp://[fd00::c]:4840/ua"]
        );
        assert_eq!(f[3].endpoints[0], FieldEndpoint::new("opc.tcp://d1:4840"));
        assert_eq!(f[3].endpoints[1].alternates, ["opc.tcp://d2b:4840"]);
        round_trip(&cfg);
        // Unknown keys in the table form and other types are refused.
        for doc in [
            "[[field_servers]]\nname = \"a\"\nendpoints = [{ url = \"opc.tcp://a:1\", alternate = [] }]\n",
            "[[field_servers]]\nname = \"a\"\nendpoints = [4840]\n",
            "[[field_servers]]\nname = \"a\"\nendpoints = [{ alternates = [] }]\n",
        ] {
            assert!(matches!(Config::from_toml(doc), Err(ConfigError::Parse(_))), "{doc}");
        }
    }

    #[test]
    fn round_trips() {
        round_trip(&parse(HOT_PAIR));
        let mut cfg = parse(HOT_PAIR);
        let mut cert = FieldServer::new(
            "Cert_Server",
            vec![FieldEndpoint::new("opc.tcp://cert.plant.local:48010/path")],
        );
        cert.identity = FieldIdentity::Certificate {
            certificate: "/etc/uagate/user.der".into(),
            private_key: "/etc/uagate/user.pem".into(),
        };
        cert.security_mode = SecurityMode::None;
        cert.security_policy = "None".into();
        cert.enabled = false;
        cert.reconnect.strategy = BackoffStrategy::Constant;
        cert.reconnect.jitter = 0.0;
        cert.request_timeout = Duration::from_millis(1500);
        let mut mirrored = FieldServer::new(
            "mirrored",
            vec![
                FieldEndpoint::new("opc.tcp://m1:4840"),
                FieldEndpoint::new("opc.tcp://m2:4840"),
            ],
        );
        mirrored.redundancy = FieldRedundancy::HotAndMirrored;
        cfg.field_servers.push(cert);
        cfg.field_servers.push(mirrored);
        for r in [
            FieldRedundancy::Cold,
            FieldRedundancy::Warm,
            FieldRedundancy::HotMerge,
        ] {
            let mut fs = cfg.field_servers[2].clone();
            fs.name = r.as_str().replace('_', "-");
            fs.redundancy = r;
            cfg.field_servers.push(fs);
        }
        cfg.validate().unwrap();
        round_trip(&cfg);
    }

    #[test]
    fn debug_redacts_the_password() {
        let id = FieldIdentity::Username {
            username: "op".into(),
            password: "hunter2-secret".into(),
        };
        let text = format!("{id:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert_eq!(
            text,
            r#"Username { username: "op", password: "<redacted>" }"#
        );
        let cfg = parse(HOT_PAIR);
        let whole = format!("{cfg:?} {cfg:#?}");
        assert!(!whole.contains("secret"), "{whole}");
        assert!(whole.contains("<redacted>"));
        assert_eq!(format!("{:?}", FieldIdentity::Anonymous), "Anonymous");
        let cert = FieldIdentity::Certificate {
            certificate: "c.der".into(),
            private_key: "k.pem".into(),
        };
        assert!(format!("{cert:?}").contains("k.pem"));
    }

    #[test]
    fn identity_kinds_parse_strictly() {
        let base = "[[field_servers]]\nname = \"a\"\nendpoints = [\"opc.tcp://a:4840\"]\n";
        let cfg = parse(&format!(
            "{base}identity = {{ kind = \"certificate\", certificate = \"u.der\", private_key = \"u.pem\" }}\n"
        ));
        assert_eq!(
            cfg.field_servers[0].identity,
            FieldIdentity::Certificate {
                certificate: "u.der".into(),
                private_key: "u.pem".into()
            }
        );
        let cfg = parse(&format!("{base}identity = {{ kind = \"anonymous\" }}\n"));
        assert_eq!(cfg.field_servers[0].identity, FieldIdentity::Anonymous);
        for extra in [
            "identity = { kind = \"username\", username = \"op\", password = \"x\", domain = \"d\" }",
            "identity = { kind = \"username\", username = \"op\" }",
            "identity = { kind = \"kerberos\" }",
            "identity = { kind = \"anonymous\", username = \"op\" }",
            "identity = \"anonymous\"",
            "identity = { username = \"op\", password = \"x\" }",
            "redundancy = \"transparent\"",
            "[field_servers.reconnect]\nstrategy = \"fibonacci\"",
            "[field_servers.reconnect]\ndelay = \"1s\"",
            "[field_servers.operation_limits]\nmax_nodes_per_call = 1",
            "colour = \"blue\"",
        ] {
            let doc = format!("{base}{extra}\n");
            assert!(matches!(Config::from_toml(&doc), Err(ConfigError::Parse(_))), "{doc}");
        }
        for missing in [
            "[[field_servers]]\nendpoints = [\"opc.tcp://a:4840\"]\n",
            "[[field_servers]]\nname = \"a\"\n",
        ] {
            assert!(
                matches!(Config::from_toml(missing), Err(ConfigError::Parse(_))),
                "{missing}"
            );
        }
    }

    #[test]
    fn each_rule_names_its_setting() {
        let one = |extra: &str| {
            format!(
                "[[field_servers]]\nname = \"a\"\nendpoints = [\"opc.tcp://a:4840\"]\n{extra}\n"
            )
        };
        let eps = |list: &str, extra: &str| {
            format!("[[field_servers]]\nname = \"a\"\nendpoints = [{list}]\n{extra}\n")
        };
        let long = "n".repeat(33);
        let cases: Vec<(String, &str)> = vec![
            (one("").replace("\"a\"", "\"\""), "field_servers[0].name"),
            (one("").replace("\"a\"", &format!("\"{long}\"")), "field_servers[0].name"),
            (one("").replace("\"a\"", "\"line 1\""), "field_servers[0].name"),
            (one("").replace("\"a\"", "\"line.1\""), "field_servers[0].name"),
            (one("").replace("\"a\"", "\"lïne\""), "field_servers[0].name"),
            (one("").replace("\"a\"", "\"gateway\""), "field_servers[0].name"),
            (
                format!(
                    "{}[[field_servers]]\nname = \"A\"\nendpoints = [\"opc.tcp://b:4840\"]\n",
                    one("")
                ),
                "field_servers[1].name",
            ),
            (eps("", ""), "field_servers[0].endpoints"),
            (
                eps(
                    &(1..=9)
                        .map(|n| format!("\"opc.tcp://h{n}:4840\""))
                        .collect::<Vec<_>>()
                        .join(", "),
                    "redundancy = \"hot\"",
                ),
                "field_servers[0].endpoints",
            ),
            (eps("\"http://a:4840\"", ""), "field_servers[0].endpoints[0].url"),
            (eps("\"opc.tcp://a\"", ""), "field_servers[0].endpoints[0].url"),
            (eps("\"opc.tcp://:4840\"", ""), "field_servers[0].endpoints[0].url"),
            (eps("\"opc.tcp://a:0\"", ""), "field_servers[0].endpoints[0].url"),
            (eps("\"opc.tcp://a:70000\"", ""), "field_servers[0].endpoints[0].url"),
            (eps("\"opc.tcp://a:+48\"", ""), "field_servers[0].endpoints[0].url"),
            (eps("\"opc.tcp://a b:4840\"", ""), "field_servers[0].endpoints[0].url"),
            (eps("\"opc.tcp://u@a:4840\"", ""), "field_servers[0].endpoints[0].url"),
            (eps("\"opc.tcp://[fd00::1:4840\"", ""), "field_servers[0].endpoints[0].url"),
            (eps("\"opc.tcp://[nothex]:4840\"", ""), "field_servers[0].endpoints[0].url"),
            (eps("\"opc.tcp://fd00::1:4840\"", ""), "field_servers[0].endpoints[0].url"),
            (
                eps("{ url = \"opc.tcp://a:4840\", alternates = [\"opc.tcp://b\"] }", ""),
                "field_servers[0].endpoints[0].alternates[0]",
            ),
            (
                eps(
                    "{ url = \"opc.tcp://a:4840\", alternates = [\"opc.tcp://b:1\", \"opc.tcp://c:1\", \"opc.tcp://d:1\", \"opc.tcp://e:1\", \"opc.tcp://f:1\"] }",
                    "",
                ),
                "field_servers[0].endpoints[0].alternates",
            ),
            (
                eps(
                    "{ url = \"opc.tcp://a:4840\", alternates = [\"opc.tcp://A:4840/\"] }",
                    "",
                ),
                "field_servers[0].endpoints[0].alternates[0]",
            ),
            (
                eps(
                    "{ url = \"opc.tcp://a:4840\", alternates = [\"opc.tcp://b:4840\"] }, \"opc.tcp://b:4840\"",
                    "redundancy = \"warm\"",
                ),
                "field_servers[0].endpoints[1].url",
            ),
            (
                eps("\"opc.tcp://a:4840\", \"opc.tcp://b:4840\"", ""),
                "field_servers[0].redundancy",
            ),
            (one("redundancy = \"hot\""), "field_servers[0].redundancy"),
            (
                eps(
                    "{ url = \"opc.tcp://a:4840\", alternates = [\"opc.tcp://b:4840\"] }",
                    "redundancy = \"hot_and_mirrored\"",
                ),
                "field_servers[0].redundancy",
            ),
            (one("security_policy = \"Basic128Rsa15\""), "field_servers[0].security_policy"),
            (one("security_policy = \"None\""), "field_servers[0].security_mode"),
            (one("security_mode = \"none\""), "field_servers[0].security_mode"),
            (
                one("identity = { kind = \"username\", username = \"\", password = \"x\" }"),
                "field_servers[0].identity.username",
            ),
            (
                one("identity = { kind = \"certificate\", certificate = \"\", private_key = \"k\" }"),
                "field_servers[0].identity.certificate",
            ),
            (
                one("identity = { kind = \"certificate\", certificate = \"c\", private_key = \"\" }"),
                "field_servers[0].identity.private_key",
            ),
            (
                one("[field_servers.reconnect]\ninitial_delay = \"0s\""),
                "field_servers[0].reconnect.initial_delay",
            ),
            (
                one("[field_servers.reconnect]\ninitial_delay = \"1m\"\nmax_delay = \"30s\""),
                "field_servers[0].reconnect.max_delay",
            ),
            (
                one("[field_servers.reconnect]\njitter = 1.5"),
                "field_servers[0].reconnect.jitter",
            ),
            (
                one("[field_servers.reconnect]\njitter = -0.1"),
                "field_servers[0].reconnect.jitter",
            ),
            (
                one("[field_servers.reconnect]\njitter = nan"),
                "field_servers[0].reconnect.jitter",
            ),
            (
                one("[field_servers.reconnect]\nmax_total_reconnect_time = \"0s\""),
                "field_servers[0].reconnect.max_total_reconnect_time",
            ),
            (one("request_timeout = \"99ms\""), "field_servers[0].request_timeout"),
            (one("request_timeout = \"11m\""), "field_servers[0].request_timeout"),
            (one("session_timeout = \"999ms\""), "field_servers[0].session_timeout"),
            (one("session_timeout = \"61m\""), "field_servers[0].session_timeout"),
            (one("keep_alive_interval = \"50ms\""), "field_servers[0].keep_alive_interval"),
            (one("keep_alive_interval = \"61s\""), "field_servers[0].keep_alive_interval"),
        ];
        for (doc, setting) in &cases {
            expect_invalid(doc, setting);
        }
        // The index names the offending entry, not the first one.
        let second = format!(
            "{}[[field_servers]]\nname = \"b\"\nendpoints = [\"opc.tcp://b:4840\"]\n[field_servers.reconnect]\nmax_delay = \"10ms\"\n",
            one("")
        );
        expect_invalid(&second, "field_servers[1].reconnect.max_delay");
        // Too many field servers.
        let many: String = (0..=MAX_FIELD_SERVERS)
            .map(|n| {
                format!(
                    "[[field_servers]]\nname = \"s{n}\"\nendpoints = [\"opc.tcp://h{n}:4840\"]\n"
                )
            })
            .collect();
        expect_invalid(&many, "field_servers");
    }

    #[test]
    fn boundaries_are_accepted() {
        let long = "A-_9".repeat(8);
        let doc = format!(
            r#"
[[field_servers]]
name = "{long}"
endpoints = [{{ url = "opc.tcp://[fd00::1]:1/", alternates = ["opc.tcp://b:65535", "opc.tcp://c:2", "opc.tcp://d:3", "opc.tcp://fd00-1.local:4840/x/y"] }}]
security_mode = "none"
security_policy = "None"
request_timeout = "100ms"
session_timeout = "1h"
keep_alive_interval = "60s"

[field_servers.reconnect]
initial_delay = "1ms"
max_delay = "1ms"
jitter = 1.0
"#
        );
        let cfg = parse(&doc);
        assert_eq!(cfg.field_servers[0].name.len(), 32);
        let many: String = (0..MAX_FIELD_SERVERS)
            .map(|n| {
                format!(
                    "[[field_servers]]\nname = \"s{n}\"\nendpoints = [\"opc.tcp://h{n}:4840\"]\n"
                )
            })
            .collect();
        assert_eq!(parse(&many).field_servers.len(), MAX_FIELD_SERVERS);
        // The same URL may serve two field servers (e.g. other identities).
        let twice = "[[field_servers]]\nname = \"a\"\nendpoints = [\"opc.tcp://h:4840\"]\n[[field_servers]]\nname = \"b\"\nendpoints = [\"opc.tcp://h:4840\"]\n";
        assert_eq!(parse(twice).field_servers.len(), 2);
        let eight: Vec<String> = (1..=8)
            .map(|n| format!("\"opc.tcp://h{n}:4840\""))
            .collect();
        let cfg = parse(&format!(
            "[[field_servers]]\nname = \"a\"\nredundancy = \"hot_merge\"\nendpoints = [{}]\n",
            eight.join(", ")
        ));
        assert_eq!(cfg.field_servers[0].endpoints.len(), 8);
    }
}
