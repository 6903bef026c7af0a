//! Condition refresh northbound (Part 9 §5.5.7 ConditionRefresh, §5.5.8
//! ConditionRefresh2) and the delivery of the field connections' events to
//! northbound event items.
//!
//! A client calls ConditionRefresh (its subscription) or ConditionRefresh2
//! (one event item of it) on ConditionType. The gateway checks the
//! subscription is the calling session's, queues a RefreshStart event to
//! every refreshed item at once, and asks the field connection of every
//! mount an item watches (every mount for the Server object) to refresh the
//! shared southbound event item of that item's (notifier, filter). The
//! condition events of those field refreshes go to the refreshed items only,
//! never to other items sharing the southbound item. When every field
//! refresh has ended (or after [`REFRESH_LIMIT`]), the items get RefreshEnd.
//! The local space has no conditions: a subscription with local items only
//! gets RefreshStart and RefreshEnd at once.
//!
//! The field connections also refresh by themselves when a new session
//! becomes active (reconnect, failover); those refreshes go to every item
//! of the key, framed by the gateway's RefreshStart/RefreshEnd.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use opcua_types::{CallMethodRequest, CallMethodResult, EventFilter, NodeId, StatusCode, Variant};
use uagate_field::conn::{CONDITION_REFRESH, CONDITION_REFRESH2, CONDITION_TYPE};
use uagate_field::{Audience, EventKey, Taken};
use uagate_subs::EventFields;

use crate::fields::FieldEvent;
use crate::methods::{call_result, Caller};
use crate::session::Sessions;
use crate::subscriptions::GatewayEvent;
use crate::Engine;

/// Longest a client's refresh waits for its field refreshes before the
/// items get RefreshEnd anyway (each field refresh is bounded by its
/// connection's connect timeout; this is the backstop).
const REFRESH_LIMIT: Duration = Duration::from_secs(60);

/// The Server object, where some clients call the refresh methods.
const SERVER_OBJECT: u32 = 2253;

/// Whether `method` is ConditionRefresh or ConditionRefresh2: such calls
/// are always the gateway's (the subscription id is a northbound one), never
/// forwarded to a field server.
pub(crate) fn is_condition_refresh(method: &NodeId) -> bool {
    *method == NodeId::new(0, CONDITION_REFRESH) || *method == NodeId::new(0, CONDITION_REFRESH2)
}

/// One refresh a client asked for that has not ended.
#[derive(Debug)]
struct Request {
    /// The calling session (public id).
    session: NodeId,
    /// Its subscription.
    sub: u32,
    /// ConditionRefresh2's item; None for the whole subscription.
    item: Option<u32>,
    /// The refreshed event items: (id, notifier, filter).
    items: Vec<(u32, NodeId, EventFilter)>,
    /// Field refreshes not ended yet.
    pending: usize,
    /// Past it the items get RefreshEnd whatever the field servers did.
    deadline: Instant,
}

impl Request {
    /// Queues `event` to the refreshed items; with `key`, only to those of
    /// that (notifier, filter).
    fn deliver(&self, sessions: &mut Sessions, key: Option<&EventKey>, event: &dyn EventFields) {
        let Some(s) = sessions.iter_mut().find(|s| s.id == self.session) else {
            return;
        };
        for (id, node, filter) in &self.items {
            if key.is_none_or(|k| k.node == *node && k.filter == *filter) {
                s.subscriptions.push_event_to(self.sub, *id, event);
            }
        }
    }
}

/// The clients' refreshes in progress, by token (the [`Audience::Request`]
/// the field connections tag their events with).
#[derive(Debug, Default)]
pub(crate) struct Refreshes {
    next: u64,
    open: HashMap<u64, Request>,
}

impl Refreshes {
    /// Whether a refresh of `sub` of `session` overlapping `item` (None: the
    /// whole subscription) is in progress.
    fn in_progress(&self, session: &NodeId, sub: u32, item: Option<u32>) -> bool {
        self.open.values().any(|r| {
            r.session == *session
                && r.sub == sub
                && (r.item.is_none() || item.is_none() || r.item == item)
        })
    }

    /// Keeps `r` until its field refreshes end; its token.
    fn open(&mut self, r: Request) -> u64 {
        loop {
            self.next = self.next.wrapping_add(1);
            if !self.open.contains_key(&self.next) {
                break;
            }
        }
        self.open.insert(self.next, r);
        self.next
    }

    /// One field refresh of request `token` ended; the request when it was
    /// its last.
    fn field_ended(&mut self, token: u64) -> Option<Request> {
        let r = self.open.get_mut(&token)?;
        r.pending = r.pending.saturating_sub(1);
        if r.pending == 0 {
            self.open.remove(&token)
        } else {
            None
        }
    }

    /// The requests past their deadline, removed.
    fn expired(&mut self, now: Instant) -> Vec<Request> {
        let gone: Vec<u64> = self
            .open
            .iter()
            .filter(|(_, r)| r.deadline <= now)
            .map(|(t, _)| *t)
            .collect();
        gone.iter().filter_map(|t| self.open.remove(t)).collect()
    }
}

