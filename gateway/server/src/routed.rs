//! Services over the aggregated address space (see [`crate::fields`]):
//! local operations go to the local space as before, operations on mounted
//! nodes are proxied to the mount's field connection, results are merged in
//! request order.

use std::collections::HashMap;

use opcua_core::ResponseMessage;
use opcua_types::{
    BrowseNextRequest, BrowseNextResponse, BrowsePath, BrowsePathResult, BrowseRequest,
    BrowseResponse, CallRequest, CallResponse, DataValue, HistoryReadRequest, HistoryReadResponse,
    HistoryReadResult, NodeId, ReadRequest, ReadResponse, RelativePath, ResponseHeader, StatusCode,
    TimestampsToReturn, TranslateBrowsePathsToNodeIdsRequest,
    TranslateBrowsePathsToNodeIdsResponse, WriteRequest, WriteResponse,
};
use uagate_field::diag::Diagnostics;
use uagate_field::proxy::{self, Answer, Ctx};

use crate::error::ServiceError;
use crate::fields::{bad_browse, bad_value, deadline, partition, Fields};
use crate::{ChannelInfo, Engine};

type Result<T> = std::result::Result<T, ServiceError>;

/// An answer of `n` operations, all `fill` until placed.
fn answer<R: Clone>(fill: R, n: usize) -> Answer<R> {
    Answer {
        results: vec![fill; n],
        diagnostics: Diagnostics::with_len(n),
    }
}

/// The southbound context of a request: its deadline and the diagnostics
/// it asked for.
fn ctx_of(header: &opcua_types::RequestHeader) -> Ctx {
    Ctx {
        deadline: deadline(header),
        diagnostics: header.return_diagnostics,
    }
}

/// A good response header carrying the string table of `d`.
fn header_with(request: &opcua_types::RequestHeader, d: &Diagnostics) -> ResponseHeader {
    let mut h = ResponseHeader::new_good(request);
    h.string_table = d.string_table();
    h
}

/// Puts the results of a local sub-request back at the request positions
/// `at` (result k answers operation `at[k]`).
fn place<T>(out: &mut [T], at: &[usize], results: Option<Vec<T>>) {
    for (i, r) in at.iter().zip(results.unwrap_or_default()) {
        if let Some(slot) = out.get_mut(*i) {
            *slot = r;
        }
    }
}

impl Engine {
    /// The mounted field connections, when any are configured.
    pub(crate) fn fields(&self) -> Option<&Fields> {
        self.fields.get().filter(|f| !f.conns.is_empty())
    }

    /// Read with mounted nodes proxied.
    pub(crate) async fn read_routed(
        &self,
        chan: &ChannelInfo,
        r: &ReadRequest,
    ) -> Result<ResponseMessage> {
        let nodes = r.nodes_to_read.as_deref().unwrap_or(&[]);
        let Some(fields) = self.fields() else {
            return self.read(chan, r);
        };
        let (local, mounts) = partition(fields, nodes, |n| &n.node_id);
        // Mount folders are local nodes.
        let (local, mounts) = keep_folders_local(fields, nodes, |n| &n.node_id, local, mounts);
        if mounts.is_empty() {
            return self.read(chan, r);
        }
        let mut out = answer(DataValue::default(), nodes.len());
        if local.is_empty() {
            self.check_read(chan, r)?;
        } else {
            let sub = ReadRequest {
                nodes_to_read: Some(local.iter().map(|i| nodes[*i].clone()).collect()),
                ..r.clone()
            };
            if let ResponseMessage::Read(resp) = self.read(chan, &sub)? {
                place(&mut out.results, &local, resp.results);
            }
        }
        let ctx = ctx_of(&r.request_header);
        let (ts, max_age) = (r.timestamps_to_return, r.max_age);
        for (m, idx) in mounts {
            let ops: Vec<_> = idx.iter().map(|i| nodes[*i].clone()).collect();
            run_on_mount(
                fields,
                m,
                &idx,
                ops,
                ctx,
                &mut out,
                |_| bad_value(StatusCode::BadNoCommunication),
                |link, _, ops| async move { proxy::read(&link, &ops, ts, max_age, ctx).await },
            )
            .await;
        }
        Ok(ReadResponse {
            response_header: header_with(&r.request_header, &out.diagnostics),
            results: Some(out.results),
            diagnostic_infos: out.diagnostics.infos(),
        }
        .into())
    }

