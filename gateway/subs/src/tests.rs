//! Engine tests on simulated time (no sleeping): a HashMap-backed ItemSource whose values the
//! tests change between ticks.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use opcua_types::{
    AttributeId, DataChangeFilter, DataChangeNotification, DataChangeTrigger, DataValue, DateTime,
    EventFilter, EventFilterResult, EventNotificationList, ExtensionObject,
    ModifySubscriptionRequest, MonitoredItemCreateRequest, MonitoredItemModifyRequest,
    MonitoringMode, MonitoringParameters, NodeId, NotificationMessage, ObjectId, ObjectTypeId,
    PublishRequest, PublishResponse, QualifiedName, ReadValueId, RequestHeader,
    SimpleAttributeOperand, StatusChangeNotification, StatusCode, SubscriptionAcknowledgement,
    TimestampsToReturn, Variant,
};

use crate::*;

#[derive(Default)]
struct Source {
    values: HashMap<NodeId, DataValue>,
    ranges: HashMap<NodeId, (f64, f64)>,
    notifiers: HashSet<NodeId>,
}

impl Source {
    fn set(&mut self, name: &str, v: impl Into<Variant>) {
        self.values.insert(node(name), DataValue::value_only(v));
    }
    fn set_dv(&mut self, name: &str, dv: DataValue) {
        self.values.insert(node(name), dv);
    }
}

impl ItemSource for Source {
    fn check(&self, item: &ReadValueId) -> Result<(), StatusCode> {
        if item.attribute_id == AttributeId::EventNotifier as u32 {
            return Ok(());
        }
        if !self.values.contains_key(&item.node_id) {
            return Err(StatusCode::BadNodeIdUnknown);
        }
        if item.attribute_id != AttributeId::Value as u32 {
            return Err(StatusCode::BadAttributeIdInvalid);
        }
        Ok(())
    }
    fn sample(&self, item: &ReadValueId, _now: DateTime) -> DataValue {
        self.values
            .get(&item.node_id)
            .cloned()
            .unwrap_or_else(|| DataValue {
                status: Some(StatusCode::BadNodeIdUnknown),
                ..Default::default()
            })
    }
    fn eu_range(&self, node: &NodeId) -> Option<(f64, f64)> {
        self.ranges.get(node).copied()
    }
    fn is_event_notifier(&self, node: &NodeId) -> bool {
        self.notifiers.contains(node)
    }
}

struct Event {
    ty: NodeId,
    source: NodeId,
    message: String,
}

impl EventFields for Event {
    fn field(&self, op: &SimpleAttributeOperand) -> Variant {
        let name = op
            .browse_path
            .as_ref()
            .and_then(|p| p.first())
            .map(|q| q.name.to_string())
            .unwrap_or_default();
        match name.as_str() {
            "EventType" => Variant::from(self.ty.clone()),
            "SourceNode" => Variant::from(self.source.clone()),
            "Message" => Variant::from(self.message.clone()),
            _ => Variant::Empty,
        }
    }
}

fn node(name: &str) -> NodeId {
    NodeId::new(2, name)
}

fn dt() -> DateTime {
    DateTime::ymd(2026, 1, 1)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn sub_req(interval_ms: f64, lifetime: u32, keep_alive: u32) -> CreateSubscriptionRequest {
    CreateSubscriptionRequest {
        request_header: RequestHeader::dummy(),
        requested_publishing_interval: interval_ms,
        requested_lifetime_count: lifetime,
        requested_max_keep_alive_count: keep_alive,
        max_notifications_per_publish: 0,
        publishing_enabled: true,
        priority: 0,
    }
}

fn pub_req(handle: u32, acks: &[(u32, u32)]) -> PublishRequest {
    let mut request_header = RequestHeader::dummy();
    request_header.request_handle = handle;
    request_header.timeout_hint = 0;
    PublishRequest {
        request_header,
        subscription_acknowledgements: if acks.is_empty() {
            None
        } else {
            Some(
                acks.iter()
                    .map(
                        |&(subscription_id, sequence_number)| SubscriptionAcknowledgement {
                            subscription_id,
                            sequence_number,
                        },
                    )
                    .collect(),
            )
        },
    }
}

fn item_req(
    name: &str,
    handle: u32,
    mode: MonitoringMode,
    queue_size: u32,
    filter: ExtensionObject,
) -> MonitoredItemCreateRequest {
    MonitoredItemCreateRequest {
        item_to_monitor: ReadValueId {
            node_id: node(name),
            attribute_id: AttributeId::Value as u32,
            ..Default::default()
        },
        monitoring_mode: mode,
        requested_parameters: MonitoringParameters {
            client_handle: handle,
            sampling_interval: -1.0,
            filter,
            queue_size,
            discard_oldest: true,
        },
    }
}

fn dcf(trigger: DataChangeTrigger, deadband_type: u32, deadband_value: f64) -> ExtensionObject {
    ExtensionObject::from_message(DataChangeFilter {
        trigger,
        deadband_type,
        deadband_value,
    })
}

fn resp(r: &(u32, ResponseOrFault)) -> &PublishResponse {
    r.1.response().expect("expected a PublishResponse")
}

/// (client handle, value, status) of every data change in a message.
fn changes(msg: &NotificationMessage) -> Vec<(u32, Option<Variant>, StatusCode)> {
    msg.notification_data
        .iter()
        .flatten()
        .filter_map(|e| e.inner_as::<DataChangeNotification>())
        .flat_map(|d| d.monitored_items.clone().unwrap_or_default())
        .map(|n| {
            (
                n.client_handle,
                n.value.value.clone(),
                n.value.status.unwrap_or(StatusCode::Good),
            )
        })
        .collect()
}

fn values(msg: &NotificationMessage) -> Vec<(u32, Option<Variant>)> {
    changes(msg).into_iter().map(|(h, v, _)| (h, v)).collect()
}

/// Test fixture: one session with one 100 ms subscription.
struct Fx {
    s: SessionSubscriptions,
    src: Source,
    t0: Instant,
    sub: u32,
}

impl Fx {
    fn new(limits: Limits, keep_alive: u32) -> Self {
        let mut s = SessionSubscriptions::new(limits);
        let t0 = Instant::now();
        let sub = s
            .create_subscription(&sub_req(100.0, 0, keep_alive), t0)
            .expect("create")
            .subscription_id;
        Fx {
            s,
            src: Source::default(),
            t0,
            sub,
        }
    }
    /// Replaces the fixture's subscription by one created from `req`.
    fn replace_sub(&mut self, req: &CreateSubscriptionRequest) {
        assert_eq!(
            self.s.delete_subscriptions(&[self.sub]),
            vec![StatusCode::Good]
        );
        self.sub = self
            .s
            .create_subscription(req, self.t0)
            .unwrap()
            .subscription_id;
    }
    fn at(&self, n: u64) -> Instant {
        self.t0 + ms(n)
    }
    fn tick(&mut self, n: u64) -> Vec<(u32, ResponseOrFault)> {
        let now = self.at(n);
        self.s.tick(now, dt(), &self.src)
    }
    fn publish(&mut self, id: u32, acks: &[(u32, u32)], n: u64) -> Vec<(u32, ResponseOrFault)> {
        let now = self.at(n);
        self.s.publish(id, &pub_req(id, acks), now, dt())
    }
    fn items(
        &mut self,
        reqs: &[MonitoredItemCreateRequest],
        n: u64,
    ) -> Vec<MonitoredItemCreateResult> {
        let now = self.at(n);
        self.s
            .create_monitored_items(
                self.sub,
                TimestampsToReturn::Both,
                reqs,
                &self.src,
                now,
                dt(),
            )
            .expect("create items")
    }
}

#[test]
fn engine_is_send() {
    fn assert_send<T: Send + 'static>() {}
    assert_send::<SessionSubscriptions>();
    assert_send::<Subscription>();
    assert_send::<ResponseOrFault>();
}

#[test]
fn revises_subscription_parameters() {
    let mut s = SessionSubscriptions::new(Limits::default());
    let now = Instant::now();
    let r = s.create_subscription(&sub_req(1.0, 5, 10), now).unwrap();
    assert_eq!(r.revised_publishing_interval, 50.0);
    assert_eq!(r.revised_max_keep_alive_count, 10);
    assert_eq!(r.revised_lifetime_count, 30);
    let r2 = s.create_subscription(&sub_req(-5.0, 0, 0), now).unwrap();
    assert_eq!(r2.revised_max_keep_alive_count, 1);
    assert!(r2.revised_lifetime_count >= 3);
    assert_ne!(r.subscription_id, r2.subscription_id);
    let r3 = s
        .create_subscription(&sub_req(1e12, 0, 1_000_000), now)
        .unwrap();
    assert_eq!(r3.revised_publishing_interval, 3_600_000.0);
    assert_eq!(r3.revised_max_keep_alive_count, 10_000);
    // Server-wide unique ids across sessions.
    let mut other = SessionSubscriptions::new(Limits::default());
    let r4 = other
        .create_subscription(&sub_req(100.0, 0, 3), now)
        .unwrap();
    assert!(
        ![r.subscription_id, r2.subscription_id, r3.subscription_id].contains(&r4.subscription_id)
    );

    let limits = Limits {
        max_subscriptions_per_session: 1,
        ..Limits::default()
    };
    let mut one = SessionSubscriptions::new(limits);
    one.create_subscription(&sub_req(100.0, 0, 3), now).unwrap();
    assert_eq!(
        one.create_subscription(&sub_req(100.0, 0, 3), now),
        Err(StatusCode::BadTooManySubscriptions)
    );
}

#[test]
fn publishing_timer_delivers_at_revised_interval() {
    let mut f = Fx::new(Limits::default(), 10);
    f.src.set("a", 1i32);
    let res = f.items(
        &[item_req(
            "a",
            7,
            MonitoringMode::Reporting,
            1,
            ExtensionObject::null(),
        )],
        0,
    );
    assert_eq!(res[0].status_code, StatusCode::Good);
    assert_eq!(res[0].revised_sampling_interval, 100.0);
    assert_eq!(res[0].revised_queue_size, 1);
    assert!(f.publish(1, &[], 0).is_empty());
    assert_eq!(f.s.pending_publish_count(), 1);
    assert_eq!(f.s.next_deadline(), Some(f.at(100)));
    assert!(f.tick(50).is_empty());
    assert!(f.tick(99).is_empty());
    let out = f.tick(100);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, 1);
    let r = resp(&out[0]);
    assert_eq!(r.response_header.request_handle, 1);
    assert_eq!(r.subscription_id, f.sub);
    assert_eq!(r.notification_message.sequence_number, 1);
    assert_eq!(
        values(&r.notification_message),
        vec![(7, Some(Variant::Int32(1)))]
    );
    assert_eq!(r.available_sequence_numbers, Some(vec![1]));
    assert!(!r.more_notifications);

    f.src.set("a", 2i32);
    assert!(f.publish(2, &[], 120).is_empty());
    assert!(f.tick(150).is_empty());
    let out = f.tick(200);
    let r = resp(&out[0]);
    assert_eq!(r.notification_message.sequence_number, 2);
    assert_eq!(
        values(&r.notification_message),
        vec![(7, Some(Variant::Int32(2)))]
    );
    assert_eq!(r.available_sequence_numbers, Some(vec![1, 2]));
}

