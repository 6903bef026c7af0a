//! The store as the pair's state machine: applying at a log position
//! (exactly once, refusals as outcomes, crash safety) and snapshots of the
//! replicated state, against real SQLite files in temp dirs.
#![allow(clippy::unwrap_used)] // unwrap is fine in tests

mod common;

use chrono::{TimeZone, Utc};
use common::{make_ca, make_cert, make_crl, open_temp};
use serde_json::json;
use uagate_store::{
    CertKind, Change, LocalChange, LogApplied, LogPosition, PasswordHash, Proposal, ReplicaState,
    ReplicatedSnapshot, Role, Store, StoreError, FIELD_NAMESPACES_SETTING, REQUESTED_STATE_SETTING,
    SNAPSHOT_FORMAT,
};

const HASH_A: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHQ$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
const HASH_B: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$b3RoZXJzYWx0$BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBA";

fn at(i: u32) -> String {
    format!("2024-05-01T12:{:02}:{:02}.000Z", i / 60, i % 60)
}

fn prop(i: u32, change: Change) -> Proposal {
    Proposal {
        actor: "alice".into(),
        at: at(i),
        change,
    }
}

fn local(i: u32, change: LocalChange) -> Proposal<LocalChange> {
    Proposal {
        actor: "engine".into(),
        at: at(i),
        change,
    }
}

fn pos(index: u64) -> LogPosition {
    LogPosition {
        index,
        term: 2,
        leader: 7,
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

fn install_time() -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2024, 6, 1, 0, 0, 0).unwrap()
}

async fn log_len(store: &Store) -> usize {
    store.change_log_since(0, 10_000).await.unwrap().len()
}

#[tokio::test]
async fn fresh_store_has_applied_nothing() {
    let (_dir, _path, store) = open_temp().await;
    assert_eq!(
        store.replica_state().await.unwrap(),
        ReplicaState::default()
    );
}

#[tokio::test]
async fn entry_applied_twice_changes_the_store_once() {
    let (_dir, _path, store) = open_temp().await;
    let entry = prop(1, add_user("alice", HASH_A, Role::Admin));
    let first = store.apply_at(pos(1), entry.clone()).await.unwrap();
    assert!(
        matches!(first, LogApplied::Applied { seq: 1, epoch: 1 }),
        "{first:?}"
    );

    // The same entry again, and an older one: skipped, nothing written.
    let again = store.apply_at(pos(1), entry).await.unwrap();
    assert!(matches!(again, LogApplied::AlreadyApplied), "{again:?}");
    let bump = prop(2, Change::BumpEpoch);
    let older = store.apply_at(pos(0), bump.clone()).await.unwrap();
    assert!(matches!(older, LogApplied::AlreadyApplied), "{older:?}");
    assert_eq!(store.epoch().await.unwrap(), 1);
    assert_eq!(log_len(&store).await, 1);
    assert_eq!(
        store.replica_state().await.unwrap().last_applied,
        Some(pos(1))
    );

    // BumpEpoch is not idempotent in itself; at a log position it is.
    for _ in 0..3 {
        store.apply_at(pos(2), bump.clone()).await.unwrap();
    }
    assert_eq!(store.epoch().await.unwrap(), 2);
    assert_eq!(log_len(&store).await, 2);
}

#[tokio::test]
async fn refused_change_advances_last_applied_and_writes_nothing_else() {
    let (_dir, _path, store) = open_temp().await;
    store
        .apply_at(pos(1), prop(1, add_user("alice", HASH_A, Role::Admin)))
        .await
        .unwrap();
    store
        .apply_at(pos(2), prop(2, set("a.b", "1")))
        .await
        .unwrap();
    let before = store.export_snapshot().await.unwrap();
    let log_before = log_len(&store).await;

    // Refused inside the transaction (after reads): the last admin.
    let demote = Change::SetRole {
        name: "alice".into(),
        role: Role::Viewer,
    };
    let out = store.apply_at(pos(3), prop(3, demote)).await.unwrap();
    assert!(
        matches!(&out, LogApplied::Refused(StoreError::Invalid { .. })),
        "{out:?}"
    );
    // Refused by validation, before any transaction: a node-local key.
    let out = store
        .apply_at(pos(4), prop(4, set(REQUESTED_STATE_SETTING, "x")))
        .await
        .unwrap();
    assert!(
        matches!(&out, LogApplied::Refused(e) if e.is_refusal()),
        "{out:?}"
    );
    // Refused after a write that is rolled back: a taken name.
    let out = store
        .apply_at(pos(5), prop(5, add_user("alice", HASH_B, Role::Viewer)))
        .await
        .unwrap();
    assert!(
        matches!(&out, LogApplied::Refused(StoreError::UserExists(n)) if n == "alice"),
        "{out:?}"
    );

    let after = store.export_snapshot().await.unwrap();
    assert_eq!(after.last_applied, Some(pos(5)));
    assert_eq!(
        ReplicatedSnapshot {
            last_applied: before.last_applied,
            ..after
        },
        before,
        "a refusal changes nothing but last_applied"
    );
    assert_eq!(log_len(&store).await, log_before);

    // A refused entry replayed is skipped, not refused again.
    let out = store
        .apply_at(pos(5), prop(5, add_user("alice", HASH_B, Role::Viewer)))
        .await
        .unwrap();
    assert!(matches!(out, LogApplied::AlreadyApplied), "{out:?}");
}

