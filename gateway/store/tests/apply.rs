//! The one write path: `Store::apply` of every change value, against real
//! SQLite files in temp dirs.
#![allow(clippy::unwrap_used)] // unwrap is fine in tests

mod common;

use common::{make_ca, make_cert, make_crl, open_temp};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use uagate_store::{
    setting_scope, Applied, CertKind, Change, ChangeLogEntry, LocalChange, LocalProposal,
    PasswordHash, Proposal, Role, Scope, Store, StoreError, CONFIG_NODE_SETTING,
    FIELD_NAMESPACES_SETTING, REQUESTED_STATE_SETTING,
};

/// Well-formed argon2id PHC strings (not the hash of any password used here:
/// apply checks the form, the proposer computes real ones).
const HASH_A: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHQ$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
const HASH_B: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$b3RoZXJzYWx0$BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBA";

/// The `i`-th second of a fixed day, in the one form apply accepts.
fn at(i: u32) -> String {
    format!("2024-05-01T12:{:02}:{:02}.{:03}Z", i / 60, i % 60, i % 1000)
}

fn prop(actor: &str, i: u32, change: Change) -> Proposal {
    Proposal {
        actor: actor.into(),
        at: at(i),
        change,
    }
}

fn local(actor: &str, i: u32, change: LocalChange) -> LocalProposal {
    Proposal {
        actor: actor.into(),
        at: at(i),
        change,
    }
}

fn add_user(name: &str, hash: &str, role: Role) -> Change {
    Change::AddUser {
        name: name.into(),
        password_hash: PasswordHash::new(hash),
        role,
    }
}

fn set_setting(key: &str, value: &str) -> Change {
    Change::SetSetting {
        key: key.into(),
        value: value.into(),
    }
}

fn thumbprint(der: &[u8]) -> String {
    use sha1::Digest;
    hex::encode(sha1::Sha1::digest(der))
}

/// The tables apply writes, with their columns, in a stable order.
const TABLES: [(&str, &str, &str); 6] = [
    ("meta", "id, epoch", "id"),
    (
        "users",
        "name, password_hash, role, created_at, updated_at",
        "name",
    ),
    (
        "certs",
        "thumbprint, kind, subject, application_uri, not_before, not_after, hex(der), \
         first_seen, last_seen",
        "thumbprint",
    ),
    (
        "crls",
        "issuer, thumbprint, this_update, next_update, hex(der), added_at",
        "issuer",
    ),
    ("settings", "key, value, updated_at", "key"),
    (
        "change_log",
        "seq, epoch, actor, at, kind, payload, scope",
        "seq",
    ),
];

/// Every row of every table apply writes, as JSON text per table, read over
/// an independent connection.
async fn dump(path: &Path) -> Vec<(&'static str, String)> {
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(SqliteConnectOptions::new().filename(path))
        .await
        .unwrap();
    let mut out = Vec::new();
    for (table, columns, order) in TABLES {
        let sql = format!(
            "SELECT COALESCE(json_group_array(json_array({columns})), '[]') \
             FROM (SELECT * FROM {table} ORDER BY {order})"
        );
        let rows: String = sqlx::query_scalar(&sql).fetch_one(&pool).await.unwrap();
        out.push((table, rows));
    }
    pool.close().await;
    out
}

/// [`dump`] without the change log.
async fn rows(path: &Path) -> Vec<(&'static str, String)> {
    let mut all = dump(path).await;
    all.retain(|(t, _)| *t != "change_log");
    all
}

async fn log(store: &Store) -> Vec<ChangeLogEntry> {
    store.change_log_since(0, 10_000).await.unwrap()
}

fn payload(e: &ChangeLogEntry) -> Value {
    serde_json::from_str(&e.payload).unwrap()
}

/// A result compared across stores: the log position and epoch, or the
/// refusal's message.
fn outcome(r: &Result<Applied, StoreError>) -> Result<(Option<i64>, i64), String> {
    match r {
        Ok(a) => Ok((a.seq, a.epoch)),
        Err(e) => Err(e.to_string()),
    }
}

