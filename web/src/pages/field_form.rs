//! The structured field connection form of the Field connections page:
//! what it shows (every input as text, ready for the template) and how a
//! posted form becomes one `[[field_servers]]` entry. Used to add a
//! connection, to edit one, and to test the settings as entered before
//! they are saved. Settings the form does not show (operation limit
//! overrides) are kept from the entry being edited.

use std::time::Duration;

use uagate_config::{
    BackoffStrategy, FieldEndpoint, FieldIdentity, FieldRedundancy, FieldServer, SecurityMode,
    POLICIES,
};

use crate::error::ApiError;
use crate::ops::KEEP_PASSWORD;

/// Most servers a redundant set may have (the configuration's limit).
pub const MAX_SERVERS: usize = 8;

/// The security modes of the select: (value, label).
pub const MODES: [(&str, &str); 3] = [
    ("sign_and_encrypt", "Sign and encrypt"),
    ("sign", "Sign"),
    ("none", "None (no security)"),
];

/// The redundancy modes of the select: (value, label).
pub const REDUNDANCY: [(&str, &str); 6] = [
    ("none", "None: one server"),
    ("cold", "Cold: connect to the backup only on failure"),
    ("warm", "Warm: backup connected, items on the active only"),
    ("hot", "Hot: items on every server, the active one delivers"),
    (
        "hot_merge",
        "Hot merge: items on every server, newest value wins",
    ),
    (
        "hot_and_mirrored",
        "Hot and mirrored: one session moved between servers",
    ),
];

/// The backoff strategies of the select: (value, label).
pub const STRATEGIES: [(&str, &str); 3] = [
    ("exponential", "Exponential"),
    ("linear", "Linear"),
    ("constant", "Constant"),
];

/// The identity kinds of the select: (value, label).
pub const IDENTITIES: [(&str, &str); 3] = [
    ("anonymous", "Anonymous"),
    ("username", "User name and password"),
    ("certificate", "User certificate"),
];

/// The security policies of the select.
pub fn policies() -> &'static [&'static str] {
    &POLICIES
}

/// One server row of the form: its URL and its alternate paths
/// (comma-separated).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerRow {
    /// The server's URL.
    pub url: String,
    /// Alternate URLs of the same server, comma-separated.
    pub alternates: String,
}

/// The form's inputs, as text.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldFormView {
    /// The name of the entry being edited; empty when adding.
    pub original: String,
    /// `name`.
    pub name: String,
    /// `enabled`.
    pub enabled: bool,
    /// One row per server, with at least one empty row to add another
    /// (up to [`MAX_SERVERS`]).
    pub servers: Vec<ServerRow>,
    /// `security_mode` (snake case).
    pub security_mode: String,
    /// `security_policy`.
    pub security_policy: String,
    /// `identity.kind`.
    pub identity: String,
    /// `identity.username`.
    pub username: String,
    /// `identity.password`: [`KEEP_PASSWORD`] for a stored one.
    pub password: String,
    /// `identity.certificate` (a file on the appliance).
    pub certificate: String,
    /// `identity.private_key` (a file on the appliance).
    pub private_key: String,
    /// `redundancy` (snake case).
    pub redundancy: String,
    /// `reconnect.strategy` (snake case).
    pub strategy: String,
    /// `reconnect.initial_delay` (e.g. `1s`).
    pub initial_delay: String,
    /// `reconnect.max_delay`.
    pub max_delay: String,
    /// `reconnect.max_retries` (0: unlimited).
    pub max_retries: String,
    /// `reconnect.jitter` (0..=1).
    pub jitter: String,
    /// `reconnect.max_total_reconnect_time`.
    pub max_total_reconnect_time: String,
    /// `request_timeout`.
    pub request_timeout: String,
    /// `session_timeout`.
    pub session_timeout: String,
    /// `keep_alive_interval`.
    pub keep_alive_interval: String,
    /// The input the error is about, when known, and the message shown
    /// next to it.
    pub error_at: Option<(String, String)>,
}

fn duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn mode_value(m: SecurityMode) -> &'static str {
    match m {
        SecurityMode::None => "none",
        SecurityMode::Sign => "sign",
        SecurityMode::SignAndEncrypt => "sign_and_encrypt",
    }
}

