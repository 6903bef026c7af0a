//! The redundancy and failover decisions of a managed field connection, as a
//! sans-IO machine (DESIGN.md, "Decisions are separate from effects").
//!
//! One [`Failover`] per field connection decides which servers of the set
//! keep a link, when the next connect attempt of a link is due, which server
//! is active, when a hot-and-mirrored set's one session moves on, and when
//! the connection gives up. Its driver (`conn.rs`) feeds it [`Event`]s (the
//! results of connect attempts, lost and moved sessions, the servers' status
//! reports, an operator's request) with [`Failover::handle`], then calls
//! [`Failover::poll`] with the current time [`Now`], carries out the
//! [`Action`]s it returns (connect, close, activate, reconcile items, move a
//! session, record what happened) and calls `poll` again at
//! [`Failover::next_deadline`] at the latest. The machine reads no clock,
//! draws no random numbers (the driver passes the jitter of the reconnect
//! delays with the events that need one), spawns nothing and does no I/O;
//! the session handle `S` is opaque to it (the driver's
//! `Arc<LinkSession>`, a plain value in the tests).
//!
//! Rules (docs/field.md, "Redundancy and reconnect"), decided with the pure
//! functions of [`crate::redundancy`] and [`crate::policy`]:
//! - `warm`, `hot`, `hot_merge` ([`Handling::connects_all`]): every server
//!   keeps a link. The first active server is chosen once every server has
//!   reported its State and ServiceLevel or failed, at most a connect
//!   timeout after the start ([`FirstSelection`]); later choices follow
//!   [`redundancy::select`] at once.
//! - `none`, `cold`: only the candidate server is connected. When it fails,
//!   or it is connected but unusable and no server is preferable, the next
//!   server becomes the candidate.
//! - `hot_and_mirrored`: one link whose paths are every server's URL and
//!   alternates. When the server behind it is not healthy the session moves
//!   to the next path (same session), spaced by [`MovePacing`].
//! - Never leave a reachable, Running, Healthy server; a Maintenance server
//!   is deferred until its EstimatedReturnTime (60 s without one); with
//!   nothing preferable a connected server keeps serving rather than none.
//! - A lost link reconnects after the policy's initial delay at most, over
//!   the path that worked last; a failed attempt waits the policy's delay
//!   and tries the next path. A link whose reconnect cycle runs out
//!   (`max_retries`, `max_total_reconnect_time`) is noted
//!   ([`Note::GaveUp`]) and starts a new cycle after the policy's
//!   `max_delay`; while every link has run out the connection is
//!   [`ConnState::GaveUp`]. Nothing stays closed until a restart; an
//!   operator's [`Event::ReconnectNow`] starts the new cycle at once.
//! - An operator's forced failover ([`Event::ForceFailover`]) moves to the
//!   best other connected server; a cold-style set connects its next server
//!   instead; with neither, the request is recorded as unavailable.

use std::time::{Duration, Instant};

use opcua_types::{DateTime, ServerState, StatusCode};

use crate::policy::{Failure, MovePacing, ReconnectCycle, ReconnectPolicy};
use crate::redundancy::{self, FirstSelection, PeerStatus};

/// Connection states of a managed field connection (reference Sessions.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConnState {
    /// Not enabled or not started.
    #[default]
    Disconnected,
    /// First connect in progress (retrying under the policy).
    Connecting,
    /// An active server serves the connection.
    Connected,
    /// The active server was lost; reconnecting or failing over.
    Reconnecting,
    /// Close requested.
    Closing,
    /// Closed (the gateway stops or the connection was removed).
    Closed,
    /// Every server's reconnect cycle ran out (`max_retries` or
    /// `max_total_reconnect_time`); a new cycle starts after the policy's
    /// `max_delay`, or at once when an operator asks (Reconnect now).
    GaveUp,
}

impl ConnState {
    /// The state's name, as shown on the gateway status nodes.
    pub fn as_str(self) -> &'static str {
        match self {
            ConnState::Disconnected => "Disconnected",
            ConnState::Connecting => "Connecting",
            ConnState::Connected => "Connected",
            ConnState::Reconnecting => "Reconnecting",
            ConnState::Closing => "Closing",
            ConnState::Closed => "Closed",
            ConnState::GaveUp => "GaveUp",
        }
    }
}

/// Connect attempts in a row that fail before a connection that serves
/// nobody reads as failing rather than connecting (see
/// [`Failover::failing`]): one refused attempt can be a server that is
/// starting; three (a few seconds with the default policy) are a fault to
/// look at.
pub const FAILING_AFTER: u64 = 3;

/// How long, and with how many failed attempts, a connection has served
/// nobody (see [`Failover::outage`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outage {
    /// Wall time of its start: the connection's first failed attempt, or
    /// the loss of the server that served.
    pub since: DateTime,
    /// Connect attempts that failed since (every server of the set).
    pub failed_attempts: u64,
}

