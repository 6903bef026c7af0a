//! Integration tests of the store against real SQLite files in temp dirs.
#![allow(clippy::unwrap_used)] // unwrap is fine in tests

mod common;

use common::{make_ca, make_cert, make_crl, open_temp};
use std::path::{Path, PathBuf};

use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use uagate_store::{CertKind, Role, Store, StoreError, REJECTED_CAP};

const PW: &str = "Correct-Horse-42";

async fn log_len(store: &Store) -> usize {
    store.change_log_since(0, 10_000).await.unwrap().len()
}

/// Raw bytes of the database file plus its WAL, for "no clear text" checks.
fn raw_db_bytes(path: &Path) -> Vec<u8> {
    let mut all = std::fs::read(path).unwrap();
    for suffix in ["-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        if let Ok(b) = std::fs::read(PathBuf::from(p)) {
            all.extend(b);
        }
    }
    all
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn settings_reads_several_keys_in_order() {
    let (_dir, _path, store) = open_temp().await;
    store.set_setting("t", "a.one", "1").await.unwrap();
    store.set_setting("t", "c.three", "3").await.unwrap();
    assert_eq!(
        store
            .settings(&["c.three", "b.two", "a.one"])
            .await
            .unwrap(),
        vec![Some("3".to_string()), None, Some("1".to_string())]
    );
    assert!(store.settings(&[]).await.unwrap().is_empty());
}

#[tokio::test]
async fn opens_in_wal_mode_with_epoch_one() {
    let (_dir, path, store) = open_temp().await;
    assert_eq!(store.journal_mode().await.unwrap(), "wal");
    assert_eq!(store.epoch().await.unwrap(), 1);
    assert_eq!(store.last_seq().await.unwrap(), 0);

    // An independent connection sees WAL too (it is persistent in the file).
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(SqliteConnectOptions::new().filename(&path))
        .await
        .unwrap();
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    pool.close().await;
}

#[tokio::test]
async fn each_change_logs_exactly_once_and_failures_log_nothing() {
    let (_dir, _path, store) = open_temp().await;

    store
        .add_user("root", "alice", PW, Role::Admin)
        .await
        .unwrap();
    assert_eq!(log_len(&store).await, 1);

    // Duplicate user: error, no log entry.
    let err = store.add_user("root", "alice", PW, Role::Viewer).await;
    assert!(matches!(err, Err(StoreError::UserExists(ref n)) if n == "alice"));
    assert_eq!(log_len(&store).await, 1);

    // Invalid input: error, no log entry.
    for (name, pw) in [("", PW), ("bob", "short"), ("bad name", PW)] {
        let err = store.add_user("root", name, pw, Role::Viewer).await;
        assert!(matches!(err, Err(StoreError::Invalid { .. })), "{name:?}");
    }
    assert_eq!(log_len(&store).await, 1);

    store
        .add_user("alice", "bob", PW, Role::Viewer)
        .await
        .unwrap();
    store
        .set_role("alice", "bob", Role::Operator)
        .await
        .unwrap();
    store
        .set_password("alice", "bob", "another-password")
        .await
        .unwrap();
    store
        .set_setting("alice", "opcua.port", "4840")
        .await
        .unwrap();
    store
        .set_setting("alice", "opcua.port", "4841")
        .await
        .unwrap();
    store.delete_user("alice", "bob").await.unwrap();
    let epoch = store.bump_epoch("pair").await.unwrap();
    assert_eq!(epoch, 2);

    // Failing changes on missing things / last admin: no log entries.
    assert!(matches!(
        store.delete_user("alice", "bob").await,
        Err(StoreError::UnknownUser(_))
    ));
    assert!(matches!(
        store.set_password("alice", "nobody", PW).await,
        Err(StoreError::UnknownUser(_))
    ));
    assert!(matches!(
        store.set_role("alice", "alice", Role::Viewer).await,
        Err(StoreError::Invalid { .. })
    ));
    assert!(matches!(
        store.delete_user("alice", "alice").await,
        Err(StoreError::Invalid { .. })
    ));
    assert!(matches!(
        store.set_setting("alice", "Bad Key", "x").await,
        Err(StoreError::Invalid { .. })
    ));
    assert!(matches!(
        store.trust_remove("alice", &"0".repeat(40)).await,
        Err(StoreError::UnknownCert(_))
    ));

    let log = store.change_log_since(0, 100).await.unwrap();
    let kinds: Vec<&str> = log.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "user.add",
            "user.add",
            "user.role",
            "user.password",
            "setting.set",
            "setting.set",
            "user.delete",
            "epoch.bump"
        ]
    );
    // Strictly increasing seq, epoch stamped, RFC 3339 UTC timestamps, JSON payloads.
    for w in log.windows(2) {
        assert!(w[0].seq < w[1].seq);
    }
    assert!(log[..7].iter().all(|e| e.epoch == 1));
    assert_eq!(log[7].epoch, 2);
    for e in &log {
        assert!(e.at.ends_with('Z'), "{}", e.at);
        chrono::DateTime::parse_from_rfc3339(&e.at).unwrap();
        let v: serde_json::Value = serde_json::from_str(&e.payload).unwrap();
        assert!(v.is_object());
    }
    assert_eq!(log[1].actor, "alice");
    assert_eq!(
        store.setting("opcua.port").await.unwrap().as_deref(),
        Some("4841")
    );
    assert_eq!(store.setting("missing").await.unwrap(), None);
    // A setting change records the value it replaced (the audit's before/after).
    let first: serde_json::Value = serde_json::from_str(&log[4].payload).unwrap();
    let second: serde_json::Value = serde_json::from_str(&log[5].payload).unwrap();
    assert_eq!(first["before"], serde_json::Value::Null);
    assert_eq!(second["before"], "4840");
    assert_eq!(second["value"], "4841");
    assert_eq!(
        store.user_role("alice").await.unwrap(),
        Some(uagate_store::Role::Admin)
    );
    assert_eq!(store.user_role("nobody").await.unwrap(), None);

    // Paging.
    let page = store.change_log_since(log[2].seq, 2).await.unwrap();
    assert_eq!(page.len(), 2);
    assert_eq!(page[0].seq, log[3].seq);
    assert_eq!(store.last_seq().await.unwrap(), log[7].seq);

    // Operator events: only `event.` kinds, logged once.
    assert!(matches!(
        store
            .record_event("alice", "user.add", &serde_json::json!({}))
            .await,
        Err(StoreError::Invalid { .. })
    ));
    let seq = store
        .record_event("alice", "event.test", &serde_json::json!({"n": 1}))
        .await
        .unwrap();
    assert_eq!(store.last_seq().await.unwrap(), seq);
    assert_eq!(log_len(&store).await, 9);
}

