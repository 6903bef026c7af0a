//! The failover machine on simulated time: no sockets, no runtime. A
//! [`Sim`] feeds events at instants it chooses and looks at the actions.

use super::*;

/// The session handle of the tests: the link and attempt that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sess {
    link: usize,
    generation: u64,
}

/// The connect timeout of the tests (bounds the first selection's wait).
const TIMEOUT: Duration = Duration::from_secs(15);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// `t + d` in OPC UA time.
fn wall_plus(t: DateTime, d: Duration) -> DateTime {
    let ticks = i64::try_from(d.as_nanos() / 100).unwrap_or(i64::MAX);
    DateTime::from(t.checked_ticks().saturating_add(ticks))
}

/// One machine and its simulated clocks (monotonic and wall, advanced
/// together).
struct Sim {
    m: Failover<Sess>,
    start: Instant,
    wall0: DateTime,
    elapsed: Duration,
}

impl Sim {
    fn new(handling: Handling, servers: &[&[&str]]) -> Sim {
        Sim::with_policy(handling, servers, ReconnectPolicy::default())
    }

    fn with_policy(handling: Handling, servers: &[&[&str]], reconnect: ReconnectPolicy) -> Sim {
        let start = Instant::now();
        let wall0 = DateTime::ymd_hms(2024, 5, 1, 12, 0, 0);
        let settings = Settings {
            handling,
            servers: servers
                .iter()
                .map(|urls| urls.iter().map(|u| u.to_string()).collect())
                .collect(),
            reconnect,
            connect_timeout: TIMEOUT,
        };
        let m = Failover::new(
            settings,
            Now {
                mono: start,
                wall: wall0,
            },
        );
        Sim {
            m,
            start,
            wall0,
            elapsed: Duration::ZERO,
        }
    }

    fn now(&self) -> Now {
        Now {
            mono: self.start + self.elapsed,
            wall: wall_plus(self.wall0, self.elapsed),
        }
    }

    /// The monotonic instant `d` after the start.
    fn at(&self, d: Duration) -> Instant {
        self.start + d
    }

    fn advance(&mut self, d: Duration) {
        self.elapsed += d;
    }

    /// Handles every event, then polls once.
    fn feed_all(&mut self, events: Vec<Event<Sess>>) -> Vec<Action<Sess>> {
        let now = self.now();
        for ev in events {
            self.m.handle(ev, now);
        }
        self.m.poll(now)
    }

    fn feed(&mut self, ev: Event<Sess>) -> Vec<Action<Sess>> {
        self.feed_all(vec![ev])
    }

    fn tick(&mut self) -> Vec<Action<Sess>> {
        self.feed(Event::Tick)
    }

    fn generation(&self, link: usize) -> u64 {
        self.m.links()[link].generation()
    }

    fn session(&self, link: usize) -> Sess {
        Sess {
            link,
            generation: self.generation(link),
        }
    }

    /// The current connect attempt of `link` succeeds.
    fn up(&mut self, link: usize) -> Vec<Action<Sess>> {
        let session = self.session(link);
        self.feed(Event::Up {
            link,
            generation: session.generation,
            session,
        })
    }

    fn status(&self, link: usize, report: StatusReport) -> Event<Sess> {
        Event::Status {
            link,
            generation: self.generation(link),
            report,
        }
    }

    fn report(&mut self, link: usize, report: StatusReport) -> Vec<Action<Sess>> {
        self.feed(self.status(link, report))
    }

    /// The status subscription of `link` is in place and its first publish
    /// says Running at `level`.
    fn running(&mut self, link: usize, level: u8) -> Vec<Action<Sess>> {
        self.feed_all(vec![
            self.status(link, StatusReport::Watching),
            self.status(link, StatusReport::State(ServerState::Running)),
            self.status(link, StatusReport::ServiceLevel(level)),
        ])
    }

    /// Brings `link`'s current attempt up, Running at `level`.
    fn up_running(&mut self, link: usize, level: u8) -> Vec<Action<Sess>> {
        let mut acts = self.up(link);
        acts.extend(self.running(link, level));
        acts
    }

    fn fail(&mut self, link: usize, failure: Failure) -> Vec<Action<Sess>> {
        self.feed(Event::Failed {
            link,
            generation: self.generation(link),
            failure,
            detail: "refused".into(),
            jitter: 0.0,
        })
    }

    fn lose(&mut self, link: usize, path: usize) -> Vec<Action<Sess>> {
        self.feed(Event::Lost {
            link,
            generation: self.generation(link),
            status: StatusCode::BadConnectionClosed,
            path,
            jitter: 0.0,
        })
    }

    fn moved(&mut self, link: usize) -> Vec<Action<Sess>> {
        self.feed(Event::Moved {
            link,
            generation: self.generation(link),
            transferred: false,
        })
    }
}

fn refused() -> Failure {
    Failure {
        status: StatusCode::BadNotConnected,
        retry_after: None,
    }
}

/// The connect attempts started: (link, first path, generation).
fn connects(acts: &[Action<Sess>]) -> Vec<(usize, usize, u64)> {
    acts.iter()
        .filter_map(|a| match a {
            Action::Connect {
                link,
                first,
                generation,
                ..
            } => Some((*link, *first, *generation)),
            _ => None,
        })
        .collect()
}

