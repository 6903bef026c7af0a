//! The engine's address space part: the local space (ns0 Server object,
//! gateway namespace) behind its lock and the mounted field connections
//! (see [`crate::fields`]). Lock order: the space lock may be taken before
//! the sessions lock, never the other way round.

use std::collections::HashMap;
use std::sync::Arc;

use opcua_types::{
    BrowsePath, CreateMonitoredItemsRequest, DataValue, NodeId, ReadRequest, RelativePath,
    TimestampsToReturn,
};
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use uagate_field::proxy;
use uagate_field::FieldConnection;
use uagate_space::LocalSpace;

use crate::error::ServiceError;
use crate::fields::{ctx_of, Fields, CLOSE_TIMEOUT};

/// The aggregated address space of the engine.
pub(crate) struct AddressSpace {
    local: RwLock<LocalSpace>,
    /// Mounted field connections: set at start-up, replaced as a whole
    /// when the configuration changes them (see `fields.rs`). A request
    /// holds the set it started with to its end.
    fields: RwLock<Arc<Fields>>,
}

impl AddressSpace {
    /// The space at start: `local` alone, field connections mounted later
    /// by [`AddressSpace::mount`].
    pub(crate) fn new(local: LocalSpace) -> AddressSpace {
        AddressSpace {
            local: RwLock::new(local),
            fields: RwLock::new(Arc::new(Fields::default())),
        }
    }

