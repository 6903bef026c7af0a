//! Unit tests of the View and Attribute services over the real local space
//! (the full standard namespace 0 node set plus the gateway namespace).

use std::collections::BTreeSet;

use opcua_types::{
    BrowseDescription, BrowseDirection, BrowsePath, BrowseResult, ByteString, DataValue, DateTime,
    ExpandedNodeId, NodeClass, NodeId, NumericRange, ObjectId, ObjectTypeId, QualifiedName,
    ReadValueId, ReferenceTypeId, RelativePath, RelativePathElement, ServerState,
    ServerStatusDataType, StatusCode, TimestampsToReturn, VariableId, Variant, ViewDescription,
};

use crate::*;

fn start() -> DateTime {
    DateTime::ymd_hms(2024, 1, 2, 3, 4, 5)
}

fn later() -> DateTime {
    DateTime::ymd_hms(2024, 1, 2, 4, 4, 5)
}

fn build() -> BuildInfo {
    BuildInfo {
        product_uri: "urn:uagate:product".into(),
        manufacturer_name: "uagate".into(),
        product_name: "uagate edge gateway".into(),
        software_version: "0.1.0".into(),
        build_number: "42".into(),
        build_date: DateTime::ymd(2024, 1, 1),
    }
}

fn space() -> LocalSpace {
    LocalSpace::new(
        "urn:uagate:test-app",
        build(),
        &SpaceLimits::default(),
        start(),
        true,
    )
}

fn id(i: impl Into<NodeId>) -> NodeId {
    i.into()
}

fn gateway_folder() -> NodeId {
    NodeId::new(GATEWAY_NS, GATEWAY_FOLDER)
}

fn desc(node: NodeId, dir: BrowseDirection, rt: NodeId, sub: bool, mask: u32) -> BrowseDescription {
    BrowseDescription {
        node_id: node,
        browse_direction: dir,
        reference_type_id: rt,
        include_subtypes: sub,
        node_class_mask: 0,
        result_mask: mask,
    }
}

fn all_refs(node: NodeId) -> BrowseDescription {
    desc(node, BrowseDirection::Both, NodeId::null(), true, 63)
}

fn targets(r: &BrowseResult) -> Vec<NodeId> {
    r.references
        .iter()
        .flatten()
        .map(|d| d.node_id.node_id.clone())
        .collect()
}

fn rv(node: NodeId, attr: u32, range: &str) -> ReadValueId {
    ReadValueId {
        node_id: node,
        attribute_id: attr,
        index_range: NumericRange::new(range).expect("valid range"),
        data_encoding: QualifiedName::null(),
    }
}

fn read(s: &LocalSpace, node: impl Into<NodeId>, attr: u32) -> DataValue {
    s.read(
        later(),
        &rv(node.into(), attr, ""),
        TimestampsToReturn::Both,
        0.0,
    )
}

fn path(start: impl Into<NodeId>, names: &[&str]) -> BrowsePath {
    BrowsePath {
        starting_node: start.into(),
        relative_path: RelativePath {
            elements: Some(
                names
                    .iter()
                    .map(|n| RelativePathElement {
                        reference_type_id: ReferenceTypeId::HierarchicalReferences.into(),
                        is_inverse: false,
                        include_subtypes: true,
                        target_name: QualifiedName::new(0, *n),
                    })
                    .collect(),
            ),
        },
    }
}

// ---------------------------------------------------------------- Browse

#[test]
fn browse_objects_hierarchical_finds_server_and_gateway() {
    let s = space();
    let mut cps = ContinuationPoints::new(10);
    let res = s.browse(
        &ViewDescription::default(),
        0,
        &[desc(
            id(ObjectId::ObjectsFolder),
            BrowseDirection::Forward,
            id(ReferenceTypeId::HierarchicalReferences),
            true,
            63,
        )],
        &mut cps,
    );
    assert_eq!(res.len(), 1);
    assert_eq!(res[0].status_code, StatusCode::Good);
    assert!(res[0].continuation_point.is_null());
    let t = targets(&res[0]);
    assert!(t.contains(&id(ObjectId::Server)), "{t:?}");
    assert!(t.contains(&gateway_folder()), "{t:?}");
    // HasTypeDefinition is not hierarchical.
    assert!(!t.contains(&id(ObjectTypeId::FolderType)));
    let gw = res[0]
        .references
        .iter()
        .flatten()
        .find(|d| d.node_id.node_id == gateway_folder())
        .expect("gateway");
    assert_eq!(gw.reference_type_id, id(ReferenceTypeId::Organizes));
    assert!(gw.is_forward);
    assert_eq!(gw.node_class, NodeClass::Object);
    assert_eq!(gw.browse_name, QualifiedName::new(GATEWAY_NS, "Gateway"));
    assert_eq!(gw.type_definition.node_id, id(ObjectTypeId::FolderType));
    assert!(cps.is_empty());
}

