//! The Pair page (`/pair`): this appliance's place in the pair (role,
//! leader, epoch, members with how far behind they are, the diverged
//! list), and for an administrator the pair's actions: invite another
//! appliance (a one-time code), join one, leave, and the forced promotion
//! of a standby whose primary is lost (through a confirmation step).

use askama::Template;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Form;
use serde::Deserialize;

use super::{done, page, take_flash, Chrome};
use crate::auth::Authed;
use crate::error::ApiError;
use crate::ops::{self, PairStatusView};
use crate::state::WebState;

/// A member is shown as behind once the oldest change it lacks is older
/// than this (seconds).
const BEHIND_AFTER_S: f64 = 5.0;

/// One row of the members table.
struct MemberRow {
    addr: String,
    kind: &'static str,
    this: bool,
    leader: bool,
    voter: bool,
    /// "in step", "N changes behind (Ns)", "not reachable", or "-" when
    /// only the leader knows.
    health: String,
    behind: bool,
}

/// What the page shows after "Invite": the code to type on the other
/// appliance.
struct InviteShown {
    code: String,
    fingerprint: String,
}

#[derive(Template)]
#[template(path = "pair.html")]
struct PairPage {
    chrome: Chrome,
    pair: PairStatusView,
    members: Vec<MemberRow>,
    /// The pair node runs here (the actions work).
    running: bool,
    standalone: bool,
    leads: bool,
    invite: Option<InviteShown>,
    confirm_promote: bool,
    confirm_leave: bool,
}

fn rows(p: &PairStatusView) -> Vec<MemberRow> {
    let leads = p.role == "primary";
    p.members
        .iter()
        .map(|m| {
            let this = m.node_id == p.node_id;
            let (health, behind) = match (m.lag_entries, m.lag_seconds) {
                _ if this => ("this appliance".to_string(), false),
                _ if m.reachable == Some(false) => match m.lag_entries {
                    Some(n) if n > 0 => (format!("not reachable, {n} change(s) behind"), true),
                    _ => ("not reachable".to_string(), true),
                },
                (Some(0), _) => ("in step".to_string(), false),
                (Some(n), Some(s)) if s >= BEHIND_AFTER_S => (
                    format!("{n} change(s) behind for {s:.0} s: not reachable?"),
                    true,
                ),
                (Some(n), _) => (format!("{n} change(s) behind"), false),
                _ if leads => ("not reachable".to_string(), true),
                _ => ("-".to_string(), false),
            };
            MemberRow {
                addr: m.addr.clone(),
                kind: if m.witness { "witness" } else { "appliance" },
                this,
                leader: p.leader.as_deref() == Some(m.addr.as_str()),
                voter: m.voter,
                health,
                behind,
            }
        })
        .collect()
}

/// How the page is drawn after an action.
#[derive(Default)]
struct Shown {
    flash: Option<String>,
    error: Option<ApiError>,
    invite: Option<InviteShown>,
    confirm_promote: bool,
    confirm_leave: bool,
}

fn render(state: &WebState, who: &Authed, shown: Shown) -> Response {
    let (chrome, status) = Chrome::with_error(who, "Pair", "/pair", shown.flash, shown.error);
    let pair = ops::pair(state);
    page(
        &PairPage {
            chrome,
            members: rows(&pair),
            running: state.pair.is_some(),
            standalone: pair.role == "standalone",
            leads: pair.role == "primary" || pair.role == "standalone",
            pair,
            invite: shown.invite,
            confirm_promote: shown.confirm_promote,
            confirm_leave: shown.confirm_leave,
        },
        status,
    )
}

/// How the page shows a form post the router refused for the caller's
/// role: the page again, with the error above it.
pub async fn refused(state: WebState, who: Authed, error: ApiError, _: Request) -> Response {
    answer(&state, &who, Err(error))
}

/// `GET /pair`.
pub async fn show(State(state): State<WebState>, who: Authed, headers: HeaderMap) -> Response {
    let flash = take_flash(&headers);
    render(
        &state,
        &who,
        Shown {
            flash,
            ..Shown::default()
        },
    )
}

