//! The audit log in words. For each change-log entry: one sentence saying
//! who did what, with its details (reason, return time, names, values);
//! the kind [`Group`] the audit page filters it under; and, for a
//! configuration change, only the settings that changed (dotted names,
//! before and after, secrets hidden). Times are kept as times ([`Part::Time`])
//! so the page can show them in the browser's time zone; OPC UA ticks in a
//! payload become times here and are never shown.
//!
//! Pure functions of an entry's actor, kind and payload, no I/O: called by
//! the audit page, its CSV export and the REST audit trail.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::Value;
use uagate_server::{CONFIG_KEY, NODE_CONFIG_KEY};
use uagate_store::{FIELD_NAMESPACES_SETTING, REQUESTED_STATE_SETTING};

use crate::digest::Digest;

/// The kinds the audit page filters by; every entry is in exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// Server state changes: maintenance, shutdown, back to running.
    Maintenance,
    /// ServiceLevel overrides set or cleared.
    ServiceLevel,
    /// Certificates trusted, rejected or removed; revocation lists.
    Trust,
    /// Console users created, deleted, their role or password changed.
    Users,
    /// Changes of the configuration document (other than only field
    /// connections) and of other settings.
    Configuration,
    /// Field connections added, changed or removed, forced failovers,
    /// reconnects, their namespaces.
    FieldConnections,
    /// Client sessions closed by an operator.
    Sessions,
    /// The appliance pair: replication epochs, leadership.
    Pair,
    /// The appliance image: updates installed or refused, restarts.
    System,
    /// Anything else.
    Other,
}

impl Group {
    /// Every group, in the order of the page's kind filter.
    pub const ALL: [Group; 10] = [
        Group::Maintenance,
        Group::ServiceLevel,
        Group::Trust,
        Group::Users,
        Group::Configuration,
        Group::FieldConnections,
        Group::Sessions,
        Group::Pair,
        Group::System,
        Group::Other,
    ];

    /// The name in URLs, the CSV `kind` column and REST.
    pub fn name(self) -> &'static str {
        match self {
            Group::Maintenance => "maintenance",
            Group::ServiceLevel => "service_level",
            Group::Trust => "trust",
            Group::Users => "users",
            Group::Configuration => "configuration",
            Group::FieldConnections => "field_connections",
            Group::Sessions => "sessions",
            Group::Pair => "pair",
            Group::System => "system",
            Group::Other => "other",
        }
    }

    /// The label on the page.
    pub fn label(self) -> &'static str {
        match self {
            Group::Maintenance => "Maintenance",
            Group::ServiceLevel => "ServiceLevel",
            Group::Trust => "Certificates",
            Group::Users => "Users",
            Group::Configuration => "Configuration",
            Group::FieldConnections => "Field connections",
            Group::Sessions => "Sessions",
            Group::Pair => "Pair",
            Group::System => "System",
            Group::Other => "Other",
        }
    }

    /// The group of a [`Group::name`].
    pub fn parse(name: &str) -> Option<Group> {
        Group::ALL.into_iter().find(|g| g.name() == name)
    }

    /// The change-log kinds (prefixes) the group's entries can have: the
    /// coarse filter the store runs in SQL before [`describe`] decides.
    /// Empty: any kind.
    pub fn kind_prefixes(self) -> &'static [&'static str] {
        match self {
            Group::Maintenance | Group::Configuration => &["setting.set"],
            Group::ServiceLevel => &["event.service_level"],
            Group::Trust => &["trust.", "crl."],
            Group::Users => &["user."],
            Group::FieldConnections => &["setting.set", "event.field_"],
            Group::Sessions => &["event.session_"],
            Group::Pair => &["epoch.", "event.pair"],
            Group::System => &["event.system_"],
            Group::Other => &[],
        }
    }
}

/// A piece of a sentence: text, or a time the page shows in the browser's
/// time zone (and as UTC everywhere else).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Plain text.
    Text(String),
    /// A point in time.
    Time(DateTime<Utc>),
}

/// One entry as a sentence, e.g. "ada put the gateway into maintenance
/// (suspended): firmware update, back at 2025-06-01 14:30 UTC".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sentence(pub Vec<Part>);

impl Sentence {
    fn text(&mut self, t: impl AsRef<str>) -> &mut Self {
        let t = t.as_ref();
        match self.0.last_mut() {
            Some(Part::Text(last)) => last.push_str(t),
            _ => self.0.push(Part::Text(t.to_string())),
        }
        self
    }

    fn time(&mut self, t: DateTime<Utc>) -> &mut Self {
        self.0.push(Part::Time(t));
        self
    }

    /// A time given as RFC 3339 text; other text is kept as it is.
    fn time_text(&mut self, t: &str) -> &mut Self {
        match parse_time(t) {
            Some(t) => self.time(t),
            None => self.text(t),
        }
    }
}

impl fmt::Display for Sentence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.0 {
            match p {
                Part::Text(t) => f.write_str(t)?,
                Part::Time(t) => f.write_str(&minute_utc(*t))?,
            }
        }
        Ok(())
    }
}

/// One changed setting: its dotted name, the value before and after
/// (`None`: not set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Dotted name; list entries by their name, e.g.
    /// `field_servers[line1].endpoints`.
    pub setting: String,
    /// Value before, `None` when it was not set.
    pub before: Option<String>,
    /// Value after, `None` when it was removed.
    pub after: Option<String>,
}

impl fmt::Display for Change {
    /// `setting: before -> after`, plain ASCII (the CSV export).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "(not set)".into());
        write!(
            f,
            "{}: {} -> {}",
            self.setting,
            show(&self.before),
            show(&self.after)
        )
    }
}

/// An entry described: its group, its sentence, the settings it changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    /// The kind it is filtered under.
    pub group: Group,
    /// What happened.
    pub sentence: Sentence,
    /// For a configuration or setting change: only what changed.
    pub changes: Vec<Change>,
}

