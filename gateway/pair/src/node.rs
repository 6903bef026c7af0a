//! The pair node: this appliance's Raft member, its pair listener and the
//! pairing flow.
//!
//! [`PairNode::start`] opens the Raft log and the state machine (the
//! store), starts openraft and serves the pair listener. A standalone
//! appliance is a one-member cluster: its writes ([`PairNode::write`]) are
//! committed at once. `uagate pair invite` asks the running node (over its
//! own listener, with the appliance's own certificate) for a one-time code;
//! `uagate pair join` on the second appliance makes its node prove the code
//! to the first, pin the first's certificate, drop its own log and take the
//! first's state from a snapshot as a learner (the pair without witness:
//! the primary is the only voter, the standby a learner).
//!
//! Who may ask what on the listener (by the TLS peer's certificate
//! fingerprint): Raft messages only from a member of the membership (or the
//! appliance this one joined); pairing from anyone, decided by the code's
//! proof; administration only with this appliance's own certificate.
//! Everything else is refused and logged.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{
    ClientWriteError, InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{Config, Raft};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::RwLock;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_util::sync::CancellationToken;
use uagate_store::{Change, Proposal, Store, StoreError};

use crate::error::PairError;
use crate::join_failure::{JoinCause, JoinFailure};
use crate::pairing::{self, PairingCode, INVITE_TTL, MAX_FAILED_ATTEMPTS};
use crate::quiet::LogThrottle;
use crate::tls::{peer_fingerprint, peer_public_key, Identity};
use crate::wire::{
    AdminRequest, AdminResponse, Conn, EpochMark, JoinHello, JoinWelcome, Request, Response,
};
use crate::Fence;
use crate::{ApplyResponse, LogStore, NodeId, PairConfig, PeerNode, Signed, StateMachine};

/// File of the Raft log in the pair directory.
pub const RAFT_DB: &str = "raft.db";
/// Directory of the current snapshot in the pair directory.
pub const SNAPSHOT_DIR: &str = "snapshots";
/// File holding this node's id and the certificates pinned at pairing.
pub const NODE_FILE: &str = "node.json";

/// How long a pair connection may take to connect and finish its TLS
/// handshake, and then to send its first request.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest snapshot a member takes, in bytes: far above what the
/// configuration store holds, and a bound on what a member's chunks can
/// make this appliance allocate.
const MAX_SNAPSHOT_BYTES: u64 = 1 << 30;

/// Most pair connections served at once. Members keep a few each; anyone
/// can finish a TLS handshake (joiners are strangers), so the listener
/// must not let strangers hold descriptors and memory without bound.
const MAX_CONNECTIONS: usize = 64;

/// A leader whose voters acknowledged nothing for this long has lost its
/// quorum (heartbeats go every 250 ms).
const QUORUM_LOST_AFTER: Duration = Duration::from_secs(3);

/// How long a write waits for the quorum's acknowledgement; then it is
/// answered as not acknowledged (it may still be committed later, or
/// dropped by a new leader).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// A member is reachable while a Raft message went to or came from it
/// this recently (the leader's heartbeats go every 250 ms).
pub const REACHABLE_WITHIN: Duration = Duration::from_secs(3);

/// How long a write on the leader waits for every other member to have it
/// before answering `replicated: false` (the change is committed either
/// way; the other member gets it when it is reachable again).
pub const REPLICATED_WAIT: Duration = Duration::from_secs(1);

/// Log positions remembered with the time they were proposed (for the lag
/// in seconds).
const MAX_APPENDED_TIMES: usize = 4096;

/// How long a pairing exchange or an administrative request may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// How often a member that started with another console URL or
/// application URI than its membership entry tells the leader, until the
/// entry is current ([`PairNode::spawn_announce`]).
const ANNOUNCE_RETRY: Duration = Duration::from_secs(2);

/// After a member refused a Raft message (it left the pair, stepped
/// down, or stopped on an integrity fault), the next message to it waits
/// this long, doubling with every further refusal up to
/// [`REFUSED_RETRY_MAX`]: a member that keeps refusing is not called in a
/// loop.
const REFUSED_RETRY_FIRST: Duration = Duration::from_millis(250);

/// The longest wait between two messages to a member that keeps refusing.
const REFUSED_RETRY_MAX: Duration = Duration::from_secs(30);

/// At most this many certificates are remembered for throttling the log
/// lines of refused Raft messages (strangers cannot grow it without bound).
const MAX_REFUSED_LOGGED: usize = 64;

/// How long going into maintenance waits for the other appliance to take
/// the configuration leadership ([`PairNode::hand_over`]); it usually
/// takes one election round trip.
pub const HANDOVER_TIMEOUT: Duration = Duration::from_secs(5);

/// How long after a hand-over's bound the maintenance flag stays held for
/// the gateway to record its new state.
const HANDOVER_GRACE: Duration = Duration::from_secs(5);

/// What [`PairNode::hand_over`] did before this appliance went into
/// maintenance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handover {
    /// This appliance did not lead (a standby or a witness): nothing to
    /// hand over.
    NotLeading,
    /// Not paired: there is nobody to hand over to.
    Standalone,
    /// Pair without witness: the primary is the only voter and keeps the
    /// configuration leadership (the standby cannot be elected).
    NoOtherVoter,
    /// The other appliance (its pair address) leads now.
    HandedTo(String),
    /// The other appliance (its pair address) did not lead within the
    /// bound; it is elected when it can (this one no longer stands).
    TimedOut(String),
}

impl Handover {
    /// A sentence for the operator (console, log), `None` when there was
    /// nothing to hand over.
    pub fn note(&self) -> Option<String> {
        match self {
            Handover::NotLeading | Handover::Standalone => None,
            Handover::NoOtherVoter => Some(
                "The configuration leadership stays on this appliance: without a witness the \
                 standby cannot take it (make changes here or promote the standby)."
                    .into(),
            ),
            Handover::HandedTo(addr) => Some(format!(
                "The configuration leadership moved to the other appliance ({addr}) first."
            )),
            Handover::TimedOut(addr) => Some(format!(
                "The other appliance ({addr}) did not take the configuration leadership within \
                 {} s; it takes it as soon as it can.",
                HANDOVER_TIMEOUT.as_secs()
            )),
        }
    }
}

/// What `uagate pair leave` (or the console's Leave) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Departure {
    /// On the leader: these members (their pair addresses) were dropped
    /// from the membership.
    Dropped(Vec<String>),
    /// This appliance left and the leader (its pair address) dropped it.
    Left(String),
    /// This appliance left, but the leader was not told (it did not answer,
    /// or refused): the leader still lists this appliance until `uagate
    /// pair leave` runs there.
    LeftUntold {
        /// The leader's pair address, when one was known.
        primary: Option<String>,
        /// Why it was not told.
        reason: String,
    },
}

impl Departure {
    /// A sentence for the operator (console, CLI).
    pub fn note(&self) -> String {
        match self {
            Departure::Dropped(addrs) => format!(
                "Dropped from the pair: {}. This appliance keeps its configuration.",
                addrs.join(", ")
            ),
            Departure::Left(_) => "Left the pair: this appliance is standalone.".into(),
            Departure::LeftUntold {
                primary: Some(addr),
                reason,
            } => format!(
                "Left the pair, but the primary ({addr}) was not told ({reason}): it still lists \
                 this appliance. Run `uagate pair leave` on the primary to drop it there."
            ),
            Departure::LeftUntold {
                primary: None,
                reason,
            } => format!(
                "Left the pair, but no primary was told ({reason}): run `uagate pair leave` on \
                 the primary to drop this appliance there."
            ),
        }
    }
}

/// This appliance's place in a pair, as `uagate pair status` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PairRole {
    /// Not paired: the only member.
    Standalone,
    /// The configuration leader of a pair.
    Primary,
    /// A member that follows the leader (a learner, or a voter that is not
    /// the leader).
    Standby,
    /// A witness (`uagate witness`): a voter that serves nothing and never
    /// leads; with it the pair elects its leader by itself.
    Witness,
}

impl PairRole {
    /// The word `uagate pair status` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            PairRole::Standalone => "standalone",
            PairRole::Primary => "primary",
            PairRole::Standby => "standby",
            PairRole::Witness => "witness",
        }
    }
}

/// The node's state for `uagate pair status`, REST and the console.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PairStatus {
    /// This node's id.
    pub node_id: NodeId,
    /// Its role.
    pub role: PairRole,
    /// The configuration leader's pair address, when one is known.
    pub leader: Option<String>,
    /// The replication epoch of the store.
    pub epoch: i64,
    /// Index of the last log entry applied to the store.
    pub applied: u64,
    /// SHA-256 fingerprint of this appliance's pair certificate.
    pub fingerprint: String,
    /// The members.
    pub members: Vec<Member>,
    /// An integrity fault that stopped replication on this node (a forged
    /// or altered entry), if any.
    pub integrity_fault: Option<String>,
    /// The node is cut off from a quorum: a leader whose voters stopped
    /// acknowledging (its writes are not acknowledged), or a voter that
    /// knows no leader. Always false for the only voter and for learners.
    #[serde(default)]
    pub quorum_lost: bool,
    /// Changes this appliance had that the leader of a later epoch never
    /// got (it was the primary when the standby was force-promoted): kept
    /// for review, never applied or dropped silently.
    #[serde(default)]
    pub diverged: Vec<Diverged>,
    /// Index of the last entry known committed here.
    #[serde(default)]
    pub committed: u64,
    /// This appliance took a later epoch (another was promoted) but has
    /// not yet dropped its old log: why the last try failed. Raft messages
    /// are refused and the leader's changes do not arrive until it is
    /// done; it is tried again by itself.
    #[serde(default)]
    pub stepping_down: Option<String>,
}

/// One change in the diverged list ([`PairStatus::diverged`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diverged {
    /// The epoch that replaced the one it was made in.
    pub superseded_by: i64,
    /// Its index in this appliance's log of the old epoch.
    pub index: u64,
    /// The change-log kind, e.g. `user.add`.
    pub kind: String,
    /// What it was about (a user, a thumbprint, a setting key); never a
    /// secret.
    pub subject: String,
    /// Who made it.
    pub actor: String,
    /// When (RFC 3339).
    pub at: String,
}

impl PairStatus {
    /// The line scripts rely on: `role=… leader=HOST:PORT epoch=N applied=N`,
    /// then more fields.
    pub fn line(&self) -> String {
        format!(
            "role={} leader={} epoch={} applied={} node={} members={} voters={} integrity={} quorum={} diverged={} committed={} step_down={}",
            self.role.as_str(),
            self.leader.as_deref().unwrap_or("-"),
            self.epoch,
            self.applied,
            self.node_id,
            self.members.len(),
            self.members.iter().filter(|m| m.voter).count(),
            if self.integrity_fault.is_some() {
                "fault"
            } else {
                "ok"
            },
            if self.quorum_lost { "lost" } else { "ok" },
            self.diverged.len(),
            self.committed,
            if self.stepping_down.is_some() {
                "failing"
            } else {
                "ok"
            }
        )
    }
}

/// One member of the pair in [`PairStatus`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Member {
    /// Its node id.
    pub node_id: NodeId,
    /// Its pair address.
    pub addr: String,
    /// Whether it votes.
    pub voter: bool,
    /// Its OPC UA application URI.
    pub application_uri: String,
    /// Whether it is a witness.
    #[serde(default)]
    pub witness: bool,
    /// Its console URL (empty for a witness).
    #[serde(default)]
    pub console: String,
    /// Entries of the leader's log it does not have yet (known on the
    /// leader only; 0 for the leader itself).
    #[serde(default)]
    pub lag_entries: Option<u64>,
    /// How long the oldest change it does not have has been waiting, in
    /// seconds (known on the leader only).
    #[serde(default)]
    pub lag_seconds: Option<f64>,
    /// Whether a Raft message went to or came from it within
    /// [`REACHABLE_WITHIN`]: known on the leader for every member, on a
    /// follower for the leader; `None` for this node and where unknown.
    #[serde(default)]
    pub reachable: Option<bool>,
}

/// What the node keeps in [`NODE_FILE`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct NodeFile {
    /// This node's Raft id (random, made at first start).
    node_id: NodeId,
    /// Certificates accepted for Raft messages besides the members': the
    /// appliance this one joined, until its membership arrives.
    #[serde(default)]
    pinned: BTreeSet<String>,
    /// The epoch this node took part in a promotion of (promoted itself,
    /// or stepped down to): see [`EpochMark`].
    #[serde(default)]
    mark: EpochMark,
    /// Changes kept when it stepped down (see [`PairStatus::diverged`]).
    #[serde(default)]
    diverged: Vec<Diverged>,
    /// Set, in the same write as a new `mark` (step-down, promotion,
    /// join) or a leave, until this node's Raft log has been dropped: the
    /// old log must never run in the new epoch. A node that finds it set
    /// (the drop failed, or the process stopped in between) refuses Raft
    /// messages until the drop is done: the step-down task retries it, and
    /// a start does it before openraft opens the log.
    #[serde(default)]
    reset_owed: bool,
}

