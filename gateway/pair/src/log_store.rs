//! The Raft log and the node's own Raft state (vote, committed log id,
//! purge marker) in their own SQLite file: openraft's
//! [`RaftLogStorage`] and [`RaftLogReader`].
//!
//! Every write is one committed transaction (WAL, `synchronous = FULL`), so
//! it is on disk when openraft is told it is done: `append` calls the
//! [`LogFlushed`] callback only after its commit returned. openraft calls
//! the writing methods one at a time (`&mut self`), which keeps the writes
//! in order; readers ([`LogStore::get_log_reader`]) share the connection
//! pool and see every committed entry.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::time::Duration;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader, StorageIOError, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::Row;

use crate::{Entry, LogId, NodeId, PairConfig, PairError, StorageError};

/// The migrations of the Raft log file (`gateway/pair/migrations`).
static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// Most entries one [`RaftLogReader::limited_get_log_entries`] call returns
/// (openraft asks again for the rest), bounding one replication message.
pub const MAX_ENTRIES_PER_READ: u64 = 512;

/// The Raft log file. Cheap to clone (shares the pool); a clone is the
/// log reader openraft's replication tasks use.
#[derive(Clone, Debug)]
pub struct LogStore {
    pool: SqlitePool,
}

/// A log index as SQLite stores it.
fn db_index(index: u64) -> Result<i64, PairError> {
    i64::try_from(index).map_err(|_| PairError::IndexOutOfRange(index))
}

