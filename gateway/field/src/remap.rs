//! Namespace allocation and node id remapping between the gateway and the
//! field servers it mounts.
//!
//! Every field server of a mount (identified by its name, e.g. `line1`)
//! appears under `Objects/<name>` in the gateway. The field server's
//! namespaces are appended to the gateway's NamespaceArray; namespace 0 (the
//! OPC UA namespace) is shared and never remapped.
//!
//! Two pieces, both plain data:
//! - [`NamespaceTable`] allocates one gateway namespace index per
//!   (mount, field namespace URI) pair. Its entries are persisted by the
//!   caller so that indexes stay stable across gateway restarts.
//! - [`SessionMap`] translates node ids, qualified names and values between
//!   the gateway and ONE session to ONE field server. It is rebuilt every
//!   time a field session is (re)established, from the field server's
//!   NamespaceArray, because that array may differ between redundant
//!   servers or after a field server restart.
//!
//! Directions:
//! - "to field" (northbound request → southbound request) is fallible: a
//!   gateway id that does not belong to this mount (or whose namespace the
//!   connected field server does not have) yields `BadNodeIdUnknown`.
//! - "to gateway" (southbound response → northbound response) is
//!   infallible: a field namespace index the map does not know (the field
//!   server answered with an index outside the NamespaceArray the map was
//!   built from) turns a node id into the null node id and a qualified name
//!   into namespace 0 with the same name, and is counted (see
//!   [`SessionMap::unknown_namespace_hits`]) so the caller can notice a stale
//!   map and rebuild it.
//!
//! Inside values, only the `Argument` structure (the InputArguments and
//! OutputArguments of methods) has its DataType remapped; other structures
//! are passed through as they are. HistoryRead has its own: the event
//! filter of an event read goes to the field server remapped, and history
//! data and event fields come back remapped like Read values. Not remapped either:
//! expanded node ids that carry a namespace URI or a non-zero server index.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use opcua_types::{
    Argument, AttributeOperand, BrowseDescription, BrowsePath, BrowsePathResult, CallMethodRequest,
    CallMethodResult, ContentFilter, ContentFilterElement, DataValue, EventFilter, ExpandedNodeId,
    ExtensionObject, HistoryData, HistoryEvent, HistoryEventFieldList, HistoryModifiedData,
    HistoryReadValueId, LiteralOperand, NodeId, ObjectId, QualifiedName, ReadValueId,
    ReferenceDescription, RelativePath, SimpleAttributeOperand, StatusCode, Variant, WriteValue,
};

/// Prefix of the published URI of a field namespace whose URI is already
/// published by another mount: `urn:uagate:field:{mount}:{field_uri}`.
pub const PREFIXED_URI_BASE: &str = "urn:uagate:field:";

/// Deepest nesting of variants (arrays of variants, variants in variants,
/// data values in variants) that is remapped; the same bound the OPC UA
/// decoder applies, so anything decoded from the wire stays below it.
pub const MAX_VARIANT_DEPTH: usize = opcua_types::constants::MAX_DECODING_DEPTH as usize;

/// Failures of namespace allocation and session map construction.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemapError {
    /// No gateway namespace index is left (indexes are `u16`).
    #[error("namespace table full: no gateway namespace index left")]
    TableFull,
    /// A persisted table holds the same (mount, field URI) pair or the same
    /// published URI twice; the string describes the duplicate.
    #[error("duplicate namespace entry: {0}")]
    Duplicate(String),
    /// A field namespace URI was not allocated in the table for this mount
    /// before building a [`SessionMap`]; the string is the URI.
    #[error("field namespace not allocated: {0}")]
    Unallocated(String),
}

/// One allocated gateway namespace for a (mount, field namespace URI) pair;
/// persisted so indexes are stable across restarts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NamespaceEntry {
    /// Name of the mount the namespace belongs to.
    pub mount: String,
    /// The URI in the field server's NamespaceArray.
    pub field_uri: String,
    /// The URI the gateway publishes in its own NamespaceArray.
    pub published_uri: String,
}

/// The allocation table of mounted namespaces: gateway index =
/// `first_index` + position of the entry.
///
/// Built at startup from the persisted entries ([`NamespaceTable::from_entries`])
/// and extended with [`NamespaceTable::allocate`] whenever a field session
/// reports a namespace URI not seen before; entries are never removed, so
/// an index, once handed out, keeps its meaning.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NamespaceTable {
    first_index: u16,
    entries: Vec<NamespaceEntry>,
    /// (mount, field_uri) → gateway index.
    by_key: HashMap<(String, String), u16>,
    /// Every field URI present in the table, whatever the mount.
    field_uris: HashSet<String>,
    /// Every published URI present in the table.
    published: HashSet<String>,
}

impl NamespaceTable {
    /// An empty table whose first entry will get gateway index
    /// `first_index` (the first index after the gateway's own namespaces).
    pub fn new(first_index: u16) -> Self {
        NamespaceTable {
            first_index,
            ..Default::default()
        }
    }

    /// Rebuilds a table from persisted entries (in index order), at startup.
    ///
    /// Fails with [`RemapError::Duplicate`] if two entries have the same
    /// (mount, field URI) pair or the same published URI, and with
    /// [`RemapError::TableFull`] if the entries do not fit below
    /// `u16::MAX`.
    pub fn from_entries(
        first_index: u16,
        entries: Vec<NamespaceEntry>,
    ) -> Result<Self, RemapError> {
        let mut table = NamespaceTable::new(first_index);
        for entry in entries {
            if table
                .by_key
                .contains_key(&(entry.mount.clone(), entry.field_uri.clone()))
            {
                return Err(RemapError::Duplicate(format!(
                    "mount {:?} field uri {:?}",
                    entry.mount, entry.field_uri
                )));
            }
            if table.published.contains(&entry.published_uri) {
                return Err(RemapError::Duplicate(format!(
                    "published uri {:?}",
                    entry.published_uri
                )));
            }
            table.push(entry)?;
        }
        Ok(table)
    }

    /// The entries in index order, for persisting the table.
    pub fn entries(&self) -> &[NamespaceEntry] {
        &self.entries
    }

    /// Gateway index of the first entry.
    pub fn first_index(&self) -> u16 {
        self.first_index
    }

    /// Gateway index of (mount, field_uri), allocating a new entry at the
    /// end if needed; returns `(index, newly_allocated)`. Called for every
    /// URI (except index 0) of a field server's NamespaceArray when a field
    /// session is established, before building its [`SessionMap`]; when
    /// `newly_allocated` is true the caller persists the table and extends
    /// the gateway's NamespaceArray.
    ///
    /// The published URI is `field_uri` itself when no other mount uses that
    /// field URI and no entry publishes it already, otherwise
    /// `urn:uagate:field:{mount}:{field_uri}` (with `:2`, `:3`, … appended
    /// in the unlikely case that this is taken too).
    ///
    /// Fails with [`RemapError::TableFull`] when the new index would exceed
    /// `u16::MAX`.
    pub fn allocate(&mut self, mount: &str, field_uri: &str) -> Result<(u16, bool), RemapError> {
        if let Some(index) = self.index_of(mount, field_uri) {
            return Ok((index, false));
        }
        let published_uri =
            if !self.field_uris.contains(field_uri) && !self.published.contains(field_uri) {
                field_uri.to_string()
            } else {
                let base = format!("{PREFIXED_URI_BASE}{mount}:{field_uri}");
                let mut candidate = base.clone();
                let mut n: usize = 2;
                // Terminates: each taken candidate is a distinct published URI.
                while self.published.contains(&candidate) {
                    candidate = format!("{base}:{n}");
                    n += 1;
                }
                candidate
            };
        let index = self.push(NamespaceEntry {
            mount: mount.to_string(),
            field_uri: field_uri.to_string(),
            published_uri,
        })?;
        Ok((index, true))
    }

    /// Gateway index of (mount, field_uri), if allocated.
    pub fn index_of(&self, mount: &str, field_uri: &str) -> Option<u16> {
        self.by_key
            .get(&(mount.to_string(), field_uri.to_string()))
            .copied()
    }

    /// The entry behind a gateway namespace index, if it is a mounted one.
    pub fn entry(&self, gateway_ns: u16) -> Option<&NamespaceEntry> {
        let position = gateway_ns.checked_sub(self.first_index)?;
        self.entries.get(usize::from(position))
    }

    /// The mount a gateway namespace index belongs to, for routing a
    /// northbound request to the right field session; `None` for the
    /// gateway's own namespaces and unallocated indexes.
    pub fn mount_of(&self, gateway_ns: u16) -> Option<&str> {
        self.entry(gateway_ns).map(|e| e.mount.as_str())
    }

