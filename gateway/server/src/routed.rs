//! The request path of the services over the aggregated address space (see
//! [`crate::fields`]). Every service runs in two stages:
//!
//! 1. **Check** the whole request once, before any operation runs: the
//!    operation count against its limit (whatever mix of local and mounted
//!    nodes it holds), the request-wide parameters, the session and caller.
//!    A failed check is a ServiceFault and nothing has run.
//! 2. **Execute** the operations per backend, the local space and each
//!    mount, concurrently through [`Split::run`], which puts results and
//!    diagnostics back in request order and bounds each mount by the
//!    request's deadline.
//!
//! A service here only says how to route one operation, how the local
//! space answers its share, and which proxy call answers a mount's share.

use std::collections::HashMap;
use std::sync::Arc;

use opcua_core::ResponseMessage;
use opcua_types::{
    BrowseNextRequest, BrowseNextResponse, BrowsePath, BrowsePathResult, BrowsePathTarget,
    BrowseRequest, BrowseResponse, BrowseResult, ByteString, CallMethodResult, CallRequest,
    CallResponse, DataValue, ExtensionObject, HistoryReadRequest, HistoryReadResponse,
    HistoryReadResult, NodeId, ReadRequest, ReadResponse, RelativePath, RequestHeader,
    ResponseHeader, StatusCode, TimestampsToReturn, TranslateBrowsePathsToNodeIdsRequest,
    TranslateBrowsePathsToNodeIdsResponse, WriteRequest, WriteResponse,
};
use uagate_field::diag::Diagnostics;
use uagate_field::proxy::{self, Answer, Ctx};
use uagate_field::LinkSession;

use crate::error::ServiceError;
use crate::fields::{bad_browse, bad_value, ctx_of, Fields};
use crate::split::{OpResult, Route, Split};
use crate::{ChannelInfo, Engine};

type Result<T> = std::result::Result<T, ServiceError>;

/// Stage one's operation count check: BadNothingToDo for none,
/// BadTooManyOperations above `limit`.
pub(crate) fn check_count(n: usize, limit: u32) -> Result<()> {
    if n == 0 {
        return Err(ServiceError::NothingToDo);
    }
    if n > limit as usize {
        return Err(ServiceError::TooManyOperations { got: n, limit });
    }
    Ok(())
}

/// A good response header carrying the string table of `d`.
fn header_with(request: &RequestHeader, d: &Diagnostics) -> ResponseHeader {
    let mut h = ResponseHeader::new_good(request);
    h.string_table = d.string_table();
    h
}

/// The route of an operation on `node`: its mount when mounted, else local.
/// With `folder_local`, a mount folder is a local node (Read, Write: the
/// folder is the gateway's; Browse looks through it instead).
fn route_node(fields: Option<&Fields>, node: &NodeId, folder_local: bool) -> Route {
    match fields.and_then(|f| f.route(node).map(|m| (f, m))) {
        Some((f, m)) if folder_local && f.is_mount_folder(m, node) => Route::Local,
        Some((_, m)) => Route::Mount(m),
        None => Route::Local,
    }
}

/// The operations `idx` of `ops`, for one backend.
fn pick<T: Clone>(ops: &[T], idx: &[usize]) -> Vec<T> {
    idx.iter().filter_map(|i| ops.get(*i).cloned()).collect()
}

/// What a proxied request does when its southbound call is cut off by a
/// lost connection (see docs/field.md, "Requests during a reconnect").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnLoss {
    /// Idempotent (Read, Browse, BrowseNext, TranslateBrowsePaths,
    /// HistoryRead): retried once on the re-activated or next session,
    /// within the request's deadline.
    RetryOnce,
    /// Not idempotent (Write, Call): not retried; the operations get the
    /// status of the cut-off call.
    Fail,
}