/// The (SubscriptionId, MonitoredItemId) inputs of ConditionRefresh
/// (`refresh2` false) or ConditionRefresh2, or the failed call's result:
/// BadArgumentsMissing, BadTooManyArguments, or BadInvalidArgument with
/// BadTypeMismatch for an input that is not an IntegerId (UInt32).
fn refresh_args(
    inputs: &[Variant],
    refresh2: bool,
) -> Result<(u32, Option<u32>), CallMethodResult> {
    let want = if refresh2 { 2 } else { 1 };
    if inputs.len() < want {
        return Err(call_result(
            StatusCode::BadArgumentsMissing,
            None,
            Vec::new(),
        ));
    }
    if inputs.len() > want {
        return Err(call_result(
            StatusCode::BadTooManyArguments,
            None,
            Vec::new(),
        ));
    }
    let ids: Vec<Option<u32>> = inputs
        .iter()
        .map(|v| match v {
            Variant::UInt32(id) => Some(*id),
            _ => None,
        })
        .collect();
    if ids.iter().any(Option::is_none) {
        let results = ids
            .iter()
            .map(|id| match id {
                Some(_) => StatusCode::Good,
                None => StatusCode::BadTypeMismatch,
            })
            .collect();
        return Err(call_result(
            StatusCode::BadInvalidArgument,
            Some(results),
            Vec::new(),
        ));
    }
    let ids: Vec<u32> = ids.into_iter().flatten().collect();
    Ok((ids[0], ids.get(1).copied()))
}

impl Engine {
    /// ConditionRefresh / ConditionRefresh2 called by `caller` (see the
    /// module docs). Returns once the refresh is under way: RefreshStart is
    /// queued, the field refreshes run in the background. Result codes:
    /// BadMethodInvalid (an object other than ConditionType or the Server
    /// object), argument errors, BadSubscriptionIdInvalid (not a
    /// subscription of the calling session), BadNothingToDo (no event item
    /// in it), BadMonitoredItemIdInvalid (ConditionRefresh2: no event item
    /// with that id in it), BadRefreshInProgress (an overlapping refresh
    /// has not ended).
    pub(crate) fn condition_refresh(
        &self,
        caller: &Caller,
        call: &CallMethodRequest,
    ) -> CallMethodResult {
        let object_ok = call.object_id == NodeId::new(0, CONDITION_TYPE)
            || call.object_id == NodeId::new(0, SERVER_OBJECT);
        if !object_ok {
            return call_result(StatusCode::BadMethodInvalid, None, Vec::new());
        }
        let refresh2 = call.method_id == NodeId::new(0, CONDITION_REFRESH2);
        let inputs = call.input_arguments.as_deref().unwrap_or(&[]);
        let (sub, item) = match refresh_args(inputs, refresh2) {
            Ok(ids) => ids,
            Err(result) => return result,
        };
        match self.start_refresh(caller, sub, item) {
            Ok(()) => call_result(StatusCode::Good, None, Vec::new()),
            Err(status) => call_result(status, None, Vec::new()),
        }
    }

    /// Checks and starts a refresh of subscription `sub` (or its item
    /// `item`) of the caller's session.
    fn start_refresh(
        &self,
        caller: &Caller,
        sub: u32,
        item: Option<u32>,
    ) -> Result<(), StatusCode> {
        let mut items = {
            let sessions = self.sessions.lock();
            let session = sessions
                .by_session_id(&caller.session)
                .ok_or(StatusCode::BadSessionIdInvalid)?;
            session.subscriptions.event_items_of(sub)?
        };
        match item {
            Some(item) => {
                items.retain(|(id, ..)| *id == item);
                if items.is_empty() {
                    return Err(StatusCode::BadMonitoredItemIdInvalid);
                }
            }
            None if items.is_empty() => return Err(StatusCode::BadNothingToDo),
            None => {}
        }
        // The field refreshes: one per (mount, key) the items watch.
        let mut work: Vec<(usize, EventKey)> = Vec::new();
        if let Some(fields) = self.space.fields() {
            for (_, node, filter) in &items {
                for m in fields.event_mounts(node) {
                    let key = EventKey::new(node.clone(), filter.clone());
                    if !work.iter().any(|(wm, wk)| *wm == m && *wk == key) {
                        work.push((m, key));
                    }
                }
            }
        }
        let start = GatewayEvent::refresh(true);
        let token = {
            let mut sessions = self.sessions.lock();
            let mut refreshes = self.refreshes.lock();
            if refreshes.in_progress(&caller.session, sub, item) {
                return Err(StatusCode::BadRefreshInProgress);
            }
            let request = Request {
                session: caller.session.clone(),
                sub,
                item,
                items,
                pending: work.len(),
                deadline: Instant::now() + REFRESH_LIMIT,
            };
            request.deliver(&mut sessions, None, &start);
            if work.is_empty() {
                request.deliver(&mut sessions, None, &GatewayEvent::refresh(false));
                None
            } else {
                Some(refreshes.open(request))
            }
        };
        self.sessions.notify_changed();
        let (Some(token), Some(fields)) = (token, self.space.fields()) else {
            return Ok(());
        };
        tracing::debug!(user = %caller.actor(), sub, ?item, fields = work.len(), "condition refresh");
        for (m, key) in work {
            if let Some(conn) = fields.conns.get(m).cloned() {
                tokio::spawn(async move { conn.refresh(&key, token).await });
            }
        }
        Ok(())
    }

