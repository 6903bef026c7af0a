//! Proxied services on mounted nodes: the northbound request's operations
//! for one field connection are remapped to the field server's namespace
//! numbering, split into batches within the field server's operation limits,
//! sent over the active session, and the results remapped back and returned
//! in request order.
//!
//! Per-operation failures stay per operation (the caller merges them with
//! the local operations of the same request); a failure of the whole
//! southbound call is returned as `Err(status)` and the caller turns it into
//! the per-operation status the service needs (`BadNoCommunication` for
//! values, `BadServerNotConnected` otherwise).

use std::time::Instant;

use opcua_client::services::{
    Browse, BrowseNext, Call, HistoryRead, Read, TranslateBrowsePaths, Write,
};
use opcua_client::{HistoryReadAction, UARequest};
use opcua_types::{
    BrowseDescription, BrowsePath, BrowsePathResult, BrowseResult, ByteString, CallMethodRequest,
    CallMethodResult, DataValue, DiagnosticBits, DiagnosticInfo, ExtensionObject,
    HistoryReadResult, HistoryReadValueId, ReadValueId, StatusCode, TimestampsToReturn, UAString,
    ViewDescription, WriteValue,
};

use crate::conn::LinkSession;
use crate::diag::{shift_indexes, Diagnostics};
use crate::limits::batches;
use crate::remap::{map_list, SessionMap};

/// What a proxied call needs besides its operations: the northbound
/// request's deadline and the diagnostics it asked for (passed on to the
/// field server).
#[derive(Debug, Clone, Copy)]
pub struct Ctx {
    /// When the northbound request must be answered.
    pub deadline: Instant,
    /// ReturnDiagnostics of the northbound request.
    pub diagnostics: DiagnosticBits,
}

/// The results of a proxied call, in operation order, with their
/// operation-level diagnostics.
#[derive(Debug)]
pub struct Answer<R> {
    /// One result per operation.
    pub results: Vec<R>,
    /// One DiagnosticInfo per operation (null when none) and their strings.
    pub diagnostics: Diagnostics,
}

/// One southbound response: its results, diagnostic infos and string table.
type Batch<R> = (Vec<R>, Option<Vec<DiagnosticInfo>>, Option<Vec<UAString>>);

/// Prefix of a northbound continuation point that stands for a field
/// server's continuation point: `[MARK, mount tag (u16 LE), field bytes…]`;
/// the gateway gives each field connection its own tag.
pub const CP_MARK: u8 = 0xF1;

/// Wraps a field continuation point for the northbound client.
pub fn wrap_cp(mount: u16, cp: &ByteString) -> ByteString {
    match cp.value.as_ref() {
        Some(b) if !b.is_empty() => {
            let mut v = Vec::with_capacity(b.len() + 3);
            v.push(CP_MARK);
            v.extend_from_slice(&mount.to_le_bytes());
            v.extend_from_slice(b);
            ByteString::from(v)
        }
        _ => ByteString::null(),
    }
}

/// Unwraps a northbound continuation point made by [`wrap_cp`]:
/// (mount tag, field continuation point).
pub fn unwrap_cp(cp: &ByteString) -> Option<(u16, ByteString)> {
    let b = cp.value.as_ref()?;
    if b.len() < 4 || b[0] != CP_MARK {
        return None;
    }
    let mount = u16::from_le_bytes([b[1], b[2]]);
    Some((mount, ByteString::from(b[3..].to_vec())))
}

fn status_of(e: opcua_types::Error) -> StatusCode {
    e.status()
}

