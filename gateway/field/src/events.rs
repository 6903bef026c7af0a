//! Shared event items: one southbound event monitored item per distinct
//! (notifier node, event filter), whatever the number of northbound event
//! items that need it, and the events they deliver on their way north.
//!
//! Plain data, in step with [`crate::items`]: the gateway hands the event
//! items its sessions have to [`EventTable::set_demand`] after item services
//! and once a second; the connection creates and deletes southbound event
//! items to match (filter remapped to the field server's namespaces, where
//! clause evaluated by the field server). Southbound events land in
//! [`EventTable::offer`] with their fields already remapped to the gateway's
//! namespaces; the gateway takes them with [`EventTable::take`] and hands
//! each to the northbound items created with the same node and filter.
//!
//! An event is recognised by its EventId (when the filter selects it): in
//! hot-merge redundancy every server reports the same event, and in hot
//! redundancy the new active server reports the events it queued while it
//! was a backup; both are dropped when the EventId was already delivered.

use std::collections::{HashMap, HashSet, VecDeque};

use opcua_types::{
    AttributeId, ByteString, EventFilter, NodeId, QualifiedName, SimpleAttributeOperand, Variant,
};

use crate::items::next_free_id;

/// Most events waiting for the gateway to take them, over all keys; the
/// oldest are dropped beyond it (and counted).
pub const OUTBOX_MAX: usize = 10_000;

/// How many recent EventIds per key are remembered for duplicate
/// suppression.
pub const RECENT_EVENT_IDS: usize = 1_000;

/// What makes two northbound event items share one southbound event item:
/// the notifier node (gateway numbering) and the whole event filter (select
/// and where clauses) as the client gave it.
#[derive(Debug, Clone)]
pub struct EventKey {
    /// Notifier node in the gateway's namespace numbering.
    pub node: NodeId,
    /// The filter, in the gateway's namespace numbering.
    pub filter: EventFilter,
    /// Identity of (node, filter) for hashing; the filter type has no
    /// `Hash`, and its debug text is deterministic for equal filters.
    text: String,
}

impl EventKey {
    /// The key of a northbound event item.
    pub fn new(node: NodeId, filter: EventFilter) -> EventKey {
        let text = format!("{node}|{filter:?}");
        EventKey { node, filter, text }
    }

    /// Index of the select clause that selects the EventId (BaseEventType
    /// property `0:EventId`, Value attribute), if any.
    fn event_id_at(&self) -> Option<usize> {
        let event_id = [QualifiedName::new(0, "EventId")];
        self.filter.select_clauses.as_ref()?.iter().position(|c| {
            c.attribute_id == AttributeId::Value as u32
                && c.browse_path.as_deref() == Some(&event_id[..])
        })
    }
}

impl PartialEq for EventKey {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for EventKey {}

impl std::hash::Hash for EventKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

#[derive(Debug)]
struct Entry {
    key: EventKey,
    event_id_at: Option<usize>,
    recent: VecDeque<ByteString>,
    seen: HashSet<ByteString>,
}

/// The shared event items of one field connection and their undelivered
/// events.
#[derive(Debug, Default)]
pub struct EventTable {
    ids: HashMap<EventKey, u32>,
    entries: HashMap<u32, Entry>,
    next_id: u32,
    outbox: VecDeque<(u32, Vec<Variant>)>,
    dropped: u64,
    duplicates_suppressed: u64,
    revision: u64,
}

impl EventTable {
    /// Replaces the set of keys northbound items need. Keys no longer
    /// needed are removed (with their undelivered events); new keys get a
    /// fresh id (the southbound client handle). Returns true when the set
    /// changed (the connection must then create or delete southbound items).
    pub fn set_demand(&mut self, keys: impl IntoIterator<Item = EventKey>) -> bool {
        let wanted: HashSet<EventKey> = keys.into_iter().collect();
        let mut changed = false;
        let entries = &mut self.entries;
        self.ids.retain(|k, id| {
            let keep = wanted.contains(k);
            if !keep {
                entries.remove(id);
                changed = true;
            }
            keep
        });
        for key in wanted {
            if self.ids.contains_key(&key) {
                continue;
            }
            let entries = &self.entries;
            let id = next_free_id(&mut self.next_id, |id| entries.contains_key(&id));
            self.entries.insert(
                id,
                Entry {
                    event_id_at: key.event_id_at(),
                    key: key.clone(),
                    recent: VecDeque::new(),
                    seen: HashSet::new(),
                },
            );
            self.ids.insert(key, id);
            changed = true;
        }
        if changed {
            let entries = &self.entries;
            self.outbox.retain(|(id, _)| entries.contains_key(id));
            self.revision += 1;
        }
        changed
    }

