//! Where the configuration document lives in the store, and the one way to
//! load and to replace it.
//!
//! The document is kept in two settings. [`CONFIG_KEY`]
//! (`config.document`, replicated to the standby) holds every setting but
//! the node-local ones ([`uagate_config::NODE_LOCAL_KEYS`]: `[listen]` and
//! `server.application_uri`). [`NODE_CONFIG_KEY`] (`config.node`, in
//! [`uagate_store::NODE_LOCAL_SETTINGS`], never replicated) holds this
//! appliance's overlay of those keys. [`load`] merges the overlay over the
//! document before validation ([`Config::from_parts`]), so start-up, the
//! store watcher, `uagate plan`, `config export` and the console all see
//! one document. A store written before the overlay existed holds
//! `[listen]` inside `config.document`: it is used while there is no
//! overlay, and [`save`] moves it into the overlay on the next write.
//!
//! # Replacing the document: why it never half-applies
//!
//! The store applies one change per transaction, and the two parts cannot
//! share one: the document is a replicated [`Change`] (in a pair it is
//! proposed through the Raft log and committed by a quorum), the overlay a
//! [`LocalChange`] of this appliance alone, and a single change carrying
//! both would ship the node-local part to the standby. So [`save`]:
//!
//! 1. checks everything before it writes: the whole document is split and
//!    merged back and must give the same valid document; both texts must
//!    fit a setting value; and the state in between (the new overlay over
//!    the old document) must load whenever the old state did;
//! 2. writes only the parts whose text changed, overlay first, then the
//!    document, both stamped with the same actor and time;
//! 3. when the document write fails (refused, or in a pair not committed)
//!    after the overlay was written, writes the previous overlay back (a
//!    local write, which nothing but the disk can fail) and reports the
//!    error: nothing of the import remains.
//!
//! The overlay goes first because every node-local key needs a restart: a
//! running gateway that sees the state in between applies nothing of it
//! live, and once the document follows it classifies the whole change
//! against the configuration in force. Had the document gone first, a
//! failed overlay write would need a replicated write to undo, which the
//! standby may already have applied. A crash between the two writes
//! leaves the validated state in between; importing again completes it.

use chrono::Utc;
use uagate_config::{Config, ConfigError, SplitDocument};
use uagate_store::{
    Change, LocalChange, Proposal, Store, StoreError, CONFIG_NODE_SETTING, MAX_SETTING_VALUE_LEN,
};

/// The settings key of the replicated configuration document (every
/// setting but the node-local ones).
pub const CONFIG_KEY: &str = "config.document";

/// The settings key of this appliance's overlay (the node-local settings
/// of the document); node-local, never replicated.
pub const NODE_CONFIG_KEY: &str = CONFIG_NODE_SETTING;

/// Why the stored configuration could not be loaded or replaced.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigStoreError {
    /// The document (or the stored parts merged) is not valid; names the
    /// setting.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The store refused or failed a read or write.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The two stored texts of the configuration, read together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredConfig {
    /// The replicated document ([`CONFIG_KEY`]), if one was stored.
    pub document: Option<String>,
    /// This appliance's overlay ([`NODE_CONFIG_KEY`]), if one was stored.
    pub node: Option<String>,
}

impl StoredConfig {
    /// Reads both settings in one read transaction, so they belong to one
    /// state of the store. Called by [`load`], [`save`] and the store
    /// watcher.
    pub async fn read(store: &Store) -> Result<StoredConfig, StoreError> {
        let mut values = store.settings(&[CONFIG_KEY, NODE_CONFIG_KEY]).await?;
        let node = values.pop().flatten();
        let document = values.pop().flatten();
        Ok(StoredConfig { document, node })
    }

    /// The configuration in force: the overlay merged over the document
    /// and validated as one; `None` when neither was ever stored (the
    /// caller picks its default).
    pub fn config(&self) -> Result<Option<Config>, ConfigError> {
        if self.document.is_none() && self.node.is_none() {
            return Ok(None);
        }
        Config::from_parts(self.document.as_deref(), self.node.as_deref()).map(Some)
    }
}

/// The stored configuration, merged and validated; `None` when none was
/// ever stored. Called at start-up, by `uagate plan` and `config export`,
/// and by the console before it edits the document.
pub async fn load(store: &Store) -> Result<Option<Config>, ConfigStoreError> {
    Ok(StoredConfig::read(store).await?.config()?)
}

/// What [`save`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Saved {
    /// The overlay ([`NODE_CONFIG_KEY`]) was written.
    pub node: bool,
    /// The replicated document ([`CONFIG_KEY`]) was written.
    pub document: bool,
}

/// Stores a whole, valid document: its node-local settings in this
/// appliance's overlay, the rest in the replicated document, all or
/// nothing (see the module docs for the order and why). Parts whose text
/// is unchanged are not written; a document equal to the stored one writes
/// nothing. Called by `uagate config import` and the console.
pub async fn save(store: &Store, actor: &str, new: &Config) -> Result<Saved, ConfigStoreError> {
    let split = new.split()?;
    if Config::from_parts(Some(&split.replicated), Some(&split.node))? != *new {
        return Err(ConfigError::Serialize(
            "the document does not read back as it was written".into(),
        )
        .into());
    }
    for (key, text) in [
        (NODE_CONFIG_KEY, &split.node),
        (CONFIG_KEY, &split.replicated),
    ] {
        if text.len() > MAX_SETTING_VALUE_LEN {
            return Err(StoreError::Invalid {
                setting: key.to_string(),
                message: format!(
                    "the document takes {} bytes here, at most {MAX_SETTING_VALUE_LEN} are stored",
                    text.len()
                ),
            }
            .into());
        }
    }
    let before = StoredConfig::read(store).await?;
    let saved = Saved {
        node: before.node.as_deref() != Some(split.node.as_str()),
        document: before.document.as_deref() != Some(split.replicated.as_str()),
    };
    if saved.node && saved.document && before.config().is_ok() {
        // The state between the two writes must load like the ones around it.
        Config::from_parts(before.document.as_deref(), Some(&split.node))?;
    }
    let at = Utc::now();
    if saved.node {
        let change = LocalChange::SetSetting {
            key: NODE_CONFIG_KEY.to_string(),
            value: split.node,
        };
        store.apply(Proposal::new(actor, at, change)).await?;
    }
    if saved.document {
        let change = Change::SetSetting {
            key: CONFIG_KEY.to_string(),
            value: split.replicated,
        };
        if let Err(e) = store.apply(Proposal::new(actor, at, change)).await {
            if saved.node {
                restore_node(store, actor, &before).await;
            }
            return Err(e.into());
        }
    }
    Ok(saved)
}

/// Puts the overlay back as it was before [`save`] wrote it (for a store
/// without one: the overlay that changes nothing, see
/// [`SplitDocument::node_of`]). A failure is logged: the error of the
/// document write is what the caller reports.
async fn restore_node(store: &Store, actor: &str, before: &StoredConfig) {
    let value = match &before.node {
        Some(text) => text.clone(),
        None => match SplitDocument::node_of(before.document.as_deref()) {
            Ok(text) => text,
            Err(e) => {
                tracing::error!(error = %e, "cannot put the configuration overlay back");
                return;
            }
        },
    };
    let change = LocalChange::SetSetting {
        key: NODE_CONFIG_KEY.to_string(),
        value,
    };
    if let Err(e) = store.apply(Proposal::now(actor, change)).await {
        tracing::error!(error = %e, "cannot put the configuration overlay back");
    }
}
