//! Shared monitored items: one southbound monitored item per distinct
//! (node, attribute, index range, sampling interval class, filter), whatever
//! the number of northbound monitored items that need it.
//!
//! Plain data. The gateway computes its *demand* (how many northbound items
//! need each key) after item services and once a second, and hands it to
//! [`ItemTable::set_demand`]: keys nobody needs any more are dropped (their
//! southbound item is deleted by the connection), new keys get an id (the
//! southbound client handle). Southbound notifications land in
//! [`ItemTable::offer`]; northbound items take every value offered since
//! their last sample with [`ItemTable::values_since`] (the last
//! [`VALUE_HISTORY`] values of each item are kept), so a burst of values —
//! e.g. the notifications a field link recovers with Republish after a
//! network blip — reaches them in order and complete. In hot-merge redundancy every server reports, and
//! `offer` suppresses the duplicates.

use std::collections::HashMap;

use opcua_types::{DataChangeTrigger, DataValue, DateTime, NodeId, StatusCode};

/// The sampling interval classes (ms) southbound items are created with. A
/// northbound sampling interval is rounded *down* to a class, so the shared
/// item samples at least as fast as every northbound item it serves.
pub const SAMPLING_CLASSES_MS: [u32; 10] =
    [50, 100, 250, 500, 1000, 2000, 5000, 10_000, 30_000, 60_000];

/// The sampling class of a revised northbound sampling interval.
pub fn sampling_class(ms: f64) -> u32 {
    let mut class = SAMPLING_CLASSES_MS[0];
    for c in SAMPLING_CLASSES_MS {
        if f64::from(c) <= ms {
            class = c;
        }
    }
    class
}

/// What makes two northbound items share one southbound item. The node id is
/// the gateway's (remapped) id, so it stays valid across failovers between
/// servers whose namespace tables differ.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ItemKey {
    /// Node in the gateway's namespace numbering.
    pub node: NodeId,
    /// Attribute id.
    pub attribute: u32,
    /// Index range ("" = whole value).
    pub index_range: String,
    /// Sampling class in ms, see [`sampling_class`].
    pub class_ms: u32,
    /// Data change trigger of the filter.
    pub trigger: u32,
    /// Absolute deadband as `f64::to_bits`, 0 = no deadband.
    pub deadband_bits: u64,
}

impl ItemKey {
    /// The key of a northbound data item.
    pub fn new(
        node: NodeId,
        attribute: u32,
        index_range: String,
        sampling_ms: f64,
        trigger: DataChangeTrigger,
        deadband: Option<f64>,
    ) -> ItemKey {
        ItemKey {
            node,
            attribute,
            index_range,
            class_ms: sampling_class(sampling_ms),
            trigger: trigger as u32,
            deadband_bits: deadband.filter(|d| *d > 0.0).map_or(0, f64::to_bits),
        }
    }

    /// The absolute deadband, if any.
    pub fn deadband(&self) -> Option<f64> {
        (self.deadband_bits != 0).then(|| f64::from_bits(self.deadband_bits))
    }
}

/// Values kept per shared item for northbound items that have not sampled
/// them yet (a burst after a reconnect; about 6 s of a 100 ms item).
pub const VALUE_HISTORY: usize = 64;

#[derive(Debug, Clone)]
struct Entry {
    id: u32,
    refs: usize,
    value: Option<DataValue>,
    /// Number of the last value offered (0: none yet).
    seq: u64,
    /// The last [`VALUE_HISTORY`] values with their numbers, oldest first.
    history: std::collections::VecDeque<(u64, DataValue)>,
}

impl Entry {
    fn push(&mut self, dv: DataValue) {
        self.seq += 1;
        if self.history.len() >= VALUE_HISTORY {
            self.history.pop_front();
        }
        self.history.push_back((self.seq, dv.clone()));
        self.value = Some(dv);
    }
}

/// The next non-zero id after `*last` that `taken` does not hold (wrapping
/// at `u32::MAX`); stored back in `*last`. The client handles of shared
/// data and event items come from here.
pub(crate) fn next_free_id(last: &mut u32, taken: impl Fn(u32) -> bool) -> u32 {
    *last = last.wrapping_add(1).max(1);
    while taken(*last) {
        *last = last.wrapping_add(1).max(1);
    }
    *last
}

/// The table of shared items of one field connection.
#[derive(Debug, Default)]
pub struct ItemTable {
    entries: HashMap<ItemKey, Entry>,
    by_id: HashMap<u32, ItemKey>,
    next_id: u32,
    duplicates_suppressed: u64,
    revision: u64,
}