#[test]
fn keep_alive_after_max_keep_alive_count_intervals() {
    let mut f = Fx::new(Limits::default(), 3);
    f.src.set("a", 1i32);
    f.items(
        &[item_req(
            "a",
            1,
            MonitoringMode::Reporting,
            1,
            ExtensionObject::null(),
        )],
        0,
    );
    f.publish(1, &[], 0);
    assert_eq!(f.tick(100).len(), 1); // initial value, seq 1
    f.publish(2, &[], 110);
    assert!(f.tick(200).is_empty());
    assert!(f.tick(300).is_empty());
    let out = f.tick(400);
    assert_eq!(out.len(), 1, "keep-alive after 3 intervals");
    let r = resp(&out[0]);
    assert!(r.notification_message.notification_data.is_none());
    assert_eq!(
        r.notification_message.sequence_number, 2,
        "next seq, not consumed"
    );
    assert_eq!(r.available_sequence_numbers, Some(vec![1]));
    // Next data message uses that same sequence number.
    f.src.set("a", 5i32);
    f.publish(3, &[], 410);
    let out = f.tick(500);
    let r = resp(&out[0]);
    assert_eq!(r.notification_message.sequence_number, 2);
    assert_eq!(
        values(&r.notification_message),
        vec![(1, Some(Variant::Int32(5)))]
    );
}

#[test]
fn first_interval_without_data_sends_keep_alive() {
    let mut f = Fx::new(Limits::default(), 5);
    f.publish(1, &[], 0);
    let out = f.tick(100);
    let r = resp(&out[0]);
    assert!(r.notification_message.notification_data.is_none());
    assert_eq!(r.notification_message.sequence_number, 1);
}

#[test]
fn lifetime_expiry_sends_bad_timeout_then_subscription_is_gone() {
    let mut f = Fx::new(Limits::default(), 1);
    assert_eq!(
        f.s.subscription(f.sub).map(|s| s.publishing_interval()),
        Some(ms(100))
    );
    // lifetime = 3 x keep-alive = 3 intervals without any Publish request.
    assert!(f.tick(100).is_empty());
    assert!(f.tick(200).is_empty());
    assert_eq!(f.s.subscription_ids(), vec![f.sub]);
    assert!(f.tick(300).is_empty());
    assert!(f.s.subscription_ids().is_empty());
    let out = f.publish(1, &[], 310);
    assert_eq!(out.len(), 1);
    let r = resp(&out[0]);
    assert_eq!(r.subscription_id, f.sub);
    let sc = r.notification_message.notification_data.as_ref().unwrap()[0]
        .inner_as::<StatusChangeNotification>()
        .expect("status change");
    assert_eq!(sc.status, StatusCode::BadTimeout);
    let out = f.publish(2, &[], 320);
    assert_eq!(out[0].1.fault(), Some(StatusCode::BadNoSubscription));
    assert_eq!(
        f.s.republish(f.sub, 1),
        Err(StatusCode::BadSubscriptionIdInvalid)
    );
    assert_eq!(
        f.s.delete_subscriptions(&[f.sub]),
        vec![StatusCode::BadSubscriptionIdInvalid]
    );
    assert_eq!(
        f.s.set_publishing_mode(true, &[f.sub]),
        vec![StatusCode::BadSubscriptionIdInvalid]
    );
}

#[test]
fn publish_requests_keep_subscription_alive() {
    let mut f = Fx::new(Limits::default(), 1);
    for i in 1..=10u64 {
        f.publish(i as u32, &[], i * 100 - 10);
        let out = f.tick(i * 100);
        assert_eq!(out.len(), 1, "keep-alive every interval at {i}");
    }
    assert_eq!(f.s.subscription_ids(), vec![f.sub]);
}

