//! Snapshots of the replicated state, for the pair's Raft log compaction
//! and for bringing a standby up to date without replaying the whole log.
//!
//! A [`ReplicatedSnapshot`] holds exactly the replicated state (see the
//! crate documentation): the users (with password hashes and roles), the
//! trusted and issuer certificates, the CRLs, every setting not in
//! [`NODE_LOCAL_SETTINGS`], the epoch — and where that state stands in the
//! replicated log (`last_applied`, membership). It never holds node-local
//! state: rejected certificates, node-local settings, the change log.
//!
//! [`Store::export_snapshot`] reads it in one read transaction (one
//! consistent view); [`Store::install_snapshot`] replaces the replicated
//! state with it in one write transaction and keeps the node-local rows.
//! The encoding ([`ReplicatedSnapshot::to_bytes`]) is JSON with every list
//! sorted by its key, so the same state always gives the same bytes; it
//! starts with a format number ([`SNAPSHOT_FORMAT`]) and a snapshot of any
//! other format is refused ([`StoreError::SnapshotFormat`]).

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::Row;

use crate::apply::{append_log, validate_hash, validate_value};
use crate::change::{format_at, setting_scope, PasswordHash, Scope, NODE_LOCAL_SETTINGS};
use crate::error::{invalid, StoreError};
use crate::model::{CertKind, Role};
use crate::replica::{position_to_db, read_replica, LogPosition};
use crate::{kind_from_db, role_from_db, validate_actor, validate_setting_key, validate_user_name};
use crate::{x509, Store};

/// The snapshot format this build writes and the only one it reads.
pub const SNAPSHOT_FORMAT: u32 = 1;

/// The replicated state of a store at one log position: what the pair
/// ships to a node that is too far behind to replay the log. Built by
/// [`Store::export_snapshot`], installed by [`Store::install_snapshot`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicatedSnapshot {
    /// Format number, [`SNAPSHOT_FORMAT`].
    pub format: u32,
    /// The last log entry the state includes; `None` before the first.
    pub last_applied: Option<LogPosition>,
    /// The last cluster membership the state machine saw (opaque to the
    /// store); `None` before the first.
    pub membership: Option<serde_json::Value>,
    /// The replication epoch.
    pub epoch: i64,
    /// The users, sorted by name.
    pub users: Vec<SnapshotUser>,
    /// The trusted and issuer certificates, sorted by thumbprint.
    pub certs: Vec<SnapshotCert>,
    /// The CRLs, sorted by issuer.
    pub crls: Vec<SnapshotCrl>,
    /// The replicated settings, sorted by key.
    pub settings: Vec<SnapshotSetting>,
}

/// A user in a [`ReplicatedSnapshot`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotUser {
    /// Login name.
    pub name: String,
    /// The password's argon2id hash.
    pub password_hash: PasswordHash,
    /// The user's role.
    pub role: Role,
    /// When the user was created (the proposal's time).
    pub created_at: String,
    /// When the user was last changed (the proposal's time).
    pub updated_at: String,
}

/// A trusted or issuer certificate in a [`ReplicatedSnapshot`]. Thumbprint,
/// subject, application URI and validity are derived from the DER on
/// install, the way [`crate::Change::TrustAdd`] derives them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotCert {
    /// [`CertKind::Trusted`] or [`CertKind::Issuer`].
    pub kind: CertKind,
    /// The certificate, DER (hex in the encoding).
    #[serde(with = "hex_bytes")]
    pub der: Vec<u8>,
    /// When the exporting store first saw it; used on install only for a
    /// certificate the installing store does not hold (node-local).
    pub first_seen: String,
    /// When the exporting store last saw it; like `first_seen`.
    pub last_seen: String,
}

/// A CRL in a [`ReplicatedSnapshot`]. Issuer, thumbprint and update times
/// are derived from the DER on install.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotCrl {
    /// The CRL, DER (hex in the encoding).
    #[serde(with = "hex_bytes")]
    pub der: Vec<u8>,
    /// When it was added (the proposal's time).
    pub added_at: String,
}

/// A replicated setting in a [`ReplicatedSnapshot`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotSetting {
    /// Key, never one of [`NODE_LOCAL_SETTINGS`].
    pub key: String,
    /// Value.
    pub value: String,
    /// When it was last set (the proposal's time).
    pub updated_at: String,
}

