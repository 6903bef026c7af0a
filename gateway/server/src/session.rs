//! Session bookkeeping: the table of sessions, their phases and timeouts.
//! Pure data with `now` passed in; the engine holds it behind a mutex.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use opcua_types::{ByteString, NodeId, StatusCode};
use uagate_space::ContinuationPoints;
use uagate_store::Role;
use uagate_subs::SessionSubscriptions;

use crate::error::ServiceError;
use crate::standing::{rule, Credential, EndReason, Ruling, Standing};

/// Who an activated session acts for.
#[derive(Debug, Clone, PartialEq)]
pub enum UserIdentity {
    /// No user.
    Anonymous,
    /// A user from the store.
    User {
        /// Login name.
        name: String,
        /// Role from the store.
        role: Role,
    },
    /// A user authenticated by a trusted certificate.
    Certificate {
        /// SHA-1 thumbprint (hex) of the user certificate.
        thumbprint: String,
    },
}

/// A created session that has not been activated yet.
#[derive(Debug)]
pub struct Created {
    /// When CreateSession made it: the oldest unactivated session is the
    /// first evicted when the table is full.
    pub since: Instant,
}

/// How long a session may wait for its first ActivateSession: it expires
/// after min(revised session timeout, this) without one. Short, because an
/// unactivated session costs its creator nothing (no credential) and holds
/// a place of `max_session_count`.
pub const ACTIVATION_TIMEOUT: Duration = Duration::from_secs(10);

/// An activated session and its user.
#[derive(Debug)]
pub struct Active {
    /// The identity from the last successful ActivateSession.
    pub identity: UserIdentity,
    /// How that identity was proved, checked again when the stored users
    /// or trust list change ([`crate::standing`]).
    pub credential: Credential,
}

/// The phase of a session: created sessions accept only ActivateSession
/// and CloseSession.
#[derive(Debug)]
pub enum Phase {
    /// Awaiting ActivateSession.
    Created(Created),
    /// Usable.
    Active(Active),
}

/// One session.
#[derive(Debug)]
pub struct Session {
    /// Public SessionId.
    pub id: NodeId,
    /// Secret token the client puts in every request header.
    pub auth_token: NodeId,
    /// Client-supplied name (diagnostics only).
    pub name: String,
    /// Secure channel the session is bound to. Set at creation; changed
    /// only through [`Sessions::bind_channel`], which keeps the per-channel
    /// count.
    pub channel_id: u32,
    /// The client's application certificate from CreateSession (null on None).
    pub client_certificate: ByteString,
    /// Revised session timeout.
    pub timeout: Duration,
    /// Last request seen for this session.
    pub last_activity: Instant,
    /// The nonce the next ActivateSession must sign; replaced after every use.
    pub server_nonce: ByteString,
    /// Created or active.
    pub phase: Phase,
    /// Browse continuation points owned by this session.
    pub continuation_points: ContinuationPoints,
    /// Subscriptions and queued Publish requests of this session.
    pub subscriptions: SessionSubscriptions,
    /// How the client reached us (for the console's session list).
    pub origin: Origin,
    /// What the client said at CreateSession and ActivateSession, and its
    /// requests counted by service (the session diagnostics).
    pub client: Box<crate::session_diag::ClientRecord>,
}

/// Where a session came from: transport, security and the isolation owner
/// charged for it. Fixed at CreateSession.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    /// `opc.tcp`, `opc.wss` or `opc.https`.
    pub transport: &'static str,
    /// Security policy URI of the channel.
    pub security_policy: String,
    /// Security mode of the channel: None, Sign or SignAndEncrypt.
    pub security_mode: &'static str,
    /// The resource-isolation owner charged for the session's work.
    pub owner: Option<String>,
    /// When the session was created.
    pub created: Option<std::time::SystemTime>,
}

impl Session {
    /// Whether the session has been activated.
    pub fn is_active(&self) -> bool {
        matches!(self.phase, Phase::Active(_))
    }

    /// How long the session lives without a request: its revised timeout,
    /// at most [`ACTIVATION_TIMEOUT`] until it is activated.
    pub fn idle_limit(&self) -> Duration {
        match self.phase {
            Phase::Active(_) => self.timeout,
            Phase::Created(_) => self.timeout.min(ACTIVATION_TIMEOUT),
        }
    }

    /// The identity of an active session.
    pub fn identity(&self) -> Option<&UserIdentity> {
        match &self.phase {
            Phase::Active(a) => Some(&a.identity),
            Phase::Created(_) => None,
        }
    }
}

