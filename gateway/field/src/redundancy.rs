//! Client-side server selection for a redundant set of field servers
//! (reference HighAvailability.md, "ServiceLevel and load balancing" and
//! "Non-transparent failover modes and client actions"; .NET
//! `DefaultServerRedundancyHandler`).
//!
//! Plain data: the caller reads `ServerStatus.State`, `ServiceLevel` and
//! `EstimatedReturnTime` of each server of the set, keeps one
//! [`PeerStatus`] per server (in configuration order) and passes the current
//! time. These functions decide whether to fail over and to which server.
//!
//! Rules:
//! - ServiceLevel splits into the subranges of Part 4 Table 105:
//!   0 Maintenance, 1 NoData, 2..=199 Degraded, 200..=255 Healthy.
//! - Never fail over away from a current server that is reachable, Running
//!   and Healthy, even when a peer reports a higher level (no flapping).
//! - A server is selectable only when reachable, in state Running (unknown
//!   state is not selectable), with a known ServiceLevel, and not deferred
//!   for Maintenance.
//! - A Maintenance server (level 0) is deferred until its
//!   EstimatedReturnTime when it has one, otherwise until
//!   `maintenance_since + MAINTENANCE_DEFAULT_DEFER`. After that it is
//!   selectable, but as level 0 it only wins when nothing better exists.
//! - Candidates rank by subrange, then level; ties prefer the current
//!   server, then the lower index. NoData is therefore only chosen when no
//!   Degraded or Healthy peer is selectable.
//! - The first choice of a set whose servers are all connected at once
//!   ([`FirstSelection`]) waits until every server has reported its status
//!   or failed, at most a connect timeout after the set started: since a
//!   Healthy server is never left, choosing whichever answered first would
//!   keep the set on a lower-level server for good.

use std::time::{Duration, Instant};

use opcua_types::{DateTime, ServerState};

/// The ServiceLevel subranges of Part 4 Table 105, ordered worst to best.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Subrange {
    /// Level 0: the server is in maintenance; new clients should not
    /// connect and connected clients should leave until EstimatedReturnTime.
    Maintenance,
    /// Level 1: not operational for process data (status/diagnostics only).
    NoData,
    /// Levels 2..=199: partially operational; prefer any Healthy peer.
    Degraded,
    /// Levels 200..=255: fully operational; stay while it remains Healthy.
    Healthy,
}

/// The subrange of a ServiceLevel value. Called when ranking servers and
/// deciding whether the current one is still Healthy.
pub fn subrange(level: u8) -> Subrange {
    match level {
        0 => Subrange::Maintenance,
        1 => Subrange::NoData,
        2..=199 => Subrange::Degraded,
        _ => Subrange::Healthy,
    }
}

/// What the gateway knows about one server of the set (index =
/// configuration order). Updated by the caller after each connect, probe or
/// status read, and passed to [`should_failover`], [`select`] and
/// [`next_recheck`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerStatus {
    /// A session to it is up (or the last probe succeeded).
    pub reachable: bool,
    /// `ServerStatus.State`; `None` = not read yet.
    pub state: Option<ServerState>,
    /// `Server.ServiceLevel`; `None` = not read yet.
    pub service_level: Option<u8>,
    /// `Server.EstimatedReturnTime` (a null value maps to `None`).
    pub estimated_return_time: Option<DateTime>,
    /// When the caller first saw level 0 from this server (reset when the
    /// level leaves 0).
    pub maintenance_since: Option<DateTime>,
}

/// How long a Maintenance server without an EstimatedReturnTime is
/// deferred, counted from `maintenance_since`.
pub const MAINTENANCE_DEFAULT_DEFER: Duration = Duration::from_secs(60);

/// `t + d` without panicking (saturates at the end of OPC UA time).
fn add(t: DateTime, d: Duration) -> DateTime {
    let ticks = i64::try_from(d.as_nanos() / 100).unwrap_or(i64::MAX);
    DateTime::from(t.checked_ticks().saturating_add(ticks))
}

