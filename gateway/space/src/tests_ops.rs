//! Unit tests of Write, method validation/Call, the demo nodes, the
//! ServerRedundancy subtypes and EstimatedReturnTime over the real local
//! space (full namespace 0 node set plus the gateway namespace).

use std::collections::HashSet;

use opcua_types::{
    Argument, AttributeId, BrowseDescription, BrowseDirection, BrowsePath, DataTypeId, DataValue,
    DateTime, LocalizedText, MethodId, NodeId, NumericRange, ObjectId, ObjectTypeId, QualifiedName,
    Range, ReadValueId, RedundancySupport, RedundantServerDataType, ReferenceTypeId, RelativePath,
    RelativePathElement, ServerState, StatusCode, TimestampsToReturn, VariableId, VariableTypeId,
    Variant, ViewDescription, WriteValue,
};

use crate::*;

fn start() -> DateTime {
    DateTime::ymd_hms(2024, 1, 2, 3, 4, 5)
}

fn later() -> DateTime {
    DateTime::ymd_hms(2024, 1, 2, 4, 4, 5)
}

fn space() -> LocalSpace {
    LocalSpace::new(
        "urn:uagate:test-app",
        BuildInfo {
            product_uri: "urn:uagate:product".into(),
            manufacturer_name: "uagate".into(),
            product_name: "uagate edge gateway".into(),
            software_version: "0.1.0".into(),
            build_number: "42".into(),
            build_date: DateTime::ymd(2024, 1, 1),
        },
        &SpaceLimits::default(),
        start(),
        true,
    )
}

fn g(id: &str) -> NodeId {
    NodeId::new(GATEWAY_NS, id)
}

fn id(i: impl Into<NodeId>) -> NodeId {
    i.into()
}

fn wv(node: NodeId, attr: AttributeId, range: &str, value: Option<Variant>) -> WriteValue {
    WriteValue {
        node_id: node,
        attribute_id: attr as u32,
        index_range: NumericRange::new(range).expect("valid range"),
        value: DataValue {
            value,
            ..DataValue::null()
        },
    }
}

fn write_value(s: &mut LocalSpace, node: NodeId, range: &str, value: Variant) -> StatusCode {
    s.write(
        later(),
        &wv(node, AttributeId::Value, range, Some(value)),
        true,
    )
}

fn read(s: &LocalSpace, node: impl Into<NodeId>) -> DataValue {
    s.read(
        later(),
        &ReadValueId {
            node_id: node.into(),
            attribute_id: AttributeId::Value as u32,
            index_range: NumericRange::None,
            data_encoding: QualifiedName::null(),
        },
        TimestampsToReturn::Both,
        0.0,
    )
}

fn value(s: &LocalSpace, node: impl Into<NodeId>) -> Variant {
    let dv = read(s, node);
    assert_eq!(dv.status, Some(StatusCode::Good), "{dv:?}");
    dv.value.expect("value")
}

fn doubles(v: &[f64]) -> Variant {
    Variant::from(v.to_vec())
}

/// `(reference type, target)` of the forward references of `node`.
fn forward(s: &LocalSpace, node: NodeId, rt: impl Into<NodeId>) -> HashSet<(String, NodeId)> {
    let mut cps = ContinuationPoints::new(10);
    let res = s.browse(
        &ViewDescription::default(),
        0,
        &[BrowseDescription {
            node_id: node,
            browse_direction: BrowseDirection::Forward,
            reference_type_id: rt.into(),
            include_subtypes: true,
            node_class_mask: 0,
            result_mask: 63,
        }],
        &mut cps,
    );
    assert_eq!(res[0].status_code, StatusCode::Good);
    res[0]
        .references
        .iter()
        .flatten()
        .map(|r| (r.reference_type_id.to_string(), r.node_id.node_id.clone()))
        .collect()
}

