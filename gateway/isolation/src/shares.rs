//! Weighted shares of the server's request pipeline, enforced where a
//! connection reads (fair scheduling only).
//!
//! The fair scheduler ([`crate::scheduler`]) can only choose among requests
//! that are already decoded and queued. Most of a cheap request's cost is
//! spent before that (socket read, chunk and request decoding) and after it
//! (response encoding), on the connection's own task, so an owner with four
//! times the connections would get four times the CPU. This table closes
//! that gap: an owner may have at most its *share* of requests in the
//! server (from the read that produced them until their response is
//! encoded); beyond that its connections stop reading, and the excess waits
//! in its own sockets.
//!
//! An owner's share is `reserved + ⌈capacity × weight / active weight⌉`,
//! where `capacity` is the shared RequestExecution capacity of the plan,
//! `reserved` the owner's own RequestExecution reservation (trusted owners)
//! and the active weight the sum of the weights of owners that have requests
//! in the server or a connection waiting, or had one within the last
//! [`LINGER`]. A lone owner may use the whole capacity; idle owners bank
//! nothing. The linger keeps a client that is between two requests (its
//! response on the wire, the next request not yet sent) from losing its
//! share to a busier owner at every round trip. Held Publish requests are
//! not counted (they wait for notifications, not for the server).
//!
//! Plain data: the caller supplies a waker value `W` per owner (the server
//! uses a notification handle) and is told whom to wake on every release.

use std::collections::VecDeque;

use crate::FastMap;
use std::time::{Duration, Instant};

use crate::owner::OwnerKey;

/// How long an owner that has nothing in the server keeps its share.
pub const LINGER: Duration = Duration::from_millis(20);

/// What a read attempt may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim<W> {
    /// The owner is under its share: one request may enter. Release it with
    /// [`PipelineShares::release`].
    Granted,
    /// The owner is at its share: wait on `W` and try again when woken. The
    /// waiter is counted until [`PipelineShares::stop_waiting`].
    Wait(W),
}

#[derive(Debug)]
struct Flow<W> {
    weight: u64,
    reserved: u64,
    inflight: u64,
    waiting: u64,
    waker: W,
    /// When the owner last became idle (None while active).
    idle_since: Option<Instant>,
}

impl<W> Flow<W> {
    fn is_idle(&self) -> bool {
        self.inflight == 0 && self.waiting == 0
    }
}

/// Per-owner in-pipeline counts and shares. Entries exist only for owners
/// with requests in the server or waiting connections, so the table is
/// bounded by the number of connections.
#[derive(Debug)]
pub struct PipelineShares<W> {
    capacity: u64,
    active_weight: u64,
    flows: FastMap<OwnerKey, Flow<W>>,
    /// Owners that became idle, oldest first (stale marks are skipped).
    idle: VecDeque<(Instant, OwnerKey)>,
}

impl<W: Clone + Default> PipelineShares<W> {
    /// A table dividing `capacity` requests (at least 1) between owners.
    pub fn new(capacity: u64) -> PipelineShares<W> {
        PipelineShares {
            capacity: capacity.max(1),
            active_weight: 0,
            flows: FastMap::default(),
            idle: VecDeque::new(),
        }
    }

    /// The shared capacity divided.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Owners with requests in the server or waiting connections, or that
    /// had them within [`LINGER`].
    pub fn active_owners(&self) -> usize {
        self.flows.len()
    }

    /// Requests `owner` has in the server.
    pub fn inflight(&self, owner: &OwnerKey) -> u64 {
        self.flows.get(owner).map_or(0, |f| f.inflight)
    }

    /// The share `owner` may have in the server right now (0 if idle).
    pub fn share(&self, owner: &OwnerKey) -> u64 {
        self.flows.get(owner).map_or(0, |f| self.share_of(f))
    }