/// The shape every proxied service shares: remap each operation to the
/// field server (an operation that cannot be remapped gets `failed(status)`
/// and is not sent), send the rest in batches of at most `limit` with
/// `send` (which also maps the results back), and return one result per
/// operation in request order, with the diagnostics of every batch merged
/// into one string table (`rebase` shifts string indexes a result carries
/// itself, e.g. the input argument diagnostics of Call). A batch whose result
/// count does not match is a protocol error of the field server.
async fn batched<Q, F, R, Fut>(
    ops: &[Q],
    limit: u32,
    to_field: impl Fn(&Q) -> Result<F, StatusCode>,
    failed: impl Fn(StatusCode) -> R,
    rebase: impl Fn(&mut R, i32),
    send: impl Fn(Vec<F>) -> Fut,
) -> Result<Answer<R>, StatusCode>
where
    F: Clone,
    Fut: std::future::Future<Output = Result<Batch<R>, StatusCode>>,
{
    let mut out: Vec<Option<R>> = (0..ops.len()).map(|_| None).collect();
    let mut diagnostics = Diagnostics::with_len(ops.len());
    let mut mapped = Vec::with_capacity(ops.len());
    let mut pos = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        match to_field(op) {
            Ok(m) => {
                mapped.push(m);
                pos.push(i);
            }
            Err(st) => out[i] = Some(failed(st)),
        }
    }
    for r in batches(mapped.len(), limit) {
        let (results, infos, strings) = send(mapped[r.clone()].to_vec()).await?;
        if results.len() != r.len() {
            return Err(StatusCode::BadUnexpectedError);
        }
        let shift = diagnostics.add_strings(strings);
        for (k, mut res) in results.into_iter().enumerate() {
            rebase(&mut res, shift);
            out[pos[r.start + k]] = Some(res);
        }
        let infos = infos.map(|v| {
            v.into_iter()
                .map(|mut d| {
                    shift_indexes(&mut d, shift);
                    d
                })
                .collect()
        });
        diagnostics.place(&pos[r.clone()], infos);
    }
    Ok(Answer {
        results: out
            .into_iter()
            .map(|o| o.unwrap_or_else(|| failed(StatusCode::BadUnexpectedError)))
            .collect(),
        diagnostics,
    })
}

/// No string index inside the result itself.
fn keep<R>(_: &mut R, _: i32) {}

/// Read on one field server. `nodes` are gateway ids; results in order.
pub async fn read(
    ls: &LinkSession,
    nodes: &[ReadValueId],
    ts: TimestampsToReturn,
    max_age: f64,
    ctx: Ctx,
) -> Result<Answer<DataValue>, StatusCode> {
    if ctx.diagnostics.is_empty() {
        if let Some(answer) = read_merged(ls, nodes, ts, max_age, ctx).await? {
            return Ok(answer);
        }
    }
    batched(
        nodes,
        ls.limits.max_nodes_per_read,
        |n| ls.map.read_value_id_to_field(n),
        bad,
        keep,
        |batch| async move {
            let resp = Read::new(ls.session())
                .nodes_to_read(batch)
                .timestamps_to_return(ts)
                .max_age(max_age)
                .timeout(ls.timeout_until(ctx.deadline))
                .diagnostics(ctx.diagnostics)
                .send(ls.session().channel())
                .await
                .map_err(status_of)?;
            let infos = resp.diagnostic_infos;
            let strings = resp.response_header.string_table;
            let results = resp
                .results
                .unwrap_or_default()
                .into_iter()
                .map(|dv| ls.map.data_value_to_gateway(dv))
                .collect();
            Ok((results, infos, strings))
        },
    )
    .await
}

/// A Read that joins the session's merged Reads (see [`crate::coalesce`]);
/// `None` when it is too large to merge (it is then sent on its own).
async fn read_merged(
    ls: &LinkSession,
    nodes: &[ReadValueId],
    ts: TimestampsToReturn,
    max_age: f64,
    ctx: Ctx,
) -> Result<Option<Answer<DataValue>>, StatusCode> {
    let mut results: Vec<DataValue> = Vec::with_capacity(nodes.len());
    let mut mapped = Vec::with_capacity(nodes.len());
    let mut pos = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        match ls.map.read_value_id_to_field(n) {
            Ok(m) => {
                mapped.push(m);
                pos.push(i);
                results.push(DataValue::default());
            }
            Err(st) => results.push(bad(st)),
        }
    }
    if mapped.len() > ls.reads.max_nodes() {
        return Ok(None);
    }
    if !mapped.is_empty() {
        let key = crate::coalesce::ReadKey {
            timestamps: ts,
            max_age,
        };
        let values = tokio::time::timeout_at(ctx.deadline.into(), ls.reads.read(key, mapped))
            .await
            .map_err(|_| StatusCode::BadTimeout)??;
        for (i, dv) in pos.into_iter().zip(values) {
            results[i] = ls.map.data_value_to_gateway(dv);
        }
    }
    Ok(Some(Answer {
        diagnostics: Diagnostics::with_len(results.len()),
        results,
    }))
}

fn bad(st: StatusCode) -> DataValue {
    DataValue {
        status: Some(st),
        ..Default::default()
    }
}

