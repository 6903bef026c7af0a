//! The computed ServiceLevel (Part 4 §6.6.2.4.2): what this appliance tells
//! redundancy-aware clients about its health, from its role, whether a
//! configuration is loaded, the pair's integrity, its field connections and
//! its session load. Sans-IO: the engine gathers a [`Health`] every second
//! (housekeeping) and feeds it to [`LevelMachine::compute`]; a requested
//! maintenance state or an operator's override take precedence over the
//! result ([`crate::health::Control::service_level`]).
//!
//! | first matching case | ServiceLevel | subrange |
//! |---|---|---|
//! | no configuration loaded | 1 | NoData |
//! | field connections configured, none up | 1 | NoData |
//! | some field connections down | 2 + 197 × up / configured (2..198) | Degraded |
//! | pair integrity fault (replication stopped) | 150 at most | Degraded |
//! | otherwise, leader or standalone | 255, less the load | Healthy |
//! | otherwise, standby of a pair | 230, less the load | Healthy |
//!
//! A field connection is up while an active server serves it. One that
//! was up and is lost counts as down only after [`FIELD_DOWN_GRACE`]: a
//! network blip its link rides out (session re-activated, nothing lost)
//! does not send every client of a pair to the other appliance. One that
//! never came up counts as down at once.
//!
//! Load: from 70 % of `max_session_count` sessions on, a Healthy level
//! falls linearly toward 200 (the lowest Healthy value, reached at 100 %),
//! so clients spread over the pair without failing over. Hysteresis: the
//! load's share of the level moves only in steps of at least
//! [`LOAD_STEP`], or back to none, so a session count that wavers does not
//! make the level flicker.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

/// Lowest Healthy ServiceLevel: the floor the session load lowers a Healthy
/// level to.
pub const HEALTHY_FLOOR: u8 = 200;
/// ServiceLevel of a standby whose health is full (below the leader's 255,
/// still Healthy).
pub const STANDBY: u8 = 230;
/// Highest ServiceLevel while the pair's integrity is faulted.
pub const INTEGRITY_FAULT_MAX: u8 = 150;
/// Sessions, in percent of `max_session_count`, from which the load lowers
/// a Healthy level.
pub const LOAD_FROM_PERCENT: usize = 70;
/// Smallest change of the load's share that is published (hysteresis).
pub const LOAD_STEP: u8 = 5;
/// How long a field connection that was up may be lost before it counts
/// as down.
pub const FIELD_DOWN_GRACE: Duration = Duration::from_secs(5);

/// This appliance's role in a redundant pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PairRole {
    /// Not paired: serves alone.
    #[default]
    Standalone,
    /// The pair's configuration leader (primary).
    Leader,
    /// The pair's standby.
    Standby,
}

/// How the engine tells the appliance pair about maintenance (see
/// [`crate::Engine::set_handover`]). Called with `true` before this
/// appliance goes into maintenance, and awaited: the pair hands the
/// configuration leadership to the other appliance, waiting a bounded
/// time, and answers a sentence for the operator (`None` when there was
/// nothing to hand over). Called with `false` when a requested state
/// takes the appliance out of maintenance: it stands for election again.
pub type Handover = std::sync::Arc<
    dyn Fn(bool) -> futures_util::future::BoxFuture<'static, Option<String>> + Send + Sync,
>;

/// Makes a [`Handover`] of an async function.
pub fn handover<F, Fut>(f: F) -> Handover
where
    F: Fn(bool) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Option<String>> + Send + 'static,
{
    std::sync::Arc::new(move |entering| Box::pin(f(entering)))
}

