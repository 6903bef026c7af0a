#![forbid(unsafe_code)]
//! `uagate-store`: the configuration store of the gateway.
//!
//! One [`Store`] API over a SQLite database in WAL mode. Every configuration
//! change (users, certificate trust list, CRLs, settings) goes through it, is
//! validated, and is written in **one** transaction together with an entry in
//! an append-only change log ([`ChangeLogEntry`]). The pair replication ships
//! that log to the standby. Secrets (passwords, hashes) never enter the log.
//!
//! Schema lives in `migrations/` at the workspace root and is applied by
//! [`Store::open`].

mod chain;
mod error;
mod model;
mod password;
mod x509;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use serde_json::json;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Row, SqliteConnection};
use tokio::sync::Semaphore;

pub use chain::{TrustVerdict, MAX_CHAIN_LEN};
pub use error::StoreError;
pub use model::{CertInfo, CertKind, CertSummary, ChangeLogEntry, Role};

use error::invalid;

/// The migrations under `<workspace>/migrations`, embedded at compile time.
static MIGRATOR: Migrator = sqlx::migrate!("../../migrations");

/// Most rejected certificates kept; the least recently seen are dropped first,
/// so a hostile peer cannot grow the table without bound.
pub const REJECTED_CAP: i64 = 1000;

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

/// Handle to the configuration database. Cheap to clone (shares the pool).
#[derive(Clone, Debug)]
pub struct Store {
    pool: SqlitePool,
    hash_slots: Arc<Semaphore>,
}

/// Current time as RFC 3339 UTC with milliseconds, e.g. `2024-05-01T12:00:00.123Z`.
fn now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)
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
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
    {
        return Err(invalid(
            "name",
            "user name may only contain letters, digits and . _ - @",
        ));
    }
    Ok(())
}