    /// Published URIs in index order (the tail of the gateway's
    /// NamespaceArray, starting at `first_index`).
    pub fn published_uris(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.published_uri.as_str())
    }

    /// Appends an entry (already checked for duplicates) and returns its
    /// index.
    fn push(&mut self, entry: NamespaceEntry) -> Result<u16, RemapError> {
        let index = usize::from(self.first_index)
            .checked_add(self.entries.len())
            .and_then(|i| u16::try_from(i).ok())
            .ok_or(RemapError::TableFull)?;
        self.by_key
            .insert((entry.mount.clone(), entry.field_uri.clone()), index);
        self.field_uris.insert(entry.field_uri.clone());
        self.published.insert(entry.published_uri.clone());
        self.entries.push(entry);
        Ok(index)
    }
}

/// Node id translation between the gateway and ONE session to ONE field
/// server of a mount.
///
/// Built each time a field session is (re)established, from the field
/// server's NamespaceArray, after the caller allocated every URI of that
/// array (except index 0) in the [`NamespaceTable`]. The `*_to_field`
/// methods are called on each northbound request item routed to this
/// session, the `*_to_gateway` methods on each southbound response item.
///
/// Namespace 0 maps to itself, except that the field server's Objects
/// folder (`i=85`) stands for the mount folder in the gateway and vice
/// versa. The gateway's own `i=85` is passed as `i=85` to the field (namespace
/// 0 is identity); routing decides whether such a request reaches a field
/// server at all.
#[derive(Debug)]
pub struct SessionMap {
    mount: String,
    /// Field namespace index → gateway index (index 0 → 0).
    to_gateway: Vec<u16>,
    /// Gateway namespace index → field index (0 → 0). When the field array
    /// lists a URI twice, the lowest field index wins.
    /// (foldhash: looked up for every node id of every request.)
    to_field: HashMap<u16, u16, foldhash::fast::RandomState>,
    mount_folder: NodeId,
    objects_folder: NodeId,
    unknown: AtomicU64,
}

impl SessionMap {
    /// Builds the map for a newly established field session of `mount`.
    ///
    /// `field_namespaces` is the field server's NamespaceArray (index 0 is
    /// namespace 0 and always maps to itself; entries beyond index
    /// `u16::MAX` cannot be referenced and are ignored). `mount_folder` is
    /// the gateway node (in a gateway-owned namespace) that stands for the
    /// field server's Objects folder (`i=85`).
    ///
    /// Fails with [`RemapError::Unallocated`] if a URI of the array is not
    /// allocated for `mount` in `table`.
    pub fn new(
        mount: &str,
        table: &NamespaceTable,
        field_namespaces: &[String],
        mount_folder: NodeId,
    ) -> Result<SessionMap, RemapError> {
        let mut to_gateway = vec![0u16];
        let mut to_field = HashMap::with_hasher(foldhash::fast::RandomState::default());
        to_field.insert(0u16, 0u16);
        for (field_ns, uri) in (1..=u16::MAX).zip(field_namespaces.iter().skip(1)) {
            let gateway_ns = table
                .index_of(mount, uri)
                .ok_or_else(|| RemapError::Unallocated(uri.clone()))?;
            to_gateway.push(gateway_ns);
            to_field.entry(gateway_ns).or_insert(field_ns);
        }
        Ok(SessionMap {
            mount: mount.to_string(),
            to_gateway,
            to_field,
            mount_folder,
            objects_folder: ObjectId::ObjectsFolder.into(),
            unknown: AtomicU64::new(0),
        })
    }

    /// The mount this map belongs to.
    pub fn mount(&self) -> &str {
        &self.mount
    }

    /// The gateway node standing for the field server's Objects folder.
    pub fn mount_folder(&self) -> &NodeId {
        &self.mount_folder
    }

    /// How many times a "to gateway" translation met a field namespace index
    /// the map does not know (and substituted null / namespace 0). Non-zero
    /// means the field server's NamespaceArray changed since the map was
    /// built: the caller should re-read it and rebuild the map.
    pub fn unknown_namespace_hits(&self) -> u64 {
        self.unknown.load(Ordering::Relaxed)
    }

    /// Field namespace index of a gateway namespace index; `None` when the
    /// gateway namespace is not one of this session's.
    pub fn ns_to_field(&self, gateway_ns: u16) -> Option<u16> {
        self.to_field.get(&gateway_ns).copied()
    }

    /// Gateway namespace index of a field namespace index; `None` when the
    /// index is outside the field NamespaceArray the map was built from.
    pub fn ns_to_gateway(&self, field_ns: u16) -> Option<u16> {
        self.to_gateway.get(usize::from(field_ns)).copied()
    }

    // ---- to the field server -------------------------------------------

    /// A gateway node id as the field server knows it; the mount folder
    /// becomes `i=85`. `BadNodeIdUnknown` if its namespace is not this
    /// session's.
    pub fn node_to_field(&self, id: &NodeId) -> Result<NodeId, StatusCode> {
        if *id == self.mount_folder {
            return Ok(self.objects_folder.clone());
        }
        let namespace = self
            .ns_to_field(id.namespace)
            .ok_or(StatusCode::BadNodeIdUnknown)?;
        Ok(NodeId {
            namespace,
            identifier: id.identifier.clone(),
        })
    }

    /// The event notifier the field server has for a gateway notifier: the
    /// mount folder and the gateway's Server object both stand for the field
    /// server's Server object (the root of its notifier hierarchy); any other
    /// node as [`Self::node_to_field`] maps it.
    pub fn notifier_to_field(&self, id: &NodeId) -> Result<NodeId, StatusCode> {
        let server: NodeId = ObjectId::Server.into();
        if *id == self.mount_folder || *id == server {
            return Ok(server);
        }
        self.node_to_field(id)
    }

    /// An expanded node id as the field server knows it. Ids with a
    /// namespace URI or a non-zero server index pass unchanged.
    pub fn expanded_to_field(&self, id: &ExpandedNodeId) -> Result<ExpandedNodeId, StatusCode> {
        if is_absolute(id) {
            return Ok(id.clone());
        }
        Ok(ExpandedNodeId {
            node_id: self.node_to_field(&id.node_id)?,
            namespace_uri: id.namespace_uri.clone(),
            server_index: id.server_index,
        })
    }

    /// A qualified name as the field server knows it (browse names, data
    /// encodings). `BadNodeIdUnknown` if its namespace is not this
    /// session's.
    pub fn qname_to_field(&self, q: &QualifiedName) -> Result<QualifiedName, StatusCode> {
        let namespace_index = self
            .ns_to_field(q.namespace_index)
            .ok_or(StatusCode::BadNodeIdUnknown)?;
        Ok(QualifiedName {
            namespace_index,
            name: q.name.clone(),
        })
    }

    /// A value written or passed as an argument to the field server: node
    /// ids, expanded node ids and qualified names are remapped, also inside
    /// arrays, nested variants and data values (up to
    /// [`MAX_VARIANT_DEPTH`], beyond which `BadEncodingLimitsExceeded`);
    /// other values pass unchanged.
    pub fn variant_to_field(&self, v: &Variant) -> Result<Variant, StatusCode> {
        self.variant_to_field_at(v, 0)
    }

    fn variant_to_field_at(&self, v: &Variant, depth: usize) -> Result<Variant, StatusCode> {
        if depth > MAX_VARIANT_DEPTH {
            return Err(StatusCode::BadEncodingLimitsExceeded);
        }
        Ok(match v {
            Variant::NodeId(id) => Variant::NodeId(Box::new(self.node_to_field(id)?)),
            Variant::ExpandedNodeId(id) => {
                Variant::ExpandedNodeId(Box::new(self.expanded_to_field(id)?))
            }
            Variant::QualifiedName(q) => Variant::QualifiedName(Box::new(self.qname_to_field(q)?)),
            Variant::Variant(inner) => {
                Variant::Variant(Box::new(self.variant_to_field_at(inner, depth + 1)?))
            }
            Variant::DataValue(d) => {
                let mut d = d.clone();
                d.value = match d.value.take() {
                    Some(value) => Some(self.variant_to_field_at(&value, depth + 1)?),
                    None => None,
                };
                Variant::DataValue(d)
            }
            Variant::Array(array) => {
                let values = array
                    .values
                    .iter()
                    .map(|e| self.variant_to_field_at(e, depth + 1))
                    .collect::<Result<Vec<_>, _>>()?;
                let mut array = array.clone();
                array.values = values;
                Variant::Array(array)
            }
            Variant::ExtensionObject(eo) => match eo.inner_as::<Argument>() {
                Some(a) => {
                    let mut a = a.clone();
                    a.data_type = self.node_to_field(&a.data_type)?;
                    Variant::ExtensionObject(ExtensionObject::from_message(a))
                }
                None => v.clone(),
            },
            other => other.clone(),
        })
    }

