//! Admission control from the resource-isolation plan: who a caller is
//! (owner and class, from its address and the ingress rules) and whether
//! the Connection, Handshake and SessionEstablishment stages have room for
//! it. Accounting is done with leases: dropping a lease releases its charge.

use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

use uagate_config::{IngressClass, Stage};
use uagate_isolation::owner::{OwnerClass, OwnerKey};
use uagate_isolation::plan::{IngressTarget, Plan, StagePlan};
use uagate_isolation::provider::{
    ConnectionRateLimiter, IsolationLimiter, Lease, LimiterSnapshot, RateProtection, Rejection,
    StageCapacity, TrustedCapacity,
};

/// Why a connection was not admitted (for logs and counters; the peer
/// only sees BadTcpNotEnoughResources and a close).
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The connection rate limiter had no token for this caller.
    #[error("connection rate exceeded")]
    Rate,
    /// A stage had no capacity or the owner hit its limit.
    #[error(transparent)]
    Stage(#[from] Rejection),
}

impl Refusal {
    /// Whether reclaiming an unused channel could make room: the Connection
    /// stage itself was full (not a rate, owner-limit or owner-table refusal).
    pub fn is_connection_capacity(&self) -> bool {
        matches!(self, Refusal::Stage(r) if r.stage == Stage::Connection
            && r.reason == uagate_isolation::provider::RejectReason::Capacity)
    }

    /// The caller that was refused, when classification happened.
    pub fn stage(&self) -> Option<Stage> {
        match self {
            Refusal::Stage(r) => Some(r.stage),
            Refusal::Rate => None,
        }
    }
}

/// Who a caller is for accounting purposes.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The owner charged.
    pub owner: OwnerKey,
    /// The class whose reserve it may use.
    pub class: OwnerClass,
}

/// The leases a connection holds from accept on.
#[derive(Debug)]
pub struct ConnectionAdmission {
    /// Who the connection belongs to.
    pub caller: Caller,
    /// The address it comes from.
    pub peer: IpAddr,
    /// Held for the life of the connection.
    _connection: Lease,
    /// Held until the secure channel is open (the startup deadline covers it).
    pub handshake: Option<Lease>,
}

/// The plan plus the live accounting built from it; one per server.
pub struct Admission {
    /// The live plan; only what [`Plan::restart_required`] allows is ever swapped.
    plan: parking_lot::RwLock<Plan>,
    limiter: IsolationLimiter,
    rate: Option<Mutex<ConnectionRateLimiter>>,
    /// Connections refused by the rate limiter (observability).
    rate_rejections: std::sync::atomic::AtomicU64,
}

fn capacity(stage: &StagePlan, plan: &Plan) -> StageCapacity {
    StageCapacity {
        total: stage.total,
        shared: stage.shared,
        bootstrap: stage.bootstrap,
        reconnect: stage.reconnect,
        control: stage.control,
        trusted: stage
            .trusted
            .iter()
            .filter_map(|t| {
                Some(TrustedCapacity {
                    key: OwnerKey::trusted(&t.key)?,
                    reserved: t.reserved,
                    hard_limit: t.hard_limit,
                })
            })
            .collect(),
        owner_limit: stage.owner_limit,
        // shared_only: channels without a session fill only part of the budget.
        without_session: match stage.stage {
            Stage::ReassemblyBytes => plan.max_bytes_without_session(),
            _ => None,
        },
    }
}

impl Admission {
    /// Builds the accounting for `plan` at `now`. Called once at start.
    pub fn new(plan: Plan, now: Instant) -> Admission {
        let limiter = IsolationLimiter::new(
            plan.stages().iter().map(|s| (s.stage, capacity(s, &plan))),
            plan.max_tracked_owners() as usize,
        );
        let r = plan.rate();
        let rate = r.enabled.then(|| {
            let protection = RateProtection {
                bootstrap: r.bootstrap.is_some(),
                reconnect: r.reconnect.is_some(),
                trusted: r
                    .trusted
                    .iter()
                    .filter_map(|(key, _)| OwnerKey::trusted(key))
                    .collect(),
            };
            Mutex::new(ConnectionRateLimiter::new(
                u64::from(r.total.per_second),
                u64::from(r.total.burst),
                &protection,
                now,
            ))
        });
        Admission {
            plan: parking_lot::RwLock::new(plan),
            limiter,
            rate,
            rate_rejections: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The plan in force.
    pub fn plan(&self) -> parking_lot::RwLockReadGuard<'_, Plan> {
        self.plan.read()
    }

    /// Whether [`Admission::apply`] would take `new` now (the settings
    /// that need a restart otherwise); changes nothing.
    pub fn check(&self, new: &Plan) -> Result<(), Vec<&'static str>> {
        let restart = self.plan.read().restart_required(new);
        if restart.is_empty() {
            Ok(())
        } else {
            Err(restart)
        }
    }

