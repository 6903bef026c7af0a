#![forbid(unsafe_code)]
//! `uagate-store`: the configuration store of the gateway.
//!
//! One [`Store`] API over a SQLite database in WAL mode. Every change, from
//! the console, REST, the CLI or the engine, is a plain value — a [`Change`]
//! or a [`LocalChange`] in a [`Proposal`] that says who asks and when — and
//! [`Store::apply`] is the one code path that writes: it validates the value
//! and applies it in **one** transaction together with an entry in the
//! append-only change log ([`ChangeLogEntry`]). Secrets (passwords, hashes)
//! never enter the log.
//!
//! The other mutating methods (`add_user`, `trust_add`, `set_setting`, …)
//! are thin proposers: they check the input, hash a password, convert PEM
//! to DER, stamp the time, build the value and call [`Store::apply`].
//! Apply itself is deterministic — no clock, randomness or password
//! hashing — so the pair can replicate the [`Change`] values to the standby
//! and apply them there in the same order with the same result. A business
//! refusal (unknown user, last admin, older CRL, …) is an outcome of apply
//! (the usual [`StoreError`] variants) and writes nothing: no row, no log
//! entry.
//!
//! # Scope of each change
//!
//! Node-local state is never replicated. It is changed by a [`LocalChange`]
//! through the same [`Store::apply`], and its change-log entry is kept for
//! the audit trail like any other but marked [`Scope::Local`]
//! ([`ChangeLogEntry::scope`]), so a reader of the log can leave it out.
//!
//! | value | log kind | scope |
//! |---|---|---|
//! | [`Change::AddUser`] | `user.add` | replicated |
//! | [`Change::SetPassword`] | `user.password` | replicated |
//! | [`Change::SetRole`] | `user.role` | replicated |
//! | [`Change::DeleteUser`] | `user.delete` | replicated |
//! | [`Change::TrustAdd`] | `trust.add` | replicated |
//! | [`Change::TrustRemove`] (trusted, issuer) | `trust.remove` | replicated |
//! | [`Change::AddCrl`] | `crl.add` | replicated |
//! | [`Change::SetSetting`] (every key not in [`NODE_LOCAL_SETTINGS`]) | `setting.set` | replicated |
//! | [`Change::BumpEpoch`] | `epoch.bump` | replicated |
//! | [`Change::Event`] (kept for entries logged before events became node-local) | `event.*` | replicated |
//! | [`LocalChange::RecordRejected`] | `trust.reject` (first sighting only) | local |
//! | [`LocalChange::RemoveRejected`] | `trust.remove` (kind `rejected`) | local |
//! | [`LocalChange::RejectedReported`] | none | local |
//! | [`LocalChange::SetSetting`] ([`REQUESTED_STATE_SETTING`], [`FIELD_NAMESPACES_SETTING`], [`CONFIG_NODE_SETTING`]) | `setting.set` | local |
//! | [`LocalChange::Event`] (what [`Store::record_event`] proposes) | `event.*` | local |
//!
//! The replicated state is thus: the users; the trusted and issuer
//! certificates; the CRLs; the settings except the node-local ones; the
//! epoch. Node-local: the rejected certificates, the node-local settings, and
//! the `first_seen`/`last_seen` observation times of a certificate (a
//! [`Change::TrustAdd`] of a certificate this appliance had rejected keeps
//! the time it was first seen here and logs `previous_kind: "rejected"`;
//! nothing else a replicated change does depends on node-local rows).
//! Sequence numbers are per store: local entries take numbers too.
//!
//! # Applying the same proposal twice
//!
//! [`Store::apply`] does not deduplicate: exactly-once is what
//! [`Store::apply_at`] adds for replicated entries (it records the last
//! applied log position with the change, see *Replication* below). Applying
//! a proposal again with [`Store::apply`] is safe — it never corrupts the
//! store — and does this:
//!
//! * refused, nothing written: `AddUser` (`UserExists`), `DeleteUser`
//!   (`UnknownUser`), `TrustRemove` and `RemoveRejected` (`UnknownCert`);
//! * same rows, one more log entry: `SetPassword`, `SetRole`, `TrustAdd`,
//!   `AddCrl` (a CRL as new as the stored one replaces it), `SetSetting`
//!   (the entry's `before` is the value itself), `Event`;
//! * `RecordRejected`: refreshes `last_seen`, no log entry;
//! * `BumpEpoch` is **not** idempotent: it increments the epoch again.
//!
//! # Replication
//!
//! The pair replicates [`Proposal`]s of [`Change`]s through a Raft log and
//! applies each committed entry with [`Store::apply_at`]: the same
//! validation and writes as [`Store::apply`], plus the entry's log position
//! ([`LogPosition`]) written as `last_applied` in the same transaction, so
//! replaying the log after a crash applies every entry exactly once (an
//! entry at or below `last_applied` is skipped). A business refusal is the
//! outcome [`LogApplied::Refused`], not an error: `last_applied` still
//! advances, in a transaction that writes nothing else. Entries without a
//! change advance it with [`Store::record_applied`], which also keeps the
//! last cluster membership seen; [`Store::replica_state`] reads both back.
//!
//! [`Store::export_snapshot`] and [`Store::install_snapshot`] move the
//! replicated state (table above) as one [`ReplicatedSnapshot`] value
//! between stores; installing keeps the node-local rows.
//!
//! Schema lives in `migrations/` at the workspace root and is applied by
//! [`Store::open`].

mod apply;
mod chain;
mod change;
mod error;
pub mod files;
pub mod listing;
mod model;
mod password;
mod replica;
mod snapshot;
mod x509;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Row, SqliteConnection};
use tokio::sync::Semaphore;
use unicode_normalization::UnicodeNormalization;

pub use apply::{report_replication, Applied, MAX_EVENT_PAYLOAD_LEN};
pub use chain::{TrustVerdict, MAX_CHAIN_LEN};
pub use change::{
    setting_scope, Change, LocalChange, LocalProposal, PasswordHash, Proposal, Scope, Scoped,
    CONFIG_NODE_SETTING, FIELD_NAMESPACES_SETTING, NODE_LOCAL_SETTINGS, REQUESTED_STATE_SETTING,
};
pub use error::{Refusal, StoreError};
pub use listing::{Unlisted, NEW_REJECTED_BURST, NEW_REJECTED_EVERY};
pub use model::{
    CertInfo, CertKind, CertSummary, ChangeLogEntry, CrlInfo, LogFilter, LogOrder, Role,
};
pub use replica::{LogApplied, LogPosition, ReplicaState};
pub use snapshot::{
    ReplicatedSnapshot, SnapshotCert, SnapshotCrl, SnapshotSetting, SnapshotUser, SNAPSHOT_FORMAT,
};