#[tokio::test]
async fn apply_each_change_kind_writes_its_rows_and_one_entry() {
    let (_dir, _path, store) = open_temp().await;
    let der = make_cert("Peer A", "urn:test:peer-a");
    let tp = thumbprint(&der);
    let (ca, key) = make_ca();
    let crl = make_crl(&ca, &key, 5);

    let a = store
        .apply(prop("setup", 1, add_user("alice", HASH_A, Role::Admin)))
        .await
        .unwrap();
    assert_eq!((a.seq, a.epoch, a.cert.clone()), (Some(1), 1, None));
    assert_eq!(
        store.list_users().await.unwrap(),
        [("alice".to_owned(), Role::Admin)]
    );
    store
        .apply(prop("alice", 2, add_user("bob", HASH_A, Role::Viewer)))
        .await
        .unwrap();
    store
        .apply(prop(
            "alice",
            3,
            Change::SetPassword {
                name: "bob".into(),
                password_hash: PasswordHash::new(HASH_B),
            },
        ))
        .await
        .unwrap();
    store
        .apply(prop(
            "alice",
            4,
            Change::SetRole {
                name: "bob".into(),
                role: Role::Operator,
            },
        ))
        .await
        .unwrap();
    assert_eq!(store.user_role("bob").await.unwrap(), Some(Role::Operator));
    store
        .apply(prop("alice", 5, Change::DeleteUser { name: "bob".into() }))
        .await
        .unwrap();
    assert_eq!(store.user_role("bob").await.unwrap(), None);

    let a = store
        .apply(prop(
            "alice",
            6,
            Change::TrustAdd {
                der: der.clone(),
                kind: CertKind::Trusted,
            },
        ))
        .await
        .unwrap();
    let cert = a.cert.unwrap();
    assert_eq!(
        (
            cert.thumbprint.as_str(),
            cert.kind,
            cert.first_seen.as_str()
        ),
        (tp.as_str(), CertKind::Trusted, at(6).as_str())
    );
    assert_eq!(store.certs(CertKind::Trusted).await.unwrap(), [cert]);
    store
        .apply(prop(
            "alice",
            7,
            Change::TrustRemove {
                thumbprint: tp.to_uppercase(),
            },
        ))
        .await
        .unwrap();
    assert_eq!(store.cert_status(&der).await.unwrap(), None);

    store
        .apply(prop(
            "alice",
            8,
            Change::AddCrl {
                der: crl.der().to_vec(),
            },
        ))
        .await
        .unwrap();
    assert_eq!(store.crls().await.unwrap(), [crl.der().to_vec()]);
    store
        .apply(prop("alice", 9, set_setting("site.name", "Hall 3")))
        .await
        .unwrap();
    assert_eq!(
        store.setting("site.name").await.unwrap().as_deref(),
        Some("Hall 3")
    );
    let a = store
        .apply(prop("pair", 10, Change::BumpEpoch))
        .await
        .unwrap();
    assert_eq!((a.seq, a.epoch), (Some(10), 2));
    assert_eq!(store.epoch().await.unwrap(), 2);
    let a = store
        .apply(prop(
            "alice",
            11,
            Change::Event {
                kind: "event.test".into(),
                payload: r#"{"n": 1}"#.into(),
            },
        ))
        .await
        .unwrap();
    assert_eq!((a.seq, a.epoch), (Some(11), 2));

    // One entry per change, stamped with the proposal's actor and time.
    let log = log(&store).await;
    let expected: [(&str, &str, Value); 11] = [
        (
            "setup",
            "user.add",
            json!({"name": "alice", "role": "admin"}),
        ),
        (
            "alice",
            "user.add",
            json!({"name": "bob", "role": "viewer"}),
        ),
        ("alice", "user.password", json!({"name": "bob"})),
        (
            "alice",
            "user.role",
            json!({"name": "bob", "role": "operator", "previous": "viewer"}),
        ),
        ("alice", "user.delete", json!({"name": "bob"})),
        (
            "alice",
            "trust.add",
            json!({
                "thumbprint": tp, "kind": "trusted", "previous_kind": null,
                "subject": "CN=Peer A", "application_uri": "urn:test:peer-a",
                "not_before": "2024-01-01T00:00:00Z", "not_after": "2034-01-01T00:00:00Z",
                "der": hex::encode(&der),
            }),
        ),
        (
            "alice",
            "trust.remove",
            json!({"thumbprint": tp, "kind": "trusted"}),
        ),
        (
            "alice",
            "crl.add",
            json!({
                "issuer": "CN=Test CA", "thumbprint": thumbprint(crl.der()),
                "this_update": "2024-01-05T00:00:00Z", "next_update": "2024-02-05T00:00:00Z",
                "der": hex::encode(crl.der()),
            }),
        ),
        (
            "alice",
            "setting.set",
            json!({"key": "site.name", "value": "Hall 3", "before": null}),
        ),
        ("pair", "epoch.bump", json!({"epoch": 2})),
        ("alice", "event.test", json!({"n": 1})),
    ];
    assert_eq!(log.len(), expected.len());
    for (i, (e, (actor, kind, body))) in log.iter().zip(expected).enumerate() {
        let n = u32::try_from(i).unwrap() + 1;
        assert_eq!(e.seq, i64::from(n));
        assert_eq!(e.epoch, if n < 10 { 1 } else { 2 }, "{e:?}");
        assert_eq!((e.actor.as_str(), e.kind.as_str()), (actor, kind));
        assert_eq!(e.at, at(n));
        assert_eq!(e.scope, Scope::Replicated);
        assert_eq!(payload(e), body, "{kind}");
    }
    // The event's payload is logged as the proposer wrote it.
    assert_eq!(log[10].payload, r#"{"n": 1}"#);
    // No password hash in the log.
    assert!(log
        .iter()
        .all(|e| !e.payload.contains(HASH_A) && !e.payload.contains(HASH_B)));
}

#[tokio::test]
async fn local_changes_apply_through_the_same_path_marked_local() {
    let (_dir, path, store) = open_temp().await;
    let der = make_cert("Stranger", "urn:test:stranger");
    let tp = thumbprint(&der);

    let a = store
        .apply(local(
            "engine",
            1,
            LocalChange::RecordRejected {
                der: der.clone(),
                by: None,
                report: false,
            },
        ))
        .await
        .unwrap();
    assert_eq!((a.seq, a.epoch), (Some(1), 1));
    let rejected = store.certs(CertKind::Rejected).await.unwrap();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].first_seen, at(1));
    // A repeat refreshes last_seen only: no log entry.
    let a = store
        .apply(local(
            "engine",
            2,
            LocalChange::RecordRejected {
                der: der.clone(),
                by: None,
                report: false,
            },
        ))
        .await
        .unwrap();
    assert_eq!((a.seq, a.epoch), (None, 1));
    let certs = &dump(&path).await[2].1;
    assert!(
        certs.contains(&format!(r#""{}","{}"]"#, at(1), at(2))),
        "{certs}"
    );

    store
        .apply(local(
            "alice",
            3,
            LocalChange::RemoveRejected {
                thumbprint: tp.clone(),
            },
        ))
        .await
        .unwrap();
    assert_eq!(store.cert_status(&der).await.unwrap(), None);
    store
        .apply(local(
            "alice",
            4,
            LocalChange::SetSetting {
                key: REQUESTED_STATE_SETTING.into(),
                value: "{}".into(),
            },
        ))
        .await
        .unwrap();
    assert_eq!(
        store
            .setting(REQUESTED_STATE_SETTING)
            .await
            .unwrap()
            .as_deref(),
        Some("{}")
    );

    let log = log(&store).await;
    let got: Vec<(&str, &str, Scope, Value)> = log
        .iter()
        .map(|e| (e.actor.as_str(), e.kind.as_str(), e.scope, payload(e)))
        .collect();
    assert_eq!(
        got,
        [
            (
                "engine",
                "trust.reject",
                Scope::Local,
                json!({
                    "thumbprint": tp, "subject": "CN=Stranger",
                    "application_uri": "urn:test:stranger",
                    "not_before": "2024-01-01T00:00:00Z", "not_after": "2034-01-01T00:00:00Z",
                })
            ),
            (
                "alice",
                "trust.remove",
                Scope::Local,
                json!({"thumbprint": tp, "kind": "rejected"})
            ),
            (
                "alice",
                "setting.set",
                Scope::Local,
                json!({"key": REQUESTED_STATE_SETTING, "value": "{}", "before": null})
            ),
        ]
    );
}

#[tokio::test]
async fn proposers_pick_the_scope() {
    let (_dir, _path, store) = open_temp().await;
    assert_eq!(setting_scope(REQUESTED_STATE_SETTING), Scope::Local);
    assert_eq!(setting_scope(FIELD_NAMESPACES_SETTING), Scope::Local);
    assert_eq!(setting_scope(CONFIG_NODE_SETTING), Scope::Local);
    assert_eq!(setting_scope("config.document"), Scope::Replicated);

    let der = make_cert("Stranger", "urn:test:stranger");
    let other = make_ca().0.der().to_vec();
    store.record_rejected(&der).await.unwrap();
    store
        .trust_remove("alice", &thumbprint(&der))
        .await
        .unwrap();
    store
        .trust_add("alice", &other, CertKind::Issuer)
        .await
        .unwrap();
    store
        .trust_remove("alice", &thumbprint(&other))
        .await
        .unwrap();
    store
        .set_setting("engine", REQUESTED_STATE_SETTING, "{}")
        .await
        .unwrap();
    store
        .set_setting("gateway", FIELD_NAMESPACES_SETTING, "[]")
        .await
        .unwrap();
    store
        .set_setting("alice", "config.document", "")
        .await
        .unwrap();
    store
        .record_event("alice", "event.test", &json!({}))
        .await
        .unwrap();
    store.bump_epoch("pair").await.unwrap();

    let got: Vec<(String, Scope)> = log(&store)
        .await
        .into_iter()
        .map(|e| (e.kind, e.scope))
        .collect();
    let want = [
        ("trust.reject", Scope::Local),
        ("trust.remove", Scope::Local),
        ("trust.add", Scope::Replicated),
        ("trust.remove", Scope::Replicated),
        ("setting.set", Scope::Local),
        ("setting.set", Scope::Local),
        ("setting.set", Scope::Replicated),
        // An operator action is audited by the appliance it was done to.
        ("event.test", Scope::Local),
        ("epoch.bump", Scope::Replicated),
    ]
    .map(|(k, s)| (k.to_owned(), s));
    assert_eq!(got, want);
    // The proposers stamp the time in the one form apply accepts.
    for e in log(&store).await {
        let t = chrono::DateTime::parse_from_rfc3339(&e.at).unwrap();
        assert_eq!(
            e.at,
            t.to_utc()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        );
    }
}

/// One step of a scripted history: a replicated or a node-local proposal.
#[derive(Clone)]
enum Step {
    R(Proposal),
    L(LocalProposal),
}

async fn run(store: &Store, steps: &[Step]) -> Vec<Result<(Option<i64>, i64), String>> {
    let mut out = Vec::new();
    for step in steps.iter().cloned() {
        let r = match step {
            Step::R(p) => store.apply(p).await,
            Step::L(p) => store.apply(p).await,
        };
        out.push(outcome(&r));
    }
    out
}

/// A history touching every table, with refusals in it.
fn history() -> Vec<Step> {
    let peer = make_cert("Peer", "urn:test:peer");
    let stranger = make_cert("Stranger", "urn:test:stranger");
    let (ca, key) = make_ca();
    let crl5 = make_crl(&ca, &key, 5);
    let crl9 = make_crl(&ca, &key, 9);
    use Step::{L, R};
    vec![
        R(prop("setup", 1, add_user("alice", HASH_A, Role::Admin))),
        R(prop("alice", 2, add_user("bob", HASH_A, Role::Viewer))),
        R(prop("alice", 3, add_user("bob", HASH_B, Role::Admin))), // taken
        R(prop(
            "alice",
            4,
            Change::SetPassword {
                name: "bob".into(),
                password_hash: PasswordHash::new(HASH_B),
            },
        )),
        R(prop(
            "alice",
            5,
            Change::SetRole {
                name: "alice".into(),
                role: Role::Viewer,
            },
        )), // last admin
        R(prop(
            "alice",
            6,
            Change::TrustAdd {
                der: peer.clone(),
                kind: CertKind::Trusted,
            },
        )),
        L(local(
            "engine",
            7,
            LocalChange::RecordRejected {
                der: stranger.clone(),
                by: None,
                report: false,
            },
        )),
        L(local(
            "engine",
            8,
            LocalChange::RecordRejected {
                der: stranger.clone(),
                by: None,
                report: false,
            },
        )),
        R(prop(
            "alice",
            9,
            Change::TrustAdd {
                der: stranger.clone(),
                kind: CertKind::Issuer,
            },
        )),
        R(prop(
            "alice",
            10,
            Change::AddCrl {
                der: crl9.der().to_vec(),
            },
        )),
        R(prop(
            "alice",
            11,
            Change::AddCrl {
                der: crl5.der().to_vec(),
            },
        )), // older
        R(prop("alice", 12, set_setting("site.name", "Hall 3"))),
        R(prop("alice", 13, set_setting("site.name", "Hall 4"))),
        L(local(
            "alice",
            14,
            LocalChange::SetSetting {
                key: REQUESTED_STATE_SETTING.into(),
                value: r#"{"state":1}"#.into(),
            },
        )),
        R(prop("pair", 15, Change::BumpEpoch)),
        R(prop(
            "alice",
            16,
            Change::TrustRemove {
                thumbprint: thumbprint(&peer),
            },
        )),
        R(prop(
            "alice",
            17,
            Change::Event {
                kind: "event.session_close".into(),
                payload: r#"{"session":7}"#.into(),
            },
        )),
        R(prop("alice", 18, Change::DeleteUser { name: "bob".into() })),
        R(prop("alice", 19, Change::DeleteUser { name: "bob".into() })), // gone
    ]
}

#[tokio::test]
async fn same_proposals_give_identical_stores() {
    let (_d1, path1, one) = open_temp().await;
    let (_d2, path2, two) = open_temp().await;
    let steps = history();
    let first = run(&one, &steps).await;
    let second = run(&two, &steps).await;
    assert_eq!(first, second);
    assert_eq!(first.iter().filter(|r| r.is_err()).count(), 4, "{first:?}");

    let (rows1, rows2) = (dump(&path1).await, dump(&path2).await);
    assert_eq!(rows1, rows2);
    // Sanity: the dump sees every table filled.
    for (table, text) in &rows1 {
        assert_ne!(text, "[]", "{table}");
    }
    // The change logs are identical too: seq, epoch, actor, at, kind,
    // payload and scope.
    let (log1, log2) = (log(&one).await, log(&two).await);
    assert_eq!(log1, log2);
    assert_eq!(log1.len(), 14);
}

#[tokio::test]
async fn replicated_outcomes_do_not_depend_on_node_local_state() {
    let (_d1, path1, plain) = open_temp().await;
    let (_d2, path2, busy) = open_temp().await;
    let stranger = make_cert("Stranger", "urn:test:stranger");
    let peer = make_cert("Peer", "urn:test:peer");
    // Only `busy` has seen the stranger and been put into maintenance.
    busy.apply(local(
        "engine",
        1,
        LocalChange::RecordRejected {
            der: stranger.clone(),
            by: None,
            report: false,
        },
    ))
    .await
    .unwrap();
    busy.apply(local(
        "alice",
        2,
        LocalChange::SetSetting {
            key: REQUESTED_STATE_SETTING.into(),
            value: "{}".into(),
        },
    ))
    .await
    .unwrap();

    let steps = [
        // The stranger is on `busy`'s rejected list only: unknown to both.
        prop(
            "alice",
            3,
            Change::TrustRemove {
                thumbprint: thumbprint(&stranger),
            },
        ),
        prop(
            "alice",
            4,
            set_setting(REQUESTED_STATE_SETTING, "{\"state\":2}"),
        ),
        prop("setup", 5, add_user("alice", HASH_A, Role::Admin)),
        prop(
            "alice",
            6,
            Change::TrustAdd {
                der: peer.clone(),
                kind: CertKind::Trusted,
            },
        ),
        prop(
            "alice",
            7,
            Change::TrustAdd {
                der: stranger.clone(),
                kind: CertKind::Trusted,
            },
        ),
        prop("alice", 8, set_setting("site.name", "Hall 3")),
    ];
    let mut outcomes = Vec::new();
    for p in steps {
        let a = plain.apply(p.clone()).await;
        let b = busy.apply(p).await;
        assert_eq!(a.is_ok(), b.is_ok(), "{a:?} / {b:?}");
        if let (Err(a), Err(b)) = (&a, &b) {
            assert_eq!(a.to_string(), b.to_string());
        }
        outcomes.push(a.is_ok());
    }
    assert_eq!(outcomes, [false, false, true, true, true, true]);

    // The replicated state is the same; `first_seen`/`last_seen` are local
    // observations, the rejected list and the local settings local state.
    let replicated = |path: PathBuf| async move {
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(SqliteConnectOptions::new().filename(&path))
            .await
            .unwrap();
        let mut out = Vec::new();
        for sql in [
            "SELECT json_group_array(json_array(epoch)) FROM meta",
            "SELECT json_group_array(json_array(name, password_hash, role, created_at, \
             updated_at)) FROM (SELECT * FROM users ORDER BY name)",
            "SELECT json_group_array(json_array(thumbprint, kind, subject, hex(der))) \
             FROM (SELECT * FROM certs WHERE kind <> 'rejected' ORDER BY thumbprint)",
            "SELECT json_group_array(json_array(key, value, updated_at)) \
             FROM (SELECT * FROM settings WHERE key <> 'server.requested_state' ORDER BY key)",
            "SELECT json_group_array(json_array(epoch, actor, at, kind, \
             json_remove(payload, '$.previous_kind'))) \
             FROM (SELECT * FROM change_log WHERE scope = 'replicated' ORDER BY seq)",
        ] {
            let rows: String = sqlx::query_scalar(sql).fetch_one(&pool).await.unwrap();
            out.push(rows);
        }
        pool.close().await;
        out
    };
    assert_eq!(replicated(path1).await, replicated(path2).await);
    // What differs is local and marked so.
    let busy_log = log(&busy).await;
    assert_eq!(
        busy_log
            .iter()
            .filter(|e| e.scope == Scope::Local)
            .map(|e| e.kind.as_str())
            .collect::<Vec<_>>(),
        ["trust.reject", "setting.set"]
    );
    let moved = busy_log
        .iter()
        .rev()
        .find(|e| e.kind == "trust.add")
        .unwrap();
    assert_eq!(payload(moved)["previous_kind"], "rejected");
}

/// The refusal a proposal is expected to meet.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    Invalid,
    UnknownUser,
    UnknownCert,
    UserExists,
}