    /// A Read item for the field server: node id and data encoding.
    pub fn read_value_id_to_field(&self, r: &ReadValueId) -> Result<ReadValueId, StatusCode> {
        Ok(ReadValueId {
            node_id: self.node_to_field(&r.node_id)?,
            attribute_id: r.attribute_id,
            index_range: r.index_range.clone(),
            data_encoding: self.qname_to_field(&r.data_encoding)?,
        })
    }

    /// A Write item for the field server: node id and value.
    pub fn write_value_to_field(&self, w: &WriteValue) -> Result<WriteValue, StatusCode> {
        let mut value = w.value.clone();
        value.value = match value.value.take() {
            Some(v) => Some(self.variant_to_field(&v)?),
            None => None,
        };
        Ok(WriteValue {
            node_id: self.node_to_field(&w.node_id)?,
            attribute_id: w.attribute_id,
            index_range: w.index_range.clone(),
            value,
        })
    }

    /// A Browse item for the field server: node id and reference type id.
    pub fn browse_description_to_field(
        &self,
        b: &BrowseDescription,
    ) -> Result<BrowseDescription, StatusCode> {
        Ok(BrowseDescription {
            node_id: self.node_to_field(&b.node_id)?,
            reference_type_id: self.node_to_field(&b.reference_type_id)?,
            ..b.clone()
        })
    }

    /// A TranslateBrowsePathsToNodeIds item for the field server: starting
    /// node, and each element's reference type id and target name.
    pub fn browse_path_to_field(&self, p: &BrowsePath) -> Result<BrowsePath, StatusCode> {
        Ok(BrowsePath {
            starting_node: self.node_to_field(&p.starting_node)?,
            relative_path: self.relative_path_to_field(&p.relative_path)?,
        })
    }

    /// A Call item for the field server: object id, method id and input
    /// arguments.
    pub fn call_to_field(&self, c: &CallMethodRequest) -> Result<CallMethodRequest, StatusCode> {
        Ok(CallMethodRequest {
            object_id: self.node_to_field(&c.object_id)?,
            method_id: self.node_to_field(&c.method_id)?,
            input_arguments: map_list(&c.input_arguments, |a| self.variant_to_field(a))?,
        })
    }

    /// A HistoryRead item for the field server: node id and data encoding.
    pub fn history_read_value_id_to_field(
        &self,
        h: &HistoryReadValueId,
    ) -> Result<HistoryReadValueId, StatusCode> {
        Ok(HistoryReadValueId {
            node_id: self.node_to_field(&h.node_id)?,
            index_range: h.index_range.clone(),
            data_encoding: self.qname_to_field(&h.data_encoding)?,
            continuation_point: h.continuation_point.clone(),
        })
    }

    /// Each element's reference type id and target name as the field
    /// server knows them (TranslateBrowsePaths, attribute operands).
    /// The mount folder's own name (as the gateway names it) stands for
    /// the field server's Objects folder, so that a path back up to the
    /// folder resolves there.
    fn relative_path_to_field(&self, p: &RelativePath) -> Result<RelativePath, StatusCode> {
        let mut path = p.clone();
        if let Some(elements) = path.elements.as_mut() {
            for element in elements.iter_mut() {
                element.reference_type_id = self.node_to_field(&element.reference_type_id)?;
                element.target_name = if self.is_mount_folder_name(&element.target_name) {
                    QualifiedName::new(0, "Objects")
                } else {
                    self.qname_to_field(&element.target_name)?
                };
            }
        }
        Ok(path)
    }

    /// Whether `q` is the mount folder's browse name in the gateway (the
    /// gateway's namespace and the mount's name); no field node has it.
    pub fn is_mount_folder_name(&self, q: &QualifiedName) -> bool {
        q.namespace_index == self.mount_folder.namespace && q.name.as_ref() == self.mount
    }

    /// The event filter of a HistoryRead of events, as the field server
    /// knows it: the select clauses' type definitions and browse paths, and
    /// the node ids, names and literal values in the where clause.
    /// `BadNodeIdUnknown` if one of them is in a namespace that is not this
    /// session's.
    pub fn event_filter_to_field(&self, f: &EventFilter) -> Result<EventFilter, StatusCode> {
        Ok(EventFilter {
            select_clauses: map_list(&f.select_clauses, |c| self.simple_operand_to_field(c))?,
            where_clause: ContentFilter {
                elements: map_list(&f.where_clause.elements, |e| {
                    self.filter_element_to_field(e)
                })?,
            },
        })
    }

    fn simple_operand_to_field(
        &self,
        s: &SimpleAttributeOperand,
    ) -> Result<SimpleAttributeOperand, StatusCode> {
        Ok(SimpleAttributeOperand {
            type_definition_id: self.node_to_field(&s.type_definition_id)?,
            browse_path: map_list(&s.browse_path, |q| self.qname_to_field(q))?,
            ..s.clone()
        })
    }

    fn filter_element_to_field(
        &self,
        e: &ContentFilterElement,
    ) -> Result<ContentFilterElement, StatusCode> {
        Ok(ContentFilterElement {
            filter_operator: e.filter_operator,
            filter_operands: map_list(&e.filter_operands, |o| self.filter_operand_to_field(o))?,
        })
    }

    /// One where-clause operand; element operands (and operands this
    /// stack cannot decode) carry no ids and pass unchanged.
    fn filter_operand_to_field(&self, o: &ExtensionObject) -> Result<ExtensionObject, StatusCode> {
        if let Some(s) = o.inner_as::<SimpleAttributeOperand>() {
            return Ok(ExtensionObject::from_message(
                self.simple_operand_to_field(s)?,
            ));
        }
        if let Some(l) = o.inner_as::<LiteralOperand>() {
            return Ok(ExtensionObject::from_message(LiteralOperand {
                value: self.variant_to_field(&l.value)?,
            }));
        }
        if let Some(a) = o.inner_as::<AttributeOperand>() {
            return Ok(ExtensionObject::from_message(AttributeOperand {
                node_id: self.node_to_field(&a.node_id)?,
                browse_path: self.relative_path_to_field(&a.browse_path)?,
                ..a.clone()
            }));
        }
        Ok(o.clone())
    }

    // ---- back to the gateway -------------------------------------------

    /// Records a field namespace index the map does not know.
    fn hit_unknown(&self) {
        self.unknown.fetch_add(1, Ordering::Relaxed);
    }

    /// A field node id as the gateway publishes it; `i=85` becomes the
    /// mount folder. A field namespace index the map does not know gives
    /// the null node id (and is counted).
    pub fn node_to_gateway(&self, id: &NodeId) -> NodeId {
        if *id == self.objects_folder {
            return self.mount_folder.clone();
        }
        match self.ns_to_gateway(id.namespace) {
            Some(namespace) => NodeId {
                namespace,
                identifier: id.identifier.clone(),
            },
            None => {
                self.hit_unknown();
                NodeId::null()
            }
        }
    }

    /// A field expanded node id as the gateway publishes it. Ids with a
    /// namespace URI or a non-zero server index pass unchanged; an unknown
    /// namespace index gives the null expanded node id.
    pub fn expanded_to_gateway(&self, id: &ExpandedNodeId) -> ExpandedNodeId {
        if is_absolute(id) {
            return id.clone();
        }
        ExpandedNodeId {
            node_id: self.node_to_gateway(&id.node_id),
            namespace_uri: id.namespace_uri.clone(),
            server_index: id.server_index,
        }
    }

    /// A field qualified name as the gateway publishes it. An unknown
    /// namespace index gives namespace 0 with the same name (and is
    /// counted).
    pub fn qname_to_gateway(&self, q: &QualifiedName) -> QualifiedName {
        let namespace_index = self.ns_to_gateway(q.namespace_index).unwrap_or_else(|| {
            self.hit_unknown();
            0
        });
        QualifiedName {
            namespace_index,
            name: q.name.clone(),
        }
    }

