//! Admission accounting with leases, and the connection rate limiter.
//!
//! [`IsolationLimiter`] is the default provider's accounting: one instance
//! per server, shared by the listeners and the dispatcher. Every stage is
//! partitioned into a shared pool and separate reserves (bootstrap,
//! reconnect, control, and one per trusted owner). Ordinary work uses shared
//! capacity only; protected work uses its own reserve first and then
//! available shared capacity, always subject to its per-owner hard limit.
//! A successful admission returns a [`Lease`]; dropping the lease releases
//! the charge. The owner table (one entry per owner with any charge, across
//! all stages) is bounded by `max_tracked_owners`, with entries kept back for
//! each protected class in use and each trusted owner. Entries are removed
//! when an owner's last charge is released; live entries are never evicted.
//!
//! A stage may also cap what ordinary-class charges hold together
//! ([`StageCapacity::without_session`]): shared_only's MaxBytesWithoutSession
//! rule at ReassemblyBytes, where channels without an activated session are
//! charged as [`OwnerClass::Ordinary`] and session-bound ones as
//! [`OwnerClass::SessionBound`]. A charge over that sub-limit is refused
//! with [`RejectReason::Capacity`]; the lease gives it back on drop.
//!
//! [`ConnectionRateLimiter`] is the token bucket of `connections_per_second`
//! / `connection_burst`, partitioned into shared and protected tokens in the
//! balanced and trusted_reservations profiles.
//!
//! No clock reads and no tokio here: time is an argument.

use crate::{FastMap, FastSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::owner::{OwnerClass, OwnerKey};

/// The stage enum shared with the configuration and the plan.
pub use uagate_config::Stage;

/// Number of [`Stage`]s.
pub const STAGE_COUNT: usize = Stage::ALL.len();

/// Why an admission was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// Neither the applicable reserve nor shared capacity can hold the charge.
    Capacity,
    /// The owner's hard limit at this stage would be exceeded.
    OwnerLimit,
    /// The owner table has no entry left for a new owner of this class.
    OwnerTableFull,
    /// The class names a trusted owner that is not configured, or does not match the owner.
    InvalidOwner,
}

/// Number of [`RejectReason`]s.
pub const REASON_COUNT: usize = 4;

impl RejectReason {
    /// Every reason.
    pub const ALL: [RejectReason; REASON_COUNT] = [
        RejectReason::Capacity,
        RejectReason::OwnerLimit,
        RejectReason::OwnerTableFull,
        RejectReason::InvalidOwner,
    ];

    /// Bounded snake_case label for metrics.
    pub fn label(self) -> &'static str {
        match self {
            RejectReason::Capacity => "capacity",
            RejectReason::OwnerLimit => "owner_limit",
            RejectReason::OwnerTableFull => "owner_table_full",
            RejectReason::InvalidOwner => "invalid_owner",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// An isolation refusal: the stage and the bounded reason (no owner key, so
/// it can be logged and counted freely). The caller maps it to the
/// stage's client-visible result (close, BadTcpNotEnoughResources,
/// BadServerTooBusy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("isolation refused {} admission: {}", .stage.key(), .reason.label())]
pub struct Rejection {
    /// Where it was refused.
    pub stage: Stage,
    /// Why.
    pub reason: RejectReason,
}

/// One trusted owner's share of one stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedCapacity {
    /// The configured owner key (`OwnerKey::trusted(name)`).
    pub key: OwnerKey,
    /// Capacity only this owner may use.
    pub reserved: u64,
    /// Most this owner may hold at this stage (reserve + shared).
    pub hard_limit: u64,
}

/// The capacities of one stage, filled from the runtime plan. The plan
/// guarantees `total = shared + bootstrap + reconnect + control + sum(trusted.reserved)`;
/// the limiter enforces each pool separately and reports `total` as is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StageCapacity {
    /// Total capacity (reported only).
    pub total: u64,
    /// Capacity usable by every class.
    pub shared: u64,
    /// Reserve for the bootstrap class.
    pub bootstrap: u64,
    /// Reserve for the reconnect class (and session-bound reassembly).
    pub reconnect: u64,
    /// Reserve for control work (decoded-request stages).
    pub control: u64,
    /// Per trusted owner reserves and hard limits.
    pub trusted: Vec<TrustedCapacity>,
    /// Hard limit for every non-trusted owner at this stage.
    pub owner_limit: u64,
    /// Most units that charges of class [`OwnerClass::Ordinary`] may hold
    /// together at this stage, whatever their owner (shared_only's
    /// MaxBytesWithoutSession rule at ReassemblyBytes: channels without an
    /// activated session). Other classes are not counted and may use the
    /// whole capacity. `None`: no such sub-limit.
    pub without_session: Option<u64>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Pool {
    size: u64,
    used: u64,
}

impl Pool {
    fn free(&self) -> u64 {
        self.size.saturating_sub(self.used)
    }
}

/// Which reserve a charge came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReservePool {
    Bootstrap,
    Reconnect,
    Control,
    Trusted(usize),
}

#[derive(Debug, Default)]
struct StageState {
    capacity: StageCapacity,
    shared: Pool,
    bootstrap: Pool,
    reconnect: Pool,
    control: Pool,
    /// Parallel to `capacity.trusted`.
    trusted: Vec<Pool>,
    trusted_index: FastMap<OwnerKey, usize>,
    /// Units held by ordinary-class charges (counted against
    /// `capacity.without_session` when it is set).
    without_session_used: u64,
    rejections: [u64; REASON_COUNT],
}