    /// Write with mounted nodes proxied (same permission as local writes).
    pub(crate) async fn write_routed(
        &self,
        chan: &ChannelInfo,
        r: &WriteRequest,
    ) -> Result<ResponseMessage> {
        let items = r.nodes_to_write.as_deref().unwrap_or(&[]);
        let Some(fields) = self.fields() else {
            return self.write(chan, r);
        };
        let (local, mounts) = partition(fields, items, |w| &w.node_id);
        let (local, mounts) = keep_folders_local(fields, items, |w| &w.node_id, local, mounts);
        if mounts.is_empty() {
            return self.write(chan, r);
        }
        let limit = self.config.server.max_nodes_per_write;
        if items.len() > limit as usize {
            return Err(ServiceError::TooManyOperations {
                got: items.len(),
                limit,
            });
        }
        let caller = self.caller(chan, &r.request_header.authentication_token)?;
        let can_write = caller.can_write(self.config.server.allow_anonymous_write);
        let mut out = answer(StatusCode::BadUnexpectedError, items.len());
        if !local.is_empty() {
            let mut sub = r.clone();
            sub.nodes_to_write = Some(local.iter().map(|i| items[*i].clone()).collect());
            if let ResponseMessage::Write(resp) = self.write(chan, &sub)? {
                place(&mut out.results, &local, resp.results);
            }
        }
        let ctx = ctx_of(&r.request_header);
        for (m, idx) in mounts {
            if !can_write {
                for i in &idx {
                    out.results[*i] = StatusCode::BadUserAccessDenied;
                }
                continue;
            }
            let ops: Vec<_> = idx.iter().map(|i| items[*i].clone()).collect();
            run_on_mount(
                fields,
                m,
                &idx,
                ops,
                ctx,
                &mut out,
                |_| StatusCode::BadServerNotConnected,
                |link, _, ops| async move { proxy::write(&link, &ops, ctx).await },
            )
            .await;
        }
        if out.results.iter().any(|s| s.is_good()) {
            tracing::info!(user = %caller.actor(), count = out.results.iter().filter(|s| s.is_good()).count(), "values written");
        }
        Ok(WriteResponse {
            response_header: header_with(&r.request_header, &out.diagnostics),
            results: Some(out.results),
            diagnostic_infos: out.diagnostics.infos(),
        }
        .into())
    }

    /// Browse with mounted nodes proxied; a mount folder shows its local
    /// references followed by the field server's Objects folder content.
    pub(crate) async fn browse_routed(
        &self,
        chan: &ChannelInfo,
        r: &BrowseRequest,
    ) -> Result<ResponseMessage> {
        let nodes = r.nodes_to_browse.as_deref().unwrap_or(&[]);
        let Some(fields) = self.fields() else {
            return self.browse(chan, r);
        };
        let (local, mounts) = partition(fields, nodes, |b| &b.node_id);
        if mounts.is_empty() {
            return self.browse(chan, r);
        }
        // Local operations (mount folders included, for their own references).
        let folder_idx: Vec<usize> = mounts
            .iter()
            .flat_map(|(m, idx)| {
                idx.iter()
                    .filter(|i| fields.is_mount_folder(*m, &nodes[**i].node_id))
                    .copied()
            })
            .collect();
        let mut local_all = local.clone();
        local_all.extend(folder_idx.iter().copied());
        let mut out = answer(bad_browse(StatusCode::BadUnexpectedError), nodes.len());
        let mut sub = r.clone();
        sub.nodes_to_browse = Some(if local_all.is_empty() {
            vec![nodes[0].clone()]
        } else {
            local_all.iter().map(|i| nodes[*i].clone()).collect()
        });
        if let ResponseMessage::Browse(resp) = self.browse(chan, &sub)? {
            if !local_all.is_empty() {
                place(&mut out.results, &local_all, resp.results);
            }
        }
        let ctx = ctx_of(&r.request_header);
        let max = r.requested_max_references_per_node;
        for (m, idx) in mounts {
            // The session map turns a mount folder into the field server's Objects folder.
            let ops: Vec<_> = idx.iter().map(|i| nodes[*i].clone()).collect();
            let mount = u16::try_from(m).unwrap_or(u16::MAX);
            let res = match fields.conns[m].link(ctx.deadline).await {
                Ok(link) => proxy::browse(&link, mount, &r.view, max, &ops, ctx).await,
                Err(st) => Err(st),
            };
            match res {
                Ok(answer) => {
                    out.diagnostics.merge(&idx, answer.diagnostics);
                    for (k, br) in answer.results.into_iter().enumerate() {
                        let i = idx[k];
                        if folder_idx.contains(&i) {
                            // Local references first, then the field server's.
                            let mut merged = out.results[i].clone();
                            let mut refs = merged.references.take().unwrap_or_default();
                            refs.extend(
                                br.references
                                    .unwrap_or_default()
                                    .into_iter()
                                    .filter(|rd| rd.is_forward),
                            );
                            merged.references = Some(refs);
                            merged.continuation_point = br.continuation_point;
                            out.results[i] = merged;
                        } else {
                            out.results[i] = br;
                        }
                    }
                }
                Err(_) => {
                    for i in &idx {
                        // A mount folder still shows its local references.
                        if !folder_idx.contains(i) {
                            out.results[*i] = bad_browse(StatusCode::BadServerNotConnected);
                        }
                    }
                }
            }
        }
        Ok(BrowseResponse {
            response_header: header_with(&r.request_header, &out.diagnostics),
            results: Some(out.results),
            diagnostic_infos: out.diagnostics.infos(),
        }
        .into())
    }