impl NodeFile {
    fn load_or_create(path: &Path) -> Result<NodeFile, PairError> {
        match std::fs::read(path) {
            Ok(bytes) => Ok(serde_json::from_slice(&bytes)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let file = NodeFile {
                    // Never 0 (openraft has no such rule, but a zero id
                    // reads like "unset" in logs).
                    node_id: rand::random::<u64>().max(1),
                    ..NodeFile::default()
                };
                file.save(path)?;
                Ok(file)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Writes the file atomically (temp file, fsync, rename).
    fn save(&self, path: &Path) -> Result<(), PairError> {
        use std::io::Write;
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&serde_json::to_vec_pretty(self)?)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        Ok(())
    }
}

/// A pairing code waiting for its joiner.
struct Invite {
    code: PairingCode,
    expires: Instant,
    failures: u32,
}

/// Where the node stores its files and how it is reached.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    /// The pair directory (certificate, Raft log, snapshots, node file).
    pub dir: PathBuf,
    /// The appliance's name (in its pair certificate).
    pub name: String,
    /// The pair listener's address.
    pub listen: SocketAddr,
    /// The address the other appliance reaches this one at (`host:port`);
    /// the listener's own address when `None`.
    pub advertise: Option<String>,
    /// This appliance's OPC UA application URI.
    pub application_uri: String,
    /// The node is a witness (`uagate witness`): it votes, never leads and
    /// serves nothing; it is never a cluster by itself.
    pub witness: bool,
    /// This appliance's console URL (empty for a witness).
    pub console: String,
}

/// Most members of a set: two appliances and one witness.
pub const MAX_APPLIANCES: usize = 2;

/// How long the leader waits for a new member to catch up before it makes
/// the set of two appliances and a witness three voters.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(60);

/// This appliance's Raft member and pair listener.
pub struct PairNode {
    /// This node, for the tasks it starts.
    this: std::sync::Weak<PairNode>,
    id: NodeId,
    witness: bool,
    console: String,
    dir: PathBuf,
    identity: Identity,
    advertise: String,
    application_uri: String,
    store: Store,
    raft: RwLock<Raft<PairConfig>>,
    /// The integrity fault the current state machine found, if any.
    fault: Mutex<crate::Fault>,
    /// Retires the current instance's state machine when the instance is
    /// replaced ([`crate::state_machine::Fence`]).
    fence: Mutex<Fence>,
    file: Mutex<NodeFile>,
    invites: Mutex<Vec<Invite>>,
    cancel: CancellationToken,
    local_addr: SocketAddr,
    /// The appliance is in maintenance: it does not stand for election
    /// (see [`PairNode::set_maintenance`] and [`PairNode::hand_over`]).
    maintenance: std::sync::atomic::AtomicBool,
    /// Until when a hand-over holds the maintenance flag on although the
    /// appliance is not in maintenance yet (the gateway's state follows
    /// once the hand-over is done): [`PairNode::set_maintenance`] does not
    /// clear it meanwhile.
    handing_over: Mutex<Option<Instant>>,
    /// Where a Raft message's answer or request reports a higher epoch:
    /// the step-down task takes it from there.
    stale: tokio::sync::mpsc::UnboundedSender<EpochMark>,
    /// The log index of recent writes with the time they were proposed:
    /// a member's lag in seconds is the age of the oldest it lacks.
    appended: Mutex<std::collections::VecDeque<(u64, Instant)>>,
    /// When a Raft message last went to (answered) or came from each
    /// member: its reachability.
    contact: Contact,
    /// The Raft log (a handle beside openraft's), for the committed index.
    log: Mutex<LogStore>,
    /// Raft messages refused per certificate: a former member that keeps
    /// calling is logged once, then at a slow interval.
    refused_log: Mutex<std::collections::HashMap<String, LogThrottle>>,
    /// A join is under way: the leader's first messages may come before
    /// its certificate is pinned (refused, but not worth a line).
    joining: std::sync::atomic::AtomicBool,
    /// Certificates this appliance refused and has not yet listed on the
    /// leader (oldest first, [`MAX_UNREPORTED`] at most), with how often
    /// the leader refused each; sent by the reporter task.
    unreported: Mutex<std::collections::VecDeque<(Vec<u8>, u32)>>,
    /// Wakes the reporter task when a certificate is added.
    report_wake: Arc<tokio::sync::Notify>,
    /// Why the last try to drop the old log failed; cleared when a drop
    /// succeeds ([`PairStatus::stepping_down`]).
    reset_error: Mutex<Option<String>>,
    /// The pair listener's accept loop; [`PairNode::stop`] waits for it,
    /// so that the address is free when it returns (a restart binds it).
    listening: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// What became of one report of a refused certificate to the leader.
enum Report {
    /// Listed on the leader (or nothing to do: this node leads, or is a
    /// witness).
    Done,
    /// The leader answered and did not list it: why.
    Refused(String),
    /// Not sent now (no leader known, the leader unreachable): why.
    Wait(String),
}

/// Most refused certificates waiting to be listed on the leader; beyond
/// it the oldest is dropped from the queue (it stays on this appliance's
/// own rejected list). A flood of unknown certificates becomes neither a
/// flood of pair connections (one report at a time) nor unbounded memory.
const MAX_UNREPORTED: usize = 64;

/// How often the reporter tries again while certificates wait (the
/// leader unreachable, or not known yet).
const REPORT_RETRY: Duration = Duration::from_secs(2);

/// How many refusals from the leader itself a certificate's report gets
/// before it is dropped from the queue (a connection that fails does not
/// count: that is retried as long as the appliance runs).
const MAX_REPORT_REFUSALS: u32 = 3;

/// The first wait before a failed step-down is tried again; it doubles
/// up to [`STEP_DOWN_RETRY_MAX`].
const STEP_DOWN_RETRY_FIRST: Duration = Duration::from_millis(500);

/// The longest wait between two tries of a failed step-down.
const STEP_DOWN_RETRY_MAX: Duration = Duration::from_secs(10);

/// When a Raft message last went to or came from each member.
type Contact = Arc<Mutex<std::collections::HashMap<NodeId, Instant>>>;

/// The Raft timing of the pair.
fn raft_config() -> Result<Arc<Config>, PairError> {
    let config = Config {
        cluster_name: "uagate".into(),
        heartbeat_interval: 250,
        election_timeout_min: 1_000,
        election_timeout_max: 2_000,
        install_snapshot_timeout: 5_000,
        ..Default::default()
    };
    Ok(Arc::new(
        config
            .validate()
            .map_err(|e| PairError::Raft(e.to_string()))?,
    ))
}

impl PairNode {
    /// Starts the node: its files in `settings.dir`, openraft over the
    /// store, the pair listener. A node that was never paired and has no
    /// membership becomes a one-member cluster. Called once when the
    /// gateway starts (and by tests).
    pub async fn start(settings: NodeSettings, store: Store) -> Result<Arc<PairNode>, PairError> {
        // Its keys, the Raft log and snapshots: the gateway's user only.
        uagate_store::files::private_dir(&settings.dir)?;
        let identity = Identity::load_or_create(&settings.dir, &settings.name)?;
        let mut file = NodeFile::load_or_create(&settings.dir.join(NODE_FILE))?;
        if file.reset_owed {
            // Stopped (or failed) between a new epoch and dropping the old
            // log: drop it now, before openraft could run it.
            remove_log_files(&settings.dir)?;
            store.forget_replica().await?;
            file.reset_owed = false;
            file.save(&settings.dir.join(NODE_FILE))?;
            tracing::warn!("pair: dropped the Raft log a step-down, promotion, join or leave had not finished dropping");
        }
        let listener = TcpListener::bind(settings.listen).await?;
        let local_addr = listener.local_addr()?;
        let advertise = settings
            .advertise
            .clone()
            .unwrap_or_else(|| local_addr.to_string());
        let mark = effective_mark(&file, store.epoch().await?);
        let (stale, mut stale_rx) = tokio::sync::mpsc::unbounded_channel();
        let contact = Contact::default();
        let (raft, fault, log, fence) = open_raft(
            &settings.dir,
            file.node_id,
            &store,
            &identity,
            RaftLinks {
                witness: settings.witness,
                source: source_of(local_addr),
                mark,
                stale: stale.clone(),
                contact: contact.clone(),
            },
        )
        .await?;
        // A witness is never a cluster by itself: it waits to be joined.
        let initialized = raft
            .is_initialized()
            .await
            .map_err(|e| PairError::Raft(e.to_string()))?;
        if !settings.witness && !initialized && file.pinned.is_empty() {
            let me = PeerNode {
                addr: advertise.clone(),
                fingerprint: identity.fingerprint().to_string(),
                public_key: identity.public_key(),
                application_uri: settings.application_uri.clone(),
                witness: false,
                console: settings.console.clone(),
            };
            raft.initialize(BTreeMap::from([(file.node_id, me)]))
                .await
                .map_err(|e| PairError::Raft(e.to_string()))?;
        }
        let node = Arc::new_cyclic(|this| PairNode {
            this: this.clone(),
            witness: settings.witness,
            console: settings.console.clone(),
            id: file.node_id,
            dir: settings.dir.clone(),
            identity: identity.clone(),
            advertise,
            application_uri: settings.application_uri.clone(),
            store,
            raft: RwLock::new(raft),
            fault: Mutex::new(fault),
            fence: Mutex::new(fence),
            file: Mutex::new(file),
            invites: Mutex::new(Vec::new()),
            cancel: CancellationToken::new(),
            local_addr,
            maintenance: std::sync::atomic::AtomicBool::new(false),
            handing_over: Mutex::new(None),
            stale,
            appended: Mutex::new(std::collections::VecDeque::new()),
            contact,
            log: Mutex::new(log),
            refused_log: Mutex::new(std::collections::HashMap::new()),
            joining: std::sync::atomic::AtomicBool::new(false),
            unreported: Mutex::new(std::collections::VecDeque::new()),
            report_wake: Arc::new(tokio::sync::Notify::new()),
            reset_error: Mutex::new(None),
            listening: Mutex::new(None),
        });
        // A higher epoch seen on the wire: step down (one at a time).
        let weak = Arc::downgrade(&node);
        tokio::spawn(async move {
            while let Some(mark) = stale_rx.recv().await {
                // Retried until done: a node that took the new epoch but
                // kept its old log refuses Raft messages meanwhile.
                let mut wait = STEP_DOWN_RETRY_FIRST;
                loop {
                    let Some(node) = weak.upgrade() else { return };
                    if node.cancel.is_cancelled() {
                        return;
                    }
                    match node.step_down(mark).await {
                        Ok(()) => break,
                        Err(e) => tracing::error!(
                            error = %e,
                            epoch = mark.epoch,
                            retry_in = ?wait,
                            "pair: stepping down failed; Raft messages are refused until it is done"
                        ),
                    }
                    drop(node);
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(STEP_DOWN_RETRY_MAX);
                }
            }
        });
        // Every replicated change of the store goes through the log now.
        node.store
            .set_replicator(Some(Arc::new(LogReplicator(Arc::downgrade(&node)))));
        let acceptor = TlsAcceptor::from(identity.server_config()?);
        let listening = tokio::spawn(serve(
            Arc::downgrade(&node),
            listener,
            acceptor,
            node.cancel.clone(),
        ));
        *node.listening.lock() = Some(listening);
        tracing::info!(node = node.id, addr = %local_addr, fingerprint = %identity.fingerprint(), "pair node started");
        node.spawn_announce();
        node.spawn_reporter();
        Ok(node)
    }

    /// Stops the listener (its address is free on return) and the Raft
    /// node. Called when the gateway stops, and by tests that restart it.
    pub async fn stop(&self) {
        self.store.set_replicator(None);
        self.cancel.cancel();
        let listening = self.listening.lock().take();
        if let Some(task) = listening {
            let _ = task.await;
        }
        let _ = self.raft.read().await.shutdown().await;
        // The store may be closed next: the state machine's worker writes
        // nothing more.
        let fence = self.fence.lock().clone();
        fence.retire().await;
    }

    /// Sets the appliance's maintenance state (called by the gateway when a
    /// requested ServerState takes it out of maintenance, and by tests).
    /// In maintenance the node stops standing for election and, when it
    /// leads, stops its heartbeats, so with a witness the other appliance
    /// is elected within an election timeout even if nobody asked it
    /// ([`PairNode::hand_over`] does). Back to Running it stands again
    /// (the leadership stays where it went). Without a witness the primary
    /// is the only voter and keeps the leadership.
    pub async fn set_maintenance(&self, on: bool) {
        *self.handing_over.lock() = None;
        self.apply_maintenance(on).await;
    }

    /// Follows the gateway's maintenance state, every second (`uagate run`
    /// after a restart in maintenance, an operator's ServiceLevel
    /// override of 0). While a hand-over holds the flag (the gateway's
    /// state follows once the hand-over is done) it does not clear it.
    pub async fn follow_maintenance(&self, on: bool) {
        {
            let mut held = self.handing_over.lock();
            match *held {
                Some(until) if !on && Instant::now() < until => return,
                _ => *held = None,
            }
        }
        self.apply_maintenance(on).await;
    }

    /// Stops (or resumes) standing for election and the heartbeats.
    async fn apply_maintenance(&self, on: bool) {
        use std::sync::atomic::Ordering;
        if self.witness || self.maintenance.swap(on, Ordering::SeqCst) == on {
            return;
        }
        let raft = self.raft.read().await.clone();
        raft.runtime_config().elect(!on);
        raft.runtime_config().heartbeat(!on);
        if on {
            let m = raft.metrics().borrow().clone();
            let voters = m.membership_config.membership().voter_ids().count();
            if m.current_leader == Some(self.id) && voters > 1 {
                tracing::info!(
                    "maintenance: handing the configuration leadership to the other appliance"
                );
            }
        } else {
            tracing::info!("maintenance over: standing for election again");
        }
    }

