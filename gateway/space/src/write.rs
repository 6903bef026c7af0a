//! The Write service (OPC UA Part 4 5.10.4) over the local space, and the
//! engine's own value updates ([`LocalSpace::set_value`]).
//!
//! Only the Value attribute of Variables outside namespace 0 whose
//! AccessLevel has `CurrentWrite` can be written (today: the writable
//! `Gateway.Demo.*` variables). Every other attribute is `BadNotWritable`
//! (WriteMask is 0 on every node).
//!
//! Status codes and timestamps in the written DataValue are accepted: the
//! given StatusCode (default Good), SourceTimestamp (default `now`) and
//! ServerTimestamp (default `now`) are stored as given. `BadWriteNotSupported`
//! is therefore never returned.

use opcua_nodes::{AccessLevel, NodeType};
use opcua_types::{
    AttributeId, DataEncoding, DataValue, DateTime, NodeClass, NodeId, NumericRange, StatusCode,
    TimestampsToReturn, Variant, WriteValue,
};

use crate::typecheck::{expected_for, scalar_matches, value_matches, Expected};
use crate::{LocalSpace, SpaceError};

/// `true` when `attribute` is defined for nodes of class `class` (Part 3 5).
fn attribute_applies(class: NodeClass, attribute: AttributeId) -> bool {
    use AttributeId as A;
    match attribute {
        A::NodeId
        | A::NodeClass
        | A::BrowseName
        | A::DisplayName
        | A::Description
        | A::WriteMask
        | A::UserWriteMask
        | A::RolePermissions
        | A::UserRolePermissions
        | A::AccessRestrictions => true,
        A::Value | A::DataType | A::ValueRank | A::ArrayDimensions => {
            matches!(class, NodeClass::Variable | NodeClass::VariableType)
        }
        A::AccessLevel
        | A::UserAccessLevel
        | A::MinimumSamplingInterval
        | A::Historizing
        | A::AccessLevelEx => class == NodeClass::Variable,
        A::IsAbstract => matches!(
            class,
            NodeClass::ObjectType
                | NodeClass::VariableType
                | NodeClass::ReferenceType
                | NodeClass::DataType
        ),
        A::Symmetric | A::InverseName => class == NodeClass::ReferenceType,
        A::ContainsNoLoops => class == NodeClass::View,
        A::EventNotifier => matches!(class, NodeClass::Object | NodeClass::View),
        A::Executable | A::UserExecutable => class == NodeClass::Method,
        A::DataTypeDefinition => class == NodeClass::DataType,
    }
}

impl LocalSpace {
    /// Writes one `WriteValue` of a Write request and returns its result code.
    ///
    /// Called by the dispatcher for each element of `nodesToWrite` that
    /// belongs to the local space; `can_write` is the engine's decision for
    /// the session's user (role). Results, in order of checking:
    /// `BadNodeIdUnknown`, `BadAttributeIdInvalid` (unknown attribute or not
    /// defined for the node class), `BadNotWritable` (not the Value attribute,
    /// namespace 0 / computed values, or no `CurrentWrite` in AccessLevel),
    /// `BadUserAccessDenied` (`can_write` is false), `BadIndexRangeInvalid`
    /// (malformed range), `BadTypeMismatch` (null, wrong built-in type or
    /// wrong ValueRank), `BadIndexRangeNoData` (range on a non-array, out of
    /// bounds, multi-dimensional, or the value's length differs from the
    /// range's). With an index range the value is an array holding exactly
    /// the selected elements (a scalar is accepted for a single index).
    pub fn write(&mut self, now: DateTime, item: &WriteValue, can_write: bool) -> StatusCode {
        match self.try_write(now, item, can_write) {
            Ok(()) => StatusCode::Good,
            Err(e) => e,
        }
    }

