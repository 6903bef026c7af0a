//! The one write path: [`Store::apply`] validates a change value and applies
//! it in one transaction together with its change-log entry. Nothing else in
//! this crate writes SQLite (migrations aside) but the replication entry
//! points built on the same pieces: [`Store::apply_at`] (the same
//! validation and writes, at a log position, in `replica.rs`) and
//! [`Store::install_snapshot`] (`snapshot.rs`).
//!
//! Apply is deterministic: it reads no clock (the proposal carries its time),
//! draws no random numbers and hashes no password, so it only depends on the
//! proposal and the rows already stored. A business refusal (unknown user,
//! last admin, older CRL, …) is an `Err` of the usual [`StoreError`] variants
//! and leaves the store untouched: the transaction is rolled back, no row and
//! no log entry are written.

use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::{Row, SqliteConnection};

use crate::change::sealed::AnyChange;
use crate::change::{
    format_at, setting_scope, Change, LocalChange, Proposal, Scope, Scoped, NODE_LOCAL_SETTINGS,
};
use crate::error::{invalid, StoreError};
use crate::model::{CertInfo, CertKind, Role};
use crate::x509::{self, ParsedCert, ParsedCrl};
use crate::{
    admin_count, kind_from_db, names_with_key, resolve_user, role_from_db, user_key,
    validate_actor, validate_setting_key, validate_user_name, Store, MAX_SETTING_VALUE_LEN,
    REJECTED_CAP,
};

/// Largest payload of an [`Change::Event`], in bytes.
pub const MAX_EVENT_PAYLOAD_LEN: usize = 64 * 1024;
/// Longest event kind, in bytes.
const MAX_EVENT_KIND_LEN: usize = 64;
/// Longest pair address of an appliance that reported a refused
/// certificate, in bytes.
const MAX_PEER_LEN: usize = 256;
/// Longest password hash accepted, in bytes.
const MAX_HASH_LEN: usize = 512;

/// What [`Store::apply`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Applied {
    /// Sequence number of the change-log entry written with the change.
    /// Every [`Change`] writes one; `None` only for a
    /// [`LocalChange::RecordRejected`] of a certificate already listed and
    /// for [`LocalChange::RejectedReported`].
    pub seq: Option<i64>,
    /// The replication epoch after the change (the one its entry is stamped
    /// with; after [`Change::BumpEpoch`] the new one).
    pub epoch: i64,
    /// The certificate as stored, after [`Change::TrustAdd`].
    pub cert: Option<CertInfo>,
    /// For a replicated change on a paired appliance: whether every other
    /// member had it when the answer was given (pair without witness: the
    /// primary commits alone and waits a bounded time for the standby).
    /// `None` when not paired.
    pub replicated: Option<bool>,
}

tokio::task_local! {
    /// What [`Store::apply`] learned about the replication of the changes
    /// made inside [`report_replication`].
    static REPLICATION: std::cell::Cell<Option<bool>>;
}

/// Runs `f` and says whether the replicated changes it made reached every
/// member of the pair (`Some(false)` if one did not, `None` when it made
/// none or the appliance is not paired). Called around a console or REST
/// request, whose answer then carries `replicated`.
pub async fn report_replication<F: std::future::Future>(f: F) -> (F::Output, Option<bool>) {
    REPLICATION
        .scope(std::cell::Cell::new(None), async {
            let out = f.await;
            (out, REPLICATION.with(std::cell::Cell::get))
        })
        .await
}

impl Applied {
    /// What a replicated change did, as the pair's log reports it (the
    /// certificate is read back by [`Store::apply`]). Called by the pair's
    /// [`crate::Replicator`].
    pub fn replicated(seq: i64, epoch: i64, replicated: Option<bool>) -> Applied {
        Applied {
            seq: Some(seq),
            epoch,
            cert: None,
            replicated,
        }
    }
}

/// Which rows a removal by thumbprint may delete.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Lists {
    /// Trusted and issuer (replicated).
    Listed,
    /// Rejected (node-local).
    Rejected,
}