/// How the servers of a redundant set are used (Part 4 Table 107).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handling {
    /// One server (plus its network alternates).
    None,
    /// Only the active server is connected; on failover the next one is
    /// connected and the items are created there.
    Cold,
    /// All servers connected, items created everywhere; backups' items are
    /// Disabled and their publishing off until they become active.
    Warm,
    /// All servers sample; only the active one reports (reporting handoff).
    Hot,
    /// All servers report; the gateway drops the duplicates.
    HotMerge,
    /// One session for the whole set, moved to the next server's channel
    /// (re-activated there) when its server is lost or not healthy.
    HotAndMirrored,
}

impl Handling {
    /// True when every server of the set keeps a session (warm, hot,
    /// hot_merge).
    pub fn connects_all(self) -> bool {
        matches!(self, Handling::Warm | Handling::Hot | Handling::HotMerge)
    }
}

/// Why an operator's forced failover is refused before it reaches the
/// connection, or `None` when it may be asked for. Called by the console's
/// "fail over" operation with the set's handling and number of servers.
pub fn forced_failover_refusal(handling: Handling, servers: usize) -> Option<&'static str> {
    if servers < 2 {
        Some("this field connection has only one server")
    } else if handling == Handling::HotAndMirrored {
        Some("a hot-and-mirrored set moves its one session itself")
    } else {
        None
    }
}

/// The current time, as the machine sees it: a monotonic instant for the
/// reconnect delays, the first-selection wait and move pacing, and the wall
/// time the servers' EstimatedReturnTime is compared with. The driver reads
/// both clocks once per call; tests advance both together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Now {
    /// Monotonic time.
    pub mono: Instant,
    /// Wall time (OPC UA DateTime).
    pub wall: DateTime,
}

/// What the machine needs from the configuration of one field connection.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How the servers of the set are used.
    pub handling: Handling,
    /// The servers of the set in configuration order; each entry is the
    /// server's URL followed by its alternate network paths.
    pub servers: Vec<Vec<String>>,
    /// Delays between connect attempts and when to give up.
    pub reconnect: ReconnectPolicy,
    /// The bound of one connect attempt; also bounds how long the first
    /// selection of a set that connects every server waits.
    pub connect_timeout: Duration,
}

/// What a server's status subscription (or a read of the same variables)
/// reported. Every report also says the server is reachable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StatusReport {
    /// The status subscription is in place (its values follow).
    Watching,
    /// A good `Server.ServiceLevel` notification.
    ServiceLevel(u8),
    /// A good `ServerStatus.State` notification.
    State(ServerState),
    /// An `EstimatedReturnTime` notification (`None`: null or unreadable).
    ReturnTime(Option<DateTime>),
    /// A notification that changes nothing but reachability (a bad status
    /// or an unexpected type).
    Other,
    /// ServiceLevel, State and EstimatedReturnTime read at once after the
    /// session moved to another path: the server behind it may be another
    /// one. A `None` level or state was not readable and is left as it was;
    /// the return time is always replaced.
    Read {
        /// `Server.ServiceLevel`.
        service_level: Option<u8>,
        /// `ServerStatus.State`.
        state: Option<ServerState>,
        /// `Server.EstimatedReturnTime` (`None`: null or unreadable).
        return_time: Option<DateTime>,
    },
}

/// What happened, fed to [`Failover::handle`]. Events about a link name
/// the `generation` of the connect attempt they come from (the one of the
/// [`Action::Connect`] that started it); those of an earlier attempt are
/// ignored.
#[derive(Debug, Clone)]
pub enum Event<S> {
    /// Nothing new: a deadline was reached, or the driver woke up for its
    /// own reasons. Only the decisions of [`Failover::poll`] run.
    Tick,
    /// A connect attempt brought the link's session up.
    Up {
        /// Index of the link.
        link: usize,
        /// Generation of the attempt.
        generation: u64,
        /// The new session.
        session: S,
    },
    /// A connect attempt failed. `jitter` is a uniform sample in [-1, 1]
    /// for the reconnect delay.
    Failed {
        /// Index of the link.
        link: usize,
        /// Generation of the attempt.
        generation: u64,
        /// The failure, with the server's retry-after hint if any.
        failure: Failure,
        /// What went wrong, for the log.
        detail: String,
        /// Uniform sample in [-1, 1].
        jitter: f64,
    },
    /// The link's session is gone (connection lost, no other path worked,
    /// or the server no longer knew the session). `jitter` as for
    /// [`Event::Failed`].
    Lost {
        /// Index of the link.
        link: usize,
        /// Generation of the attempt that made the session.
        generation: u64,
        /// Why it ended.
        status: StatusCode,
        /// Index of the path it used last (the next attempt starts there).
        path: usize,
        /// Uniform sample in [-1, 1].
        jitter: f64,
    },
    /// The link's connection was lost and its session is being re-activated
    /// on a new channel: the server does not serve meanwhile (another server
    /// of a redundant set takes over), but the link is not lost yet. Ends
    /// with [`Event::Moved`] (re-activated) or [`Event::Lost`].
    Interrupted {
        /// Index of the link.
        link: usize,
        /// Generation of the attempt that made the session.
        generation: u64,
    },
    /// The link's session was re-activated over another network path (same
    /// session, same subscriptions), or its subscriptions were moved to a new
    /// session of the same server (`transferred`).
    Moved {
        /// Index of the link.
        link: usize,
        /// Generation of the attempt that made the session.
        generation: u64,
        /// The subscriptions moved to a new session (TransferSubscriptions).
        transferred: bool,
    },
    /// The server behind a connecting or connected link reported its status.
    Status {
        /// Index of the link.
        link: usize,
        /// Generation of the attempt that made the session.
        generation: u64,
        /// What it reported.
        report: StatusReport,
    },
    /// The shared items changed: every connected link reconciles its items
    /// (after this poll's decisions, with the active server they chose).
    ItemsChanged,
    /// An operator asked to leave the active server (decided at the next
    /// poll, together with whatever else happened).
    ForceFailover,
    /// An operator asked to reconnect now: every link that is waiting for
    /// its next attempt or has run out starts a fresh reconnect cycle at
    /// once (decided at the next poll).
    ReconnectNow,
}

