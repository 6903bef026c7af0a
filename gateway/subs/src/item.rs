//! Monitored items: parameter revision, filters (Part 4 §7.22), sampling and queueing (§5.12.1.5).

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use opcua_types::{
    AttributeId, DataChangeFilter, DataChangeTrigger, DataValue, DateTime, EventFieldList,
    EventFilter, EventFilterResult, ExtensionObject, MonitoredItemNotification, MonitoringMode,
    MonitoringParameters, NodeId, ReadValueId, SimpleAttributeOperand, StatusCode,
    StatusCodeInfoType, TimestampsToReturn, Variant,
};

use crate::{EventFields, ItemSource, Limits};

/// How long a data item that starts (created, or leaving Disabled) while
/// its source has no value yet (`BadWaitingForInitialData`: a field value
/// still on its way, after the gateway has just asked the field server for
/// it) holds its first notification for that value. A client then sees the
/// value itself first, not a Bad-quality notification and the value a
/// moment later (which an HMI or historian shows as a quality blip, e.g.
/// at every Warm-redundancy failover). When the bound passes without a
/// value, `BadWaitingForInitialData` is reported as before.
pub const INITIAL_VALUE_HOLD: Duration = Duration::from_secs(2);

/// Whether a sample says its source has no value yet.
pub(crate) fn is_waiting(dv: &DataValue) -> bool {
    dv.status == Some(StatusCode::BadWaitingForInitialData)
}

/// Deadband of a data change filter, already resolved to an absolute threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Deadband {
    /// Any change of the value counts.
    None,
    /// A change is reported when |new - last| exceeds this threshold (absolute, or percent
    /// resolved against the EURange at creation/modify time).
    Threshold(f64),
}

/// A parsed `DataChangeFilter` (or the default one when the client sent none).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct DataFilter {
    pub trigger: DataChangeTrigger,
    pub deadband: Deadband,
}

impl Default for DataFilter {
    fn default() -> Self {
        Self {
            trigger: DataChangeTrigger::StatusValue,
            deadband: Deadband::None,
        }
    }
}

/// What a monitored item watches: an attribute value or events of a notifier.
#[derive(Debug, Clone)]
pub(crate) enum ItemKind {
    Data {
        filter: DataFilter,
        /// The last sample that passed the filter (raw, all timestamps), compared against
        /// new samples and re-sent on transfer/ResendData.
        last: Option<DataValue>,
        queue: VecDeque<DataValue>,
    },
    Event {
        /// Select clauses; None for a rejected clause (its field is always Empty).
        select: Vec<Option<SimpleAttributeOperand>>,
        /// The filter as the client asked for it: what a shared upstream
        /// event item (field nodes) is created with and matched by.
        filter: EventFilter,
        queue: VecDeque<Vec<Variant>>,
    },
}

/// One monitored item of a subscription.
#[derive(Debug, Clone)]
pub(crate) struct MonitoredItem {
    pub id: u32,
    pub client_handle: u32,
    pub rvi: ReadValueId,
    pub mode: MonitoringMode,
    /// Revised sampling interval (zero for event items).
    pub sampling: Duration,
    pub sampling_ms: f64,
    pub next_sample: Instant,
    pub queue_size: usize,
    pub discard_oldest: bool,
    pub timestamps: TimestampsToReturn,
    pub kind: ItemKind,
    /// Items this item triggers (SetTriggering links).
    pub triggers: BTreeSet<u32>,
    /// Set when a triggering item reported; the queued values of this (Sampling) item go out
    /// with the next message.
    pub trigger_pending: bool,
    /// This item's bookmark in its source's value history (see
    /// [`ItemSource::samples_monitored`]).
    pub source_cursor: Option<u64>,
    /// Set while the item's first notification waits for its source's
    /// first value, until this instant (see [`INITIAL_VALUE_HOLD`]).
    pub hold_initial_until: Option<Instant>,
    /// Times this item's queue overflowed (subscription diagnostics).
    pub overflows: u32,
}

/// Result of validating and revising MonitoringParameters.
pub(crate) struct Revised {
    pub kind: ItemKind,
    pub sampling: Duration,
    pub sampling_ms: f64,
    pub queue_size: usize,
    pub filter_result: ExtensionObject,
}

pub(crate) fn is_event_item(rvi: &ReadValueId) -> bool {
    rvi.attribute_id == AttributeId::EventNotifier as u32
}

fn is_numeric(v: &Variant) -> bool {
    match v.as_array() {
        Some(a) => a.iter().all(|e| e.as_f64().is_some()),
        None => v.as_f64().is_some(),
    }
}