    /// Called before this appliance goes into maintenance (console or
    /// RequestServerStateChange), and awaited: stops standing for
    /// election ([`PairNode::set_maintenance`]) and, when this appliance
    /// leads a set whose other appliance votes (pair + witness), asks that
    /// appliance to stand for election now and waits, at most `bound`,
    /// until it leads. So the configuration leadership has left this
    /// appliance before its ServiceLevel drops to 0 and clients leave it.
    /// Pair only, the primary is the only voter and keeps the leadership.
    pub async fn hand_over(&self, bound: Duration) -> Handover {
        // The gateway's state says maintenance only once this returns:
        // until then (and a grace for writing it) its once-a-second
        // follower must not take the flag back.
        *self.handing_over.lock() = Some(Instant::now() + bound + HANDOVER_GRACE);
        self.apply_maintenance(true).await;
        if self.witness || self.raft.read().await.metrics().borrow().current_leader != Some(self.id)
        {
            return Handover::NotLeading;
        }
        let members = self.members().await;
        if members.len() <= 1 {
            return Handover::Standalone;
        }
        let Some((other, node, _)) = members
            .into_iter()
            .find(|(id, n, voter)| *id != self.id && *voter && !n.witness)
        else {
            return Handover::NoOtherVoter;
        };
        let t0 = Instant::now();
        if let Err(e) = self.ask_to_take_over(&node).await {
            // Its election timer still runs: without heartbeats from here
            // it stands within an election timeout or two.
            tracing::warn!(peer = %node.addr, error = %e, "maintenance: the other appliance did not start an election at once");
        }
        loop {
            let leader = self.raft.read().await.metrics().borrow().current_leader;
            if leader == Some(other) {
                tracing::info!(peer = %node.addr, took_ms = t0.elapsed().as_millis() as u64, "maintenance: the configuration leadership moved to the other appliance");
                return Handover::HandedTo(node.addr);
            }
            if t0.elapsed() >= bound {
                tracing::warn!(peer = %node.addr, ?bound, "maintenance: the other appliance did not take the leadership in time; it takes it when it can");
                return Handover::TimedOut(node.addr);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// This node's epoch mark now (see [`effective_mark`]): what an
    /// incoming Raft message is checked against, and what a Raft instance
    /// opened now sends.
    async fn mark(&self) -> Result<EpochMark, PairError> {
        let epoch = self.store.epoch().await?;
        Ok(effective_mark(&self.file.lock(), epoch))
    }

    /// `uagate pair promote --force` on a standby whose primary is lost:
    /// this appliance becomes the leader alone, in a new epoch (the
    /// epoch is bumped through its new log), and takes the others back as
    /// learners. When the old primary returns it sees the higher epoch,
    /// steps down, keeps what it changed meanwhile in its diverged list
    /// and follows. Refused without `force`, on the leader, on a witness
    /// and on an appliance that is not paired.
    pub async fn promote(&self, force: bool) -> Result<EpochMark, PairError> {
        if !force {
            return Err(PairError::Refused(
                "promotion makes this appliance the leader without the primary; changes the \
                 primary made since this one last heard of it will be set aside there as \
                 diverged. Confirm with --force"
                    .into(),
            ));
        }
        if self.witness {
            return Err(PairError::Refused("a witness never leads".into()));
        }
        let raft = self.raft.read().await.clone();
        let m = raft.metrics().borrow().clone();
        if m.current_leader == Some(self.id) {
            return Err(PairError::Refused(
                "this appliance is already the leader".into(),
            ));
        }
        let members = self.members().await;
        if members.len() <= 1 {
            return Err(PairError::Refused("this appliance is not paired".into()));
        }
        let since = m.last_applied.map_or(0, |l| l.index);
        let old = self.mark().await?;
        let mark = EpochMark {
            epoch: old.epoch + 1,
            since,
        };
        let others: Vec<(NodeId, PeerNode)> = members
            .into_iter()
            .filter(|(id, _, _)| *id != self.id)
            .map(|(id, n, _)| (id, n))
            .collect();
        {
            let mut file = self.file.lock();
            file.pinned
                .extend(others.iter().map(|(_, n)| n.fingerprint.clone()));
            file.mark = mark;
            file.reset_owed = true;
            file.save(&self.dir.join(NODE_FILE))?;
        }
        self.reset_log().await?;
        let raft = self.raft.read().await.clone();
        raft.initialize(BTreeMap::from([(self.id, self.me())]))
            .await
            .map_err(|e| PairError::Raft(e.to_string()))?;
        let mut metrics = raft.metrics();
        tokio::time::timeout(
            ADMIN_TIMEOUT,
            metrics.wait_for(|m| m.current_leader == Some(self.id)),
        )
        .await
        .map_err(|_| PairError::Raft("this appliance did not become the leader".into()))?
        .map_err(|e| PairError::Raft(e.to_string()))?;
        self.write(Proposal::now("pair", Change::BumpEpoch)).await?;
        snapshot_and_purge(&raft).await?;
        for (id, node) in others {
            raft.add_learner(id, node, false)
                .await
                .map_err(|e| PairError::Raft(e.to_string()))?;
        }
        self.spawn_settle_voters();
        tracing::warn!(
            epoch = mark.epoch,
            since,
            "pair: this appliance was promoted to leader (forced)"
        );
        self.mark().await
    }

    /// Steps down after another member was promoted (`mark`, a higher
    /// epoch than this node's): keeps the changes of this node's log after
    /// `mark.since` (the new leader never got them) in the diverged list,
    /// pins the members it knew (the new leader among them), drops its log
    /// and waits for the new leader's state. Called by the step-down task.
    async fn step_down(&self, mark: EpochMark) -> Result<(), PairError> {
        let mine = self.mark().await?;
        if mark.epoch <= mine.epoch {
            // Already in that epoch; finish dropping the old log if an
            // earlier try failed after taking the epoch.
            if self.reset_owed() {
                self.reset_log().await?;
                tracing::warn!(
                    epoch = mine.epoch,
                    "pair: the old Raft log is dropped now; this appliance follows the leader"
                );
            }
            return Ok(());
        }
        let diverged = self.diverged_since(mark).await?;
        let members = self.members().await;
        {
            let mut file = self.file.lock();
            file.pinned.extend(
                members
                    .iter()
                    .filter(|(id, _, _)| *id != self.id)
                    .map(|(_, n, _)| n.fingerprint.clone()),
            );
            file.mark = mark;
            file.diverged.extend(diverged.iter().cloned());
            file.reset_owed = true;
            file.save(&self.dir.join(NODE_FILE))?;
        }
        self.reset_log().await?;
        tracing::warn!(
            epoch = mark.epoch,
            diverged = diverged.len(),
            "pair: another appliance was promoted; this one stepped down and follows it \
             (changes made here since are kept in the diverged list for review)"
        );
        Ok(())
    }

    /// Removes the first `count` changes of the diverged list (the ones the
    /// operator was shown and reviewed; a change set aside since stays).
    /// Returns how many were removed. Called by the Pair page's
    /// *Reviewed* button and `uagate pair diverged --clear`.
    pub fn clear_diverged(&self, count: usize) -> Result<usize, PairError> {
        let mut file = self.file.lock();
        let n = count.min(file.diverged.len());
        if n == 0 {
            return Ok(0);
        }
        let mut kept = file.clone();
        kept.diverged.drain(..n);
        kept.save(&self.dir.join(NODE_FILE))?;
        *file = kept;
        tracing::warn!(
            removed = n,
            left = file.diverged.len(),
            "pair: diverged changes reviewed and removed from the list"
        );
        Ok(n)
    }

    /// The proposals in this node's log after `mark.since`.
    async fn diverged_since(&self, mark: EpochMark) -> Result<Vec<Diverged>, PairError> {
        use openraft::storage::RaftLogReader;
        let mut log = LogStore::open(&self.dir.join(RAFT_DB)).await?;
        let entries = log
            .try_get_log_entries(mark.since.saturating_add(1)..)
            .await
            .map_err(|e| PairError::Raft(e.to_string()))?;
        Ok(entries
            .into_iter()
            .filter_map(|e| match e.payload {
                openraft::EntryPayload::Normal(signed) => {
                    let (kind, subject) = signed.proposal.change.summary();
                    Some(Diverged {
                        superseded_by: mark.epoch,
                        index: e.log_id.index,
                        kind: kind.to_string(),
                        subject,
                        actor: signed.proposal.actor,
                        at: signed.proposal.at,
                    })
                }
                _ => None,
            })
            .filter(|d| d.kind != "epoch.bump")
            .collect())
    }

    /// This node as a member of a membership it starts (standalone again,
    /// or promoted).
    fn me(&self) -> PeerNode {
        PeerNode {
            addr: self.advertise.clone(),
            fingerprint: self.fingerprint().to_string(),
            public_key: self.identity.public_key(),
            application_uri: self.application_uri.clone(),
            witness: self.witness,
            console: self.console.clone(),
        }
    }

    /// The address this node connects from (see [`source_of`]).
    fn source(&self) -> Option<std::net::IpAddr> {
        source_of(self.local_addr)
    }

    /// The address the other appliance of a pair reaches this one's pair
    /// listener at (`host:port`): the public host with the pair port when
    /// one is configured, else the listener's own address (a wildcard such
    /// as `0.0.0.0:4850` when it listens on every address). Shown with a
    /// pairing code.
    pub fn advertised(&self) -> &str {
        &self.advertise
    }

    /// openraft's view of this node now (vote, log and applied positions,
    /// replication progress on the leader): for diagnostics and tests.
    pub async fn raft_metrics(&self) -> openraft::RaftMetrics<NodeId, PeerNode> {
        self.raft.read().await.metrics().borrow().clone()
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Where the pair listener listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// SHA-256 fingerprint of this appliance's pair certificate.
    pub fn fingerprint(&self) -> &str {
        self.identity.fingerprint()
    }

    /// Proposes a replicated change: committed through Raft, then applied
    /// by the state machine on every member. Refused with the leader's
    /// address on a node that is not the leader.
    pub async fn write(&self, proposal: Proposal<Change>) -> Result<ApplyResponse, PairError> {
        Ok(self.write_reported(proposal).await?.0)
    }

    /// [`PairNode::write`], and whether every other member had the change
    /// when answering (`None` when not paired): the leader waits up to
    /// [`REPLICATED_WAIT`] for them. With a witness a quorum already has
    /// it; the answer says whether the other appliance does too.
    pub async fn write_reported(
        &self,
        proposal: Proposal<Change>,
    ) -> Result<(ApplyResponse, Option<bool>), PairError> {
        let started = Instant::now();
        let raft = self.raft.read().await.clone();
        let epoch = self.store.epoch().await?;
        let signature = self
            .identity
            .sign(&Signed::signed_bytes(&proposal, self.id, epoch))?;
        let signed = Signed {
            proposal,
            proposer: self.id,
            epoch,
            signature,
        };
        let Ok(written) = tokio::time::timeout(WRITE_TIMEOUT, raft.client_write(signed)).await
        else {
            return Err(PairError::Store(StoreError::NotAcknowledged(format!(
                "the change was not acknowledged by the pair within {WRITE_TIMEOUT:?} \
                 (this appliance cannot reach the other members); it is not in force now, \
                 and it may still come into force if this appliance reaches them again \
                 while it leads: check the audit log before making it again"
            ))));
        };
        let written = match written {
            Ok(r) => r,
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                return Err(PairError::Store(StoreError::NotLeader {
                    leader: f.leader_node.as_ref().map(|n| n.addr.clone()),
                    console: f
                        .leader_node
                        .as_ref()
                        .map(|n| n.console.clone())
                        .filter(|c| !c.is_empty()),
                }))
            }
            Err(e) => return Err(PairError::Raft(e.to_string())),
        };
        let index = written.log_id.index;
        {
            let mut appended = self.appended.lock();
            appended.push_back((index, started));
            while appended.len() > MAX_APPENDED_TIMES {
                appended.pop_front();
            }
        }
        let others: Vec<NodeId> = self
            .members()
            .await
            .into_iter()
            .map(|(id, _, _)| id)
            .filter(|id| *id != self.id)
            .collect();
        if others.is_empty() {
            return Ok((written.data, None));
        }
        let mut m = raft.metrics();
        let has_it = |m: &openraft::RaftMetrics<NodeId, PeerNode>| {
            others.iter().all(|id| {
                m.replication
                    .as_ref()
                    .and_then(|r| r.get(id).cloned().flatten())
                    .is_some_and(|l| l.index >= index)
            })
        };
        let replicated = tokio::time::timeout(REPLICATED_WAIT, m.wait_for(has_it))
            .await
            .is_ok_and(|r| r.is_ok());
        Ok((written.data, Some(replicated)))
    }

    /// A new one-time pairing code (valid [`INVITE_TTL`], single use) and
    /// this appliance's fingerprint. Only the leader invites.
    pub async fn invite(&self) -> Result<(PairingCode, String), PairError> {
        let raft = self.raft.read().await.clone();
        let m = raft.metrics().borrow().clone();
        if m.current_leader != Some(self.id) {
            return Err(PairError::Refused(
                "only the configuration leader can invite another appliance".into(),
            ));
        }
        let code = PairingCode::generate();
        let mut invites = self.invites.lock();
        let now = Instant::now();
        invites.retain(|i| i.expires > now);
        invites.push(Invite {
            code: code.clone(),
            expires: now + INVITE_TTL,
            failures: 0,
        });
        tracing::info!("pairing code issued (valid 10 minutes, single use)");
        Ok((code, self.fingerprint().to_string()))
    }

    /// Joins the appliance at `addr` with the `code` it printed: proves the
    /// code, checks its answer, pins its certificate, drops this node's own
    /// log and waits to be sent the leader's state. A wrong code, a used or
    /// expired one, a peer that cannot prove the code, or a node already
    /// paired is refused and changes nothing here.
    /// Returns the inviting appliance's node id and the SHA-256 fingerprint
    /// of its pair certificate as this appliance saw it (to compare with
    /// what `uagate pair invite` printed there).
    pub async fn join(&self, addr: &str, code: &str) -> Result<(NodeId, String), PairError> {
        use std::sync::atomic::Ordering;
        self.joining.store(true, Ordering::SeqCst);
        let joined = self.join_with_code(addr, code).await;
        self.joining.store(false, Ordering::SeqCst);
        joined
    }

    /// [`PairNode::join`] itself. Every failure is a
    /// [`PairError::Join`], mapped by [`JoinFailure::of`].
    async fn join_with_code(&self, addr: &str, code: &str) -> Result<(NodeId, String), PairError> {
        let failed = |cause: JoinCause<'_>| PairError::Join(JoinFailure::of(addr, cause));
        let code = PairingCode::parse(code).map_err(|e| failed(JoinCause::Code(&e.to_string())))?;
        if self.members().await.len() > 1 {
            return Err(failed(JoinCause::AlreadyPaired(
                "this appliance is already paired; `uagate pair leave` first",
            )));
        }
        let (mut conn, leader_fp) = match dial(&self.identity, addr, self.source()).await {
            Ok(c) => c,
            Err(DialError::Connect { error, message }) => {
                return Err(failed(JoinCause::Connect {
                    error: &error,
                    message: &message,
                }))
            }
            Err(DialError::Handshake(message)) => {
                return Err(failed(JoinCause::Handshake(&message)))
            }
            Err(DialError::Local(e)) => return Err(failed(JoinCause::Local(&e))),
        };
        let hello = JoinHello {
            node_id: self.id,
            addr: self.advertise.clone(),
            application_uri: self.application_uri.clone(),
            witness: self.witness,
            console: self.console.clone(),
            proof: pairing::join_proof(&code, &leader_fp, self.fingerprint()),
        };
        conn.send(&Request::Join(hello))
            .await
            .map_err(|e| failed(JoinCause::Exchange(Some(&e))))?;
        let welcome = match tokio::time::timeout(ADMIN_TIMEOUT, conn.recv::<Response>()).await {
            Err(_) => {
                return Err(failed(JoinCause::Timeout(&format!(
                    "{addr} did not answer within {} s",
                    ADMIN_TIMEOUT.as_secs()
                ))))
            }
            Ok(r) => r.map_err(|e| failed(JoinCause::Exchange(Some(&e))))?,
        };
        let welcome = match welcome {
            Some(Response::Welcome(Ok(w))) => w,
            Some(Response::Welcome(Err(why))) | Some(Response::Refused(why)) => {
                return Err(failed(JoinCause::Refused(&why)))
            }
            None => return Err(failed(JoinCause::Exchange(None))),
            Some(other) => {
                return Err(failed(JoinCause::OutOfTurn(&format!(
                    "{addr} answered out of turn: {other:?}"
                ))))
            }
        };
        pairing::verify_welcome(&code, &leader_fp, self.fingerprint(), &welcome.proof).map_err(
            |e| {
                tracing::warn!(%addr, "pairing answer does not prove the code");
                failed(JoinCause::Proof(&e.to_string()))
            },
        )?;
        // From here on this appliance follows the other one.
        let followed = async {
            {
                let mut file = self.file.lock();
                file.pinned.insert(leader_fp.clone());
                file.mark = welcome.mark;
                file.reset_owed = true;
                file.save(&self.dir.join(NODE_FILE))?;
            }
            self.reset_log().await
        };
        followed
            .await
            .map_err(|e: PairError| failed(JoinCause::Local(&e)))?;
        tracing::info!(leader = welcome.node_id, %addr, fingerprint = %leader_fp, "joined the pair; taking the leader's state");
        Ok((welcome.node_id, leader_fp))
    }

    /// Drops this node's Raft log, snapshots and applied position and
    /// restarts openraft without a membership: the leader's snapshot then
    /// replaces the replicated state (node-local rows stay). Called after
    /// the caller recorded the drop as owed (`NodeFile::reset_owed`);
    /// nothing when it is not owed (any more).
    async fn reset_log(&self) -> Result<(), PairError> {
        let result = self.drop_log().await;
        *self.reset_error.lock() = result.as_ref().err().map(|e| e.to_string());
        result
    }

    /// The work of [`PairNode::reset_log`].
    async fn drop_log(&self) -> Result<(), PairError> {
        let mut raft = self.raft.write().await;
        // Every caller records the drop as owed first; a second caller
        // that waited for the first one finds it done.
        if !self.reset_owed() {
            return Ok(());
        }
        raft.shutdown()
            .await
            .map_err(|e| PairError::Raft(e.to_string()))?;
        // The old instance's state machine may still be applying what it
        // had queued: nothing of it may land after this point.
        let fence = self.fence.lock().clone();
        fence.retire().await;
        remove_log_files(&self.dir)?;
        self.store.forget_replica().await?;
        let (new, fault, log, fence) = open_raft(
            &self.dir,
            self.id,
            &self.store,
            &self.identity,
            RaftLinks {
                witness: self.witness,
                source: self.source(),
                mark: self.mark().await?,
                stale: self.stale.clone(),
                contact: self.contact.clone(),
            },
        )
        .await?;
        *self.log.lock() = log;
        if self.maintenance.load(std::sync::atomic::Ordering::SeqCst) {
            new.runtime_config().elect(false);
            new.runtime_config().heartbeat(false);
        }
        *raft = new;
        *self.fault.lock() = fault;
        *self.fence.lock() = fence;
        let mut file = self.file.lock();
        if file.reset_owed {
            file.reset_owed = false;
            file.save(&self.dir.join(NODE_FILE))?;
        }
        Ok(())
    }

    /// Whether this node took a new epoch (or left) and has not yet
    /// dropped its old Raft log (see `NodeFile::reset_owed`).
    fn reset_owed(&self) -> bool {
        self.file.lock().reset_owed
    }

    /// The members: id, address, fingerprint, voter.
    async fn members(&self) -> Vec<(NodeId, PeerNode, bool)> {
        let raft = self.raft.read().await.clone();
        let m = raft.metrics().borrow().membership_config.clone();
        // While the voters change (a joint configuration), a member counts
        // as a voter only when every configuration of the change has it:
        // then its vote is what an election needs.
        let configs = m.membership().get_joint_config();
        let voters: BTreeSet<NodeId> = m
            .membership()
            .voter_ids()
            .filter(|id| configs.iter().all(|c| c.contains(id)))
            .collect();
        m.membership()
            .nodes()
            .map(|(id, n)| (*id, n.clone(), voters.contains(id)))
            .collect()
    }

    /// The node's state now.
    pub async fn status(&self) -> Result<PairStatus, PairError> {
        let raft = self.raft.read().await.clone();
        let m = raft.metrics().borrow().clone();
        let members = self.members().await;
        // A drop of its old log failed and is owed: it leads nothing,
        // whatever the old instance's last metrics say. (A drop under way
        // takes milliseconds and is not reported.)
        let stepping_down = if self.reset_owed() {
            let epoch = self.file.lock().mark.epoch;
            self.reset_error
                .lock()
                .as_ref()
                .map(|why| format!("to epoch {epoch}: {why}"))
        } else {
            None
        };
        let role = if self.witness {
            PairRole::Witness
        } else if stepping_down.is_some() {
            PairRole::Standby
        } else if members.len() <= 1 && m.current_leader == Some(self.id) {
            PairRole::Standalone
        } else if m.current_leader == Some(self.id) {
            PairRole::Primary
        } else if members.is_empty() && self.file.lock().pinned.is_empty() {
            PairRole::Standalone
        } else {
            PairRole::Standby
        };
        let leader = m
            .current_leader
            .filter(|_| stepping_down.is_none())
            .and_then(|l| {
                members
                    .iter()
                    .find(|(id, _, _)| *id == l)
                    .map(|(_, n, _)| n.addr.clone())
            });
        let voters = members.iter().filter(|(_, _, v)| *v).count();
        let voter = members.iter().any(|(id, _, v)| *id == self.id && *v);
        let quorum_lost = voters > 1
            && voter
            && if m.current_leader == Some(self.id) {
                m.millis_since_quorum_ack
                    .is_none_or(|ms| ms > QUORUM_LOST_AFTER.as_millis() as u64)
            } else {
                m.current_leader.is_none()
            };
        let diverged = self.file.lock().diverged.clone();
        let log = self.log.lock().clone();
        let committed = log.committed_index().await?.unwrap_or(0);
        let leads = m.current_leader == Some(self.id);
        let contact = self.contact.lock().clone();
        let reachable = |id: NodeId| -> Option<bool> {
            if id == self.id {
                return None;
            }
            let recent = contact.get(&id).map(|at| at.elapsed() < REACHABLE_WITHIN);
            if leads || m.current_leader == Some(id) {
                Some(recent.unwrap_or(false))
            } else {
                recent.filter(|r| *r)
            }
        };
        // On the leader: how far behind each member is.
        let mut lag: BTreeMap<NodeId, (u64, f64)> = BTreeMap::new();
        if m.current_leader == Some(self.id) {
            let last = m.last_log_index.unwrap_or(0);
            let appended = self.appended.lock();
            for (id, _, _) in &members {
                let matched = if *id == self.id {
                    Some(last)
                } else {
                    m.replication
                        .as_ref()
                        .and_then(|r| r.get(id).cloned())
                        .map(|l| l.map_or(0, |l| l.index))
                };
                let Some(matched) = matched else { continue };
                let seconds = appended
                    .iter()
                    .find(|(i, _)| *i > matched)
                    .map_or(0.0, |(_, at)| at.elapsed().as_secs_f64());
                lag.insert(*id, (last.saturating_sub(matched), seconds));
            }
        }
        Ok(PairStatus {
            committed,
            diverged,
            quorum_lost,
            node_id: self.id,
            role,
            leader,
            epoch: self.store.epoch().await?,
            applied: m.last_applied.map_or(0, |l| l.index),
            fingerprint: self.fingerprint().to_string(),
            members: members
                .into_iter()
                .map(|(node_id, n, voter)| Member {
                    node_id,
                    addr: n.addr,
                    voter,
                    application_uri: n.application_uri,
                    witness: n.witness,
                    console: n.console,
                    lag_entries: lag.get(&node_id).map(|l| l.0),
                    lag_seconds: lag.get(&node_id).map(|l| l.1),
                    reachable: reachable(node_id),
                })
                .collect(),
            integrity_fault: self.integrity_fault(),
            stepping_down,
        })
    }

    /// Whether `fp` may send Raft messages (a member's certificate, or the
    /// one pinned when this appliance joined), with the member's id when it
    /// is one: `None` when refused, `Some(None)` for a pinned certificate
    /// not (yet) in the membership.
    async fn peer(&self, fp: &str) -> Option<Option<NodeId>> {
        let member = self
            .members()
            .await
            .into_iter()
            .find(|(id, n, _)| *id != self.id && n.fingerprint == fp)
            .map(|(id, _, _)| id);
        (member.is_some() || self.file.lock().pinned.contains(fp)).then_some(member)
    }

    /// Answers one request from `peer`.
    async fn handle(&self, peer: &PeerCert, request: Request) -> Response {
        let fp = peer.fingerprint.as_str();
        let raft_mark = match &request {
            Request::Append { mark, .. }
            | Request::Vote { mark, .. }
            | Request::Snapshot { mark, .. } => Some(*mark),
            _ => None,
        };
        if let Some(theirs) = raft_mark {
            let Some(member) = self.peer(fp).await else {
                self.log_refused(fp);
                return Response::Refused("this certificate is not a member of the pair".into());
            };
            if let Some(id) = member {
                // A member speaks for itself only: the leader of an Append
                // or a snapshot, or the candidate of a vote, is the member
                // whose certificate carries the request (a witness or a
                // standby cannot pass entries off as the leader's).
                let speaks_for = match &request {
                    Request::Append { rpc, .. } => Some(rpc.vote.leader_id.node_id),
                    Request::Vote { rpc, .. } => Some(rpc.vote.leader_id.node_id),
                    Request::Snapshot { rpc, .. } => Some(rpc.vote.leader_id.node_id),
                    _ => None,
                };
                if speaks_for.is_some_and(|n| n != id) {
                    self.log_refused(fp);
                    return Response::Refused(
                        "a member may send Raft messages for itself only".into(),
                    );
                }
                self.contact.lock().insert(id, Instant::now());
            }
            // Fail closed: after an integrity fault this node takes nothing
            // more until an operator has looked (leave and join again).
            if let Some(why) = self.integrity_fault() {
                return Response::Refused(format!(
                    "replication stopped here on an integrity fault: {why}"
                ));
            }
            let mine = match self.mark().await {
                Ok(m) => m,
                Err(e) => return Response::Refused(e.to_string()),
            };
            if theirs.epoch < mine.epoch {
                return Response::Stale(mine);
            }
            if theirs.epoch > mine.epoch {
                let _ = self.stale.send(theirs);
                return Response::Refused(format!(
                    "stepping down: epoch {} replaces {}",
                    theirs.epoch, mine.epoch
                ));
            }
            if self.reset_owed() {
                return Response::Refused(format!(
                    "stepping down to epoch {}: the old Raft log is not dropped yet",
                    mine.epoch
                ));
            }
        }
        // Taken after the epoch check: a step-down in progress replaces the
        // instance, and a message of the new epoch goes to the new one.
        let raft = self.raft.read().await.clone();
        match request {
            Request::Append { rpc, .. } => Response::Append(raft.append_entries(rpc).await),
            Request::Vote { rpc, .. } => Response::Vote(raft.vote(rpc).await),
            // A chunk beyond any snapshot the store makes: openraft would
            // grow its buffer to the offset (2^40 aborts the process).
            Request::Snapshot { rpc, .. }
                if rpc.offset.saturating_add(rpc.data.len() as u64) > MAX_SNAPSHOT_BYTES =>
            {
                Response::Refused(format!(
                    "a snapshot chunk ending at byte {} is beyond the {MAX_SNAPSHOT_BYTES} a snapshot may take",
                    rpc.offset.saturating_add(rpc.data.len() as u64)
                ))
            }
            Request::Snapshot { rpc, .. } => Response::Snapshot(raft.install_snapshot(rpc).await),
            Request::Join(hello) => match &peer.public_key {
                Some(key) => Response::Welcome(self.welcome(peer, key, hello, &raft).await),
                None => {
                    Response::Welcome(Err("the pair certificate must carry a P-256 key".into()))
                }
            },
            Request::Admin(_) if fp != self.fingerprint() => {
                tracing::warn!(fingerprint = %fp, "pair: administrative request from another certificate refused");
                Response::Refused("administration is only for this appliance's own CLI".into())
            }
            Request::Admin(req) => {
                Response::Admin(self.admin(req).await.map_err(|e| e.to_string()))
            }
            Request::Leave { node_id } => {
                Response::Left(self.drop_member(fp, node_id, &raft).await)
            }
            Request::TakeOver { leader } => {
                Response::TakingOver(self.take_over(fp, leader, &raft).await)
            }
            Request::Announce {
                node_id,
                console,
                application_uri,
            } => Response::Announced(
                self.update_member(fp, node_id, &console, &application_uri, &raft)
                    .await,
            ),
            Request::Rejected { node_id, der } => {
                Response::RejectedListed(self.list_rejected(fp, node_id, &der, &raft).await)
            }
        }
    }

    /// Logs a Raft message refused from the certificate `fp`: the first,
    /// then one line per [`crate::quiet::REPEAT_LOG_INTERVAL`] with the
    /// count (a former member that still takes this appliance for a member
    /// keeps calling until `uagate pair leave` runs there).
    fn log_refused(&self, fp: &str) {
        if self.joining.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let mut logged = self.refused_log.lock();
        if logged.len() >= MAX_REFUSED_LOGGED && !logged.contains_key(fp) {
            logged.clear();
        }
        if let Some(not_logged) = logged
            .entry(fp.to_string())
            .or_default()
            .hit(Instant::now())
        {
            tracing::warn!(fingerprint = %fp, not_logged,
                "pair: Raft messages from a certificate that is not a member refused (a former \
                 member that was not told it left? run `uagate pair leave` there)");
        }
    }

    /// Why replication stopped here on an integrity fault, if it did.
    fn integrity_fault(&self) -> Option<String> {
        self.fault.lock().lock().ok().and_then(|f| f.clone())
    }

    /// The other appliance's side of [`PairNode::hand_over`]: when the
    /// request comes from the certificate of the member that leads, this
    /// appliance stands for election at once (the leader, going into
    /// maintenance, votes for it). Refused on a witness, in maintenance and
    /// after an integrity fault.
    async fn take_over(
        &self,
        fp: &str,
        leader: NodeId,
        raft: &Raft<PairConfig>,
    ) -> Result<(), String> {
        use std::sync::atomic::Ordering;
        if self.peer(fp).await != Some(Some(leader))
            || raft.metrics().borrow().current_leader != Some(leader)
        {
            tracing::warn!(fingerprint = %fp, leader, "pair: take-over request not from the leader; refused");
            return Err("only the leader hands the leadership over".into());
        }
        if self.witness {
            return Err("a witness never leads".into());
        }
        if self.maintenance.load(Ordering::SeqCst) {
            return Err("this appliance is in maintenance too".into());
        }
        if let Some(why) = self.integrity_fault() {
            return Err(format!(
                "replication stopped here on an integrity fault: {why}"
            ));
        }
        tracing::info!(
            leader,
            "the leader goes into maintenance: standing for election"
        );
        raft.trigger().elect().await.map_err(|e| e.to_string())
    }

    /// Asks the appliance `node` to stand for election now.
    async fn ask_to_take_over(&self, node: &PeerNode) -> Result<(), PairError> {
        let request = Request::TakeOver { leader: self.id };
        match self.ask_member(node, &request, CONNECT_TIMEOUT).await? {
            Response::TakingOver(Ok(())) => Ok(()),
            Response::TakingOver(Err(why)) => Err(PairError::Refused(why)),
            other => Err(PairError::Refused(format!("unexpected answer {other:?}"))),
        }
    }

    /// Sends `request` to the member `node` (refused unless it presents
    /// its pinned certificate) and waits at most `wait` for the answer.
    async fn ask_member(
        &self,
        node: &PeerNode,
        request: &Request,
        wait: Duration,
    ) -> Result<Response, PairError> {
        let (mut conn, fp) = connect(&self.identity, &node.addr, self.source()).await?;
        if fp != node.fingerprint {
            return Err(PairError::Refused(format!(
                "{} presented a certificate that is not the pinned one",
                node.addr
            )));
        }
        conn.send(request).await?;
        match tokio::time::timeout(wait, conn.recv::<Response>()).await {
            Ok(Ok(Some(answer))) => Ok(answer),
            Ok(Ok(None)) => Err(PairError::Refused("closed without an answer".into())),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(PairError::Refused("no answer in time".into())),
        }
    }

    /// The inviting side of a join: checks the joiner's proof against the
    /// open invites, pins its certificate by adding it as a learner (after
    /// a snapshot, so it catches up from the snapshot) and answers with
    /// this side's proof.
    async fn welcome(
        &self,
        peer: &PeerCert,
        public_key: &str,
        mut hello: JoinHello,
        raft: &Raft<PairConfig>,
    ) -> Result<JoinWelcome, String> {
        let fp = peer.fingerprint.as_str();
        // A joiner listening on every address (no public_host) names
        // itself 0.0.0.0: it is known by the address its connection came
        // from instead.
        if let Some(remote) = peer.remote {
            hello.addr = with_host(&hello.addr, remote.ip());
            hello.console = with_host(&hello.console, remote.ip());
        }
        let code = {
            let mut invites = self.invites.lock();
            let now = Instant::now();
            invites.retain(|i| i.expires > now && i.failures < MAX_FAILED_ATTEMPTS);
            let found = invites.iter().position(|i| {
                pairing::verify_join(&i.code, self.fingerprint(), fp, &hello.proof).is_ok()
            });
            match found {
                Some(k) => invites.remove(k).code,
                None => {
                    for i in invites.iter_mut() {
                        i.failures += 1;
                    }
                    tracing::warn!(fingerprint = %fp, addr = %hello.addr, "pairing refused: no open code matches");
                    return Err("the pairing code is wrong, used or expired".into());
                }
            }
        };
        let members = self.members().await;
        if members
            .iter()
            .any(|(id, n, _)| *id == hello.node_id || n.fingerprint == fp)
        {
            tracing::warn!(joiner = hello.node_id, addr = %hello.addr, fingerprint = %fp, "pairing refused: already a member");
            return Err("that appliance is already a member of this pair".into());
        }
        let appliances = members.iter().filter(|(_, n, _)| !n.witness).count();
        let witnesses = members.len() - appliances;
        if hello.witness && witnesses > 0 {
            tracing::warn!(joiner = hello.node_id, addr = %hello.addr, fingerprint = %fp, "pairing refused: the pair already has a witness");
            return Err(format!(
                "this pair already has a witness (a set has at most {MAX_APPLIANCES} appliances \
                 and one witness)"
            ));
        }
        if !hello.witness && appliances >= MAX_APPLIANCES {
            tracing::warn!(joiner = hello.node_id, addr = %hello.addr, fingerprint = %fp, "pairing refused: the pair is full");
            return Err(format!(
                "the pair is full: it has {appliances} appliances already (a set has at most \
                 {MAX_APPLIANCES} appliances and one witness)"
            ));
        }
        snapshot_and_purge(raft).await.map_err(|e| e.to_string())?;
        let node = PeerNode {
            addr: hello.addr.clone(),
            fingerprint: fp.to_string(),
            public_key: public_key.to_string(),
            application_uri: hello.application_uri.clone(),
            witness: hello.witness,
            console: hello.console.clone(),
        };
        raft.add_learner(hello.node_id, node, false)
            .await
            .map_err(|e| e.to_string())?;
        if let Some(local) = peer.local {
            self.name_own_host(local.ip(), raft).await;
        }
        if hello.witness {
            tracing::info!(joiner = hello.node_id, addr = %hello.addr, fingerprint = %fp, "witness joined the pair");
        } else {
            tracing::info!(joiner = hello.node_id, addr = %hello.addr, fingerprint = %fp, "appliance joined the pair as standby");
        }
        self.spawn_settle_voters();
        Ok(JoinWelcome {
            node_id: self.id,
            proof: pairing::welcome_proof(&code, self.fingerprint(), fp),
            mark: self.mark().await.map_err(|e| e.to_string())?,
        })
    }

    /// Leaves the pair (`uagate pair leave`, the console's Leave).
    ///
    /// On the leader: drops the other appliance (a witness stays, so a new
    /// standby makes three voters again); when the witness is the only
    /// other member, drops the witness. The leader then votes alone.
    ///
    /// On a standby or a witness: asks the leader to drop it (or, with no
    /// leader known, the other appliance), forgets the pinned certificate,
    /// drops its log and becomes a one-member cluster again (a witness
    /// waits to be joined), keeping the configuration it had. It leaves
    /// even when the leader was not told, and says so
    /// ([`Departure::LeftUntold`]). Refused on an appliance that is not
    /// paired.
    pub async fn leave(&self) -> Result<Departure, PairError> {
        let members = self.members().await;
        let pinned = !self.file.lock().pinned.is_empty();
        if members.len() <= 1 && !pinned {
            return Err(PairError::Refused("this appliance is not paired".into()));
        }
        let raft = self.raft.read().await.clone();
        let leader = raft.metrics().borrow().current_leader;
        if leader == Some(self.id) {
            let others: Vec<&(NodeId, PeerNode, bool)> =
                members.iter().filter(|(id, _, _)| *id != self.id).collect();
            let appliances: Vec<&&(NodeId, PeerNode, bool)> =
                others.iter().filter(|(_, n, _)| !n.witness).collect();
            let dropped: BTreeMap<NodeId, String> = if appliances.is_empty() {
                others
                    .iter()
                    .map(|(id, n, _)| (*id, n.addr.clone()))
                    .collect()
            } else {
                appliances
                    .iter()
                    .map(|(id, n, _)| (*id, n.addr.clone()))
                    .collect()
            };
            self.remove_members(&raft, &dropped.keys().copied().collect())
                .await?;
            self.spawn_settle_voters();
            let addrs: Vec<String> = dropped.into_values().collect();
            tracing::info!(dropped = ?addrs, "pair leave on the leader: members dropped");
            return Ok(Departure::Dropped(addrs));
        }
        let told = self.tell_leaving(&members, leader).await;
        {
            let mut file = self.file.lock();
            file.pinned.clear();
            file.reset_owed = true;
            file.save(&self.dir.join(NODE_FILE))?;
        }
        self.reset_log().await?;
        if self.witness {
            tracing::info!("left the pair: the witness waits to be joined again");
        } else {
            let raft = self.raft.read().await.clone();
            raft.initialize(BTreeMap::from([(self.id, self.me())]))
                .await
                .map_err(|e| PairError::Raft(e.to_string()))?;
            tracing::info!("left the pair: standalone again, with the configuration it had");
        }
        Ok(match told {
            Ok(primary) => Departure::Left(primary),
            Err((primary, reason)) => Departure::LeftUntold { primary, reason },
        })
    }

    /// A leaving member tells the leader (or, when it knows none, each
    /// other appliance in turn) to drop it: the address of the one that
    /// did, or the leader's address (when known) and why none did.
    async fn tell_leaving(
        &self,
        members: &[(NodeId, PeerNode, bool)],
        leader: Option<NodeId>,
    ) -> Result<String, (Option<String>, String)> {
        let asked: Vec<&PeerNode> = match leader {
            Some(l) => members
                .iter()
                .filter(|(id, _, _)| *id == l)
                .map(|(_, n, _)| n)
                .collect(),
            None => members
                .iter()
                .filter(|(id, n, _)| *id != self.id && !n.witness)
                .map(|(_, n, _)| n)
                .collect(),
        };
        let Some(first) = asked.first() else {
            tracing::warn!("pair leave: no primary is known to tell; leaving anyway");
            return Err((None, "no primary is known".into()));
        };
        let mut why = String::new();
        for node in &asked {
            match self.ask_to_drop(node).await {
                Ok(()) => {
                    tracing::info!(primary = %node.addr, "the primary dropped this appliance");
                    return Ok(node.addr.clone());
                }
                Err(e) => {
                    tracing::warn!(primary = %node.addr, error = %e, "the primary was not told; leaving anyway");
                    why = e.to_string();
                }
            }
        }
        Err((Some(first.addr.clone()), why))
    }

    /// Asks the primary `node` to drop this appliance from the membership.
    async fn ask_to_drop(&self, node: &PeerNode) -> Result<(), PairError> {
        let request = Request::Leave { node_id: self.id };
        match self.ask_member(node, &request, ADMIN_TIMEOUT).await? {
            Response::Left(Ok(())) => Ok(()),
            Response::Left(Err(why)) => Err(PairError::Refused(why)),
            other => Err(PairError::Refused(format!("unexpected answer {other:?}"))),
        }
    }

    /// Takes the members `ids` out of the membership, on the leader. A
    /// voter cannot leave the membership directly (openraft keeps a node
    /// that votes): the voters are first replaced by those that stay (the
    /// joint change needs a quorum of the old and of the new voters), then
    /// the nodes are removed. Each step waits at most [`WRITE_TIMEOUT`].
    async fn remove_members(
        &self,
        raft: &Raft<PairConfig>,
        ids: &BTreeSet<NodeId>,
    ) -> Result<(), PairError> {
        let membership = raft.metrics().borrow().membership_config.clone();
        let voters: BTreeSet<NodeId> = membership.membership().voter_ids().collect();
        let fingerprints: Vec<String> = membership
            .membership()
            .nodes()
            .filter(|(id, _)| ids.contains(id))
            .map(|(_, n)| n.fingerprint.clone())
            .collect();
        let deadline = Instant::now() + WRITE_TIMEOUT;
        if voters.iter().any(|id| ids.contains(id)) {
            let staying: BTreeSet<NodeId> = voters.difference(ids).copied().collect();
            change_members(
                raft,
                openraft::ChangeMembers::ReplaceAllVoters(staying),
                true,
                deadline,
            )
            .await
            .map_err(|e| PairError::Raft(format!("changing the voters: {e}")))?;
        }
        let present: BTreeSet<NodeId> = raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .nodes()
            .map(|(id, _)| *id)
            .filter(|id| ids.contains(id))
            .collect();
        if !present.is_empty() {
            change_members(
                raft,
                openraft::ChangeMembers::RemoveNodes(present),
                false,
                deadline,
            )
            .await
            .map_err(|e| PairError::Raft(format!("removing the members: {e}")))?;
        }
        // A member dropped is no longer accepted for Raft messages, also
        // when this node had pinned it (it joined that member once).
        let mut file = self.file.lock();
        if fingerprints.iter().any(|fp| file.pinned.contains(fp)) {
            file.pinned.retain(|fp| !fingerprints.contains(fp));
            file.save(&self.dir.join(NODE_FILE))?;
        }
        Ok(())
    }

    /// The leader's side of a member's `leave`: drops member `node_id` when
    /// the request comes from that member's own certificate. A node that
    /// is no member (any more) is answered done: nothing is left to drop
    /// (the leader's own `leave` dropped it before).
    async fn drop_member(
        &self,
        fp: &str,
        node_id: NodeId,
        raft: &Raft<PairConfig>,
    ) -> Result<(), String> {
        let members = self.members().await;
        let own = node_id == self.id || fp == self.fingerprint();
        let known = match members.iter().find(|(id, _, _)| *id == node_id) {
            Some((_, n, _)) if n.fingerprint == fp && !own => true,
            None if !own && !members.iter().any(|(_, n, _)| n.fingerprint == fp) => false,
            _ => {
                tracing::warn!(fingerprint = %fp, node_id, "pair: leave request not from that member's certificate; refused");
                return Err("only a member may take itself out of the pair".into());
            }
        };
        let leader = raft.metrics().borrow().current_leader;
        if leader != Some(self.id) {
            let at = members
                .iter()
                .find(|(id, _, _)| Some(*id) == leader)
                .map_or("unknown".to_string(), |(_, n, _)| n.addr.clone());
            return Err(format!("not the configuration leader (the leader is {at})"));
        }
        if !known {
            tracing::info!(fingerprint = %fp, node_id, "pair: a node that is not a member asked to be dropped; nothing to drop");
            return Ok(());
        }
        self.remove_members(raft, &BTreeSet::from([node_id]))
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!(node_id, "a member left the pair");
        self.spawn_settle_voters();
        Ok(())
    }

    /// When this node's own entry in the membership names no host (its
    /// listener is on every address and no public_host is set: 0.0.0.0),
    /// names it by `ip`, the address a joiner reached it at, so that the
    /// other members can reach it too (they would dial 0.0.0.0, which is
    /// themselves). Called by the leader after it welcomed a joiner.
    async fn name_own_host(&self, ip: std::net::IpAddr, raft: &Raft<PairConfig>) {
        let members = self.members().await;
        let Some((_, me, _)) = members.iter().find(|(id, _, _)| *id == self.id) else {
            return;
        };
        if !names_no_host(&me.addr) {
            return;
        }
        let mut named = me.clone();
        named.addr = with_host(&me.addr, ip);
        named.console = with_host(&me.console, ip);
        let change = openraft::ChangeMembers::SetNodes(BTreeMap::from([(self.id, named.clone())]));
        match change_members(raft, change, false, Instant::now() + WRITE_TIMEOUT).await {
            Ok(_) => {
                tracing::info!(addr = %named.addr, console = %named.console, "pair: this appliance is known by the address the other one reached it at")
            }
            Err(e) => {
                tracing::warn!(error = %e, "pair: could not name this appliance's address in the membership")
            }
        }
    }

    /// The leader's side of [`Request::Announce`] (and of its own
    /// announcement): sets member `node_id`'s console URL and application
    /// URI in the membership when the request comes from that member's own
    /// certificate. Its pair address, fingerprint and key stay as pinned.
    async fn update_member(
        &self,
        fp: &str,
        node_id: NodeId,
        console: &str,
        application_uri: &str,
        raft: &Raft<PairConfig>,
    ) -> Result<(), String> {
        let members = self.members().await;
        let Some((_, node, _)) = members
            .iter()
            .find(|(id, n, _)| *id == node_id && n.fingerprint == fp)
        else {
            tracing::warn!(fingerprint = %fp, node_id, "pair: announcement not from that member's certificate; refused");
            return Err("only a member may say how it is known".into());
        };
        if raft.metrics().borrow().current_leader != Some(self.id) {
            return Err("not the leader".into());
        }
        // An appliance listening on every address announces a console URL
        // naming 0.0.0.0: the host already known for it stays.
        let console = match known_host(&node.addr) {
            Some(ip) => with_host(console, ip),
            None => console.to_string(),
        };
        let console = console.as_str();
        if node.console == console && node.application_uri == application_uri {
            return Ok(());
        }
        let mut updated = node.clone();
        updated.console = console.to_string();
        updated.application_uri = application_uri.to_string();
        // The address stays the same, so the membership's quorum does not
        // change: only the entry's details do.
        raft.change_membership(
            openraft::ChangeMembers::SetNodes(BTreeMap::from([(node_id, updated)])),
            false,
        )
        .await
        .map_err(|e| e.to_string())?;
        tracing::info!(
            node_id,
            console,
            application_uri,
            "pair: a member's console URL or application URI changed"
        );
        Ok(())
    }

    /// The leader's side of [`Request::Rejected`]: lists a certificate
    /// member `node_id` refused as rejected here too, when the request comes
    /// from that member's own certificate.
    async fn list_rejected(
        &self,
        fp: &str,
        node_id: NodeId,
        der: &[u8],
        raft: &Raft<PairConfig>,
    ) -> Result<(), String> {
        let members = self.members().await;
        let Some((_, member, _)) = members
            .iter()
            .find(|(id, n, _)| *id == node_id && n.fingerprint == fp)
        else {
            tracing::warn!(fingerprint = %fp, node_id, "pair: rejected certificate not reported by that member's certificate; refused");
            return Err("only a member may report the certificates it refused".into());
        };
        if raft.metrics().borrow().current_leader != Some(self.id) {
            return Err("not the leader".into());
        }
        self.store
            .record_rejected_by(der, &member.addr)
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!(
            node_id,
            "pair: a certificate the other appliance refused is listed as rejected here"
        );
        Ok(())
    }

    /// Reports a certificate this appliance listed as rejected to the
    /// leader ([`Request::Rejected`]). Called by the reporter task for
    /// each waiting certificate, oldest first.
    async fn report_rejected(&self, der: &[u8]) -> Report {
        if self.witness {
            return Report::Done;
        }
        let raft = self.raft.read().await.clone();
        let leader = raft.metrics().borrow().current_leader;
        let Some(leader) = leader else {
            return Report::Wait("no leader known".into());
        };
        if leader == self.id {
            // Already on the leader's list: this one.
            return Report::Done;
        }
        let members = self.members().await;
        let Some((_, node, _)) = members.iter().find(|(id, _, _)| *id == leader) else {
            return Report::Wait("the leader is not a known member yet".into());
        };
        let request = Request::Rejected {
            node_id: self.id,
            der: der.to_vec(),
        };
        match self.ask_member(node, &request, ADMIN_TIMEOUT).await {
            Ok(Response::RejectedListed(Ok(()))) => Report::Done,
            Ok(Response::RejectedListed(Err(why))) => Report::Refused(why),
            Ok(other) => Report::Refused(format!("unexpected answer {other:?}")),
            Err(e) => Report::Wait(e.to_string()),
        }
    }

    /// Fills the reporter's empty queue from the store: the certificates
    /// this appliance refused that still wait to be listed on the leader
    /// (from before a restart, or dropped from a full queue). Called by
    /// the reporter task before each round.
    async fn refill_unreported(&self) {
        if !self.unreported.lock().is_empty() {
            return;
        }
        let waiting = match self.store.rejected_unreported(MAX_UNREPORTED as i64).await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "pair: the refused certificates waiting to be reported cannot be read");
                return;
            }
        };
        let mut queue = self.unreported.lock();
        for der in waiting {
            if queue.len() < MAX_UNREPORTED && !queue.iter().any(|(d, _)| *d == der) {
                queue.push_back((der, 0));
            }
        }
    }

