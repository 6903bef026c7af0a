//! The aggregated address space: field connections mounted under
//! `Objects/<name>`, and the services that route operations on mounted
//! nodes to them.
//!
//! A node belongs to a mount when its namespace index was allocated to that
//! mount ([`NamespaceTable`]) or when it is the mount folder itself. The
//! services (`routed.rs`) check a request as a whole, then run its local
//! operations on the local space and each mount's operations through the
//! mount's active field session (see `uagate_field::proxy`), concurrently,
//! and put the results back in request order (`split.rs`).
//!
//! While a field connection is (re)connecting, its operations wait for it up
//! to the request's deadline (90 % of the client's timeout hint, 10 s when
//! the client gave none), then fail with `BadNoCommunication` (values) or
//! `BadServerNotConnected` (everything else).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use opcua_types::{
    BrowseResult, ByteString, DataValue, EventFilter, NodeId, ReadValueId, RequestHeader,
    SimpleAttributeOperand, StatusCode, Variant,
};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use uagate_field::proxy::Ctx;
use uagate_field::remap::NamespaceTable;
use uagate_field::{EventKey, FieldConnection, ItemKey, Taken};
use uagate_space::LocalSpace;
use uagate_subs::EventFields;

/// How long closing a field connection may take (its sessions' CloseSession
/// included) when it is replaced or removed, or at shutdown; past it the
/// close goes on in the background.
pub(crate) const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Settings key of the persisted namespace allocation (JSON list of
/// `NamespaceEntry`), so gateway namespace indexes survive restarts;
/// node-local, never replicated (each appliance allocates from its own
/// field sessions).
pub const NAMESPACES_SETTING: &str = uagate_store::FIELD_NAMESPACES_SETTING;

/// First gateway namespace index given to field namespaces (0 = OPC UA,
/// 1 = our application URI, 2 = the gateway namespace).
pub const FIRST_FIELD_NS: u16 = 3;

/// The mounted field connections of a running gateway: one set, replaced
/// as a whole when a configuration change adds, removes or changes a field
/// connection (see [`crate::Engine::remount`]).
pub struct Fields {
    /// One per mount, index = mount index within this set.
    pub conns: Vec<Arc<FieldConnection>>,
    /// The continuation-point tag of each mount (same order as `conns`):
    /// given to a connection when it starts and never reused by another
    /// one while the gateway runs, so a continuation point from before a
    /// change never reaches another field session.
    pub tags: Vec<u16>,
    /// Stops the task that mirrors each connection's status onto its
    /// status nodes (same order as `conns`).
    pub stops: Vec<CancellationToken>,
    /// Namespace allocation shared with the connections.
    pub table: Arc<Mutex<NamespaceTable>>,
}

impl Default for Fields {
    fn default() -> Fields {
        Fields {
            conns: Vec::new(),
            tags: Vec::new(),
            stops: Vec::new(),
            table: Arc::new(Mutex::new(NamespaceTable::new(FIRST_FIELD_NS))),
        }
    }
}

impl Fields {
    /// The continuation-point tag of mount `m`.
    pub fn tag(&self, m: usize) -> u16 {
        self.tags.get(m).copied().unwrap_or(u16::MAX)
    }

    /// The mount whose continuation points carry `tag`, if it is still
    /// mounted (a continuation point of a removed or changed connection
    /// has none).
    pub fn mount_of_tag(&self, tag: u16) -> Option<usize> {
        self.tags.iter().position(|t| *t == tag)
    }

    /// Mount index of a mount name.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.conns.iter().position(|c| c.name() == name)
    }

    /// The mount a node belongs to, if any.
    pub fn route(&self, node: &NodeId) -> Option<usize> {
        if node.namespace >= FIRST_FIELD_NS {
            let table = self.table.lock();
            let name = table.mount_of(node.namespace)?;
            return self.index_of(name);
        }
        if node.namespace == uagate_space::GATEWAY_NS {
            return self.conns.iter().position(|c| c.mount_folder() == node);
        }
        None
    }

    /// True when `node` is the folder of mount `m`.
    pub fn is_mount_folder(&self, m: usize, node: &NodeId) -> bool {
        self.conns.get(m).is_some_and(|c| c.mount_folder() == node)
    }

    /// The shared-item key of a northbound data item on a mounted node.
    pub fn item_key(rvi: &ReadValueId, demand: &uagate_subs::ItemDemand) -> ItemKey {
        ItemKey::new(
            rvi.node_id.clone(),
            rvi.attribute_id,
            rvi.index_range.to_string(),
            demand.sampling_ms,
            demand.trigger,
            demand.deadband,
        )
    }

    /// Replaces every mount's demand for shared items from all sessions'
    /// data items (called after item services and once a second).
    pub fn set_demand(&self, items: impl Iterator<Item = (ReadValueId, uagate_subs::ItemDemand)>) {
        let mut per_mount: Vec<HashMap<ItemKey, usize>> = vec![HashMap::new(); self.conns.len()];
        for (rvi, demand) in items {
            if let Some(m) = self.route(&rvi.node_id) {
                if self.is_mount_folder(m, &rvi.node_id) {
                    continue;
                }
                *per_mount[m]
                    .entry(Self::item_key(&rvi, &demand))
                    .or_default() += 1;
            }
        }
        for (conn, demand) in self.conns.iter().zip(per_mount) {
            conn.set_demand(demand);
        }
    }
}