    /// Applies a new plan while running when it changes only weights and
    /// ingress rules; otherwise nothing changes and the error lists the
    /// settings that need a restart.
    pub fn apply(&self, new: Plan) -> Result<(), Vec<&'static str>> {
        let mut live = self.plan.write();
        let restart = live.restart_required(&new);
        if !restart.is_empty() {
            return Err(restart);
        }
        *live = new;
        Ok(())
    }

    /// The scheduling weight of a caller.
    pub fn weight(&self, caller: &Caller) -> u32 {
        let plan = self.plan.read();
        match &caller.class {
            OwnerClass::Trusted(key) => plan
                .trusted_weight(key.name())
                .unwrap_or_else(|| plan.default_weight()),
            _ => plan.default_weight(),
        }
    }

    /// The RequestExecution capacity reserved for a caller alone (trusted
    /// owners with a reservation), added to its pipeline share.
    pub fn reserved_execution(&self, caller: &Caller) -> u64 {
        match &caller.class {
            OwnerClass::Trusted(key) => self
                .plan
                .read()
                .stage(Stage::RequestExecution)
                .trusted_for(key.name())
                .map_or(0, |t| t.reserved),
            _ => 0,
        }
    }

    /// Connections refused by the connection rate limiter so far.
    pub fn rate_rejections(&self) -> u64 {
        self.rate_rejections
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Usage, tracked owners and rejections per stage and reason (no owner keys).
    pub fn snapshot(&self) -> LimiterSnapshot {
        self.limiter.snapshot()
    }

    /// Classifies a peer address: an ingress rule may name a trusted owner
    /// or a protected class; otherwise the caller is ordinary, grouped by
    /// its address (IPv4 and IPv4-mapped IPv6 are the same owner).
    pub fn classify(&self, ip: IpAddr) -> Caller {
        let by_address = OwnerKey::from_addr(ip);
        let plan = self.plan.read();
        match plan.classify_ingress(ip) {
            Some(IngressTarget::Owner(key)) => match OwnerKey::trusted(key) {
                Some(owner) => Caller {
                    class: OwnerClass::Trusted(owner.clone()),
                    owner,
                },
                None => Caller {
                    owner: by_address,
                    class: OwnerClass::Ordinary,
                },
            },
            Some(IngressTarget::Class(IngressClass::Bootstrap)) => Caller {
                owner: by_address,
                class: OwnerClass::Bootstrap,
            },
            Some(IngressTarget::Class(IngressClass::Reconnect)) => Caller {
                owner: by_address,
                class: OwnerClass::Reconnect,
            },
            None => Caller {
                owner: by_address,
                class: OwnerClass::Ordinary,
            },
        }
    }

    /// Admits a new connection from `ip` before any protocol state exists:
    /// rate limiter first, then the Connection and Handshake stages.
    pub fn admit_connection(
        &self,
        ip: IpAddr,
        now: Instant,
    ) -> Result<ConnectionAdmission, Refusal> {
        let caller = self.classify(ip);
        if let Some(rate) = &self.rate {
            let mut rate = rate.lock().unwrap_or_else(|p| p.into_inner());
            rate.try_acquire(&caller.class, now).map_err(|_| {
                self.rate_rejections
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Refusal::Rate
            })?;
        }
        self.admit_stages(caller, ip)
    }

    /// The Connection and Handshake charges of a caller the rate limiter
    /// has already approved (also used to retry after reclaiming a channel).
    pub fn admit_stages(
        &self,
        caller: Caller,
        peer: IpAddr,
    ) -> Result<ConnectionAdmission, Refusal> {
        let connection =
            self.limiter
                .try_acquire(Stage::Connection, &caller.owner, &caller.class, 1)?;
        let handshake =
            self.limiter
                .try_acquire(Stage::Handshake, &caller.owner, &caller.class, 1)?;
        Ok(ConnectionAdmission {
            caller,
            peer,
            _connection: connection,
            handshake: Some(handshake),
        })
    }

    /// Charges `amount` to `stage` for `caller`.
    pub fn acquire(&self, stage: Stage, caller: &Caller, amount: u64) -> Result<Lease, Rejection> {
        self.limiter
            .try_acquire(stage, &caller.owner, &caller.class, amount)
    }

    /// A SessionEstablishment slot for one CreateSession/ActivateSession.
    pub fn session_establishment(&self, caller: &Caller) -> Result<Lease, Rejection> {
        self.limiter
            .try_acquire(Stage::SessionEstablishment, &caller.owner, &caller.class, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 17: a trusted owner whose key is 200 bytes long (within the
    /// default `isolation.max_owner_key_length` of 256) is classified and
    /// gets its reservation; it used to pass `uagate plan` and then be
    /// ignored by admission (keys above 120 bytes were dropped).
    #[test]
    fn a_200_byte_trusted_owner_key_gets_its_reservation() {
        let key = "k".repeat(200);
        let doc = format!(
            "[server]\nmax_channel_count = 104\n[isolation]\nmode = \"trusted_reservations\"\n[[isolation.trusted_owners]]\nkey = \"{key}\"\nweight = 4\nreservations = [{{ stage = \"request_execution\", reserved = 2, hard_limit = 8 }}]\n[[isolation.ingress]]\ncidr = \"127.0.0.9/32\"\nowner = \"{key}\"\n"
        );
        let config = uagate_config::Config::from_toml(&doc).expect("valid configuration");
        let plan = Plan::build(&config).expect("plan");
        let admission = Admission::new(plan, Instant::now());
        let caller = admission.classify("127.0.0.9".parse().unwrap());
        assert!(
            matches!(&caller.class, OwnerClass::Trusted(o) if o.name() == key),
            "{:?}",
            caller.class
        );
        // Its reserved execution slots are there for it: with the shared
        // slots taken by ordinary callers, it still gets two.
        let ordinary = admission.classify("127.0.0.10".parse().unwrap());
        let mut held = Vec::new();
        while let Ok(l) = admission.acquire(Stage::RequestExecution, &ordinary, 1) {
            held.push(l);
            assert!(held.len() <= 200, "no limit on shared execution slots");
        }
        let a = admission.acquire(Stage::RequestExecution, &caller, 1);
        let b = admission.acquire(Stage::RequestExecution, &caller, 1);
        assert!(a.is_ok() && b.is_ok(), "the trusted owner's reservation");
    }
}