/// The links whose session the actions make active, in order (`None`:
/// nothing serves).
fn activations(acts: &[Action<Sess>]) -> Vec<Option<usize>> {
    acts.iter()
        .filter_map(|a| match a {
            Action::Activate(s) => Some(s.map(|s| s.link)),
            _ => None,
        })
        .collect()
}

fn notes(acts: &[Action<Sess>]) -> Vec<Note<Sess>> {
    acts.iter()
        .filter_map(|a| match a {
            Action::Note(n) => Some(n.clone()),
            _ => None,
        })
        .collect()
}

/// (link reconciled, active server it was told) per reconcile.
fn reconciles(acts: &[Action<Sess>]) -> Vec<(usize, Option<usize>)> {
    acts.iter()
        .filter_map(|a| match a {
            Action::Reconcile { session, active } => Some((session.link, *active)),
            _ => None,
        })
        .collect()
}

fn failovers(acts: &[Action<Sess>]) -> Vec<(usize, usize)> {
    notes(acts)
        .into_iter()
        .filter_map(|n| match n {
            Note::Failover { from, to } => Some((from, to)),
            _ => None,
        })
        .collect()
}

/// A hot pair with A (255) active and B (220) standing by.
fn hot_pair_on_a() -> Sim {
    let mut sim = Sim::new(Handling::Hot, &[&["opc.tcp://a"], &["opc.tcp://b"]]);
    sim.tick();
    sim.up_running(0, 255);
    let acts = sim.up_running(1, 220);
    assert_eq!(activations(&acts), vec![Some(0)]);
    sim
}

// ---------------------------------------------------------------------
// Initial selection

/// Issue 16: a restarted gateway in front of a healthy hot pair starts on
/// A (255) although B (220) answers first.
#[test]
fn a_hot_set_connects_every_server_and_waits_for_all_before_choosing() {
    let mut sim = Sim::new(Handling::Hot, &[&["opc.tcp://a"], &["opc.tcp://b"]]);
    let acts = sim.tick();
    assert_eq!(connects(&acts), vec![(0, 0, 1), (1, 0, 1)]);
    assert_eq!(sim.m.state(), ConnState::Connecting);
    sim.advance(ms(100));
    let acts = sim.up_running(1, 220);
    assert!(activations(&acts).is_empty(), "B alone is not chosen yet");
    assert_eq!(reconciles(&acts), vec![(1, None)]);
    assert_eq!(sim.m.next_deadline(), Some(sim.at(TIMEOUT)));
    assert_eq!(sim.m.state(), ConnState::Connecting);
    sim.advance(ms(200));
    // A's session is up but it has not reported: still waiting.
    let acts = sim.up(0);
    assert!(activations(&acts).is_empty());
    let acts = sim.running(0, 255);
    assert_eq!(activations(&acts), vec![Some(0)]);
    assert!(failovers(&acts).is_empty(), "a first choice is no failover");
    assert_eq!(reconciles(&acts), vec![(0, Some(0)), (1, Some(0))]);
    assert_eq!(sim.m.state(), ConnState::Connected);
    assert_eq!(sim.m.next_deadline(), None);
}

#[test]
fn the_first_selection_stops_waiting_at_the_connect_timeout() {
    let mut sim = Sim::new(Handling::Warm, &[&["opc.tcp://a"], &["opc.tcp://b"]]);
    sim.tick();
    sim.up_running(1, 220);
    // A's attempt hangs.
    sim.advance(TIMEOUT - ms(1));
    assert!(activations(&sim.tick()).is_empty());
    sim.advance(ms(1));
    assert_eq!(activations(&sim.tick()), vec![Some(1)]);
    // A comes up later at a higher level: a Healthy B is not left.
    sim.advance(secs(1));
    let acts = sim.up_running(0, 255);
    assert!(activations(&acts).is_empty());
    assert_eq!(sim.m.active(), Some(1));
}

#[test]
fn the_first_selection_does_not_wait_for_a_server_that_failed() {
    let mut sim = Sim::new(Handling::HotMerge, &[&["opc.tcp://a"], &["opc.tcp://b"]]);
    sim.tick();
    sim.up_running(1, 220);
    sim.advance(ms(300));
    let acts = sim.fail(0, refused());
    assert_eq!(activations(&acts), vec![Some(1)]);
    // A is retried after the policy's first delay.
    assert_eq!(sim.m.next_deadline(), Some(sim.at(ms(1_300))));
}

#[test]
fn a_cold_set_connects_one_server_and_starts_on_it_at_once() {
    let mut sim = Sim::new(Handling::Cold, &[&["opc.tcp://a"], &["opc.tcp://b"]]);
    let acts = sim.tick();
    assert_eq!(connects(&acts), vec![(0, 0, 1)], "only the first server");
    // Up, but no ServiceLevel yet: nothing serves.
    assert!(activations(&sim.up(0)).is_empty());
    let acts = sim.running(0, 200);
    assert_eq!(activations(&acts), vec![Some(0)]);
    assert_eq!(sim.m.next_deadline(), None);
    assert_eq!(sim.m.links()[1].phase(), &Phase::Idle);
}

// ---------------------------------------------------------------------
// Handoff

