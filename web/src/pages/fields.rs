//! Field connections (`/fields`): live state, active endpoint, per-server
//! ServiceLevel, counters, last error and recent events, with the live
//! table (`/partials/fields`) refreshed by htmx; an operator tests a
//! connection, forces a failover, asks for a reconnect now, and adds, edits
//! (a structured form, tested before it is saved, see
//! [`super::field_form`]) or removes an entry, which takes effect at once.

use askama::Template;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Form;
use uagate_store::Role;

use super::field_form::{self, FieldFormView};
use super::{change_notice, done, error_page, page, take_flash, Chrome, EditQuery, NameForm};
use crate::auth::Authed;
use crate::error::ApiError;
use crate::field_text::Explained;
use crate::ops;
use crate::state::WebState;

/// One field connection's live row.
pub struct FieldRow {
    name: String,
    /// The state's label (`connected`, `connecting`, `gave_up`, ...), or
    /// `disabled`.
    state: &'static str,
    /// While it is failing rather than connecting: since when, and how
    /// often, in words.
    failing: Option<Failing>,
    active_endpoint: Option<String>,
    service_level: Option<u8>,
    reconnects: u64,
    failovers: u64,
    failed_attempts: u64,
    /// The last error in plain words.
    last_error: Option<Explained>,
    /// While the connection gave up: when its next reconnect cycle starts
    /// (UTC, `HH:MM:SS`).
    next_cycle: Option<String>,
    /// A server waits for its next attempt or gave up: "Reconnect now"
    /// makes sense.
    can_reconnect: bool,
    /// (url, session up, ServiceLevel) per server of the set.
    servers: Vec<(String, bool, Option<u8>)>,
}

/// A connection that serves nobody and keeps failing, as the Fields page
/// and the Dashboard say it: "15 attempts failed since 10:42 (12 min)".
pub struct Failing {
    /// "15 attempts failed".
    pub attempts: String,
    /// When it started failing (RFC 3339; the page's script shows it in the
    /// browser's time zone).
    pub since: String,
    /// The same for a page without JavaScript: `10:42 UTC` today,
    /// `2025-06-01 10:42 UTC` before.
    pub since_text: String,
    /// How long it has been failing: `12 min`.
    pub lasting: String,
}

/// The failing state of `view` in words; `None` while it connects, is
/// served, or is off.
pub fn failing(view: &ops::FieldView) -> Option<Failing> {
    if !view.failing {
        return None;
    }
    let since = view
        .failing_since
        .as_deref()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&chrono::Utc))?;
    let now = chrono::Utc::now();
    Some(Failing {
        attempts: match view.failed_attempts_since_connected {
            1 => "1 attempt failed".to_string(),
            n => format!("{n} attempts failed"),
        },
        since: since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        since_text: if since.date_naive() == now.date_naive() {
            since.format("%H:%M UTC").to_string()
        } else {
            since.format("%Y-%m-%d %H:%M UTC").to_string()
        },
        lasting: super::charts::uptime(
            now.signed_duration_since(since)
                .to_std()
                .unwrap_or_default(),
        ),
    })
}

fn field_rows(state: &WebState) -> Vec<FieldRow> {
    let engine = &state.engine;
    engine
        .applied_config()
        .field_servers
        .iter()
        .filter_map(|f| {
            let st = engine.field_status(&f.name)?;
            let can_reconnect = f.enabled
                && (matches!(
                    st.state,
                    uagate_field::ConnState::GaveUp
                        | uagate_field::ConnState::Reconnecting
                        | uagate_field::ConnState::Connecting
                ) || st.servers.iter().any(|v| !v.reachable));
            let next_cycle = st
                .next_cycle_at
                .map(|t| t.as_chrono().format("%H:%M:%S UTC").to_string());
            let servers = st
                .servers
                .iter()
                .map(|v| (v.url.clone(), v.reachable, v.service_level))
                .collect();
            let label = ops::conn_state(st.state);
            let view = ops::FieldView::of(&f.name, f.enabled, st);
            Some(FieldRow {
                name: f.name.clone(),
                // A disabled connection is off on purpose, not broken.
                state: if f.enabled { label } else { "disabled" },
                failing: failing(&view).filter(|_| f.enabled),
                active_endpoint: view.active_endpoint,
                service_level: view.service_level,
                reconnects: view.reconnect_count,
                failovers: view.failover_count,
                failed_attempts: view.failed_attempts,
                last_error: view.last_error_explained,
                next_cycle,
                can_reconnect,
                servers,
            })
        })
        .collect()
}