impl Refusal {
    fn matches(self, r: Result<Applied, StoreError>) -> bool {
        match self {
            Refusal::Invalid => matches!(r, Err(StoreError::Invalid { .. })),
            Refusal::UnknownUser => matches!(r, Err(StoreError::UnknownUser(_))),
            Refusal::UnknownCert => matches!(r, Err(StoreError::UnknownCert(_))),
            Refusal::UserExists => matches!(r, Err(StoreError::UserExists(_))),
        }
    }
}

#[tokio::test]
async fn refused_changes_write_nothing() {
    let (_dir, path, store) = open_temp().await;
    let peer = make_cert("Peer", "urn:test:peer");
    let stranger = make_cert("Stranger", "urn:test:stranger");
    let (ca, key) = make_ca();
    let crl5 = make_crl(&ca, &key, 5);
    let crl9 = make_crl(&ca, &key, 9);
    for p in [
        prop("setup", 1, add_user("alice", HASH_A, Role::Admin)),
        prop("alice", 2, add_user("bob", HASH_A, Role::Viewer)),
        prop(
            "alice",
            3,
            Change::TrustAdd {
                der: peer.clone(),
                kind: CertKind::Trusted,
            },
        ),
        prop(
            "alice",
            4,
            Change::AddCrl {
                der: crl9.der().to_vec(),
            },
        ),
        prop("alice", 5, set_setting("site.name", "Hall 3")),
    ] {
        store.apply(p).await.unwrap();
    }
    store
        .apply(local(
            "engine",
            6,
            LocalChange::RecordRejected {
                der: stranger.clone(),
                by: None,
                report: false,
            },
        ))
        .await
        .unwrap();
    let before = dump(&path).await;

    use Refusal::{Invalid, UnknownCert, UnknownUser, UserExists};
    let replicated: Vec<(Proposal, Refusal)> = vec![
        (
            prop("alice", 10, add_user("alice", HASH_B, Role::Viewer)),
            UserExists,
        ),
        (
            prop("alice", 10, add_user("bad name", HASH_A, Role::Viewer)),
            Invalid,
        ),
        (
            prop(
                "alice",
                10,
                add_user("carol", "Correct-Horse-42", Role::Viewer),
            ),
            Invalid,
        ),
        (
            prop(
                "alice",
                10,
                add_user(
                    "carol",
                    &HASH_A.replace("argon2id", "argon2i"),
                    Role::Viewer,
                ),
            ),
            Invalid,
        ),
        (
            prop(
                "alice",
                10,
                Change::SetPassword {
                    name: "nobody".into(),
                    password_hash: PasswordHash::new(HASH_B),
                },
            ),
            UnknownUser,
        ),
        (
            prop(
                "alice",
                10,
                Change::SetPassword {
                    name: "bob".into(),
                    password_hash: PasswordHash::new(""),
                },
            ),
            Invalid,
        ),
        (
            prop(
                "alice",
                10,
                Change::SetRole {
                    name: "nobody".into(),
                    role: Role::Admin,
                },
            ),
            UnknownUser,
        ),
        (
            prop(
                "alice",
                10,
                Change::SetRole {
                    name: "alice".into(),
                    role: Role::Operator,
                },
            ),
            Invalid,
        ),
        (
            prop(
                "alice",
                10,
                Change::DeleteUser {
                    name: "alice".into(),
                },
            ),
            Invalid,
        ),
        (
            prop(
                "alice",
                10,
                Change::DeleteUser {
                    name: "nobody".into(),
                },
            ),
            UnknownUser,
        ),
        (
            prop(
                "alice",
                10,
                Change::TrustAdd {
                    der: peer.clone(),
                    kind: CertKind::Rejected,
                },
            ),
            Invalid,
        ),
        (
            prop(
                "alice",
                10,
                Change::TrustAdd {
                    der: b"not a certificate".to_vec(),
                    kind: CertKind::Trusted,
                },
            ),
            Invalid,
        ),
        (
            prop(
                "alice",
                10,
                Change::TrustRemove {
                    thumbprint: "0".repeat(40),
                },
            ),
            UnknownCert,
        ),
        // On the rejected list only: not a replicated certificate.
        (
            prop(
                "alice",
                10,
                Change::TrustRemove {
                    thumbprint: thumbprint(&stranger),
                },
            ),
            UnknownCert,
        ),
        (
            prop(
                "alice",
                10,
                Change::TrustRemove {
                    thumbprint: "xyz".into(),
                },
            ),
            Invalid,
        ),
        (
            prop(
                "alice",
                10,
                Change::AddCrl {
                    der: crl5.der().to_vec(),
                },
            ),
            Invalid,
        ),
        // Apply takes DER; the proposer converts PEM.
        (
            prop(
                "alice",
                10,
                Change::AddCrl {
                    der: crl9.pem().unwrap().into_bytes(),
                },
            ),
            Invalid,
        ),
        (prop("alice", 10, set_setting("Bad Key", "x")), Invalid),
        (
            prop(
                "alice",
                10,
                set_setting("site.name", &"x".repeat(64 * 1024 + 1)),
            ),
            Invalid,
        ),
        (
            prop("alice", 10, set_setting(FIELD_NAMESPACES_SETTING, "[]")),
            Invalid,
        ),
        (
            prop(
                "alice",
                10,
                Change::Event {
                    kind: "user.add".into(),
                    payload: "{}".into(),
                },
            ),
            Invalid,
        ),
        (
            prop(
                "alice",
                10,
                Change::Event {
                    kind: "event.test".into(),
                    payload: "[1]".into(),
                },
            ),
            Invalid,
        ),
        (
            prop(
                "alice",
                10,
                Change::Event {
                    kind: "event.test".into(),
                    payload: "not json".into(),
                },
            ),
            Invalid,
        ),
        (prop("", 10, Change::BumpEpoch), Invalid),
        (prop("a\nb", 10, Change::BumpEpoch), Invalid),
    ];
    for (p, refusal) in replicated {
        let what = format!("{:?}", p.change);
        assert!(refusal.matches(store.apply(p).await), "{what}");
        assert_eq!(dump(&path).await, before, "{what}");
    }
    // The time must be in its one form.
    for when in [
        "yesterday",
        "2024-05-01T12:00:00Z",
        "2024-05-01T12:00:00.000000Z",
        "2024-05-01T14:00:00.000+02:00",
        "2024-05-01 12:00:00.000Z",
    ] {
        let p = Proposal {
            actor: "pair".into(),
            at: when.into(),
            change: Change::BumpEpoch,
        };
        assert!(Invalid.matches(store.apply(p).await), "{when}");
        assert_eq!(dump(&path).await, before, "{when}");
    }

    let locals: Vec<(LocalProposal, Refusal)> = vec![
        (
            local(
                "alice",
                10,
                LocalChange::RemoveRejected {
                    thumbprint: thumbprint(&peer),
                },
            ),
            UnknownCert,
        ),
        (
            local(
                "alice",
                10,
                LocalChange::SetSetting {
                    key: "site.name".into(),
                    value: "Hall 9".into(),
                },
            ),
            Invalid,
        ),
        (
            local(
                "engine",
                10,
                LocalChange::RecordRejected {
                    der: b"\x30\x00".to_vec(),
                    by: None,
                    report: false,
                },
            ),
            Invalid,
        ),
    ];
    for (p, refusal) in locals {
        let what = format!("{:?}", p.change);
        assert!(refusal.matches(store.apply(p).await), "{what}");
        assert_eq!(dump(&path).await, before, "{what}");
    }

    // Not a refusal, but nothing to do: a rejection of a trusted
    // certificate writes nothing either.
    let a = store
        .apply(local(
            "engine",
            10,
            LocalChange::RecordRejected {
                der: peer.clone(),
                by: None,
                report: false,
            },
        ))
        .await
        .unwrap();
    assert_eq!(a.seq, None);
    assert_eq!(dump(&path).await, before);
}

