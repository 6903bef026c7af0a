//! Configuration changes while running. The configuration document lives
//! in the store (the replicated [`CONFIG_KEY`] with this appliance's
//! overlay, see [`crate::config_store`]); `uagate config import` and the
//! console replace it there. A running gateway notices the change (of
//! either part) and applies each change as a unit:
//!
//! - when every setting that differs from what is in force can change
//!   live, all of them take effect now;
//! - when a change holds a setting that needs a restart, nothing of that
//!   change takes effect now; all of it takes effect at the next start
//!   (it is listed as waiting, see [`waiting_for_restart`]);
//! - a later change that alone is live (say, a field connection added
//!   while a port change waits for the maintenance window) takes effect
//!   now, unless it touches a part (`field_servers`, `isolation`) that a
//!   waiting change also touches: then it waits with it, so that no change
//!   is ever split between now and the restart.
//!
//! Nothing is half-applied: a change either is in force as a whole or
//! waits as a whole. The decision is [`decide`], a function of the
//! document in force, the last stored one and the new one.
//!
//! Live today: the field connections (`field_servers`: added, removed,
//! enabled, disabled or changed in any setting, see
//! [`crate::Engine::remount`]), trusted owners' weights,
//! `isolation.default_weight` and the ingress rules (the isolation plan
//! decides, see `Plan::restart_required`). Everything else needs a
//! restart.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use uagate_config::Config;
use uagate_isolation::plan::{Plan, PlanError};

use crate::config_store::StoredConfig;
use crate::Engine;

pub use crate::config_store::CONFIG_KEY;

/// How often a running gateway looks for a changed document (one cheap
/// change-log read; the document is read only when the log moved).
pub const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// What replacing one configuration document by another changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeReport {
    /// Changed settings (dotted names) a running gateway applies at once.
    pub live: Vec<String>,
    /// Changed settings that take effect only after a restart. When not
    /// empty, a running gateway applies nothing of the new document.
    pub restart: Vec<String>,
}

impl ChangeReport {
    /// Whether the documents are equivalent.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty() && self.restart.is_empty()
    }

    /// Whether a running gateway would apply the new document now.
    pub fn applies_live(&self) -> bool {
        self.restart.is_empty() && !self.live.is_empty()
    }
}

/// Compares two valid documents. Fails when `new` cannot be planned (the
/// error names the setting), so it is never applied.
pub fn classify_change(old: &Config, new: &Config) -> Result<ChangeReport, PlanError> {
    let new_plan = Plan::build(new)?;
    let mut changed = BTreeSet::new();
    match (toml::Value::try_from(old), toml::Value::try_from(new)) {
        (Ok(a), Ok(b)) => diff("", &a, &b, &mut changed),
        // Not expected for our own types; treat as a change of everything.
        _ => {
            changed.insert("(document)".to_string());
        }
    }
    let mut report = ChangeReport::default();
    if changed.is_empty() {
        return Ok(report);
    }
    let isolation_restart: BTreeSet<String> = match Plan::build(old) {
        Ok(old_plan) => old_plan
            .restart_required(&new_plan)
            .into_iter()
            .map(str::to_string)
            .collect(),
        Err(_) => ["isolation".to_string()].into(),
    };
    for setting in changed {
        let isolation = setting == "isolation" || setting.starts_with("isolation.");
        let field = setting == "field_servers" || setting.starts_with("field_servers.");
        // When the plan names any isolation change that needs a restart
        // (some of its names are groups, not settings), every changed
        // isolation setting waits with it.
        if field || isolation && isolation_restart.is_empty() {
            report.live.push(setting);
        } else {
            report.restart.push(setting);
        }
    }
    Ok(report)
}

/// Collects the dotted names of settings that differ. Tables are compared
/// key by key; arrays and values as a whole.
fn diff(prefix: &str, a: &toml::Value, b: &toml::Value, out: &mut BTreeSet<String>) {
    match (a, b) {
        (toml::Value::Table(x), toml::Value::Table(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let name = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                match (x.get(k), y.get(k)) {
                    (Some(va), Some(vb)) => diff(&name, va, vb, out),
                    _ => {
                        out.insert(name);
                    }
                }
            }
        }
        _ if a == b => {}
        _ => {
            out.insert(prefix.to_string());
        }
    }
}

