//! Subscription and MonitoredItem services: the network side of the
//! sans-IO engine in `uagate-subs`. Each session owns a
//! `SessionSubscriptions`; the subscription timer task calls
//! [`Engine::tick_subscriptions`] and routes Publish responses to the
//! session's channel. TransferSubscriptions touches the sessions alone and
//! is the sessions part's (`sessions.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use opcua_core::ResponseMessage;
use opcua_types::{
    AttributeId, BrowsePath, ByteString, CreateMonitoredItemsRequest, CreateMonitoredItemsResponse,
    CreateSubscriptionRequest, CreateSubscriptionResponse, DataValue, DateTime,
    DeleteMonitoredItemsRequest, DeleteMonitoredItemsResponse, DeleteSubscriptionsRequest,
    DeleteSubscriptionsResponse, LocalizedText, ModifyMonitoredItemsRequest,
    ModifyMonitoredItemsResponse, ModifySubscriptionRequest, ModifySubscriptionResponse, NodeId,
    PublishRequest, QualifiedName, ReadValueId, RelativePath, RelativePathElement,
    RepublishRequest, RepublishResponse, RequestHeader, ResponseHeader, ServerState, ServiceFault,
    SetMonitoringModeRequest, SetMonitoringModeResponse, SetPublishingModeRequest,
    SetPublishingModeResponse, SetTriggeringRequest, SetTriggeringResponse, SimpleAttributeOperand,
    StatusCode, TimestampsToReturn, Variant,
};
use tokio_util::sync::CancellationToken;
use uagate_space::LocalSpace;
use uagate_subs::{EventFields, ItemSource, ResponseOrFault};

use crate::error::ServiceError;
use crate::session::Session;
use crate::{ChannelInfo, Engine};

type Result<T> = std::result::Result<T, ServiceError>;

/// Shortest time between two runs of the subscription timer. A run visits
/// every session (its deadline is a walk over its items), and every
/// Publish request wakes the timer: unthrottled, 3,000 sessions with one
/// Publish response per second each kept a core 86 % busy in the timer
/// (BENCHMARKS.md, "10,000 sessions"). Publishing and sampling deadlines
/// are met to within this; the fastest intervals granted are 10 ms and up
/// (`server.min_publishing_interval`, default 50 ms). A Publish that finds
/// a message waiting is still answered at once, not by the timer.
const MIN_TICK_SPACING: Duration = Duration::from_millis(10);

/// Monitored items on local nodes sample the local address space; items on
/// mounted field nodes sample the shared southbound item they need.
pub(crate) struct SpaceSource<'a>(
    pub &'a LocalSpace,
    pub Option<&'a crate::fields::Fields>,
    /// Whether new items may show other clients' sessions (see
    /// [`crate::methods::shows_other_sessions`]).
    pub bool,
);

impl SpaceSource<'_> {
    /// The field connection serving `node`, when it is a mounted field node
    /// (not a mount folder, which is local).
    fn field(&self, node: &NodeId) -> Option<&uagate_field::FieldConnection> {
        let fields = self.1?;
        let m = fields.route(node)?;
        if fields.is_mount_folder(m, node) {
            return None;
        }
        fields.conns.get(m).map(|c| c.as_ref())
    }
}

