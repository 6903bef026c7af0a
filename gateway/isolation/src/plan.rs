//! The runtime plan: per-stage capacities derived from the configuration.
//!
//! [`Plan::build`] is called once at startup (and by `uagate plan`). It turns
//! the `[server]` limits and the `[isolation]` profile into one [`StagePlan`]
//! per [`Stage`]: the total, the shared part, the bootstrap / reconnect /
//! control reserves, each trusted owner's reserve and hard limit, and the
//! ordinary owner's hard limit. It performs every check of the reference's
//! "Startup validation and sizing" table; an error names the setting to
//! change. Nothing here allocates capacity or enforces it: the provider and
//! the listeners read the plan.
//!
//! Totals (reference: "Slot totals come from ..."):
//!
//! | stage | default total |
//! |---|---|
//! | Connection, Handshake | `server.max_channel_count` |
//! | ReassemblyBytes | `server.chunk_reassembly_budget` |
//! | SessionEstablishment | `server.max_concurrent_session_establishment` |
//! | RequestQueue | `server.max_queued_request_count` + reserves |
//! | ParkedRequest | max(`server.max_queued_request_count`, `server.max_session_count` x (`server.max_publish_requests_per_session` + 1)) + reserves |
//! | RequestExecution | `server.max_request_thread_count` |
//! | RequestQueueBytes | `max_message_size` x (queue + parked + execution) + reserves |
//!
//! Reserves sit inside the total, except at RequestQueue, RequestQueueBytes
//! and ParkedRequest, where they are added on top so that the shared part
//! equals the configured queue. A stage override's `capacity` is an absolute
//! total and can only lower the default total.
//!
//! The unit of a stage (one operation or one maximum-message charge) is 1
//! for slot stages, [`Plan::retained_message_bytes`] (the reassembly
//! footprint, `(max_chunk_count - 1) x server.max_buffer_size` by default)
//! for ReassemblyBytes and `server.max_message_size` for RequestQueueBytes.
//!
//! In shared_only, [`Plan::max_bytes_without_session`] caps the
//! ReassemblyBytes held by channels without an activated session (default
//! half the total); the total stays the ceiling for everyone.

use std::net::IpAddr;
use std::time::Duration;

use uagate_config::{Cidr, Config, ConfigError, IsolationMode};

pub use uagate_config::{IngressClass, Stage};

/// The smallest queue and worker counts. Unlike the reference's thread-based
/// dispatcher (which never goes below 100), uagate's execution slots are
/// async tasks, so a small count is meaningful: with few slots the weighted
/// fair scheduler decides who runs next.
pub const MIN_DISPATCH_SLOTS: u64 = 1;
/// Most time an initial handshake may take.
pub const MAX_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a plan cannot be built; every variant names the setting to change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The document itself is invalid (structure, ranges).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The settings cannot be sized into the profile's plan.
    #[error("invalid setting `{setting}`: {message}")]
    Invalid {
        /// Dotted path of the setting to change, e.g. `server.max_channel_count`.
        setting: String,
        /// What does not fit and what would.
        message: String,
    },
}

impl PlanError {
    /// The dotted path of the offending setting, when known.
    pub fn setting(&self) -> Option<&str> {
        match self {
            PlanError::Invalid { setting, .. } => Some(setting),
            PlanError::Config(ConfigError::Invalid { setting, .. }) => Some(setting),
            PlanError::Config(_) => None,
        }
    }
}

fn err(setting: impl Into<String>, message: impl Into<String>) -> PlanError {
    PlanError::Invalid {
        setting: setting.into(),
        message: message.into(),
    }
}

/// A trusted owner's reserve and hard limit on one stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedReserve {
    /// The trusted owner key (never log it or use it as a metric label).
    pub key: String,
    /// Capacity only this owner can use (0: no guarantee).
    pub reserved: u64,
    /// Most this owner can hold on the stage (reserve plus shared).
    pub hard_limit: u64,
}

