//! The Pair page (`/pair`): this appliance's place in the pair (role,
//! leader, epoch, members with how far behind they are, the diverged
//! list), and for an administrator the pair's actions: invite another
//! appliance (a one-time code), join one, leave, and the forced promotion
//! of a standby whose primary is lost (through a confirmation step).

use std::net::{IpAddr, SocketAddr};

use askama::Template;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Form;
use serde::Deserialize;

use super::{done, page, take_flash, Chrome};
use crate::auth::Authed;
use crate::digest::Digest;
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

/// What the page shows after "Invite": what to type on the other
/// appliance (this one's pair address and the code) and the fingerprint
/// to compare.
struct InviteShown {
    /// This appliance's pair address(es) as `HOST:PORT`, to enter on the
    /// other appliance (see [`join_addresses`]).
    addrs: Vec<String>,
    /// The pair listener listens on every address of this host and no
    /// public host is set: `addrs` are the host's addresses, one of which
    /// the other appliance reaches.
    every_address: bool,
    code: String,
    fingerprint: Digest,
}

/// The addresses the other appliance enters to join this one: the pair
/// listener's advertised address (`public_host` with the pair port, or the
/// listener's own address); when that is a wildcard (`0.0.0.0`, `[::]`:
/// it listens on every address), each of this host's addresses (`host`)
/// in the listener's family with its port: IPv4 for `0.0.0.0`, both for
/// `[::]`; without loopback and IPv6 link-local addresses (unless only
/// loopback is left), IPv4 first. The advertised text itself when it is
/// a host name or nothing better is known.
pub fn join_addresses(advertised: &str, host: &[IpAddr]) -> Vec<String> {
    let Ok(listen) = advertised.parse::<SocketAddr>() else {
        return vec![advertised.to_string()];
    };
    if !listen.ip().is_unspecified() {
        return vec![advertised.to_string()];
    }
    let in_family = |ip: &&IpAddr| listen.is_ipv6() || ip.is_ipv4();
    let link_local_v6 = |ip: &IpAddr| match ip {
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
        IpAddr::V4(_) => false,
    };
    let mut usable: Vec<IpAddr> = host
        .iter()
        .filter(in_family)
        .filter(|ip| !ip.is_unspecified() && !link_local_v6(ip))
        .copied()
        .collect();
    if usable.iter().any(|ip| !ip.is_loopback()) {
        usable.retain(|ip| !ip.is_loopback());
    }
    usable.sort_by_key(|ip| (ip.is_ipv6(), *ip));
    usable.dedup();
    if usable.is_empty() {
        return vec![advertised.to_string()];
    }
    usable
        .into_iter()
        .map(|ip| SocketAddr::new(ip, listen.port()).to_string())
        .collect()
}

/// This host's IP addresses (every interface's); empty when they cannot
/// be read.
fn host_addresses() -> Vec<IpAddr> {
    match if_addrs::get_if_addrs() {
        Ok(interfaces) => interfaces.iter().map(|i| i.ip()).collect(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot list this host's addresses for the pairing invite");
            Vec::new()
        }
    }
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
    /// This appliance's pair certificate fingerprint, as the console
    /// writes digests.
    fingerprint: Digest,
    /// The join form's fields (empty unless a join was refused).
    typed: JoinTyped,
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
    /// The raw cause under the error, in small print.
    detail: Option<String>,
    /// The join form's fields after a refused join.
    typed: JoinTyped,
    invite: Option<InviteShown>,
    confirm_promote: bool,
    confirm_leave: bool,
}

