//! Trusted owners (`/owners`): the trusted owners with their reservations
//! and the ingress rules that map callers to owners or classes; an
//! administrator adds, edits and removes both (`/ingress` for the rules).

use askama::Template;
use axum::extract::{Query, Request, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Form;
use serde::Deserialize;
use uagate_config::{Config, IngressClass, IngressRule, Reservation, Stage, TrustedOwner};
use uagate_isolation::plan::Plan;

use super::{change_notice, done, error_page, number, page, take_flash, Chrome, EditQuery};
use crate::auth::Authed;
use crate::error::ApiError;
use crate::ops;
use crate::state::WebState;

/// A trusted owner as the page lists it.
pub struct OwnerRow {
    key: String,
    weight: u32,
    reservations: String,
}

/// An ingress rule as the page lists it.
pub struct IngressRow {
    cidr: String,
    target: String,
}

#[derive(Template)]
#[template(path = "owners.html")]
struct OwnersPage {
    chrome: Chrome,
    owners: Vec<OwnerRow>,
    ingress: Vec<IngressRow>,
    /// The owner form: empty, an owner's values to edit (`?edit=KEY`), or
    /// what was typed before a refusal.
    form: OwnerInput,
}

/// What the owner form shows: its values and, after a refusal, the error
/// next to the input it concerns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OwnerInput {
    /// Editing an existing owner (its key is fixed), not adding one.
    editing: bool,
    key: String,
    weight: String,
    reservations: String,
    ingress: String,
    /// The input the error is about (`key`, `weight`, `reservations`,
    /// `ingress`) and the error.
    error: Option<(&'static str, String)>,
}

impl OwnerInput {
    /// The form of a new owner.
    fn blank() -> OwnerInput {
        OwnerInput {
            weight: "1".into(),
            ..OwnerInput::default()
        }
    }

    /// The form editing `o`.
    fn of(o: &TrustedOwner) -> OwnerInput {
        OwnerInput {
            editing: true,
            key: o.key.clone(),
            weight: o.weight.to_string(),
            reservations: reservations_text(&o.reservations),
            ..OwnerInput::default()
        }
    }

    /// The form as posted, to show again after a refusal.
    fn posted(f: &OwnerForm) -> OwnerInput {
        OwnerInput {
            editing: f.editing.is_some(),
            key: f.key.clone(),
            weight: f.weight.clone(),
            reservations: f.reservations.clone(),
            ingress: f.ingress.clone(),
            error: None,
        }
    }

    /// The error to show next to `input`, if the refusal concerns it.
    fn error_at(&self, input: &str) -> Option<&str> {
        self.error
            .as_ref()
            .filter(|(at, _)| *at == input)
            .map(|(_, e)| e.as_str())
    }

    /// Remembers `error` next to the input it concerns, when it concerns
    /// one of the form's.
    fn mark(mut self, error: &ApiError) -> OwnerInput {
        if let ApiError::Invalid {
            field: Some(field),
            message,
        } = error
        {
            let message = super::limits_text::strip_setting(message);
            self.error = owner_input(field).map(|at| (at, message.to_string()));
        }
        self
    }

    /// What the page's banner says about the refused input: its label and
    /// the message, in the form's words instead of the setting's path.
    fn banner(&self) -> Option<String> {
        let (input, message) = self.error.as_ref()?;
        let label = match *input {
            "key" => "Key",
            "weight" => "Weight",
            "reservations" => "Reservations",
            "ingress" => "Callers from",
            _ => return None,
        };
        Some(super::not_saved_at(label, message))
    }
}

/// The owner form's input a refused setting is entered in: the form's own
/// names (`weight`), the document's (`isolation.trusted_owners[0].weight`,
/// `isolation.ingress[2].cidr`), and the Connection room the owner's
/// reserves need ([`ROOM_SETTING`]: its reservations do not fit).
fn owner_input(setting: &str) -> Option<&'static str> {
    let last = setting.rsplit('.').next().unwrap_or(setting);
    if setting == ROOM_SETTING || setting.contains("reservations") {
        Some("reservations")
    } else if setting.starts_with("isolation.ingress") || setting == "ingress" || last == "cidr" {
        Some("ingress")
    } else if setting.starts_with("isolation.trusted_owners[") || !setting.contains('.') {
        match last {
            "key" => Some("key"),
            "weight" => Some("weight"),
            "reserved" | "hard_limit" => Some("reservations"),
            _ => None,
        }
    } else {
        None
    }
}