    /// BrowseNext: field continuation points go back to their mount.
    pub(crate) async fn browse_next_routed(
        &self,
        chan: &ChannelInfo,
        r: &BrowseNextRequest,
    ) -> Result<ResponseMessage> {
        let cps = r.continuation_points.as_deref().unwrap_or(&[]);
        let Some(fields) = self.fields() else {
            return self.browse_next(chan, r);
        };
        let mut local = Vec::new();
        let mut mounts: HashMap<usize, Vec<(usize, opcua_types::ByteString)>> = HashMap::new();
        let mut out = answer(
            bad_browse(StatusCode::BadContinuationPointInvalid),
            cps.len(),
        );
        for (i, cp) in cps.iter().enumerate() {
            match proxy::unwrap_cp(cp) {
                Some((m, field_cp)) if usize::from(m) < fields.conns.len() => mounts
                    .entry(usize::from(m))
                    .or_default()
                    .push((i, field_cp)),
                Some(_) => {}
                None => local.push(i),
            }
        }
        if mounts.is_empty() {
            return self.browse_next(chan, r);
        }
        let mut sub = r.clone();
        sub.continuation_points = Some(if local.is_empty() {
            vec![opcua_types::ByteString::null()]
        } else {
            local.iter().map(|i| cps[*i].clone()).collect()
        });
        if let ResponseMessage::BrowseNext(resp) = self.browse_next(chan, &sub)? {
            if !local.is_empty() {
                place(&mut out.results, &local, resp.results);
            }
        }
        let ctx = ctx_of(&r.request_header);
        for (m, list) in mounts {
            let (idx, field_cps): (Vec<usize>, Vec<_>) = list.into_iter().unzip();
            let release = r.release_continuation_points;
            run_on_mount(
                fields,
                m,
                &idx,
                field_cps,
                ctx,
                &mut out,
                |_| bad_browse(StatusCode::BadServerNotConnected),
                |link, mount, cps| async move {
                    proxy::browse_next(&link, mount, release, &cps, ctx).await
                },
            )
            .await;
        }
        Ok(BrowseNextResponse {
            response_header: header_with(&r.request_header, &out.diagnostics),
            results: Some(out.results),
            diagnostic_infos: out.diagnostics.infos(),
        }
        .into())
    }