use error::invalid;

/// The migrations under `<workspace>/migrations`, embedded at compile time.
static MIGRATOR: Migrator = sqlx::migrate!("../../migrations");

/// Brings the database up to this build's migrations. Called by
/// [`Store::open`]. Migrations this build does not know (a newer build
/// applied them before an update was rolled back: the data partition is
/// shared by both image slots) are tolerated and logged, not refused, so
/// that a rolled-back appliance starts with its configuration; this is why
/// every migration must be additive (`migrations/README.md`).
async fn migrate(pool: &SqlitePool) -> Result<(), StoreError> {
    let known = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    // No table yet (a new database) reads as none.
    let newest: Option<i64> =
        sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations WHERE success = 1")
            .fetch_one(pool)
            .await
            .unwrap_or_default();
    if let Some(newest) = newest.filter(|n| *n > known) {
        tracing::warn!(
            newest,
            known,
            "the configuration database was last migrated by a newer uagate \
             (an update rolled back?); its added columns and tables are left alone"
        );
    }
    run_tolerant(&MIGRATOR, pool).await?;
    Ok(())
}

/// Runs `migrator` on `pool`, tolerating migrations it does not know (a
/// newer build applied them before its update was rolled back). Used for
/// every SQLite file on the data partition: the configuration database
/// here and the pair's Raft log.
pub async fn run_tolerant(
    migrator: &Migrator,
    pool: &SqlitePool,
) -> Result<(), sqlx::migrate::MigrateError> {
    Migrator {
        migrations: migrator.migrations.clone(),
        ignore_missing: true,
        locking: migrator.locking,
        no_tx: migrator.no_tx,
    }
    .run(pool)
    .await
}

/// A rejected certificate presented again refreshes its `last_seen` at
/// most this often ([`Store::record_rejected`]).
pub const LAST_SEEN_EVERY: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

/// Most rejected certificates kept; the least recently seen are dropped first,
/// so a hostile peer cannot grow the table without bound.
pub const REJECTED_CAP: i64 = 1000;

/// Largest CRL [`Store::add_crl`] takes (about 10,000 revoked
/// certificates): its change is replicated as one entry of the pair's log,
/// whose bytes take up to four characters each there, and which must reach
/// the standby within one heartbeat interval (250 ms) on a slow link.
pub const MAX_CRL_ADDED: usize = 256 * 1024;

/// How far ahead of this appliance's clock a CRL's thisUpdate may lie and
/// still be added (clocks of a CA and an appliance differ a little).
pub const CRL_CLOCK_SKEW: chrono::TimeDelta = chrono::TimeDelta::minutes(10);

/// Minimum password length in characters.
pub const MIN_PASSWORD_LEN: usize = 8;
/// Maximum password length in bytes (bounds hashing work per request).
pub const MAX_PASSWORD_LEN: usize = 1024;
/// Maximum user name length in characters.
pub const MAX_NAME_LEN: usize = 64;
/// Maximum setting key length in bytes.
pub const MAX_SETTING_KEY_LEN: usize = 128;
/// Maximum setting value length in bytes.
pub const MAX_SETTING_VALUE_LEN: usize = 64 * 1024;
/// Most change-log entries returned by one [`Store::change_log_since`] call.
pub const MAX_LOG_BATCH: i64 = 10_000;

/// Concurrent argon2 computations allowed (each needs ~19 MiB of memory).
const HASH_SLOTS: usize = 2;

/// Handle to the configuration database. Cheap to clone (shares the pool
/// and the replicator).
#[derive(Clone)]
pub struct Store {
    pool: SqlitePool,
    hash_slots: Arc<Semaphore>,
    /// How fast new certificates are listed as rejected ([`listing`]).
    listing: Arc<std::sync::Mutex<listing::ListingBudget>>,
    replicator: Arc<std::sync::RwLock<Option<Arc<dyn Replicator>>>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("pool", &self.pool)
            .field("replicated", &self.replicator().is_some())
            .finish()
    }
}

/// The outcome of a replicated change, once it is applied on this store.
pub type Replicated =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Applied, StoreError>> + Send>>;

/// Where replicated changes go instead of being applied here directly: the
/// pair's log. Set with [`Store::set_replicator`] by the pair node while it
/// runs, so that every writer (console, REST, CLI, engine) goes through the
/// pair. `propose` answers once the change is committed and applied on this
/// store (a refusal is the same [`StoreError`] a direct apply gives; a
/// follower answers [`StoreError::Replication`] naming the leader).
pub trait Replicator: Send + Sync {
    /// Commits `proposal` through the pair's log.
    fn propose(&self, proposal: Proposal<Change>) -> Replicated;

    /// Tells the appliance that leads the pair about a certificate this one
    /// refused as unknown and listed as rejected for the first time, so
    /// that the operator sees it on the primary's list and can approve it
    /// there (the rejected list itself is each appliance's own). Called by
    /// [`Store::record_rejected`]; returns at once (the report is queued
    /// and sent in the background, again while the leader cannot be
    /// reached; the certificate stays on this appliance's list either
    /// way). By default nothing.
    fn report_rejected(&self, der: Vec<u8>) {
        let _ = der;
    }
}

fn validate_actor(actor: &str) -> Result<(), StoreError> {
    if actor.trim().is_empty() {
        return Err(invalid("actor", "must not be empty"));
    }
    if actor.len() > 256 || actor.chars().any(char::is_control) {
        return Err(invalid(
            "actor",
            "must be at most 256 bytes without control characters",
        ));
    }
    Ok(())
}

/// The canonical form of a user name as someone typed it: white space
/// around it removed and its characters in Unicode normalization form C (so
/// `Jürgen` is one name however the `ü` was entered), checked: 1 to
/// [`MAX_NAME_LEN`] letters and digits of any script (Unicode Alphabetic
/// and Numeric) and `. _ - @`. The one check of a new user name: the CLI,
/// the console and REST (first-start setup included) all add users through
/// [`Store::add_user`], which calls it.
pub fn user_name(input: &str) -> Result<String, StoreError> {
    let name: String = input.trim().nfc().collect();
    validate_user_name(&name)?;
    Ok(name)
}