fn strategy_value(s: BackoffStrategy) -> &'static str {
    match s {
        BackoffStrategy::Exponential => "exponential",
        BackoffStrategy::Linear => "linear",
        BackoffStrategy::Constant => "constant",
    }
}

impl FieldFormView {
    /// The form showing `f` (its password as [`KEEP_PASSWORD`]); `editing`
    /// when it is a stored entry.
    pub fn of(f: &FieldServer, editing: bool) -> FieldFormView {
        let (identity, username, password, certificate, private_key) = match &f.identity {
            FieldIdentity::Anonymous => ("anonymous", "", "", String::new(), String::new()),
            FieldIdentity::Username { username, .. } => (
                "username",
                username.as_str(),
                KEEP_PASSWORD,
                String::new(),
                String::new(),
            ),
            FieldIdentity::Certificate {
                certificate,
                private_key,
            } => (
                "certificate",
                "",
                "",
                certificate.display().to_string(),
                private_key.display().to_string(),
            ),
        };
        let r = &f.reconnect;
        let mut view = FieldFormView {
            original: if editing {
                f.name.clone()
            } else {
                String::new()
            },
            name: f.name.clone(),
            enabled: f.enabled,
            servers: f
                .endpoints
                .iter()
                .map(|e| ServerRow {
                    url: e.url.clone(),
                    alternates: e.alternates.join(", "),
                })
                .collect(),
            security_mode: mode_value(f.security_mode).to_string(),
            security_policy: f.security_policy.clone(),
            identity: identity.to_string(),
            username: username.to_string(),
            password: password.to_string(),
            certificate,
            private_key,
            redundancy: f.redundancy.as_str().to_string(),
            strategy: strategy_value(r.strategy).to_string(),
            initial_delay: duration(r.initial_delay),
            max_delay: duration(r.max_delay),
            max_retries: r.max_retries.to_string(),
            jitter: r.jitter.to_string(),
            max_total_reconnect_time: duration(r.max_total_reconnect_time),
            request_timeout: duration(f.request_timeout),
            session_timeout: duration(f.session_timeout),
            keep_alive_interval: duration(f.keep_alive_interval),
            error_at: None,
        };
        view.pad();
        view
    }

    /// The empty form for a new connection (the documented defaults, two
    /// server rows to fill in: one, or both for a redundant pair).
    pub fn blank() -> FieldFormView {
        let mut v = FieldFormView::of(&FieldServer::new("", Vec::new()), false);
        v.name.clear();
        v
    }

    /// One empty row after the filled ones, and at least two rows, up to
    /// [`MAX_SERVERS`], so that a server (or a redundant pair at once) can
    /// be added without JavaScript.
    fn pad(&mut self) {
        self.servers.retain(|r| !r.url.trim().is_empty());
        while self.servers.len() < MAX_SERVERS
            && (self.servers.len() < 2 || self.servers.last().is_some_and(|r| !r.url.is_empty()))
        {
            self.servers.push(ServerRow::default());
        }
    }

    /// The form as posted (to show it again with a test result or an
    /// error); unknown inputs are ignored.
    pub fn posted(pairs: &[(String, String)]) -> FieldFormView {
        let get = |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let servers = (0..MAX_SERVERS)
            .map(|i| ServerRow {
                url: get(&format!("url{i}")).trim().to_string(),
                alternates: get(&format!("alt{i}")).trim().to_string(),
            })
            .collect();
        let mut v = FieldFormView {
            original: get("original"),
            name: get("name").trim().to_string(),
            enabled: pairs.iter().any(|(n, _)| n == "enabled"),
            servers,
            security_mode: get("security_mode"),
            security_policy: get("security_policy"),
            identity: get("identity"),
            username: get("username"),
            password: get("password"),
            certificate: get("certificate").trim().to_string(),
            private_key: get("private_key").trim().to_string(),
            redundancy: get("redundancy"),
            strategy: get("strategy"),
            initial_delay: get("initial_delay").trim().to_string(),
            max_delay: get("max_delay").trim().to_string(),
            max_retries: get("max_retries").trim().to_string(),
            jitter: get("jitter").trim().to_string(),
            max_total_reconnect_time: get("max_total_reconnect_time").trim().to_string(),
            request_timeout: get("request_timeout").trim().to_string(),
            session_timeout: get("session_timeout").trim().to_string(),
            keep_alive_interval: get("keep_alive_interval").trim().to_string(),
            error_at: None,
        };
        v.pad();
        v
    }