/// What to do with a newly stored document, decided by [`decide`].
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Nothing to do: the document is what is in force, or the one
    /// already looked at.
    Unchanged,
    /// Put `target` in force now; `live` names the settings that change.
    Apply {
        /// The document in force afterwards: the new one, or the one in
        /// force with the parts this change touched taken from the new one.
        target: Box<Config>,
        /// The settings that change (dotted names).
        live: Vec<String>,
    },
    /// Nothing now; the document takes effect at the next start. `restart`
    /// names the stored settings that need the restart.
    Wait {
        /// The settings that differ from what is in force and need a
        /// restart.
        restart: Vec<String>,
    },
    /// The document cannot be applied at all (the message names the
    /// setting); nothing changes.
    Refused(String),
}

/// The document part (top-level key) a dotted setting name belongs to.
fn part(setting: &str) -> &str {
    setting.split('.').next().unwrap_or(setting)
}

/// Decides what a running gateway does with `new`, the document just
/// stored, given `applied` (in force) and `stored` (the previous stored
/// document, the one the gateway last looked at). Called by
/// [`Engine::reconfigure`] for every stored change; pure, so the rules of
/// the module docs are tested without a gateway.
pub fn decide(applied: &Config, stored: &Config, new: &Config) -> Decision {
    let whole = match classify_change(applied, new) {
        Ok(r) => r,
        Err(e) => return Decision::Refused(e.to_string()),
    };
    if whole.is_empty() {
        return Decision::Unchanged;
    }
    if whole.restart.is_empty() {
        return Decision::Apply {
            target: Box::new(new.clone()),
            live: whole.live,
        };
    }
    if new == stored {
        // Looked at already (the console applies before the store watcher
        // sees the document): it waits as decided then.
        return Decision::Unchanged;
    }
    let wait = Decision::Wait {
        restart: whole.restart,
    };
    // What this change alone does, compared with the previous stored
    // document. When that cannot be planned (it was refused), everything
    // waits.
    let Ok(change) = classify_change(stored, new) else {
        return wait;
    };
    if !change.restart.is_empty() || change.live.is_empty() {
        return wait;
    }
    // Parts touched by changes that wait for the restart: a change to the
    // same part waits with them.
    let waiting = match classify_change(applied, stored) {
        Ok(r) => r,
        Err(_) => return wait,
    };
    let held: BTreeSet<&str> = waiting
        .live
        .iter()
        .chain(&waiting.restart)
        .map(|s| part(s))
        .collect();
    let touched: BTreeSet<&str> = change.live.iter().map(|s| part(s)).collect();
    if touched.iter().any(|p| held.contains(p)) {
        return wait;
    }
    // Each part a change can touch live is taken whole from the new
    // document; any other part waits.
    let mut target = applied.clone();
    for p in &touched {
        match *p {
            "field_servers" => target.field_servers = new.field_servers.clone(),
            "isolation" => target.isolation = new.isolation.clone(),
            _ => return wait,
        }
    }
    // The document in force with this change must itself be valid and
    // live-applicable (it is a document nobody stored).
    if target.validate().is_err() {
        return wait;
    }
    match classify_change(applied, &target) {
        Ok(r) if r.restart.is_empty() && !r.live.is_empty() => Decision::Apply {
            target: Box::new(target),
            live: change.live,
        },
        _ => wait,
    }
}

/// The stored settings not in force (they wait for a restart): those that
/// need it first, then live ones stored with them. Empty when everything
/// stored is in force, or when the stored document cannot be planned (it
/// was refused, which its caller heard at once).
pub fn waiting_for_restart(applied: &Config, stored: &Config) -> Vec<String> {
    match classify_change(applied, stored) {
        Ok(r) => r.restart.into_iter().chain(r.live).collect(),
        Err(_) => Vec::new(),
    }
}

/// The outcome of the last configuration change the gateway saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ReconfigureStatus {
    /// Nothing changed since start.
    #[default]
    Unchanged,
    /// The stored document was applied live.
    Applied(Vec<String>),
    /// The stored document waits for a restart; these settings need it.
    RestartRequired(Vec<String>),
    /// The stored document is invalid and was not applied.
    Refused(String),
}