/// Something for the driver to carry out, in the order returned.
#[derive(Debug, Clone, PartialEq)]
pub enum Action<S> {
    /// Start a connect attempt on `link` over `paths[first]`; its results
    /// come back as events tagged `generation`.
    Connect {
        /// Index of the link.
        link: usize,
        /// The link's paths (URLs); the session may later move among them.
        paths: Vec<String>,
        /// Index of the path to try first.
        first: usize,
        /// Generation of this attempt.
        generation: u64,
    },
    /// Close this session: its link is no longer wanted.
    Close(S),
    /// Northbound calls now go to this session (`None`: wait, nothing
    /// serves).
    Activate(Option<S>),
    /// No server serves any more: shared items show BadNoCommunication
    /// with their last value.
    MarkItemsBad,
    /// Bring the session's southbound items in line with the item table and
    /// with the monitoring mode its role under `active` needs.
    Reconcile {
        /// The link's session.
        session: S,
        /// Index of the active server.
        active: Option<usize>,
    },
    /// Move the session to its next path (close its channel; the client
    /// re-activates the session over the next path): the hot-and-mirrored
    /// server behind it is not healthy.
    MovePath(S),
    /// Read ServiceLevel, State and EstimatedReturnTime of the server
    /// behind the session and report them as [`StatusReport::Read`].
    RefreshStatus(S),
    /// Something happened that the history, counters and log show.
    Note(Note<S>),
}

/// What the history, counters and log of a connection show; no decision
/// depends on how the driver records them.
#[derive(Debug, Clone, PartialEq)]
pub enum Note<S> {
    /// A link's session came up.
    Up {
        /// Index of the link.
        link: usize,
        /// The session.
        session: S,
        /// The link had a session before (a reconnect).
        reconnect: bool,
        /// How long since the previous session was lost, if it was.
        recovered_after: Option<Duration>,
    },
    /// A connect attempt failed.
    Failed {
        /// Index of the link.
        link: usize,
        /// The path (URL) the attempt started with.
        url: String,
        /// The failure.
        failure: Failure,
        /// What went wrong.
        detail: String,
    },
    /// A link's session was lost.
    Lost {
        /// Index of the link.
        link: usize,
        /// The path (URL) the session used last.
        url: String,
        /// Why.
        status: StatusCode,
    },
    /// A link's session moved to another path (a reconnect without a new
    /// session), or its subscriptions to a new session (`transferred`).
    /// `session` is `None` when the link is no longer up.
    Moved {
        /// Index of the link.
        link: usize,
        /// The session, when still up.
        session: Option<S>,
        /// The subscriptions moved to a new session.
        transferred: bool,
    },
    /// The active server changed from one server to another.
    Failover {
        /// The server left.
        from: usize,
        /// The new active server.
        to: usize,
    },
    /// A cold-style set connects its next server on an operator's request.
    ForcedToNext {
        /// The server now connected.
        to: usize,
    },
    /// A cold-style set's candidate was unusable; the next one is tried.
    NextCandidate {
        /// The server left.
        from: usize,
        /// The server tried now.
        to: usize,
    },
    /// An operator's forced failover found no other server to go to.
    FailoverUnavailable {
        /// The active server, which stays.
        active: Option<usize>,
    },
    /// A link's reconnect cycle ran out; it starts a new one after
    /// `retry_in` (the policy's `max_delay`).
    GaveUp {
        /// Index of the link.
        link: usize,
        /// When the new cycle starts, from now.
        retry_in: Duration,
        /// The failure of the last attempt.
        status: StatusCode,
    },
    /// A link that had run out or was waiting starts a new reconnect cycle
    /// (`requested`: an operator's Reconnect now; otherwise `max_delay`
    /// after it gave up).
    NewCycle {
        /// Index of the link.
        link: usize,
        /// An operator asked for it.
        requested: bool,
    },
}

/// Where one link is.
#[derive(Debug, Clone, PartialEq)]
pub enum Phase<S> {
    /// Not wanted, or waiting to be wanted.
    Idle,
    /// A connect attempt is running.
    Connecting,
    /// Waiting for the next attempt, due at this instant.
    Waiting(Instant),
    /// Session up.
    Up(S),
    /// The reconnect cycle ran out; a new one starts at this instant.
    Exhausted(Instant),
}