#[test]
fn acks_sequence_numbers_and_republish() {
    let mut f = Fx::new(Limits::default(), 10);
    f.src.set("a", 1i32);
    f.items(
        &[item_req(
            "a",
            1,
            MonitoringMode::Reporting,
            1,
            ExtensionObject::null(),
        )],
        0,
    );
    let mut seqs = Vec::new();
    for i in 1..=3u64 {
        f.src.set("a", i as i32 * 10);
        f.publish(i as u32, &[], i * 100 - 10);
        let out = f.tick(i * 100);
        seqs.push(resp(&out[0]).notification_message.sequence_number);
    }
    assert_eq!(seqs, vec![1, 2, 3]);
    let m2 = f.s.republish(f.sub, 2).expect("republish 2");
    assert_eq!(m2.sequence_number, 2);
    assert_eq!(values(&m2), vec![(1, Some(Variant::Int32(20)))]);

    // Ack 1 (good), 99 (unknown), sub 999 (invalid).
    let out = f.publish(10, &[(f.sub, 1), (f.sub, 99), (999_999_999, 1)], 310);
    assert!(out.is_empty());
    f.src.set("a", 40i32);
    let out = f.tick(400);
    let r = resp(&out[0]);
    assert_eq!(
        r.results,
        Some(vec![
            StatusCode::Good,
            StatusCode::BadSequenceNumberUnknown,
            StatusCode::BadSubscriptionIdInvalid
        ])
    );
    assert_eq!(r.available_sequence_numbers, Some(vec![2, 3, 4]));
    assert_eq!(
        f.s.republish(f.sub, 1),
        Err(StatusCode::BadMessageNotAvailable)
    );
    assert_eq!(
        f.s.republish(f.sub, 77),
        Err(StatusCode::BadMessageNotAvailable)
    );
    assert_eq!(
        f.s.republish(12345678, 2),
        Err(StatusCode::BadSubscriptionIdInvalid)
    );
}

#[test]
fn retransmission_queue_is_bounded() {
    let limits = Limits {
        max_retransmission_queue: 2,
        ..Limits::default()
    };
    let mut f = Fx::new(limits, 10);
    f.src.set("a", 0i32);
    f.items(
        &[item_req(
            "a",
            1,
            MonitoringMode::Reporting,
            1,
            ExtensionObject::null(),
        )],
        0,
    );
    let mut last = None;
    for i in 1..=4u64 {
        f.src.set("a", i as i32);
        f.publish(i as u32, &[], i * 100 - 10);
        let out = f.tick(i * 100);
        last = resp(&out[0]).available_sequence_numbers.clone();
    }
    assert_eq!(last, Some(vec![3, 4]));
    assert_eq!(
        f.s.republish(f.sub, 2),
        Err(StatusCode::BadMessageNotAvailable)
    );
    assert!(f.s.republish(f.sub, 4).is_ok());
    // Diagnostics: two messages dropped unacknowledged, two kept; two
    // Republish requests of which one found its message.
    let d = f.s.subscription(f.sub).unwrap().diagnostics(NodeId::null());
    assert_eq!(d.discarded_message_count, 2);
    assert_eq!(d.unacknowledged_message_count, 2);
    assert_eq!(d.republish_request_count, 2);
    assert_eq!(d.republish_message_request_count, 2);
    assert_eq!(d.republish_message_count, 1);
    assert_eq!(d.next_sequence_number, 5);
    // SetPublishingMode and ModifySubscription are counted.
    f.s.set_publishing_mode(false, &[f.sub]);
    f.s.set_publishing_mode(true, &[f.sub]);
    f.s.set_publishing_mode(false, &[f.sub]);
    let modify = ModifySubscriptionRequest {
        subscription_id: f.sub,
        requested_publishing_interval: 200.0,
        requested_lifetime_count: 30,
        requested_max_keep_alive_count: 10,
        ..Default::default()
    };
    f.s.modify_subscription(&modify, f.t0).unwrap();
    let d =
        f.s.subscription(f.sub)
            .unwrap()
            .diagnostics(NodeId::new(1, 7u32));
    assert_eq!((d.enable_count, d.disable_count, d.modify_count), (1, 2, 1));
    assert!(!d.publishing_enabled);
    assert_eq!(d.publishing_interval, 200.0);
    assert_eq!(d.session_id, NodeId::new(1, 7u32));
}

#[test]
fn sequence_numbers_skip_zero_on_wrap() {
    let mut f = Fx::new(Limits::default(), 10);
    f.src.set("a", 0i32);
    f.items(
        &[item_req(
            "a",
            1,
            MonitoringMode::Reporting,
            1,
            ExtensionObject::null(),
        )],
        0,
    );
    f.s.subs.get_mut(&f.sub).unwrap().next_seq = u32::MAX;
    let mut seqs = Vec::new();
    for i in 1..=2u64 {
        f.src.set("a", i as i32);
        f.publish(i as u32, &[], i * 100 - 10);
        seqs.push(
            resp(&f.tick(i * 100)[0])
                .notification_message
                .sequence_number,
        );
    }
    assert_eq!(seqs, vec![u32::MAX, 1]);
}

#[test]
fn too_many_publish_requests_faults_oldest() {
    let limits = Limits {
        max_publish_requests: 2,
        ..Limits::default()
    };
    let mut f = Fx::new(limits, 10);
    assert!(f.publish(1, &[], 0).is_empty());
    assert!(f.publish(2, &[], 0).is_empty());
    let out = f.publish(3, &[], 0);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, 1);
    match &out[0].1 {
        ResponseOrFault::Fault {
            request_handle,
            status,
        } => {
            assert_eq!(*request_handle, 1);
            assert_eq!(*status, StatusCode::BadTooManyPublishRequests);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(f.s.pending_publish_count(), 2);
}

#[test]
fn no_subscription_faults_publish() {
    let mut s = SessionSubscriptions::new(Limits::default());
    let now = Instant::now();
    let out = s.publish(4, &pub_req(44, &[]), now, dt());
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, 4);
    assert_eq!(out[0].1.fault(), Some(StatusCode::BadNoSubscription));

    // Queued requests are faulted when the last subscription is deleted.
    let id = s
        .create_subscription(&sub_req(100.0, 0, 3), now)
        .unwrap()
        .subscription_id;
    assert!(s.publish(5, &pub_req(5, &[]), now, dt()).is_empty());
    assert_eq!(s.delete_subscriptions(&[id]), vec![StatusCode::Good]);
    let ready = s.take_ready();
    assert_eq!(ready.len(), 1);
    assert_eq!(ready[0].1.fault(), Some(StatusCode::BadNoSubscription));
}

#[test]
fn publish_timeout_hint_faults_with_bad_timeout() {
    let mut f = Fx::new(Limits::default(), 100);
    f.tick(100); // first keep-alive goes late? no: no request, so the sub is late
    let mut req = pub_req(1, &[]);
    req.request_header.timeout_hint = 50;
    // Late subscription answers right away; queue a second one that must time out.
    let now = f.at(110);
    assert_eq!(f.s.publish(1, &req, now, dt()).len(), 1);
    req.request_header.request_handle = 2;
    assert!(f.s.publish(2, &req, now, dt()).is_empty());
    assert_eq!(f.s.next_deadline(), Some(f.at(160)));
    let out = f.tick(160);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1.fault(), Some(StatusCode::BadTimeout));
}

