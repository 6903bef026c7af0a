//! The per-appliance part of the configuration document.
//!
//! In an appliance pair the configuration document is replicated to the
//! standby, except for the settings that belong to one appliance alone:
//! [`NODE_LOCAL_KEYS`] (where it listens, its ApplicationUri). They are
//! stored apart, as this appliance's overlay, and merged over the
//! replicated document whenever the configuration is loaded —
//! [`Config::from_parts`], before validation, so validation and the
//! isolation plan see one document. [`Config::split`] is the other way:
//! what an import of a whole document stores in each part.

use toml::{Table, Value};

use crate::{invalid, Config, ConfigError};

/// The node-local settings, as dotted paths: a table stands for all of its
/// keys. Everything else in the document is replicated to the standby.
pub const NODE_LOCAL_KEYS: &[&str] = &["listen", "server.application_uri"];

/// A configuration document split into what is replicated and what stays
/// on this appliance ([`Config::split`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitDocument {
    /// TOML of every setting except the [`NODE_LOCAL_KEYS`]: what the pair
    /// replicates to the standby.
    pub replicated: String,
    /// TOML of only the [`NODE_LOCAL_KEYS`] that are set: this appliance's
    /// overlay, never replicated.
    pub node: String,
}

impl Config {
    /// Splits the document into its replicated part and this appliance's
    /// overlay. [`Config::from_parts`] of the two texts gives this document
    /// back. Called when a whole document is stored (`config import`, the
    /// console).
    pub fn split(&self) -> Result<SplitDocument, ConfigError> {
        let mut replicated = match Value::try_from(self) {
            Ok(Value::Table(t)) => t,
            Ok(_) => return Err(ConfigError::Serialize("not a table".into())),
            Err(e) => return Err(ConfigError::Serialize(e.to_string())),
        };
        let node = take_node_local(&mut replicated);
        let text = |t: &Table| {
            toml::to_string_pretty(t).map_err(|e| ConfigError::Serialize(e.to_string()))
        };
        Ok(SplitDocument {
            replicated: text(&replicated)?,
            node: text(&node)?,
        })
    }

    /// The configuration this appliance uses, from the stored replicated
    /// document and its own overlay, merged before validation. Called
    /// wherever the stored configuration is loaded (start, the store
    /// watcher, `uagate plan`, `config export`, the console).
    ///
    /// With an overlay, the [`NODE_LOCAL_KEYS`] come from it alone (any
    /// still in the replicated document, from a store written before the
    /// overlay existed, are ignored); an overlay holding any other key is
    /// refused, naming it. Without an overlay the replicated document is
    /// used as it is, its `[listen]` included. A missing document counts as
    /// an empty one (all defaults).
    pub fn from_parts(replicated: Option<&str>, node: Option<&str>) -> Result<Config, ConfigError> {
        let mut doc = match replicated {
            Some(text) => parse_table(text)?,
            None => Table::new(),
        };
        if let Some(text) = node {
            let mut overlay = parse_table(text)?;
            let local = take_node_local(&mut overlay);
            if let Some(key) = first_key(&overlay, "") {
                return Err(invalid(
                    &key,
                    format!(
                        "is not a per-appliance setting; the node overlay holds only {}",
                        NODE_LOCAL_KEYS.join(", ")
                    ),
                ));
            }
            take_node_local(&mut doc);
            merge(&mut doc, local);
        }
        let cfg: Config = Value::Table(doc)
            .try_into()
            .map_err(crate::parse_error::<toml::de::Error>)?;
        cfg.validate()?;
        Ok(cfg)
    }
}

impl SplitDocument {
    /// The overlay that changes nothing: the node-local keys `document`
    /// itself holds (a document stored before overlays existed keeps its
    /// `[listen]` there), as TOML; empty for no document. The document is
    /// not validated. Called to put back the state before a write of the
    /// overlay when the write of the document after it failed.
    pub fn node_of(document: Option<&str>) -> Result<String, ConfigError> {
        let Some(text) = document else {
            return Ok(String::new());
        };
        let node = take_node_local(&mut parse_table(text)?);
        toml::to_string_pretty(&node).map_err(|e| ConfigError::Serialize(e.to_string()))
    }
}

