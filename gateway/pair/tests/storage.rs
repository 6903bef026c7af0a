//! The pair's Raft storage on real SQLite files in temp dirs: exactly-once
//! apply, refusals as outcomes, restart safety, and snapshots between two
//! nodes with different node-local rows.
#![allow(clippy::unwrap_used)] // unwrap is fine in tests

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::OnceLock;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{
    CommittedLeaderId, EntryPayload, Membership, RaftLogReader, RaftSnapshotBuilder, StorageHelper,
    Vote,
};
use tempfile::TempDir;
use uagate_pair::tls::Identity;
use uagate_pair::{
    ApplyResponse, Entry, LogId, LogStore, PeerNode, Signed, StateMachine, StoredMembership,
    SNAPSHOT_FILE,
};
use uagate_store::{
    CertKind, Change, PasswordHash, Proposal, Role, Store, FIELD_NAMESPACES_SETTING,
    REQUESTED_STATE_SETTING,
};

const HASH_A: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHQ$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
const HASH_B: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$b3RoZXJzYWx0$BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBA";

fn lid(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

/// Node 1's pair identity: it signs the changes of these tests.
fn signer() -> &'static Identity {
    static SIGNER: OnceLock<Identity> = OnceLock::new();
    SIGNER.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        Identity::load_or_create(&dir, "node1").unwrap()
    })
}

/// A change proposed by node 1 in epoch 1, signed.
fn signed(proposal: Proposal) -> Signed {
    let signature = signer()
        .sign(&Signed::signed_bytes(&proposal, 1, 1))
        .unwrap();
    Signed {
        proposal,
        proposer: 1,
        epoch: 1,
        signature,
    }
}

fn normal(term: u64, index: u64, change: Change) -> Entry {
    let second = u32::try_from(index % 60).unwrap();
    Entry {
        log_id: lid(term, index),
        payload: EntryPayload::Normal(signed(Proposal {
            actor: "alice".into(),
            at: format!("2024-05-01T12:00:{second:02}.000Z"),
            change,
        })),
    }
}

fn peers() -> BTreeMap<u64, PeerNode> {
    BTreeMap::from([
        (
            1,
            PeerNode {
                addr: "10.0.0.1:4850".into(),
                fingerprint: signer().fingerprint().into(),
                public_key: signer().public_key(),
                application_uri: String::new(),
                witness: false,
                console: String::new(),
            },
        ),
        (
            2,
            PeerNode {
                addr: "10.0.0.2:4850".into(),
                fingerprint: String::new(),
                public_key: String::new(),
                application_uri: String::new(),
                witness: false,
                console: String::new(),
            },
        ),
    ])
}

fn membership() -> Membership<u64, PeerNode> {
    Membership::new(vec![BTreeSet::from([1, 2])], peers())
}

fn members(term: u64, index: u64) -> Entry {
    Entry {
        log_id: lid(term, index),
        payload: EntryPayload::Membership(membership()),
    }
}

fn add_user(name: &str, hash: &str, role: Role) -> Change {
    Change::AddUser {
        name: name.into(),
        password_hash: PasswordHash::new(hash),
        role,
    }
}

fn set(key: &str, value: &str) -> Change {
    Change::SetSetting {
        key: key.into(),
        value: value.into(),
    }
}

fn make_cert(cn: &str) -> Vec<u8> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    let key = rcgen::KeyPair::generate().unwrap();
    params.self_signed(&key).unwrap().der().to_vec()
}

/// A node's log store and state machine on the files in `dir`.
async fn open_node(dir: &Path) -> (LogStore, StateMachine) {
    let log = LogStore::open(&dir.join("raft-log.db")).await.unwrap();
    let store = Store::open(&dir.join("config.db")).await.unwrap();
    let sm = StateMachine::new(store, &dir.join("snapshots"))
        .await
        .unwrap();
    (log, sm)
}

/// A node that has applied the membership of node 1 (the signer) and 2 at
/// index 0, so that it can check the signatures of node 1's changes.
async fn open_member(dir: &Path) -> (LogStore, StateMachine) {
    let (log, sm) = open_node(dir).await;
    let stored = StoredMembership::new(Some(lid(0, 0)), membership());
    sm.store()
        .record_applied(
            uagate_store::LogPosition {
                index: 0,
                term: 0,
                leader: 1,
            },
            Some(&serde_json::to_value(&stored).unwrap()),
        )
        .await
        .unwrap();
    (log, sm)
}

