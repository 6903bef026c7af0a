//! The weighted fair scheduler over owners (the RequestExecution stage).
//!
//! A plain data structure: decoded requests are pushed with their owner and
//! the owner's weight; when a worker is free, the dispatcher pops the next
//! request. In [`SchedulingMode::Fair`] the scheduler gives backlogged owners
//! turns in proportion to their weights (stride scheduling / start-time fair
//! queuing on a virtual clock: each turn advances the owner's pass by
//! `STRIDE / weight`, the backlogged eligible owner with the lowest pass goes
//! next). A lone owner gets every turn (work-conserving). An owner returning
//! from idle starts at the current virtual time, so idling banks no credit,
//! and emptying its queue between requests does not reset its pass either.
//!
//! In [`SchedulingMode::Fifo`] (fair scheduling off) there is one queue in
//! arrival order; when the request at the front cannot obtain execution
//! capacity, later requests do not overtake it.
//!
//! Admission of the popped request (e.g. a RequestExecution lease) is done by
//! a caller-supplied closure inside [`FairScheduler::pop_with`], so an owner
//! at its execution hard limit is not eligible while others are. The queue is
//! bounded: [`FairScheduler::push`] hands the request back when full, and the
//! caller answers BadServerTooBusy. Count and byte charges of queued requests
//! (RequestQueue, RequestQueueBytes) are leases from the provider that travel
//! with the item. Time is an argument (`now`), used for the queued duration.

use std::collections::{BTreeSet, VecDeque};

use crate::FastMap;
use std::time::{Duration, Instant};

use crate::owner::OwnerKey;

/// Virtual-time units for one turn at weight 1 (divisible by 1..=16).
const STRIDE: u128 = 720_720 * 1_000;

/// Largest weight honoured; larger weights are clamped (0 counts as 1).
pub const MAX_WEIGHT: u32 = 10_000;

/// How queued requests are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedulingMode {
    /// Weighted turns between owners.
    Fair,
    /// One queue in arrival order with head-of-line blocking.
    Fifo,
}

/// The queue was full; the request is handed back (answer BadServerTooBusy).
#[derive(Debug, PartialEq, Eq)]
pub struct QueueFull<T>(pub T);

/// A request taken from the queue.
#[derive(Debug)]
pub struct Dispatch<T, A = ()> {
    /// The owner it was queued for.
    pub owner: OwnerKey,
    /// The request.
    pub item: T,
    /// What the admission closure returned (e.g. the execution lease).
    pub admitted: A,
    /// How long it waited in the queue.
    pub queued_for: Duration,
}

#[derive(Debug)]
struct Queued<T> {
    at: Instant,
    item: T,
}

#[derive(Debug)]
struct OwnerQueue<T> {
    items: VecDeque<Queued<T>>,
    weight: u32,
    pass: u128,
    /// Tie-breaker: order in which the owner became backlogged.
    order: u64,
}

fn clamp_weight(w: u32) -> u32 {
    w.clamp(1, MAX_WEIGHT)
}

/// The bounded weighted fair (or FIFO) request queue. Not thread-safe by
/// itself: the dispatcher wraps it (e.g. in a mutex with a notify).
#[derive(Debug)]
pub struct FairScheduler<T> {
    mode: SchedulingMode,
    capacity: usize,
    len: usize,
    seq: u64,
    // Fair mode.
    owners: FastMap<OwnerKey, OwnerQueue<T>>,
    ready: BTreeSet<(u128, u64, OwnerKey)>,
    vtime: u128,
    /// Pass of owners that went idle ahead of virtual time.
    idle: FastMap<OwnerKey, u128>,
    idle_prune_at: usize,
    // Fifo mode.
    fifo: VecDeque<(OwnerKey, Queued<T>)>,
}