/// What the engine knows of the appliance pair: told every second by the
/// pair node's follower task (`uagate run`), shown by REST
/// `GET /api/v1/pair` and the metrics, and fed into the ServiceLevel.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PairView {
    /// This appliance's role.
    pub role: PairRole,
    /// Its Raft node id (0 until the pair node reported).
    pub node_id: u64,
    /// The configuration leader's pair address, when known.
    pub leader: Option<String>,
    /// The replication epoch.
    pub epoch: i64,
    /// Index of the last log entry applied to the store.
    pub applied: u64,
    /// Index of the last log entry known committed here.
    pub committed: u64,
    /// SHA-256 fingerprint of this appliance's pair certificate.
    pub fingerprint: String,
    /// The members.
    pub members: Vec<PairMember>,
    /// The integrity fault that stopped replication here, if any.
    pub integrity_fault: Option<String>,
    /// Cut off from the pair's quorum (a leader whose writes are not
    /// acknowledged, a voter without leader).
    pub quorum_lost: bool,
    /// Changes this appliance had that a later leader never got (it
    /// stepped down after the other appliance was force-promoted).
    pub diverged: Vec<PairDiverged>,
    /// It took a later epoch but could not drop its old log yet: why
    /// (the pair retries; the leader's changes wait until then).
    pub stepping_down: Option<String>,
}

/// One change of the diverged list in [`PairView`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PairDiverged {
    /// The epoch that replaced the one it was made in.
    pub superseded_by: i64,
    /// Its index in the old epoch's log.
    pub index: u64,
    /// The change-log kind, e.g. `user.add`.
    pub kind: String,
    /// Its subject (user, thumbprint, setting key); never a secret.
    pub subject: String,
    /// Who made it.
    pub actor: String,
    /// When (RFC 3339).
    pub at: String,
}

/// One member of the pair in [`PairView`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PairMember {
    /// Its node id.
    pub node_id: u64,
    /// Its pair address.
    pub addr: String,
    /// Whether it votes.
    pub voter: bool,
    /// Its OPC UA application URI.
    pub application_uri: String,
    /// It is a witness (votes, serves no OPC UA).
    pub witness: bool,
    /// Its console URL (empty for a witness or when unknown).
    pub console: String,
    /// Leader's entries it lacks (known on the leader only).
    pub lag_entries: Option<u64>,
    /// Age in seconds of the oldest change it lacks (leader only).
    pub lag_seconds: Option<f64>,
    /// Whether Raft messages reached it or came from it in the last
    /// seconds (see the pair's status); `None` for this appliance and
    /// where unknown.
    pub reachable: Option<bool>,
}

/// What the computed ServiceLevel is made of; gathered by the engine every
/// second.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Health {
    /// The appliance's role.
    pub role: PairRole,
    /// Whether a valid configuration is loaded.
    pub config_loaded: bool,
    /// Whether replication stopped on an integrity fault (pair only).
    pub integrity_fault: bool,
    /// Whether the appliance is cut off from the pair's quorum (pair with
    /// witness only): Degraded like an integrity fault.
    pub quorum_lost: bool,
    /// The enabled field connections: name, and whether an active server
    /// serves it now.
    pub fields: Vec<(String, bool)>,
    /// Northbound sessions.
    pub sessions: usize,
    /// `max_session_count`.
    pub max_sessions: usize,
}

/// Why the computed ServiceLevel is what it is (console, REST).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// No valid configuration is loaded.
    NoConfiguration,
    /// None of the field connections is up.
    NoFieldUp {
        /// Enabled field connections.
        configured: usize,
    },
    /// Some field connections are down.
    FieldsDown {
        /// Up.
        up: usize,
        /// Enabled.
        configured: usize,
    },
    /// Replication stopped on an integrity fault.
    IntegrityFault,
    /// Cut off from the pair's quorum: configuration changes are not
    /// acknowledged here.
    NoQuorum,
    /// Full health; `role` decides the level.
    Healthy {
        /// The appliance's role.
        role: PairRole,
    },
    /// Full health, lowered by the session load.
    Loaded {
        /// The appliance's role.
        role: PairRole,
        /// Sessions in percent of `max_session_count`.
        percent: usize,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let role = |r: &PairRole| match r {
            PairRole::Standby => "standby, ",
            PairRole::Leader | PairRole::Standalone => "",
        };
        match self {
            Reason::NoConfiguration => f.write_str("no configuration loaded"),
            Reason::NoFieldUp { configured: 1 } => f.write_str("the field connection is down"),
            Reason::NoFieldUp { configured } => {
                write!(f, "all {configured} field connections are down")
            }
            Reason::FieldsDown { up, configured } => {
                write!(f, "{up} of {configured} field connections up")
            }
            Reason::IntegrityFault => f.write_str("pair integrity fault: replication stopped"),
            Reason::NoQuorum => f.write_str("cut off from the other pair members (no quorum)"),
            Reason::Healthy { role: r } => write!(f, "{}all healthy", role(r)),
            Reason::Loaded { role: r, percent } => write!(
                f,
                "{}healthy, {percent}% of max_session_count sessions in use",
                role(r)
            ),
        }
    }
}

