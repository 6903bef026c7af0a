//! Limits (`/limits`): the isolation profile and the per-stage overrides
//! of the stored document, with the plan recomputed as the form changes
//! (`/limits/preview`); an administrator applies them.

use askama::Template;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Form;
use uagate_config::{Config, IsolationMode, Stage, StageOverride};
use uagate_store::Role;

use super::{change_notice, done, error_page, limits_text, number, page, take_flash, Chrome};
use crate::auth::Authed;
use crate::error::ApiError;
use crate::ops;
use crate::state::WebState;

/// One stage row of the limits form (empty = profile default).
pub struct StageForm {
    name: &'static str,
    key: &'static str,
    capacity: String,
    bootstrap_reserved: String,
    reconnect_reserved: String,
    control_reserved: String,
    owner_hard_limit: String,
    /// What an empty field means (the profile's value), as placeholders:
    /// capacity, bootstrap, reconnect, control, owner hard limit.
    defaults: [String; 5],
}

/// The profile's value of every stage field, with no stage override.
fn stage_defaults(config: &Config) -> Vec<[String; 5]> {
    let mut bare = config.clone();
    bare.isolation.stages.clear();
    let plan = uagate_isolation::plan::Plan::build(&bare).ok();
    Stage::ALL
        .iter()
        .map(|stage| {
            plan.as_ref()
                .and_then(|p| p.stages().iter().find(|s| s.stage == *stage))
                .map(|s| {
                    [s.total, s.bootstrap, s.reconnect, s.control, s.owner_limit]
                        .map(|v| v.to_string())
                })
                .unwrap_or_default()
        })
        .collect()
}

/// The limits form's values.
pub struct LimitsForm {
    /// `server.max_session_count` (empty: keep the stored value).
    max_session_count: String,
    /// `server.max_channel_count` (empty: keep the stored value).
    max_channel_count: String,
    mode: String,
    default_weight: String,
    max_tracked_owners: String,
    stages: Vec<StageForm>,
    /// The input the plan's error is about and that error, shown next to
    /// it (see [`Self::marked`]).
    error: Option<(String, String)>,
}

/// One input of a stage row.
pub struct Cell {
    input: String,
    label: &'static str,
    value: String,
    placeholder: String,
}

impl StageForm {
    /// The row's inputs, in column order.
    fn cells(&self) -> [Cell; 5] {
        let cell = |field: &str, label, value: &String, placeholder: &String| Cell {
            input: format!("{}.{field}", self.key),
            label,
            value: value.clone(),
            placeholder: placeholder.clone(),
        };
        [
            cell("capacity", "Capacity", &self.capacity, &self.defaults[0]),
            cell(
                "bootstrap_reserved",
                "Bootstrap reserve",
                &self.bootstrap_reserved,
                &self.defaults[1],
            ),
            cell(
                "reconnect_reserved",
                "Reconnect reserve",
                &self.reconnect_reserved,
                &self.defaults[2],
            ),
            cell(
                "control_reserved",
                "Control reserve",
                &self.control_reserved,
                &self.defaults[3],
            ),
            cell(
                "owner_hard_limit",
                "Owner hard limit",
                &self.owner_hard_limit,
                &self.defaults[4],
            ),
        ]
    }
}

impl LimitsForm {
    /// The error to show next to `input`, if the plan's error is about it.
    fn error_at(&self, input: &str) -> Option<&str> {
        self.error
            .as_ref()
            .filter(|(at, _)| at == input)
            .map(|(_, e)| e.as_str())
    }

    /// The form with `preview`'s error next to the input it names.
    fn marked(mut self, preview: &Preview) -> LimitsForm {
        self.error = preview
            .error
            .clone()
            .filter(|_| !preview.error_input.is_empty())
            .map(|e| (preview.error_input.clone(), e));
        self
    }

    fn of(config: &Config) -> LimitsForm {
        let iso = &config.isolation;
        let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        let defaults = stage_defaults(config);
        LimitsForm {
            max_session_count: config.server.max_session_count.to_string(),
            max_channel_count: config.server.max_channel_count.to_string(),
            error: None,
            mode: iso.mode.as_str().to_string(),
            default_weight: iso.default_weight.to_string(),
            max_tracked_owners: iso.max_tracked_owners.to_string(),
            stages: Stage::ALL
                .iter()
                .zip(defaults)
                .map(|(stage, defaults)| {
                    let o = iso.stages.iter().find(|o| o.stage == *stage);
                    StageForm {
                        defaults,
                        name: stage.name(),
                        key: stage.key(),
                        capacity: opt(o.and_then(|o| o.capacity)),
                        bootstrap_reserved: opt(o.and_then(|o| o.bootstrap_reserved)),
                        reconnect_reserved: opt(o.and_then(|o| o.reconnect_reserved)),
                        control_reserved: opt(o.and_then(|o| o.control_reserved)),
                        owner_hard_limit: opt(o.and_then(|o| o.owner_hard_limit)),
                    }
                })
                .collect(),
        }
    }