/// The resolved limits of one stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagePlan {
    /// Which stage.
    pub stage: Stage,
    /// Total capacity, reserves included.
    pub total: u64,
    /// Capacity any caller may use: total minus every reserve.
    pub shared: u64,
    /// Reserved for callers classified bootstrap.
    pub bootstrap: u64,
    /// Reserved for callers classified reconnect (and, at ReassemblyBytes,
    /// session-bound channels).
    pub reconnect: u64,
    /// Reserved for control work (decoded-request stages only).
    pub control: u64,
    /// Per trusted owner, in configuration order.
    pub trusted: Vec<TrustedReserve>,
    /// Hard limit of every owner that has no trusted reservation here.
    pub owner_limit: u64,
    /// One operation (1) or one maximum-message charge in bytes.
    pub unit: u64,
}

impl StagePlan {
    /// Sum of the trusted owners' reserves.
    pub fn trusted_reserved(&self) -> u64 {
        self.trusted.iter().map(|t| t.reserved).sum()
    }

    /// The trusted reserve of `key`, if it is a trusted owner.
    pub fn trusted_for(&self, key: &str) -> Option<&TrustedReserve> {
        self.trusted.iter().find(|t| t.key == key)
    }

    /// The reference's line: `Connection: total=103, shared=101, bootstrap=1,
    /// reconnect=1, control=0, trusted=0, ownerLimit=103` (no owner names).
    pub fn line(&self) -> String {
        format!(
            "{}: total={}, shared={}, bootstrap={}, reconnect={}, control={}, trusted={}, ownerLimit={}",
            self.stage.name(),
            self.total,
            self.shared,
            self.bootstrap,
            self.reconnect,
            self.control,
            self.trusted_reserved(),
            self.owner_limit
        )
    }
}

/// A trusted owner's scheduling weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedOwnerPlan {
    /// The owner key.
    pub key: String,
    /// Relative scheduling weight (ordinary owners: [`Plan::default_weight`]).
    pub weight: u32,
}

/// One token bucket: sustained rate and burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucketPlan {
    /// Tokens added per second.
    pub per_second: u32,
    /// Bucket size.
    pub burst: u32,
}

/// The connection rate limiter and its partition. In balanced and
/// trusted_reservations, bootstrap, reconnect and each trusted owner get one
/// token per second and one of burst, taken out of the configured totals;
/// protected callers may also use shared tokens, shared callers never take
/// protected ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RatePlan {
    /// False when `server.connections_per_second` and `connection_burst` are both 0.
    pub enabled: bool,
    /// The configured totals.
    pub total: TokenBucketPlan,
    /// What every caller can use.
    pub shared: TokenBucketPlan,
    /// Bootstrap's own tokens (balanced, trusted_reservations).
    pub bootstrap: Option<TokenBucketPlan>,
    /// Reconnect's own tokens (balanced, trusted_reservations).
    pub reconnect: Option<TokenBucketPlan>,
    /// Each trusted owner's tokens, by key.
    pub trusted: Vec<(String, TokenBucketPlan)>,
}

/// Where an ingress rule sends matching callers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IngressTarget {
    /// A configured trusted owner (by key).
    Owner(String),
    /// A protected class.
    Class(IngressClass),
}

/// A parsed ingress rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngressPlan {
    /// The network.
    pub cidr: Cidr,
    /// The owner or class.
    pub target: IngressTarget,
}

/// The validated runtime plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    mode: IsolationMode,
    stages: Vec<StagePlan>,
    trusted_owners: Vec<TrustedOwnerPlan>,
    default_weight: u32,
    max_tracked_owners: u32,
    reserved_owner_entries: u32,
    max_owner_key_length: u32,
    handshake_timeout: Duration,
    fair_scheduling: bool,
    retained_message_bytes: u64,
    max_bytes_without_session: Option<u64>,
    max_session_count: u32,
    rate: RatePlan,
    ingress: Vec<IngressPlan>,
}