#[tokio::test]
async fn verify_user_right_wrong_unknown() {
    let (_dir, _path, store) = open_temp().await;
    store
        .add_user("setup", "alice", PW, Role::Operator)
        .await
        .unwrap();
    assert_eq!(
        store.verify_user("alice", PW).await.unwrap(),
        Some(Role::Operator)
    );
    assert_eq!(
        store.verify_user("alice", "wrong-password").await.unwrap(),
        None
    );
    assert_eq!(store.verify_user("mallory", PW).await.unwrap(), None);
    assert_eq!(store.verify_user("alice", "").await.unwrap(), None);

    store
        .set_password("setup", "alice", "brand-new-secret")
        .await
        .unwrap();
    assert_eq!(store.verify_user("alice", PW).await.unwrap(), None);
    assert_eq!(
        store
            .verify_user("alice", "brand-new-secret")
            .await
            .unwrap(),
        Some(Role::Operator)
    );
    assert_eq!(
        store.list_users().await.unwrap(),
        vec![("alice".to_owned(), Role::Operator)]
    );
}

#[tokio::test]
async fn passwords_never_stored_or_logged_in_clear() {
    let (_dir, path, store) = open_temp().await;
    let secret1 = "Sup3r-Secret-Pa55word";
    let secret2 = "Other-Secret-Pa55word";
    store
        .add_user("setup", "alice", secret1, Role::Admin)
        .await
        .unwrap();
    store.set_password("setup", "alice", secret2).await.unwrap();

    // Hash is argon2id and appears nowhere in the log.
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(SqliteConnectOptions::new().filename(&path))
        .await
        .unwrap();
    let hash: String = sqlx::query_scalar("SELECT password_hash FROM users WHERE name = 'alice'")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    assert!(hash.starts_with("$argon2id$"), "{hash}");

    for entry in store.change_log_since(0, 100).await.unwrap() {
        for needle in [secret1, secret2, hash.as_str(), "argon2"] {
            assert!(!entry.payload.contains(needle), "{}", entry.payload);
        }
    }
    let raw = raw_db_bytes(&path);
    assert!(contains(&raw, b"alice"), "sanity: raw scan sees data");
    assert!(!contains(&raw, secret1.as_bytes()));
    assert!(!contains(&raw, secret2.as_bytes()));
}