fn render(state: &WebState, who: &Authed, shown: Shown) -> Response {
    let (mut chrome, status) = Chrome::with_error(who, "Pair", "/pair", shown.flash, shown.error);
    chrome.error_detail = shown.detail;
    let pair = ops::pair(state);
    page(
        &PairPage {
            fingerprint: Digest::from_hex(&pair.fingerprint),
            typed: shown.typed,
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
        let node = node(&state)?;
        let (code, fingerprint) = node.invite().await.map_err(refusal)?;
        tracing::info!(actor = %who.user, "pairing code issued from the console");
        let addrs = join_addresses(node.advertised(), &host_addresses());
        let every_address = addrs.first().map(String::as_str) != Some(node.advertised());
        let invite = Some(InviteShown {
            addrs,
            every_address,
            code: code.to_string(),
            fingerprint: Digest::from_hex(&fingerprint),
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

/// `POST /pair/join`: this appliance joins the one at `addr`. A failed
/// join shows what to do in plain words with the raw cause in small print
/// ([`uagate_pair::JoinFailure`]), the form keeping what was typed.
pub async fn join(State(state): State<WebState>, who: Authed, Form(f): Form<JoinForm>) -> Response {
    let addr = f.addr.trim();
    let typed = JoinTyped {
        addr: addr.to_string(),
        code: f.code.trim().to_string(),
    };
    let refused = |error: ApiError, detail: Option<String>| {
        let shown = Shown {
            error: Some(error),
            detail,
            typed: typed.clone(),
            ..Shown::default()
        };
        render(&state, &who, shown)
    };
    if addr.is_empty() {
        return refused(
            ApiError::invalid(
                "addr",
                "Enter the other appliance's pair address (HOST:PORT): its Pair page shows it \
                 with the code.",
            ),
            None,
        );
    }
    let node = match node(&state) {
        Ok(node) => node,
        Err(e) => return refused(e, None),
    };
    match node.join(addr, &f.code).await {
        Ok((_, fingerprint)) => {
            tracing::info!(actor = %who.user, %addr, "joined a pair from the console");
            done(
                "/pair",
                &format!(
                    "Joined the pair of {addr}: this appliance takes its configuration now, \
                     its users included, so log in again with a user of that appliance. Its \
                     certificate fingerprint is {}: it should be the one its Pair page showed \
                     with the code.",
                    Digest::from_hex(&fingerprint)
                ),
            )
        }
        Err(uagate_pair::PairError::Join(failure)) => {
            tracing::warn!(actor = %who.user, %addr, problem = ?failure.problem, detail = %failure.detail, "join from the console failed");
            refused(ApiError::Conflict(failure.advice()), Some(failure.detail))
        }
        Err(e) => refused(refusal(e), None),
    }
}

/// What was typed into the join form, shown again after a refusal.
#[derive(Debug, Clone, Default)]
struct JoinTyped {
    addr: String,
    code: String,
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

/// `POST /pair/diverged/clear` form: how many changes the page showed.
#[derive(Debug, Deserialize)]
pub struct ClearDivergedForm {
    count: usize,
}

/// `POST /pair/diverged/clear`: the admin reviewed the diverged changes the
/// page listed; they leave the list (a change set aside since stays).
pub async fn clear_diverged(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<ClearDivergedForm>,
) -> Response {
    let result = async {
        let removed = node(&state)?.clear_diverged(f.count).map_err(refusal)?;
        // The page reads the view the gateway refreshes every second:
        // take the removed changes out of it now.
        let mut view = state.engine.pair_view();
        view.diverged.drain(..removed.min(view.diverged.len()));
        state.engine.set_pair_view(view);
        tracing::warn!(actor = %who.user, removed, "diverged changes marked reviewed from the console");
        let note = match removed {
            0 => "Nothing was removed: the list was already empty.".to_string(),
            1 => "1 diverged change removed from the list.".to_string(),
            n => format!("{n} diverged changes removed from the list."),
        };
        Ok(done("/pair", &note))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn a_specific_address_or_host_name_is_shown_as_it_is() {
        let host = ips(&["10.0.0.1", "192.168.1.5"]);
        assert_eq!(join_addresses("10.0.0.1:4850", &host), ["10.0.0.1:4850"]);
        assert_eq!(
            join_addresses("gw-a.plant.local:4850", &host),
            ["gw-a.plant.local:4850"]
        );
    }

    #[test]
    fn a_wildcard_shows_the_hosts_addresses_with_the_port() {
        let host = ips(&[
            "127.0.0.1",
            "192.168.1.5",
            "10.0.0.1",
            "::1",
            "fe80::1",
            "fd00::5",
        ]);
        // 0.0.0.0 listens on IPv4 only: no loopback while there is better.
        assert_eq!(
            join_addresses("0.0.0.0:4850", &host),
            ["10.0.0.1:4850", "192.168.1.5:4850"]
        );
        // [::] takes both families; IPv6 link-local (it needs a zone) left out.
        assert_eq!(
            join_addresses("[::]:4850", &host),
            ["10.0.0.1:4850", "192.168.1.5:4850", "[fd00::5]:4850"]
        );
    }

    #[test]
    fn only_loopback_or_nothing_known() {
        assert_eq!(
            join_addresses("0.0.0.0:4850", &ips(&["127.0.0.1", "::1"])),
            ["127.0.0.1:4850"]
        );
        assert_eq!(join_addresses("0.0.0.0:4850", &[]), ["0.0.0.0:4850"]);
    }
}
