#![forbid(unsafe_code)]
//! SANS-IO OPC UA subscription engine (Part 4 §5.12 MonitoredItem and §5.13 Subscription
//! service sets).
//!
//! One [`SessionSubscriptions`] lives in each session. The network engine feeds it service
//! requests and Publish requests, calls [`SessionSubscriptions::tick`] at
//! [`SessionSubscriptions::next_deadline`], and sends whatever Publish responses come back.
//! Nothing here reads a clock or spawns tasks: time is always an argument.
//!
//! Limitations: the EventFilter where clause is accepted but not evaluated here (every event
//! the source pushes passes; for field nodes the field server evaluates it upstream);
//! event queue overflow drops events without generating an EventQueueOverflowEventType event;
//! BadMonitoringModeInvalid cannot occur because the decoded `MonitoringMode` is always valid.

mod item;
pub use item::INITIAL_VALUE_HOLD;
mod subscription;
#[cfg(test)]
mod tests;

use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opcua_types::{
    AttributeId, DataValue, DateTime, DiagnosticInfo, EventFilter, ExtensionObject,
    MonitoredItemCreateRequest, MonitoredItemCreateResult, MonitoredItemModifyRequest,
    MonitoredItemModifyResult, MonitoringMode, NodeId, NotificationMessage, ObjectId, ObjectTypeId,
    PublishRequest, PublishResponse, QualifiedName, ReadValueId, ResponseHeader,
    SimpleAttributeOperand, StatusChangeNotification, StatusCode, SubscriptionDiagnosticsDataType,
    TimestampsToReturn, Variant,
};

use item::{revise_params, ItemKind, MonitoredItem};
pub use subscription::Subscription;

pub use opcua_types::CreateSubscriptionRequest;
pub use opcua_types::ModifySubscriptionRequest;

/// Errors of this crate. Service-level failures are reported as OPC UA [`StatusCode`]s; this
/// enum wraps one for callers that prefer `std::error::Error`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SubsError {
    /// A service failed with this status.
    #[error("subscription service failed: {0}")]
    Status(StatusCode),
}

impl From<StatusCode> for SubsError {
    fn from(s: StatusCode) -> Self {
        SubsError::Status(s)
    }
}

/// Server limits used to revise client requests.
#[derive(Debug, Clone)]
pub struct Limits {
    pub min_publishing_interval: Duration,
    pub max_publishing_interval: Duration,
    pub max_keep_alive_count: u32,
    /// Upper bound of the lifetime count (raised to 3 x keep-alive when lower).
    pub max_lifetime_count: u32,
    /// 0 = unlimited (10000 is used).
    pub max_notifications_per_publish: u32,
    pub max_subscriptions_per_session: u32,
    pub max_monitored_items_per_subscription: u32,
    pub max_queue_size: u32,
    pub min_sampling_interval: Duration,
    /// Messages kept for Republish per subscription.
    pub max_retransmission_queue: u32,
    /// Publish requests queued per session.
    pub max_publish_requests: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            min_publishing_interval: Duration::from_millis(50),
            max_publishing_interval: Duration::from_secs(3600),
            max_keep_alive_count: 10_000,
            max_lifetime_count: 30_000,
            max_notifications_per_publish: 0,
            max_subscriptions_per_session: 100,
            max_monitored_items_per_subscription: 10_000,
            max_queue_size: 1000,
            min_sampling_interval: Duration::from_millis(50),
            max_retransmission_queue: 20,
            max_publish_requests: 20,
        }
    }
}

/// What a data monitored item asks of its source: the revised sampling interval and the
/// data change filter. Shared field items are keyed by it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ItemDemand {
    /// Revised sampling interval in milliseconds.
    pub sampling_ms: f64,
    /// Data change trigger of the filter (StatusValue when the client sent none).
    pub trigger: opcua_types::DataChangeTrigger,
    /// Absolute deadband threshold, if any (a percent deadband is already resolved).
    pub deadband: Option<f64>,
}

/// Where monitored item values come from: a local node now, a shared field item later.
pub trait ItemSource {
    /// Validates an item at creation (BadNodeIdUnknown, BadAttributeIdInvalid,
    /// BadIndexRangeInvalid...).
    fn check(&self, item: &ReadValueId) -> Result<(), StatusCode>;
    /// Samples the current value.
    fn sample(&self, item: &ReadValueId, now: DateTime) -> DataValue;
    /// Samples the value for an existing monitored item, called at each of its sampling
    /// instants. `demand` carries the item's revised sampling interval and filter, so a source
    /// that shares upstream items between subscribers (field nodes) can find the one serving
    /// this item. The default ignores it.
    fn sample_monitored(
        &self,
        item: &ReadValueId,
        demand: &ItemDemand,
        now: DateTime,
    ) -> DataValue {
        let _ = demand;
        self.sample(item, now)
    }
    /// Every value of an existing monitored item since its last sample, oldest
    /// first, called at each of its sampling instants instead of
    /// [`ItemSource::sample_monitored`]. `cursor` is the item's own bookmark in
    /// the source (`None` before its first sample; the source moves it). A
    /// source that keeps a history of values (shared field items) delivers a
    /// burst that arrived between two samples complete; the default samples
    /// the current value.
    fn samples_monitored(
        &self,
        item: &ReadValueId,
        demand: &ItemDemand,
        cursor: &mut Option<u64>,
        now: DateTime,
    ) -> Vec<DataValue> {
        let _ = cursor;
        vec![self.sample_monitored(item, demand, now)]
    }
    /// EURange (low, high) of a node for percent deadband; None -> BadFilterNotAllowed.
    fn eu_range(&self, node: &NodeId) -> Option<(f64, f64)>;
    /// Whether the node is an event notifier (for event items on attribute EventNotifier).
    fn is_event_notifier(&self, node: &NodeId) -> bool;
}