#[test]
fn browse_inverse_of_server_finds_objects() {
    let s = space();
    let mut cps = ContinuationPoints::new(10);
    let res = s.browse(
        &ViewDescription::default(),
        0,
        &[desc(
            id(ObjectId::Server),
            BrowseDirection::Inverse,
            id(ReferenceTypeId::HierarchicalReferences),
            true,
            63,
        )],
        &mut cps,
    );
    assert_eq!(res[0].status_code, StatusCode::Good);
    let refs = res[0].references.clone().unwrap_or_default();
    assert_eq!(targets(&res[0]), vec![id(ObjectId::ObjectsFolder)]);
    assert!(!refs[0].is_forward);
    assert_eq!(refs[0].reference_type_id, id(ReferenceTypeId::Organizes));
    // Forward browse of the same node must not return Objects.
    let fwd = s.browse(
        &ViewDescription::default(),
        0,
        &[desc(
            id(ObjectId::Server),
            BrowseDirection::Forward,
            id(ReferenceTypeId::HierarchicalReferences),
            true,
            63,
        )],
        &mut cps,
    );
    assert!(!targets(&fwd[0]).contains(&id(ObjectId::ObjectsFolder)));
    assert!(targets(&fwd[0]).contains(&id(VariableId::Server_ServerStatus)));
}

#[test]
fn reference_filter_excludes_other_types() {
    let s = space();
    let mut cps = ContinuationPoints::new(10);
    let view = ViewDescription::default();
    let objects = id(ObjectId::ObjectsFolder);
    let res = s.browse(
        &view,
        0,
        &[
            // Only HasTypeDefinition: FolderType, nothing else.
            desc(
                objects.clone(),
                BrowseDirection::Forward,
                id(ReferenceTypeId::HasTypeDefinition),
                false,
                63,
            ),
            // HierarchicalReferences without subtypes matches no concrete reference.
            desc(
                objects.clone(),
                BrowseDirection::Forward,
                id(ReferenceTypeId::HierarchicalReferences),
                false,
                63,
            ),
            // HasComponent (not Organizes) from Objects: no Server/Gateway.
            desc(
                objects.clone(),
                BrowseDirection::Forward,
                id(ReferenceTypeId::HasComponent),
                true,
                63,
            ),
        ],
        &mut cps,
    );
    assert_eq!(targets(&res[0]), vec![id(ObjectTypeId::FolderType)]);
    assert_eq!(res[1].status_code, StatusCode::Good);
    assert!(targets(&res[1]).is_empty());
    assert!(!targets(&res[2]).contains(&id(ObjectId::Server)));
    assert!(!targets(&res[2]).contains(&gateway_folder()));

    // NodeClassMask: only Variables below the gateway folder; Objects excluded.
    let mut d = desc(
        gateway_folder(),
        BrowseDirection::Both,
        NodeId::null(),
        true,
        63,
    );
    d.node_class_mask = NodeClass::Variable as u32;
    let r = s.browse(&view, 0, &[d], &mut cps);
    let t = targets(&r[0]);
    assert_eq!(t.len(), 3, "{t:?}");
    assert!(t.contains(&NodeId::new(GATEWAY_NS, GATEWAY_UPTIME)));
    assert!(r[0]
        .references
        .iter()
        .flatten()
        .all(|d| d.node_class == NodeClass::Variable));
}

#[test]
fn browse_errors() {
    let s = space();
    let mut cps = ContinuationPoints::new(10);
    let view = ViewDescription::default();
    let res = s.browse(
        &view,
        0,
        &[
            desc(
                NodeId::new(2, "nope"),
                BrowseDirection::Forward,
                NodeId::null(),
                true,
                63,
            ),
            desc(
                id(ObjectId::Server),
                BrowseDirection::Invalid,
                NodeId::null(),
                true,
                63,
            ),
            // A node that exists but is not a ReferenceType.
            desc(
                id(ObjectId::Server),
                BrowseDirection::Forward,
                id(ObjectId::Server),
                true,
                63,
            ),
            desc(
                id(ObjectId::Server),
                BrowseDirection::Forward,
                NodeId::new(0, 999_999u32),
                true,
                63,
            ),
        ],
        &mut cps,
    );
    let codes: Vec<StatusCode> = res.iter().map(|r| r.status_code).collect();
    assert_eq!(
        codes,
        vec![
            StatusCode::BadNodeIdUnknown,
            StatusCode::BadBrowseDirectionInvalid,
            StatusCode::BadReferenceTypeIdInvalid,
            StatusCode::BadReferenceTypeIdInvalid,
        ]
    );
    let v = ViewDescription {
        view_id: NodeId::new(0, 12345u32),
        ..Default::default()
    };
    let res = s.browse(&v, 0, &[all_refs(id(ObjectId::Server))], &mut cps);
    assert_eq!(res[0].status_code, StatusCode::BadViewIdUnknown);
    assert_eq!(s.check_view(&v), Err(StatusCode::BadViewIdUnknown));
}

