//! The one error type of the store crate.

/// Everything that can go wrong in a [`crate::Store`] call.
///
/// `Invalid`, `UserExists`, `UnknownUser` and `UnknownCert` are caller errors
/// (show them to the operator) — the business refusals of
/// [`crate::Store::apply`], see [`StoreError::is_refusal`]; the others are
/// internal failures.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Input was rejected by validation; `setting` names the offending field.
    #[error("invalid {setting}: {message}")]
    Invalid {
        /// Which input/field was wrong (e.g. `"password"`, `"certificate"`).
        setting: String,
        /// Human readable reason.
        message: String,
    },
    /// `add_user` for a name that already exists.
    #[error("user {0:?} already exists")]
    UserExists(String),
    /// The named user does not exist.
    #[error("no user named {0:?}")]
    UnknownUser(String),
    /// No certificate with this thumbprint is in the trust store.
    #[error("no certificate with thumbprint {0}")]
    UnknownCert(String),
    /// The database file could not be created or made private (see
    /// [`crate::files::private_db_file`]).
    #[error("{}: {source}", path.display())]
    File {
        /// The database file.
        path: std::path::PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// SQLite / sqlx failure.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Applying the embedded migrations failed.
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Password hashing failed (should not happen with sane parameters).
    #[error("password hashing failed: {0}")]
    Hash(String),
    /// A blocking background task (password hashing) panicked or was cancelled.
    #[error("background task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// A row read back from the database holds a value this build cannot interpret.
    #[error("corrupt value in table {table}: {message}")]
    Corrupt {
        /// Table the value came from.
        table: &'static str,
        /// What was wrong with it.
        message: String,
    },
    /// A replicated snapshot (see [`crate::ReplicatedSnapshot`]) in a
    /// format this build does not know: refused before anything is written.
    #[error("snapshot format {found} is not supported (this build reads format {supported})")]
    SnapshotFormat {
        /// The format number the snapshot declares.
        found: u32,
        /// The one format this build reads and writes.
        supported: u32,
    },
    /// A replicated snapshot that cannot be decoded or whose content is
    /// invalid (malformed JSON, a bad certificate, a node-local setting, a
    /// duplicate row, …): refused before anything is written.
    #[error("invalid snapshot: {0}")]
    SnapshotInvalid(String),
    /// A replicated change could not go through the pair's log: this
    /// appliance is not the configuration leader (the message names it),
    /// or the pair could not commit the change.
    #[error("{0}")]
    Replication(String),
    /// A replicated change on a member that is not the configuration
    /// leader: refused, naming the leader (its pair address and console
    /// URL, when known).
    #[error("not the configuration leader: {}", match (leader, console) {
        (Some(l), Some(c)) => format!("write on {l} (console {c})"),
        (Some(l), None) => format!("write on {l}"),
        _ => "no leader is known now; try again shortly".to_string(),
    })]
    NotLeader {
        /// The leader's pair address.
        leader: Option<String>,
        /// The leader's console URL.
        console: Option<String>,
    },
    /// The pair did not acknowledge the change in time (this appliance is
    /// cut off from a quorum): not in force, but it may still commit if
    /// this leader regains a quorum before another is elected.
    #[error("{0}")]
    NotAcknowledged(String),
}

/// A business refusal as a plain value: how a replicated change's refusal
/// travels back from the node that applied it to the node that proposed it,
/// which turns it back into the same [`StoreError`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// [`StoreError::Invalid`].
    Invalid {
        /// Which input/field was wrong.
        setting: String,
        /// Why.
        message: String,
    },
    /// [`StoreError::UserExists`].
    UserExists(String),
    /// [`StoreError::UnknownUser`].
    UnknownUser(String),
    /// [`StoreError::UnknownCert`].
    UnknownCert(String),
}

impl From<Refusal> for StoreError {
    fn from(r: Refusal) -> StoreError {
        match r {
            Refusal::Invalid { setting, message } => StoreError::Invalid { setting, message },
            Refusal::UserExists(n) => StoreError::UserExists(n),
            Refusal::UnknownUser(n) => StoreError::UnknownUser(n),
            Refusal::UnknownCert(t) => StoreError::UnknownCert(t),
        }
    }
}

impl StoreError {
    /// The refusal as a plain value, when this is one (see
    /// [`StoreError::is_refusal`]).
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            StoreError::Invalid { setting, message } => Some(Refusal::Invalid {
                setting: setting.clone(),
                message: message.clone(),
            }),
            StoreError::UserExists(n) => Some(Refusal::UserExists(n.clone())),
            StoreError::UnknownUser(n) => Some(Refusal::UnknownUser(n.clone())),
            StoreError::UnknownCert(t) => Some(Refusal::UnknownCert(t.clone())),
            _ => None,
        }
    }

    /// Whether this is a business refusal of a change value (invalid value,
    /// taken name, unknown user or certificate, last admin, older CRL): the
    /// outcome of applying that value, the same on every store holding the
    /// same rows. Every other variant is a failure of the store itself.
    /// [`crate::Store::apply_at`] reports refusals as
    /// [`crate::LogApplied::Refused`].
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            StoreError::Invalid { .. }
                | StoreError::UserExists(_)
                | StoreError::UnknownUser(_)
                | StoreError::UnknownCert(_)
        )
    }
}

/// Shorthand for building [`StoreError::Invalid`].
pub(crate) fn invalid(setting: &str, message: impl Into<String>) -> StoreError {
    StoreError::Invalid {
        setting: setting.to_owned(),
        message: message.into(),
    }
}
