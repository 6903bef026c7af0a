//! Configuration changes while running. The configuration document lives
//! in the store (the replicated [`CONFIG_KEY`] with this appliance's
//! overlay, see [`crate::config_store`]); `uagate config import` and the
//! console replace it there. A running gateway notices the change (of
//! either part) and
//! applies it as a unit: when every changed setting can change live, all of
//! them take effect; when any needs a restart, nothing changes now and the
//! whole document takes effect at the next start. Nothing is half-applied.
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
    /// Applies a new document as a unit (see the module docs) and records
    /// the outcome. Called by the store watcher and by the console right
    /// after it stored a document.
    pub fn reconfigure(self: &Arc<Self>, new: &Config) -> ReconfigureStatus {
        let current = self.control.applied();
        let status = match classify_change(&current, new) {
            Err(e) => ReconfigureStatus::Refused(e.to_string()),
            Ok(report) if report.is_empty() => ReconfigureStatus::Unchanged,
            Ok(report) if !report.restart.is_empty() => {
                ReconfigureStatus::RestartRequired(report.restart)
            }
            Ok(report) => match self.pipeline.check_isolation(new) {
                Err(e) => ReconfigureStatus::Refused(e),
                // Field connections first: the only part that can still
                // fail (a mount folder that cannot be made), and when it
                // does nothing has changed.
                Ok(()) => match self.remount(&current.field_servers, &new.field_servers) {
                    Err(e) => ReconfigureStatus::Refused(e),
                    Ok(_) => match self.pipeline.apply_isolation(new) {
                        Ok(()) => {
                            self.control.set_applied(new.clone());
                            ReconfigureStatus::Applied(report.live)
                        }
                        Err(e) => ReconfigureStatus::Refused(e),
                    },
                },
            },
        };
        match &status {
            ReconfigureStatus::Unchanged => {}
            ReconfigureStatus::Applied(s) => {
                tracing::info!(settings = %s.join(", "), "configuration change applied live")
            }
            ReconfigureStatus::RestartRequired(s) => tracing::warn!(
                settings = %s.join(", "),
                "configuration stored; it takes effect after a restart (nothing applied now)"
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
}