fn targets(s: &LocalSpace, node: NodeId, rt: impl Into<NodeId>) -> HashSet<NodeId> {
    forward(s, node, rt).into_iter().map(|(_, n)| n).collect()
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

// ---------------------------------------------------------------- Write

#[test]
fn write_good_value_reads_back_with_timestamps() {
    let mut s = space();
    assert_eq!(
        write_value(&mut s, g(DEMO_SETPOINT), "", Variant::Double(42.5)),
        StatusCode::Good
    );
    let dv = read(&s, g(DEMO_SETPOINT));
    assert_eq!(dv.value, Some(Variant::Double(42.5)));
    assert_eq!(dv.status, Some(StatusCode::Good));
    assert_eq!(dv.source_timestamp, Some(later()));

    // Status and source timestamp given by the client are stored.
    let t = DateTime::ymd_hms(2024, 1, 2, 3, 30, 0);
    let item = WriteValue {
        node_id: g(DEMO_LEVEL),
        attribute_id: AttributeId::Value as u32,
        index_range: NumericRange::None,
        value: DataValue {
            value: Some(Variant::Double(12.0)),
            status: Some(StatusCode::UncertainLastUsableValue),
            source_timestamp: Some(t),
            ..DataValue::null()
        },
    };
    assert_eq!(s.write(later(), &item, true), StatusCode::Good);
    let dv = read(&s, g(DEMO_LEVEL));
    assert_eq!(dv.value, Some(Variant::Double(12.0)));
    assert_eq!(dv.status, Some(StatusCode::UncertainLastUsableValue));
    assert_eq!(dv.source_timestamp, Some(t));
    assert_eq!(dv.server_timestamp, Some(later()));
}

#[test]
fn write_type_mismatch() {
    let mut s = space();
    let sp = g(DEMO_SETPOINT);
    for bad in [
        Variant::Int32(1),
        Variant::Float(1.0),
        Variant::String("1.0".into()),
        doubles(&[1.0]),
        Variant::Empty,
    ] {
        assert_eq!(
            write_value(&mut s, sp.clone(), "", bad.clone()),
            StatusCode::BadTypeMismatch,
            "{bad:?}"
        );
    }
    // A DataValue without a value is null, too.
    assert_eq!(
        s.write(later(), &wv(sp.clone(), AttributeId::Value, "", None), true),
        StatusCode::BadTypeMismatch
    );
    assert_eq!(value(&s, sp), Variant::Double(0.0));
    // Arrays: element type and rank must match.
    let vec = g(DEMO_VECTOR);
    assert_eq!(
        write_value(&mut s, vec.clone(), "", Variant::Double(1.0)),
        StatusCode::BadTypeMismatch
    );
    assert_eq!(
        write_value(&mut s, vec.clone(), "", Variant::from(vec![1i32, 2])),
        StatusCode::BadTypeMismatch
    );
    // A whole-array write may change the length.
    assert_eq!(
        write_value(&mut s, vec.clone(), "", doubles(&[1.0, 2.0])),
        StatusCode::Good
    );
    assert_eq!(value(&s, vec), doubles(&[1.0, 2.0]));
}

#[test]
fn write_not_writable_and_user_denied() {
    let mut s = space();
    let v = Variant::UInt32(5);
    // Read-only demo variable, computed gateway variable, ns0 server nodes.
    assert_eq!(
        write_value(&mut s, g(DEMO_COUNTER), "", v.clone()),
        StatusCode::BadNotWritable
    );
    assert_eq!(
        write_value(&mut s, g(GATEWAY_UPTIME), "", Variant::Double(1.0)),
        StatusCode::BadNotWritable
    );
    assert_eq!(
        write_value(
            &mut s,
            id(VariableId::Server_ServerStatus_State),
            "",
            Variant::Int32(1)
        ),
        StatusCode::BadNotWritable
    );
    assert_eq!(
        write_value(
            &mut s,
            id(VariableId::Server_ServiceLevel),
            "",
            Variant::Byte(1)
        ),
        StatusCode::BadNotWritable
    );
    // Other attributes than Value are not writable.
    let name = wv(
        g(DEMO_SETPOINT),
        AttributeId::DisplayName,
        "",
        Some(LocalizedText::new("", "x").into()),
    );
    assert_eq!(s.write(later(), &name, true), StatusCode::BadNotWritable);
    // The engine denies the user: checked after writability.
    let item = wv(
        g(DEMO_SETPOINT),
        AttributeId::Value,
        "",
        Some(Variant::Double(1.0)),
    );
    assert_eq!(
        s.write(later(), &item, false),
        StatusCode::BadUserAccessDenied
    );
    let item = wv(g(DEMO_COUNTER), AttributeId::Value, "", Some(v));
    assert_eq!(s.write(later(), &item, false), StatusCode::BadNotWritable);
    assert_eq!(value(&s, g(DEMO_SETPOINT)), Variant::Double(0.0));
}

#[test]
fn write_unknown_node_and_attribute() {
    let mut s = space();
    let d = Some(Variant::Double(1.0));
    let item = wv(g("Gateway.Nope"), AttributeId::Value, "", d.clone());
    assert_eq!(s.write(later(), &item, true), StatusCode::BadNodeIdUnknown);
    let mut item = wv(g(DEMO_SETPOINT), AttributeId::Value, "", d.clone());
    item.attribute_id = 99;
    assert_eq!(
        s.write(later(), &item, true),
        StatusCode::BadAttributeIdInvalid
    );
    // Attributes not defined for the node class.
    let item = wv(g(DEMO_SETPOINT), AttributeId::EventNotifier, "", d.clone());
    assert_eq!(
        s.write(later(), &item, true),
        StatusCode::BadAttributeIdInvalid
    );
    let item = wv(g(GATEWAY_DEMO), AttributeId::Value, "", d);
    assert_eq!(
        s.write(later(), &item, true),
        StatusCode::BadAttributeIdInvalid
    );
}

#[test]
fn write_index_ranges() {
    let mut s = space();
    let vec = g(DEMO_VECTOR);
    assert_eq!(
        write_value(&mut s, vec.clone(), "1:2", doubles(&[7.0, 8.0])),
        StatusCode::Good
    );
    assert_eq!(value(&s, vec.clone()), doubles(&[0.0, 7.0, 8.0, 0.0, 0.0]));
    // Single index: one-element array or scalar.
    assert_eq!(
        write_value(&mut s, vec.clone(), "4", doubles(&[9.0])),
        StatusCode::Good
    );
    assert_eq!(
        write_value(&mut s, vec.clone(), "0", Variant::Double(1.0)),
        StatusCode::Good
    );
    assert_eq!(value(&s, vec.clone()), doubles(&[1.0, 7.0, 8.0, 0.0, 9.0]));
    // Out of bounds, length mismatch, scalar target, multi-dimensional.
    for (range, v) in [
        ("4:6", doubles(&[1.0, 2.0, 3.0])),
        ("5", doubles(&[1.0])),
        ("1:2", doubles(&[1.0, 2.0, 3.0])),
        ("1:3", doubles(&[1.0])),
        ("1:2", Variant::Double(1.0)),
        ("0,0", doubles(&[1.0])),
    ] {
        assert_eq!(
            write_value(&mut s, vec.clone(), range, v.clone()),
            StatusCode::BadIndexRangeNoData,
            "{range} {v:?}"
        );
    }
    assert_eq!(
        write_value(&mut s, g(DEMO_SETPOINT), "0", Variant::Double(1.0)),
        StatusCode::BadIndexRangeNoData
    );
    // Element type mismatch.
    assert_eq!(
        write_value(&mut s, vec.clone(), "1:2", Variant::from(vec![1i32, 2])),
        StatusCode::BadTypeMismatch
    );
    // A syntactically invalid range (built directly, as a decoder could).
    let mut item = wv(vec.clone(), AttributeId::Value, "", Some(doubles(&[1.0])));
    item.index_range = NumericRange::Range(3, 1);
    assert_eq!(
        s.write(later(), &item, true),
        StatusCode::BadIndexRangeInvalid
    );
    // Failed writes left the value alone.
    assert_eq!(value(&s, vec), doubles(&[1.0, 7.0, 8.0, 0.0, 9.0]));
}

#[test]
fn set_value_drives_counter() {
    let mut s = space();
    let c = g(DEMO_COUNTER);
    let dv = DataValue {
        value: Some(Variant::UInt32(7)),
        status: Some(StatusCode::Good),
        source_timestamp: Some(later()),
        ..DataValue::null()
    };
    s.set_value(&c, dv).expect("set");
    let r = read(&s, c.clone());
    assert_eq!(r.value, Some(Variant::UInt32(7)));
    assert_eq!(r.source_timestamp, Some(later()));
    // A status without a value reads back.
    let bad = DataValue {
        status: Some(StatusCode::BadCommunicationError),
        ..DataValue::null()
    };
    s.set_value(&c, bad).expect("set status");
    assert_eq!(
        read(&s, c.clone()).status,
        Some(StatusCode::BadCommunicationError)
    );

    let dbl = DataValue::new_now(Variant::Double(1.0));
    assert!(matches!(
        s.set_value(&c, dbl.clone()),
        Err(SpaceError::TypeMismatch(_))
    ));
    assert!(matches!(
        s.set_value(&g("Gateway.Nope"), dbl.clone()),
        Err(SpaceError::UnknownNode(_))
    ));
    assert!(matches!(
        s.set_value(&g(GATEWAY_DEMO), dbl.clone()),
        Err(SpaceError::NotAVariable(_))
    ));
    assert!(matches!(
        s.set_value(&id(VariableId::Server_ServiceLevel), dbl),
        Err(SpaceError::ComputedValue(_))
    ));
}

#[test]
fn demo_nodes_are_browsable() {
    let s = space();
    let demo = g(GATEWAY_DEMO);
    assert!(targets(&s, g(GATEWAY_FOLDER), ReferenceTypeId::Organizes).contains(&demo));
    let comps = targets(&s, demo.clone(), ReferenceTypeId::HasComponent);
    for c in [
        DEMO_SETPOINT,
        DEMO_LEVEL,
        DEMO_COUNTER,
        DEMO_VECTOR,
        DEMO_ADD,
    ] {
        assert!(comps.contains(&g(c)), "{c} in {comps:?}");
    }
    // Level is an AnalogItemType with EURange 0..100.
    assert_eq!(
        targets(&s, g(DEMO_LEVEL), ReferenceTypeId::HasTypeDefinition),
        HashSet::from([id(VariableTypeId::AnalogItemType)])
    );
    assert_eq!(
        targets(&s, g(DEMO_LEVEL), ReferenceTypeId::HasProperty),
        HashSet::from([g(DEMO_LEVEL_EURANGE)])
    );
    let res = s.translate(&[path(g(DEMO_LEVEL), &["EURange"])]);
    assert_eq!(res[0].status_code, StatusCode::Good);
    let Variant::ExtensionObject(eo) = value(&s, g(DEMO_LEVEL_EURANGE)) else {
        panic!("EURange is not a structure");
    };
    assert_eq!(
        eo.inner_as::<Range>(),
        Some(&Range {
            low: 0.0,
            high: 100.0
        })
    );
    // Add has its argument properties.
    let props = targets(&s, g(DEMO_ADD), ReferenceTypeId::HasProperty);
    assert_eq!(props.len(), 2, "{props:?}");
    let res = s.translate(&[path(g(DEMO_ADD), &["InputArguments"])]);
    assert_eq!(res[0].status_code, StatusCode::Good);
}

// ---------------------------------------------------------------- Call

#[test]
fn method_signature_of_add_and_server_methods() {
    let s = space();
    let sig = s
        .method_signature(&g(GATEWAY_DEMO), &g(DEMO_ADD))
        .expect("Add");
    let names: Vec<String> = sig.inputs.iter().map(|a| a.name.to_string()).collect();
    assert_eq!(names, ["a", "b"]);
    assert!(sig
        .inputs
        .iter()
        .all(|a| a.data_type == id(DataTypeId::Double) && a.value_rank == -1));
    assert_eq!(sig.outputs.len(), 1);

    let server = id(ObjectId::Server);
    let sig = s
        .method_signature(&server, &id(MethodId::Server_GetMonitoredItems))
        .expect("GetMonitoredItems");
    assert_eq!(sig.inputs.len(), 1);
    assert_eq!(sig.inputs[0].data_type, id(DataTypeId::UInt32));
    assert_eq!(sig.outputs.len(), 2);
    let sig = s
        .method_signature(&server, &id(MethodId::Server_RequestServerStateChange))
        .expect("RequestServerStateChange");
    assert_eq!(sig.inputs.len(), 5);
    // The declaration on ServerType is accepted on the Server instance.
    assert!(s
        .method_signature(&server, &id(MethodId::ServerType_GetMonitoredItems))
        .is_ok());
}

#[test]
fn method_signature_errors() {
    let s = space();
    let server = id(ObjectId::Server);
    assert_eq!(
        s.method_signature(&g("Gateway.Nope"), &g(DEMO_ADD)),
        Err(StatusCode::BadNodeIdUnknown)
    );
    assert_eq!(
        s.method_signature(&server, &g(DEMO_ADD)),
        Err(StatusCode::BadMethodInvalid)
    );
    assert_eq!(
        s.method_signature(&g(GATEWAY_DEMO), &id(MethodId::Server_GetMonitoredItems)),
        Err(StatusCode::BadMethodInvalid)
    );
    assert_eq!(
        s.method_signature(&g(GATEWAY_DEMO), &g("Gateway.Demo.Nope")),
        Err(StatusCode::BadMethodInvalid)
    );
    // A variable is not a method, and not an object either.
    assert_eq!(
        s.method_signature(&g(GATEWAY_DEMO), &g(DEMO_SETPOINT)),
        Err(StatusCode::BadMethodInvalid)
    );
    assert_eq!(
        s.method_signature(&g(DEMO_SETPOINT), &g(DEMO_ADD)),
        Err(StatusCode::BadNodeIdInvalid)
    );
}

#[test]
fn validate_arguments_cases() {
    let s = space();
    let sig = s
        .method_signature(&g(GATEWAY_DEMO), &g(DEMO_ADD))
        .expect("Add");
    let d = Variant::Double(1.0);
    assert_eq!(
        LocalSpace::validate_arguments(&sig, std::slice::from_ref(&d)),
        Err(StatusCode::BadArgumentsMissing)
    );
    assert_eq!(
        LocalSpace::validate_arguments(&sig, &[d.clone(), d.clone(), d.clone()]),
        Err(StatusCode::BadTooManyArguments)
    );
    let ok = LocalSpace::validate_arguments(&sig, &[d.clone(), d.clone()]).expect("ok");
    assert_eq!(ok, [StatusCode::Good, StatusCode::Good]);
    assert_eq!(arguments_status(&ok), StatusCode::Good);
    for bad in [Variant::Int32(1), Variant::Empty, doubles(&[1.0])] {
        let r = LocalSpace::validate_arguments(&sig, &[d.clone(), bad.clone()]).expect("counts");
        assert_eq!(
            r,
            [StatusCode::Good, StatusCode::BadTypeMismatch],
            "{bad:?}"
        );
        assert_eq!(arguments_status(&r), StatusCode::BadInvalidArgument);
    }
    // GetMonitoredItems(SubscriptionId: UInt32).
    let sig = s
        .method_signature(
            &id(ObjectId::Server),
            &id(MethodId::Server_GetMonitoredItems),
        )
        .expect("sig");
    assert_eq!(
        LocalSpace::validate_arguments(&sig, &[Variant::UInt32(1)]),
        Ok(vec![StatusCode::Good])
    );
    assert_eq!(
        LocalSpace::validate_arguments(&sig, &[Variant::Int32(1)]),
        Ok(vec![StatusCode::BadTypeMismatch])
    );
    // A signature built by the engine resolves ns0 types statically.
    let arg = |name: &str, dt: DataTypeId, rank: i32| Argument {
        name: name.into(),
        data_type: dt.into(),
        value_rank: rank,
        array_dimensions: None,
        description: LocalizedText::null(),
    };
    let sig = MethodSignature::new(
        vec![
            arg("d", DataTypeId::Duration, -1),
            arg("n", DataTypeId::Number, -1),
            arg("s", DataTypeId::String, 1),
        ],
        vec![],
    );
    assert_eq!(
        LocalSpace::validate_arguments(
            &sig,
            &[
                Variant::Double(1.0),
                Variant::Byte(1),
                Variant::from(vec!["a".to_string()])
            ]
        ),
        Ok(vec![StatusCode::Good; 3])
    );
    assert_eq!(
        LocalSpace::validate_arguments(
            &sig,
            &[
                Variant::Float(1.0),
                Variant::String("1".into()),
                Variant::String("a".into())
            ]
        ),
        Ok(vec![StatusCode::BadTypeMismatch; 3])
    );
}

#[test]
fn call_local_add() {
    let mut s = space();
    let demo = g(GATEWAY_DEMO);
    let add = g(DEMO_ADD);
    assert_eq!(
        s.call_local(
            later(),
            &demo,
            &add,
            &[Variant::Double(2.5), Variant::Double(4.0)]
        ),
        Some(Ok(vec![Variant::Double(6.5)]))
    );
    assert_eq!(
        s.call_local(
            later(),
            &demo,
            &add,
            &[Variant::Double(2.5), Variant::Int32(4)]
        ),
        Some(Err(StatusCode::BadInvalidArgument))
    );
    assert_eq!(
        s.call_local(later(), &demo, &add, &[Variant::Double(2.5)]),
        Some(Err(StatusCode::BadArgumentsMissing))
    );
    assert_eq!(
        s.call_local(
            later(),
            &id(ObjectId::Server),
            &add,
            &[Variant::Double(1.0), Variant::Double(1.0)]
        ),
        Some(Err(StatusCode::BadMethodInvalid))
    );
    // Methods the engine executes are not local.
    assert_eq!(
        s.call_local(
            later(),
            &id(ObjectId::Server),
            &id(MethodId::Server_GetMonitoredItems),
            &[Variant::UInt32(1)]
        ),
        None
    );
}

// ---------------------------------------------------------------- Redundancy

fn redundancy() -> NodeId {
    id(ObjectId::Server_ServerRedundancy)
}

fn redundancy_props(s: &LocalSpace) -> HashSet<NodeId> {
    targets(s, redundancy(), ReferenceTypeId::HasProperty)
}

fn redundancy_type(s: &LocalSpace) -> HashSet<NodeId> {
    targets(s, redundancy(), ReferenceTypeId::HasTypeDefinition)
}

#[test]
fn redundancy_none_is_server_redundancy_type() {
    let s = space();
    assert_eq!(
        redundancy_type(&s),
        HashSet::from([id(ObjectTypeId::ServerRedundancyType)])
    );
    assert_eq!(
        redundancy_props(&s),
        HashSet::from([id(VariableId::Server_ServerRedundancy_RedundancySupport)])
    );
    assert_eq!(
        value(&s, VariableId::Server_ServerRedundancy_RedundancySupport),
        Variant::Int32(0)
    );
    // Server -> ServerRedundancy reports the type definition in Browse.
    let mut cps = ContinuationPoints::new(10);
    let res = s.browse(
        &ViewDescription::default(),
        0,
        &[BrowseDescription {
            node_id: id(ObjectId::Server),
            browse_direction: BrowseDirection::Forward,
            reference_type_id: ReferenceTypeId::HasComponent.into(),
            include_subtypes: false,
            node_class_mask: 0,
            result_mask: 63,
        }],
        &mut cps,
    );
    let r = res[0]
        .references
        .iter()
        .flatten()
        .find(|r| r.node_id.node_id == redundancy())
        .expect("ServerRedundancy");
    assert_eq!(
        r.type_definition.node_id,
        id(ObjectTypeId::ServerRedundancyType)
    );
}

#[test]
fn redundancy_warm_has_server_uri_array() {
    let mut s = space();
    let uris = vec!["urn:a".to_string(), "urn:b".to_string()];
    s.set_redundancy(RedundancySupport::Warm, &uris, "", &[]);
    assert_eq!(
        redundancy_type(&s),
        HashSet::from([id(ObjectTypeId::NonTransparentRedundancyType)])
    );
    let uri_node = id(VariableId::Server_ServerRedundancy_ServerUriArray);
    assert_eq!(
        redundancy_props(&s),
        HashSet::from([
            id(VariableId::Server_ServerRedundancy_RedundancySupport),
            uri_node.clone(),
        ])
    );
    assert_eq!(
        value(&s, VariableId::Server_ServerRedundancy_RedundancySupport),
        Variant::Int32(RedundancySupport::Warm as i32)
    );
    let res = s.translate(&[path(
        ObjectId::Server,
        &["ServerRedundancy", "ServerUriArray"],
    )]);
    assert_eq!(res[0].status_code, StatusCode::Good);
    let t = &res[0].targets.as_ref().expect("targets")[0];
    assert_eq!(t.target_id.node_id, uri_node);
    assert_eq!(value(&s, uri_node.clone()), Variant::from(uris));
    assert_eq!(
        targets(&s, uri_node.clone(), ReferenceTypeId::HasTypeDefinition),
        HashSet::from([id(VariableTypeId::PropertyType)])
    );
    // With redundant servers given, the optional RedundantServerArray appears.
    s.set_redundancy(
        RedundancySupport::Hot,
        &["urn:a".to_string()],
        "",
        &[("a".to_string(), 200, ServerState::Running)],
    );
    assert!(redundancy_props(&s).contains(&id(
        VariableId::Server_ServerRedundancy_RedundantServerArray
    )));
    // Back to None: the subtype's members are gone, also inversely.
    s.set_redundancy_support(RedundancySupport::None);
    assert_eq!(redundancy_props(&s).len(), 1);
    let mut cps = ContinuationPoints::new(10);
    let inv = s.browse(
        &ViewDescription::default(),
        0,
        &[BrowseDescription {
            node_id: uri_node,
            browse_direction: BrowseDirection::Inverse,
            reference_type_id: ReferenceTypeId::HasProperty.into(),
            include_subtypes: false,
            node_class_mask: 0,
            result_mask: 63,
        }],
        &mut cps,
    );
    assert_eq!(inv[0].references.as_ref().map_or(0, Vec::len), 0);
}

#[test]
fn redundancy_transparent_has_current_server_and_array() {
    let mut s = space();
    s.set_redundancy(
        RedundancySupport::Transparent,
        &[],
        "node-a",
        &[
            ("node-a".to_string(), 255, ServerState::Running),
            ("node-b".to_string(), 100, ServerState::NoConfiguration),
        ],
    );
    assert_eq!(
        redundancy_type(&s),
        HashSet::from([id(ObjectTypeId::TransparentRedundancyType)])
    );
    let current = id(VariableId::Server_ServerRedundancy_CurrentServerId);
    let array = id(VariableId::Server_ServerRedundancy_RedundantServerArray);
    assert_eq!(
        redundancy_props(&s),
        HashSet::from([
            id(VariableId::Server_ServerRedundancy_RedundancySupport),
            current.clone(),
            array.clone(),
        ])
    );
    let res = s.translate(&[
        path(ObjectId::Server, &["ServerRedundancy", "CurrentServerId"]),
        path(
            ObjectId::Server,
            &["ServerRedundancy", "RedundantServerArray"],
        ),
        path(ObjectId::Server, &["ServerRedundancy", "ServerUriArray"]),
    ]);
    assert_eq!(res[0].status_code, StatusCode::Good);
    assert_eq!(res[1].status_code, StatusCode::Good);
    assert_eq!(res[2].status_code, StatusCode::BadNoMatch);
    assert_eq!(value(&s, current), Variant::String("node-a".into()));
    let Variant::Array(arr) = value(&s, array) else {
        panic!("RedundantServerArray is not an array");
    };
    let servers: Vec<RedundantServerDataType> = arr
        .values
        .iter()
        .map(|v| match v {
            Variant::ExtensionObject(eo) => eo
                .inner_as::<RedundantServerDataType>()
                .cloned()
                .expect("RedundantServerDataType"),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(servers.len(), 2);
    assert_eq!(servers[1].server_id.as_ref(), "node-b");
    assert_eq!(servers[1].service_level, 100);
    assert_eq!(servers[1].server_state, ServerState::NoConfiguration);
    assert_eq!(
        value(&s, VariableId::Server_ServerRedundancy_RedundancySupport),
        Variant::Int32(4)
    );
}

#[test]
fn estimated_return_time_is_readable() {
    let mut s = space();
    let node = id(VariableId::Server_EstimatedReturnTime);
    assert!(targets(&s, id(ObjectId::Server), ReferenceTypeId::HasProperty).contains(&node));
    assert_eq!(
        value(&s, node.clone()),
        Variant::DateTime(Box::new(DateTime::null()))
    );
    let t = DateTime::ymd_hms(2024, 1, 2, 5, 0, 0);
    s.set_estimated_return_time(t);
    assert_eq!(value(&s, node.clone()), Variant::from(t));
    assert_eq!(
        write_value(&mut s, node, "", Variant::from(later())),
        StatusCode::BadNotWritable
    );
}