async fn render_owners(
    state: &WebState,
    who: &Authed,
    flash: Option<String>,
    error: Option<ApiError>,
) -> Response {
    render_owners_with(state, who, flash, error, None).await
}

/// The page; `form` is what the owner form shows (`None`: a new owner's
/// form).
async fn render_owners_with(
    state: &WebState,
    who: &Authed,
    flash: Option<String>,
    error: Option<ApiError>,
    form: Option<OwnerInput>,
) -> Response {
    let config = match ops::stored_config(state).await {
        Ok(c) => c,
        Err(e) => return error_page(e),
    };
    // Only a refused owner form is marked: another form's refusal (an
    // ingress rule, a removal) is said above the page.
    let form = match (form, &error) {
        (Some(form), Some(e)) => form.mark(e),
        (Some(form), None) => form,
        (None, _) => OwnerInput::blank(),
    };
    // A refusal that names the document's setting reads in the form's
    // words above it; the page's own messages are already in them.
    let by_path = matches!(&error, Some(ApiError::Invalid { message, .. })
        if message.starts_with("invalid setting `"));
    let banner = form.banner().filter(|_| by_path);
    let (mut chrome, status) = Chrome::with_error(who, "Trusted owners", "/owners", flash, error);
    if banner.is_some() {
        chrome.error = banner;
    }
    let t = OwnersPage {
        chrome,
        form,
        owners: config
            .isolation
            .trusted_owners
            .iter()
            .map(|o| OwnerRow {
                key: o.key.clone(),
                weight: o.weight,
                reservations: reservations_text(&o.reservations),
            })
            .collect(),
        ingress: config
            .isolation
            .ingress
            .iter()
            .map(|r| IngressRow {
                cidr: r.cidr.clone(),
                target: match (&r.owner, r.class) {
                    (Some(o), _) => format!("owner {o}"),
                    (None, Some(IngressClass::Bootstrap)) => "class bootstrap".into(),
                    (None, Some(IngressClass::Reconnect)) => "class reconnect".into(),
                    (None, None) => "—".into(),
                },
            })
            .collect(),
    };
    page(&t, status)
}

/// How the page shows a form post the router refused for the caller's
/// role: the page again, with the error above it.
pub async fn refused(state: WebState, who: Authed, error: ApiError, _: Request) -> Response {
    render_owners(&state, &who, None, Some(error)).await
}

