//! The one error type of the store crate.

/// Everything that can go wrong in a [`crate::Store`] call.
///
/// `Invalid`, `UserExists`, `UnknownUser` and `UnknownCert` are caller errors
/// (show them to the operator); the others are internal failures.
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
}

/// Shorthand for building [`StoreError::Invalid`].
pub(crate) fn invalid(setting: &str, message: impl Into<String>) -> StoreError {
    StoreError::Invalid {
        setting: setting.to_owned(),
        message: message.into(),
    }
}