#[tokio::test]
async fn trust_add_then_status_and_pem() {
    let (_dir, _path, store) = open_temp().await;
    let der = make_cert("Peer A", "urn:test:peer-a");
    assert_eq!(store.cert_status(&der).await.unwrap(), None);

    let info = store
        .trust_add("alice", &der, CertKind::Trusted)
        .await
        .unwrap();
    assert_eq!(info.kind, CertKind::Trusted);
    assert_eq!(info.application_uri.as_deref(), Some("urn:test:peer-a"));
    assert!(info.subject.contains("CN=Peer A"), "{}", info.subject);
    assert_eq!(info.not_before, "2024-01-01T00:00:00Z");
    assert_eq!(info.not_after, "2034-01-01T00:00:00Z");
    assert_eq!(info.thumbprint.len(), 40);
    assert!(info
        .thumbprint
        .chars()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    assert_eq!(info.der, der);
    assert_eq!(
        store.cert_status(&der).await.unwrap(),
        Some(CertKind::Trusted)
    );

    let listed = store.certs(CertKind::Trusted).await.unwrap();
    assert_eq!(listed, vec![info.clone()]);
    assert!(store.certs(CertKind::Issuer).await.unwrap().is_empty());

    let log = store.change_log_since(0, 10).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].kind, "trust.add");
    let payload: serde_json::Value = serde_json::from_str(&log[0].payload).unwrap();
    assert_eq!(payload["thumbprint"], info.thumbprint.as_str());
    assert_eq!(payload["der"].as_str().unwrap(), hex::encode(&der));

    // PEM of another cert, as an issuer.
    let (ca, _key) = make_ca();
    let ca_info = store
        .trust_add_pem_or_der("alice", ca.pem().as_bytes(), CertKind::Issuer)
        .await
        .unwrap();
    assert_eq!(ca_info.der, ca.der().to_vec());
    assert_eq!(
        store.cert_status(ca.der()).await.unwrap(),
        Some(CertKind::Issuer)
    );
    // DER through the same entry point.
    let der_b = make_cert("Peer B", "urn:test:peer-b");
    store
        .trust_add_pem_or_der("alice", &der_b, CertKind::Trusted)
        .await
        .unwrap();
    assert_eq!(store.certs(CertKind::Trusted).await.unwrap().len(), 2);

    // Remove by upper-case, colon-separated thumbprint.
    let pretty = info
        .thumbprint
        .to_uppercase()
        .as_bytes()
        .chunks(2)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect::<Vec<_>>()
        .join(":");
    store.trust_remove("alice", &pretty).await.unwrap();
    assert_eq!(store.cert_status(&der).await.unwrap(), None);
    assert_eq!(log_len(&store).await, 4);
}

#[tokio::test]
async fn garbage_certificates_refused_without_log() {
    let (_dir, _path, store) = open_temp().await;
    let good = make_cert("Peer", "urn:test:peer");
    let mut truncated = good.clone();
    truncated.truncate(good.len() / 2);
    let mut trailing = good.clone();
    trailing.push(0);
    let garbage: [&[u8]; 5] = [
        b"",
        b"not a certificate",
        &truncated,
        &trailing,
        b"\x30\x00",
    ];
    for bad in garbage {
        assert!(matches!(
            store.trust_add("alice", bad, CertKind::Trusted).await,
            Err(StoreError::Invalid { .. })
        ));
        assert!(matches!(
            store
                .trust_add_pem_or_der("alice", bad, CertKind::Trusted)
                .await,
            Err(StoreError::Invalid { .. })
        ));
        assert!(matches!(
            store.record_rejected(bad).await,
            Err(StoreError::Invalid { .. })
        ));
    }
    assert!(matches!(
        store.trust_add("alice", &good, CertKind::Rejected).await,
        Err(StoreError::Invalid { .. })
    ));
    assert!(matches!(
        store.add_crl("alice", b"garbage").await,
        Err(StoreError::Invalid { .. })
    ));
    assert_eq!(log_len(&store).await, 0);
    assert!(store.certs(CertKind::Trusted).await.unwrap().is_empty());
    assert!(store.certs(CertKind::Rejected).await.unwrap().is_empty());
}

#[tokio::test]
async fn rejected_dedupes_and_trust_add_moves_it() {
    let (_dir, _path, store) = open_temp().await;
    let der = make_cert("Stranger", "urn:test:stranger");

    store.record_rejected(&der).await.unwrap();
    store.record_rejected(&der).await.unwrap();
    let rejected = store.certs(CertKind::Rejected).await.unwrap();
    assert_eq!(rejected.len(), 1);
    assert_eq!(
        store.cert_status(&der).await.unwrap(),
        Some(CertKind::Rejected)
    );
    let log = store.change_log_since(0, 10).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].kind, "trust.reject");
    assert_eq!(log[0].actor, "engine");

    let info = store
        .trust_add("alice", &der, CertKind::Trusted)
        .await
        .unwrap();
    assert_eq!(info.first_seen, rejected[0].first_seen);
    assert!(store.certs(CertKind::Rejected).await.unwrap().is_empty());
    assert_eq!(
        store.cert_status(&der).await.unwrap(),
        Some(CertKind::Trusted)
    );
    let log = store.change_log_since(0, 10).await.unwrap();
    assert_eq!(log.len(), 2);
    let payload: serde_json::Value = serde_json::from_str(&log[1].payload).unwrap();
    assert_eq!(payload["previous_kind"], "rejected");

    // Rejecting an already trusted cert changes nothing.
    store.record_rejected(&der).await.unwrap();
    assert_eq!(
        store.cert_status(&der).await.unwrap(),
        Some(CertKind::Trusted)
    );
    assert_eq!(log_len(&store).await, 2);
}