/// Write on one field server; statuses in order.
pub async fn write(
    ls: &LinkSession,
    nodes: &[WriteValue],
    ctx: Ctx,
) -> Result<Answer<StatusCode>, StatusCode> {
    batched(
        nodes,
        ls.limits.max_nodes_per_write,
        |n| ls.map.write_value_to_field(n),
        |st| st,
        keep,
        |batch| async move {
            let resp = Write::new(ls.session())
                .nodes_to_write(batch)
                .timeout(ls.timeout_until(ctx.deadline))
                .diagnostics(ctx.diagnostics)
                .send(ls.session().channel())
                .await
                .map_err(status_of)?;
            Ok((
                resp.results.unwrap_or_default(),
                resp.diagnostic_infos,
                resp.response_header.string_table,
            ))
        },
    )
    .await
}

/// Browse on one field server. Continuation points are wrapped with `mount`;
/// the field server's own Server object is dropped from the references.
pub async fn browse(
    ls: &LinkSession,
    mount: u16,
    max_refs: u32,
    nodes: &[BrowseDescription],
    ctx: Ctx,
) -> Result<Answer<BrowseResult>, StatusCode> {
    // The gateway has no views: stage one refuses a ViewId, and the local
    // space answers a Timestamp or ViewVersion with the address space as it
    // is now. The field server is asked the same way (with the caller's
    // Timestamp a field server without versions faults the whole Browse:
    // BadViewIdUnknown from async-opcua).
    let field_view = &ViewDescription::default();
    batched(
        nodes,
        ls.limits.max_nodes_per_browse,
        |n| ls.map.browse_description_to_field(n),
        bad_browse,
        keep,
        |batch| async move {
            let resp = Browse::new(ls.session())
                .view(field_view.clone())
                .max_references_per_node(max_refs)
                .nodes_to_browse(batch)
                .timeout(ls.timeout_until(ctx.deadline))
                .diagnostics(ctx.diagnostics)
                .send(ls.session().channel())
                .await
                .map_err(status_of)?;
            let infos = resp.diagnostic_infos;
            let strings = resp.response_header.string_table;
            let results = resp
                .results
                .unwrap_or_default()
                .into_iter()
                .map(|br| browse_result_to_gateway(ls, mount, br))
                .collect();
            Ok((results, infos, strings))
        },
    )
    .await
}

/// BrowseNext on one field server with field continuation points (already
/// unwrapped); results in order, new continuation points wrapped again.
pub async fn browse_next(
    ls: &LinkSession,
    mount: u16,
    release: bool,
    cps: &[ByteString],
    ctx: Ctx,
) -> Result<Answer<BrowseResult>, StatusCode> {
    batched(
        cps,
        ls.limits.max_nodes_per_browse,
        |cp| Ok(cp.clone()),
        bad_browse,
        keep,
        |batch| async move {
            let resp = BrowseNext::new(ls.session())
                .release_continuation_points(release)
                .continuation_points(batch)
                .timeout(ls.timeout_until(ctx.deadline))
                .diagnostics(ctx.diagnostics)
                .send(ls.session().channel())
                .await
                .map_err(status_of)?;
            let infos = resp.diagnostic_infos;
            let strings = resp.response_header.string_table;
            let results = resp
                .results
                .unwrap_or_default()
                .into_iter()
                .map(|br| browse_result_to_gateway(ls, mount, br))
                .collect();
            Ok((results, infos, strings))
        },
    )
    .await
}

fn browse_result_to_gateway(ls: &LinkSession, mount: u16, br: BrowseResult) -> BrowseResult {
    BrowseResult {
        status_code: br.status_code,
        continuation_point: wrap_cp(mount, &br.continuation_point),
        references: br.references.map(|refs| {
            refs.iter()
                .filter(|r| !is_field_standard_instance(r))
                .map(|r| ls.map.reference_to_gateway(r))
                .collect()
        }),
    }
}

/// Whether `r` leads to one of the field server's own standard instances
/// in namespace 0 (its Server object, Locations, Aliases, ...), which are
/// not re-exposed: in the gateway those node ids are the gateway's own
/// nodes. The Objects folder (the mount folder in the gateway) and the
/// standard types, the same in every server, stay.
fn is_field_standard_instance(r: &opcua_types::ReferenceDescription) -> bool {
    use opcua_types::NodeClass;
    r.node_id.server_index == 0
        && r.node_id.node_id.namespace == 0
        && r.node_id.node_id != opcua_types::ObjectId::ObjectsFolder
        && matches!(
            r.node_class,
            NodeClass::Object | NodeClass::Variable | NodeClass::Method | NodeClass::View
        )
}

fn bad_browse(st: StatusCode) -> BrowseResult {
    BrowseResult {
        status_code: st,
        continuation_point: ByteString::null(),
        references: None,
    }
}