/// Describes one change-log entry (its actor, kind and JSON payload).
pub fn describe(actor: &str, kind: &str, payload: &str) -> Described {
    let v: Value = serde_json::from_str(payload).unwrap_or(Value::Null);
    let who = who(actor);
    let mut s = Sentence::default();
    let group = match kind {
        "setting.set" => return setting(&who, &v),
        "event.service_level" => {
            service_level(&mut s, &who, &v);
            Group::ServiceLevel
        }
        "trust.add" | "trust.reject" | "trust.remove" | "crl.add" => {
            trust(&mut s, &who, kind, &v);
            Group::Trust
        }
        "user.add" | "user.password" | "user.role" | "user.delete" => {
            user(&mut s, actor, &who, kind, &v);
            Group::Users
        }
        "event.field_failover" => {
            s.text(format!(
                "{who} asked the field connection {} to fail over to its next server",
                str_of(&v, "connection")
            ));
            Group::FieldConnections
        }
        "event.field_reconnect" => {
            s.text(format!(
                "{who} asked the field connection {} to reconnect now",
                str_of(&v, "connection")
            ));
            Group::FieldConnections
        }
        "event.session_close" => {
            let name = str_of(&v, "name");
            let id = str_of(&v, "session");
            if name.is_empty() || name == "?" {
                s.text(format!("{who} closed the client session {id}"));
            } else {
                s.text(format!("{who} closed the client session \"{name}\" ({id})"));
            }
            Group::Sessions
        }
        "event.system_update_started" => {
            let mb = v.get("bytes").and_then(Value::as_u64).unwrap_or(0) as f64 / 1e6;
            s.text(format!(
                "{who} uploaded an update bundle ({mb:.1} MB) and started its installation"
            ));
            Group::System
        }
        "event.system_update_finished" => {
            let version = str_of(&v, "version");
            let version = if version.is_empty() || version == "?" {
                "the update".to_string()
            } else {
                version.to_string()
            };
            let slot = str_of(&v, "slot");
            let into = if slot.is_empty() || slot == "?" {
                String::new()
            } else {
                format!(" into slot {slot}")
            };
            s.text(format!(
                "The update {who} started was installed: {version}{into}, used after the next restart"
            ));
            Group::System
        }
        "event.system_update_failed" => {
            s.text(format!(
                "The update {who} started was not installed: {}",
                str_of(&v, "message")
            ));
            Group::System
        }
        "event.system_reboot" => {
            s.text(format!("{who} restarted the appliance"));
            Group::System
        }
        "epoch.bump" => {
            s.text(format!(
                "{who} started replication epoch {} after a change of the pair's leadership",
                scalar(v.get("epoch").unwrap_or(&Value::Null))
            ));
            Group::Pair
        }
        other => {
            let group = if other.starts_with("event.field_") {
                Group::FieldConnections
            } else if other.starts_with("event.session_") {
                Group::Sessions
            } else if other.starts_with("event.pair") || other.starts_with("epoch.") {
                Group::Pair
            } else if other.starts_with("event.system_") {
                Group::System
            } else {
                Group::Other
            };
            match other.strip_prefix("event.") {
                Some(event) => s.text(format!(
                    "{who} recorded the event \"{}\"",
                    event.replace('_', " ")
                )),
                None => s.text(format!("{who} made a change of kind \"{other}\"")),
            };
            details(&mut s, &v);
            group
        }
    };
    Described {
        group,
        sentence: s,
        changes: Vec::new(),
    }
}

/// How an actor is named at the start of a sentence: users by name, the
/// gateway's own actors in words.
fn who(actor: &str) -> String {
    match actor {
        "engine" | "gateway" => "The gateway".into(),
        "pair" => "The appliance pair".into(),
        "cli" => "An administrator on the command line".into(),
        "setup" => "The first-run setup".into(),
        "anonymous" => "An anonymous OPC UA client".into(),
        a => match a.strip_prefix("x509:") {
            Some(thumbprint) => format!(
                "The OPC UA client with the certificate of thumbprint {}",
                Digest::from_hex(thumbprint)
            ),
            None => a.to_string(),
        },
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("?")
}

/// A JSON value as text: strings without quotes, `null` as "none".
fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "none".into(),
        other => other.to_string(),
    }
}

// ------------------------------------------------------------- maintenance

/// The server states by their wire value (Part 5 ServerState), in words.
fn state_words(state: i64) -> &'static str {
    match state {
        0 => "running",
        1 => "failed",
        2 => "without configuration",
        3 => "suspended",
        4 => "shut down",
        5 => "in test",
        6 => "in communication fault",
        _ => "in an unknown state",
    }
}

/// A requested server state as persisted (`server.requested_state`).
struct Requested {
    state: i64,
    back_at: Option<DateTime<Utc>>,
    seconds_till_shutdown: u64,
    reason: String,
    drain: bool,
}

fn requested(text: Option<&str>) -> Option<Requested> {
    let v: Value = serde_json::from_str(text?).ok()?;
    Some(Requested {
        state: v.get("state")?.as_i64()?,
        back_at: v
            .get("estimated_return_ticks")
            .and_then(Value::as_i64)
            .and_then(ticks_time),
        seconds_till_shutdown: v
            .get("seconds_till_shutdown")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        reason: v
            .get("reason_text")
            .and_then(Value::as_str)
            .unwrap_or("")
            .trim()
            .to_string(),
        drain: v.get("drain").and_then(Value::as_bool).unwrap_or(false),
    })
}

fn maintenance(s: &mut Sentence, who: &str, v: &Value) {
    let Some(now) = requested(v.get("value").and_then(Value::as_str)) else {
        s.text(format!("{who} changed the requested server state"));
        return;
    };
    let before = requested(v.get("before").and_then(Value::as_str));
    match now.state {
        0 => match before.filter(|b| b.state != 0) {
            Some(b) => s.text(format!(
                "{who} ended maintenance: the gateway is running again (it was {})",
                state_words(b.state)
            )),
            None => s.text(format!("{who} set the gateway to running")),
        },
        3 => s.text(format!(
            "{who} put the gateway into maintenance (suspended)"
        )),
        5 => s.text(format!("{who} put the gateway into maintenance (test)")),
        4 if now.seconds_till_shutdown > 0 => s.text(format!(
            "{who} announced a shutdown of the gateway in {}",
            duration(now.seconds_till_shutdown)
        )),
        4 => s.text(format!("{who} announced a shutdown of the gateway")),
        other => s.text(format!(
            "{who} set the gateway's state to {}",
            state_words(other)
        )),
    };
    if now.state == 0 {
        return;
    }
    let mut sep = ": ";
    if !now.reason.is_empty() {
        s.text(sep).text(&now.reason);
        sep = ", ";
    }
    if let Some(t) = now.back_at {
        s.text(sep).text("back at ").time(t);
        sep = ", ";
    }
    if now.drain {
        s.text(sep).text("new client sessions refused");
    }
}

