//! The `Objects/Gateway/Demo` object: a few writable and engine-driven
//! variables and one method, so clients (and conformance tests) have
//! targets for Write, Call and data-change/deadband monitoring.

use opcua_nodes::{AccessLevel, EventNotifier, Method, NodeBase, Object, Variable};
use opcua_server::address_space::AddressSpace;
use opcua_types::{
    Argument, DataTypeId, DataValue, DateTime, ExtensionObject, LocalizedText, NodeId,
    ObjectTypeId, QualifiedName, Range, ReferenceTypeId, StatusCode, VariableTypeId, Variant,
};

use crate::space::{gw, insert_node, GATEWAY_FOLDER, GATEWAY_NS};

/// String id of the `Gateway/Demo` object (BaseObjectType).
pub const GATEWAY_DEMO: &str = "Gateway.Demo";
/// `Demo/Setpoint`: Double, read/write.
pub const DEMO_SETPOINT: &str = "Gateway.Demo.Setpoint";
/// `Demo/Level`: Double AnalogItemType with `EURange` 0..100, read/write.
pub const DEMO_LEVEL: &str = "Gateway.Demo.Level";
/// The `EURange` property of [`DEMO_LEVEL`] (Range, read only).
pub const DEMO_LEVEL_EURANGE: &str = "Gateway.Demo.Level.EURange";
/// `Demo/Counter`: UInt32, read only for clients; the engine drives it with
/// [`crate::LocalSpace::set_value`].
pub const DEMO_COUNTER: &str = "Gateway.Demo.Counter";
/// `Demo/Vector`: Double[5], read/write (target for IndexRange writes).
pub const DEMO_VECTOR: &str = "Gateway.Demo.Vector";
/// `Demo/Add(a: Double, b: Double) -> sum: Double`, executed by
/// [`crate::LocalSpace::call_local`].
pub const DEMO_ADD: &str = "Gateway.Demo.Add";

const PROPERTY_TYPE: VariableTypeId = VariableTypeId::PropertyType;

fn initial(value: Variant, t: DateTime) -> DataValue {
    DataValue {
        value: Some(value),
        status: Some(StatusCode::Good),
        source_timestamp: Some(t),
        source_picoseconds: None,
        server_timestamp: Some(t),
        server_picoseconds: None,
    }
}

fn demo_variable(
    id: &str,
    name: &str,
    description: &str,
    data_type: DataTypeId,
    value: Variant,
    writable: bool,
    start_time: DateTime,
) -> Variable {
    let mut v = Variable::new_data_value(
        &gw(id),
        QualifiedName::new(GATEWAY_NS, name),
        LocalizedText::new("", name),
        data_type,
        None,
        None,
        value.clone(),
    );
    v.set_description(LocalizedText::new("", description));
    let access = if writable {
        AccessLevel::CURRENT_READ | AccessLevel::CURRENT_WRITE
    } else {
        AccessLevel::CURRENT_READ
    };
    v.set_access_level(access);
    v.set_user_access_level(access);
    v.set_minimum_sampling_interval(0.0);
    v.set_data_value(initial(value, start_time));
    v
}

fn property(
    id: &str,
    name: &str,
    data_type: DataTypeId,
    value: Variant,
    start_time: DateTime,
) -> Variable {
    let mut v = Variable::new_data_value(
        &gw(id),
        QualifiedName::new(0, name),
        LocalizedText::new("", name),
        data_type,
        None,
        None,
        value.clone(),
    );
    v.set_data_value(initial(value, start_time));
    v
}

fn argument(name: &str, description: &str) -> ExtensionObject {
    ExtensionObject::from_message(Argument {
        name: name.into(),
        data_type: DataTypeId::Double.into(),
        value_rank: -1,
        array_dimensions: None,
        description: LocalizedText::new("", description),
    })
}

