//! Audit log (`/audit`, admin): the change log, newest first, one
//! sentence per entry (see [`crate::audit_text`]) with, for a
//! configuration change, only the settings that changed; filtered by kind
//! group, user and time range in the store's query; and the same entries
//! as CSV (`/audit.csv`).
//!
//! Times are written in UTC inside `<time>` elements; the console's script
//! shows them in the browser's time zone and keeps UTC in the title. The
//! filter's from/to come from `datetime-local` inputs, read in the time
//! zone the script sends as `tz` (minutes east of UTC; UTC without it).

use askama::Template;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Duration, NaiveDate, NaiveDateTime, Utc};
use serde::{Deserialize, Serialize};
use uagate_store::{ChangeLogEntry, LogFilter, LogOrder};

use super::{error_page, page, Chrome};
use crate::audit_text::{self, Change, Described, Group, Part};
use crate::auth::Authed;
use crate::error::ApiError;
use crate::state::WebState;

/// A piece of a sentence as the template writes it: text, or a time
/// (`iso` set) the script shows in local time.
pub struct Piece {
    text: String,
    iso: Option<String>,
}

/// One changed setting as the template writes it.
pub struct ChangeRow {
    setting: String,
    before: String,
    after: String,
}

/// One audit row.
pub struct AuditRow {
    seq: i64,
    at_iso: String,
    at_utc: String,
    actor: String,
    group: &'static str,
    group_label: &'static str,
    sentence: Vec<Piece>,
    changes: Vec<ChangeRow>,
}

/// More changed settings than this are folded under a summary line.
const FOLD_CHANGES: usize = 12;

#[derive(Template)]
#[template(path = "audit.html")]
struct AuditPage {
    chrome: Chrome,
    entries: Vec<AuditRow>,
    groups: Vec<(&'static str, &'static str)>,
    users: Vec<String>,
    q: AuditQuery,
    /// The filter as a query string (for the CSV link and paging).
    query: String,
    older: Option<i64>,
    fold: usize,
}

/// `GET /audit` and `GET /audit.csv` query. Every field is optional;
/// empty means no filter.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct AuditQuery {
    /// Only this user's entries (exact name).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub actor: String,
    /// A [`Group`] name, or (for old links and scripts) a change-log kind
    /// prefix such as `setting.set`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Entries at or after this time (`datetime-local` form, in the zone
    /// of `tz`; or RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub from: String,
    /// Entries up to and including this time (same forms; the whole
    /// minute when no seconds are given).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub to: String,
    /// The browser's offset from UTC in minutes (east positive) that
    /// `from` and `to` are written in; UTC when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tz: String,
    /// Older than this sequence number (paging).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<i64>,
}

/// Entries per audit page.
const AUDIT_PAGE: usize = 100;

/// Most rows one CSV export holds.
const MAX_CSV_ROWS: usize = 100_000;

/// Entries read from the store per query while collecting a page.
const BATCH: i64 = 500;

/// What a query filters by, checked.
struct Filter {
    store: LogFilter,
    group: Option<Group>,
}

impl AuditQuery {
    fn filter(&self) -> Result<Filter, ApiError> {
        let tz = match self.tz.trim() {
            "" => 0,
            t => t
                .parse::<i32>()
                .map_err(|_| ApiError::invalid("tz", "minutes east of UTC"))?,
        };
        if tz.abs() > 18 * 60 {
            return Err(ApiError::invalid("tz", "an offset of at most 18 hours"));
        }
        let from = bound("from", &self.from, tz)?.map(|(t, _)| t);
        let to = bound("to", &self.to, tz)?.map(|(t, precision)| t + precision);
        let kind = self.kind.trim();
        let group = Group::parse(kind);
        let kind_prefixes = match group {
            Some(g) => g.kind_prefixes().iter().map(|p| p.to_string()).collect(),
            None if kind.is_empty() => Vec::new(),
            None => vec![kind.to_string()],
        };
        let actor = self.actor.trim();
        Ok(Filter {
            store: LogFilter {
                actor: (!actor.is_empty()).then(|| actor.to_string()),
                kind_prefixes,
                from,
                to,
                ..LogFilter::default()
            },
            group,
        })
    }

    /// The query string of the filter (without paging).
    fn query_string(&self) -> String {
        let q = AuditQuery {
            before: None,
            ..self.clone()
        };
        serde_urlencoded::to_string(&q).unwrap_or_default()
    }
}