    /// ` selected` when select `input` has `value` (for the template's
    /// options), else nothing.
    pub fn selected(&self, input: &str, value: &str) -> &'static str {
        let now = match input {
            "security_mode" => &self.security_mode,
            "security_policy" => &self.security_policy,
            "identity" => &self.identity,
            "redundancy" => &self.redundancy,
            "strategy" => &self.strategy,
            _ => return "",
        };
        if now == value {
            " selected"
        } else {
            ""
        }
    }

    /// Whether the form edits a stored entry.
    pub fn editing(&self) -> bool {
        !self.original.is_empty()
    }

    /// The error message for input `name`, if the error is about it.
    pub fn error_for(&self, input: &str) -> Option<&str> {
        self.error_at
            .as_ref()
            .filter(|(at, _)| at == input)
            .map(|(_, m)| m.as_str())
    }

    /// The error message for the URL of server row `row` (0-based).
    pub fn error_for_row(&self, row: &usize) -> Option<&str> {
        self.error_for(&format!("url{row}"))
    }

    /// Remembers `error` next to the input it is about (a parse error
    /// names the input; a configuration error names the setting, which is
    /// mapped to its input). Returns what the page's banner says then: the
    /// input's label and the message, in the form's words instead of the
    /// setting's path (`field_servers[1].reconnect.max_delay`).
    pub fn mark(&mut self, error: &ApiError) -> Option<String> {
        let ApiError::Invalid {
            field: Some(field),
            message,
        } = error
        else {
            return None;
        };
        let input = input_of(field)?;
        let message = in_form_words(message);
        let said = super::not_saved_at(&label_of(&input)?, &message);
        self.error_at = Some((input, message));
        Some(said)
    }

    /// The entry the form describes, on top of `base` (the stored entry
    /// being edited, for the settings the form does not show). Errors name
    /// the input.
    pub fn entry(&self, base: Option<&FieldServer>) -> Result<FieldServer, ApiError> {
        let mut f = base
            .cloned()
            .unwrap_or_else(|| FieldServer::new("", Vec::new()));
        f.name = self.name.clone();
        if f.name.is_empty() {
            return Err(ApiError::invalid("name", "give the connection a name"));
        }
        f.enabled = self.enabled;
        f.endpoints = self
            .servers
            .iter()
            .filter(|r| !r.url.is_empty())
            .map(|r| FieldEndpoint {
                url: r.url.clone(),
                alternates: r
                    .alternates
                    .split([',', ' ', '\n'])
                    .map(str::trim)
                    .filter(|a| !a.is_empty())
                    .map(str::to_string)
                    .collect(),
            })
            .collect();
        if f.endpoints.is_empty() {
            return Err(ApiError::invalid(
                "url0",
                "give at least one server URL (opc.tcp://host:port)",
            ));
        }
        f.security_mode = match self.security_mode.as_str() {
            "none" => SecurityMode::None,
            "sign" => SecurityMode::Sign,
            "sign_and_encrypt" => SecurityMode::SignAndEncrypt,
            other => {
                return Err(ApiError::invalid(
                    "security_mode",
                    format!("unknown security mode {other:?}"),
                ))
            }
        };
        // No message security means no security policy: the policy list
        // keeps its last choice when the mode is set to None.
        f.security_policy = if f.security_mode == SecurityMode::None {
            "None".to_string()
        } else {
            self.security_policy.clone()
        };
        f.identity = match self.identity.as_str() {
            "anonymous" => FieldIdentity::Anonymous,
            "username" => FieldIdentity::Username {
                username: self.username.trim().to_string(),
                password: self.password.clone(),
            },
            "certificate" => FieldIdentity::Certificate {
                certificate: self.certificate.clone().into(),
                private_key: self.private_key.clone().into(),
            },
            other => {
                return Err(ApiError::invalid(
                    "identity",
                    format!("unknown identity kind {other:?}"),
                ))
            }
        };
        f.redundancy = match self.redundancy.as_str() {
            "none" => FieldRedundancy::None,
            "cold" => FieldRedundancy::Cold,
            "warm" => FieldRedundancy::Warm,
            "hot" => FieldRedundancy::Hot,
            "hot_merge" => FieldRedundancy::HotMerge,
            "hot_and_mirrored" => FieldRedundancy::HotAndMirrored,
            other => {
                return Err(ApiError::invalid(
                    "redundancy",
                    format!("unknown redundancy mode {other:?}"),
                ))
            }
        };
        let r = &mut f.reconnect;
        r.strategy = match self.strategy.as_str() {
            "exponential" => BackoffStrategy::Exponential,
            "linear" => BackoffStrategy::Linear,
            "constant" => BackoffStrategy::Constant,
            other => {
                return Err(ApiError::invalid(
                    "strategy",
                    format!("unknown backoff strategy {other:?}"),
                ))
            }
        };
        r.initial_delay = parse_duration("initial_delay", &self.initial_delay)?;
        r.max_delay = parse_duration("max_delay", &self.max_delay)?;
        r.max_retries = self.max_retries.parse().map_err(|_| {
            ApiError::invalid("max_retries", "a whole number of attempts (0: no limit)")
        })?;
        r.jitter = self
            .jitter
            .parse()
            .map_err(|_| ApiError::invalid("jitter", "a fraction between 0 and 1, e.g. 0.1"))?;
        r.max_total_reconnect_time =
            parse_duration("max_total_reconnect_time", &self.max_total_reconnect_time)?;
        f.request_timeout = parse_duration("request_timeout", &self.request_timeout)?;
        f.session_timeout = parse_duration("session_timeout", &self.session_timeout)?;
        f.keep_alive_interval = parse_duration("keep_alive_interval", &self.keep_alive_interval)?;
        Ok(f)
    }
}

