//! The View service set (Browse, BrowseNext, TranslateBrowsePathsToNodeIds)
//! over the local space (OPC UA Part 4 5.8) and the per-session store of
//! Browse continuation points (Part 4 7.9).

use std::collections::{HashSet, VecDeque};

use opcua_nodes::HasNodeId;
use opcua_types::{
    BrowseDescription, BrowseDirection, BrowsePath, BrowsePathResult, BrowsePathTarget,
    BrowseResult, ByteString, ExpandedNodeId, LocalizedText, NodeClass, NodeId, QualifiedName,
    ReferenceDescription, StatusCode, ViewDescription,
};

use crate::LocalSpace;

const MASK_REFERENCE_TYPE: u32 = 1;
const MASK_IS_FORWARD: u32 = 2;
const MASK_NODE_CLASS: u32 = 4;
const MASK_BROWSE_NAME: u32 = 8;
const MASK_DISPLAY_NAME: u32 = 16;
const MASK_TYPE_DEFINITION: u32 = 32;

/// One paused Browse operation.
#[derive(Debug)]
struct Paused {
    id: ByteString,
    /// Request sequence number in which this point was issued.
    issued_in: u64,
    /// Effective per-node maximum of the original Browse.
    max_refs: usize,
    remaining: VecDeque<ReferenceDescription>,
}

/// Per-session store of Browse continuation points, bounded by
/// `MaxBrowseContinuationPoints`.
///
/// Owned by the session and passed to [`LocalSpace::browse`] /
/// [`LocalSpace::browse_next`]; dropped (or [`clear`](Self::clear)ed) when the
/// session closes. A point holds a snapshot of the references still to be
/// returned, so it does not depend on where they came from (mounts can reuse
/// it through [`page_references`]). As Part 4 7.9 requires, points issued by
/// earlier requests are freed (oldest first) when a new request needs a slot;
/// only when every slot is taken by the current request does an operation get
/// `BadNoContinuationPoints`.
#[derive(Debug)]
pub struct ContinuationPoints {
    max: usize,
    next_id: u64,
    request_seq: u64,
    points: VecDeque<Paused>,
}

impl ContinuationPoints {
    /// A store holding at most `max` points (at least one, as Part 4 requires
    /// every server to support one per session).
    pub fn new(max: u16) -> Self {
        Self {
            max: usize::from(max.max(1)),
            next_id: 1,
            request_seq: 0,
            points: VecDeque::new(),
        }
    }

    /// Number of live continuation points.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// `true` when no continuation point is live.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Releases every continuation point (session closed or reset).
    pub fn clear(&mut self) {
        self.points.clear();
    }

    /// Marks the start of a new Browse/BrowseNext request: points issued
    /// before this call become eligible for eviction.
    pub fn begin_request(&mut self) {
        self.request_seq += 1;
    }

    /// Stores `remaining` references and returns the new point's id, or
    /// `BadNoContinuationPoints` when every slot is used by the current request.
    fn issue(
        &mut self,
        max_refs: usize,
        remaining: VecDeque<ReferenceDescription>,
    ) -> Result<ByteString, StatusCode> {
        if self.points.len() >= self.max {
            let seq = self.request_seq;
            match self.points.iter().position(|p| p.issued_in < seq) {
                Some(i) => {
                    self.points.remove(i);
                }
                None => return Err(StatusCode::BadNoContinuationPoints),
            }
        }
        let n = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let mut bytes = b"uagcp".to_vec();
        bytes.extend_from_slice(&n.to_be_bytes());
        let id = ByteString::from(bytes);
        self.points.push_back(Paused {
            id: id.clone(),
            issued_in: self.request_seq,
            max_refs,
            remaining,
        });
        Ok(id)
    }

    fn take(&mut self, id: &ByteString) -> Option<Paused> {
        if id.is_null() {
            return None;
        }
        let i = self.points.iter().position(|p| &p.id == id)?;
        self.points.remove(i)
    }
}

/// Returns up to `max_refs` (0 = all) of `refs` as a Good BrowseResult and
/// parks the rest in `cps`. When no slot is free the result is
/// `BadNoContinuationPoints` with no references.
///
/// Used by [`LocalSpace::browse`]; exposed so that mounted field-server
/// spaces can page their references through the same per-session store.
/// Call [`ContinuationPoints::begin_request`] once per request first.
pub fn page_references(
    mut refs: Vec<ReferenceDescription>,
    max_refs: usize,
    cps: &mut ContinuationPoints,
) -> BrowseResult {
    if max_refs == 0 || refs.len() <= max_refs {
        return BrowseResult {
            status_code: StatusCode::Good,
            continuation_point: ByteString::null(),
            references: Some(refs),
        };
    }
    let rest: VecDeque<ReferenceDescription> = refs.split_off(max_refs).into();
    match cps.issue(max_refs, rest) {
        Ok(cp) => BrowseResult {
            status_code: StatusCode::Good,
            continuation_point: cp,
            references: Some(refs),
        },
        Err(e) => bad_browse(e),
    }
}