#[tokio::test]
async fn reapplying_a_proposal() {
    let (_dir, path, store) = open_temp().await;
    let peer = make_cert("Peer", "urn:test:peer");
    let stranger = make_cert("Stranger", "urn:test:stranger");
    let (ca, key) = make_ca();
    let crl = make_crl(&ca, &key, 5);
    store
        .apply(prop("setup", 1, add_user("alice", HASH_A, Role::Admin)))
        .await
        .unwrap();

    // Refused the second time, nothing written.
    let refused_again = [
        prop("alice", 2, add_user("bob", HASH_A, Role::Viewer)),
        prop("alice", 3, Change::DeleteUser { name: "bob".into() }),
        prop(
            "alice",
            4,
            Change::TrustAdd {
                der: stranger.clone(),
                kind: CertKind::Trusted,
            },
        ),
        prop(
            "alice",
            5,
            Change::TrustRemove {
                thumbprint: thumbprint(&stranger),
            },
        ),
    ];
    for (i, p) in refused_again.into_iter().enumerate() {
        store.apply(p.clone()).await.unwrap();
        let before = dump(&path).await;
        let again = store.apply(p.clone()).await;
        match i {
            0 => assert!(matches!(again, Err(StoreError::UserExists(_)))),
            1 => assert!(matches!(again, Err(StoreError::UnknownUser(_)))),
            2 => {
                // Puts the certificate there for the TrustRemove next; a
                // TrustAdd again is a same-rows change (below).
                assert!(again.is_ok());
                continue;
            }
            _ => assert!(matches!(again, Err(StoreError::UnknownCert(_)))),
        }
        assert_eq!(dump(&path).await, before, "{:?}", p.change);
    }

    // Same rows, one more log entry.
    let same_rows = [
        prop("alice", 10, add_user("carol", HASH_A, Role::Viewer)),
        prop(
            "alice",
            11,
            Change::SetPassword {
                name: "carol".into(),
                password_hash: PasswordHash::new(HASH_B),
            },
        ),
        prop(
            "alice",
            12,
            Change::SetRole {
                name: "carol".into(),
                role: Role::Operator,
            },
        ),
        prop(
            "alice",
            13,
            Change::TrustAdd {
                der: peer.clone(),
                kind: CertKind::Issuer,
            },
        ),
        prop(
            "alice",
            14,
            Change::AddCrl {
                der: crl.der().to_vec(),
            },
        ),
        prop("alice", 15, set_setting("site.name", "Hall 3")),
        prop(
            "alice",
            16,
            Change::Event {
                kind: "event.test".into(),
                payload: "{}".into(),
            },
        ),
    ];
    for (i, p) in same_rows.into_iter().enumerate() {
        store.apply(p.clone()).await.unwrap();
        if i == 0 {
            continue; // AddUser: refused again, above
        }
        let (rows_before, log_before) = (rows(&path).await, log(&store).await);
        let again = store.apply(p.clone()).await.unwrap();
        assert_eq!(rows(&path).await, rows_before, "{:?}", p.change);
        let log_after = log(&store).await;
        assert_eq!(log_after.len(), log_before.len() + 1);
        let (first, second) = (
            &log_before[log_before.len() - 1],
            &log_after[log_after.len() - 1],
        );
        assert_eq!(again.seq, Some(second.seq));
        assert_eq!(
            (&first.kind, &first.actor, &first.at),
            (&second.kind, &second.actor, &second.at)
        );
        match &p.change {
            Change::SetSetting { .. } => {
                assert_eq!(payload(second)["before"], "Hall 3");
            }
            Change::SetRole { .. } => {
                assert_eq!(payload(second)["previous"], "operator");
            }
            Change::TrustAdd { .. } => {
                assert_eq!(payload(second)["previous_kind"], "issuer");
            }
            _ => assert_eq!(first.payload, second.payload, "{:?}", p.change),
        }
    }

    // A repeated rejection refreshes last_seen only.
    let reject = local(
        "engine",
        20,
        LocalChange::RecordRejected {
            der: make_cert("Other", "urn:test:other"),
            by: None,
            report: false,
        },
    );
    assert!(store.apply(reject.clone()).await.unwrap().seq.is_some());
    let before = dump(&path).await;
    assert_eq!(store.apply(reject).await.unwrap().seq, None);
    assert_eq!(dump(&path).await, before);

    // BumpEpoch is not idempotent: exactly-once is the replication's job.
    let bump = prop("pair", 30, Change::BumpEpoch);
    assert_eq!(store.apply(bump.clone()).await.unwrap().epoch, 2);
    assert_eq!(store.apply(bump).await.unwrap().epoch, 3);
}