    /// Hands what the field connections received to the northbound event
    /// items, in order: ordinary events (and those of a connection's own
    /// refresh) to every item of their key, a client's refresh events to
    /// the items it refreshed, RefreshStart/RefreshEnd around a
    /// connection's own refresh, and RefreshEnd to the items of a client's
    /// refresh whose last field refresh ended (or that ran out of time).
    /// Called by the subscription timer before subscriptions publish.
    pub(crate) fn deliver_field_events(&self, sessions: &mut Sessions, taken: Vec<Taken>) {
        let mut refreshes = self.refreshes.lock();
        let end = GatewayEvent::refresh(false);
        for t in taken {
            match t {
                Taken::Event { key, fields, to } => {
                    let event = FieldEvent::new(key, fields);
                    match to {
                        Audience::Everyone => to_key(sessions, &event.key, &event),
                        Audience::Request(token) => {
                            if let Some(r) = refreshes.open.get(&token) {
                                r.deliver(sessions, Some(&event.key), &event);
                            }
                        }
                    }
                }
                Taken::RefreshStart {
                    key,
                    to: Audience::Everyone,
                } => to_key(sessions, &key, &GatewayEvent::refresh(true)),
                Taken::RefreshEnd {
                    key,
                    to: Audience::Everyone,
                } => to_key(sessions, &key, &end),
                // The client's RefreshStart went out when it called.
                Taken::RefreshStart { .. } => {}
                Taken::RefreshEnd {
                    to: Audience::Request(token),
                    ..
                } => {
                    if let Some(r) = refreshes.field_ended(token) {
                        r.deliver(sessions, None, &end);
                    }
                }
            }
        }
        for r in refreshes.expired(Instant::now()) {
            r.deliver(sessions, None, &end);
        }
    }
}

/// Queues `event` to every session's event items of `key`.
fn to_key(sessions: &mut Sessions, key: &EventKey, event: &dyn EventFields) {
    for s in sessions.iter_mut() {
        s.subscriptions
            .push_event_for(event, &key.node, &key.filter);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(session: u32, sub: u32, item: Option<u32>, pending: usize) -> Request {
        Request {
            session: NodeId::new(1, session),
            sub,
            item,
            items: Vec::new(),
            pending,
            deadline: Instant::now() + REFRESH_LIMIT,
        }
    }

    #[test]
    fn arguments_are_checked() {
        let bad = |inputs: &[Variant], r2| refresh_args(inputs, r2).unwrap_err().status_code;
        assert_eq!(bad(&[], false), StatusCode::BadArgumentsMissing);
        assert_eq!(
            bad(&[Variant::from(1u32)], true),
            StatusCode::BadArgumentsMissing
        );
        assert_eq!(
            bad(&[Variant::from(1u32), Variant::from(2u32)], false),
            StatusCode::BadTooManyArguments
        );
        let r = refresh_args(&[Variant::from(1u32), Variant::from("x")], true).unwrap_err();
        assert_eq!(r.status_code, StatusCode::BadInvalidArgument);
        assert_eq!(
            r.input_argument_results,
            Some(vec![StatusCode::Good, StatusCode::BadTypeMismatch])
        );
        assert_eq!(
            refresh_args(&[Variant::from(5u32)], false).unwrap(),
            (5, None)
        );
        assert_eq!(
            refresh_args(&[Variant::from(5u32), Variant::from(9u32)], true).unwrap(),
            (5, Some(9))
        );
    }

    #[test]
    fn a_refresh_ends_with_its_last_field_refresh_and_overlaps_are_refused() {
        let mut r = Refreshes::default();
        let t = r.open(request(1, 10, None, 2));
        assert!(r.in_progress(&NodeId::new(1, 1u32), 10, None));
        assert!(r.in_progress(&NodeId::new(1, 1u32), 10, Some(3)));
        assert!(!r.in_progress(&NodeId::new(1, 1u32), 11, None));
        assert!(!r.in_progress(&NodeId::new(1, 2u32), 10, None));
        let t2 = r.open(request(1, 11, Some(3), 1));
        assert!(!r.in_progress(&NodeId::new(1, 1u32), 11, Some(4)));
        assert!(r.in_progress(&NodeId::new(1, 1u32), 11, None));
        assert!(r.field_ended(t).is_none());
        assert!(r.field_ended(t).is_some());
        assert!(r.field_ended(t).is_none());
        assert!(r.field_ended(t2).is_some());
        assert!(r.open.is_empty());
    }

    #[test]
    fn a_refresh_past_its_deadline_expires() {
        let mut r = Refreshes::default();
        r.open(request(1, 10, None, 1));
        assert!(r.expired(Instant::now()).is_empty());
        assert_eq!(r.expired(Instant::now() + REFRESH_LIMIT).len(), 1);
        assert!(r.open.is_empty());
    }
}