    /// TranslateBrowsePathsToNodeIds; a path that crosses a mount folder is
    /// resolved locally up to the folder and by the field server after it.
    pub(crate) async fn translate_routed(
        &self,
        chan: &ChannelInfo,
        r: &TranslateBrowsePathsToNodeIdsRequest,
    ) -> Result<ResponseMessage> {
        let paths = r.browse_paths.as_deref().unwrap_or(&[]);
        let Some(fields) = self.fields() else {
            return self.translate(chan, r);
        };
        let resp = self.translate(chan, r)?;
        let ResponseMessage::TranslateBrowsePathsToNodeIds(resp) = resp else {
            return Ok(resp);
        };
        let results = resp.results.unwrap_or_default();
        let mut out = answer(
            BrowsePathResult {
                status_code: StatusCode::BadUnexpectedError,
                targets: None,
            },
            results.len(),
        );
        out.results = results;
        // Paths to send to a mount: (result index, mount, path from the mount folder).
        let mut remote: HashMap<usize, Vec<(usize, BrowsePath)>> = HashMap::new();
        {
            let space = self.space.read();
            for (i, p) in paths.iter().enumerate() {
                if out
                    .results
                    .get(i)
                    .is_some_and(|res| res.status_code.is_good())
                {
                    continue;
                }
                let elements = p.relative_path.elements.as_deref().unwrap_or(&[]);
                if let Some(m) = fields.route(&p.starting_node) {
                    remote.entry(m).or_default().push((i, p.clone()));
                    continue;
                }
                // Longest local prefix that ends at a mount folder.
                for k in (1..elements.len()).rev() {
                    let prefix = BrowsePath {
                        starting_node: p.starting_node.clone(),
                        relative_path: RelativePath {
                            elements: Some(elements[..k].to_vec()),
                        },
                    };
                    let found = space.translate(std::slice::from_ref(&prefix));
                    let target = found
                        .first()
                        .and_then(|res| res.targets.as_ref())
                        .and_then(|t| t.first())
                        .map(|t| t.target_id.node_id.clone());
                    if let Some(folder) = target {
                        if let Some(m) = fields.route(&folder) {
                            remote.entry(m).or_default().push((
                                i,
                                BrowsePath {
                                    starting_node: folder,
                                    relative_path: RelativePath {
                                        elements: Some(elements[k..].to_vec()),
                                    },
                                },
                            ));
                            break;
                        }
                    }
                }
            }
        }
        let ctx = ctx_of(&r.request_header);
        for (m, list) in remote {
            let (idx, ps): (Vec<usize>, Vec<_>) = list.into_iter().unzip();
            run_on_mount(
                fields,
                m,
                &idx,
                ps,
                ctx,
                &mut out,
                |_| BrowsePathResult {
                    status_code: StatusCode::BadServerNotConnected,
                    targets: None,
                },
                |link, _, ps| async move { proxy::translate(&link, &ps, ctx).await },
            )
            .await;
        }
        Ok(TranslateBrowsePathsToNodeIdsResponse {
            response_header: header_with(&r.request_header, &out.diagnostics),
            results: Some(out.results),
            diagnostic_infos: out.diagnostics.infos(),
        }
        .into())
    }

    /// Call with methods of mounted objects proxied.
    pub(crate) async fn call_routed(
        &self,
        chan: &ChannelInfo,
        r: &CallRequest,
    ) -> Result<ResponseMessage> {
        let calls = r.methods_to_call.as_deref().unwrap_or(&[]);
        let Some(fields) = self.fields() else {
            return self.call(chan, r).await;
        };
        let (local, mounts) = partition(fields, calls, |c| &c.object_id);
        if mounts.is_empty() {
            return self.call(chan, r).await;
        }
        let limit = self.config.server.max_nodes_per_method_call;
        if calls.len() > limit as usize {
            return Err(ServiceError::TooManyOperations {
                got: calls.len(),
                limit,
            });
        }
        let caller = self.caller(chan, &r.request_header.authentication_token)?;
        let mut out = answer(proxy::bad_call(StatusCode::BadUnexpectedError), calls.len());
        if !local.is_empty() {
            let mut sub = r.clone();
            sub.methods_to_call = Some(local.iter().map(|i| calls[*i].clone()).collect());
            if let ResponseMessage::Call(resp) = self.call(chan, &sub).await? {
                place(&mut out.results, &local, resp.results);
            }
        }
        let ctx = ctx_of(&r.request_header);
        for (m, idx) in mounts {
            let ops: Vec<_> = idx.iter().map(|i| calls[*i].clone()).collect();
            run_on_mount(
                fields,
                m,
                &idx,
                ops,
                ctx,
                &mut out,
                |_| proxy::bad_call(StatusCode::BadServerNotConnected),
                |link, _, ops| async move { proxy::call(&link, &ops, ctx).await },
            )
            .await;
        }
        tracing::debug!(user = %caller.actor(), count = calls.len(), "methods called");
        Ok(CallResponse {
            response_header: header_with(&r.request_header, &out.diagnostics),
            results: Some(out.results),
            diagnostic_infos: out.diagnostics.infos(),
        }
        .into())
    }