/// An OPC UA DateTime (100 ns ticks since 1601-01-01 UTC) as a time;
/// `None` for the null time or one out of range.
fn ticks_time(ticks: i64) -> Option<DateTime<Utc>> {
    let t = opcua_types::DateTime::from(ticks);
    (!t.is_null() && ticks > 0).then(|| t.as_chrono())
}

/// A number of seconds in words, e.g. "1 h 30 min".
fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    let mut parts = Vec::new();
    for (n, unit) in [(d, "d"), (h, "h"), (m, "min"), (s, "s")] {
        if n > 0 {
            parts.push(format!("{n} {unit}"));
        }
    }
    if parts.is_empty() {
        "0 s".into()
    } else {
        parts.join(" ")
    }
}

// ----------------------------------------------------------- service level

fn service_level(s: &mut Sentence, who: &str, v: &Value) {
    let before = v.get("before");
    let was = before
        .and_then(|b| b.get("level"))
        .map(scalar)
        .unwrap_or_else(|| "unknown".into());
    let source = match before.and_then(|b| b.get("source")).and_then(Value::as_str) {
        Some("override") => "an override",
        Some("requested_state") => "set by the server state",
        Some(_) | None => "computed",
    };
    match v.get("level").filter(|l| !l.is_null()) {
        Some(level) => {
            s.text(format!("{who} fixed the ServiceLevel at {}", scalar(level)));
            if let Some(secs) = v.get("expires_in_s").and_then(Value::as_u64) {
                s.text(format!(" for {}", duration(secs)));
            }
        }
        None => {
            s.text(format!(
                "{who} cleared the ServiceLevel override: the computed value applies again"
            ));
        }
    }
    let reason = v.get("reason").and_then(Value::as_str).unwrap_or("").trim();
    if !reason.is_empty() {
        s.text(format!(": {reason}"));
    }
    s.text(format!(" (it was {was}, {source})"));
}

// ------------------------------------------------------------------- trust

/// How an entry names a certificate's digests: its fingerprint (SHA-256,
/// from the DER the entry carries) and its OPC UA thumbprint (SHA-1),
/// both as the console writes them ([`crate::digest`]); the thumbprint
/// alone when the entry has no DER (a removal).
fn digests(v: &Value) -> String {
    let thumbprint = Digest::from_hex(str_of(v, "thumbprint"));
    let der = v
        .get("der")
        .and_then(Value::as_str)
        .and_then(|d| hex::decode(d).ok())
        .filter(|d| !d.is_empty());
    match der {
        Some(der) => format!(
            "fingerprint {}, thumbprint {thumbprint}",
            Digest::fingerprint(&der)
        ),
        None => format!("thumbprint {thumbprint}"),
    }
}

fn trust(s: &mut Sentence, who: &str, kind: &str, v: &Value) {
    let subject = str_of(v, "subject");
    let uri = v.get("application_uri").and_then(Value::as_str);
    let thumbprint = Digest::from_hex(str_of(v, "thumbprint"));
    let named = |s: &mut Sentence| {
        s.text(format!("\"{subject}\""));
        if let Some(uri) = uri {
            s.text(format!(" ({uri})"));
        }
    };
    match kind {
        "trust.add" => {
            if v.get("kind").and_then(Value::as_str) == Some("issuer") {
                s.text(format!("{who} added the CA certificate "));
                named(s);
                s.text(" to the issuer list");
            } else {
                s.text(format!("{who} trusted the certificate "));
                named(s);
            }
            match v.get("previous_kind").and_then(Value::as_str) {
                Some("rejected") => {
                    s.text(", which had been rejected");
                }
                Some(list) => {
                    s.text(format!(", moved from the {list} list"));
                }
                None => {}
            }
            s.text(format!("; {}", digests(v)));
            if let Some(until) = v.get("not_after").and_then(Value::as_str) {
                s.text(", valid until ").time_text(until);
            }
        }
        "trust.reject" => {
            s.text(format!("{who} rejected the untrusted certificate "));
            named(s);
            s.text(format!("; {}", digests(v)));
            if let Some(until) = v.get("not_after").and_then(Value::as_str) {
                s.text(", valid until ").time_text(until);
            }
        }
        "trust.remove" => {
            let list = match v.get("kind").and_then(Value::as_str) {
                Some("rejected") => "the rejected list",
                Some("issuer") => "the issuer list",
                _ => "the trusted list",
            };
            s.text(format!(
                "{who} removed the certificate with thumbprint {thumbprint} from {list}"
            ));
        }
        _ => {
            s.text(format!(
                "{who} added the certificate revocation list of \"{}\"",
                str_of(v, "issuer")
            ));
            if let Some(t) = v.get("this_update").and_then(Value::as_str) {
                s.text(", issued ").time_text(t);
            }
            if let Some(t) = v.get("next_update").and_then(Value::as_str) {
                s.text(", next update ").time_text(t);
            }
        }
    }
}

// ------------------------------------------------------------------- users

fn user(s: &mut Sentence, actor: &str, who: &str, kind: &str, v: &Value) {
    let name = str_of(v, "name");
    match kind {
        "user.add" => s.text(format!(
            "{who} created the user {name} with the role {}",
            str_of(v, "role")
        )),
        "user.password" if name == actor => s.text(format!("{who} changed their own password")),
        "user.password" => s.text(format!("{who} changed the password of {name}")),
        "user.role" => s.text(format!(
            "{who} changed the role of {name} from {} to {}",
            str_of(v, "previous"),
            str_of(v, "role")
        )),
        _ => s.text(format!("{who} deleted the user {name}")),
    };
}

// ---------------------------------------------------------------- settings