#[test]
fn result_mask_selects_fields() {
    let s = space();
    let mut cps = ContinuationPoints::new(10);
    let view = ViewDescription::default();
    let none = s.browse(
        &view,
        0,
        &[desc(
            id(ObjectId::ObjectsFolder),
            BrowseDirection::Forward,
            NodeId::null(),
            true,
            0,
        )],
        &mut cps,
    );
    let refs = none[0].references.clone().unwrap_or_default();
    assert!(!refs.is_empty());
    for r in &refs {
        assert!(!r.node_id.is_null(), "NodeId is always returned");
        assert!(r.reference_type_id.is_null());
        assert!(!r.is_forward);
        assert!(r.browse_name.is_null());
        assert!(r.display_name.text.is_null());
        assert_eq!(r.node_class, NodeClass::Unspecified);
        assert!(r.type_definition.is_null());
    }
    // Only BrowseName (8) + NodeClass (4).
    let some = s.browse(
        &view,
        0,
        &[desc(
            id(ObjectId::ObjectsFolder),
            BrowseDirection::Forward,
            NodeId::null(),
            true,
            12,
        )],
        &mut cps,
    );
    let server = some[0]
        .references
        .iter()
        .flatten()
        .find(|d| d.node_id.node_id == id(ObjectId::Server))
        .expect("server")
        .clone();
    assert_eq!(server.browse_name, QualifiedName::new(0, "Server"));
    assert_eq!(server.node_class, NodeClass::Object);
    assert!(server.reference_type_id.is_null());
    assert!(server.display_name.text.is_null());
    assert!(server.type_definition.is_null());
    // All: the type definition of Server is ServerType.
    let all = s.browse(&view, 0, &[all_refs(id(ObjectId::ObjectsFolder))], &mut cps);
    let server = all[0]
        .references
        .iter()
        .flatten()
        .find(|d| d.node_id.node_id == id(ObjectId::Server))
        .expect("server")
        .clone();
    assert_eq!(
        server.type_definition,
        ExpandedNodeId::from(id(ObjectTypeId::ServerType))
    );
    assert_eq!(server.display_name.text.as_ref(), "Server");
}

// ------------------------------------------------------ Continuation points

fn key_set(refs: &[opcua_types::ReferenceDescription]) -> BTreeSet<(String, bool, String)> {
    refs.iter()
        .map(|r| {
            (
                r.reference_type_id.to_string(),
                r.is_forward,
                r.node_id.to_string(),
            )
        })
        .collect()
}

#[test]
fn paged_browse_equals_unlimited_browse() {
    let s = space();
    let view = ViewDescription::default();
    let mut cps = ContinuationPoints::new(10);
    let full = s.browse(&view, 0, &[all_refs(id(ObjectId::Server))], &mut cps);
    let full_refs = full[0].references.clone().unwrap_or_default();
    assert!(
        full_refs.len() > 6,
        "Server has many references: {}",
        full_refs.len()
    );
    assert!(full[0].continuation_point.is_null());

    let first = s.browse(&view, 2, &[all_refs(id(ObjectId::Server))], &mut cps);
    assert_eq!(first[0].status_code, StatusCode::Good);
    let mut got = first[0].references.clone().unwrap_or_default();
    assert_eq!(got.len(), 2);
    let mut cp = first[0].continuation_point.clone();
    assert!(!cp.is_null());
    assert_eq!(cps.len(), 1);
    let mut rounds = 0;
    while !cp.is_null() {
        rounds += 1;
        assert!(rounds < 1000, "browse_next must terminate");
        let next = s.browse_next(false, std::slice::from_ref(&cp), &mut cps);
        assert_eq!(next.len(), 1);
        assert_eq!(next[0].status_code, StatusCode::Good);
        let page = next[0].references.clone().unwrap_or_default();
        assert!(!page.is_empty() && page.len() <= 2);
        got.extend(page);
        // The consumed point is no longer valid.
        let again = s.browse_next(false, std::slice::from_ref(&cp), &mut cps);
        assert_eq!(
            again[0].status_code,
            StatusCode::BadContinuationPointInvalid
        );
        cp = next[0].continuation_point.clone();
    }
    assert_eq!(got.len(), full_refs.len());
    assert_eq!(key_set(&got), key_set(&full_refs));
    assert!(cps.is_empty());
}