#[test]
fn an_unhealthy_active_server_hands_off_to_a_healthy_peer() {
    let mut sim = hot_pair_on_a();
    sim.advance(secs(5));
    let acts = sim.report(0, StatusReport::ServiceLevel(150));
    assert_eq!(failovers(&acts), vec![(0, 1)]);
    assert_eq!(activations(&acts), vec![Some(1)]);
    // Every link's items take the mode of their new role.
    assert_eq!(reconciles(&acts), vec![(0, Some(1)), (1, Some(1))]);
    // A Healthy again (higher than B): B is not left.
    let acts = sim.report(0, StatusReport::ServiceLevel(255));
    assert!(activations(&acts).is_empty());
    assert_eq!(sim.m.active(), Some(1));
}

#[test]
fn a_healthy_active_server_is_not_left_for_a_higher_peer() {
    let mut sim = Sim::new(Handling::Hot, &[&["opc.tcp://a"], &["opc.tcp://b"]]);
    sim.tick();
    sim.up_running(0, 200);
    sim.fail(1, refused());
    assert_eq!(sim.m.active(), Some(0));
    sim.advance(secs(1));
    sim.tick();
    let acts = sim.up_running(1, 255);
    assert!(activations(&acts).is_empty());
    assert_eq!(sim.m.active(), Some(0));
}

#[test]
fn a_lost_active_server_hands_off_and_reconnects_after_the_initial_delay() {
    let mut sim = hot_pair_on_a();
    sim.advance(secs(3));
    let acts = sim.lose(0, 0);
    assert_eq!(
        notes(&acts)[0],
        Note::Lost {
            link: 0,
            url: "opc.tcp://a".into(),
            status: StatusCode::BadConnectionClosed
        }
    );
    // Northbound calls wait at once, then go to B.
    assert_eq!(activations(&acts), vec![None, Some(1)]);
    assert_eq!(failovers(&acts), vec![(0, 1)]);
    assert!(!acts.contains(&Action::MarkItemsBad));
    assert_eq!(sim.m.peers()[0], PeerStatus::default());
    assert_eq!(sim.m.next_deadline(), Some(sim.at(secs(4))));
    sim.advance(secs(1));
    assert_eq!(connects(&sim.tick()), vec![(0, 0, 2)]);
    sim.advance(ms(250));
    let acts = sim.up_running(0, 255);
    assert!(notes(&acts).contains(&Note::Up {
        link: 0,
        session: sim.session(0),
        reconnect: true,
        recovered_after: Some(ms(1_250)),
    }));
    assert!(activations(&acts).is_empty(), "B, Healthy, is kept");
}

#[test]
fn the_only_server_lost_marks_the_items_and_reconnects_over_the_last_path() {
    let mut sim = Sim::new(
        Handling::None,
        &[&["opc.tcp://a:4840", "opc.tcp://a-alt:4840"]],
    );
    sim.tick();
    sim.up_running(0, 255);
    assert_eq!(sim.m.state(), ConnState::Connected);
    // The session had moved to the alternate path when it was lost.
    let acts = sim.lose(0, 1);
    assert_eq!(activations(&acts), vec![None, None]);
    assert!(acts.contains(&Action::MarkItemsBad));
    assert_eq!(sim.m.state(), ConnState::Reconnecting);
    assert_eq!(sim.m.links()[0].next_path(), "opc.tcp://a-alt:4840");
    sim.advance(secs(1));
    assert_eq!(connects(&sim.tick()), vec![(0, 1, 2)]);
    let acts = sim.up_running(0, 255);
    assert_eq!(activations(&acts), vec![Some(0)]);
    assert_eq!(sim.m.state(), ConnState::Connected);
}

#[test]
fn failed_attempts_wait_the_policy_delay_and_try_the_next_path() {
    let mut sim = Sim::new(Handling::None, &[&["opc.tcp://a", "opc.tcp://a-alt"]]);
    assert_eq!(connects(&sim.tick()), vec![(0, 0, 1)]);
    let acts = sim.fail(0, refused());
    assert_eq!(
        notes(&acts),
        vec![Note::Failed {
            link: 0,
            url: "opc.tcp://a".into(),
            failure: refused(),
            detail: "refused".into()
        }]
    );
    assert_eq!(sim.m.next_deadline(), Some(sim.at(secs(1))));
    sim.advance(ms(999));
    assert!(connects(&sim.tick()).is_empty());
    sim.advance(ms(1));
    assert_eq!(connects(&sim.tick()), vec![(0, 1, 2)]);
    sim.fail(0, refused());
    assert_eq!(sim.m.next_deadline(), Some(sim.at(secs(3))));
    sim.advance(secs(2));
    assert_eq!(connects(&sim.tick()), vec![(0, 0, 3)]);
    // A retry-after hint is a lower bound on the delay (4 s here).
    sim.fail(
        0,
        Failure {
            status: StatusCode::BadNotConnected,
            retry_after: Some(secs(10)),
        },
    );
    assert_eq!(sim.m.next_deadline(), Some(sim.at(secs(13))));
    assert_eq!(sim.m.state(), ConnState::Connecting);
}