/// A validated change, with its certificate or CRL decoded: what the
/// transaction runs.
pub(crate) enum Plan {
    AddUser {
        name: String,
        hash: String,
        role: Role,
    },
    SetPassword {
        name: String,
        hash: String,
    },
    SetRole {
        name: String,
        role: Role,
    },
    DeleteUser {
        name: String,
    },
    TrustAdd {
        der: Vec<u8>,
        kind: CertKind,
        cert: ParsedCert,
    },
    Remove {
        thumbprint: String,
        from: Lists,
    },
    AddCrl {
        der: Vec<u8>,
        crl: ParsedCrl,
    },
    SetSetting {
        key: String,
        value: String,
    },
    BumpEpoch,
    Event {
        kind: String,
        payload: String,
    },
    RecordRejected {
        der: Vec<u8>,
        cert: ParsedCert,
        by: Option<String>,
        report: bool,
    },
    RejectedReported {
        thumbprint: String,
    },
}

/// What running a plan produced: the log entry to write with it and the
/// stored certificate.
pub(crate) struct Effect {
    /// Kind and payload (JSON object text).
    pub(crate) log: Option<(String, String)>,
    pub(crate) cert: Option<CertInfo>,
}

impl Effect {
    fn logged(kind: &str, payload: serde_json::Value) -> Effect {
        Effect {
            log: Some((kind.to_owned(), payload.to_string())),
            cert: None,
        }
    }

    fn silent() -> Effect {
        Effect {
            log: None,
            cert: None,
        }
    }
}

/// Checks `at` is RFC 3339 UTC with milliseconds in its one textual form.
pub(crate) fn validate_at(at: &str) -> Result<(), StoreError> {
    let canonical = DateTime::parse_from_rfc3339(at)
        .ok()
        .map(|t| format_at(t.with_timezone(&Utc)));
    if canonical.as_deref() != Some(at) {
        return Err(invalid(
            "at",
            "must be RFC 3339 UTC with milliseconds, e.g. 2024-05-01T12:00:00.123Z",
        ));
    }
    Ok(())
}

pub(crate) fn validate_hash(phc: &str) -> Result<(), StoreError> {
    let ok = phc.len() <= MAX_HASH_LEN
        && argon2::password_hash::PasswordHash::new(phc)
            .is_ok_and(|h| h.algorithm.as_str() == "argon2id");
    if !ok {
        return Err(invalid("password_hash", "must be an argon2id PHC string"));
    }
    Ok(())
}

pub(crate) fn validate_value(key: &str, value: &str) -> Result<(), StoreError> {
    if value.len() > MAX_SETTING_VALUE_LEN {
        return Err(invalid(
            key,
            format!("value longer than {MAX_SETTING_VALUE_LEN} bytes"),
        ));
    }
    Ok(())
}

fn validate_event(kind: &str, payload: &str) -> Result<(), StoreError> {
    if !kind.starts_with("event.") || kind.len() > MAX_EVENT_KIND_LEN {
        return Err(invalid("kind", "event kinds start with `event.`"));
    }
    let object = payload.len() <= MAX_EVENT_PAYLOAD_LEN
        && serde_json::from_str::<serde_json::Value>(payload).is_ok_and(|v| v.is_object());
    if !object {
        return Err(invalid(
            "payload",
            format!("must be a JSON object of at most {MAX_EVENT_PAYLOAD_LEN} bytes"),
        ));
    }
    Ok(())
}