async fn close_node(log: LogStore, sm: StateMachine) {
    log.close().await;
    sm.store().close().await;
}

async fn log_len(store: &Store) -> usize {
    store.change_log_since(0, 10_000).await.unwrap().len()
}

#[tokio::test]
async fn an_entry_applied_twice_changes_the_store_once() {
    let dir = TempDir::new().unwrap();
    let (_log, mut sm) = open_member(dir.path()).await;
    let entry = normal(1, 1, add_user("alice", HASH_A, Role::Admin));

    let first = sm.apply([entry.clone()]).await.unwrap();
    assert_eq!(first, [ApplyResponse::Applied { seq: 1, epoch: 1 }]);
    let again = sm.apply([entry]).await.unwrap();
    assert_eq!(again, [ApplyResponse::AlreadyApplied]);

    // The same non-idempotent entry twice in one batch.
    let bump = normal(1, 2, Change::BumpEpoch);
    let out = sm.apply([bump.clone(), bump]).await.unwrap();
    assert_eq!(
        out,
        [
            ApplyResponse::Applied { seq: 2, epoch: 2 },
            ApplyResponse::AlreadyApplied
        ]
    );
    assert_eq!(sm.store().epoch().await.unwrap(), 2);
    assert_eq!(sm.store().list_users().await.unwrap().len(), 1);
    assert_eq!(log_len(sm.store()).await, 2);
    assert_eq!(sm.applied_state().await.unwrap().0, Some(lid(1, 2)));
}