    /// The posted values (without placeholders; see [`Self::with_defaults`]).
    fn from_fields(fields: &[(String, String)]) -> LimitsForm {
        let get = |k: &str| {
            fields
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.trim().to_string())
                .unwrap_or_default()
        };
        LimitsForm {
            max_session_count: get("server.max_session_count"),
            max_channel_count: get("server.max_channel_count"),
            error: None,
            mode: get("mode"),
            default_weight: get("default_weight"),
            max_tracked_owners: get("max_tracked_owners"),
            stages: Stage::ALL
                .iter()
                .map(|s| StageForm {
                    defaults: Default::default(),
                    name: s.name(),
                    key: s.key(),
                    capacity: get(&format!("{}.capacity", s.key())),
                    bootstrap_reserved: get(&format!("{}.bootstrap_reserved", s.key())),
                    reconnect_reserved: get(&format!("{}.reconnect_reserved", s.key())),
                    control_reserved: get(&format!("{}.control_reserved", s.key())),
                    owner_hard_limit: get(&format!("{}.owner_hard_limit", s.key())),
                })
                .collect(),
        }
    }

    /// The form with the profile's values of `base` as placeholders; only
    /// a whole page shows them.
    fn with_defaults(mut self, base: &Config) -> LimitsForm {
        for (stage, defaults) in self.stages.iter_mut().zip(stage_defaults(base)) {
            stage.defaults = defaults;
        }
        self
    }

    /// `base` with this form's isolation settings; a value that is not a
    /// number is refused naming its setting.
    fn apply_to(&self, mut base: Config) -> Result<Config, ApiError> {
        // Restart-only server settings; a form without them keeps them.
        if let Some(v) = number("server.max_session_count", &self.max_session_count)? {
            base.server.max_session_count = v;
        }
        if let Some(v) = number("server.max_channel_count", &self.max_channel_count)? {
            base.server.max_channel_count = v;
        }
        let iso = &mut base.isolation;
        iso.mode = MODES
            .iter()
            .zip(MODE_VALUES)
            .find(|(n, _)| **n == self.mode)
            .map(|(_, m)| m)
            .ok_or_else(|| ApiError::invalid("isolation.mode", "unknown isolation mode"))?;
        iso.default_weight = number("isolation.default_weight", &self.default_weight)?
            .ok_or_else(|| ApiError::invalid("isolation.default_weight", "required"))?;
        iso.max_tracked_owners = number("isolation.max_tracked_owners", &self.max_tracked_owners)?
            .ok_or_else(|| ApiError::invalid("isolation.max_tracked_owners", "required"))?;
        let mut stages = Vec::new();
        for (stage, f) in Stage::ALL.iter().zip(&self.stages) {
            let n = |field: &str, v: &str| {
                number::<u64>(&format!("isolation.stages.{}.{field}", stage.key()), v)
            };
            let o = StageOverride {
                stage: *stage,
                capacity: n("capacity", &f.capacity)?,
                bootstrap_reserved: n("bootstrap_reserved", &f.bootstrap_reserved)?,
                reconnect_reserved: n("reconnect_reserved", &f.reconnect_reserved)?,
                control_reserved: n("control_reserved", &f.control_reserved)?,
                owner_hard_limit: n("owner_hard_limit", &f.owner_hard_limit)?,
            };
            let empty = o.capacity.is_none()
                && o.bootstrap_reserved.is_none()
                && o.reconnect_reserved.is_none()
                && o.control_reserved.is_none()
                && o.owner_hard_limit.is_none();
            if !empty {
                stages.push(o);
            }
        }
        iso.stages = stages;
        Ok(base)
    }
}

const MODES: [&str; 4] = [
    "shared_only",
    "fair_share",
    "balanced",
    "trusted_reservations",
];
const MODE_VALUES: [IsolationMode; 4] = [
    IsolationMode::SharedOnly,
    IsolationMode::FairShare,
    IsolationMode::Balanced,
    IsolationMode::TrustedReservations,
];

