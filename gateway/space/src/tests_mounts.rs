//! Unit tests of the mount folders and field-connection status nodes
//! (`mounts.rs`) and of `NamespaceArray` after `add_namespace`.

use opcua_types::{
    AttributeId, BrowseDescription, BrowseDirection, BrowsePath, BrowseResult, DataTypeId,
    DataValue, DateTime, NodeClass, NodeId, NumericRange, ObjectId, ObjectTypeId, QualifiedName,
    ReadValueId, ReferenceTypeId, RelativePath, RelativePathElement, StatusCode,
    TimestampsToReturn, VariableId, Variant, ViewDescription, WriteValue,
};

use crate::*;

fn start() -> DateTime {
    DateTime::ymd_hms(2024, 1, 2, 3, 4, 5)
}

fn later() -> DateTime {
    DateTime::ymd_hms(2024, 1, 2, 4, 4, 5)
}

fn space() -> LocalSpace {
    let build = BuildInfo {
        product_uri: "urn:uagate:product".into(),
        manufacturer_name: "uagate".into(),
        product_name: "uagate edge gateway".into(),
        software_version: "0.1.0".into(),
        build_number: "42".into(),
        build_date: DateTime::ymd(2024, 1, 1),
    };
    LocalSpace::new(
        "urn:uagate:test-app",
        build,
        &SpaceLimits::default(),
        start(),
        true,
    )
}

fn mounted(names: &[&str]) -> LocalSpace {
    let mut s = space();
    for n in names {
        assert!(s.add_mount(n, start()).is_ok(), "mount {n}");
    }
    s
}

fn browse(s: &LocalSpace, node: NodeId, dir: BrowseDirection) -> BrowseResult {
    let mut cps = ContinuationPoints::new(10);
    let mut res = s.browse(
        &ViewDescription::default(),
        0,
        &[BrowseDescription {
            node_id: node,
            browse_direction: dir,
            reference_type_id: NodeId::null(),
            include_subtypes: true,
            node_class_mask: 0,
            result_mask: 63,
        }],
        &mut cps,
    );
    assert_eq!(res.len(), 1);
    res.remove(0)
}

/// `(reference type, is_forward, target)` of each returned reference.
fn refs(r: &BrowseResult) -> Vec<(NodeId, bool, NodeId)> {
    assert_eq!(r.status_code, StatusCode::Good);
    r.references
        .iter()
        .flatten()
        .map(|d| {
            (
                d.reference_type_id.clone(),
                d.is_forward,
                d.node_id.node_id.clone(),
            )
        })
        .collect()
}

fn read_attr(s: &LocalSpace, node: NodeId, attr: AttributeId) -> DataValue {
    s.read(
        later(),
        &ReadValueId {
            node_id: node,
            attribute_id: attr as u32,
            index_range: NumericRange::None,
            data_encoding: QualifiedName::null(),
        },
        TimestampsToReturn::Both,
        0.0,
    )
}

fn gw_path(start: impl Into<NodeId>, names: &[&str]) -> BrowsePath {
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
                        target_name: QualifiedName::new(GATEWAY_NS, *n),
                    })
                    .collect(),
            ),
        },
    }
}

fn objects() -> NodeId {
    ObjectId::ObjectsFolder.into()
}

fn connections() -> NodeId {
    NodeId::new(GATEWAY_NS, GATEWAY_FIELD_CONNECTIONS)
}

#[test]
fn node_ids_follow_the_naming_scheme() {
    assert_eq!(
        LocalSpace::mount_folder_id("line1"),
        NodeId::new(GATEWAY_NS, "Field.line1")
    );
    assert_eq!(
        LocalSpace::field_status_id("line1", "State"),
        NodeId::new(GATEWAY_NS, "FieldStatus.line1.State")
    );
}

#[test]
fn add_mount_twice_errors_and_changes_nothing() {
    let mut s = mounted(&["line1"]);
    assert!(matches!(
        s.add_mount("line1", later()),
        Err(SpaceError::MountExists(n)) if n == "line1"
    ));
    assert_eq!(s.mounts(), ["line1".to_string()]);
    let count = refs(&browse(&s, objects(), BrowseDirection::Forward))
        .iter()
        .filter(|(_, _, t)| *t == LocalSpace::mount_folder_id("line1"))
        .count();
    assert_eq!(count, 1);
}