fn bad_browse(status: StatusCode) -> BrowseResult {
    BrowseResult {
        status_code: status,
        continuation_point: ByteString::null(),
        references: None,
    }
}

fn effective_max(requested: u32, limit: u32) -> usize {
    let m = match (requested, limit) {
        (0, l) => l,
        (r, 0) => r,
        (r, l) => r.min(l),
    };
    m as usize
}

impl LocalSpace {
    /// Browse (Part 4 5.8.2): the references of each node in `nodes`.
    ///
    /// `max_refs_per_node` is the request's `requestedMaxReferencesPerNode`
    /// (0 = no client limit); the effective maximum is the smaller of it and
    /// `SpaceLimits::max_references_per_node`. Only the null view is known:
    /// any other view yields `BadViewIdUnknown` for every node (the dispatcher
    /// may return that as the service result, see [`LocalSpace::check_view`]).
    pub fn browse(
        &self,
        view: &ViewDescription,
        max_refs_per_node: u32,
        nodes: &[BrowseDescription],
        cps: &mut ContinuationPoints,
    ) -> Vec<BrowseResult> {
        cps.begin_request();
        if let Err(e) = self.check_view(view) {
            return nodes.iter().map(|_| bad_browse(e)).collect();
        }
        let max = effective_max(max_refs_per_node, self.limits.max_references_per_node);
        nodes
            .iter()
            .map(|d| match self.collect_references(d) {
                Ok(refs) => page_references(refs, max, cps),
                Err(e) => bad_browse(e),
            })
            .collect()
    }

    /// `Ok` for the default (null) view; `BadViewIdUnknown` otherwise, since
    /// the local space defines no View nodes.
    pub fn check_view(&self, view: &ViewDescription) -> Result<(), StatusCode> {
        if view.view_id.is_null() {
            Ok(())
        } else {
            Err(StatusCode::BadViewIdUnknown)
        }
    }

    /// BrowseNext (Part 4 5.8.3). With `release` the points are freed and each
    /// result is Good with no references (unknown points still report
    /// `BadContinuationPointInvalid`); otherwise the next page of each point is
    /// returned, with a fresh point if more remain.
    pub fn browse_next(
        &self,
        release: bool,
        cps_in: &[ByteString],
        cps: &mut ContinuationPoints,
    ) -> Vec<BrowseResult> {
        cps.begin_request();
        cps_in
            .iter()
            .map(|id| match cps.take(id) {
                None => bad_browse(StatusCode::BadContinuationPointInvalid),
                Some(_) if release => BrowseResult {
                    status_code: StatusCode::Good,
                    continuation_point: ByteString::null(),
                    references: None,
                },
                Some(p) => page_references(p.remaining.into(), p.max_refs, cps),
            })
            .collect()
    }

    /// The checks of a BrowseDescription that do not depend on where its
    /// node lives (Part 4 5.8.2): a browse direction that is none of
    /// Forward, Inverse, Both is BadBrowseDirectionInvalid; a standard
    /// (namespace 0) reference type that is not one is
    /// BadReferenceTypeIdInvalid. The gateway answers these itself for a
    /// mounted node too, since field servers differ in what they accept.
    pub fn check_browse_description(&self, d: &BrowseDescription) -> Result<(), StatusCode> {
        if !matches!(
            d.browse_direction,
            BrowseDirection::Forward | BrowseDirection::Inverse | BrowseDirection::Both
        ) {
            return Err(StatusCode::BadBrowseDirectionInvalid);
        }
        if !d.reference_type_id.is_null()
            && d.reference_type_id.namespace == 0
            && !self.is_reference_type(&d.reference_type_id)
        {
            return Err(StatusCode::BadReferenceTypeIdInvalid);
        }
        Ok(())
    }

    /// All references of one BrowseDescription, filtered and described
    /// according to its masks, in a stable order.
    fn collect_references(
        &self,
        d: &BrowseDescription,
    ) -> Result<Vec<ReferenceDescription>, StatusCode> {
        self.check_browse_description(d)?;
        let filter = if d.reference_type_id.is_null() {
            None
        } else if self.is_reference_type(&d.reference_type_id) {
            Some((&d.reference_type_id, d.include_subtypes))
        } else {
            return Err(StatusCode::BadReferenceTypeIdInvalid);
        };
        if self.find(&d.node_id).is_none() {
            return Err(StatusCode::BadNodeIdUnknown);
        }
        let mut out = Vec::new();
        for (ref_type, target, forward) in
            self.matching_references(&d.node_id, d.browse_direction, filter)
        {
            let Some(node) = self.find(&target) else {
                continue;
            };
            let class = node.node_class();
            if d.node_class_mask != 0 && d.node_class_mask & (class as u32) == 0 {
                continue;
            }
            out.push(self.describe(ref_type, forward, node, d.result_mask));
        }
        Ok(out)
    }