/// One link: the sessions toward one server of the set over its paths (a
/// hot-and-mirrored set has one link over every server's paths).
#[derive(Debug, Clone)]
pub struct Link<S> {
    paths: Vec<String>,
    next_path: usize,
    phase: Phase<S>,
    cycle: ReconnectCycle,
    generation: u64,
    ever_up: bool,
    /// When its session was lost (the recovery duration starts).
    down_since: Option<Instant>,
}

impl<S> Link<S> {
    fn new(paths: Vec<String>, now: Instant) -> Self {
        Link {
            paths,
            next_path: 0,
            phase: Phase::Idle,
            cycle: ReconnectCycle::start(now),
            generation: 0,
            ever_up: false,
            down_since: None,
        }
    }

    /// Where the link is.
    pub fn phase(&self) -> &Phase<S> {
        &self.phase
    }

    /// The session, when up.
    pub fn session(&self) -> Option<&S> {
        match &self.phase {
            Phase::Up(s) => Some(s),
            _ => None,
        }
    }

    /// The link's paths (URLs), in the order they are tried.
    pub fn paths(&self) -> &[String] {
        &self.paths
    }

    /// The path the next connect attempt starts with (shown while the link
    /// is not up).
    pub fn next_path(&self) -> &str {
        self.paths
            .get(self.next_path)
            .map(String::as_str)
            .unwrap_or_default()
    }

    /// Generation of the latest connect attempt (0 before the first).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    fn is_up(&self) -> bool {
        matches!(self.phase, Phase::Up(_))
    }

    /// Its first connect attempt failed, or its first session was lost (a
    /// second attempt only starts after that): the first selection of the
    /// set does not wait for this server.
    fn failed_once(&self) -> bool {
        self.generation > 1 || matches!(self.phase, Phase::Waiting(_) | Phase::Exhausted(_))
    }

    /// Makes a link that waits or ran out idle, with a fresh reconnect
    /// cycle, so it is connected at once: a cold-style set comes back to it.
    fn rewind(&mut self, now: Instant) {
        if matches!(self.phase, Phase::Exhausted(_) | Phase::Waiting(_)) {
            self.phase = Phase::Idle;
            self.cycle = ReconnectCycle::start(now);
        }
    }
}

/// The part of the machine's state that depends on how the set is used.
#[derive(Debug, Clone)]
enum Mode {
    /// warm, hot, hot_merge: every server keeps a link; the first choice of
    /// the active server waits for all of them.
    ConnectAll(FirstSelection),
    /// none, cold: only `candidate` is connected.
    OneAtATime {
        /// The server connected now.
        candidate: usize,
    },
    /// hot_and_mirrored: one link; moves of its session are paced.
    Mirrored {
        /// A move was started and has not completed yet.
        moving: bool,
        /// Spacing of moves in a row.
        pacing: MovePacing,
    },
}

/// The failover decisions of one field connection (see the module docs).
/// Created by the driver when the connection starts; `S` is the driver's
/// session handle.
#[derive(Debug, Clone)]
pub struct Failover<S> {
    reconnect: ReconnectPolicy,
    links: Vec<Link<S>>,
    /// Status of the server behind each link (index = link).
    peers: Vec<PeerStatus>,
    mode: Mode,
    active: Option<usize>,
    was_connected: bool,
    state: ConnState,
    /// An operator's forced failover, decided at the next poll.
    force_pending: bool,
    /// An operator's Reconnect now, carried out at the next poll.
    reconnect_pending: bool,
    /// The shared items changed; reconcile every link after the decisions.
    reconcile_all: bool,
    /// Since when, and with how many failed attempts, the connection has
    /// served nobody (`None` while it serves, and before anything failed).
    outage: Option<Outage>,
    deadline: Option<Instant>,
    out: Vec<Action<S>>,
}

impl<S: Clone> Failover<S> {
    /// The machine of a connection starting at `now`. Nothing is connected
    /// until the first [`Failover::poll`].
    pub fn new(settings: Settings, now: Now) -> Self {
        let Settings {
            handling,
            servers,
            reconnect,
            connect_timeout,
        } = settings;
        // A hot-and-mirrored set is one logical session: one link whose
        // paths are every server's URL and alternates.
        let paths = if handling == Handling::HotAndMirrored {
            vec![servers.concat()]
        } else {
            servers
        };
        let links: Vec<Link<S>> = paths.into_iter().map(|p| Link::new(p, now.mono)).collect();
        let mode = match handling {
            h if h.connects_all() => {
                Mode::ConnectAll(FirstSelection::new(now.mono, connect_timeout))
            }
            Handling::HotAndMirrored => Mode::Mirrored {
                moving: false,
                pacing: MovePacing::default(),
            },
            _ => Mode::OneAtATime { candidate: 0 },
        };
        Failover {
            reconnect,
            peers: vec![PeerStatus::default(); links.len()],
            links,
            mode,
            active: None,
            was_connected: false,
            state: ConnState::Connecting,
            force_pending: false,
            reconnect_pending: false,
            reconcile_all: false,
            outage: None,
            deadline: None,
            out: Vec::new(),
        }
    }