/// What user names are compared by: the name in lower case (after
/// [`user_name`]'s normalization). Two names with the same key are the same
/// user: a second one is refused, and logging in, the CLI, the console and
/// REST find a user by any case of its name (see [`Store::login`]). Also
/// the key the login throttles count failures under, so that `OTTO` and
/// `otto` are one name to them too.
pub fn user_key(name: &str) -> String {
    name.trim().nfc().collect::<String>().to_lowercase()
}

/// A stored user name is valid: [`user_name`]'s rules, already in its
/// canonical form. Called by apply for every new user (and for the users
/// of a snapshot), so that both appliances of a pair hold names in the
/// same form.
fn validate_user_name(name: &str) -> Result<(), StoreError> {
    if name.is_empty() {
        return Err(invalid("name", "user name must not be empty"));
    }
    if name.chars().count() > MAX_NAME_LEN {
        return Err(invalid(
            "name",
            format!("user name longer than {MAX_NAME_LEN} characters"),
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
    {
        return Err(invalid(
            "name",
            "user name may only contain letters, digits and . _ - @",
        ));
    }
    if !unicode_normalization::is_nfc(name) {
        return Err(invalid(
            "name",
            "user name must be in Unicode normalization form C",
        ));
    }
    Ok(())
}

/// A new password is acceptable: [`MIN_PASSWORD_LEN`] characters or more,
/// at most [`MAX_PASSWORD_LEN`] bytes, and not white space only. The one
/// check of a new password, for [`Store::add_user`] and
/// [`Store::set_password`] (so for the CLI, the console and REST alike),
/// and for a REST change of role and password before either is stored.
pub fn validate_password(password: &str) -> Result<(), StoreError> {
    if password.chars().count() < MIN_PASSWORD_LEN {
        return Err(invalid(
            "password",
            format!("must be at least {MIN_PASSWORD_LEN} characters"),
        ));
    }
    if password.len() > MAX_PASSWORD_LEN {
        return Err(invalid(
            "password",
            format!("must be at most {MAX_PASSWORD_LEN} bytes"),
        ));
    }
    if password.chars().all(char::is_whitespace) {
        return Err(invalid(
            "password",
            "must not be only spaces or other white space",
        ));
    }
    Ok(())
}

fn validate_setting_key(key: &str) -> Result<(), StoreError> {
    if key.is_empty() || key.len() > MAX_SETTING_KEY_LEN {
        return Err(invalid(
            "key",
            format!("setting key must be 1..={MAX_SETTING_KEY_LEN} bytes"),
        ));
    }
    if !key
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
    {
        return Err(invalid(
            key,
            "setting key may only contain a-z, 0-9 and . _ -",
        ));
    }
    Ok(())
}

fn role_from_db(s: &str) -> Result<Role, StoreError> {
    s.parse().map_err(|_| StoreError::Corrupt {
        table: "users",
        message: format!("unknown role {s:?}"),
    })
}

/// A `change_log` row (all of its columns) as an entry.
fn log_entry(row: &SqliteRow) -> Result<ChangeLogEntry, StoreError> {
    Ok(ChangeLogEntry {
        seq: row.try_get("seq")?,
        epoch: row.try_get("epoch")?,
        actor: row.try_get("actor")?,
        at: row.try_get("at")?,
        kind: row.try_get("kind")?,
        payload: row.try_get("payload")?,
        scope: scope_from_db(row.try_get("scope")?)?,
    })
}

fn scope_from_db(s: &str) -> Result<Scope, StoreError> {
    match s {
        "replicated" => Ok(Scope::Replicated),
        "local" => Ok(Scope::Local),
        other => Err(StoreError::Corrupt {
            table: "change_log",
            message: format!("unknown scope {other:?}"),
        }),
    }
}

fn kind_from_db(s: &str) -> Result<CertKind, StoreError> {
    s.parse().map_err(|_| StoreError::Corrupt {
        table: "certs",
        message: format!("unknown certificate kind {s:?}"),
    })
}

fn cert_from_row(row: &SqliteRow) -> Result<CertInfo, StoreError> {
    let kind: String = row.try_get("kind")?;
    Ok(CertInfo {
        thumbprint: row.try_get("thumbprint")?,
        kind: kind_from_db(&kind)?,
        subject: row.try_get("subject")?,
        application_uri: row.try_get("application_uri")?,
        not_before: row.try_get("not_before")?,
        not_after: row.try_get("not_after")?,
        der: row.try_get("der")?,
        first_seen: row.try_get("first_seen")?,
        last_seen: row.try_get("last_seen")?,
        refused_here: row.try_get("refused_here")?,
        refused_by: row.try_get("refused_by")?,
        report_pending: row.try_get("report_pending")?,
    })
}

/// Number of admins, used to refuse removing the last one.
async fn admin_count(conn: &mut SqliteConnection) -> Result<i64, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT COUNT(*) FROM users WHERE role = 'admin'")
            .fetch_one(&mut *conn)
            .await?,
    )
}

/// The stored names of the users whose name has the key `key` (see
/// [`user_key`]): none or one, or several that differ only in case, added
/// before names were compared that way. Reads every name: the table holds
/// an appliance's few dozen users, and SQLite cannot lower-case beyond
/// ASCII.
async fn names_with_key(conn: &mut SqliteConnection, key: &str) -> Result<Vec<String>, StoreError> {
    let names: Vec<String> = sqlx::query_scalar("SELECT name FROM users ORDER BY name")
        .fetch_all(&mut *conn)
        .await?;
    Ok(names.into_iter().filter(|n| user_key(n) == key).collect())
}

/// The stored name of the user `name` means: the user of exactly that name,
/// else the one user whose name equals it but for case (see [`user_key`]);
/// `None` when no user matches. Several users differing only in case (from
/// before names were compared that way) and none named exactly so: refused,
/// naming them. Called by apply for every change of a user, and by
/// [`Store::login`]; it depends only on the stored rows, as apply must.
pub(crate) async fn resolve_user(
    conn: &mut SqliteConnection,
    name: &str,
) -> Result<Option<String>, StoreError> {
    let exact: Option<String> = sqlx::query_scalar("SELECT name FROM users WHERE name = ?1")
        .bind(name)
        .fetch_optional(&mut *conn)
        .await?;
    if exact.is_some() {
        return Ok(exact);
    }
    let mut found = names_with_key(conn, &user_key(name)).await?;
    match found.len() {
        0 | 1 => Ok(found.pop()),
        _ => Err(invalid(
            "name",
            format!(
                "{name:?} matches the users {}, which differ only in case: give the name exactly",
                found.join(", ")
            ),
        )),
    }
}

/// The credential stamp of a stored password hash: changes whenever the
/// password is set (each hash has its own random salt), and says nothing
/// about the password. See [`Store::user_standing`].
fn credential_stamp(password_hash: &str) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(password_hash.as_bytes())[..16])
}