/// Validates a change value without touching the database.
pub(crate) fn check(change: AnyChange) -> Result<Plan, StoreError> {
    Ok(match change {
        AnyChange::Replicated(change) => match change {
            Change::AddUser {
                name,
                password_hash,
                role,
            } => {
                validate_user_name(&name)?;
                validate_hash(password_hash.as_str())?;
                Plan::AddUser {
                    name,
                    hash: password_hash.as_str().to_owned(),
                    role,
                }
            }
            Change::SetPassword {
                name,
                password_hash,
            } => {
                validate_hash(password_hash.as_str())?;
                Plan::SetPassword {
                    name,
                    hash: password_hash.as_str().to_owned(),
                }
            }
            Change::SetRole { name, role } => Plan::SetRole { name, role },
            Change::DeleteUser { name } => Plan::DeleteUser { name },
            Change::TrustAdd { der, kind } => {
                if kind == CertKind::Rejected {
                    return Err(invalid(
                        "kind",
                        "trust_add takes trusted or issuer; rejections are recorded by the engine",
                    ));
                }
                let cert = x509::parse_certificate(&der)?;
                Plan::TrustAdd { der, kind, cert }
            }
            Change::TrustRemove { thumbprint } => Plan::Remove {
                thumbprint: x509::normalize_thumbprint(&thumbprint)?,
                from: Lists::Listed,
            },
            Change::AddCrl { der } => {
                let crl = x509::parse_crl(&der)?;
                Plan::AddCrl { der, crl }
            }
            Change::SetSetting { key, value } => {
                validate_setting_key(&key)?;
                validate_value(&key, &value)?;
                if setting_scope(&key) != Scope::Replicated {
                    return Err(invalid(
                        &key,
                        "node-local setting; it is set by a local change, never replicated",
                    ));
                }
                Plan::SetSetting { key, value }
            }
            Change::BumpEpoch => Plan::BumpEpoch,
            Change::Event { kind, payload } => {
                validate_event(&kind, &payload)?;
                Plan::Event { kind, payload }
            }
        },
        AnyChange::Local(change) => {
            match change {
                LocalChange::RecordRejected { der, by, report } => {
                    let cert = x509::parse_certificate(&der)?;
                    if let Some(by) = &by {
                        if by.is_empty() || by.len() > MAX_PEER_LEN {
                            return Err(invalid(
                            "by",
                            format!("the reporting appliance's address must be 1-{MAX_PEER_LEN} bytes"),
                        ));
                        }
                    }
                    Plan::RecordRejected {
                        der,
                        cert,
                        by,
                        report,
                    }
                }
                LocalChange::RejectedReported { thumbprint } => Plan::RejectedReported {
                    thumbprint: x509::normalize_thumbprint(&thumbprint)?,
                },
                LocalChange::RemoveRejected { thumbprint } => Plan::Remove {
                    thumbprint: x509::normalize_thumbprint(&thumbprint)?,
                    from: Lists::Rejected,
                },
                LocalChange::SetSetting { key, value } => {
                    validate_setting_key(&key)?;
                    validate_value(&key, &value)?;
                    if setting_scope(&key) != Scope::Local {
                        return Err(invalid(
                            &key,
                            format!(
                                "replicated setting; node-local settings are {}",
                                NODE_LOCAL_SETTINGS.join(", ")
                            ),
                        ));
                    }
                    Plan::SetSetting { key, value }
                }
                LocalChange::Event { kind, payload } => {
                    validate_event(&kind, &payload)?;
                    Plan::Event { kind, payload }
                }
            }
        }
    })
}

/// Keys whose values are secrets wherever they appear in a setting's
/// value (a TOML document such as the configuration, with a field
/// server's `identity.password`).
const SECRET_KEYS: &[&str] = &["password", "private_key", "secret"];

/// `value` as the change log shows it: a TOML document with the values of
/// [`SECRET_KEYS`] replaced by `"<redacted>"`; any other value unchanged.
/// The stored setting keeps the real value. Called for every `setting.set`
/// entry.
pub(crate) fn redact_secrets(value: &str) -> String {
    fn walk(v: &mut toml::Value) -> bool {
        let mut changed = false;
        match v {
            toml::Value::Table(t) => {
                for (k, item) in t.iter_mut() {
                    if SECRET_KEYS.contains(&k.as_str()) && item.is_str() {
                        *item = toml::Value::String("<redacted>".into());
                        changed = true;
                    } else {
                        changed |= walk(item);
                    }
                }
            }
            toml::Value::Array(a) => {
                for item in a {
                    changed |= walk(item);
                }
            }
            _ => {}
        }
        changed
    }
    match value.parse::<toml::Table>() {
        Ok(t) => {
            let mut doc = toml::Value::Table(t);
            if walk(&mut doc) {
                toml::to_string(&doc).unwrap_or_else(|_| "<redacted>".into())
            } else {
                value.to_string()
            }
        }
        Err(_) => value.to_string(),
    }
}