/// The plan preview (or the error that names the setting).
pub struct Preview {
    /// One row per stage: its name, then its numbers as the page shows
    /// them (thousands separated): total, shared, bootstrap, reconnect,
    /// control, trusted owners, per-owner limit.
    rows: Vec<(String, [String; 7])>,
    error: Option<String>,
    /// The form input the error is about (shown next to it), if known.
    error_input: String,
    /// The placeholders that follow the form's values (JSON object: input
    /// name → what an empty field means now), for the page's script.
    placeholders: String,
    /// Also swap the Apply button (enabled only for a valid plan).
    oob: bool,
}

/// The limits form input a setting is edited in
/// (`isolation.stages.request_execution.capacity` → `request_execution.capacity`;
/// `isolation.stages[0].capacity`, the first of the document's stage
/// overrides `overrides`, → `connection.capacity` when that is Connection).
fn input_of(setting: &str, overrides: &[Stage]) -> String {
    let indexed = setting
        .strip_prefix("isolation.stages[")
        .and_then(|rest| rest.split_once("]."))
        .and_then(|(n, field)| {
            let stage = overrides.get(n.parse::<usize>().ok()?)?;
            Some(format!("{}.{field}", stage.key()))
        });
    if let Some(input) = indexed {
        return input;
    }
    setting
        .strip_prefix("isolation.stages.")
        .or_else(|| setting.strip_prefix("isolation."))
        .unwrap_or(setting)
        .to_string()
}

/// What each empty stage field means for the candidate document: the
/// profile's capacity, and the reserves and owner limit the plan derives
/// from the capacity as typed.
fn placeholders(candidate: &Config) -> String {
    let profile = stage_defaults(candidate);
    let mut with_capacities = candidate.clone();
    for o in &mut with_capacities.isolation.stages {
        o.bootstrap_reserved = None;
        o.reconnect_reserved = None;
        o.control_reserved = None;
        o.owner_hard_limit = None;
    }
    let plan = uagate_isolation::plan::Plan::build(&with_capacities).ok();
    let mut map = serde_json::Map::new();
    for (stage, defaults) in Stage::ALL.iter().zip(profile) {
        let derived = plan
            .as_ref()
            .and_then(|p| p.stages().iter().find(|s| s.stage == *stage))
            .map(|s| [s.bootstrap, s.reconnect, s.control, s.owner_limit]);
        map.insert(
            format!("{}.capacity", stage.key()),
            defaults[0].clone().into(),
        );
        for (i, field) in [
            "bootstrap_reserved",
            "reconnect_reserved",
            "control_reserved",
            "owner_hard_limit",
        ]
        .iter()
        .enumerate()
        {
            let v = derived.map_or_else(|| defaults[i + 1].clone(), |d| d[i].to_string());
            map.insert(format!("{}.{field}", stage.key()), v.into());
        }
    }
    serde_json::Value::Object(map).to_string()
}

impl Preview {
    fn of(config: Result<Config, ApiError>, oob: bool) -> Preview {
        let hints = config.as_ref().map(placeholders).unwrap_or_default();
        let overrides: Vec<Stage> = config
            .as_ref()
            .map(|c| c.isolation.stages.iter().map(|o| o.stage).collect())
            .unwrap_or_default();
        match config.and_then(|c| ops::check_config(&c)) {
            Ok(plan) => Preview {
                rows: ops::plan_view(&plan)
                    .into_iter()
                    .map(|s| {
                        let n =
                            |v: u64| super::charts::thousands(i64::try_from(v).unwrap_or(i64::MAX));
                        let numbers = [
                            n(s.total),
                            n(s.shared),
                            n(s.bootstrap),
                            n(s.reconnect),
                            n(s.control),
                            n(s.trusted),
                            n(s.owner_limit),
                        ];
                        (s.stage, numbers)
                    })
                    .collect(),
                error: None,
                error_input: String::new(),
                placeholders: hints,
                oob,
            },
            Err(e) => {
                let (error_input, error) = in_page_words(&e, &overrides);
                Preview {
                    rows: Vec::new(),
                    error_input,
                    error: Some(error),
                    placeholders: hints,
                    oob,
                }
            }
        }
    }
}