impl Engine {
    /// Applies a newly stored document as [`decide`] says (see the module
    /// docs) and records the outcome. Called by the store watcher and by
    /// the console right after it stored a document.
    pub fn reconfigure(self: &Arc<Self>, new: &Config) -> ReconfigureStatus {
        let _one_at_a_time = self.control.reconfiguring.lock();
        let current = self.control.applied();
        let decision = decide(&current, &self.control.stored(), new);
        let status = match decision {
            Decision::Unchanged => ReconfigureStatus::Unchanged,
            Decision::Refused(e) => ReconfigureStatus::Refused(e),
            Decision::Wait { restart } => ReconfigureStatus::RestartRequired(restart),
            Decision::Apply { target, live } => match self.pipeline.check_isolation(&target) {
                Err(e) => ReconfigureStatus::Refused(e),
                // Field connections first: the only part that can still
                // fail (a mount folder that cannot be made), and when it
                // does nothing has changed.
                Ok(()) => match self.remount(&current.field_servers, &target.field_servers) {
                    Err(e) => ReconfigureStatus::Refused(e),
                    Ok(_) => match self.pipeline.apply_isolation(&target) {
                        Ok(()) => {
                            self.control.set_applied(*target);
                            ReconfigureStatus::Applied(live)
                        }
                        Err(e) => ReconfigureStatus::Refused(e),
                    },
                },
            },
        };
        // What waits for a restart changes only here: worked out once per
        // change, not on every console request that shows it.
        let waiting = waiting_for_restart(&self.control.applied(), new);
        self.control.set_stored(new.clone(), waiting.clone());
        match &status {
            ReconfigureStatus::Unchanged => {}
            ReconfigureStatus::Applied(s) => {
                if waiting.is_empty() {
                    tracing::info!(settings = %s.join(", "), "configuration change applied live")
                } else {
                    tracing::info!(
                        settings = %s.join(", "),
                        waiting = %waiting.join(", "),
                        "configuration change applied live; earlier stored changes still wait for a restart"
                    )
                }
            }
            ReconfigureStatus::RestartRequired(s) => tracing::warn!(
                settings = %s.join(", "),
                "configuration stored; it takes effect after a restart (nothing of this change applied now)"
            ),
            ReconfigureStatus::Refused(e) => {
                tracing::error!(error = %e, "stored configuration refused; nothing applied")
            }
        }
        if status != ReconfigureStatus::Unchanged {
            self.control.set_reconfigure_status(status.clone());
        }
        status
    }

    /// The stored settings not in force yet, which take effect at the next
    /// start (see [`waiting_for_restart`]); empty when everything stored
    /// is in force. For the console's banner and REST status.
    pub fn waiting_for_restart(&self) -> Vec<String> {
        self.control.waiting()
    }

    /// The change-log position and the stored document (both parts) now;
    /// the watcher starts from them.
    pub(crate) async fn config_seen(&self) -> (i64, StoredConfig) {
        (
            self.store.last_seq().await.unwrap_or(0),
            StoredConfig::read(&self.store).await.unwrap_or_default(),
        )
    }