impl ItemTable {
    /// Replaces the reference counts with `demand` (key → number of
    /// northbound items). Keys absent from `demand` are removed; new keys
    /// get a fresh id. Returns true when the set of keys changed (the
    /// connection must then create or delete southbound items).
    pub fn set_demand(&mut self, demand: HashMap<ItemKey, usize>) -> bool {
        let before = self.entries.len();
        let mut changed = false;
        self.entries.retain(|k, e| {
            let keep = demand.get(k).is_some_and(|n| *n > 0);
            if !keep {
                self.by_id.remove(&e.id);
                changed = true;
            }
            keep
        });
        for (key, refs) in demand {
            if refs == 0 {
                continue;
            }
            match self.entries.get_mut(&key) {
                Some(e) => e.refs = refs,
                None => {
                    let by_id = &self.by_id;
                    let id = next_free_id(&mut self.next_id, |id| by_id.contains_key(&id));
                    self.by_id.insert(id, key.clone());
                    self.entries.insert(
                        key,
                        Entry {
                            id,
                            refs,
                            value: None,
                            seq: 0,
                            history: Default::default(),
                        },
                    );
                    changed = true;
                }
            }
        }
        if changed || before != self.entries.len() {
            self.revision += 1;
        }
        changed
    }

    /// Takes over the items of `old`, the table of the connection this one
    /// replaces (a field connection changed while running): same keys,
    /// reference counts, last values and value numbers, so northbound items
    /// keep their value and their place in the value history until the new
    /// link delivers, instead of seeing `BadWaitingForInitialData`. Called
    /// once, right after the new connection starts, before any demand.
    pub fn carry_from(&mut self, old: &ItemTable) {
        self.entries = old.entries.clone();
        self.by_id = old.by_id.clone();
        self.next_id = old.next_id;
        self.revision += 1;
    }

    /// Incremented each time the key set changes.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Number of shared (southbound) items.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no item is needed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Number of northbound items served by `key` (0 if none).
    pub fn refs(&self, key: &ItemKey) -> usize {
        self.entries.get(key).map_or(0, |e| e.refs)
    }

    /// (id, key) of every shared item, for creating southbound items.
    pub fn keys(&self) -> Vec<(u32, ItemKey)> {
        self.entries
            .iter()
            .map(|(k, e)| (e.id, k.clone()))
            .collect()
    }

    /// The latest value of a key; `BadWaitingForInitialData` until the
    /// first southbound notification, `BadNodeIdUnknown`-style statuses as
    /// reported by the field server.
    pub fn value(&self, key: &ItemKey) -> DataValue {
        match self.entries.get(key).and_then(|e| e.value.clone()) {
            Some(v) => v,
            None => DataValue {
                status: Some(StatusCode::BadWaitingForInitialData),
                ..Default::default()
            },
        }
    }

    /// The values of a key offered since `cursor` (the number of the last
    /// value the caller took; `None` on its first call, which gets the
    /// latest value only, or `BadWaitingForInitialData`), oldest first;
    /// `cursor` moves to the newest. Empty when nothing new came. Called by
    /// a northbound monitored item at each of its sampling instants.
    pub fn values_since(&self, key: &ItemKey, cursor: &mut Option<u64>) -> Vec<DataValue> {
        let Some(e) = self.entries.get(key) else {
            return vec![self.value(key)];
        };
        let seen = cursor.replace(e.seq);
        match seen {
            None => vec![self.value(key)],
            // The item was re-created (its numbers started over): its latest.
            Some(n) if n > e.seq => vec![self.value(key)],
            Some(n) => e
                .history
                .iter()
                .filter(|(seq, _)| *seq > n)
                .map(|(_, dv)| dv.clone())
                .collect(),
        }
    }

    /// The freshest value any shared item holds for this node, attribute and
    /// index range, whatever its sampling class or filter: the initial value
    /// of a new northbound item that joins an item already being served.
    pub fn latest(&self, node: &NodeId, attribute: u32, index_range: &str) -> Option<DataValue> {
        self.entries
            .iter()
            .filter(|(k, _)| {
                &k.node == node && k.attribute == attribute && k.index_range == index_range
            })
            .filter_map(|(_, e)| e.value.clone())
            .max_by_key(|v| v.server_timestamp.map(|t| t.ticks()))
    }

    /// A southbound notification (already remapped) for item `id`. With
    /// `merge` (hot-merge redundancy, several servers report the same item)
    /// a value whose source timestamp is not newer than the last accepted
    /// one is a duplicate and is dropped. Returns whether it was accepted.
    pub fn offer(&mut self, id: u32, dv: DataValue, merge: bool) -> bool {
        let Some(key) = self.by_id.get(&id) else {
            return false;
        };
        let Some(entry) = self.entries.get_mut(key) else {
            return false;
        };
        if merge {
            if let (Some(last), Some(new_ts)) = (
                entry.value.as_ref().and_then(|v| v.source_timestamp),
                dv.source_timestamp,
            ) {
                let last_good = entry
                    .value
                    .as_ref()
                    .and_then(|v| v.status)
                    .is_none_or(|s| s.is_good());
                if new_ts <= last && last_good {
                    self.duplicates_suppressed += 1;
                    return false;
                }
            }
        }
        entry.push(dv);
        true
    }