/// `stage reserved [hard]` lines.
fn reservations_text(rs: &[Reservation]) -> String {
    rs.iter()
        .map(|r| match r.hard_limit {
            Some(h) => format!("{} {} {h}", r.stage.key(), r.reserved),
            None => format!("{} {}", r.stage.key(), r.reserved),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Parses `stage reserved [hard]` lines.
pub fn parse_reservations(text: &str) -> Result<Vec<Reservation>, ApiError> {
    let field = "reservations";
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let stage = parts
            .first()
            .and_then(|k| Stage::ALL.iter().find(|s| s.key() == *k || s.name() == *k))
            .ok_or_else(|| {
                ApiError::invalid(
                    field,
                    format!("`{line}`: the first word must be a stage, e.g. request_execution"),
                )
            })?;
        let reserved = parts.get(1).and_then(|v| v.parse().ok()).ok_or_else(|| {
            ApiError::invalid(field, format!("`{line}`: a reserved amount is required"))
        })?;
        let hard_limit = match parts.get(2) {
            Some(v) => Some(v.parse().map_err(|_| {
                ApiError::invalid(field, format!("`{line}`: the hard limit is not a number"))
            })?),
            None => None,
        };
        if parts.len() > 3 {
            return Err(ApiError::invalid(
                field,
                format!("`{line}`: at most three words"),
            ));
        }
        out.push(Reservation {
            stage: *stage,
            reserved,
            hard_limit,
        });
    }
    Ok(out)
}

/// `GET /owners` (`?edit=KEY` prefills the form with that owner).
pub async fn show(
    State(state): State<WebState>,
    who: Authed,
    headers: HeaderMap,
    Query(q): Query<EditQuery>,
) -> Response {
    let flash = take_flash(&headers);
    let form = match q.edit.as_deref() {
        Some(key) => match ops::stored_config(&state).await {
            Ok(c) => c
                .isolation
                .trusted_owners
                .iter()
                .find(|o| o.key == key)
                .map(OwnerInput::of),
            Err(e) => return error_page(e),
        },
        None => None,
    };
    render_owners_with(&state, &who, flash, None, form).await
}

/// After a change on the owners page: back to it with what the change
/// did, or the page again with the error.
async fn owners_outcome(
    state: &WebState,
    who: &Authed,
    result: Result<ops::ConfigChange, ApiError>,
) -> Response {
    match result {
        Ok(change) => done("/owners", &change_notice(&change)),
        Err(e) => render_owners(state, who, None, Some(e)).await,
    }
}

/// `POST /owners` form: add or replace an owner.
#[derive(Debug, Deserialize)]
pub struct OwnerForm {
    /// Present when the form edits an existing owner.
    #[serde(default)]
    editing: Option<String>,
    #[serde(default)]
    key: String,
    #[serde(default)]
    weight: String,
    #[serde(default)]
    reservations: String,
    #[serde(default)]
    ingress: String,
}

/// `POST /owners`: adds or replaces a trusted owner, validated
/// against the plan.
pub async fn save(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<OwnerForm>,
) -> Response {
    let parsed = (|| {
        let owner = TrustedOwner {
            key: f.key.trim().to_string(),
            weight: number("weight", &f.weight)
                .map_err(|_| {
                    ApiError::invalid(
                        "weight",
                        format!(
                            "Weight: “{}” is not a number; enter a whole number from 1 to 1000.",
                            f.weight.trim()
                        ),
                    )
                })?
                .unwrap_or(1),
            reservations: parse_reservations(&f.reservations)?,
        };
        let ingress: Vec<String> = f
            .ingress
            .split([',', '\n', ' '])
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect();
        Ok::<_, ApiError>((owner, ingress))
    })();
    let (owner, ingress) = match parsed {
        Ok(p) => p,
        Err(e) => return refused_owner(&state, &who, &f, e).await,
    };
    // The first owner switches the profile to reservations, which needs
    // callers mapped to an owner: asked for here in the form's words.
    if ingress.is_empty() {
        if let Ok(stored) = ops::stored_config(&state).await {
            let iso = &stored.isolation;
            if iso.trusted_owners.is_empty()
                && !iso
                    .ingress
                    .iter()
                    .any(|r| r.owner.as_deref() == Some(owner.key.as_str()))
            {
                let e = ApiError::invalid(
                    "ingress",
                    "Callers from: the first trusted owner needs the address range of its \
                     callers (e.g. 10.8.0.0/16 or one address), so the gateway knows who it is.",
                );
                return refused_owner(&state, &who, &f, e).await;
            }
        }
    }
    let key = owner.key.clone();
    let result = match ops::upsert_owner(&state, &who, owner.clone(), ingress.clone()).await {
        // No room for the owner's connections: say so in plain words, with
        // the numbers that would fit.
        Err(e) if e.field() == Some(ROOM_SETTING) => {
            let hint = match ops::stored_config(&state).await {
                Ok(mut candidate) => {
                    ops::put_owner(&mut candidate, owner, ingress);
                    connection_room(&candidate, &key)
                }
                Err(_) => None,
            };
            Err(hint.map_or(e, |h| ApiError::invalid(ROOM_SETTING, h)))
        }
        other => other,
    };
    match result {
        Ok(change) => done("/owners", &change_notice(&change)),
        Err(e) => refused_owner(&state, &who, &f, e).await,
    }
}

/// The page again after the owner form was refused: what was typed stays,
/// the error is shown next to the input it concerns (and above the page).
async fn refused_owner(state: &WebState, who: &Authed, f: &OwnerForm, e: ApiError) -> Response {
    render_owners_with(state, who, None, Some(e), Some(OwnerInput::posted(f))).await
}

/// The setting the plan names when the shared Connection capacity cannot
/// hold every session (+1) next to the reserves.
const ROOM_SETTING: &str = "server.max_channel_count";

/// In plain words, why `candidate` (the stored document with the owner
/// `key` put in) has no room for its connection reserves, and what to set
/// on the Limits page instead; `None` when that is not what is wrong.
pub fn connection_room(candidate: &Config, key: &str) -> Option<String> {
    let no_room =
        |c: &Config| matches!(Plan::build(c), Err(e) if e.setting() == Some(ROOM_SETTING));
    if !no_room(candidate) {
        return None;
    }
    let total = candidate.server.max_channel_count;
    let sessions = candidate.server.max_session_count;
    // The fewest connections that hold it all (bounded: the reserves are
    // far smaller), and the plan with them.
    let (enough, plan) = (1..=10_000u32).find_map(|more| {
        let mut c = candidate.clone();
        c.server.max_channel_count = total.checked_add(more)?;
        let plan = Plan::build(&c).ok()?;
        Some((c.server.max_channel_count, plan))
    })?;
    let connection = plan
        .stages()
        .iter()
        .find(|s| s.stage == Stage::Connection)?;
    let reserved = connection.total.saturating_sub(connection.shared);
    let own = connection
        .trusted
        .iter()
        .find(|t| t.key == key)
        .map_or(0, |t| t.reserved);
    // The most sessions that fit next to the reserves as they are.
    let fewer = (1..sessions).rev().find(|&n| {
        let mut c = candidate.clone();
        c.server.max_session_count = n;
        !no_room(&c)
    });
    let plural = |n: u64| if n == 1 { "" } else { "s" };
    // Whether the operator listed a connection reserve, or the gateway
    // keeps the owner one of its own without being asked.
    let asked = candidate
        .isolation
        .trusted_owners
        .iter()
        .find(|o| o.key == key)
        .is_some_and(|o| o.reservations.iter().any(|r| r.stage == Stage::Connection));
    let why = if asked {
        format!("Reserving {own} connection{} for {key}", plural(own))
    } else {
        format!(
            "The {own} connection{} {key} is kept of its own (every trusted owner is, unless its reservations say connection 0)",
            plural(own)
        )
    };
    let mut text = format!(
        "{why} needs room the gateway does not have: it allows {total} connections (Max connections) and keeps {} of them for its {sessions} sessions (one each, plus one to reconnect), and with {key} {reserved} connection{} are reserved for particular callers. ",
        u64::from(sessions) + 1,
        plural(reserved),
    );
    match fewer {
        Some(n) => text.push_str(&format!(
            "Raise Max connections to {enough} or more, or lower Max sessions to {n}, on the Limits page, then save {key} again."
        )),
        None => text.push_str(&format!(
            "Raise Max connections to {enough} or more on the Limits page, then save {key} again."
        )),
    }
    text.push_str(" That change takes effect after the gateway restarts. Nothing was saved.");
    Some(text)
}

/// `POST /owners/remove` form.
#[derive(Debug, Deserialize)]
pub struct KeyForm {
    key: String,
}

/// `POST /owners/remove`.
pub async fn remove(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<KeyForm>,
) -> Response {
    let result = async { ops::remove_owner(&state, &who, &f.key).await }.await;
    owners_outcome(&state, &who, result).await
}

/// `POST /ingress` form: `target` is `owner:<key>` or `class:<name>`.
#[derive(Debug, Deserialize)]
pub struct IngressForm {
    cidr: String,
    target: String,
}

/// Builds an ingress rule from the form's target.
pub fn ingress_rule(cidr: &str, target: &str) -> Result<IngressRule, ApiError> {
    let (owner, class) = match target.split_once(':') {
        Some(("owner", key)) => (Some(key.to_string()), None),
        Some(("class", "bootstrap")) => (None, Some(IngressClass::Bootstrap)),
        Some(("class", "reconnect")) => (None, Some(IngressClass::Reconnect)),
        _ => {
            return Err(ApiError::invalid(
                "target",
                "an owner key or the class bootstrap or reconnect",
            ))
        }
    };
    Ok(IngressRule {
        cidr: cidr.trim().to_string(),
        owner,
        class,
    })
}

/// `POST /ingress`.
pub async fn ingress_add(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<IngressForm>,
) -> Response {
    let result = async {
        let rule = ingress_rule(&f.cidr, &f.target)?;
        ops::add_ingress(&state, &who, rule).await
    }
    .await
    .map_err(|e| match e {
        // The address range in the form's words.
        ApiError::Invalid {
            field: Some(field),
            message,
        } if field.ends_with(".cidr") => {
            let message = super::limits_text::strip_setting(&message).to_string();
            ApiError::Invalid {
                message: format!("Not saved: Address range: {message}."),
                field: Some(field),
            }
        }
        other => other,
    });
    owners_outcome(&state, &who, result).await
}

/// `POST /ingress/remove` form.
#[derive(Debug, Deserialize)]
pub struct IndexForm {
    index: usize,
}

/// `POST /ingress/remove`.
pub async fn ingress_remove(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<IndexForm>,
) -> Response {
    let result = async { ops::remove_ingress(&state, &who, f.index).await }.await;
    owners_outcome(&state, &who, result).await
}