/// Samples a value; a missing server timestamp is set to `now` (the time the server got it).
pub(crate) fn sample_now(source: &dyn ItemSource, rvi: &ReadValueId, now: DateTime) -> DataValue {
    let mut dv = source.sample(rvi, now);
    if dv.server_timestamp.is_none() {
        dv.server_timestamp = Some(now);
    }
    dv
}

fn duration_ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Revises a sampling interval per §7.21: negative/NaN -> publishing interval, 0 -> fastest.
/// The first sampling instant of an item that took its initial sample at
/// `now`: the earliest instant after `now` on the grid of its subscription's
/// publishing timer (`next_publish` plus or minus whole `sampling`
/// intervals). With a sampling interval that divides the publishing
/// interval, every publishing cycle then starts with a fresh sample taken
/// in the same timer tick, instead of a sample up to one interval old taken
/// in a tick of its own. Called when an item starts sampling (create,
/// modify of the interval, leaving Disabled).
pub(crate) fn first_sample(now: Instant, sampling: Duration, next_publish: Instant) -> Instant {
    let step = sampling.max(Duration::from_millis(1)).as_nanos();
    let at = if next_publish > now {
        let ahead = (next_publish - now).as_nanos();
        // The grid point at or below `now`, then the next one.
        let on_grid = if ahead.is_multiple_of(step) { step } else { 0 };
        next_publish - nanos(ahead - ahead % step) + nanos(on_grid)
    } else {
        let behind = (now - next_publish).as_nanos();
        next_publish + nanos((behind / step + 1) * step)
    };
    debug_assert!(at > now && at <= now + sampling.max(Duration::from_millis(1)));
    at
}

/// `n` nanoseconds as a Duration (saturating far beyond any interval).
fn nanos(n: u128) -> Duration {
    Duration::from_nanos(u64::try_from(n).unwrap_or(u64::MAX))
}

pub(crate) fn revise_sampling(requested: f64, publishing: Duration, limits: &Limits) -> Duration {
    let max = limits
        .max_publishing_interval
        .max(limits.min_sampling_interval);
    let d = if requested.is_nan() || requested < 0.0 {
        publishing
    } else if requested == 0.0 {
        limits.min_sampling_interval
    } else {
        Duration::try_from_secs_f64(requested / 1000.0).unwrap_or(max)
    };
    d.clamp(limits.min_sampling_interval, max)
}

/// Validates the filter and parameters of a new or modified item. `sample` is the current value
/// (used to reject deadbands on non-numeric values).
pub(crate) fn revise_params(
    rvi: &ReadValueId,
    params: &MonitoringParameters,
    publishing: Duration,
    limits: &Limits,
    source: &dyn ItemSource,
    sample: Option<&DataValue>,
) -> Result<Revised, StatusCode> {
    let event = is_event_item(rvi);
    let filter = &params.filter;
    let mut filter_result = ExtensionObject::null();
    let kind = if event {
        if !source.is_event_notifier(&rvi.node_id) {
            return Err(StatusCode::BadFilterNotAllowed);
        }
        if filter.inner_is::<DataChangeFilter>() {
            return Err(StatusCode::BadFilterNotAllowed);
        }
        let Some(ef) = filter.inner_as::<EventFilter>() else {
            if filter.is_null() {
                return Err(StatusCode::BadMonitoredItemFilterInvalid);
            }
            return Err(StatusCode::BadMonitoredItemFilterUnsupported);
        };
        let select = ef.select_clauses.clone().unwrap_or_default();
        if select.is_empty() {
            return Err(StatusCode::BadEventFilterInvalid);
        }
        // The where clause is accepted but NOT evaluated: every event passes.
        let results: Vec<StatusCode> = select
            .iter()
            .map(|op| {
                if AttributeId::from_u32(op.attribute_id).is_err() {
                    StatusCode::BadAttributeIdInvalid
                } else {
                    StatusCode::Good
                }
            })
            .collect();
        let select = select
            .into_iter()
            .zip(results.iter())
            .map(|(op, r)| r.is_good().then_some(op))
            .collect();
        filter_result = ExtensionObject::from_message(EventFilterResult {
            select_clause_results: Some(results),
            select_clause_diagnostic_infos: None,
            where_clause_result: Default::default(),
        });
        ItemKind::Event {
            select,
            filter: ef.clone(),
            queue: VecDeque::new(),
        }
    } else {
        let parsed = if filter.is_null() {
            DataFilter::default()
        } else if let Some(dcf) = filter.inner_as::<DataChangeFilter>() {
            parse_data_change_filter(rvi, dcf, source, sample)?
        } else if filter.inner_is::<EventFilter>() {
            return Err(StatusCode::BadFilterNotAllowed);
        } else {
            // AggregateFilter and anything unknown.
            return Err(StatusCode::BadMonitoredItemFilterUnsupported);
        };
        ItemKind::Data {
            filter: parsed,
            last: None,
            queue: VecDeque::new(),
        }
    };
    let (sampling, sampling_ms) = if event {
        (Duration::ZERO, 0.0)
    } else {
        let d = revise_sampling(params.sampling_interval, publishing, limits);
        (d, duration_ms(d))
    };
    let max_q = limits.max_queue_size.max(1) as usize;
    let queue_size = match params.queue_size as usize {
        0 if event => max_q,
        0 => 1,
        n => n.min(max_q),
    };
    Ok(Revised {
        kind,
        sampling,
        sampling_ms,
        queue_size,
        filter_result,
    })
}