/// All sessions of the server, keyed by authentication token.
#[derive(Debug)]
pub struct Sessions {
    by_token: HashMap<NodeId, Session>,
    /// Number of sessions bound to each channel, so that a connection can
    /// ask on every turn of its loop whether it carries a session without a
    /// scan of every session. Kept by every method that adds, removes or
    /// rebinds a session (see [`Sessions::bind_channel`]).
    per_channel: uagate_isolation::FastMap<u32, usize>,
    max: usize,
    /// Unactivated sessions evicted to make room since start.
    evicted: u64,
    /// Sessions ended by their timeout since start.
    timed_out: u64,
    /// Sessions ended by an error since start: evicted to make room, or
    /// unactivated when their channel closed.
    aborted: u64,
    /// Sessions that ended (CloseSession with deleteSubscriptions false,
    /// or timed out) while holding subscriptions, keyed by their former
    /// authentication token. They take no request and hold no place of
    /// `max`; their subscriptions go on sampling and counting down their
    /// lifetime (Part 4 5.6.4 and 5.13.1: subscriptions outlive their
    /// session until their own lifetime ends) until TransferSubscriptions
    /// moves them to a session of the same user. At most `max` are kept;
    /// the one detached longest goes first.
    detached: HashMap<NodeId, Session>,
    /// Publish requests that were queued on a session when it ended or
    /// moved to another channel: the engine answers each with a
    /// ServiceFault ([`Sessions::take_ended_publishes`]), so that no
    /// request goes unanswered and the connection releases its charges.
    ended_publishes: Vec<EndedPublish>,
}

/// A queued Publish request its session can no longer answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndedPublish {
    /// The channel it came on.
    pub channel_id: u32,
    /// Its request id there.
    pub request_id: u32,
    /// Its request handle (echoed in the fault's header).
    pub request_handle: u32,
    /// Bad_SessionClosed when the session ended, Bad_SecureChannelIdInvalid
    /// when the session moved to another channel.
    pub status: StatusCode,
}

impl Sessions {
    /// An empty table admitting at most `max` sessions.
    pub fn new(max: usize) -> Self {
        Sessions {
            by_token: HashMap::new(),
            per_channel: Default::default(),
            max,
            evicted: 0,
            timed_out: 0,
            aborted: 0,
            detached: HashMap::new(),
            ended_publishes: Vec::new(),
        }
    }

    /// Moves the Publish requests queued on the session of `token` to the
    /// answers owed on its channel, with `status`: called when the session
    /// is activated on another channel.
    pub fn end_publishes_of(&mut self, token: &NodeId, status: StatusCode) {
        if let Some(mut session) = self.by_token.remove(token) {
            self.end_publishes(&mut session, status);
            self.by_token.insert(token.clone(), session);
        }
    }

    /// Moves the Publish requests queued on `session` to the answers owed
    /// on its channel, with `status`. Called when the session ends
    /// ([`Sessions::remove`]) or is activated on another channel.
    fn end_publishes(&mut self, session: &mut Session, status: StatusCode) {
        let channel_id = session.channel_id;
        let queued = session.subscriptions.clear_publish_queue();
        if channel_id == 0 {
            return;
        }
        self.ended_publishes
            .extend(
                queued
                    .into_iter()
                    .map(|(request_id, request_handle)| EndedPublish {
                        channel_id,
                        request_id,
                        request_handle,
                        status,
                    }),
            );
    }

    /// The answers owed for Publish requests of ended or moved sessions
    /// (see [`EndedPublish`]); the engine sends them after every change
    /// that may end a session, and once a second.
    pub fn take_ended_publishes(&mut self) -> Vec<EndedPublish> {
        std::mem::take(&mut self.ended_publishes)
    }

    /// Number of sessions (created and active).
    pub fn len(&self) -> usize {
        self.by_token.len()
    }

    /// Whether there are no sessions.
    pub fn is_empty(&self) -> bool {
        self.by_token.is_empty()
    }