/// A state machine retired when its Raft instance was replaced (a
/// step-down resets the log) writes nothing more: an apply its worker still
/// had queued, a snapshot install and a snapshot build are refused and
/// leave the store as the node left it. (Before, such a late apply wrote
/// the old instance's position and membership back after the store forgot
/// them, and the returning old primary elected itself again.)
#[tokio::test]
async fn a_retired_state_machine_writes_nothing_more() {
    let dir = TempDir::new().unwrap();
    let (_log, mut sm) = open_member(dir.path()).await;
    sm.apply([normal(1, 1, add_user("alice", HASH_A, Role::Admin))])
        .await
        .unwrap();
    let fence = sm.fence();
    fence.retire().await;
    let late = sm
        .apply([
            normal(1, 2, add_user("bob", HASH_B, Role::Viewer)),
            members(1, 3),
        ])
        .await;
    assert!(late.is_err(), "a retired state machine applied {late:?}");
    assert_eq!(sm.applied_state().await.unwrap().0, Some(lid(1, 1)));
    assert_eq!(sm.store().list_users().await.unwrap().len(), 1);
    let mut builder = sm.get_snapshot_builder().await;
    assert!(builder.build_snapshot().await.is_err());
    assert!(!dir.path().join("snapshots").join(SNAPSHOT_FILE).exists());
    let empty = Box::new(std::io::Cursor::new(Vec::new()));
    let meta = openraft::SnapshotMeta {
        last_log_id: Some(lid(1, 9)),
        last_membership: StoredMembership::new(Some(lid(0, 0)), membership()),
        snapshot_id: "late".into(),
    };
    assert!(sm.install_snapshot(&meta, empty).await.is_err());
    assert_eq!(sm.store().list_users().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_refused_change_is_an_outcome_that_only_advances_last_applied() {
    let dir = TempDir::new().unwrap();
    let (_log, mut sm) = open_member(dir.path()).await;
    sm.apply([normal(1, 1, add_user("alice", HASH_A, Role::Admin))])
        .await
        .unwrap();
    let before = sm.store().export_snapshot().await.unwrap();

    let demote = Change::SetRole {
        name: "alice".into(),
        role: Role::Viewer,
    };
    let out = sm
        .apply([
            normal(1, 2, demote),
            normal(1, 3, add_user("alice", HASH_B, Role::Viewer)),
        ])
        .await
        .unwrap();
    let [ApplyResponse::Refused {
        reason: last_admin, ..
    }, ApplyResponse::Refused { reason: taken, .. }] = &out[..]
    else {
        panic!("expected two refusals, got {out:?}");
    };
    assert!(last_admin.contains("last admin"), "{last_admin}");
    assert!(taken.contains("already exists"), "{taken}");

    assert_eq!(sm.applied_state().await.unwrap().0, Some(lid(1, 3)));
    let after = sm.store().export_snapshot().await.unwrap();
    assert_eq!(after.users, before.users);
    assert_eq!(after.epoch, before.epoch);
    assert_eq!(log_len(sm.store()).await, 1);
}

#[tokio::test]
async fn everything_written_survives_a_restart() {
    let dir = TempDir::new().unwrap();
    {
        let (mut log, mut sm) = open_node(dir.path()).await;
        log.save_vote(&Vote::new(3, 1)).await.unwrap();
        log.blocking_append([
            members(0, 0),
            normal(1, 1, add_user("alice", HASH_A, Role::Admin)),
            normal(1, 2, set("isolation.mode", "balanced")),
        ])
        .await
        .unwrap();
        log.save_committed(Some(lid(1, 2))).await.unwrap();
        // The node stops after applying entry 1 of the 3 committed.
        let out = sm
            .apply([
                members(0, 0),
                normal(1, 1, add_user("alice", HASH_A, Role::Admin)),
            ])
            .await
            .unwrap();
        assert_eq!(
            out,
            [
                ApplyResponse::Recorded,
                ApplyResponse::Applied { seq: 1, epoch: 1 }
            ]
        );
        close_node(log, sm).await;
    }

    let (mut log, mut sm) = open_node(dir.path()).await;
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(3, 1)));
    assert_eq!(log.read_committed().await.unwrap(), Some(lid(1, 2)));
    assert_eq!(
        log.get_log_state().await.unwrap().last_log_id,
        Some(lid(1, 2))
    );
    let entries = log.try_get_log_entries(0..10).await.unwrap();
    let ids: Vec<_> = entries.iter().map(|e| e.log_id).collect();
    assert_eq!(ids, [lid(0, 0), lid(1, 1), lid(1, 2)]);

    // The applied entry and its position are both there, with the
    // membership and the peers' addresses.
    let (applied, stored) = sm.applied_state().await.unwrap();
    assert_eq!(applied, Some(lid(1, 1)));
    assert_eq!(stored, StoredMembership::new(Some(lid(0, 0)), membership()));
    assert_eq!(
        stored
            .nodes()
            .map(|(_, n)| n.addr.as_str())
            .collect::<Vec<_>>(),
        ["10.0.0.1:4850", "10.0.0.2:4850"]
    );
    assert_eq!(
        sm.store().list_users().await.unwrap(),
        [("alice".to_owned(), Role::Admin)]
    );
    assert_eq!(sm.store().setting("isolation.mode").await.unwrap(), None);

    // openraft's start-up re-applies the committed entry 2, once.
    StorageHelper::new(&mut log, &mut sm)
        .get_initial_state()
        .await
        .unwrap();
    assert_eq!(sm.applied_state().await.unwrap().0, Some(lid(1, 2)));
    assert_eq!(
        sm.store()
            .setting("isolation.mode")
            .await
            .unwrap()
            .as_deref(),
        Some("balanced")
    );
    assert_eq!(log_len(sm.store()).await, 2);
}

/// A leader with replicated and node-local state, and its snapshot.
async fn leader_with_snapshot(
    dir: &Path,
) -> (StateMachine, openraft::Snapshot<uagate_pair::PairConfig>) {
    let (_log, mut sm) = open_member(dir).await;
    let out = sm
        .apply([
            members(1, 1),
            normal(1, 2, add_user("alice", HASH_A, Role::Admin)),
            normal(1, 3, add_user("bob", HASH_B, Role::Viewer)),
            normal(
                1,
                4,
                Change::TrustAdd {
                    der: make_cert("Plant SCADA"),
                    kind: CertKind::Trusted,
                },
            ),
            normal(1, 5, set("isolation.mode", "balanced")),
            normal(2, 6, Change::BumpEpoch),
        ])
        .await
        .unwrap();
    assert!(!out
        .iter()
        .any(|r| matches!(r, ApplyResponse::Refused { .. })));
    sm.store()
        .set_setting("alice", REQUESTED_STATE_SETTING, "maintenance")
        .await
        .unwrap();
    sm.store()
        .record_rejected(&make_cert("Intruder"))
        .await
        .unwrap();
    let snapshot = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    (sm, snapshot)
}

