//! The Limits page's refusals in the page's own words: the input named by
//! its label on the page ("Max connections", "RequestExecution Capacity")
//! instead of the setting's key (`server.max_channel_count`,
//! `isolation.stages[0].capacity`), and the planner's terms (shared
//! capacity, floors, totals) said as what the operator sees and can change.
//!
//! The REST API and the CLI keep the plan's messages, which name the
//! settings of the configuration document; only the page translates them.
//! [`words`] recognises the plan's and the configuration's messages by their
//! wording (the tests build each refusal with the real plan, so a change of
//! that wording fails them) and reads their numbers; a message it does not
//! know is kept, behind the input's label.

/// The form input a refusal about `setting` is shown at: the setting's
/// own input (`input`, see `limits::input_of`) when the page has one; the
/// Mode for what a mode change breaks elsewhere (trusted owners, ingress
/// rules); the stage's Capacity for a stage whose size comes from a setting
/// not on the page; else `input` unchanged (shown above the form only).
pub fn input_for(setting: &str, input: &str, message: &str) -> String {
    let message = strip_setting(message);
    if label(input).is_some() {
        return input.to_string();
    }
    let mode_caused = (setting.starts_with("isolation.trusted_owners")
        && (message.contains("needs at least one trusted owner")
            || message.starts_with("trusted owners need mode")))
        || (setting.starts_with("isolation.ingress")
            && message.contains("protected classes need mode"));
    if mode_caused {
        return "mode".into();
    }
    let stage_sized = message.contains("exceed its total") || message.contains("after reserves");
    match stage_in(message).filter(|_| stage_sized) {
        Some(name) => uagate_config::Stage::ALL
            .iter()
            .find(|s| s.name() == name)
            .map_or_else(|| input.to_string(), |s| format!("{}.capacity", s.key())),
        None => input.to_string(),
    }
}

/// A message of the plan or of the configuration's validation about
/// `setting`, in the Limits page's words; `input` is where the page shows
/// it (see [`input_for`]).
pub fn words(setting: &str, input: &str, message: &str) -> String {
    let message = strip_setting(message);
    let n = numbers(message);
    let num = |i: usize| n.get(i).copied().unwrap_or_default();
    let mode = || {
        message
            .split_whitespace()
            .skip_while(|w| *w != "mode")
            .nth(1)
            .unwrap_or_default()
            .trim_end_matches([';', ')', ','])
            .to_string()
    };
    // What a change of the Mode breaks elsewhere.
    if setting.starts_with("isolation.trusted_owners") {
        if message.contains("needs at least one trusted owner") {
            return "Mode trusted_reservations needs a trusted owner: add one on the Trusted owners page (adding the first one chooses this mode).".into();
        }
        if message.starts_with("trusted owners need mode trusted_reservations") {
            return format!(
                "Mode {} would leave the trusted owners without their reserves: keep mode trusted_reservations, or remove the owners on the Trusted owners page first.",
                mode()
            );
        }
        if message.contains("the trusted hard limit") {
            return format!(
                "A trusted owner's hard limit ({}) no longer fits: it must hold the owner's reserve ({}) and fit the {} capacity ({}). Raise that capacity, or change the owner on the Trusted owners page.",
                num(0),
                num(1),
                stage_in(message).unwrap_or("stage's"),
                num(3)
            );
        }
    }
    if setting.starts_with("isolation.ingress") && message.contains("protected classes need mode") {
        return format!(
            "Mode {} keeps no reserves for new and reconnecting callers, but ingress rules on the Trusted owners page send callers to them: choose mode balanced or trusted_reservations, or remove those rules first.",
            mode()
        );
    }
    let stage = stage_in(message).or_else(|| stage_of(input));
    // A stage whose reserves do not fit what it holds.
    if message.contains("reserves (") && message.contains("exceed its total") {
        let stage = stage.unwrap_or("the stage");
        return match label(input).filter(|_| label(setting_input(setting, input)).is_some()) {
            Some(l) => format!(
                "{l} ({}) is less than what {stage} reserves ({}): lower {stage}'s reserves, raise {l}, or choose another mode.",
                num(1),
                num(0)
            ),
            None => format!(
                "{stage} holds {}, less than its reserves ({}): lower its reserves, or choose another mode.",
                num(1),
                num(0)
            ),
        };
    }
    if message.starts_with("the shared") && message.contains("after reserves") {
        let stage = stage.unwrap_or("the stage");
        let raise = label(setting_input(setting, input))
            .map(|l| format!(" or raise {l}"))
            .unwrap_or_default();
        return format!(
            "{stage} holds {} and reserves {}, which leaves {} for everyone else; at least {} must be left: lower its reserves{raise}.",
            num(2),
            num(3),
            num(0),
            num(1)
        );
    }
    let Some(label) = label(input) else {
        return format!(
            "{message} (setting {setting} of the configuration document, not on this page)"
        );
    };
    if let Some(typed) = message
        .strip_prefix('`')
        .and_then(|m| m.split_once("` is not a valid number"))
        .map(|(v, _)| v)
    {
        let empty = if stage_of(input).is_some() {
            "or leave it empty for the profile's value"
        } else {
            "or leave it empty to keep the value in force"
        };
        return format!("{label}: “{typed}” is not a number; enter a whole number, {empty}.");
    }
    if message == "required" {
        return format!("{label} is needed: enter a whole number.");
    }
    if message == "unknown isolation mode" {
        return format!("{label}: choose one of the listed modes.");
    }
    if message == "isolation needs a finite positive limit" {
        return format!("{label} must be at least 1.");
    }
    if message.contains("reserves nothing; only 0 is allowed") {
        return format!(
            "{label}: mode {} keeps no reserves; leave it empty or 0, or choose mode balanced or trusted_reservations.",
            mode()
        );
    }
    if message.starts_with("a nonzero reserve must hold one operation or message") {
        return format!(
            "{label} must be 0 (no reserve) or at least {} (one whole message).",
            num(0)
        );
    }
    if message.contains("has no control work") {
        return format!(
            "{label}: {} has no control work, so it keeps no control reserve; leave it empty or 0.",
            stage.unwrap_or("this stage")
        );
    }
    if message.starts_with("can only lower the") {
        let most = num(1);
        return format!(
            "{label} can only be lowered: enter 1 to {most}, or leave it empty for {most}."
        );
    }
    if message.starts_with("the shared Connection capacity") {
        // (shared, the 1 of "+ 1", sessions + 1, reserved, the least total)
        let sessions = num(2).saturating_sub(1);
        return format!(
            "{label} must be at least {}: each of the {sessions} sessions (Max sessions) needs a connection, one more stays free for a client to reconnect, and {} {} kept for new and reconnecting clients and trusted owners. Or lower Max sessions or the Connection reserves.",
            num(4),
            num(3),
            if num(3) == 1 { "is" } else { "are" }
        );
    }
    if message.starts_with("must be between")
        && message.contains("one operation and every class reserve")
    {
        return format!(
            "{label} must be between {} (its largest reserve, at least one) and {} (its capacity).",
            num(0),
            num(1)
        );
    }
    if let Some(rest) = message.strip_prefix("must be at least") {
        let rest = rest
            .replace(
                "one entry for shared traffic",
                "one for everyone without a reserve",
            )
            .replace(
                "one per protected class in use",
                "one per reserve in use (new, reconnecting and control callers)",
            );
        return format!("{label} must be at least{rest}.");
    }
    if message.starts_with("must be") {
        return format!("{label} {message}.");
    }
    format!("{label}: {}", plain_names(message))
}