    fn share_of(&self, f: &Flow<W>) -> u64 {
        let active = self.active_weight.max(f.weight).max(1);
        // Rounded up: every active owner gets at least one, and small
        // capacities keep the weights' ratio (4 split 4:1 is 4 and 1, not
        // 3 and 1). The sum may exceed the capacity by less than one per
        // owner; execution slots stay the hard limit.
        let fair = self
            .capacity
            .saturating_mul(f.weight)
            .div_ceil(active)
            .max(1);
        f.reserved.saturating_add(fair)
    }

    fn entry(&mut self, owner: &OwnerKey, weight: u32, reserved: u64) -> &mut Flow<W> {
        let weight = u64::from(weight.max(1));
        if !self.flows.contains_key(owner) {
            self.active_weight += weight;
        }
        let flow = self.flows.entry(owner.clone()).or_insert_with(|| Flow {
            weight,
            reserved,
            inflight: 0,
            waiting: 0,
            waker: W::default(),
            idle_since: None,
        });
        flow.idle_since = None;
        if flow.weight != weight {
            // A live weight change: keep the active sum consistent.
            self.active_weight = self.active_weight - flow.weight + weight;
            flow.weight = weight;
        }
        flow.reserved = reserved;
        flow
    }

    /// Called when a connection of `owner` (scheduling `weight`, own
    /// RequestExecution reservation `reserved`) has bytes to read.
    pub fn try_claim(
        &mut self,
        now: Instant,
        owner: &OwnerKey,
        weight: u32,
        reserved: u64,
    ) -> Claim<W> {
        // Wake-ups from expired owners are not needed here: the caller is
        // about to be told its own share.
        let _ = self.expire(now);
        self.entry(owner, weight, reserved);
        let (inflight, share) = match self.flows.get(owner) {
            Some(f) => (f.inflight, self.share_of(f)),
            None => (0, 1),
        };
        match self.flows.get_mut(owner) {
            Some(f) if inflight < share => {
                f.inflight += 1;
                Claim::Granted
            }
            Some(f) => {
                f.waiting += 1;
                Claim::Wait(f.waker.clone())
            }
            None => Claim::Granted,
        }
    }

    /// Counts one more request of `owner` in the server without asking
    /// (a second request decoded from the same read). Released like a grant.
    pub fn add(&mut self, owner: &OwnerKey, weight: u32, reserved: u64) {
        self.entry(owner, weight, reserved).inflight += 1;
    }

    /// A waiting connection of `owner` was woken (or went away). Returns
    /// the wakers to signal: the owner's own when another of its
    /// connections waits and there is room (so a wake-up consumed by a
    /// connection that closed is passed on), and every waiting owner's if
    /// this owner became idle.
    pub fn stop_waiting(&mut self, now: Instant, owner: &OwnerKey) -> Vec<W> {
        let mut wake = self.expire(now);
        if let Some(f) = self.flows.get_mut(owner) {
            f.waiting = f.waiting.saturating_sub(1);
        }
        if let Some(f) = self.flows.get(owner) {
            if f.waiting > 0 && f.inflight < self.share_of(f) {
                wake.push(f.waker.clone());
            }
        }
        self.mark_if_idle(now, owner);
        wake
    }

    /// One request of `owner` left the server (its response was encoded,
    /// it was refused, or it parked). Returns the wakers to signal: the
    /// owner's own if it has waiters and is now under its share, and every
    /// waiting owner's if this owner became idle (their shares grew).
    pub fn release(&mut self, now: Instant, owner: &OwnerKey) -> Vec<W> {
        let mut wake = self.expire(now);
        if let Some(f) = self.flows.get_mut(owner) {
            f.inflight = f.inflight.saturating_sub(1);
        }
        if let Some(f) = self.flows.get(owner) {
            if f.waiting > 0 && f.inflight < self.share_of(f) {
                wake.push(f.waker.clone());
            }
        }
        self.mark_if_idle(now, owner);
        wake
    }