#[tokio::test]
async fn record_applied_keeps_membership_and_skips_old_entries() {
    let (_dir, _path, store) = open_temp().await;
    let members = json!({"log_id": {"index": 1}, "voters": [1, 2]});
    assert!(store.record_applied(pos(1), Some(&members)).await.unwrap());
    assert!(store.record_applied(pos(2), None).await.unwrap());
    assert!(!store.record_applied(pos(2), None).await.unwrap());
    let newer = json!({"voters": [3]});
    assert!(!store.record_applied(pos(1), Some(&newer)).await.unwrap());
    assert_eq!(
        store.replica_state().await.unwrap(),
        ReplicaState {
            last_applied: Some(pos(2)),
            membership: Some(members),
        }
    );
    assert_eq!(
        log_len(&store).await,
        0,
        "positions are not configuration changes"
    );
}

#[tokio::test]
async fn applied_entry_and_position_survive_a_restart_together() {
    let (dir, path, store) = open_temp().await;
    let members = json!({"voters": [1, 2]});
    store.record_applied(pos(1), Some(&members)).await.unwrap();
    store
        .apply_at(pos(2), prop(2, add_user("alice", HASH_A, Role::Admin)))
        .await
        .unwrap();
    store.close().await;
    drop(store);

    let store = Store::open(&path).await.unwrap();
    assert_eq!(
        store.replica_state().await.unwrap(),
        ReplicaState {
            last_applied: Some(pos(2)),
            membership: Some(members),
        }
    );
    assert_eq!(
        store.list_users().await.unwrap(),
        vec![("alice".to_owned(), Role::Admin)]
    );
    // Replaying the log from the start after the restart changes nothing.
    let out = store
        .apply_at(pos(2), prop(2, add_user("alice", HASH_A, Role::Admin)))
        .await
        .unwrap();
    assert!(matches!(out, LogApplied::AlreadyApplied), "{out:?}");
    assert_eq!(log_len(&store).await, 1);
    drop(dir);
}

/// Fills `store` through the log: two users, a trusted and an issuer
/// certificate, a CRL, replicated settings and an epoch bump, plus a
/// membership; returns the trusted certificate.
async fn fill_leader(store: &Store) -> Vec<u8> {
    let trusted = make_cert("Plant SCADA", "urn:plant:scada");
    let (ca, key) = make_ca();
    let crl = make_crl(&ca, &key, 5);
    let changes = vec![
        add_user("alice", HASH_A, Role::Admin),
        add_user("bob", HASH_B, Role::Operator),
        Change::TrustAdd {
            der: trusted.clone(),
            kind: CertKind::Trusted,
        },
        Change::TrustAdd {
            der: ca.der().to_vec(),
            kind: CertKind::Issuer,
        },
        Change::AddCrl {
            der: crl.der().to_vec(),
        },
        set("server.max_session_count", "50"),
        set("isolation.mode", "balanced"),
        Change::BumpEpoch,
    ];
    store
        .record_applied(pos(1), Some(&json!({"voters": [1, 2]})))
        .await
        .unwrap();
    for (i, change) in changes.into_iter().enumerate() {
        let i = u32::try_from(i).unwrap() + 2;
        let out = store
            .apply_at(pos(i.into()), prop(i, change))
            .await
            .unwrap();
        assert!(matches!(out, LogApplied::Applied { .. }), "{out:?}");
    }
    // Node-local rows of the leader, never in a snapshot.
    store
        .apply(local(
            40,
            LocalChange::RecordRejected {
                der: make_cert("Intruder", "urn:intruder"),
                by: None,
                report: false,
            },
        ))
        .await
        .unwrap();
    store
        .apply(local(
            41,
            LocalChange::SetSetting {
                key: REQUESTED_STATE_SETTING.into(),
                value: "maintenance".into(),
            },
        ))
        .await
        .unwrap();
    trusted
}