    /// HistoryRead: mounted nodes are proxied; the local space keeps no
    /// history (`BadHistoryOperationUnsupported`).
    pub(crate) async fn history_read(
        &self,
        chan: &ChannelInfo,
        r: &HistoryReadRequest,
    ) -> Result<ResponseMessage> {
        let nodes = r.nodes_to_read.as_deref().unwrap_or(&[]);
        if nodes.is_empty() {
            return Err(ServiceError::NothingToDo);
        }
        let limit = self.config.server.max_nodes_per_read;
        if nodes.len() > limit as usize {
            return Err(ServiceError::TooManyOperations {
                got: nodes.len(),
                limit,
            });
        }
        if r.timestamps_to_return == TimestampsToReturn::Invalid {
            return Err(ServiceError::Status(
                StatusCode::BadTimestampsToReturnInvalid,
            ));
        }
        self.with_session(chan, &r.request_header, |_| Ok(()))?;
        let bad = |st| HistoryReadResult {
            status_code: st,
            continuation_point: opcua_types::ByteString::null(),
            history_data: opcua_types::ExtensionObject::null(),
        };
        let mut out = answer(bad(StatusCode::BadHistoryOperationUnsupported), nodes.len());
        if let Some(fields) = self.fields() {
            let (_, mounts) = partition(fields, nodes, |h| &h.node_id);
            let ctx = ctx_of(&r.request_header);
            for (m, idx) in mounts {
                let ops: Vec<_> = idx.iter().map(|i| nodes[*i].clone()).collect();
                let (details, ts, release) = (
                    &r.history_read_details,
                    r.timestamps_to_return,
                    r.release_continuation_points,
                );
                run_on_mount(
                    fields,
                    m,
                    &idx,
                    ops,
                    ctx,
                    &mut out,
                    |st| {
                        // The details' own faults stay; anything else means
                        // the field server could not answer.
                        bad(match st {
                            StatusCode::BadHistoryOperationInvalid
                            | StatusCode::BadEventFilterInvalid
                            | StatusCode::BadAggregateNotSupported => st,
                            _ => StatusCode::BadServerNotConnected,
                        })
                    },
                    |link, mount, ops| async move {
                        proxy::history_read(&link, mount, details, ts, release, &ops, ctx).await
                    },
                )
                .await;
            }
        }
        Ok(HistoryReadResponse {
            response_header: header_with(&r.request_header, &out.diagnostics),
            results: Some(out.results),
            diagnostic_infos: out.diagnostics.infos(),
        }
        .into())
    }
}

/// Runs `ops` (one mount's operations, whose results go to `out` at `idx`)
/// on mount `m`'s active session with `call`, waiting for the session until
/// the request's deadline. Diagnostics are merged into `out`. When the mount
/// cannot answer, every one of them gets `failed(status)`.
#[allow(clippy::too_many_arguments)] // one call site shape, all arguments distinct
async fn run_on_mount<Q, R, Fut>(
    fields: &Fields,
    m: usize,
    idx: &[usize],
    ops: Vec<Q>,
    ctx: Ctx,
    out: &mut Answer<R>,
    failed: impl Fn(StatusCode) -> R,
    call: impl FnOnce(std::sync::Arc<uagate_field::LinkSession>, u16, Vec<Q>) -> Fut,
) where
    Fut: std::future::Future<Output = std::result::Result<Answer<R>, StatusCode>>,
{
    let mount = u16::try_from(m).unwrap_or(u16::MAX);
    let res = match fields.conns.get(m) {
        Some(conn) => match conn.link(ctx.deadline).await {
            Ok(link) => call(link, mount, ops).await,
            Err(st) => Err(st),
        },
        None => Err(StatusCode::BadServerNotConnected),
    };
    match res {
        Ok(answer) => {
            place(&mut out.results, idx, Some(answer.results));
            out.diagnostics.merge(idx, answer.diagnostics);
        }
        Err(st) => {
            for i in idx {
                if let Some(slot) = out.results.get_mut(*i) {
                    *slot = failed(st);
                }
            }
        }
    }
}