/// A refusal as the page says it: the input it is shown at and the
/// message in the page's words, naming inputs by their labels (see
/// [`limits_text`]); `overrides` are the candidate document's stage
/// overrides in order (an error may name one by its position). The REST
/// API keeps the plan's message, which names the setting.
fn in_page_words(e: &ApiError, overrides: &[Stage]) -> (String, String) {
    match e {
        ApiError::Invalid {
            field: Some(setting),
            message,
        } => {
            let input = limits_text::input_for(setting, &input_of(setting, overrides), message);
            let words = limits_text::words(setting, &input, message);
            (input, words)
        }
        other => (String::new(), other.to_string()),
    }
}

#[derive(Template)]
#[template(path = "limits.html")]
struct LimitsPage {
    chrome: Chrome,
    modes: [&'static str; 4],
    form: LimitsForm,
    preview: Preview,
    chrome_admin: bool,
    /// The isolation usage now (see [`super::usage`]).
    usage: super::usage::Usage,
}

#[derive(Template)]
#[template(path = "plan_table.html")]
struct PlanPartial {
    preview: Preview,
    chrome_admin: bool,
}

/// `GET /limits`: the isolation settings of the stored document and its plan.
pub async fn show(State(state): State<WebState>, who: Authed, headers: HeaderMap) -> Response {
    let flash = take_flash(&headers);
    let config = match ops::stored_config(&state).await {
        Ok(c) => c,
        Err(e) => return error_page(e),
    };
    let t = LimitsPage {
        usage: super::usage::usage(&state),
        chrome_admin: who.can(Role::Admin),
        chrome: Chrome::new(&who, "Limits", "/limits", flash),
        modes: MODES,
        form: LimitsForm::of(&config),
        preview: Preview::of(Ok(config), false),
    };
    page(&t, StatusCode::OK)
}

/// `POST /limits/preview`: the plan of the form's values without storing
/// anything. htmx gets the plan fragment (and the Apply button, enabled
/// only when the plan is valid); a plain post gets the whole page.
pub async fn preview(
    State(state): State<WebState>,
    who: Authed,
    headers: HeaderMap,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let base = match ops::stored_config(&state).await {
        Ok(c) => c,
        Err(e) => return error_page(e),
    };
    let form = LimitsForm::from_fields(&fields);
    let candidate = form.apply_to(base.clone());
    if headers.contains_key("hx-request") {
        return page(
            &PlanPartial {
                preview: Preview::of(candidate, true),
                chrome_admin: who.can(Role::Admin),
            },
            StatusCode::OK,
        );
    }
    let preview = Preview::of(candidate, false);
    let form = form.with_defaults(&base).marked(&preview);
    let t = LimitsPage {
        usage: super::usage::usage(&state),
        chrome_admin: who.can(Role::Admin),
        chrome: Chrome::new(&who, "Limits", "/limits", None),
        modes: MODES,
        form,
        preview,
    };
    page(&t, StatusCode::OK)
}

/// `POST /limits`: applies the form. Says which changes took
/// effect live and which wait for a restart; an invalid form is shown
/// again with the named error and nothing is stored.
pub async fn apply(
    State(state): State<WebState>,
    who: Authed,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let form = LimitsForm::from_fields(&fields);
    // Read, changed and stored under the configuration lock, so that a
    // change stored meanwhile (a field connection, an owner) is kept.
    let result = ops::edit_config(&state, &who, |config| {
        *config = form.apply_to(config.clone())?;
        Ok(())
    })
    .await;
    match result {
        Ok(change) => done("/limits", &change_notice(&change)),
        Err(e) => render_with_error(&state, &who, form, e).await,
    }
}

/// How the page shows a post of `/limits` the router refused for the
/// caller's role: the posted form again, with its plan and the error.
pub async fn refused(state: WebState, who: Authed, error: ApiError, request: Request) -> Response {
    let fields = match Form::<Vec<(String, String)>>::from_request(request, &state).await {
        Ok(Form(fields)) => fields,
        Err(_) => Vec::new(),
    };
    render_with_error(&state, &who, LimitsForm::from_fields(&fields), error).await
}

/// The page with the posted `form`, its plan, and `error` above them.
async fn render_with_error(
    state: &WebState,
    who: &Authed,
    form: LimitsForm,
    error: ApiError,
) -> Response {
    let mut overrides = Vec::new();
    let (form, preview) = match ops::stored_config(state).await {
        Ok(base) => {
            let candidate = form.apply_to(base.clone());
            if let Ok(c) = &candidate {
                overrides = c.isolation.stages.iter().map(|o| o.stage).collect();
            }
            let preview = Preview::of(candidate, false);
            (form.with_defaults(&base).marked(&preview), preview)
        }
        Err(_) => (
            form,
            Preview {
                rows: Vec::new(),
                error: None,
                error_input: String::new(),
                placeholders: String::new(),
                oob: false,
            },
        ),
    };
    // Above the page too, in the page's words.
    let error = match &error {
        ApiError::Invalid {
            field: Some(field), ..
        } => ApiError::invalid(field.clone(), in_page_words(&error, &overrides).1),
        _ => error,
    };
    let (chrome, status) = Chrome::with_error(who, "Limits", "/limits", None, Some(error));
    let t = LimitsPage {
        usage: super::usage::usage(state),
        chrome_admin: who.can(Role::Admin),
        chrome,
        modes: MODES,
        form,
        preview,
    };
    page(&t, status)
}

#[cfg(test)]
mod input_tests {
    use super::*;