    fn try_write(
        &mut self,
        now: DateTime,
        item: &WriteValue,
        can_write: bool,
    ) -> Result<(), StatusCode> {
        let node = self
            .space
            .find(&item.node_id)
            .ok_or(StatusCode::BadNodeIdUnknown)?;
        let attribute = AttributeId::from_u32(item.attribute_id)
            .map_err(|_| StatusCode::BadAttributeIdInvalid)?;
        if !attribute_applies(node.node_class(), attribute) {
            return Err(StatusCode::BadAttributeIdInvalid);
        }
        let NodeType::Variable(var) = node else {
            return Err(StatusCode::BadNotWritable);
        };
        if attribute != AttributeId::Value
            || item.node_id.namespace == 0
            || !var.access_level().contains(AccessLevel::CURRENT_WRITE)
            || self.live_value(now, &item.node_id).is_some()
        {
            return Err(StatusCode::BadNotWritable);
        }
        if !can_write {
            return Err(StatusCode::BadUserAccessDenied);
        }
        if !item.index_range.is_valid() {
            return Err(StatusCode::BadIndexRangeInvalid);
        }
        let expected = expected_for(&self.types, &var.data_type());
        let written = item.value.value.as_ref().unwrap_or(&Variant::Empty);
        let new_value = if item.index_range.is_none() {
            if !value_matches(expected, var.value_rank(), written) {
                return Err(StatusCode::BadTypeMismatch);
            }
            written.clone()
        } else {
            let current = stored_value(var);
            splice(current, &item.index_range, written, expected)?
        };
        let dv = DataValue {
            value: Some(new_value),
            status: Some(item.value.status.unwrap_or(StatusCode::Good)),
            source_timestamp: Some(item.value.source_timestamp.unwrap_or(now)),
            source_picoseconds: item.value.source_picoseconds,
            server_timestamp: Some(item.value.server_timestamp.unwrap_or(now)),
            server_picoseconds: item.value.server_picoseconds,
        };
        if let Some(NodeType::Variable(var)) = self.space.find_mut(&item.node_id) {
            var.set_data_value(dv);
        }
        Ok(())
    }

    /// Sets the stored value of a variable; used by the engine to drive
    /// values such as `Gateway.Demo.Counter` (read-only for clients).
    ///
    /// The DataValue is stored as given (status and timestamps included; a
    /// missing source timestamp reads as the start time). A non-null value
    /// must match the variable's DataType and ValueRank. Computed variables
    /// (the `Server` object's and `Gateway/Uptime`-like ones) cannot be set.
    pub fn set_value(&mut self, node: &NodeId, value: DataValue) -> Result<(), SpaceError> {
        let Some(found) = self.space.find(node) else {
            return Err(SpaceError::UnknownNode(node.clone()));
        };
        let NodeType::Variable(var) = found else {
            return Err(SpaceError::NotAVariable(node.clone()));
        };
        if self.live_value(self.rt.start_time, node).is_some() {
            return Err(SpaceError::ComputedValue(node.clone()));
        }
        if let Some(v) = value.value.as_ref().filter(|v| !v.is_empty()) {
            let expected = expected_for(&self.types, &var.data_type());
            if !value_matches(expected, var.value_rank(), v) {
                return Err(SpaceError::TypeMismatch(node.clone()));
            }
        }
        // A missing value is stored as null so that its status still reads
        // back (the node only reports a status together with a value).
        let value = DataValue {
            value: Some(value.value.unwrap_or(Variant::Empty)),
            ..value
        };
        if let Some(NodeType::Variable(var)) = self.space.find_mut(node) {
            var.set_data_value(value);
        }
        Ok(())
    }
}

/// The stored value of `var` (without timestamps).
pub(crate) fn stored_value(var: &opcua_nodes::Variable) -> Variant {
    var.value(
        TimestampsToReturn::Neither,
        &NumericRange::None,
        &DataEncoding::Binary,
        0.0,
    )
    .value
    .unwrap_or(Variant::Empty)
}

/// Replaces the elements `range` of the one-dimensional array `current` by
/// the elements of `written`.
fn splice(
    current: Variant,
    range: &NumericRange,
    written: &Variant,
    expected: Expected,
) -> Result<Variant, StatusCode> {
    let (lo, hi) = match range {
        NumericRange::Index(i) => (*i as usize, *i as usize),
        NumericRange::Range(lo, hi) => (*lo as usize, *hi as usize),
        // Multi-dimensional ranges and None (handled by the caller).
        _ => return Err(StatusCode::BadIndexRangeNoData),
    };
    let Variant::Array(mut arr) = current else {
        return Err(StatusCode::BadIndexRangeNoData);
    };
    if arr.dimensions.as_ref().is_some_and(|d| d.len() > 1) {
        return Err(StatusCode::BadIndexRangeNoData);
    }
    let elements: Vec<Variant> = match written {
        Variant::Empty => return Err(StatusCode::BadTypeMismatch),
        Variant::Array(w) => {
            if w.dimensions.as_ref().is_some_and(|d| d.len() > 1) {
                return Err(StatusCode::BadTypeMismatch);
            }
            w.values.clone()
        }
        scalar if lo == hi => vec![scalar.clone()],
        _ => return Err(StatusCode::BadIndexRangeNoData),
    };
    let types_ok = elements.iter().all(|v| {
        !v.is_array()
            && v.scalar_type_id()
                .is_some_and(|s| s == arr.value_type && scalar_matches(expected, s))
    });
    if !types_ok {
        return Err(StatusCode::BadTypeMismatch);
    }
    if hi >= arr.values.len() || elements.len() != hi - lo + 1 {
        return Err(StatusCode::BadIndexRangeNoData);
    }
    for (slot, v) in arr.values[lo..=hi].iter_mut().zip(elements) {
        *slot = v;
    }
    Ok(Variant::Array(arr))
}