impl StageState {
    fn new(capacity: StageCapacity) -> StageState {
        let trusted = capacity
            .trusted
            .iter()
            .map(|t| Pool {
                size: t.reserved,
                used: 0,
            })
            .collect();
        let trusted_index = capacity
            .trusted
            .iter()
            .enumerate()
            .map(|(i, t)| (t.key.clone(), i))
            .collect();
        StageState {
            shared: Pool {
                size: capacity.shared,
                used: 0,
            },
            bootstrap: Pool {
                size: capacity.bootstrap,
                used: 0,
            },
            reconnect: Pool {
                size: capacity.reconnect,
                used: 0,
            },
            control: Pool {
                size: capacity.control,
                used: 0,
            },
            trusted,
            trusted_index,
            without_session_used: 0,
            capacity,
            rejections: [0; REASON_COUNT],
        }
    }

    fn pool_mut(&mut self, pool: ReservePool) -> Option<&mut Pool> {
        match pool {
            ReservePool::Bootstrap => Some(&mut self.bootstrap),
            ReservePool::Reconnect => Some(&mut self.reconnect),
            ReservePool::Control => Some(&mut self.control),
            ReservePool::Trusted(i) => self.trusted.get_mut(i),
        }
    }

    fn usage(&self) -> u64 {
        self.shared.used
            + self.bootstrap.used
            + self.reconnect.used
            + self.control.used
            + self.trusted.iter().map(|p| p.used).sum::<u64>()
    }
}

/// Which owner-table entry an owner occupies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    General,
    /// The entry kept for protected class 0 = bootstrap, 1 = reconnect, 2 = control.
    Class(usize),
    /// A configured trusted owner's own entry.
    Trusted,
}

#[derive(Debug)]
struct Entry {
    charges: [u64; STAGE_COUNT],
    slot: Slot,
}

#[derive(Debug)]
struct State {
    stages: Vec<StageState>,
    owners: FastMap<OwnerKey, Entry>,
    trusted_keys: FastSet<OwnerKey>,
    general_capacity: usize,
    general_used: usize,
    /// Whether the class keeps an entry (it has a reserve at some stage).
    class_slot_kept: [bool; 3],
    class_slot_used: [bool; 3],
}