#[test]
fn server_limit_caps_references_per_node() {
    let limits = SpaceLimits {
        max_references_per_node: 3,
        ..SpaceLimits::default()
    };
    let s = LocalSpace::new("urn:x", build(), &limits, start(), true);
    let mut cps = ContinuationPoints::new(limits.max_browse_continuation_points);
    let r = s.browse(
        &ViewDescription::default(),
        0,
        &[all_refs(id(ObjectId::Server))],
        &mut cps,
    );
    assert_eq!(r[0].references.as_ref().map(Vec::len), Some(3));
    assert!(!r[0].continuation_point.is_null());
    let r = s.browse(
        &ViewDescription::default(),
        100,
        &[all_refs(id(ObjectId::Server))],
        &mut cps,
    );
    assert_eq!(r[0].references.as_ref().map(Vec::len), Some(3));
}

#[test]
fn release_and_invalid_continuation_points() {
    let s = space();
    let view = ViewDescription::default();
    let mut cps = ContinuationPoints::new(10);
    let r = s.browse(&view, 1, &[all_refs(id(ObjectId::Server))], &mut cps);
    let cp = r[0].continuation_point.clone();
    assert!(!cp.is_null());
    assert_eq!(cps.len(), 1);
    let bogus = ByteString::from(vec![1u8, 2, 3]);
    let rel = s.browse_next(true, &[cp.clone(), bogus.clone()], &mut cps);
    assert_eq!(rel.len(), 2);
    assert_eq!(rel[0].status_code, StatusCode::Good);
    assert!(rel[0].references.as_ref().is_none_or(Vec::is_empty));
    assert_eq!(rel[1].status_code, StatusCode::BadContinuationPointInvalid);
    assert!(cps.is_empty());
    let after = s.browse_next(false, &[cp, bogus, ByteString::null()], &mut cps);
    assert!(after
        .iter()
        .all(|r| r.status_code == StatusCode::BadContinuationPointInvalid));

    // clear() releases everything.
    let r = s.browse(&view, 1, &[all_refs(id(ObjectId::Server))], &mut cps);
    assert_eq!(cps.len(), 1);
    cps.clear();
    let after = s.browse_next(false, &[r[0].continuation_point.clone()], &mut cps);
    assert_eq!(
        after[0].status_code,
        StatusCode::BadContinuationPointInvalid
    );
}

#[test]
fn too_many_continuation_points() {
    let s = space();
    let view = ViewDescription::default();
    let mut cps = ContinuationPoints::new(2);
    let nodes = [
        all_refs(id(ObjectId::Server)),
        all_refs(id(ObjectId::ObjectsFolder)),
        all_refs(id(VariableId::Server_ServerStatus)),
    ];
    let r = s.browse(&view, 1, &nodes, &mut cps);
    assert_eq!(r[0].status_code, StatusCode::Good);
    assert_eq!(r[1].status_code, StatusCode::Good);
    assert_eq!(r[2].status_code, StatusCode::BadNoContinuationPoints);
    assert!(r[2].references.is_none() && r[2].continuation_point.is_null());
    assert_eq!(cps.len(), 2);

    // A later request may reuse the slot of the oldest earlier point (Part 4 7.9).
    let r2 = s.browse(
        &view,
        1,
        &[all_refs(id(VariableId::Server_ServerStatus))],
        &mut cps,
    );
    assert_eq!(r2[0].status_code, StatusCode::Good);
    assert_eq!(cps.len(), 2);
    let old = s.browse_next(false, &[r[0].continuation_point.clone()], &mut cps);
    assert_eq!(old[0].status_code, StatusCode::BadContinuationPointInvalid);
    let kept = s.browse_next(true, &[r[1].continuation_point.clone()], &mut cps);
    assert_eq!(kept[0].status_code, StatusCode::Good);
}

// ------------------------------------------------------------- Translate

