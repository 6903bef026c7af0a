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
}

impl StoreError {
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
