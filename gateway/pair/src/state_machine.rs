//! The configuration store as openraft's [`RaftStateMachine`], with
//! snapshots of the replicated state.
//!
//! Each committed entry is applied to the [`Store`] at its log position
//! ([`Store::apply_at`], [`Store::record_applied`]): `last_applied` is
//! written in the same SQLite transaction as the change, so an entry is
//! applied exactly once across crashes, and the state machine needs no
//! snapshot to recover — the store is its own persistent state.
//!
//! A snapshot is the store's [`ReplicatedSnapshot`] encoding. The current
//! snapshot is kept in one file, [`SNAPSHOT_FILE`] in the snapshot
//! directory: its first line is the openraft [`SnapshotMeta`] (JSON), the
//! rest the snapshot bytes. It is replaced atomically (written to a
//! temporary file, fsynced, renamed, directory fsynced).

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    EntryPayload, ErrorSubject, ErrorVerb, OptionalSend, RaftSnapshotBuilder, StorageIOError,
};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use tokio::sync::Mutex;
use uagate_store::{LogApplied, LogPosition, ReplicatedSnapshot, Store};

use crate::{
    ApplyResponse, Entry, LogId, PairConfig, PairError, PeerNode, Signed, StorageError,
    StoredMembership,
};

/// Name of the current snapshot's file in the snapshot directory.
pub const SNAPSHOT_FILE: &str = "current.snapshot";
/// The temporary file a new snapshot is written to before it replaces the
/// current one.
const SNAPSHOT_TMP: &str = "current.snapshot.tmp";
/// Actor of the change-log entry an installed snapshot writes.
const INSTALL_ACTOR: &str = "pair";

type Meta = SnapshotMeta<crate::NodeId, PeerNode>;

/// The store's position for a Raft log id.
fn position(log_id: &LogId) -> LogPosition {
    LogPosition {
        index: log_id.index,
        term: log_id.leader_id.term,
        leader: log_id.leader_id.node_id,
    }
}

/// The Raft log id for a store position.
fn log_id(position: LogPosition) -> LogId {
    LogId::new(
        openraft::CommittedLeaderId::new(position.term, position.leader),
        position.index,
    )
}

/// The membership the store keeps (serialized by [`StateMachine::apply`]).
fn membership(value: Option<serde_json::Value>) -> Result<StoredMembership, PairError> {
    value
        .map(|v| {
            serde_json::from_value(v).map_err(|e| PairError::Corrupt {
                what: "membership",
                message: e.to_string(),
            })
        })
        .transpose()
        .map(Option::unwrap_or_default)
}

/// The snapshot metadata for a snapshot: its position and membership, and
/// an id naming the position and the content.
fn meta_for(snapshot: &ReplicatedSnapshot, bytes: &[u8]) -> Result<Meta, PairError> {
    let digest = hex::encode(&Sha256::digest(bytes)[..8]);
    let snapshot_id = match snapshot.last_applied {
        Some(p) => format!("{}-{}-{}-{digest}", p.term, p.leader, p.index),
        None => format!("none-{digest}"),
    };
    Ok(SnapshotMeta {
        last_log_id: snapshot.last_applied.map(log_id),
        last_membership: membership(snapshot.membership.clone())?,
        snapshot_id,
    })
}

/// The snapshot directory and the lock that keeps one writer of its file.
#[derive(Debug)]
struct SnapshotFiles {
    dir: PathBuf,
    lock: Mutex<()>,
    /// Whether the Raft instance owning this state machine was replaced
    /// ([`Fence::retire`]).
    retired: std::sync::atomic::AtomicBool,
    /// Held (read) by every write of the state machine to the store or the
    /// snapshot file, from its start to its end; [`Fence::retire`] takes it
    /// (write) to wait for the one in progress.
    gate: tokio::sync::RwLock<()>,
}

/// Retires a state machine when its Raft instance is replaced (a step-down
/// or a leave resets the log): openraft's shutdown does not wait for the
/// state machine's worker, which may still be applying entries it had
/// queued. Without the fence such a late apply wrote the old instance's
/// last applied position and membership back after the store had
/// forgotten them, so the new instance started as the only voter of the
/// old membership and elected itself: a returning old primary stayed
/// primary in its old epoch and could overwrite the promoted appliance's
/// changes.
#[derive(Debug, Clone)]
pub struct Fence(Arc<SnapshotFiles>);