    /// Watches the store for a replaced configuration document or overlay
    /// until `cancel`; runs for the life of the server. The two parts are
    /// merged before validation, like at start.
    /// `seen` is the change-log position and document read before the
    /// gateway was handed to its caller, so no change after start is missed.
    pub(crate) async fn watch_config(
        self: Arc<Self>,
        seen: (i64, StoredConfig),
        cancel: CancellationToken,
    ) {
        let (mut seen_seq, mut seen_doc) = seen;
        let mut tick = tokio::time::interval(WATCH_INTERVAL);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tick.tick() => {}
            }
            let seq = match self.store.last_seq().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the change log");
                    continue;
                }
            };
            if seq == seen_seq {
                continue;
            }
            seen_seq = seq;
            // Users, the trust list or CRLs may have changed: what would be
            // refused now ends (`standing.rs`).
            self.recheck_standing().await;
            let doc = match StoredConfig::read(&self.store).await {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the configuration document");
                    continue;
                }
            };
            if doc == seen_doc {
                continue;
            }
            if doc.document.is_none() && doc.node.is_some() {
                // The first half of a first import (`config_store::save`
                // writes the overlay, then the document): an overlay alone
                // over the defaults is no configuration; wait for the
                // document.
                continue;
            }
            seen_doc = doc.clone();
            match doc.config() {
                Ok(Some(new)) => {
                    self.reconfigure(&new);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(error = %e, "stored configuration is invalid; nothing applied");
                    self.control
                        .set_reconfigure_status(ReconfigureStatus::Refused(e.to_string()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Config {
        Config::from_toml(&format!(
            "[server]\nmax_channel_count = 110\n\n\
             [isolation]\nmode = \"trusted_reservations\"\n\n\
             [[isolation.trusted_owners]]\nkey = \"scada\"\nweight = 2\n\n\
             [[isolation.ingress]]\ncidr = \"10.0.0.0/24\"\nowner = \"scada\"\n\n{extra}"
        ))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn identical_documents_change_nothing() {
        let r = classify_change(&config(""), &config("")).unwrap_or_else(|e| panic!("{e}"));
        assert!(r.is_empty(), "{r:?}");
    }

    #[test]
    fn a_weight_change_applies_live() {
        let old = config("");
        let mut new = old.clone();
        new.isolation.trusted_owners[0].weight = 7;
        let r = classify_change(&old, &new).unwrap_or_else(|e| panic!("{e}"));
        assert!(r.applies_live(), "{r:?}");
        assert!(
            r.live
                .iter()
                .any(|s| s.starts_with("isolation.trusted_owners")),
            "{r:?}"
        );
    }

    #[test]
    fn a_server_limit_needs_a_restart_and_blocks_live_parts() {
        let old = config("");
        let mut new = old.clone();
        new.isolation.trusted_owners[0].weight = 7;
        new.server.max_session_count += 1;
        let r = classify_change(&old, &new).unwrap_or_else(|e| panic!("{e}"));
        assert!(!r.applies_live(), "{r:?}");
        assert!(
            r.restart.contains(&"server.max_session_count".to_string()),
            "{r:?}"
        );
    }

    #[test]
    fn a_stage_capacity_needs_a_restart_even_with_live_changes_beside_it() {
        let old = config("");
        let mut new = old.clone();
        new.isolation.trusted_owners[0].weight = 7;
        new.isolation.stages.push(
            uagate_config::Config::from_toml(
                "[[isolation.stages]]\nstage = \"request_execution\"\ncapacity = 24\n",
            )
            .unwrap_or_else(|e| panic!("{e}"))
            .isolation
            .stages
            .remove(0),
        );
        let r = classify_change(&old, &new).unwrap_or_else(|e| panic!("{e}"));
        assert!(!r.applies_live(), "{r:?}");
        assert!(
            r.restart.iter().any(|s| s.starts_with("isolation.stages")),
            "{r:?}"
        );
    }

    #[test]
    fn an_isolation_mode_change_needs_a_restart() {
        let old = config("");
        let mut new = old.clone();
        new.isolation.mode = uagate_config::IsolationMode::Balanced;
        new.isolation.trusted_owners.clear();
        new.isolation.ingress.clear();
        let r = classify_change(&old, &new).unwrap_or_else(|e| panic!("{e}"));
        assert!(!r.applies_live(), "{r:?}");
        assert!(
            r.restart.iter().any(|s| s.starts_with("isolation.mode")),
            "{r:?}"
        );
    }

    #[test]
    fn an_unplannable_document_is_refused_naming_the_setting() {
        let old = Config::default();
        let mut new = old.clone();
        new.server.max_channel_count = new.server.max_session_count;
        let e = classify_change(&old, &new).err().map(|e| e.to_string());
        assert!(
            e.as_deref()
                .is_some_and(|e| e.contains("max_channel_count")),
            "{e:?}"
        );
    }

    /// A field connection entry, as the console or an import adds it.
    fn field(name: &str) -> uagate_config::FieldServer {
        Config::from_toml(&format!(
            "[[field_servers]]\nname = \"{name}\"\nendpoints = [\"opc.tcp://127.0.0.1:4840\"]\n\
             security_mode = \"none\"\nsecurity_policy = \"None\"\n"
        ))
        .unwrap_or_else(|e| panic!("{e}"))
        .field_servers
        .remove(0)
    }

    #[test]
    fn a_live_change_is_applied_whole() {
        let old = config("");
        let mut new = old.clone();
        new.field_servers.push(field("line1"));
        match decide(&old, &old, &new) {
            Decision::Apply { target, live } => {
                assert_eq!(*target, new);
                assert_eq!(live, vec!["field_servers".to_string()]);
            }
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn a_change_with_a_restart_setting_waits_whole() {
        let old = config("");
        let mut new = old.clone();
        new.field_servers.push(field("line1"));
        new.server.max_session_count += 1;
        assert_eq!(
            decide(&old, &old, &new),
            Decision::Wait {
                restart: vec!["server.max_session_count".to_string()]
            }
        );
    }

    #[test]
    fn a_later_live_change_applies_while_an_earlier_one_waits_for_the_restart() {
        let applied = config("");
        // 1. Stored earlier: a server limit (waits for the restart).
        let mut waiting = applied.clone();
        waiting.server.max_session_count += 1;
        assert!(matches!(
            decide(&applied, &applied, &waiting),
            Decision::Wait { .. }
        ));
        assert_eq!(
            waiting_for_restart(&applied, &waiting),
            vec!["server.max_session_count".to_string()]
        );
        // 2. Then a field connection is added: in force now, the limit
        //    still waits.
        let mut new = waiting.clone();
        new.field_servers.push(field("line1"));
        let Decision::Apply { target, live } = decide(&applied, &waiting, &new) else {
            panic!("the field connection should apply live");
        };
        assert_eq!(live, vec!["field_servers".to_string()]);
        assert_eq!(target.field_servers, new.field_servers);
        assert_eq!(
            target.server.max_session_count, applied.server.max_session_count,
            "the waiting limit came in force early"
        );
        assert_eq!(
            waiting_for_restart(&target, &new),
            vec!["server.max_session_count".to_string()]
        );
        // 3. A weight change next (another live part): in force too.
        let mut weight = new.clone();
        weight.isolation.trusted_owners[0].weight = 9;
        let Decision::Apply { target: t3, .. } = decide(&target, &new, &weight) else {
            panic!("the weight should apply live");
        };
        assert_eq!(t3.isolation.trusted_owners[0].weight, 9);
        assert_eq!(t3.field_servers, new.field_servers);
        assert_eq!(
            t3.server.max_session_count,
            applied.server.max_session_count
        );
        // 4. The limit put back: what is in force is the stored document
        //    again, nothing to do and nothing waits.
        let mut back = weight.clone();
        back.server.max_session_count = applied.server.max_session_count;
        assert_eq!(decide(&t3, &weight, &back), Decision::Unchanged);
        assert!(waiting_for_restart(&t3, &back).is_empty());
    }

    #[test]
    fn a_live_change_to_a_part_a_waiting_change_touched_waits_with_it() {
        let applied = config("");
        // Stored earlier, as one change: a field connection and a server
        // limit (so the field connection waits too).
        let mut waiting = applied.clone();
        waiting.field_servers.push(field("line1"));
        waiting.server.max_session_count += 1;
        // Then another field connection: taking `field_servers` now would
        // bring line1 in force without its limit, splitting that change.
        let mut new = waiting.clone();
        new.field_servers.push(field("line2"));
        let Decision::Wait { restart } = decide(&applied, &waiting, &new) else {
            panic!("the second field connection should wait");
        };
        assert_eq!(restart, vec!["server.max_session_count".to_string()]);
        assert_eq!(
            waiting_for_restart(&applied, &new),
            vec![
                "server.max_session_count".to_string(),
                "field_servers".to_string()
            ]
        );
    }

    #[test]
    fn the_document_already_looked_at_changes_nothing_twice() {
        let applied = config("");
        let mut waiting = applied.clone();
        waiting.server.max_session_count += 1;
        assert_eq!(
            decide(&applied, &waiting, &waiting),
            Decision::Unchanged,
            "the store watcher after the console"
        );
    }

    #[test]
    fn an_unplannable_document_is_refused_whatever_waits() {
        let applied = config("");
        let mut waiting = applied.clone();
        waiting.server.max_session_count += 1;
        let mut new = waiting.clone();
        new.server.max_channel_count = new.server.max_session_count;
        assert!(
            matches!(decide(&applied, &waiting, &new), Decision::Refused(e) if e.contains("max_channel_count"))
        );
    }
}