/// An event for event monitored items: one the server raises (audit, state change) or one a
/// field server sent.
pub trait EventFields {
    /// Value of a select clause (type definition, browse path, attribute, index range);
    /// `Variant::Empty` if absent.
    fn field(&self, operand: &SimpleAttributeOperand) -> Variant;
}

/// Revised parameters of CreateSubscription / ModifySubscription.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RevisedSubscription {
    pub subscription_id: u32,
    /// Milliseconds.
    pub revised_publishing_interval: f64,
    pub revised_lifetime_count: u32,
    pub revised_max_keep_alive_count: u32,
}

/// A Publish answer: a response, or a service fault for the request with `request_handle`.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // responses are the common case; faults are rare
pub enum ResponseOrFault {
    Response(PublishResponse),
    Fault {
        request_handle: u32,
        status: StatusCode,
    },
}

impl ResponseOrFault {
    /// The PublishResponse, if this is one.
    pub fn response(&self) -> Option<&PublishResponse> {
        match self {
            ResponseOrFault::Response(r) => Some(r),
            ResponseOrFault::Fault { .. } => None,
        }
    }
    /// The fault status, if this is a fault.
    pub fn fault(&self) -> Option<StatusCode> {
        match self {
            ResponseOrFault::Response(_) => None,
            ResponseOrFault::Fault { status, .. } => Some(*status),
        }
    }
}

#[derive(Debug)]
struct QueuedPublish {
    request_id: u32,
    request_handle: u32,
    results: Option<Vec<StatusCode>>,
    expires: Option<Instant>,
}

/// Process-wide id source so subscription ids are unique server-wide.
fn global_ids() -> Arc<AtomicU32> {
    static IDS: std::sync::OnceLock<Arc<AtomicU32>> = std::sync::OnceLock::new();
    IDS.get_or_init(|| Arc::new(AtomicU32::new(1))).clone()
}

/// All subscriptions of one session plus the session's Publish request queue.
#[derive(Debug)]
pub struct SessionSubscriptions {
    limits: Limits,
    ids: Arc<AtomicU32>,
    subs: BTreeMap<u32, Subscription>,
    queue: VecDeque<QueuedPublish>,
    /// Messages of subscriptions no longer here (BadTimeout, GoodSubscriptionTransferred).
    pending_status: VecDeque<(u32, NotificationMessage)>,
    /// Responses produced outside publish/tick (take, delete); drained by tick or take_ready.
    ready: Vec<(u32, ResponseOrFault)>,
    late_seq: u64,
    /// [`Self::next_deadline`] as last computed; `None` when a change may
    /// have moved it. The subscription timer asks every session for its
    /// deadline on every tick, and computing it visits every monitored
    /// item, so it is kept until the next call that takes `&mut self`.
    deadline: Cell<Option<Option<Instant>>>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn status_message(seq: u32, status: StatusCode, now_dt: DateTime) -> NotificationMessage {
    NotificationMessage {
        sequence_number: seq,
        publish_time: now_dt,
        notification_data: Some(vec![ExtensionObject::from_message(
            StatusChangeNotification {
                status,
                diagnostic_info: DiagnosticInfo::default(),
            },
        )]),
    }
}

fn respond(
    q: QueuedPublish,
    sub_id: u32,
    available: Vec<u32>,
    more: bool,
    msg: NotificationMessage,
    now_dt: DateTime,
) -> (u32, ResponseOrFault) {
    let resp = PublishResponse {
        response_header: ResponseHeader::new_timestamped_service_result(
            now_dt,
            q.request_handle,
            StatusCode::Good,
        ),
        subscription_id: sub_id,
        available_sequence_numbers: Some(available),
        more_notifications: more,
        notification_message: msg,
        results: q.results,
        diagnostic_infos: None,
    };
    (q.request_id, ResponseOrFault::Response(resp))
}

fn fault(q: QueuedPublish, status: StatusCode) -> (u32, ResponseOrFault) {
    (
        q.request_id,
        ResponseOrFault::Fault {
            request_handle: q.request_handle,
            status,
        },
    )
}

impl SessionSubscriptions {
    /// Creates the subscription state of a new session; ids come from a process-wide counter.
    pub fn new(limits: Limits) -> Self {
        Self::with_id_source(limits, global_ids())
    }

    /// Like [`Self::new`] with an explicit server-wide subscription id counter.
    pub fn with_id_source(limits: Limits, ids: Arc<AtomicU32>) -> Self {
        Self {
            limits,
            ids,
            subs: BTreeMap::new(),
            queue: VecDeque::new(),
            pending_status: VecDeque::new(),
            ready: Vec::new(),
            late_seq: 0,
            deadline: Cell::new(None),
        }
    }

    /// The limits this session uses.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn next_id(&self) -> u32 {
        loop {
            let id = self.ids.fetch_add(1, Ordering::Relaxed);
            if id != 0 {
                return id;
            }
        }
    }