impl Fence {
    /// Waits for the write in progress, if any, and refuses every later
    /// one. Called by the node right after the Raft instance shut down and
    /// before anything of its state is removed.
    pub async fn retire(&self) {
        self.0
            .retired
            .store(true, std::sync::atomic::Ordering::SeqCst);
        drop(self.0.gate.write().await);
    }
}

impl SnapshotFiles {
    /// Enters a write of the state machine: `Err` once retired, else a
    /// guard the retirement waits for.
    async fn enter(&self) -> Result<tokio::sync::RwLockReadGuard<'_, ()>, PairError> {
        let guard = self.gate.read().await;
        if self.retired.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(PairError::Refused(
                "this state machine was retired: its Raft instance was replaced".into(),
            ));
        }
        Ok(guard)
    }
}

impl SnapshotFiles {
    /// Reads the current snapshot, `None` when there is none.
    async fn read(&self) -> Result<Option<(Meta, Vec<u8>)>, PairError> {
        let bytes = match tokio::fs::read(self.dir.join(SNAPSHOT_FILE)).await {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let corrupt = |message: String| PairError::Corrupt {
            what: "snapshot file",
            message,
        };
        let split = bytes
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| corrupt("no metadata line".into()))?;
        let meta: Meta =
            serde_json::from_slice(&bytes[..split]).map_err(|e| corrupt(e.to_string()))?;
        Ok(Some((meta, bytes[split + 1..].to_vec())))
    }

    /// Makes `(meta, data)` the current snapshot, durably, unless the
    /// current one is newer and `keep_newer` is set (a snapshot built while
    /// a newer one was installed).
    async fn write(&self, meta: &Meta, data: &[u8], keep_newer: bool) -> Result<(), PairError> {
        let _writer = self.lock.lock().await;
        if keep_newer {
            if let Some((current, _)) = self.read().await? {
                if current.last_log_id > meta.last_log_id {
                    tracing::debug!(
                        current = %current.snapshot_id,
                        built = %meta.snapshot_id,
                        "a newer snapshot is current; keeping it"
                    );
                    return Ok(());
                }
            }
        }
        let tmp = self.dir.join(SNAPSHOT_TMP);
        let mut file = tokio::fs::File::create(&tmp).await?;
        file.write_all(&serde_json::to_vec(meta)?).await?;
        file.write_all(b"\n").await?;
        file.write_all(data).await?;
        file.sync_all().await?;
        drop(file);
        tokio::fs::rename(&tmp, self.dir.join(SNAPSHOT_FILE)).await?;
        tokio::fs::File::open(&self.dir).await?.sync_all().await?;
        Ok(())
    }
}

/// The configuration store as the Raft state machine. Created once when
/// the pair starts, with the gateway's [`Store`] and a directory for the
/// current snapshot, and handed to openraft.
#[derive(Debug)]
pub struct StateMachine {
    store: Store,
    files: Arc<SnapshotFiles>,
    fault: Fault,
    /// Set on a node whose replication stopped on an integrity fault at
    /// start (see [`StateMachine::halted`]): reported as applied up to
    /// here, and nothing more is applied.
    halted_at: Option<Option<LogId>>,
}

/// The integrity fault a state machine found, if any: shared with the pair
/// node, which reports it (status, ServiceLevel, metrics).
pub type Fault = Arc<std::sync::Mutex<Option<String>>>;

/// Builds a snapshot of the store: what [`StateMachine`] hands openraft
/// when it compacts its log or a follower is too far behind.
#[derive(Debug)]
pub struct SnapshotBuilder {
    store: Store,
    files: Arc<SnapshotFiles>,
}

impl StateMachine {
    /// The state machine over `store`, keeping its current snapshot in
    /// `snapshot_dir` (created if missing).
    pub async fn new(store: Store, snapshot_dir: &Path) -> Result<StateMachine, PairError> {
        tokio::fs::create_dir_all(snapshot_dir).await?;
        Ok(StateMachine {
            store,
            files: Arc::new(SnapshotFiles {
                dir: snapshot_dir.to_owned(),
                lock: Mutex::new(()),
                retired: std::sync::atomic::AtomicBool::new(false),
                gate: tokio::sync::RwLock::new(()),
            }),
            fault: Fault::default(),
            halted_at: None,
        })
    }

    /// The state machine of a node whose stored log failed its check when
    /// it started (`why`): it reports everything up to `committed` as
    /// applied, so the Raft node can start and show its state, and applies
    /// nothing more (fail closed). Called by the pair node when the normal
    /// start stopped on the fault.
    pub async fn halted(
        store: Store,
        snapshot_dir: &Path,
        committed: Option<LogId>,
        why: String,
    ) -> Result<StateMachine, PairError> {
        let mut sm = StateMachine::new(store, snapshot_dir).await?;
        sm.halted_at = Some(committed);
        if let Ok(mut f) = sm.fault.lock() {
            *f = Some(why);
        }
        Ok(sm)
    }

