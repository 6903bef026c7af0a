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
//!
//! Condition refresh (Part 9 §5.5.7, §5.5.8): the connection calls
//! ConditionRefresh2 southbound on a shared item inside a *refresh window*
//! ([`EventTable::begin_refresh`] .. [`EventTable::end_refresh`]). The
//! condition events of the window are tagged with the window's
//! [`Audience`] (only the northbound items that asked, or all of them for
//! a refresh the connection makes itself) and skip duplicate suppression
//! (a refresh re-sends events already delivered). The southbound item
//! always selects the EventType as one extra, trailing field (see
//! [`southbound_filter`]) so that the field server's RefreshStart and
//! RefreshEnd events are recognised; they never go north: the gateway
//! frames each refresh with its own [`Taken::RefreshStart`] and
//! [`Taken::RefreshEnd`].

use std::collections::{HashMap, HashSet, VecDeque};

use opcua_types::{
    AttributeId, ByteString, EventFilter, NodeId, ObjectTypeId, QualifiedName,
    SimpleAttributeOperand, Variant,
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

/// RefreshStartEventType (Part 9 §5.11.2).
pub const REFRESH_START_EVENT_TYPE: u32 = 2787;
/// RefreshEndEventType (Part 9 §5.11.3).
pub const REFRESH_END_EVENT_TYPE: u32 = 2788;

/// The select clause of the BaseEventType property EventType.
fn event_type_clause() -> SimpleAttributeOperand {
    SimpleAttributeOperand {
        type_definition_id: ObjectTypeId::BaseEventType.into(),
        browse_path: Some(vec![QualifiedName::new(0, "EventType")]),
        attribute_id: AttributeId::Value as u32,
        index_range: Default::default(),
    }
}

/// The filter of the southbound item of a key (before namespace
/// remapping): the key's filter with one trailing EventType select clause,
/// so that [`EventTable::offer`] recognises the field server's
/// RefreshStart and RefreshEnd events whatever the client selected.
pub fn southbound_filter(filter: &EventFilter) -> EventFilter {
    let mut f = filter.clone();
    f.select_clauses
        .get_or_insert_with(Vec::new)
        .push(event_type_clause());
    f
}

/// Which northbound items of a key get the events of a refresh window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Audience {
    /// Every item of the key: a refresh the connection makes itself after
    /// a reconnect or a failover, or an ordinary event.
    Everyone,
    /// Only the items of the gateway's refresh request with this token
    /// (a client's ConditionRefresh or ConditionRefresh2).
    Request(u64),
}

/// What the gateway takes from the table, in order.
#[derive(Debug, Clone)]
pub enum Taken {
    /// An event (fields in the order of the key's select clauses) for the
    /// items of `key` that `to` names.
    Event {
        /// The items it is for: notifier node and filter.
        key: EventKey,
        /// The fields, remapped.
        fields: Vec<Variant>,
        /// Which of them.
        to: Audience,
    },
    /// A refresh of `key` for `to` starts: its condition events follow.
    RefreshStart {
        /// The refreshed key.
        key: EventKey,
        /// Who asked.
        to: Audience,
    },
    /// The refresh of `key` for `to` is over (done, failed or timed out).
    RefreshEnd {
        /// The refreshed key.
        key: EventKey,
        /// Who asked.
        to: Audience,
    },
}

/// An open refresh window of one key.
#[derive(Debug, Clone)]
struct Window {
    to: Audience,
    /// The field server's RefreshStart reached the item.
    start_seen: bool,
    /// Its RefreshEnd reached the item (after the start).
    end_seen: bool,
    /// The window's events, held until it closes so that they go out
    /// together, between the markers (at most [`OUTBOX_MAX`]).
    held: Vec<(Vec<Variant>, Audience)>,
}

/// What the field server's refresh events of a window showed so far
/// ([`EventTable::refresh_progress`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RefreshProgress {
    /// The field server's RefreshStart reached the item.
    pub start_seen: bool,
    /// Its RefreshEnd reached the item.
    pub end_seen: bool,
}

#[derive(Debug)]
struct Entry {
    key: EventKey,
    event_id_at: Option<usize>,
    recent: VecDeque<ByteString>,
    seen: HashSet<ByteString>,
    window: Option<Window>,
}