    /// Queues a certificate this appliance refused (first sighting) for
    /// listing on the leader. Called through
    /// [`uagate_store::Replicator::report_rejected`].
    fn queue_rejected(&self, der: Vec<u8>) {
        {
            let mut queue = self.unreported.lock();
            if queue.iter().any(|(d, _)| *d == der) {
                return;
            }
            if queue.len() >= MAX_UNREPORTED {
                queue.pop_front();
                tracing::debug!("pair: the oldest refused certificate waiting for the leader was dropped from the queue");
            }
            queue.push_back((der, 0));
        }
        self.report_wake.notify_one();
    }

    /// Lists the certificates this appliance refused on the leader, one
    /// at a time, oldest first; what cannot be sent now (no leader, the
    /// leader unreachable) is tried again every [`REPORT_RETRY`] while the
    /// node runs. Called once by [`PairNode::start`].
    fn spawn_reporter(&self) {
        if self.witness {
            return;
        }
        let this = self.this.clone();
        let cancel = self.cancel.clone();
        let wake = self.report_wake.clone();
        tokio::spawn(async move {
            // Whether the "waiting" line was logged for this outage.
            let mut told = false;
            loop {
                let Some(node) = this.upgrade() else { return };
                node.refill_unreported().await;
                loop {
                    let Some(der) = node.unreported.lock().front().map(|(d, _)| d.clone()) else {
                        told = false;
                        break;
                    };
                    let outcome = node.report_rejected(&der).await;
                    // Done with it for good: listed on the leader, or
                    // refused by it too often.
                    let settled = {
                        let mut queue = node.unreported.lock();
                        match outcome {
                            Report::Done => {
                                queue.retain(|(d, _)| *d != der);
                                told = false;
                                true
                            }
                            Report::Refused(why) => {
                                tracing::warn!(reason = %why, "pair: the leader did not list a certificate this appliance refused");
                                let entry = queue.iter_mut().find(|(d, _)| *d == der);
                                match entry {
                                    Some(entry) if entry.1 + 1 >= MAX_REPORT_REFUSALS => {
                                        queue.retain(|(d, _)| *d != der);
                                        true
                                    }
                                    Some(entry) => {
                                        entry.1 += 1;
                                        false
                                    }
                                    None => false,
                                }
                            }
                            Report::Wait(why) => {
                                // Said once per outage, not every retry.
                                if !told {
                                    tracing::info!(reason = %why, waiting = queue.len(), "pair: refused certificates wait to be listed on the leader");
                                    told = true;
                                }
                                false
                            }
                        }
                    };
                    if settled {
                        if let Err(e) = node.store.rejected_reported(&der).await {
                            tracing::warn!(error = %e, "pair: a reported certificate is still marked as waiting");
                        }
                        continue;
                    }
                    break;
                }
                drop(node);
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = wake.notified() => {}
                    _ = tokio::time::sleep(REPORT_RETRY) => {}
                }
            }
        });
    }