impl<T> FairScheduler<T> {
    /// An empty scheduler holding at most `capacity` requests.
    pub fn new(mode: SchedulingMode, capacity: usize) -> FairScheduler<T> {
        FairScheduler {
            mode,
            capacity,
            len: 0,
            seq: 0,
            owners: FastMap::default(),
            ready: BTreeSet::new(),
            vtime: 0,
            idle: FastMap::default(),
            idle_prune_at: 64,
            fifo: VecDeque::new(),
        }
    }

    /// The ordering mode.
    pub fn mode(&self) -> SchedulingMode {
        self.mode
    }

    /// Most requests held at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Requests currently queued.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Requests currently queued for `owner`.
    pub fn owner_len(&self, owner: &OwnerKey) -> usize {
        match self.mode {
            SchedulingMode::Fair => self.owners.get(owner).map_or(0, |q| q.items.len()),
            SchedulingMode::Fifo => self.fifo.iter().filter(|(o, _)| o == owner).count(),
        }
    }

    /// Owners with queued requests (fair mode; in fifo mode, 0).
    pub fn backlogged_owners(&self) -> usize {
        self.owners.len()
    }

    /// Queues `item` for `owner` with the owner's scheduling `weight` (the
    /// latest weight given for an owner applies). Called after the request
    /// was decoded, classified and charged to RequestQueue(+Bytes). Returns
    /// the item when the queue is full.
    pub fn push(
        &mut self,
        now: Instant,
        owner: &OwnerKey,
        weight: u32,
        item: T,
    ) -> Result<(), QueueFull<T>> {
        if self.len >= self.capacity {
            return Err(QueueFull(item));
        }
        self.len += 1;
        let queued = Queued { at: now, item };
        match self.mode {
            SchedulingMode::Fifo => self.fifo.push_back((owner.clone(), queued)),
            SchedulingMode::Fair => {
                if let Some(q) = self.owners.get_mut(owner) {
                    q.weight = clamp_weight(weight);
                    q.items.push_back(queued);
                } else {
                    let banked = self.idle.remove(owner).unwrap_or(0);
                    let pass = banked.max(self.vtime);
                    self.seq += 1;
                    let order = self.seq;
                    self.ready.insert((pass, order, owner.clone()));
                    self.owners.insert(
                        owner.clone(),
                        OwnerQueue {
                            items: VecDeque::from([queued]),
                            weight: clamp_weight(weight),
                            pass,
                            order,
                        },
                    );
                }
            }
        }
        Ok(())
    }

    /// Takes the next request, with no admission check.
    pub fn pop(&mut self, now: Instant) -> Option<Dispatch<T>> {
        self.pop_with(now, |_, _| Some(()))
    }

    /// Takes the next request that `admit` accepts. `admit` is called with
    /// the owner and the request at the head of that owner's queue (fair) or
    /// of the single queue (fifo), and returns `Some` (e.g. a RequestExecution
    /// lease) when it can start now. In fair mode, owners whose head is
    /// refused are skipped for this turn (without banking credit); in fifo
    /// mode a refused head blocks everything behind it. Returns `None` when
    /// nothing can start.
    pub fn pop_with<A>(
        &mut self,
        now: Instant,
        mut admit: impl FnMut(&OwnerKey, &T) -> Option<A>,
    ) -> Option<Dispatch<T, A>> {
        match self.mode {
            SchedulingMode::Fifo => {
                let (owner, head) = self.fifo.front()?;
                let admitted = admit(owner, &head.item)?;
                let (owner, q) = self.fifo.pop_front()?;
                self.len -= 1;
                Some(Dispatch {
                    owner,
                    item: q.item,
                    admitted,
                    queued_for: now.saturating_duration_since(q.at),
                })
            }
            SchedulingMode::Fair => self.pop_fair(now, &mut admit),
        }
    }