/// TranslateBrowsePathsToNodeIds on one field server; results in order.
pub async fn translate(
    ls: &LinkSession,
    paths: &[BrowsePath],
    ctx: Ctx,
) -> Result<Answer<BrowsePathResult>, StatusCode> {
    batched(
        paths,
        ls.limits.max_nodes_per_translate,
        |p| ls.map.browse_path_to_field(p),
        |st| BrowsePathResult {
            status_code: st,
            targets: None,
        },
        keep,
        |batch| async move {
            let resp = TranslateBrowsePaths::new(ls.session())
                .browse_paths(batch)
                .timeout(ls.timeout_until(ctx.deadline))
                .diagnostics(ctx.diagnostics)
                .send(ls.session().channel())
                .await
                .map_err(status_of)?;
            let infos = resp.diagnostic_infos;
            let strings = resp.response_header.string_table;
            let results = resp
                .results
                .unwrap_or_default()
                .iter()
                .map(|br| ls.map.browse_path_result_to_gateway(br))
                .collect();
            Ok((results, infos, strings))
        },
    )
    .await
}

/// Call on one field server; results in order.
pub async fn call(
    ls: &LinkSession,
    calls: &[CallMethodRequest],
    ctx: Ctx,
) -> Result<Answer<CallMethodResult>, StatusCode> {
    batched(
        calls,
        ls.limits.max_nodes_per_method_call,
        |c| ls.map.call_to_field(c),
        bad_call,
        |cr: &mut CallMethodResult, shift| {
            for d in cr.input_argument_diagnostic_infos.iter_mut().flatten() {
                shift_indexes(d, shift);
            }
        },
        |batch| async move {
            let resp = Call::new(ls.session())
                .methods_to_call(batch)
                .timeout(ls.timeout_until(ctx.deadline))
                .diagnostics(ctx.diagnostics)
                .send(ls.session().channel())
                .await
                .map_err(status_of)?;
            let infos = resp.diagnostic_infos;
            let strings = resp.response_header.string_table;
            let results = resp
                .results
                .unwrap_or_default()
                .iter()
                .map(|cr| ls.map.call_result_to_gateway(cr))
                .collect();
            Ok((results, infos, strings))
        },
    )
    .await
}

/// A failed call result.
pub fn bad_call(st: StatusCode) -> CallMethodResult {
    CallMethodResult {
        status_code: st,
        input_argument_results: None,
        input_argument_diagnostic_infos: None,
        output_arguments: None,
    }
}

/// HistoryRead on one field server (the details are passed through);
/// results in order, continuation points wrapped with `mount`.
#[allow(clippy::too_many_arguments)]
pub async fn history_read(
    ls: &LinkSession,
    mount: u16,
    details: &ExtensionObject,
    ts: TimestampsToReturn,
    release: bool,
    nodes: &[HistoryReadValueId],
    ctx: Ctx,
) -> Result<Answer<HistoryReadResult>, StatusCode> {
    let action = history_action(details, &ls.map)?;
    let action = &action;
    batched(
        nodes,
        ls.limits.max_nodes_per_history_read_data,
        |n| {
            let mut n = n.clone();
            if let Some((m, cp)) = unwrap_cp(&n.continuation_point) {
                if m != mount {
                    return Err(StatusCode::BadContinuationPointInvalid);
                }
                n.continuation_point = cp;
            }
            ls.map.history_read_value_id_to_field(&n)
        },
        bad_history,
        keep,
        |batch| async move {
            let resp = HistoryRead::new(action.clone(), ls.session())
                .timestamps_to_return(ts)
                .release_continuation_points(release)
                .nodes_to_read(batch)
                .timeout(ls.timeout_until(ctx.deadline))
                .diagnostics(ctx.diagnostics)
                .send(ls.session().channel())
                .await
                .map_err(status_of)?;
            let infos = resp.diagnostic_infos;
            let strings = resp.response_header.string_table;
            let results = resp
                .results
                .unwrap_or_default()
                .into_iter()
                .map(|hr| HistoryReadResult {
                    status_code: hr.status_code,
                    continuation_point: wrap_cp(mount, &hr.continuation_point),
                    history_data: ls.map.history_data_to_gateway(hr.history_data),
                })
                .collect();
            Ok((results, infos, strings))
        },
    )
    .await
}

fn bad_history(st: StatusCode) -> HistoryReadResult {
    HistoryReadResult {
        status_code: st,
        continuation_point: ByteString::null(),
        history_data: ExtensionObject::null(),
    }
}