#[test]
fn translate_paths() {
    let s = space();
    let mut inverse = path(
        VariableId::Server_ServerStatus_CurrentTime,
        &["ServerStatus"],
    );
    if let Some(e) = inverse.relative_path.elements.as_mut() {
        e[0].is_inverse = true;
    }
    let mut exact = path(ObjectId::ObjectsFolder, &["Server"]);
    if let Some(e) = exact.relative_path.elements.as_mut() {
        e[0].include_subtypes = false;
    }
    let mut gateway = path(ObjectId::ObjectsFolder, &["Gateway", "Uptime"]);
    if let Some(e) = gateway.relative_path.elements.as_mut() {
        e[0].target_name = QualifiedName::new(GATEWAY_NS, "Gateway");
        e[1].target_name = QualifiedName::new(GATEWAY_NS, "Uptime");
    }
    let mut null_name = path(ObjectId::RootFolder, &["Objects", ""]);
    if let Some(e) = null_name.relative_path.elements.as_mut() {
        e[1].target_name = QualifiedName::null();
    }
    let res = s.translate(&[
        path(
            ObjectId::RootFolder,
            &["Objects", "Server", "ServerStatus", "CurrentTime"],
        ),
        path(NodeId::new(GATEWAY_NS, "missing"), &["Objects"]),
        path(ObjectId::RootFolder, &[]),
        null_name,
        path(ObjectId::RootFolder, &["Objects", "NoSuchThing"]),
        inverse,
        exact,
        gateway,
    ]);
    assert_eq!(res[0].status_code, StatusCode::Good);
    let t = res[0].targets.clone().unwrap_or_default();
    assert_eq!(t.len(), 1);
    assert_eq!(
        t[0].target_id.node_id,
        id(VariableId::Server_ServerStatus_CurrentTime)
    );
    assert_eq!(t[0].remaining_path_index, u32::MAX);
    assert_eq!(res[1].status_code, StatusCode::BadNodeIdUnknown);
    assert_eq!(res[2].status_code, StatusCode::BadNothingToDo);
    assert_eq!(res[3].status_code, StatusCode::BadBrowseNameInvalid);
    assert_eq!(res[4].status_code, StatusCode::BadNoMatch);
    assert_eq!(res[5].status_code, StatusCode::Good);
    assert_eq!(
        res[5].targets.clone().unwrap_or_default()[0]
            .target_id
            .node_id,
        id(VariableId::Server_ServerStatus)
    );
    // Objects -> Server is Organizes, not HierarchicalReferences itself.
    assert_eq!(res[6].status_code, StatusCode::BadNoMatch);
    assert_eq!(res[7].status_code, StatusCode::Good);
    assert_eq!(
        res[7].targets.clone().unwrap_or_default()[0]
            .target_id
            .node_id,
        NodeId::new(GATEWAY_NS, GATEWAY_UPTIME)
    );
}

#[test]
fn register_returns_same_ids() {
    let s = space();
    let ids = vec![id(ObjectId::Server), NodeId::new(GATEWAY_NS, "whatever")];
    assert_eq!(s.register(&ids), ids);
}

// ------------------------------------------------------------------ Read

#[test]
fn current_time_is_now_and_timestamps_follow_request() {
    let s = space();
    let now = later();
    let req = rv(id(VariableId::Server_ServerStatus_CurrentTime), 13, "");
    let dv = s.read(now, &req, TimestampsToReturn::Both, 0.0);
    assert_eq!(dv.status(), StatusCode::Good);
    assert_eq!(dv.value, Some(Variant::DateTime(Box::new(now))));
    assert_eq!(dv.server_timestamp, Some(now));
    assert_eq!(dv.source_timestamp, Some(now));
    let dv = s.read(now, &req, TimestampsToReturn::Neither, 0.0);
    assert_eq!((dv.source_timestamp, dv.server_timestamp), (None, None));
    let dv = s.read(now, &req, TimestampsToReturn::Server, 0.0);
    assert_eq!(
        (dv.source_timestamp, dv.server_timestamp),
        (None, Some(now))
    );
    let dv = s.read(now, &req, TimestampsToReturn::Source, 0.0);
    assert_eq!(
        (dv.source_timestamp, dv.server_timestamp),
        (Some(now), None)
    );
    // Non-Value attributes never carry a source timestamp.
    let dv = s.read(
        now,
        &rv(id(ObjectId::Server), 3, ""),
        TimestampsToReturn::Both,
        0.0,
    );
    assert_eq!(
        (dv.source_timestamp, dv.server_timestamp),
        (None, Some(now))
    );
}