/// Runs `call` on mount `m`'s active session (with the mount's
/// continuation-point tag). When the field connection is
/// not available the request parks (gives its execution slot back, see
/// [`crate::park`]) and waits for it until the request's deadline; an
/// idempotent call cut off by a lost connection is retried once after the
/// reconnect ([`OnLoss`]). The mount future of every routed service.
async fn on_mount<R, Fut>(
    fields: Option<&Fields>,
    m: usize,
    ctx: Ctx,
    on_loss: OnLoss,
    call: impl Fn(Arc<LinkSession>, u16) -> Fut,
) -> std::result::Result<Answer<R>, StatusCode>
where
    Fut: std::future::Future<Output = std::result::Result<Answer<R>, StatusCode>>,
{
    let (conn, mount) = fields
        .and_then(|f| Some((f.conns.get(m)?, f.tag(m))))
        .ok_or(StatusCode::BadServerNotConnected)?;
    let link = crate::park::field_link(conn, ctx.deadline).await?;
    let losses = link.losses();
    match call(link.clone(), mount).await {
        Err(st) if on_loss == OnLoss::RetryOnce && crate::park::is_link_loss(st) => {
            tracing::debug!(mount = m, %st, "southbound call cut off; retrying once after the reconnect");
            let again = crate::park::field_link_after(conn, &link, losses, ctx.deadline).await?;
            call(again, mount).await
        }
        other => other,
    }
}

impl OpResult for DataValue {
    fn with_status(status: StatusCode) -> Self {
        bad_value(status)
    }
    /// A value that could not be fetched is `BadNoCommunication`.
    fn unreachable(_status: StatusCode) -> Self {
        bad_value(StatusCode::BadNoCommunication)
    }
}

impl OpResult for StatusCode {
    fn with_status(status: StatusCode) -> Self {
        status
    }
}

impl OpResult for BrowseResult {
    fn with_status(status: StatusCode) -> Self {
        bad_browse(status)
    }
    /// A mount folder: its local references first, then the field server's
    /// forward references (the field server's Objects folder) that the
    /// folder does not already have (its HasTypeDefinition to FolderType);
    /// when the field server cannot answer, the local references alone.
    fn join(&mut self, field: std::result::Result<Self, StatusCode>) {
        let Ok(field) = field else { return };
        let mut refs = self.references.take().unwrap_or_default();
        let local: Vec<_> = refs
            .iter()
            .map(|rd| (rd.reference_type_id.clone(), rd.node_id.clone()))
            .collect();
        refs.extend(
            field
                .references
                .unwrap_or_default()
                .into_iter()
                .filter(|rd| rd.is_forward)
                .filter(|rd| !local.contains(&(rd.reference_type_id.clone(), rd.node_id.clone()))),
        );
        self.references = Some(refs);
        self.continuation_point = field.continuation_point;
    }
}

impl OpResult for BrowsePathResult {
    fn with_status(status: StatusCode) -> Self {
        BrowsePathResult {
            status_code: status,
            targets: None,
        }
    }
}

impl OpResult for CallMethodResult {
    fn with_status(status: StatusCode) -> Self {
        proxy::bad_call(status)
    }
}

impl OpResult for HistoryReadResult {
    fn with_status(status: StatusCode) -> Self {
        HistoryReadResult {
            status_code: status,
            continuation_point: ByteString::null(),
            history_data: ExtensionObject::null(),
        }
    }
    /// The details' own faults stay; anything else means the field server
    /// could not answer.
    fn unreachable(status: StatusCode) -> Self {
        Self::with_status(match status {
            StatusCode::BadHistoryOperationInvalid
            | StatusCode::BadEventFilterInvalid
            | StatusCode::BadAggregateNotSupported => status,
            _ => StatusCode::BadServerNotConnected,
        })
    }
}

impl Engine {
    /// Stage one of Read: operation count, MaxAge, TimestampsToReturn and
    /// the session. Called before any node is read.
    pub(crate) fn check_read(&self, chan: &ChannelInfo, r: &ReadRequest) -> Result<()> {
        let nodes = r.nodes_to_read.as_deref().unwrap_or(&[]);
        check_count(nodes.len(), self.space.local().limits().max_nodes_per_read)?;
        if r.max_age < 0.0 || r.max_age.is_nan() {
            return Err(ServiceError::Status(StatusCode::BadMaxAgeInvalid));
        }
        if r.timestamps_to_return == TimestampsToReturn::Invalid {
            return Err(ServiceError::Status(
                StatusCode::BadTimestampsToReturnInvalid,
            ));
        }
        self.sessions
            .with_session(chan, &r.request_header, |_| Ok(()))
    }