    /// `(reference type, target, is_forward)` of the references of `node` in
    /// `direction` matching `filter` (`(type, include_subtypes)`), sorted.
    pub(crate) fn matching_references(
        &self,
        node: &NodeId,
        direction: BrowseDirection,
        filter: Option<(&NodeId, bool)>,
    ) -> Vec<(NodeId, NodeId, bool)> {
        let mut refs: Vec<(NodeId, NodeId, bool)> = self
            .space
            .find_references(node, None::<(NodeId, bool)>, &self.types, direction)
            .filter(|r| match filter {
                None => true,
                Some((t, false)) => r.reference_type == t,
                Some((t, true)) => self.is_subtype(r.reference_type, t),
            })
            .map(|r| {
                (
                    r.reference_type.clone(),
                    r.target_node.clone(),
                    r.direction == opcua_nodes::ReferenceDirection::Forward,
                )
            })
            .collect();
        refs.sort_by_cached_key(|(t, n, f)| (!*f, t.to_string(), n.to_string()));
        refs.dedup();
        refs
    }

    fn describe(
        &self,
        ref_type: NodeId,
        forward: bool,
        target: &opcua_nodes::NodeType,
        mask: u32,
    ) -> ReferenceDescription {
        let n = target.as_node();
        let class = target.node_class();
        let type_definition = if mask & MASK_TYPE_DEFINITION != 0
            && matches!(class, NodeClass::Object | NodeClass::Variable)
        {
            self.type_definition(target.node_id())
                .map(ExpandedNodeId::from)
                .unwrap_or_else(ExpandedNodeId::null)
        } else {
            ExpandedNodeId::null()
        };
        ReferenceDescription {
            reference_type_id: if mask & MASK_REFERENCE_TYPE != 0 {
                ref_type
            } else {
                NodeId::null()
            },
            is_forward: mask & MASK_IS_FORWARD != 0 && forward,
            node_id: ExpandedNodeId::from(target.node_id().clone()),
            browse_name: if mask & MASK_BROWSE_NAME != 0 {
                n.browse_name().clone()
            } else {
                QualifiedName::null()
            },
            display_name: if mask & MASK_DISPLAY_NAME != 0 {
                n.display_name().clone()
            } else {
                LocalizedText::null()
            },
            node_class: if mask & MASK_NODE_CLASS != 0 {
                class
            } else {
                NodeClass::Unspecified
            },
            type_definition,
        }
    }

    /// TranslateBrowsePathsToNodeIds (Part 4 5.8.4): follows each relative
    /// path from its starting node. Every element needs a target name
    /// (`BadBrowseNameInvalid`); an empty path is `BadNothingToDo`; no target
    /// is `BadNoMatch`. Complete matches have `remainingPathIndex` = u32::MAX.
    pub fn translate(&self, paths: &[BrowsePath]) -> Vec<BrowsePathResult> {
        paths.iter().map(|p| self.translate_one(p)).collect()
    }

    fn translate_one(&self, path: &BrowsePath) -> BrowsePathResult {
        let fail = |status| BrowsePathResult {
            status_code: status,
            targets: None,
        };
        if self.find(&path.starting_node).is_none() {
            return fail(StatusCode::BadNodeIdUnknown);
        }
        let elements = path.relative_path.elements.as_deref().unwrap_or(&[]);
        if elements.is_empty() {
            return fail(StatusCode::BadNothingToDo);
        }
        if elements
            .iter()
            .any(|e| e.target_name.name.is_empty() || e.target_name.is_null())
        {
            return fail(StatusCode::BadBrowseNameInvalid);
        }
        let mut current = vec![path.starting_node.clone()];
        for e in elements {
            let filter = if e.reference_type_id.is_null() {
                None
            } else {
                Some((&e.reference_type_id, e.include_subtypes))
            };
            let direction = if e.is_inverse {
                BrowseDirection::Inverse
            } else {
                BrowseDirection::Forward
            };
            let mut seen = HashSet::new();
            let mut next = Vec::new();
            for node in &current {
                for (_, target, _) in self.matching_references(node, direction, filter) {
                    let matches = self
                        .find(&target)
                        .is_some_and(|t| t.as_node().browse_name() == &e.target_name);
                    if matches && seen.insert(target.clone()) {
                        next.push(target);
                    }
                }
            }
            if next.is_empty() {
                return fail(StatusCode::BadNoMatch);
            }
            current = next;
        }
        BrowsePathResult {
            status_code: StatusCode::Good,
            targets: Some(
                current
                    .into_iter()
                    .map(|id| BrowsePathTarget {
                        target_id: ExpandedNodeId::from(id),
                        remaining_path_index: u32::MAX,
                    })
                    .collect(),
            ),
        }
    }
}