#[test]
fn add_mount_rejects_bad_names_atomically() {
    let mut s = mounted(&["a"]);
    assert!(matches!(
        s.add_mount("", start()),
        Err(SpaceError::InvalidMountName(_))
    ));
    // Objects already has 2:Gateway.
    assert!(matches!(
        s.add_mount("Gateway", start()),
        Err(SpaceError::BrowseNameInUse(_))
    ));
    // FieldStatus.a.State (a variable of "a") would be this mount's status object.
    assert!(matches!(
        s.add_mount("a.State", start()),
        Err(SpaceError::NodeIdInUse(id)) if id == LocalSpace::field_status_id("a", "State")
    ));
    assert!(!s.contains(&LocalSpace::mount_folder_id("a.State")));
    assert!(!s.contains(&LocalSpace::mount_folder_id("Gateway")));
    assert_eq!(s.mounts(), ["a".to_string()]);
}

#[test]
fn mounts_in_creation_order_and_mount_of_folder() {
    let s = mounted(&["zeta", "alpha", "line.1"]);
    assert_eq!(s.mounts(), ["zeta", "alpha", "line.1"].map(String::from));
    assert_eq!(
        s.mount_of_folder(&LocalSpace::mount_folder_id("alpha")),
        Some("alpha")
    );
    assert_eq!(
        s.mount_of_folder(&LocalSpace::mount_folder_id("line.1")),
        Some("line.1")
    );
    assert_eq!(
        s.mount_of_folder(&LocalSpace::mount_folder_id("other")),
        None
    );
    assert_eq!(s.mount_of_folder(&NodeId::new(0, "Field.alpha")), None);
    assert_eq!(s.mount_of_folder(&objects()), None);
    assert_eq!(
        s.mount_of_folder(&LocalSpace::field_status_id("alpha", "State")),
        None
    );
}

#[test]
fn browse_objects_lists_mount_folder() {
    let s = mounted(&["line1"]);
    let r = browse(&s, objects(), BrowseDirection::Forward);
    let folder = LocalSpace::mount_folder_id("line1");
    let d = r
        .references
        .iter()
        .flatten()
        .find(|d| d.node_id.node_id == folder)
        .expect("mount folder listed under Objects");
    assert_eq!(
        d.reference_type_id,
        NodeId::from(ReferenceTypeId::Organizes)
    );
    assert!(d.is_forward);
    assert_eq!(d.browse_name, QualifiedName::new(GATEWAY_NS, "line1"));
    assert_eq!(d.display_name.text.as_ref(), "line1");
    assert_eq!(d.node_class, NodeClass::Object);
    assert_eq!(
        d.type_definition.node_id,
        NodeId::from(ObjectTypeId::FolderType)
    );
}

#[test]
fn remove_mount_takes_its_nodes_and_references_away_and_leaves_the_others() {
    let mut s = mounted(&["line1", "line2"]);
    assert!(s.remove_mount("line1").is_ok());
    assert_eq!(s.mounts(), ["line2".to_string()]);
    let under_objects = refs(&browse(&s, objects(), BrowseDirection::Forward));
    assert!(!under_objects
        .iter()
        .any(|(_, _, n)| *n == LocalSpace::mount_folder_id("line1")));
    assert!(under_objects
        .iter()
        .any(|(_, _, n)| *n == LocalSpace::mount_folder_id("line2")));
    let server = refs(&browse(
        &s,
        ObjectId::Server.into(),
        BrowseDirection::Forward,
    ));
    assert!(!server
        .iter()
        .any(|(_, _, n)| *n == LocalSpace::mount_folder_id("line1")));
    let status = read_attr(
        &s,
        LocalSpace::field_status_id("line1", "State"),
        AttributeId::Value,
    );
    assert_eq!(status.status, Some(StatusCode::BadNodeIdUnknown));
    let conns = refs(&browse(&s, connections(), BrowseDirection::Forward));
    assert!(!conns
        .iter()
        .any(|(_, _, n)| *n == LocalSpace::field_status_object_id("line1")));
    // Unknown now; a second removal changes nothing.
    assert!(matches!(
        s.remove_mount("line1"),
        Err(SpaceError::UnknownMount(n)) if n == "line1"
    ));
    // Mounted again under the same name, as after a live re-add.
    assert!(s.add_mount("line1", later()).is_ok());
    assert_eq!(s.mounts(), ["line2".to_string(), "line1".to_string()]);
}