/// Every variant, so a new one cannot be forgotten here.
fn every_change() -> Vec<Change> {
    let all = vec![
        add_user("alice", HASH_A, Role::Admin),
        Change::SetPassword {
            name: "alice".into(),
            password_hash: PasswordHash::new(HASH_B),
        },
        Change::SetRole {
            name: "alice".into(),
            role: Role::Viewer,
        },
        Change::DeleteUser {
            name: "alice".into(),
        },
        Change::TrustAdd {
            der: vec![0x30, 0x03, 0x02, 0x01, 0xff],
            kind: CertKind::Issuer,
        },
        Change::TrustRemove {
            thumbprint: "ab".repeat(20),
        },
        Change::AddCrl {
            der: vec![0x30, 0x00],
        },
        set_setting("site.name", "Hall \"3\"\n"),
        Change::BumpEpoch,
        Change::Event {
            kind: "event.test".into(),
            payload: r#"{"n": [1, 2]}"#.into(),
        },
    ];
    let index = |c: &Change| match c {
        Change::AddUser { .. } => 0,
        Change::SetPassword { .. } => 1,
        Change::SetRole { .. } => 2,
        Change::DeleteUser { .. } => 3,
        Change::TrustAdd { .. } => 4,
        Change::TrustRemove { .. } => 5,
        Change::AddCrl { .. } => 6,
        Change::SetSetting { .. } => 7,
        Change::BumpEpoch => 8,
        Change::Event { .. } => 9,
    };
    assert_eq!(
        all.iter().map(index).collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>()
    );
    all
}