/// An event a field connection received for the northbound event items of
/// `key`; its fields are in the order of the key's select clauses.
pub struct FieldEvent {
    /// The items it is for: notifier node and filter.
    pub key: EventKey,
    fields: Vec<Variant>,
}

impl FieldEvent {
    /// An event of the shared item of `key` (fields in the order of its
    /// select clauses).
    pub fn new(key: EventKey, fields: Vec<Variant>) -> FieldEvent {
        FieldEvent { key, fields }
    }
}

impl EventFields for FieldEvent {
    /// The field of the southbound select clause equal to `operand` (the
    /// northbound items of this key have the same select clauses).
    fn field(&self, operand: &SimpleAttributeOperand) -> Variant {
        self.key
            .filter
            .select_clauses
            .as_ref()
            .and_then(|clauses| clauses.iter().position(|c| c == operand))
            .and_then(|i| self.fields.get(i).cloned())
            .unwrap_or(Variant::Empty)
    }
}

impl Fields {
    /// Replaces every mount's demand for shared event items from all
    /// sessions' event items (notifier node, filter); called with
    /// [`Fields::set_demand`]. The gateway's Server object is the root of
    /// the notifier hierarchy: its event items want the events of every
    /// field server; a mount folder's want those of its field server.
    pub fn set_event_demand(&self, items: impl Iterator<Item = (NodeId, EventFilter)>) {
        let mut per_mount: Vec<Vec<EventKey>> = vec![Vec::new(); self.conns.len()];
        for (node, filter) in items {
            for m in self.event_mounts(&node) {
                if let Some(keys) = per_mount.get_mut(m) {
                    keys.push(EventKey::new(node.clone(), filter.clone()));
                }
            }
        }
        for (conn, keys) in self.conns.iter().zip(per_mount) {
            conn.set_event_demand(keys);
        }
    }

    /// The mounts whose events an event item on `node` receives: every
    /// mount for the gateway's Server object (the root of the notifier
    /// hierarchy), the node's mount for a mount folder or mounted node,
    /// none for a local node.
    pub fn event_mounts(&self, node: &NodeId) -> Vec<usize> {
        let server = NodeId::from(opcua_types::ObjectId::Server);
        if *node == server {
            return (0..self.conns.len()).collect();
        }
        self.route(node).into_iter().collect()
    }

    /// The events and refresh markers every field connection received
    /// since the last call.
    pub fn take_events(&self) -> Vec<Taken> {
        self.conns.iter().flat_map(|c| c.take_events()).collect()
    }
}