    /// Keeps this appliance's entry in the membership current after a
    /// start: until the entry has this start's console URL and application
    /// URI (or the node is gone), tells the leader every
    /// [`ANNOUNCE_RETRY`]. Called once by [`PairNode::start`].
    fn spawn_announce(&self) {
        if self.witness {
            return;
        }
        let this = self.this.clone();
        tokio::spawn(async move {
            loop {
                let Some(node) = this.upgrade() else { return };
                if node.cancel.is_cancelled() {
                    return;
                }
                match node.announce().await {
                    Ok(true) => return,
                    Ok(false) => {}
                    Err(e) => tracing::debug!(error = %e, "pair: announcement not taken yet"),
                }
                drop(node);
                tokio::time::sleep(ANNOUNCE_RETRY).await;
            }
        });
    }

    /// One step of [`PairNode::spawn_announce`]: true when the membership
    /// has this appliance's entry as it is now.
    async fn announce(&self) -> Result<bool, PairError> {
        let members = self.members().await;
        let Some((_, mine, _)) = members.iter().find(|(id, _, _)| *id == self.id) else {
            // Not a member (yet): a join gives the leader both values.
            return Ok(false);
        };
        if mine.console == self.console && mine.application_uri == self.application_uri {
            return Ok(true);
        }
        let raft = self.raft.read().await.clone();
        let Some(leader) = raft.metrics().borrow().current_leader else {
            return Ok(false);
        };
        if leader == self.id {
            self.update_member(
                self.fingerprint(),
                self.id,
                &self.console,
                &self.application_uri,
                &raft,
            )
            .await
            .map_err(PairError::Refused)?;
            return Ok(true);
        }
        let Some((_, node, _)) = members.iter().find(|(id, _, _)| *id == leader) else {
            return Ok(false);
        };
        let request = Request::Announce {
            node_id: self.id,
            console: self.console.clone(),
            application_uri: self.application_uri.clone(),
        };
        match self.ask_member(node, &request, ADMIN_TIMEOUT).await? {
            Response::Announced(Ok(())) => Ok(true),
            Response::Announced(Err(why)) => Err(PairError::Refused(why)),
            other => Err(PairError::Refused(format!("unexpected answer {other:?}"))),
        }
    }

