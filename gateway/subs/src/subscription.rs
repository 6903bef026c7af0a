//! One subscription: counters of the Part 4 §5.13.1.2 state machine, its monitored items and
//! its retransmission queue.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use opcua_types::{
    DataChangeNotification, DateTime, EventNotificationList, ExtensionObject, MonitoringMode,
    NodeId, NotificationMessage, SubscriptionDiagnosticsDataType,
};

use crate::item::{ItemKind, MonitoredItem};

/// What a subscription counts since it was created, for its diagnostics
/// (Part 5 12.15 SubscriptionDiagnosticsDataType).
#[derive(Debug, Clone, Default)]
pub(crate) struct SubscriptionCounts {
    pub modify: u32,
    pub enable: u32,
    pub disable: u32,
    pub republish_requests: u32,
    pub republished: u32,
    pub transfer_requests: u32,
    pub transferred_same_client: u32,
    pub transferred_alt_client: u32,
    /// Publish requests answered by this subscription (data or keep-alive).
    pub publish_requests: u32,
    pub data_changes: u32,
    pub events: u32,
    /// Times the subscription went late (a Publish was due and none queued).
    pub late: u32,
    /// Messages dropped from the full retransmission queue unacknowledged.
    pub discarded: u32,
    /// Queue overflows of data and of event items deleted since.
    pub removed_data_overflows: u32,
    pub removed_event_overflows: u32,
}

impl SubscriptionCounts {
    /// Keeps the overflow count of a deleted item.
    pub(crate) fn note_removed_item(&mut self, item: &MonitoredItem) {
        match item.kind {
            ItemKind::Data { .. } => {
                self.removed_data_overflows =
                    self.removed_data_overflows.saturating_add(item.overflows)
            }
            ItemKind::Event { .. } => {
                self.removed_event_overflows =
                    self.removed_event_overflows.saturating_add(item.overflows)
            }
        }
    }
}

/// A subscription owned by a session; movable between sessions (TransferSubscriptions) via
/// [`crate::SessionSubscriptions::take`] and [`crate::SessionSubscriptions::insert`].
#[derive(Debug, Clone)]
pub struct Subscription {
    pub(crate) id: u32,
    pub(crate) interval: Duration,
    pub(crate) lifetime_count: u32,
    pub(crate) keep_alive_count: u32,
    pub(crate) max_notifications: u32,
    pub(crate) priority: u8,
    pub(crate) publishing_enabled: bool,
    pub(crate) next_publish: Instant,
    pub(crate) keep_alive_counter: u32,
    pub(crate) lifetime_counter: u32,
    pub(crate) message_sent: bool,
    /// Some(order) while LATE: the next Publish request is answered at once (lowest order first).
    pub(crate) late: Option<u64>,
    pub(crate) next_seq: u32,
    pub(crate) retransmission: VecDeque<NotificationMessage>,
    pub(crate) max_retransmission: usize,
    pub(crate) items: BTreeMap<u32, MonitoredItem>,
    pub(crate) next_item_id: u32,
    pub(crate) counts: SubscriptionCounts,
}

impl Subscription {
    /// Server-wide unique id of this subscription.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Revised publishing interval.
    pub fn publishing_interval(&self) -> Duration {
        self.interval
    }

    /// Revised lifetime count.
    pub fn lifetime_count(&self) -> u32 {
        self.lifetime_count
    }

    /// Revised max keep-alive count.
    pub fn max_keep_alive_count(&self) -> u32 {
        self.keep_alive_count
    }

    /// Revised max notifications per publish.
    pub fn max_notifications_per_publish(&self) -> u32 {
        self.max_notifications
    }

    /// Priority given by the client.
    pub fn priority(&self) -> u8 {
        self.priority
    }

    /// Whether publishing is enabled.
    pub fn publishing_enabled(&self) -> bool {
        self.publishing_enabled
    }

    /// Sequence numbers held for Republish (for PublishResponse / TransferResult).
    pub fn available_sequence_numbers(&self) -> Vec<u32> {
        self.retransmission
            .iter()
            .map(|m| m.sequence_number)
            .collect()
    }

    /// Number of monitored items.
    pub fn monitored_item_count(&self) -> usize {
        self.items.len()
    }

    /// Called by TransferSubscriptions for this subscription: a request
    /// naming it, and whether it then moved to a session of the same client
    /// application (`Some(true)`), another (`Some(false)`) or stayed
    /// (`None`: refused, or already the caller's).
    pub fn record_transfer(&mut self, moved_to_same_client: Option<bool>) {
        self.counts.transfer_requests += 1;
        match moved_to_same_client {
            Some(true) => self.counts.transferred_same_client += 1,
            Some(false) => self.counts.transferred_alt_client += 1,
            None => {}
        }
    }