#[tokio::test]
async fn export_is_deterministic_and_holds_only_replicated_state() {
    let (_dir, _path, store) = open_temp().await;
    fill_leader(&store).await;
    let snap = store.export_snapshot().await.unwrap();
    assert_eq!(snap.format, SNAPSHOT_FORMAT);
    assert_eq!(snap.last_applied, Some(pos(9)));
    assert_eq!(snap.membership, Some(json!({"voters": [1, 2]})));
    assert_eq!(snap.epoch, 2);
    assert_eq!(snap.users.len(), 2);
    assert_eq!(snap.users[0].password_hash.as_str(), HASH_A);
    assert_eq!(snap.certs.len(), 2, "no rejected certificate");
    assert_eq!(snap.crls.len(), 1);
    let keys: Vec<_> = snap.settings.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, ["isolation.mode", "server.max_session_count"]);

    let bytes = snap.to_bytes().unwrap();
    assert_eq!(
        store.export_snapshot().await.unwrap().to_bytes().unwrap(),
        bytes
    );
    assert_eq!(ReplicatedSnapshot::from_bytes(&bytes).unwrap(), snap);
}

#[tokio::test]
async fn install_replaces_replicated_state_and_keeps_node_local_rows() {
    let (_dl, _pl, leader) = open_temp().await;
    let trusted = fill_leader(&leader).await;
    let bytes = leader.export_snapshot().await.unwrap().to_bytes().unwrap();

    // The follower has its own state: replicated rows the snapshot drops,
    // and node-local rows it must keep — among them the leader's trusted
    // certificate, which the follower had rejected earlier.
    let (_df, _pf, follower) = open_temp().await;
    follower
        .apply(prop(1, add_user("carol", HASH_B, Role::Admin)))
        .await
        .unwrap();
    follower
        .apply(prop(
            2,
            Change::TrustAdd {
                der: make_cert("Old HMI", "urn:old:hmi"),
                kind: CertKind::Trusted,
            },
        ))
        .await
        .unwrap();
    follower
        .apply(prop(3, set("stale.key", "1")))
        .await
        .unwrap();
    let own_rejected = make_cert("Scanner", "urn:scanner");
    follower
        .apply(local(
            4,
            LocalChange::RecordRejected {
                der: own_rejected.clone(),
                by: None,
                report: false,
            },
        ))
        .await
        .unwrap();
    follower
        .apply(local(
            5,
            LocalChange::RecordRejected {
                der: trusted.clone(),
                by: None,
                report: false,
            },
        ))
        .await
        .unwrap();
    follower
        .apply(local(
            6,
            LocalChange::SetSetting {
                key: FIELD_NAMESPACES_SETTING.into(),
                value: "{\"line1\":3}".into(),
            },
        ))
        .await
        .unwrap();
    let log_before = log_len(&follower).await;

    let snapshot = ReplicatedSnapshot::from_bytes(&bytes).unwrap();
    follower
        .install_snapshot(&snapshot, "pair", install_time())
        .await
        .unwrap();

    // Replicated state equal, except the node-local observation times of
    // the certificate the follower held before.
    let mut got = follower.export_snapshot().await.unwrap();
    let mut want = leader.export_snapshot().await.unwrap();
    for certs in [&mut got.certs, &mut want.certs] {
        for c in certs.iter_mut() {
            if c.der == trusted {
                c.first_seen.clear();
                c.last_seen.clear();
            }
        }
    }
    assert_eq!(got, want);
    assert_eq!(
        follower.replica_state().await.unwrap().last_applied,
        Some(pos(9))
    );
    assert_eq!(follower.epoch().await.unwrap(), 2);
    assert_eq!(
        follower.list_users().await.unwrap(),
        vec![
            ("alice".into(), Role::Admin),
            ("bob".into(), Role::Operator)
        ]
    );

    // Node-local rows kept.
    let rejected = follower.certs(CertKind::Rejected).await.unwrap();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].der, own_rejected);
    let listed = follower.certs(CertKind::Trusted).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].der, trusted);
    assert_eq!(listed[0].first_seen, at(5), "first seen here, as rejected");
    assert_eq!(
        follower
            .setting(FIELD_NAMESPACES_SETTING)
            .await
            .unwrap()
            .as_deref(),
        Some("{\"line1\":3}")
    );
    assert_eq!(
        follower.setting(REQUESTED_STATE_SETTING).await.unwrap(),
        None
    );
    assert_eq!(follower.setting("stale.key").await.unwrap(), None);
    let log = follower.change_log_since(0, 10_000).await.unwrap();
    assert_eq!(
        log.len(),
        log_before + 1,
        "the log is kept, one entry added"
    );
    let last = log.last().unwrap();
    assert_eq!(last.kind, "snapshot.install");
    assert_eq!(last.actor, "pair");
    assert_eq!(last.epoch, 2);

    // Applying continues after the snapshot's position.
    let out = follower
        .apply_at(pos(9), prop(9, Change::BumpEpoch))
        .await
        .unwrap();
    assert!(matches!(out, LogApplied::AlreadyApplied), "{out:?}");
    let out = follower
        .apply_at(pos(10), prop(10, Change::BumpEpoch))
        .await
        .unwrap();
    assert!(matches!(out, LogApplied::Applied { .. }), "{out:?}");
}