    /// Who votes, decided by the leader after every membership change: two
    /// appliances and a witness are three voters (a write is acknowledged
    /// by a quorum, the leader is elected); otherwise the leader is the
    /// only voter and the others are learners (the pair without witness).
    /// A member is made a voter once it has caught up (within
    /// [`CATCH_UP_TIMEOUT`]).
    fn spawn_settle_voters(&self) {
        let this = self.this.clone();
        tokio::spawn(async move {
            let deadline = Instant::now() + CATCH_UP_TIMEOUT;
            let mut failing = LogThrottle::default();
            while Instant::now() < deadline {
                let Some(node) = this.upgrade() else { return };
                match node.settle_voters().await {
                    Ok(true) => return,
                    Ok(false) => {}
                    Err(e) => {
                        if let Some(not_logged) = failing.hit(Instant::now()) {
                            tracing::warn!(error = %e, not_logged, "pair: voters not settled yet");
                        }
                    }
                }
                drop(node);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            tracing::warn!(
                "pair: a member did not catch up within {CATCH_UP_TIMEOUT:?}; voters unchanged"
            );
        });
    }

    /// One step of [`PairNode::spawn_settle_voters`]: true when done (or
    /// not the leader any more).
    async fn settle_voters(&self) -> Result<bool, PairError> {
        let raft = self.raft.read().await.clone();
        let m = raft.metrics().borrow().clone();
        if m.current_leader != Some(self.id) {
            return Ok(true);
        }
        let members = self.members().await;
        let appliances = members.iter().filter(|(_, n, _)| !n.witness).count();
        let with_witness = appliances == MAX_APPLIANCES && members.len() == MAX_APPLIANCES + 1;
        let wanted: BTreeSet<NodeId> = if with_witness {
            members.iter().map(|(id, _, _)| *id).collect()
        } else {
            BTreeSet::from([self.id])
        };
        let voters: BTreeSet<NodeId> = members
            .iter()
            .filter(|(_, _, v)| *v)
            .map(|(id, _, _)| *id)
            .collect();
        if voters == wanted {
            return Ok(true);
        }
        // A new voter must have caught up: the quorum waits for it.
        let last = m.last_log_index.unwrap_or(0);
        let caught_up = wanted.iter().filter(|id| !voters.contains(id)).all(|id| {
            m.replication
                .as_ref()
                .and_then(|r| r.get(id).cloned().flatten())
                .is_some_and(|matched| matched.index >= last)
        });
        if !caught_up {
            return Ok(false);
        }
        raft.change_membership(
            openraft::ChangeMembers::ReplaceAllVoters(wanted.clone()),
            true,
        )
        .await
        .map_err(|e| PairError::Raft(e.to_string()))?;
        tracing::info!(voters = ?wanted, "pair: voters changed");
        Ok(true)
    }

    /// Runs an administrative request of this appliance's own CLI.
    async fn admin(&self, req: AdminRequest) -> Result<AdminResponse, PairError> {
        match req {
            AdminRequest::Invite => {
                let (code, fingerprint) = self.invite().await?;
                Ok(AdminResponse::Invite {
                    code: code.to_string(),
                    fingerprint,
                })
            }
            AdminRequest::Join { addr, code } => {
                let (leader, fingerprint) = self.join(&addr, &code).await?;
                Ok(AdminResponse::Joined {
                    leader,
                    fingerprint,
                })
            }
            AdminRequest::Status => Ok(AdminResponse::Status(self.status().await?)),
            AdminRequest::Propose(p) => Ok(AdminResponse::Proposed(self.write(p).await?)),
            AdminRequest::Leave => match self.leave().await? {
                Departure::Dropped(_) | Departure::Left(_) => Ok(AdminResponse::Left),
                Departure::LeftUntold { primary, reason } => {
                    Ok(AdminResponse::LeftUntold { primary, reason })
                }
            },
            AdminRequest::Promote { force } => Ok(AdminResponse::Promoted {
                epoch: self.promote(force).await?.epoch,
            }),
            AdminRequest::ClearDiverged { count } => Ok(AdminResponse::DivergedCleared {
                count: self.clear_diverged(count)?,
            }),
        }
    }
}

/// Makes one membership change on the leader before `deadline`: while
/// another change is still under way (voters settling after a join), it
/// waits for that one and tries again, every 50 ms.
async fn change_members(
    raft: &Raft<PairConfig>,
    change: openraft::ChangeMembers<NodeId, PeerNode>,
    retain: bool,
    deadline: Instant,
) -> Result<(), String> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(done) =
            tokio::time::timeout(left, raft.change_membership(change.clone(), retain)).await
        else {
            return Err(format!(
                "not acknowledged by the other members within {WRITE_TIMEOUT:?} (a quorum of \
                 the voters must be reachable)"
            ));
        };
        match done {
            Ok(_) => return Ok(()),
            Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(
                openraft::error::ChangeMembershipError::InProgress(_),
            ))) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// What a proposer of a replicated change gets from the pair's outcome.
fn outcome(
    result: Result<ApplyResponse, PairError>,
    replicated: Option<bool>,
) -> Result<uagate_store::Applied, StoreError> {
    match result {
        Ok(ApplyResponse::Applied { seq, epoch }) => {
            Ok(uagate_store::Applied::replicated(seq, epoch, replicated))
        }
        Ok(ApplyResponse::Refused {
            refusal: Some(r), ..
        }) => Err(r.into()),
        Ok(ApplyResponse::Refused { reason, .. }) => Err(StoreError::Replication(reason)),
        Ok(other) => Err(StoreError::Replication(format!(
            "the change was not applied: {other:?}"
        ))),
        Err(PairError::Store(
            e @ (StoreError::NotLeader { .. } | StoreError::NotAcknowledged(_)),
        )) => Err(e),
        Err(e) => Err(StoreError::Replication(e.to_string())),
    }
}

/// The store's way into the pair's log (see [`uagate_store::Replicator`]).
struct LogReplicator(std::sync::Weak<PairNode>);

impl uagate_store::Replicator for LogReplicator {
    fn report_rejected(&self, der: Vec<u8>) {
        let Some(node) = self.0.upgrade() else {
            return;
        };
        node.queue_rejected(der);
    }