    /// Read of a gateway without field connections: both stages, no
    /// future (the hot path of a local-only gateway).
    pub(crate) fn read_unmounted(
        &self,
        chan: &ChannelInfo,
        r: &ReadRequest,
    ) -> Result<ResponseMessage> {
        self.check_read(chan, r)?;
        let mut results = self.space.read_local(r, None);
        self.as_the_caller_has_them(chan, r, None, &mut results)?;
        Ok(ReadResponse {
            response_header: ResponseHeader::new_good(&r.request_header),
            results: Some(results),
            diagnostic_infos: None,
        }
        .into())
    }

    /// Turns the UserAccessLevel and UserExecutable a Read returns into the
    /// caller's own (Part 3 5.6.2 and 5.7): the node's (or the field
    /// server's, which knows only the gateway's field user) without the
    /// write bits for a caller who may not write, and not executable for a
    /// method the caller may not call (a field server's method without the
    /// right to write; RequestServerStateChange but for a secure
    /// administrator). A client then offers no input that would fail. The
    /// session diagnostics arrays show other clients' sessions: their
    /// Value is BadUserAccessDenied, and their UserAccessLevel not
    /// readable, but for a secure administrator. Only looks at the session
    /// when the Read asks for one of these.
    fn as_the_caller_has_them(
        &self,
        chan: &ChannelInfo,
        r: &ReadRequest,
        fields: Option<&Fields>,
        results: &mut [DataValue],
    ) -> Result<()> {
        const USER_ACCESS_LEVEL: u32 = 18;
        const USER_EXECUTABLE: u32 = 22;
        let nodes = r.nodes_to_read.as_deref().unwrap_or(&[]);
        if !nodes.iter().any(|n| {
            n.attribute_id == USER_ACCESS_LEVEL
                || n.attribute_id == USER_EXECUTABLE
                || crate::methods::shows_other_sessions(&n.node_id, n.attribute_id)
        }) {
            return Ok(());
        }
        let caller = self
            .sessions
            .caller(chan, &r.request_header.authentication_token)?;
        let anonymous_write = self.config.server.allow_anonymous_write;
        for (node, result) in nodes.iter().zip(results.iter_mut()) {
            if crate::methods::shows_other_sessions(&node.node_id, node.attribute_id)
                && !caller.is_secure_admin()
            {
                *result = DataValue {
                    status: Some(StatusCode::BadUserAccessDenied),
                    ..DataValue::null()
                };
                continue;
            }
            match (node.attribute_id, &mut result.value) {
                (USER_ACCESS_LEVEL, Some(opcua_types::Variant::Byte(level))) => {
                    *level = caller.user_access_level(*level, anonymous_write);
                    let value = opcua_types::AttributeId::Value as u32;
                    if crate::methods::shows_other_sessions(&node.node_id, value)
                        && !caller.is_secure_admin()
                    {
                        // CurrentRead off.
                        *level &= !0x01;
                    }
                }
                (USER_EXECUTABLE, Some(opcua_types::Variant::Boolean(executable))) => {
                    let allowed = if crate::methods::is_request_server_state_change(&node.node_id) {
                        caller.is_secure_admin()
                    } else {
                        !matches!(route_node(fields, &node.node_id, true), Route::Mount(_))
                            || caller.can_write(anonymous_write)
                    };
                    *executable &= allowed;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Read; mounted nodes are read from their field servers (a mount
    /// folder is a local node).
    pub(crate) async fn read(
        &self,
        chan: &ChannelInfo,
        r: &ReadRequest,
    ) -> Result<ResponseMessage> {
        self.check_read(chan, r)?;
        let nodes = r.nodes_to_read.as_deref().unwrap_or(&[]);
        let fields = self.space.fields();
        let fields = fields.as_deref();
        let split = Split::new(nodes.len(), |i| route_node(fields, &nodes[i].node_id, true));
        let ctx = ctx_of(&r.request_header);
        let (ts, max_age) = (r.timestamps_to_return, r.max_age);
        let out = split
            .run(
                ctx.deadline,
                async { Ok::<_, ServiceError>(self.space.read_local(r, Some(split.local()))) },
                |m, idx| {
                    let ops = Arc::new(pick(nodes, idx));
                    on_mount(fields, m, ctx, OnLoss::RetryOnce, move |link, _| {
                        let ops = ops.clone();
                        async move { proxy::read(&link, &ops, ts, max_age, ctx).await }
                    })
                },
            )
            .await?;
        let mut results = out.results;
        self.as_the_caller_has_them(chan, r, fields, &mut results)?;
        Ok(ReadResponse {
            response_header: header_with(&r.request_header, &out.diagnostics),
            results: Some(results),
            diagnostic_infos: out.diagnostics.infos(),
        }
        .into())
    }

    /// Write; mounted nodes are written on their field servers with the
    /// same permission as local writes.
    pub(crate) async fn write(
        &self,
        chan: &ChannelInfo,
        r: &WriteRequest,
    ) -> Result<ResponseMessage> {
        let items = r.nodes_to_write.as_deref().unwrap_or(&[]);
        check_count(items.len(), self.space.local().limits().max_nodes_per_write)?;
        let caller = self
            .sessions
            .caller(chan, &r.request_header.authentication_token)?;
        let can_write = caller.can_write(self.config.server.allow_anonymous_write);
        let fields = self.space.fields();
        let fields = fields.as_deref();
        let split = Split::new(items.len(), |i| {
            match route_node(fields, &items[i].node_id, true) {
                Route::Mount(_) if !can_write => Route::Answered(StatusCode::BadUserAccessDenied),
                route => route,
            }
        });
        let ctx = ctx_of(&r.request_header);
        let local = async {
            let now = opcua_types::DateTime::now();
            let mut space = self.space.local_mut();
            Ok::<_, ServiceError>(
                split
                    .local()
                    .iter()
                    .map(|i| space.write(now, &items[*i], can_write))
                    .collect(),
            )
        };
        let out = split
            .run(ctx.deadline, local, |m, idx| {
                let ops = Arc::new(pick(items, idx));
                on_mount(fields, m, ctx, OnLoss::Fail, move |link, _| {
                    let ops = ops.clone();
                    async move { proxy::write(&link, &ops, ctx).await }
                })
            })
            .await?;
        let written = out.results.iter().filter(|s| s.is_good()).count();
        if written > 0 {
            tracing::info!(user = %caller.actor(), count = written, "values written");
        }
        Ok(WriteResponse {
            response_header: header_with(&r.request_header, &out.diagnostics),
            results: Some(out.results),
            diagnostic_infos: out.diagnostics.infos(),
        }
        .into())
    }

    /// Browse; mounted nodes are browsed on their field servers, and a
    /// mount folder shows its local references followed by the field
    /// server's Objects folder content.
    pub(crate) async fn browse(
        &self,
        chan: &ChannelInfo,
        r: &BrowseRequest,
    ) -> Result<ResponseMessage> {
        let nodes = r.nodes_to_browse.as_deref().unwrap_or(&[]);
        let max = {
            let space = self.space.local();
            check_count(nodes.len(), space.limits().max_nodes_per_browse)?;
            space.check_view(&r.view).map_err(ServiceError::Status)?;
            match r.requested_max_references_per_node {
                0 => self.config.server.max_references_per_node,
                n => n.min(self.config.server.max_references_per_node),
            }
        };
        self.sessions
            .with_session(chan, &r.request_header, |_| Ok(()))?;
        let fields = self.space.fields();
        let fields = fields.as_deref();
        let split = {
            let space = self.space.local();
            Split::new(nodes.len(), |i| {
                if let Err(status) = space.check_browse_description(&nodes[i]) {
                    return Route::Answered(status);
                }
                match route_node(fields, &nodes[i].node_id, false) {
                    Route::Mount(m)
                        if fields.is_some_and(|f| f.is_mount_folder(m, &nodes[i].node_id)) =>
                    {
                        Route::Both(m)
                    }
                    route => route,
                }
            })
        };
        let ctx = ctx_of(&r.request_header);
        let local = async {
            let space = self.space.local();
            let ops = pick(nodes, split.local());
            self.sessions.with_session(chan, &r.request_header, |s| {
                Ok(space.browse(&r.view, max, &ops, &mut s.continuation_points))
            })
        };
        let out = split
            .run(ctx.deadline, local, |m, idx| {
                let ops = Arc::new(pick(nodes, idx));
                let max = r.requested_max_references_per_node;
                on_mount(fields, m, ctx, OnLoss::RetryOnce, move |link, mount| {
                    let ops = ops.clone();
                    async move { proxy::browse(&link, mount, max, &ops, ctx).await }
                })
            })
            .await?;
        Ok(BrowseResponse {
            response_header: header_with(&r.request_header, &out.diagnostics),
            results: Some(out.results),
            diagnostic_infos: out.diagnostics.infos(),
        }
        .into())
    }

    /// BrowseNext: a field continuation point goes back to its mount; one
    /// naming no mount is invalid.
    pub(crate) async fn browse_next(
        &self,
        chan: &ChannelInfo,
        r: &BrowseNextRequest,
    ) -> Result<ResponseMessage> {
        let cps = r.continuation_points.as_deref().unwrap_or(&[]);
        check_count(cps.len(), self.space.local().limits().max_nodes_per_browse)?;
        self.sessions
            .with_session(chan, &r.request_header, |_| Ok(()))?;
        let fields = self.space.fields();
        let fields = fields.as_deref();
        // A continuation point names its mount by the tag of the
        // connection that made it: one of a connection since removed or
        // changed is invalid.
        let split = Split::new(cps.len(), |i| match proxy::unwrap_cp(&cps[i]) {
            Some((tag, _)) => match fields.and_then(|f| f.mount_of_tag(tag)) {
                Some(m) => Route::Mount(m),
                None => Route::Answered(StatusCode::BadContinuationPointInvalid),
            },
            None => Route::Local,
        });
        let ctx = ctx_of(&r.request_header);
        let local = async {
            let space = self.space.local();
            let ops = pick(cps, split.local());
            self.sessions.with_session(chan, &r.request_header, |s| {
                Ok(space.browse_next(
                    r.release_continuation_points,
                    &ops,
                    &mut s.continuation_points,
                ))
            })
        };
        let release = r.release_continuation_points;
        let out = split
            .run(ctx.deadline, local, |m, idx| {
                let field_cps: Arc<Vec<ByteString>> = Arc::new(
                    idx.iter()
                        .filter_map(|i| proxy::unwrap_cp(&cps[*i]).map(|(_, cp)| cp))
                        .collect(),
                );
                on_mount(fields, m, ctx, OnLoss::RetryOnce, move |link, mount| {
                    let field_cps = field_cps.clone();
                    async move { proxy::browse_next(&link, mount, release, &field_cps, ctx).await }
                })
            })
            .await?;
        Ok(BrowseNextResponse {
            response_header: header_with(&r.request_header, &out.diagnostics),
            results: Some(out.results),
            diagnostic_infos: out.diagnostics.infos(),
        }
        .into())
    }

    /// TranslateBrowsePathsToNodeIds. The local space resolves every path
    /// first; a path it cannot resolve that starts on a mounted node, or
    /// crosses a mount folder, is resolved by that field server (from the
    /// folder on). A path that still does not resolve and goes up through
    /// an inverse reference is walked across the sides ([`Engine::walk`]).
    pub(crate) async fn translate(
        &self,
        chan: &ChannelInfo,
        r: &TranslateBrowsePathsToNodeIdsRequest,
    ) -> Result<ResponseMessage> {
        let paths = r.browse_paths.as_deref().unwrap_or(&[]);
        let (mut local, remote) = {
            let space = self.space.local();
            check_count(paths.len(), space.limits().max_nodes_per_translate)?;
            self.sessions
                .with_session(chan, &r.request_header, |_| Ok(()))?;
            let local = space.translate(paths);
            let remote = match self.space.fields() {
                Some(fields) => remote_paths(&fields, &space, paths, &local),
                None => HashMap::new(),
            };
            (local, remote)
        };
        let fields = self.space.fields();
        let fields = fields.as_deref();
        let split = Split::new(paths.len(), |i| match remote.get(&i) {
            Some((m, _)) => Route::Mount(*m),
            None => Route::Local,
        });
        let ctx = ctx_of(&r.request_header);
        let local = async {
            Ok::<_, ServiceError>(
                split
                    .local()
                    .iter()
                    .filter_map(|i| local.get_mut(*i).map(std::mem::take))
                    .collect(),
            )
        };
        let out = split
            .run(ctx.deadline, local, |m, idx| {
                let ops: Arc<Vec<BrowsePath>> = Arc::new(
                    idx.iter()
                        .filter_map(|i| remote.get(i).map(|(_, p)| p.clone()))
                        .collect(),
                );
                on_mount(fields, m, ctx, OnLoss::RetryOnce, move |link, _| {
                    let ops = ops.clone();
                    async move { proxy::translate(&link, &ops, ctx).await }
                })
            })
            .await?;
        let mut results = out.results;
        let mut diagnostics = out.diagnostics;
        if let Some(fields) = fields {
            let mut budget = WALK_MAX_CALLS;
            for (i, p) in paths.iter().enumerate() {
                let unresolved = results.get(i).is_some_and(|res| !res.status_code.is_good());
                if unresolved && goes_up(p) {
                    // Only a resolved path replaces the first answer, whose
                    // status says best why a path does not resolve.
                    if let Some(walked) = self.walk(fields, p, ctx, &mut budget).await {
                        results[i] = walked;
                        // What the first pass said about it no longer holds.
                        diagnostics.place(&[i], Some(vec![opcua_types::DiagnosticInfo::null()]));
                    }
                }
            }
        }
        Ok(TranslateBrowsePathsToNodeIdsResponse {
            response_header: header_with(&r.request_header, &diagnostics),
            results: Some(results),
            diagnostic_infos: diagnostics.infos(),
        }
        .into())
    }

    /// Resolves `path` one element at a time, each from the nodes the one
    /// before reached, on whichever side holds each node: the local space,
    /// or the field server of its mount (a mount folder is the field
    /// server's Objects folder on the way down and the gateway's node on
    /// the way up). Called for a path that goes up through an inverse
    /// reference and that the first pass, which gives a path to one side,
    /// could not resolve: no single server knows both sides of a mount
    /// folder. `None` (keep the first answer) when it does not resolve
    /// either, when a mount on the way cannot answer, when the path is
    /// longer than [`WALK_MAX_ELEMENTS`], reaches more than
    /// [`WALK_MAX_NODES`] nodes at once, or would take more field-server
    /// calls than are left of the request's `budget` (of
    /// [`WALK_MAX_CALLS`]).
    async fn walk(
        &self,
        fields: &Fields,
        path: &BrowsePath,
        ctx: Ctx,
        budget: &mut usize,
    ) -> Option<BrowsePathResult> {
        let elements = path.relative_path.elements.as_deref().unwrap_or(&[]);
        if elements.is_empty() || elements.len() > WALK_MAX_ELEMENTS {
            return None;
        }
        let mut current = vec![path.starting_node.clone()];
        for element in elements {
            let one = |n: &NodeId| BrowsePath {
                starting_node: n.clone(),
                relative_path: RelativePath {
                    elements: Some(vec![element.clone()]),
                },
            };
            let mut local = Vec::new();
            let mut mounted: std::collections::BTreeMap<usize, Vec<BrowsePath>> =
                std::collections::BTreeMap::new();
            // A mount folder is the gateway's node on the way up.
            for n in &current {
                match route_node(Some(fields), n, element.is_inverse) {
                    Route::Mount(m) => mounted.entry(m).or_default().push(one(n)),
                    _ => local.push(one(n)),
                }
            }
            let mut reached = Vec::new();
            if !local.is_empty() {
                reached.extend(self.space.local().translate(&local));
            }
            for (m, paths) in mounted {
                // The field servers' share of the request is bounded, not
                // multiplied by its paths and their elements.
                *budget = budget.checked_sub(1)?;
                let paths = Arc::new(paths);
                let answer = on_mount(Some(fields), m, ctx, OnLoss::RetryOnce, |link, _| {
                    let paths = paths.clone();
                    async move { proxy::translate(&link, &paths, ctx).await }
                })
                .await;
                match answer {
                    Ok(a) => reached.extend(a.results),
                    // A mount that cannot answer: what the first pass said.
                    Err(_) => return None,
                }
            }
            let mut next: Vec<NodeId> = Vec::new();
            for target in reached
                .into_iter()
                .filter(|r| r.status_code.is_good())
                .flat_map(|r| r.targets.unwrap_or_default())
            {
                let whole = target.remaining_path_index == u32::MAX;
                let here =
                    target.target_id.server_index == 0 && target.target_id.namespace_uri.is_empty();
                if whole && here && !next.contains(&target.target_id.node_id) {
                    next.push(target.target_id.node_id);
                }
            }
            if next.is_empty() || next.len() > WALK_MAX_NODES {
                return None;
            }
            current = next;
        }
        Some(BrowsePathResult {
            status_code: StatusCode::Good,
            targets: Some(
                current
                    .into_iter()
                    .map(|n| BrowsePathTarget {
                        target_id: n.into(),
                        remaining_path_index: u32::MAX,
                    })
                    .collect(),
            ),
        })
    }

    /// Call; methods of mounted objects are called on their field servers.
    pub(crate) async fn call(
        &self,
        chan: &ChannelInfo,
        r: &CallRequest,
    ) -> Result<ResponseMessage> {
        let calls = r.methods_to_call.as_deref().unwrap_or(&[]);
        check_count(
            calls.len(),
            self.space.local().limits().max_nodes_per_method_call,
        )?;
        let caller = self
            .sessions
            .caller(chan, &r.request_header.authentication_token)?;
        // A field server's method may start or change a machine: it takes
        // the right to write (operators and administrators; anonymous only
        // with allow_anonymous_write), as a Write of its values does.
        let can_write = caller.can_write(self.config.server.allow_anonymous_write);
        let fields = self.space.fields();
        let fields = fields.as_deref();
        // ConditionRefresh(2) name a northbound subscription: always ours.
        let split = Split::new(calls.len(), |i| {
            if crate::alarms::is_condition_refresh(&calls[i].method_id) {
                Route::Local
            } else {
                match route_node(fields, &calls[i].object_id, false) {
                    Route::Mount(_) if !can_write => {
                        Route::Answered(StatusCode::BadUserAccessDenied)
                    }
                    route => route,
                }
            }
        });
        let ctx = ctx_of(&r.request_header);
        let local = async {
            let mut results = Vec::with_capacity(split.local().len());
            for i in split.local() {
                results.push(self.call_one(&caller, &calls[*i]).await);
            }
            Ok::<_, ServiceError>(results)
        };
        let out = split
            .run(ctx.deadline, local, |m, idx| {
                let ops = Arc::new(pick(calls, idx));
                on_mount(fields, m, ctx, OnLoss::Fail, move |link, _| {
                    let ops = ops.clone();
                    async move { proxy::call(&link, &ops, ctx).await }
                })
            })
            .await?;
        tracing::debug!(user = %caller.actor(), count = calls.len(), "methods called");
        Ok(CallResponse {
            response_header: header_with(&r.request_header, &out.diagnostics),
            results: Some(out.results),
            diagnostic_infos: out.diagnostics.infos(),
        }
        .into())
    }

    /// HistoryRead: mounted nodes are read from their field servers; the
    /// local space keeps no history (`BadHistoryOperationUnsupported`).
    pub(crate) async fn history_read(
        &self,
        chan: &ChannelInfo,
        r: &HistoryReadRequest,
    ) -> Result<ResponseMessage> {
        let nodes = r.nodes_to_read.as_deref().unwrap_or(&[]);
        check_count(nodes.len(), self.space.local().limits().max_nodes_per_read)?;
        // Neither is invalid for HistoryRead (Part 4 5.10.3.2): a history
        // value without timestamps says nothing.
        if matches!(
            r.timestamps_to_return,
            TimestampsToReturn::Invalid | TimestampsToReturn::Neither
        ) {
            return Err(ServiceError::Status(
                StatusCode::BadTimestampsToReturnInvalid,
            ));
        }
        self.sessions
            .with_session(chan, &r.request_header, |_| Ok(()))?;
        let fields = self.space.fields();
        let fields = fields.as_deref();
        let split = {
            let local = self.space.local();
            Split::new(nodes.len(), |i| {
                match route_node(fields, &nodes[i].node_id, false) {
                    Route::Local if !local.contains(&nodes[i].node_id) => {
                        Route::Answered(StatusCode::BadNodeIdUnknown)
                    }
                    Route::Local => Route::Answered(StatusCode::BadHistoryOperationUnsupported),
                    route => route,
                }
            })
        };
        let ctx = ctx_of(&r.request_header);
        let (details, ts, release) = (
            &r.history_read_details,
            r.timestamps_to_return,
            r.release_continuation_points,
        );
        let out = split
            .run(
                ctx.deadline,
                async { Ok::<_, ServiceError>(Vec::new()) },
                |m, idx| {
                    let ops = Arc::new(pick(nodes, idx));
                    on_mount(fields, m, ctx, OnLoss::RetryOnce, move |link, mount| {
                        let ops = ops.clone();
                        async move {
                            proxy::history_read(&link, mount, details, ts, release, &ops, ctx).await
                        }
                    })
                },
            )
            .await?;
        Ok(HistoryReadResponse {
            response_header: header_with(&r.request_header, &out.diagnostics),
            results: Some(out.results),
            diagnostic_infos: out.diagnostics.infos(),
        }
        .into())
    }
}

/// Most elements of a path that [`Engine::walk`] follows.
const WALK_MAX_ELEMENTS: usize = 32;
/// Most nodes [`Engine::walk`] follows from one element to the next.
const WALK_MAX_NODES: usize = 64;
/// Most field-server calls the walks of one request make: a request of
/// many long paths that do not resolve must not become thousands of
/// requests to the PLCs behind the gateway.
const WALK_MAX_CALLS: usize = 32;

/// Whether `path` follows an inverse reference (up, possibly out of a
/// mount): the paths [`Engine::walk`] resolves again.
fn goes_up(path: &BrowsePath) -> bool {
    path.relative_path
        .elements
        .as_deref()
        .unwrap_or(&[])
        .iter()
        .any(|e| e.is_inverse)
}

/// The paths a field server resolves, by request index: (mount, path from
/// the mount's node on). A path whose local result is Good stays local; one
/// that starts on a mounted node goes whole to its mount; otherwise the
/// longest prefix that the local space resolves to a mount folder is cut
/// off and the rest goes to that mount.
fn remote_paths(
    fields: &Fields,
    space: &uagate_space::LocalSpace,
    paths: &[BrowsePath],
    local: &[BrowsePathResult],
) -> HashMap<usize, (usize, BrowsePath)> {
    let mut remote = HashMap::new();
    for (i, p) in paths.iter().enumerate() {
        if local.get(i).is_some_and(|res| res.status_code.is_good()) {
            continue;
        }
        if let Some(m) = fields.route(&p.starting_node) {
            remote.insert(i, (m, p.clone()));
            continue;
        }
        let elements = p.relative_path.elements.as_deref().unwrap_or(&[]);
        for k in (1..elements.len()).rev() {
            let prefix = BrowsePath {
                starting_node: p.starting_node.clone(),
                relative_path: RelativePath {
                    elements: Some(elements[..k].to_vec()),
                },
            };
            let target = space
                .translate(std::slice::from_ref(&prefix))
                .into_iter()
                .next()
                .and_then(|res| res.targets)
                .and_then(|t| t.into_iter().next())
                .map(|t| t.target_id.node_id);
            if let Some(folder) = target {
                if let Some(m) = fields.route(&folder) {
                    let rest = BrowsePath {
                        starting_node: folder,
                        relative_path: RelativePath {
                            elements: Some(elements[k..].to_vec()),
                        },
                    };
                    remote.insert(i, (m, rest));
                    break;
                }
            }
        }
    }
    remote
}