    /// A value read from the field server: node ids, expanded node ids and
    /// qualified names are remapped, also inside arrays, nested variants and
    /// data values (up to [`MAX_VARIANT_DEPTH`], beyond which the nested
    /// value becomes `Variant::Empty`); other values pass unchanged.
    pub fn variant_to_gateway(&self, v: &Variant) -> Variant {
        self.variant_to_gateway_at(v, 0)
    }

    fn variant_to_gateway_at(&self, v: &Variant, depth: usize) -> Variant {
        if depth > MAX_VARIANT_DEPTH {
            return Variant::Empty;
        }
        match v {
            Variant::NodeId(id) => Variant::NodeId(Box::new(self.node_to_gateway(id))),
            Variant::ExpandedNodeId(id) => {
                Variant::ExpandedNodeId(Box::new(self.expanded_to_gateway(id)))
            }
            Variant::QualifiedName(q) => Variant::QualifiedName(Box::new(self.qname_to_gateway(q))),
            Variant::Variant(inner) => {
                Variant::Variant(Box::new(self.variant_to_gateway_at(inner, depth + 1)))
            }
            Variant::DataValue(d) => {
                let mut d = d.clone();
                d.value = d
                    .value
                    .take()
                    .map(|value| self.variant_to_gateway_at(&value, depth + 1));
                Variant::DataValue(d)
            }
            Variant::Array(array) => {
                let values = array
                    .values
                    .iter()
                    .map(|e| self.variant_to_gateway_at(e, depth + 1))
                    .collect();
                let mut array = array.clone();
                array.values = values;
                Variant::Array(array)
            }
            // Method arguments name their DataType (InputArguments and
            // OutputArguments properties).
            Variant::ExtensionObject(eo) => match eo.inner_as::<Argument>() {
                Some(a) => {
                    let mut a = a.clone();
                    a.data_type = self.node_to_gateway(&a.data_type);
                    Variant::ExtensionObject(ExtensionObject::from_message(a))
                }
                None => v.clone(),
            },
            other => other.clone(),
        }
    }

    /// A data value from the field server (Read, HistoryRead, data change
    /// notification) with its value remapped; status and timestamps kept.
    pub fn data_value_to_gateway(&self, mut d: DataValue) -> DataValue {
        d.value = d.value.take().map(|v| self.variant_to_gateway(&v));
        d
    }

    /// The history data of one HistoryRead result from the field server:
    /// the values of HistoryData and HistoryModifiedData, and the event
    /// fields of HistoryEvent, remapped like Read values. Anything else
    /// (a null result, a structure this stack cannot decode) passes
    /// unchanged.
    pub fn history_data_to_gateway(&self, data: ExtensionObject) -> ExtensionObject {
        let values = |list: Option<Vec<DataValue>>| {
            list.map(|l| {
                l.into_iter()
                    .map(|d| self.data_value_to_gateway(d))
                    .collect()
            })
        };
        // `inner_is` first: `into_inner_as` drops an object of another type.
        if data.inner_is::<HistoryData>() {
            return data
                .into_inner_as::<HistoryData>()
                .map_or_else(ExtensionObject::null, |d| {
                    ExtensionObject::from_message(HistoryData {
                        data_values: values(d.data_values),
                    })
                });
        }
        if data.inner_is::<HistoryModifiedData>() {
            return data.into_inner_as::<HistoryModifiedData>().map_or_else(
                ExtensionObject::null,
                |d| {
                    ExtensionObject::from_message(HistoryModifiedData {
                        data_values: values(d.data_values),
                        modification_infos: d.modification_infos,
                    })
                },
            );
        }
        if let Some(e) = data.inner_as::<HistoryEvent>() {
            let events = e.events.as_ref().map(|events| {
                events
                    .iter()
                    .map(|list| HistoryEventFieldList {
                        event_fields: list.event_fields.as_ref().map(|fields| {
                            fields.iter().map(|f| self.variant_to_gateway(f)).collect()
                        }),
                    })
                    .collect()
            });
            return ExtensionObject::from_message(HistoryEvent { events });
        }
        data
    }

    /// The fields of a live event from the field server, in the order of
    /// the filter's `select` clauses: remapped like Read values, except that
    /// the field server's Server object as SourceNode becomes the mount
    /// folder, so a client sees which field server raised the event.
    pub fn event_fields_to_gateway(
        &self,
        select: &[SimpleAttributeOperand],
        fields: &[Variant],
    ) -> Vec<Variant> {
        let source_node = [QualifiedName::new(0, "SourceNode")];
        let server: NodeId = ObjectId::Server.into();
        fields
            .iter()
            .enumerate()
            .map(|(i, field)| {
                let is_source = select
                    .get(i)
                    .is_some_and(|c| c.browse_path.as_deref() == Some(&source_node[..]));
                match field {
                    Variant::NodeId(id) if is_source && **id == server => {
                        Variant::from(self.mount_folder.clone())
                    }
                    _ => self.variant_to_gateway(field),
                }
            })
            .collect()
    }

    /// A Browse result reference: reference type, node id, browse name and
    /// type definition remapped.
    pub fn reference_to_gateway(&self, r: &ReferenceDescription) -> ReferenceDescription {
        let mut out = ReferenceDescription {
            reference_type_id: self.node_to_gateway(&r.reference_type_id),
            node_id: self.expanded_to_gateway(&r.node_id),
            browse_name: self.qname_to_gateway(&r.browse_name),
            type_definition: self.expanded_to_gateway(&r.type_definition),
            ..r.clone()
        };
        // The field server's Objects folder is the mount folder here, and
        // is named as the gateway names it (its BrowseName and DisplayName
        // as read from the gateway), so an inverse reference and a browse
        // path back up to it agree with the folder.
        if r.node_id.server_index == 0 && r.node_id.node_id == self.objects_folder {
            out.browse_name =
                opcua_types::QualifiedName::new(self.mount_folder.namespace, self.mount.as_str());
            out.display_name = opcua_types::LocalizedText::new("", self.mount.as_str());
        }
        out
    }

    /// A TranslateBrowsePathsToNodeIds result: each target id remapped.
    pub fn browse_path_result_to_gateway(&self, r: &BrowsePathResult) -> BrowsePathResult {
        let mut result = r.clone();
        if let Some(targets) = result.targets.as_mut() {
            for target in targets.iter_mut() {
                target.target_id = self.expanded_to_gateway(&target.target_id);
            }
        }
        result
    }

    /// A Call result: output arguments remapped.
    pub fn call_result_to_gateway(&self, r: &CallMethodResult) -> CallMethodResult {
        let mut result = r.clone();
        result.output_arguments = r
            .output_arguments
            .as_ref()
            .map(|args| args.iter().map(|a| self.variant_to_gateway(a)).collect());
        result
    }
}

/// Every element of an optional list (the shape OPC UA arrays decode to)
/// mapped with `f`; the first error fails the whole list.
pub(crate) fn map_list<T, U>(
    list: &Option<Vec<T>>,
    f: impl FnMut(&T) -> Result<U, StatusCode>,
) -> Result<Option<Vec<U>>, StatusCode> {
    list.as_ref().map(|l| l.iter().map(f).collect()).transpose()
}