/// Which setting a stage's default total comes from.
fn base_setting(stage: Stage) -> &'static str {
    match stage {
        Stage::Connection | Stage::Handshake => "server.max_channel_count",
        Stage::ReassemblyBytes => "server.chunk_reassembly_budget",
        Stage::SessionEstablishment => "server.max_concurrent_session_establishment",
        Stage::RequestQueue => "server.max_queued_request_count",
        Stage::ParkedRequest => "server.max_publish_requests_per_session",
        Stage::RequestExecution => "server.max_request_thread_count",
        Stage::RequestQueueBytes => "server.max_message_size",
    }
}

/// Whether the reserves are added on top of the configured total.
fn reserves_on_top(stage: Stage) -> bool {
    matches!(
        stage,
        Stage::RequestQueue | Stage::RequestQueueBytes | Stage::ParkedRequest
    )
}

/// A nonzero reserve must hold one unit.
fn check_floor(value: u64, unit: u64, setting: &str) -> Result<(), PlanError> {
    if value != 0 && value < unit {
        return Err(err(
            setting,
            format!("a nonzero reserve must hold one operation or message ({unit}); use 0 to disable it"),
        ));
    }
    Ok(())
}

impl Plan {
    /// Builds and validates the plan for `config` (all modes: `uagate plan`
    /// asks for a finite plan even in shared_only, like the reference's
    /// explicit CreateRuntimePlan). Runs [`Config::validate`] first.
    pub fn build(config: &Config) -> Result<Plan, PlanError> {
        config.validate()?;
        let s = &config.server;
        let iso = &config.isolation;
        let mode = iso.mode;
        let protected = mode.has_reserves();

        // Startup deadline (checked in every mode).
        if iso.handshake_timeout.is_zero() || iso.handshake_timeout > MAX_HANDSHAKE_TIMEOUT {
            return Err(err(
                "isolation.handshake_timeout",
                "must be above zero and at most 2m",
            ));
        }
        // Finite resource bounds.
        for (setting, value) in [
            ("server.max_session_count", u64::from(s.max_session_count)),
            ("server.max_channel_count", u64::from(s.max_channel_count)),
            ("server.max_message_size", u64::from(s.max_message_size)),
            ("server.max_buffer_size", u64::from(s.max_buffer_size)),
            ("server.chunk_reassembly_budget", s.chunk_reassembly_budget),
        ] {
            if value == 0 {
                return Err(err(setting, "isolation needs a finite positive limit"));
            }
        }
        // Bounded accounting.
        for (setting, value) in [
            ("isolation.max_tracked_owners", iso.max_tracked_owners),
            ("isolation.max_owner_key_length", iso.max_owner_key_length),
            ("isolation.default_weight", iso.default_weight),
        ] {
            if value == 0 {
                return Err(err(setting, "must be at least 1"));
            }
        }

        // Retained-message space: the proven bound of what our reassembler
        // retains for one message (see `Server::reassembly_footprint`).
        let message = u64::from(s.max_message_size);
        let bound = s.reassembly_footprint();
        let footprint = match iso.max_retained_message_bytes {
            Some(v) if v < bound => {
                return Err(err(
                    "isolation.max_retained_message_bytes",
                    format!(
                        "{v} is not an upper bound: one incomplete message can retain {bound} bytes = (max_chunk_count - 1) x server.max_buffer_size = ({} - 1) x {}, where max_chunk_count = ceil(server.max_message_size / (server.max_buffer_size - 1024)) + 1",
                        s.max_chunk_count(),
                        s.max_buffer_size
                    ),
                ))
            }
            Some(v) => v,
            None => bound,
        };
        let resolve_bytes = |value: Option<u64>, setting: &str| -> Result<u64, PlanError> {
            if !protected {
                if value.unwrap_or(0) != 0 {
                    return Err(err(
                        setting,
                        format!("mode {} reserves nothing; only 0 is allowed", mode.as_str()),
                    ));
                }
                return Ok(0);
            }
            let v = value.unwrap_or(footprint);
            if v < footprint {
                return Err(err(
                    setting,
                    format!(
                        "must hold at least one retained-message footprint ({footprint} bytes); disable the reserve with a reassembly_bytes stage override instead"
                    ),
                ));
            }
            Ok(v)
        };
        let bootstrap_bytes = resolve_bytes(
            iso.bootstrap_reserved_bytes,
            "isolation.bootstrap_reserved_bytes",
        )?;
        let reconnect_bytes = resolve_bytes(
            iso.reconnect_reserved_bytes,
            "isolation.reconnect_reserved_bytes",
        )?;

        // Base totals (before reserves on top).
        let queued = u64::from(s.max_queued_request_count).max(MIN_DISPATCH_SLOTS);
        let execution = u64::from(s.max_request_thread_count).max(MIN_DISPATCH_SLOTS);
        let session_establishment = match s.max_concurrent_session_establishment {
            0 => 64,
            n => u64::from(n),
        };
        // Parked requests (held Publish) are sized for every session keeping
        // its allowed Publish requests outstanding, never below the queue:
        // uagate's sessions may each hold max_publish_requests_per_session.
        // One more per session: a Publish beyond the per-session limit is
        // admitted here and then answered BadTooManyPublishRequests by the
        // subscription engine, which must not be preempted by BadServerTooBusy.
        let parked = queued.max(
            u64::from(s.max_session_count)
                .saturating_mul(u64::from(s.max_publish_requests_per_session) + 1),
        );
        let request_bytes = queued
            .checked_add(parked)
            .and_then(|v| v.checked_add(execution))
            .and_then(|v| v.checked_mul(message))
            .ok_or_else(|| {
                err(
                    "server.max_message_size",
                    "queued, executing and parked request bytes overflow",
                )
            })?;
        let base = |stage: Stage| -> u64 {
            match stage {
                Stage::Connection | Stage::Handshake => u64::from(s.max_channel_count),
                Stage::ReassemblyBytes => s.chunk_reassembly_budget,
                Stage::SessionEstablishment => session_establishment,
                Stage::RequestQueue => queued,
                Stage::ParkedRequest => parked,
                Stage::RequestExecution => execution,
                Stage::RequestQueueBytes => request_bytes,
            }
        };

        let mut stages = Vec::with_capacity(Stage::ALL.len());
        let (mut has_bootstrap, mut has_reconnect, mut has_control) = (false, false, false);
        for stage in Stage::ALL {
            let unit = match stage {
                Stage::ReassemblyBytes => footprint,
                Stage::RequestQueueBytes => message,
                _ => 1,
            };
            let found = iso
                .stages
                .iter()
                .enumerate()
                .find(|(_, o)| o.stage == stage);
            let at = |field: &str| match found {
                Some((n, _)) => format!("isolation.stages[{n}].{field}"),
                None => format!("isolation.stages.{field}"),
            };
            let ov = found.map(|(_, o)| o);
            let floor_default = if protected { unit } else { 0 };
            let bootstrap = ov.and_then(|o| o.bootstrap_reserved).unwrap_or(
                if stage == Stage::ReassemblyBytes {
                    bootstrap_bytes
                } else {
                    floor_default
                },
            );
            let reconnect = ov.and_then(|o| o.reconnect_reserved).unwrap_or(
                if stage == Stage::ReassemblyBytes {
                    reconnect_bytes
                } else {
                    floor_default
                },
            );
            let control =
                ov.and_then(|o| o.control_reserved)
                    .unwrap_or(if stage.is_decoded_request() {
                        floor_default
                    } else {
                        0
                    });
            for (field, value) in [
                ("bootstrap_reserved", bootstrap),
                ("reconnect_reserved", reconnect),
                ("control_reserved", control),
            ] {
                if value != 0 && !protected {
                    return Err(err(
                        at(field),
                        format!("mode {} reserves nothing; only 0 is allowed", mode.as_str()),
                    ));
                }
                check_floor(value, unit, &at(field))?;
            }
            if control != 0 && !stage.is_decoded_request() {
                return Err(err(
                    at("control_reserved"),
                    format!(
                        "{} has no control work; only request_queue, request_execution, request_queue_bytes and parked_request have a control reserve",
                        stage.key()
                    ),
                ));
            }

            // Trusted reserves (trusted owners exist only in trusted_reservations).
            struct Pending<'a> {
                key: &'a str,
                reserved: u64,
                hard_limit: Option<u64>,
                at: String,
            }
            let mut pending = Vec::with_capacity(iso.trusted_owners.len());
            for (k, owner) in iso.trusted_owners.iter().enumerate() {
                let (reserved, hard_limit, at_owner) = match owner
                    .reservations
                    .iter()
                    .enumerate()
                    .find(|(_, r)| r.stage == stage)
                {
                    Some((j, r)) => (
                        r.reserved,
                        r.hard_limit,
                        format!("isolation.trusted_owners[{k}].reservations[{j}]"),
                    ),
                    None => (unit, None, format!("isolation.trusted_owners[{k}]")),
                };
                check_floor(reserved, unit, &format!("{at_owner}.reserved"))?;
                pending.push(Pending {
                    key: &owner.key,
                    reserved,
                    hard_limit,
                    at: at_owner,
                });
            }

            let overflow = || err(base_setting(stage), "reserves overflow the stage total");
            let mut floors = bootstrap
                .checked_add(reconnect)
                .and_then(|v| v.checked_add(control))
                .ok_or_else(overflow)?;
            for p in &pending {
                floors = floors.checked_add(p.reserved).ok_or_else(overflow)?;
            }
            let default_total = if reserves_on_top(stage) {
                base(stage).checked_add(floors).ok_or_else(overflow)?
            } else {
                base(stage)
            };
            let (total, total_setting) = match ov.and_then(|o| o.capacity) {
                Some(c) if c == 0 || c > default_total => {
                    return Err(err(
                        at("capacity"),
                        format!(
                            "can only lower the {} total: must be between 1 and {default_total}",
                            stage.name()
                        ),
                    ))
                }
                Some(c) => (c, at("capacity")),
                None => (default_total, base_setting(stage).to_string()),
            };
            if floors > total {
                return Err(err(
                    total_setting,
                    format!(
                        "the {} reserves ({floors}) exceed its total ({total}); reduce the reserves, raise the total or choose another mode",
                        stage.name()
                    ),
                ));
            }
            let shared = total - floors;
            if shared < unit {
                return Err(err(
                    total_setting,
                    format!(
                        "the shared {} capacity after reserves ({shared}) must hold at least one operation or message ({unit}); total {total}, reserves {floors}",
                        stage.name()
                    ),
                ));
            }
            let largest_class = bootstrap.max(reconnect).max(control).max(unit);
            let owner_limit = match ov.and_then(|o| o.owner_hard_limit) {
                Some(l) if l < largest_class || l > total => {
                    return Err(err(
                        at("owner_hard_limit"),
                        format!(
                            "must be between {largest_class} (one operation and every class reserve) and the {} total {total}",
                            stage.name()
                        ),
                    ))
                }
                Some(l) => l,
                None => total,
            };
            let mut trusted = Vec::with_capacity(pending.len());
            for p in pending {
                let hard_limit = p.hard_limit.unwrap_or(owner_limit);
                if hard_limit < p.reserved.max(unit) || hard_limit > total {
                    let setting = if p.hard_limit.is_some() {
                        format!("{}.hard_limit", p.at)
                    } else {
                        format!("{}.reserved", p.at)
                    };
                    return Err(err(
                        setting,
                        format!(
                            "the trusted hard limit ({hard_limit}) must hold its reserve ({}) and one operation ({unit}) and fit the {} total ({total})",
                            p.reserved,
                            stage.name()
                        ),
                    ));
                }
                trusted.push(TrustedReserve {
                    key: p.key.to_string(),
                    reserved: p.reserved,
                    hard_limit,
                });
            }
            has_bootstrap |= bootstrap > 0;
            has_reconnect |= reconnect > 0;
            has_control |= control > 0;
            stages.push(StagePlan {
                stage,
                total,
                shared,
                bootstrap,
                reconnect,
                control,
                trusted,
                owner_limit,
                unit,
            });
        }