    /// This subscription's SubscriptionDiagnosticsDataType (Part 5 12.15),
    /// for the session `session_id`.
    pub fn diagnostics(&self, session_id: NodeId) -> SubscriptionDiagnosticsDataType {
        let c = &self.counts;
        let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        let (mut data_overflows, mut event_overflows) =
            (c.removed_data_overflows, c.removed_event_overflows);
        for item in self.items.values() {
            match item.kind {
                ItemKind::Data { .. } => {
                    data_overflows = data_overflows.saturating_add(item.overflows)
                }
                ItemKind::Event { .. } => {
                    event_overflows = event_overflows.saturating_add(item.overflows)
                }
            }
        }
        SubscriptionDiagnosticsDataType {
            session_id,
            subscription_id: self.id,
            priority: self.priority,
            publishing_interval: self.interval.as_secs_f64() * 1000.0,
            max_keep_alive_count: self.keep_alive_count,
            max_lifetime_count: self.lifetime_count,
            max_notifications_per_publish: self.max_notifications,
            publishing_enabled: self.publishing_enabled,
            modify_count: c.modify,
            enable_count: c.enable,
            disable_count: c.disable,
            republish_request_count: c.republish_requests,
            // Each Republish asks for one message.
            republish_message_request_count: c.republish_requests,
            republish_message_count: c.republished,
            transfer_request_count: c.transfer_requests,
            transferred_to_alt_client_count: c.transferred_alt_client,
            transferred_to_same_client_count: c.transferred_same_client,
            publish_request_count: c.publish_requests,
            data_change_notifications_count: c.data_changes,
            event_notifications_count: c.events,
            notifications_count: c.data_changes.saturating_add(c.events),
            late_publish_request_count: c.late,
            current_keep_alive_count: self.keep_alive_counter,
            current_lifetime_count: self.lifetime_counter,
            unacknowledged_message_count: n(self.retransmission.len()),
            discarded_message_count: c.discarded,
            monitored_item_count: n(self.items.len()),
            disabled_monitored_item_count: n(self
                .items
                .values()
                .filter(|i| i.mode == MonitoringMode::Disabled)
                .count()),
            monitoring_queue_overflow_count: data_overflows,
            next_sequence_number: self.next_seq,
            event_queue_overflow_count: event_overflows,
        }
    }

    pub(crate) fn take_seq(&mut self) -> u32 {
        let s = self.next_seq;
        self.next_seq = if s == u32::MAX { 1 } else { s + 1 };
        s
    }

    pub(crate) fn reset_lifetime(&mut self) {
        self.lifetime_counter = self.lifetime_count;
    }

    /// NotificationsAvailable of the state table (only meaningful when publishing is enabled).
    pub(crate) fn has_notifications(&self) -> bool {
        self.items.values().any(|i| i.reportable())
    }

    pub(crate) fn wants_data(&self) -> bool {
        self.publishing_enabled && self.has_notifications()
    }

    /// A keep-alive: carries the next sequence number without consuming it.
    pub(crate) fn keep_alive(&mut self, now_dt: DateTime) -> NotificationMessage {
        self.counts.publish_requests = self.counts.publish_requests.saturating_add(1);
        self.message_sent = true;
        self.keep_alive_counter = self.keep_alive_count;
        NotificationMessage {
            sequence_number: self.next_seq,
            publish_time: now_dt,
            notification_data: None,
        }
    }

    /// Builds the next data message (at most `max_notifications` notifications), stores it for
    /// Republish and returns it with the MoreNotifications flag.
    pub(crate) fn data_message(&mut self, now_dt: DateTime) -> (NotificationMessage, bool) {
        let max = self.max_notifications.max(1) as usize;
        let mut data = Vec::new();
        let mut events = Vec::new();
        let mut count = 0usize;
        let mut fired: Vec<u32> = Vec::new();
        for item in self.items.values_mut() {
            if count >= max {
                break;
            }
            if item.mode == MonitoringMode::Reporting && item.queue_len() > 0 {
                count += item.drain(max - count, &mut data, &mut events);
                fired.extend(item.triggers.iter().copied());
            }
        }
        for id in fired {
            if let Some(t) = self.items.get_mut(&id) {
                if t.mode == MonitoringMode::Sampling {
                    t.trigger_pending = true;
                }
            }
        }
        for item in self.items.values_mut() {
            if !item.trigger_pending {
                continue;
            }
            if item.mode == MonitoringMode::Sampling && count < max {
                count += item.drain(max - count, &mut data, &mut events);
            }
            if item.queue_len() == 0 || item.mode != MonitoringMode::Sampling {
                item.trigger_pending = false;
            }
        }
        let c = &mut self.counts;
        c.publish_requests = c.publish_requests.saturating_add(1);
        c.data_changes = c.data_changes.saturating_add(data.len() as u32);
        c.events = c.events.saturating_add(events.len() as u32);
        let mut payload = Vec::new();
        if !data.is_empty() {
            payload.push(ExtensionObject::from_message(DataChangeNotification {
                monitored_items: Some(data),
                diagnostic_infos: None,
            }));
        }
        if !events.is_empty() {
            payload.push(ExtensionObject::from_message(EventNotificationList {
                events: Some(events),
            }));
        }
        let msg = NotificationMessage {
            sequence_number: self.take_seq(),
            publish_time: now_dt,
            notification_data: Some(payload),
        };
        self.retransmission.push_back(msg.clone());
        while self.retransmission.len() > self.max_retransmission.max(1) {
            self.retransmission.pop_front();
            self.counts.discarded = self.counts.discarded.saturating_add(1);
        }
        self.message_sent = true;
        self.keep_alive_counter = self.keep_alive_count;
        self.reset_lifetime();
        (msg, self.wants_data())
    }

    /// Re-queues the last value of every enabled data item (SendInitialValues / ResendData).
    pub(crate) fn requeue_last_values(&mut self) {
        for item in self.items.values_mut() {
            if item.mode == MonitoringMode::Disabled {
                continue;
            }
            let last = match &item.kind {
                ItemKind::Data { last, .. } => last.clone(),
                ItemKind::Event { .. } => None,
            };
            if let Some(dv) = last {
                item.enqueue_value(dv);
            }
        }
    }

    /// Earliest timer of this subscription (publishing or sampling).
    pub(crate) fn deadline(&self) -> Instant {
        self.items
            .values()
            .filter_map(|i| i.deadline())
            .fold(self.next_publish, Instant::min)
    }
}