    /// Where this state machine reports an integrity fault (an entry whose
    /// signature does not check out): replication stops on this node.
    pub fn fault(&self) -> Fault {
        Arc::clone(&self.fault)
    }

    /// Where this state machine is retired when its Raft instance is
    /// replaced (see [`Fence`]).
    pub fn fence(&self) -> Fence {
        Fence(Arc::clone(&self.files))
    }

    /// Checks that `signed` was signed by its proposer, a member of the
    /// last membership applied that is no witness and is the leader that
    /// appended the entry (`leader`: only a leader proposes changes).
    /// Called before every change is applied.
    async fn verify(
        &self,
        signed: &Signed,
        leader: crate::NodeId,
        membership_value: Option<serde_json::Value>,
    ) -> Result<(), PairError> {
        let members = membership(membership_value)?;
        let key = members
            .membership()
            .get_node(&signed.proposer)
            .filter(|n| !n.witness && signed.proposer == leader)
            .map(|n| n.public_key.clone())
            .unwrap_or_default();
        let bytes = Signed::signed_bytes(&signed.proposal, signed.proposer, signed.epoch);
        if key.is_empty() || !crate::tls::verify(&key, &bytes, &signed.signature) {
            let why = format!(
                "an entry proposed by node {} does not carry its valid signature (forged or altered): replication stopped on this node",
                signed.proposer
            );
            tracing::error!(proposer = signed.proposer, "pair integrity fault: {why}");
            if let Ok(mut f) = self.fault.lock() {
                *f = Some(why.clone());
            }
            return Err(PairError::Integrity(why));
        }
        Ok(())
    }

    /// The store this state machine applies to.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Applies one verified change at its log position.
    async fn apply_change(
        &self,
        at: LogPosition,
        proposal: uagate_store::Proposal<uagate_store::Change>,
    ) -> Result<ApplyResponse, PairError> {
        Ok(match self.store.apply_at(at, proposal).await? {
            LogApplied::Applied { seq, epoch } => ApplyResponse::Applied { seq, epoch },
            LogApplied::AlreadyApplied => ApplyResponse::AlreadyApplied,
            LogApplied::Refused(refusal) => ApplyResponse::Refused {
                reason: refusal.to_string(),
                refusal: refusal.refusal(),
            },
        })
    }

    /// Applies one entry at its log position.
    async fn apply_entry(&self, entry: Entry) -> Result<ApplyResponse, PairError> {
        let at = position(&entry.log_id);
        Ok(match entry.payload {
            EntryPayload::Normal(signed) => {
                let state = self.store.replica_state().await?;
                if state.last_applied.is_some_and(|l| at.index <= l.index) {
                    return Ok(ApplyResponse::AlreadyApplied);
                }
                self.verify(&signed, entry.log_id.leader_id.node_id, state.membership)
                    .await?;
                let epoch = self.store.epoch().await?;
                if signed.epoch < epoch {
                    // Proposed before a promotion moved the pair on: the
                    // same refusal on every member (it depends on the log).
                    self.store.record_applied(at, None).await?;
                    return Ok(ApplyResponse::Refused {
                        reason: format!(
                            "proposed in epoch {} but the pair is in epoch {epoch}",
                            signed.epoch
                        ),
                        refusal: None,
                    });
                }
                self.apply_change(at, signed.proposal).await?
            }
            EntryPayload::Blank => recorded(self.store.record_applied(at, None).await?),
            EntryPayload::Membership(members) => {
                let stored = StoredMembership::new(Some(entry.log_id), members);
                let value = serde_json::to_value(&stored)?;
                recorded(self.store.record_applied(at, Some(&value)).await?)
            }
        })
    }

    /// Checks a received snapshot against its metadata and installs it in
    /// the store, then makes it the current snapshot.
    async fn install(&self, meta: &Meta, bytes: Vec<u8>) -> Result<(), PairError> {
        let snapshot = ReplicatedSnapshot::from_bytes(&bytes)?;
        let last_log_id = snapshot.last_applied.map(log_id);
        let last_membership = membership(snapshot.membership.clone())?;
        if last_log_id != meta.last_log_id || last_membership != meta.last_membership {
            return Err(PairError::Corrupt {
                what: "snapshot",
                message: format!("content at {last_log_id:?} does not match its metadata {meta}"),
            });
        }
        self.store
            .install_snapshot(&snapshot, INSTALL_ACTOR, chrono::Utc::now())
            .await?;
        self.files.write(meta, &bytes, false).await?;
        tracing::info!(snapshot = %meta.snapshot_id, "snapshot installed");
        Ok(())
    }
}

