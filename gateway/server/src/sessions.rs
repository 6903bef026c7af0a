//! The engine's sessions part: the session table ([`Sessions`], pure data)
//! behind its lock, the login throttle, and the wake-up of the
//! subscription timer. Lock order: the address space lock may be taken
//! before the sessions lock (services do), never the other way round.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use opcua_core::{RequestMessage, ResponseMessage};
use opcua_types::{
    ByteString, DateTime, NodeId, RequestHeader, ResponseHeader, StatusCode, TransferResult,
    TransferSubscriptionsRequest, TransferSubscriptionsResponse,
};
use parking_lot::{Mutex, MutexGuard};
use uagate_isolation::owner::OwnerClass;

use crate::error::ServiceError;
use crate::methods::Caller;
use crate::session::{Session, Sessions, UserIdentity};
use crate::subscriptions::GatewayEvent;
use crate::throttle::LoginThrottle;
use crate::{ChannelInfo, SessionSummary};

type Result<T> = std::result::Result<T, ServiceError>;

/// The northbound sessions of the engine.
pub(crate) struct SessionTable {
    table: Mutex<Sessions>,
    /// Failed-login counting, shared with the console (see
    /// [`crate::Engine::login_throttle`]).
    throttle: std::sync::Arc<LoginThrottle>,
    /// Wakes the subscription timer when subscriptions or Publish queues change.
    changed: tokio::sync::Notify,
    /// When the subscription timer will wake next, in nanoseconds after
    /// `epoch` (`u64::MAX` while it ticks): a Publish request wakes it only
    /// when its timeout falls before that.
    planned_wake: AtomicU64,
    /// The origin of `planned_wake`.
    epoch: Instant,
}

/// Subscription limits for a new session, from `[server]`; called by
/// CreateSession.
pub(crate) fn subscription_limits(s: &uagate_config::Server) -> uagate_subs::Limits {
    uagate_subs::Limits {
        min_publishing_interval: s.min_publishing_interval,
        max_subscriptions_per_session: s.max_subscriptions_per_session,
        max_monitored_items_per_subscription: s.max_monitored_items_per_subscription,
        max_queue_size: s.max_queue_size,
        min_sampling_interval: s.min_sampling_interval,
        max_retransmission_queue: s.max_retransmission_queue,
        max_publish_requests: s.max_publish_requests_per_session,
        ..uagate_subs::Limits::default()
    }
}

impl SessionTable {
    /// An empty table admitting at most `max` sessions; built at start.
    pub(crate) fn new(max: usize) -> SessionTable {
        SessionTable {
            table: Mutex::new(Sessions::new(max)),
            throttle: std::sync::Arc::default(),
            changed: tokio::sync::Notify::new(),
            planned_wake: AtomicU64::new(u64::MAX),
            epoch: Instant::now(),
        }
    }