#[test]
fn server_status_is_live() {
    let mut s = space();
    s.set_state(ServerState::Shutdown);
    s.set_shutdown(30, opcua_types::LocalizedText::new("en", "maintenance"));
    let dv = read(&s, VariableId::Server_ServerStatus, 13);
    let Some(Variant::ExtensionObject(eo)) = dv.value else {
        panic!("ServerStatus must be a structure: {dv:?}");
    };
    let st = eo
        .inner_as::<ServerStatusDataType>()
        .expect("ServerStatusDataType");
    assert_eq!(st.current_time, later());
    assert_eq!(st.start_time, start());
    assert_eq!(st.state, ServerState::Shutdown);
    assert_eq!(st.seconds_till_shutdown, 30);
    assert_eq!(st.build_info.build_number.as_ref(), "42");
    assert_eq!(
        read(&s, VariableId::Server_ServerStatus_State, 13).value,
        Some(Variant::Int32(ServerState::Shutdown as i32))
    );
    assert_eq!(
        read(&s, VariableId::Server_ServerStatus_StartTime, 13).value,
        Some(Variant::DateTime(Box::new(start())))
    );
    assert_eq!(
        read(&s, VariableId::Server_ServerStatus_SecondsTillShutdown, 13).value,
        Some(Variant::UInt32(30))
    );
    assert_eq!(
        read(
            &s,
            VariableId::Server_ServerStatus_BuildInfo_ProductName,
            13
        )
        .value,
        Some(Variant::String("uagate edge gateway".into()))
    );
    s.set_service_level(200);
    assert_eq!(
        read(&s, VariableId::Server_ServiceLevel, 13).value,
        Some(Variant::Byte(200))
    );
    s.set_current_session_count(7);
    assert_eq!(
        read(
            &s,
            VariableId::Server_ServerDiagnostics_ServerDiagnosticsSummary_CurrentSessionCount,
            13
        )
        .value,
        Some(Variant::UInt32(7))
    );
    assert_eq!(
        read(&s, NodeId::new(GATEWAY_NS, GATEWAY_SESSION_COUNT), 13).value,
        Some(Variant::UInt32(7))
    );
    assert_eq!(
        read(&s, NodeId::new(GATEWAY_NS, GATEWAY_UPTIME), 13).value,
        Some(Variant::Double(3600.0))
    );
    s.set_hostname("edge-01");
    assert_eq!(
        read(&s, NodeId::new(GATEWAY_NS, GATEWAY_HOSTNAME), 13).value,
        Some(Variant::String("edge-01".into()))
    );
    s.set_server_array(&["urn:partner".to_string()]);
    assert_eq!(
        read(&s, VariableId::Server_ServerArray, 13).value,
        Some(Variant::from(vec![
            "urn:uagate:test-app".to_string(),
            "urn:partner".to_string()
        ]))
    );
}

#[test]
fn capabilities_reflect_limits() {
    let limits = SpaceLimits {
        max_nodes_per_read: 17,
        max_nodes_per_browse: 18,
        max_nodes_per_translate: 19,
        max_nodes_per_register: 20,
        max_browse_continuation_points: 4,
        max_string_length: 1234,
        ..SpaceLimits::default()
    };
    let s = LocalSpace::new("urn:x", build(), &limits, start(), true);
    assert_eq!(s.limits(), &limits);
    let v = |n: VariableId| read(&s, n, 13).value;
    use VariableId as V;
    assert_eq!(
        v(V::Server_ServerCapabilities_OperationLimits_MaxNodesPerRead),
        Some(Variant::UInt32(17))
    );
    assert_eq!(
        v(V::Server_ServerCapabilities_OperationLimits_MaxNodesPerBrowse),
        Some(Variant::UInt32(18))
    );
    assert_eq!(
        v(V::Server_ServerCapabilities_OperationLimits_MaxNodesPerTranslateBrowsePathsToNodeIds),
        Some(Variant::UInt32(19))
    );
    assert_eq!(
        v(V::Server_ServerCapabilities_OperationLimits_MaxNodesPerRegisterNodes),
        Some(Variant::UInt32(20))
    );
    assert_eq!(
        v(V::Server_ServerCapabilities_MaxBrowseContinuationPoints),
        Some(Variant::UInt16(4))
    );
    assert_eq!(
        v(V::Server_ServerCapabilities_MaxStringLength),
        Some(Variant::UInt32(1234))
    );
}