/// The response to an entry without a change.
fn recorded(advanced: bool) -> ApplyResponse {
    if advanced {
        ApplyResponse::Recorded
    } else {
        ApplyResponse::AlreadyApplied
    }
}

fn snapshot_error(e: PairError) -> StorageError {
    StorageIOError::new(ErrorSubject::Snapshot(None), ErrorVerb::Write, &e).into()
}

impl SnapshotBuilder {
    async fn build(&self) -> Result<Snapshot<PairConfig>, PairError> {
        let _entered = self.files.enter().await?;
        let snapshot = self.store.export_snapshot().await?;
        let bytes = snapshot.to_bytes()?;
        let meta = meta_for(&snapshot, &bytes)?;
        self.files.write(&meta, &bytes, true).await?;
        tracing::debug!(snapshot = %meta.snapshot_id, "snapshot built");
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

impl RaftSnapshotBuilder<PairConfig> for SnapshotBuilder {
    /// Exports the store's replicated state (one consistent read), keeps it
    /// as the current snapshot (unless a newer one was installed
    /// meanwhile) and returns it.
    async fn build_snapshot(&mut self) -> Result<Snapshot<PairConfig>, StorageError> {
        self.build().await.map_err(snapshot_error)
    }
}

/// Whether the store belongs to a pair (its last applied membership has
/// more than one member). Called by the CLI when no gateway runs on the
/// data directory: a paired appliance's replicated changes must not be
/// written beside the log.
pub async fn is_paired(store: &Store) -> Result<bool, PairError> {
    let state = store.replica_state().await?;
    Ok(membership(state.membership)?.membership().nodes().count() > 1)
}

impl RaftStateMachine<PairConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    /// The last applied log id and the last membership, from the store.
    /// Called when the Raft node starts.
    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let halted_at = self.halted_at;
        let read = async {
            let state = self.store.replica_state().await?;
            let applied = state.last_applied.map(log_id);
            Ok::<_, PairError>((
                match halted_at {
                    Some(at) => applied.max(at),
                    None => applied,
                },
                membership(state.membership)?,
            ))
        };
        read.await
            .map_err(|e| StorageIOError::read_state_machine(&e).into())
    }

    /// Applies committed entries in order, each in its own store
    /// transaction with its log position; returns one response per entry.
    async fn apply<I>(&mut self, entries: I) -> Result<Vec<ApplyResponse>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut responses = Vec::new();
        let mut entered = None;
        for entry in entries {
            let id = entry.log_id;
            if entered.is_none() {
                entered = Some(
                    self.files
                        .enter()
                        .await
                        .map_err(|e| StorageIOError::apply(id, &e))?,
                );
            }
            if self.halted_at.is_some() {
                let why = self
                    .fault
                    .lock()
                    .ok()
                    .and_then(|f| f.clone())
                    .unwrap_or_default();
                return Err(StorageIOError::apply(id, &PairError::Integrity(why)).into());
            }
            let response = self
                .apply_entry(entry)
                .await
                .map_err(|e| StorageIOError::apply(id, &e))?;
            responses.push(response);
        }
        Ok(responses)
    }

    /// A builder sharing the store and the snapshot directory.
    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            store: self.store.clone(),
            files: Arc::clone(&self.files),
        }
    }

    /// An empty buffer the leader's snapshot is received into.
    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    /// Replaces the store's replicated state with the received snapshot
    /// (keeping node-local rows) and makes it the current snapshot. A
    /// snapshot that does not decode, is of an unknown format or does not
    /// match `meta` is refused and changes nothing.
    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let _entered = self.files.enter().await.map_err(snapshot_error)?;
        self.install(meta, snapshot.into_inner())
            .await
            .map_err(snapshot_error)
    }

    /// The current snapshot file, `None` before the first snapshot.
    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<PairConfig>>, StorageError> {
        let current = self.files.read().await.map_err(|e| {
            StorageError::from(StorageIOError::new(
                ErrorSubject::Snapshot(None),
                ErrorVerb::Read,
                &e,
            ))
        })?;
        Ok(current.map(|(meta, bytes)| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        }))
    }
}