    fn revise(&self, interval_ms: f64, lifetime: u32, keep_alive: u32, max_notif: u32) -> Revised {
        let l = &self.limits;
        let max_iv = l.max_publishing_interval.max(l.min_publishing_interval);
        let interval = if interval_ms.is_nan() || interval_ms <= 0.0 {
            l.min_publishing_interval
        } else {
            Duration::try_from_secs_f64(interval_ms / 1000.0).unwrap_or(max_iv)
        }
        .clamp(l.min_publishing_interval, max_iv);
        let keep_alive = keep_alive.clamp(1, l.max_keep_alive_count.max(1));
        let lifetime = lifetime
            .min(l.max_lifetime_count.max(1))
            .max(keep_alive.saturating_mul(3));
        let cap = if l.max_notifications_per_publish == 0 {
            10_000
        } else {
            l.max_notifications_per_publish
        };
        let max_notifications = if max_notif == 0 {
            cap
        } else {
            max_notif.min(cap)
        };
        Revised {
            interval,
            lifetime,
            keep_alive,
            max_notifications,
        }
    }

    /// CreateSubscription: revises the parameters (lifetime >= 3 x keep-alive) and starts the
    /// publishing timer. Fails with BadTooManySubscriptions.
    pub fn create_subscription(
        &mut self,
        req: &CreateSubscriptionRequest,
        now: Instant,
    ) -> Result<RevisedSubscription, StatusCode> {
        self.deadline.set(None);
        if self.subs.len() >= self.limits.max_subscriptions_per_session as usize {
            return Err(StatusCode::BadTooManySubscriptions);
        }
        let r = self.revise(
            req.requested_publishing_interval,
            req.requested_lifetime_count,
            req.requested_max_keep_alive_count,
            req.max_notifications_per_publish,
        );
        let id = self.next_id();
        let sub = Subscription {
            id,
            interval: r.interval,
            lifetime_count: r.lifetime,
            keep_alive_count: r.keep_alive,
            max_notifications: r.max_notifications,
            priority: req.priority,
            publishing_enabled: req.publishing_enabled,
            next_publish: now + r.interval,
            keep_alive_counter: r.keep_alive,
            lifetime_counter: r.lifetime,
            message_sent: false,
            late: None,
            next_seq: 1,
            retransmission: VecDeque::new(),
            max_retransmission: self.limits.max_retransmission_queue.max(1) as usize,
            items: BTreeMap::new(),
            next_item_id: 1,
            counts: Default::default(),
        };
        self.subs.insert(id, sub);
        Ok(r.into_revised(id))
    }

    /// ModifySubscription: new parameters apply from now (the publishing timer restarts).
    pub fn modify_subscription(
        &mut self,
        req: &ModifySubscriptionRequest,
        now: Instant,
    ) -> Result<RevisedSubscription, StatusCode> {
        self.deadline.set(None);
        let r = self.revise(
            req.requested_publishing_interval,
            req.requested_lifetime_count,
            req.requested_max_keep_alive_count,
            req.max_notifications_per_publish,
        );
        let sub = self
            .subs
            .get_mut(&req.subscription_id)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        sub.interval = r.interval;
        sub.lifetime_count = r.lifetime;
        sub.keep_alive_count = r.keep_alive;
        sub.max_notifications = r.max_notifications;
        sub.priority = req.priority;
        sub.counts.modify += 1;
        sub.keep_alive_counter = sub.keep_alive_counter.min(r.keep_alive);
        sub.reset_lifetime();
        sub.next_publish = now + r.interval;
        Ok(r.into_revised(sub.id))
    }

    /// SetPublishingMode: per id Good or BadSubscriptionIdInvalid. Disabled subscriptions keep
    /// sampling but only send keep-alives.
    pub fn set_publishing_mode(&mut self, enabled: bool, ids: &[u32]) -> Vec<StatusCode> {
        self.deadline.set(None);
        ids.iter()
            .map(|id| match self.subs.get_mut(id) {
                Some(s) => {
                    s.publishing_enabled = enabled;
                    if enabled {
                        s.counts.enable += 1;
                    } else {
                        s.counts.disable += 1;
                    }
                    s.reset_lifetime();
                    StatusCode::Good
                }
                None => StatusCode::BadSubscriptionIdInvalid,
            })
            .collect()
    }

    /// DeleteSubscriptions: per id Good or BadSubscriptionIdInvalid. When the last
    /// subscription goes, queued Publish requests are answered with BadNoSubscription (see
    /// [`Self::take_ready`]).
    pub fn delete_subscriptions(&mut self, ids: &[u32]) -> Vec<StatusCode> {
        self.deadline.set(None);
        let res = ids
            .iter()
            .map(|id| match self.subs.remove(id) {
                Some(_) => StatusCode::Good,
                None => StatusCode::BadSubscriptionIdInvalid,
            })
            .collect();
        if self.subs.is_empty() && self.pending_status.is_empty() {
            while let Some(q) = self.queue.pop_front() {
                self.ready.push(fault(q, StatusCode::BadNoSubscription));
            }
        }
        res
    }

    fn sub_mut(&mut self, id: u32) -> Result<&mut Subscription, StatusCode> {
        let s = self
            .subs
            .get_mut(&id)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        s.reset_lifetime();
        Ok(s)
    }