/// The pair node, or the error the page shows without one.
fn node(state: &WebState) -> Result<std::sync::Arc<uagate_pair::PairNode>, ApiError> {
    state
        .pair
        .clone()
        .ok_or_else(|| ApiError::Conflict("the pair node does not run here".into()))
}

/// A refusal of the pair node, as the page shows it.
fn refusal(e: uagate_pair::PairError) -> ApiError {
    ApiError::Conflict(e.to_string())
}

/// The page after an action: its answer, or the page with the error.
fn answer(state: &WebState, who: &Authed, result: Result<Response, ApiError>) -> Response {
    result.unwrap_or_else(|e| {
        render(
            state,
            who,
            Shown {
                error: Some(e),
                ..Shown::default()
            },
        )
    })
}

/// `POST /pair/invite`: a new one-time code, shown on the page (not in a
/// redirect: it must not land in the browser history).
pub async fn invite(State(state): State<WebState>, who: Authed) -> Response {
    let result = async {
        let (code, fingerprint) = node(&state)?.invite().await.map_err(refusal)?;
        tracing::info!(actor = %who.user, "pairing code issued from the console");
        let invite = Some(InviteShown {
            code: code.to_string(),
            fingerprint,
        });
        Ok(render(
            &state,
            &who,
            Shown {
                invite,
                ..Shown::default()
            },
        ))
    }
    .await;
    answer(&state, &who, result)
}

/// `POST /pair/join` form.
#[derive(Debug, Deserialize)]
pub struct JoinForm {
    addr: String,
    code: String,
}

/// `POST /pair/join`: this appliance joins the one at `addr`.
pub async fn join(State(state): State<WebState>, who: Authed, Form(f): Form<JoinForm>) -> Response {
    let result = async {
        let addr = f.addr.trim();
        if addr.is_empty() {
            return Err(ApiError::invalid(
                "addr",
                "the other appliance's pair address (HOST:PORT) is missing",
            ));
        }
        let (_, fingerprint) = node(&state)?.join(addr, &f.code).await.map_err(refusal)?;
        tracing::info!(actor = %who.user, %addr, "joined a pair from the console");
        Ok(done(
            "/pair",
            &format!(
                "Joined the pair of {addr}: this appliance takes its configuration now. \
                 Its certificate fingerprint is {fingerprint}: it should be the one its \
                 Pair page showed with the code."
            ),
        ))
    }
    .await;
    answer(&state, &who, result)
}

/// `POST /pair/leave` and `/pair/promote` form: the confirmation step.
#[derive(Debug, Deserialize)]
pub struct ConfirmForm {
    #[serde(default)]
    confirm: Option<String>,
}

/// `POST /pair/leave`: first the confirmation step, then leave.
pub async fn leave(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<ConfirmForm>,
) -> Response {
    if f.confirm.as_deref() != Some("yes") {
        let shown = Shown {
            confirm_leave: true,
            ..Shown::default()
        };
        return render(&state, &who, shown);
    }
    let result = async {
        let departure = node(&state)?.leave().await.map_err(refusal)?;
        Ok(done("/pair", &departure.note()))
    }
    .await;
    answer(&state, &who, result)
}

/// `POST /pair/promote`: first the confirmation step (what is set aside),
/// then the forced promotion.
pub async fn promote(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<ConfirmForm>,
) -> Response {
    if f.confirm.as_deref() != Some("yes") {
        let shown = Shown {
            confirm_promote: true,
            ..Shown::default()
        };
        return render(&state, &who, shown);
    }
    let result = async {
        let mark = node(&state)?.promote(true).await.map_err(refusal)?;
        tracing::warn!(actor = %who.user, epoch = mark.epoch, "standby promoted from the console");
        Ok(done(
            "/pair",
            &format!("This appliance is the primary now (epoch {}).", mark.epoch),
        ))
    }
    .await;
    answer(&state, &who, result)
}