/// Every variable under ServerCapabilities has a value: a client that
/// reads a null AccessHistoryDataCapability concludes that this server
/// gives no history, while HistoryRead is passed to the field servers.
#[test]
fn every_capability_has_a_value() {
    let s = space();
    let mut cps = ContinuationPoints::new(10);
    let mut todo = vec![id(ObjectId::Server_ServerCapabilities)];
    // The role set's identity mapping rules (Part 18) are not managed over
    // OPC UA: the console's users and roles are.
    let mut seen = BTreeSet::from([id(ObjectId::Server_ServerCapabilities_RoleSet).to_string()]);
    let mut nulls = Vec::new();
    let mut variables = 0;
    while let Some(node) = todo.pop() {
        if !seen.insert(node.to_string()) || seen.len() > 500 {
            continue;
        }
        let res = s.browse(
            &ViewDescription::default(),
            0,
            &[desc(
                node,
                BrowseDirection::Forward,
                id(ReferenceTypeId::HierarchicalReferences),
                true,
                63,
            )],
            &mut cps,
        );
        for r in res[0].references.iter().flatten() {
            let child = r.node_id.node_id.clone();
            match r.node_class {
                NodeClass::Variable => {
                    variables += 1;
                    let dv = read(&s, child.clone(), 13);
                    if dv.value.is_none() || dv.value == Some(Variant::Empty) {
                        nulls.push(format!("{} ({child})", r.browse_name.name));
                    }
                    todo.push(child);
                }
                NodeClass::Object => todo.push(child),
                _ => {}
            }
        }
    }
    assert!(variables > 20, "{variables}");
    assert!(nulls.is_empty(), "capabilities without a value: {nulls:?}");
    let v = |n: VariableId| read(&s, n, 13).value;
    assert_eq!(
        v(VariableId::HistoryServerCapabilities_AccessHistoryDataCapability),
        Some(Variant::Boolean(true))
    );
    assert_eq!(
        v(VariableId::HistoryServerCapabilities_UpdateDataCapability),
        Some(Variant::Boolean(false))
    );
}

/// Optional features the gateway does not provide are not in its address
/// space: Server.ServerConfiguration (push certificate management) and
/// Server.SetSubscriptionDurable; what it does provide stays.
#[test]
fn unsupported_optional_features_are_not_offered() {
    let s = space();
    let mut cps = ContinuationPoints::new(10);
    let res = s.browse(
        &ViewDescription::default(),
        0,
        &[all_refs(id(ObjectId::Server))],
        &mut cps,
    );
    let names: Vec<String> = res[0]
        .references
        .iter()
        .flatten()
        .map(|r| r.browse_name.name.to_string())
        .collect();
    assert!(
        !names.iter().any(|n| n == "ServerConfiguration"),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n == "SetSubscriptionDurable"),
        "{names:?}"
    );
    for kept in [
        "ServerCapabilities",
        "GetMonitoredItems",
        "ResendData",
        "RequestServerStateChange",
    ] {
        assert!(names.iter().any(|n| n == kept), "{kept} missing: {names:?}");
    }
    for gone in [12637u32, 12749, 12740, 13737] {
        assert_eq!(
            read(&s, NodeId::new(0, gone), 3).status(),
            StatusCode::BadNodeIdUnknown,
            "i={gone}"
        );
    }
}

#[test]
fn every_attribute_of_variable_and_object() {
    let s = space();
    let variable_ok: BTreeSet<u32> = (1..=7).chain(13..=20).chain([27]).collect();
    for node in [
        id(VariableId::Server_ServerStatus_State),
        NodeId::new(GATEWAY_NS, GATEWAY_UPTIME),
    ] {
        for attr in 0..=28u32 {
            let dv = read(&s, node.clone(), attr);
            if variable_ok.contains(&attr) {
                assert_eq!(dv.status(), StatusCode::Good, "{node} attr {attr}: {dv:?}");
                assert!(dv.value.is_some(), "{node} attr {attr}");
            } else {
                assert_eq!(
                    dv.status(),
                    StatusCode::BadAttributeIdInvalid,
                    "{node} attr {attr}"
                );
                assert!(dv.value.is_none());
            }
        }
    }
    let object_ok: BTreeSet<u32> = (1..=7).chain([12]).collect();
    for node in [id(ObjectId::Server), gateway_folder()] {
        for attr in 0..=28u32 {
            let dv = read(&s, node.clone(), attr);
            if object_ok.contains(&attr) {
                assert_eq!(dv.status(), StatusCode::Good, "{node} attr {attr}: {dv:?}");
            } else {
                assert_eq!(
                    dv.status(),
                    StatusCode::BadAttributeIdInvalid,
                    "{node} attr {attr}"
                );
            }
        }
    }
    // Spot-check values.
    let uptime = NodeId::new(GATEWAY_NS, GATEWAY_UPTIME);
    assert_eq!(
        read(&s, uptime.clone(), 1).value,
        Some(Variant::from(uptime.clone()))
    );
    assert_eq!(
        read(&s, uptime.clone(), 2).value,
        Some(Variant::Int32(NodeClass::Variable as i32))
    );
    assert_eq!(
        read(&s, uptime.clone(), 14).value,
        Some(Variant::from(id(opcua_types::DataTypeId::Double)))
    );
    assert_eq!(read(&s, uptime.clone(), 15).value, Some(Variant::Int32(-1)));
    assert_eq!(read(&s, uptime, 17).value, Some(Variant::Byte(1)));
    assert_eq!(
        read(&s, ObjectId::Server, 3).value,
        Some(Variant::from(QualifiedName::new(0, "Server")))
    );
    assert_eq!(read(&s, ObjectId::Server, 2).value, Some(Variant::Int32(1)));
    // A reference type supports IsAbstract/Symmetric/InverseName.
    for attr in [8u32, 9, 10] {
        assert_eq!(
            read(&s, ReferenceTypeId::HasComponent, attr).status(),
            StatusCode::Good,
            "attr {attr}"
        );
    }
}