#[test]
fn failed_attempts_name_the_path_they_tried() {
    let mut sim = Sim::new(Handling::None, &[&["opc.tcp://a", "opc.tcp://a-alt"]]);
    sim.tick();
    sim.fail(0, refused());
    sim.advance(secs(1));
    sim.tick();
    let acts = sim.fail(0, refused());
    assert!(
        matches!(&notes(&acts)[..], [Note::Failed { url, .. }] if url == "opc.tcp://a-alt"),
        "{acts:?}"
    );
}

/// A connection that never served: its first attempts read as connecting,
/// from the third failure in a row it is failing, counted from the first
/// failure; a served connection forgets it.
#[test]
fn a_connection_that_keeps_failing_is_failing_with_its_count_and_start() {
    let policy = ReconnectPolicy {
        max_delay: secs(2),
        ..ReconnectPolicy::default()
    };
    let mut sim = Sim::with_policy(Handling::None, &[&["opc.tcp://a"]], policy);
    sim.tick();
    assert_eq!(sim.m.outage(), None, "nothing failed yet");
    assert!(!sim.m.failing());
    sim.advance(secs(2));
    let first_failure = sim.now().wall;
    sim.fail(0, refused());
    assert_eq!(
        sim.m.outage(),
        Some(&Outage {
            since: first_failure,
            failed_attempts: 1
        })
    );
    assert!(!sim.m.failing(), "one failure still reads as connecting");
    for n in 2..=15u64 {
        let due = sim.m.next_deadline().expect("a next attempt");
        sim.advance(due.saturating_duration_since(sim.now().mono));
        assert_eq!(connects(&sim.tick()).len(), 1);
        sim.fail(0, refused());
        assert_eq!(sim.m.failing(), n >= FAILING_AFTER, "after {n} failures");
        assert_eq!(sim.m.state(), ConnState::Connecting);
    }
    let outage = sim.m.outage().copied().expect("failing");
    assert_eq!(outage.failed_attempts, 15);
    assert_eq!(
        outage.since, first_failure,
        "counted from the first failure"
    );
    // It connects: nothing is failing any more.
    let due = sim.m.next_deadline().expect("a next attempt");
    sim.advance(due.saturating_duration_since(sim.now().mono));
    sim.tick();
    sim.up_running(0, 255);
    assert_eq!(sim.m.state(), ConnState::Connected);
    assert_eq!(sim.m.outage(), None);
    assert!(!sim.m.failing());
}

/// The loss of the serving server starts the outage; the attempts after it
/// count; the failures of a backup while another server serves do not.
#[test]
fn an_outage_starts_at_the_loss_and_a_failing_backup_is_none() {
    let mut sim = hot_pair_on_a();
    // B is lost and fails to come back while A serves: no outage.
    sim.lose(1, 0);
    for _ in 0..4 {
        let due = sim.m.next_deadline().expect("a next attempt");
        sim.advance(due.saturating_duration_since(sim.now().mono));
        sim.tick();
        sim.fail(1, refused());
    }
    assert_eq!(sim.m.state(), ConnState::Connected);
    assert_eq!(sim.m.outage(), None);
    assert!(!sim.m.failing());
    // A goes too: the outage starts at its loss, nobody serves.
    sim.advance(secs(5));
    let lost_at = sim.now().wall;
    sim.lose(0, 0);
    assert_eq!(sim.m.state(), ConnState::Reconnecting);
    assert_eq!(
        sim.m.outage(),
        Some(&Outage {
            since: lost_at,
            failed_attempts: 0
        })
    );
    assert!(!sim.m.failing(), "reconnecting, not failing yet");
    for _ in 0..FAILING_AFTER {
        let due = sim.m.next_deadline().expect("a next attempt");
        sim.advance(due.saturating_duration_since(sim.now().mono));
        for link in connects(&sim.tick()).into_iter().map(|(l, _, _)| l) {
            sim.fail(link, refused());
        }
    }
    assert!(sim.m.failing(), "{:?}", sim.m.outage());
    assert_eq!(sim.m.outage().map(|o| o.since), Some(lost_at));
}

#[test]
fn a_connection_whose_every_link_ran_out_gives_up_and_starts_over_after_max_delay() {
    let policy = ReconnectPolicy {
        max_retries: 2,
        max_delay: secs(30),
        ..ReconnectPolicy::default()
    };
    let mut sim = Sim::with_policy(Handling::None, &[&["opc.tcp://a"]], policy);
    sim.tick();
    sim.fail(0, refused());
    sim.advance(secs(1));
    sim.tick();
    let acts = sim.fail(0, refused());
    assert_eq!(sim.m.state(), ConnState::GaveUp);
    assert!(acts.contains(&Action::MarkItemsBad));
    assert!(
        notes(&acts).contains(&Note::GaveUp {
            link: 0,
            retry_in: secs(30),
            status: StatusCode::BadNotConnected,
        }),
        "{acts:?}"
    );
    assert_eq!(
        sim.m.links()[0].phase(),
        &Phase::Exhausted(sim.at(secs(31)))
    );
    assert_eq!(sim.m.next_deadline(), Some(sim.at(secs(31))));
    // Nothing before max_delay; the items are marked once, not every poll.
    sim.advance(secs(29));
    let acts = sim.tick();
    assert!(connects(&acts).is_empty(), "{acts:?}");
    assert!(!acts.contains(&Action::MarkItemsBad), "{acts:?}");
    // Then a new cycle, with a fresh retry count.
    sim.advance(secs(1));
    let acts = sim.tick();
    assert_eq!(connects(&acts), vec![(0, 0, 3)]);
    assert!(notes(&acts).contains(&Note::NewCycle {
        link: 0,
        requested: false
    }));
    assert_eq!(sim.m.state(), ConnState::Connecting);
    let acts = sim.fail(0, refused());
    assert!(
        notes(&acts)
            .iter()
            .all(|n| !matches!(n, Note::GaveUp { .. })),
        "{acts:?}"
    );
    assert!(matches!(sim.m.links()[0].phase(), Phase::Waiting(_)));
    // The server is back: the connection serves again.
    sim.advance(secs(2));
    sim.tick();
    let acts = sim.up_running(0, 200);
    assert_eq!(sim.m.state(), ConnState::Connected);
    assert_eq!(activations(&acts).last(), Some(&Some(0)));
}