/// A successful login (see [`Store::login`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Login {
    /// The user's name as stored (the login may have used another case).
    pub name: String,
    /// The user's role.
    pub role: Role,
    /// The user's credential stamp now (see [`Store::user_standing`]).
    pub stamp: String,
}

/// What a logged-in user is allowed now (see [`Store::user_standing`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserStanding {
    /// The user's current role.
    pub role: Role,
    /// The user's current credential stamp: it changes when the password
    /// is set, so a console session begun with an older one has ended.
    pub stamp: String,
}

impl Store {
    /// Opens (creating if missing) the database at `db_path`, readable by
    /// this process's user only (see [`files::private_db_file`]), switches
    /// it to WAL with foreign keys and a 5 s busy timeout, and applies
    /// pending migrations. Called once at gateway start-up and by each CLI
    /// command that reads or changes the store.
    pub async fn open(db_path: &Path) -> Result<Store, StoreError> {
        files::private_db_file(db_path).map_err(|source| StoreError::File {
            path: db_path.to_path_buf(),
            source,
        })?;
        let options = SqliteConnectOptions::new()
            .filename(db_path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await?;
        migrate(&pool).await?;
        tracing::debug!(path = %db_path.display(), "store opened");
        Ok(Store {
            pool,
            hash_slots: Arc::new(Semaphore::new(HASH_SLOTS)),
            listing: Arc::new(std::sync::Mutex::new(listing::ListingBudget::new(
                std::time::Instant::now(),
            ))),
            replicator: Arc::default(),
        })
    }

    /// Sends every later replicated change through `replicator` (the pair's
    /// log), or with `None` applies them here again. Called by the pair
    /// node when it starts and stops.
    pub fn set_replicator(&self, replicator: Option<Arc<dyn Replicator>>) {
        if let Ok(mut r) = self.replicator.write() {
            *r = replicator;
        }
    }

    /// The replicator in force, if any.
    pub(crate) fn replicator(&self) -> Option<Arc<dyn Replicator>> {
        self.replicator.read().ok().and_then(|r| r.clone())
    }

    /// Closes all connections (checkpointing the WAL). Further calls fail.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Runs CPU-heavy password work on the blocking pool, at most
    /// `HASH_SLOTS` at a time.
    async fn blocking<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let _permit = self
            .hash_slots
            .acquire()
            .await
            .map_err(|_| StoreError::Hash("hashing semaphore closed".into()))?;
        Ok(tokio::task::spawn_blocking(f).await?)
    }

    async fn hash_password(&self, password: &str) -> Result<String, StoreError> {
        let password = password.to_owned();
        self.blocking(move || password::hash(&password)).await?
    }