    /// The table itself, for services that change several sessions or
    /// sessions and other state in steps (ActivateSession, the
    /// subscription timer).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Sessions> {
        self.table.lock()
    }

    /// The login throttle (UserName identity tokens and console logins).
    pub(crate) fn throttle(&self) -> &std::sync::Arc<LoginThrottle> {
        &self.throttle
    }

    /// Wakes the subscription timer: subscriptions, their items or a
    /// Publish queue changed.
    pub(crate) fn notify_changed(&self) {
        self.changed.notify_one();
    }

    /// Wakes the subscription timer if `at` comes before the wake it
    /// planned; called for a Publish request queued with a timeout, which
    /// changes no other timer.
    pub(crate) fn notify_if_before(&self, at: Instant) {
        if self.nanos(at) < self.planned_wake.load(Ordering::Acquire) {
            self.notify_changed();
        }
    }

    /// Records when the subscription timer wakes next (`None`: it is
    /// ticking now, so every Publish timeout wakes it again); called by
    /// the timer before and after each tick.
    pub(crate) fn plan_wake(&self, at: Option<Instant>) {
        let n = at.map_or(u64::MAX, |at| self.nanos(at));
        self.planned_wake.store(n, Ordering::Release);
    }

    /// `at` as nanoseconds after `epoch` (0 before it).
    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX - 1)
    }

    /// Resolves at the next [`SessionTable::notify_changed`]; awaited by
    /// the subscription timer between deadlines.
    pub(crate) async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Number of sessions (created and active).
    pub(crate) fn count(&self) -> usize {
        self.table.lock().len()
    }

    /// Sessions never activated that CreateSession evicted from a full
    /// session table since start (metrics).
    pub(crate) fn evicted(&self) -> u64 {
        self.table.lock().evicted()
    }

    /// Adds a session made by CreateSession, evicting the oldest session
    /// never activated when the table is full. Returns the session count.
    pub(crate) fn insert(&self, session: Session) -> Result<usize> {
        let (count, evicted) = {
            let mut sessions = self.table.lock();
            let evicted = sessions.insert(session)?;
            (sessions.len(), evicted)
        };
        if let Some(e) = evicted {
            tracing::warn!(session = %e.id, channel = e.channel_id, "session table full: evicted the oldest session never activated");
        }
        Ok(count)
    }

    /// Removes the session of a CloseSession on `chan`. Returns the
    /// session count.
    /// With `delete_subscriptions` false its subscriptions live on until
    /// their lifetime ends or another session of the same user takes them
    /// over with TransferSubscriptions (Part 4 5.6.4).
    pub(crate) fn close(
        &self,
        chan: &ChannelInfo,
        token: &NodeId,
        delete_subscriptions: bool,
    ) -> Result<usize> {
        let mut sessions = self.table.lock();
        on_channel(&mut sessions, chan, token)?;
        let closed = if delete_subscriptions {
            sessions.remove(token).map(|s| s.id)
        } else {
            sessions.detach(token)
        };
        if let Some(id) = closed {
            tracing::info!(session = %id, "session closed");
        }
        let count = sessions.len();
        drop(sessions);
        // The subscription timer and the field demand see the change.
        self.changed.notify_one();
        Ok(count)
    }

    /// Removes the session with public SessionId `id` (an operator closing
    /// it). Returns it and the session count left.
    pub(crate) fn remove_by_session_id(&self, id: &NodeId) -> Option<(Session, usize)> {
        let mut sessions = self.table.lock();
        let closed = sessions.remove_by_session_id(id);
        let count = sessions.len();
        drop(sessions);
        Some((closed?, count))
    }

    /// Removes timed-out sessions, logging each. Returns the session count.
    pub(crate) fn expire(&self, now: Instant) -> usize {
        let mut sessions = self.table.lock();
        for id in sessions.expire(now) {
            tracing::info!(session = %id, "session timed out");
        }
        sessions.len()
    }

    /// Whether a session is bound to channel `channel_id`; asked by its
    /// connection on every turn of its loop.
    pub(crate) fn has_channel(&self, channel_id: u32) -> bool {
        self.table.lock().has_channel(channel_id)
    }

    /// Whether channel `channel_id` carries an activated session; asked
    /// when an intermediate chunk starts a message (reassembly charges).
    pub(crate) fn has_active_session(&self, channel_id: u32) -> bool {
        self.table
            .lock()
            .iter()
            .any(|s| s.channel_id == channel_id && s.is_active())
    }

    /// Drops the unactivated sessions of a channel whose connection ended.
    pub(crate) fn channel_closed(&self, channel_id: u32) {
        self.table.lock().channel_closed(channel_id);
    }

    /// The sessions for the console, sorted by creation time.
    pub(crate) fn list(&self) -> Vec<SessionSummary> {
        let mut out: Vec<SessionSummary> = self.table.lock().live().map(summary).collect();
        out.sort_by_key(|s| s.created);
        out
    }

    /// What the session table counts for ServerDiagnosticsSummary: live
    /// sessions, sessions ended by timeout and by error, subscriptions
    /// (of detached sessions too) and their distinct publishing intervals.
    pub(crate) fn diagnostics(&self) -> SessionDiagnostics {
        let sessions = self.table.lock();
        let (timed_out, aborted) = sessions.ended();
        let mut intervals = std::collections::BTreeSet::new();
        let mut subscriptions = 0;
        for s in sessions.iter() {
            for id in s.subscriptions.subscription_ids() {
                if let Some(sub) = s.subscriptions.subscription(id) {
                    subscriptions += 1;
                    intervals.insert(sub.publishing_interval());
                }
            }
        }
        SessionDiagnostics {
            current: sessions.len(),
            timed_out,
            aborted,
            subscriptions,
            publishing_intervals: intervals.len(),
        }
    }

    /// Counts an answered request in the diagnostics of the session whose
    /// authentication token is `token`, if there is one (see
    /// [`crate::session_diag::ClientRecord::count`]). Called for every
    /// answer.
    pub(crate) fn count_request(&self, token: &NodeId, slot: usize, status: StatusCode) {
        if token.is_null() {
            return;
        }
        if let Ok(session) = self.table.lock().get_mut(token) {
            session.client.count(slot, status);
        }
    }

    /// SessionDiagnosticsArray and SessionSecurityDiagnosticsArray (Part 5
    /// 6.3.4): one entry per session now (not the ended ones keeping their
    /// subscriptions); and SubscriptionDiagnosticsArray (6.3.3): one entry
    /// per subscription, of ended sessions too. Built once a second for the
    /// address space: snapshots under the lock, structures after it.
    pub(crate) fn session_diagnostics(&self) -> DiagnosticsArrays {
        let (now, instant) = (opcua_types::DateTime::now(), Instant::now());
        let (snapshots, subscriptions): (Vec<_>, Vec<_>) = {
            let sessions = self.table.lock();
            let snapshots = sessions
                .live()
                .map(|s| crate::session_diag::Snapshot::of(s, instant))
                .collect();
            let subscriptions = sessions
                .iter()
                .flat_map(|s| s.subscriptions.diagnostics(&s.id))
                .collect();
            (snapshots, subscriptions)
        };
        let (sessions, security) = snapshots
            .iter()
            .map(|s| (s.session_diagnostics(now), s.session_security_diagnostics()))
            .unzip();
        DiagnosticsArrays {
            sessions,
            security,
            subscriptions,
        }
    }

    /// Subscriptions and monitored items of all sessions.
    pub(crate) fn subscription_counts(&self) -> (usize, usize) {
        let sessions = self.table.lock();
        sessions.iter().fold((0, 0), |(s, m), session| {
            (
                s + session.subscriptions.subscription_count(),
                m + session.subscriptions.data_items().len(),
            )
        })
    }

    /// Runs `f` on the active session of this request, refreshing its activity time.
    pub(crate) fn with_session<T>(
        &self,
        chan: &ChannelInfo,
        header: &RequestHeader,
        f: impl FnOnce(&mut Session) -> Result<T>,
    ) -> Result<T> {
        let mut sessions = self.table.lock();
        let session = on_channel(&mut sessions, chan, &header.authentication_token)?;
        if !session.is_active() {
            return Err(ServiceError::SessionNotActivated);
        }
        session.last_activity = Instant::now();
        f(session)
    }

    /// The isolation class a decoded request may use beyond the shared
    /// capacity, from the live session it names (ResourceIsolation.md:
    /// classified by a verified session, not by the service name alone;
    /// issue 17 item 7). `Reconnect` for recovery work: ActivateSession
    /// moving an activated session to this channel from the same client
    /// certificate, and TransferSubscriptions and Republish of an activated
    /// session on this channel. `Control` for maintenance of an activated
    /// session on this channel: CloseSession, and a Call of only
    /// RequestServerStateChange, ConditionRefresh or ConditionRefresh2.
    /// `None` for everything else (the caller's own class applies). Called
    /// for every decoded request before it is queued; other services cost
    /// one match.
    pub(crate) fn work_class(
        &self,
        chan: &ChannelInfo,
        request: &RequestMessage,
    ) -> Option<OwnerClass> {
        use RequestMessage as M;
        enum Work {
            Move,
            Recovery,
            Control,
        }
        let (token, work) = match request {
            M::ActivateSession(r) => (&r.request_header.authentication_token, Work::Move),
            M::TransferSubscriptions(r) => (&r.request_header.authentication_token, Work::Recovery),
            M::Republish(r) => (&r.request_header.authentication_token, Work::Recovery),
            M::CloseSession(r) => (&r.request_header.authentication_token, Work::Control),
            M::Call(r)
                if r.methods_to_call.as_ref().is_some_and(|m| {
                    !m.is_empty()
                        && m.iter()
                            .all(|c| crate::methods::is_control_method(&c.method_id))
                }) =>
            {
                (&r.request_header.authentication_token, Work::Control)
            }
            _ => return None,
        };
        let table = self.table.lock();
        let session = table.get(token).filter(|s| s.is_active())?;
        let on_this_channel = session.channel_id == chan.channel_id;
        match work {
            Work::Move => (!on_this_channel
                && (session.client_certificate == chan.client_certificate
                    || crate::open::same_leaf(
                        session.client_certificate.as_ref(),
                        chan.client_certificate.as_ref(),
                    )))
            .then_some(OwnerClass::Reconnect),
            Work::Recovery => on_this_channel.then_some(OwnerClass::Reconnect),
            Work::Control => on_this_channel.then_some(OwnerClass::Control),
        }
    }

    /// The caller of a request: identity of its active session and channel mode.
    pub(crate) fn caller(&self, chan: &ChannelInfo, token: &NodeId) -> Result<Caller> {
        let mut sessions = self.table.lock();
        let s = on_channel(&mut sessions, chan, token)?;
        s.last_activity = std::time::Instant::now();
        let identity = s
            .identity()
            .cloned()
            .ok_or(ServiceError::SessionNotActivated)?;
        Ok(Caller {
            identity,
            mode: chan.mode,
            session: s.id.clone(),
        })
    }

    /// The handles of subscription `id` of session `session` (Server.
    /// GetMonitoredItems): BadUserAccessDenied when another session owns
    /// it, BadSubscriptionIdInvalid when none does (Part 5 9.1).
    pub(crate) fn monitored_item_handles(
        &self,
        session: &NodeId,
        id: u32,
    ) -> std::result::Result<(Vec<u32>, Vec<u32>), StatusCode> {
        let sessions = self.table.lock();
        match sessions
            .by_session_id(session)
            .and_then(|s| s.subscriptions.monitored_item_handles(id))
        {
            Some(handles) => Ok(handles),
            None => Err(not_ours(&sessions, id)),
        }
    }

    /// Server.ResendData (Part 5 9.2): the last value of every data item of
    /// subscription `id` of session `session` goes out again with its next
    /// Publish; the same refusals as [`Self::monitored_item_handles`].
    pub(crate) fn resend_data(
        &self,
        session: &NodeId,
        id: u32,
    ) -> std::result::Result<(), StatusCode> {
        let mut sessions = self.table.lock();
        let resent = sessions
            .by_session_id_mut(session)
            .filter(|s| s.subscriptions.subscription(id).is_some())
            .map(|s| s.subscriptions.resend_data(id));
        match resent {
            Some(result) => {
                drop(sessions);
                self.changed.notify_one();
                result
            }
            None => Err(not_ours(&sessions, id)),
        }
    }

    /// Delivers an event to every session's event monitored items.
    pub(crate) fn emit_event(&self, event: &GatewayEvent) {
        let now = Instant::now();
        {
            let mut sessions = self.table.lock();
            for s in sessions.iter_mut() {
                s.subscriptions.push_event(event, now);
            }
        }
        self.changed.notify_one();
    }

    /// TransferSubscriptions: moves subscriptions of another session of the
    /// same user to the caller's session.
    pub(crate) fn transfer_subscriptions(
        &self,
        chan: &ChannelInfo,
        r: &TransferSubscriptionsRequest,
    ) -> Result<ResponseMessage> {
        let ids = r.subscription_ids.as_deref().unwrap_or(&[]);
        crate::subscriptions::ids_checked(ids.len())?;
        let token = &r.request_header.authentication_token;
        let caller = self.caller(chan, token)?;
        let now = Instant::now();
        let now_dt = DateTime::now();
        let mut results = Vec::with_capacity(ids.len());
        {
            let mut sessions = self.table.lock();
            for id in ids {
                let owner = sessions.find_subscription_owner(*id);
                let status = match owner {
                    None => StatusCode::BadSubscriptionIdInvalid,
                    Some(owner_token) => {
                        let same_user = &owner_token == token
                            || sessions
                                .holder_mut(&owner_token)
                                .map(|s| {
                                    s.identity() == Some(&caller.identity)
                                        && (!matches!(caller.identity, UserIdentity::Anonymous)
                                            || same_secure_client(&s.client_certificate, chan))
                                })
                                .unwrap_or(false);
                        // The caller's session: whether it has room for
                        // one more subscription, and its client application.
                        let target = sessions.get(token).map(|t| {
                            let subs = &t.subscriptions;
                            (
                                subs.subscription_count()
                                    >= subs.limits().max_subscriptions_per_session as usize,
                                t.client.fixed.description.application_uri.clone(),
                            )
                        });
                        if !same_user {
                            StatusCode::BadUserAccessDenied
                        } else if &owner_token == token {
                            // Already ours: just resend if asked.
                            if let Some(sub) = sessions
                                .get_mut(token)
                                .ok()
                                .and_then(|s| s.subscriptions.subscription_mut(*id))
                            {
                                sub.record_transfer(None);
                            }
                            StatusCode::Good
                        } else if target.as_ref().is_some_and(|(full, _)| *full) {
                            // Refused before it leaves its session: taken
                            // first, it would be lost.
                            StatusCode::BadTooManySubscriptions
                        } else {
                            let target_client = target.map(|(_, client)| client);
                            match sessions.holder_mut(&owner_token).and_then(|s| {
                                let client = &s.client.fixed.description.application_uri;
                                let same_client = target_client.as_ref() == Some(client);
                                let mut sub = s.subscriptions.take(*id, now_dt)?;
                                sub.record_transfer(Some(same_client));
                                Some(sub)
                            }) {
                                Some(sub) => match sessions.get_mut(token) {
                                    Ok(target) => target
                                        .subscriptions
                                        .insert(sub, r.send_initial_values, now)
                                        .err()
                                        .unwrap_or(StatusCode::Good),
                                    Err(_) => StatusCode::BadSessionIdInvalid,
                                },
                                None => StatusCode::BadSubscriptionIdInvalid,
                            }
                        }
                    }
                };
                let available = sessions
                    .get_mut(token)
                    .ok()
                    .and_then(|s| s.subscriptions.subscription(*id))
                    .map(|s| s.available_sequence_numbers());
                results.push(TransferResult {
                    status_code: status,
                    available_sequence_numbers: if status.is_good() { available } else { None },
                });
            }
        }
        self.changed.notify_one();
        Ok(TransferSubscriptionsResponse {
            response_header: ResponseHeader::new_good(&r.request_header),
            results: Some(results),
            diagnostic_infos: None,
        }
        .into())
    }
}