    /// The connection's state, as of the last poll.
    pub fn state(&self) -> ConnState {
        self.state
    }

    /// Index of the active server (link), as of the last poll.
    pub fn active(&self) -> Option<usize> {
        self.active
    }

    /// The links, in configuration order.
    pub fn links(&self) -> &[Link<S>] {
        &self.links
    }

    /// What is known of the server behind each link (index = link).
    pub fn peers(&self) -> &[PeerStatus] {
        &self.peers
    }

    /// When [`Failover::poll`] must run again at the latest (a reconnect
    /// attempt, a paced move, the end of a Maintenance deferral or of the
    /// first selection's wait), as of the last poll; `None`: only an event
    /// can change anything.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Since when, and with how many failed connect attempts, the
    /// connection has served nobody, as of the last poll: from its first
    /// failed attempt (a connection that never served) or from the loss of
    /// the server that served, until a server serves again. `None` while
    /// a server serves, and while nothing has failed yet.
    pub fn outage(&self) -> Option<&Outage> {
        self.outage.as_ref()
    }

    /// Whether the connection is failing rather than still connecting, as
    /// of the last poll: it serves nobody and [`FAILING_AFTER`] connect
    /// attempts in a row have failed, or every server's reconnect cycle ran
    /// out ([`ConnState::GaveUp`]). The first attempts of a connection (and
    /// the re-activation after a blip) read as connecting or reconnecting.
    pub fn failing(&self) -> bool {
        self.state == ConnState::GaveUp
            || self
                .outage
                .as_ref()
                .is_some_and(|o| o.failed_attempts >= FAILING_AFTER)
    }

    /// Whether a server serves the connection now: the active one's session
    /// is up and reachable (not being re-activated after a lost
    /// connection).
    fn serving(&self) -> bool {
        self.active.is_some_and(|a| {
            self.links.get(a).is_some_and(Link::is_up)
                && self.peers.get(a).is_some_and(|p| p.reachable)
        })
    }

    /// Takes in what happened. Its direct consequences (records, the
    /// active session replaced, a reconcile of a new session) are queued
    /// for the next [`Failover::poll`], which also makes the decisions. The
    /// driver calls it for every event it has, then polls.
    pub fn handle(&mut self, event: Event<S>, now: Now) {
        match event {
            Event::Tick => {}
            Event::ItemsChanged => self.reconcile_all = true,
            Event::ForceFailover => self.force_pending = true,
            Event::ReconnectNow => self.reconnect_pending = true,
            Event::Up {
                link,
                generation,
                session,
            } => self.on_up(link, generation, session, now),
            Event::Failed {
                link,
                generation,
                failure,
                detail,
                jitter,
            } => self.on_failed(link, generation, failure, detail, jitter, now),
            Event::Lost {
                link,
                generation,
                status,
                path,
                jitter,
            } => self.on_lost(link, generation, status, path, jitter, now),
            Event::Moved {
                link,
                generation,
                transferred,
            } => self.on_moved(link, generation, transferred),
            Event::Interrupted { link, generation } => {
                let up = self
                    .links
                    .get(link)
                    .is_some_and(|l| l.generation == generation && l.is_up());
                if let Some(p) = self.peers.get_mut(link).filter(|_| up) {
                    p.reachable = false;
                }
            }
            Event::Status {
                link,
                generation,
                report,
            } => self.on_status(link, generation, report, now),
        }
    }

    /// Makes the decisions at `now` and returns what to do, in order:
    /// the consequences of the events handled since the last poll, then
    /// links started and stopped, the active server chosen, sessions moved.
    /// Called after [`Failover::handle`], and at
    /// [`Failover::next_deadline`].
    pub fn poll(&mut self, now: Now) -> Vec<Action<S>> {
        self.decide(now);
        std::mem::take(&mut self.out)
    }

    /// The link `link` if the event's `generation` is its current one.
    fn current(&mut self, link: usize, generation: u64) -> Option<&mut Link<S>> {
        self.links
            .get_mut(link)
            .filter(|l| l.generation == generation)
    }

    fn on_up(&mut self, i: usize, generation: u64, session: S, now: Now) {
        let active = self.active;
        let Some(link) = self.current(i, generation) else {
            return;
        };
        let note = Note::Up {
            link: i,
            session: session.clone(),
            reconnect: link.ever_up,
            recovered_after: link
                .down_since
                .take()
                .map(|since| now.mono.saturating_duration_since(since)),
        };
        link.ever_up = true;
        link.cycle = ReconnectCycle::start(now.mono);
        link.phase = Phase::Up(session.clone());
        // A new session: no move of the old one is still on its way.
        if let Mode::Mirrored { moving, .. } = &mut self.mode {
            *moving = false;
        }
        self.out.push(Action::Note(note));
        if active == Some(i) {
            self.out.push(Action::Activate(Some(session.clone())));
        }
        self.out.push(Action::Reconcile { session, active });
    }