/// Until when a Maintenance server stays deferred, or `None` when it is not
/// deferred at `now` (not at level 0, or the deferral has run out).
///
/// With an EstimatedReturnTime the deferral ends there (a time in the past
/// ends it at once). Without one it ends `MAINTENANCE_DEFAULT_DEFER` after
/// `maintenance_since`; when the caller has not recorded that yet, level 0
/// is taken as first seen `now`.
fn deferred_until(p: &PeerStatus, now: DateTime) -> Option<DateTime> {
    if p.service_level != Some(0) {
        return None;
    }
    let until = match p.estimated_return_time.filter(|t| !t.is_null()) {
        Some(ert) => ert,
        None => add(
            p.maintenance_since.unwrap_or(now),
            MAINTENANCE_DEFAULT_DEFER,
        ),
    };
    (until > now).then_some(until)
}

/// Whether a server may be chosen at `now`: reachable, Running, with a known
/// ServiceLevel and not deferred for Maintenance. Called by [`select`] for
/// each candidate; usable by the caller to decide which peers to probe.
pub fn is_selectable(p: &PeerStatus, now: DateTime) -> bool {
    p.reachable
        && p.state == Some(ServerState::Running)
        && p.service_level.is_some()
        && deferred_until(p, now).is_none()
}

/// Whether the current server is still fine to stay on: reachable, Running
/// and Healthy.
fn is_fine(p: &PeerStatus) -> bool {
    p.reachable
        && p.state == Some(ServerState::Running)
        && p.service_level.map(subrange) == Some(Subrange::Healthy)
}

/// Whether failover away from the current server is warranted: it is
/// unreachable, not Running, or not Healthy (an unread state or level counts
/// as not Running / not Healthy, so read them before asking). Called after
/// each status refresh of the current server; when true, call [`select`].
/// `_now` is accepted for symmetry with [`select`]; the decision does not
/// depend on time.
pub fn should_failover(current: &PeerStatus, _now: DateTime) -> bool {
    !is_fine(current)
}

/// The server to use at `now`: `Some(current)` while the current server is
/// reachable, Running and Healthy; otherwise the best selectable server
/// (better subrange, then higher level; ties prefer the current server, then
/// the lower index), which may be the current one. `None` when nothing is
/// selectable (stay disconnected and re-check, see [`next_recheck`]).
/// Called when [`should_failover`] says so, when connecting initially
/// (`current = None`), and after refreshing peers' service levels.
pub fn select(peers: &[PeerStatus], current: Option<usize>, now: DateTime) -> Option<usize> {
    let current = current.filter(|&c| c < peers.len());
    if let Some(c) = current {
        if peers.get(c).is_some_and(is_fine) {
            return Some(c);
        }
    }
    // Rank key (higher is better): subrange, level, then "is current".
    peers
        .iter()
        .enumerate()
        .filter(|(_, p)| is_selectable(p, now))
        .filter_map(|(i, p)| {
            let level = p.service_level?;
            Some((i, (subrange(level), level, current == Some(i))))
        })
        // `max_by` returns the last of equal elements; iterate from the
        // highest index so that the lowest index wins ties.
        .rev()
        .max_by(|(_, a), (_, b)| a.cmp(b))
        .map(|(i, _)| i)
}

/// When a deferred Maintenance server may be considered again: the earliest
/// end of a Maintenance deferral among `peers` at `now`, or `None` when no
/// server is deferred. Called after [`select`] to schedule the next
/// re-check of the set.
pub fn next_recheck(peers: &[PeerStatus], now: DateTime) -> Option<DateTime> {
    peers.iter().filter_map(|p| deferred_until(p, now)).min()
}

/// Whether the caller has read both `ServerStatus.State` and
/// `ServiceLevel` of a server (both come with the first publish of its
/// status subscription). Used by [`FirstSelection`] to tell whether a
/// server has reported yet.
pub fn has_reported(p: &PeerStatus) -> bool {
    p.state.is_some() && p.service_level.is_some()
}