/// The HistoryRead details for the field server. The aggregates of a
/// processed read and the event filter of an event read name nodes, so
/// they are remapped; `BadHistoryOperationInvalid` for details of no
/// known type, `BadEventFilterInvalid` for a filter naming a namespace
/// this field server does not have, `BadAggregateNotSupported` for such
/// an aggregate.
fn history_action(
    details: &ExtensionObject,
    map: &SessionMap,
) -> Result<HistoryReadAction, StatusCode> {
    use opcua_types::{
        ReadAtTimeDetails, ReadEventDetails, ReadProcessedDetails, ReadRawModifiedDetails,
    };
    if let Some(d) = details.inner_as::<ReadRawModifiedDetails>() {
        return Ok(HistoryReadAction::ReadRawModifiedDetails(d.clone()));
    }
    if let Some(d) = details.inner_as::<ReadProcessedDetails>() {
        let aggregate_type = map_list(&d.aggregate_type, |id| map.node_to_field(id))
            .map_err(|_| StatusCode::BadAggregateNotSupported)?;
        return Ok(HistoryReadAction::ReadProcessedDetails(
            ReadProcessedDetails {
                aggregate_type,
                ..d.clone()
            },
        ));
    }
    if let Some(d) = details.inner_as::<ReadAtTimeDetails>() {
        return Ok(HistoryReadAction::ReadAtTimeDetails(d.clone()));
    }
    if let Some(d) = details.inner_as::<ReadEventDetails>() {
        let filter = map
            .event_filter_to_field(&d.filter)
            .map_err(|_| StatusCode::BadEventFilterInvalid)?;
        return Ok(HistoryReadAction::ReadEventDetails(ReadEventDetails {
            filter,
            ..d.clone()
        }));
    }
    Err(StatusCode::BadHistoryOperationInvalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Five operations, limit 2, the second one cannot be remapped: three
    /// batches of the four others, results in request order, each batch's
    /// diagnostics shifted onto one string table.
    #[tokio::test]
    async fn batches_keep_order_and_merge_diagnostics() {
        let ops = [10u32, 11, 12, 13, 14];
        let sent = std::sync::Mutex::new(Vec::new());
        let answer = batched(
            &ops,
            2,
            |op| {
                if *op == 11 {
                    Err(StatusCode::BadNodeIdUnknown)
                } else {
                    Ok(*op)
                }
            },
            |st| (0u32, st),
            keep,
            |batch: Vec<u32>| {
                sent.lock().unwrap().push(batch.clone());
                async move {
                    let infos = batch
                        .iter()
                        .map(|_| DiagnosticInfo {
                            localized_text: Some(0),
                            ..DiagnosticInfo::null()
                        })
                        .collect();
                    let strings = vec![UAString::from(format!("batch of {}", batch[0]))];
                    Ok((
                        batch.iter().map(|b| (*b, StatusCode::Good)).collect(),
                        Some(infos),
                        Some(strings),
                    ))
                }
            },
        )
        .await
        .unwrap();
        assert_eq!(*sent.lock().unwrap(), vec![vec![10, 12], vec![13, 14]]);
        assert_eq!(
            answer.results,
            vec![
                (10, StatusCode::Good),
                (0, StatusCode::BadNodeIdUnknown),
                (12, StatusCode::Good),
                (13, StatusCode::Good),
                (14, StatusCode::Good),
            ]
        );
        let d = &answer.diagnostics;
        assert_eq!(d.strings.len(), 2);
        assert_eq!(d.infos[0].localized_text, Some(0));
        assert_eq!(d.infos[1], DiagnosticInfo::null());
        assert_eq!(d.infos[3].localized_text, Some(1), "second batch shifted");
        assert_eq!(d.strings[1], UAString::from("batch of 13"));
    }

    #[tokio::test]
    async fn a_batch_with_the_wrong_result_count_is_an_error() {
        let r = batched(
            &[1u32, 2],
            0,
            |op| Ok(*op),
            |_| 0u32,
            keep,
            |_batch: Vec<u32>| async { Ok((vec![1u32], None, None)) },
        )
        .await;
        assert_eq!(r.unwrap_err(), StatusCode::BadUnexpectedError);
    }

    #[test]
    fn continuation_points_round_trip_and_reject_foreign() {
        let cp = ByteString::from(vec![1u8, 2, 3]);
        let w = wrap_cp(7, &cp);
        assert_eq!(unwrap_cp(&w), Some((7, cp)));
        assert_eq!(wrap_cp(7, &ByteString::null()), ByteString::null());
        assert_eq!(unwrap_cp(&ByteString::from(vec![0u8, 1, 2, 3])), None);
        assert_eq!(unwrap_cp(&ByteString::from(vec![CP_MARK, 1])), None);
    }
}