impl ItemSource for SpaceSource<'_> {
    fn samples_monitored(
        &self,
        item: &ReadValueId,
        demand: &uagate_subs::ItemDemand,
        cursor: &mut Option<u64>,
        now: DateTime,
    ) -> Vec<DataValue> {
        match self.field(&item.node_id) {
            Some(conn) => conn.values_since(&crate::fields::Fields::item_key(item, demand), cursor),
            None => vec![self.sample(item, now)],
        }
    }

    fn sample_monitored(
        &self,
        item: &ReadValueId,
        demand: &uagate_subs::ItemDemand,
        now: DateTime,
    ) -> DataValue {
        match self.field(&item.node_id) {
            Some(conn) => conn.value(&crate::fields::Fields::item_key(item, demand)),
            None => self.sample(item, now),
        }
    }

    fn check(&self, item: &ReadValueId) -> std::result::Result<(), StatusCode> {
        if !self.2 && crate::methods::shows_other_sessions(&item.node_id, item.attribute_id) {
            return Err(StatusCode::BadUserAccessDenied);
        }
        if self.field(&item.node_id).is_some() {
            // An attribute no node has is refused here, as for a local
            // node. The field server validates the rest; a failure shows
            // up as the item's status (e.g. BadNodeIdUnknown) once the
            // southbound item is created.
            return AttributeId::from_u32(item.attribute_id)
                .map(|_| ())
                .map_err(|_| StatusCode::BadAttributeIdInvalid);
        }
        let probe = ReadValueId {
            node_id: item.node_id.clone(),
            attribute_id: item.attribute_id,
            index_range: Default::default(),
            data_encoding: Default::default(),
        };
        let dv = self
            .0
            .read(DateTime::now(), &probe, TimestampsToReturn::Neither, 0.0);
        match dv.status {
            Some(s)
                if s == StatusCode::BadNodeIdUnknown || s == StatusCode::BadAttributeIdInvalid =>
            {
                Err(s)
            }
            _ => Ok(()),
        }
    }

    fn sample(&self, item: &ReadValueId, now: DateTime) -> DataValue {
        if let Some(conn) = self.field(&item.node_id) {
            // A new item joining a node that is already served starts with
            // its current value.
            return conn
                .latest(
                    &item.node_id,
                    item.attribute_id,
                    &item.index_range.to_string(),
                )
                .unwrap_or(DataValue {
                    status: Some(StatusCode::BadWaitingForInitialData),
                    ..Default::default()
                });
        }
        self.0.read(now, item, TimestampsToReturn::Both, 0.0)
    }

    fn eu_range(&self, node: &NodeId) -> Option<(f64, f64)> {
        if let Some(conn) = self.field(node) {
            return conn.eu_range(node);
        }
        let path = BrowsePath {
            starting_node: node.clone(),
            relative_path: RelativePath {
                elements: Some(vec![RelativePathElement {
                    reference_type_id: NodeId::new(0, 46u32), // HasProperty
                    is_inverse: false,
                    include_subtypes: true,
                    target_name: QualifiedName::new(0, "EURange"),
                }]),
            },
        };
        let result = self.0.translate(std::slice::from_ref(&path)).pop()?;
        let target = result.targets?.first()?.target_id.node_id.clone();
        let dv = self.0.read(
            DateTime::now(),
            &ReadValueId {
                node_id: target,
                attribute_id: AttributeId::Value as u32,
                index_range: Default::default(),
                data_encoding: Default::default(),
            },
            TimestampsToReturn::Neither,
            0.0,
        );
        match dv.value {
            Some(Variant::ExtensionObject(eo)) => {
                eo.inner_as::<opcua_types::Range>().map(|r| (r.low, r.high))
            }
            _ => None,
        }
    }

    fn is_event_notifier(&self, node: &NodeId) -> bool {
        if self.field(node).is_some() {
            // The field server decides when the shared southbound event
            // item is created; a node that is no notifier just stays quiet.
            return true;
        }
        let dv = self.0.read(
            DateTime::now(),
            &ReadValueId {
                node_id: node.clone(),
                attribute_id: AttributeId::EventNotifier as u32,
                index_range: Default::default(),
                data_encoding: Default::default(),
            },
            TimestampsToReturn::Neither,
            0.0,
        );
        matches!(dv.value, Some(Variant::Byte(b)) if b & 1 == 1)
    }
}

/// An event the gateway raises on the Server object (state changes, audit).
#[derive(Debug, Clone)]
pub struct GatewayEvent {
    event_id: ByteString,
    event_type: NodeId,
    source: NodeId,
    time: DateTime,
    message: LocalizedText,
    severity: u16,
    /// Extra fields by browse name (SystemState, ClientUserId, MethodId, Status...).
    extra: Vec<(&'static str, Variant)>,
}

/// SystemStatusChangeEventType.
const SYSTEM_STATUS_CHANGE_EVENT: u32 = 11446;
/// AuditUpdateMethodEventType.
const AUDIT_UPDATE_METHOD_EVENT: u32 = 2127;

impl GatewayEvent {
    fn new(event_type: u32, message: &str, severity: u16) -> Self {
        GatewayEvent {
            event_id: opcua_crypto::random::byte_string(16),
            event_type: NodeId::new(0, event_type),
            source: NodeId::new(0, 2253u32),
            time: DateTime::now(),
            message: LocalizedText::new("en", message),
            severity,
            extra: Vec::new(),
        }
    }
}

impl GatewayEvent {
    /// The RefreshStartEvent (`start`) or RefreshEndEvent that frames a
    /// condition refresh (Part 9 §5.11); one event, the same EventId, for
    /// every item it is queued to.
    pub(crate) fn refresh(start: bool) -> GatewayEvent {
        use uagate_field::events::{REFRESH_END_EVENT_TYPE, REFRESH_START_EVENT_TYPE};
        if start {
            GatewayEvent::new(REFRESH_START_EVENT_TYPE, "condition refresh started", 100)
        } else {
            GatewayEvent::new(REFRESH_END_EVENT_TYPE, "condition refresh ended", 100)
        }
    }