    fn pop_fair<A>(
        &mut self,
        now: Instant,
        admit: &mut impl FnMut(&OwnerKey, &T) -> Option<A>,
    ) -> Option<Dispatch<T, A>> {
        let mut skipped = Vec::new();
        let mut chosen = None;
        for key in &self.ready {
            let owner = &key.2;
            let Some(head) = self.owners.get(owner).and_then(|q| q.items.front()) else {
                continue;
            };
            match admit(owner, &head.item) {
                Some(a) => {
                    chosen = Some((key.clone(), a));
                    break;
                }
                None => skipped.push(key.clone()),
            }
        }
        let ((pass, order, owner), admitted) = chosen?;
        self.vtime = self.vtime.max(pass);
        // Skipped owners are treated like idle ones: no credit for the turn.
        for k in skipped {
            if k.0 < self.vtime && self.ready.remove(&k) {
                if let Some(q) = self.owners.get_mut(&k.2) {
                    q.pass = self.vtime;
                }
                self.ready.insert((self.vtime, k.1, k.2));
            }
        }
        self.ready.remove(&(pass, order, owner.clone()));
        let q = self.owners.get_mut(&owner)?;
        let queued = q.items.pop_front()?;
        q.pass = pass + STRIDE / u128::from(q.weight);
        if q.items.is_empty() {
            let next = q.pass;
            self.owners.remove(&owner);
            if next > self.vtime {
                self.idle.insert(owner.clone(), next);
            }
            self.prune_idle();
        } else {
            self.ready.insert((q.pass, q.order, owner.clone()));
        }
        self.len -= 1;
        Some(Dispatch {
            owner,
            item: queued.item,
            admitted,
            queued_for: now.saturating_duration_since(queued.at),
        })
    }

    /// Forgets idle owners whose banked pass the virtual clock has reached
    /// (they would start at virtual time anyway); amortized O(1).
    fn prune_idle(&mut self) {
        if self.idle.len() >= self.idle_prune_at {
            let vtime = self.vtime;
            self.idle.retain(|_, pass| *pass > vtime);
            self.idle_prune_at = (self.idle.len() * 2).max(64);
        }
    }

    /// Removes every queued request for which `remove` returns true (e.g.
    /// requests of a closed channel or cancelled requests) and returns them
    /// with their owners, in queue order per owner.
    pub fn remove_where(
        &mut self,
        mut remove: impl FnMut(&OwnerKey, &T) -> bool,
    ) -> Vec<(OwnerKey, T)> {
        let mut out = Vec::new();
        match self.mode {
            SchedulingMode::Fifo => {
                let mut keep = VecDeque::with_capacity(self.fifo.len());
                for (o, q) in self.fifo.drain(..) {
                    if remove(&o, &q.item) {
                        out.push((o, q.item));
                    } else {
                        keep.push_back((o, q));
                    }
                }
                self.fifo = keep;
            }
            SchedulingMode::Fair => {
                let mut emptied = Vec::new();
                for (o, q) in self.owners.iter_mut() {
                    let mut keep = VecDeque::with_capacity(q.items.len());
                    for it in q.items.drain(..) {
                        if remove(o, &it.item) {
                            out.push((o.clone(), it.item));
                        } else {
                            keep.push_back(it);
                        }
                    }
                    q.items = keep;
                    if q.items.is_empty() {
                        emptied.push(o.clone());
                    }
                }
                for o in emptied {
                    if let Some(q) = self.owners.remove(&o) {
                        self.ready.remove(&(q.pass, q.order, o.clone()));
                        if q.pass > self.vtime {
                            self.idle.insert(o, q.pass);
                        }
                    }
                }
            }
        }
        self.len -= out.len();
        out
    }