#[test]
fn late_subscription_answers_next_publish_immediately() {
    let mut f = Fx::new(Limits::default(), 10);
    f.src.set("a", 1i32);
    f.items(
        &[item_req(
            "a",
            1,
            MonitoringMode::Reporting,
            1,
            ExtensionObject::null(),
        )],
        0,
    );
    assert!(f.tick(100).is_empty()); // no Publish queued -> LATE
    let out = f.publish(1, &[], 150);
    assert_eq!(out.len(), 1);
    assert_eq!(
        values(&resp(&out[0]).notification_message),
        vec![(1, Some(Variant::Int32(1)))]
    );
    // Not late any more: the next Publish is queued.
    assert!(f.publish(2, &[], 160).is_empty());
}

#[test]
fn max_notifications_per_publish_splits_with_more_notifications() {
    let mut f = Fx::new(Limits::default(), 10);
    let mut req = sub_req(100.0, 0, 10);
    req.max_notifications_per_publish = 2;
    f.replace_sub(&req);
    for n in ["a", "b", "c"] {
        f.src.set(n, 1i32);
    }
    let reqs: Vec<_> = ["a", "b", "c"]
        .iter()
        .enumerate()
        .map(|(i, n)| {
            item_req(
                n,
                i as u32,
                MonitoringMode::Reporting,
                1,
                ExtensionObject::null(),
            )
        })
        .collect();
    f.items(&reqs, 0);
    f.publish(1, &[], 10);
    f.publish(2, &[], 10);
    let out = f.tick(100);
    assert_eq!(out.len(), 2);
    let r1 = resp(&out[0]);
    let r2 = resp(&out[1]);
    assert!(r1.more_notifications);
    assert_eq!(changes(&r1.notification_message).len(), 2);
    assert!(!r2.more_notifications);
    assert_eq!(changes(&r2.notification_message).len(), 1);
    assert_eq!(r2.notification_message.sequence_number, 2);

    // With a single Publish queued, the rest goes out on the next Publish at once.
    for n in ["a", "b", "c"] {
        f.src.set(n, 2i32);
    }
    f.publish(3, &[], 150);
    let out = f.tick(200);
    assert!(resp(&out[0]).more_notifications);
    let out = f.publish(4, &[], 210);
    assert_eq!(out.len(), 1);
    assert_eq!(changes(&resp(&out[0]).notification_message).len(), 1);
}

#[test]
fn publishing_disabled_sends_only_keep_alives() {
    let mut f = Fx::new(Limits::default(), 2);
    f.src.set("a", 1i32);
    f.items(
        &[item_req(
            "a",
            1,
            MonitoringMode::Reporting,
            5,
            ExtensionObject::null(),
        )],
        0,
    );
    assert_eq!(
        f.s.set_publishing_mode(false, &[f.sub]),
        vec![StatusCode::Good]
    );
    f.publish(1, &[], 10);
    let out = f.tick(100);
    assert!(resp(&out[0])
        .notification_message
        .notification_data
        .is_none());
    f.src.set("a", 2i32);
    f.publish(2, &[], 110);
    assert!(f.tick(200).is_empty());
    let out = f.tick(300);
    assert!(resp(&out[0])
        .notification_message
        .notification_data
        .is_none());
    // Re-enabled: queued values go out.
    f.s.set_publishing_mode(true, &[f.sub]);
    f.publish(3, &[], 310);
    let out = f.tick(400);
    let v = values(&resp(&out[0]).notification_message);
    assert_eq!(
        v,
        vec![(1, Some(Variant::Int32(1))), (1, Some(Variant::Int32(2)))]
    );
}

#[test]
fn queue_overflow_sets_overflow_bit() {
    let mut f = Fx::new(Limits::default(), 10);
    let mut req = sub_req(1000.0, 0, 10);
    req.priority = 1;
    f.replace_sub(&req);
    f.src.set("a", 0i32);
    f.src.set("b", 0i32);
    let mut ra = item_req(
        "a",
        1,
        MonitoringMode::Reporting,
        3,
        ExtensionObject::null(),
    );
    ra.requested_parameters.sampling_interval = 100.0;
    let mut rb = item_req(
        "b",
        2,
        MonitoringMode::Reporting,
        3,
        ExtensionObject::null(),
    );
    rb.requested_parameters.sampling_interval = 100.0;
    rb.requested_parameters.discard_oldest = false;
    f.items(&[ra, rb], 0);
    for i in 1..=4u64 {
        f.src.set("a", i as i32);
        f.src.set("b", i as i32);
        f.tick(i * 100);
    }
    f.publish(1, &[], 450);
    let out = f.tick(1000);
    let c = changes(&resp(&out[0]).notification_message);
    let a: Vec<_> = c.iter().filter(|x| x.0 == 1).cloned().collect();
    let b: Vec<_> = c.iter().filter(|x| x.0 == 2).cloned().collect();
    // DiscardOldest: 0,1 dropped; 2 (the value after the discarded one) carries the bit.
    assert_eq!(
        a.iter().map(|x| x.1.clone()).collect::<Vec<_>>(),
        vec![
            Some(Variant::Int32(2)),
            Some(Variant::Int32(3)),
            Some(Variant::Int32(4))
        ]
    );
    assert!(a[0].2.overflow());
    assert_eq!(a[0].2.bits() & 0xFFFF, 0x480);
    assert!(!a[1].2.overflow() && !a[2].2.overflow());
    // DiscardNewest: the last value is replaced by the new one, which carries the bit.
    assert_eq!(
        b.iter().map(|x| x.1.clone()).collect::<Vec<_>>(),
        vec![
            Some(Variant::Int32(0)),
            Some(Variant::Int32(1)),
            Some(Variant::Int32(4))
        ]
    );
    assert!(b[2].2.overflow());
    assert!(!b[0].2.overflow() && !b[1].2.overflow());
    // The subscription diagnostics count the overflows (two per item: four
    // values into a queue of three, after the initial one), the
    // notifications sent and the Publish requests answered.
    let d = f.s.subscription(f.sub).unwrap().diagnostics(NodeId::null());
    assert_eq!(d.monitoring_queue_overflow_count, 4);
    assert_eq!(d.data_change_notifications_count, 6);
    assert_eq!(d.notifications_count, 6);
    assert_eq!(d.publish_request_count, 1);
    assert_eq!(d.monitored_item_count, 2);
    assert_eq!(d.priority, 1);
    // A deleted item's overflows stay counted.
    f.s.delete_monitored_items(f.sub, &[1]).unwrap();
    let d = f.s.subscription(f.sub).unwrap().diagnostics(NodeId::null());
    assert_eq!(d.monitoring_queue_overflow_count, 4);
    assert_eq!(d.monitored_item_count, 1);
}

#[test]
fn queue_size_one_keeps_newest_without_overflow_bit() {
    let mut f = Fx::new(Limits::default(), 10);
    f.src.set("a", 0i32);
    let mut r = item_req(
        "a",
        1,
        MonitoringMode::Reporting,
        0,
        ExtensionObject::null(),
    );
    r.requested_parameters.sampling_interval = 50.0;
    let res = f.items(&[r], 0);
    assert_eq!(res[0].revised_queue_size, 1);
    assert_eq!(res[0].revised_sampling_interval, 50.0);
    f.src.set("a", 1i32);
    f.tick(50);
    f.src.set("a", 2i32);
    f.publish(1, &[], 60);
    let out = f.tick(100);
    let c = changes(&resp(&out[0]).notification_message);
    assert_eq!(c, vec![(1, Some(Variant::Int32(2)), StatusCode::Good)]);
}