/// A filter bound: the time and the precision it was written with (the
/// `to` bound takes in the whole minute, second or day). Accepts the
/// `datetime-local` forms (`2025-06-01T14:30`, with seconds), a date, or
/// RFC 3339. The maintenance form's return time is read with it too.
pub(super) fn bound(
    field: &str,
    text: &str,
    tz_minutes: i32,
) -> Result<Option<(DateTime<Utc>, Duration)>, ApiError> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    if let Some(t) = audit_text::parse_time(text) {
        return Ok(Some((t, Duration::milliseconds(1))));
    }
    let local = |n: NaiveDateTime| n.and_utc() - Duration::minutes(i64::from(tz_minutes));
    for (format, precision) in [
        ("%Y-%m-%dT%H:%M", Duration::minutes(1)),
        ("%Y-%m-%dT%H:%M:%S", Duration::seconds(1)),
        ("%Y-%m-%d %H:%M", Duration::minutes(1)),
        ("%Y-%m-%d %H:%M:%S", Duration::seconds(1)),
    ] {
        if let Ok(n) = NaiveDateTime::parse_from_str(text, format) {
            return Ok(Some((local(n), precision)));
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        if let Some(n) = d.and_hms_opt(0, 0, 0) {
            return Ok(Some((local(n), Duration::days(1))));
        }
    }
    Err(ApiError::invalid(
        field,
        format!("{text:?} is not a time (like 2025-06-01T14:30)"),
    ))
}

/// The entries matching `filter`, newest first, older than `before`, at
/// most `limit`, each described. The store filters by user, time and the
/// group's kinds; the group itself is decided per entry (a configuration
/// change that only touches field connections is one of those).
async fn collect(
    state: &WebState,
    filter: &Filter,
    before: Option<i64>,
    limit: usize,
) -> Result<Vec<(ChangeLogEntry, Described)>, ApiError> {
    let mut out = Vec::new();
    let mut query = filter.store.clone();
    query.before_seq = before;
    loop {
        let batch = state
            .store
            .change_log_filtered(&query, LogOrder::NewestFirst, BATCH)
            .await?;
        let Some(last) = batch.last() else {
            return Ok(out);
        };
        query.before_seq = Some(last.seq);
        let full = batch.len() as i64 == BATCH;
        for e in batch {
            let d = audit_text::describe(&e.actor, &e.kind, &e.payload);
            if filter.group.is_some_and(|g| g != d.group) {
                continue;
            }
            out.push((e, d));
            if out.len() == limit {
                return Ok(out);
            }
        }
        if !full {
            return Ok(out);
        }
    }
}

fn row(e: ChangeLogEntry, d: Described) -> AuditRow {
    let at = audit_text::parse_time(&e.at);
    let show = |v: Option<String>| v.unwrap_or_else(|| "—".into());
    AuditRow {
        seq: e.seq,
        at_iso: at.map(audit_text::iso).unwrap_or_else(|| e.at.clone()),
        at_utc: at.map(audit_text::second_utc).unwrap_or(e.at),
        actor: e.actor,
        group: d.group.name(),
        group_label: d.group.label(),
        sentence: d
            .sentence
            .0
            .into_iter()
            .map(|p| match p {
                Part::Text(text) => Piece { text, iso: None },
                Part::Time(t) => Piece {
                    text: audit_text::minute_utc(t),
                    iso: Some(audit_text::iso(t)),
                },
            })
            .collect(),
        changes: d
            .changes
            .into_iter()
            .map(
                |Change {
                     setting,
                     before,
                     after,
                 }| ChangeRow {
                    setting,
                    before: show(before),
                    after: show(after),
                },
            )
            .collect(),
    }
}

/// `GET /audit`: the change log, newest first, as sentences, filtered.
pub async fn show(
    State(state): State<WebState>,
    who: Authed,
    Query(q): Query<AuditQuery>,
) -> Response {
    let users = match state.store.list_users().await {
        Ok(u) => u.into_iter().map(|(name, _)| name).collect(),
        Err(e) => return error_page(e.into()),
    };
    let (entries, older, error) = match q.filter() {
        Ok(filter) => match collect(&state, &filter, q.before, AUDIT_PAGE + 1).await {
            Ok(mut entries) => {
                let older = (entries.len() > AUDIT_PAGE).then(|| entries[AUDIT_PAGE - 1].0.seq);
                entries.truncate(AUDIT_PAGE);
                (entries, older, None)
            }
            Err(e) => return error_page(e),
        },
        Err(e) => (Vec::new(), None, Some(e)),
    };
    let (chrome, status) = Chrome::with_error(&who, "Audit log", "/audit", None, error);
    page(
        &AuditPage {
            chrome,
            entries: entries.into_iter().map(|(e, d)| row(e, d)).collect(),
            groups: Group::ALL.iter().map(|g| (g.name(), g.label())).collect(),
            users,
            query: q.query_string(),
            q,
            older,
            fold: FOLD_CHANGES,
        },
        status,
    )
}