#[tokio::test]
async fn rejected_list_is_capped() {
    let (_dir, _path, store) = open_temp().await;
    // Straight through apply: the listing budget of record_rejected would
    // stop a flood this fast long before the cap (see the next test).
    let reject = |der: &Vec<u8>| {
        uagate_store::Proposal::now(
            "engine",
            uagate_store::LocalChange::RecordRejected {
                der: der.clone(),
                by: None,
                report: false,
            },
        )
    };
    let first = make_cert("Flood 0", "urn:test:flood:0");
    store.apply(reject(&first)).await.unwrap();
    let mut last = Vec::new();
    for i in 1..=REJECTED_CAP {
        last = make_cert(&format!("Flood {i}"), &format!("urn:test:flood:{i}"));
        store.apply(reject(&last)).await.unwrap();
    }
    let rejected = store.certs(CertKind::Rejected).await.unwrap();
    assert_eq!(rejected.len() as i64, REJECTED_CAP);
    // The oldest was dropped, the newest kept.
    assert_eq!(store.cert_status(&first).await.unwrap(), None);
    assert_eq!(
        store.cert_status(&last).await.unwrap(),
        Some(CertKind::Rejected)
    );
}

#[tokio::test]
async fn crls_added_replaced_and_refused_when_older() {
    let (_dir, _path, store) = open_temp().await;
    let (ca, key) = make_ca();
    let crl5 = make_crl(&ca, &key, 5);
    // A CRL of no CA on the lists is refused, nothing stored: it would
    // take the place of the real CA's CRL of the same name.
    let refused = store.add_crl("alice", crl5.der()).await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("add the CA's certificate first"),
        "{refused}"
    );
    assert!(store.crls().await.unwrap().is_empty());
    store
        .trust_add("alice", ca.der(), CertKind::Issuer)
        .await
        .unwrap();
    // One whose thisUpdate lies ahead (a wrong clock) is refused too: it
    // would not be in force, and the CA's certificates would be refused.
    let ahead = rcgen::CertificateRevocationListParams {
        this_update: rcgen::date_time_ymd(2099, 1, 1),
        next_update: rcgen::date_time_ymd(2099, 2, 1),
        crl_number: rcgen::SerialNumber::from(99u64),
        issuing_distribution_point: None,
        revoked_certs: vec![],
        key_identifier_method: rcgen::KeyIdMethod::Sha256,
    }
    .signed_by(&ca, &key)
    .unwrap();
    let refused = store.add_crl("alice", ahead.der()).await.unwrap_err();
    assert!(refused.to_string().contains("in the future"), "{refused}");
    store.add_crl("alice", crl5.der()).await.unwrap();
    assert_eq!(store.crls().await.unwrap(), vec![crl5.der().to_vec()]);

    // Newer one via PEM replaces it.
    let crl9 = make_crl(&ca, &key, 9);
    store
        .add_crl("alice", crl9.pem().unwrap().as_bytes())
        .await
        .unwrap();
    assert_eq!(store.crls().await.unwrap(), vec![crl9.der().to_vec()]);

    // Older one is refused.
    assert!(matches!(
        store.add_crl("alice", crl5.der()).await,
        Err(StoreError::Invalid { .. })
    ));
    let kinds: Vec<String> = store
        .change_log_since(0, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["trust.add", "crl.add", "crl.add"]);
}

#[tokio::test]
async fn reopen_keeps_data() {
    let (_dir, path, store) = open_temp().await;
    let der = make_cert("Peer", "urn:test:peer");
    store
        .add_user("setup", "alice", PW, Role::Admin)
        .await
        .unwrap();
    store
        .trust_add("alice", &der, CertKind::Trusted)
        .await
        .unwrap();
    store
        .set_setting("alice", "site.name", "Hall 3")
        .await
        .unwrap();
    store.bump_epoch("pair").await.unwrap();
    let log_before = store.change_log_since(0, 100).await.unwrap();
    store.close().await;
    drop(store);

    let store = Store::open(&path).await.unwrap();
    assert_eq!(
        store.verify_user("alice", PW).await.unwrap(),
        Some(Role::Admin)
    );
    assert_eq!(
        store.cert_status(&der).await.unwrap(),
        Some(CertKind::Trusted)
    );
    assert_eq!(
        store.setting("site.name").await.unwrap().as_deref(),
        Some("Hall 3")
    );
    assert_eq!(store.epoch().await.unwrap(), 2);
    assert_eq!(store.change_log_since(0, 100).await.unwrap(), log_before);

    // Sequence continues after reopen.
    store
        .set_setting("alice", "site.name", "Hall 4")
        .await
        .unwrap();
    let log = store.change_log_since(0, 100).await.unwrap();
    assert_eq!(log.len(), log_before.len() + 1);
    assert!(log[log.len() - 1].seq > log_before[log_before.len() - 1].seq);
}

#[tokio::test]
async fn change_log_is_append_only_at_the_sql_level() {
    let (_dir, path, store) = open_temp().await;
    store.set_setting("alice", "a", "1").await.unwrap();
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(SqliteConnectOptions::new().filename(&path))
        .await
        .unwrap();
    assert!(sqlx::query("UPDATE change_log SET actor = 'x'")
        .execute(&pool)
        .await
        .is_err());
    assert!(sqlx::query("DELETE FROM change_log")
        .execute(&pool)
        .await
        .is_err());
    pool.close().await;
    assert_eq!(log_len(&store).await, 1);
}