    /// Starts the linger of an owner that has nothing left in the server.
    fn mark_if_idle(&mut self, now: Instant, owner: &OwnerKey) {
        if let Some(f) = self.flows.get_mut(owner) {
            if f.is_idle() && f.idle_since.is_none() {
                f.idle_since = Some(now);
                self.idle.push_back((now, owner.clone()));
            }
        }
    }

    /// Removes owners idle for longer than [`LINGER`]; when any left, the
    /// waiting owners' shares grew, so their wakers are returned.
    pub fn expire(&mut self, now: Instant) -> Vec<W> {
        let mut removed = false;
        while let Some((since, _)) = self.idle.front() {
            if now.saturating_duration_since(*since) < LINGER {
                break;
            }
            let Some((since, owner)) = self.idle.pop_front() else {
                break;
            };
            // A mark is stale if the owner became active again since.
            if self
                .flows
                .get(&owner)
                .is_some_and(|f| f.idle_since == Some(since))
            {
                if let Some(f) = self.flows.remove(&owner) {
                    self.active_weight = self.active_weight.saturating_sub(f.weight);
                    removed = true;
                }
            }
        }
        if !removed {
            return Vec::new();
        }
        self.flows
            .values()
            .filter(|f| f.waiting > 0)
            .map(|f| f.waker.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn owner(n: u8) -> OwnerKey {
        OwnerKey::from_addr(IpAddr::V4(Ipv4Addr::new(127, 0, 0, n)))
    }

    type Table = PipelineShares<u8>;

    fn grants(t: &mut Table, now: Instant, o: &OwnerKey, w: u32, tries: usize) -> usize {
        (0..tries)
            .filter(|_| t.try_claim(now, o, w, 0) == Claim::Granted)
            .count()
    }

    #[test]
    fn a_lone_owner_may_use_the_whole_capacity() {
        let now = Instant::now();
        let mut t = Table::new(8);
        let a = owner(2);
        assert_eq!(grants(&mut t, now, &a, 1, 20), 8);
        assert_eq!(t.inflight(&a), 8);
    }

    #[test]
    fn equal_weights_split_the_capacity_evenly() {
        let now = Instant::now();
        let mut t = Table::new(8);
        let (a, b) = (owner(2), owner(3));
        // B arrives first and takes everything it may while alone.
        assert_eq!(grants(&mut t, now, &b, 1, 32), 8);
        // A arrives: both are active, each share is 4; A is under it.
        assert_eq!(grants(&mut t, now, &a, 1, 8), 4);
        assert_eq!(t.share(&a), 4);
        assert_eq!(t.share(&b), 4);
        // B drains back below its share before it may read again.
        for _ in 0..4 {
            t.release(now, &b);
        }
        assert_eq!(t.try_claim(now, &b, 1, 0), Claim::Wait(0));
        t.stop_waiting(now, &b);
        t.release(now, &b);
        assert_eq!(t.try_claim(now, &b, 1, 0), Claim::Granted);
    }

    #[test]
    fn weight_four_gets_four_fifths() {
        let now = Instant::now();
        let mut t = Table::new(10);
        let (a, b) = (owner(2), owner(3));
        t.try_claim(now, &b, 1, 0);
        t.try_claim(now, &a, 4, 0);
        assert_eq!(t.share(&a), 8);
        assert_eq!(t.share(&b), 2);
    }

    #[test]
    fn small_capacities_keep_the_ratio_of_the_weights() {
        let now = Instant::now();
        let mut t = Table::new(4);
        let (a, b) = (owner(2), owner(3));
        t.try_claim(now, &b, 1, 0);
        t.try_claim(now, &a, 4, 0);
        // 4 x 4/5 = 3.2 and 4 x 1/5 = 0.8, rounded up: 4 and 1 (80 %).
        assert_eq!(t.share(&a), 4);
        assert_eq!(t.share(&b), 1);
    }

    #[test]
    fn every_active_owner_gets_at_least_one_and_its_reservation() {
        let now = Instant::now();
        let mut t = Table::new(2);
        for o in (2..12).map(owner) {
            assert_eq!(t.try_claim(now, &o, 1, 0), Claim::Granted, "{o:?}");
        }
        let trusted = owner(200);
        // One fair turn like everyone else, plus its own reservation of 2.
        let granted = (0..5)
            .filter(|_| t.try_claim(now, &trusted, 1, 2) == Claim::Granted)
            .count();
        assert_eq!(granted, 3);
        assert_eq!(t.share(&trusted), 3);
    }

    #[test]
    fn an_idle_owner_keeps_its_share_for_the_linger_then_leaves() {
        let t0 = Instant::now();
        let mut t = Table::new(4);
        let (a, b) = (owner(2), owner(3));
        assert_eq!(t.try_claim(t0, &a, 1, 0), Claim::Granted);
        assert_eq!(grants(&mut t, t0, &b, 1, 4), 2);
        // A's only request leaves: A is between two requests, B still waits
        // at its share of 2 and is not woken.
        assert_eq!(t.try_claim(t0, &b, 1, 0), Claim::Wait(0));
        assert!(t.release(t0, &a).is_empty());
        assert_eq!(t.share(&b), 2);
        // A comes back within the linger: its share is still there.
        let soon = t0 + LINGER / 2;
        assert_eq!(t.try_claim(soon, &a, 1, 0), Claim::Granted);
        assert!(t.release(soon, &a).is_empty());
        // Past the linger A leaves and the waiting B is woken to a share of 4.
        let later = soon + LINGER;
        assert_eq!(t.expire(later), vec![0]);
        assert_eq!(t.active_owners(), 1);
        assert_eq!(t.share(&b), 4);
        t.stop_waiting(later, &b);
        assert_eq!(t.try_claim(later, &b, 1, 0), Claim::Granted);
    }

    #[test]
    fn release_wakes_the_owner_under_its_share() {
        let now = Instant::now();
        let mut t = Table::new(2);
        let (a, b) = (owner(2), owner(3));
        assert_eq!(t.try_claim(now, &a, 1, 0), Claim::Granted);
        assert_eq!(t.try_claim(now, &b, 1, 0), Claim::Granted);
        // Both at share 1: each waits.
        assert!(matches!(t.try_claim(now, &a, 1, 0), Claim::Wait(_)));
        assert!(matches!(t.try_claim(now, &b, 1, 0), Claim::Wait(_)));
        // A's request leaves: A's waiter is woken, B's is not.
        assert_eq!(t.release(now, &a).len(), 1);
    }

    #[test]
    fn a_wake_up_taken_by_a_closing_connection_is_passed_on() {
        let now = Instant::now();
        let mut t = Table::new(1);
        let a = owner(2);
        assert_eq!(t.try_claim(now, &a, 1, 0), Claim::Granted);
        assert!(matches!(t.try_claim(now, &a, 1, 0), Claim::Wait(_)));
        assert!(matches!(t.try_claim(now, &a, 1, 0), Claim::Wait(_)));
        // The request leaves: one waiter is woken, but its connection closes.
        assert_eq!(t.release(now, &a).len(), 1);
        assert_eq!(
            t.stop_waiting(now, &a).len(),
            1,
            "the other waiter must learn of the room"
        );
        t.stop_waiting(now, &a);
        assert_eq!(t.try_claim(now, &a, 1, 0), Claim::Granted);
    }

    #[test]
    fn idle_owners_leave_the_table() {
        let now = Instant::now();
        let mut t = Table::new(4);
        let a = owner(2);
        for _ in 0..3 {
            t.try_claim(now, &a, 1, 0);
        }
        for _ in 0..3 {
            t.release(now, &a);
        }
        assert_eq!(t.active_owners(), 1, "lingering");
        t.expire(now + LINGER);
        assert_eq!(t.active_owners(), 0);
        assert_eq!(t.share(&a), 0);
        // Releasing an unknown owner is harmless.
        assert!(t.release(now + LINGER, &a).is_empty());
    }
}