#[test]
fn browse_mount_folder_shows_type_and_inverse_organizes() {
    let s = mounted(&["line1"]);
    let got = refs(&browse(
        &s,
        LocalSpace::mount_folder_id("line1"),
        BrowseDirection::Both,
    ));
    assert_eq!(
        got,
        vec![
            (
                ReferenceTypeId::HasTypeDefinition.into(),
                true,
                ObjectTypeId::FolderType.into()
            ),
            (ReferenceTypeId::Organizes.into(), false, objects()),
            // An event notifier under the Server object (field server events).
            (
                ReferenceTypeId::HasNotifier.into(),
                false,
                ObjectId::Server.into()
            ),
        ]
    );
}

#[test]
fn browse_field_connections_lists_status_objects() {
    let s = mounted(&["line1", "line2"]);
    // Gateway organizes FieldConnections (created once).
    let gw_refs = refs(&browse(
        &s,
        NodeId::new(GATEWAY_NS, GATEWAY_FOLDER),
        BrowseDirection::Forward,
    ));
    let n = gw_refs
        .iter()
        .filter(|(t, f, n)| *t == ReferenceTypeId::Organizes && *f && *n == connections())
        .count();
    assert_eq!(n, 1);

    let r = browse(&s, connections(), BrowseDirection::Forward);
    let listed: Vec<(QualifiedName, NodeId)> = r
        .references
        .iter()
        .flatten()
        .filter(|d| d.reference_type_id == ReferenceTypeId::Organizes)
        .map(|d| (d.browse_name.clone(), d.node_id.node_id.clone()))
        .collect();
    assert_eq!(
        listed,
        vec![
            (
                QualifiedName::new(GATEWAY_NS, "line1"),
                NodeId::new(GATEWAY_NS, "FieldStatus.line1")
            ),
            (
                QualifiedName::new(GATEWAY_NS, "line2"),
                NodeId::new(GATEWAY_NS, "FieldStatus.line2")
            ),
        ]
    );

    // The status object has its variables as components.
    let vars: Vec<NodeId> = refs(&browse(
        &s,
        NodeId::new(GATEWAY_NS, "FieldStatus.line1"),
        BrowseDirection::Forward,
    ))
    .into_iter()
    .filter(|(t, _, _)| *t == ReferenceTypeId::HasComponent)
    .map(|(_, _, n)| n)
    .collect();
    assert_eq!(vars.len(), FIELD_STATUS_VARS.len());
    for v in FIELD_STATUS_VARS {
        assert!(
            vars.contains(&LocalSpace::field_status_id("line1", v)),
            "{v}"
        );
    }
}