    fn propose(&self, proposal: Proposal<Change>) -> uagate_store::Replicated {
        let node = self.0.clone();
        Box::pin(async move {
            let Some(node) = node.upgrade() else {
                return Err(StoreError::Replication("the pair node stopped".into()));
            };
            match node.write_reported(proposal).await {
                Ok((r, replicated)) => outcome(Ok(r), replicated),
                Err(e) => outcome(Err(e), None),
            }
        })
    }
}

/// The way into the pair's log for a CLI command while the gateway runs
/// on the same data directory: the change is sent to the running node
/// (with the appliance's own certificate), which commits it like any other.
pub struct AdminReplicator {
    identity: Identity,
    addr: String,
}

impl AdminReplicator {
    /// A replicator through the running node at `addr`, or `None` when no
    /// node answers there (the gateway is not running). Called by the CLI
    /// before it changes the store.
    pub async fn connect(identity: Identity, addr: &str) -> Option<AdminReplicator> {
        let (_, fp) = connect(&identity, addr, None).await.ok()?;
        (fp == identity.fingerprint()).then(|| AdminReplicator {
            identity,
            addr: addr.to_string(),
        })
    }
}

impl uagate_store::Replicator for AdminReplicator {
    fn propose(&self, proposal: Proposal<Change>) -> uagate_store::Replicated {
        let identity = self.identity.clone();
        let addr = self.addr.clone();
        Box::pin(async move {
            match admin(&identity, &addr, AdminRequest::Propose(proposal)).await {
                Ok(AdminResponse::Proposed(r)) => outcome(Ok(r), None),
                Ok(other) => Err(StoreError::Replication(format!(
                    "unexpected answer {other:?}"
                ))),
                Err(e) => Err(StoreError::Replication(e.to_string())),
            }
        })
    }
}

/// Whether the appliance with pair directory `dir` and `store` belongs to
/// a pair (it joined one, or its membership has other members). Called by
/// the CLI when no gateway answers on the data directory.
pub async fn is_paired(dir: &Path, store: &Store) -> Result<bool, PairError> {
    let pinned = match std::fs::read(dir.join(NODE_FILE)) {
        Ok(bytes) => !serde_json::from_slice::<NodeFile>(&bytes)?
            .pinned
            .is_empty(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(e.into()),
    };
    Ok(pinned || crate::state_machine::is_paired(store).await?)
}

/// The replicator of a paired appliance whose gateway is not running: its
/// replicated changes are refused (written beside the pair's log they
/// would reach no other member, and be lost or diverge when it runs
/// again).
pub struct PairedOffline;

impl uagate_store::Replicator for PairedOffline {
    fn propose(&self, _proposal: Proposal<Change>) -> uagate_store::Replicated {
        Box::pin(async {
            Err(StoreError::Replication(
                "this appliance is paired and its gateway is not running: replicated changes go \
                 through the pair (start `uagate run` on this data directory, then try again)"
                    .into(),
            ))
        })
    }
}

/// The address a node listening on `listen` connects from: that address
/// when it is a specific one (a peer sees one address per member, also on
/// a host with several), any when it listens on all.
fn source_of(listen: SocketAddr) -> Option<std::net::IpAddr> {
    (!listen.ip().is_unspecified()).then(|| listen.ip())
}

/// Opens the Raft log and state machine of `dir` and starts openraft.
/// Makes a snapshot of everything applied and purges the log up to it, so
/// that a member added next catches up from the snapshot rather than by
/// replaying the log: the store holds state from before the log began
/// (the configuration it had before pairing or promotion), and a snapshot
/// replaces the new member's replicated state as a whole.
async fn snapshot_and_purge(raft: &Raft<PairConfig>) -> Result<(), PairError> {
    let applied = raft.metrics().borrow().last_applied;
    raft.trigger()
        .snapshot()
        .await
        .map_err(|e| PairError::Raft(e.to_string()))?;
    if let Some(applied) = applied {
        let mut m = raft.metrics();
        let _ = tokio::time::timeout(
            ADMIN_TIMEOUT,
            m.wait_for(|m| m.snapshot.is_some_and(|s| s.index >= applied.index)),
        )
        .await;
        raft.trigger()
            .purge_log(applied.index)
            .await
            .map_err(|e| PairError::Raft(e.to_string()))?;
    }
    Ok(())
}

/// What a node's openraft instance needs besides its files.
struct RaftLinks {
    /// The node is a witness (never stands for election).
    witness: bool,
    /// The address it dials from.
    source: Option<std::net::IpAddr>,
    /// Its epoch mark, sent with every Raft message: fixed for the
    /// instance's life (a new epoch means a new instance), so an instance
    /// being shut down never speaks for the next one.
    mark: EpochMark,
    /// Where a higher epoch in an answer is reported.
    stale: tokio::sync::mpsc::UnboundedSender<EpochMark>,
    /// Where an answered Raft message is recorded.
    contact: Contact,
}

/// The mark a node's messages carry: the promotion it took part in, or,
/// when its store has moved on since (a snapshot of a later epoch), the
/// store's epoch.
/// Removes the Raft log and snapshots in `dir` (what is missing is fine).
/// Called with openraft stopped: when a node drops its log, and at start
/// when an earlier drop was owed.
fn remove_log_files(dir: &Path) -> Result<(), PairError> {
    for f in [RAFT_DB, "raft.db-wal", "raft.db-shm"] {
        match std::fs::remove_file(dir.join(f)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
    }
    match std::fs::remove_dir_all(dir.join(SNAPSHOT_DIR)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

fn effective_mark(file: &NodeFile, store_epoch: i64) -> EpochMark {
    if file.mark.epoch >= store_epoch {
        file.mark
    } else {
        EpochMark {
            epoch: store_epoch,
            since: 0,
        }
    }
}

async fn open_raft(
    dir: &Path,
    id: NodeId,
    store: &Store,
    identity: &Identity,
    links: RaftLinks,
) -> Result<(Raft<PairConfig>, crate::Fault, LogStore, Fence), PairError> {
    let RaftLinks {
        witness,
        source,
        mark,
        stale,
        contact,
    } = links;
    let mut log = LogStore::open(&dir.join(RAFT_DB)).await?;
    let committed = openraft::storage::RaftLogStorage::read_committed(&mut log)
        .await
        .map_err(|e| PairError::Raft(e.to_string()))?;
    let sm = StateMachine::new(store.clone(), &dir.join(SNAPSHOT_DIR)).await?;
    let mut fault = sm.fault();
    let mut fence = sm.fence();
    let mut handle = log.clone();
    let network = || Network {
        identity: identity.clone(),
        source,
        mark,
        stale: stale.clone(),
        contact: contact.clone(),
    };
    // The committed entries not applied yet are applied as the node
    // starts: one that fails its check (the stored log was altered while
    // the appliance was off) stops the node. It starts again halted, so
    // the appliance runs with the configuration it has and reports the
    // fault; nothing more is applied here (fail closed).
    let stopped = match Raft::new(id, raft_config()?, network(), log, sm).await {
        Ok(raft) => {
            let mut m = raft.metrics();
            let _ = tokio::time::timeout(
                ADMIN_TIMEOUT,
                m.wait_for(|m| m.running_state.is_err() || m.last_applied >= committed),
            )
            .await;
            let failed = raft.metrics().borrow().running_state.clone().err();
            match failed {
                None => Ok(raft),
                Some(e) => {
                    let _ = raft.shutdown().await;
                    Err(e.to_string())
                }
            }
        }
        Err(e) => Err(e.to_string()),
    };
    let raft = match stopped {
        Ok(raft) => raft,
        Err(e) => {
            let why = fault
                .lock()
                .ok()
                .and_then(|f| f.clone())
                .ok_or(PairError::Raft(e))?;
            tracing::error!(fault = %why, "pair: replication stopped at start on an integrity fault");
            fence.retire().await;
            let log = LogStore::open(&dir.join(RAFT_DB)).await?;
            handle = log.clone();
            let sm = StateMachine::halted(store.clone(), &dir.join(SNAPSHOT_DIR), committed, why)
                .await?;
            fault = sm.fault();
            fence = sm.fence();
            Raft::new(id, raft_config()?, network(), log, sm)
                .await
                .map_err(|e| PairError::Raft(e.to_string()))?
        }
    };
    if witness {
        // It votes, but never stands: the appliances lead.
        raft.runtime_config().elect(false);
    }
    Ok((raft, fault, handle, fence))
}

/// Accepts pair connections until `cancel`.
async fn serve(
    node: std::sync::Weak<PairNode>,
    listener: TcpListener,
    acceptor: TlsAcceptor,
    cancel: CancellationToken,
) {
    let room = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (tcp, peer) = tokio::select! {
            _ = cancel.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "pair listener accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Some(node) = node.upgrade() else {
            return;
        };
        let Ok(place) = room.clone().try_acquire_owned() else {
            // Closed at once: a member's dialer retries.
            tracing::debug!(%peer, "pair connection refused: {MAX_CONNECTIONS} are open");
            continue;
        };
        let acceptor = acceptor.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let _place = place;
            tokio::select! {
                _ = cancel.cancelled() => {}
                r = connection(node, tcp, acceptor) => if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "pair connection ended");
                }
            }
        });
    }
}

/// Who is on the other end of a pair connection.
struct PeerCert {
    /// SHA-256 fingerprint of its certificate.
    fingerprint: String,
    /// Its public key (hex), when it is a P-256 key.
    public_key: Option<String>,
    /// The address the connection came from (its IP is how this node
    /// reaches the peer).
    remote: Option<SocketAddr>,
    /// The address of this node the peer connected to (its IP is how the
    /// peer reaches this node).
    local: Option<SocketAddr>,
}

/// Serves one pair connection: TLS, then requests in turn.
async fn connection(
    node: Arc<PairNode>,
    tcp: TcpStream,
    acceptor: TlsAcceptor,
) -> Result<(), PairError> {
    let (remote, local) = (tcp.peer_addr().ok(), tcp.local_addr().ok());
    let tls = tokio::time::timeout(CONNECT_TIMEOUT, acceptor.accept(tcp))
        .await
        .map_err(|_| PairError::Refused("TLS handshake timed out".into()))??;
    let certs = tls.get_ref().1.peer_certificates();
    let Some(fingerprint) = peer_fingerprint(certs) else {
        return Err(PairError::Refused("no client certificate".into()));
    };
    let peer = PeerCert {
        fingerprint,
        public_key: peer_public_key(certs),
        remote,
        local,
    };
    let mut conn = Conn::new(tls);
    // The first request comes at once or the connection closes; a stranger
    // (a joiner, anyone else) gets one answer per connection, members and
    // this appliance's own CLI as many as they ask.
    let first = tokio::time::timeout(CONNECT_TIMEOUT, conn.recv::<Request>())
        .await
        .map_err(|_| PairError::Refused("no request in time".into()))??;
    let Some(request) = first else {
        return Ok(());
    };
    let known =
        peer.fingerprint == node.fingerprint() || node.peer(&peer.fingerprint).await.is_some();
    let response = node.handle(&peer, request).await;
    conn.send(&response).await?;
    if !known {
        return Ok(());
    }
    while let Some(request) = conn.recv::<Request>().await? {
        let response = node.handle(&peer, request).await;
        conn.send(&response).await?;
    }
    Ok(())
}

/// Connects to the pair listener at `addr` with `identity` (from `source`,
/// the listener's own address when it listens on one: the peers see one
/// address per member); returns the connection and the peer's certificate
/// fingerprint.
async fn connect(
    identity: &Identity,
    addr: &str,
    source: Option<std::net::IpAddr>,
) -> Result<(Conn<tokio_rustls::client::TlsStream<TcpStream>>, String), PairError> {
    Ok(dial(identity, addr, source).await?)
}