/// Byte strings as lowercase hex in the snapshot encoding.
mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        hex::decode(text).map_err(serde::de::Error::custom)
    }
}

/// Just the format number, read before the rest so an unknown format is
/// named as such rather than as a decoding error.
#[derive(Deserialize)]
struct FormatOnly {
    format: u32,
}

fn bad(message: impl Into<String>) -> StoreError {
    StoreError::SnapshotInvalid(message.into())
}

/// Checks a stored time is RFC 3339 (the rows keep the proposer's text).
fn validate_time(field: &str, value: &str) -> Result<(), StoreError> {
    DateTime::parse_from_rfc3339(value)
        .map(drop)
        .map_err(|e| invalid(field, format!("{value:?} is not an RFC 3339 time: {e}")))
}

impl ReplicatedSnapshot {
    /// The encoding shipped between the nodes and kept as the current
    /// snapshot: JSON, deterministic for a given state.
    pub fn to_bytes(&self) -> Result<Vec<u8>, StoreError> {
        serde_json::to_vec(self).map_err(|e| bad(format!("cannot encode: {e}")))
    }

    /// Decodes [`ReplicatedSnapshot::to_bytes`]. A snapshot of another
    /// format is refused with [`StoreError::SnapshotFormat`], bytes that do
    /// not decode with [`StoreError::SnapshotInvalid`]. The content is
    /// checked by [`Store::install_snapshot`].
    pub fn from_bytes(bytes: &[u8]) -> Result<ReplicatedSnapshot, StoreError> {
        let FormatOnly { format } =
            serde_json::from_slice(bytes).map_err(|e| bad(format!("no format number: {e}")))?;
        if format != SNAPSHOT_FORMAT {
            return Err(StoreError::SnapshotFormat {
                found: format,
                supported: SNAPSHOT_FORMAT,
            });
        }
        serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))
    }
}

/// A certificate ready to insert: decoded and checked.
struct CertRow<'a> {
    snap: &'a SnapshotCert,
    parsed: x509::ParsedCert,
}

/// A CRL ready to insert: decoded and checked.
struct CrlRow<'a> {
    snap: &'a SnapshotCrl,
    parsed: x509::ParsedCrl,
}

/// Checks every row of a snapshot before anything is written; returns the
/// decoded certificates and CRLs.
fn validate(
    snapshot: &ReplicatedSnapshot,
) -> Result<(Vec<CertRow<'_>>, Vec<CrlRow<'_>>), StoreError> {
    let row = |what: &str, key: &str, e: StoreError| bad(format!("{what} {key:?}: {e}"));
    if snapshot.format != SNAPSHOT_FORMAT {
        return Err(StoreError::SnapshotFormat {
            found: snapshot.format,
            supported: SNAPSHOT_FORMAT,
        });
    }
    if snapshot.epoch < 1 {
        return Err(bad(format!(
            "epoch {} (must be at least 1)",
            snapshot.epoch
        )));
    }
    let mut names = BTreeSet::new();
    for user in &snapshot.users {
        validate_user_name(&user.name)
            .and_then(|()| validate_hash(user.password_hash.as_str()))
            .and_then(|()| validate_time("created_at", &user.created_at))
            .and_then(|()| validate_time("updated_at", &user.updated_at))
            .map_err(|e| row("user", &user.name, e))?;
        if !names.insert(user.name.as_str()) {
            return Err(bad(format!("user {:?} listed twice", user.name)));
        }
    }
    let mut certs = Vec::with_capacity(snapshot.certs.len());
    let mut thumbprints = BTreeSet::new();
    for (i, snap) in snapshot.certs.iter().enumerate() {
        let parsed = x509::parse_certificate(&snap.der)
            .map_err(|e| bad(format!("certificate #{}: {e}", i + 1)))?;
        let key = parsed.thumbprint.clone();
        if snap.kind == CertKind::Rejected {
            return Err(bad(format!(
                "certificate {key}: rejected certificates are node-local"
            )));
        }
        validate_time("first_seen", &snap.first_seen)
            .and_then(|()| validate_time("last_seen", &snap.last_seen))
            .map_err(|e| row("certificate", &key, e))?;
        if !thumbprints.insert(key.clone()) {
            return Err(bad(format!("certificate {key} listed twice")));
        }
        certs.push(CertRow { snap, parsed });
    }
    let mut crls = Vec::with_capacity(snapshot.crls.len());
    let mut issuers = BTreeSet::new();
    for (i, snap) in snapshot.crls.iter().enumerate() {
        let parsed = x509::parse_crl(&snap.der).map_err(|e| bad(format!("CRL #{}: {e}", i + 1)))?;
        validate_time("added_at", &snap.added_at).map_err(|e| row("crl", &parsed.issuer, e))?;
        if !issuers.insert(parsed.issuer.clone()) {
            return Err(bad(format!("two CRLs of issuer {:?}", parsed.issuer)));
        }
        crls.push(CrlRow { snap, parsed });
    }
    let mut keys = BTreeSet::new();
    for setting in &snapshot.settings {
        validate_setting_key(&setting.key)
            .and_then(|()| validate_value(&setting.key, &setting.value))
            .and_then(|()| validate_time("updated_at", &setting.updated_at))
            .map_err(|e| row("setting", &setting.key, e))?;
        if setting_scope(&setting.key) != Scope::Replicated {
            return Err(bad(format!(
                "setting {:?} is node-local (node-local settings are {})",
                setting.key,
                NODE_LOCAL_SETTINGS.join(", ")
            )));
        }
        if !keys.insert(setting.key.as_str()) {
            return Err(bad(format!("setting {:?} listed twice", setting.key)));
        }
    }
    Ok((certs, crls))
}