/// Appends one change-log entry inside the caller's transaction, stamped
/// with the current epoch. Returns its sequence number and epoch.
pub(crate) async fn append_log(
    conn: &mut SqliteConnection,
    scope: Scope,
    actor: &str,
    at: &str,
    kind: &str,
    payload: &str,
) -> Result<(i64, i64), StoreError> {
    let row = sqlx::query(
        "INSERT INTO change_log (epoch, actor, at, kind, payload, scope) \
         SELECT epoch, ?1, ?2, ?3, ?4, ?5 FROM meta WHERE id = 1 RETURNING seq, epoch",
    )
    .bind(actor)
    .bind(at)
    .bind(kind)
    .bind(payload)
    .bind(scope.as_str())
    .fetch_one(&mut *conn)
    .await?;
    let seq: i64 = row.try_get("seq")?;
    tracing::info!(seq, actor, kind, %scope, "configuration change");
    Ok((seq, row.try_get("epoch")?))
}

/// The stored name of the user a change names (any case, see
/// [`crate::resolve_user`]), or [`StoreError::UnknownUser`] with the name
/// as given.
async fn stored_user(tx: &mut SqliteConnection, name: String) -> Result<String, StoreError> {
    match resolve_user(tx, &name).await? {
        Some(stored) => Ok(stored),
        None => Err(StoreError::UnknownUser(name)),
    }
}