/// The session of `token` when it is bound to `chan`: BadSessionIdInvalid
/// for an unknown token, BadSecureChannelIdInvalid for another channel's.
fn on_channel<'a>(
    sessions: &'a mut Sessions,
    chan: &ChannelInfo,
    token: &NodeId,
) -> Result<&'a mut Session> {
    let session = sessions.get_mut(token)?;
    if session.channel_id != chan.channel_id {
        return Err(ServiceError::WrongChannel);
    }
    Ok(session)
}

/// How the console shows one session.
fn summary(s: &Session) -> SessionSummary {
    SessionSummary {
        id: s.id.to_string(),
        name: s.name.clone(),
        transport: s.origin.transport,
        security_policy: s
            .origin
            .security_policy
            .rsplit('#')
            .next()
            .unwrap_or_default()
            .to_string(),
        security_mode: s.origin.security_mode,
        owner: s.origin.owner.clone(),
        user: match s.identity() {
            None => "(not activated)".to_string(),
            Some(UserIdentity::Anonymous) => "anonymous".to_string(),
            Some(UserIdentity::User { name, .. }) => name.clone(),
            Some(UserIdentity::Certificate { thumbprint }) => {
                format!("certificate {thumbprint}")
            }
        },
        created: s.origin.created,
        subscriptions: s.subscriptions.subscription_count(),
    }
}