    /// Counts changes of the key set; the connection reconciles its
    /// southbound items when it moves.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The select clauses of the key with id `id` (empty for an unknown
    /// id): the order of the fields its events carry.
    pub fn select_of(&self, id: u32) -> &[SimpleAttributeOperand] {
        self.entries
            .get(&id)
            .and_then(|e| e.key.filter.select_clauses.as_deref())
            .unwrap_or(&[])
    }

    /// The wanted keys with their ids.
    pub fn keys(&self) -> Vec<(u32, EventKey)> {
        self.entries
            .iter()
            .map(|(id, e)| (*id, e.key.clone()))
            .collect()
    }

    /// Number of keys (southbound event items wanted).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no event item is wanted.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// An event from the southbound item `id` (fields in the order of the
    /// key's select clauses, already remapped). Returns false when it is
    /// not kept: an unknown id (the item was just deleted) or an EventId
    /// already delivered for this key.
    pub fn offer(&mut self, id: u32, fields: Vec<Variant>) -> bool {
        let Some(e) = self.entries.get_mut(&id) else {
            return false;
        };
        let event_id = e.event_id_at.and_then(|i| match fields.get(i) {
            Some(Variant::ByteString(b)) if !b.is_null_or_empty() => Some(b.clone()),
            _ => None,
        });
        if let Some(event_id) = event_id {
            if !e.seen.insert(event_id.clone()) {
                self.duplicates_suppressed += 1;
                return false;
            }
            e.recent.push_back(event_id);
            if e.recent.len() > RECENT_EVENT_IDS {
                if let Some(old) = e.recent.pop_front() {
                    e.seen.remove(&old);
                }
            }
        }
        if self.outbox.len() >= OUTBOX_MAX {
            self.outbox.pop_front();
            self.dropped += 1;
        }
        self.outbox.push_back((id, fields));
        true
    }

    /// The events received since the last call, oldest first, with the key
    /// of the items they are for.
    pub fn take(&mut self) -> Vec<(EventKey, Vec<Variant>)> {
        let entries = &self.entries;
        self.outbox
            .drain(..)
            .filter_map(|(id, fields)| entries.get(&id).map(|e| (e.key.clone(), fields)))
            .collect()
    }