#[tokio::test]
async fn a_snapshot_moves_replicated_state_and_keeps_node_local_rows() {
    let leader_dir = TempDir::new().unwrap();
    let (mut leader, snapshot) = leader_with_snapshot(leader_dir.path()).await;
    assert_eq!(snapshot.meta.last_log_id, Some(lid(2, 6)));
    assert_eq!(
        leader.get_current_snapshot().await.unwrap().unwrap().meta,
        snapshot.meta
    );

    let follower_dir = TempDir::new().unwrap();
    let (_log, mut follower) = open_member(follower_dir.path()).await;
    follower
        .apply([normal(1, 1, add_user("carol", HASH_B, Role::Admin))])
        .await
        .unwrap();
    let own_rejected = make_cert("Scanner");
    follower
        .store()
        .record_rejected(&own_rejected)
        .await
        .unwrap();
    follower
        .store()
        .set_setting("pair", FIELD_NAMESPACES_SETTING, "{\"line1\":3}")
        .await
        .unwrap();

    let mut received = follower.begin_receiving_snapshot().await.unwrap();
    received
        .get_mut()
        .extend_from_slice(snapshot.snapshot.get_ref());
    follower
        .install_snapshot(&snapshot.meta, received)
        .await
        .unwrap();

    assert_eq!(
        follower.applied_state().await.unwrap(),
        leader.applied_state().await.unwrap()
    );
    assert_eq!(
        follower.store().export_snapshot().await.unwrap(),
        leader.store().export_snapshot().await.unwrap()
    );
    let rejected = follower.store().certs(CertKind::Rejected).await.unwrap();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].der, own_rejected);
    assert_eq!(
        follower
            .store()
            .setting(FIELD_NAMESPACES_SETTING)
            .await
            .unwrap()
            .as_deref(),
        Some("{\"line1\":3}")
    );
    assert_eq!(
        follower
            .store()
            .setting(REQUESTED_STATE_SETTING)
            .await
            .unwrap(),
        None
    );

    // The installed snapshot is the current one, also after a restart.
    let current = follower.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta, snapshot.meta);
    follower.store().close().await;
    drop(follower);
    let (_log, mut follower) = open_node(follower_dir.path()).await;
    let current = follower.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta, snapshot.meta);
    assert_eq!(current.snapshot.get_ref(), snapshot.snapshot.get_ref());
    assert_eq!(follower.applied_state().await.unwrap().0, Some(lid(2, 6)));
}

#[tokio::test]
async fn corrupt_unknown_or_mismatched_snapshots_are_refused_and_change_nothing() {
    let leader_dir = TempDir::new().unwrap();
    let (_leader, snapshot) = leader_with_snapshot(leader_dir.path()).await;
    let good = snapshot.snapshot.get_ref().clone();

    let follower_dir = TempDir::new().unwrap();
    let (_log, mut follower) = open_member(follower_dir.path()).await;
    follower
        .apply([normal(1, 1, add_user("carol", HASH_B, Role::Admin))])
        .await
        .unwrap();
    let before = follower.store().export_snapshot().await.unwrap();
    let state_before = follower.applied_state().await.unwrap();

    let mut future: serde_json::Value = serde_json::from_slice(&good).unwrap();
    future["format"] = serde_json::json!(2);
    let future = serde_json::to_vec(&future).unwrap();
    let mut wrong_meta = snapshot.meta.clone();
    wrong_meta.last_log_id = Some(lid(2, 7));

    for (meta, bytes) in [
        (&snapshot.meta, good[..good.len() / 2].to_vec()),
        (&snapshot.meta, b"garbage".to_vec()),
        (&snapshot.meta, future),
        (&wrong_meta, good.clone()),
    ] {
        let mut received = follower.begin_receiving_snapshot().await.unwrap();
        received.get_mut().extend_from_slice(&bytes);
        let err = follower.install_snapshot(meta, received).await.unwrap_err();
        assert!(err.to_string().contains("snapshot"), "{err}");
    }

    assert_eq!(follower.store().export_snapshot().await.unwrap(), before);
    assert_eq!(follower.applied_state().await.unwrap(), state_before);
    assert!(follower.get_current_snapshot().await.unwrap().is_none());
    assert!(!follower_dir
        .path()
        .join("snapshots")
        .join(SNAPSHOT_FILE)
        .exists());
}