    /// CreateMonitoredItems. Service errors: BadSubscriptionIdInvalid, BadNothingToDo,
    /// BadTimestampsToReturnInvalid. Per item: the source's check result,
    /// BadTooManyMonitoredItems, BadFilterNotAllowed, BadMonitoredItemFilterUnsupported,
    /// BadMonitoredItemFilterInvalid, BadDeadbandFilterInvalid, BadEventFilterInvalid.
    /// Enabled data items are sampled at once and the initial value is queued.
    pub fn create_monitored_items(
        &mut self,
        sub: u32,
        ts: TimestampsToReturn,
        items: &[MonitoredItemCreateRequest],
        source: &dyn ItemSource,
        now: Instant,
        now_dt: DateTime,
    ) -> Result<Vec<MonitoredItemCreateResult>, StatusCode> {
        self.deadline.set(None);
        if ts == TimestampsToReturn::Invalid {
            return Err(StatusCode::BadTimestampsToReturnInvalid);
        }
        let limits = self.limits.clone();
        let s = self.sub_mut(sub)?;
        if items.is_empty() {
            return Err(StatusCode::BadNothingToDo);
        }
        let err = |status_code| MonitoredItemCreateResult {
            status_code,
            ..Default::default()
        };
        let mut out = Vec::with_capacity(items.len());
        for req in items {
            if s.items.len() >= limits.max_monitored_items_per_subscription as usize {
                out.push(err(StatusCode::BadTooManyMonitoredItems));
                continue;
            }
            let rvi = &req.item_to_monitor;
            if let Err(e) = source.check(rvi) {
                out.push(err(e));
                continue;
            }
            let sample =
                if item::is_event_item(rvi) || req.monitoring_mode == MonitoringMode::Disabled {
                    None
                } else {
                    Some(item::sample_now(source, rvi, now_dt))
                };
            let p = &req.requested_parameters;
            let rev = match revise_params(rvi, p, s.interval, &limits, source, sample.as_ref()) {
                Ok(r) => r,
                Err(e) => {
                    out.push(err(e));
                    continue;
                }
            };
            let id = s.next_item_id;
            s.next_item_id = s.next_item_id.checked_add(1).unwrap_or(1);
            let mut mi = MonitoredItem {
                id,
                client_handle: p.client_handle,
                rvi: rvi.clone(),
                mode: req.monitoring_mode,
                sampling: rev.sampling,
                sampling_ms: rev.sampling_ms,
                next_sample: item::first_sample(now, rev.sampling, s.next_publish),
                queue_size: rev.queue_size,
                discard_oldest: p.discard_oldest,
                timestamps: ts,
                kind: rev.kind,
                triggers: Default::default(),
                trigger_pending: false,
                source_cursor: None,
                hold_initial_until: None,
                overflows: 0,
            };
            if let Some(dv) = sample {
                mi.start_with(dv, now);
            }
            out.push(MonitoredItemCreateResult {
                status_code: StatusCode::Good,
                monitored_item_id: id,
                revised_sampling_interval: mi.sampling_ms,
                revised_queue_size: mi.queue_size as u32,
                filter_result: rev.filter_result,
            });
            s.items.insert(id, mi);
        }
        Ok(out)
    }

    /// ModifyMonitoredItems: client handle, sampling interval, filter, queue size and discard
    /// policy. Per item BadMonitoredItemIdInvalid or a filter error (item left unchanged).
    pub fn modify_monitored_items(
        &mut self,
        sub: u32,
        ts: TimestampsToReturn,
        items: &[MonitoredItemModifyRequest],
        source: &dyn ItemSource,
        now: Instant,
        now_dt: DateTime,
    ) -> Result<Vec<MonitoredItemModifyResult>, StatusCode> {
        self.deadline.set(None);
        if ts == TimestampsToReturn::Invalid {
            return Err(StatusCode::BadTimestampsToReturnInvalid);
        }
        let limits = self.limits.clone();
        let s = self.sub_mut(sub)?;
        if items.is_empty() {
            return Err(StatusCode::BadNothingToDo);
        }
        let (interval, next_publish) = (s.interval, s.next_publish);
        let mut out = Vec::with_capacity(items.len());
        for req in items {
            let err = |status_code| MonitoredItemModifyResult {
                status_code,
                ..Default::default()
            };
            let Some(mi) = s.items.get_mut(&req.monitored_item_id) else {
                out.push(err(StatusCode::BadMonitoredItemIdInvalid));
                continue;
            };
            let p = &req.requested_parameters;
            let sample = match (&mi.kind, mi.mode) {
                (ItemKind::Data { .. }, m) if m != MonitoringMode::Disabled => {
                    Some(item::sample_now(source, &mi.rvi, now_dt))
                }
                _ => None,
            };
            let rev = match revise_params(&mi.rvi, p, interval, &limits, source, sample.as_ref()) {
                Ok(r) => r,
                Err(e) => {
                    out.push(err(e));
                    continue;
                }
            };
            mi.client_handle = p.client_handle;
            mi.timestamps = ts;
            mi.discard_oldest = p.discard_oldest;
            if mi.sampling != rev.sampling {
                mi.next_sample = item::first_sample(now, rev.sampling, next_publish);
            }
            mi.sampling = rev.sampling;
            mi.sampling_ms = rev.sampling_ms;
            match (&mut mi.kind, rev.kind) {
                (ItemKind::Data { filter, .. }, ItemKind::Data { filter: nf, .. }) => *filter = nf,
                (
                    ItemKind::Event { select, filter, .. },
                    ItemKind::Event {
                        select: ns,
                        filter: nf,
                        ..
                    },
                ) => {
                    *select = ns;
                    *filter = nf;
                }
                _ => {}
            }
            mi.resize_queue(rev.queue_size);
            out.push(MonitoredItemModifyResult {
                status_code: StatusCode::Good,
                revised_sampling_interval: mi.sampling_ms,
                revised_queue_size: mi.queue_size as u32,
                filter_result: rev.filter_result,
            });
        }
        Ok(out)
    }

