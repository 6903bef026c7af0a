//! The store as the state machine of the pair's replicated log.
//!
//! The pair replicates [`Proposal`]s of [`Change`]s through a Raft log; each
//! committed entry is applied here at its log position. The position of the
//! last entry applied (`last_applied`, table `replica`) is written in the
//! **same** transaction as the entry's change, so after a crash an entry is
//! either applied with its position recorded or neither: replaying the log
//! from `last_applied` applies every entry exactly once. An entry at or
//! below `last_applied` is skipped ([`LogApplied::AlreadyApplied`]).
//!
//! A business refusal ([`StoreError::is_refusal`]) is an outcome of the
//! entry ([`LogApplied::Refused`]), the same on every replica: the change's
//! transaction is rolled back and `last_applied` advances in a transaction
//! of its own that writes nothing else. Any other error is a failure of the
//! store and leaves `last_applied` where it was.
//!
//! Entries that carry no change (a new leader's blank entry, a membership
//! change) advance `last_applied` through [`Store::record_applied`], which
//! also keeps the last membership the state machine saw.

use serde::{Deserialize, Serialize};
use sqlx::{Row, SqliteConnection};

use crate::apply::{append_log, check, run, validate_at};
use crate::change::sealed::Sealed;
use crate::change::{Change, Proposal, Scoped};
use crate::error::StoreError;
use crate::{validate_actor, Store};

/// A position in the pair's replicated log: the entry's index and the
/// leader that proposed it (its term and node id). Only `index` orders
/// positions; the leader is kept so the replication layer gets back the
/// exact log id it applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogPosition {
    /// The entry's index in the log (consecutive, from 0).
    pub index: u64,
    /// The term of the leader that proposed the entry.
    pub term: u64,
    /// The node id of the leader that proposed the entry.
    pub leader: u64,
}

/// Where the store stands in the replicated log: what the state machine
/// reports when the replication layer starts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplicaState {
    /// The last entry applied; `None` before the first.
    pub last_applied: Option<LogPosition>,
    /// The last cluster membership the state machine saw, as the
    /// replication layer serialized it; `None` before the first.
    pub membership: Option<serde_json::Value>,
}

/// What applying one replicated entry did ([`Store::apply_at`]).
#[derive(Debug)]
pub enum LogApplied {
    /// The change was applied; `last_applied` is the entry's position.
    Applied {
        /// Sequence number of the change-log entry written with the change
        /// (every replicated change writes one).
        seq: i64,
        /// The replication epoch after the change.
        epoch: i64,
    },
    /// The entry is at or below `last_applied`: it was applied (or refused)
    /// before, nothing was written.
    AlreadyApplied,
    /// The change was refused (a business refusal, see
    /// [`StoreError::is_refusal`]): nothing but `last_applied` was written.
    Refused(StoreError),
}

/// Decodes the `last_applied` column.
fn position_from_db(text: Option<String>) -> Result<Option<LogPosition>, StoreError> {
    text.map(|t| {
        serde_json::from_str(&t).map_err(|e| StoreError::Corrupt {
            table: "replica",
            message: format!("last_applied {t:?}: {e}"),
        })
    })
    .transpose()
}

/// Decodes the `membership` column.
fn membership_from_db(text: Option<String>) -> Result<Option<serde_json::Value>, StoreError> {
    text.map(|t| {
        serde_json::from_str(&t).map_err(|e| StoreError::Corrupt {
            table: "replica",
            message: format!("membership: {e}"),
        })
    })
    .transpose()
}

/// Serializes a position for the `last_applied` column.
pub(crate) fn position_to_db(position: &LogPosition) -> Result<String, StoreError> {
    serde_json::to_string(position).map_err(|e| StoreError::Corrupt {
        table: "replica",
        message: format!("cannot encode last_applied: {e}"),
    })
}

/// Reads the replica row inside the caller's transaction (or on a pooled
/// connection).
pub(crate) async fn read_replica(conn: &mut SqliteConnection) -> Result<ReplicaState, StoreError> {
    let row = sqlx::query("SELECT last_applied, membership FROM replica WHERE id = 1")
        .fetch_one(&mut *conn)
        .await?;
    Ok(ReplicaState {
        last_applied: position_from_db(row.try_get("last_applied")?)?,
        membership: membership_from_db(row.try_get("membership")?)?,
    })
}

/// Whether the entry at `position` is at or below `last_applied`.
async fn already_applied(
    conn: &mut SqliteConnection,
    position: LogPosition,
) -> Result<bool, StoreError> {
    let text: Option<String> = sqlx::query_scalar("SELECT last_applied FROM replica WHERE id = 1")
        .fetch_one(&mut *conn)
        .await?;
    Ok(position_from_db(text)?.is_some_and(|last| last.index >= position.index))
}