#[derive(Template)]
#[template(path = "fields.html")]
struct FieldsPage {
    chrome: Chrome,
    fields: Vec<FieldRow>,
    operator: bool,
    csrf: String,
    /// A running connection's test: (name, what each URL answered).
    probe: Option<(String, Vec<ops::ProbeView>)>,
    histories: Vec<(String, Vec<ops::HistoryView>)>,
    /// The stored entries: (name, summary line).
    entries: Vec<(String, String)>,
    /// The add/edit form, and whether it is shown open (editing, or after
    /// a test or an error).
    form: FieldFormView,
    form_open: bool,
    /// What "Test connection" of the form found.
    form_probe: Option<Vec<ops::ProbeView>>,
    modes: &'static [(&'static str, &'static str)],
    policies: &'static [&'static str],
    identities: &'static [(&'static str, &'static str)],
    redundancy: &'static [(&'static str, &'static str)],
    strategies: &'static [(&'static str, &'static str)],
}

#[derive(Template)]
#[template(path = "fields_live.html")]
struct FieldsLive {
    fields: Vec<FieldRow>,
    operator: bool,
    csrf: String,
}

/// One line saying what an entry is, for the list of stored entries.
fn summary(f: &uagate_config::FieldServer) -> String {
    let servers = f.endpoints.len();
    let urls: Vec<&str> = f.endpoints.iter().map(|e| e.url.as_str()).collect();
    format!(
        "{}{}; security {} / {}; identity {}{}",
        urls.join(", "),
        match (servers, f.redundancy) {
            (1, _) => String::new(),
            (_, r) => format!(" ({} redundancy)", r.as_str().replace('_', " ")),
        },
        match f.security_mode {
            uagate_config::SecurityMode::None => "none",
            uagate_config::SecurityMode::Sign => "sign",
            uagate_config::SecurityMode::SignAndEncrypt => "sign and encrypt",
        },
        f.security_policy,
        match &f.identity {
            uagate_config::FieldIdentity::Anonymous => "anonymous".to_string(),
            uagate_config::FieldIdentity::Username { username, .. } => format!("user {username}"),
            uagate_config::FieldIdentity::Certificate { .. } => "user certificate".to_string(),
        },
        if f.enabled { "" } else { "; disabled" },
    )
}

/// What the page shows besides the live table.
#[derive(Default)]
struct Shown {
    flash: Option<String>,
    probe: Option<(String, Vec<ops::ProbeView>)>,
    error: Option<ApiError>,
    form: Option<FieldFormView>,
    form_probe: Option<Vec<ops::ProbeView>>,
}

impl Shown {
    /// The page after a refused request: the error above it.
    fn failed(error: ApiError) -> Shown {
        Shown {
            error: Some(error),
            ..Shown::default()
        }
    }
}

async fn render_fields(state: &WebState, who: &Authed, shown: Shown) -> Response {
    let config = match ops::stored_config(state).await {
        Ok(c) => c,
        Err(e) => return error_page(e),
    };
    let fields = field_rows(state);
    let histories = fields
        .iter()
        .map(|f| {
            let mut h = ops::field_history(state, &f.name).unwrap_or_default();
            h.truncate(30);
            (f.name.clone(), h)
        })
        .collect();
    let form_open = shown.form.is_some();
    let mut form = shown.form.unwrap_or_else(FieldFormView::blank);
    let said = shown.error.as_ref().and_then(|e| form.mark(e));
    let (mut chrome, status) = Chrome::with_error(
        who,
        "Field connections",
        "/fields",
        shown.flash,
        shown.error,
    );
    if said.is_some() {
        chrome.error = said;
    }
    page(
        &FieldsPage {
            operator: who.can(Role::Operator),
            csrf: who.csrf.clone(),
            chrome,
            fields,
            probe: shown.probe,
            histories,
            entries: config
                .field_servers
                .iter()
                .map(|f| (f.name.clone(), summary(f)))
                .collect(),
            form,
            form_open,
            form_probe: shown.form_probe,
            modes: &field_form::MODES,
            policies: field_form::policies(),
            identities: &field_form::IDENTITIES,
            redundancy: &field_form::REDUNDANCY,
            strategies: &field_form::STRATEGIES,
        },
        status,
    )
}

/// How the page shows a form post the router refused for the caller's
/// role: the page again, with the error above it.
pub async fn refused(state: WebState, who: Authed, error: ApiError, _: Request) -> Response {
    render_fields(&state, &who, Shown::failed(error)).await
}

/// `GET /fields`.
pub async fn show(
    State(state): State<WebState>,
    who: Authed,
    headers: HeaderMap,
    Query(q): Query<EditQuery>,
) -> Response {
    let flash = take_flash(&headers);
    let form = match q.edit.as_deref() {
        Some(name) => match ops::stored_config(&state).await {
            Ok(c) => c
                .field_servers
                .iter()
                .find(|f| f.name == name)
                .map(|f| FieldFormView::of(f, true)),
            Err(e) => return error_page(e),
        },
        None => None,
    };
    render_fields(
        &state,
        &who,
        Shown {
            flash,
            form,
            ..Shown::default()
        },
    )
    .await
}