        // shared_only: the occupancy rule for channels without a session.
        let max_bytes_without_session = if mode == IsolationMode::SharedOnly {
            let total = stages[Stage::ReassemblyBytes.index()].total;
            let (value, explicit) = match iso.max_bytes_without_session {
                Some(v) => (v, true),
                None => (total / 2, false),
            };
            if value > total {
                return Err(err(
                    "isolation.max_bytes_without_session",
                    format!(
                        "{value} exceeds the ReassemblyBytes total ({total}), which stays the ceiling for every channel"
                    ),
                ));
            }
            if value < footprint {
                let what = if explicit {
                    format!("{value}")
                } else {
                    format!("the default, half the ReassemblyBytes total ({value}),")
                };
                return Err(err(
                    "isolation.max_bytes_without_session",
                    format!(
                        "{what} is below one retained-message footprint ({footprint} bytes): channels without a session could not reassemble one maximum message; set it between {footprint} and {total} or raise server.chunk_reassembly_budget"
                    ),
                ));
            }
            Some(value)
        } else {
            if iso.max_bytes_without_session.is_some() {
                return Err(err(
                    "isolation.max_bytes_without_session",
                    format!(
                        "only applies to mode shared_only (mode is {})",
                        mode.as_str()
                    ),
                ));
            }
            None
        };