#[test]
fn status_variables_read_back_after_set_field_status() {
    let mut s = mounted(&["line1"]);
    let id = |v: &str| LocalSpace::field_status_id("line1", v);
    // Before any status: defaults with the mount time as source timestamp.
    let dv = read_attr(&s, id("State"), AttributeId::Value);
    assert_eq!(dv.value, Some(Variant::String("".into())));
    assert_eq!(dv.source_timestamp, Some(start()));

    let status = FieldStatusValues {
        state: "Connected".into(),
        active_endpoint: "opc.tcp://plc1:4840".into(),
        service_level: 200,
        reconnect_count: 3,
        failover_count: 1,
        last_error: StatusCode::BadCommunicationError,
        enabled: true,
        failing: true,
        failed_attempts: 4,
    };
    assert!(s.set_field_status("line1", &status, later()).is_ok());
    let expected: [(&str, Variant, DataTypeId); 9] = [
        (
            "State",
            Variant::String("Connected".into()),
            DataTypeId::String,
        ),
        (
            "ActiveEndpoint",
            Variant::String("opc.tcp://plc1:4840".into()),
            DataTypeId::String,
        ),
        ("ServiceLevel", Variant::Byte(200), DataTypeId::Byte),
        ("ReconnectCount", Variant::UInt32(3), DataTypeId::UInt32),
        ("FailoverCount", Variant::UInt32(1), DataTypeId::UInt32),
        (
            "LastError",
            Variant::StatusCode(StatusCode::BadCommunicationError),
            DataTypeId::StatusCode,
        ),
        ("Enabled", Variant::Boolean(true), DataTypeId::Boolean),
        ("Failing", Variant::Boolean(true), DataTypeId::Boolean),
        ("FailedAttempts", Variant::UInt32(4), DataTypeId::UInt32),
    ];
    for (var, value, data_type) in expected {
        let dv = read_attr(&s, id(var), AttributeId::Value);
        assert_eq!(dv.status(), StatusCode::Good, "{var}");
        assert_eq!(dv.value, Some(value), "{var}");
        assert_eq!(dv.source_timestamp, Some(later()), "{var}");
        let dt = read_attr(&s, id(var), AttributeId::DataType);
        assert_eq!(
            dt.value,
            Some(Variant::from(NodeId::from(data_type))),
            "{var}"
        );
        let al = read_attr(&s, id(var), AttributeId::AccessLevel);
        assert_eq!(al.value, Some(Variant::Byte(1)), "{var} CurrentRead only");
        let vr = read_attr(&s, id(var), AttributeId::ValueRank);
        assert_eq!(vr.value, Some(Variant::Int32(-1)), "{var} scalar");
    }

    // Unchanged values keep their source timestamp.
    let third = DateTime::ymd_hms(2024, 1, 2, 5, 4, 5);
    let changed = FieldStatusValues {
        reconnect_count: 4,
        ..status
    };
    assert!(s.set_field_status("line1", &changed, third).is_ok());
    let rc = read_attr(&s, id("ReconnectCount"), AttributeId::Value);
    assert_eq!(rc.value, Some(Variant::UInt32(4)));
    assert_eq!(rc.source_timestamp, Some(third));
    let st = read_attr(&s, id("State"), AttributeId::Value);
    assert_eq!(st.source_timestamp, Some(later()));

    assert!(matches!(
        s.set_field_status("nope", &changed, third),
        Err(SpaceError::UnknownMount(n)) if n == "nope"
    ));
}

#[test]
fn status_variables_are_not_writable_by_clients() {
    let mut s = mounted(&["line1"]);
    let item = WriteValue {
        node_id: LocalSpace::field_status_id("line1", "State"),
        attribute_id: AttributeId::Value as u32,
        index_range: NumericRange::None,
        value: DataValue::value_only(Variant::String("x".into())),
    };
    assert_eq!(s.write(later(), &item, true), StatusCode::BadNotWritable);
}

#[test]
fn translate_to_status_variable() {
    let s = mounted(&["line1"]);
    let res = s.translate(&[
        gw_path(
            ObjectId::ObjectsFolder,
            &["Gateway", "FieldConnections", "line1", "State"],
        ),
        gw_path(ObjectId::ObjectsFolder, &["line1"]),
    ]);
    assert_eq!(res.len(), 2);
    for (r, want) in res.iter().zip([
        LocalSpace::field_status_id("line1", "State"),
        LocalSpace::mount_folder_id("line1"),
    ]) {
        assert_eq!(r.status_code, StatusCode::Good);
        let targets = r.targets.as_deref().unwrap_or(&[]);
        assert_eq!(targets.len(), 1);
        assert_eq!(targets[0].target_id.node_id, want);
        assert_eq!(targets[0].remaining_path_index, u32::MAX);
    }
}

#[test]
fn namespace_array_reflects_added_namespaces() {
    let mut s = space();
    let ns = NodeId::from(VariableId::Server_NamespaceArray);
    assert_eq!(ns, NodeId::new(0, 2255u32));
    assert_eq!(s.add_namespace("urn:field:line1").ok(), Some(3));
    assert_eq!(s.add_namespace("urn:field:line2").ok(), Some(4));
    let dv = read_attr(&s, ns, AttributeId::Value);
    assert_eq!(dv.status(), StatusCode::Good);
    assert_eq!(
        dv.value,
        Some(Variant::from(vec![
            "http://opcfoundation.org/UA/".to_string(),
            "urn:uagate:test-app".to_string(),
            GATEWAY_NAMESPACE_URI.to_string(),
            "urn:field:line1".to_string(),
            "urn:field:line2".to_string(),
        ]))
    );
    assert_eq!(s.namespace_array().len(), 5);
}