#[test]
fn a_lost_session_whose_budget_runs_out_gives_up_too() {
    let policy = ReconnectPolicy {
        max_retries: 1,
        max_delay: secs(10),
        ..ReconnectPolicy::default()
    };
    let mut sim = Sim::with_policy(Handling::None, &[&["opc.tcp://a"]], policy);
    sim.tick();
    sim.up_running(0, 200);
    assert_eq!(sim.m.state(), ConnState::Connected);
    let acts = sim.lose(0, 0);
    assert_eq!(sim.m.state(), ConnState::GaveUp);
    assert!(notes(&acts)
        .iter()
        .any(|n| matches!(n, Note::GaveUp { link: 0, .. })));
    assert_eq!(sim.m.next_deadline(), Some(sim.at(secs(10))));
}

#[test]
fn reconnect_now_starts_a_new_cycle_at_once() {
    let policy = ReconnectPolicy {
        max_retries: 1,
        max_delay: secs(60),
        ..ReconnectPolicy::default()
    };
    let mut sim = Sim::with_policy(Handling::None, &[&["opc.tcp://a", "opc.tcp://a2"]], policy);
    sim.tick();
    sim.fail(0, refused());
    assert_eq!(sim.m.state(), ConnState::GaveUp);
    sim.advance(secs(5));
    let acts = sim.feed(Event::ReconnectNow);
    // The next path, at once, as a new cycle.
    assert_eq!(connects(&acts), vec![(0, 1, 2)]);
    assert_eq!(
        notes(&acts),
        vec![Note::NewCycle {
            link: 0,
            requested: true
        }]
    );
    assert_eq!(sim.m.state(), ConnState::Connecting);
    // A link that only waits for its next attempt also goes at once; a
    // connected one is left alone.
    let policy = ReconnectPolicy {
        initial_delay: secs(20),
        ..ReconnectPolicy::default()
    };
    let mut sim = Sim::with_policy(Handling::Hot, &[&["opc.tcp://a"], &["opc.tcp://b"]], policy);
    sim.tick();
    sim.up_running(0, 200);
    sim.fail(1, refused());
    let acts = sim.feed(Event::ReconnectNow);
    assert_eq!(connects(&acts), vec![(1, 0, 2)]);
    assert_eq!(sim.m.links()[0].generation(), 1);
}

#[test]
fn one_server_of_a_hot_set_that_ran_out_starts_over_while_the_other_serves() {
    let policy = ReconnectPolicy {
        max_retries: 1,
        max_delay: secs(15),
        ..ReconnectPolicy::default()
    };
    let mut sim = Sim::with_policy(Handling::Hot, &[&["opc.tcp://a"], &["opc.tcp://b"]], policy);
    sim.tick();
    sim.up_running(0, 200);
    let acts = sim.fail(1, refused());
    assert!(notes(&acts)
        .iter()
        .any(|n| matches!(n, Note::GaveUp { link: 1, .. })));
    assert_eq!(sim.m.state(), ConnState::Connected);
    assert_eq!(sim.m.next_deadline(), Some(sim.at(secs(15))));
    sim.advance(secs(15));
    let acts = sim.tick();
    assert_eq!(connects(&acts), vec![(1, 0, 2)]);
    assert_eq!(sim.m.state(), ConnState::Connected);
}

#[test]
fn events_of_an_earlier_attempt_are_ignored() {
    let mut sim = Sim::new(Handling::None, &[&["opc.tcp://a"]]);
    sim.tick();
    sim.fail(0, refused());
    sim.advance(secs(1));
    assert_eq!(connects(&sim.tick()), vec![(0, 0, 2)]);
    let old = Sess {
        link: 0,
        generation: 1,
    };
    let stale = vec![
        Event::Up {
            link: 0,
            generation: 1,
            session: old,
        },
        Event::Failed {
            link: 0,
            generation: 1,
            failure: refused(),
            detail: String::new(),
            jitter: 0.0,
        },
        Event::Lost {
            link: 0,
            generation: 1,
            status: StatusCode::BadConnectionClosed,
            path: 0,
            jitter: 0.0,
        },
        Event::Moved {
            link: 0,
            generation: 1,
            transferred: false,
        },
        Event::Status {
            link: 0,
            generation: 1,
            report: StatusReport::ServiceLevel(255),
        },
    ];
    assert!(sim.feed_all(stale).is_empty());
    assert_eq!(sim.m.links()[0].phase(), &Phase::Connecting);
    assert_eq!(sim.m.peers()[0], PeerStatus::default());
    assert_eq!(activations(&sim.up_running(0, 255)), vec![Some(0)]);
}

