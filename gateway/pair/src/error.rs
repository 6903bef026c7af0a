//! The one error type of the pair crate.

use uagate_store::StoreError;

/// Everything that can go wrong in the pair's storage. openraft receives
/// these wrapped in its [`openraft::StorageError`], which stops the Raft
/// node: none of them is a business outcome (those are
/// [`crate::ApplyResponse`]s).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PairError {
    /// SQLite / sqlx failure of the Raft log file.
    #[error("raft log database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Applying the Raft log file's migrations failed.
    #[error("raft log migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The configuration store (the state machine) failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// Reading or writing the snapshot file failed.
    #[error("snapshot file: {0}")]
    Io(#[from] std::io::Error),
    /// A value could not be encoded or decoded as JSON.
    #[error("encoding: {0}")]
    Json(#[from] serde_json::Error),
    /// A stored value this build cannot interpret (a corrupt log row,
    /// snapshot file or membership).
    #[error("corrupt {what}: {message}")]
    Corrupt {
        /// What was read.
        what: &'static str,
        /// What was wrong with it.
        message: String,
    },
    /// A log index beyond what SQLite stores (2^63 - 1).
    #[error("log index {0} out of range")]
    IndexOutOfRange(u64),
    /// Making the pair certificate or a TLS configuration failed.
    #[error("pair TLS: {0}")]
    Tls(String),
    /// A pair connection was refused or broke (an unknown certificate, a
    /// timeout, a peer that closed).
    #[error("{0}")]
    Refused(String),
    /// A replicated entry's signature does not check out (forged or
    /// altered): replication stops on this node (fail closed).
    #[error("integrity fault: {0}")]
    Integrity(String),
    /// A message larger than a pair frame takes ([`crate::wire::MAX_FRAME`]):
    /// not sent (an AppendEntries is then sent in smaller batches).
    #[error("a pair message of {0} bytes is larger than a frame takes")]
    TooLarge(usize),
    /// This appliance's own pair node could not be reached by its CLI (no
    /// gateway runs on the data directory, or another process listens at
    /// the address it recorded): the request never got to the node.
    #[error("{0}")]
    LocalNode(String),
    /// The Raft node failed or refused (shutting down, a change in
    /// progress).
    #[error("{0}")]
    Raft(String),
    /// Joining another appliance failed: what to do, and the raw cause.
    #[error("{0}")]
    Join(crate::join_failure::JoinFailure),
}