/// `GET /audit.csv`: the entries of the same filter (newest first, at
/// most [`MAX_CSV_ROWS`]) as a CSV download: time_utc, user, kind,
/// sentence, changes (one `setting: before -> after` per line).
pub async fn export_csv(State(state): State<WebState>, Query(q): Query<AuditQuery>) -> Response {
    let result = async {
        let filter = q.filter()?;
        let entries = collect(&state, &filter, q.before, MAX_CSV_ROWS).await?;
        csv_text(&entries).map_err(ApiError::internal)
    }
    .await;
    match result {
        Ok(body) => (
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"uagate-audit.csv\"",
                ),
                (header::CACHE_CONTROL, "no-store"),
            ],
            body,
        )
            .into_response(),
        Err(e) => error_page(e),
    }
}

/// The CSV document of described entries (header row first).
pub fn csv_text(entries: &[(ChangeLogEntry, Described)]) -> Result<Vec<u8>, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(["time_utc", "user", "kind", "sentence", "changes"])?;
    for (e, d) in entries {
        let changes: Vec<String> = d.changes.iter().map(Change::to_string).collect();
        w.write_record([
            e.at.as_str(),
            e.actor.as_str(),
            d.group.name(),
            d.sentence.to_string().as_str(),
            changes.join("\n").as_str(),
        ])?;
    }
    w.into_inner().map_err(|e| csv::Error::from(e.into_error()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use uagate_store::Scope;

    fn entry(actor: &str, kind: &str, payload: serde_json::Value) -> (ChangeLogEntry, Described) {
        let payload = payload.to_string();
        let d = audit_text::describe(actor, kind, &payload);
        (
            ChangeLogEntry {
                seq: 1,
                epoch: 1,
                actor: actor.into(),
                at: "2025-06-01T12:30:05.000Z".into(),
                kind: kind.into(),
                payload,
                scope: Scope::Local,
            },
            d,
        )
    }

    #[test]
    fn csv_quotes_commas_quotes_and_line_breaks() {
        let before = "[server]\nmax_session_count = 1\napplication_name = \"a\"\n";
        let after =
            "[server]\nmax_session_count = 2\napplication_name = \"say \\\"hi\\\", then\"\n";
        let rows = [
            entry(
                "ada",
                "event.session_close",
                serde_json::json!({"session": "ns=1;i=7", "name": "HMI, \"north\""}),
            ),
            entry(
                "ada",
                "setting.set",
                serde_json::json!({"key": uagate_server::CONFIG_KEY, "value": after, "before": before}),
            ),
        ];
        let text = String::from_utf8(csv_text(&rows).unwrap()).unwrap();
        let expected = "time_utc,user,kind,sentence,changes\n\
            2025-06-01T12:30:05.000Z,ada,sessions,\"ada closed the client session \"\"HMI, \"\"north\"\"\"\" (ns=1;i=7)\",\n\
            2025-06-01T12:30:05.000Z,ada,configuration,\
            ada changed the configuration: server.application_name and server.max_session_count,\
            \"server.application_name: a -> say \"\"hi\"\", then\nserver.max_session_count: 1 -> 2\"\n";
        assert_eq!(text, expected);
        // And it reads back as the same five fields.
        let mut r = csv::Reader::from_reader(text.as_bytes());
        let records: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
        assert_eq!(records.len(), 2);
        assert_eq!(
            &records[0][3],
            "ada closed the client session \"HMI, \"north\"\" (ns=1;i=7)"
        );
        assert_eq!(
            &records[1][4],
            "server.application_name: a -> say \"hi\", then\nserver.max_session_count: 1 -> 2"
        );
    }

    #[test]
    fn filter_bounds_are_read_in_the_browsers_zone() {
        let q = AuditQuery {
            from: "2025-06-01T14:30".into(),
            to: "2025-06-01T15:00".into(),
            tz: "120".into(),
            kind: "maintenance".into(),
            actor: " ada ".into(),
            ..AuditQuery::default()
        };
        let f = q.filter().unwrap();
        assert_eq!(
            f.store.from,
            Some(Utc.with_ymd_and_hms(2025, 6, 1, 12, 30, 0).unwrap())
        );
        // The whole "to" minute is included.
        assert_eq!(
            f.store.to,
            Some(Utc.with_ymd_and_hms(2025, 6, 1, 13, 1, 0).unwrap())
        );
        assert_eq!(f.group, Some(Group::Maintenance));
        assert_eq!(f.store.kind_prefixes, ["setting.set"]);
        assert_eq!(f.store.actor.as_deref(), Some("ada"));
        // Without a zone: UTC. A kind that is no group is a kind prefix.
        let q = AuditQuery {
            from: "2025-06-01".into(),
            kind: "user.".into(),
            ..AuditQuery::default()
        };
        let f = q.filter().unwrap();
        assert_eq!(
            f.store.from,
            Some(Utc.with_ymd_and_hms(2025, 6, 1, 0, 0, 0).unwrap())
        );
        assert_eq!(
            (f.group, f.store.kind_prefixes),
            (None, vec!["user.".to_string()])
        );
        let bad = AuditQuery {
            to: "yesterday".into(),
            ..AuditQuery::default()
        };
        assert!(bad.filter().is_err());
    }
}