    fn on_failed(
        &mut self,
        i: usize,
        generation: u64,
        failure: Failure,
        detail: String,
        jitter: f64,
        now: Now,
    ) {
        let policy = self.reconnect.clone();
        let serving = self.serving();
        let Some(link) = self.current(i, generation) else {
            return;
        };
        let url = link.next_path().to_string();
        link.next_path = (link.next_path + 1) % link.paths.len().max(1);
        let delay = link.cycle.next_delay(&policy, failure, now.mono, jitter);
        link.phase = match delay {
            Some(d) => Phase::Waiting(now.mono + d),
            None => Phase::Exhausted(now.mono + policy.max_delay),
        };
        // Only the attempts of a connection that serves nobody count (a
        // backup of a redundant set failing while another server serves
        // is not an outage).
        if !serving {
            self.outage
                .get_or_insert(Outage {
                    since: now.wall,
                    failed_attempts: 0,
                })
                .failed_attempts += 1;
        }
        self.out.push(Action::Note(Note::Failed {
            link: i,
            url,
            failure,
            detail,
        }));
        if delay.is_none() {
            self.note(Note::GaveUp {
                link: i,
                retry_in: policy.max_delay,
                status: failure.status,
            });
        }
    }

    fn on_lost(
        &mut self,
        i: usize,
        generation: u64,
        status: StatusCode,
        path: usize,
        jitter: f64,
        now: Now,
    ) {
        let policy = self.reconnect.clone();
        let Some(link) = self.current(i, generation) else {
            return;
        };
        // Reconnect over the path that worked last.
        link.next_path = path;
        let url = link.next_path().to_string();
        link.down_since = Some(now.mono);
        link.cycle = ReconnectCycle::start(now.mono);
        // The first reconnect attempt follows the policy's initial delay.
        let failure = Failure {
            status,
            retry_after: None,
        };
        let delay = link.cycle.next_delay(&policy, failure, now.mono, jitter);
        link.phase = match delay {
            Some(d) => Phase::Waiting(now.mono + d.min(policy.initial_delay)),
            None => Phase::Exhausted(now.mono + policy.max_delay),
        };
        self.peers[i] = PeerStatus::default();
        self.out.push(Action::Note(Note::Lost {
            link: i,
            url,
            status,
        }));
        if delay.is_none() {
            self.note(Note::GaveUp {
                link: i,
                retry_in: policy.max_delay,
                status,
            });
        }
        if self.active == Some(i) {
            self.out.push(Action::Activate(None));
        }
    }

    fn on_moved(&mut self, i: usize, generation: u64, transferred: bool) {
        let Some(link) = self.current(i, generation) else {
            return;
        };
        let session = link.session().cloned();
        if let Mode::Mirrored { moving, .. } = &mut self.mode {
            *moving = false;
        }
        self.out.push(Action::Note(Note::Moved {
            link: i,
            session: session.clone(),
            transferred,
        }));
        // The server behind the new path may be another one (mirrored set):
        // learn its level and state now rather than at their next change.
        if let Some(s) = session {
            self.out.push(Action::RefreshStatus(s));
        }
    }

    fn on_status(&mut self, i: usize, generation: u64, report: StatusReport, now: Now) {
        // Only the attempt in progress or the session up reports; a late
        // notification of a lost or closed session is not the server's
        // present.
        let live = self
            .links
            .get(i)
            .is_some_and(|l| l.generation == generation)
            && matches!(
                self.links.get(i).map(Link::phase),
                Some(Phase::Connecting | Phase::Up(_))
            );
        let Some(p) = self.peers.get_mut(i).filter(|_| live) else {
            return;
        };
        p.reachable = true;
        match report {
            StatusReport::Watching | StatusReport::Other => {}
            StatusReport::ServiceLevel(level) => {
                if level == 0 && p.service_level != Some(0) {
                    p.maintenance_since = Some(now.wall);
                } else if level != 0 {
                    p.maintenance_since = None;
                }
                p.service_level = Some(level);
            }
            StatusReport::State(state) => p.state = Some(state),
            StatusReport::ReturnTime(t) => {
                p.estimated_return_time = t.filter(|t| !t.is_null());
            }
            StatusReport::Read {
                service_level,
                state,
                return_time,
            } => {
                if let Some(level) = service_level {
                    p.maintenance_since = (level == 0).then_some(now.wall);
                    p.service_level = Some(level);
                }
                if let Some(state) = state {
                    p.state = Some(state);
                }
                p.estimated_return_time = return_time.filter(|t| !t.is_null());
            }
        }
    }

    /// Whether link `i` is wanted connected.
    fn wanted(&self, i: usize) -> bool {
        match self.mode {
            Mode::OneAtATime { candidate } => i == candidate,
            Mode::ConnectAll(_) | Mode::Mirrored { .. } => true,
        }
    }

    /// Whether server `i` can serve: its link is up and its ServiceLevel
    /// known (the fallback when no server is preferable).
    fn serves(&self, i: usize) -> bool {
        self.links.get(i).is_some_and(Link::is_up)
            && self.peers.get(i).is_some_and(|p| p.service_level.is_some())
    }