/// The computed level and its reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Computed {
    /// The ServiceLevel.
    pub level: u8,
    /// Why.
    pub reason: Reason,
}

/// Computes the ServiceLevel from [`Health`]; keeps the published load
/// share for the hysteresis.
#[derive(Debug, Clone, Default)]
pub struct LevelMachine {
    /// The load's share of the level last published (0: none).
    load_share: u8,
    /// Field connections seen up at least once.
    seen_up: HashSet<String>,
    /// Since when each field connection that was up is not.
    down_since: HashMap<String, Instant>,
}

impl LevelMachine {
    /// A machine that has published no load share yet.
    pub fn new() -> LevelMachine {
        LevelMachine::default()
    }

    /// The ServiceLevel for `h` at `now` (see the module's table). Called
    /// every second by housekeeping and when the engine starts.
    pub fn compute(&mut self, h: &Health, now: Instant) -> Computed {
        if !h.config_loaded {
            return Computed {
                level: crate::health::NO_DATA,
                reason: Reason::NoConfiguration,
            };
        }
        let configured = h.fields.len();
        let up = self.count_up(&h.fields, now);
        if configured > 0 && up == 0 {
            return Computed {
                level: crate::health::NO_DATA,
                reason: Reason::NoFieldUp { configured },
            };
        }
        if up < configured {
            // 2..=198: more connections up, a higher Degraded level.
            let level = 2 + 197 * up / configured;
            let level = u8::try_from(level).unwrap_or(198);
            return Computed {
                level: if h.integrity_fault || h.quorum_lost {
                    level.min(INTEGRITY_FAULT_MAX)
                } else {
                    level
                },
                reason: Reason::FieldsDown { up, configured },
            };
        }
        if h.integrity_fault {
            return Computed {
                level: INTEGRITY_FAULT_MAX,
                reason: Reason::IntegrityFault,
            };
        }
        if h.quorum_lost {
            return Computed {
                level: INTEGRITY_FAULT_MAX,
                reason: Reason::NoQuorum,
            };
        }
        let base = match h.role {
            PairRole::Standby => STANDBY,
            PairRole::Leader | PairRole::Standalone => crate::health::HEALTHY_MAX,
        };
        let share = self.load_share(h, base);
        if share == 0 {
            return Computed {
                level: base,
                reason: Reason::Healthy { role: h.role },
            };
        }
        Computed {
            level: base - share,
            reason: Reason::Loaded {
                role: h.role,
                percent: percent(h.sessions, h.max_sessions),
            },
        }
    }

    /// How many of `fields` count as up at `now`: those up, and those that
    /// were up and are lost for less than [`FIELD_DOWN_GRACE`].
    fn count_up(&mut self, fields: &[(String, bool)], now: Instant) -> usize {
        let named = |n: &String| fields.iter().any(|(f, _)| f == n);
        self.seen_up.retain(|n| named(n));
        self.down_since.retain(|n, _| named(n));
        let mut up = 0;
        for (name, connected) in fields {
            if *connected {
                self.seen_up.insert(name.clone());
                self.down_since.remove(name);
                up += 1;
            } else if self.seen_up.contains(name) {
                let since = *self.down_since.entry(name.clone()).or_insert(now);
                if now.saturating_duration_since(since) < FIELD_DOWN_GRACE {
                    up += 1;
                }
            }
        }
        up
    }