    /// The preview of the default document with `typed` in the form (the
    /// rest as the page shows the defaults): (input, message).
    fn refused(typed: &[(&str, &str)]) -> (String, String) {
        let base = Config::default();
        let mut fields: Vec<(String, String)> = vec![
            ("mode".into(), "balanced".into()),
            ("default_weight".into(), "1".into()),
            ("max_tracked_owners".into(), "4096".into()),
        ];
        for (k, v) in typed {
            fields.retain(|(n, _)| n != k);
            fields.push((k.to_string(), v.to_string()));
        }
        let form = LimitsForm::from_fields(&fields);
        let p = Preview::of(form.apply_to(base), false);
        (p.error_input, p.error.unwrap_or_default())
    }

    /// Every refusal the page can meet, in the page's words: the input's
    /// label, no setting key, no planner terms; shown at the input.
    #[test]
    fn refusals_name_the_inputs_label_not_the_setting() {
        // (what is typed, the input the error is at, what it says)
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);
        let cases: &[Case] = &[
            (
                &[("server.max_channel_count", "100")],
                "server.max_channel_count",
                "Max connections must be at least 103: each of the 100 sessions (Max sessions) needs a connection, one more stays free for a client to reconnect, and 2 are kept for new and reconnecting clients and trusted owners. Or lower Max sessions or the Connection reserves.",
            ),
            (
                &[("connection.capacity", "110")],
                "connection.capacity",
                "Connection Capacity can only be lowered: enter 1 to 103, or leave it empty for 103.",
            ),
            (
                &[("connection.capacity", "102")],
                "connection.capacity",
                "Connection Capacity must be at least 103: each of the 100 sessions (Max sessions) needs a connection, one more stays free for a client to reconnect, and 2 are kept for new and reconnecting clients and trusted owners. Or lower Max sessions or the Connection reserves.",
            ),
            (
                &[("request_execution.capacity", "lots")],
                "request_execution.capacity",
                "RequestExecution Capacity: “lots” is not a number; enter a whole number, or leave it empty for the profile's value.",
            ),
            (
                &[("server.max_session_count", "many")],
                "server.max_session_count",
                "Max sessions: “many” is not a number; enter a whole number, or leave it empty to keep the value in force.",
            ),
            (
                &[("server.max_session_count", "0")],
                "server.max_session_count",
                "Max sessions must be at least 1.",
            ),
            (
                &[("mode", "shared_only"), ("connection.bootstrap_reserved", "1")],
                "connection.bootstrap_reserved",
                "Connection Bootstrap reserve: mode shared_only keeps no reserves; leave it empty or 0, or choose mode balanced or trusted_reservations.",
            ),
            (
                &[("connection.control_reserved", "1")],
                "connection.control_reserved",
                "Connection Control reserve: Connection has no control work, so it keeps no control reserve; leave it empty or 0.",
            ),
            (
                &[("default_weight", "0")],
                "default_weight",
                "Default weight must be between 1 and 1000.",
            ),
            (
                &[("default_weight", "")],
                "default_weight",
                "Default weight is needed: enter a whole number.",
            ),
            (
                &[("max_tracked_owners", "2")],
                "max_tracked_owners",
                "Max tracked owners must be at least 4: one for everyone without a reserve, one per reserve in use (new, reconnecting and control callers) and one per trusted owner.",
            ),
            (
                &[("request_execution.capacity", "20"), ("request_execution.owner_hard_limit", "30")],
                "request_execution.owner_hard_limit",
                "RequestExecution Owner hard limit must be between 1 (its largest reserve, at least one) and 20 (its capacity).",
            ),
            (
                &[
                    ("request_execution.capacity", "2"),
                    ("request_execution.bootstrap_reserved", "1"),
                    ("request_execution.reconnect_reserved", "1"),
                    ("request_execution.control_reserved", "1"),
                ],
                "request_execution.capacity",
                "RequestExecution Capacity (2) is less than what RequestExecution reserves (3): lower RequestExecution's reserves, raise RequestExecution Capacity, or choose another mode.",
            ),
            (
                &[
                    ("request_execution.capacity", "3"),
                    ("request_execution.bootstrap_reserved", "1"),
                    ("request_execution.reconnect_reserved", "1"),
                    ("request_execution.control_reserved", "1"),
                ],
                "request_execution.capacity",
                "RequestExecution holds 3 and reserves 3, which leaves 0 for everyone else; at least 1 must be left: lower its reserves or raise RequestExecution Capacity.",
            ),
            (
                &[("mode", "trusted_reservations")],
                "mode",
                "Mode trusted_reservations needs a trusted owner: add one on the Trusted owners page (adding the first one chooses this mode).",
            ),
        ];
        for (typed, input, words) in cases {
            let (at, said) = refused(typed);
            assert_eq!((at.as_str(), said.as_str()), (*input, *words), "{typed:?}");
            // The planner's terms ("shared capacity", "total"); the mode
            // shared_only is an option on the page.
            for jargon in ["server.", "isolation.", "`", " total", "shared ", "max_"] {
                assert!(!said.contains(jargon), "{jargon:?} in {said:?}");
            }
        }
    }