    /// DeleteMonitoredItems: per id Good or BadMonitoredItemIdInvalid; triggering links to
    /// the deleted items are removed too.
    pub fn delete_monitored_items(
        &mut self,
        sub: u32,
        ids: &[u32],
    ) -> Result<Vec<StatusCode>, StatusCode> {
        self.deadline.set(None);
        let s = self.sub_mut(sub)?;
        if ids.is_empty() {
            return Err(StatusCode::BadNothingToDo);
        }
        let res = ids
            .iter()
            .map(|id| match s.items.remove(id) {
                Some(gone) => {
                    s.counts.note_removed_item(&gone);
                    StatusCode::Good
                }
                None => StatusCode::BadMonitoredItemIdInvalid,
            })
            .collect();
        for mi in s.items.values_mut() {
            mi.triggers.retain(|t| !ids.contains(t));
        }
        Ok(res)
    }

    /// SetMonitoringMode. Disabled purges the queue; leaving Disabled takes a new initial
    /// sample; Sampling -> Reporting lets the queued values go out.
    pub fn set_monitoring_mode(
        &mut self,
        sub: u32,
        mode: MonitoringMode,
        ids: &[u32],
        source: &dyn ItemSource,
        now: Instant,
        now_dt: DateTime,
    ) -> Result<Vec<StatusCode>, StatusCode> {
        self.deadline.set(None);
        let s = self.sub_mut(sub)?;
        if ids.is_empty() {
            return Err(StatusCode::BadNothingToDo);
        }
        let next_publish = s.next_publish;
        Ok(ids
            .iter()
            .map(|id| {
                let Some(mi) = s.items.get_mut(id) else {
                    return StatusCode::BadMonitoredItemIdInvalid;
                };
                let old = mi.mode;
                mi.mode = mode;
                if mode == MonitoringMode::Disabled {
                    mi.clear_queue();
                    mi.trigger_pending = false;
                    mi.hold_initial_until = None;
                } else if old == MonitoringMode::Disabled
                    && matches!(mi.kind, ItemKind::Data { .. })
                {
                    mi.next_sample = item::first_sample(now, mi.sampling, next_publish);
                    let dv = item::sample_now(source, &mi.rvi, now_dt);
                    mi.start_with(dv, now);
                }
                StatusCode::Good
            })
            .collect())
    }

    /// SetTriggering: returns (add results, remove results), each Good or
    /// BadMonitoredItemIdInvalid. Service errors: BadSubscriptionIdInvalid,
    /// BadMonitoredItemIdInvalid (triggering item), BadNothingToDo.
    pub fn set_triggering(
        &mut self,
        sub: u32,
        triggering_item: u32,
        links_to_add: &[u32],
        links_to_remove: &[u32],
    ) -> Result<(Vec<StatusCode>, Vec<StatusCode>), StatusCode> {
        self.deadline.set(None);
        let s = self.sub_mut(sub)?;
        if links_to_add.is_empty() && links_to_remove.is_empty() {
            return Err(StatusCode::BadNothingToDo);
        }
        if !s.items.contains_key(&triggering_item) {
            return Err(StatusCode::BadMonitoredItemIdInvalid);
        }
        let removed: Vec<StatusCode> = links_to_remove
            .iter()
            .map(|id| {
                let removed = s
                    .items
                    .get_mut(&triggering_item)
                    .is_some_and(|t| t.triggers.remove(id));
                if removed {
                    StatusCode::Good
                } else {
                    StatusCode::BadMonitoredItemIdInvalid
                }
            })
            .collect();
        let added: Vec<StatusCode> = links_to_add
            .iter()
            .map(|id| {
                if *id == triggering_item || !s.items.contains_key(id) {
                    return StatusCode::BadMonitoredItemIdInvalid;
                }
                if let Some(t) = s.items.get_mut(&triggering_item) {
                    t.triggers.insert(*id);
                }
                StatusCode::Good
            })
            .collect();
        Ok((added, removed))
    }

    /// A Publish request arrived. Acknowledgements are processed (Good /
    /// BadSubscriptionIdInvalid / BadSequenceNumberUnknown) and returned in the response to
    /// this request. Returns the responses to send now: this one if a subscription is late or
    /// a status change is pending; BadTooManyPublishRequests for the oldest queued request when
    /// the queue overflows; BadNoSubscription when the session has no subscription.
    pub fn publish(
        &mut self,
        request_id: u32,
        req: &PublishRequest,
        now: Instant,
        now_dt: DateTime,
    ) -> Vec<(u32, ResponseOrFault)> {
        self.deadline.set(None);
        let mut out = std::mem::take(&mut self.ready);
        let results = req.subscription_acknowledgements.as_ref().map(|acks| {
            acks.iter()
                .map(|a| match self.subs.get_mut(&a.subscription_id) {
                    None => StatusCode::BadSubscriptionIdInvalid,
                    Some(s) => {
                        match s
                            .retransmission
                            .iter()
                            .position(|m| m.sequence_number == a.sequence_number)
                        {
                            Some(p) => {
                                s.retransmission.remove(p);
                                StatusCode::Good
                            }
                            None => StatusCode::BadSequenceNumberUnknown,
                        }
                    }
                })
                .collect::<Vec<_>>()
        });
        for s in self.subs.values_mut() {
            s.reset_lifetime();
        }
        let hint = req.request_header.timeout_hint;
        let q = QueuedPublish {
            request_id,
            request_handle: req.request_header.request_handle,
            results,
            expires: (hint > 0).then(|| now + Duration::from_millis(u64::from(hint))),
        };
        if self.subs.is_empty() && self.pending_status.is_empty() {
            out.push(fault(q, StatusCode::BadNoSubscription));
            return out;
        }
        self.queue.push_back(q);
        self.dispatch(now_dt, &mut out);
        while self.queue.len() > self.limits.max_publish_requests.max(1) as usize {
            if let Some(old) = self.queue.pop_front() {
                out.push(fault(old, StatusCode::BadTooManyPublishRequests));
            }
        }
        out
    }