fn parse_table(text: &str) -> Result<Table, ConfigError> {
    text.parse::<Table>().map_err(crate::parse_error)
}

/// Removes the [`NODE_LOCAL_KEYS`] from `doc` and returns them, at the same
/// paths, as a table of their own.
fn take_node_local(doc: &mut Table) -> Table {
    let mut out = Table::new();
    for path in NODE_LOCAL_KEYS {
        let parts: Vec<&str> = path.split('.').collect();
        let Some((leaf, parents)) = parts.split_last() else {
            continue;
        };
        let Some(value) = remove_path(doc, parents, leaf) else {
            continue;
        };
        let mut nested = Table::new();
        nested.insert(leaf.to_string(), value);
        for p in parents.iter().rev() {
            let mut outer = Table::new();
            outer.insert(p.to_string(), Value::Table(nested));
            nested = outer;
        }
        merge(&mut out, nested);
    }
    out
}

/// Removes the key `leaf` of the table at `parents` (a path of tables).
fn remove_path(t: &mut Table, parents: &[&str], leaf: &str) -> Option<Value> {
    match parents.split_first() {
        None => t.remove(leaf),
        Some((first, rest)) => match t.get_mut(*first) {
            Some(Value::Table(inner)) => remove_path(inner, rest, leaf),
            _ => None,
        },
    }
}

