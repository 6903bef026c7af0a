//! User management and the audit trail over REST (admin only): list, add,
//! change role or password, remove; and the store's change log, which
//! records who changed what (secrets never enter it).

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use uagate_store::Role;

use crate::api::json_error;
use crate::auth::{role_from_str, Authed};
use crate::error::ApiError;
use crate::state::WebState;

/// A user as listed (never the password hash).
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UserView {
    /// The user name.
    pub name: String,
    /// admin, operator or viewer.
    pub role: String,
}

/// `POST /api/v1/users` body.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewUser {
    /// The user name.
    pub username: String,
    /// The initial password (never logged).
    pub password: String,
    /// admin, operator or viewer.
    pub role: String,
}

/// `PUT /api/v1/users/{name}` body: what to change.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UserChange {
    /// A new role.
    #[serde(default)]
    pub role: Option<String>,
    /// A new password (reset; never logged).
    #[serde(default)]
    pub password: Option<String>,
}

fn parse_role(s: &str) -> Result<Role, ApiError> {
    role_from_str(s).ok_or_else(|| ApiError::invalid("role", "one of admin, operator, viewer"))
}

/// Every user with their role.
pub async fn list(State(state): State<WebState>) -> Result<Json<Vec<UserView>>, ApiError> {
    let users = state.store.list_users().await?;
    Ok(Json(
        users
            .into_iter()
            .map(|(name, role)| UserView {
                name,
                role: role.as_str().to_string(),
            })
            .collect(),
    ))
}

/// Adds a user (409 when the name exists, 422 naming the field).
pub async fn add(
    State(state): State<WebState>,
    who: Authed,
    body: Result<Json<NewUser>, JsonRejection>,
) -> Result<(StatusCode, Json<UserView>), ApiError> {
    let Json(req) = body.map_err(json_error)?;
    let role = parse_role(&req.role)?;
    state
        .store
        .add_user(&who.user, &req.username, &req.password, role)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(UserView {
            name: req.username,
            role: role.as_str().to_string(),
        }),
    ))
}

/// Changes a user's role and/or resets their password. The store refuses
/// to demote the last admin; a password it would refuse is refused before
/// the role is touched.
pub async fn change(
    State(state): State<WebState>,
    who: Authed,
    Path(name): Path<String>,
    body: Result<Json<UserChange>, JsonRejection>,
) -> Result<StatusCode, ApiError> {
    let Json(req) = body.map_err(json_error)?;
    if req.role.is_none() && req.password.is_none() {
        return Err(ApiError::invalid(
            "role",
            "nothing to change: give role and/or password",
        ));
    }
    let role = req.role.as_deref().map(parse_role).transpose()?;
    // Both parts are checked before either is stored: a refused password
    // must not leave the role changed.
    if let Some(password) = &req.password {
        uagate_store::validate_password(password)?;
    }
    if let Some(role) = role {
        state.store.set_role(&who.user, &name, role).await?;
    }
    if let Some(password) = &req.password {
        state.store.set_password(&who.user, &name, password).await?;
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Removes a user (the store refuses to remove the last admin).
pub async fn remove(
    State(state): State<WebState>,
    who: Authed,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.store.delete_user(&who.user, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/v1/audit` query: entries after `after` (a sequence number),
/// at most `limit` (default 100, at most 1000), optionally of one `actor`
/// or whose kind starts with `kind`.
#[derive(Debug, Deserialize)]
pub struct AuditQuery {
    /// Entries with a larger sequence number.
    #[serde(default)]
    pub after: i64,
    /// Most entries returned.
    #[serde(default)]
    pub limit: Option<i64>,
    /// Only this actor's entries.
    #[serde(default)]
    pub actor: Option<String>,
    /// Only kinds starting with this, e.g. `user.` or `setting.set`.
    #[serde(default)]
    pub kind: Option<String>,
}

/// One change-log entry.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AuditEntry {
    /// Sequence number (use as `after` for the next page).
    pub seq: i64,
    /// Who made the change.
    pub actor: String,
    /// When (RFC 3339 UTC).
    pub at: String,
    /// What kind of change, e.g. `user.add`.
    pub kind: String,
    /// The kind group the console filters by: maintenance, service_level,
    /// trust, users, configuration, field_connections, sessions, pair,
    /// system or other.
    pub group: String,
    /// What happened, in one sentence with its details (times in UTC; no
    /// secrets), as the console's audit log shows it.
    pub sentence: String,
    /// What changed (no secrets).
    pub payload: serde_json::Value,
}

/// The change log, oldest first, filtered.
pub async fn audit(
    State(state): State<WebState>,
    Query(q): Query<AuditQuery>,
) -> Result<Json<Vec<AuditEntry>>, ApiError> {
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let filter = uagate_store::LogFilter {
        actor: q.actor.filter(|a| !a.is_empty()),
        kind_prefixes: q.kind.filter(|k| !k.is_empty()).into_iter().collect(),
        after_seq: Some(q.after.max(0)),
        ..uagate_store::LogFilter::default()
    };
    let entries = state
        .store
        .change_log_filtered(&filter, uagate_store::LogOrder::OldestFirst, limit)
        .await?;
    Ok(Json(
        entries
            .into_iter()
            .map(|e| {
                let described = crate::audit_text::describe(&e.actor, &e.kind, &e.payload);
                AuditEntry {
                    seq: e.seq,
                    group: described.group.name().to_string(),
                    sentence: described.sentence.to_string(),
                    payload: crate::ops::redact_payload(&e.payload),
                    actor: e.actor,
                    at: e.at,
                    kind: e.kind,
                }
            })
            .collect(),
    ))
}