#[test]
fn status_reports_of_a_lost_session_are_ignored() {
    let mut sim = hot_pair_on_a();
    sim.lose(1, 0);
    // A notification of B's old session arrives after the loss.
    sim.report(1, StatusReport::ServiceLevel(255));
    assert_eq!(sim.m.peers()[1], PeerStatus::default());
    // Out-of-range links are ignored too.
    let far = Event::Status {
        link: 7,
        generation: 1,
        report: StatusReport::Watching,
    };
    assert!(sim.feed(far).is_empty());
}

#[test]
fn changed_items_are_reconciled_on_every_connected_link() {
    let mut sim = hot_pair_on_a();
    let acts = sim.feed(Event::ItemsChanged);
    assert_eq!(
        acts,
        vec![
            Action::Reconcile {
                session: sim.session(0),
                active: Some(0)
            },
            Action::Reconcile {
                session: sim.session(1),
                active: Some(0)
            },
        ]
    );
    // With the active server the same poll chose.
    let now = sim.now();
    sim.m.handle(Event::ItemsChanged, now);
    sim.m
        .handle(sim.status(0, StatusReport::ServiceLevel(100)), now);
    let acts = sim.m.poll(now);
    let r = reconciles(&acts);
    assert_eq!(&r[r.len() - 2..], &[(0, Some(1)), (1, Some(1))]);
}

// ---------------------------------------------------------------------
// Maintenance

#[test]
fn an_active_server_entering_maintenance_hands_off_to_any_operational_peer() {
    let mut sim = Sim::new(Handling::Hot, &[&["opc.tcp://a"], &["opc.tcp://b"]]);
    sim.tick();
    sim.up_running(0, 255);
    sim.up_running(1, 50);
    sim.advance(secs(2));
    let acts = sim.report(0, StatusReport::ServiceLevel(0));
    assert_eq!(failovers(&acts), vec![(0, 1)]);
    let seen = sim.now().wall;
    assert_eq!(sim.m.peers()[0].maintenance_since, Some(seen));
    // Level 0 again later does not restart the deferral.
    sim.advance(secs(5));
    sim.report(0, StatusReport::ServiceLevel(0));
    assert_eq!(sim.m.peers()[0].maintenance_since, Some(seen));
}

/// A (active) stops Running while B is in Maintenance: A keeps serving
/// until B's deferral ends, then B (level 0) is the only selectable server.
fn maintenance_deferral(return_time: Option<Duration>, ends_after: Duration) {
    let mut sim = hot_pair_on_a();
    sim.advance(secs(10));
    let ert = return_time.map(|d| wall_plus(sim.now().wall, d));
    sim.feed_all(vec![
        sim.status(1, StatusReport::ReturnTime(ert)),
        sim.status(1, StatusReport::ServiceLevel(0)),
        sim.status(0, StatusReport::State(ServerState::Suspended)),
    ]);
    assert_eq!(sim.m.active(), Some(0), "nothing preferable: A serves");
    assert_eq!(sim.m.next_deadline(), Some(sim.at(secs(10) + ends_after)));
    sim.advance(ends_after - ms(1));
    assert!(activations(&sim.tick()).is_empty());
    sim.advance(ms(1));
    let acts = sim.tick();
    assert_eq!(failovers(&acts), vec![(0, 1)]);
    assert_eq!(activations(&acts), vec![Some(1)]);
}

#[test]
fn a_maintenance_server_without_a_return_time_is_deferred_60s() {
    maintenance_deferral(None, secs(60));
}

#[test]
fn a_maintenance_server_with_a_return_time_is_deferred_until_it() {
    maintenance_deferral(Some(secs(120)), secs(120));
}

#[test]
fn the_only_server_in_maintenance_keeps_serving() {
    let mut sim = Sim::new(Handling::None, &[&["opc.tcp://a"]]);
    sim.tick();
    let acts = sim.up_running(0, 0);
    assert_eq!(activations(&acts), vec![Some(0)]);
    assert_eq!(sim.m.state(), ConnState::Connected);
    assert_eq!(sim.m.next_deadline(), Some(sim.at(secs(60))));
    sim.advance(secs(60));
    assert!(sim.tick().is_empty());
    assert_eq!(sim.m.next_deadline(), None);
}

// ---------------------------------------------------------------------
// Operator-forced failover

#[test]
fn an_operator_moves_a_hot_pair_to_the_other_server_and_it_stays() {
    let mut sim = hot_pair_on_a();
    let acts = sim.feed(Event::ForceFailover);
    assert_eq!(failovers(&acts), vec![(0, 1)]);
    assert_eq!(activations(&acts), vec![Some(1)]);
    // B is Healthy: no flapping back to the higher A.
    sim.advance(secs(30));
    assert!(sim.tick().is_empty());
    assert_eq!(sim.m.active(), Some(1));
}

#[test]
fn a_forced_failover_goes_to_a_connected_server_even_if_it_is_not_selectable() {
    let mut sim = hot_pair_on_a();
    // B is in Maintenance (deferred), yet connected with a level.
    sim.report(1, StatusReport::ServiceLevel(0));
    let acts = sim.feed(Event::ForceFailover);
    assert_eq!(activations(&acts), vec![Some(1)]);
}