/// `GET /partials/fields`: the live table, refreshed by htmx.
pub async fn partial(State(state): State<WebState>, who: Authed) -> Response {
    page(
        &FieldsLive {
            fields: field_rows(&state),
            operator: who.can(Role::Operator),
            csrf: who.csrf.clone(),
        },
        StatusCode::OK,
    )
}

/// The stored entry the form edits, if any (for the settings the form
/// does not show).
async fn edited(state: &WebState, form: &FieldFormView) -> Option<uagate_config::FieldServer> {
    if !form.editing() {
        return None;
    }
    ops::stored_config(state)
        .await
        .ok()?
        .field_servers
        .into_iter()
        .find(|f| f.name == form.original)
}

/// `POST /fields`: saves the form (adds, or replaces the edited entry);
/// applied at once.
pub async fn save(
    State(state): State<WebState>,
    who: Authed,
    Form(pairs): Form<Vec<(String, String)>>,
) -> Response {
    let form = FieldFormView::posted(&pairs);
    let result = async {
        let base = edited(&state, &form).await;
        let entry = form.entry(base.as_ref())?;
        let name = entry.name.clone();
        let change = ops::save_field(&state, &who, &form.original, entry).await?;
        Ok::<_, ApiError>((name, change))
    }
    .await;
    match result {
        Ok((name, change)) => done("/fields", &saved_notice(&name, &change)),
        Err(e) => {
            render_fields(
                &state,
                &who,
                Shown {
                    error: Some(e),
                    form: Some(form),
                    ..Shown::default()
                },
            )
            .await
        }
    }
}

/// What saving a field connection did, in a sentence.
fn saved_notice(name: &str, change: &ops::ConfigChange) -> String {
    if change.live.is_empty() && change.restart.is_empty() {
        format!("{name}: nothing changed.")
    } else if change.restart.is_empty() {
        format!(
            "{name} saved and applied; it is live now.{}",
            super::still_waiting(change)
        )
    } else {
        change_notice(change)
    }
}

/// `POST /fields/check`: "Test connection" of the form as entered, before
/// saving; with `trust=<thumbprint>`, trusts that (just rejected)
/// certificate first. The form stays as it was.
pub async fn check(
    State(state): State<WebState>,
    who: Authed,
    Form(pairs): Form<Vec<(String, String)>>,
) -> Response {
    let form = FieldFormView::posted(&pairs);
    let trust = pairs
        .iter()
        .find(|(k, _)| k == "trust")
        .map(|(_, v)| v.clone());
    let result = async {
        let mut flash = None;
        if let Some(t) = trust.filter(|t| !t.is_empty()) {
            let c = ops::trust_rejected(&state, &who, &t).await?;
            flash = Some(format!("Trusted {}.", c.subject));
        }
        let base = edited(&state, &form).await;
        let entry = form.entry(base.as_ref())?;
        let original = form.editing().then_some(form.original.as_str());
        Ok::<_, ApiError>((flash, ops::probe_entry(&state, &entry, original).await?))
    }
    .await;
    let shown = match result {
        Ok((flash, probes)) => Shown {
            flash,
            form_probe: Some(probes),
            form: Some(form),
            ..Shown::default()
        },
        Err(e) => Shown {
            error: Some(e),
            form: Some(form),
            ..Shown::default()
        },
    };
    render_fields(&state, &who, shown).await
}

/// `POST /fields/remove`.
pub async fn remove(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<NameForm>,
) -> Response {
    match ops::remove_field(&state, &who, &f.name).await {
        Ok(_) => done(
            "/fields",
            &format!("{} removed; it is unmounted now.", f.name),
        ),
        Err(e) => render_fields(&state, &who, Shown::failed(e)).await,
    }
}

/// `POST /fields/test`: probes a running connection's URLs and shows
/// what each answered.
pub async fn test(State(state): State<WebState>, who: Authed, Form(f): Form<NameForm>) -> Response {
    let shown = match ops::probe_field(&state, &f.name).await {
        Ok(p) => Shown {
            probe: Some((f.name, p)),
            ..Shown::default()
        },
        Err(e) => Shown::failed(e),
    };
    render_fields(&state, &who, shown).await
}

/// `POST /fields/reconnect`: Reconnect now.
pub async fn reconnect(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<NameForm>,
) -> Response {
    match ops::reconnect_field(&state, &who, &f.name).await {
        Ok(()) => done(
            "/fields",
            &format!("Reconnect of {} started; see its recent events.", f.name),
        ),
        Err(e) => render_fields(&state, &who, Shown::failed(e)).await,
    }
}

/// `POST /fields/failover`.
pub async fn failover(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<NameForm>,
) -> Response {
    match ops::force_failover(&state, &who, &f.name).await {
        Ok(()) => done(
            "/fields",
            &format!("Failover of {} requested; see its recent events.", f.name),
        ),
        Err(e) => render_fields(&state, &who, Shown::failed(e)).await,
    }
}