/// Puts every key of `from` into `into`, merging tables key by key.
fn merge(into: &mut Table, from: Table) {
    for (k, v) in from {
        match (into.get_mut(&k), v) {
            (Some(Value::Table(a)), Value::Table(b)) => merge(a, b),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

/// The dotted path of the first key of `t` that is not an empty table.
fn first_key(t: &Table, prefix: &str) -> Option<String> {
    for (k, v) in t {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Value::Table(inner) => {
                if let Some(found) = first_key(inner, &path) {
                    return Some(found);
                }
            }
            _ => return Some(path),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
[listen]
opc_tcp = "10.0.0.1:4840"
console = "10.0.0.1:8443"
pair = "192.168.50.1:4850"
public_host = "gw-a.plant.local"

[server]
application_name = "line gateway"
application_uri = "urn:plant:gw-a"
max_session_count = 40

[isolation]
default_weight = 2

[[field_servers]]
name = "plc1"
endpoints = ["opc.tcp://10.0.1.5:4840"]
security_mode = "none"
security_policy = "None"
"#;

    fn parse(text: &str) -> Table {
        text.parse::<Table>()
            .unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    #[test]
    fn split_then_merge_gives_the_document_back() {
        let cfg = Config::from_toml(FULL).unwrap();
        let split = cfg.split().unwrap();
        let back = Config::from_parts(Some(&split.replicated), Some(&split.node)).unwrap();
        assert_eq!(back, cfg);
        assert_eq!(back.to_toml(), cfg.to_toml());
    }

    #[test]
    fn the_replicated_part_holds_no_node_local_key_and_the_overlay_only_those() {
        let split = Config::from_toml(FULL).unwrap().split().unwrap();
        let replicated = parse(&split.replicated);
        assert!(!replicated.contains_key("listen"), "{}", split.replicated);
        assert!(
            !replicated["server"]
                .as_table()
                .is_some_and(|s| s.contains_key("application_uri")),
            "{}",
            split.replicated
        );
        assert!(split.replicated.contains("max_session_count = 40"));
        let node = parse(&split.node);
        let keys: Vec<&String> = node.keys().collect();
        assert_eq!(keys, ["listen", "server"], "{}", split.node);
        assert_eq!(node["server"].as_table().map(Table::len), Some(1));
        assert_eq!(
            node["server"]["application_uri"].as_str(),
            Some("urn:plant:gw-a")
        );
        assert_eq!(node["listen"]["pair"].as_str(), Some("192.168.50.1:4850"));
    }

    #[test]
    fn without_an_overlay_the_listen_table_of_an_old_document_is_used() {
        let cfg = Config::from_parts(Some(FULL), None).unwrap();
        assert_eq!(cfg, Config::from_toml(FULL).unwrap());
        assert_eq!(cfg.listen.opc_tcp.to_string(), "10.0.0.1:4840");
    }

    #[test]
    fn with_an_overlay_node_local_keys_come_from_it_alone() {
        let overlay = "[listen]\nopc_tcp = \"10.0.0.2:4840\"\n";
        let cfg = Config::from_parts(Some(FULL), Some(overlay)).unwrap();
        assert_eq!(cfg.listen.opc_tcp.to_string(), "10.0.0.2:4840");
        // The old document's console, pair, public_host and application
        // URI are not taken over: they are the other appliance's.
        assert_eq!(cfg.listen.console, None);
        assert_eq!(cfg.listen.pair, None);
        assert_eq!(cfg.listen.public_host, None);
        assert_eq!(cfg.server.application_uri, None);
        assert_eq!(cfg.server.max_session_count, 40);
        assert_eq!(cfg.field_servers.len(), 1);
    }

    #[test]
    fn an_overlay_with_a_replicated_key_is_refused_naming_it() {
        let overlay = "[listen]\nopc_tcp = \"10.0.0.2:4840\"\n\n[server]\nmax_session_count = 3\n";
        match Config::from_parts(Some(FULL), Some(overlay)) {
            Err(ConfigError::Invalid { setting, .. }) => {
                assert_eq!(setting, "server.max_session_count")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn validation_runs_on_the_merged_document() {
        // An old document whose own [listen] would be refused loads once
        // an overlay replaces its listeners: only the merge is validated.
        let clashing = FULL.replace("pair = \"192.168.50.1:4850\"", "pair = \"10.0.0.1:8443\"");
        assert!(Config::from_toml(&clashing).is_err());
        let overlay = "[listen]\nopc_tcp = \"10.0.0.2:4840\"\n";
        let cfg = Config::from_parts(Some(&clashing), Some(overlay)).unwrap();
        assert_eq!(cfg.listen.pair_addr().to_string(), "10.0.0.2:4850");
        // A clash inside the overlay is refused, naming the setting.
        let bad = "[listen]\nopc_tcp = \"10.0.0.2:4840\"\npair = \"10.0.0.2:4840\"\n";
        match Config::from_parts(Some(FULL), Some(bad)) {
            Err(ConfigError::Invalid { setting, .. }) => assert_eq!(setting, "listen.pair"),
            other => panic!("{other:?}"),
        }
        // An unknown key in the overlay's [listen] is a parse error.
        let unknown = "[listen]\nopc_tcpp = \"10.0.0.2:4840\"\n";
        match Config::from_parts(Some(FULL), Some(unknown)) {
            Err(ConfigError::Parse(m)) => assert!(m.contains("opc_tcpp"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_overlay_of_an_old_document_changes_nothing() {
        let node = SplitDocument::node_of(Some(FULL)).unwrap();
        assert_eq!(
            Config::from_parts(Some(FULL), Some(&node)).unwrap(),
            Config::from_parts(Some(FULL), None).unwrap()
        );
        let plain = "[server]\nmax_session_count = 5\n";
        let node = SplitDocument::node_of(Some(plain)).unwrap();
        assert_eq!(node, "");
        assert_eq!(
            Config::from_parts(Some(plain), Some(&node)).unwrap(),
            Config::from_toml(plain).unwrap()
        );
        assert_eq!(SplitDocument::node_of(None).unwrap(), "");
    }

    #[test]
    fn nothing_stored_is_the_default_document() {
        assert_eq!(Config::from_parts(None, None).unwrap(), Config::default());
        let split = Config::default().split().unwrap();
        assert_eq!(
            Config::from_parts(Some(&split.replicated), Some(&split.node)).unwrap(),
            Config::default()
        );
    }
}
