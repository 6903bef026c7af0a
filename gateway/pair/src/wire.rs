//! What travels on a pair connection: one JSON message per frame (a
//! big-endian `u32` length, then the body, at most [`MAX_FRAME`] bytes),
//! a [`Request`] from the connecting side, a [`Response`] back, in turn.

use futures_util::{SinkExt, StreamExt};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use crate::error::PairError;
use crate::{NodeId, PairConfig};
use uagate_store::{Change, Proposal};

/// Largest frame (a snapshot chunk is at most 3 MiB, openraft's default).
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

/// A request on a pair connection.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    /// Raft AppendEntries (pinned members only), with the sender's epoch.
    Append {
        /// The Raft message.
        rpc: AppendEntriesRequest<PairConfig>,
        /// Where the sender stands.
        mark: EpochMark,
    },
    /// Raft RequestVote (pinned members only), with the sender's epoch.
    Vote {
        /// The Raft message.
        rpc: VoteRequest<NodeId>,
        /// Where the sender stands.
        mark: EpochMark,
    },
    /// Raft InstallSnapshot chunk (pinned members only), with the sender's
    /// epoch.
    Snapshot {
        /// The Raft message.
        rpc: InstallSnapshotRequest<PairConfig>,
        /// Where the sender stands.
        mark: EpochMark,
    },
    /// A second appliance asks to join with a pairing code (anyone; the
    /// proof decides).
    Join(JoinHello),
    /// The appliance's own CLI (its own certificate only).
    Admin(AdminRequest),
    /// A standby leaves the pair (`uagate pair leave` there): the leader
    /// drops it from the membership. Only from that member's certificate.
    Leave {
        /// The leaving member's node id.
        node_id: NodeId,
    },
    /// A member tells the leader how it is known now, at every start: its
    /// console URL and OPC UA application URI, which change when its
    /// console port, public host name or application URI changed since it
    /// joined. The leader updates the member's entry in the membership (the
    /// others' banners link to that console; ServerUriArray lists that
    /// URI). Only from that member's certificate.
    Announce {
        /// The member's node id.
        node_id: NodeId,
        /// Its console URL.
        console: String,
        /// Its OPC UA application URI.
        application_uri: String,
    },
    /// A member refused a certificate it does not know and listed it as
    /// rejected: the leader lists it too, so that the operator finds it on
    /// the primary's Trust page and approves it there (the approval is
    /// replicated). Only from that member's certificate.
    Rejected {
        /// The member's node id.
        node_id: NodeId,
        /// The certificate, DER.
        der: Vec<u8>,
    },
    /// The leader is going into maintenance and asks the other appliance
    /// to stand for election now ([`crate::node::PairNode::hand_over`]).
    /// Only from the certificate of the member that leads.
    TakeOver {
        /// The leader's node id.
        leader: NodeId,
    },
}

/// The answer to a [`Request`].
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Response {
    /// To [`Request::Append`].
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    /// To [`Request::Vote`].
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    /// To [`Request::Snapshot`].
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    /// To [`Request::Join`].
    Welcome(Result<JoinWelcome, String>),
    /// To [`Request::Admin`].
    Admin(Result<AdminResponse, String>),
    /// To [`Request::Leave`].
    Left(Result<(), String>),
    /// To [`Request::Announce`]: the membership says so now, or why not.
    Announced(Result<(), String>),
    /// To [`Request::Rejected`]: listed, or why not.
    RejectedListed(Result<(), String>),
    /// To [`Request::TakeOver`]: the election started, or why not.
    TakingOver(Result<(), String>),
    /// The request is not allowed from this peer (unknown certificate).
    Refused(String),
    /// A Raft message from an older epoch: another member was promoted.
    /// The sender steps down ([`crate::node::PairNode`]).
    Stale(EpochMark),
}

/// Where a member stands in the pair's history of forced promotions: its
/// replication epoch, and `since`, the index of the last entry of the
/// previous epoch the promoted appliance had (0 in the first epoch). A
/// member that learns of a higher epoch steps down and keeps its entries
/// after `since` in its diverged list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EpochMark {
    /// The replication epoch.
    pub epoch: i64,
    /// The last index of the previous epoch that this epoch continues.
    pub since: u64,
}