/// The deadline of a request's southbound work.
pub fn deadline(header: &RequestHeader) -> Instant {
    let hint = match header.timeout_hint {
        0 => Duration::from_secs(10),
        ms => Duration::from_millis(u64::from(ms)).mul_f64(0.9),
    };
    Instant::now() + hint
}

/// The southbound context of a request: its deadline and the diagnostics
/// it asked for.
pub(crate) fn ctx_of(header: &RequestHeader) -> Ctx {
    Ctx {
        deadline: deadline(header),
        diagnostics: header.return_diagnostics,
    }
}

/// A DataValue carrying only a status.
pub fn bad_value(st: StatusCode) -> DataValue {
    DataValue {
        status: Some(st),
        ..Default::default()
    }
}

/// A failed browse result.
pub fn bad_browse(st: StatusCode) -> BrowseResult {
    BrowseResult {
        status_code: st,
        continuation_point: ByteString::null(),
        references: None,
    }
}

/// Keeps the persisted table and the local NamespaceArray in step: adds the
/// published URIs the space does not have yet (in table order).
pub fn sync_namespaces(space: &mut LocalSpace, table: &NamespaceTable) {
    let have = space.namespace_array().len();
    let first = usize::from(table.first_index());
    for (pos, uri) in table.published_uris().enumerate() {
        if first + pos >= have {
            if let Err(e) = space.add_namespace(uri) {
                tracing::warn!(error = %e, "cannot add field namespace");
            }
        }
    }
}

/// The field connection settings of one `[[field_servers]]` entry.
pub fn settings(fs: &uagate_config::FieldServer) -> uagate_field::FieldSettings {
    use uagate_config::{BackoffStrategy, FieldIdentity, FieldRedundancy, SecurityMode};
    use uagate_field::policy::{Backoff, ReconnectPolicy};
    use uagate_field::{Handling, Identity};
    let r = &fs.reconnect;
    let o = &fs.operation_limits;
    uagate_field::FieldSettings {
        name: fs.name.clone(),
        servers: fs
            .endpoints
            .iter()
            .map(|e| {
                std::iter::once(e.url.clone())
                    .chain(e.alternates.iter().cloned())
                    .collect()
            })
            .collect(),
        security_policy_uri: crate::endpoints::security_policy(&fs.security_policy)
            .to_uri()
            .to_string(),
        security_mode: match fs.security_mode {
            SecurityMode::None => opcua_types::MessageSecurityMode::None,
            SecurityMode::Sign => opcua_types::MessageSecurityMode::Sign,
            SecurityMode::SignAndEncrypt => opcua_types::MessageSecurityMode::SignAndEncrypt,
        },
        identity: match &fs.identity {
            FieldIdentity::Anonymous => Identity::Anonymous,
            FieldIdentity::Username { username, password } => Identity::UserName {
                user: username.clone(),
                password: password.clone(),
            },
            FieldIdentity::Certificate {
                certificate,
                private_key,
            } => Identity::Certificate {
                cert: certificate.clone(),
                key: private_key.clone(),
            },
        },
        handling: match fs.redundancy {
            FieldRedundancy::None => Handling::None,
            FieldRedundancy::Cold => Handling::Cold,
            FieldRedundancy::Warm => Handling::Warm,
            FieldRedundancy::Hot => Handling::Hot,
            FieldRedundancy::HotMerge => Handling::HotMerge,
            FieldRedundancy::HotAndMirrored => Handling::HotAndMirrored,
        },
        reconnect: ReconnectPolicy {
            strategy: match r.strategy {
                BackoffStrategy::Exponential => Backoff::Exponential,
                BackoffStrategy::Linear => Backoff::Linear,
                BackoffStrategy::Constant => Backoff::Constant,
            },
            initial_delay: r.initial_delay,
            max_delay: r.max_delay,
            max_retries: r.max_retries,
            jitter_factor: r.jitter,
            max_total_reconnect_time: r.max_total_reconnect_time,
        },
        overrides: uagate_field::limits::OperationLimits {
            max_nodes_per_read: o.max_nodes_per_read,
            max_nodes_per_write: o.max_nodes_per_write,
            max_nodes_per_browse: o.max_nodes_per_browse,
            max_nodes_per_method_call: o.max_nodes_per_method_call,
            max_nodes_per_translate: o.max_nodes_per_translate,
            max_nodes_per_history_read_data: o.max_nodes_per_history_read_data,
            max_monitored_items_per_call: o.max_monitored_items_per_call,
            max_array_length: o.max_array_length,
            max_monitored_items_per_subscription: o.max_monitored_items_per_subscription,
        },
        request_timeout: fs.request_timeout,
        session_timeout: fs.session_timeout,
        keep_alive_interval: fs.keep_alive_interval,
    }
}