fn parse_data_change_filter(
    rvi: &ReadValueId,
    f: &DataChangeFilter,
    source: &dyn ItemSource,
    sample: Option<&DataValue>,
) -> Result<DataFilter, StatusCode> {
    let deadband = match f.deadband_type {
        0 => Deadband::None,
        1 | 2 => {
            if rvi.attribute_id != AttributeId::Value as u32 {
                return Err(StatusCode::BadFilterNotAllowed);
            }
            if !f.deadband_value.is_finite() || f.deadband_value < 0.0 {
                return Err(StatusCode::BadDeadbandFilterInvalid);
            }
            if let Some(v) = sample.and_then(|s| s.value.as_ref()) {
                if !v.is_empty() && !is_numeric(v) {
                    return Err(StatusCode::BadFilterNotAllowed);
                }
            }
            if f.deadband_type == 1 {
                Deadband::Threshold(f.deadband_value)
            } else {
                if f.deadband_value > 100.0 {
                    return Err(StatusCode::BadDeadbandFilterInvalid);
                }
                let (low, high) = source
                    .eu_range(&rvi.node_id)
                    .ok_or(StatusCode::BadFilterNotAllowed)?;
                if !(high - low).is_finite() {
                    return Err(StatusCode::BadDeadbandFilterInvalid);
                }
                Deadband::Threshold(f.deadband_value / 100.0 * (high - low).abs())
            }
        }
        _ => return Err(StatusCode::BadDeadbandFilterInvalid),
    };
    Ok(DataFilter {
        trigger: f.trigger,
        deadband,
    })
}

fn value_changed(deadband: Deadband, a: &Variant, b: &Variant) -> bool {
    match deadband {
        Deadband::None => a != b,
        Deadband::Threshold(t) => match (a.as_array(), b.as_array()) {
            (Some(x), Some(y)) => {
                x.len() != y.len()
                    || x.iter()
                        .zip(y.iter())
                        .any(|(p, q)| value_changed(deadband, p, q))
            }
            (None, None) => match (a.as_f64(), b.as_f64()) {
                (Some(x), Some(y)) => (x - y).abs() > t,
                _ => a != b,
            },
            _ => true,
        },
    }
}

/// Whether `new` passes the data change filter relative to the last reported `last` (§7.22.2).
pub(crate) fn passes(filter: &DataFilter, last: Option<&DataValue>, new: &DataValue) -> bool {
    let Some(last) = last else { return true };
    let st = |d: &DataValue| d.status.unwrap_or(StatusCode::Good);
    if st(last) != st(new) {
        return true;
    }
    if filter.trigger == DataChangeTrigger::Status {
        return false;
    }
    let value = match (&last.value, &new.value) {
        (None, None) => false,
        (Some(a), Some(b)) => value_changed(filter.deadband, a, b),
        _ => true,
    };
    if value {
        return true;
    }
    filter.trigger == DataChangeTrigger::StatusValueTimestamp
        && (last.source_timestamp != new.source_timestamp
            || last.source_picoseconds != new.source_picoseconds)
}

fn with_overflow(dv: &mut DataValue) {
    let s = dv.status.unwrap_or(StatusCode::Good);
    dv.status = Some(
        s.set_info_type(StatusCodeInfoType::DataValue)
            .set_overflow(true),
    );
}