fn every_local_change() -> Vec<LocalChange> {
    let all = vec![
        LocalChange::RecordRejected {
            der: vec![0x30, 0x00],
            by: None,
            report: false,
        },
        LocalChange::RejectedReported {
            thumbprint: "ef".repeat(20),
        },
        LocalChange::RemoveRejected {
            thumbprint: "cd".repeat(20),
        },
        LocalChange::SetSetting {
            key: REQUESTED_STATE_SETTING.into(),
            value: "{}".into(),
        },
        LocalChange::Event {
            kind: "event.test".into(),
            payload: "{}".into(),
        },
    ];
    let index = |c: &LocalChange| match c {
        LocalChange::RecordRejected { .. } => 0,
        LocalChange::RejectedReported { .. } => 1,
        LocalChange::RemoveRejected { .. } => 2,
        LocalChange::SetSetting { .. } => 3,
        LocalChange::Event { .. } => 4,
    };
    assert_eq!(all.iter().map(index).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
    all
}

#[test]
fn every_change_survives_a_serde_round_trip() {
    for change in every_change() {
        let p = prop("alice", 1, change);
        let text = serde_json::to_string(&p).unwrap();
        let back: Proposal = serde_json::from_str(&text).unwrap();
        assert_eq!(back, p, "{text}");
        let bare: Change =
            serde_json::from_str(&serde_json::to_string(&p.change).unwrap()).unwrap();
        assert_eq!(bare, p.change);
    }
    for change in every_local_change() {
        let p = local("engine", 1, change);
        let text = serde_json::to_string(&p).unwrap();
        let back: LocalProposal = serde_json::from_str(&text).unwrap();
        assert_eq!(back, p, "{text}");
    }
    // The wire form names the change; the hash travels, but is never
    // printed.
    let p = prop("setup", 1, add_user("alice", HASH_A, Role::Admin));
    let v: Value = serde_json::to_value(&p).unwrap();
    assert_eq!(
        v,
        json!({
            "actor": "setup",
            "at": at(1),
            "change": {"add_user": {"name": "alice", "password_hash": HASH_A, "role": "admin"}},
        })
    );
    assert_eq!(
        serde_json::to_value(Change::BumpEpoch).unwrap(),
        json!("bump_epoch")
    );
    let debug = format!("{p:?}");
    assert!(
        !debug.contains(HASH_A) && debug.contains("redacted"),
        "{debug}"
    );
}

#[tokio::test]
async fn proposal_new_fixes_the_time_in_milliseconds() {
    let (_dir, _path, store) = open_temp().await;
    let t = chrono::DateTime::parse_from_rfc3339("2024-05-01T14:00:00.123456789+02:00")
        .unwrap()
        .to_utc();
    let p = Proposal::new("pair", t, Change::BumpEpoch);
    assert_eq!(p.at, "2024-05-01T12:00:00.123Z");
    store.apply(p).await.unwrap();
    assert_eq!(log(&store).await[0].at, "2024-05-01T12:00:00.123Z");
}

/// A store written before the change log had a scope gets its earlier
/// node-local entries marked when it is opened.
#[tokio::test]
async fn migration_marks_earlier_local_entries() {
    let dir = tempfile::tempdir().unwrap();
    let migrations = dir.path().join("migrations");
    std::fs::create_dir(&migrations).unwrap();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../migrations/0001_init.sql"
        ),
        migrations.join("0001_init.sql"),
    )
    .unwrap();
    let path = dir.path().join("config.db");
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::new()
                .filename(&path)
                .create_if_missing(true),
        )
        .await
        .unwrap();
    sqlx::migrate::Migrator::new(migrations.as_path())
        .await
        .unwrap()
        .run(&pool)
        .await
        .unwrap();
    for (kind, payload) in [
        ("user.add", r#"{"name":"alice","role":"admin"}"#),
        ("trust.reject", r#"{"thumbprint":"ab"}"#),
        ("trust.remove", r#"{"thumbprint":"ab","kind":"rejected"}"#),
        ("trust.remove", r#"{"thumbprint":"cd","kind":"trusted"}"#),
        (
            "setting.set",
            r#"{"key":"server.requested_state","value":"{}","before":null}"#,
        ),
        (
            "setting.set",
            r#"{"key":"field.namespaces","value":"[]","before":null}"#,
        ),
        (
            "setting.set",
            r#"{"key":"config.document","value":"","before":null}"#,
        ),
    ] {
        sqlx::query(
            "INSERT INTO change_log (epoch, actor, at, kind, payload) \
             VALUES (1, 'old', '2024-01-01T00:00:00.000Z', ?1, ?2)",
        )
        .bind(kind)
        .bind(payload)
        .execute(&pool)
        .await
        .unwrap();
    }
    pool.close().await;

    let store = Store::open(&path).await.unwrap();
    let scopes: Vec<Scope> = log(&store).await.into_iter().map(|e| e.scope).collect();
    use Scope::{Local, Replicated};
    assert_eq!(
        scopes,
        [Replicated, Local, Local, Replicated, Local, Local, Replicated]
    );
    // Still append-only.
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(SqliteConnectOptions::new().filename(&path))
        .await
        .unwrap();
    assert!(sqlx::query("UPDATE change_log SET scope = 'local'")
        .execute(&pool)
        .await
        .is_err());
    pool.close().await;
}