/// Issue 18 item 4: a change whose signature does not check out — signed
/// by a key that is not the proposer's, or altered after signing — is
/// refused before it is applied: the state machine fails (openraft stops
/// replication on this node: fail closed), reports the fault, and the store
/// is unchanged. A change from a lower epoch is a refusal, not a fault.
#[tokio::test]
async fn forged_or_altered_entries_stop_replication_and_change_nothing() {
    let dir = TempDir::new().unwrap();
    let (_log, mut sm) = open_member(dir.path()).await;
    let before = sm.store().export_snapshot().await.unwrap();

    // Signed by another key, claiming to be node 1.
    let other_dir = TempDir::new().unwrap();
    let other = Identity::load_or_create(other_dir.path(), "mallory").unwrap();
    let proposal = Proposal {
        actor: "mallory".into(),
        at: "2024-05-01T12:00:00.000Z".into(),
        change: add_user("mallory", HASH_A, Role::Admin),
    };
    let forged = Signed {
        signature: other.sign(&Signed::signed_bytes(&proposal, 1, 1)).unwrap(),
        proposal: proposal.clone(),
        proposer: 1,
        epoch: 1,
    };
    let entry = |signed: Signed, index: u64| Entry {
        log_id: lid(1, index),
        payload: EntryPayload::Normal(signed),
    };
    let e = sm.apply([entry(forged, 1)]).await.unwrap_err();
    assert!(e.to_string().contains("integrity fault"), "{e}");
    let fault = sm.fault().lock().unwrap().clone().expect("fault reported");
    assert!(fault.contains("forged or altered"), "{fault}");

    // Node 1's real signature, but the change altered afterwards.
    let mut altered = signed(proposal);
    altered.proposal.change = add_user("mallory", HASH_B, Role::Admin);
    assert!(sm.apply([entry(altered, 1)]).await.is_err());
    // A proposer that is not a member.
    let mut stranger = signed(Proposal {
        actor: "x".into(),
        at: "2024-05-01T12:00:00.000Z".into(),
        change: Change::BumpEpoch,
    });
    stranger.proposer = 7;
    assert!(sm.apply([entry(stranger, 1)]).await.is_err());

    let after = sm.store().export_snapshot().await.unwrap();
    assert_eq!(after.users, before.users);
    assert_eq!(after.epoch, before.epoch);
    assert_eq!(sm.store().list_users().await.unwrap().len(), 0);

    // Lower epoch: an outcome on every member, not a fault.
    let dir2 = TempDir::new().unwrap();
    let (_log2, mut sm2) = open_member(dir2.path()).await;
    sm2.apply([normal(1, 1, Change::BumpEpoch)]).await.unwrap();
    let out = sm2
        .apply([normal(1, 2, add_user("late", HASH_A, Role::Admin))])
        .await
        .unwrap();
    assert!(
        matches!(&out[0], ApplyResponse::Refused { reason, .. } if reason.contains("epoch 1")),
        "{out:?}"
    );
    assert!(sm2.fault().lock().unwrap().is_none());
}

/// A Raft log migrated by a newer build (an update rolled back) still
/// opens here instead of failing with "migration missing".
#[tokio::test]
async fn a_raft_log_migrated_by_a_newer_build_still_opens() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("raft-log.db");
    LogStore::open(&path).await.unwrap().close().await;
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(sqlx::sqlite::SqliteConnectOptions::new().filename(&path))
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations \
         (version, description, installed_on, success, checksum, execution_time) \
         VALUES (99990101000000, 'from the future', CURRENT_TIMESTAMP, 1, x'00', 0)",
    )
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
    LogStore::open(&path).await.unwrap().close().await;
}