    /// Answers queued Publish requests from pending status changes and late subscriptions;
    /// faults the rest with BadNoSubscription when no subscription is left.
    fn dispatch(&mut self, now_dt: DateTime, out: &mut Vec<(u32, ResponseOrFault)>) {
        while !self.queue.is_empty() {
            if let Some((sub_id, msg)) = self.pending_status.pop_front() {
                if let Some(q) = self.queue.pop_front() {
                    out.push(respond(q, sub_id, Vec::new(), false, msg, now_dt));
                }
                continue;
            }
            let late = self
                .subs
                .values()
                .filter_map(|s| s.late.map(|o| (std::cmp::Reverse(s.priority), o, s.id)))
                .min();
            let Some((_, _, id)) = late else { break };
            let Some(q) = self.queue.pop_front() else {
                break;
            };
            let Some(s) = self.subs.get_mut(&id) else {
                break;
            };
            if s.wants_data() {
                let (msg, more) = s.data_message(now_dt);
                s.late = if more {
                    self.late_seq += 1;
                    Some(self.late_seq)
                } else {
                    None
                };
                out.push(respond(
                    q,
                    id,
                    s.available_sequence_numbers(),
                    more,
                    msg,
                    now_dt,
                ));
            } else {
                let msg = s.keep_alive(now_dt);
                s.late = None;
                out.push(respond(
                    q,
                    id,
                    s.available_sequence_numbers(),
                    false,
                    msg,
                    now_dt,
                ));
            }
        }
        if self.subs.is_empty() && self.pending_status.is_empty() {
            while let Some(q) = self.queue.pop_front() {
                out.push(fault(q, StatusCode::BadNoSubscription));
            }
        }
    }

    /// Publishing timer expiry of one subscription (state table §5.13.1.2). Returns true when
    /// the lifetime expired.
    fn publishing_timer(
        &mut self,
        id: u32,
        now_dt: DateTime,
        out: &mut Vec<(u32, ResponseOrFault)>,
    ) -> bool {
        let Some(s) = self.subs.get_mut(&id) else {
            return false;
        };
        let queue_was_empty = self.queue.is_empty();
        let mut go_late = false;
        if s.wants_data() {
            if s.late.is_some() {
                // Already waiting for a Publish request.
            } else if let Some(q) = self.queue.pop_front() {
                let (msg, mut more) = s.data_message(now_dt);
                out.push(respond(
                    q,
                    id,
                    s.available_sequence_numbers(),
                    more,
                    msg,
                    now_dt,
                ));
                while more {
                    let Some(q) = self.queue.pop_front() else {
                        go_late = true;
                        break;
                    };
                    let (msg, m) = s.data_message(now_dt);
                    more = m;
                    out.push(respond(
                        q,
                        id,
                        s.available_sequence_numbers(),
                        more,
                        msg,
                        now_dt,
                    ));
                }
            } else {
                go_late = true;
            }
        } else if s.late.is_some() {
            // LATE waiting for a keep-alive slot.
        } else if !s.message_sent || s.keep_alive_counter <= 1 {
            if let Some(q) = self.queue.pop_front() {
                let msg = s.keep_alive(now_dt);
                out.push(respond(
                    q,
                    id,
                    s.available_sequence_numbers(),
                    false,
                    msg,
                    now_dt,
                ));
            } else {
                go_late = true;
            }
        } else {
            s.keep_alive_counter -= 1;
        }
        if go_late && s.late.is_none() {
            self.late_seq += 1;
            s.late = Some(self.late_seq);
            s.counts.late += 1;
        }
        if queue_was_empty {
            s.lifetime_counter = s.lifetime_counter.saturating_sub(1);
            return s.lifetime_counter == 0;
        }
        false
    }

    /// Advances timers: publish request timeouts, sampling, publishing intervals,
    /// keep-alives and lifetime expiry (the subscription is deleted and a
    /// StatusChangeNotification BadTimeout goes out with the next Publish). Returns the
    /// Publish responses to send.
    pub fn tick(
        &mut self,
        now: Instant,
        now_dt: DateTime,
        source: &dyn ItemSource,
    ) -> Vec<(u32, ResponseOrFault)> {
        self.deadline.set(None);
        let mut out = std::mem::take(&mut self.ready);
        let mut kept = VecDeque::with_capacity(self.queue.len());
        while let Some(q) = self.queue.pop_front() {
            if q.expires.is_some_and(|e| e <= now) {
                out.push(fault(q, StatusCode::BadTimeout));
            } else {
                kept.push_back(q);
            }
        }
        self.queue = kept;
        for s in self.subs.values_mut() {
            for mi in s.items.values_mut() {
                mi.sample_if_due(now, now_dt, source);
            }
        }
        let mut due: Vec<(std::cmp::Reverse<u8>, u32)> = self
            .subs
            .values()
            .filter(|s| s.next_publish <= now)
            .map(|s| (std::cmp::Reverse(s.priority), s.id))
            .collect();
        due.sort();
        for (_, id) in due {
            let mut rounds = 0u32;
            while let Some(s) = self.subs.get_mut(&id).filter(|s| s.next_publish <= now) {
                rounds += 1;
                if rounds > 100_000 {
                    s.next_publish = now + s.interval;
                    break;
                }
                s.next_publish += s.interval;
                if self.publishing_timer(id, now_dt, &mut out) {
                    if let Some(mut s) = self.subs.remove(&id) {
                        let seq = s.take_seq();
                        self.pending_status
                            .push_back((id, status_message(seq, StatusCode::BadTimeout, now_dt)));
                    }
                    break;
                }
            }
        }
        self.dispatch(now_dt, &mut out);
        out
    }