/// Runs one value per interval through a single item, returns what got reported per interval.
fn run_values(
    f: &mut Fx,
    filter: ExtensionObject,
    seq: &[DataValue],
) -> Vec<Vec<(u32, Option<Variant>, StatusCode)>> {
    f.src.set_dv("x", seq[0].clone());
    let res = f.items(
        &[item_req("x", 9, MonitoringMode::Reporting, 10, filter)],
        0,
    );
    assert_eq!(res[0].status_code, StatusCode::Good);
    let mut out = Vec::new();
    for (i, dv) in seq.iter().enumerate() {
        let t = (i as u64 + 1) * 100;
        if i > 0 {
            f.src.set_dv("x", dv.clone());
        }
        f.publish(i as u32 + 1, &[], t - 10);
        let r = f.tick(t);
        out.push(
            r.first()
                .and_then(|r| r.1.response())
                .map(|r| changes(&r.notification_message))
                .unwrap_or_default(),
        );
    }
    out
}

#[test]
fn absolute_deadband_suppresses_small_changes() {
    let mut f = Fx::new(Limits::default(), 100);
    let seq: Vec<DataValue> = [10.0, 10.5, 10.9, 11.5, 11.0]
        .iter()
        .map(|v| DataValue::value_only(*v))
        .collect();
    let out = run_values(&mut f, dcf(DataChangeTrigger::StatusValue, 1, 1.0), &seq);
    let reported: Vec<usize> = out.iter().map(|v| v.len()).collect();
    // 10 initial; 10.5, 10.9 within 1.0 of 10; 11.5 exceeds; 11.0 within 1.0 of 11.5.
    assert_eq!(reported, vec![1, 0, 0, 1, 0]);
    assert_eq!(out[3][0].1, Some(Variant::Double(11.5)));
}

#[test]
fn percent_deadband_uses_eu_range() {
    let mut f = Fx::new(Limits::default(), 100);
    f.src.ranges.insert(node("x"), (0.0, 200.0));
    let seq: Vec<DataValue> = [10.0, 25.0, 29.0, 31.0]
        .iter()
        .map(|v| DataValue::value_only(*v))
        .collect();
    // 10 % of 200 = 20.
    let out = run_values(&mut f, dcf(DataChangeTrigger::StatusValue, 2, 10.0), &seq);
    assert_eq!(
        out.iter().map(|v| v.len()).collect::<Vec<_>>(),
        vec![1, 0, 0, 1]
    );
}

#[test]
fn filter_errors() {
    let mut f = Fx::new(Limits::default(), 10);
    f.src.set("x", 1.0f64);
    f.src.set("s", "text");
    f.src.notifiers.insert(NodeId::from(ObjectId::Server));
    let ev_filter = ExtensionObject::from_message(EventFilter {
        select_clauses: Some(vec![select("Message")]),
        where_clause: Default::default(),
    });
    let mut on_event_attr = item_req("x", 1, MonitoringMode::Reporting, 1, ev_filter.clone());
    on_event_attr.item_to_monitor.attribute_id = AttributeId::EventNotifier as u32;
    let mut dcf_on_event = event_item(2, dcf(DataChangeTrigger::StatusValue, 0, 0.0));
    dcf_on_event.item_to_monitor.node_id = NodeId::from(ObjectId::Server);
    let reqs = vec![
        item_req(
            "x",
            1,
            MonitoringMode::Reporting,
            1,
            dcf(DataChangeTrigger::StatusValue, 2, 10.0),
        ),
        item_req(
            "x",
            1,
            MonitoringMode::Reporting,
            1,
            dcf(DataChangeTrigger::StatusValue, 1, -1.0),
        ),
        item_req(
            "x",
            1,
            MonitoringMode::Reporting,
            1,
            dcf(DataChangeTrigger::StatusValue, 7, 1.0),
        ),
        item_req(
            "s",
            1,
            MonitoringMode::Reporting,
            1,
            dcf(DataChangeTrigger::StatusValue, 1, 1.0),
        ),
        item_req("x", 1, MonitoringMode::Reporting, 1, ev_filter),
        item_req(
            "x",
            1,
            MonitoringMode::Reporting,
            1,
            ExtensionObject::from_message(opcua_types::AggregateFilter::default()),
        ),
        on_event_attr, // node x is no event notifier
        dcf_on_event,
        event_item(3, ExtensionObject::null()),
        item_req(
            "nope",
            1,
            MonitoringMode::Reporting,
            1,
            ExtensionObject::null(),
        ),
    ];
    let res = f.items(&reqs, 0);
    let codes: Vec<StatusCode> = res.iter().map(|r| r.status_code).collect();
    assert_eq!(
        codes,
        vec![
            StatusCode::BadFilterNotAllowed,
            StatusCode::BadDeadbandFilterInvalid,
            StatusCode::BadDeadbandFilterInvalid,
            StatusCode::BadFilterNotAllowed,
            StatusCode::BadFilterNotAllowed,
            StatusCode::BadMonitoredItemFilterUnsupported,
            StatusCode::BadFilterNotAllowed,
            StatusCode::BadFilterNotAllowed,
            StatusCode::BadMonitoredItemFilterInvalid,
            StatusCode::BadNodeIdUnknown,
        ]
    );
    f.src.ranges.insert(node("x"), (0.0, 10.0));
    let res = f.items(
        &[item_req(
            "x",
            1,
            MonitoringMode::Reporting,
            1,
            dcf(DataChangeTrigger::StatusValue, 2, 150.0),
        )],
        0,
    );
    assert_eq!(res[0].status_code, StatusCode::BadDeadbandFilterInvalid);
    let now = f.at(0);
    assert_eq!(
        f.s.create_monitored_items(f.sub, TimestampsToReturn::Invalid, &reqs, &f.src, now, dt()),
        Err(StatusCode::BadTimestampsToReturnInvalid)
    );
    assert_eq!(
        f.s.create_monitored_items(f.sub, TimestampsToReturn::Both, &[], &f.src, now, dt()),
        Err(StatusCode::BadNothingToDo)
    );
    assert_eq!(
        f.s.create_monitored_items(424242, TimestampsToReturn::Both, &reqs, &f.src, now, dt()),
        Err(StatusCode::BadSubscriptionIdInvalid)
    );
}

#[test]
fn data_change_triggers() {
    let t1 = DateTime::ymd_hms(2026, 1, 1, 0, 0, 1);
    let t2 = DateTime::ymd_hms(2026, 1, 1, 0, 0, 2);
    let dv = |v: i32, s: StatusCode, t: DateTime| DataValue {
        value: Some(Variant::Int32(v)),
        status: Some(s),
        source_timestamp: Some(t),
        ..Default::default()
    };
    let good = StatusCode::Good;
    let unc = StatusCode::UncertainLastUsableValue;
    // initial, value change, timestamp-only change, status change
    let seq = vec![
        dv(1, good, t1),
        dv(2, good, t1),
        dv(2, good, t2),
        dv(2, unc, t2),
    ];
    let counts = |trigger| {
        let mut f = Fx::new(Limits::default(), 100);
        run_values(&mut f, dcf(trigger, 0, 0.0), &seq)
            .iter()
            .map(|v| v.len())
            .collect::<Vec<_>>()
    };
    assert_eq!(counts(DataChangeTrigger::Status), vec![1, 0, 0, 1]);
    assert_eq!(counts(DataChangeTrigger::StatusValue), vec![1, 1, 0, 1]);
    assert_eq!(
        counts(DataChangeTrigger::StatusValueTimestamp),
        vec![1, 1, 1, 1]
    );
}