/// A duration as the form takes it (`500ms`, `10s`, `5m`, `1h 30m`).
fn parse_duration(input: &str, text: &str) -> Result<Duration, ApiError> {
    humantime::parse_duration(text).map_err(|_| {
        ApiError::invalid(
            input,
            format!("{text:?} is not a duration; write e.g. 500ms, 10s or 5m"),
        )
    })
}

/// The form input a configuration setting (`field_servers[3].reconnect.max_delay`)
/// or a form input name is shown at.
fn input_of(field: &str) -> Option<String> {
    let rest = match field.strip_prefix("field_servers[") {
        Some(r) => r.split_once("].").map(|(_, s)| s)?,
        None => return Some(field.to_string()),
    };
    let input = match rest.split(['.', '[']).next()? {
        "endpoints" => {
            // `endpoints[1].url`: the row of that server.
            let row: usize = rest
                .strip_prefix("endpoints[")
                .and_then(|r| r.split_once(']'))
                .and_then(|(i, _)| i.parse().ok())
                .unwrap_or(0);
            return Some(format!("url{row}"));
        }
        "identity" => match rest {
            r if r.ends_with("password") => "password",
            r if r.ends_with("certificate") => "certificate",
            r if r.ends_with("private_key") => "private_key",
            _ => "username",
        },
        "reconnect" => rest.rsplit('.').next()?,
        other => other,
    };
    Some(input.to_string())
}

/// The label the form shows for input `input` (as [`input_of`] names it).
fn label_of(input: &str) -> Option<String> {
    if let Some(row) = input.strip_prefix("url") {
        let row: usize = row.parse().ok()?;
        return Some(format!("Server {} URL", row + 1));
    }
    let label = match input {
        "name" => "Name",
        "security_mode" => "Message security",
        "security_policy" => "Security policy",
        "identity" => "Log in as",
        "username" => "User name",
        "password" => "Password",
        "certificate" => "User certificate file",
        "private_key" => "Its private key file",
        "redundancy" => "How the servers work together",
        "strategy" => "Delay grows",
        "initial_delay" => "First delay",
        "max_delay" => "Longest delay",
        "max_retries" => "Attempts",
        "jitter" => "Jitter",
        "max_total_reconnect_time" => "Give up a cycle after",
        "request_timeout" => "Request timeout",
        "session_timeout" => "Session timeout",
        "keep_alive_interval" => "Keep-alive interval",
        _ => return None,
    };
    Some(label.to_string())
}