/// A joining appliance's first message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinHello {
    /// Its Raft node id.
    pub node_id: NodeId,
    /// Where its pair listener is reachable (`host:port`).
    pub addr: String,
    /// Its OPC UA application URI.
    #[serde(default)]
    pub application_uri: String,
    /// It is a witness (votes, serves nothing, never leads).
    #[serde(default)]
    pub witness: bool,
    /// Its console URL (empty for a witness).
    #[serde(default)]
    pub console: String,
    /// [`crate::pairing::join_proof`] over the fingerprints it saw.
    pub proof: Vec<u8>,
}

/// The inviting appliance's answer to a valid [`JoinHello`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinWelcome {
    /// Its Raft node id.
    pub node_id: NodeId,
    /// [`crate::pairing::welcome_proof`] over the fingerprints it saw.
    pub proof: Vec<u8>,
    /// The pair's epoch mark: the joiner adopts it, so the leader's
    /// messages are not taken for a later epoch.
    #[serde(default)]
    pub mark: EpochMark,
}

/// What the appliance's own CLI asks its running pair node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdminRequest {
    /// `uagate pair invite`.
    Invite,
    /// `uagate pair join HOST:PORT CODE`.
    Join {
        /// The inviting appliance's pair listener.
        addr: String,
        /// The code it printed.
        code: String,
    },
    /// `uagate pair status`.
    Status,
    /// `uagate pair leave`.
    Leave,
    /// `uagate pair promote --force`: this standby becomes the leader
    /// without the primary, in a new epoch.
    Promote {
        /// The operator confirmed (`--force`).
        force: bool,
    },
    /// `uagate pair diverged --clear`: the operator reviewed the first
    /// `count` changes of the diverged list; they leave it.
    ClearDiverged {
        /// How many, from the start of the list (the ones shown).
        count: usize,
    },
    /// A replicated change made by a CLI command (`user add`, `trust add`,
    /// `config import`, …) while the gateway runs: it goes through the
    /// pair's log like every other writer's.
    Propose(Proposal<Change>),
}

/// The answer to an [`AdminRequest`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdminResponse {
    /// A new pairing code and this appliance's fingerprint.
    Invite {
        /// The code, grouped for reading.
        code: String,
        /// SHA-256 fingerprint of the pair certificate.
        fingerprint: String,
    },
    /// Joined; the inviting appliance's node id.
    Joined {
        /// Its node id.
        leader: NodeId,
        /// SHA-256 fingerprint of its pair certificate as the joiner saw
        /// it (empty from an older version).
        #[serde(default)]
        fingerprint: String,
    },
    /// The node's state.
    Status(crate::node::PairStatus),
    /// What a proposed change did.
    Proposed(crate::ApplyResponse),
    /// This appliance left the pair (on the leader: the other member was
    /// dropped).
    Left,
    /// This appliance left the pair, but the leader was not told: it still
    /// lists this appliance until `uagate pair leave` runs there.
    LeftUntold {
        /// The leader's pair address, when one was known.
        primary: Option<String>,
        /// Why it was not told.
        reason: String,
    },
    /// This appliance leads now, in `epoch`.
    Promoted {
        /// The new epoch.
        epoch: i64,
    },
    /// Changes removed from the diverged list.
    DivergedCleared {
        /// How many.
        count: usize,
    },
}

/// A framed pair connection over any stream (a TLS stream in practice).
pub struct Conn<S> {
    framed: Framed<S, LengthDelimitedCodec>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    /// Frames `stream`.
    pub fn new(stream: S) -> Conn<S> {
        let codec = LengthDelimitedCodec::builder()
            .max_frame_length(MAX_FRAME)
            .new_codec();
        Conn {
            framed: Framed::new(stream, codec),
        }
    }

    /// Sends one message.
    pub async fn send<T: Serialize>(&mut self, message: &T) -> Result<(), PairError> {
        let body = serde_json::to_vec(message)?;
        if body.len() > MAX_FRAME {
            return Err(PairError::TooLarge(body.len()));
        }
        self.framed
            .send(tokio_util::bytes::Bytes::from(body))
            .await?;
        Ok(())
    }

    /// Receives one message; `None` when the peer closed the connection.
    pub async fn recv<T: for<'de> Deserialize<'de>>(&mut self) -> Result<Option<T>, PairError> {
        match self.framed.next().await {
            None => Ok(None),
            Some(frame) => Ok(Some(serde_json::from_slice(&frame?)?)),
        }
    }
}