#[test]
fn timestamps_to_return_filters_timestamps() {
    let mut f = Fx::new(Limits::default(), 100);
    let t = DateTime::ymd_hms(2026, 1, 1, 0, 0, 1);
    f.src.set_dv(
        "x",
        DataValue {
            value: Some(Variant::Int32(1)),
            status: None,
            source_timestamp: Some(t),
            server_timestamp: Some(t),
            ..Default::default()
        },
    );
    let now = f.at(0);
    f.s.create_monitored_items(
        f.sub,
        TimestampsToReturn::Source,
        &[item_req(
            "x",
            1,
            MonitoringMode::Reporting,
            1,
            ExtensionObject::null(),
        )],
        &f.src,
        now,
        dt(),
    )
    .unwrap();
    f.publish(1, &[], 10);
    let out = f.tick(100);
    let msg = &resp(&out[0]).notification_message;
    let n = msg.notification_data.as_ref().unwrap()[0]
        .inner_as::<DataChangeNotification>()
        .unwrap();
    let v = &n.monitored_items.as_ref().unwrap()[0].value;
    assert_eq!(v.source_timestamp, Some(t));
    assert_eq!(v.server_timestamp, None);

    // Server timestamps: filled in with the sampling time when the source gives none.
    f.src.set("y", 5i32);
    let now = f.at(110);
    f.s.create_monitored_items(
        f.sub,
        TimestampsToReturn::Server,
        &[item_req(
            "y",
            2,
            MonitoringMode::Reporting,
            1,
            ExtensionObject::null(),
        )],
        &f.src,
        now,
        dt(),
    )
    .unwrap();
    f.publish(2, &[], 120);
    let out = f.tick(200);
    let msg = &resp(&out[0]).notification_message;
    let n = msg.notification_data.as_ref().unwrap()[0]
        .inner_as::<DataChangeNotification>()
        .unwrap();
    let v = &n.monitored_items.as_ref().unwrap()[0].value;
    assert_eq!(v.server_timestamp, Some(dt()));
    assert_eq!(v.source_timestamp, None);
}

#[test]
fn sampling_items_reported_only_when_triggered() {
    let mut f = Fx::new(Limits::default(), 100);
    f.src.set("trig", 0i32);
    f.src.set("samp", 0i32);
    f.src.set("off", 0i32);
    let res = f.items(
        &[
            item_req(
                "trig",
                1,
                MonitoringMode::Reporting,
                1,
                ExtensionObject::null(),
            ),
            item_req(
                "samp",
                2,
                MonitoringMode::Sampling,
                5,
                ExtensionObject::null(),
            ),
            item_req(
                "off",
                3,
                MonitoringMode::Disabled,
                1,
                ExtensionObject::null(),
            ),
        ],
        0,
    );
    let (trig, samp, off) = (
        res[0].monitored_item_id,
        res[1].monitored_item_id,
        res[2].monitored_item_id,
    );
    f.publish(1, &[], 10);
    let out = f.tick(100);
    assert_eq!(
        values(&resp(&out[0]).notification_message),
        vec![(1, Some(Variant::Int32(0)))]
    );

    let (added, removed) =
        f.s.set_triggering(f.sub, trig, &[samp, 999], &[998])
            .unwrap();
    assert_eq!(
        added,
        vec![StatusCode::Good, StatusCode::BadMonitoredItemIdInvalid]
    );
    assert_eq!(removed, vec![StatusCode::BadMonitoredItemIdInvalid]);
    assert_eq!(
        f.s.set_triggering(f.sub, 999, &[samp], &[]),
        Err(StatusCode::BadMonitoredItemIdInvalid)
    );

    // Sampled item changes alone: nothing goes out.
    f.src.set("samp", 1i32);
    f.src.set("off", 1i32);
    f.publish(2, &[], 110);
    assert!(f.tick(200).is_empty());
    // Triggering item changes: the sampled item's queue goes out too.
    f.src.set("trig", 1i32);
    let out = f.tick(300);
    let v = values(&resp(&out[0]).notification_message);
    assert_eq!(
        v,
        vec![
            (1, Some(Variant::Int32(1))),
            (2, Some(Variant::Int32(0))),
            (2, Some(Variant::Int32(1)))
        ]
    );
    // Remove the link: the sampled item goes silent again.
    let (_, removed) = f.s.set_triggering(f.sub, trig, &[], &[samp]).unwrap();
    assert_eq!(removed, vec![StatusCode::Good]);
    f.src.set("samp", 2i32);
    f.src.set("trig", 2i32);
    f.publish(3, &[], 310);
    let out = f.tick(400);
    assert_eq!(
        values(&resp(&out[0]).notification_message),
        vec![(1, Some(Variant::Int32(2)))]
    );

    // Sampling -> Reporting reports what was queued; Disabled -> Reporting samples afresh.
    let now = f.at(410);
    let r =
        f.s.set_monitoring_mode(
            f.sub,
            MonitoringMode::Reporting,
            &[samp, off, 777],
            &f.src,
            now,
            dt(),
        )
        .unwrap();
    assert_eq!(
        r,
        vec![
            StatusCode::Good,
            StatusCode::Good,
            StatusCode::BadMonitoredItemIdInvalid
        ]
    );
    f.publish(4, &[], 410);
    let out = f.tick(500);
    let v = values(&resp(&out[0]).notification_message);
    assert_eq!(
        v,
        vec![(2, Some(Variant::Int32(2))), (3, Some(Variant::Int32(1)))]
    );

    let (srv, cli) = f.s.monitored_item_handles(f.sub).unwrap();
    assert_eq!(srv, vec![trig, samp, off]);
    assert_eq!(cli, vec![1, 2, 3]);
    assert_eq!(
        f.s.delete_monitored_items(f.sub, &[samp, 555]).unwrap(),
        vec![StatusCode::Good, StatusCode::BadMonitoredItemIdInvalid]
    );
    assert_eq!(
        f.s.monitored_item_handles(f.sub).unwrap().0,
        vec![trig, off]
    );
}

fn select(name: &str) -> SimpleAttributeOperand {
    SimpleAttributeOperand {
        type_definition_id: NodeId::from(ObjectTypeId::BaseEventType),
        browse_path: Some(vec![QualifiedName::new(0, name)]),
        attribute_id: AttributeId::Value as u32,
        index_range: Default::default(),
    }
}

fn event_item(handle: u32, filter: ExtensionObject) -> MonitoredItemCreateRequest {
    MonitoredItemCreateRequest {
        item_to_monitor: ReadValueId {
            node_id: NodeId::from(ObjectId::Server),
            attribute_id: AttributeId::EventNotifier as u32,
            ..Default::default()
        },
        monitoring_mode: MonitoringMode::Reporting,
        requested_parameters: MonitoringParameters {
            client_handle: handle,
            sampling_interval: 0.0,
            filter,
            queue_size: 0,
            discard_oldest: true,
        },
    }
}