    /// The local space, to read (services, item sampling).
    pub(crate) fn local(&self) -> RwLockReadGuard<'_, LocalSpace> {
        self.local.read()
    }

    /// The local space, to change (writes, status nodes, method calls).
    pub(crate) fn local_mut(&self) -> RwLockWriteGuard<'_, LocalSpace> {
        self.local.write()
    }

    /// Installs a set of mounted field connections; called at start-up
    /// and when a configuration change adds, removes or changes field
    /// connections. Returns the set it replaces.
    pub(crate) fn mount(&self, fields: Fields) -> Arc<Fields> {
        std::mem::replace(&mut *self.fields.write(), Arc::new(fields))
    }

    /// The mounted field connections, when any are mounted now.
    pub(crate) fn fields(&self) -> Option<Arc<Fields>> {
        let f = self.fields.read();
        (!f.conns.is_empty()).then(|| f.clone())
    }

    /// The whole set, empty or not (for replacing it).
    pub(crate) fn all_fields(&self) -> Arc<Fields> {
        self.fields.read().clone()
    }

    /// The field connection mounted as `name` (console).
    pub(crate) fn field(&self, name: &str) -> Option<Arc<FieldConnection>> {
        let f = self.fields()?;
        f.conns.get(f.index_of(name)?).cloned()
    }

    /// Shows ServerDiagnosticsSummary in the address space (same lock
    /// order as [`Self::publish_session_count`]).
    pub(crate) fn publish_diagnostics(
        &self,
        summary: opcua_types::ServerDiagnosticsSummaryDataType,
    ) {
        self.local.write().set_diagnostics_summary(summary);
    }

    /// Shows the session and subscription diagnostics arrays in the address
    /// space (same
    /// lock order as [`Self::publish_session_count`]).
    pub(crate) fn publish_session_diagnostics(&self, arrays: crate::sessions::DiagnosticsArrays) {
        self.local.write().set_session_diagnostics(
            arrays.sessions,
            arrays.security,
            arrays.subscriptions,
        );
    }

    /// Shows the session count in the address space. Lock order: the space
    /// lock may be taken before the sessions lock (services do), so the
    /// sessions lock is always released before this is called.
    pub(crate) fn publish_session_count(&self, count: usize) {
        self.local.write().set_current_session_count(count as u32);
    }

    /// The local space's answer to the Read operations `idx` (all of them
    /// when `None`), after [`crate::Engine::check_read`].
    pub(crate) fn read_local(&self, r: &ReadRequest, idx: Option<&[usize]>) -> Vec<DataValue> {
        let nodes = r.nodes_to_read.as_deref().unwrap_or(&[]);
        let space = self.local.read();
        let now = opcua_types::DateTime::now();
        let read = |n| space.read(now, n, r.timestamps_to_return, r.max_age);
        match idx {
            None => nodes.iter().map(read).collect(),
            Some(idx) => idx.iter().filter_map(|i| nodes.get(*i)).map(read).collect(),
        }
    }

    /// BadTooManyOperations when `n` monitored items exceed the per-call limit.
    pub(crate) fn check_item_limit(&self, n: usize) -> Result<(), ServiceError> {
        let limit = self.local.read().limits().max_monitored_items_per_call;
        if n > limit as usize {
            return Err(ServiceError::TooManyOperations { got: n, limit });
        }
        Ok(())
    }

    /// Closes every field connection together (each bounded by
    /// [`CLOSE_TIMEOUT`]), at shutdown.
    pub(crate) async fn close_fields(&self) {
        let f = self.all_fields();
        futures_util::future::join_all(f.conns.iter().map(|c| c.close(CLOSE_TIMEOUT))).await;
    }

    /// Before CreateMonitoredItems: fetches the EURange of every mounted node
    /// that gets a percent deadband, so the (synchronous) item creation can
    /// resolve it like for a local node. Failures leave the range unknown
    /// (the item then gets `BadFilterNotAllowed`).
    pub(crate) async fn prefetch_field_eu_ranges(&self, r: &CreateMonitoredItemsRequest) {
        let Some(fields) = self.fields() else { return };
        let mut per_mount: HashMap<usize, Vec<NodeId>> = HashMap::new();
        for item in r.items_to_create.as_deref().unwrap_or(&[]) {
            let percent = item
                .requested_parameters
                .filter
                .inner_as::<opcua_types::DataChangeFilter>()
                .is_some_and(|f| f.deadband_type == opcua_types::DeadbandType::Percent as u32);
            let node = &item.item_to_monitor.node_id;
            if !percent {
                continue;
            }
            if let Some(m) = fields.route(node) {
                if !fields.is_mount_folder(m, node) && fields.conns[m].eu_range(node).is_none() {
                    per_mount.entry(m).or_default().push(node.clone());
                }
            }
        }
        let ctx = ctx_of(&r.request_header);
        for (m, nodes) in per_mount {
            let conn = &fields.conns[m];
            let Ok(link) = crate::park::field_link(conn, ctx.deadline).await else {
                continue;
            };
            let paths: Vec<BrowsePath> = nodes
                .iter()
                .map(|n| BrowsePath {
                    starting_node: n.clone(),
                    relative_path: RelativePath {
                        elements: Some(vec![opcua_types::RelativePathElement {
                            reference_type_id: opcua_types::ReferenceTypeId::HasProperty.into(),
                            is_inverse: false,
                            include_subtypes: true,
                            target_name: opcua_types::QualifiedName::new(0, "EURange"),
                        }]),
                    },
                })
                .collect();
            let Ok(found) = proxy::translate(&link, &paths, ctx).await else {
                continue;
            };
            let (owners, props): (Vec<NodeId>, Vec<opcua_types::ReadValueId>) = nodes
                .into_iter()
                .zip(found.results)
                .filter_map(|(n, res)| {
                    let t = res.targets?.into_iter().next()?;
                    Some((n, opcua_types::ReadValueId::from(t.target_id.node_id)))
                })
                .unzip();
            if props.is_empty() {
                continue;
            }
            let Ok(values) =
                proxy::read(&link, &props, TimestampsToReturn::Neither, 0.0, ctx).await
            else {
                continue;
            };
            for (n, dv) in owners.into_iter().zip(values.results) {
                if let Some(opcua_types::Variant::ExtensionObject(eo)) = dv.value {
                    if let Some(range) = eo.inner_as::<opcua_types::Range>() {
                        conn.set_eu_range(n, (range.low, range.high));
                    }
                }
            }
        }
    }
}