    /// Adds a new session (CreateSession). When the table is full, the
    /// oldest session that was never activated makes room and is returned;
    /// activated sessions are never evicted, so with every place held by
    /// one the answer is BadTooManySessions.
    pub fn insert(&mut self, session: Session) -> Result<Option<Session>, ServiceError> {
        let mut evicted = None;
        if self.by_token.len() >= self.max {
            let oldest = self
                .by_token
                .iter()
                .filter_map(|(t, s)| match &s.phase {
                    Phase::Created(c) => Some((c.since, t)),
                    Phase::Active(_) => None,
                })
                .min_by_key(|(since, _)| *since)
                .map(|(_, t)| t.clone())
                .ok_or(ServiceError::TooManySessions)?;
            evicted = self.remove(&oldest);
            self.evicted += 1;
            self.aborted += 1;
        }
        let channel = session.channel_id;
        if let Some(old) = self.by_token.insert(session.auth_token.clone(), session) {
            self.uncount(old.channel_id);
        }
        *self.per_channel.entry(channel).or_default() += 1;
        Ok(evicted)
    }

    /// Unactivated sessions evicted by [`Sessions::insert`] since start.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Sessions ended by their timeout, and by an error (evicted, or
    /// unactivated on a closed channel), since start
    /// (ServerDiagnosticsSummary's SessionTimeoutCount and SessionAbortCount).
    pub fn ended(&self) -> (u64, u64) {
        (self.timed_out, self.aborted)
    }