/// Whether an expanded node id names its namespace by URI or lives on
/// another server; such ids are not remapped.
fn is_absolute(id: &ExpandedNodeId) -> bool {
    !id.namespace_uri.is_empty() || id.server_index != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use opcua_types::{
        Array, BrowsePathTarget, ByteString, Guid, Identifier, LocalizedText, NodeClass,
        ObjectTypeId, ReferenceTypeId, RelativePath, RelativePathElement, UAString,
        VariantScalarTypeId,
    };

    const UA: &str = "http://opcfoundation.org/UA/";

    fn ns(uris: &[&str]) -> Vec<String> {
        uris.iter().map(|s| s.to_string()).collect()
    }

    fn mount_folder() -> NodeId {
        NodeId::new(1, "mount/line1")
    }

    /// Table with line1's urn:a (3) and urn:b (4).
    fn table() -> NamespaceTable {
        let mut t = NamespaceTable::new(3);
        assert_eq!(t.allocate("line1", "urn:a").ok(), Some((3, true)));
        assert_eq!(t.allocate("line1", "urn:b").ok(), Some((4, true)));
        t
    }

    fn map(t: &NamespaceTable, field: &[&str]) -> SessionMap {
        match SessionMap::new("line1", t, &ns(field), mount_folder()) {
            Ok(m) => m,
            Err(e) => panic!("map: {e}"),
        }
    }

    #[test]
    fn allocation_is_idempotent() {
        let mut t = table();
        assert_eq!(t.allocate("line1", "urn:a").ok(), Some((3, false)));
        assert_eq!(t.allocate("line1", "urn:b").ok(), Some((4, false)));
        assert_eq!(t.entries().len(), 2);
        assert_eq!(t.index_of("line1", "urn:b"), Some(4));
        assert_eq!(t.index_of("line2", "urn:b"), None);
        assert_eq!(t.mount_of(3), Some("line1"));
        assert_eq!(t.mount_of(2), None);
        assert_eq!(t.mount_of(5), None);
        assert_eq!(t.published_uris().collect::<Vec<_>>(), ["urn:a", "urn:b"]);
    }

    #[test]
    fn table_is_stable_across_restart() {
        let mut t = table();
        assert!(t.allocate("line2", "urn:a").is_ok());
        assert!(t.allocate("line2", "urn:c").is_ok());
        let json = serde_json::to_string(t.entries()).unwrap_or_default();
        let entries: Vec<NamespaceEntry> = serde_json::from_str(&json).unwrap_or_default();
        let restored = NamespaceTable::from_entries(3, entries);
        assert_eq!(restored.as_ref().ok(), Some(&t));
        let mut restored = restored.unwrap_or_default();
        for (mount, uri, idx) in [
            ("line1", "urn:a", 3),
            ("line1", "urn:b", 4),
            ("line2", "urn:a", 5),
            ("line2", "urn:c", 6),
        ] {
            assert_eq!(restored.index_of(mount, uri), Some(idx));
            assert_eq!(restored.allocate(mount, uri).ok(), Some((idx, false)));
        }
        assert_eq!(restored.allocate("line3", "urn:d").ok(), Some((7, true)));
    }

    #[test]
    fn second_mount_with_same_uri_gets_prefixed_uri() {
        let mut t = table();
        assert_eq!(t.allocate("line2", "urn:a").ok(), Some((5, true)));
        assert_eq!(t.allocate("line2", "urn:c").ok(), Some((6, true)));
        assert_eq!(
            t.published_uris().collect::<Vec<_>>(),
            ["urn:a", "urn:b", "urn:uagate:field:line2:urn:a", "urn:c"]
        );
        assert_eq!(t.mount_of(5), Some("line2"));
        assert_eq!(t.index_of("line1", "urn:a"), Some(3));
        assert_eq!(t.index_of("line2", "urn:a"), Some(5));
    }

    #[test]
    fn field_uri_equal_to_a_published_uri_is_prefixed() {
        let mut t = NamespaceTable::new(3);
        assert!(t.allocate("line2", "urn:a").is_ok());
        assert!(t.allocate("line3", "urn:a").is_ok());
        // A field server whose URI happens to be line3's published URI.
        assert!(t.allocate("x", "urn:uagate:field:line3:urn:a").is_ok());
        let uris: Vec<_> = t.published_uris().collect();
        assert_eq!(
            uris,
            [
                "urn:a",
                "urn:uagate:field:line3:urn:a",
                "urn:uagate:field:x:urn:uagate:field:line3:urn:a"
            ]
        );
        let unique: HashSet<_> = uris.iter().collect();
        assert_eq!(unique.len(), uris.len());
    }

    #[test]
    fn from_entries_rejects_duplicates() {
        let e = |m: &str, f: &str, p: &str| NamespaceEntry {
            mount: m.into(),
            field_uri: f.into(),
            published_uri: p.into(),
        };
        let same_key = vec![e("l1", "urn:a", "urn:a"), e("l1", "urn:a", "urn:x")];
        assert!(matches!(
            NamespaceTable::from_entries(3, same_key),
            Err(RemapError::Duplicate(_))
        ));
        let same_published = vec![e("l1", "urn:a", "urn:a"), e("l2", "urn:b", "urn:a")];
        assert!(matches!(
            NamespaceTable::from_entries(3, same_published),
            Err(RemapError::Duplicate(_))
        ));
    }

    #[test]
    fn table_full() {
        let mut t = NamespaceTable::new(u16::MAX - 1);
        assert_eq!(t.allocate("l", "urn:a").ok(), Some((u16::MAX - 1, true)));
        assert_eq!(t.allocate("l", "urn:b").ok(), Some((u16::MAX, true)));
        assert!(matches!(
            t.allocate("l", "urn:c"),
            Err(RemapError::TableFull)
        ));
        assert_eq!(t.allocate("l", "urn:a").ok(), Some((u16::MAX - 1, false)));
        assert_eq!(t.entries().len(), 2);
        let entries = t.entries().to_vec();
        assert!(matches!(
            NamespaceTable::from_entries(u16::MAX, entries),
            Err(RemapError::TableFull)
        ));
    }

    #[test]
    fn session_map_requires_allocation() {
        let t = table();
        let r = SessionMap::new("line1", &t, &ns(&[UA, "urn:a", "urn:z"]), mount_folder());
        assert!(matches!(r, Err(RemapError::Unallocated(ref u)) if u == "urn:z"));
        // Allocated, but for another mount.
        let r = SessionMap::new("line2", &t, &ns(&[UA, "urn:a"]), mount_folder());
        assert!(matches!(r, Err(RemapError::Unallocated(_))));
    }

    #[test]
    fn field_order_differs_from_allocation_order() {
        let t = table();
        let first = map(&t, &[UA, "urn:a", "urn:b"]);
        let second = map(&t, &[UA, "urn:b", "urn:a"]);
        assert_eq!(first.ns_to_gateway(1), Some(3));
        assert_eq!(first.ns_to_gateway(2), Some(4));
        assert_eq!(second.ns_to_gateway(1), Some(4));
        assert_eq!(second.ns_to_gateway(2), Some(3));
        assert_eq!(second.ns_to_field(3), Some(2));
        assert_eq!(second.ns_to_field(4), Some(1));
        // The same field node seen through either server has the same gateway id.
        let via_first = first.node_to_gateway(&NodeId::new(1, "temp"));
        let via_second = second.node_to_gateway(&NodeId::new(2, "temp"));
        assert_eq!(via_first, NodeId::new(3, "temp"));
        assert_eq!(via_first, via_second);
        assert_eq!(second.node_to_field(&via_first), Ok(NodeId::new(2, "temp")));
    }

    #[test]
    fn namespace_zero_is_identity() {
        let t = table();
        let m = map(&t, &[UA, "urn:a"]);
        assert_eq!(m.ns_to_field(0), Some(0));
        assert_eq!(m.ns_to_gateway(0), Some(0));
        let server: NodeId = ObjectId::Server.into();
        assert_eq!(m.node_to_field(&server), Ok(server.clone()));
        assert_eq!(m.node_to_gateway(&server), server);
        assert_eq!(m.node_to_field(&NodeId::null()), Ok(NodeId::null()));
        let q = QualifiedName::new(0, "Default Binary");
        assert_eq!(m.qname_to_field(&q), Ok(q.clone()));
        assert_eq!(m.qname_to_gateway(&q), q);
    }

    #[test]
    fn objects_folder_maps_to_mount_folder() {
        let t = table();
        let m = map(&t, &[UA, "urn:a"]);
        let objects = NodeId::objects_folder_id();
        assert_eq!(m.node_to_gateway(&objects), mount_folder());
        assert_eq!(m.node_to_field(&mount_folder()), Ok(objects.clone()));
        let e = ExpandedNodeId::new(objects);
        assert_eq!(
            m.expanded_to_gateway(&e),
            ExpandedNodeId::new(mount_folder())
        );
        assert_eq!(m.mount_folder(), &mount_folder());
        assert_eq!(m.mount(), "line1");
    }

    #[test]
    fn unmappable_to_field_is_bad_node_id_unknown() {
        let mut t = table();
        assert!(t.allocate("line2", "urn:c").is_ok());
        assert!(t.allocate("line1", "urn:only-on-peer").is_ok());
        let m = map(&t, &[UA, "urn:a", "urn:b"]);
        let bad = Err(StatusCode::BadNodeIdUnknown);
        // Gateway-owned namespace (other than the mount folder).
        assert_eq!(m.node_to_field(&NodeId::new(1, "x")), bad);
        // Another mount's namespace.
        assert_eq!(m.node_to_field(&NodeId::new(5, 1u32)), bad);
        // This mount's namespace, absent on the connected server.
        assert_eq!(m.node_to_field(&NodeId::new(6, 1u32)), bad);
        // Unallocated.
        assert_eq!(m.node_to_field(&NodeId::new(900, 1u32)), bad);
        assert_eq!(
            m.qname_to_field(&QualifiedName::new(2, "x")),
            Err(StatusCode::BadNodeIdUnknown)
        );
        assert_eq!(
            m.variant_to_field(&Variant::from(vec![
                NodeId::new(3, 1u32),
                NodeId::new(2, 1u32)
            ])),
            Err(StatusCode::BadNodeIdUnknown)
        );
        let r = ReadValueId {
            node_id: NodeId::new(2, "y"),
            ..Default::default()
        };
        assert_eq!(
            m.read_value_id_to_field(&r),
            Err(StatusCode::BadNodeIdUnknown)
        );
    }

    #[test]
    fn unknown_field_namespace_back_to_gateway_is_null_and_counted() {
        let t = table();
        let m = map(&t, &[UA, "urn:a"]);
        assert_eq!(m.unknown_namespace_hits(), 0);
        assert_eq!(m.node_to_gateway(&NodeId::new(7, 1u32)), NodeId::null());
        assert_eq!(
            m.qname_to_gateway(&QualifiedName::new(7, "n")),
            QualifiedName::new(0, "n")
        );
        assert_eq!(
            m.expanded_to_gateway(&ExpandedNodeId::new(NodeId::new(7, 1u32))),
            ExpandedNodeId::null()
        );
        assert_eq!(m.unknown_namespace_hits(), 3);
    }

    #[test]
    fn round_trip_all_identifier_kinds() {
        let t = table();
        let m = map(&t, &[UA, "urn:b", "urn:a"]);
        let identifiers: Vec<Identifier> = vec![
            Identifier::Numeric(42),
            Identifier::String(UAString::from("Line/Temp")),
            Identifier::Guid(Guid::from_bytes([7; 16])),
            Identifier::ByteString(ByteString::from(vec![1u8, 2, 3])),
        ];
        for identifier in identifiers {
            for gateway_ns in [3u16, 4] {
                let g = NodeId {
                    namespace: gateway_ns,
                    identifier: identifier.clone(),
                };
                let f = m.node_to_field(&g);
                let Ok(f) = f else { panic!("{g} unmappable") };
                assert_ne!(f.namespace, gateway_ns);
                assert_eq!(f.identifier, identifier);
                assert_eq!(m.node_to_gateway(&f), g);
                let e = ExpandedNodeId::new(g.clone());
                let ef = m.expanded_to_field(&e);
                assert_eq!(ef.as_ref().map(|x| &x.node_id), Ok(&f));
                assert_eq!(ef.map(|x| m.expanded_to_gateway(&x)), Ok(e));
            }
        }
        assert_eq!(m.unknown_namespace_hits(), 0);
    }

    #[test]
    fn absolute_expanded_ids_pass_unchanged() {
        let t = table();
        let m = map(&t, &[UA, "urn:a"]);
        let with_uri = ExpandedNodeId {
            node_id: NodeId::new(9, 1u32),
            namespace_uri: UAString::from("urn:elsewhere"),
            server_index: 0,
        };
        let remote = ExpandedNodeId {
            node_id: NodeId::new(9, 1u32),
            namespace_uri: UAString::null(),
            server_index: 2,
        };
        for e in [with_uri, remote] {
            assert_eq!(m.expanded_to_field(&e), Ok(e.clone()));
            assert_eq!(m.expanded_to_gateway(&e), e);
        }
    }

    #[test]
    fn method_arguments_have_their_data_type_remapped() {
        let t = table();
        let m = map(&t, &[UA, "urn:b", "urn:a"]);
        let arg = |ns: u16| Argument {
            name: "speed".into(),
            data_type: NodeId::new(ns, 3001u32),
            value_rank: -1,
            array_dimensions: None,
            description: "".into(),
        };
        let field = Variant::ExtensionObject(ExtensionObject::from_message(arg(1)));
        let gw = m.variant_to_gateway(&field);
        let Variant::ExtensionObject(eo) = &gw else {
            panic!("{gw:?}")
        };
        assert_eq!(
            eo.inner_as::<Argument>().map(|a| a.data_type.clone()),
            Some(NodeId::new(4, 3001u32))
        );
        assert_eq!(m.variant_to_field(&gw), Ok(field));
        // Standard types stay in namespace 0; other structures pass through.
        let std_arg = Variant::ExtensionObject(ExtensionObject::from_message(arg(0)));
        assert_eq!(m.variant_to_gateway(&std_arg), std_arg);
        let range = Variant::ExtensionObject(ExtensionObject::from_message(opcua_types::Range {
            low: 0.0,
            high: 1.0,
        }));
        assert_eq!(m.variant_to_gateway(&range), range);
    }

    #[test]
    fn variant_arrays_keep_dimensions() {
        let t = table();
        let m = map(&t, &[UA, "urn:b", "urn:a"]);
        let g = Variant::from((
            VariantScalarTypeId::NodeId,
            vec![
                NodeId::new(3, 1u32),
                NodeId::new(4, 2u32),
                NodeId::new(0, 3u32),
                NodeId::new(3, "x"),
            ],
            vec![2u32, 2],
        ));
        let f = m.variant_to_field(&g);
        let expected_f = Variant::from((
            VariantScalarTypeId::NodeId,
            vec![
                NodeId::new(2, 1u32),
                NodeId::new(1, 2u32),
                NodeId::new(0, 3u32),
                NodeId::new(2, "x"),
            ],
            vec![2u32, 2],
        ));
        assert_eq!(f, Ok(expected_f.clone()));
        assert_eq!(m.variant_to_gateway(&expected_f), g);

        let names = Variant::from(vec![QualifiedName::new(3, "a"), QualifiedName::new(0, "b")]);
        let back = m.variant_to_field(&names).map(|v| m.variant_to_gateway(&v));
        assert_eq!(back, Ok(names));

        // Other values pass unchanged.
        let other = Variant::from(vec![1i32, 2, 3]);
        assert_eq!(m.variant_to_field(&other), Ok(other.clone()));
        assert_eq!(m.variant_to_gateway(&other), other);
        assert_eq!(m.variant_to_gateway(&Variant::Empty), Variant::Empty);
    }

    #[test]
    fn nested_variants_are_remapped_and_bounded() {
        let t = table();
        let m = map(&t, &[UA, "urn:b", "urn:a"]);
        let inner = |ns: u16| Variant::Variant(Box::new(Variant::from(NodeId::new(ns, 5u32))));
        let array = |ns: u16| {
            let values = vec![inner(ns), Variant::Variant(Box::new(Variant::from(1u8)))];
            match Array::new(VariantScalarTypeId::Variant, values) {
                Ok(a) => Variant::Array(Box::new(a)),
                Err(e) => panic!("array: {e:?}"),
            }
        };
        assert_eq!(m.variant_to_field(&array(3)), Ok(array(2)));
        assert_eq!(m.variant_to_gateway(&array(2)), array(3));

        let mut deep = Variant::from(NodeId::new(3, 1u32));
        for _ in 0..=MAX_VARIANT_DEPTH {
            deep = Variant::Variant(Box::new(deep));
        }
        assert_eq!(
            m.variant_to_field(&deep),
            Err(StatusCode::BadEncodingLimitsExceeded)
        );
        let _ = m.variant_to_gateway(&deep);
    }

    #[test]
    fn read_write_history_items() {
        let t = table();
        let m = map(&t, &[UA, "urn:b", "urn:a"]);
        let r = ReadValueId {
            node_id: NodeId::new(3, "v"),
            attribute_id: 13,
            data_encoding: QualifiedName::new(0, "Default Binary"),
            ..Default::default()
        };
        let rf = m.read_value_id_to_field(&r);
        assert_eq!(rf.as_ref().map(|x| &x.node_id), Ok(&NodeId::new(2, "v")));
        assert_eq!(rf.map(|x| x.attribute_id), Ok(13));

        let w = WriteValue {
            node_id: NodeId::new(4, "w"),
            attribute_id: 13,
            value: DataValue::new_now(Variant::from(NodeId::new(3, 9u32))),
            ..Default::default()
        };
        let wf = m.write_value_to_field(&w);
        assert_eq!(wf.as_ref().map(|x| &x.node_id), Ok(&NodeId::new(1, "w")));
        assert_eq!(
            wf.as_ref().map(|x| x.value.value.clone()),
            Ok(Some(Variant::from(NodeId::new(2, 9u32))))
        );
        assert_eq!(
            wf.map(|x| x.value.source_timestamp),
            Ok(w.value.source_timestamp)
        );

        let h = HistoryReadValueId {
            node_id: NodeId::new(3, "h"),
            ..Default::default()
        };
        assert_eq!(
            m.history_read_value_id_to_field(&h).map(|x| x.node_id),
            Ok(NodeId::new(2, "h"))
        );

        let d = DataValue::new_now(Variant::from(QualifiedName::new(1, "q")));
        let dg = m.data_value_to_gateway(d.clone());
        assert_eq!(dg.value, Some(Variant::from(QualifiedName::new(4, "q"))));
        assert_eq!(dg.source_timestamp, d.source_timestamp);
        assert_eq!(dg.status, d.status);
    }

    #[test]
    fn browse_description_to_field() {
        let t = table();
        let m = map(&t, &[UA, "urn:a"]);
        let b = BrowseDescription {
            node_id: mount_folder(),
            reference_type_id: ReferenceTypeId::HierarchicalReferences.into(),
            include_subtypes: true,
            node_class_mask: 3,
            result_mask: 63,
            ..Default::default()
        };
        let bf = m.browse_description_to_field(&b);
        let expected = BrowseDescription {
            node_id: NodeId::objects_folder_id(),
            ..b.clone()
        };
        assert_eq!(bf, Ok(expected));
        let custom_ref = BrowseDescription {
            reference_type_id: NodeId::new(3, 7u32),
            ..b.clone()
        };
        assert_eq!(
            m.browse_description_to_field(&custom_ref)
                .map(|x| x.reference_type_id),
            Ok(NodeId::new(1, 7u32))
        );
    }

    #[test]
    fn browse_path_and_result() {
        let t = table();
        let m = map(&t, &[UA, "urn:b", "urn:a"]);
        let p = BrowsePath {
            starting_node: mount_folder(),
            relative_path: RelativePath {
                elements: Some(vec![
                    RelativePathElement {
                        reference_type_id: ReferenceTypeId::Organizes.into(),
                        is_inverse: false,
                        include_subtypes: true,
                        target_name: QualifiedName::new(3, "Machine"),
                    },
                    RelativePathElement {
                        reference_type_id: NodeId::new(4, 100u32),
                        is_inverse: false,
                        include_subtypes: false,
                        target_name: QualifiedName::new(4, "Temp"),
                    },
                ]),
            },
        };
        let pf = m.browse_path_to_field(&p);
        let Ok(pf) = pf else {
            panic!("unmappable path")
        };
        assert_eq!(pf.starting_node, NodeId::objects_folder_id());
        let elements = pf.relative_path.elements.unwrap_or_default();
        assert_eq!(elements.len(), 2);
        assert_eq!(
            elements[0].reference_type_id,
            NodeId::from(ReferenceTypeId::Organizes)
        );
        assert_eq!(elements[0].target_name, QualifiedName::new(2, "Machine"));
        assert!(elements[0].include_subtypes);
        assert_eq!(elements[1].reference_type_id, NodeId::new(1, 100u32));
        assert_eq!(elements[1].target_name, QualifiedName::new(1, "Temp"));

        let unknown_name = BrowsePath {
            starting_node: mount_folder(),
            relative_path: RelativePath {
                elements: Some(vec![RelativePathElement {
                    target_name: QualifiedName::new(8, "x"),
                    ..Default::default()
                }]),
            },
        };
        assert_eq!(
            m.browse_path_to_field(&unknown_name),
            Err(StatusCode::BadNodeIdUnknown)
        );

        // Back up to the mount folder, by the name the gateway gives it:
        // the field server's Objects folder.
        let up = BrowsePath {
            starting_node: NodeId::new(4, "Machine"),
            relative_path: RelativePath {
                elements: Some(vec![RelativePathElement {
                    reference_type_id: ReferenceTypeId::Organizes.into(),
                    is_inverse: true,
                    include_subtypes: true,
                    target_name: QualifiedName::new(mount_folder().namespace, "line1"),
                }]),
            },
        };
        let Ok(upf) = m.browse_path_to_field(&up) else {
            panic!("the way up is not mapped")
        };
        let elements = upf.relative_path.elements.unwrap_or_default();
        assert_eq!(elements[0].target_name, QualifiedName::new(0, "Objects"));
        assert!(elements[0].is_inverse);

        let r = BrowsePathResult {
            status_code: StatusCode::Good,
            targets: Some(vec![
                BrowsePathTarget {
                    target_id: ExpandedNodeId::new(NodeId::new(1, "Temp")),
                    remaining_path_index: u32::MAX,
                },
                BrowsePathTarget {
                    target_id: ExpandedNodeId::new(NodeId::objects_folder_id()),
                    remaining_path_index: 1,
                },
            ]),
        };
        let rg = m.browse_path_result_to_gateway(&r);
        assert_eq!(rg.status_code, StatusCode::Good);
        let targets = rg.targets.unwrap_or_default();
        assert_eq!(
            targets[0].target_id,
            ExpandedNodeId::new(NodeId::new(4, "Temp"))
        );
        assert_eq!(targets[0].remaining_path_index, u32::MAX);
        assert_eq!(targets[1].target_id, ExpandedNodeId::new(mount_folder()));
    }

    #[test]
    fn reference_description_to_gateway() {
        let t = table();
        let m = map(&t, &[UA, "urn:b", "urn:a"]);
        let r = ReferenceDescription {
            reference_type_id: NodeId::new(1, 55u32),
            is_forward: true,
            node_id: ExpandedNodeId::new(NodeId::new(2, "Machine")),
            browse_name: QualifiedName::new(2, "Machine"),
            display_name: LocalizedText::new("en", "Machine"),
            node_class: NodeClass::Object,
            type_definition: ExpandedNodeId::new(NodeId::new(1, 1000u32)),
        };
        let g = m.reference_to_gateway(&r);
        assert_eq!(g.reference_type_id, NodeId::new(4, 55u32));
        assert_eq!(g.node_id, ExpandedNodeId::new(NodeId::new(3, "Machine")));
        assert_eq!(g.browse_name, QualifiedName::new(3, "Machine"));
        assert_eq!(
            g.type_definition,
            ExpandedNodeId::new(NodeId::new(4, 1000u32))
        );
        assert_eq!(g.display_name, r.display_name);
        assert_eq!(g.node_class, NodeClass::Object);
        assert!(g.is_forward);

        // Inverse reference to the field Objects folder.
        let up = ReferenceDescription {
            reference_type_id: ReferenceTypeId::Organizes.into(),
            is_forward: false,
            node_id: ExpandedNodeId::new(NodeId::objects_folder_id()),
            browse_name: QualifiedName::new(0, "Objects"),
            type_definition: ExpandedNodeId::new(NodeId::from(
                opcua_types::ObjectTypeId::FolderType,
            )),
            ..r
        };
        let g = m.reference_to_gateway(&up);
        assert_eq!(g.node_id, ExpandedNodeId::new(mount_folder()));
        assert_eq!(
            g.reference_type_id,
            NodeId::from(ReferenceTypeId::Organizes)
        );
        assert_eq!(g.type_definition, up.type_definition);
    }

    #[test]
    fn call_request_and_result() {
        let t = table();
        let m = map(&t, &[UA, "urn:b", "urn:a"]);
        let c = CallMethodRequest {
            object_id: NodeId::new(3, "Machine"),
            method_id: NodeId::new(4, "Machine.Start"),
            input_arguments: Some(vec![
                Variant::from(NodeId::new(3, "Recipe")),
                Variant::from(12.5f64),
                Variant::from(QualifiedName::new(4, "Mode")),
            ]),
        };
        let cf = m.call_to_field(&c);
        let expected = CallMethodRequest {
            object_id: NodeId::new(2, "Machine"),
            method_id: NodeId::new(1, "Machine.Start"),
            input_arguments: Some(vec![
                Variant::from(NodeId::new(2, "Recipe")),
                Variant::from(12.5f64),
                Variant::from(QualifiedName::new(1, "Mode")),
            ]),
        };
        assert_eq!(cf, Ok(expected));
        let no_args = CallMethodRequest {
            input_arguments: None,
            ..c.clone()
        };
        assert_eq!(
            m.call_to_field(&no_args).map(|x| x.input_arguments),
            Ok(None)
        );
        let bad_arg = CallMethodRequest {
            input_arguments: Some(vec![Variant::from(NodeId::new(1, "gw"))]),
            ..c
        };
        assert_eq!(m.call_to_field(&bad_arg), Err(StatusCode::BadNodeIdUnknown));

        let r = CallMethodResult {
            status_code: StatusCode::Good,
            input_argument_results: Some(vec![StatusCode::Good]),
            input_argument_diagnostic_infos: None,
            output_arguments: Some(vec![
                Variant::from(ExpandedNodeId::new(NodeId::new(2, "Job"))),
                Variant::from("done"),
            ]),
        };
        let rg = m.call_result_to_gateway(&r);
        assert_eq!(
            rg.output_arguments,
            Some(vec![
                Variant::from(ExpandedNodeId::new(NodeId::new(3, "Job"))),
                Variant::from("done"),
            ])
        );
        assert_eq!(rg.input_argument_results, r.input_argument_results);
        assert_eq!(rg.status_code, StatusCode::Good);
    }

    /// The event filter of a HistoryRead of events reaches the field
    /// server with its type definitions, browse paths and where-clause
    /// operands in the field server's namespaces (here in the opposite
    /// order to the gateway's, so every remapped index changes).
    #[test]
    fn event_filter_to_field() {
        use opcua_types::{ElementOperand, FilterOperator};
        let t = table();
        let m = map(&t, &[UA, "urn:b", "urn:a"]);
        let base_event: NodeId = ObjectTypeId::BaseEventType.into();
        let select = |ty: NodeId, path: Vec<QualifiedName>| SimpleAttributeOperand {
            type_definition_id: ty,
            browse_path: Some(path),
            attribute_id: 13,
            index_range: Default::default(),
        };
        let filter = EventFilter {
            select_clauses: Some(vec![
                select(base_event.clone(), vec![QualifiedName::new(0, "EventType")]),
                select(
                    NodeId::new(4, "PumpEvent"),
                    vec![QualifiedName::new(4, "Pressure")],
                ),
            ]),
            where_clause: ContentFilter {
                elements: Some(vec![
                    ContentFilterElement {
                        filter_operator: FilterOperator::OfType,
                        filter_operands: Some(vec![ExtensionObject::from_message(
                            LiteralOperand {
                                value: Variant::from(NodeId::new(3, "AlarmType")),
                            },
                        )]),
                    },
                    ContentFilterElement {
                        filter_operator: FilterOperator::Equals,
                        filter_operands: Some(vec![
                            ExtensionObject::from_message(AttributeOperand {
                                node_id: NodeId::new(4, "Pump"),
                                alias: UAString::null(),
                                browse_path: RelativePath {
                                    elements: Some(vec![RelativePathElement {
                                        reference_type_id: ReferenceTypeId::HasComponent.into(),
                                        is_inverse: false,
                                        include_subtypes: true,
                                        target_name: QualifiedName::new(3, "Speed"),
                                    }]),
                                },
                                attribute_id: 13,
                                index_range: Default::default(),
                            }),
                            ExtensionObject::from_message(ElementOperand { index: 0 }),
                        ]),
                    },
                ]),
            },
        };
        let f = m.event_filter_to_field(&filter).unwrap();
        let clauses = f.select_clauses.unwrap();
        assert_eq!(
            clauses[0],
            select(base_event, vec![QualifiedName::new(0, "EventType")])
        );
        assert_eq!(
            clauses[1],
            select(
                NodeId::new(1, "PumpEvent"),
                vec![QualifiedName::new(1, "Pressure")]
            )
        );
        let elements = f.where_clause.elements.unwrap();
        let literal = elements[0].filter_operands.as_ref().unwrap()[0]
            .inner_as::<LiteralOperand>()
            .unwrap();
        assert_eq!(literal.value, Variant::from(NodeId::new(2, "AlarmType")));
        assert_eq!(elements[1].filter_operator, FilterOperator::Equals);
        let operands = elements[1].filter_operands.as_ref().unwrap();
        let attr = operands[0].inner_as::<AttributeOperand>().unwrap();
        assert_eq!(attr.node_id, NodeId::new(1, "Pump"));
        let step = &attr.browse_path.elements.as_ref().unwrap()[0];
        assert_eq!(step.target_name, QualifiedName::new(2, "Speed"));
        assert_eq!(
            step.reference_type_id,
            NodeId::from(ReferenceTypeId::HasComponent)
        );
        assert_eq!(
            operands[1].inner_as::<ElementOperand>(),
            Some(&ElementOperand { index: 0 })
        );

        // A filter naming a namespace that is not this field server's.
        let mut foreign = filter.clone();
        foreign.select_clauses = Some(vec![select(
            NodeId::new(2, "GatewayType"),
            vec![QualifiedName::new(0, "Message")],
        )]);
        assert_eq!(
            m.event_filter_to_field(&foreign),
            Err(StatusCode::BadNodeIdUnknown)
        );
        let empty = EventFilter::default();
        assert_eq!(m.event_filter_to_field(&empty), Ok(empty));
    }

    /// HistoryRead results come back with their values and event fields in
    /// the gateway's namespaces; other history data passes unchanged.
    #[test]
    fn history_data_to_gateway() {
        use opcua_types::ModificationInfo;
        let t = table();
        let m = map(&t, &[UA, "urn:b", "urn:a"]);
        let values = vec![
            DataValue::value_only(NodeId::new(1, "Pump")),
            DataValue::value_only(1.5f64),
        ];
        let mapped = vec![
            DataValue::value_only(NodeId::new(4, "Pump")),
            DataValue::value_only(1.5f64),
        ];
        let raw = m.history_data_to_gateway(ExtensionObject::from_message(HistoryData {
            data_values: Some(values.clone()),
        }));
        assert_eq!(
            raw.inner_as::<HistoryData>().unwrap().data_values,
            Some(mapped.clone())
        );
        let infos = Some(vec![ModificationInfo::default()]);
        let modified =
            m.history_data_to_gateway(ExtensionObject::from_message(HistoryModifiedData {
                data_values: Some(values),
                modification_infos: infos.clone(),
            }));
        let modified = modified.inner_as::<HistoryModifiedData>().unwrap();
        assert_eq!(modified.data_values, Some(mapped));
        assert_eq!(modified.modification_infos, infos);
        let events = m.history_data_to_gateway(ExtensionObject::from_message(HistoryEvent {
            events: Some(vec![HistoryEventFieldList {
                event_fields: Some(vec![
                    Variant::from(NodeId::new(2, "AlarmType")),
                    Variant::from("tank high"),
                ]),
            }]),
        }));
        let events = events.inner_as::<HistoryEvent>().unwrap();
        assert_eq!(
            events.events.as_ref().unwrap()[0].event_fields,
            Some(vec![
                Variant::from(NodeId::new(3, "AlarmType")),
                Variant::from("tank high")
            ])
        );
        assert!(m.history_data_to_gateway(ExtensionObject::null()).is_null());
    }

    #[test]
    fn notifiers_map_to_the_field_server_object() {
        let t = table();
        let m = map(&t, &[UA, "urn:b", "urn:a"]);
        let server: NodeId = ObjectId::Server.into();
        assert_eq!(m.notifier_to_field(&mount_folder()), Ok(server.clone()));
        assert_eq!(m.notifier_to_field(&server), Ok(server));
        assert_eq!(
            m.notifier_to_field(&NodeId::new(4, "Pump")),
            Ok(NodeId::new(1, "Pump"))
        );
        assert_eq!(
            m.notifier_to_field(&NodeId::new(2, "Gateway")),
            Err(StatusCode::BadNodeIdUnknown)
        );
    }

    #[test]
    fn live_event_fields_name_the_mount_for_the_field_server_object() {
        let t = table();
        let m = map(&t, &[UA, "urn:b", "urn:a"]);
        let clause = |name: &str| SimpleAttributeOperand {
            type_definition_id: ObjectTypeId::BaseEventType.into(),
            browse_path: Some(vec![QualifiedName::new(0, name)]),
            attribute_id: 13,
            index_range: Default::default(),
        };
        let select = [clause("SourceNode"), clause("EventType"), clause("Message")];
        let server: NodeId = ObjectId::Server.into();
        let got = m.event_fields_to_gateway(
            &select,
            &[
                Variant::from(server.clone()),
                Variant::from(NodeId::new(1, "PumpEvent")),
                Variant::from("high"),
            ],
        );
        assert_eq!(
            got,
            vec![
                Variant::from(mount_folder()),
                Variant::from(NodeId::new(4, "PumpEvent")),
                Variant::from("high"),
            ]
        );
        // Another source stays itself; the Server object elsewhere is not a source.
        let got = m.event_fields_to_gateway(
            &select,
            &[
                Variant::from(NodeId::new(2, "Plant")),
                Variant::from(server.clone()),
            ],
        );
        assert_eq!(
            got,
            vec![
                Variant::from(NodeId::new(3, "Plant")),
                Variant::from(server)
            ]
        );
    }
}