/// The most characters of one value shown; longer values end in "…".
const MAX_VALUE_CHARS: usize = 300;

/// The most setting names a configuration change's sentence lists.
const NAMED_IN_SENTENCE: usize = 3;

fn setting(who: &str, v: &Value) -> Described {
    let key = v.get("key").and_then(Value::as_str).unwrap_or("?");
    let mut s = Sentence::default();
    if key == REQUESTED_STATE_SETTING {
        maintenance(&mut s, who, v);
        return Described {
            group: Group::Maintenance,
            sentence: s,
            changes: Vec::new(),
        };
    }
    if key == CONFIG_KEY || key == NODE_CONFIG_KEY {
        return configuration(who, key, v);
    }
    if key == FIELD_NAMESPACES_SETTING {
        return namespaces(who, v);
    }
    s.text(format!("{who} changed the setting {key}"));
    let value = |k: &str| {
        v.get(k)
            .filter(|x| !x.is_null())
            .map(|x| shorten(&scalar(x)))
    };
    let change = Change {
        setting: key.to_string(),
        before: value("before"),
        after: value("value"),
    };
    Described {
        group: Group::Configuration,
        sentence: s,
        changes: if change.before == change.after {
            Vec::new()
        } else {
            vec![change]
        },
    }
}

fn shorten(text: &str) -> String {
    if text.chars().count() <= MAX_VALUE_CHARS {
        return text.to_string();
    }
    let mut t: String = text.chars().take(MAX_VALUE_CHARS).collect();
    t.push('…');
    t
}

/// "a", "a and b", "a, b and c".
fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

fn configuration(who: &str, key: &str, v: &Value) -> Described {
    let changes = setting_changes_of(v);
    let parse = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<toml::Table>().ok())
    };
    let (before, after) = (parse("before"), parse("value"));
    let mut s = Sentence::default();
    // Field connections by name, before and after.
    let fields = |t: &Option<toml::Table>| -> BTreeMap<String, toml::Value> {
        t.as_ref()
            .and_then(|t| t.get("field_servers"))
            .and_then(toml::Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|f| {
                        let name = f.get("name")?.as_str()?.to_string();
                        Some((name, f.clone()))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let (fb, fa) = (fields(&before), fields(&after));
    let added: Vec<String> = fa
        .keys()
        .filter(|k| !fb.contains_key(*k))
        .cloned()
        .collect();
    let removed: Vec<String> = fb
        .keys()
        .filter(|k| !fa.contains_key(*k))
        .cloned()
        .collect();
    let changed: Vec<String> = fa
        .iter()
        .filter(|(k, f)| fb.get(*k).is_some_and(|b| b != *f))
        .map(|(k, _)| k.clone())
        .collect();
    let mut field_clauses = Vec::new();
    for name in &added {
        let endpoints = fa
            .get(name)
            .and_then(|f| f.get("endpoints"))
            .map(toml_text)
            .unwrap_or_default();
        field_clauses.push(if endpoints.is_empty() {
            format!("added the field connection {name}")
        } else {
            format!("added the field connection {name} ({endpoints})")
        });
    }
    for name in &changed {
        let prefix = format!("field_servers[{name}].");
        let what: BTreeSet<String> = changes
            .iter()
            .filter_map(|c| c.setting.strip_prefix(&prefix))
            .map(|rest| rest.split(['.', '[']).next().unwrap_or(rest).to_string())
            .collect();
        let what: Vec<String> = what.into_iter().collect();
        field_clauses.push(if what.is_empty() {
            format!("changed the field connection {name}")
        } else {
            format!("changed the field connection {name} ({})", what.join(", "))
        });
    }
    for name in &removed {
        field_clauses.push(format!("removed the field connection {name}"));
    }
    let others: Vec<String> = changes
        .iter()
        .filter(|c| !c.setting.starts_with("field_servers"))
        .map(|c| c.setting.clone())
        .collect();
    let group = if others.is_empty() && !field_clauses.is_empty() {
        s.text(format!("{who} {}", and_list(&field_clauses)));
        Group::FieldConnections
    } else {
        let what = if key == NODE_CONFIG_KEY {
            "this appliance's own settings (listen addresses, application URI)"
        } else {
            "the configuration"
        };
        if changes.is_empty() {
            s.text(format!("{who} saved {what} without changing any setting"));
        } else if before.is_none() && who == self::who(crate::ops::STARTED_WITH_ACTOR) {
            s.text(format!(
                "{who} stored {what} it was started with ({} {}), before the first change",
                changes.len(),
                plural(changes.len(), "setting", "settings")
            ));
        } else if before.is_none() {
            s.text(format!(
                "{who} set up {what} ({} {})",
                changes.len(),
                plural(changes.len(), "setting", "settings")
            ));
        } else if others.len() <= NAMED_IN_SENTENCE {
            s.text(format!("{who} changed {what}: {}", and_list(&others)));
        } else {
            s.text(format!("{who} changed {} settings of {what}", others.len()));
            let areas = areas(&others);
            if areas.len() <= NAMED_IN_SENTENCE + 1 {
                s.text(format!(" in {}", and_list(&areas)));
            }
        }
        if !field_clauses.is_empty() && before.is_some() {
            s.text(format!(", and {}", and_list(&field_clauses)));
        }
        Group::Configuration
    };
    Described {
        group,
        sentence: s,
        changes,
    }
}

/// The parts of the document settings belong to (their first two
/// names, without list entries), e.g. `isolation.trusted_owners` for
/// `isolation.trusted_owners[scada].weight`; sorted, once each.
fn areas(settings: &[String]) -> Vec<String> {
    let set: BTreeSet<String> = settings
        .iter()
        .map(|s| {
            s.split('.')
                .take(2)
                .map(|part| part.split('[').next().unwrap_or(part))
                .collect::<Vec<_>>()
                .join(".")
        })
        .collect();
    set.into_iter().collect()
}

fn plural(n: usize, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 {
        one
    } else {
        many
    }
}

fn namespaces(who: &str, v: &Value) -> Described {
    let parse = |k: &str| -> Vec<(String, String)> {
        v.get(k)
            .and_then(Value::as_str)
            .and_then(|t| serde_json::from_str::<Vec<Value>>(t).ok())
            .unwrap_or_default()
            .iter()
            .map(|e| {
                (
                    str_of(e, "mount").to_string(),
                    str_of(e, "field_uri").to_string(),
                )
            })
            .collect()
    };
    let (before, after) = (parse("before"), parse("value"));
    let new: Vec<&(String, String)> = after.iter().filter(|e| !before.contains(e)).collect();
    let mounts: BTreeSet<String> = new.iter().map(|(m, _)| m.clone()).collect();
    let mounts: Vec<String> = mounts.into_iter().collect();
    let mut s = Sentence::default();
    if new.is_empty() {
        s.text(format!(
            "{who} recorded the field servers' namespaces (no new namespace)"
        ));
    } else {
        s.text(format!(
            "{who} published {} new {} of the field {} {}",
            new.len(),
            plural(new.len(), "namespace", "namespaces"),
            plural(mounts.len(), "connection", "connections"),
            and_list(&mounts)
        ));
    }
    Described {
        group: Group::FieldConnections,
        sentence: s,
        changes: new
            .into_iter()
            .map(|(mount, uri)| Change {
                setting: format!("namespace of {mount}"),
                before: None,
                after: Some(uri.clone()),
            })
            .collect(),
    }
}

/// The settings a configuration change (`setting.set` of the
/// configuration document or of this appliance's part of it) changed:
/// only those whose value differs, by dotted name, secrets hidden. Empty
/// for any other payload.
pub fn setting_changes(payload: &str) -> Vec<Change> {
    match serde_json::from_str::<Value>(payload) {
        Ok(v) => setting_changes_of(&v),
        Err(_) => Vec::new(),
    }
}

fn setting_changes_of(v: &Value) -> Vec<Change> {
    let key = v.get("key").and_then(Value::as_str);
    if key != Some(CONFIG_KEY) && key != Some(NODE_CONFIG_KEY) {
        return Vec::new();
    }
    let parse = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<toml::Table>().ok())
    };
    let Some(after) = parse("value") else {
        return Vec::new();
    };
    let before = parse("before").unwrap_or_default();
    let (mut a, mut b) = (BTreeMap::new(), BTreeMap::new());
    flatten("", &toml::Value::Table(before), &mut a);
    flatten("", &toml::Value::Table(after), &mut b);
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| {
            let secret = is_secret(k);
            let show = |m: &BTreeMap<String, String>| {
                m.get(k).map(|v| {
                    if secret {
                        "(hidden)".to_string()
                    } else {
                        shorten(v)
                    }
                })
            };
            Change {
                setting: k.clone(),
                before: show(&a),
                after: show(&b),
            }
        })
        .collect()
}