#[test]
fn a_forced_failover_with_no_other_server_connected_is_refused() {
    let mut sim = hot_pair_on_a();
    sim.lose(1, 0);
    let acts = sim.feed(Event::ForceFailover);
    assert_eq!(
        notes(&acts),
        vec![Note::FailoverUnavailable { active: Some(0) }]
    );
    assert!(activations(&acts).is_empty());
    assert_eq!(sim.m.active(), Some(0));
}

#[test]
fn an_operator_moves_a_cold_pair_to_its_next_server() {
    let mut sim = Sim::new(Handling::Cold, &[&["opc.tcp://a"], &["opc.tcp://b"]]);
    sim.tick();
    sim.up_running(0, 255);
    let a = sim.session(0);
    let acts = sim.feed(Event::ForceFailover);
    assert_eq!(
        acts,
        vec![
            Action::Note(Note::ForcedToNext { to: 1 }),
            Action::Close(a),
            Action::Connect {
                link: 1,
                paths: vec!["opc.tcp://b".into()],
                first: 0,
                generation: 1
            },
            Action::MarkItemsBad,
            Action::Activate(None),
        ]
    );
    assert_eq!(sim.m.state(), ConnState::Reconnecting);
    let acts = sim.up_running(1, 255);
    assert_eq!(activations(&acts), vec![Some(1)]);
    // A is not connected again: no flapping back.
    sim.advance(secs(30));
    assert!(sim.tick().is_empty());
    assert_eq!(sim.m.links()[0].phase(), &Phase::Idle);
}

#[test]
fn forced_failover_is_refused_for_one_server_or_a_mirrored_set() {
    assert_eq!(
        forced_failover_refusal(Handling::None, 1),
        Some("this field connection has only one server")
    );
    assert_eq!(
        forced_failover_refusal(Handling::Hot, 1),
        Some("this field connection has only one server")
    );
    assert_eq!(
        forced_failover_refusal(Handling::HotAndMirrored, 2),
        Some("a hot-and-mirrored set moves its one session itself")
    );
    for h in [
        Handling::None,
        Handling::Cold,
        Handling::Warm,
        Handling::Hot,
        Handling::HotMerge,
    ] {
        assert_eq!(forced_failover_refusal(h, 2), None, "{h:?}");
    }
}

// ---------------------------------------------------------------------
// Cold-style candidates

#[test]
fn a_cold_set_tries_the_next_server_at_once_when_its_candidate_fails() {
    let mut sim = Sim::new(Handling::Cold, &[&["opc.tcp://a"], &["opc.tcp://b"]]);
    sim.tick();
    let acts = sim.fail(0, refused());
    assert_eq!(notes(&acts)[1..], [Note::NextCandidate { from: 0, to: 1 }]);
    assert_eq!(connects(&acts), vec![(1, 0, 1)]);
    // B fails too: back to A, without waiting for A's delay.
    let acts = sim.fail(1, refused());
    assert_eq!(notes(&acts)[1..], [Note::NextCandidate { from: 1, to: 0 }]);
    assert_eq!(connects(&acts), vec![(0, 0, 2)]);
    assert_eq!(sim.m.state(), ConnState::Connecting);
}

#[test]
fn a_cold_set_comes_back_to_a_server_that_ran_out() {
    let policy = ReconnectPolicy {
        max_retries: 1,
        ..ReconnectPolicy::default()
    };
    let mut sim = Sim::with_policy(
        Handling::Cold,
        &[&["opc.tcp://a"], &["opc.tcp://b"]],
        policy,
    );
    sim.tick();
    sim.fail(0, refused());
    assert_eq!(
        sim.m.links()[0].phase(),
        &Phase::Exhausted(sim.at(secs(30)))
    );
    // B runs out too: A starts over with a fresh cycle, the set stays open.
    let acts = sim.fail(1, refused());
    assert_eq!(connects(&acts), vec![(0, 0, 2)]);
    assert_ne!(sim.m.state(), ConnState::GaveUp);
}

#[test]
fn a_cold_set_leaves_a_connected_candidate_that_cannot_serve() {
    let mut sim = Sim::new(Handling::Cold, &[&["opc.tcp://a"], &["opc.tcp://b"]]);
    sim.tick();
    sim.up_running(0, 255);
    let a = sim.session(0);
    // Degraded but selectable: A stays (nothing better is known).
    assert!(sim.report(0, StatusReport::ServiceLevel(150)).is_empty());
    // Not Running: nothing is preferable, so the next server is tried.
    let acts = sim.report(0, StatusReport::State(ServerState::Suspended));
    assert_eq!(notes(&acts), vec![Note::NextCandidate { from: 0, to: 1 }]);
    assert!(acts.contains(&Action::Close(a)));
    assert_eq!(connects(&acts), vec![(1, 0, 1)]);
    assert_eq!(activations(&acts), vec![None]);
    assert_eq!(sim.m.peers()[0], PeerStatus::default());
    let acts = sim.up_running(1, 220);
    assert_eq!(activations(&acts), vec![Some(1)]);
}

// ---------------------------------------------------------------------
// Network paths and hot-and-mirrored moves