    /// The load's share of a Healthy `base` level, with hysteresis.
    fn load_share(&mut self, h: &Health, base: u8) -> u8 {
        let room = base.saturating_sub(HEALTHY_FLOOR);
        // Linear from LOAD_FROM_PERCENT of max_sessions (none) to 100 %
        // (all the room down to the floor).
        let from = h.max_sessions * LOAD_FROM_PERCENT / 100;
        let span = h.max_sessions - from;
        let wanted = if span == 0 {
            0
        } else {
            let over = h.sessions.saturating_sub(from).min(span);
            u8::try_from(usize::from(room) * over / span).unwrap_or(room)
        };
        if wanted == 0 || wanted == room || self.load_share.abs_diff(wanted) >= LOAD_STEP {
            self.load_share = wanted;
        }
        self.load_share.min(room)
    }
}

/// `part` in percent of `whole` (0 when `whole` is 0).
fn percent(part: usize, whole: usize) -> usize {
    (part * 100).checked_div(whole).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(up: usize, of: usize) -> Vec<(String, bool)> {
        (0..of).map(|i| (format!("plc{i}"), i < up)).collect()
    }

    fn healthy(role: PairRole) -> Health {
        Health {
            role,
            config_loaded: true,
            integrity_fault: false,
            quorum_lost: false,
            fields: fields(3, 3),
            sessions: 0,
            max_sessions: 100,
        }
    }

    fn level(h: Health) -> Computed {
        LevelMachine::new().compute(&h, Instant::now())
    }

    #[test]
    fn the_table() {
        let h = healthy(PairRole::Standalone);
        assert_eq!(level(h.clone()).level, 255);
        assert_eq!(level(h.clone()).reason.to_string(), "all healthy");
        assert_eq!(level(healthy(PairRole::Leader)).level, 255);
        let standby = level(healthy(PairRole::Standby));
        assert_eq!(standby.level, STANDBY);
        assert_eq!(standby.reason.to_string(), "standby, all healthy");
        // No configuration: NoData, whatever else.
        let none = level(Health {
            config_loaded: false,
            ..h.clone()
        });
        assert_eq!(
            (none.level, none.reason.to_string()),
            (1, "no configuration loaded".into())
        );
        // Every field connection down: NoData.
        let down = level(Health {
            fields: fields(0, 3),
            ..h.clone()
        });
        assert_eq!(
            (down.level, down.reason.to_string()),
            (1, "all 3 field connections are down".into())
        );
        // Some down: Degraded, more up is higher.
        let one = level(Health {
            fields: fields(1, 3),
            ..h.clone()
        });
        let two = level(Health {
            fields: fields(2, 3),
            ..h.clone()
        });
        assert_eq!(one.level, 2 + 197 / 3);
        assert_eq!(two.level, 2 + 131); // 2 + 197 x 2/3
        assert!((2..=199).contains(&one.level) && (2..=199).contains(&two.level));
        assert!(one.level < two.level);
        assert_eq!(two.reason.to_string(), "2 of 3 field connections up");
        // No field connection configured: a gateway of local nodes is healthy.
        assert_eq!(
            level(Health {
                fields: Vec::new(),
                ..h.clone()
            })
            .level,
            255
        );
        // Integrity fault: Degraded, and it caps a Degraded level too.
        let fault = level(Health {
            integrity_fault: true,
            ..h.clone()
        });
        let cut_off = level(Health {
            quorum_lost: true,
            ..h.clone()
        });
        assert_eq!(cut_off.level, INTEGRITY_FAULT_MAX);
        assert_eq!(cut_off.reason, Reason::NoQuorum);
        assert_eq!(fault.level, INTEGRITY_FAULT_MAX);
        assert_eq!(
            level(Health {
                integrity_fault: true,
                fields: fields(9, 10),
                ..h
            })
            .level,
            INTEGRITY_FAULT_MAX
        );
    }

    #[test]
    fn load_lowers_a_healthy_level_toward_the_floor() {
        let mut m = LevelMachine::new();
        let at = |m: &mut LevelMachine, sessions: usize, role: PairRole| {
            m.compute(
                &Health {
                    sessions,
                    ..healthy(role)
                },
                Instant::now(),
            )
        };
        assert_eq!(at(&mut m, 70, PairRole::Standalone).level, 255);
        let full = at(&mut m, 100, PairRole::Standalone);
        assert_eq!(full.level, HEALTHY_FLOOR);
        assert_eq!(
            full.reason.to_string(),
            "healthy, 100% of max_session_count sessions in use"
        );
        let mut m = LevelMachine::new();
        assert_eq!(at(&mut m, 85, PairRole::Standalone).level, 255 - 27);
        let mut m = LevelMachine::new();
        assert_eq!(at(&mut m, 100, PairRole::Standby).level, HEALTHY_FLOOR);
        // Never below the floor, never out of Healthy.
        let mut m = LevelMachine::new();
        assert_eq!(at(&mut m, 500, PairRole::Leader).level, HEALTHY_FLOOR);
    }

    #[test]
    fn a_wavering_session_count_does_not_make_the_level_flicker() {
        let mut m = LevelMachine::new();
        let mut at = |sessions: usize| {
            m.compute(
                &Health {
                    sessions,
                    ..healthy(PairRole::Standalone)
                },
                Instant::now(),
            )
            .level
        };
        let first = at(80); // share 18
        assert_eq!(first, 255 - 18);
        // One session more or less: a share change below LOAD_STEP.
        assert_eq!(at(81), first);
        assert_eq!(at(79), first);
        assert_eq!(at(80), first);
        // A real rise moves it.
        assert_eq!(at(90), 255 - 36);
        // Back under the load threshold: no share at once.
        assert_eq!(at(60), 255);
    }

    #[test]
    fn no_session_limit_means_no_load_share() {
        let mut m = LevelMachine::new();
        let c = m.compute(
            &Health {
                sessions: 10,
                max_sessions: 0,
                ..healthy(PairRole::Standalone)
            },
            Instant::now(),
        );
        assert_eq!(c.level, 255);
    }

    #[test]
    fn a_lost_field_connection_counts_after_the_grace_one_never_up_at_once() {
        let t0 = Instant::now();
        let mut m = LevelMachine::new();
        let h = |up: usize| Health {
            fields: fields(up, 2),
            ..healthy(PairRole::Standalone)
        };
        // At start, neither is up yet: NoData at once.
        assert_eq!(m.compute(&h(0), t0).level, 1);
        // Both connect.
        assert_eq!(m.compute(&h(2), t0 + Duration::from_secs(1)).level, 255);
        // plc1 lost: still counted up during the grace.
        let lost = t0 + Duration::from_secs(2);
        assert_eq!(m.compute(&h(1), lost).level, 255);
        assert_eq!(
            m.compute(&h(1), lost + FIELD_DOWN_GRACE - Duration::from_millis(1))
                .level,
            255
        );
        // Past it: Degraded.
        let degraded = m.compute(&h(1), lost + FIELD_DOWN_GRACE);
        assert_eq!(degraded.level, 2 + 197 / 2);
        assert_eq!(degraded.reason.to_string(), "1 of 2 field connections up");
        // Back: healthy at once; a new loss starts a new grace.
        let back = lost + Duration::from_secs(10);
        assert_eq!(m.compute(&h(2), back).level, 255);
        assert_eq!(m.compute(&h(1), back + Duration::from_secs(1)).level, 255);
        // A connection removed from the configuration is forgotten.
        let only = Health {
            fields: vec![("plc0".into(), true)],
            ..healthy(PairRole::Standalone)
        };
        assert_eq!(m.compute(&only, back + Duration::from_secs(2)).level, 255);
    }
}