/// The inclusive `[first, last]` indexes of a range, clamped to what
/// SQLite stores; `None` for an empty range.
fn index_bounds(range: &impl RangeBounds<u64>) -> Option<(i64, i64)> {
    let clamp = |i: u64| i64::try_from(i).unwrap_or(i64::MAX);
    let first = match range.start_bound() {
        Bound::Included(&i) => i,
        Bound::Excluded(&i) => i.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let last = match range.end_bound() {
        Bound::Included(&i) => i,
        Bound::Excluded(&i) => i.checked_sub(1)?,
        Bound::Unbounded => u64::MAX,
    };
    (first <= last).then(|| (clamp(first), clamp(last)))
}

fn decode<T: DeserializeOwned>(what: &'static str, text: &str) -> Result<T, PairError> {
    serde_json::from_str(text).map_err(|e| PairError::Corrupt {
        what,
        message: e.to_string(),
    })
}

/// Shorthands mapping a [`PairError`] to openraft's storage error.
fn read_logs(e: PairError) -> StorageError {
    StorageIOError::read_logs(&e).into()
}

fn write_logs(e: PairError) -> StorageError {
    StorageIOError::write_logs(&e).into()
}

impl LogStore {
    /// Opens (creating if missing) the Raft log file at `path` in WAL mode
    /// with `synchronous = FULL`, readable by this process's user only (it
    /// holds the replicated changes, password hashes and field-server
    /// passwords included; see [`uagate_store::files::private_db_file`]),
    /// and applies its migrations. Called once when the pair starts,
    /// before the Raft node is created.
    pub async fn open(path: &Path) -> Result<LogStore, PairError> {
        uagate_store::files::private_db_file(path)?;
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await?;
        // Migrations a newer build applied (an update rolled back; the data
        // partition is shared by both image slots) are tolerated, as the
        // configuration store does: they must be additive.
        uagate_store::run_tolerant(&MIGRATOR, &pool).await?;
        tracing::debug!(path = %path.display(), "raft log opened");
        Ok(LogStore { pool })
    }

    /// Closes all connections (checkpointing the WAL). Called when the Raft
    /// node has shut down; further calls fail.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Index of the last entry known committed (as last saved by
    /// openraft), for the pair's status.
    pub async fn committed_index(&self) -> Result<Option<u64>, PairError> {
        Ok(self
            .read_state::<Option<LogId>>("committed")
            .await?
            .flatten()
            .map(|l| l.index))
    }

    async fn read_state<T: DeserializeOwned>(
        &self,
        key: &'static str,
    ) -> Result<Option<T>, PairError> {
        let text: Option<String> =
            sqlx::query_scalar("SELECT value FROM raft_state WHERE key = ?1")
                .bind(key)
                .fetch_optional(&self.pool)
                .await?;
        text.map(|t| decode(key, &t)).transpose()
    }

    async fn write_state<T: Serialize>(&self, key: &str, value: &T) -> Result<(), PairError> {
        sqlx::query(
            "INSERT INTO raft_state (key, value) VALUES (?1, ?2) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(key)
        .bind(serde_json::to_string(value)?)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The entries with an index in `bounds` ([`index_bounds`]), ascending.
    async fn entries(&self, bounds: Option<(i64, i64)>) -> Result<Vec<Entry>, PairError> {
        let Some((first, last)) = bounds else {
            return Ok(Vec::new());
        };
        let rows =
            sqlx::query("SELECT entry FROM raft_log WHERE idx BETWEEN ?1 AND ?2 ORDER BY idx")
                .bind(first)
                .bind(last)
                .fetch_all(&self.pool)
                .await?;
        rows.iter()
            .map(|row| decode("log entry", row.try_get("entry")?))
            .collect()
    }

    async fn log_state(&self) -> Result<LogState<PairConfig>, PairError> {
        let last_purged_log_id: Option<LogId> = self.read_state("last_purged").await?;
        let last: Option<String> =
            sqlx::query_scalar("SELECT entry FROM raft_log ORDER BY idx DESC LIMIT 1")
                .fetch_optional(&self.pool)
                .await?;
        let last_log_id = match last {
            Some(text) => Some(decode::<Entry>("log entry", &text)?.log_id),
            None => last_purged_log_id,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn append_entries(&self, entries: Vec<Entry>) -> Result<(), PairError> {
        let mut tx = self.pool.begin().await?;
        for entry in entries {
            sqlx::query(
                "INSERT INTO raft_log (idx, entry) VALUES (?1, ?2) \
                 ON CONFLICT (idx) DO UPDATE SET entry = excluded.entry",
            )
            .bind(db_index(entry.log_id.index)?)
            .bind(serde_json::to_string(&entry)?)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn truncate_from(&self, log_id: LogId) -> Result<(), PairError> {
        sqlx::query("DELETE FROM raft_log WHERE idx >= ?1")
            .bind(db_index(log_id.index)?)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn purge_upto(&self, log_id: LogId) -> Result<(), PairError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO raft_state (key, value) VALUES ('last_purged', ?1) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(serde_json::to_string(&log_id)?)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM raft_log WHERE idx <= ?1")
            .bind(db_index(log_id.index)?)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}

impl RaftLogReader<PairConfig> for LogStore {
    /// Entries with an index in `range`, ascending; missing ones are left
    /// out. Called by openraft to replicate and to apply committed entries.
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        self.entries(index_bounds(&range)).await.map_err(read_logs)
    }

    /// Like [`RaftLogReader::try_get_log_entries`] for `[start, end)`, at
    /// most [`MAX_ENTRIES_PER_READ`] entries.
    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, StorageError> {
        let end = end.min(start.saturating_add(MAX_ENTRIES_PER_READ));
        self.entries(index_bounds(&(start..end)))
            .await
            .map_err(read_logs)
    }
}

impl RaftLogStorage<PairConfig> for LogStore {
    type LogReader = LogStore;

    /// The last purged log id and the last log id (the last purged one
    /// when the log holds no entry).
    async fn get_log_state(&mut self) -> Result<LogState<PairConfig>, StorageError> {
        self.log_state().await.map_err(read_logs)
    }

    /// A clone sharing the pool, for openraft's replication tasks.
    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    /// Saves the vote, committed before it returns.
    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        self.write_state("vote", vote)
            .await
            .map_err(|e| StorageIOError::write_vote(&e).into())
    }

    /// The vote last saved, `None` on a new node.
    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        self.read_state("vote")
            .await
            .map_err(|e| StorageIOError::read_vote(&e).into())
    }

    /// Saves the last committed log id, so a restarted node re-applies the
    /// committed entries its state machine had not applied yet.
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.write_state("committed", &committed)
            .await
            .map_err(|e| StorageIOError::write(&e).into())
    }

    /// The committed log id last saved.
    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self
            .read_state::<Option<LogId>>("committed")
            .await
            .map_err(|e| StorageIOError::read(&e))?
            .flatten())
    }

    /// Appends entries in one transaction; once it is committed the entries
    /// are readable and durable, and `callback` is told so.
    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<PairConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        match self.append_entries(entries.into_iter().collect()).await {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(write_logs(e))
            }
        }
    }

    /// Deletes the entries from `log_id` on (inclusive): conflicting
    /// entries a new leader overwrites.
    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.truncate_from(log_id).await.map_err(write_logs)
    }

    /// Deletes the entries up to `log_id` (inclusive), which a snapshot
    /// covers, and records `log_id` as the last purged, in one transaction.
    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.purge_upto(log_id).await.map_err(write_logs)
    }
}