/// What the gateway needs to start a field connection at any time: made
/// once by [`crate::Engine::start_fields`], used again for every field
/// connection a configuration change adds or changes.
pub(crate) struct FieldKit {
    setup: uagate_field::ClientSetup,
    hook: uagate_field::NamespaceHook,
    /// The gateway's own token: the status tasks end with the gateway.
    cancel: CancellationToken,
    /// The next continuation-point tag.
    next_tag: std::sync::atomic::AtomicU16,
}

/// What a configuration change does to the field connections, by name.
#[derive(Debug, Default, PartialEq)]
pub struct FieldChange {
    /// Mounted now (new entries).
    pub added: Vec<String>,
    /// Unmounted; their northbound items read `BadNodeIdUnknown`.
    pub removed: Vec<String>,
    /// Restarted with their new settings; their items carry over.
    pub changed: Vec<String>,
}

impl FieldKit {
    /// The client identity and trust decisions of every field connection.
    pub(crate) fn setup(&self) -> uagate_field::ClientSetup {
        self.setup.clone()
    }
}

impl FieldChange {
    /// Compares the `[[field_servers]]` of two documents (names are unique
    /// within one, see the configuration's validation).
    pub fn between(
        old: &[uagate_config::FieldServer],
        new: &[uagate_config::FieldServer],
    ) -> FieldChange {
        let mut c = FieldChange::default();
        for n in new {
            match old.iter().find(|o| o.name == n.name) {
                None => c.added.push(n.name.clone()),
                Some(o) if o != n => c.changed.push(n.name.clone()),
                Some(_) => {}
            }
        }
        for o in old {
            if !new.iter().any(|n| n.name == o.name) {
                c.removed.push(o.name.clone());
            }
        }
        c
    }