impl Store {
    /// Reads the replicated state and where it stands in the replicated
    /// log, in one read transaction. Called by the pair's snapshot builder.
    pub async fn export_snapshot(&self) -> Result<ReplicatedSnapshot, StoreError> {
        let mut tx = self.pool.begin().await?;
        let replica = read_replica(&mut tx).await?;
        let epoch: i64 = sqlx::query_scalar("SELECT epoch FROM meta WHERE id = 1")
            .fetch_one(&mut *tx)
            .await?;
        let users = sqlx::query(
            "SELECT name, password_hash, role, created_at, updated_at FROM users ORDER BY name",
        )
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| {
            let role: String = r.try_get("role")?;
            Ok(SnapshotUser {
                name: r.try_get("name")?,
                password_hash: PasswordHash::new(r.try_get::<String, _>("password_hash")?),
                role: role_from_db(&role)?,
                created_at: r.try_get("created_at")?,
                updated_at: r.try_get("updated_at")?,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
        let certs = sqlx::query(
            "SELECT kind, der, first_seen, last_seen FROM certs \
             WHERE kind IN ('trusted', 'issuer') ORDER BY thumbprint",
        )
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| {
            let kind: String = r.try_get("kind")?;
            Ok(SnapshotCert {
                kind: kind_from_db(&kind)?,
                der: r.try_get("der")?,
                first_seen: r.try_get("first_seen")?,
                last_seen: r.try_get("last_seen")?,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
        let crls = sqlx::query("SELECT der, added_at FROM crls ORDER BY issuer")
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| {
                Ok(SnapshotCrl {
                    der: r.try_get("der")?,
                    added_at: r.try_get("added_at")?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let settings = sqlx::query("SELECT key, value, updated_at FROM settings ORDER BY key")
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| {
                Ok(SnapshotSetting {
                    key: r.try_get("key")?,
                    value: r.try_get("value")?,
                    updated_at: r.try_get("updated_at")?,
                })
            })
            .filter(|s: &Result<SnapshotSetting, StoreError>| {
                s.as_ref()
                    .map_or(true, |s| setting_scope(&s.key) == Scope::Replicated)
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        tx.rollback().await?;
        Ok(ReplicatedSnapshot {
            format: SNAPSHOT_FORMAT,
            last_applied: replica.last_applied,
            membership: replica.membership,
            epoch,
            users,
            certs,
            crls,
            settings,
        })
    }

    /// Replaces the replicated state with `snapshot`, in one transaction:
    /// users, trusted and issuer certificates, CRLs, replicated settings,
    /// epoch, and `last_applied` and membership. Keeps the node-local rows:
    /// rejected certificates (a rejected one the snapshot trusts moves to
    /// its list), node-local settings, the change log, and the
    /// `first_seen`/`last_seen` times of every certificate this store
    /// already holds. Writes one node-local change-log entry,
    /// `snapshot.install`, by `actor` at `at`. Called by the pair's state
    /// machine when the leader sends a snapshot.
    ///
    /// The whole snapshot is checked first; an invalid one is refused
    /// ([`StoreError::SnapshotInvalid`], [`StoreError::SnapshotFormat`])
    /// and nothing is written.
    pub async fn install_snapshot(
        &self,
        snapshot: &ReplicatedSnapshot,
        actor: &str,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        validate_actor(actor)?;
        let at = format_at(at);
        let (certs, crls) = validate(snapshot)?;
        let mut tx = self.begin().await?;

        // Node-local observation times of the certificates held now.
        let seen: HashMap<String, (String, String)> =
            sqlx::query("SELECT thumbprint, first_seen, last_seen FROM certs")
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|r| {
                    Ok((
                        r.try_get("thumbprint")?,
                        (r.try_get("first_seen")?, r.try_get("last_seen")?),
                    ))
                })
                .collect::<Result<_, StoreError>>()?;

        sqlx::query("DELETE FROM users").execute(&mut *tx).await?;
        for user in &snapshot.users {
            sqlx::query(
                "INSERT INTO users (name, password_hash, role, created_at, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .bind(&user.name)
            .bind(user.password_hash.as_str())
            .bind(user.role.as_str())
            .bind(&user.created_at)
            .bind(&user.updated_at)
            .execute(&mut *tx)
            .await?;
        }

        sqlx::query("DELETE FROM certs WHERE kind IN ('trusted', 'issuer')")
            .execute(&mut *tx)
            .await?;
        for CertRow { snap, parsed } in &certs {
            let (first_seen, last_seen) = seen
                .get(&parsed.thumbprint)
                .map_or((&snap.first_seen, &snap.last_seen), |(f, l)| (f, l));
            // A rejected row of the same certificate becomes this one.
            sqlx::query(
                "INSERT INTO certs (thumbprint, kind, subject, application_uri, not_before, \
                 not_after, der, first_seen, last_seen) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
                 ON CONFLICT (thumbprint) DO UPDATE SET kind = excluded.kind",
            )
            .bind(&parsed.thumbprint)
            .bind(snap.kind.as_str())
            .bind(&parsed.subject)
            .bind(&parsed.application_uri)
            .bind(&parsed.not_before)
            .bind(&parsed.not_after)
            .bind(&snap.der)
            .bind(first_seen)
            .bind(last_seen)
            .execute(&mut *tx)
            .await?;
        }

        sqlx::query("DELETE FROM crls").execute(&mut *tx).await?;
        for CrlRow { snap, parsed } in &crls {
            sqlx::query(
                "INSERT INTO crls (issuer, thumbprint, this_update, next_update, der, added_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .bind(&parsed.issuer)
            .bind(&parsed.thumbprint)
            .bind(&parsed.this_update)
            .bind(&parsed.next_update)
            .bind(&snap.der)
            .bind(&snap.added_at)
            .execute(&mut *tx)
            .await?;
        }

        let keys: Vec<String> = sqlx::query_scalar("SELECT key FROM settings")
            .fetch_all(&mut *tx)
            .await?;
        for key in keys
            .iter()
            .filter(|k| setting_scope(k) == Scope::Replicated)
        {
            sqlx::query("DELETE FROM settings WHERE key = ?1")
                .bind(key)
                .execute(&mut *tx)
                .await?;
        }
        for setting in &snapshot.settings {
            sqlx::query("INSERT INTO settings (key, value, updated_at) VALUES (?1, ?2, ?3)")
                .bind(&setting.key)
                .bind(&setting.value)
                .bind(&setting.updated_at)
                .execute(&mut *tx)
                .await?;
        }

        sqlx::query("UPDATE meta SET epoch = ?1 WHERE id = 1")
            .bind(snapshot.epoch)
            .execute(&mut *tx)
            .await?;
        let last_applied = snapshot
            .last_applied
            .as_ref()
            .map(position_to_db)
            .transpose()?;
        let membership = snapshot.membership.as_ref().map(|m| m.to_string());
        sqlx::query("UPDATE replica SET last_applied = ?1, membership = ?2 WHERE id = 1")
            .bind(last_applied)
            .bind(membership)
            .execute(&mut *tx)
            .await?;

        let payload = json!({
            "last_applied": snapshot.last_applied,
            "epoch": snapshot.epoch,
            "users": snapshot.users.len(),
            "certs": snapshot.certs.len(),
            "crls": snapshot.crls.len(),
            "settings": snapshot.settings.len(),
        });
        append_log(
            &mut tx,
            Scope::Local,
            actor,
            &at,
            "snapshot.install",
            &payload.to_string(),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}
