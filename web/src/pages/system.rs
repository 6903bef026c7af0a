//! System (`/system`): the appliance image underneath the gateway: this
//! gateway's version, the image version, the slot it runs from and the
//! other one; an administrator installs an update bundle (uploaded with
//! a plain multipart form, installed by RAUC into the other slot in the
//! background) and restarts the appliance through a confirmation step.
//! Its live part (`/partials/system`) is refreshed by htmx while an
//! update is under way. Off the appliance it says so and offers nothing.

use askama::Template;
use axum::extract::{Multipart, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Form;
use serde::Deserialize;
use uagate_system::{DetailBy, UpdateState};

use super::{done, page, take_flash, Chrome};
use crate::auth::Authed;
use crate::error::ApiError;
use crate::ops::{self, SlotView, SystemView};
use crate::state::WebState;

/// The update's state as the page words it.
pub struct UpdateLine {
    /// CSS class: `idle`, `working`, `done`, `refused` or `failed`.
    kind: &'static str,
    /// The sentence ("Installing uagate 0.2.0 into slot B…").
    headline: String,
    /// RAUC's own line, or what the gateway's check of the bundle found,
    /// for a refusal or failure.
    detail: Option<String>,
    /// Who said `detail`, in front of it: "RAUC said:" or "The gateway's
    /// check found:".
    detail_by: &'static str,
    /// When the state began (RFC 3339), for `<time>`.
    since: Option<String>,
}

impl UpdateLine {
    fn of(state: &UpdateState) -> UpdateLine {
        let since = state.since().map(ops::rfc3339);
        match state {
            UpdateState::Idle => UpdateLine {
                kind: "idle",
                headline: "No update since the gateway started.".into(),
                detail: None,
                detail_by: "",
                since,
            },
            UpdateState::Failed { failure, .. } => UpdateLine {
                kind: if failure.refused { "refused" } else { "failed" },
                headline: format!(
                    "{}: {}",
                    if failure.refused { "Refused" } else { "Failed" },
                    super::upper_first(&failure.reason)
                ),
                detail: failure.detail.clone(),
                detail_by: match failure.detail_by {
                    DetailBy::Rauc => "RAUC said:",
                    DetailBy::Check => "The gateway's check found:",
                },
                since,
            },
            other => UpdateLine {
                kind: if other.busy() { "working" } else { "done" },
                headline: other.message().unwrap_or_default(),
                detail: None,
                detail_by: "",
                since,
            },
        }
    }
}

/// One slot's card.
pub struct SlotCard {
    slot: SlotView,
    /// `good`, `bad` or `empty` (CSS class and word).
    verdict: &'static str,
    /// The verdict in words.
    words: String,
}

impl SlotCard {
    fn of(slot: &SlotView, booted: Option<&str>) -> SlotCard {
        let (verdict, words) = match (slot.version.is_some(), slot.boot_status.as_deref()) {
            (_, Some("bad")) => (
                "bad",
                match booted {
                    Some(b) => format!("Bad: it did not come up. The appliance stays on slot {b}."),
                    None => "Bad: it did not come up.".to_string(),
                },
            ),
            (false, _) if slot.installed.is_none() => (
                "empty",
                "Empty: no update installed into it yet.".to_string(),
            ),
            _ => ("good", "Good.".to_string()),
        };
        SlotCard {
            slot: slot.clone(),
            verdict,
            words,
        }
    }
}

/// What the live part shows.
pub struct Live {
    view: SystemView,
    booted: Option<SlotCard>,
    other: Option<SlotCard>,
    update: UpdateLine,
    /// An update is under way: the part refreshes itself, the forms wait.
    busy: bool,
    /// The chrome's CSRF token and whether the admin controls show.
    csrf: String,
    admin: bool,
    /// The restart's confirmation step is open.
    confirm: bool,
}

async fn live(state: &WebState, who: &Authed, confirm: bool) -> Live {
    let view = ops::system(state).await;
    let update_state = state.system.state();
    let booted_name = view.booted_slot.clone();
    let booted = view
        .slots
        .iter()
        .find(|s| Some(&s.slot) == booted_name.as_ref())
        .map(|s| SlotCard::of(s, None));
    let other = view
        .slots
        .iter()
        .find(|s| Some(&s.slot) != booted_name.as_ref())
        .map(|s| SlotCard::of(s, booted_name.as_deref()));
    Live {
        booted,
        other,
        update: UpdateLine::of(&update_state),
        busy: update_state.busy(),
        csrf: who.csrf.clone(),
        admin: who.can(uagate_store::Role::Admin),
        confirm,
        view,
    }
}

#[derive(Template)]
#[template(path = "system.html")]
struct SystemPage {
    chrome: Chrome,
    live: Live,
}

#[derive(Template)]
#[template(path = "system_live.html")]
struct SystemLive {
    live: Live,
}

async fn render_system(
    state: &WebState,
    who: &Authed,
    flash: Option<String>,
    confirm: bool,
    error: Option<ApiError>,
) -> Response {
    let (chrome, status) = Chrome::with_error(who, "System", "/system", flash, error);
    page(
        &SystemPage {
            chrome,
            live: live(state, who, confirm).await,
        },
        status,
    )
}

/// How the page shows a form post the router refused for the caller's
/// role: the page again, with the error above it.
pub async fn refused(state: WebState, who: Authed, error: ApiError, _: Request) -> Response {
    render_system(&state, &who, None, false, Some(error)).await
}

/// `GET /system`.
pub async fn show(State(state): State<WebState>, who: Authed, headers: HeaderMap) -> Response {
    let flash = take_flash(&headers);
    render_system(&state, &who, flash, false, None).await
}

/// `GET /partials/system`: the live part, refreshed while an update runs.
pub async fn partial(State(state): State<WebState>, who: Authed) -> Response {
    page(
        &SystemLive {
            live: live(&state, &who, false).await,
        },
        StatusCode::OK,
    )
}

/// Receives the `bundle` field of the upload form into the updater and
/// starts the install.
async fn receive(state: &WebState, who: &Authed, mut m: Multipart) -> Result<(), ApiError> {
    let broken = |e: axum::extract::multipart::MultipartError| {
        ApiError::invalid("bundle", format!("the upload broke off: {}", e.body_text()))
    };
    while let Some(mut field) = m.next_field().await.map_err(broken)? {
        if field.name() != Some("bundle") {
            continue;
        }
        let mut upload = ops::begin_update(state, None).await?;
        while let Some(chunk) = field.chunk().await.map_err(broken)? {
            upload.write(&chunk).await?;
        }
        if upload.written() == 0 {
            return Err(ApiError::invalid(
                "bundle",
                "choose an update bundle (.raucb)",
            ));
        }
        return ops::install_update(state, who, upload).await;
    }
    Err(ApiError::invalid(
        "bundle",
        "choose an update bundle (.raucb)",
    ))
}

/// `POST /system/update` (multipart, field `bundle`): stores the bundle
/// and installs it in the background; the page then shows the progress.
pub async fn update(State(state): State<WebState>, who: Authed, m: Multipart) -> Response {
    match receive(&state, &who, m).await {
        Ok(()) => done(
            "/system",
            "Update bundle received. RAUC is checking and installing it; this page shows how it goes.",
        ),
        Err(e) => render_system(&state, &who, None, false, Some(e)).await,
    }
}

/// `POST /system/reboot` form.
#[derive(Debug, Deserialize)]
pub struct RebootForm {
    /// `yes` on the confirmation step.
    #[serde(default)]
    confirm: Option<String>,
}

/// `POST /system/reboot`: without `confirm=yes` it shows the confirmation
/// step; with it, asks for the restart.
pub async fn reboot(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<RebootForm>,
) -> Response {
    if f.confirm.as_deref() != Some("yes") {
        let checked = state.system.can_reboot().map_err(ApiError::from).err();
        let confirm = checked.is_none();
        return render_system(&state, &who, None, confirm, checked).await;
    }
    match ops::reboot(&state, &who).await {
        Ok(()) => done(
            "/system",
            "Restart requested: the appliance restarts now. The console is back in about a minute; reload this page then.",
        ),
        Err(e) => render_system(&state, &who, None, false, Some(e)).await,
    }
}