    /// Events dropped because the gateway did not take them in time.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Events dropped as already delivered (same EventId).
    pub fn duplicates_suppressed(&self) -> u64 {
        self.duplicates_suppressed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opcua_types::ContentFilter;

    fn select(names: &[&str]) -> EventFilter {
        EventFilter {
            select_clauses: Some(
                names
                    .iter()
                    .map(|n| SimpleAttributeOperand {
                        type_definition_id: NodeId::new(0, 2041u32),
                        browse_path: Some(vec![QualifiedName::new(0, *n)]),
                        attribute_id: AttributeId::Value as u32,
                        index_range: Default::default(),
                    })
                    .collect(),
            ),
            where_clause: ContentFilter::default(),
        }
    }

    fn key(node: &str, names: &[&str]) -> EventKey {
        EventKey::new(NodeId::new(3, node), select(names))
    }

    fn id_of(t: &EventTable, k: &EventKey) -> u32 {
        t.keys()
            .into_iter()
            .find(|(_, key)| key == k)
            .map(|(id, _)| id)
            .unwrap()
    }

    #[test]
    fn equal_node_and_filter_share_one_key() {
        let mut t = EventTable::default();
        let a = key("Pump", &["EventId", "Message"]);
        assert!(t.set_demand([a.clone(), a.clone(), key("Pump", &["EventId", "Message"])]));
        assert_eq!(t.len(), 1);
        // Another filter or another node is another key.
        assert!(t.set_demand([
            a.clone(),
            key("Pump", &["Message"]),
            key("Tank", &["EventId", "Message"]),
        ]));
        assert_eq!(t.len(), 3);
        let id = id_of(&t, &a);
        // Same demand: nothing changes, ids stay.
        assert!(!t.set_demand([
            a.clone(),
            key("Pump", &["Message"]),
            key("Tank", &["EventId", "Message"]),
        ]));
        assert_eq!(id_of(&t, &a), id);
        assert!(t.set_demand([]));
        assert!(t.is_empty());
    }

    #[test]
    fn events_are_taken_in_order_with_their_key_and_duplicates_dropped() {
        let mut t = EventTable::default();
        let a = key("Pump", &["EventId", "Message"]);
        let b = key("Pump", &["Message"]);
        t.set_demand([a.clone(), b.clone()]);
        let (ia, ib) = (id_of(&t, &a), id_of(&t, &b));
        let ev = |id: &[u8], msg: &str| {
            vec![
                Variant::from(ByteString::from(id.to_vec())),
                Variant::from(msg),
            ]
        };
        assert!(t.offer(ia, ev(b"1", "one")));
        assert!(t.offer(ib, vec![Variant::from("one")]));
        // The same EventId again (another server of a hot-merge set).
        assert!(!t.offer(ia, ev(b"1", "one")));
        assert!(t.offer(ia, ev(b"2", "two")));
        // Without an EventId in the filter nothing can be recognised.
        assert!(t.offer(ib, vec![Variant::from("one")]));
        assert!(!t.offer(999, ev(b"3", "unknown item")));
        assert_eq!(t.duplicates_suppressed(), 1);
        let got = t.take();
        let msgs: Vec<(bool, Variant)> = got
            .iter()
            .map(|(k, f)| (*k == a, f.last().cloned().unwrap()))
            .collect();
        assert_eq!(
            msgs,
            vec![
                (true, Variant::from("one")),
                (false, Variant::from("one")),
                (true, Variant::from("two")),
                (false, Variant::from("one")),
            ]
        );
        assert!(t.take().is_empty());
    }

    #[test]
    fn memory_is_bounded() {
        let mut t = EventTable::default();
        let a = key("Pump", &["EventId"]);
        t.set_demand([a.clone()]);
        let ia = id_of(&t, &a);
        let n = OUTBOX_MAX + 5;
        for i in 0..n {
            let id = ByteString::from((i as u64).to_le_bytes().to_vec());
            assert!(t.offer(ia, vec![Variant::from(id)]));
        }
        assert_eq!(t.dropped(), 5);
        let got = t.take();
        assert_eq!(got.len(), OUTBOX_MAX);
        // The oldest went; the newest is last.
        let last = ByteString::from(((n - 1) as u64).to_le_bytes().to_vec());
        assert_eq!(got.last().unwrap().1, vec![Variant::from(last)]);
        // Only the most recent EventIds are remembered: an old one passes again.
        let first = ByteString::from(0u64.to_le_bytes().to_vec());
        assert!(t.offer(ia, vec![Variant::from(first)]));
        let recent = ByteString::from(((n - 1) as u64).to_le_bytes().to_vec());
        assert!(!t.offer(ia, vec![Variant::from(recent)]));
        // A key dropped from demand takes its undelivered events with it.
        t.set_demand([]);
        assert!(t.take().is_empty());
    }
}