        // Owner table: shared traffic, each protected class in use, every trusted owner.
        let reserved_owner_entries = iso.trusted_owners.len() as u64
            + u64::from(has_bootstrap)
            + u64::from(has_reconnect)
            + u64::from(has_control);
        if reserved_owner_entries + 1 > u64::from(iso.max_tracked_owners) {
            return Err(err(
                "isolation.max_tracked_owners",
                format!(
                    "must be at least {}: one entry for shared traffic, one per protected class in use and one per trusted owner",
                    reserved_owner_entries + 1
                ),
            ));
        }

        // Sessions + 1 in the shared Connection capacity.
        let connection = &stages[Stage::Connection.index()];
        let needed = u64::from(s.max_session_count) + 1;
        if connection.shared < needed {
            let setting = match iso
                .stages
                .iter()
                .position(|o| o.stage == Stage::Connection && o.capacity.is_some())
            {
                Some(n) => format!("isolation.stages[{n}].capacity"),
                None => "server.max_channel_count".to_string(),
            };
            let reserved = connection.total - connection.shared;
            return Err(err(
                setting,
                format!(
                    "the shared Connection capacity ({}) must hold server.max_session_count + 1 = {needed}; {reserved} connection(s) are reserved, so the total must be at least {} (or reduce the connection reserves or max_session_count)",
                    connection.shared,
                    needed + reserved
                ),
            ));
        }