/// Runs a validated change inside `tx`; a refusal returns `Err` before
/// anything is written or after writes the caller rolls back.
pub(crate) async fn run(
    tx: &mut SqliteConnection,
    at: &str,
    plan: Plan,
) -> Result<Effect, StoreError> {
    match plan {
        Plan::AddUser { name, hash, role } => {
            // Names are one user whatever their case (see `user_key`).
            if let Some(existing) = names_with_key(tx, &user_key(&name)).await?.pop() {
                return Err(StoreError::UserExists(existing));
            }
            let inserted = sqlx::query(
                "INSERT INTO users (name, password_hash, role, created_at, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?4)",
            )
            .bind(&name)
            .bind(&hash)
            .bind(role.as_str())
            .bind(at)
            .execute(&mut *tx)
            .await;
            match inserted {
                Ok(_) => {}
                Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                    return Err(StoreError::UserExists(name));
                }
                Err(e) => return Err(e.into()),
            }
            Ok(Effect::logged(
                "user.add",
                json!({ "name": name, "role": role.as_str() }),
            ))
        }
        Plan::SetPassword { name, hash } => {
            let name = stored_user(tx, name).await?;
            let updated =
                sqlx::query("UPDATE users SET password_hash = ?1, updated_at = ?2 WHERE name = ?3")
                    .bind(&hash)
                    .bind(at)
                    .bind(&name)
                    .execute(&mut *tx)
                    .await?;
            if updated.rows_affected() == 0 {
                return Err(StoreError::UnknownUser(name));
            }
            Ok(Effect::logged("user.password", json!({ "name": name })))
        }
        Plan::SetRole { name, role } => {
            let name = stored_user(tx, name).await?;
            let previous: Option<String> =
                sqlx::query_scalar("SELECT role FROM users WHERE name = ?1")
                    .bind(&name)
                    .fetch_optional(&mut *tx)
                    .await?;
            let previous = match previous {
                Some(p) => role_from_db(&p)?,
                None => return Err(StoreError::UnknownUser(name)),
            };
            if previous == Role::Admin && role != Role::Admin && admin_count(tx).await? <= 1 {
                return Err(invalid(
                    "role",
                    format!("cannot demote {name}, the last admin (make another user admin first)"),
                ));
            }
            sqlx::query("UPDATE users SET role = ?1, updated_at = ?2 WHERE name = ?3")
                .bind(role.as_str())
                .bind(at)
                .bind(&name)
                .execute(&mut *tx)
                .await?;
            Ok(Effect::logged(
                "user.role",
                json!({ "name": name, "role": role.as_str(), "previous": previous.as_str() }),
            ))
        }
        Plan::DeleteUser { name } => {
            let name = stored_user(tx, name).await?;
            let role: Option<String> = sqlx::query_scalar("SELECT role FROM users WHERE name = ?1")
                .bind(&name)
                .fetch_optional(&mut *tx)
                .await?;
            let role = match role {
                Some(r) => role_from_db(&r)?,
                None => return Err(StoreError::UnknownUser(name)),
            };
            if role == Role::Admin && admin_count(tx).await? <= 1 {
                return Err(invalid(
                    "name",
                    format!("cannot remove {name}, the last admin (make another user admin first)"),
                ));
            }
            sqlx::query("DELETE FROM users WHERE name = ?1")
                .bind(&name)
                .execute(&mut *tx)
                .await?;
            Ok(Effect::logged("user.delete", json!({ "name": name })))
        }
        Plan::TrustAdd { der, kind, cert } => trust_add(tx, at, der, kind, cert).await,
        Plan::Remove { thumbprint, from } => {
            let sql = match from {
                Lists::Listed => {
                    "DELETE FROM certs WHERE thumbprint = ?1 AND kind IN ('trusted', 'issuer') \
                     RETURNING kind"
                }
                Lists::Rejected => {
                    "DELETE FROM certs WHERE thumbprint = ?1 AND kind = 'rejected' RETURNING kind"
                }
            };
            let kind: Option<String> = sqlx::query_scalar(sql)
                .bind(&thumbprint)
                .fetch_optional(&mut *tx)
                .await?;
            let Some(kind) = kind else {
                return Err(StoreError::UnknownCert(thumbprint));
            };
            Ok(Effect::logged(
                "trust.remove",
                json!({ "thumbprint": thumbprint, "kind": kind }),
            ))
        }
        Plan::AddCrl { der, crl } => {
            let stored: Option<String> =
                sqlx::query_scalar("SELECT this_update FROM crls WHERE issuer = ?1")
                    .bind(&crl.issuer)
                    .fetch_optional(&mut *tx)
                    .await?;
            if let Some(stored) = stored {
                if stored > crl.this_update {
                    return Err(invalid(
                        "crl",
                        format!(
                            "older than the stored CRL of this issuer (thisUpdate {} < {stored})",
                            crl.this_update
                        ),
                    ));
                }
            }
            sqlx::query(
                "INSERT INTO crls (issuer, thumbprint, this_update, next_update, der, added_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (issuer) DO UPDATE SET \
                 thumbprint = excluded.thumbprint, this_update = excluded.this_update, \
                 next_update = excluded.next_update, der = excluded.der, \
                 added_at = excluded.added_at",
            )
            .bind(&crl.issuer)
            .bind(&crl.thumbprint)
            .bind(&crl.this_update)
            .bind(&crl.next_update)
            .bind(&der)
            .bind(at)
            .execute(&mut *tx)
            .await?;
            Ok(Effect::logged(
                "crl.add",
                json!({
                    "issuer": crl.issuer,
                    "thumbprint": crl.thumbprint,
                    "this_update": crl.this_update,
                    "next_update": crl.next_update,
                    "der": hex::encode(&der),
                }),
            ))
        }
        Plan::SetSetting { key, value } => {
            let before: Option<String> =
                sqlx::query_scalar("SELECT value FROM settings WHERE key = ?1")
                    .bind(&key)
                    .fetch_optional(&mut *tx)
                    .await?;
            sqlx::query(
                "INSERT INTO settings (key, value, updated_at) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value, \
                 updated_at = excluded.updated_at",
            )
            .bind(&key)
            .bind(&value)
            .bind(at)
            .execute(&mut *tx)
            .await?;
            // The change log shows values, never the secrets in them.
            Ok(Effect::logged(
                "setting.set",
                json!({
                    "key": key,
                    "value": redact_secrets(&value),
                    "before": before.as_deref().map(redact_secrets),
                }),
            ))
        }
        Plan::BumpEpoch => {
            let epoch: i64 = sqlx::query_scalar(
                "UPDATE meta SET epoch = epoch + 1 WHERE id = 1 RETURNING epoch",
            )
            .fetch_one(&mut *tx)
            .await?;
            Ok(Effect::logged("epoch.bump", json!({ "epoch": epoch })))
        }
        // Checked to be a JSON object; logged as the proposer wrote it.
        Plan::Event { kind, payload } => Ok(Effect {
            log: Some((kind, payload)),
            cert: None,
        }),
        Plan::RecordRejected {
            der,
            cert,
            by,
            report,
        } => record_rejected(tx, at, der, cert, by, report).await,
        Plan::RejectedReported { thumbprint } => {
            sqlx::query(
                "UPDATE certs SET report_pending = 0 WHERE thumbprint = ?1 AND kind = 'rejected'",
            )
            .bind(&thumbprint)
            .execute(&mut *tx)
            .await?;
            Ok(Effect::silent())
        }
    }
}

