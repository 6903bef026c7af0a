//! Audit log (`/audit`, admin): the change log, newest first, filtered by
//! user and kind, with each configuration change's settings before and
//! after.

use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::{error_page, page, Chrome};
use crate::auth::Authed;
use crate::ops;
use crate::state::WebState;

/// One audit row.
pub struct AuditRow {
    seq: i64,
    at: String,
    actor: String,
    kind: String,
    summary: String,
    changes: Vec<(String, String, String)>,
}

#[derive(Template)]
#[template(path = "audit.html")]
struct AuditPage {
    chrome: Chrome,
    entries: Vec<AuditRow>,
    actor: String,
    kind: String,
    older: Option<i64>,
}

/// `GET /audit` query: newest first, before a sequence number.
#[derive(Debug, Deserialize)]
pub struct AuditPageQuery {
    #[serde(default)]
    actor: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    before: Option<i64>,
}

/// Entries per audit page.
const AUDIT_PAGE: usize = 100;

/// `GET /audit`: the change log, newest first, with each change's
/// before and after values.
pub async fn show(
    State(state): State<WebState>,
    who: Authed,
    Query(q): Query<AuditPageQuery>,
) -> Response {
    let actor = q.actor.trim();
    let kind = q.kind.trim();
    let entries = match ops::audit_entries(
        &state,
        (!actor.is_empty()).then_some(actor),
        (!kind.is_empty()).then_some(kind),
        q.before,
        AUDIT_PAGE + 1,
    )
    .await
    {
        Ok(e) => e,
        Err(e) => return error_page(e),
    };
    let older = (entries.len() > AUDIT_PAGE).then(|| entries[AUDIT_PAGE - 1].seq);
    let rows = entries
        .into_iter()
        .take(AUDIT_PAGE)
        .map(|e| {
            let changes = ops::setting_changes(&e.payload);
            let summary = ops::audit_summary(&e.payload);
            AuditRow {
                seq: e.seq,
                at: e.at,
                actor: e.actor,
                kind: e.kind,
                summary,
                changes,
            }
        })
        .collect();
    page(
        &AuditPage {
            chrome: Chrome::new(&who, "Audit log", "/audit", None),
            entries: rows,
            actor: actor.to_string(),
            kind: kind.to_string(),
            older,
        },
        StatusCode::OK,
    )
}