    /// Responses produced by calls that cannot return them (delete_subscriptions, take).
    /// Also returned by the next publish/tick; call this after such calls to send them early.
    pub fn take_ready(&mut self) -> Vec<(u32, ResponseOrFault)> {
        std::mem::take(&mut self.ready)
    }

    /// Takes every queued Publish request out of the queue, oldest first,
    /// as (request id, request handle), for the caller to answer with a
    /// ServiceFault on the channel they came on. Called when the session
    /// ends (Bad_SessionClosed, Part 4 5.7.4) or moves to another
    /// SecureChannel: answering them on the new channel would use request
    /// ids the new channel never sent.
    pub fn clear_publish_queue(&mut self) -> Vec<(u32, u32)> {
        self.deadline.set(None);
        self.queue
            .drain(..)
            .map(|q| (q.request_id, q.request_handle))
            .collect()
    }

    /// The earliest instant tick must be called (publishing, sampling or a Publish timeout).
    pub fn next_deadline(&self) -> Option<Instant> {
        if let Some(cached) = self.deadline.get() {
            debug_assert_eq!(cached, self.compute_deadline(), "stale cached deadline");
            return cached;
        }
        let d = self.compute_deadline();
        self.deadline.set(Some(d));
        d
    }

    /// The earliest timer over every subscription, item and queued Publish
    /// request; visits them all (cached by [`Self::next_deadline`]).
    fn compute_deadline(&self) -> Option<Instant> {
        let subs = self.subs.values().map(|s| s.deadline());
        let qs = self.queue.iter().filter_map(|q| q.expires);
        subs.chain(qs).min()
    }

    /// Republish: BadSubscriptionIdInvalid or BadMessageNotAvailable.
    pub fn republish(&mut self, sub: u32, seq: u32) -> Result<NotificationMessage, StatusCode> {
        let s = self.sub_mut(sub)?;
        s.counts.republish_requests += 1;
        let message = s
            .retransmission
            .iter()
            .find(|m| m.sequence_number == seq)
            .cloned()
            .ok_or(StatusCode::BadMessageNotAvailable)?;
        s.counts.republished += 1;
        Ok(message)
    }

    /// Delivers an event to event items monitoring the Server object or the event's source
    /// node. Use [`Self::push_event_where`] for other notifier hierarchies.
    pub fn push_event(&mut self, event: &dyn EventFields, now: Instant) {
        self.deadline.set(None);
        let server = NodeId::from(ObjectId::Server);
        let source_node = SimpleAttributeOperand {
            type_definition_id: ObjectTypeId::BaseEventType.into(),
            browse_path: Some(vec![QualifiedName::new(0, "SourceNode")]),
            attribute_id: AttributeId::Value as u32,
            index_range: Default::default(),
        };
        let source = match event.field(&source_node) {
            Variant::NodeId(id) => *id,
            _ => NodeId::null(),
        };
        self.push_event_where(event, now, &|n: &NodeId| *n == server || *n == source);
    }

    /// Delivers an event to every enabled event item whose notifier node satisfies `notifier`.
    /// The where clause is not evaluated.
    pub fn push_event_where(
        &mut self,
        event: &dyn EventFields,
        _now: Instant,
        notifier: &dyn Fn(&NodeId) -> bool,
    ) {
        self.deadline.set(None);
        for s in self.subs.values_mut() {
            for mi in s.items.values_mut() {
                if matches!(mi.kind, ItemKind::Event { .. }) && notifier(&mi.rvi.node_id) {
                    mi.push_event(event);
                }
            }
        }
    }

    /// Delivers an event that a shared upstream event item received to the
    /// event items on `node` created with exactly `filter` (the items that
    /// upstream item serves). The upstream server evaluated the where clause.
    pub fn push_event_for(&mut self, event: &dyn EventFields, node: &NodeId, filter: &EventFilter) {
        self.deadline.set(None);
        for s in self.subs.values_mut() {
            for mi in s.items.values_mut() {
                if mi.is_event_item_for(node, filter) {
                    mi.push_event(event);
                }
            }
        }
    }

    /// The event monitored items of subscription `sub` as (monitored item
    /// id, notifier node, filter), whatever their monitoring mode: what a
    /// ConditionRefresh of the subscription covers.
    /// BadSubscriptionIdInvalid for a subscription this session does not have.
    pub fn event_items_of(&self, sub: u32) -> Result<Vec<(u32, NodeId, EventFilter)>, StatusCode> {
        let s = self
            .subs
            .get(&sub)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        Ok(s.items
            .values()
            .filter_map(|mi| match &mi.kind {
                ItemKind::Event { filter, .. } => {
                    Some((mi.id, mi.rvi.node_id.clone(), filter.clone()))
                }
                ItemKind::Data { .. } => None,
            })
            .collect())
    }