/// Holds back the first choice of the active server of a redundant set
/// whose servers are all connected at once (warm, hot and hot_merge), so the
/// set starts on its best server rather than on the first one to answer:
/// [`select`] never leaves a Healthy server, so a Healthy backup chosen
/// first would stay active for good.
///
/// The first selection may be made once every server has reported its
/// status ([`has_reported`]) or failed its first connect attempt, or once
/// the connect timeout has passed since the set started (then [`select`]
/// chooses among the servers that have reported). Once a server has been
/// chosen ([`FirstSelection::chosen`]) the rule no longer applies: later
/// selections, after a failover or a reconnect, follow [`select`] alone.
///
/// Plain data: the caller creates one when the set starts connecting,
/// asks [`FirstSelection::wait_until`] before each selection and wakes up at
/// the instant it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstSelection {
    /// When the wait ends even if a server has neither reported nor failed.
    deadline: Instant,
    /// A server has been chosen; the wait is over for good.
    done: bool,
}

impl FirstSelection {
    /// Called when the set starts connecting all its servers at `started`.
    /// `connect_timeout` (the bound of one connect attempt) bounds the
    /// wait: a server that has not reported by then is not waited for.
    pub fn new(started: Instant, connect_timeout: Duration) -> FirstSelection {
        FirstSelection {
            // An unrepresentable deadline (absurd timeout) waits for nobody.
            deadline: started.checked_add(connect_timeout).unwrap_or(started),
            done: false,
        }
    }

    /// Until when the first selection must still wait at `now`: `None` when
    /// [`select`] may choose now (a server was already chosen once, every
    /// server has reported or failed, or the deadline has passed);
    /// otherwise the deadline, at which the caller must ask again (and
    /// also whenever a peer's status changes or a link fails).
    ///
    /// `peers` are the set's servers in configuration order; `failed[i]`
    /// says that server `i`'s first connect attempt failed (or its first
    /// session was lost), so it is not waited for. A missing entry counts
    /// as not failed.
    pub fn wait_until(
        &self,
        peers: &[PeerStatus],
        failed: &[bool],
        now: Instant,
    ) -> Option<Instant> {
        if self.done || now >= self.deadline {
            return None;
        }
        let pending = peers
            .iter()
            .enumerate()
            .any(|(i, p)| !has_reported(p) && !failed.get(i).copied().unwrap_or(false));
        pending.then_some(self.deadline)
    }