#[test]
fn a_network_path_move_keeps_the_session_and_refreshes_its_status() {
    let mut sim = Sim::new(
        Handling::Hot,
        &[&["opc.tcp://a", "opc.tcp://a-alt"], &["opc.tcp://b"]],
    );
    sim.tick();
    sim.up_running(0, 255);
    sim.up_running(1, 200);
    let a = sim.session(0);
    let acts = sim.moved(0);
    assert_eq!(
        acts,
        vec![
            Action::Note(Note::Moved {
                link: 0,
                session: Some(a),
                transferred: false,
            }),
            Action::RefreshStatus(a),
        ]
    );
    assert_eq!(sim.m.active(), Some(0));
}

#[test]
fn a_mirrored_set_is_one_link_over_every_servers_paths() {
    let mut sim = Sim::new(
        Handling::HotAndMirrored,
        &[&["opc.tcp://a", "opc.tcp://a-alt"], &["opc.tcp://b"]],
    );
    let acts = sim.tick();
    assert_eq!(
        acts,
        vec![Action::Connect {
            link: 0,
            paths: vec![
                "opc.tcp://a".into(),
                "opc.tcp://a-alt".into(),
                "opc.tcp://b".into()
            ],
            first: 0,
            generation: 1
        }]
    );
    assert_eq!(sim.m.links().len(), 1);
}

#[test]
fn a_mirrored_server_in_maintenance_moves_the_session_with_paced_moves() {
    let mut sim = Sim::new(
        Handling::HotAndMirrored,
        &[&["opc.tcp://a"], &["opc.tcp://b"]],
    );
    sim.tick();
    sim.up_running(0, 255);
    let s = sim.session(0);
    let maintenance = StatusReport::Read {
        service_level: Some(0),
        state: Some(ServerState::Running),
        return_time: None,
    };
    // A goes into Maintenance: move at once.
    sim.advance(secs(5));
    let acts = sim.report(0, StatusReport::ServiceLevel(0));
    assert_eq!(acts, vec![Action::MovePath(s)]);
    assert_eq!(sim.m.active(), Some(0), "the session keeps serving");
    // Not twice while the move is on its way.
    assert!(sim.tick().is_empty());
    // On B, which is in Maintenance too: the next move waits 1 s.
    sim.moved(0);
    assert!(sim.report(0, maintenance).is_empty());
    assert_eq!(sim.m.next_deadline(), Some(sim.at(secs(6))));
    sim.advance(secs(1));
    assert_eq!(sim.tick(), vec![Action::MovePath(s)]);
    // Back on A, still in Maintenance: the next one waits 2 s.
    sim.moved(0);
    sim.report(0, maintenance);
    sim.advance(secs(1));
    assert!(sim.tick().is_empty());
    assert_eq!(sim.m.next_deadline(), Some(sim.at(secs(8))));
    sim.advance(secs(1));
    assert_eq!(sim.tick(), vec![Action::MovePath(s)]);
    // A healthy server starts the spacing over.
    sim.moved(0);
    sim.report(
        0,
        StatusReport::Read {
            service_level: Some(255),
            state: Some(ServerState::Running),
            return_time: None,
        },
    );
    assert_eq!(sim.m.next_deadline(), None);
    sim.advance(ms(10));
    let acts = sim.report(0, StatusReport::ServiceLevel(0));
    assert_eq!(acts, vec![Action::MovePath(s)]);
}

#[test]
fn a_mirrored_session_with_one_path_does_not_move() {
    let mut sim = Sim::new(Handling::HotAndMirrored, &[&["opc.tcp://a"]]);
    sim.tick();
    sim.up_running(0, 255);
    assert!(sim.report(0, StatusReport::ServiceLevel(0)).is_empty());
    assert_eq!(sim.m.active(), Some(0));
}

#[test]
fn an_interrupted_active_server_hands_off_while_its_session_is_reactivated() {
    let mut sim = hot_pair_on_a();
    let generation = sim.generation(0);
    let acts = sim.feed(Event::Interrupted {
        link: 0,
        generation,
    });
    assert_eq!(failovers(&acts), vec![(0, 1)]);
    assert_eq!(sim.m.active(), Some(1));
    // Not lost: no new connect attempt, the session stays.
    assert!(connects(&acts).is_empty(), "{acts:?}");
    assert!(sim.m.links()[0].session().is_some());
    // Re-activated and healthy again: no flap back.
    sim.moved(0);
    let acts = sim.running(0, 255);
    assert!(failovers(&acts).is_empty(), "{acts:?}");
    assert_eq!(sim.m.active(), Some(1));
}

#[test]
fn the_only_server_keeps_serving_while_its_session_is_reactivated() {
    let mut sim = Sim::new(Handling::None, &[&["opc.tcp://a"]]);
    sim.tick();
    sim.up_running(0, 200);
    let generation = sim.generation(0);
    let acts = sim.feed(Event::Interrupted {
        link: 0,
        generation,
    });
    assert!(!acts.contains(&Action::MarkItemsBad), "{acts:?}");
    assert_eq!(sim.m.active(), Some(0));
    assert_eq!(sim.m.state(), ConnState::Reconnecting);
    sim.moved(0);
    sim.running(0, 200);
    assert_eq!(sim.m.state(), ConnState::Connected);
}