        // Connection rate limiter and its protected partition.
        let cps = s.connections_per_second;
        let burst = s.connection_burst;
        let enabled = match (cps, burst) {
            (0, 0) => false,
            (0, _) => {
                return Err(err(
                    "server.connections_per_second",
                    "is 0 while server.connection_burst is not; set both to 0 to disable the connection rate limiter",
                ))
            }
            (_, 0) => {
                return Err(err(
                    "server.connection_burst",
                    "is 0 while server.connections_per_second is not; set both to 0 to disable the connection rate limiter",
                ))
            }
            _ => true,
        };
        let one = TokenBucketPlan {
            per_second: 1,
            burst: 1,
        };
        let total_rate = TokenBucketPlan {
            per_second: cps,
            burst,
        };
        let rate = if enabled && protected {
            let protected_tokens = 2 + iso.trusted_owners.len() as u64;
            let minimum = protected_tokens + 1;
            for (setting, value) in [
                ("server.connections_per_second", cps),
                ("server.connection_burst", burst),
            ] {
                if u64::from(value) < minimum {
                    return Err(err(
                        setting,
                        format!(
                            "must be at least {minimum} in mode {}: one token each for bootstrap, reconnect and {} trusted owner(s), and one shared",
                            mode.as_str(),
                            iso.trusted_owners.len()
                        ),
                    ));
                }
            }
            // minimum <= value <= u32::MAX, so protected_tokens fits u32.
            let p = protected_tokens as u32;
            RatePlan {
                enabled,
                total: total_rate,
                shared: TokenBucketPlan {
                    per_second: cps - p,
                    burst: burst - p,
                },
                bootstrap: Some(one),
                reconnect: Some(one),
                trusted: iso
                    .trusted_owners
                    .iter()
                    .map(|o| (o.key.clone(), one))
                    .collect(),
            }
        } else {
            RatePlan {
                enabled,
                total: total_rate,
                shared: total_rate,
                bootstrap: None,
                reconnect: None,
                trusted: Vec::new(),
            }
        };