    /// Called once a server has been chosen active: from then on
    /// [`FirstSelection::wait_until`] is always `None`.
    pub fn chosen(&mut self) {
        self.done = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> DateTime {
        DateTime::ymd_hms(2024, 5, 1, 12, 0, 0)
    }

    fn at(secs: u64) -> DateTime {
        add(t0(), Duration::from_secs(secs))
    }

    fn peer(level: u8) -> PeerStatus {
        PeerStatus {
            reachable: true,
            state: Some(ServerState::Running),
            service_level: Some(level),
            estimated_return_time: None,
            maintenance_since: None,
        }
    }

    fn maintenance(since: DateTime, ert: Option<DateTime>) -> PeerStatus {
        PeerStatus {
            maintenance_since: Some(since),
            estimated_return_time: ert,
            ..peer(0)
        }
    }

    #[test]
    fn subrange_boundaries() {
        assert_eq!(subrange(0), Subrange::Maintenance);
        assert_eq!(subrange(1), Subrange::NoData);
        assert_eq!(subrange(2), Subrange::Degraded);
        assert_eq!(subrange(199), Subrange::Degraded);
        assert_eq!(subrange(200), Subrange::Healthy);
        assert_eq!(subrange(255), Subrange::Healthy);
        assert!(Subrange::Maintenance < Subrange::NoData);
        assert!(Subrange::NoData < Subrange::Degraded);
        assert!(Subrange::Degraded < Subrange::Healthy);
    }

    #[test]
    fn should_failover_only_when_not_reachable_running_healthy() {
        let now = t0();
        assert!(!should_failover(&peer(200), now));
        assert!(!should_failover(&peer(255), now));
        assert!(should_failover(&peer(199), now));
        assert!(should_failover(&peer(2), now));
        assert!(should_failover(&peer(1), now));
        assert!(should_failover(&peer(0), now));
        let unreachable = PeerStatus {
            reachable: false,
            ..peer(255)
        };
        assert!(should_failover(&unreachable, now));
        let suspended = PeerStatus {
            state: Some(ServerState::Suspended),
            ..peer(255)
        };
        assert!(should_failover(&suspended, now));
        let unknown_state = PeerStatus {
            state: None,
            ..peer(255)
        };
        assert!(should_failover(&unknown_state, now));
        let unknown_level = PeerStatus {
            service_level: None,
            ..peer(255)
        };
        assert!(should_failover(&unknown_level, now));
    }

    #[test]
    fn no_failover_away_from_healthy_even_if_a_peer_is_better() {
        let now = t0();
        let peers = [peer(200), peer(255)];
        assert!(!should_failover(&peers[0], now));
        assert_eq!(select(&peers, Some(0), now), Some(0));
        // Initial connection (no current) takes the highest level.
        assert_eq!(select(&peers, None, now), Some(1));
    }

    #[test]
    fn restarted_server_back_to_healthy_does_not_pull_us_back() {
        let now = t0();
        // We failed over from 0 to 1; 0 restarted and is Healthy again at a
        // higher level.
        let peers = [peer(255), peer(210)];
        assert!(!should_failover(&peers[1], now));
        assert_eq!(select(&peers, Some(1), now), Some(1));
    }

    #[test]
    fn degraded_current_moves_to_a_healthy_peer() {
        let now = t0();
        let peers = [peer(199), peer(200)];
        assert!(should_failover(&peers[0], now));
        assert_eq!(select(&peers, Some(0), now), Some(1));
    }

    #[test]
    fn degraded_current_moves_only_to_a_strictly_higher_degraded_peer() {
        let now = t0();
        assert_eq!(select(&[peer(100), peer(150)], Some(0), now), Some(1));
        assert_eq!(select(&[peer(150), peer(150)], Some(0), now), Some(0));
        assert_eq!(select(&[peer(150), peer(150)], Some(1), now), Some(1));
        assert_eq!(select(&[peer(150), peer(100)], Some(0), now), Some(0));
    }

    #[test]
    fn nodata_only_when_no_degraded_or_healthy_peer() {
        let now = t0();
        assert_eq!(select(&[peer(1), peer(2)], None, now), Some(1));
        assert_eq!(select(&[peer(1), peer(200)], Some(0), now), Some(1));
        let down = PeerStatus {
            reachable: false,
            ..peer(200)
        };
        assert_eq!(select(&[peer(1), down], None, now), Some(0));
    }

    #[test]
    fn unreachable_current_fails_over() {
        let now = t0();
        let peers = [
            PeerStatus {
                reachable: false,
                ..peer(255)
            },
            peer(120),
        ];
        assert!(should_failover(&peers[0], now));
        assert_eq!(select(&peers, Some(0), now), Some(1));
        // Nothing else selectable: None, never the unreachable server.
        assert_eq!(select(&peers[..1], Some(0), now), None);
    }

    #[test]
    fn unknown_state_or_level_is_not_selectable() {
        let now = t0();
        let no_state = PeerStatus {
            state: None,
            ..peer(255)
        };
        let no_level = PeerStatus {
            service_level: None,
            ..peer(255)
        };
        let failed = PeerStatus {
            state: Some(ServerState::Failed),
            ..peer(255)
        };
        assert!(!is_selectable(&no_state, now));
        assert!(!is_selectable(&no_level, now));
        assert!(!is_selectable(&failed, now));
        assert_eq!(select(&[no_state, no_level, failed], None, now), None);
        assert_eq!(select(&[no_state, peer(3)], None, now), Some(1));
        assert_eq!(select(&[], None, now), None);
    }

    #[test]
    fn ties_prefer_current_then_lower_index() {
        let now = t0();
        let peers = [peer(180), peer(180), peer(180)];
        assert_eq!(select(&peers, None, now), Some(0));
        // Current is Degraded (failover warranted) but no peer is better.
        assert_eq!(select(&peers, Some(2), now), Some(2));
        let peers = [peer(1), peer(220), peer(220)];
        assert_eq!(select(&peers, Some(0), now), Some(1));
        // An out-of-range current is ignored.
        assert_eq!(select(&peers, Some(7), now), Some(1));
    }

    #[test]
    fn maintenance_without_return_time_is_deferred_by_the_default() {
        let peers = [maintenance(t0(), None), peer(1)];
        assert!(!is_selectable(&peers[0], at(0)));
        assert!(!is_selectable(&peers[0], at(59)));
        assert!(is_selectable(&peers[0], at(60)));
        // Deferred: the NoData peer is the only choice.
        assert_eq!(select(&peers, None, at(30)), Some(1));
        // After the deferral, level 0 still loses to NoData ...
        assert_eq!(select(&peers, None, at(61)), Some(1));
        // ... and only wins when nothing else is selectable.
        assert_eq!(select(&peers[..1], None, at(30)), None);
        assert_eq!(select(&peers[..1], None, at(61)), Some(0));
    }

    #[test]
    fn maintenance_with_return_time_is_deferred_until_it() {
        let ert = at(300);
        let p = maintenance(t0(), Some(ert));
        // The default deferral does not apply when a return time is given.
        assert!(!is_selectable(&p, at(120)));
        assert!(!is_selectable(&p, at(299)));
        assert!(is_selectable(&p, at(300)));
        // A return time in the past does not defer.
        let stale = maintenance(t0(), Some(at(10)));
        assert!(is_selectable(&stale, at(20)));
        // A null return time is treated as none.
        let null = maintenance(t0(), Some(DateTime::null()));
        assert!(!is_selectable(&null, at(20)));
        assert!(is_selectable(&null, at(60)));
    }

    #[test]
    fn maintenance_current_fails_over_to_any_operational_peer() {
        let now = at(5);
        let peers = [maintenance(t0(), None), peer(50)];
        assert!(should_failover(&peers[0], now));
        assert_eq!(select(&peers, Some(0), now), Some(1));
        assert_eq!(select(&peers[..1], Some(0), now), None);
    }

    #[test]
    fn next_recheck_is_the_earliest_deferral_end() {
        let peers = [
            peer(255),
            maintenance(t0(), None),
            maintenance(t0(), Some(at(30))),
            maintenance(t0(), Some(at(5))),
        ];
        assert_eq!(next_recheck(&peers, at(0)), Some(at(5)));
        assert_eq!(next_recheck(&peers, at(5)), Some(at(30)));
        assert_eq!(next_recheck(&peers, at(30)), Some(at(60)));
        assert_eq!(next_recheck(&peers, at(60)), None);
        assert_eq!(next_recheck(&[peer(1), peer(200)], at(0)), None);
        // Level 0 seen but not yet timestamped by the caller: re-check one
        // default deferral from now.
        let unstamped = PeerStatus {
            maintenance_since: None,
            ..peer(0)
        };
        assert_eq!(next_recheck(&[unstamped], at(10)), Some(at(70)));
        assert!(!is_selectable(&unstamped, at(10)));
    }

    /// The connect timeout of the first-selection tests.
    const TIMEOUT: Duration = Duration::from_secs(30);

    fn not_reported() -> PeerStatus {
        PeerStatus {
            reachable: true,
            ..PeerStatus::default()
        }
    }

    /// A restarted gateway with a Healthy pair A (255) and B (220), both
    /// up: B answers first.
    #[test]
    fn first_selection_waits_for_every_server_then_takes_the_highest() {
        let start = Instant::now();
        let first = FirstSelection::new(start, TIMEOUT);
        let now = t0();
        // B has reported, A has not (connected, status not published yet):
        // wait until the deadline, although B alone would be selectable.
        let peers = [not_reported(), peer(220)];
        let ms = |n| start + Duration::from_millis(n);
        assert_eq!(
            first.wait_until(&peers, &[false, false], ms(100)),
            Some(start + TIMEOUT)
        );
        assert_eq!(select(&peers, None, now), Some(1));
        // A reports: select now, and the highest level wins.
        let peers = [peer(255), peer(220)];
        assert_eq!(first.wait_until(&peers, &[false, false], ms(300)), None);
        assert_eq!(select(&peers, None, now), Some(0));
    }

    #[test]
    fn first_selection_needs_both_state_and_level() {
        let start = Instant::now();
        let first = FirstSelection::new(start, TIMEOUT);
        let level_only = PeerStatus {
            state: None,
            ..peer(255)
        };
        let state_only = PeerStatus {
            service_level: None,
            ..peer(255)
        };
        assert!(!has_reported(&level_only));
        assert!(!has_reported(&state_only));
        assert!(has_reported(&peer(0)));
        for p in [level_only, state_only] {
            assert_eq!(
                first.wait_until(&[p, peer(220)], &[], start),
                Some(start + TIMEOUT)
            );
        }
    }

    #[test]
    fn first_selection_stops_waiting_at_the_deadline() {
        let start = Instant::now();
        let first = FirstSelection::new(start, TIMEOUT);
        let peers = [not_reported(), peer(220)];
        let just_before = start + TIMEOUT - Duration::from_millis(1);
        assert_eq!(
            first.wait_until(&peers, &[false, false], just_before),
            Some(start + TIMEOUT)
        );
        // At the deadline: select among the servers that have reported.
        assert_eq!(
            first.wait_until(&peers, &[false, false], start + TIMEOUT),
            None
        );
        assert_eq!(
            first.wait_until(&peers, &[false, false], start + TIMEOUT * 2),
            None
        );
        assert_eq!(select(&peers, None, t0()), Some(1));
        // Nothing reported by the deadline: no wait either (select says
        // None and the first server to report is chosen, as before).
        let none = [not_reported(), PeerStatus::default()];
        assert_eq!(first.wait_until(&none, &[], start + TIMEOUT), None);
        assert_eq!(select(&none, None, t0()), None);
    }

    #[test]
    fn first_selection_does_not_wait_for_a_failed_server() {
        let start = Instant::now();
        let first = FirstSelection::new(start, TIMEOUT);
        // A's first attempt failed (unreachable, status reset).
        let peers = [PeerStatus::default(), peer(220)];
        assert_eq!(first.wait_until(&peers, &[true, false], start), None);
        assert_eq!(select(&peers, None, t0()), Some(1));
        // Only the failed one is not waited for: B still pending → wait.
        let peers = [PeerStatus::default(), not_reported()];
        assert_eq!(
            first.wait_until(&peers, &[true, false], start),
            Some(start + TIMEOUT)
        );
        // Every server failed: nothing to wait for.
        assert_eq!(
            first.wait_until(&[PeerStatus::default(); 2], &[true, true], start),
            None
        );
    }

    #[test]
    fn later_selections_are_not_held_back() {
        let start = Instant::now();
        let mut first = FirstSelection::new(start, TIMEOUT);
        let peers = [not_reported(), peer(220)];
        assert!(first.wait_until(&peers, &[false, false], start).is_some());
        // The deadline passed and B was chosen.
        first.chosen();
        // B is later lost and A reconnects; no wait for B's status, and
        // today's rules: A, being the only selectable server, is chosen.
        let peers = [peer(255), PeerStatus::default()];
        assert_eq!(first.wait_until(&peers, &[false, false], start), None);
        assert_eq!(select(&peers, Some(1), t0()), Some(0));
        // And a Healthy current server is still never left.
        let peers = [peer(255), peer(220)];
        assert_eq!(first.wait_until(&peers, &[], start), None);
        assert_eq!(select(&peers, Some(1), t0()), Some(1));
    }

    #[test]
    fn first_selection_of_an_empty_set_or_absurd_timeout_does_not_wait() {
        let start = Instant::now();
        let first = FirstSelection::new(start, TIMEOUT);
        assert_eq!(first.wait_until(&[], &[], start), None);
        let absurd = FirstSelection::new(start, Duration::MAX);
        assert_eq!(absurd.wait_until(&[not_reported()], &[], start), None);
    }
}