/// The input of `setting` itself (the input a refusal is shown at may be
/// another: see [`input_for`]).
fn setting_input<'a>(setting: &'a str, input: &'a str) -> &'a str {
    match setting {
        "server.max_session_count" | "server.max_channel_count" => setting,
        _ if setting.starts_with("isolation.stages") => input,
        _ => setting,
    }
}

/// The message without the plan's or the configuration's "invalid setting
/// `x`: " in front (see `ops::config_error`): what a page shows next to the
/// input it names. Used by every page that names inputs by their labels.
pub(crate) fn strip_setting(message: &str) -> &str {
    message
        .strip_prefix("invalid setting `")
        .and_then(|m| m.split_once("`: "))
        .map_or(message, |(_, rest)| rest)
}

/// The whole numbers of `message`, in order.
fn numbers(message: &str) -> Vec<u64> {
    message
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// The stage a stage input is in (`request_execution.capacity` →
/// `RequestExecution`).
fn stage_of(input: &str) -> Option<&'static str> {
    let (key, _) = input.split_once('.')?;
    uagate_config::Stage::ALL
        .iter()
        .find(|s| s.key() == key)
        .map(|s| s.name())
}

/// The first stage a message names (`the RequestExecution reserves`).
fn stage_in(message: &str) -> Option<&'static str> {
    uagate_config::Stage::ALL
        .iter()
        .map(|s| s.name())
        .find(|name| message.split([' ', '(', ')']).any(|w| w == *name))
}

/// The label of a Limits page input as the page shows it, `None` for a
/// setting the page has no input for.
pub fn label(input: &str) -> Option<String> {
    let fixed = match input {
        "server.max_session_count" => Some("Max sessions"),
        "server.max_channel_count" => Some("Max connections"),
        "mode" => Some("Mode"),
        "default_weight" => Some("Default weight"),
        "max_tracked_owners" => Some("Max tracked owners"),
        _ => None,
    };
    if let Some(l) = fixed {
        return Some(l.to_string());
    }
    let stage = stage_of(input)?;
    let column = match input.split_once('.')?.1 {
        "capacity" => "Capacity",
        "bootstrap_reserved" => "Bootstrap reserve",
        "reconnect_reserved" => "Reconnect reserve",
        "control_reserved" => "Control reserve",
        "owner_hard_limit" => "Owner hard limit",
        _ => return None,
    };
    Some(format!("{stage} {column}"))
}

/// A message with the settings the page edits called by their labels.
fn plain_names(message: &str) -> String {
    message
        .replace("server.max_session_count", "Max sessions")
        .replace("server.max_channel_count", "Max connections")
        .replace("max_session_count", "Max sessions")
        .replace("max_channel_count", "Max connections")
}