    /// The SystemStatusChangeEvent and the audit event of a state change
    /// requested by `actor`.
    pub(crate) fn state_change(state: ServerState, actor: &str) -> [GatewayEvent; 2] {
        let mut status = GatewayEvent::new(
            SYSTEM_STATUS_CHANGE_EVENT,
            &format!("server state changed to {state:?}"),
            500,
        );
        status
            .extra
            .push(("SystemState", Variant::from(state as i32)));
        let mut audit = GatewayEvent::new(
            AUDIT_UPDATE_METHOD_EVENT,
            "RequestServerStateChange called",
            500,
        );
        audit.extra.push(("Status", Variant::from(true)));
        audit.extra.push(("ClientUserId", Variant::from(actor)));
        audit
            .extra
            .push(("ActionTimeStamp", Variant::from(audit.time)));
        audit
            .extra
            .push(("MethodId", Variant::from(NodeId::new(0, 12886u32))));
        [status, audit]
    }
}

impl EventFields for GatewayEvent {
    fn field(&self, operand: &SimpleAttributeOperand) -> Variant {
        let name = operand
            .browse_path
            .as_deref()
            .and_then(|p| p.last())
            .map(|q| q.name.as_ref().to_string())
            .unwrap_or_default();
        if operand.attribute_id == AttributeId::NodeId as u32 && name.is_empty() {
            return Variant::Empty;
        }
        match name.as_str() {
            "EventId" => Variant::from(self.event_id.clone()),
            "EventType" => Variant::from(self.event_type.clone()),
            "SourceNode" => Variant::from(self.source.clone()),
            "SourceName" => Variant::from("Server"),
            "Time" | "ReceiveTime" => Variant::from(self.time),
            "Message" => Variant::from(self.message.clone()),
            "Severity" => Variant::from(self.severity),
            other => self
                .extra
                .iter()
                .find(|(n, _)| *n == other)
                .map(|(_, v)| v.clone())
                .unwrap_or(Variant::Empty),
        }
    }
}

/// The Publish answer to send, counting its notifications in `stats`.
fn publish_answer(stats: &crate::stats::Stats, r: ResponseOrFault) -> ResponseMessage {
    match r {
        ResponseOrFault::Response(p) => {
            let n: usize = p
                .notification_message
                .notification_data
                .iter()
                .flatten()
                .map(|eo| {
                    if let Some(d) = eo.inner_as::<opcua_types::DataChangeNotification>() {
                        d.monitored_items.as_ref().map_or(0, Vec::len)
                    } else if let Some(e) = eo.inner_as::<opcua_types::EventNotificationList>() {
                        e.events.as_ref().map_or(0, Vec::len)
                    } else {
                        0
                    }
                })
                .sum();
            stats.count_notifications(n as u64);
            p.into()
        }
        ResponseOrFault::Fault {
            request_handle,
            status,
        } => ServiceFault::new(request_handle, status).into(),
    }
}

fn check_timestamps(ts: TimestampsToReturn) -> Result<()> {
    if ts == TimestampsToReturn::Invalid {
        return Err(ServiceError::Status(
            StatusCode::BadTimestampsToReturnInvalid,
        ));
    }
    Ok(())
}

/// BadNothingToDo for a request naming no subscription or item.
pub(crate) fn ids_checked(n: usize) -> Result<()> {
    if n == 0 {
        Err(ServiceError::NothingToDo)
    } else {
        Ok(())
    }
}

impl Engine {
    /// Runs `f` on the caller's active session, like `with_session`, for
    /// services that need the address space as item source too. Lock order:
    /// space, then sessions.
    fn with_subs<T>(
        &self,
        chan: &ChannelInfo,
        header: &RequestHeader,
        f: impl FnOnce(&mut Session, &SpaceSource<'_>) -> Result<T>,
    ) -> Result<T> {
        let result = self.with_subs_quiet(chan, header, f);
        self.sessions.notify_changed();
        self.sync_field_demand();
        result
    }

    /// Runs `f` on the caller's session like [`Self::with_subs`], without
    /// waking the subscription timer or recomputing the field demand: for
    /// Publish and Republish, which change no item, no subscription and no
    /// timer other than a Publish timeout (the caller wakes the timer for
    /// that). Both run once per notification message, and the demand
    /// visits every item of every session.
    fn with_subs_quiet<T>(
        &self,
        chan: &ChannelInfo,
        header: &RequestHeader,
        f: impl FnOnce(&mut Session, &SpaceSource<'_>) -> Result<T>,
    ) -> Result<T> {
        let fields = self.space.fields();
        let space = self.space.local();
        self.sessions.with_session(chan, header, |s| {
            let sees_sessions = s
                .identity()
                .is_some_and(|who| crate::methods::is_secure_admin(who, chan.mode));
            let source = SpaceSource(&space, fields.as_deref(), sees_sessions);
            f(s, &source)
        })
    }

    pub(crate) fn create_subscription(
        &self,
        chan: &ChannelInfo,
        r: &CreateSubscriptionRequest,
    ) -> Result<ResponseMessage> {
        let revised = self.with_subs(chan, &r.request_header, |s, _| {
            s.subscriptions
                .create_subscription(r, Instant::now())
                .map_err(ServiceError::Status)
        })?;
        Ok(CreateSubscriptionResponse {
            response_header: ResponseHeader::new_good(&r.request_header),
            subscription_id: revised.subscription_id,
            revised_publishing_interval: revised.revised_publishing_interval,
            revised_lifetime_count: revised.revised_lifetime_count,
            revised_max_keep_alive_count: revised.revised_max_keep_alive_count,
        }
        .into())
    }

    pub(crate) fn modify_subscription(
        &self,
        chan: &ChannelInfo,
        r: &ModifySubscriptionRequest,
    ) -> Result<ResponseMessage> {
        let revised = self.with_subs(chan, &r.request_header, |s, _| {
            s.subscriptions
                .modify_subscription(r, Instant::now())
                .map_err(ServiceError::Status)
        })?;
        Ok(ModifySubscriptionResponse {
            response_header: ResponseHeader::new_good(&r.request_header),
            revised_publishing_interval: revised.revised_publishing_interval,
            revised_lifetime_count: revised.revised_lifetime_count,
            revised_max_keep_alive_count: revised.revised_max_keep_alive_count,
        }
        .into())
    }

    pub(crate) fn set_publishing_mode(
        &self,
        chan: &ChannelInfo,
        r: &SetPublishingModeRequest,
    ) -> Result<ResponseMessage> {
        let ids = r.subscription_ids.as_deref().unwrap_or(&[]);
        ids_checked(ids.len())?;
        let results = self.with_subs(chan, &r.request_header, |s, _| {
            Ok(s.subscriptions
                .set_publishing_mode(r.publishing_enabled, ids))
        })?;
        Ok(SetPublishingModeResponse {
            response_header: ResponseHeader::new_good(&r.request_header),
            results: Some(results),
            diagnostic_infos: None,
        }
        .into())
    }

    pub(crate) fn delete_subscriptions(
        &self,
        chan: &ChannelInfo,
        r: &DeleteSubscriptionsRequest,
    ) -> Result<ResponseMessage> {
        let ids = r.subscription_ids.as_deref().unwrap_or(&[]);
        ids_checked(ids.len())?;
        let results = self.with_subs(chan, &r.request_header, |s, _| {
            Ok(s.subscriptions.delete_subscriptions(ids))
        })?;
        Ok(DeleteSubscriptionsResponse {
            response_header: ResponseHeader::new_good(&r.request_header),
            results: Some(results),
            diagnostic_infos: None,
        }
        .into())
    }

    /// Publish: answered now when a subscription has something waiting,
    /// otherwise queued and answered later by the subscription timer.
    pub(crate) fn publish(
        &self,
        chan: &ChannelInfo,
        request_id: u32,
        r: &PublishRequest,
    ) -> Result<Option<ResponseMessage>> {
        let now = Instant::now();
        let answers = self.with_subs_quiet(chan, &r.request_header, |s, _| {
            Ok(s.subscriptions.publish(request_id, r, now, DateTime::now()))
        })?;
        let hint = r.request_header.timeout_hint;
        if hint > 0 && !answers.iter().any(|(id, _)| *id == request_id) {
            // Queued with a timeout: the timer must answer BadTimeout then.
            self.sessions
                .notify_if_before(now + Duration::from_millis(u64::from(hint)));
        }
        let mut now_answer = None;
        for (id, answer) in answers {
            if id == request_id {
                now_answer = Some(publish_answer(self.pipeline.stats(), answer));
            } else {
                self.respond(
                    chan.channel_id,
                    id,
                    publish_answer(self.pipeline.stats(), answer),
                );
            }
        }
        Ok(now_answer)
    }

    pub(crate) fn republish(
        &self,
        chan: &ChannelInfo,
        r: &RepublishRequest,
    ) -> Result<ResponseMessage> {
        let message = self.with_subs_quiet(chan, &r.request_header, |s, _| {
            s.subscriptions
                .republish(r.subscription_id, r.retransmit_sequence_number)
                .map_err(ServiceError::Status)
        })?;
        Ok(RepublishResponse {
            response_header: ResponseHeader::new_good(&r.request_header),
            notification_message: message,
        }
        .into())
    }

    /// Runs a monitored-item operation on `count` items of the caller's
    /// session: BadNothingToDo for none, BadTooManyOperations over the
    /// per-call limit, then `f` with the item source and the current time.
    fn item_operation<T>(
        &self,
        chan: &ChannelInfo,
        header: &RequestHeader,
        count: usize,
        f: impl FnOnce(
            &mut uagate_subs::SessionSubscriptions,
            &SpaceSource<'_>,
            Instant,
            DateTime,
        ) -> std::result::Result<T, StatusCode>,
    ) -> Result<T> {
        ids_checked(count)?;
        self.space.check_item_limit(count)?;
        self.with_subs(chan, header, |s, source| {
            f(
                &mut s.subscriptions,
                source,
                Instant::now(),
                DateTime::now(),
            )
            .map_err(ServiceError::Status)
        })
    }

    pub(crate) fn create_monitored_items(
        &self,
        chan: &ChannelInfo,
        r: &CreateMonitoredItemsRequest,
    ) -> Result<ResponseMessage> {
        let items = r.items_to_create.as_deref().unwrap_or(&[]);
        check_timestamps(r.timestamps_to_return)?;
        let results = self.item_operation(
            chan,
            &r.request_header,
            items.len(),
            |subs, source, now, dt| {
                subs.create_monitored_items(
                    r.subscription_id,
                    r.timestamps_to_return,
                    items,
                    source,
                    now,
                    dt,
                )
            },
        )?;
        Ok(CreateMonitoredItemsResponse {
            response_header: ResponseHeader::new_good(&r.request_header),
            results: Some(results),
            diagnostic_infos: None,
        }
        .into())
    }

    pub(crate) fn modify_monitored_items(
        &self,
        chan: &ChannelInfo,
        r: &ModifyMonitoredItemsRequest,
    ) -> Result<ResponseMessage> {
        let items = r.items_to_modify.as_deref().unwrap_or(&[]);
        check_timestamps(r.timestamps_to_return)?;
        let results = self.item_operation(
            chan,
            &r.request_header,
            items.len(),
            |subs, source, now, dt| {
                subs.modify_monitored_items(
                    r.subscription_id,
                    r.timestamps_to_return,
                    items,
                    source,
                    now,
                    dt,
                )
            },
        )?;
        Ok(ModifyMonitoredItemsResponse {
            response_header: ResponseHeader::new_good(&r.request_header),
            results: Some(results),
            diagnostic_infos: None,
        }
        .into())
    }

    pub(crate) fn delete_monitored_items(
        &self,
        chan: &ChannelInfo,
        r: &DeleteMonitoredItemsRequest,
    ) -> Result<ResponseMessage> {
        let ids = r.monitored_item_ids.as_deref().unwrap_or(&[]);
        let results =
            self.item_operation(chan, &r.request_header, ids.len(), |subs, _, _, _| {
                subs.delete_monitored_items(r.subscription_id, ids)
            })?;
        Ok(DeleteMonitoredItemsResponse {
            response_header: ResponseHeader::new_good(&r.request_header),
            results: Some(results),
            diagnostic_infos: None,
        }
        .into())
    }

    pub(crate) fn set_monitoring_mode(
        &self,
        chan: &ChannelInfo,
        r: &SetMonitoringModeRequest,
    ) -> Result<ResponseMessage> {
        let ids = r.monitored_item_ids.as_deref().unwrap_or(&[]);
        let results = self.item_operation(
            chan,
            &r.request_header,
            ids.len(),
            |subs, source, now, dt| {
                subs.set_monitoring_mode(r.subscription_id, r.monitoring_mode, ids, source, now, dt)
            },
        )?;
        Ok(SetMonitoringModeResponse {
            response_header: ResponseHeader::new_good(&r.request_header),
            results: Some(results),
            diagnostic_infos: None,
        }
        .into())
    }

    pub(crate) fn set_triggering(
        &self,
        chan: &ChannelInfo,
        r: &SetTriggeringRequest,
    ) -> Result<ResponseMessage> {
        let add = r.links_to_add.as_deref().unwrap_or(&[]);
        let remove = r.links_to_remove.as_deref().unwrap_or(&[]);
        let (add_results, remove_results) = self.item_operation(
            chan,
            &r.request_header,
            add.len() + remove.len(),
            |subs, _, _, _| {
                subs.set_triggering(r.subscription_id, r.triggering_item_id, add, remove)
            },
        )?;
        Ok(SetTriggeringResponse {
            response_header: ResponseHeader::new_good(&r.request_header),
            add_results: Some(add_results),
            add_diagnostic_infos: None,
            remove_results: Some(remove_results),
            remove_diagnostic_infos: None,
        }
        .into())
    }

    /// Advances every session's subscriptions whose deadline has come and
    /// sends the Publish responses. Returns the next deadline.
    pub(crate) fn tick_subscriptions(&self) -> Option<Instant> {
        let now = Instant::now();
        let now_dt = DateTime::now();
        let mut out = Vec::new();
        let mut next: Option<Instant> = None;
        // Events the field connections received go to their items first, so
        // they leave with this tick's messages.
        let fields = self.space.fields();
        let field_events = fields.as_ref().map(|f| f.take_events()).unwrap_or_default();
        {
            let space = self.space.local();
            // Items exist already: their check was at creation.
            let source = SpaceSource(&space, fields.as_deref(), true);
            let mut sessions = self.sessions.lock();
            self.deliver_field_events(&mut sessions, field_events);
            // Every session is visited at every tick; its deadline is kept
            // by its subscriptions until they change, so a session that is
            // not due costs a comparison.
            for s in sessions.iter_mut() {
                let mut answers = s.subscriptions.take_ready();
                let mut deadline = s.subscriptions.next_deadline();
                if deadline.is_some_and(|d| d <= now) {
                    answers.extend(s.subscriptions.tick(now, now_dt, &source));
                    deadline = s.subscriptions.next_deadline();
                }
                if !answers.is_empty() {
                    out.extend(answers.into_iter().map(|(id, a)| (s.channel_id, id, a)));
                }
                if let Some(d) = deadline {
                    next = Some(next.map_or(d, |n: Instant| n.min(d)));
                }
            }
        }
        for (channel, id, answer) in out {
            self.respond(channel, id, publish_answer(self.pipeline.stats(), answer));
        }
        next
    }

    /// Recomputes which shared field items the northbound data items need
    /// (reference counts per key) and hands them to the field connections.
    /// Called after every item/subscription service and once a second (for
    /// subscriptions that expire and sessions that close).
    pub(crate) fn sync_field_demand(&self) {
        let Some(fields) = self.space.fields() else {
            return;
        };
        let (items, events): (Vec<_>, Vec<_>) = {
            let sessions = self.sessions.lock();
            (
                sessions
                    .iter()
                    .flat_map(|s| s.subscriptions.data_items())
                    .collect(),
                sessions
                    .iter()
                    .flat_map(|s| s.subscriptions.event_items())
                    .collect(),
            )
        };
        fields.set_demand(items.into_iter());
        fields.set_event_demand(events.into_iter());
    }

    /// Runs the subscription timer until `cancel`: advances subscriptions
    /// at their deadlines, at least once a second, and whenever the
    /// sessions part reports a change. Spawned once by [`crate::start`].
    pub(crate) async fn subscription_timer(self: Arc<Self>, cancel: CancellationToken) {
        loop {
            self.sessions.plan_wake(None);
            let ticked = Instant::now();
            let next = self.tick_subscriptions();
            // Sleep until the next deadline, at most 1 s, or until woken;
            // never sooner than MIN_TICK_SPACING after this tick.
            let earliest = ticked + MIN_TICK_SPACING;
            let wake = next
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(1))
                .min(Instant::now() + Duration::from_secs(1))
                .max(earliest);
            self.sessions.plan_wake(Some(wake));
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = self.sessions.changed() => {
                    tokio::select! {
                        _ = cancel.cancelled() => break,
                        _ = tokio::time::sleep_until(earliest.into()) => {},
                    }
                },
                _ = tokio::time::sleep_until(wake.into()) => {},
            }
        }
    }
}