#[tokio::test]
async fn corrupt_or_unknown_snapshots_are_refused_and_change_nothing() {
    let (_dl, _pl, leader) = open_temp().await;
    fill_leader(&leader).await;
    let good = leader.export_snapshot().await.unwrap();

    let (_df, _pf, follower) = open_temp().await;
    follower
        .apply_at(pos(1), prop(1, add_user("carol", HASH_B, Role::Admin)))
        .await
        .unwrap();
    let before = follower.export_snapshot().await.unwrap();
    let log_before = log_len(&follower).await;

    // Unknown format, from the bytes and from a value.
    let mut value = serde_json::to_value(&good).unwrap();
    value["format"] = json!(2);
    let err = ReplicatedSnapshot::from_bytes(value.to_string().as_bytes()).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::SnapshotFormat {
                found: 2,
                supported: 1
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("format 2 is not supported"),
        "{err}"
    );
    let future = ReplicatedSnapshot {
        format: 2,
        ..good.clone()
    };
    let err = follower
        .install_snapshot(&future, "pair", install_time())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::SnapshotFormat { .. }), "{err:?}");

    // Bytes that do not decode.
    let bytes = good.to_bytes().unwrap();
    for corrupt in [
        &bytes[..bytes.len() / 2],
        b"not json".as_slice(),
        b"{\"format\":1}".as_slice(),
    ] {
        let err = ReplicatedSnapshot::from_bytes(corrupt).unwrap_err();
        assert!(matches!(err, StoreError::SnapshotInvalid(_)), "{err:?}");
    }
    let mut extra = value.clone();
    extra["format"] = json!(1);
    extra["rejected"] = json!([]);
    let err = ReplicatedSnapshot::from_bytes(extra.to_string().as_bytes()).unwrap_err();
    assert!(matches!(err, StoreError::SnapshotInvalid(_)), "{err:?}");

    // Decodes, but the content is invalid: refused before any write, even
    // when the bad row comes after good ones.
    let mut broken_cert = good.clone();
    broken_cert.certs[1].der.truncate(10);
    let mut node_local = good.clone();
    node_local.settings.push(uagate_store::SnapshotSetting {
        key: REQUESTED_STATE_SETTING.into(),
        value: "maintenance".into(),
        updated_at: at(1),
    });
    let mut twice = good.clone();
    twice.users.push(twice.users[0].clone());
    let mut rejected = good.clone();
    rejected.certs[0].kind = CertKind::Rejected;
    let mut bad_hash = good.clone();
    bad_hash.users[1].password_hash = PasswordHash::new("plaintext");
    let mut no_epoch = good.clone();
    no_epoch.epoch = 0;
    for bad in [broken_cert, node_local, twice, rejected, bad_hash, no_epoch] {
        let err = follower
            .install_snapshot(&bad, "pair", install_time())
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::SnapshotInvalid(_)), "{err:?}");
    }

    assert_eq!(follower.export_snapshot().await.unwrap(), before);
    assert_eq!(log_len(&follower).await, log_before);
    assert_eq!(
        follower.list_users().await.unwrap(),
        vec![("carol".into(), Role::Admin)]
    );
}