    /// Until when the first selection must still wait at `now` (a set that
    /// connects every server, before its first choice).
    fn first_wait(&self, now: Now) -> Option<Instant> {
        let Mode::ConnectAll(first) = &self.mode else {
            return None;
        };
        let failed: Vec<bool> = self.links.iter().map(Link::failed_once).collect();
        first.wait_until(&self.peers, &failed, now.mono)
    }

    /// The decisions of one poll. A cold-style candidate change starts over
    /// (links to start and stop change with it).
    fn decide(&mut self, now: Now) {
        if std::mem::take(&mut self.reconnect_pending) {
            self.reconnect_now(now);
        }
        loop {
            self.start_and_stop_links(now);
            let preferred = redundancy::select(&self.peers, self.active, now.wall);
            // The first choice waits while a server may still report.
            let first_wait = self.first_wait(now);
            // With nothing preferable (e.g. the only server in
            // Maintenance), a connected server still serves rather than
            // none.
            let mut chosen = preferred
                .or_else(|| {
                    self.active
                        .filter(|a| self.serves(*a))
                        .or_else(|| (0..self.links.len()).find(|i| self.serves(*i)))
                })
                .filter(|_| first_wait.is_none());
            if std::mem::take(&mut self.force_pending) {
                if let Some(other) = self.other_server(now) {
                    chosen = Some(other);
                } else if self.next_candidate(now, true) {
                    continue;
                } else {
                    self.note(Note::FailoverUnavailable {
                        active: self.active,
                    });
                }
            }
            self.pace_mirrored_move(now);
            if chosen != self.active {
                self.switch_active(chosen);
            }
            if self.candidate_unusable(preferred, now) && self.next_candidate(now, false) {
                continue;
            }
            break;
        }
        self.settle(now);
    }

    /// An operator's Reconnect now: every link that waits for its next
    /// attempt or has run out starts a fresh cycle (connected at once when
    /// it is wanted).
    fn reconnect_now(&mut self, now: Now) {
        for i in 0..self.links.len() {
            let link = &mut self.links[i];
            if matches!(link.phase, Phase::Waiting(_) | Phase::Exhausted(_)) {
                link.rewind(now.mono);
                self.note(Note::NewCycle {
                    link: i,
                    requested: true,
                });
            }
        }
    }

    /// Starts the links that are wanted and due (a link that ran out starts
    /// a new cycle `max_delay` after it gave up), closes those up but no
    /// longer wanted.
    fn start_and_stop_links(&mut self, now: Now) {
        for i in 0..self.links.len() {
            let wanted = self.wanted(i);
            let link = &mut self.links[i];
            match &link.phase {
                Phase::Idle if wanted => self.out.push(start_connect(i, link)),
                Phase::Waiting(at) if wanted && *at <= now.mono => {
                    self.out.push(start_connect(i, link));
                }
                Phase::Exhausted(at) if wanted && *at <= now.mono => {
                    link.rewind(now.mono);
                    self.out.push(Action::Note(Note::NewCycle {
                        link: i,
                        requested: false,
                    }));
                    self.out.push(start_connect(i, link));
                }
                Phase::Up(s) if !wanted => {
                    self.out.push(Action::Close(s.clone()));
                    link.phase = Phase::Idle;
                    self.peers[i] = PeerStatus::default();
                }
                _ => {}
            }
        }
    }

    /// The server an operator's forced failover goes to: the best other one
    /// by the usual rules, else any other one that serves.
    fn other_server(&self, now: Now) -> Option<usize> {
        let mut others = self.peers.clone();
        if let Some(a) = self.active.and_then(|a| others.get_mut(a)) {
            *a = PeerStatus::default();
        }
        redundancy::select(&others, None, now.wall)
            .or_else(|| (0..self.links.len()).find(|i| Some(*i) != self.active && self.serves(*i)))
    }

    /// Whether a cold-style set's candidate cannot serve: its attempts
    /// failed (waiting or exhausted), or it is connected, has reported, is
    /// not fine and no server is preferable.
    fn candidate_unusable(&self, preferred: Option<usize>, now: Now) -> bool {
        let Mode::OneAtATime { candidate } = self.mode else {
            return false;
        };
        if self.links.len() < 2 {
            return false;
        }
        match &self.links[candidate].phase {
            Phase::Up(_) => {
                let p = &self.peers[candidate];
                p.service_level.is_some()
                    && p.state.is_some()
                    && preferred.is_none()
                    && redundancy::should_failover(p, now.wall)
            }
            Phase::Waiting(_) | Phase::Exhausted(_) => true,
            Phase::Idle | Phase::Connecting => false,
        }
    }

    /// Makes a cold-style set's next server the candidate (`forced`: an
    /// operator asked). False when the set is not cold-style or has one
    /// server.
    fn next_candidate(&mut self, now: Now, forced: bool) -> bool {
        let n = self.links.len();
        let Mode::OneAtATime { candidate } = &mut self.mode else {
            return false;
        };
        if n < 2 {
            return false;
        }
        let from = *candidate;
        let to = (from + 1) % n;
        *candidate = to;
        let link = &mut self.links[to];
        if forced {
            link.rewind(now.mono);
            self.note(Note::ForcedToNext { to });
        } else {
            match link.phase {
                Phase::Exhausted(_) => link.rewind(now.mono),
                Phase::Waiting(_) => link.phase = Phase::Idle,
                _ => {}
            }
            self.note(Note::NextCandidate { from, to });
        }
        true
    }