/// The setting names whose values are never shown (the store already
/// writes them redacted into the change log).
const SECRET_KEYS: &[&str] = &["password", "private_key", "secret", "token"];

fn is_secret(setting: &str) -> bool {
    let last = setting.rsplit('.').next().unwrap_or(setting);
    SECRET_KEYS.contains(&last)
}

/// The fields that name an entry of a list of tables, in the order tried
/// (a field connection's `name`, a trusted owner's `key`, a stage's
/// `stage`, an ingress rule's `cidr`); entries without a unique name are
/// numbered.
const NAME_FIELDS: &[&str] = &["name", "key", "stage", "cidr"];

/// The label of each entry of a list of tables and the field it was
/// taken from: its name when every entry has a distinct one, else its
/// index (and no field).
fn entry_labels(items: &[toml::Value]) -> (Vec<String>, Option<&'static str>) {
    for field in NAME_FIELDS {
        let names: Vec<Option<&str>> = items
            .iter()
            .map(|i| i.get(*field).and_then(toml::Value::as_str))
            .collect();
        let distinct: BTreeSet<&str> = names.iter().flatten().copied().collect();
        if names.iter().all(Option::is_some) && distinct.len() == items.len() {
            let labels = names.into_iter().flatten().map(str::to_string).collect();
            return (labels, Some(field));
        }
    }
    ((0..items.len()).map(|i| i.to_string()).collect(), None)
}

fn flatten(prefix: &str, v: &toml::Value, out: &mut BTreeMap<String, String>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&p, v, out);
            }
        }
        // An empty list says nothing its entries would not.
        toml::Value::Array(items) if items.is_empty() => {}
        toml::Value::Array(items) if items.iter().any(toml::Value::is_table) => {
            let (labels, named_by) = entry_labels(items);
            for (label, item) in labels.into_iter().zip(items) {
                let path = format!("{prefix}[{label}]");
                match (item, named_by) {
                    // The name is in the path already; an entry with
                    // nothing but its name still shows.
                    (toml::Value::Table(t), Some(field)) if t.len() > 1 => {
                        let mut rest = t.clone();
                        rest.remove(field);
                        flatten(&path, &toml::Value::Table(rest), out);
                    }
                    _ => flatten(&path, item, out),
                }
            }
        }
        other => {
            out.insert(prefix.to_string(), toml_text(other));
        }
    }
}

/// A TOML value as a person reads it: strings without quotes, lists
/// joined with commas.
fn toml_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Array(items) => items.iter().map(toml_text).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

// ------------------------------------------------------------------ others

/// The details of an unknown entry: its payload's top-level fields, times
/// as times (RFC 3339 text or OPC UA ticks), large values left out.
fn details(s: &mut Sentence, v: &Value) {
    let Some(o) = v.as_object().filter(|o| !o.is_empty()) else {
        return;
    };
    let mut sep = ": ";
    for (k, x) in o {
        if k == "der" {
            continue;
        }
        s.text(sep);
        sep = ", ";
        match (k.strip_suffix("_ticks"), x.as_i64().and_then(ticks_time)) {
            (Some(name), Some(t)) => {
                s.text(format!("{} ", name.replace('_', " "))).time(t);
            }
            _ => {
                s.text(format!("{} ", k.replace('_', " ")));
                let text = scalar(x);
                match parse_time(&text) {
                    Some(t) => s.time(t),
                    None => s.text(shorten(&text)),
                };
            }
        }
    }
}

// ------------------------------------------------------------------- times