/// Why [`dial`] could not open a pair connection.
#[derive(Debug)]
enum DialError {
    /// This appliance's TLS configuration could not be made.
    Local(PairError),
    /// No TCP connection, or none (with its TLS session) in time.
    Connect {
        /// Why, as the system said it (`TimedOut` for no answer in time).
        error: std::io::Error,
        /// The address and the error, as logs and the CLI show it.
        message: String,
    },
    /// A TCP connection, but no TLS session with a certificate: not a
    /// pair listener.
    Handshake(String),
}

impl From<DialError> for PairError {
    fn from(e: DialError) -> PairError {
        match e {
            DialError::Local(e) => e,
            DialError::Connect { message, .. } | DialError::Handshake(message) => {
                PairError::Refused(message)
            }
        }
    }
}

/// [`connect`], telling a connection that could not be made from a peer
/// that is not a pair listener (for [`PairNode::join`]'s advice).
async fn dial(
    identity: &Identity,
    addr: &str,
    source: Option<std::net::IpAddr>,
) -> Result<(Conn<tokio_rustls::client::TlsStream<TcpStream>>, String), DialError> {
    let connector = TlsConnector::from(identity.client_config().map_err(DialError::Local)?);
    let name = ServerName::try_from("uagate-pair")
        .map_err(|e| DialError::Local(PairError::Tls(e.to_string())))?;
    let tcp_failed = |error: std::io::Error| DialError::Connect {
        message: format!("{addr}: {error}"),
        error,
    };
    let tls = tokio::time::timeout(CONNECT_TIMEOUT, async {
        let tcp = async {
            let tcp = match source {
                None => TcpStream::connect(addr).await?,
                Some(ip) => {
                    let to = tokio::net::lookup_host(addr)
                        .await?
                        .find(|a| a.is_ipv4() == ip.is_ipv4());
                    let to = to.ok_or_else(|| {
                        std::io::Error::new(
                            std::io::ErrorKind::NotFound,
                            format!("{addr}: no address"),
                        )
                    })?;
                    let socket = if ip.is_ipv4() {
                        tokio::net::TcpSocket::new_v4()?
                    } else {
                        tokio::net::TcpSocket::new_v6()?
                    };
                    socket.bind(SocketAddr::new(ip, 0))?;
                    socket.connect(to).await?
                }
            };
            tcp.set_nodelay(true)?;
            Ok::<_, std::io::Error>(tcp)
        }
        .await
        .map_err(tcp_failed)?;
        connector
            .connect(name, tcp)
            .await
            .map_err(|e| DialError::Handshake(format!("{addr}: {e}")))
    })
    .await
    .map_err(|_| DialError::Connect {
        error: std::io::Error::from(std::io::ErrorKind::TimedOut),
        message: format!("{addr}: no answer within {CONNECT_TIMEOUT:?}"),
    })??;
    let fp = peer_fingerprint(tls.get_ref().1.peer_certificates())
        .ok_or_else(|| DialError::Handshake(format!("{addr} presented no certificate")))?;
    Ok((Conn::new(tls), fp))
}

/// Asks the running pair node of this appliance (at `addr`, with the
/// appliance's own certificate) to do `request`. Called by the CLI.
pub async fn admin(
    identity: &Identity,
    addr: &str,
    request: AdminRequest,
) -> Result<AdminResponse, PairError> {
    let (mut conn, fp) = connect(identity, addr, None)
        .await
        .map_err(|e| PairError::LocalNode(e.to_string()))?;
    if fp != identity.fingerprint() {
        return Err(PairError::LocalNode(format!(
            "{addr} is not this appliance's pair listener (another certificate)"
        )));
    }
    conn.send(&Request::Admin(request)).await?;
    match tokio::time::timeout(ADMIN_TIMEOUT * 2, conn.recv::<Response>()).await {
        Err(_) => Err(PairError::Refused("the pair node did not answer".into())),
        Ok(r) => match r? {
            Some(Response::Admin(Ok(a))) => Ok(a),
            Some(Response::Admin(Err(why))) | Some(Response::Refused(why)) => {
                Err(PairError::Refused(why))
            }
            other => Err(PairError::Refused(format!("unexpected answer {other:?}"))),
        },
    }
}

/// Makes the per-peer clients of openraft.
struct Network {
    identity: Identity,
    source: Option<std::net::IpAddr>,
    mark: EpochMark,
    stale: tokio::sync::mpsc::UnboundedSender<EpochMark>,
    contact: Contact,
}

impl RaftNetworkFactory<PairConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &PeerNode) -> Peer {
        Peer {
            target,
            node: node.clone(),
            identity: self.identity.clone(),
            source: self.source,
            mark: self.mark,
            stale: self.stale.clone(),
            contact: self.contact.clone(),
            conn: None,
            refusals: 0,
            quiet_until: None,
            failing: LogThrottle::default(),
        }
    }
}

/// openraft's connection to one member: one TLS connection, opened on the
/// first message and again after a failure, accepted only when the peer
/// shows the certificate pinned in the membership.
struct Peer {
    target: NodeId,
    node: PeerNode,
    identity: Identity,
    source: Option<std::net::IpAddr>,
    mark: EpochMark,
    stale: tokio::sync::mpsc::UnboundedSender<EpochMark>,
    contact: Contact,
    conn: Option<Conn<tokio_rustls::client::TlsStream<TcpStream>>>,
    /// Refusals in a row (see [`REFUSED_RETRY_FIRST`]).
    refusals: u32,
    /// After a refusal, no message goes to the member before this.
    quiet_until: Option<Instant>,
    /// The log of a failure that goes on: once, then at a slow interval.
    failing: LogThrottle,
}

impl Peer {
    /// Sends `request` and waits for its answer within `ttl`. A member
    /// that refused the last message is not called again before its wait
    /// is over (doubling per refusal): openraft's retries meanwhile fail
    /// at once, quietly. A failure is logged once, then at a slow interval,
    /// and its end once.
    async fn call(&mut self, request: Request, ttl: Duration) -> Result<Response, PairError> {
        if let Some(until) = self.quiet_until {
            if Instant::now() < until {
                return Err(PairError::Refused(format!(
                    "{} refused this appliance's last message; not called again yet",
                    self.node.addr
                )));
            }
        }
        let result = self.exchange(request, ttl).await;
        let now = Instant::now();
        match &result {
            Ok(Response::Refused(why)) => {
                self.refusals = self.refusals.saturating_add(1);
                let wait = REFUSED_RETRY_FIRST
                    .saturating_mul(1 << self.refusals.saturating_sub(1).min(16))
                    .min(REFUSED_RETRY_MAX);
                self.quiet_until = Some(now + wait);
                // A member that joined a moment ago refuses until it has
                // pinned this appliance: only a refusal that repeats is
                // worth a line.
                let repeated = self.refusals >= 2;
                if let Some(not_logged) = repeated.then(|| self.failing.hit(now)).flatten() {
                    tracing::warn!(peer = self.target, addr = %self.node.addr, refused = %why, not_logged,
                        "pair: a member refuses this appliance's Raft messages (did it leave the pair? \
                         then run `uagate pair leave` on the primary to drop it)");
                }
            }
            Ok(_) => {
                self.refusals = 0;
                self.quiet_until = None;
                if self.failing.clear() {
                    tracing::info!(peer = self.target, addr = %self.node.addr, "pair: member reachable again");
                }
            }
            Err(e) => {
                if let Some(not_logged) = self.failing.hit(now) {
                    tracing::warn!(peer = self.target, addr = %self.node.addr, error = %e, not_logged,
                        "pair: member not reachable");
                }
            }
        }
        result
    }

    /// One request and its answer within `ttl`, on the open connection or
    /// a new one.
    async fn exchange(&mut self, request: Request, ttl: Duration) -> Result<Response, PairError> {
        let result = tokio::time::timeout(ttl, async {
            if self.conn.is_none() {
                let (conn, fp) = connect(&self.identity, &self.node.addr, self.source).await?;
                if fp != self.node.fingerprint {
                    // Logged by `call` (once, then at a slow interval).
                    return Err(PairError::Refused(format!(
                        "{} presented a certificate ({fp}) that is not the pinned one",
                        self.node.addr
                    )));
                }
                self.conn = Some(conn);
            }
            let conn = self
                .conn
                .as_mut()
                .ok_or_else(|| PairError::Refused("not connected".into()))?;
            conn.send(&request).await?;
            conn.recv::<Response>()
                .await?
                .ok_or_else(|| PairError::Refused("the peer closed the connection".into()))
        })
        .await
        .unwrap_or_else(|_| Err(PairError::Refused("no answer in time".into())));
        if result.is_err() {
            self.conn = None;
        }
        if let Ok(Response::Append(_) | Response::Vote(_) | Response::Snapshot(_)) = &result {
            self.contact.lock().insert(self.target, Instant::now());
        }
        if let Ok(Response::Stale(mark)) = &result {
            tracing::warn!(
                peer = self.target,
                epoch = mark.epoch,
                "pair: a member answered from a later epoch (it was promoted); stepping down"
            );
            let _ = self.stale.send(*mark);
        }
        result
    }

    /// This node's epoch mark, for a message.
    fn mark(&self) -> EpochMark {
        self.mark
    }
}

fn unreachable<E: std::error::Error>(e: &PairError) -> RPCError<NodeId, PeerNode, E> {
    RPCError::Unreachable(Unreachable::new(e))
}

/// A refusal or an answer out of turn: reported to openraft as an
/// unreachable member, so that it backs off before the next message
/// (a network error would be retried at once, in a tight loop).
fn unexpected<E: std::error::Error>(what: &str, got: &Response) -> RPCError<NodeId, PeerNode, E> {
    let e = match got {
        Response::Refused(why) => PairError::Refused(format!("{what} refused: {why}")),
        other => PairError::Refused(format!("{what}: unexpected answer {other:?}")),
    };
    RPCError::Unreachable(Unreachable::new(&e))
}

impl RaftNetwork<PairConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<PairConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, PeerNode, RaftError<NodeId>>> {
        let mark = self.mark();
        let entries = rpc.entries.len() as u64;
        match self
            .call(Request::Append { rpc, mark }, option.hard_ttl())
            .await
        {
            // Too many large entries (CRLs) for one frame: openraft sends
            // the next batches with half as many.
            Err(PairError::TooLarge(_)) if entries > 1 => Err(RPCError::PayloadTooLarge(
                openraft::error::PayloadTooLarge::new_entries_hint(entries / 2),
            )),
            Ok(Response::Append(Ok(r))) => Ok(r),
            Ok(Response::Append(Err(e))) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            Ok(other) => Err(unexpected("AppendEntries", &other)),
            Err(e) => Err(unreachable(&e)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<PairConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, PeerNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        let mark = self.mark();
        match self
            .call(Request::Snapshot { rpc, mark }, option.hard_ttl())
            .await
        {
            Ok(Response::Snapshot(Ok(r))) => Ok(r),
            Ok(Response::Snapshot(Err(e))) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            Ok(other) => Err(unexpected("InstallSnapshot", &other)),
            Err(e) => Err(unreachable(&e)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, PeerNode, RaftError<NodeId>>> {
        let mark = self.mark();
        match self
            .call(Request::Vote { rpc, mark }, option.hard_ttl())
            .await
        {
            Ok(Response::Vote(Ok(r))) => Ok(r),
            Ok(Response::Vote(Err(e))) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            Ok(other) => Err(unexpected("Vote", &other)),
            Err(e) => Err(unreachable(&e)),
        }
    }
}

/// The IP literal `addr` (`host:port`, or a URL `scheme://host:port/...`)
/// names as its host, if it names one.
fn host_ip(addr: &str) -> Option<std::net::IpAddr> {
    let (start, end) = host_span(addr)?;
    addr[start..end]
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// Whether `addr` names no host: 0.0.0.0 or [::], what a listener on
/// every address reports.
fn names_no_host(addr: &str) -> bool {
    host_ip(addr).is_some_and(|ip| ip.is_unspecified())
}

/// The IP `addr` names, when it names one that is not 0.0.0.0 or [::].
fn known_host(addr: &str) -> Option<std::net::IpAddr> {
    host_ip(addr).filter(|ip| !ip.is_unspecified())
}

/// `addr` with its host replaced by `ip` when it names no host (see
/// [`names_no_host`]); otherwise `addr` unchanged.
fn with_host(addr: &str, ip: std::net::IpAddr) -> String {
    match host_span(addr) {
        Some((start, end)) if names_no_host(addr) => {
            let host = match ip {
                std::net::IpAddr::V6(v6) => format!("[{v6}]"),
                std::net::IpAddr::V4(v4) => v4.to_string(),
            };
            format!("{}{host}{}", &addr[..start], &addr[end..])
        }
        _ => addr.to_string(),
    }
}

/// Where the host is in `addr`: after `scheme://` when there is one, up to
/// the port's colon (the closing bracket of an IPv6 literal included).
fn host_span(addr: &str) -> Option<(usize, usize)> {
    let start = addr.find("://").map_or(0, |i| i + 3);
    let rest = &addr[start..];
    let len = if rest.starts_with('[') {
        rest.find(']')? + 1
    } else {
        rest.find([':', '/']).unwrap_or(rest.len())
    };
    Some((start, start + len))
}

#[cfg(test)]
mod host_tests {
    use super::*;

    #[test]
    fn an_address_naming_no_host_takes_the_observed_one() {
        let ip: std::net::IpAddr = "10.1.2.3".parse().unwrap();
        assert_eq!(with_host("0.0.0.0:4850", ip), "10.1.2.3:4850");
        assert_eq!(with_host("[::]:4850", ip), "10.1.2.3:4850");
        assert_eq!(
            with_host("https://0.0.0.0:8443/", ip),
            "https://10.1.2.3:8443/"
        );
        let v6: std::net::IpAddr = "fd00::7".parse().unwrap();
        assert_eq!(with_host("0.0.0.0:4850", v6), "[fd00::7]:4850");
        // A named host stays.
        assert_eq!(with_host("192.0.2.9:4850", ip), "192.0.2.9:4850");
        assert_eq!(with_host("gw-a.plant:4850", ip), "gw-a.plant:4850");
        assert_eq!(
            with_host("https://gw-a.plant:8443/", ip),
            "https://gw-a.plant:8443/"
        );
        assert_eq!(known_host("0.0.0.0:4850"), None);
        assert_eq!(known_host("10.1.2.3:4850"), Some(ip));
        assert_eq!(known_host("gw-a.plant:4850"), None);
    }
}