    /// Removes and returns everything (shutdown).
    pub fn drain(&mut self) -> Vec<(OwnerKey, T)> {
        self.remove_where(|_, _| true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::owner::OwnerClass;
    use crate::provider::{IsolationLimiter, Stage, StageCapacity};
    use std::net::{IpAddr, Ipv4Addr};

    fn addr(n: u8) -> OwnerKey {
        OwnerKey::from_addr(IpAddr::V4(Ipv4Addr::new(127, 0, 0, n)))
    }

    /// Both owners always backlogged (closed loop: each completed request is
    /// immediately replaced, like sessions issuing back-to-back reads).
    /// Returns the share of turns owner 1 got.
    fn closed_loop(wa: u32, depth_a: usize, wb: u32, depth_b: usize, pops: usize) -> f64 {
        let (a, b) = (addr(1), addr(2));
        let mut s = FairScheduler::new(SchedulingMode::Fair, 10_000);
        let mut now = Instant::now();
        for _ in 0..depth_a {
            s.push(now, &a, wa, 'a').unwrap();
        }
        for _ in 0..depth_b {
            s.push(now, &b, wb, 'b').unwrap();
        }
        let mut got_a = 0usize;
        for _ in 0..pops {
            now += Duration::from_micros(100);
            let d = s.pop(now).unwrap();
            if d.owner == a {
                got_a += 1;
                s.push(now, &a, wa, 'a').unwrap();
            } else {
                s.push(now, &b, wb, 'b').unwrap();
            }
        }
        got_a as f64 / pops as f64
    }

    #[test]
    fn equal_weights_get_equal_turns() {
        let share = closed_loop(1, 8, 1, 8, 10_000);
        assert!((share - 0.5).abs() < 0.05, "share {share}");
        // Owner B has four times as many requests outstanding (8 vs 32
        // sessions): turns are still shared per owner, not per request.
        let share = closed_loop(1, 8, 1, 32, 10_000);
        assert!((share - 0.5).abs() < 0.05, "share {share}");
    }

    #[test]
    fn weight_four_to_one_gets_eighty_percent() {
        let share = closed_loop(4, 8, 1, 32, 10_000);
        assert!((share - 0.8).abs() < 0.05, "share {share}");
        let share = closed_loop(1, 32, 4, 8, 10_000);
        assert!((share - 0.2).abs() < 0.05, "share {share}");
    }

    #[test]
    fn owner_that_empties_its_queue_every_turn_gains_nothing() {
        // A has a single request outstanding and re-queues it right after
        // each turn; its pass must survive the empty queue.
        let share = closed_loop(1, 1, 1, 32, 10_000);
        assert!((share - 0.5).abs() < 0.05, "share {share}");
    }

    #[test]
    fn idle_owner_banks_no_credit() {
        let (a, b) = (addr(1), addr(2));
        let mut s = FairScheduler::new(SchedulingMode::Fair, 10_000);
        let now = Instant::now();
        for _ in 0..1000 {
            s.push(now, &b, 1, ()).unwrap();
        }
        for _ in 0..500 {
            assert_eq!(s.pop(now).unwrap().owner, b);
        }
        // A arrives late: it alternates with B instead of taking 500 turns.
        for _ in 0..100 {
            s.push(now, &a, 1, ()).unwrap();
        }
        let a_turns = (0..20).filter(|_| s.pop(now).unwrap().owner == a).count();
        assert!((9..=11).contains(&a_turns), "a got {a_turns} of 20");
    }

    #[test]
    fn lone_owner_uses_all_capacity() {
        let a = addr(1);
        let mut s = FairScheduler::new(SchedulingMode::Fair, 100);
        let t0 = Instant::now();
        for i in 0..100 {
            s.push(t0, &a, 1, i).unwrap();
        }
        assert_eq!(s.push(t0, &a, 1, 100), Err(QueueFull(100)));
        let t1 = t0 + Duration::from_millis(5);
        let order: Vec<i32> = (0..100).map(|_| s.pop(t1).unwrap().item).collect();
        assert_eq!(order, (0..100).collect::<Vec<_>>());
        assert!(s.pop(t1).is_none());
        assert!(s.is_empty());
    }

    #[test]
    fn fifo_keeps_arrival_order_and_blocks_behind_head() {
        let (a, b) = (addr(1), addr(2));
        let mut s = FairScheduler::new(SchedulingMode::Fifo, 10);
        let t0 = Instant::now();
        s.push(t0, &a, 1, 1).unwrap();
        s.push(t0, &a, 1, 2).unwrap();
        s.push(t0 + Duration::from_millis(1), &b, 9, 3).unwrap();
        s.push(t0 + Duration::from_millis(2), &a, 1, 4).unwrap();
        assert_eq!(s.owner_len(&a), 3);
        // The head (owner a) cannot start: b's later request does not overtake.
        assert!(s.pop_with(t0, |o, _| (o != &a).then_some(())).is_none());
        assert_eq!(s.len(), 4);
        let d = s.pop(t0 + Duration::from_millis(10)).unwrap();
        assert_eq!((d.owner.clone(), d.item), (a.clone(), 1));
        assert_eq!(d.queued_for, Duration::from_millis(10));
        let rest: Vec<i32> = (0..3).map(|_| s.pop(t0).unwrap().item).collect();
        assert_eq!(rest, vec![2, 3, 4]);
    }

    #[test]
    fn fair_mode_skips_owner_at_its_execution_limit() {
        // RequestExecution: 4 shared workers, per-owner hard limit 2.
        let limiter = IsolationLimiter::new(
            [(
                Stage::RequestExecution,
                StageCapacity {
                    total: 4,
                    shared: 4,
                    owner_limit: 2,
                    ..StageCapacity::default()
                },
            )],
            16,
        );
        let (a, b) = (addr(1), addr(2));
        let mut s = FairScheduler::new(SchedulingMode::Fair, 100);
        let now = Instant::now();
        for i in 0..10 {
            s.push(now, &a, 1, i).unwrap();
        }
        s.push(now, &b, 1, 100).unwrap();
        let mut admit = |o: &OwnerKey, _: &i32| {
            limiter
                .try_acquire(Stage::RequestExecution, o, &OwnerClass::Ordinary, 1)
                .ok()
        };
        let running: Vec<_> = (0..4).filter_map(|_| s.pop_with(now, &mut admit)).collect();
        // a got its 2 workers, b got 1, nothing else may start for a.
        assert_eq!(running.len(), 3);
        assert_eq!(running.iter().filter(|d| d.owner == a).count(), 2);
        assert_eq!(running.iter().filter(|d| d.owner == b).count(), 1);
        assert_eq!(limiter.usage(Stage::RequestExecution), 3);
        // Finishing one of a's requests (dropping its lease) lets a continue.
        let mut running = running;
        let pos = running.iter().position(|d| d.owner == a).unwrap();
        drop(running.remove(pos));
        let d = s.pop_with(now, &mut admit).unwrap();
        assert_eq!(d.owner, a);
        assert_eq!(d.admitted.owner(), &a);
    }

    #[test]
    fn remove_where_and_drain() {
        let (a, b) = (addr(1), addr(2));
        for mode in [SchedulingMode::Fair, SchedulingMode::Fifo] {
            let mut s = FairScheduler::new(mode, 10);
            let now = Instant::now();
            for i in 0..4 {
                s.push(now, &a, 1, i).unwrap();
                s.push(now, &b, 1, 10 + i).unwrap();
            }
            let removed = s.remove_where(|o, _| o == &a);
            assert_eq!(removed.len(), 4);
            assert_eq!(s.len(), 4);
            assert_eq!(s.owner_len(&a), 0);
            assert_eq!(s.pop(now).unwrap().item, 10);
            assert_eq!(s.drain().len(), 3);
            assert!(s.is_empty());
            assert!(s.pop(now).is_none());
            // Usable after draining.
            s.push(now, &a, 1, 7).unwrap();
            assert_eq!(s.pop(now).unwrap().item, 7);
        }
    }
}