    /// SQLite journal mode of the open database (`"wal"` when healthy).
    pub async fn journal_mode(&self) -> Result<String, StoreError> {
        Ok(sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&self.pool)
            .await?)
    }

    // ----------------------------------------------------------------- users

    /// Creates a user with an argon2id-hashed password: proposes
    /// [`Change::AddUser`]. The name is put in its canonical form and
    /// checked by [`user_name`]; one that differs from an existing user's
    /// only in case is refused ([`StoreError::UserExists`] naming the
    /// existing user). Returns the name as stored. Logged as `user.add`
    /// (name and role only).
    pub async fn add_user(
        &self,
        actor: &str,
        name: &str,
        password: &str,
        role: Role,
    ) -> Result<String, StoreError> {
        validate_actor(actor)?;
        let name = user_name(name)?;
        validate_password(password)?;
        // Cheap pre-check to avoid hashing for an obvious duplicate; apply
        // decides.
        let mut conn = self.pool.acquire().await?;
        if let Some(existing) = names_with_key(&mut conn, &user_key(&name)).await?.pop() {
            return Err(StoreError::UserExists(existing));
        }
        drop(conn);
        let password_hash = PasswordHash::new(self.hash_password(password).await?);
        let change = Change::AddUser {
            name: name.clone(),
            password_hash,
            role,
        };
        self.apply(Proposal::now(actor, change)).await?;
        Ok(name)
    }

    /// Replaces a user's password (`name` in any case, see
    /// [`resolve_user`]): proposes [`Change::SetPassword`]. The user's
    /// credential stamp changes with it, which ends their console sessions
    /// (see [`Store::user_standing`]). Logged as `user.password` (name
    /// only).
    pub async fn set_password(
        &self,
        actor: &str,
        name: &str,
        password: &str,
    ) -> Result<(), StoreError> {
        validate_actor(actor)?;
        validate_password(password)?;
        let password_hash = PasswordHash::new(self.hash_password(password).await?);
        let change = Change::SetPassword {
            name: name.to_owned(),
            password_hash,
        };
        self.apply(Proposal::now(actor, change)).await?;
        Ok(())
    }

    /// Changes a user's role (`name` in any case): proposes
    /// [`Change::SetRole`]. Demoting the last admin is refused so the
    /// console cannot lock itself out. Logged as `user.role`.
    pub async fn set_role(&self, actor: &str, name: &str, role: Role) -> Result<(), StoreError> {
        let change = Change::SetRole {
            name: name.to_owned(),
            role,
        };
        self.apply(Proposal::now(actor, change)).await?;
        Ok(())
    }

    /// Deletes a user (`name` in any case): proposes [`Change::DeleteUser`].
    /// Deleting the last admin is refused. Logged as `user.delete`.
    pub async fn delete_user(&self, actor: &str, name: &str) -> Result<(), StoreError> {
        let change = Change::DeleteUser {
            name: name.to_owned(),
        };
        self.apply(Proposal::now(actor, change)).await?;
        Ok(())
    }

    /// Checks a login: the user `name` means (its exact name, or the same
    /// name in another case, see [`resolve_user`]) and its password. Returns
    /// the user as stored on success, `None` for an unknown user or a wrong
    /// password (indistinguishable by timing: an unknown user is verified
    /// against a dummy hash). Called by the console's and REST's login and
    /// by the OPC UA user name login.
    pub async fn login(&self, name: &str, password: &str) -> Result<Option<Login>, StoreError> {
        if password.len() > MAX_PASSWORD_LEN || name.len() > 4 * MAX_NAME_LEN {
            return Ok(None);
        }
        let mut conn = self.pool.acquire().await?;
        let stored = match resolve_user(&mut conn, name).await {
            Ok(stored) => stored,
            // Several names differing only in case: none of them by this one.
            Err(e) if e.is_refusal() => None,
            Err(e) => return Err(e),
        };
        let row = match &stored {
            Some(stored) => {
                sqlx::query("SELECT name, password_hash, role FROM users WHERE name = ?1")
                    .bind(stored)
                    .fetch_optional(&mut *conn)
                    .await?
            }
            None => None,
        };
        drop(conn);
        let password = password.to_owned();
        match row {
            Some(row) => {
                let name: String = row.try_get("name")?;
                let hash: String = row.try_get("password_hash")?;
                let role: String = row.try_get("role")?;
                let stamp = credential_stamp(&hash);
                let ok = self
                    .blocking(move || password::verify(&password, &hash))
                    .await?;
                if ok {
                    Ok(Some(Login {
                        name,
                        role: role_from_db(&role)?,
                        stamp,
                    }))
                } else {
                    Ok(None)
                }
            }
            None => {
                self.blocking(move || password::verify_dummy(&password))
                    .await?;
                Ok(None)
            }
        }
    }

    /// Checks a login like [`Store::login`] and returns only the role.
    pub async fn verify_user(
        &self,
        name: &str,
        password: &str,
    ) -> Result<Option<Role>, StoreError> {
        Ok(self.login(name, password).await?.map(|l| l.role))
    }

    /// The current role of a user (the exact stored name), `None` for an
    /// unknown name.
    pub async fn user_role(&self, name: &str) -> Result<Option<Role>, StoreError> {
        Ok(self.user_standing(name).await?.map(|s| s.role))
    }

    /// The current role and credential stamp of a user (the exact stored
    /// name, as [`Store::login`] returned it), `None` for an unknown name.
    /// Called on every console request so that a role change, a removal or
    /// a new password takes effect at once, not when the user's token
    /// expires: a session whose stamp is not the user's stamp now began
    /// before the password was last set, and has ended.
    pub async fn user_standing(&self, name: &str) -> Result<Option<UserStanding>, StoreError> {
        let row = sqlx::query("SELECT password_hash, role FROM users WHERE name = ?1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|row| {
            let hash: String = row.try_get("password_hash")?;
            let role: String = row.try_get("role")?;
            Ok(UserStanding {
                role: role_from_db(&role)?,
                stamp: credential_stamp(&hash),
            })
        })
        .transpose()
    }

    /// Records an operator action that changes no stored state (a
    /// ServiceLevel override, a closed session, a forced failover) in the
    /// change log, so the audit trail is complete: proposes
    /// [`LocalChange::Event`] (each appliance of a pair audits what was done
    /// to it; never replicated). `kind` must start with `event.` and
    /// `payload` be a JSON object. Returns the entry's sequence number.
    pub async fn record_event(
        &self,
        actor: &str,
        kind: &str,
        payload: &serde_json::Value,
    ) -> Result<i64, StoreError> {
        let change = LocalChange::Event {
            kind: kind.to_owned(),
            payload: payload.to_string(),
        };
        self.apply(Proposal::now(actor, change))
            .await?
            .seq
            .ok_or_else(|| StoreError::Corrupt {
                table: "change_log",
                message: "no entry written for an event".into(),
            })
    }

    /// All users with their roles, sorted by name.
    pub async fn list_users(&self) -> Result<Vec<(String, Role)>, StoreError> {
        let rows = sqlx::query("SELECT name, role FROM users ORDER BY name")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                let name: String = row.try_get("name")?;
                let role: String = row.try_get("role")?;
                Ok((name, role_from_db(&role)?))
            })
            .collect()
    }

    // ------------------------------------------------------------ trust list

    /// Puts a DER certificate on the trusted or issuer list (moving it off
    /// the rejected list, or between trusted and issuer, if it was there):
    /// proposes [`Change::TrustAdd`]. Logged as `trust.add` with the DER
    /// (hex).
    ///
    /// The issuer list takes CA certificates only, and not one that is on
    /// the trusted list now: every client or server presenting such a
    /// certificate itself would be refused from then on (a CA's own
    /// certificates need its CRL), without a trace on the rejected list.
    pub async fn trust_add(
        &self,
        actor: &str,
        der: &[u8],
        kind: CertKind,
    ) -> Result<CertInfo, StoreError> {
        if kind == CertKind::Issuer {
            if !x509::is_ca(der)? {
                return Err(invalid(
                    "certificate",
                    "is not a CA certificate (its basic constraints do not let it issue \
                     certificates): add it to the trusted list instead",
                ));
            }
            if self.cert_status(der).await? == Some(CertKind::Trusted) {
                return Err(invalid(
                    "certificate",
                    "is on the trusted list: as an issuer, the clients and servers that \
                     present this certificate itself would be refused until its CRL is \
                     added. Remove it from the trusted list first if it is to be a CA",
                ));
            }
        }
        let change = Change::TrustAdd {
            der: der.to_vec(),
            kind,
        };
        self.apply(Proposal::now(actor, change))
            .await?
            .cert
            .ok_or_else(|| StoreError::Corrupt {
                table: "certs",
                message: "trust_add stored no certificate".into(),
            })
    }

    /// Like [`Store::trust_add`] but accepts the contents of a `.der` or
    /// `.pem` file (exactly one `CERTIFICATE` block).
    pub async fn trust_add_pem_or_der(
        &self,
        actor: &str,
        bytes: &[u8],
        kind: CertKind,
    ) -> Result<CertInfo, StoreError> {
        let der = x509::pem_or_der(bytes, "CERTIFICATE", "certificate")?;
        self.trust_add(actor, &der, kind).await
    }

    /// Trusts a certificate the engine rejected: the one on the rejected
    /// list with `thumbprint` (40 hex digits; case and `:` separators
    /// ignored) goes to the trusted list, with the DER kept from its
    /// rejection: proposes [`Change::TrustAdd`]. [`StoreError::UnknownCert`]
    /// when no rejected certificate has that thumbprint (a trusted one
    /// included). Called by the console's and REST's "Trust" of a rejected
    /// certificate and by `uagate trust approve`. Logged as `trust.add`
    /// (`previous_kind: "rejected"`).
    pub async fn approve_rejected(
        &self,
        actor: &str,
        thumbprint: &str,
    ) -> Result<CertInfo, StoreError> {
        validate_actor(actor)?;
        let thumbprint = x509::normalize_thumbprint(thumbprint)?;
        let der: Option<Vec<u8>> =
            sqlx::query_scalar("SELECT der FROM certs WHERE thumbprint = ?1 AND kind = 'rejected'")
                .bind(&thumbprint)
                .fetch_optional(&self.pool)
                .await?;
        match der {
            Some(der) => self.trust_add(actor, &der, CertKind::Trusted).await,
            None => Err(StoreError::UnknownCert(thumbprint)),
        }
    }

    /// Called by the engine when a peer presents an untrusted certificate:
    /// proposes [`LocalChange::RecordRejected`] (node-local) as actor
    /// `engine`. New certificates are stored as rejected (logged as
    /// `trust.reject`); repeats only refresh `last_seen` (no log entry), at
    /// most once per [`LAST_SEEN_EVERY`];
    /// certificates already trusted or issuer are left alone. The rejected
    /// list is capped at [`REJECTED_CAP`], dropping the least recently seen.
    /// On a paired appliance a first sighting is also reported to the
    /// leader ([`Replicator::report_rejected`]).
    pub async fn record_rejected(&self, der: &[u8]) -> Result<(), StoreError> {
        // What apply would refuse is refused before it costs a listing.
        let cert = x509::parse_certificate(der)?;
        let stored: Option<(String, String, bool)> =
            sqlx::query_as("SELECT kind, last_seen, refused_here FROM certs WHERE thumbprint = ?1")
                .bind(&cert.thumbprint)
                .fetch_optional(&self.pool)
                .await?;
        if let Some((kind, last_seen, refused_here)) = &stored {
            // On another list: apply would leave it alone. Refused here and
            // seen within the last minute: nothing to write either (a
            // client retrying every second would otherwise cost the flash
            // one synced write a second, for months).
            let recent = chrono::DateTime::parse_from_rfc3339(last_seen)
                .is_ok_and(|t| chrono::Utc::now().signed_duration_since(t) < LAST_SEEN_EVERY);
            if kind != CertKind::Rejected.as_str() || (recent && *refused_here) {
                return Ok(());
            }
        }
        if stored.is_none() {
            let listing = self.listing().take(std::time::Instant::now());
            if let listing::Listing::Unlisted { tell } = listing {
                if tell {
                    tracing::warn!(
                        burst = listing::NEW_REJECTED_BURST,
                        every_s = listing::NEW_REJECTED_EVERY.as_secs(),
                        "more unknown certificates than the rejected list takes at once: \
                         they are refused without being listed (many new devices, or \
                         someone trying certificates)"
                    );
                }
                return Ok(());
            }
        }
        let replicator = self.replicator();
        let change = LocalChange::RecordRejected {
            der: der.to_vec(),
            by: None,
            report: replicator.is_some(),
        };
        let applied = self.apply(Proposal::now("engine", change)).await?;
        if applied.seq.is_some() {
            if let Some(r) = replicator {
                r.report_rejected(der.to_vec());
            }
        }
        Ok(())
    }

    /// The unknown certificates refused without being listed since the
    /// store was opened (more new ones than [`listing`] allows). Read by
    /// the metrics and the dashboard.
    pub fn unlisted_rejections(&self) -> Unlisted {
        self.listing().unlisted()
    }

    /// The listing budget, locked (a poisoned lock is taken as it is: the
    /// budget is a counter, never left half-changed).
    fn listing(&self) -> std::sync::MutexGuard<'_, listing::ListingBudget> {
        self.listing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Called on the primary when the other appliance of the pair (pair
    /// address `by`) reports a certificate it refused: lists it as
    /// rejected here too, marked as refused by that appliance (proposes
    /// [`LocalChange::RecordRejected`] as actor `pair`; logged as
    /// `trust.reject` with `refused_by` on a first sighting).
    pub async fn record_rejected_by(&self, der: &[u8], by: &str) -> Result<(), StoreError> {
        let change = LocalChange::RecordRejected {
            der: der.to_vec(),
            by: Some(by.to_string()),
            report: false,
        };
        self.apply(Proposal::now("pair", change)).await?;
        Ok(())
    }

    /// The certificates this appliance refused that still wait to be
    /// listed on the primary (DER, oldest first, at most `limit`). Called
    /// when the pair node starts, so that a restart loses no report.
    pub async fn rejected_unreported(&self, limit: i64) -> Result<Vec<Vec<u8>>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT der FROM certs WHERE kind = 'rejected' AND report_pending = 1 \
             ORDER BY first_seen, thumbprint LIMIT ?1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Says that the certificate `der` no longer waits to be reported to
    /// the primary (it is listed there, or the primary refused it for
    /// good): proposes [`LocalChange::RejectedReported`]. Called by the
    /// pair node's reporter.
    pub async fn rejected_reported(&self, der: &[u8]) -> Result<(), StoreError> {
        let change = LocalChange::RejectedReported {
            thumbprint: x509::thumbprint(der),
        };
        self.apply(Proposal::now("pair", change)).await?;
        Ok(())
    }

    /// Removes a certificate (any list) by thumbprint (40 hex digits; case
    /// and `:` separators ignored): proposes [`LocalChange::RemoveRejected`]
    /// for a certificate on the rejected list, [`Change::TrustRemove`]
    /// otherwise. Logged as `trust.remove`.
    pub async fn trust_remove(&self, actor: &str, thumbprint: &str) -> Result<(), StoreError> {
        validate_actor(actor)?;
        let thumbprint = x509::normalize_thumbprint(thumbprint)?;
        let kind: Option<String> =
            sqlx::query_scalar("SELECT kind FROM certs WHERE thumbprint = ?1")
                .bind(&thumbprint)
                .fetch_optional(&self.pool)
                .await?;
        if kind.as_deref() == Some(CertKind::Rejected.as_str()) {
            let change = LocalChange::RemoveRejected { thumbprint };
            self.apply(Proposal::now(actor, change)).await?;
        } else {
            let change = Change::TrustRemove { thumbprint };
            self.apply(Proposal::now(actor, change)).await?;
        }
        Ok(())
    }

    /// All certificates on one list, oldest first (rejected: most recently
    /// seen first).
    pub async fn certs(&self, kind: CertKind) -> Result<Vec<CertInfo>, StoreError> {
        let order = if kind == CertKind::Rejected {
            "last_seen DESC, thumbprint"
        } else {
            "first_seen, thumbprint"
        };
        let sql = format!(
            "SELECT thumbprint, kind, subject, application_uri, not_before, not_after, der, \
             first_seen, last_seen, refused_here, refused_by, report_pending FROM certs WHERE kind = ?1 ORDER BY {order}"
        );
        let rows = sqlx::query(&sql)
            .bind(kind.as_str())
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(cert_from_row).collect()
    }

    /// The certificate with `thumbprint`, on whichever list. Called after a
    /// replicated [`Change::TrustAdd`] to answer what was stored.
    pub(crate) async fn cert_by_thumbprint(
        &self,
        thumbprint: &str,
    ) -> Result<Option<CertInfo>, StoreError> {
        let row = sqlx::query(
            "SELECT thumbprint, kind, subject, application_uri, not_before, not_after, der, \
             first_seen, last_seen, refused_here, refused_by, report_pending FROM certs WHERE thumbprint = ?1",
        )
        .bind(thumbprint)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(cert_from_row).transpose()
    }

    /// Which list the certificate with these exact DER bytes is on, if any.
    /// Called by the engine on every secure-channel handshake.
    pub async fn cert_status(&self, der: &[u8]) -> Result<Option<CertKind>, StoreError> {
        let kind: Option<String> =
            sqlx::query_scalar("SELECT kind FROM certs WHERE thumbprint = ?1")
                .bind(x509::thumbprint(der))
                .fetch_optional(&self.pool)
                .await?;
        kind.as_deref().map(kind_from_db).transpose()
    }

    /// Adds a CRL (DER or PEM `X509 CRL`): proposes [`Change::AddCrl`]. At
    /// most one CRL per issuer is kept: a newer one replaces the stored one,
    /// an older one is refused. The signature is not checked here; the
    /// engine checks it against the issuer list when it uses the CRL. Logged
    /// as `crl.add` with the DER (hex).
    ///
    /// Refused before anything is stored: a CRL whose issuer name is no
    /// certificate's on the trusted or issuer list (no CA of this
    /// appliance), one whose signature does not verify with such a
    /// certificate's key, and one
    /// whose thisUpdate lies more than [`CRL_CLOCK_SKEW`] ahead. Either
    /// would replace a good CRL of that issuer name with one not in force,
    /// and every certificate of the CA would be refused meanwhile.
    pub async fn add_crl(&self, actor: &str, der_or_pem: &[u8]) -> Result<(), StoreError> {
        validate_actor(actor)?;
        let der = x509::pem_or_der(der_or_pem, "X509 CRL", "crl")?.into_owned();
        if der.len() > MAX_CRL_ADDED {
            return Err(invalid(
                "crl",
                format!(
                    "larger than {} KiB: a CRL is replicated to the standby in one message",
                    MAX_CRL_ADDED / 1024
                ),
            ));
        }
        let crl = x509::parse_crl(&der)?;
        let ahead = (chrono::Utc::now() + CRL_CLOCK_SKEW)
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        if crl.this_update > ahead {
            return Err(invalid(
                "crl",
                format!(
                    "its thisUpdate {} is in the future (the CA's clock or this appliance's \
                     is wrong): it would not be in force before then, and the CA's \
                     certificates would be refused meanwhile",
                    crl.this_update
                ),
            ));
        }
        let issuers: Vec<Vec<u8>> = sqlx::query_scalar(
            "SELECT der FROM certs WHERE kind IN ('trusted', 'issuer') AND subject = ?1",
        )
        .bind(&crl.issuer)
        .fetch_all(&self.pool)
        .await?;
        if issuers.is_empty() {
            return Err(invalid(
                "crl",
                format!(
                    "its issuer {:?} is no certificate on the trusted or issuer list: \
                     add the CA's certificate first",
                    crl.issuer
                ),
            ));
        }
        let mut signed = false;
        for ca in &issuers {
            signed = signed || x509::crl_signed_by(&der, ca)?;
        }
        if !signed {
            return Err(invalid(
                "crl",
                format!(
                    "its signature does not verify with the certificate of its issuer {:?} on \
                     the trust lists: it is not that CA's CRL (another key with the same name?)",
                    crl.issuer
                ),
            ));
        }
        self.apply(Proposal::now(actor, Change::AddCrl { der }))
            .await?;
        Ok(())
    }

    /// The stored CRLs described (issuer, times, how many certificates each
    /// revokes), ordered by issuer. Called by the console's Certificates
    /// page, `GET /api/v1/crls` and the metrics.
    pub async fn crl_infos(&self) -> Result<Vec<CrlInfo>, StoreError> {
        let ders = self.crls().await?;
        ders.iter()
            .map(|der| {
                let p = x509::parse_crl(der)?;
                Ok(CrlInfo {
                    issuer: p.issuer,
                    thumbprint: p.thumbprint,
                    this_update: p.this_update,
                    next_update: p.next_update,
                    revoked: p.revoked,
                })
            })
            .collect()
    }

    /// Each stored CRL's issuer and next update (RFC 3339, when it names
    /// one), ordered by issuer, without reading the CRLs themselves. Called
    /// by the console's dashboard on every refresh.
    pub async fn crl_next_updates(&self) -> Result<Vec<(String, Option<String>)>, StoreError> {
        Ok(
            sqlx::query_as("SELECT issuer, next_update FROM crls ORDER BY issuer")
                .fetch_all(&self.pool)
                .await?,
        )
    }

    /// All stored CRLs, DER, ordered by issuer.
    pub async fn crls(&self) -> Result<Vec<Vec<u8>>, StoreError> {
        Ok(sqlx::query_scalar("SELECT der FROM crls ORDER BY issuer")
            .fetch_all(&self.pool)
            .await?)
    }

    // -------------------------------------------------------------- settings

    /// Sets a key/value setting (key: `a-z 0-9 . _ -`, value up to 64 KiB):
    /// proposes [`LocalChange::SetSetting`] for the
    /// [`NODE_LOCAL_SETTINGS`], [`Change::SetSetting`] for every other key.
    /// Logged as `setting.set` with key and value — do not store secrets
    /// here.
    pub async fn set_setting(&self, actor: &str, key: &str, value: &str) -> Result<(), StoreError> {
        let (key, value) = (key.to_owned(), value.to_owned());
        match setting_scope(&key) {
            Scope::Local => {
                let change = LocalChange::SetSetting { key, value };
                self.apply(Proposal::now(actor, change)).await?;
            }
            Scope::Replicated => {
                let change = Change::SetSetting { key, value };
                self.apply(Proposal::now(actor, change)).await?;
            }
        }
        Ok(())
    }

    /// Current value of a setting, `None` if never set.
    pub async fn setting(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT value FROM settings WHERE key = ?1")
                .bind(key)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// Current values of several settings, in the order of `keys` (`None`
    /// for one never set), read in one read transaction so they belong to
    /// one state of the store: a change applied meanwhile is seen entirely
    /// or not at all. Used where settings are only meaningful together (the
    /// configuration document and this appliance's overlay).
    pub async fn settings(&self, keys: &[&str]) -> Result<Vec<Option<String>>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let mut values = Vec::with_capacity(keys.len());
        for key in keys {
            values.push(
                sqlx::query_scalar("SELECT value FROM settings WHERE key = ?1")
                    .bind(key)
                    .fetch_optional(&mut *tx)
                    .await?,
            );
        }
        tx.commit().await?;
        Ok(values)
    }

    // ------------------------------------------------------------ change log

    /// Change-log entries with `seq > after_seq`, ascending, at most `limit`
    /// (clamped to `0..=MAX_LOG_BATCH`). Called by the replication sender.
    pub async fn change_log_since(
        &self,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<ChangeLogEntry>, StoreError> {
        let limit = limit.clamp(0, MAX_LOG_BATCH);
        let rows = sqlx::query(
            "SELECT seq, epoch, actor, at, kind, payload, scope FROM change_log \
             WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        )
        .bind(after_seq)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(log_entry).collect()
    }

    /// Change-log entries matching `filter`, in `order`, at most `limit`
    /// (clamped to `0..=MAX_LOG_BATCH`). The filter runs in SQL, so a
    /// narrow filter over a long log reads only what it returns. Called by
    /// the audit page, its CSV export and the REST audit trail.
    pub async fn change_log_filtered(
        &self,
        filter: &LogFilter,
        order: LogOrder,
        limit: i64,
    ) -> Result<Vec<ChangeLogEntry>, StoreError> {
        let limit = limit.clamp(0, MAX_LOG_BATCH);
        let mut q = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
            "SELECT seq, epoch, actor, at, kind, payload, scope FROM change_log WHERE 1 = 1",
        );
        if let Some(actor) = &filter.actor {
            q.push(" AND actor = ").push_bind(actor.clone());
        }
        if !filter.kind_prefixes.is_empty() {
            q.push(" AND (");
            for (i, prefix) in filter.kind_prefixes.iter().enumerate() {
                if i > 0 {
                    q.push(" OR ");
                }
                q.push("substr(kind, 1, ")
                    .push_bind(i64::try_from(prefix.chars().count()).unwrap_or(i64::MAX))
                    .push(") = ")
                    .push_bind(prefix.clone());
            }
            q.push(")");
        }
        // `at` is always written by `format_at` (fixed width, UTC), so the
        // text order is the time order.
        if let Some(from) = filter.from {
            q.push(" AND at >= ").push_bind(change::format_at(from));
        }
        if let Some(to) = filter.to {
            q.push(" AND at < ").push_bind(change::format_at(to));
        }
        if let Some(before) = filter.before_seq {
            q.push(" AND seq < ").push_bind(before);
        }
        if let Some(after) = filter.after_seq {
            q.push(" AND seq > ").push_bind(after);
        }
        q.push(match order {
            LogOrder::OldestFirst => " ORDER BY seq ASC",
            LogOrder::NewestFirst => " ORDER BY seq DESC",
        });
        q.push(" LIMIT ").push_bind(limit);
        let rows = q.build().fetch_all(&self.pool).await?;
        rows.iter().map(log_entry).collect()
    }

    /// Highest sequence number in the change log (0 when empty).
    pub async fn last_seq(&self) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM change_log")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Current replication epoch (starts at 1).
    pub async fn epoch(&self) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar("SELECT epoch FROM meta WHERE id = 1")
            .fetch_one(&self.pool)
            .await?)
    }

    /// Increments the epoch (on a leadership change) and returns the new
    /// value: proposes [`Change::BumpEpoch`]. Logged as `epoch.bump`,
    /// stamped with the new epoch.
    pub async fn bump_epoch(&self, actor: &str) -> Result<i64, StoreError> {
        Ok(self
            .apply(Proposal::now(actor, Change::BumpEpoch))
            .await?
            .epoch)
    }
}

/// Thumbprint, subject, application URI and validity of a DER
/// certificate (the console shows the appliance's own certificate with it).
pub fn describe_certificate(der: &[u8]) -> Result<CertSummary, StoreError> {
    let p = x509::parse_certificate(der)?;
    Ok(CertSummary {
        thumbprint: p.thumbprint,
        subject: p.subject,
        application_uri: p.application_uri,
        not_before: p.not_before,
        not_after: p.not_after,
    })
}

/// The application URI (the URI subjectAltName) of a DER certificate, or
/// `None` when it has none. The engine compares it with the ApplicationUri a
/// client claims in CreateSession.
pub fn certificate_application_uri(der: &[u8]) -> Result<Option<String>, StoreError> {
    Ok(x509::parse_certificate(der)?.application_uri)
}