#[test]
fn index_ranges() {
    let s = space();
    let ns = id(VariableId::Server_NamespaceArray);
    let r = |node: NodeId, range: &str| {
        s.read(
            later(),
            &rv(node, 13, range),
            TimestampsToReturn::Neither,
            0.0,
        )
    };
    let full = r(ns.clone(), "");
    assert_eq!(
        full.value,
        Some(Variant::from(vec![
            "http://opcfoundation.org/UA/".to_string(),
            "urn:uagate:test-app".to_string(),
            GATEWAY_NAMESPACE_URI.to_string(),
        ]))
    );
    let one = r(ns.clone(), "0");
    assert_eq!(one.status(), StatusCode::Good);
    assert_eq!(
        one.value,
        Some(Variant::from(vec![
            "http://opcfoundation.org/UA/".to_string()
        ]))
    );
    let no_data = r(ns.clone(), "5:6");
    assert_eq!(no_data.status(), StatusCode::BadIndexRangeNoData);
    assert!(no_data.value.is_none());
    // Upper bound past the end: partial result.
    let partial = r(ns.clone(), "1:9");
    assert_eq!(
        partial.value,
        Some(Variant::from(vec![
            "urn:uagate:test-app".to_string(),
            GATEWAY_NAMESPACE_URI.to_string()
        ]))
    );
    // Second dimension on a String array selects substrings.
    let sub = r(ns, "2,0:2");
    assert_eq!(sub.value, Some(Variant::from(vec!["urn".to_string()])));
    // Scalars have no index.
    assert_eq!(
        r(id(VariableId::Server_ServiceLevel), "0").status(),
        StatusCode::BadIndexRangeNoData
    );
    // Strings are indexed by character.
    let mut s2 = space();
    s2.set_hostname("hôst-01");
    let dv = s2.read(
        later(),
        &rv(NodeId::new(GATEWAY_NS, GATEWAY_HOSTNAME), 13, "1:3"),
        TimestampsToReturn::Neither,
        0.0,
    );
    assert_eq!(dv.value, Some(Variant::String("ôst".into())));
}

#[test]
fn read_errors() {
    let s = space();
    assert_eq!(
        read(&s, NodeId::new(GATEWAY_NS, "does-not-exist"), 13).status(),
        StatusCode::BadNodeIdUnknown
    );
    assert_eq!(
        read(&s, ObjectId::Server, 0).status(),
        StatusCode::BadAttributeIdInvalid
    );
    assert_eq!(
        read(&s, ObjectId::Server, 999).status(),
        StatusCode::BadAttributeIdInvalid
    );
    let enc = |node: NodeId, attr: u32, ns: u16, name: &str| {
        let mut req = rv(node, attr, "");
        req.data_encoding = QualifiedName::new(ns, name);
        s.read(later(), &req, TimestampsToReturn::Both, 0.0)
            .status()
    };
    let status = id(VariableId::Server_ServerStatus);
    assert_eq!(
        enc(status.clone(), 13, 0, "Default Binary"),
        StatusCode::Good
    );
    assert_eq!(
        enc(status.clone(), 13, 0, "Default XML"),
        StatusCode::BadDataEncodingUnsupported
    );
    assert_eq!(
        enc(status.clone(), 4, 0, "Default Binary"),
        StatusCode::BadDataEncodingInvalid
    );
    assert_eq!(
        enc(
            id(VariableId::Server_ServerStatus_CurrentTime),
            13,
            0,
            "Default Binary"
        ),
        StatusCode::BadDataEncodingInvalid
    );
}

#[test]
fn namespaces_can_be_added() {
    let mut s = space();
    assert_eq!(s.add_namespace("urn:field:line1").ok(), Some(3));
    assert_eq!(s.add_namespace("urn:field:line1").ok(), Some(3));
    assert_eq!(
        s.add_namespace(GATEWAY_NAMESPACE_URI).ok(),
        Some(GATEWAY_NS)
    );
    assert!(matches!(
        s.add_namespace(""),
        Err(SpaceError::EmptyNamespaceUri)
    ));
    assert_eq!(s.namespace_array().len(), 4);
    let dv = read(&s, VariableId::Server_NamespaceArray, 13);
    assert!(matches!(dv.value, Some(Variant::Array(a)) if a.values.len() == 4));
}