    /// A stage whose size comes from a setting the page has no input for:
    /// shown at the stage's Capacity, with only the fix the page offers.
    #[test]
    fn reserves_above_a_stage_sized_elsewhere_point_at_its_row() {
        let mut c = Config::default();
        c.server.max_request_thread_count = 20;
        let form = LimitsForm::from_fields(&[
            ("mode".into(), "balanced".into()),
            ("default_weight".into(), "1".into()),
            ("max_tracked_owners".into(), "4096".into()),
            ("request_execution.bootstrap_reserved".into(), "1000".into()),
        ]);
        let p = Preview::of(form.apply_to(c), false);
        let said = p.error.unwrap_or_default();
        assert_eq!(p.error_input, "request_execution.capacity", "{said}");
        assert!(said.starts_with("RequestExecution holds "), "{said}");
        assert!(said.contains("lower its reserves"), "{said}");
        assert!(!said.contains("raise"), "{said}");
        assert!(!said.contains("server."), "{said}");
    }

    /// The REST API and the CLI keep the plan's message naming the setting.
    #[test]
    fn the_plans_own_message_still_names_the_setting() {
        let mut c = Config::default();
        c.server.max_channel_count = 100;
        let e = ops::check_config(&c).expect_err("too few connections");
        assert_eq!(e.field(), Some("server.max_channel_count"));
        assert!(
            e.to_string().contains("server.max_session_count + 1"),
            "{e}"
        );
    }

    #[test]
    fn errors_point_at_their_input_and_placeholders_follow_the_capacity() {
        assert_eq!(
            input_of("isolation.stages.request_execution.capacity", &[]),
            "request_execution.capacity"
        );
        assert_eq!(input_of("isolation.default_weight", &[]), "default_weight");
        // An error naming a stage override by its position in the document.
        assert_eq!(
            input_of(
                "isolation.stages[1].capacity",
                &[Stage::RequestExecution, Stage::Connection]
            ),
            "connection.capacity"
        );
        assert_eq!(
            input_of("server.max_channel_count", &[]),
            "server.max_channel_count"
        );
        let base = Config::default();
        let before: serde_json::Value =
            serde_json::from_str(&placeholders(&base)).unwrap_or_default();
        let mut bigger = base.clone();
        let halved = before["request_execution.capacity"]
            .as_str()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(10)
            / 2;
        bigger.isolation.stages.push(uagate_config::StageOverride {
            stage: Stage::RequestExecution,
            capacity: Some(halved),
            bootstrap_reserved: None,
            reconnect_reserved: None,
            control_reserved: None,
            owner_hard_limit: None,
        });
        let after: serde_json::Value =
            serde_json::from_str(&placeholders(&bigger)).unwrap_or_default();
        // The capacity's placeholder stays the profile's; what derives from
        // it follows the typed capacity.
        assert_eq!(
            after["request_execution.capacity"],
            before["request_execution.capacity"]
        );
        assert_ne!(
            after["request_execution.owner_hard_limit"],
            before["request_execution.owner_hard_limit"],
            "{before} {after}"
        );
    }
}