fn class_slot_index(class: &OwnerClass) -> Option<usize> {
    match class {
        OwnerClass::Bootstrap => Some(0),
        OwnerClass::Reconnect => Some(1),
        OwnerClass::Control => Some(2),
        _ => None,
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding the lock cannot leave the counters half-updated
    // in a way that matters more than refusing all further work would.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// The default provider's accounting over all stages with one bounded owner
/// table. Cheap to clone (shared state); `Send + Sync`.
#[derive(Debug, Clone)]
pub struct IsolationLimiter {
    state: Arc<Mutex<State>>,
}

impl IsolationLimiter {
    /// Builds the limiter from per-stage capacities (a stage not listed has
    /// zero capacity and refuses everything) and the owner-table bound.
    /// One table entry is kept back for each protected class that has a
    /// reserve at some stage and for each trusted owner; ordinary owners
    /// share the rest (the plan validates that some remain).
    pub fn new(
        stages: impl IntoIterator<Item = (Stage, StageCapacity)>,
        max_tracked_owners: usize,
    ) -> IsolationLimiter {
        let mut states: Vec<StageState> = (0..STAGE_COUNT)
            .map(|_| StageState::new(StageCapacity::default()))
            .collect();
        for (stage, cap) in stages {
            if let Some(slot) = states.get_mut(stage.index()) {
                *slot = StageState::new(cap);
            }
        }
        let mut trusted_keys = FastSet::default();
        let mut class_slot_kept = [false; 3];
        for s in &states {
            let c = &s.capacity;
            class_slot_kept[0] |= c.bootstrap > 0;
            class_slot_kept[1] |= c.reconnect > 0;
            class_slot_kept[2] |= c.control > 0;
            trusted_keys.extend(c.trusted.iter().map(|t| t.key.clone()));
        }
        let kept = class_slot_kept.iter().filter(|k| **k).count() + trusted_keys.len();
        IsolationLimiter {
            state: Arc::new(Mutex::new(State {
                stages: states,
                owners: FastMap::default(),
                trusted_keys,
                general_capacity: max_tracked_owners.saturating_sub(kept),
                general_used: 0,
                class_slot_kept,
                class_slot_used: [false; 3],
            })),
        }
    }

    /// Charges `amount` units of `stage` to `owner` for work of `class`.
    /// Called before the resource is allocated (connection state, retained
    /// bytes, queue slot, worker). For `OwnerClass::Trusted(k)`, `owner` must
    /// be `k` and `k` must be configured, otherwise `InvalidOwner`.
    /// Protected classes take from their own reserve first, then from shared
    /// capacity; ordinary work takes shared capacity only. A zero `amount`
    /// always succeeds with an empty lease.
    pub fn try_acquire(
        &self,
        stage: Stage,
        owner: &OwnerKey,
        class: &OwnerClass,
        amount: u64,
    ) -> Result<Lease, Rejection> {
        let idx = stage.index();
        let mut guard = lock(&self.state);
        let st = &mut *guard;
        let result = Self::admit(st, stage, owner, class, amount);
        match result {
            Ok(Admitted {
                pool,
                from_reserve,
                from_shared,
                without_session,
            }) => Ok(Lease {
                state: Some(Arc::clone(&self.state)),
                stage,
                owner: owner.clone(),
                pool,
                from_reserve,
                from_shared,
                without_session,
            }),
            Err(reason) => {
                if let Some(s) = st.stages.get_mut(idx) {
                    s.rejections[reason.index()] += 1;
                }
                Err(Rejection { stage, reason })
            }
        }
    }

    /// The admission decision; on success the charge is applied.
    fn admit(
        st: &mut State,
        stage: Stage,
        owner: &OwnerKey,
        class: &OwnerClass,
        amount: u64,
    ) -> Result<Admitted, RejectReason> {
        let idx = stage.index();
        if let OwnerClass::Trusted(k) = class {
            if k != owner || !st.trusted_keys.contains(k) {
                return Err(RejectReason::InvalidOwner);
            }
        }
        if amount == 0 {
            return Ok(Admitted::default());
        }
        let Some(s) = st.stages.get(idx) else {
            return Err(RejectReason::Capacity);
        };
        // Which reserve may this work use, and what is the owner's hard limit?
        let trusted_idx = s.trusted_index.get(owner).copied();
        let pool = match class {
            OwnerClass::Ordinary => None,
            OwnerClass::Bootstrap => Some(ReservePool::Bootstrap),
            OwnerClass::Reconnect => Some(ReservePool::Reconnect),
            OwnerClass::Control => Some(ReservePool::Control),
            OwnerClass::SessionBound => {
                (stage == Stage::ReassemblyBytes).then_some(ReservePool::Reconnect)
            }
            OwnerClass::Trusted(_) => trusted_idx.map(ReservePool::Trusted),
        };
        let hard_limit = match trusted_idx.and_then(|i| s.capacity.trusted.get(i)) {
            Some(t) => t.hard_limit,
            None => s.capacity.owner_limit,
        };
        let reserve_free = match pool {
            Some(ReservePool::Bootstrap) => s.bootstrap.free(),
            Some(ReservePool::Reconnect) => s.reconnect.free(),
            Some(ReservePool::Control) => s.control.free(),
            Some(ReservePool::Trusted(i)) => s.trusted.get(i).map_or(0, Pool::free),
            None => 0,
        };
        let from_reserve = reserve_free.min(amount);
        let from_shared = amount - from_reserve;
        if from_shared > s.shared.free() {
            return Err(RejectReason::Capacity);
        }
        // Channels without a session may fill only part of the stage.
        let without_session = match (class, s.capacity.without_session) {
            (OwnerClass::Ordinary, Some(limit)) => {
                if s.without_session_used.saturating_add(amount) > limit {
                    return Err(RejectReason::Capacity);
                }
                true
            }
            _ => false,
        };
        let held = st.owners.get(owner).map_or(0, |e| e.charges[idx]);
        if held.saturating_add(amount) > hard_limit {
            return Err(RejectReason::OwnerLimit);
        }
        // Owner-table entry.
        if !st.owners.contains_key(owner) {
            let slot = if st.trusted_keys.contains(owner) {
                Slot::Trusted
            } else {
                match class_slot_index(class) {
                    Some(c) if st.class_slot_kept[c] && !st.class_slot_used[c] => Slot::Class(c),
                    _ if st.general_used < st.general_capacity => Slot::General,
                    _ => return Err(RejectReason::OwnerTableFull),
                }
            };
            match slot {
                Slot::General => st.general_used += 1,
                Slot::Class(c) => st.class_slot_used[c] = true,
                Slot::Trusted => {}
            }
            st.owners.insert(
                owner.clone(),
                Entry {
                    charges: [0; STAGE_COUNT],
                    slot,
                },
            );
        }
        if let Some(e) = st.owners.get_mut(owner) {
            e.charges[idx] += amount;
        }
        let s = &mut st.stages[idx];
        s.shared.used += from_shared;
        if let Some(p) = pool.and_then(|p| s.pool_mut(p)) {
            p.used += from_reserve;
        }
        if without_session {
            s.without_session_used += amount;
        }
        Ok(Admitted {
            pool,
            from_reserve,
            from_shared,
            without_session,
        })
    }

    /// Units of `stage` held by ordinary-class charges that count against
    /// its `without_session` sub-limit (0 when the stage has none).
    pub fn without_session_usage(&self, stage: Stage) -> u64 {
        lock(&self.state)
            .stages
            .get(stage.index())
            .map_or(0, |s| s.without_session_used)
    }

    /// Units of `stage` currently charged (all pools).
    pub fn usage(&self, stage: Stage) -> u64 {
        lock(&self.state)
            .stages
            .get(stage.index())
            .map_or(0, StageState::usage)
    }

    /// Units of `stage` currently charged to `owner` (diagnostics, tests).
    pub fn owner_usage(&self, owner: &OwnerKey, stage: Stage) -> u64 {
        lock(&self.state)
            .owners
            .get(owner)
            .map_or(0, |e| e.charges[stage.index()])
    }

    /// Number of owners with at least one charge.
    pub fn tracked_owner_count(&self) -> usize {
        lock(&self.state).owners.len()
    }

    /// Refusals so far at `stage` for `reason`.
    pub fn rejections(&self, stage: Stage, reason: RejectReason) -> u64 {
        lock(&self.state)
            .stages
            .get(stage.index())
            .map_or(0, |s| s.rejections[reason.index()])
    }

    /// The capacities this limiter enforces for `stage`.
    pub fn capacity(&self, stage: Stage) -> StageCapacity {
        lock(&self.state)
            .stages
            .get(stage.index())
            .map(|s| s.capacity.clone())
            .unwrap_or_default()
    }

    /// All counters at once, for the metrics endpoint (labels are bounded:
    /// stage and reason only).
    pub fn snapshot(&self) -> LimiterSnapshot {
        let st = lock(&self.state);
        LimiterSnapshot {
            usage: Stage::ALL
                .iter()
                .map(|&s| (s, st.stages.get(s.index()).map_or(0, StageState::usage)))
                .collect(),
            tracked_owners: st.owners.len(),
            rejections: Stage::ALL
                .iter()
                .flat_map(|&s| {
                    let counts = st
                        .stages
                        .get(s.index())
                        .map_or([0; REASON_COUNT], |x| x.rejections);
                    RejectReason::ALL
                        .iter()
                        .map(move |&r| (s, r, counts[r.index()]))
                })
                .collect(),
        }
    }
}

/// What an admission charged, for its lease.
#[derive(Debug, Default)]
struct Admitted {
    pool: Option<ReservePool>,
    from_reserve: u64,
    from_shared: u64,
    /// Counted against the stage's `without_session` sub-limit.
    without_session: bool,
}

/// Counters of an [`IsolationLimiter`] at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimiterSnapshot {
    /// Current usage per stage (`isolation.usage`).
    pub usage: Vec<(Stage, u64)>,
    /// Owners with a charge (`isolation.owners`).
    pub tracked_owners: usize,
    /// Cumulative refusals per stage and reason (`isolation.rejections`).
    pub rejections: Vec<(Stage, RejectReason, u64)>,
}

/// A charge held at one stage. Dropping it releases the charge (and the
/// owner's table entry when it was the owner's last charge). `Send + Sync`,
/// so it can travel with the work it accounts for.
#[derive(Debug)]
#[must_use = "dropping a lease releases its charge immediately"]
pub struct Lease {
    state: Option<Arc<Mutex<State>>>,
    stage: Stage,
    owner: OwnerKey,
    pool: Option<ReservePool>,
    from_reserve: u64,
    from_shared: u64,
    /// The charge counts against the stage's `without_session` sub-limit.
    without_session: bool,
}

impl Lease {
    /// The stage charged.
    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// The owner charged.
    pub fn owner(&self) -> &OwnerKey {
        &self.owner
    }

    /// Units charged.
    pub fn amount(&self) -> u64 {
        self.from_reserve + self.from_shared
    }

    /// Units taken from the class's or trusted owner's reserve.
    pub fn reserved_amount(&self) -> u64 {
        self.from_reserve
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(state) = self.state.take() else {
            return;
        };
        let amount = self.amount();
        if amount == 0 {
            return;
        }
        let idx = self.stage.index();
        let mut guard = lock(&state);
        let st = &mut *guard;
        if let Some(s) = st.stages.get_mut(idx) {
            s.shared.used = s.shared.used.saturating_sub(self.from_shared);
            if let Some(p) = self.pool.and_then(|p| s.pool_mut(p)) {
                p.used = p.used.saturating_sub(self.from_reserve);
            }
            if self.without_session {
                s.without_session_used = s.without_session_used.saturating_sub(amount);
            }
        }
        let mut freed = None;
        if let Some(e) = st.owners.get_mut(&self.owner) {
            e.charges[idx] = e.charges[idx].saturating_sub(amount);
            if e.charges.iter().all(|c| *c == 0) {
                freed = Some(e.slot);
            }
        }
        if let Some(slot) = freed {
            st.owners.remove(&self.owner);
            match slot {
                Slot::General => st.general_used = st.general_used.saturating_sub(1),
                Slot::Class(c) => {
                    if let Some(u) = st.class_slot_used.get_mut(c) {
                        *u = false;
                    }
                }
                Slot::Trusted => {}
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Connection rate limiter
// ---------------------------------------------------------------------------

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// A token bucket with integer arithmetic (levels in billionths of a token).
#[derive(Debug, Clone)]
struct Bucket {
    rate: u64,
    burst: u64,
    level: u128,
    last: Instant,
}

impl Bucket {
    fn full(rate: u64, burst: u64, now: Instant) -> Bucket {
        Bucket {
            rate,
            burst,
            level: u128::from(burst) * NANOS_PER_SEC,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        if now > self.last {
            let elapsed = now.duration_since(self.last).as_nanos();
            let cap = u128::from(self.burst) * NANOS_PER_SEC;
            self.level = self
                .level
                .saturating_add(elapsed.saturating_mul(u128::from(self.rate)))
                .min(cap);
            self.last = now;
        }
    }

    fn try_take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.level >= NANOS_PER_SEC {
            self.level -= NANOS_PER_SEC;
            true
        } else {
            false
        }
    }

    fn tokens(&mut self, now: Instant) -> u64 {
        self.refill(now);
        u64::try_from(self.level / NANOS_PER_SEC).unwrap_or(u64::MAX)
    }
}

/// Which protected token partitions exist (balanced: bootstrap + reconnect;
/// trusted_reservations: also one per trusted owner; fair_share and
/// shared_only: none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateProtection {
    /// Keep one token of burst and one per second for the bootstrap class.
    pub bootstrap: bool,
    /// Keep one token of burst and one per second for the reconnect class.
    pub reconnect: bool,
    /// Keep one token of burst and one per second for each of these owners.
    pub trusted: Vec<OwnerKey>,
}

impl RateProtection {
    /// No protected tokens: one ordinary shared bucket.
    pub fn none() -> RateProtection {
        RateProtection::default()
    }

    /// Number of protected partitions (each takes 1/s and 1 burst token).
    pub fn protected_count(&self) -> u64 {
        u64::from(self.bootstrap) + u64::from(self.reconnect) + self.trusted.len() as u64
    }
}

/// Which tokens an approved connection attempt consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    /// The class's or trusted owner's own token.
    Protected,
    /// A shared token.
    Shared,
}

/// Why a connection attempt was not approved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RateRejection {
    /// No token available to this class right now.
    #[error("connection rate exceeded")]
    Exhausted,
    /// The class names a trusted owner that is not configured.
    #[error("unknown trusted owner")]
    InvalidOwner,
}

/// The connection rate limiter (`connections_per_second`, `connection_burst`).
/// With protection, the totals are partitioned: each protected partition has
/// 1 token/s and 1 token of burst, the shared bucket has the rest. Protected
/// work uses its own token first, then shared tokens; ordinary work never
/// takes protected tokens. A refused attempt consumes nothing; closing a
/// connection refunds nothing. The plan validates that rate and burst each
/// exceed the number of protected partitions.
#[derive(Debug, Clone)]
pub struct ConnectionRateLimiter {
    shared: Bucket,
    bootstrap: Option<Bucket>,
    reconnect: Option<Bucket>,
    trusted: FastMap<OwnerKey, Bucket>,
}

impl ConnectionRateLimiter {
    /// Builds a limiter whose buckets start full at `now`.
    pub fn new(
        connections_per_second: u64,
        connection_burst: u64,
        protection: &RateProtection,
        now: Instant,
    ) -> ConnectionRateLimiter {
        let n = protection.protected_count();
        let one = || Bucket::full(1, 1, now);
        ConnectionRateLimiter {
            shared: Bucket::full(
                connections_per_second.saturating_sub(n),
                connection_burst.saturating_sub(n),
                now,
            ),
            bootstrap: protection.bootstrap.then(one),
            reconnect: protection.reconnect.then(one),
            trusted: protection
                .trusted
                .iter()
                .map(|k| (k.clone(), one()))
                .collect(),
        }
    }

    /// Asks for one connection token for work of `class` at `now`. Called for
    /// each accepted socket before any protocol state is allocated (and
    /// before reclaiming an idle channel).
    pub fn try_acquire(
        &mut self,
        class: &OwnerClass,
        now: Instant,
    ) -> Result<TokenSource, RateRejection> {
        let own = match class {
            OwnerClass::Bootstrap => self.bootstrap.as_mut(),
            OwnerClass::Reconnect => self.reconnect.as_mut(),
            OwnerClass::Trusted(k) => match self.trusted.get_mut(k) {
                Some(b) => Some(b),
                None => return Err(RateRejection::InvalidOwner),
            },
            _ => None,
        };
        if let Some(b) = own {
            if b.try_take(now) {
                return Ok(TokenSource::Protected);
            }
        }
        if self.shared.try_take(now) {
            Ok(TokenSource::Shared)
        } else {
            Err(RateRejection::Exhausted)
        }
    }

    /// Whole shared tokens available at `now` (diagnostics, tests).
    pub fn shared_tokens(&mut self, now: Instant) -> u64 {
        self.shared.tokens(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};
    use std::time::Duration;

    fn addr(n: u8) -> OwnerKey {
        OwnerKey::from_addr(IpAddr::V4(Ipv4Addr::new(127, 0, 0, n)))
    }

    fn trusted(name: &str) -> OwnerKey {
        OwnerKey::trusted(name).unwrap()
    }

    /// Connection stage like the reference's Balanced example, scaled down:
    /// total 8 = shared 5 + bootstrap 1 + reconnect 1 + trusted 1.
    fn balanced_connection(owner_limit: u64) -> StageCapacity {
        StageCapacity {
            total: 8,
            shared: 5,
            bootstrap: 1,
            reconnect: 1,
            control: 0,
            trusted: vec![TrustedCapacity {
                key: trusted("plant"),
                reserved: 1,
                hard_limit: 4,
            }],
            owner_limit,
            without_session: None,
        }
    }

    fn limiter(cap: StageCapacity, max_owners: usize) -> IsolationLimiter {
        IsolationLimiter::new([(Stage::Connection, cap)], max_owners)
    }

    fn is_send_sync<T: Send + Sync>() {}

    #[test]
    fn lease_releases_on_drop() {
        is_send_sync::<Lease>();
        is_send_sync::<IsolationLimiter>();
        let l = limiter(balanced_connection(5), 100);
        let a = addr(1);
        let l1 = l
            .try_acquire(Stage::Connection, &a, &OwnerClass::Ordinary, 2)
            .unwrap();
        let l2 = l
            .try_acquire(Stage::Connection, &a, &OwnerClass::Ordinary, 3)
            .unwrap();
        assert_eq!(l.usage(Stage::Connection), 5);
        assert_eq!(l.owner_usage(&a, Stage::Connection), 5);
        assert_eq!(l.tracked_owner_count(), 1);
        drop(l1);
        assert_eq!(l.usage(Stage::Connection), 3);
        assert_eq!(l.tracked_owner_count(), 1);
        // A lease moved to another thread releases there.
        std::thread::spawn(move || drop(l2)).join().unwrap();
        assert_eq!(l.usage(Stage::Connection), 0);
        assert_eq!(l.tracked_owner_count(), 0);
        // Zero-amount leases are free and do not create entries.
        let z = l
            .try_acquire(Stage::Connection, &a, &OwnerClass::Ordinary, 0)
            .unwrap();
        assert_eq!(z.amount(), 0);
        assert_eq!(l.tracked_owner_count(), 0);
    }

    #[test]
    fn owner_hard_limit_and_lone_owner_uses_all_shared() {
        // Hard limit 2: one busy owner cannot take more than 2.
        let l = limiter(balanced_connection(2), 100);
        let a = addr(1);
        let _x = l
            .try_acquire(Stage::Connection, &a, &OwnerClass::Ordinary, 2)
            .unwrap();
        let e = l
            .try_acquire(Stage::Connection, &a, &OwnerClass::Ordinary, 1)
            .unwrap_err();
        assert_eq!(
            e,
            Rejection {
                stage: Stage::Connection,
                reason: RejectReason::OwnerLimit
            }
        );
        // Another owner is unaffected.
        let _y = l
            .try_acquire(Stage::Connection, &addr(2), &OwnerClass::Ordinary, 1)
            .unwrap();
        assert_eq!(l.rejections(Stage::Connection, RejectReason::OwnerLimit), 1);

        // Hard limit = shared: a lone owner takes all shared capacity, but
        // never the reserves.
        let l = limiter(balanced_connection(8), 100);
        let leases: Vec<_> = (0..5)
            .map(|_| {
                l.try_acquire(Stage::Connection, &a, &OwnerClass::Ordinary, 1)
                    .unwrap()
            })
            .collect();
        assert_eq!(
            l.try_acquire(Stage::Connection, &a, &OwnerClass::Ordinary, 1)
                .unwrap_err()
                .reason,
            RejectReason::Capacity
        );
        drop(leases);
        assert_eq!(l.usage(Stage::Connection), 0);
    }

    #[test]
    fn reserves_protect_protected_classes_when_shared_is_exhausted() {
        let l = limiter(balanced_connection(8), 100);
        let flood: Vec<_> = (1..=5)
            .map(|n| {
                l.try_acquire(Stage::Connection, &addr(n), &OwnerClass::Ordinary, 1)
                    .unwrap()
            })
            .collect();
        // Ordinary traffic cannot use idle reserves.
        let e = l
            .try_acquire(Stage::Connection, &addr(6), &OwnerClass::Ordinary, 1)
            .unwrap_err();
        assert_eq!(e.reason, RejectReason::Capacity);
        // Each protected class still gets exactly its reserve.
        let b = l
            .try_acquire(Stage::Connection, &addr(7), &OwnerClass::Bootstrap, 1)
            .unwrap();
        assert_eq!(b.reserved_amount(), 1);
        assert!(l
            .try_acquire(Stage::Connection, &addr(7), &OwnerClass::Bootstrap, 1)
            .is_err());
        let _r = l
            .try_acquire(Stage::Connection, &addr(8), &OwnerClass::Reconnect, 1)
            .unwrap();
        let p = trusted("plant");
        let t = l
            .try_acquire(Stage::Connection, &p, &OwnerClass::Trusted(p.clone()), 1)
            .unwrap();
        assert_eq!(t.reserved_amount(), 1);
        assert_eq!(
            l.try_acquire(Stage::Connection, &p, &OwnerClass::Trusted(p.clone()), 1)
                .unwrap_err()
                .reason,
            RejectReason::Capacity
        );
        assert_eq!(l.usage(Stage::Connection), 8);
        // Releasing shared capacity lets protected work spill over into it
        // after its reserve (trusted hard limit 4).
        drop(flood);
        let more: Vec<_> = (0..3)
            .map(|_| {
                l.try_acquire(Stage::Connection, &p, &OwnerClass::Trusted(p.clone()), 1)
                    .unwrap()
            })
            .collect();
        assert!(more.iter().all(|m| m.reserved_amount() == 0));
        assert_eq!(
            l.try_acquire(Stage::Connection, &p, &OwnerClass::Trusted(p.clone()), 1)
                .unwrap_err()
                .reason,
            RejectReason::OwnerLimit
        );
        // A byte-sized charge can straddle the reserve and shared capacity.
        drop(b);
        let big = l
            .try_acquire(Stage::Connection, &addr(9), &OwnerClass::Bootstrap, 3)
            .unwrap();
        assert_eq!((big.reserved_amount(), big.amount()), (1, 3));
    }

    #[test]
    fn session_bound_uses_reconnect_reserve_only_for_reassembly() {
        let cap = StageCapacity {
            total: 30,
            shared: 10,
            bootstrap: 10,
            reconnect: 10,
            control: 0,
            trusted: vec![],
            owner_limit: 30,
            without_session: None,
        };
        let l = IsolationLimiter::new(
            [
                (Stage::ReassemblyBytes, cap.clone()),
                (Stage::Connection, cap),
            ],
            100,
        );
        let _f = l
            .try_acquire(Stage::ReassemblyBytes, &addr(1), &OwnerClass::Ordinary, 10)
            .unwrap();
        let _g = l
            .try_acquire(Stage::Connection, &addr(1), &OwnerClass::Ordinary, 10)
            .unwrap();
        let s = l
            .try_acquire(
                Stage::ReassemblyBytes,
                &addr(2),
                &OwnerClass::SessionBound,
                6,
            )
            .unwrap();
        assert_eq!(s.reserved_amount(), 6);
        assert!(l
            .try_acquire(Stage::Connection, &addr(2), &OwnerClass::SessionBound, 1)
            .is_err());
    }

    /// shared_only's ReassemblyBytes: everything shared, ordinary
    /// (sessionless) charges capped at `sessionless`.
    fn shared_only_reassembly(total: u64, sessionless: u64) -> IsolationLimiter {
        IsolationLimiter::new(
            [(
                Stage::ReassemblyBytes,
                StageCapacity {
                    total,
                    shared: total,
                    owner_limit: total,
                    without_session: Some(sessionless),
                    ..StageCapacity::default()
                },
            )],
            100,
        )
    }

    #[test]
    fn ordinary_charges_stop_at_the_without_session_limit() {
        let l = shared_only_reassembly(100, 50);
        let o = OwnerClass::Ordinary;
        let r = Stage::ReassemblyBytes;
        // Several sessionless owners together, not each: 30 + 20 = 50.
        let a = l.try_acquire(r, &addr(1), &o, 30).unwrap();
        let b = l.try_acquire(r, &addr(2), &o, 20).unwrap();
        assert_eq!(l.without_session_usage(r), 50);
        let e = l.try_acquire(r, &addr(3), &o, 1).unwrap_err();
        assert_eq!(
            e,
            Rejection {
                stage: r,
                reason: RejectReason::Capacity
            }
        );
        assert_eq!(l.rejections(r, RejectReason::Capacity), 1);
        // The refused charge holds nothing and left no owner entry.
        assert_eq!(l.usage(r), 50);
        assert_eq!(l.tracked_owner_count(), 2);
        // Session-bound channels fill the rest of the budget ...
        let s1 = l
            .try_acquire(r, &addr(4), &OwnerClass::SessionBound, 40)
            .unwrap();
        let s2 = l
            .try_acquire(r, &addr(1), &OwnerClass::SessionBound, 10)
            .unwrap();
        assert_eq!(s1.reserved_amount() + s2.reserved_amount(), 0);
        assert_eq!(l.usage(r), 100);
        assert_eq!(
            l.without_session_usage(r),
            50,
            "session-bound is not counted"
        );
        // ... and the total stays the ceiling for everyone.
        assert_eq!(
            l.try_acquire(r, &addr(4), &OwnerClass::SessionBound, 1)
                .unwrap_err()
                .reason,
            RejectReason::Capacity
        );
        // Under the sub-limit but with the total full: still refused.
        drop(b);
        assert_eq!(l.without_session_usage(r), 30);
        let s3 = l
            .try_acquire(r, &addr(5), &OwnerClass::SessionBound, 20)
            .unwrap();
        assert_eq!(
            l.try_acquire(r, &addr(3), &o, 1).unwrap_err().reason,
            RejectReason::Capacity
        );
        drop((a, s1, s2, s3));
        assert_eq!((l.usage(r), l.without_session_usage(r)), (0, 0));
        assert_eq!(l.tracked_owner_count(), 0);
    }

    #[test]
    fn dropping_an_ordinary_lease_frees_the_without_session_limit() {
        let l = shared_only_reassembly(100, 50);
        let o = OwnerClass::Ordinary;
        let r = Stage::ReassemblyBytes;
        let full = l.try_acquire(r, &addr(1), &o, 50).unwrap();
        assert!(l.try_acquire(r, &addr(2), &o, 10).is_err());
        // Releasing a session-bound charge does not make room for sessionless ones.
        let sb = l
            .try_acquire(r, &addr(3), &OwnerClass::SessionBound, 10)
            .unwrap();
        drop(sb);
        assert!(l.try_acquire(r, &addr(2), &o, 10).is_err());
        // Releasing the ordinary charge does, also from another thread.
        std::thread::spawn(move || drop(full)).join().unwrap();
        assert_eq!(l.without_session_usage(r), 0);
        let again = l.try_acquire(r, &addr(2), &o, 50).unwrap();
        assert_eq!(again.amount(), 50);
        assert_eq!(l.without_session_usage(r), 50);
        drop(again);
        assert_eq!(l.without_session_usage(r), 0);
        // Zero-amount leases count nothing.
        let z = l.try_acquire(r, &addr(2), &o, 0).unwrap();
        drop(z);
        assert_eq!(l.without_session_usage(r), 0);
        // Without the sub-limit, ordinary charges are not counted at all.
        let cap = StageCapacity {
            total: 100,
            shared: 100,
            owner_limit: 100,
            ..StageCapacity::default()
        };
        let plain = IsolationLimiter::new([(r, cap)], 100);
        let all = plain.try_acquire(r, &addr(1), &o, 100).unwrap();
        assert_eq!(plain.without_session_usage(r), 0);
        drop(all);
    }

    #[test]
    fn unknown_or_mismatched_trusted_owner_is_invalid() {
        let l = limiter(balanced_connection(8), 100);
        let x = trusted("other");
        let e = l
            .try_acquire(Stage::Connection, &x, &OwnerClass::Trusted(x.clone()), 1)
            .unwrap_err();
        assert_eq!(e.reason, RejectReason::InvalidOwner);
        let p = trusted("plant");
        let e = l
            .try_acquire(Stage::Connection, &addr(1), &OwnerClass::Trusted(p), 1)
            .unwrap_err();
        assert_eq!(e.reason, RejectReason::InvalidOwner);
        assert_eq!(
            l.rejections(Stage::Connection, RejectReason::InvalidOwner),
            2
        );
        assert_eq!(l.usage(Stage::Connection), 0);
    }

    #[test]
    fn owner_table_full_keeps_entries_for_protected_and_trusted() {
        // max 5 entries: bootstrap + reconnect + trusted "plant" kept back -> 2 general.
        let cap = StageCapacity {
            total: 100,
            shared: 97,
            bootstrap: 1,
            reconnect: 1,
            control: 0,
            trusted: vec![TrustedCapacity {
                key: trusted("plant"),
                reserved: 1,
                hard_limit: 10,
            }],
            owner_limit: 10,
            without_session: None,
        };
        let l = limiter(cap, 5);
        let o = OwnerClass::Ordinary;
        let a1 = l.try_acquire(Stage::Connection, &addr(1), &o, 1).unwrap();
        let _a2 = l.try_acquire(Stage::Connection, &addr(2), &o, 1).unwrap();
        // An existing owner can still add charges.
        let _a1b = l.try_acquire(Stage::Connection, &addr(1), &o, 1).unwrap();
        let e = l
            .try_acquire(Stage::Connection, &addr(3), &o, 1)
            .unwrap_err();
        assert_eq!(e.reason, RejectReason::OwnerTableFull);
        // Protected classes and the trusted owner still get entries.
        let b = l
            .try_acquire(Stage::Connection, &addr(4), &OwnerClass::Bootstrap, 1)
            .unwrap();
        let _r = l
            .try_acquire(Stage::Connection, &addr(5), &OwnerClass::Reconnect, 1)
            .unwrap();
        let p = trusted("plant");
        let _t = l
            .try_acquire(Stage::Connection, &p, &OwnerClass::Trusted(p.clone()), 1)
            .unwrap();
        assert_eq!(l.tracked_owner_count(), 5);
        // The bootstrap class's kept entry is in use: a second bootstrap owner
        // needs a general entry, and there is none.
        assert_eq!(
            l.try_acquire(Stage::Connection, &addr(6), &OwnerClass::Bootstrap, 1)
                .unwrap_err()
                .reason,
            RejectReason::OwnerTableFull
        );
        // Releasing the bootstrap owner frees the kept entry for the next one.
        drop(b);
        let _b2 = l
            .try_acquire(Stage::Connection, &addr(6), &OwnerClass::Bootstrap, 1)
            .unwrap();
        // An ordinary owner leaving frees a general entry only once all its
        // charges are gone.
        drop(a1);
        assert!(l.try_acquire(Stage::Connection, &addr(3), &o, 1).is_err());
        drop(_a1b);
        assert!(l.try_acquire(Stage::Connection, &addr(3), &o, 1).is_ok());
        assert_eq!(
            l.rejections(Stage::Connection, RejectReason::OwnerTableFull),
            3
        );
    }

    #[test]
    fn owner_table_is_shared_across_stages() {
        let cap = StageCapacity {
            total: 10,
            shared: 10,
            owner_limit: 10,
            ..StageCapacity::default()
        };
        let l = IsolationLimiter::new(
            [(Stage::Connection, cap.clone()), (Stage::RequestQueue, cap)],
            1,
        );
        let c = l
            .try_acquire(Stage::Connection, &addr(1), &OwnerClass::Ordinary, 1)
            .unwrap();
        let q = l
            .try_acquire(Stage::RequestQueue, &addr(1), &OwnerClass::Ordinary, 1)
            .unwrap();
        assert_eq!(l.tracked_owner_count(), 1);
        assert_eq!(
            l.try_acquire(Stage::RequestQueue, &addr(2), &OwnerClass::Ordinary, 1)
                .unwrap_err(),
            Rejection {
                stage: Stage::RequestQueue,
                reason: RejectReason::OwnerTableFull
            }
        );
        drop(c);
        assert_eq!(l.tracked_owner_count(), 1);
        drop(q);
        assert_eq!(l.tracked_owner_count(), 0);
        // Unconfigured stages refuse everything.
        assert_eq!(
            l.try_acquire(Stage::Handshake, &addr(1), &OwnerClass::Ordinary, 1)
                .unwrap_err()
                .reason,
            RejectReason::Capacity
        );
        let snap = l.snapshot();
        assert_eq!(snap.usage.len(), STAGE_COUNT);
        assert_eq!(snap.rejections.len(), STAGE_COUNT * REASON_COUNT);
        assert!(snap
            .rejections
            .contains(&(Stage::Handshake, RejectReason::Capacity, 1)));
        assert!(snap
            .rejections
            .contains(&(Stage::RequestQueue, RejectReason::OwnerTableFull, 1)));
    }

    #[test]
    fn rate_limiter_burst_and_refill() {
        let t0 = Instant::now();
        let mut r = ConnectionRateLimiter::new(10, 20, &RateProtection::none(), t0);
        let o = OwnerClass::Ordinary;
        for _ in 0..20 {
            assert_eq!(r.try_acquire(&o, t0), Ok(TokenSource::Shared));
        }
        assert_eq!(r.try_acquire(&o, t0), Err(RateRejection::Exhausted));
        // 10/s: one token every 100 ms.
        assert!(r.try_acquire(&o, t0 + Duration::from_millis(99)).is_err());
        assert!(r.try_acquire(&o, t0 + Duration::from_millis(100)).is_ok());
        assert!(r.try_acquire(&o, t0 + Duration::from_millis(150)).is_err());
        assert_eq!(r.shared_tokens(t0 + Duration::from_millis(700)), 6);
        // Refill never exceeds the burst.
        assert_eq!(r.shared_tokens(t0 + Duration::from_secs(3600)), 20);
    }

    #[test]
    fn rate_limiter_protected_tokens() {
        let t0 = Instant::now();
        let p = trusted("plant");
        let protection = RateProtection {
            bootstrap: true,
            reconnect: true,
            trusted: vec![p.clone()],
        };
        // 13/s, burst 13: 10 shared + 3 protected partitions of 1.
        let mut r = ConnectionRateLimiter::new(13, 13, &protection, t0);
        let o = OwnerClass::Ordinary;
        for _ in 0..10 {
            assert!(r.try_acquire(&o, t0).is_ok());
        }
        // Shared traffic cannot take protected tokens.
        assert_eq!(r.try_acquire(&o, t0), Err(RateRejection::Exhausted));
        assert_eq!(
            r.try_acquire(&OwnerClass::Control, t0),
            Err(RateRejection::Exhausted)
        );
        // Each protected partition has one token.
        let tp = OwnerClass::Trusted(p.clone());
        assert_eq!(r.try_acquire(&tp, t0), Ok(TokenSource::Protected));
        assert_eq!(r.try_acquire(&tp, t0), Err(RateRejection::Exhausted));
        assert_eq!(
            r.try_acquire(&OwnerClass::Bootstrap, t0),
            Ok(TokenSource::Protected)
        );
        assert_eq!(
            r.try_acquire(&OwnerClass::Reconnect, t0),
            Ok(TokenSource::Protected)
        );
        assert_eq!(
            r.try_acquire(&OwnerClass::Reconnect, t0),
            Err(RateRejection::Exhausted)
        );
        // Unknown trusted owners are refused, not granted shared tokens.
        assert_eq!(
            r.try_acquire(&OwnerClass::Trusted(trusted("x")), t0),
            Err(RateRejection::InvalidOwner)
        );
        // After one second: protected partitions refill 1, shared 10.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(r.try_acquire(&tp, t1), Ok(TokenSource::Protected));
        // Protected traffic then uses available shared tokens.
        assert_eq!(r.try_acquire(&tp, t1), Ok(TokenSource::Shared));
        assert_eq!(r.shared_tokens(t1), 9);
        // Refill of protected partitions is capped at one token of burst.
        let t2 = t1 + Duration::from_secs(10);
        assert_eq!(
            r.try_acquire(&OwnerClass::Bootstrap, t2),
            Ok(TokenSource::Protected)
        );
        assert_eq!(
            r.try_acquire(&OwnerClass::Bootstrap, t2),
            Ok(TokenSource::Shared)
        );
    }
}
