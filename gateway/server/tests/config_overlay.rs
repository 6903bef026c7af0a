//! The configuration document in the store: this appliance's node-local
//! settings in its overlay (`config.node`, never replicated), the rest in
//! the replicated `config.document`, merged on load. Real SQLite stores in
//! temp dirs.

use std::path::{Path, PathBuf};

use uagate_config::{Config, ConfigError};
use uagate_server::config_store::{self, ConfigStoreError, Saved, StoredConfig};
use uagate_server::{CONFIG_KEY, NODE_CONFIG_KEY};
use uagate_store::{Scope, Store, NODE_LOCAL_SETTINGS};

/// A full document as appliance A would import it.
const DOC_A: &str = r#"
[listen]
opc_tcp = "10.0.0.1:4840"
tls = "10.0.0.1:4843"
tls_client_auth = "optional"
console = "10.0.0.1:8443"
metrics = "10.9.0.1:9464"
pair = "192.168.50.1:4850"
public_host = "gw-a.plant.local"

[server]
application_name = "line gateway"
application_uri = "urn:plant:gw-a"
max_session_count = 40

[isolation]
default_weight = 2

[[field_servers]]
name = "plc1"
endpoints = ["opc.tcp://10.0.1.5:4840"]
security_mode = "none"
security_policy = "None"
"#;

/// Appliance B's own listeners and identity.
const LISTEN_B: &str = r#"
[listen]
opc_tcp = "10.0.0.2:4840"
console = "10.0.0.2:8443"
pair = "192.168.50.2:4850"
public_host = "gw-b.plant.local"
"#;

async fn open(dir: &Path) -> (PathBuf, Store) {
    let path = dir.join("uagate.db");
    let store = Store::open(&path).await.unwrap_or_else(|e| panic!("{e}"));
    (path, store)
}

fn config(text: &str) -> Config {
    Config::from_toml(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// Document A with B's `[listen]` and application URI.
fn doc_b() -> String {
    let rest = &DOC_A[DOC_A.find("[server]").unwrap_or(0)..];
    format!(
        "{LISTEN_B}\n{}",
        rest.replace("urn:plant:gw-a", "urn:plant:gw-b")
    )
}

async fn save(store: &Store, cfg: &Config) -> Saved {
    config_store::save(store, "cli", cfg)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

async fn load(store: &Store) -> Config {
    config_store::load(store)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no configuration stored"))
}

async fn raw(store: &Store, key: &str) -> Option<String> {
    store.setting(key).await.unwrap_or_else(|e| panic!("{e}"))
}

fn table(text: &str) -> toml::Table {
    text.parse::<toml::Table>()
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
}

#[tokio::test]
async fn import_then_export_gives_the_same_document() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (_, store) = open(dir.path()).await;
    let imported = config(DOC_A);
    let saved = save(&store, &imported).await;
    assert_eq!(
        saved,
        Saved {
            node: true,
            document: true
        }
    );
    let exported = load(&store).await;
    assert_eq!(exported, imported);
    assert_eq!(exported.to_toml(), imported.to_toml());
    // Importing the exported text again changes nothing and writes nothing.
    let seq = store.last_seq().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        save(&store, &config(&exported.to_toml())).await,
        Saved::default()
    );
    assert_eq!(
        store.last_seq().await.unwrap_or_else(|e| panic!("{e}")),
        seq
    );
}

#[tokio::test]
async fn node_local_settings_never_reach_the_replicated_document() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (_, store) = open(dir.path()).await;
    save(&store, &config(DOC_A)).await;

    let document = raw(&store, CONFIG_KEY).await.unwrap_or_default();
    let doc = table(&document);
    assert!(!doc.contains_key("listen"), "{document}");
    assert!(
        doc.get("server")
            .and_then(|s| s.get("application_uri"))
            .is_none(),
        "{document}"
    );
    for value in [
        "10.0.0.1",
        "192.168.50.1",
        "gw-a.plant.local",
        "urn:plant:gw-a",
    ] {
        assert!(!document.contains(value), "{value} in {document}");
    }
    assert!(document.contains("max_session_count = 40"), "{document}");

    let node = raw(&store, NODE_CONFIG_KEY).await.unwrap_or_default();
    let overlay = table(&node);
    assert_eq!(
        overlay.keys().collect::<Vec<_>>(),
        ["listen", "server"],
        "{node}"
    );
    assert_eq!(
        overlay["listen"]["pair"].as_str(),
        Some("192.168.50.1:4850")
    );
    assert_eq!(
        overlay["server"]["application_uri"].as_str(),
        Some("urn:plant:gw-a")
    );

    // The overlay is node-local: its log entry is marked local, and the
    // replicated state a standby receives does not hold it.
    assert!(NODE_LOCAL_SETTINGS.contains(&NODE_CONFIG_KEY));
    let log = store
        .change_log_since(0, 100)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let scope_of = |key: &str| {
        log.iter()
            .find(|e| e.payload.contains(&format!("\"key\":\"{key}\"")))
            .map(|e| e.scope)
    };
    assert_eq!(scope_of(NODE_CONFIG_KEY), Some(Scope::Local));
    assert_eq!(scope_of(CONFIG_KEY), Some(Scope::Replicated));
    let snapshot = store
        .export_snapshot()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let keys: Vec<&str> = snapshot.settings.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, [CONFIG_KEY]);
}