async fn trust_add(
    tx: &mut SqliteConnection,
    at: &str,
    der: Vec<u8>,
    kind: CertKind,
    cert: ParsedCert,
) -> Result<Effect, StoreError> {
    let previous = sqlx::query("SELECT kind, first_seen FROM certs WHERE thumbprint = ?1")
        .bind(&cert.thumbprint)
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
        None => (None, at.to_owned()),
    };
    sqlx::query(
        "INSERT INTO certs (thumbprint, kind, subject, application_uri, not_before, \
         not_after, der, first_seen, last_seen) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
         ON CONFLICT (thumbprint) DO UPDATE SET kind = excluded.kind, \
         last_seen = excluded.last_seen",
    )
    .bind(&cert.thumbprint)
    .bind(kind.as_str())
    .bind(&cert.subject)
    .bind(&cert.application_uri)
    .bind(&cert.not_before)
    .bind(&cert.not_after)
    .bind(&der)
    .bind(&first_seen)
    .bind(at)
    .execute(&mut *tx)
    .await?;
    let payload = json!({
        "thumbprint": cert.thumbprint,
        "kind": kind.as_str(),
        "previous_kind": previous_kind.map(CertKind::as_str),
        "subject": cert.subject,
        "application_uri": cert.application_uri,
        "not_before": cert.not_before,
        "not_after": cert.not_after,
        "der": hex::encode(&der),
    });
    Ok(Effect {
        log: Some(("trust.add".to_owned(), payload.to_string())),
        cert: Some(CertInfo {
            thumbprint: cert.thumbprint,
            kind,
            subject: cert.subject,
            application_uri: cert.application_uri,
            not_before: cert.not_before,
            not_after: cert.not_after,
            der,
            first_seen,
            last_seen: at.to_owned(),
            refused_here: true,
            refused_by: None,
            report_pending: false,
        }),
    })
}

async fn record_rejected(
    tx: &mut SqliteConnection,
    at: &str,
    der: Vec<u8>,
    cert: ParsedCert,
    by: Option<String>,
    report: bool,
) -> Result<Effect, StoreError> {
    let existing: Option<String> =
        sqlx::query_scalar("SELECT kind FROM certs WHERE thumbprint = ?1")
            .bind(&cert.thumbprint)
            .fetch_optional(&mut *tx)
            .await?;
    match existing.as_deref().map(kind_from_db).transpose()? {
        Some(CertKind::Rejected) => {
            // Seen again, here or by the other appliance: who refused it
            // is added to, never taken from.
            sqlx::query(
                "UPDATE certs SET last_seen = ?1, \
                 refused_here = refused_here OR ?3, refused_by = COALESCE(?4, refused_by) \
                 WHERE thumbprint = ?2",
            )
            .bind(at)
            .bind(&cert.thumbprint)
            .bind(by.is_none())
            .bind(&by)
            .execute(&mut *tx)
            .await?;
            return Ok(Effect::silent());
        }
        Some(kind) => {
            tracing::debug!(thumbprint = %cert.thumbprint, %kind,
                "record_rejected for a certificate on another list; ignored");
            return Ok(Effect::silent());
        }
        None => {}
    }
    sqlx::query(
        "INSERT INTO certs (thumbprint, kind, subject, application_uri, not_before, \
         not_after, der, first_seen, last_seen, refused_here, refused_by, report_pending) \
         VALUES (?1, 'rejected', ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9, ?10)",
    )
    .bind(&cert.thumbprint)
    .bind(&cert.subject)
    .bind(&cert.application_uri)
    .bind(&cert.not_before)
    .bind(&cert.not_after)
    .bind(&der)
    .bind(at)
    .bind(by.is_none())
    .bind(&by)
    .bind(report && by.is_none())
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
    let mut payload = json!({
        "thumbprint": cert.thumbprint,
        "subject": cert.subject,
        "application_uri": cert.application_uri,
        "not_before": cert.not_before,
        "not_after": cert.not_after,
    });
    if let Some(by) = by {
        payload["refused_by"] = json!(by);
    }
    Ok(Effect::logged("trust.reject", payload))
}