/// Moves mount-folder operations back to the local group (the folder is a
/// local node; only Browse/Translate look through it).
fn keep_folders_local<T>(
    fields: &Fields,
    ops: &[T],
    node: impl Fn(&T) -> &NodeId,
    mut local: Vec<usize>,
    mut mounts: HashMap<usize, Vec<usize>>,
) -> (Vec<usize>, HashMap<usize, Vec<usize>>) {
    for (m, idx) in mounts.iter_mut() {
        idx.retain(|i| {
            let folder = fields.is_mount_folder(*m, node(&ops[*i]));
            if folder {
                local.push(*i);
            }
            !folder
        });
    }
    mounts.retain(|_, idx| !idx.is_empty());
    local.sort_unstable();
    (local, mounts)
}

impl Engine {
    /// Recent events of the field connection `name` (console).
    pub fn field_history(&self, name: &str) -> Option<Vec<uagate_field::HistoryEvent>> {
        let f = self.fields()?;
        Some(f.conns.get(f.index_of(name)?)?.history())
    }

    /// Connect attempts and recovery durations of a field connection.
    pub fn field_reconnect_stats(&self, name: &str) -> Option<uagate_field::ReconnectStats> {
        let f = self.fields()?;
        Some(f.conns.get(f.index_of(name)?)?.reconnect_stats())
    }

    /// Asks a field connection to leave its active server (console). `None`
    /// for an unknown (or not running) connection.
    pub fn field_force_failover(
        &self,
        name: &str,
        actor: &str,
    ) -> Option<std::result::Result<(), &'static str>> {
        let f = self.fields()?;
        Some(f.conns.get(f.index_of(name)?)?.force_failover(actor))
    }

    /// Probes every URL of a field connection (console "test connection").
    pub async fn field_probe(
        &self,
        name: &str,
        timeout: std::time::Duration,
    ) -> Option<Vec<uagate_field::Probe>> {
        let f = self.fields()?;
        let conn = f.conns.get(f.index_of(name)?)?;
        Some(conn.probe(timeout).await)
    }

    /// The status of a running field connection, `None` for an unknown one.
    pub fn field_status(&self, name: &str) -> Option<uagate_field::FieldStatus> {
        let f = self.fields()?;
        let c = f.conns.get(f.index_of(name)?)?;
        let st = c.status().borrow().clone();
        Some(st)
    }

    /// (Reads asked, southbound Reads sent) of the field connection `name`
    /// since it started (concurrent Reads are merged); `None` for an
    /// unknown connection.
    pub fn field_read_stats(&self, name: &str) -> Option<(u64, u64)> {
        let f = self.fields()?;
        Some(f.conns.get(f.index_of(name)?)?.read_stats())
    }

    /// (Shared event items, events dropped as duplicates, events dropped
    /// on overflow) of the field connection `name`; `None` for an unknown
    /// connection.
    pub fn field_event_stats(&self, name: &str) -> Option<(usize, u64, u64)> {
        let f = self.fields()?;
        Some(f.conns.get(f.index_of(name)?)?.event_stats())
    }

    /// Number of shared southbound items of the field connection `name`.
    pub fn field_shared_items(&self, name: &str) -> Option<usize> {
        let f = self.fields()?;
        Some(f.conns.get(f.index_of(name)?)?.shared_item_count())
    }
}

impl Engine {
    /// Before CreateMonitoredItems: fetches the EURange of every mounted node
    /// that gets a percent deadband, so the (synchronous) item creation can
    /// resolve it like for a local node. Failures leave the range unknown
    /// (the item then gets `BadFilterNotAllowed`).
    pub(crate) async fn prefetch_field_eu_ranges(
        &self,
        r: &opcua_types::CreateMonitoredItemsRequest,
    ) {
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
            let Ok(link) = conn.link(ctx.deadline).await else {
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