/// Writes `last_applied` (and, when given, the membership) inside the
/// caller's transaction.
async fn write_position(
    conn: &mut SqliteConnection,
    position: LogPosition,
    membership: Option<&serde_json::Value>,
) -> Result<(), StoreError> {
    let position = position_to_db(&position)?;
    match membership {
        Some(membership) => {
            sqlx::query("UPDATE replica SET last_applied = ?1, membership = ?2 WHERE id = 1")
                .bind(position)
                .bind(membership.to_string())
                .execute(&mut *conn)
                .await?
        }
        None => {
            sqlx::query("UPDATE replica SET last_applied = ?1 WHERE id = 1")
                .bind(position)
                .execute(&mut *conn)
                .await?
        }
    };
    Ok(())
}

impl Store {
    /// Forgets where the store stood in a replicated log (last applied entry
    /// and membership), keeping every row of its state. Called when the
    /// appliance joins a pair: its own log is dropped and it takes the
    /// other appliance's state from a snapshot, so no entry of the new log
    /// may be skipped as already applied.
    pub async fn forget_replica(&self) -> Result<(), StoreError> {
        sqlx::query("UPDATE replica SET last_applied = NULL, membership = NULL WHERE id = 1")
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Where the store stands in the replicated log: the last entry applied
    /// and the last membership seen. Called by the pair's state machine
    /// when the replication layer starts, and after each snapshot install.
    pub async fn replica_state(&self) -> Result<ReplicaState, StoreError> {
        let mut conn = self.pool.acquire().await?;
        read_replica(&mut conn).await
    }

    /// Applies a committed log entry's proposal at its log `position`:
    /// validates and applies the change like [`Store::apply`] and writes
    /// `position` as `last_applied` in the same transaction. Called by the
    /// pair's state machine for every entry carrying a change, in log order.
    ///
    /// An entry at or below `last_applied` is skipped and reported as
    /// [`LogApplied::AlreadyApplied`]; a business refusal is the outcome
    /// [`LogApplied::Refused`] (then only `last_applied` advances, in a
    /// transaction of its own). `Err` is a failure of the store only
    /// (database, corrupt row): nothing is written, not even the position.
    pub async fn apply_at(
        &self,
        position: LogPosition,
        proposal: Proposal<Change>,
    ) -> Result<LogApplied, StoreError> {
        let Proposal { actor, at, change } = proposal;
        let plan = validate_actor(&actor)
            .and_then(|()| validate_at(&at))
            .and_then(|()| check(change.into_any()));
        let plan = match plan {
            Ok(plan) => plan,
            Err(refusal) if refusal.is_refusal() => return self.refuse_at(position, refusal).await,
            Err(e) => return Err(e),
        };
        let mut tx = self.begin().await?;
        if already_applied(&mut tx, position).await? {
            tx.rollback().await?;
            return Ok(LogApplied::AlreadyApplied);
        }
        let effect = match run(&mut tx, &at, plan).await {
            Ok(effect) => effect,
            Err(refusal) if refusal.is_refusal() => {
                tx.rollback().await?;
                return self.refuse_at(position, refusal).await;
            }
            Err(e) => return Err(e),
        };
        let Some((kind, payload)) = &effect.log else {
            return Err(StoreError::Corrupt {
                table: "change_log",
                message: "a replicated change wrote no change-log entry".into(),
            });
        };
        let (seq, epoch) = append_log(&mut tx, Change::SCOPE, &actor, &at, kind, payload).await?;
        write_position(&mut tx, position, None).await?;
        tx.commit().await?;
        tracing::debug!(index = position.index, seq, "replicated change applied");
        Ok(LogApplied::Applied { seq, epoch })
    }

    /// Records a refused entry: advances `last_applied` in a transaction
    /// that writes nothing else (unless the entry was applied before).
    async fn refuse_at(
        &self,
        position: LogPosition,
        refusal: StoreError,
    ) -> Result<LogApplied, StoreError> {
        if !self.record_applied(position, None).await? {
            return Ok(LogApplied::AlreadyApplied);
        }
        tracing::info!(index = position.index, %refusal, "replicated change refused");
        Ok(LogApplied::Refused(refusal))
    }

    /// Advances `last_applied` to `position` for an entry that carries no
    /// change — a new leader's blank entry, or a membership change, whose
    /// `membership` (serialized by the replication layer) is kept as the
    /// last membership seen. Called by the pair's state machine in log
    /// order. Returns `false` and writes nothing when the entry is at or
    /// below `last_applied`.
    pub async fn record_applied(
        &self,
        position: LogPosition,
        membership: Option<&serde_json::Value>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        if already_applied(&mut tx, position).await? {
            tx.rollback().await?;
            return Ok(false);
        }
        write_position(&mut tx, position, membership).await?;
        tx.commit().await?;
        Ok(true)
    }
}