/// A configuration message in the form's words: without the setting's
/// path in front (`invalid setting `field_servers[1].redundancy`: `), and
/// the settings it names (`reconnect.initial_delay`, `endpoints`) by
/// their labels.
fn in_form_words(message: &str) -> String {
    let message = super::limits_text::strip_setting(message);
    const WORDS: &[(&str, &str)] = &[
        ("reconnect.initial_delay", "the first delay"),
        ("reconnect.max_delay", "the longest delay"),
        ("reconnect.max_total_reconnect_time", "the give-up time"),
        ("at least two endpoints", "at least two server URLs"),
        ("endpoints", "server URLs"),
    ];
    WORDS
        .iter()
        .fold(message.to_string(), |m, (from, to)| m.replace(from, to))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(v: &FieldFormView) -> Vec<(String, String)> {
        let mut p = vec![
            ("original".to_string(), v.original.clone()),
            ("name".to_string(), v.name.clone()),
            ("security_mode".to_string(), v.security_mode.clone()),
            ("security_policy".to_string(), v.security_policy.clone()),
            ("identity".to_string(), v.identity.clone()),
            ("username".to_string(), v.username.clone()),
            ("password".to_string(), v.password.clone()),
            ("certificate".to_string(), v.certificate.clone()),
            ("private_key".to_string(), v.private_key.clone()),
            ("redundancy".to_string(), v.redundancy.clone()),
            ("strategy".to_string(), v.strategy.clone()),
            ("initial_delay".to_string(), v.initial_delay.clone()),
            ("max_delay".to_string(), v.max_delay.clone()),
            ("max_retries".to_string(), v.max_retries.clone()),
            ("jitter".to_string(), v.jitter.clone()),
            (
                "max_total_reconnect_time".to_string(),
                v.max_total_reconnect_time.clone(),
            ),
            ("request_timeout".to_string(), v.request_timeout.clone()),
            ("session_timeout".to_string(), v.session_timeout.clone()),
            (
                "keep_alive_interval".to_string(),
                v.keep_alive_interval.clone(),
            ),
        ];
        if v.enabled {
            p.push(("enabled".to_string(), "on".to_string()));
        }
        for (i, r) in v.servers.iter().enumerate() {
            p.push((format!("url{i}"), r.url.clone()));
            p.push((format!("alt{i}"), r.alternates.clone()));
        }
        p
    }

    fn sample() -> FieldServer {
        let mut f = FieldServer::new(
            "line3",
            vec![
                FieldEndpoint {
                    url: "opc.tcp://10.0.3.10:4840".into(),
                    alternates: vec!["opc.tcp://10.1.3.10:4840".into()],
                },
                FieldEndpoint {
                    url: "opc.tcp://10.0.3.11:4840".into(),
                    alternates: Vec::new(),
                },
            ],
        );
        f.redundancy = FieldRedundancy::Hot;
        f.identity = FieldIdentity::Username {
            username: "op".into(),
            password: "s3cret".into(),
        };
        f.reconnect.max_delay = Duration::from_secs(90);
        f.operation_limits.max_nodes_per_read = 50;
        f
    }

    #[test]
    fn an_entry_shown_and_posted_back_unchanged_is_the_same_entry() {
        let f = sample();
        let view = FieldFormView::of(&f, true);
        assert_eq!(view.password, KEEP_PASSWORD, "no password in the page");
        assert_eq!(view.servers.len(), 3, "two servers and an empty row");
        assert_eq!(view.max_delay, "1m 30s");
        let back = FieldFormView::posted(&pairs(&view));
        let entry = back.entry(Some(&f)).unwrap();
        // The password comes back as the keep marker (restored on save).
        let mut expected = f.clone();
        expected.identity = FieldIdentity::Username {
            username: "op".into(),
            password: KEEP_PASSWORD.into(),
        };
        assert_eq!(entry, expected);
        assert_eq!(entry.operation_limits.max_nodes_per_read, 50, "kept");
    }

    #[test]
    fn a_new_entry_from_the_blank_form() {
        let mut view = FieldFormView::blank();
        view.name = "press2".into();
        view.servers[0].url = "opc.tcp://127.0.0.1:4840".into();
        view.servers[0].alternates = "opc.tcp://127.0.0.2:4840, opc.tcp://127.0.0.3:4840".into();
        view.security_mode = "none".into();
        view.security_policy = "None".into();
        let entry = FieldFormView::posted(&pairs(&view)).entry(None).unwrap();
        assert_eq!(entry.name, "press2");
        assert_eq!(entry.endpoints.len(), 1);
        assert_eq!(entry.endpoints[0].alternates.len(), 2);
        assert!(entry.enabled);
        assert_eq!(entry.reconnect, uagate_config::ReconnectSettings::default());
    }

    #[test]
    fn errors_name_the_input_they_are_about() {
        let mut view = FieldFormView::of(&sample(), true);
        view.max_delay = "soon".into();
        let e = FieldFormView::posted(&pairs(&view))
            .entry(None)
            .unwrap_err();
        view.mark(&e);
        assert!(view
            .error_for("max_delay")
            .is_some_and(|m| m.contains("soon")));
        assert!(view.error_for("initial_delay").is_none());

        let mut view = FieldFormView::of(&sample(), true);
        for r in &mut view.servers {
            r.url.clear();
        }
        let e = FieldFormView::posted(&pairs(&view))
            .entry(None)
            .unwrap_err();
        view.mark(&e);
        assert!(view.error_for("url0").is_some());

        assert_eq!(
            input_of("field_servers[2].reconnect.max_delay").as_deref(),
            Some("max_delay")
        );
        assert_eq!(
            input_of("field_servers[0].endpoints[1].url").as_deref(),
            Some("url1")
        );
        assert_eq!(
            input_of("field_servers[0].identity.password").as_deref(),
            Some("password")
        );
        assert_eq!(
            input_of("field_servers[0].security_policy").as_deref(),
            Some("security_policy")
        );
    }

    /// A refused setting reads in the form's words above the form, and
    /// its message sits at its input, the second server's row included.
    #[test]
    fn the_banner_names_the_input_by_its_label() {
        let mut view = FieldFormView::blank();
        let e = ApiError::Invalid {
            field: Some("field_servers[1].reconnect.max_delay".into()),
            message: "must not be below reconnect.initial_delay".into(),
        };
        assert_eq!(
            view.mark(&e).as_deref(),
            Some("Not saved: Longest delay: must not be below the first delay (marked below).")
        );
        let e = ApiError::Invalid {
            field: Some("field_servers[3].endpoints[1].url".into()),
            message: "invalid setting `field_servers[3].endpoints[1].url`: not an opc.tcp URL"
                .into(),
        };
        assert_eq!(
            view.mark(&e).as_deref(),
            Some("Not saved: Server 2 URL: not an opc.tcp URL (marked below).")
        );
        assert_eq!(view.error_for_row(&1), Some("not an opc.tcp URL"));
        assert_eq!(view.error_for_row(&0), None);
        // Something the form does not show keeps the page's own wording.
        let e = ApiError::Invalid {
            field: Some("field_servers[0].operation_limits.max_nodes_per_read".into()),
            message: "too large".into(),
        };
        assert_eq!(view.mark(&e), None);
    }

    /// A new connection's form has two server rows (a redundant pair is
    /// entered at once), and Message security None needs no policy choice.
    #[test]
    fn a_new_form_takes_a_pair_and_none_security_needs_no_policy() {
        let blank = FieldFormView::blank();
        assert_eq!(blank.servers.len(), 2);
        let mut view = FieldFormView::blank();
        view.name = "line3".into();
        view.servers[0].url = "opc.tcp://10.0.3.10:4840".into();
        view.servers[1].url = "opc.tcp://10.0.3.11:4840".into();
        view.redundancy = "hot".into();
        view.security_mode = "none".into();
        view.security_policy = "Basic256Sha256".into();
        let posted = FieldFormView::posted(&pairs(&view));
        assert_eq!(posted.servers.len(), 3, "one empty row after the pair");
        let entry = posted.entry(None).unwrap();
        assert_eq!(entry.endpoints.len(), 2);
        assert_eq!(entry.security_policy, "None");
    }
}