fn validate_password(password: &str) -> Result<(), StoreError> {
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

/// Appends one change-log entry inside the caller's transaction, stamped with
/// the current epoch. Returns the new sequence number.
async fn append_log(
    conn: &mut SqliteConnection,
    actor: &str,
    kind: &str,
    payload: &serde_json::Value,
) -> Result<i64, StoreError> {
    let seq: i64 = sqlx::query_scalar(
        "INSERT INTO change_log (epoch, actor, at, kind, payload) \
         SELECT epoch, ?1, ?2, ?3, ?4 FROM meta WHERE id = 1 RETURNING seq",
    )
    .bind(actor)
    .bind(now())
    .bind(kind)
    .bind(payload.to_string())
    .fetch_one(&mut *conn)
    .await?;
    tracing::info!(seq, actor, kind, "configuration change");
    Ok(seq)
}

fn role_from_db(s: &str) -> Result<Role, StoreError> {
    s.parse().map_err(|_| StoreError::Corrupt {
        table: "users",
        message: format!("unknown role {s:?}"),
    })
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

impl Store {
    /// Opens (creating if missing) the database at `db_path`, switches it to
    /// WAL with foreign keys and a 5 s busy timeout, and applies pending
    /// migrations. Called once at gateway start-up.
    pub async fn open(db_path: &Path) -> Result<Store, StoreError> {
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
        MIGRATOR.run(&pool).await?;
        tracing::debug!(path = %db_path.display(), "store opened");
        Ok(Store {
            pool,
            hash_slots: Arc::new(Semaphore::new(HASH_SLOTS)),
        })
    }

    /// Closes all connections (checkpointing the WAL). Further calls fail.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Starts a write transaction. `BEGIN IMMEDIATE` takes the write lock up
    /// front so read-then-write sequences cannot fail with a lock upgrade.
    async fn begin(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, StoreError> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
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

    /// Creates a user with an argon2id-hashed password. Logged as `user.add`
    /// (name and role only).
    pub async fn add_user(
        &self,
        actor: &str,
        name: &str,
        password: &str,
        role: Role,
    ) -> Result<(), StoreError> {
        validate_actor(actor)?;
        validate_user_name(name)?;
        validate_password(password)?;
        // Cheap pre-check to avoid hashing for an obvious duplicate; the
        // primary key decides in the transaction below.
        let exists: Option<i64> = sqlx::query_scalar("SELECT 1 FROM users WHERE name = ?1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        if exists.is_some() {
            return Err(StoreError::UserExists(name.to_owned()));
        }
        let hash = self.hash_password(password).await?;
        let mut tx = self.begin().await?;
        let at = now();
        let inserted = sqlx::query(
            "INSERT INTO users (name, password_hash, role, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?4)",
        )
        .bind(name)
        .bind(&hash)
        .bind(role.as_str())
        .bind(&at)
        .execute(&mut *tx)
        .await;
        match inserted {
            Ok(_) => {}
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                return Err(StoreError::UserExists(name.to_owned()));
            }
            Err(e) => return Err(e.into()),
        }
        append_log(
            &mut tx,
            actor,
            "user.add",
            &json!({ "name": name, "role": role.as_str() }),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Replaces a user's password. Logged as `user.password` (name only).
    pub async fn set_password(
        &self,
        actor: &str,
        name: &str,
        password: &str,
    ) -> Result<(), StoreError> {
        validate_actor(actor)?;
        validate_password(password)?;
        let hash = self.hash_password(password).await?;
        let mut tx = self.begin().await?;
        let updated =
            sqlx::query("UPDATE users SET password_hash = ?1, updated_at = ?2 WHERE name = ?3")
                .bind(&hash)
                .bind(now())
                .bind(name)
                .execute(&mut *tx)
                .await?;
        if updated.rows_affected() == 0 {
            return Err(StoreError::UnknownUser(name.to_owned()));
        }
        append_log(&mut tx, actor, "user.password", &json!({ "name": name })).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Changes a user's role. Demoting the last admin is refused so the
    /// console cannot lock itself out. Logged as `user.role`.
    pub async fn set_role(&self, actor: &str, name: &str, role: Role) -> Result<(), StoreError> {
        validate_actor(actor)?;
        let mut tx = self.begin().await?;
        let previous: Option<String> = sqlx::query_scalar("SELECT role FROM users WHERE name = ?1")
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?;
        let previous = match previous {
            Some(p) => role_from_db(&p)?,
            None => return Err(StoreError::UnknownUser(name.to_owned())),
        };
        if previous == Role::Admin && role != Role::Admin && admin_count(&mut tx).await? <= 1 {
            return Err(invalid("role", "cannot demote the last admin"));
        }
        sqlx::query("UPDATE users SET role = ?1, updated_at = ?2 WHERE name = ?3")
            .bind(role.as_str())
            .bind(now())
            .bind(name)
            .execute(&mut *tx)
            .await?;
        append_log(
            &mut tx,
            actor,
            "user.role",
            &json!({ "name": name, "role": role.as_str(), "previous": previous.as_str() }),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Deletes a user. Deleting the last admin is refused. Logged as
    /// `user.delete`.
    pub async fn delete_user(&self, actor: &str, name: &str) -> Result<(), StoreError> {
        validate_actor(actor)?;
        let mut tx = self.begin().await?;
        let role: Option<String> = sqlx::query_scalar("SELECT role FROM users WHERE name = ?1")
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?;
        let role = match role {
            Some(r) => role_from_db(&r)?,
            None => return Err(StoreError::UnknownUser(name.to_owned())),
        };
        if role == Role::Admin && admin_count(&mut tx).await? <= 1 {
            return Err(invalid("name", "cannot delete the last admin"));
        }
        sqlx::query("DELETE FROM users WHERE name = ?1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        append_log(&mut tx, actor, "user.delete", &json!({ "name": name })).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Checks a login. Returns the user's role on success, `None` for an
    /// unknown user or a wrong password (indistinguishable by timing: an
    /// unknown user is verified against a dummy hash).
    pub async fn verify_user(
        &self,
        name: &str,
        password: &str,
    ) -> Result<Option<Role>, StoreError> {
        if password.len() > MAX_PASSWORD_LEN || name.len() > 4 * MAX_NAME_LEN {
            return Ok(None);
        }
        let row = sqlx::query("SELECT password_hash, role FROM users WHERE name = ?1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        let password = password.to_owned();
        match row {
            Some(row) => {
                let hash: String = row.try_get("password_hash")?;
                let role: String = row.try_get("role")?;
                let ok = self
                    .blocking(move || password::verify(&password, &hash))
                    .await?;
                if ok {
                    Ok(Some(role_from_db(&role)?))
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

    /// The current role of a user, `None` for an unknown name. Called on
    /// every console request so a role change or removal takes effect at
    /// once, not when the user's token expires.
    pub async fn user_role(&self, name: &str) -> Result<Option<Role>, StoreError> {
        let role: Option<String> = sqlx::query_scalar("SELECT role FROM users WHERE name = ?1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        role.as_deref().map(role_from_db).transpose()
    }

    /// Records an operator action that changes no stored state (a
    /// ServiceLevel override, a closed session, a forced failover) in the
    /// change log, so the audit trail is complete. `kind` must start with
    /// `event.`; a standby replays such entries as no-ops.
    pub async fn record_event(
        &self,
        actor: &str,
        kind: &str,
        payload: &serde_json::Value,
    ) -> Result<i64, StoreError> {
        validate_actor(actor)?;
        if !kind.starts_with("event.") || kind.len() > 64 {
            return Err(invalid("kind", "event kinds start with `event.`"));
        }
        let mut tx = self.begin().await?;
        let seq = append_log(&mut tx, actor, kind, payload).await?;
        tx.commit().await?;
        Ok(seq)
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
    /// the rejected list, or between trusted and issuer, if it was there).
    /// Logged as `trust.add` with the DER (hex) so the standby can apply it.
    pub async fn trust_add(
        &self,
        actor: &str,
        der: &[u8],
        kind: CertKind,
    ) -> Result<CertInfo, StoreError> {
        validate_actor(actor)?;
        if kind == CertKind::Rejected {
            return Err(invalid(
                "kind",
                "trust_add takes trusted or issuer; rejections are recorded by the engine",
            ));
        }
        let parsed = x509::parse_certificate(der)?;
        let at = now();
        let mut tx = self.begin().await?;
        let previous = sqlx::query("SELECT kind, first_seen FROM certs WHERE thumbprint = ?1")
            .bind(&parsed.thumbprint)
            .fetch_optional(&mut *tx)
            .await?;
        let (previous_kind, first_seen) = match previous {
            Some(row) => {
                let k: String = row.try_get("kind")?;
                (
                    Some(kind_from_db(&k)?),
                    row.try_get::<String, _>("first_seen")?,
                )
            }
            None => (None, at.clone()),
        };
        sqlx::query(
            "INSERT INTO certs (thumbprint, kind, subject, application_uri, not_before, \
             not_after, der, first_seen, last_seen) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
             ON CONFLICT (thumbprint) DO UPDATE SET kind = excluded.kind, \
             last_seen = excluded.last_seen",
        )
        .bind(&parsed.thumbprint)
        .bind(kind.as_str())
        .bind(&parsed.subject)
        .bind(&parsed.application_uri)
        .bind(&parsed.not_before)
        .bind(&parsed.not_after)
        .bind(der)
        .bind(&first_seen)
        .bind(&at)
        .execute(&mut *tx)
        .await?;
        append_log(
            &mut tx,
            actor,
            "trust.add",
            &json!({
                "thumbprint": parsed.thumbprint,
                "kind": kind.as_str(),
                "previous_kind": previous_kind.map(CertKind::as_str),
                "subject": parsed.subject,
                "application_uri": parsed.application_uri,
                "not_before": parsed.not_before,
                "not_after": parsed.not_after,
                "der": hex::encode(der),
            }),
        )
        .await?;
        tx.commit().await?;
        Ok(CertInfo {
            thumbprint: parsed.thumbprint,
            kind,
            subject: parsed.subject,
            application_uri: parsed.application_uri,
            not_before: parsed.not_before,
            not_after: parsed.not_after,
            der: der.to_vec(),
            first_seen,
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

    /// Called by the engine when a peer presents an untrusted certificate.
    /// New certificates are stored as rejected (logged as `trust.reject`,
    /// actor `engine`); repeats only refresh `last_seen` (no log entry);
    /// certificates already trusted or issuer are left alone. The rejected
    /// list is capped at [`REJECTED_CAP`], dropping the least recently seen.
    pub async fn record_rejected(&self, der: &[u8]) -> Result<(), StoreError> {
        let parsed = x509::parse_certificate(der)?;
        let at = now();
        let mut tx = self.begin().await?;
        let existing: Option<String> =
            sqlx::query_scalar("SELECT kind FROM certs WHERE thumbprint = ?1")
                .bind(&parsed.thumbprint)
                .fetch_optional(&mut *tx)
                .await?;
        match existing.as_deref().map(kind_from_db).transpose()? {
            Some(CertKind::Rejected) => {
                sqlx::query("UPDATE certs SET last_seen = ?1 WHERE thumbprint = ?2")
                    .bind(&at)
                    .bind(&parsed.thumbprint)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                return Ok(());
            }
            Some(kind) => {
                tracing::debug!(thumbprint = %parsed.thumbprint, %kind,
                    "record_rejected for a certificate on another list; ignored");
                return Ok(());
            }
            None => {}
        }
        sqlx::query(
            "INSERT INTO certs (thumbprint, kind, subject, application_uri, not_before, \
             not_after, der, first_seen, last_seen) \
             VALUES (?1, 'rejected', ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
        )
        .bind(&parsed.thumbprint)
        .bind(&parsed.subject)
        .bind(&parsed.application_uri)
        .bind(&parsed.not_before)
        .bind(&parsed.not_after)
        .bind(der)
        .bind(&at)
        .execute(&mut *tx)
        .await?;
        let dropped = sqlx::query(
            "DELETE FROM certs WHERE kind = 'rejected' AND thumbprint NOT IN \
             (SELECT thumbprint FROM certs WHERE kind = 'rejected' \
              ORDER BY last_seen DESC, rowid DESC LIMIT ?1)",
        )
        .bind(REJECTED_CAP)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if dropped > 0 {
            tracing::debug!(dropped, "rejected certificate list at cap; dropped oldest");
        }
        append_log(
            &mut tx,
            "engine",
            "trust.reject",
            &json!({
                "thumbprint": parsed.thumbprint,
                "subject": parsed.subject,
                "application_uri": parsed.application_uri,
                "not_before": parsed.not_before,
                "not_after": parsed.not_after,
            }),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Removes a certificate (any list) by thumbprint (40 hex digits; case
    /// and `:` separators ignored). Logged as `trust.remove`.
    pub async fn trust_remove(&self, actor: &str, thumbprint: &str) -> Result<(), StoreError> {
        validate_actor(actor)?;
        let thumbprint = x509::normalize_thumbprint(thumbprint)?;
        let mut tx = self.begin().await?;
        let kind: Option<String> =
            sqlx::query_scalar("DELETE FROM certs WHERE thumbprint = ?1 RETURNING kind")
                .bind(&thumbprint)
                .fetch_optional(&mut *tx)
                .await?;
        let Some(kind) = kind else {
            return Err(StoreError::UnknownCert(thumbprint));
        };
        append_log(
            &mut tx,
            actor,
            "trust.remove",
            &json!({ "thumbprint": thumbprint, "kind": kind }),
        )
        .await?;
        tx.commit().await?;
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
             first_seen FROM certs WHERE kind = ?1 ORDER BY {order}"
        );
        let rows = sqlx::query(&sql)
            .bind(kind.as_str())
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(cert_from_row).collect()
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

    /// Adds a CRL (DER or PEM `X509 CRL`). At most one CRL per issuer is kept:
    /// a newer one replaces the stored one, an older one is refused. The
    /// signature is not checked here; the engine checks it against the issuer
    /// list when it uses the CRL. Logged as `crl.add` with the DER (hex).
    pub async fn add_crl(&self, actor: &str, der_or_pem: &[u8]) -> Result<(), StoreError> {
        validate_actor(actor)?;
        let der = x509::pem_or_der(der_or_pem, "X509 CRL", "crl")?;
        let parsed = x509::parse_crl(&der)?;
        let mut tx = self.begin().await?;
        let stored: Option<String> =
            sqlx::query_scalar("SELECT this_update FROM crls WHERE issuer = ?1")
                .bind(&parsed.issuer)
                .fetch_optional(&mut *tx)
                .await?;
        if let Some(stored) = stored {
            if stored > parsed.this_update {
                return Err(invalid(
                    "crl",
                    format!(
                        "older than the stored CRL of this issuer (thisUpdate {} < {stored})",
                        parsed.this_update
                    ),
                ));
            }
        }
        sqlx::query(
            "INSERT INTO crls (issuer, thumbprint, this_update, next_update, der, added_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (issuer) DO UPDATE SET \
             thumbprint = excluded.thumbprint, this_update = excluded.this_update, \
             next_update = excluded.next_update, der = excluded.der, added_at = excluded.added_at",
        )
        .bind(&parsed.issuer)
        .bind(&parsed.thumbprint)
        .bind(&parsed.this_update)
        .bind(&parsed.next_update)
        .bind(der.as_ref())
        .bind(now())
        .execute(&mut *tx)
        .await?;
        append_log(
            &mut tx,
            actor,
            "crl.add",
            &json!({
                "issuer": parsed.issuer,
                "thumbprint": parsed.thumbprint,
                "this_update": parsed.this_update,
                "next_update": parsed.next_update,
                "der": hex::encode(der.as_ref()),
            }),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// All stored CRLs, DER, ordered by issuer.
    pub async fn crls(&self) -> Result<Vec<Vec<u8>>, StoreError> {
        Ok(sqlx::query_scalar("SELECT der FROM crls ORDER BY issuer")
            .fetch_all(&self.pool)
            .await?)
    }

    // -------------------------------------------------------------- settings

    /// Sets a key/value setting (key: `a-z 0-9 . _ -`, value up to 64 KiB).
    /// Logged as `setting.set` with key and value — do not store secrets here.
    pub async fn set_setting(&self, actor: &str, key: &str, value: &str) -> Result<(), StoreError> {
        validate_actor(actor)?;
        validate_setting_key(key)?;
        if value.len() > MAX_SETTING_VALUE_LEN {
            return Err(invalid(
                key,
                format!("value longer than {MAX_SETTING_VALUE_LEN} bytes"),
            ));
        }
        let mut tx = self.begin().await?;
        let before: Option<String> =
            sqlx::query_scalar("SELECT value FROM settings WHERE key = ?1")
                .bind(key)
                .fetch_optional(&mut *tx)
                .await?;
        sqlx::query(
            "INSERT INTO settings (key, value, updated_at) VALUES (?1, ?2, ?3) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value, \
             updated_at = excluded.updated_at",
        )
        .bind(key)
        .bind(value)
        .bind(now())
        .execute(&mut *tx)
        .await?;
        append_log(
            &mut tx,
            actor,
            "setting.set",
            &json!({ "key": key, "value": value, "before": before }),
        )
        .await?;
        tx.commit().await?;
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
            "SELECT seq, epoch, actor, at, kind, payload FROM change_log \
             WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        )
        .bind(after_seq)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(ChangeLogEntry {
                    seq: row.try_get("seq")?,
                    epoch: row.try_get("epoch")?,
                    actor: row.try_get("actor")?,
                    at: row.try_get("at")?,
                    kind: row.try_get("kind")?,
                    payload: row.try_get("payload")?,
                })
            })
            .collect()
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
    /// value. Logged as `epoch.bump`, stamped with the new epoch.
    pub async fn bump_epoch(&self, actor: &str) -> Result<i64, StoreError> {
        validate_actor(actor)?;
        let mut tx = self.begin().await?;
        let epoch: i64 =
            sqlx::query_scalar("UPDATE meta SET epoch = epoch + 1 WHERE id = 1 RETURNING epoch")
                .fetch_one(&mut *tx)
                .await?;
        append_log(&mut tx, actor, "epoch.bump", &json!({ "epoch": epoch })).await?;
        tx.commit().await?;
        Ok(epoch)
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