    /// Whether nothing changes.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

impl crate::Engine {
    /// Mounts every configured field server and starts the enabled ones.
    /// Called once by [`crate::start`]; keeps what later changes need to
    /// start connections ([`FieldKit`]).
    pub(crate) async fn start_fields(
        self: &Arc<Self>,
        application_uri: &str,
        pki_dir: &std::path::Path,
        cancel: &CancellationToken,
    ) {
        let configured = self.config.field_servers.clone();
        let entries: Vec<uagate_field::remap::NamespaceEntry> =
            match self.store.setting(NAMESPACES_SETTING).await {
                Ok(Some(text)) => serde_json::from_str(&text).unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "stored field namespace table unreadable; starting a new one");
                    Vec::new()
                }),
                _ => Vec::new(),
            };
        let table = NamespaceTable::from_entries(FIRST_FIELD_NS, entries)
            .unwrap_or_else(|_| NamespaceTable::new(FIRST_FIELD_NS));
        {
            let mut space = self.space.local_mut();
            sync_namespaces(&mut space, &table);
            for fs in &configured {
                if let Err(e) = space.add_mount(&fs.name, opcua_types::DateTime::now()) {
                    tracing::warn!(field = %fs.name, error = %e, "cannot mount field server");
                }
            }
        }
        let table = Arc::new(Mutex::new(table));
        let store = self.store.clone();
        let trust: uagate_field::TrustCheck = Arc::new(move |der: Vec<u8>| {
            let store = store.clone();
            Box::pin(async move {
                match store.cert_status(&der).await {
                    Ok(Some(uagate_store::CertKind::Trusted)) => Ok(()),
                    _ => {
                        if let Err(e) = store.record_rejected(&der).await {
                            tracing::warn!(error = %e, "cannot record rejected field server certificate");
                        }
                        Err(StatusCode::BadCertificateUntrusted)
                    }
                }
            })
        });
        let setup = uagate_field::ClientSetup {
            pki_dir: pki_dir.to_path_buf(),
            application_uri: application_uri.to_string(),
            application_name: self.config.server.application_name.clone(),
            trust,
        };
        let weak = Arc::downgrade(self);
        let hook: uagate_field::NamespaceHook = Arc::new(move |t: &NamespaceTable| {
            let Some(engine) = weak.upgrade() else { return };
            sync_namespaces(&mut engine.space.local_mut(), t);
            let json = serde_json::to_string(t.entries()).unwrap_or_default();
            let store = engine.store.clone();
            tokio::spawn(async move {
                if let Err(e) = store
                    .set_setting("gateway", NAMESPACES_SETTING, &json)
                    .await
                {
                    tracing::warn!(error = %e, "cannot persist field namespace table");
                }
            });
        });
        let kit = FieldKit {
            setup,
            hook,
            cancel: cancel.clone(),
            next_tag: std::sync::atomic::AtomicU16::new(0),
        };
        let mut fields = Fields {
            table,
            ..Fields::default()
        };
        for fs in &configured {
            self.start_field(&kit, &mut fields, fs, None);
        }
        let _ = self.field_kit.set(kit);
        let all: Vec<usize> = (0..fields.conns.len()).collect();
        self.space.mount(fields);
        self.publish_statuses(&configured, &all);
    }

    /// Starts the status mirrors of the mounted connections `which` (mount
    /// indexes in the set now mounted; `entries` is the configuration of
    /// that set, in order).
    fn publish_statuses(self: &Arc<Self>, entries: &[uagate_config::FieldServer], which: &[usize]) {
        let Some(fields) = self.space.fields() else {
            return;
        };
        for &m in which {
            if let (Some(conn), Some(stop), Some(fs)) =
                (fields.conns.get(m), fields.stops.get(m), entries.get(m))
            {
                self.clone()
                    .publish_field_status(conn.clone(), fs.enabled, stop.clone());
            }
        }
    }

    /// Starts the field connection of `fs` into `fields` (taking over the
    /// shared items of `previous`, the connection it replaces, if any).
    /// Once the set is mounted, `publish_statuses` starts the
    /// task that mirrors its status.
    fn start_field(
        self: &Arc<Self>,
        kit: &FieldKit,
        fields: &mut Fields,
        fs: &uagate_config::FieldServer,
        previous: Option<&FieldConnection>,
    ) {
        let folder = LocalSpace::mount_folder_id(&fs.name);
        let conn = Arc::new(FieldConnection::start(
            settings(fs),
            kit.setup.clone(),
            folder,
            fields.table.clone(),
            kit.hook.clone(),
            fs.enabled,
        ));
        if let Some(old) = previous {
            conn.carry_items_from(old);
        }
        let stop = kit.cancel.child_token();
        let tag = kit
            .next_tag
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        fields.conns.push(conn);
        fields.tags.push(tag);
        fields.stops.push(stop);
    }

    /// Applies a change of the `[[field_servers]]` while running, as one
    /// unit: mount folders of added connections first (nothing changes
    /// when one cannot be made), then a new set in which unchanged
    /// connections go on untouched, changed ones restart with their new
    /// settings and keep their shared items, added ones start; removed
    /// ones are unmounted and closed, as are the connections the changed
    /// ones replace (in the background, bounded). Called by
    /// [`crate::Engine::reconfigure`] with the document in force and the
    /// new one.
    pub(crate) fn remount(
        self: &Arc<Self>,
        old: &[uagate_config::FieldServer],
        new: &[uagate_config::FieldServer],
    ) -> Result<FieldChange, String> {
        let change = FieldChange::between(old, new);
        if change.is_empty() {
            return Ok(change);
        }
        let Some(kit) = self.field_kit.get() else {
            return Err("field connections are not started yet".to_string());
        };
        {
            let mut space = self.space.local_mut();
            let now = opcua_types::DateTime::now();
            for (i, name) in change.added.iter().enumerate() {
                if let Err(e) = space.add_mount(name, now) {
                    for undo in &change.added[..i] {
                        let _ = space.remove_mount(undo);
                    }
                    return Err(format!("field_servers: cannot mount {name:?}: {e}"));
                }
            }
        }
        let current = self.space.all_fields();
        let mut next = Fields {
            table: current.table.clone(),
            ..Fields::default()
        };
        let mut replaced = Vec::new();
        let mut fresh = Vec::new();
        for (i, fs) in new.iter().enumerate() {
            let was = current.index_of(&fs.name);
            match was {
                Some(m) if !change.changed.contains(&fs.name) => {
                    next.conns.push(current.conns[m].clone());
                    next.tags.push(current.tags[m]);
                    next.stops.push(current.stops[m].clone());
                }
                _ => {
                    let previous = was.map(|m| current.conns[m].clone());
                    self.start_field(kit, &mut next, fs, previous.as_deref());
                    fresh.push(i);
                    if let Some(m) = was {
                        replaced.push(m);
                    }
                }
            }
        }
        for name in &change.removed {
            if let Some(m) = current.index_of(name) {
                replaced.push(m);
            }
        }
        {
            // Under the space lock: see `publish_field_status`.
            let mut space = self.space.local_mut();
            self.space.mount(next);
            for name in &change.removed {
                if let Err(e) = space.remove_mount(name) {
                    tracing::warn!(field = %name, error = %e, "cannot unmount field server");
                }
            }
        }
        self.publish_statuses(new, &fresh);
        for m in replaced {
            current.stops[m].cancel();
            let conn = current.conns[m].clone();
            tokio::spawn(async move {
                let _ = conn.close(CLOSE_TIMEOUT).await;
            });
        }
        // The new connections learn what the northbound items want now.
        self.sync_field_demand();
        tracing::info!(
            added = ?change.added,
            removed = ?change.removed,
            changed = ?change.changed,
            "field connections changed live"
        );
        Ok(change)
    }

    /// Mirrors a field connection's status onto its gateway status nodes.
    /// Runs until `cancel` (the connection is replaced or removed, or the
    /// gateway stops).
    fn publish_field_status(
        self: Arc<Self>,
        conn: Arc<FieldConnection>,
        enabled: bool,
        cancel: CancellationToken,
    ) {
        tokio::spawn(async move {
            let mut rx = conn.status();
            loop {
                let st = rx.borrow_and_update().clone();
                let values = uagate_space::FieldStatusValues {
                    state: st.state.as_str().to_string(),
                    active_endpoint: st.active_endpoint.clone().unwrap_or_default(),
                    service_level: st.service_level.unwrap_or(0),
                    reconnect_count: u32::try_from(st.reconnect_count).unwrap_or(u32::MAX),
                    failover_count: u32::try_from(st.failover_count).unwrap_or(u32::MAX),
                    last_error: st.last_error.unwrap_or(StatusCode::Good),
                    enabled,
                    failing: enabled && st.failing,
                    failed_attempts: u32::try_from(st.failed_since_connected).unwrap_or(u32::MAX),
                };
                {
                    // Checked under the space lock, which a change holds
                    // while it replaces the set: a replaced connection
                    // never writes over its successor's status.
                    let mut space = self.space.local_mut();
                    let mounted = self
                        .space
                        .field(conn.name())
                        .is_some_and(|c| Arc::ptr_eq(&c, &conn));
                    if !mounted || cancel.is_cancelled() {
                        break;
                    }
                    if let Err(e) =
                        space.set_field_status(conn.name(), &values, opcua_types::DateTime::now())
                    {
                        tracing::warn!(error = %e, "field status update failed");
                        break;
                    }
                }
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => break,
                    r = rx.changed() => if r.is_err() { break },
                }
            }
        });
    }
}