    /// A hot-and-mirrored server that is not healthy: move the one session
    /// to the next path. Moves in a row (the next server is not healthy
    /// either) are spaced by the reconnect backoff; a healthy server starts
    /// the spacing over.
    fn pace_mirrored_move(&mut self, now: Now) {
        let Mode::Mirrored { moving, pacing } = &mut self.mode else {
            return;
        };
        let [link] = self.links.as_slice() else {
            return;
        };
        let (Phase::Up(s), Some(p)) = (&link.phase, self.peers.first()) else {
            return;
        };
        let known = p.service_level.is_some() && p.state.is_some();
        let unhealthy = known && redundancy::should_failover(p, now.wall);
        if known && !unhealthy && !*moving {
            pacing.settled();
        }
        if unhealthy && !*moving && link.paths.len() > 1 && pacing.may_move(now.mono) {
            *moving = true;
            pacing.moved(&self.reconnect, now.mono);
            self.out.push(Action::MovePath(s.clone()));
        }
    }

    /// Makes `chosen` the active server: northbound calls go to its
    /// session, every link's items take the monitoring mode of their new
    /// role.
    fn switch_active(&mut self, chosen: Option<usize>) {
        if let (Some(to), Some(from)) = (chosen, self.active) {
            self.note(Note::Failover { from, to });
        }
        self.active = chosen;
        if let (Mode::ConnectAll(first), Some(_)) = (&mut self.mode, chosen) {
            first.chosen();
        }
        let session = chosen.and_then(|a| self.links[a].session().cloned());
        if session.is_none() && self.was_connected {
            self.out.push(Action::MarkItemsBad);
        }
        self.out.push(Action::Activate(session));
        self.reconcile_every_link();
    }

    fn reconcile_every_link(&mut self) {
        for l in &self.links {
            if let Phase::Up(s) = &l.phase {
                self.out.push(Action::Reconcile {
                    session: s.clone(),
                    active: self.active,
                });
            }
        }
    }

    /// The connection state after the decisions (every link ran out: gave
    /// up, and northbound calls are refused at once); computes the next
    /// deadline.
    fn settle(&mut self, now: Now) {
        let all_exhausted = self
            .links
            .iter()
            .all(|l| matches!(l.phase, Phase::Exhausted(_)));
        let was = self.state;
        self.state = if all_exhausted {
            ConnState::GaveUp
        } else if let Some(a) = self.active {
            self.was_connected = true;
            // The active server's session is being re-activated after a
            // lost connection (no other server took over).
            if self.peers.get(a).is_some_and(|p| !p.reachable) {
                ConnState::Reconnecting
            } else {
                ConnState::Connected
            }
        } else if self.was_connected {
            ConnState::Reconnecting
        } else {
            ConnState::Connecting
        };
        if all_exhausted && was != ConnState::GaveUp {
            self.out.push(Action::MarkItemsBad);
        }
        if self.state == ConnState::Connected {
            self.outage = None;
        } else if was == ConnState::Connected && self.outage.is_none() {
            // The server that served was lost: the outage starts now, its
            // failed attempts follow.
            self.outage = Some(Outage {
                since: now.wall,
                failed_attempts: 0,
            });
        }
        if std::mem::take(&mut self.reconcile_all) {
            self.reconcile_every_link();
        }
        self.deadline = self.wake_at(now);
    }

    /// The earliest of: a link's next attempt, a paced move, the end of a
    /// Maintenance deferral, the end of the first selection's wait.
    fn wake_at(&self, now: Now) -> Option<Instant> {
        let pacing = match &self.mode {
            Mode::Mirrored { pacing, .. } => Some(pacing),
            _ => None,
        };
        let next_timer = self
            .links
            .iter()
            .filter_map(|l| match l.phase {
                Phase::Waiting(at) | Phase::Exhausted(at) => Some(at),
                Phase::Up(_) => pacing.and_then(|p| p.wake_at(now.mono)),
                _ => None,
            })
            .min();
        let recheck = redundancy::next_recheck(&self.peers, now.wall).map(|t| {
            let ms = (t.ticks() - now.wall.ticks()).max(0) / 10_000;
            now.mono + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
        });
        [next_timer, recheck, self.first_wait(now)]
            .into_iter()
            .flatten()
            .min()
    }

    fn note(&mut self, note: Note<S>) {
        self.out.push(Action::Note(note));
    }
}

/// A new connect attempt on link `i`: the next generation, from its next
/// path.
fn start_connect<S>(i: usize, link: &mut Link<S>) -> Action<S> {
    link.generation += 1;
    link.phase = Phase::Connecting;
    Action::Connect {
        link: i,
        paths: link.paths.clone(),
        first: link.next_path,
        generation: link.generation,
    }
}

#[cfg(test)]
mod tests;