#[test]
fn event_item_receives_pushed_events() {
    let mut f = Fx::new(Limits::default(), 100);
    f.src.notifiers.insert(NodeId::from(ObjectId::Server));
    let mut bad = select("Message");
    bad.attribute_id = 999;
    let filter = ExtensionObject::from_message(EventFilter {
        select_clauses: Some(vec![select("EventType"), select("Message"), bad]),
        where_clause: Default::default(),
    });
    let res = f.items(&[event_item(5, filter)], 0);
    assert_eq!(res[0].status_code, StatusCode::Good);
    assert_eq!(res[0].revised_queue_size, 1000);
    let fr = res[0]
        .filter_result
        .inner_as::<EventFilterResult>()
        .unwrap();
    assert_eq!(
        fr.select_clause_results,
        Some(vec![
            StatusCode::Good,
            StatusCode::Good,
            StatusCode::BadAttributeIdInvalid
        ])
    );
    let ty = NodeId::from(ObjectTypeId::AuditEventType);
    let now = f.at(20);
    f.s.push_event(
        &Event {
            ty: ty.clone(),
            source: NodeId::new(2, "dev1"),
            message: "hello".into(),
        },
        now,
    );
    f.s.push_event(
        &Event {
            ty: ty.clone(),
            source: NodeId::new(2, "dev2"),
            message: "again".into(),
        },
        now,
    );
    f.publish(1, &[], 30);
    let out = f.tick(100);
    let msg = &resp(&out[0]).notification_message;
    let ev = msg.notification_data.as_ref().unwrap()[0]
        .inner_as::<EventNotificationList>()
        .expect("event list");
    let events = ev.events.as_ref().unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].client_handle, 5);
    assert_eq!(
        events[0].event_fields,
        Some(vec![
            Variant::from(ty),
            Variant::from("hello"),
            Variant::Empty
        ])
    );
    assert_eq!(
        events[1].event_fields.as_ref().unwrap()[1],
        Variant::from("again")
    );
    // Events of a notifier nobody monitors are not delivered.
    f.s.push_event_where(
        &Event {
            ty: NodeId::from(ObjectTypeId::BaseEventType),
            source: NodeId::new(2, "x"),
            message: "none".into(),
        },
        now,
        &|_| false,
    );
    f.publish(2, &[], 110);
    let out = f.tick(200);
    assert!(out.is_empty());
}

#[test]
fn transfer_with_send_initial_values() {
    let ids = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(100));
    let mut a = SessionSubscriptions::with_id_source(Limits::default(), ids.clone());
    let mut b = SessionSubscriptions::with_id_source(Limits::default(), ids);
    let mut src = Source::default();
    src.set("a", 42i32);
    let t0 = Instant::now();
    let sub = a
        .create_subscription(&sub_req(100.0, 0, 10), t0)
        .unwrap()
        .subscription_id;
    assert_eq!(sub, 100);
    a.create_monitored_items(
        sub,
        TimestampsToReturn::Both,
        &[item_req(
            "a",
            1,
            MonitoringMode::Reporting,
            1,
            ExtensionObject::null(),
        )],
        &src,
        t0,
        dt(),
    )
    .unwrap();
    assert!(a.publish(1, &pub_req(1, &[]), t0, dt()).is_empty());
    let out = a.tick(t0 + ms(100), dt(), &src);
    assert_eq!(resp(&out[0]).notification_message.sequence_number, 1);
    // The old session has a Publish queued; it gets GoodSubscriptionTransferred.
    assert!(a
        .publish(2, &pub_req(2, &[]), t0 + ms(110), dt())
        .is_empty());
    let moved = a.take(sub, dt()).expect("take");
    assert_eq!(moved.available_sequence_numbers(), vec![1]);
    let ready = a.take_ready();
    assert_eq!(ready.len(), 1);
    let r = resp(&ready[0]);
    assert_eq!(r.subscription_id, sub);
    let sc = r.notification_message.notification_data.as_ref().unwrap()[0]
        .inner_as::<StatusChangeNotification>()
        .unwrap();
    assert_eq!(sc.status, StatusCode::GoodSubscriptionTransferred);
    assert!(a.take(sub, dt()).is_none());
    assert!(a.subscription_ids().is_empty());

    b.insert(moved, true, t0 + ms(120)).unwrap();
    assert_eq!(b.subscription_ids(), vec![sub]);
    assert!(b
        .publish(1, &pub_req(1, &[]), t0 + ms(130), dt())
        .is_empty());
    let out = b.tick(t0 + ms(220), dt(), &src);
    let r = resp(&out[0]);
    assert_eq!(r.notification_message.sequence_number, 2);
    assert_eq!(
        values(&r.notification_message),
        vec![(1, Some(Variant::Int32(42)))]
    );
    assert_eq!(r.available_sequence_numbers, Some(vec![1, 2]));
    assert!(b.republish(sub, 1).is_ok());
}

#[test]
fn modify_subscription_and_items() {
    let mut f = Fx::new(Limits::default(), 10);
    f.src.set("a", 1.0f64);
    let res = f.items(
        &[item_req(
            "a",
            1,
            MonitoringMode::Reporting,
            1,
            ExtensionObject::null(),
        )],
        0,
    );
    let id = res[0].monitored_item_id;
    let r =
        f.s.modify_subscription(
            &ModifySubscriptionRequest {
                request_header: RequestHeader::dummy(),
                subscription_id: f.sub,
                requested_publishing_interval: 200.0,
                requested_lifetime_count: 1,
                requested_max_keep_alive_count: 4,
                max_notifications_per_publish: 0,
                priority: 0,
            },
            f.at(0),
        )
        .unwrap();
    assert_eq!(r.revised_publishing_interval, 200.0);
    assert_eq!(r.revised_lifetime_count, 12);
    let now = f.at(0);
    let m =
        f.s.modify_monitored_items(
            f.sub,
            TimestampsToReturn::Both,
            &[
                MonitoredItemModifyRequest {
                    monitored_item_id: id,
                    requested_parameters: MonitoringParameters {
                        client_handle: 77,
                        sampling_interval: 0.0,
                        filter: dcf(DataChangeTrigger::StatusValue, 1, 5.0),
                        queue_size: 5000,
                        discard_oldest: true,
                    },
                },
                MonitoredItemModifyRequest {
                    monitored_item_id: 999,
                    requested_parameters: Default::default(),
                },
            ],
            &f.src,
            now,
            dt(),
        )
        .unwrap();
    assert_eq!(m[0].status_code, StatusCode::Good);
    assert_eq!(m[0].revised_sampling_interval, 50.0);
    assert_eq!(m[0].revised_queue_size, 1000);
    assert_eq!(m[1].status_code, StatusCode::BadMonitoredItemIdInvalid);
    f.src.set("a", 3.0f64); // within the new deadband of 5
    f.publish(1, &[], 10);
    assert!(f.tick(100).is_empty());
    let out = f.tick(200);
    let v = values(&resp(&out[0]).notification_message);
    assert_eq!(v, vec![(77, Some(Variant::Double(1.0)))]);
}

#[test]
fn clear_publish_queue_forgets_queued_requests() {
    let mut subs = SessionSubscriptions::new(Limits::default());
    let t0 = std::time::Instant::now();
    let req = opcua_types::CreateSubscriptionRequest {
        requested_publishing_interval: 1000.0,
        requested_lifetime_count: 30,
        requested_max_keep_alive_count: 10,
        publishing_enabled: true,
        ..Default::default()
    };
    subs.create_subscription(&req, t0).unwrap();
    let publish = opcua_types::PublishRequest::default();
    assert!(subs
        .publish(7, &publish, t0, opcua_types::DateTime::now())
        .is_empty());
    assert_eq!(subs.pending_publish_count(), 1);
    assert_eq!(subs.clear_publish_queue(), vec![(7, 0)]);
    assert_eq!(subs.pending_publish_count(), 0);
}