    /// Delivers an event to the one event item `item` of subscription `sub`
    /// (a condition refresh's events go only to the items refreshed).
    /// False when the subscription or item is gone or is no event item.
    pub fn push_event_to(&mut self, sub: u32, item: u32, event: &dyn EventFields) -> bool {
        self.deadline.set(None);
        match self.subs.get_mut(&sub).and_then(|s| s.items.get_mut(&item)) {
            Some(mi) if matches!(mi.kind, ItemKind::Event { .. }) => {
                mi.push_event(event);
                true
            }
            _ => false,
        }
    }

    /// ResendData (Part 5 method): re-queues the last value of every data item.
    pub fn resend_data(&mut self, sub: u32) -> Result<(), StatusCode> {
        self.deadline.set(None);
        self.sub_mut(sub)?.requeue_last_values();
        Ok(())
    }

    /// TransferSubscriptions, source side: removes the subscription; this session gets a
    /// StatusChangeNotification GoodSubscriptionTransferred with its next Publish.
    pub fn take(&mut self, sub: u32, now_dt: DateTime) -> Option<Subscription> {
        self.deadline.set(None);
        let mut s = self.subs.remove(&sub)?;
        s.late = None;
        let msg = status_message(s.next_seq, StatusCode::GoodSubscriptionTransferred, now_dt);
        self.pending_status.push_back((sub, msg));
        let mut out = std::mem::take(&mut self.ready);
        self.dispatch(now_dt, &mut out);
        self.ready = out;
        Some(s)
    }

    /// TransferSubscriptions, target side: adopts a subscription (BadTooManySubscriptions).
    /// With `send_initial_values` the last value of every data item is queued again.
    pub fn insert(
        &mut self,
        mut sub: Subscription,
        send_initial_values: bool,
        now: Instant,
    ) -> Result<(), StatusCode> {
        self.deadline.set(None);
        if self.subs.len() >= self.limits.max_subscriptions_per_session as usize {
            return Err(StatusCode::BadTooManySubscriptions);
        }
        sub.reset_lifetime();
        sub.keep_alive_counter = sub.keep_alive_count;
        sub.late = None;
        sub.message_sent = false;
        sub.next_publish = now + sub.interval;
        if send_initial_values {
            sub.requeue_last_values();
        }
        self.subs.insert(sub.id, sub);
        Ok(())
    }

    /// (server handles, client handles) for GetMonitoredItems.
    pub fn monitored_item_handles(&self, sub: u32) -> Option<(Vec<u32>, Vec<u32>)> {
        let s = self.subs.get(&sub)?;
        Some(s.items.values().map(|i| (i.id, i.client_handle)).unzip())
    }

    /// Number of monitored items (data and event, any mode) of all this
    /// session's subscriptions: the session diagnostics' count.
    pub fn monitored_item_count(&self) -> usize {
        self.subs.values().map(|s| s.items.len()).sum()
    }

    /// Number of queued Publish requests.
    pub fn pending_publish_count(&self) -> usize {
        self.queue.len()
    }

    /// Every data monitored item of this session that is sampling (mode Sampling or
    /// Reporting), with what it asks of its source. The engine calls this after item services
    /// and ticks to keep shared upstream items in step with the items that need them.
    pub fn data_items(&self) -> Vec<(ReadValueId, ItemDemand)> {
        self.subs
            .values()
            .flat_map(|s| s.items.values())
            .filter_map(|mi| mi.demand().map(|d| (mi.rvi.clone(), d)))
            .collect()
    }

    /// Every event monitored item of this session that is not Disabled, as
    /// (notifier node, filter). The engine calls this with [`Self::data_items`]
    /// to keep shared upstream event items in step with the items that need
    /// them.
    pub fn event_items(&self) -> Vec<(NodeId, EventFilter)> {
        self.subs
            .values()
            .flat_map(|s| s.items.values())
            .filter_map(|mi| {
                mi.event_demand()
                    .map(|(node, filter)| (node.clone(), filter.clone()))
            })
            .collect()
    }

    /// The SubscriptionDiagnosticsDataType of each of this session's
    /// subscriptions, for the session `session_id`.
    pub fn diagnostics(&self, session_id: &NodeId) -> Vec<SubscriptionDiagnosticsDataType> {
        self.subs
            .values()
            .map(|s| s.diagnostics(session_id.clone()))
            .collect()
    }

    /// The subscription `sub`, to record a TransferSubscriptions request
    /// naming it (see [`Subscription::record_transfer`]).
    pub fn subscription_mut(&mut self, sub: u32) -> Option<&mut Subscription> {
        self.subs.get_mut(&sub)
    }

    /// Number of this session's subscriptions.
    pub fn subscription_count(&self) -> usize {
        self.subs.len()
    }

    /// Ids of this session's subscriptions.
    pub fn subscription_ids(&self) -> Vec<u32> {
        self.subs.keys().copied().collect()
    }

    /// A subscription of this session (read-only), e.g. for diagnostics.
    pub fn subscription(&self, sub: u32) -> Option<&Subscription> {
        self.subs.get(&sub)
    }
}

struct Revised {
    interval: Duration,
    lifetime: u32,
    keep_alive: u32,
    max_notifications: u32,
}

impl Revised {
    fn into_revised(self, id: u32) -> RevisedSubscription {
        RevisedSubscription {
            subscription_id: id,
            revised_publishing_interval: ms(self.interval),
            revised_lifetime_count: self.lifetime,
            revised_max_keep_alive_count: self.keep_alive,
        }
    }
}