#[tokio::test]
async fn appliance_b_keeps_its_listeners_when_the_replicated_document_changes() {
    let dir_a = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir_b = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (_, a) = open(dir_a.path()).await;
    let (_, b) = open(dir_b.path()).await;
    save(&a, &config(DOC_A)).await;
    save(&b, &config(&doc_b())).await;

    // The primary changes a shared limit (and its own listeners); the
    // standby receives the replicated state.
    let mut next = config(DOC_A);
    next.server.max_session_count = 60;
    next.listen.console = Some("10.0.0.1:9443".parse().unwrap_or_else(|e| panic!("{e}")));
    save(&a, &next).await;
    let snapshot = a.export_snapshot().await.unwrap_or_else(|e| panic!("{e}"));
    b.install_snapshot(&snapshot, "pair", chrono::Utc::now())
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let on_b = load(&b).await;
    assert_eq!(
        on_b.server.max_session_count, 60,
        "the shared change arrived"
    );
    assert_eq!(
        on_b.listen,
        config(&doc_b()).listen,
        "B keeps its listeners"
    );
    assert_eq!(
        on_b.server.application_uri.as_deref(),
        Some("urn:plant:gw-b")
    );
    let on_a = load(&a).await;
    assert_eq!(on_a, next);
    assert_eq!(on_b.field_servers, on_a.field_servers);
}

#[tokio::test]
async fn a_pair_listener_clash_is_refused_naming_listen_pair() {
    let clash = DOC_A.replace("pair = \"192.168.50.1:4850\"", "pair = \"10.0.0.1:8443\"");
    match Config::from_toml(&clash) {
        Err(ConfigError::Invalid { setting, message }) => {
            assert_eq!(setting, "listen.pair");
            assert!(message.contains("listen.console"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // The same clash reaching the store as an overlay is refused on load,
    // merged with the document, naming the setting.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (_, store) = open(dir.path()).await;
    save(&store, &config(DOC_A)).await;
    store
        .set_setting(
            "test",
            NODE_CONFIG_KEY,
            "[listen]\nopc_tcp = \"10.0.0.1:4840\"\npair = \"10.0.0.1:4840\"\n",
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    match config_store::load(&store).await {
        Err(ConfigStoreError::Config(ConfigError::Invalid { setting, .. })) => {
            assert_eq!(setting, "listen.pair")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_store_with_listen_inside_the_document_still_loads_and_migrates_on_the_next_write() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (_, store) = open(dir.path()).await;
    // What `config import` wrote before the overlay existed.
    let old = config(DOC_A);
    store
        .set_setting("cli", CONFIG_KEY, &old.to_toml())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(raw(&store, NODE_CONFIG_KEY).await, None);
    assert_eq!(load(&store).await, old);

    // The next write moves [listen] into the overlay.
    let mut next = old.clone();
    next.server.max_session_count = 50;
    assert_eq!(
        save(&store, &next).await,
        Saved {
            node: true,
            document: true
        }
    );
    assert_eq!(load(&store).await, next);
    let document = raw(&store, CONFIG_KEY).await.unwrap_or_default();
    assert!(!table(&document).contains_key("listen"), "{document}");
    let node = raw(&store, NODE_CONFIG_KEY).await.unwrap_or_default();
    assert!(node.contains("opc_tcp = \"10.0.0.1:4840\""), "{node}");

    // Even an unchanged document migrates.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (_, store) = open(dir.path()).await;
    store
        .set_setting("cli", CONFIG_KEY, &old.to_toml())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    save(&store, &old).await;
    assert!(raw(&store, NODE_CONFIG_KEY).await.is_some());
    assert_eq!(load(&store).await, old);
}

/// Makes every write of the replicated document fail inside SQLite, as a
/// refused or uncommitted replicated change would.
async fn refuse_document_writes(path: &Path) {
    let opts = sqlx::sqlite::SqliteConnectOptions::new().filename(path);
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(opts)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for op in ["INSERT", "UPDATE"] {
        sqlx::query(&format!(
            "CREATE TRIGGER refuse_document_{op} BEFORE {op} ON settings \
             WHEN NEW.key = '{CONFIG_KEY}' BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        ))
        .execute(&pool)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }
    pool.close().await;
}

#[tokio::test]
async fn a_failed_document_write_puts_the_overlay_back() {
    // A store with an overlay: the previous overlay text comes back.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (path, store) = open(dir.path()).await;
    let old = config(DOC_A);
    save(&store, &old).await;
    let before = StoredConfig::read(&store)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    refuse_document_writes(&path).await;
    let mut next = config(&doc_b());
    next.server.max_session_count = 77;
    let e = config_store::save(&store, "cli", &next).await;
    assert!(matches!(e, Err(ConfigStoreError::Store(_))), "{e:?}");
    assert_eq!(
        StoredConfig::read(&store)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
        before
    );
    assert_eq!(load(&store).await, old);

    // An old store without an overlay: one that changes nothing is written.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (path, store) = open(dir.path()).await;
    store
        .set_setting("cli", CONFIG_KEY, &old.to_toml())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    refuse_document_writes(&path).await;
    assert!(config_store::save(&store, "cli", &next).await.is_err());
    assert_eq!(load(&store).await, old);
    assert_eq!(raw(&store, CONFIG_KEY).await, Some(old.to_toml()));
}