/// Event items on a node served by a shared upstream item (field nodes):
/// the engine learns (node, filter) of each item that is not Disabled, and
/// an upstream event reaches exactly the items created with that node and
/// filter.
#[test]
fn events_for_a_node_and_filter_reach_only_their_items() {
    let mut f = Fx::new(Limits::default(), 100);
    let pump = node("pump");
    f.src.notifiers.insert(pump.clone());
    let filter = |names: &[&str]| EventFilter {
        select_clauses: Some(names.iter().map(|n| select(n)).collect()),
        where_clause: Default::default(),
    };
    let (f1, f2) = (filter(&["Message"]), filter(&["EventType", "Message"]));
    let on_pump = |handle: u32, filter: &EventFilter| {
        let mut r = event_item(handle, ExtensionObject::from_message(filter.clone()));
        r.item_to_monitor.node_id = pump.clone();
        r
    };
    let mut disabled = on_pump(3, &f1);
    disabled.monitoring_mode = MonitoringMode::Disabled;
    let res = f.items(&[on_pump(1, &f1), on_pump(2, &f2), disabled], 0);
    assert!(res.iter().all(|r| r.status_code.is_good()), "{res:?}");
    let mut wanted = f.s.event_items();
    wanted.sort_by_key(|(_, filter)| filter.select_clauses.as_ref().map(Vec::len));
    assert_eq!(
        wanted,
        vec![(pump.clone(), f1.clone()), (pump.clone(), f2.clone())]
    );

    let ev = Event {
        ty: NodeId::from(ObjectTypeId::BaseEventType),
        source: pump.clone(),
        message: "for f1".into(),
    };
    f.s.push_event_for(&ev, &pump, &f1);
    // Same filter, another node: nobody.
    f.s.push_event_for(&ev, &node("tank"), &f1);
    f.publish(1, &[], 30);
    let out = f.tick(100);
    let msg = &resp(&out[0]).notification_message;
    let list = msg.notification_data.as_ref().unwrap()[0]
        .inner_as::<EventNotificationList>()
        .expect("event list");
    let events = list.events.as_ref().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].client_handle, 1);
    assert_eq!(events[0].event_fields, Some(vec![Variant::from("for f1")]));
}

/// An item created in the middle of a publishing cycle samples on the
/// publishing grid: the change made just before the next publishing
/// instant goes out at that instant, and no tick of its own is needed in
/// between (one deadline per cycle, not two).
#[test]
fn sampling_is_aligned_to_the_publishing_timer() {
    let mut f = Fx::new(Limits::default(), 10);
    f.src.set("a", 1i32);
    let res = f.items(
        &[item_req(
            "a",
            7,
            MonitoringMode::Reporting,
            1,
            ExtensionObject::null(),
        )],
        30,
    );
    assert_eq!(res[0].revised_sampling_interval, 100.0);
    // Sampled at 100 (with the publishing timer), not at 30 + 100.
    assert_eq!(f.s.next_deadline(), Some(f.at(100)));
    assert!(f.publish(1, &[], 40).is_empty());
    f.src.set("a", 2i32);
    let out = f.tick(100);
    assert_eq!(
        values(&resp(&out[0]).notification_message),
        vec![(7, Some(Variant::Int32(2)))],
        "the value sampled in the publishing tick"
    );
    assert_eq!(f.s.next_deadline(), Some(f.at(200)));
}

#[test]
fn first_sample_lies_on_the_publishing_grid() {
    let t = Instant::now();
    let first = |now: u64, sampling: u64, publish: u64| {
        item::first_sample(t + ms(now), ms(sampling), t + ms(publish)) - t
    };
    assert_eq!(first(30, 100, 100), ms(100));
    assert_eq!(first(30, 25, 100), ms(50));
    assert_eq!(first(50, 25, 100), ms(75), "strictly after now");
    assert_eq!(first(100, 100, 100), ms(200));
    assert_eq!(first(130, 100, 100), ms(200), "timer already due");
    assert_eq!(first(30, 250, 100), ms(100));
    assert_eq!(first(0, 0, 100), ms(1), "1 ms floor");
}

/// A data item that starts while its source has no value yet (a field value
/// on its way: `BadWaitingForInitialData`) sends the value as its first
/// notification, not a Bad-quality one before it; when no value comes within
/// INITIAL_VALUE_HOLD the status goes out. Leaving Disabled starts the same
/// way, and the value then goes out even when it equals the one reported
/// before the item was disabled.
#[test]
fn a_first_notification_waits_for_a_value_on_its_way() {
    let waiting = || DataValue {
        status: Some(StatusCode::BadWaitingForInitialData),
        ..Default::default()
    };
    // The data changes of a tick's messages (the first cycle sends a
    // keep-alive, which carries none).
    let data = |out: Vec<(u32, ResponseOrFault)>| -> Vec<(u32, Option<Variant>, StatusCode)> {
        out.iter()
            .flat_map(|r| changes(&resp(r).notification_message))
            .collect()
    };
    let mut f = Fx::new(Limits::default(), 1000);
    f.src.set_dv("a", waiting());
    f.src.set_dv("b", waiting());
    let res = f.items(
        &[
            item_req(
                "a",
                1,
                MonitoringMode::Reporting,
                10,
                ExtensionObject::null(),
            ),
            item_req(
                "b",
                2,
                MonitoringMode::Reporting,
                10,
                ExtensionObject::null(),
            ),
        ],
        0,
    );
    let a = res[0].monitored_item_id;
    for id in 1..=8 {
        f.publish(id, &[], 0);
    }
    // Nothing yet: no Bad notification while the values are on their way.
    assert_eq!(data(f.tick(100)), vec![]);
    assert_eq!(data(f.tick(200)), vec![]);
    // a's value arrives: it is a's first notification.
    f.src.set("a", 5i32);
    assert_eq!(
        data(f.tick(300)),
        vec![(1, Some(Variant::Int32(5)), StatusCode::Good)]
    );
    // b never gets one: its status goes out once the hold is over.
    let hold = u64::try_from(INITIAL_VALUE_HOLD.as_millis()).unwrap();
    let mut t = 400;
    while t < hold {
        assert_eq!(data(f.tick(t)), vec![], "at {t} ms");
        t += 100;
    }
    assert_eq!(
        data(f.tick(hold + 100)),
        vec![(2, None, StatusCode::BadWaitingForInitialData)]
    );

    // a disabled; its source loses the value (the field item is gone) and
    // a is enabled again: it waits, then reports 5 again although 5 is
    // what it reported last.
    let now = f.at(hold + 150);
    f.s.set_monitoring_mode(f.sub, MonitoringMode::Disabled, &[a], &f.src, now, dt())
        .unwrap();
    f.src.set_dv("a", waiting());
    let now = f.at(hold + 160);
    f.s.set_monitoring_mode(f.sub, MonitoringMode::Reporting, &[a], &f.src, now, dt())
        .unwrap();
    assert_eq!(data(f.tick(hold + 200)), vec![]);
    f.src.set("a", 5i32);
    assert_eq!(
        data(f.tick(hold + 300)),
        vec![(1, Some(Variant::Int32(5)), StatusCode::Good)]
    );
}