/// Part 4 5.13.7: an anonymous subscription moves only between sessions of
/// the same client application (ApplicationUri of the certificates) on
/// signed channels; anonymous users are otherwise indistinguishable.
fn same_secure_client(owner_certificate: &ByteString, chan: &ChannelInfo) -> bool {
    if chan.mode == opcua_types::MessageSecurityMode::None || owner_certificate.is_null() {
        return false;
    }
    let uri = |c: &ByteString| {
        uagate_store::certificate_application_uri(c.as_ref())
            .ok()
            .flatten()
    };
    match (uri(owner_certificate), uri(&chan.client_certificate)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// The session table's part of ServerDiagnosticsSummary (see
/// [`SessionTable::diagnostics`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionDiagnostics {
    /// Sessions that take requests.
    pub current: usize,
    /// Sessions ended by their timeout since start.
    pub timed_out: u64,
    /// Sessions ended by an error since start.
    pub aborted: u64,
    /// Subscriptions now, of live and detached sessions.
    pub subscriptions: usize,
    /// Distinct publishing intervals among them.
    pub publishing_intervals: usize,
}

/// Why subscription `id` is not the caller's: another session's
/// (BadUserAccessDenied) or nobody's (BadSubscriptionIdInvalid).
fn not_ours(sessions: &Sessions, id: u32) -> StatusCode {
    if sessions.find_subscription_owner(id).is_some() {
        StatusCode::BadUserAccessDenied
    } else {
        StatusCode::BadSubscriptionIdInvalid
    }
}

/// The diagnostics arrays built from the session table once a second (see
/// [`SessionTable::session_diagnostics`]).
pub(crate) struct DiagnosticsArrays {
    /// SessionDiagnosticsArray.
    pub sessions: Vec<opcua_types::SessionDiagnosticsDataType>,
    /// SessionSecurityDiagnosticsArray.
    pub security: Vec<opcua_types::SessionSecurityDiagnosticsDataType>,
    /// SubscriptionDiagnosticsArray.
    pub subscriptions: Vec<opcua_types::SubscriptionDiagnosticsDataType>,
}