/// A time written as RFC 3339 (with a zone or `Z`).
pub fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text.trim())
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// `2025-06-01 14:30:05 UTC`: an entry's time where no browser converts it.
pub fn second_utc(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// `2025-06-01 14:30 UTC`: a time in a sentence.
pub fn minute_utc(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// The machine form of a time (`datetime` attribute, CSV): RFC 3339 UTC
/// with milliseconds.
pub fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    fn text(actor: &str, kind: &str, payload: Value) -> (Group, String) {
        let d = describe(actor, kind, &payload.to_string());
        (d.group, d.sentence.to_string())
    }

    /// A `server.requested_state` value as the engine persists it.
    fn state(state: i32, back: Option<DateTime<Utc>>, reason: &str, drain: bool) -> String {
        let ticks = back.map_or(0, |t| opcua_types::DateTime::from(t).checked_ticks());
        json!({
            "state": state,
            "estimated_return_ticks": ticks,
            "seconds_till_shutdown": 0,
            "reason_locale": "",
            "reason_text": reason,
            "drain": drain,
        })
        .to_string()
    }

    #[test]
    fn maintenance_says_why_and_when_back_in_a_readable_time() {
        let back = Utc.with_ymd_and_hms(2025, 6, 1, 14, 30, 0).unwrap();
        let v = json!({
            "key": REQUESTED_STATE_SETTING,
            "value": state(3, Some(back), "PLC firmware update, line 3", true),
            "before": null,
        });
        let d = describe("plantadmin", "setting.set", &v.to_string());
        assert_eq!(d.group, Group::Maintenance);
        assert_eq!(
            d.sentence.to_string(),
            "plantadmin put the gateway into maintenance (suspended): PLC firmware update, \
             line 3, back at 2025-06-01 14:30 UTC, new client sessions refused"
        );
        assert!(d.sentence.0.contains(&Part::Time(back)), "a time, not text");
        assert!(d.changes.is_empty());
        // No ticks anywhere.
        let ticks = opcua_types::DateTime::from(back)
            .checked_ticks()
            .to_string();
        assert!(!d.sentence.to_string().contains(&ticks));

        let v = json!({
            "key": REQUESTED_STATE_SETTING,
            "value": state(0, None, "", false),
            "before": state(3, Some(back), "x", false),
        });
        assert_eq!(
            text("plantadmin", "setting.set", v),
            (
                Group::Maintenance,
                "plantadmin ended maintenance: the gateway is running again (it was suspended)"
                    .into()
            )
        );
        let mut shutdown: Value =
            serde_json::from_str(&state(4, None, "power cut", false)).unwrap();
        shutdown["seconds_till_shutdown"] = json!(90);
        let v = json!({"key": REQUESTED_STATE_SETTING, "value": shutdown.to_string()});
        assert_eq!(
            text("x509:ab12", "setting.set", v).1,
            "The OPC UA client with the certificate of thumbprint AB:12 announced a shutdown of \
             the gateway in 1 min 30 s: power cut"
        );
    }

    #[test]
    fn service_level_override_and_its_end() {
        let v = json!({
            "level": 150, "expires_in_s": 5400, "reason": "line 2 degraded",
            "before": {"level": 255, "source": "computed"},
        });
        assert_eq!(
            text("ada", "event.service_level", v),
            (
                Group::ServiceLevel,
                "ada fixed the ServiceLevel at 150 for 1 h 30 min: line 2 degraded \
                 (it was 255, computed)"
                    .into()
            )
        );
        let v = json!({
            "level": null, "expires_in_s": null, "reason": "",
            "before": {"level": 150, "source": "override"},
        });
        assert_eq!(
            text("ada", "event.service_level", v).1,
            "ada cleared the ServiceLevel override: the computed value applies again \
             (it was 150, an override)"
        );
    }

    #[test]
    fn trust_entries_name_the_certificate() {
        let cert = json!({
            "thumbprint": "AB12", "kind": "trusted", "previous_kind": "rejected",
            "subject": "CN=plc1", "application_uri": "urn:plc1",
            "not_before": "2024-01-01T00:00:00Z", "not_after": "2027-01-01T00:00:00Z",
            "der": "3082",
        });
        // The fingerprint (SHA-256 of the DER "3082") and the thumbprint,
        // labelled, in the console's one format.
        assert_eq!(
            text("ada", "trust.add", cert.clone()),
            (
                Group::Trust,
                "ada trusted the certificate \"CN=plc1\" (urn:plc1), which had been rejected; \
                 fingerprint 9D:F0:69:2E:6D:29:B2:A4:06:31:CD:75:EA:0C:E4:62:06:37:4E:DC:B7:A7:\
                 95:0C:E3:18:00:25:C7:08:8A:00, thumbprint AB:12, valid until 2027-01-01 00:00 UTC"
                    .into()
            )
        );
        let mut issuer = cert.clone();
        issuer["kind"] = json!("issuer");
        issuer["previous_kind"] = Value::Null;
        assert!(text("ada", "trust.add", issuer)
            .1
            .starts_with("ada added the CA certificate \"CN=plc1\" (urn:plc1) to the issuer list"));
        assert_eq!(
            text("engine", "trust.reject", cert).1,
            "The gateway rejected the untrusted certificate \"CN=plc1\" (urn:plc1); \
             fingerprint 9D:F0:69:2E:6D:29:B2:A4:06:31:CD:75:EA:0C:E4:62:06:37:4E:DC:B7:A7:\
             95:0C:E3:18:00:25:C7:08:8A:00, thumbprint AB:12, valid until 2027-01-01 00:00 UTC"
        );
        assert_eq!(
            text(
                "ada",
                "trust.remove",
                json!({"thumbprint": "AB12", "kind": "rejected"})
            ),
            (
                Group::Trust,
                "ada removed the certificate with thumbprint AB:12 from the rejected list".into()
            )
        );
        let crl = json!({
            "issuer": "CN=Plant CA", "thumbprint": "CD", "this_update": "2025-01-01T00:00:00Z",
            "next_update": "2025-02-01T00:00:00Z", "der": "30",
        });
        assert_eq!(
            text("ada", "crl.add", crl),
            (
                Group::Trust,
                "ada added the certificate revocation list of \"CN=Plant CA\", issued \
                 2025-01-01 00:00 UTC, next update 2025-02-01 00:00 UTC"
                    .into()
            )
        );
    }

    #[test]
    fn user_entries_never_show_a_secret() {
        assert_eq!(
            text(
                "ada",
                "user.add",
                json!({"name": "bob", "role": "operator"})
            ),
            (
                Group::Users,
                "ada created the user bob with the role operator".into()
            )
        );
        assert_eq!(
            text("ada", "user.password", json!({"name": "bob"})).1,
            "ada changed the password of bob"
        );
        assert_eq!(
            text("bob", "user.password", json!({"name": "bob"})).1,
            "bob changed their own password"
        );
        assert_eq!(
            text(
                "ada",
                "user.role",
                json!({"name": "bob", "role": "admin", "previous": "viewer"})
            )
            .1,
            "ada changed the role of bob from viewer to admin"
        );
        assert_eq!(
            text("cli", "user.delete", json!({"name": "bob"})).1,
            "An administrator on the command line deleted the user bob"
        );
    }

    #[test]
    fn field_sessions_and_pair_events() {
        assert_eq!(
            text("op", "event.field_failover", json!({"connection": "line1"})),
            (
                Group::FieldConnections,
                "op asked the field connection line1 to fail over to its next server".into()
            )
        );
        assert_eq!(
            text(
                "op",
                "event.field_reconnect",
                json!({"connection": "line1"})
            ),
            (
                Group::FieldConnections,
                "op asked the field connection line1 to reconnect now".into()
            )
        );
        assert_eq!(
            text(
                "op",
                "event.session_close",
                json!({"session": "ns=1;i=7", "name": "HMI 3"})
            ),
            (
                Group::Sessions,
                "op closed the client session \"HMI 3\" (ns=1;i=7)".into()
            )
        );
        assert_eq!(
            text("pair", "epoch.bump", json!({"epoch": 3})),
            (
                Group::Pair,
                "The appliance pair started replication epoch 3 after a change of the \
                 pair's leadership"
                    .into()
            )
        );
    }

    #[test]
    fn system_updates_and_restarts() {
        assert_eq!(
            text(
                "ada",
                "event.system_update_started",
                json!({"bytes": 268_435_456})
            ),
            (
                Group::System,
                "ada uploaded an update bundle (268.4 MB) and started its installation".into()
            )
        );
        assert_eq!(
            text(
                "ada",
                "event.system_update_finished",
                json!({"version": "0.2.0", "slot": "B"})
            )
            .1,
            "The update ada started was installed: 0.2.0 into slot B, used after the next restart"
        );
        assert_eq!(
            text(
                "ada",
                "event.system_update_failed",
                json!({"message": "Refused: the update bundle's signature is not valid for this appliance. Nothing was changed."})
            )
            .1,
            "The update ada started was not installed: Refused: the update bundle's signature is \
             not valid for this appliance. Nothing was changed."
        );
        assert_eq!(
            text("ada", "event.system_reboot", json!({})),
            (Group::System, "ada restarted the appliance".into())
        );
    }

    #[test]
    fn unknown_kinds_get_a_generic_sentence_with_readable_details() {
        let back = Utc.with_ymd_and_hms(2025, 6, 1, 14, 30, 0).unwrap();
        let ticks = opcua_types::DateTime::from(back).checked_ticks();
        let (group, s) = text(
            "ada",
            "event.valve_test",
            json!({"der": "3082", "due_ticks": ticks, "valve": "V-101"}),
        );
        assert_eq!(group, Group::Other);
        assert_eq!(
            s,
            "ada recorded the event \"valve test\": due 2025-06-01 14:30 UTC, valve V-101"
        );
        assert!(!s.contains(&ticks.to_string()));
        assert_eq!(
            text("ada", "mystery.kind", json!({})),
            (
                Group::Other,
                "ada made a change of kind \"mystery.kind\"".into()
            )
        );
        assert_eq!(describe("ada", "event.x", "not json").group, Group::Other);
    }

    fn config_change(before: Option<&str>, after: &str) -> String {
        json!({"key": CONFIG_KEY, "value": after, "before": before}).to_string()
    }

    #[test]
    fn a_configuration_change_lists_only_the_changed_settings() {
        let before = "[server]\nmax_session_count = 100\napplication_name = \"gw\"\n\
                      [isolation]\nmode = \"balanced\"\n\
                      [[field_servers]]\nname = \"line1\"\nendpoints = [\"opc.tcp://a:4840\"]\n\
                      [field_servers.identity]\nkind = \"username\"\nuser = \"u\"\npassword = \"<redacted>\"\n";
        let after = before
            .replace("max_session_count = 100", "max_session_count = 120")
            .replace("password = \"<redacted>\"", "password = \"<redacted>\"\n");
        let after = format!("{after}[listen]\nconsole = \"0.0.0.0:8443\"\n");
        let d = describe("ada", "setting.set", &config_change(Some(before), &after));
        assert_eq!(d.group, Group::Configuration);
        assert_eq!(
            d.changes,
            vec![
                Change {
                    setting: "listen.console".into(),
                    before: None,
                    after: Some("0.0.0.0:8443".into()),
                },
                Change {
                    setting: "server.max_session_count".into(),
                    before: Some("100".into()),
                    after: Some("120".into()),
                },
            ]
        );
        assert_eq!(
            d.sentence.to_string(),
            "ada changed the configuration: listen.console and server.max_session_count"
        );
        assert_eq!(
            d.changes[1].to_string(),
            "server.max_session_count: 100 -> 120"
        );
        // Saved unchanged: nothing listed.
        let d = describe("ada", "setting.set", &config_change(Some(before), before));
        assert!(d.changes.is_empty());
        assert_eq!(
            d.sentence.to_string(),
            "ada saved the configuration without changing any setting"
        );
    }

    #[test]
    fn secrets_stay_hidden_in_changes() {
        let before = "[[field_servers]]\nname = \"line1\"\nendpoints = [\"opc.tcp://a:4840\"]\n";
        let after = "[[field_servers]]\nname = \"line1\"\nendpoints = [\"opc.tcp://a:4840\"]\n\
                     [field_servers.identity]\nuser = \"u\"\npassword = \"plain-secret-1\"\n";
        let d = describe("ada", "setting.set", &config_change(Some(before), after));
        let shown = format!("{:?}", d.changes);
        assert!(!shown.contains("plain-secret-1"), "{shown}");
        assert!(d.changes.contains(&Change {
            setting: "field_servers[line1].identity.password".into(),
            before: None,
            after: Some("(hidden)".into()),
        }));
    }

    #[test]
    fn field_connections_added_changed_removed_by_name() {
        let one = "[[field_servers]]\nname = \"line1\"\nendpoints = [\"opc.tcp://a:4840\"]\n";
        let two = format!(
            "{one}[[field_servers]]\nname = \"line2\"\nendpoints = [\"opc.tcp://b:4840\", \"opc.tcp://c:4840\"]\n"
        );
        let d = describe("ada", "setting.set", &config_change(Some(one), &two));
        assert_eq!(d.group, Group::FieldConnections);
        assert_eq!(
            d.sentence.to_string(),
            "ada added the field connection line2 (opc.tcp://b:4840, opc.tcp://c:4840)"
        );
        // Removing the first does not renumber the second.
        let d = describe(
            "ada",
            "setting.set",
            &config_change(Some(&two), &two.replacen(one, "", 1)),
        );
        assert_eq!(
            d.sentence.to_string(),
            "ada removed the field connection line1"
        );
        assert!(d
            .changes
            .iter()
            .all(|c| c.setting.starts_with("field_servers[line1]")));
        let changed = two.replace("opc.tcp://a:4840", "opc.tcp://a2:4840");
        let d = describe("ada", "setting.set", &config_change(Some(&two), &changed));
        assert_eq!(
            d.sentence.to_string(),
            "ada changed the field connection line1 (endpoints)"
        );
        assert_eq!(
            d.changes,
            vec![Change {
                setting: "field_servers[line1].endpoints".into(),
                before: Some("opc.tcp://a:4840".into()),
                after: Some("opc.tcp://a2:4840".into()),
            }]
        );
        // Mixed with other settings: a configuration change naming both.
        let mixed = format!("[server]\nmax_session_count = 5\n{changed}");
        let d = describe("ada", "setting.set", &config_change(Some(&two), &mixed));
        assert_eq!(d.group, Group::Configuration);
        assert_eq!(
            d.sentence.to_string(),
            "ada changed the configuration: server.max_session_count, and changed the field \
             connection line1 (endpoints)"
        );
    }

    #[test]
    fn many_changes_are_summed_up_by_the_parts_they_belong_to() {
        let before = "[isolation]\nmode = \"balanced\"\n";
        let after = "[isolation]\nmode = \"trusted_reservations\"\n\
                     [[isolation.trusted_owners]]\nkey = \"scada\"\nweight = 4\nreserved = 2\n\
                     [[isolation.ingress]]\ncidr = \"10.0.5.0/24\"\nowner = \"scada\"\n";
        let d = describe("ada", "setting.set", &config_change(Some(before), after));
        assert_eq!(
            d.sentence.to_string(),
            "ada changed 4 settings of the configuration in isolation.ingress, isolation.mode \
             and isolation.trusted_owners"
        );
        assert_eq!(
            d.changes
                .iter()
                .map(|c| c.setting.as_str())
                .collect::<Vec<_>>(),
            [
                "isolation.ingress[10.0.5.0/24].owner",
                "isolation.mode",
                "isolation.trusted_owners[scada].reserved",
                "isolation.trusted_owners[scada].weight",
            ]
        );
    }

    #[test]
    fn lists_of_tables_are_named_by_their_key() {
        let before = "[[isolation.stages]]\nstage = \"request_execution\"\ncapacity = 10\n\
                      [[isolation.stages]]\nstage = \"connection\"\ncapacity = 5\n";
        let after = before.replace("capacity = 10", "capacity = 20");
        assert_eq!(
            setting_changes(&config_change(Some(before), &after)),
            vec![Change {
                setting: "isolation.stages[request_execution].capacity".into(),
                before: Some("10".into()),
                after: Some("20".into()),
            }]
        );
        // A new entry: its settings under its name, the name not repeated.
        let added =
            format!("{before}[[isolation.stages]]\nstage = \"parked_request\"\ncapacity = 3\n");
        assert_eq!(
            setting_changes(&config_change(Some(before), &added)),
            vec![Change {
                setting: "isolation.stages[parked_request].capacity".into(),
                before: None,
                after: Some("3".into()),
            }]
        );
        assert!(setting_changes(&json!({"key": "other", "value": "a = 1"}).to_string()).is_empty());
    }

    #[test]
    fn the_first_configuration_and_other_settings() {
        let d = describe(
            "cli",
            "setting.set",
            &config_change(None, "[server]\nmax_session_count = 5\n"),
        );
        assert_eq!(
            d.sentence.to_string(),
            "An administrator on the command line set up the configuration (1 setting)"
        );
        assert_eq!(d.changes[0].before, None);
        let d = describe(
            "ada",
            "setting.set",
            &json!({"key": "ui.theme", "value": "dark", "before": "light"}).to_string(),
        );
        assert_eq!(d.group, Group::Configuration);
        assert_eq!(d.sentence.to_string(), "ada changed the setting ui.theme");
        assert_eq!(d.changes[0].to_string(), "ui.theme: light -> dark");
    }

    #[test]
    fn every_group_has_a_distinct_name_that_parses_back() {
        let names: BTreeSet<&str> = Group::ALL.iter().map(|g| g.name()).collect();
        assert_eq!(names.len(), Group::ALL.len());
        for g in Group::ALL {
            assert_eq!(Group::parse(g.name()), Some(g));
        }
        assert_eq!(Group::parse("setting.set"), None);
    }

    #[test]
    fn durations_read_like_words() {
        assert_eq!(duration(0), "0 s");
        assert_eq!(duration(45), "45 s");
        assert_eq!(duration(3600), "1 h");
        assert_eq!(duration(90_061), "1 d 1 h 1 min 1 s");
    }
}