#[tokio::test]
async fn concurrent_writers_all_succeed() {
    let (_dir, _path, store) = open_temp().await;
    let mut tasks = Vec::new();
    for t in 0..8 {
        let s = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..10 {
                s.set_setting("alice", &format!("k{t}"), &i.to_string())
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(log_len(&store).await, 80);
}

#[tokio::test]
async fn the_filtered_change_log_matches_actor_kind_time_and_sequence_in_sql() {
    use chrono::{TimeZone, Utc};
    use uagate_store::{LocalChange, LogFilter, LogOrder, Proposal};
    let (_dir, _path, store) = open_temp().await;
    let at = |h: u32, m: u32| Utc.with_ymd_and_hms(2025, 3, 1, h, m, 0).unwrap();
    let event = |kind: &str| LocalChange::Event {
        kind: kind.to_string(),
        payload: "{}".to_string(),
    };
    for (actor, kind, when) in [
        ("alice", "event.field_failover", at(8, 0)),
        ("bob", "event.fieldXfailover", at(9, 0)),
        ("alice", "event.session_close", at(10, 0)),
        ("bob", "event.field_reconnect", at(11, 0)),
        ("alice", "event.service_level", at(12, 0)),
    ] {
        store
            .apply(Proposal::new(actor, when, event(kind)))
            .await
            .unwrap();
    }
    let kinds = |entries: Vec<uagate_store::ChangeLogEntry>| -> Vec<String> {
        entries.into_iter().map(|e| e.kind).collect()
    };
    let all = store
        .change_log_filtered(&LogFilter::default(), LogOrder::NewestFirst, 100)
        .await
        .unwrap();
    assert_eq!(all.len(), 5);
    assert!(all.windows(2).all(|w| w[0].seq > w[1].seq), "newest first");

    // `_` in a prefix is a plain character, not a LIKE wildcard.
    let filter = LogFilter {
        kind_prefixes: vec!["event.field_".into()],
        ..LogFilter::default()
    };
    assert_eq!(
        kinds(
            store
                .change_log_filtered(&filter, LogOrder::OldestFirst, 100)
                .await
                .unwrap()
        ),
        ["event.field_failover", "event.field_reconnect"]
    );
    // Several prefixes, one actor.
    let filter = LogFilter {
        actor: Some("alice".into()),
        kind_prefixes: vec!["event.field_".into(), "event.service".into()],
        ..LogFilter::default()
    };
    assert_eq!(
        kinds(
            store
                .change_log_filtered(&filter, LogOrder::NewestFirst, 100)
                .await
                .unwrap()
        ),
        ["event.service_level", "event.field_failover"]
    );
    // From inclusive, to exclusive.
    let filter = LogFilter {
        from: Some(at(9, 0)),
        to: Some(at(11, 0)),
        ..LogFilter::default()
    };
    assert_eq!(
        kinds(
            store
                .change_log_filtered(&filter, LogOrder::OldestFirst, 100)
                .await
                .unwrap()
        ),
        ["event.fieldXfailover", "event.session_close"]
    );
    // Paging by sequence number in both directions, and the limit.
    let filter = LogFilter {
        before_seq: Some(all[1].seq),
        ..LogFilter::default()
    };
    let older = store
        .change_log_filtered(&filter, LogOrder::NewestFirst, 2)
        .await
        .unwrap();
    assert_eq!(
        kinds(older),
        ["event.session_close", "event.fieldXfailover"]
    );
    let filter = LogFilter {
        after_seq: Some(all[2].seq),
        ..LogFilter::default()
    };
    let newer = store
        .change_log_filtered(&filter, LogOrder::OldestFirst, 100)
        .await
        .unwrap();
    assert_eq!(
        kinds(newer),
        ["event.field_reconnect", "event.service_level"]
    );
}

/// User names: letters and digits of any script; one user whatever the
/// case or the Unicode form of its name, for adding, changing and logging
/// in; a password of white space only is refused.
#[tokio::test]
async fn user_names_are_unicode_and_one_user_in_any_case() {
    let (_dir, _path, store) = open_temp().await;
    // Precomposed ü, and an admin so that others can be demoted.
    assert_eq!(
        store
            .add_user("root", "Jürgen", PW, Role::Admin)
            .await
            .unwrap(),
        "Jürgen"
    );
    assert_eq!(
        store
            .add_user("root", " otto ", PW, Role::Operator)
            .await
            .unwrap(),
        "otto",
        "stored without the white space around it"
    );
    for (taken, existing) in [
        ("OTTO", "otto"),
        ("Otto", "otto"),
        ("JÜRGEN", "Jürgen"),
        // u followed by a combining diaeresis: the same name.
        ("Ju\u{308}rgen", "Jürgen"),
    ] {
        match store.add_user("root", taken, PW, Role::Viewer).await {
            Err(StoreError::UserExists(n)) => assert_eq!(n, existing, "{taken}"),
            other => panic!("{taken}: {other:?}"),
        }
    }
    for good in ["Øyvind", "Σοφία", "Дмитрий", "李小龙", "jane.doe@plant-1"] {
        store
            .add_user("root", good, PW, Role::Viewer)
            .await
            .unwrap();
    }
    for bad in [
        "bad name",
        "zero\u{200d}width",
        "tab\there",
        "semi;colon",
        "",
    ] {
        assert!(
            matches!(
                store.add_user("root", bad, PW, Role::Viewer).await,
                Err(StoreError::Invalid { ref setting, .. }) if setting == "name"
            ),
            "{bad:?}"
        );
    }
    // Passwords of white space only, however long.
    for blank in [
        "        ",
        "\t\t\t\t\t\t\t\t",
        "\u{3000}\u{3000}  \u{a0}   ",
    ] {
        for refused in [
            store
                .add_user("root", "blank", blank, Role::Viewer)
                .await
                .err(),
            store.set_password("root", "otto", blank).await.err(),
        ] {
            assert!(
                matches!(refused, Some(StoreError::Invalid { ref setting, .. }) if setting == "password"),
                "{blank:?}: {refused:?}"
            );
        }
    }
    // Logging in by any case gives the stored name.
    let login = store.login("OTTO", PW).await.unwrap().unwrap();
    assert_eq!((login.name.as_str(), login.role), ("otto", Role::Operator));
    let login = store.login("jürgen", PW).await.unwrap().unwrap();
    assert_eq!(login.name, "Jürgen");
    assert_eq!(store.login("OTTO", "wrong-password").await.unwrap(), None);
    // Changes find the user by any case, and log the stored name.
    store.set_role("root", "OTTO", Role::Viewer).await.unwrap();
    store
        .set_password("root", "Otto", "otto-pass-2")
        .await
        .unwrap();
    assert!(store.login("otto", "otto-pass-2").await.unwrap().is_some());
    store.delete_user("root", "oTTo").await.unwrap();
    assert_eq!(store.user_role("otto").await.unwrap(), None);
    let log = store.change_log_since(0, 100).await.unwrap();
    let last: Vec<(&str, &str)> = log
        .iter()
        .rev()
        .take(3)
        .map(|e| (e.kind.as_str(), e.payload.as_str()))
        .collect();
    for (kind, payload) in last {
        assert!(payload.contains("\"name\":\"otto\""), "{kind}: {payload}");
    }
    // The last admin, in any case.
    match store.delete_user("root", "JÜRGEN").await {
        Err(StoreError::Invalid { message, .. }) => {
            assert!(
                message.contains("cannot remove Jürgen, the last admin"),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
}

/// Names that differ only in case, stored before names were compared that
/// way, stay: each logs in and is changed by its exact name; another case
/// of them is ambiguous and refused, naming both.
#[tokio::test]
async fn names_differing_only_in_case_from_before_stay_apart() {
    let (_dir, path, store) = open_temp().await;
    store
        .add_user("root", "otto", PW, Role::Admin)
        .await
        .unwrap();
    // As an older version could store them: a second row by hand.
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(SqliteConnectOptions::new().filename(&path))
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO users (name, password_hash, role, created_at, updated_at) \
         SELECT 'OTTO', password_hash, 'viewer', created_at, updated_at FROM users \
         WHERE name = 'otto'",
    )
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
    assert_eq!(
        store.login("otto", PW).await.unwrap().unwrap().role,
        Role::Admin
    );
    assert_eq!(
        store.login("OTTO", PW).await.unwrap().unwrap().role,
        Role::Viewer
    );
    assert_eq!(store.login("Otto", PW).await.unwrap(), None);
    match store.set_role("root", "Otto", Role::Operator).await {
        Err(StoreError::Invalid { message, .. }) => {
            assert!(message.contains("OTTO, otto"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    store.delete_user("root", "OTTO").await.unwrap();
    assert_eq!(
        store.list_users().await.unwrap(),
        [("otto".to_string(), Role::Admin)]
    );
}

/// A user's credential stamp changes when the password is set (which ends
/// their console sessions), not when the role changes.
#[tokio::test]
async fn the_credential_stamp_changes_with_the_password_only() {
    let (_dir, _path, store) = open_temp().await;
    store
        .add_user("root", "ada", PW, Role::Admin)
        .await
        .unwrap();
    store
        .add_user("root", "bob", PW, Role::Viewer)
        .await
        .unwrap();
    let stamp = |name: &'static str| {
        let store = store.clone();
        async move { store.user_standing(name).await.unwrap().unwrap().stamp }
    };
    let at_login = store.login("bob", PW).await.unwrap().unwrap().stamp;
    assert_eq!(stamp("bob").await, at_login);
    assert_ne!(stamp("ada").await, at_login, "each user has their own");
    store.set_role("root", "bob", Role::Operator).await.unwrap();
    assert_eq!(stamp("bob").await, at_login);
    // The same password again is a new hash (a new salt): a new stamp.
    store.set_password("root", "bob", PW).await.unwrap();
    assert_ne!(stamp("bob").await, at_login);
    assert_eq!(store.user_standing("nobody").await.unwrap(), None);
}

/// Trusting a rejected certificate by its thumbprint, in any case and with
/// colons; a thumbprint on no rejected list is unknown.
#[tokio::test]
async fn a_rejected_certificate_is_approved_by_its_thumbprint() {
    let (_dir, _path, store) = open_temp().await;
    let der = make_cert("Stranger", "urn:test:stranger");
    store.record_rejected(&der).await.unwrap();
    let thumbprint = store.certs(CertKind::Rejected).await.unwrap()[0]
        .thumbprint
        .clone();
    let typed = thumbprint
        .to_uppercase()
        .as_bytes()
        .chunks(2)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect::<Vec<_>>()
        .join(":");
    let info = store.approve_rejected("alice", &typed).await.unwrap();
    assert_eq!(info.thumbprint, thumbprint);
    assert_eq!(info.kind, CertKind::Trusted);
    assert_eq!(
        store.cert_status(&der).await.unwrap(),
        Some(CertKind::Trusted)
    );
    // Trusted now, so no longer a rejected one.
    assert!(matches!(
        store.approve_rejected("alice", &thumbprint).await,
        Err(StoreError::UnknownCert(ref t)) if *t == thumbprint
    ));
    assert!(matches!(
        store.approve_rejected("alice", "12:34").await,
        Err(StoreError::Invalid { ref setting, .. }) if setting == "thumbprint"
    ));
}

/// An update that is rolled back leaves its newer migrations in the
/// database (the data partition is shared by both image slots): this build
/// still opens it, keeps what is stored and takes changes, instead of
/// refusing to start with a "migration missing" error.
#[tokio::test]
async fn a_database_migrated_by_a_newer_build_still_opens() {
    let (_dir, path, store) = open_temp().await;
    store
        .add_user("root", "alice", PW, Role::Admin)
        .await
        .unwrap();
    store.close().await;
    // What a newer build's additive migration leaves behind.
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(SqliteConnectOptions::new().filename(&path))
        .await
        .unwrap();
    sqlx::query("ALTER TABLE users ADD COLUMN from_the_future TEXT")
        .execute(&pool)
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

    let store = Store::open(&path).await.unwrap();
    let users = store.list_users().await.unwrap();
    assert_eq!(users, vec![("alice".to_string(), Role::Admin)]);
    store
        .add_user("root", "bob", PW, Role::Viewer)
        .await
        .unwrap();
    assert_eq!(store.list_users().await.unwrap().len(), 2);
}

/// A pair's stand-in for the tests below: takes the reports of refused
/// certificates, replicates nothing.
#[derive(Default)]
struct Reports(std::sync::Mutex<Vec<Vec<u8>>>);

impl uagate_store::Replicator for Reports {
    fn propose(&self, _: uagate_store::Proposal<uagate_store::Change>) -> uagate_store::Replicated {
        Box::pin(async { Err(StoreError::Replication("not in this test".into())) })
    }

    fn report_rejected(&self, der: Vec<u8>) {
        self.0.lock().unwrap().push(der);
    }
}

/// On a paired appliance a certificate refused for the first time waits
/// to be reported to the primary until the pair says it is listed there,
/// across a restart; a standalone appliance reports nothing.
#[tokio::test]
async fn a_refused_certificate_waits_for_its_report_across_a_restart() {
    let (_dir, path, store) = open_temp().await;
    let alone = make_cert("Alone", "urn:test:alone");
    store.record_rejected(&alone).await.unwrap();
    assert!(store.rejected_unreported(64).await.unwrap().is_empty());

    let reports = std::sync::Arc::new(Reports::default());
    store.set_replicator(Some(reports.clone()));
    let first = make_cert("First", "urn:test:first");
    let second = make_cert("Second", "urn:test:second");
    store.record_rejected(&first).await.unwrap();
    store.record_rejected(&second).await.unwrap();
    store.record_rejected(&first).await.unwrap();
    assert_eq!(
        *reports.0.lock().unwrap(),
        vec![first.clone(), second.clone()]
    );
    store.close().await;

    let store = Store::open(&path).await.unwrap();
    assert_eq!(
        store.rejected_unreported(64).await.unwrap(),
        vec![first.clone(), second.clone()]
    );
    assert_eq!(
        store.rejected_unreported(1).await.unwrap(),
        vec![first.clone()]
    );
    store.rejected_reported(&first).await.unwrap();
    assert_eq!(store.rejected_unreported(64).await.unwrap(), vec![second]);
    // Silent: no change-log entry for the bookkeeping.
    let log = store.change_log_since(0, 100).await.unwrap();
    assert_eq!(log.iter().filter(|e| e.kind == "trust.reject").count(), 3);
    assert_eq!(log.len(), 3);
}

/// The primary lists a certificate the other appliance refused with that
/// appliance's pair address; refusing it here as well adds this
/// appliance, and a later report never takes it away.
#[tokio::test]
async fn the_primary_says_which_appliance_refused_a_certificate() {
    let (_dir, _path, store) = open_temp().await;
    let der = make_cert("Visitor", "urn:test:visitor");
    store
        .record_rejected_by(&der, "10.0.3.12:4850")
        .await
        .unwrap();
    let listed = store.certs(CertKind::Rejected).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(!listed[0].refused_here);
    assert_eq!(listed[0].refused_by.as_deref(), Some("10.0.3.12:4850"));
    let log = store.change_log_since(0, 100).await.unwrap();
    assert_eq!(log.len(), 1);
    assert!(
        log[0].payload.contains("\"refused_by\":\"10.0.3.12:4850\""),
        "{}",
        log[0].payload
    );

    store.record_rejected(&der).await.unwrap();
    store
        .record_rejected_by(&der, "10.0.3.12:4850")
        .await
        .unwrap();
    let listed = store.certs(CertKind::Rejected).await.unwrap();
    assert!(listed[0].refused_here);
    assert_eq!(listed[0].refused_by.as_deref(), Some("10.0.3.12:4850"));
    // Nothing waits to be reported: the primary listed it itself.
    assert!(store.rejected_unreported(64).await.unwrap().is_empty());

    let err = store.record_rejected_by(&der, "").await.unwrap_err();
    assert!(err.to_string().contains("by"), "{err}");
}

/// A flood of new certificates (anyone can present one per connection)
/// lists the first NEW_REJECTED_BURST and counts the rest without a row or
/// a change-log entry; a certificate already listed is still refreshed,
/// and garbage costs no listing.
#[tokio::test]
async fn a_flood_of_new_certificates_lists_a_burst_and_counts_the_rest() {
    let (_dir, _path, store) = open_temp().await;
    let burst = uagate_store::NEW_REJECTED_BURST as usize;
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = |i: usize| {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, format!("Flood {i}"));
        p.self_signed(&key).unwrap().der().to_vec()
    };
    for _ in 0..5 {
        assert!(store.record_rejected(b"not a certificate").await.is_err());
    }
    let certs: Vec<Vec<u8>> = (0..burst + 50).map(cert).collect();
    for c in &certs {
        store.record_rejected(c).await.unwrap();
    }
    assert_eq!(
        store.certs(CertKind::Rejected).await.unwrap().len(),
        burst,
        "the burst is listed, no more"
    );
    assert_eq!(log_len(&store).await, burst);
    let unlisted = store.unlisted_rejections();
    assert_eq!(unlisted.total, 50);
    assert!(unlisted.last.is_some());
    assert_eq!(store.cert_status(&certs[burst]).await.unwrap(), None);
    // One already listed is refreshed while the budget is dry.
    store.record_rejected(&certs[0]).await.unwrap();
    assert_eq!(store.unlisted_rejections().total, 50);
    assert_eq!(log_len(&store).await, burst);
}

/// A rejected certificate presented again refreshes its last sighting at
/// most once a minute: a client retrying every second does not cost a
/// synced write every second.
#[tokio::test]
async fn a_retrying_client_refreshes_its_last_sighting_once_a_minute() {
    let (_dir, _path, store) = open_temp().await;
    let der = make_cert("Retrier", "urn:test:retrier");
    store
        .apply(uagate_store::Proposal {
            actor: "engine".into(),
            at: "2026-01-02T03:04:05.000Z".into(),
            change: uagate_store::LocalChange::RecordRejected {
                der: der.clone(),
                by: None,
                report: false,
            },
        })
        .await
        .unwrap();
    let last_seen = |store: Store| async move {
        store.certs(CertKind::Rejected).await.unwrap()[0]
            .last_seen
            .clone()
    };
    // Longer ago than a minute: refreshed.
    store.record_rejected(&der).await.unwrap();
    let refreshed = last_seen(store.clone()).await;
    assert_ne!(refreshed, "2026-01-02T03:04:05.000Z");
    // Again at once: left as it is.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    store.record_rejected(&der).await.unwrap();
    assert_eq!(last_seen(store.clone()).await, refreshed);
}

/// A CRL larger than a pair replicates in time is refused when added,
/// before anything is stored.
#[tokio::test]
async fn a_crl_too_large_to_replicate_is_refused() {
    let (_dir, _path, store) = open_temp().await;
    let (ca, key) = make_ca();
    store
        .trust_add("alice", ca.der(), CertKind::Issuer)
        .await
        .unwrap();
    let big = rcgen::CertificateRevocationListParams {
        this_update: rcgen::date_time_ymd(2024, 1, 1),
        next_update: rcgen::date_time_ymd(2024, 2, 1),
        crl_number: rcgen::SerialNumber::from(1u64),
        issuing_distribution_point: None,
        revoked_certs: (1_000_000u64..1_012_000)
            .map(|s| rcgen::RevokedCertParams {
                serial_number: rcgen::SerialNumber::from(s),
                revocation_time: rcgen::date_time_ymd(2023, 6, 1),
                reason_code: None,
                invalidity_date: None,
            })
            .collect(),
        key_identifier_method: rcgen::KeyIdMethod::Sha256,
    }
    .signed_by(&ca, &key)
    .unwrap();
    assert!(
        big.der().len() > uagate_store::MAX_CRL_ADDED,
        "{}",
        big.der().len()
    );
    let refused = store.add_crl("alice", big.der()).await.unwrap_err();
    assert!(refused.to_string().contains("replicated"), "{refused}");
    assert!(store.crls().await.unwrap().is_empty());
}