/// Adds `Gateway/Demo` and its children to `space`.
pub(crate) fn add_demo_nodes(space: &mut AddressSpace, start_time: DateTime) {
    let demo_id = gw(GATEWAY_DEMO);
    let mut demo = Object::new(
        &demo_id,
        QualifiedName::new(GATEWAY_NS, "Demo"),
        LocalizedText::new("", "Demo"),
        EventNotifier::empty(),
    );
    demo.set_description(LocalizedText::new(
        "",
        "Demonstration variables and methods of the gateway",
    ));
    insert_node(space, demo);
    space.insert_reference(&gw(GATEWAY_FOLDER), &demo_id, ReferenceTypeId::Organizes);
    let base_object: NodeId = ObjectTypeId::BaseObjectType.into();
    space.insert_reference(&demo_id, &base_object, ReferenceTypeId::HasTypeDefinition);

    let base_var: NodeId = VariableTypeId::BaseDataVariableType.into();
    let analog: NodeId = VariableTypeId::AnalogItemType.into();
    let vars = [
        (
            demo_variable(
                DEMO_SETPOINT,
                "Setpoint",
                "Writable setpoint",
                DataTypeId::Double,
                Variant::Double(0.0),
                true,
                start_time,
            ),
            &base_var,
        ),
        (
            demo_variable(
                DEMO_LEVEL,
                "Level",
                "Writable level in percent of its EURange",
                DataTypeId::Double,
                Variant::Double(0.0),
                true,
                start_time,
            ),
            &analog,
        ),
        (
            demo_variable(
                DEMO_COUNTER,
                "Counter",
                "Counter incremented by the gateway",
                DataTypeId::UInt32,
                Variant::UInt32(0),
                false,
                start_time,
            ),
            &base_var,
        ),
        (
            demo_variable(
                DEMO_VECTOR,
                "Vector",
                "Writable array of five doubles",
                DataTypeId::Double,
                Variant::from(vec![0.0f64; 5]),
                true,
                start_time,
            ),
            &base_var,
        ),
    ];
    for (v, ty) in vars {
        let id = v.node_id().clone();
        insert_node(space, v);
        space.insert_reference(&demo_id, &id, ReferenceTypeId::HasComponent);
        space.insert_reference(&id, ty, ReferenceTypeId::HasTypeDefinition);
    }

    let property_type: NodeId = PROPERTY_TYPE.into();
    let eu_range = property(
        DEMO_LEVEL_EURANGE,
        "EURange",
        DataTypeId::Range,
        ExtensionObject::from_message(Range {
            low: 0.0,
            high: 100.0,
        })
        .into(),
        start_time,
    );
    let eu_id = eu_range.node_id().clone();
    insert_node(space, eu_range);
    space.insert_reference(&gw(DEMO_LEVEL), &eu_id, ReferenceTypeId::HasProperty);
    space.insert_reference(&eu_id, &property_type, ReferenceTypeId::HasTypeDefinition);

    let add_id = gw(DEMO_ADD);
    let mut add = Method::new(
        &add_id,
        QualifiedName::new(GATEWAY_NS, "Add"),
        LocalizedText::new("", "Add"),
        true,
        true,
    );
    add.set_description(LocalizedText::new("", "Returns a + b"));
    insert_node(space, add);
    space.insert_reference(&demo_id, &add_id, ReferenceTypeId::HasComponent);
    let args = [
        (
            "Gateway.Demo.Add.InputArguments",
            "InputArguments",
            vec![
                argument("a", "First addend"),
                argument("b", "Second addend"),
            ],
        ),
        (
            "Gateway.Demo.Add.OutputArguments",
            "OutputArguments",
            vec![argument("sum", "a + b")],
        ),
    ];
    for (id, name, list) in args {
        let n = u32::try_from(list.len()).unwrap_or(0);
        let mut p = property(id, name, DataTypeId::Argument, list.into(), start_time);
        p.set_value_rank(1);
        p.set_array_dimensions(&[n]);
        let pid = p.node_id().clone();
        insert_node(space, p);
        space.insert_reference(&add_id, &pid, ReferenceTypeId::HasProperty);
        space.insert_reference(&pid, &property_type, ReferenceTypeId::HasTypeDefinition);
    }
}