    /// Marks every value with `status` (keeping the last value), called when
    /// the source is gone (no server reachable): northbound subscribers see
    /// the status change, then good values again after the reconnect.
    pub fn mark_all(&mut self, status: StatusCode, now: DateTime) {
        for e in self.entries.values_mut() {
            let mut v = e.value.clone().unwrap_or_default();
            v.status = Some(status);
            v.server_timestamp = Some(now);
            e.push(v);
        }
    }

    /// Marks the values of the items `ids` with `status` (keeping the last
    /// value) as a value of their own: the gap marker of notifications a
    /// link lost for good. Unknown ids are skipped.
    pub fn mark(&mut self, ids: impl IntoIterator<Item = u32>, status: StatusCode, now: DateTime) {
        for id in ids {
            let Some(e) = self.by_id.get(&id).and_then(|k| self.entries.get_mut(k)) else {
                continue;
            };
            let mut v = e.value.clone().unwrap_or_default();
            v.status = Some(status);
            v.server_timestamp = Some(now);
            e.push(v);
        }
    }

    /// Duplicates dropped by [`ItemTable::offer`] in merge mode.
    pub fn duplicates_suppressed(&self) -> u64 {
        self.duplicates_suppressed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opcua_types::Variant;

    fn key(n: u32, ms: f64) -> ItemKey {
        ItemKey::new(
            NodeId::new(3, n),
            13,
            String::new(),
            ms,
            DataChangeTrigger::StatusValue,
            None,
        )
    }

    fn dv(v: i32, ts_ms: i64) -> DataValue {
        DataValue {
            value: Some(Variant::Int32(v)),
            status: Some(StatusCode::Good),
            source_timestamp: Some(DateTime::from(ts_ms * 10_000)),
            ..Default::default()
        }
    }

    #[test]
    fn a_carried_table_keeps_values_and_numbers_for_the_items_cursors() {
        let mut old = ItemTable::default();
        let mut demand = HashMap::new();
        demand.insert(key(1, 100.0), 2);
        old.set_demand(demand.clone());
        let id = old.keys()[0].0;
        assert!(old.offer(id, dv(1, 1), false));
        assert!(old.offer(id, dv(2, 2), false));
        let mut cursor = None;
        assert_eq!(old.values_since(&key(1, 100.0), &mut cursor).len(), 1);
        assert!(old.offer(id, dv(3, 3), false));

        let mut new = ItemTable::default();
        new.carry_from(&old);
        // The same demand changes nothing: the items are there already.
        assert!(!new.set_demand(demand));
        assert_eq!(new.refs(&key(1, 100.0)), 2);
        // The item's cursor goes on where it was: value 3 is still due.
        let got = new.values_since(&key(1, 100.0), &mut cursor);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].value, Some(Variant::Int32(3)));
        // The new link's first value comes next, nothing in between.
        assert!(new.offer(id, dv(4, 4), false));
        let got = new.values_since(&key(1, 100.0), &mut cursor);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].value, Some(Variant::Int32(4)));
    }

    #[test]
    fn classes_round_down() {
        assert_eq!(sampling_class(0.0), 50);
        assert_eq!(sampling_class(50.0), 50);
        assert_eq!(sampling_class(99.0), 50);
        assert_eq!(sampling_class(100.0), 100);
        assert_eq!(sampling_class(999.0), 500);
        assert_eq!(sampling_class(1000.0), 1000);
        assert_eq!(sampling_class(1e9), 60_000);
        // 800 ms and 900 ms share one item
        assert_eq!(key(1, 800.0), key(1, 900.0));
        assert_ne!(key(1, 800.0), key(1, 1000.0));
    }

    #[test]
    fn one_entry_for_many_refs_and_removed_with_the_last() {
        let mut t = ItemTable::default();
        assert!(t.set_demand(HashMap::from([(key(1, 1000.0), 10)])));
        assert_eq!(t.len(), 1);
        assert_eq!(t.refs(&key(1, 1000.0)), 10);
        // fewer refs: same key set, no change
        assert!(!t.set_demand(HashMap::from([(key(1, 1000.0), 3)])));
        assert_eq!(t.refs(&key(1, 1000.0)), 3);
        let id = t.keys()[0].0;
        // last one gone
        assert!(t.set_demand(HashMap::new()));
        assert!(t.is_empty());
        assert!(!t.offer(id, dv(1, 1), false));
    }

    #[test]
    fn value_waits_then_follows_offers() {
        let mut t = ItemTable::default();
        t.set_demand(HashMap::from([(key(1, 1000.0), 1)]));
        let k = key(1, 1000.0);
        assert_eq!(
            t.value(&k).status,
            Some(StatusCode::BadWaitingForInitialData)
        );
        let id = t.keys()[0].0;
        assert!(t.offer(id, dv(7, 1), false));
        assert_eq!(t.value(&k).value, Some(Variant::Int32(7)));
        t.mark_all(StatusCode::BadNoCommunication, DateTime::now());
        let v = t.value(&k);
        assert_eq!(v.status, Some(StatusCode::BadNoCommunication));
        assert_eq!(v.value, Some(Variant::Int32(7)), "last value kept");
        assert!(t.offer(id, dv(8, 2), false));
        assert_eq!(t.value(&k).status, Some(StatusCode::Good));
    }

    #[test]
    fn a_sampler_gets_every_value_since_its_last_sample_in_order() {
        let mut t = ItemTable::default();
        t.set_demand(HashMap::from([(key(1, 100.0), 2)]));
        let k = key(1, 100.0);
        let id = t.keys()[0].0;
        let ints = |v: Vec<DataValue>| -> Vec<Option<Variant>> {
            v.into_iter().map(|d| d.value).collect()
        };
        let (mut a, mut b) = (None, None);
        // First sample: waiting, then nothing new.
        assert_eq!(
            t.values_since(&k, &mut a)[0].status,
            Some(StatusCode::BadWaitingForInitialData)
        );
        assert!(t.values_since(&k, &mut a).is_empty());
        for v in 1..=5 {
            t.offer(id, dv(v, i64::from(v)), false);
        }
        assert_eq!(
            ints(t.values_since(&k, &mut a)),
            (1..=5).map(|v| Some(Variant::Int32(v))).collect::<Vec<_>>()
        );
        // A sampler joining late starts with the latest value only.
        assert_eq!(
            ints(t.values_since(&k, &mut b)),
            vec![Some(Variant::Int32(5))]
        );
        // A gap marker is a value of its own, between the values around it.
        t.mark_all(StatusCode::UncertainLastUsableValue, DateTime::now());
        t.offer(id, dv(6, 6), false);
        let got = t.values_since(&k, &mut a);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].status, Some(StatusCode::UncertainLastUsableValue));
        assert_eq!(got[0].value, Some(Variant::Int32(5)));
        assert_eq!(got[1].value, Some(Variant::Int32(6)));
        // Beyond the history, the oldest values are gone.
        for v in 0..(VALUE_HISTORY as i32 + 10) {
            t.offer(id, dv(100 + v, 100 + i64::from(v)), false);
        }
        let got = t.values_since(&k, &mut b);
        assert_eq!(got.len(), VALUE_HISTORY);
        assert_eq!(got[0].value, Some(Variant::Int32(110)));
    }

    #[test]
    fn latest_finds_a_value_of_another_class() {
        let mut t = ItemTable::default();
        t.set_demand(HashMap::from([(key(1, 1000.0), 1), (key(1, 100.0), 1)]));
        assert!(t.latest(&NodeId::new(3, 1u32), 13, "").is_none());
        let id = t
            .keys()
            .into_iter()
            .find(|(_, k)| k.class_ms == 100)
            .unwrap()
            .0;
        t.offer(id, dv(5, 1), false);
        let v = t.latest(&NodeId::new(3, 1u32), 13, "").unwrap();
        assert_eq!(v.value, Some(Variant::Int32(5)));
        assert!(t.latest(&NodeId::new(3, 2u32), 13, "").is_none());
    }

    #[test]
    fn merge_suppresses_duplicates_but_not_newer_or_recovery() {
        let mut t = ItemTable::default();
        t.set_demand(HashMap::from([(key(1, 1000.0), 1)]));
        let id = t.keys()[0].0;
        assert!(t.offer(id, dv(1, 10), true));
        assert!(!t.offer(id, dv(1, 10), true), "same sample from the peer");
        assert!(
            !t.offer(id, dv(0, 9), true),
            "older sample from a lagging peer"
        );
        assert!(t.offer(id, dv(2, 11), true));
        assert_eq!(t.duplicates_suppressed(), 2);
        // without merge nothing is suppressed
        assert!(t.offer(id, dv(2, 11), false));
        // after the source was gone, the same timestamp is accepted again
        t.mark_all(StatusCode::BadNoCommunication, DateTime::now());
        assert!(t.offer(id, dv(2, 11), true));
    }
}
