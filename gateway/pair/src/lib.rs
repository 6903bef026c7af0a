#![forbid(unsafe_code)]
//! `uagate-pair`: replication of the configuration store between the two
//! appliances of a pair, over the `openraft` consensus engine (0.9,
//! `storage-v2`).
//!
//! This crate holds the storage side of the Raft node:
//!
//! * [`PairConfig`], the openraft type configuration: node ids are `u64`,
//!   a node is a [`PeerNode`] (the peer's `host:port`), the replicated
//!   values are the store's [`Proposal`]s of [`Change`]s and the outcome of
//!   applying one is an [`ApplyResponse`];
//! * [`LogStore`], openraft's [`RaftLogStorage`](openraft::storage::RaftLogStorage):
//!   the Raft log, the vote, the committed log id and the purge marker, in
//!   their own SQLite file (never in the configuration store);
//! * [`StateMachine`], openraft's
//!   [`RaftStateMachine`](openraft::storage::RaftStateMachine): the
//!   [`uagate_store::Store`] itself, applying each committed value with
//!   [`Store::apply_at`](uagate_store::Store::apply_at) (exactly once:
//!   `last_applied` is written in the change's transaction), with snapshots
//!   of the replicated state ([`uagate_store::ReplicatedSnapshot`]) kept as
//!   a file.
//!
//! Durable means durable: every write is a committed SQLite transaction
//! (WAL, `synchronous = FULL`) or an fsynced file before openraft is told
//! it is done. A business refusal of a change (unknown user, last admin,
//! …) is an outcome of apply ([`ApplyResponse::Refused`]), the same on
//! every node, never a storage error; a storage error stops the Raft node.

mod error;
pub mod join_failure;
mod log_store;
pub mod node;
pub mod pairing;
mod quiet;
mod state_machine;
pub mod tls;
pub mod wire;

use std::fmt;
use std::io::Cursor;

use serde::{Deserialize, Serialize};
use uagate_store::{Change, Proposal};

pub use error::PairError;
pub use join_failure::{JoinFailure, JoinProblem};
pub use log_store::{LogStore, MAX_ENTRIES_PER_READ};
pub use node::{
    Departure, Handover, Member, NodeSettings, PairNode, PairRole, PairStatus, HANDOVER_TIMEOUT,
};
pub use state_machine::{Fault, Fence, SnapshotBuilder, StateMachine, SNAPSHOT_FILE};

/// A Raft node id.
pub type NodeId = u64;

/// A member of the pair as openraft knows it: where its Raft endpoint
/// listens. Carried in membership entries, so both appliances know how to
/// reach each other.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerNode {
    /// The peer's Raft endpoint, `host:port`.
    pub addr: String,
    /// SHA-256 fingerprint (lowercase hex) of the peer's pair certificate,
    /// pinned at pairing: the only certificate accepted for this member.
    #[serde(default)]
    pub fingerprint: String,
    /// The public key of that certificate (hex of the uncompressed P-256
    /// point): checks the signature of every entry the member proposes.
    #[serde(default)]
    pub public_key: String,
    /// The member's OPC UA application URI (its entry in
    /// `Server.ServerRedundancy.ServerUriArray` of the others).
    #[serde(default)]
    pub application_uri: String,
    /// The member is a witness (`uagate witness`): it votes but serves no
    /// OPC UA and never leads.
    #[serde(default)]
    pub witness: bool,
    /// The member's console URL (empty for a witness): where a refused
    /// write on another member sends the operator.
    #[serde(default)]
    pub console: String,
}

/// A replicated change as it travels in the log: the proposal, who
/// proposed it in which epoch, and the proposer's signature over the three
/// ([`Signed::signed_bytes`]), checked by every member before it applies
/// the change. A forged or altered entry stops replication on the member
/// that finds it (fail closed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signed {
    /// The change with who asks and when.
    pub proposal: Proposal<Change>,
    /// The node that proposed it (the leader then).
    pub proposer: NodeId,
    /// The replication epoch the proposer was in: an entry of a lower
    /// epoch than the store's is refused.
    pub epoch: i64,
    /// ECDSA P-256 SHA-256 signature (fixed, hex) by the proposer's pair
    /// key.
    pub signature: String,
}

impl Signed {
    /// The bytes the signature covers.
    pub fn signed_bytes(proposal: &Proposal<Change>, proposer: NodeId, epoch: i64) -> Vec<u8> {
        // Serializing plain data to JSON cannot fail.
        serde_json::to_vec(&(proposal, proposer, epoch)).unwrap_or_default()
    }
}

impl fmt::Display for PeerNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.addr)
    }
}

/// What applying one committed log entry did: openraft hands it back to
/// the proposer of the entry (`client_write`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum ApplyResponse {
    /// The change was applied, with this change-log entry (`seq`); `epoch`
    /// is the replication epoch after it.
    Applied {
        /// Sequence number of the change-log entry written with the change.
        seq: i64,
        /// The replication epoch after the change.
        epoch: i64,
    },
    /// The entry had been applied before (it is at or below the state
    /// machine's `last_applied`): nothing was written.
    AlreadyApplied,
    /// The store refused the change (a business refusal, the same on every
    /// node): nothing but `last_applied` was written.
    Refused {
        /// Why, as the store words it.
        reason: String,
        /// The refusal as a value, so the proposer gets the same
        /// [`uagate_store::StoreError`] a direct apply gives.
        #[serde(default)]
        refusal: Option<uagate_store::Refusal>,
    },
    /// An entry that carries no change (a new leader's blank entry or a
    /// membership change): only `last_applied` (and the membership) were
    /// written.
    Recorded,
}

openraft::declare_raft_types!(
    /// The openraft type configuration of the pair.
    pub PairConfig:
        D = Signed,
        R = ApplyResponse,
        NodeId = NodeId,
        Node = PeerNode,
        Entry = openraft::Entry<PairConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A log id of the pair's Raft log.
pub type LogId = openraft::LogId<NodeId>;
/// A log entry of the pair's Raft log.
pub type Entry = openraft::Entry<PairConfig>;
/// The error openraft's storage traits return.
pub type StorageError = openraft::StorageError<NodeId>;
/// A cluster membership with the log id it was proposed at.
pub type StoredMembership = openraft::StoredMembership<NodeId, PeerNode>;