    fn uncount(&mut self, channel_id: u32) {
        if let Some(n) = self.per_channel.get_mut(&channel_id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_channel.remove(&channel_id);
            }
        }
    }

    /// Binds the session of `token` to channel `channel_id` (ActivateSession
    /// on a new channel). The only way a session changes channel: it keeps
    /// the per-channel count right.
    pub fn bind_channel(&mut self, token: &NodeId, channel_id: u32) {
        let Some(session) = self.by_token.get_mut(token) else {
            return;
        };
        let old = std::mem::replace(&mut session.channel_id, channel_id);
        if old != channel_id {
            self.uncount(old);
            *self.per_channel.entry(channel_id).or_default() += 1;
        }
    }

    /// The session for a request's authentication token, read-only (the
    /// request classification of [`crate::sessions::SessionTable::work_class`]).
    pub fn get(&self, token: &NodeId) -> Option<&Session> {
        self.by_token.get(token)
    }

    /// The session for a request's authentication token.
    pub fn get_mut(&mut self, token: &NodeId) -> Result<&mut Session, ServiceError> {
        self.by_token
            .get_mut(token)
            .ok_or(ServiceError::SessionIdInvalid)
    }

    /// Whether any session is bound to channel `channel_id`. Called by
    /// every connection on every turn of its loop; a map lookup.
    pub fn has_channel(&self, channel_id: u32) -> bool {
        let bound = self.per_channel.contains_key(&channel_id);
        debug_assert_eq!(
            bound,
            self.by_token.values().any(|s| s.channel_id == channel_id),
            "per-channel session count out of step (a channel_id changed outside bind_channel?)"
        );
        bound
    }

    /// Every session and every detached session holding subscriptions,
    /// read-only (field item demand: a detached subscription keeps its
    /// southbound items).
    pub fn iter(&self) -> impl Iterator<Item = &Session> {
        self.by_token.values().chain(self.detached.values())
    }

    /// Every session and every detached session holding subscriptions,
    /// for the subscription timer and event delivery.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Session> {
        self.by_token.values_mut().chain(self.detached.values_mut())
    }

    /// The sessions that take requests (the console's list), without the
    /// detached ones.
    pub fn live(&self) -> impl Iterator<Item = &Session> {
        self.by_token.values()
    }

    /// Number of detached sessions still holding subscriptions.
    pub fn detached_len(&self) -> usize {
        self.detached.len()
    }

    /// Ends the session of `token` but keeps its subscriptions (see
    /// `detached`); a session without subscriptions just ends. Returns it
    /// (with its subscriptions moved out when kept) for logging.
    pub fn detach(&mut self, token: &NodeId) -> Option<NodeId> {
        let mut session = self.remove(token)?;
        let id = session.id.clone();
        if session.subscriptions.subscription_ids().is_empty() || !session.is_active() {
            return Some(id);
        }
        // Its queued Publish requests were answered by `remove`.
        session.channel_id = 0;
        if self.detached.len() >= self.max {
            let oldest = self
                .detached
                .iter()
                .min_by_key(|(_, s)| s.last_activity)
                .map(|(t, _)| t.clone());
            if let Some(t) = oldest {
                self.detached.remove(&t);
            }
        }
        self.detached.insert(token.clone(), session);
        Some(id)
    }

    /// The session or detached session of `token` (TransferSubscriptions'
    /// source side).
    pub fn holder_mut(&mut self, token: &NodeId) -> Option<&mut Session> {
        match self.by_token.get_mut(token) {
            Some(s) => Some(s),
            None => self.detached.get_mut(token),
        }
    }

    /// The session with public id `id`.
    pub fn by_session_id(&self, id: &NodeId) -> Option<&Session> {
        self.by_token.values().find(|s| &s.id == id)
    }

    /// The session with public id `id`, to change (Server.ResendData).
    pub fn by_session_id_mut(&mut self, id: &NodeId) -> Option<&mut Session> {
        self.by_token.values_mut().find(|s| &s.id == id)
    }

    /// The authentication token of the session owning subscription `id`.
    pub fn find_subscription_owner(&self, id: u32) -> Option<NodeId> {
        self.by_token
            .iter()
            .chain(self.detached.iter())
            .find(|(_, s)| s.subscriptions.subscription(id).is_some())
            .map(|(t, _)| t.clone())
    }

    /// Removes and returns a session.
    /// Its queued Publish requests are owed Bad_SessionClosed (Part 4
    /// 5.7.4: outstanding requests of a terminated session are answered so).
    pub fn remove(&mut self, token: &NodeId) -> Option<Session> {
        let mut session = self.by_token.remove(token)?;
        self.uncount(session.channel_id);
        self.end_publishes(&mut session, StatusCode::BadSessionClosed);
        Some(session)
    }

    /// Ends every session idle past its [`Session::idle_limit`] (its
    /// subscriptions live on, detached) and forgets detached sessions whose
    /// subscriptions have all ended; called periodically by the engine.
    /// Returns the ids of the sessions that timed out.
    pub fn expire(&mut self, now: Instant) -> Vec<NodeId> {
        self.detached
            .retain(|_, s| !s.subscriptions.subscription_ids().is_empty());
        let expired: Vec<NodeId> = self
            .by_token
            .iter()
            .filter(|(_, s)| now.saturating_duration_since(s.last_activity) > s.idle_limit())
            .map(|(t, _)| t.clone())
            .collect();
        let ended: Vec<NodeId> = expired
            .into_iter()
            .filter_map(|t| self.detach(&t))
            .collect();
        self.timed_out += ended.len() as u64;
        ended
    }

    /// Removes the session with this public SessionId (an operator closing
    /// it from the console).
    pub fn remove_by_session_id(&mut self, id: &NodeId) -> Option<Session> {
        let token = self
            .by_token
            .iter()
            .find(|(_, s)| s.id == *id)
            .map(|(t, _)| t.clone())?;
        self.remove(&token)
    }

    /// Applies a re-check of the stored users and trust list
    /// ([`crate::standing`]) to every session, detached ones included:
    /// sessions bound to a channel of `refused_channels` (its client
    /// certificate is refused now), created with a client certificate
    /// `standing` refuses now, or whose user or user certificate
    /// [`rule`] refuses now, are removed with their subscriptions; a
    /// changed role is taken over. Returns the removed sessions' ids,
    /// names and why they ended.
    pub fn apply_standing(
        &mut self,
        standing: &Standing,
        refused_channels: &[(u32, uagate_store::TrustVerdict)],
    ) -> Vec<(NodeId, String, EndReason)> {
        let mut ended = Vec::new();
        let mut rule_on = |token: &NodeId, s: &mut Session| {
            if let Some((_, v)) = refused_channels
                .iter()
                .find(|(c, _)| *c == s.channel_id && s.channel_id != 0)
            {
                ended.push((token.clone(), EndReason::ClientCertificate(*v)));
                return;
            }
            // Its client certificate is refused now, whatever carries it
            // (an opc.https session is not bound to a connection).
            if !s.client_certificate.is_null() {
                if let Some(v) = standing.certs.get(s.client_certificate.as_ref()) {
                    if !v.is_trusted() {
                        ended.push((token.clone(), EndReason::ClientCertificate(*v)));
                        return;
                    }
                }
            }
            let Phase::Active(active) = &mut s.phase else {
                return;
            };
            match rule(&active.identity, &active.credential, standing) {
                Ruling::Keep => {}
                Ruling::Role(now) => {
                    if let UserIdentity::User { role, .. } = &mut active.identity {
                        *role = now;
                    }
                }
                Ruling::End(why) => ended.push((token.clone(), why)),
            }
        };
        for (token, s) in self.by_token.iter_mut() {
            rule_on(token, s);
        }
        for (token, s) in self.detached.iter_mut() {
            rule_on(token, s);
        }
        ended
            .into_iter()
            .filter_map(|(token, why)| {
                let s = self
                    .remove(&token)
                    .or_else(|| self.detached.remove(&token))?;
                Some((s.id, s.name, why))
            })
            .collect()
    }

    /// Drops unactivated sessions of a closed channel (an activated session
    /// outlives its channel until its timeout, so it can be transferred).
    pub fn channel_closed(&mut self, channel_id: u32) {
        let unactivated: Vec<NodeId> = self
            .by_token
            .iter()
            .filter(|(_, s)| s.channel_id == channel_id && !s.is_active())
            .map(|(t, _)| t.clone())
            .collect();
        for t in unactivated {
            if self.remove(&t).is_some() {
                self.aborted += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(token: u32, now: Instant, timeout_s: u64) -> Session {
        Session {
            id: NodeId::new(1, token + 1000),
            auth_token: NodeId::new(1, token),
            name: String::new(),
            channel_id: 1,
            client_certificate: ByteString::null(),
            timeout: Duration::from_secs(timeout_s),
            last_activity: now,
            server_nonce: ByteString::null(),
            origin: Origin::default(),
            client: Default::default(),
            phase: Phase::Created(Created { since: now }),
            continuation_points: ContinuationPoints::new(2),
            subscriptions: SessionSubscriptions::new(Default::default()),
        }
    }

    #[test]
    fn max_sessions_and_expiry_on_simulated_time() {
        let t0 = Instant::now();
        let mut s = Sessions::new(2);
        s.insert(session(1, t0, 10)).unwrap();
        s.insert(session(2, t0, 60)).unwrap();
        activate(&mut s, 1);
        activate(&mut s, 2);
        assert_eq!(
            s.insert(session(3, t0, 10)).unwrap_err().status(),
            opcua_types::StatusCode::BadTooManySessions,
            "activated sessions are never evicted"
        );
        assert_eq!(s.evicted(), 0);
        assert!(s.expire(t0 + Duration::from_secs(10)).is_empty());
        let gone = s.expire(t0 + Duration::from_secs(11));
        assert_eq!(gone, vec![NodeId::new(1, 1001u32)]);
        assert_eq!(s.len(), 1);
        assert!(s.has_channel(1));
        s.insert(session(3, t0, 60)).unwrap();
        s.channel_closed(1);
        assert_eq!(s.len(), 1, "unactivated sessions die with their channel");
        assert!(s.has_channel(1), "the activated one outlives it");
    }

    fn activate(s: &mut Sessions, token: u32) {
        s.get_mut(&NodeId::new(1, token)).unwrap().phase = Phase::Active(Active {
            identity: UserIdentity::Anonymous,
            credential: Credential::None,
        });
    }

    #[test]
    fn a_full_table_evicts_the_oldest_unactivated_session_never_an_active_one() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut s = Sessions::new(3);
        s.insert(session(1, at(0), 60)).unwrap();
        s.insert(session(2, at(1), 60)).unwrap();
        s.insert(session(3, at(2), 60)).unwrap();
        activate(&mut s, 1);
        // Full: the oldest unactivated one (2, not the older active 1) goes.
        let evicted = s.insert(session(4, at(3), 60)).unwrap();
        assert_eq!(evicted.map(|e| e.auth_token), Some(NodeId::new(1, 2u32)));
        let evicted = s.insert(session(5, at(4), 60)).unwrap();
        assert_eq!(evicted.map(|e| e.auth_token), Some(NodeId::new(1, 3u32)));
        assert_eq!(s.evicted(), 2);
        assert_eq!(s.len(), 3);
        assert!(s.get_mut(&NodeId::new(1, 1u32)).is_ok());
    }

    #[test]
    fn an_unactivated_session_expires_after_the_activation_timeout() {
        let t0 = Instant::now();
        let mut s = Sessions::new(4);
        s.insert(session(1, t0, 3600)).unwrap();
        s.insert(session(2, t0, 3600)).unwrap();
        s.insert(session(3, t0, 5)).unwrap();
        activate(&mut s, 2);
        // A revised timeout below the bound still applies.
        assert_eq!(
            s.expire(t0 + Duration::from_secs(6)),
            vec![NodeId::new(1, 1003u32)]
        );
        assert!(s.expire(t0 + ACTIVATION_TIMEOUT).is_empty());
        let gone = s.expire(t0 + ACTIVATION_TIMEOUT + Duration::from_millis(1));
        assert_eq!(gone, vec![NodeId::new(1, 1001u32)]);
        assert_eq!(s.len(), 1, "the activated session keeps its hour");
    }

    #[test]
    fn the_channel_count_follows_inserts_rebinds_and_removals() {
        let t0 = Instant::now();
        let mut s = Sessions::new(4);
        s.insert(session(1, t0, 60)).unwrap();
        s.insert(session(2, t0, 60)).unwrap();
        assert!(s.has_channel(1) && !s.has_channel(2));
        // One session moves to channel 2: both channels carry one.
        s.bind_channel(&NodeId::new(1, 1u32), 2);
        assert!(s.has_channel(1) && s.has_channel(2));
        s.remove(&NodeId::new(1, 2u32)).unwrap();
        assert!(!s.has_channel(1), "the last session of channel 1 left");
        assert!(s.has_channel(2));
        let gone = s.expire(t0 + Duration::from_secs(61));
        assert_eq!(gone.len(), 1);
        assert!(!s.has_channel(2));
        assert!(s.per_channel.is_empty(), "{:?}", s.per_channel);
    }

    fn with_subscription(s: &mut Sessions, token: u32, now: Instant) -> u32 {
        let req = opcua_types::CreateSubscriptionRequest {
            requested_publishing_interval: 1000.0,
            requested_lifetime_count: 30,
            requested_max_keep_alive_count: 10,
            publishing_enabled: true,
            ..Default::default()
        };
        s.get_mut(&NodeId::new(1, token))
            .unwrap()
            .subscriptions
            .create_subscription(&req, now)
            .unwrap()
            .subscription_id
    }

    /// Part 4 5.6.4 and 5.13.1: a session that ends by timing out, or by
    /// CloseSession without deleting its subscriptions, leaves them running
    /// (no place in the table, no token that works) until another session
    /// takes them over; a detached session whose subscriptions ended is
    /// forgotten, and at most `max` are kept.
    #[test]
    fn subscriptions_outlive_a_session_that_timed_out_or_closed_without_deleting_them() {
        let t0 = Instant::now();
        let mut s = Sessions::new(2);
        s.insert(session(1, t0, 10)).unwrap();
        activate(&mut s, 1);
        let sub = with_subscription(&mut s, 1, t0);
        s.insert(session(2, t0, 60)).unwrap();
        activate(&mut s, 2);
        // Session 1 times out: it no longer takes requests, its place is free.
        assert_eq!(s.expire(t0 + Duration::from_secs(11)).len(), 1);
        assert_eq!(s.len(), 1);
        assert!(s.get_mut(&NodeId::new(1, 1)).is_err());
        assert_eq!(s.live().count(), 1);
        // Its subscription is still there, found for TransferSubscriptions.
        assert_eq!(s.detached_len(), 1);
        assert_eq!(s.find_subscription_owner(sub), Some(NodeId::new(1, 1)));
        assert!(s
            .iter()
            .any(|x| x.subscriptions.subscription(sub).is_some()));
        // Taken over by session 2: the detached session is then forgotten.
        let taken = s
            .holder_mut(&NodeId::new(1, 1))
            .unwrap()
            .subscriptions
            .take(sub, opcua_types::DateTime::now())
            .unwrap();
        s.get_mut(&NodeId::new(1, 2))
            .unwrap()
            .subscriptions
            .insert(taken, false, t0)
            .unwrap();
        s.expire(t0 + Duration::from_secs(12));
        assert_eq!(s.detached_len(), 0);
        assert_eq!(s.find_subscription_owner(sub), Some(NodeId::new(1, 2)));
        // A session without subscriptions just ends.
        s.insert(session(3, t0, 10)).unwrap();
        activate(&mut s, 3);
        assert!(s.detach(&NodeId::new(1, 3)).is_some());
        assert_eq!(s.detached_len(), 0);
        // At most `max` (2) detached: the one detached longest goes first.
        for token in [4, 5, 6] {
            let at = t0 + Duration::from_secs(token as u64);
            s.insert(session(token, at, 10)).unwrap();
            activate(&mut s, token);
            with_subscription(&mut s, token, at);
            s.detach(&NodeId::new(1, token));
        }
        assert_eq!(s.detached_len(), 2);
        assert!(s.holder_mut(&NodeId::new(1, 4)).is_none());
        assert!(s.holder_mut(&NodeId::new(1, 6)).is_some());
    }
}