/// One outbox entry: an event of item `id`, or a refresh marker (which
/// carries its key so that it survives the key's removal: the gateway
/// counts the end of every refresh it asked for).
#[derive(Debug)]
enum Out {
    Event(u32, Vec<Variant>, Audience),
    Marker(Taken),
}

/// The shared event items of one field connection and their undelivered
/// events.
#[derive(Debug, Default)]
pub struct EventTable {
    ids: HashMap<EventKey, u32>,
    entries: HashMap<u32, Entry>,
    next_id: u32,
    outbox: VecDeque<Out>,
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
                    window: None,
                },
            );
            self.ids.insert(key, id);
            changed = true;
        }
        if changed {
            let entries = &self.entries;
            self.outbox.retain(|o| match o {
                Out::Event(id, ..) => entries.contains_key(id),
                Out::Marker(_) => true,
            });
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

    /// The id (southbound client handle) of a wanted key.
    pub fn id_of(&self, key: &EventKey) -> Option<u32> {
        self.ids.get(key).copied()
    }

    /// An event from the southbound item `id` (fields in the order of the
    /// key's select clauses plus the trailing EventType of
    /// [`southbound_filter`], already remapped). Returns false when it is
    /// not kept: an unknown id (the item was just deleted), the field
    /// server's RefreshStart or RefreshEnd (they only move the key's
    /// refresh window), or, outside a refresh window, an EventId already
    /// delivered for this key.
    ///
    /// Inside a window the event goes to the window's audience and is never
    /// suppressed as a duplicate; one whose EventId was never delivered is
    /// new to every item and goes to all of them.
    pub fn offer(&mut self, id: u32, mut fields: Vec<Variant>) -> bool {
        let Some(e) = self.entries.get_mut(&id) else {
            return false;
        };
        let select_len = e.key.filter.select_clauses.as_ref().map_or(0, Vec::len);
        let event_type = if fields.len() > select_len {
            fields.truncate(select_len + 1);
            fields.pop()
        } else {
            None
        };
        let in_window = e.window.is_some();
        match event_type {
            Some(Variant::NodeId(t)) if *t == NodeId::new(0, REFRESH_START_EVENT_TYPE) => {
                if let Some(w) = e.window.as_mut() {
                    w.start_seen = true;
                }
                return false;
            }
            Some(Variant::NodeId(t)) if *t == NodeId::new(0, REFRESH_END_EVENT_TYPE) => {
                if let Some(w) = e.window.as_mut().filter(|w| w.start_seen) {
                    w.end_seen = true;
                }
                return false;
            }
            _ => {}
        }
        let event_id = e.event_id_at.and_then(|i| match fields.get(i) {
            Some(Variant::ByteString(b)) if !b.is_null_or_empty() => Some(b.clone()),
            _ => None,
        });
        let mut to = e.window.as_ref().map_or(Audience::Everyone, |w| w.to);
        if let Some(event_id) = event_id {
            let known = !e.seen.insert(event_id.clone());
            if known && !in_window {
                self.duplicates_suppressed += 1;
                return false;
            }
            if !known {
                to = Audience::Everyone;
                e.recent.push_back(event_id);
                if e.recent.len() > RECENT_EVENT_IDS {
                    if let Some(old) = e.recent.pop_front() {
                        e.seen.remove(&old);
                    }
                }
            }
        }
        match e.window.as_mut() {
            Some(w) if w.held.len() < OUTBOX_MAX => w.held.push((fields, to)),
            Some(_) => self.dropped += 1,
            None => self.push(Out::Event(id, fields, to)),
        }
        true
    }

    /// Queues an outbox entry, dropping the oldest beyond [`OUTBOX_MAX`].
    fn push(&mut self, out: Out) {
        if self.outbox.len() >= OUTBOX_MAX {
            self.outbox.pop_front();
            self.dropped += 1;
        }
        self.outbox.push_back(out);
    }

    /// Opens the refresh window of `key` for `to`: the connection is about
    /// to call ConditionRefresh2 southbound on its item. The window's events
    /// are held until [`EventTable::end_refresh`]. A window already open is
    /// replaced (the connection runs one refresh at a time).
    pub fn begin_refresh(&mut self, key: &EventKey, to: Audience) {
        if let Some(e) = self.ids.get(key).and_then(|id| self.entries.get_mut(id)) {
            e.window = Some(Window {
                to,
                start_seen: false,
                end_seen: false,
                held: Vec::new(),
            });
        }
    }

    /// What the field server's RefreshStart and RefreshEnd of the open
    /// window of `key` showed so far (default when no window is open).
    pub fn refresh_progress(&self, key: &EventKey) -> RefreshProgress {
        self.ids
            .get(key)
            .and_then(|id| self.entries.get(id))
            .and_then(|e| e.window.as_ref())
            .map(|w| RefreshProgress {
                start_seen: w.start_seen,
                end_seen: w.end_seen,
            })
            .unwrap_or_default()
    }

    /// Closes the refresh window of `key` (if open) and queues what it
    /// held. `refreshed`: the field server took the refresh; then the held
    /// events are framed by [`Taken::RefreshStart`] and
    /// [`Taken::RefreshEnd`]. Otherwise they are ordinary events and a
    /// connection's own refresh (`Everyone`) leaves no trace. A client's
    /// request always gets its RefreshEnd, also for a key that is gone:
    /// every refresh the gateway asked for ends.
    pub fn end_refresh(&mut self, key: &EventKey, to: Audience, refreshed: bool) {
        let id = self.ids.get(key).copied();
        let held = id
            .and_then(|id| self.entries.get_mut(&id))
            .and_then(|e| e.window.take())
            .map(|w| w.held)
            .unwrap_or_default();
        let framed = refreshed || to != Audience::Everyone;
        if framed {
            self.push(Out::Marker(Taken::RefreshStart {
                key: key.clone(),
                to,
            }));
        }
        for (fields, audience) in held {
            let audience = if refreshed {
                audience
            } else {
                Audience::Everyone
            };
            if let Some(id) = id {
                self.push(Out::Event(id, fields, audience));
            }
        }
        if framed {
            self.push(Out::Marker(Taken::RefreshEnd {
                key: key.clone(),
                to,
            }));
        }
    }

    /// What was received since the last call, oldest first: events with the
    /// key of the items they are for, and refresh markers.
    pub fn take(&mut self) -> Vec<Taken> {
        let entries = &self.entries;
        self.outbox
            .drain(..)
            .filter_map(|o| match o {
                Out::Event(id, fields, to) => entries.get(&id).map(|e| Taken::Event {
                    key: e.key.clone(),
                    fields,
                    to,
                }),
                Out::Marker(m) => Some(m),
            })
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
        t.id_of(k).unwrap()
    }

    /// The events taken, as (key, fields); markers are not events.
    fn events(t: &mut EventTable) -> Vec<(EventKey, Vec<Variant>)> {
        t.take()
            .into_iter()
            .filter_map(|x| match x {
                Taken::Event { key, fields, .. } => Some((key, fields)),
                _ => None,
            })
            .collect()
    }

    /// What a refresh shows the gateway, in order: `S`/`E` for the
    /// markers, the message (last field) of events, with the audience.
    fn script(t: &mut EventTable) -> Vec<(String, Audience)> {
        t.take()
            .into_iter()
            .map(|x| match x {
                Taken::Event { fields, to, .. } => (
                    match fields.last() {
                        Some(Variant::String(s)) => s.to_string(),
                        other => format!("{other:?}"),
                    },
                    to,
                ),
                Taken::RefreshStart { to, .. } => ("S".into(), to),
                Taken::RefreshEnd { to, .. } => ("E".into(), to),
            })
            .collect()
    }

    /// A southbound event: EventId, Message and the trailing EventType.
    fn sb(id: &[u8], msg: &str, event_type: u32) -> Vec<Variant> {
        vec![
            Variant::from(ByteString::from(id.to_vec())),
            Variant::from(msg),
            Variant::from(NodeId::new(0, event_type)),
        ]
    }

    const ALARM: u32 = 2915;

    #[test]
    fn southbound_filter_selects_the_event_type_last() {
        let f = select(&["EventId", "Message"]);
        let sf = southbound_filter(&f);
        let clauses = sf.select_clauses.unwrap();
        assert_eq!(clauses.len(), 3);
        assert_eq!(clauses[..2], f.select_clauses.unwrap()[..]);
        assert_eq!(
            clauses[2].browse_path.as_deref(),
            Some(&[QualifiedName::new(0, "EventType")][..])
        );
    }

    #[test]
    fn a_requested_refresh_goes_to_its_audience_only_and_skips_duplicate_suppression() {
        let mut t = EventTable::default();
        let a = key("Pump", &["EventId", "Message"]);
        t.set_demand([a.clone()]);
        let ia = id_of(&t, &a);
        // The alarm was delivered to everyone before.
        assert!(t.offer(ia, sb(b"c1", "alarm", ALARM)));
        // Outside a window the field server's refresh events (another
        // client's refresh) never go north, nor does the repeated event.
        assert!(!t.offer(ia, sb(b"r0", "start", REFRESH_START_EVENT_TYPE)));
        assert!(!t.offer(ia, sb(b"c1", "alarm", ALARM)));
        assert!(!t.offer(ia, sb(b"r1", "end", REFRESH_END_EVENT_TYPE)));
        let to = Audience::Request(7);
        t.begin_refresh(&a, to);
        assert_eq!(t.refresh_progress(&a), RefreshProgress::default());
        assert!(!t.offer(ia, sb(b"r2", "start", REFRESH_START_EVENT_TYPE)));
        assert!(t.refresh_progress(&a).start_seen);
        // The refreshed condition: already delivered, only for the request.
        assert!(t.offer(ia, sb(b"c1", "alarm", ALARM)));
        // A condition event never delivered is news to every item.
        assert!(t.offer(ia, sb(b"c2", "other", ALARM)));
        assert!(!t.offer(ia, sb(b"r3", "end", REFRESH_END_EVENT_TYPE)));
        assert!(t.refresh_progress(&a).end_seen);
        t.end_refresh(&a, to, true);
        // After the window: duplicates are suppressed again.
        assert!(!t.offer(ia, sb(b"c2", "other", ALARM)));
        assert!(t.offer(ia, sb(b"c3", "new", ALARM)));
        let e = Audience::Everyone;
        assert_eq!(
            script(&mut t),
            vec![
                ("alarm".into(), e),
                ("S".into(), to),
                ("alarm".into(), to),
                ("other".into(), e),
                ("E".into(), to),
                ("new".into(), e),
            ]
        );
    }

    #[test]
    fn a_refresh_the_field_server_refused_leaves_ordinary_events_only() {
        let mut t = EventTable::default();
        let a = key("Pump", &["EventId", "Message"]);
        t.set_demand([a.clone()]);
        let ia = id_of(&t, &a);
        t.begin_refresh(&a, Audience::Everyone);
        assert!(t.offer(ia, sb(b"c1", "alarm", ALARM)));
        t.end_refresh(&a, Audience::Everyone, false);
        let to = Audience::Request(3);
        t.begin_refresh(&a, to);
        t.end_refresh(&a, to, false);
        // The connection's own refresh: no trace; a client's: it ends.
        assert_eq!(
            script(&mut t),
            vec![
                ("alarm".into(), Audience::Everyone),
                ("S".into(), to),
                ("E".into(), to),
            ]
        );
    }

    #[test]
    fn a_refresh_of_a_key_that_went_away_still_ends() {
        let mut t = EventTable::default();
        let a = key("Pump", &["EventId", "Message"]);
        t.set_demand([a.clone()]);
        let ia = id_of(&t, &a);
        t.begin_refresh(&a, Audience::Everyone);
        assert!(t.offer(ia, sb(b"c1", "alarm", ALARM)));
        t.set_demand([]);
        t.end_refresh(&a, Audience::Everyone, true);
        // The event went with its key; both markers stay.
        assert_eq!(
            script(&mut t),
            vec![
                ("S".into(), Audience::Everyone),
                ("E".into(), Audience::Everyone)
            ]
        );
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
        let got = events(&mut t);
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
        let got = events(&mut t);
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