impl Store {
    /// Starts a write transaction: only the write paths ([`Store::apply`],
    /// [`Store::apply_at`], [`Store::record_applied`],
    /// [`Store::install_snapshot`]) do. `BEGIN
    /// IMMEDIATE` takes the write lock up front so read-then-write sequences
    /// cannot fail with a lock upgrade.
    pub(crate) async fn begin(
        &self,
    ) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, StoreError> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// Validates a change value and applies it in one transaction together
    /// with its change-log entry: the one code path that writes the
    /// store. Takes a [`Proposal`] of a [`Change`] (replicated; what the
    /// pair ships to the standby) or a [`crate::LocalProposal`] (node-local;
    /// its entry is marked [`Scope::Local`]).
    ///
    /// Deterministic: the result depends only on the proposal and the rows
    /// stored (no clock, randomness or password hashing here). A refusal —
    /// invalid value, unknown user or certificate, taken name, last admin,
    /// older CRL — is returned as the matching [`StoreError`] and writes
    /// nothing. See the crate documentation for what applying the same
    /// proposal twice does.
    pub async fn apply<C: Scoped>(&self, proposal: Proposal<C>) -> Result<Applied, StoreError> {
        let Proposal { actor, at, change } = proposal;
        validate_actor(&actor)?;
        validate_at(&at)?;
        let change = change.into_any();
        if let (AnyChange::Replicated(replicated), Some(replicator)) = (&change, self.replicator())
        {
            // Through the pair's log; an invalid value never enters it.
            check(AnyChange::Replicated(replicated.clone()))?;
            let trusted = match replicated {
                Change::TrustAdd { der, .. } => Some(crate::x509::thumbprint(der)),
                _ => None,
            };
            let mut applied = replicator
                .propose(Proposal {
                    actor,
                    at,
                    change: replicated.clone(),
                })
                .await?;
            if let Some(thumbprint) = trusted {
                applied.cert = self.cert_by_thumbprint(&thumbprint).await?;
            }
            if let Some(r) = applied.replicated {
                let _ = REPLICATION.try_with(|c| c.set(Some(c.get().unwrap_or(true) && r)));
            }
            return Ok(applied);
        }
        let plan = check(change)?;
        let mut tx = self.begin().await?;
        let effect = run(&mut tx, &at, plan).await?;
        let (seq, epoch) = match &effect.log {
            Some((kind, payload)) => {
                let (seq, epoch) =
                    append_log(&mut tx, C::SCOPE, &actor, &at, kind, payload).await?;
                (Some(seq), epoch)
            }
            None => (
                None,
                sqlx::query_scalar("SELECT epoch FROM meta WHERE id = 1")
                    .fetch_one(&mut *tx)
                    .await?,
            ),
        };
        tx.commit().await?;
        Ok(Applied {
            seq,
            epoch,
            cert: effect.cert,
            replicated: None,
        })
    }
}

#[cfg(test)]
mod redaction {
    use super::redact_secrets;

    #[test]
    fn secrets_in_a_document_are_redacted_and_other_values_kept() {
        let doc = "[[field_servers]]\nname = \"plc\"\nidentity = { kind = \"username\", username = \"op\", password = \"s3cret!\" }\n";
        let shown = redact_secrets(doc);
        assert!(!shown.contains("s3cret!"), "{shown}");
        assert!(
            shown.contains("<redacted>") && shown.contains("plc") && shown.contains("op"),
            "{shown}"
        );
        assert_eq!(redact_secrets("42"), "42");
        assert_eq!(
            redact_secrets("[server]\nmax_session_count = 5\n"),
            "[server]\nmax_session_count = 5\n"
        );
        assert_eq!(redact_secrets("not = = toml"), "not = = toml");
    }
}