/// Pushes into a bounded queue per §5.12.1.5; `mark` sets the overflow bit (data values only).
/// Returns whether the queue overflowed (a value was discarded from a full queue of more
/// than one).
fn push_bounded<T>(
    q: &mut VecDeque<T>,
    size: usize,
    discard_oldest: bool,
    v: T,
    mark: Option<fn(&mut T)>,
) -> bool {
    if size <= 1 {
        q.clear();
        q.push_back(v);
        return false;
    }
    while q.len() > size {
        q.pop_front();
    }
    if q.len() < size {
        q.push_back(v);
        return false;
    }
    if discard_oldest {
        q.pop_front();
        if let (Some(m), Some(front)) = (mark, q.front_mut()) {
            m(front);
        }
        q.push_back(v);
    } else {
        q.pop_back();
        q.push_back(v);
        if let (Some(m), Some(back)) = (mark, q.back_mut()) {
            m(back);
        }
    }
    true
}

impl MonitoredItem {
    fn apply_timestamps(&self, mut dv: DataValue) -> DataValue {
        match self.timestamps {
            TimestampsToReturn::Source => {
                dv.server_timestamp = None;
                dv.server_picoseconds = None;
            }
            TimestampsToReturn::Server => {
                dv.source_timestamp = None;
                dv.source_picoseconds = None;
            }
            TimestampsToReturn::Neither | TimestampsToReturn::Invalid => {
                dv.server_timestamp = None;
                dv.server_picoseconds = None;
                dv.source_timestamp = None;
                dv.source_picoseconds = None;
            }
            TimestampsToReturn::Both => {}
        }
        dv
    }

    /// Queues a value unconditionally (initial value, transfer, ResendData) and remembers it.
    pub fn enqueue_value(&mut self, dv: DataValue) {
        let out = self.apply_timestamps(dv.clone());
        let (size, discard) = (self.queue_size, self.discard_oldest);
        if let ItemKind::Data { last, queue, .. } = &mut self.kind {
            *last = Some(dv);
            if push_bounded(queue, size, discard, out, Some(with_overflow)) {
                self.overflows = self.overflows.saturating_add(1);
            }
        }
    }

    /// Starts the item (created, or leaving Disabled) with its initial
    /// sample `dv` taken at `now`: queued at once, unless the source has no
    /// value yet; then the first notification waits for it, up to
    /// [`INITIAL_VALUE_HOLD`], and a value from before the item was
    /// disabled no longer counts as the last one reported.
    pub fn start_with(&mut self, dv: DataValue, now: Instant) {
        if is_waiting(&dv) {
            if let ItemKind::Data { last, .. } = &mut self.kind {
                *last = None;
            }
            self.hold_initial_until = Some(now + INITIAL_VALUE_HOLD);
        } else {
            self.hold_initial_until = None;
            self.enqueue_value(dv);
        }
    }

    /// Offers a new sample; queued only when it passes the filter.
    pub fn offer(&mut self, dv: DataValue) {
        if self.mode == MonitoringMode::Disabled {
            return;
        }
        if let ItemKind::Data { filter, last, .. } = &self.kind {
            if passes(filter, last.as_ref(), &dv) {
                self.enqueue_value(dv);
            }
        }
    }

    /// Samples the source if this data item is due at `now`.
    pub fn sample_if_due(&mut self, now: Instant, now_dt: DateTime, source: &dyn ItemSource) {
        if self.mode == MonitoringMode::Disabled || !matches!(self.kind, ItemKind::Data { .. }) {
            return;
        }
        if self.next_sample > now {
            return;
        }
        let step = self.sampling.max(Duration::from_millis(1));
        // Skip missed samples rather than catching up on them.
        while self.next_sample <= now {
            self.next_sample += step;
        }
        let Some(demand) = self.demand() else {
            return;
        };
        let values = source.samples_monitored(&self.rvi, &demand, &mut self.source_cursor, now_dt);
        for mut dv in values {
            if dv.server_timestamp.is_none() {
                dv.server_timestamp = Some(now_dt);
            }
            if self.hold_initial_until.is_some() {
                if is_waiting(&dv) {
                    continue;
                }
                self.hold_initial_until = None;
            }
            self.offer(dv);
        }
        // Still no value when the hold ends: the client hears why.
        if self.hold_initial_until.is_some_and(|until| now >= until) {
            self.hold_initial_until = None;
            self.enqueue_value(DataValue {
                status: Some(StatusCode::BadWaitingForInitialData),
                server_timestamp: Some(now_dt),
                ..Default::default()
            });
        }
    }