        let mut ingress = Vec::with_capacity(iso.ingress.len());
        for (n, rule) in iso.ingress.iter().enumerate() {
            let cidr = Cidr::parse(&rule.cidr)
                .map_err(|m| err(format!("isolation.ingress[{n}].cidr"), m))?;
            let target = match (&rule.owner, rule.class) {
                (Some(owner), None) => IngressTarget::Owner(owner.clone()),
                (None, Some(class)) => IngressTarget::Class(class),
                _ => {
                    return Err(err(
                        format!("isolation.ingress[{n}]"),
                        "needs exactly one of owner or class",
                    ))
                }
            };
            ingress.push(IngressPlan { cidr, target });
        }

        Ok(Plan {
            mode,
            stages,
            trusted_owners: iso
                .trusted_owners
                .iter()
                .map(|o| TrustedOwnerPlan {
                    key: o.key.clone(),
                    weight: o.weight,
                })
                .collect(),
            default_weight: iso.default_weight,
            max_tracked_owners: iso.max_tracked_owners,
            reserved_owner_entries: reserved_owner_entries as u32,
            max_owner_key_length: iso.max_owner_key_length,
            handshake_timeout: iso.handshake_timeout,
            fair_scheduling: iso.fair_scheduling && mode != IsolationMode::SharedOnly,
            retained_message_bytes: footprint,
            max_bytes_without_session,
            max_session_count: s.max_session_count,
            rate,
            ingress,
        })
    }

    /// The profile.
    pub fn mode(&self) -> IsolationMode {
        self.mode
    }

    /// Whether the isolation provider enforces owners and reserves
    /// (false in shared_only: shared limits and FIFO only).
    pub fn is_enforced(&self) -> bool {
        self.mode != IsolationMode::SharedOnly
    }

    /// The limits of one stage.
    pub fn stage(&self, stage: Stage) -> &StagePlan {
        &self.stages[stage.index()]
    }

    /// All stages, in the reference's order.
    pub fn stages(&self) -> &[StagePlan] {
        &self.stages
    }

    /// One line per stage in the reference format (what `uagate plan` prints).
    pub fn lines(&self) -> Vec<String> {
        self.stages.iter().map(StagePlan::line).collect()
    }

    /// Logs the plan at startup: one info line per stage, no owner names.
    pub fn log(&self) {
        tracing::info!(mode = self.mode.as_str(), "resource isolation plan");
        for line in self.lines() {
            tracing::info!("{line}");
        }
        if let Some(bytes) = self.max_bytes_without_session {
            tracing::info!("ReassemblyBytes without session: max={bytes}");
        }
    }

    /// Trusted owners and their weights, in configuration order.
    pub fn trusted_owners(&self) -> &[TrustedOwnerPlan] {
        &self.trusted_owners
    }

    /// The weight of `key` if it is a trusted owner.
    pub fn trusted_weight(&self, key: &str) -> Option<u32> {
        self.trusted_owners
            .iter()
            .find(|o| o.key == key)
            .map(|o| o.weight)
    }

    /// Scheduling weight of ordinary owners.
    pub fn default_weight(&self) -> u32 {
        self.default_weight
    }

    /// Most owners with resources charged at once.
    pub fn max_tracked_owners(&self) -> u32 {
        self.max_tracked_owners
    }

    /// Owner-table entries kept for protected classes in use and trusted
    /// owners; ordinary owners can use `max_tracked_owners - this`.
    pub fn reserved_owner_entries(&self) -> u32 {
        self.reserved_owner_entries
    }

    /// Longest accepted owner key in bytes.
    pub fn max_owner_key_length(&self) -> u32 {
        self.max_owner_key_length
    }

    /// Deadline of an initial handshake.
    pub fn handshake_timeout(&self) -> Duration {
        self.handshake_timeout
    }

    /// Whether decoded requests are scheduled by weighted fairness (else FIFO).
    pub fn fair_scheduling(&self) -> bool {
        self.fair_scheduling
    }

    /// The retained-message footprint: an upper bound of the bytes one
    /// incomplete message can hold in our reassembler. Formula:
    /// `max_retained_message_bytes` if configured (never below the bound),
    /// else `(max_chunk_count - 1) x server.max_buffer_size` with
    /// `max_chunk_count = ceil(server.max_message_size /
    /// (server.max_buffer_size - 1024)) + 1`: only intermediate chunks are
    /// retained, each charged with at most one receive buffer (see
    /// `uagate_config::Server::reassembly_footprint` for the proof).
    pub fn retained_message_bytes(&self) -> u64 {
        self.retained_message_bytes
    }

    /// `shared_only` only: the most ReassemblyBytes that channels without an
    /// activated session (charged as `OwnerClass::Ordinary`) may hold
    /// together, `isolation.max_bytes_without_session` or half the
    /// ReassemblyBytes total. Session-bound channels may use the whole
    /// total. `None` in the other modes, whose class reserves replace it.
    pub fn max_bytes_without_session(&self) -> Option<u64> {
        self.max_bytes_without_session
    }

    /// `server.max_session_count` the plan was sized for.
    pub fn max_session_count(&self) -> u32 {
        self.max_session_count
    }

    /// The connection rate limiter's partition.
    pub fn rate(&self) -> &RatePlan {
        &self.rate
    }

    /// The settings whose change between this (live) plan and `new` needs
    /// a restart; empty when `new` differs at most in what can change while
    /// running: the trusted owners' weights, `isolation.default_weight` and
    /// the ingress rules (which may only name owners the live plan has).
    pub fn restart_required(&self, new: &Plan) -> Vec<&'static str> {
        let mut v = Vec::new();
        let keys = |p: &Plan| {
            p.trusted_owners
                .iter()
                .map(|o| o.key.clone())
                .collect::<Vec<_>>()
        };
        let checks: [(&'static str, bool); 11] = [
            ("isolation.mode", self.mode != new.mode),
            (
                "stage capacities (server limits, isolation.stages, reservations)",
                self.stages != new.stages,
            ),
            ("isolation.trusted_owners (keys)", keys(self) != keys(new)),
            (
                "isolation.max_tracked_owners",
                self.max_tracked_owners != new.max_tracked_owners,
            ),
            (
                "isolation.max_owner_key_length",
                self.max_owner_key_length != new.max_owner_key_length,
            ),
            (
                "isolation.handshake_timeout",
                self.handshake_timeout != new.handshake_timeout,
            ),
            (
                "isolation.fair_scheduling",
                self.fair_scheduling != new.fair_scheduling,
            ),
            (
                "isolation.max_retained_message_bytes",
                self.retained_message_bytes != new.retained_message_bytes,
            ),
            (
                "isolation.max_bytes_without_session",
                self.max_bytes_without_session != new.max_bytes_without_session,
            ),
            (
                "server.max_session_count",
                self.max_session_count != new.max_session_count,
            ),
            (
                "server.connections_per_second / connection_burst",
                self.rate != new.rate,
            ),
        ];
        for (setting, changed) in checks {
            if changed {
                v.push(setting);
            }
        }
        v
    }

    /// The ingress rules, in configuration order.
    pub fn ingress(&self) -> &[IngressPlan] {
        &self.ingress
    }

    /// The target of the most specific ingress rule containing `ip`
    /// (IPv4-mapped IPv6 equals IPv4), or `None` for ordinary callers.
    pub fn classify_ingress(&self, ip: IpAddr) -> Option<&IngressTarget> {
        self.ingress
            .iter()
            .filter(|r| r.cidr.contains(ip))
            .max_by_key(|r| r.cidr.prefix_len())
            .map(|r| &r.target)
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