    /// What this item asks of its source; None for event items and disabled items.
    pub fn demand(&self) -> Option<crate::ItemDemand> {
        match (&self.kind, self.mode) {
            (_, MonitoringMode::Disabled) | (ItemKind::Event { .. }, _) => None,
            (ItemKind::Data { filter, .. }, _) => Some(crate::ItemDemand {
                sampling_ms: self.sampling_ms,
                trigger: filter.trigger,
                deadband: match filter.deadband {
                    Deadband::None => None,
                    Deadband::Threshold(t) => Some(t),
                },
            }),
        }
    }

    /// The node and filter of an event item that is not Disabled (None for
    /// data items): what a shared upstream event item must deliver.
    pub fn event_demand(&self) -> Option<(&NodeId, &EventFilter)> {
        match (&self.kind, self.mode) {
            (_, MonitoringMode::Disabled) => None,
            (ItemKind::Event { filter, .. }, _) => Some((&self.rvi.node_id, filter)),
            _ => None,
        }
    }

    /// Whether this is an event item on `node` created with `filter`.
    pub fn is_event_item_for(&self, node: &NodeId, filter: &EventFilter) -> bool {
        matches!(&self.kind, ItemKind::Event { filter: f, .. } if f == filter)
            && self.rvi.node_id == *node
    }

    /// Next instant this item must be sampled (None for event or disabled items).
    pub fn deadline(&self) -> Option<Instant> {
        match (&self.kind, self.mode) {
            (_, MonitoringMode::Disabled) | (ItemKind::Event { .. }, _) => None,
            _ => Some(self.next_sample),
        }
    }

    /// Delivers an event (select clauses evaluated now; where clause ignored).
    pub fn push_event(&mut self, ev: &dyn EventFields) {
        if self.mode == MonitoringMode::Disabled {
            return;
        }
        let (size, discard) = (self.queue_size, self.discard_oldest);
        if let ItemKind::Event { select, queue, .. } = &mut self.kind {
            let fields: Vec<Variant> = select
                .iter()
                .map(|op| op.as_ref().map_or(Variant::Empty, |op| ev.field(op)))
                .collect();
            if push_bounded(queue, size, discard, fields, None) {
                self.overflows = self.overflows.saturating_add(1);
            }
        }
    }

    pub fn queue_len(&self) -> usize {
        match &self.kind {
            ItemKind::Data { queue, .. } => queue.len(),
            ItemKind::Event { queue, .. } => queue.len(),
        }
    }

    pub fn clear_queue(&mut self) {
        match &mut self.kind {
            ItemKind::Data { queue, last, .. } => {
                queue.clear();
                *last = None;
            }
            ItemKind::Event { queue, .. } => queue.clear(),
        }
    }

    /// Whether this item has notifications to go out in the next message.
    pub fn reportable(&self) -> bool {
        self.queue_len() > 0
            && (self.mode == MonitoringMode::Reporting
                || (self.mode == MonitoringMode::Sampling && self.trigger_pending))
    }

    /// Moves up to `max` queued notifications out; returns how many.
    pub fn drain(
        &mut self,
        max: usize,
        data: &mut Vec<MonitoredItemNotification>,
        events: &mut Vec<EventFieldList>,
    ) -> usize {
        let handle = self.client_handle;
        match &mut self.kind {
            ItemKind::Data { queue, .. } => {
                let n = queue.len().min(max);
                data.extend(queue.drain(..n).map(|value| MonitoredItemNotification {
                    client_handle: handle,
                    value,
                }));
                n
            }
            ItemKind::Event { queue, .. } => {
                let n = queue.len().min(max);
                events.extend(queue.drain(..n).map(|f| EventFieldList {
                    client_handle: handle,
                    event_fields: Some(f),
                }));
                n
            }
        }
    }

    /// Shrinks the queue after a queue size change (keeping the newest or oldest values).
    pub fn resize_queue(&mut self, size: usize) {
        self.queue_size = size;
        let discard = self.discard_oldest;
        fn shrink<T>(q: &mut VecDeque<T>, size: usize, discard_oldest: bool) -> bool {
            let over = q.len() > size;
            while q.len() > size {
                if discard_oldest {
                    q.pop_front();
                } else {
                    q.pop_back();
                }
            }
            over
        }
        match &mut self.kind {
            ItemKind::Data { queue, .. } => {
                if shrink(queue, size, discard) && size > 1 {
                    let v = if discard {
                        queue.front_mut()
                    } else {
                        queue.back_mut()
                    };
                    if let Some(v) = v {
                        with_overflow(v);
                    }
                }
            }
            ItemKind::Event { queue, .. } => {
                shrink(queue, size, discard);
            }
        }
    }
}
