//! Matching of written values and method arguments against a DataType and
//! ValueRank (Part 4 5.10.4 Write and 5.11.2 Call: `BadTypeMismatch`).
//!
//! A DataType is reduced to the built-in type its values are encoded with
//! (walking the type tree for subtypes such as `Duration` -> `Double`); a
//! value matches when its built-in type is exactly that type (no implicit
//! conversion), or any type accepted by the abstract types `BaseDataType`,
//! `Number`, `Integer` and `UInteger`. Null (`Variant::Empty`) never matches.

use opcua_nodes::TypeTree;
use opcua_types::{DataTypeId, NodeId, Variant, VariantScalarTypeId, VariantTypeId};

/// What a DataType accepts, as a built-in type or an abstract family.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Expected {
    /// `BaseDataType` or an unknown type: any non-null value.
    Any,
    /// `Number`: any numeric built-in type.
    Number,
    /// `Integer`: any signed integer type.
    Integer,
    /// `UInteger`: any unsigned integer type.
    UInteger,
    /// Exactly this built-in type.
    Builtin(VariantScalarTypeId),
}

/// The expectation of a DataType known without a type tree: the built-in
/// types (i=1..25), the abstract numeric types, `Enumeration` (Int32) and a
/// few common ns0 subtypes. `None` for anything else.
pub(crate) fn expected_static(data_type: &NodeId) -> Option<Expected> {
    use VariantScalarTypeId as S;
    if data_type.namespace != 0 {
        return None;
    }
    let id = data_type.as_u32()?;
    let b = |s| Some(Expected::Builtin(s));
    match id {
        24 => Some(Expected::Any),
        26 => Some(Expected::Number),
        27 => Some(Expected::Integer),
        28 => Some(Expected::UInteger),
        // Enumeration and its subtypes are encoded as Int32.
        29 => b(S::Int32),
        // Structure and its subtypes are ExtensionObjects.
        22 => b(S::ExtensionObject),
        x if x == DataTypeId::Duration as u32 => b(S::Double),
        // 293 = Date.
        x if x == DataTypeId::UtcTime as u32 || x == 293 => b(S::DateTime),
        // 292 = Time.
        x if x == DataTypeId::LocaleId as u32
            || x == DataTypeId::NumericRange as u32
            || x == 292 =>
        {
            b(S::String)
        }
        x if x == DataTypeId::Counter as u32 || x == DataTypeId::IntegerId as u32 => b(S::UInt32),
        x if x == DataTypeId::Argument as u32 => b(S::ExtensionObject),
        1..=25 => S::try_from(id).ok().map(Expected::Builtin),
        _ => None,
    }
}

/// The expectation of `data_type`, following its supertypes in `types`
/// until a type known to [`expected_static`] is reached (`Any` when none is).
pub(crate) fn expected_for(types: &dyn TypeTree, data_type: &NodeId) -> Expected {
    let mut current = data_type;
    // Type hierarchies are shallow; the bound guards against cycles.
    for _ in 0..32 {
        if let Some(e) = expected_static(current) {
            return e;
        }
        match types.get_supertype(current) {
            Some(parent) => current = parent,
            None => break,
        }
    }
    Expected::Any
}

/// `true` when a value of built-in type `s` is acceptable for `e`.
pub(crate) fn scalar_matches(e: Expected, s: VariantScalarTypeId) -> bool {
    use VariantScalarTypeId as S;
    match e {
        Expected::Any => true,
        Expected::Number => matches!(
            s,
            S::SByte
                | S::Byte
                | S::Int16
                | S::UInt16
                | S::Int32
                | S::UInt32
                | S::Int64
                | S::UInt64
                | S::Float
                | S::Double
        ),
        Expected::Integer => matches!(s, S::SByte | S::Int16 | S::Int32 | S::Int64),
        Expected::UInteger => matches!(s, S::Byte | S::UInt16 | S::UInt32 | S::UInt64),
        Expected::Builtin(b) => b == s,
    }
}

/// `true` when `value` matches the DataType expectation `e` and the
/// ValueRank `value_rank` (Part 3 5.6.2: -3 ScalarOrOneDimension, -2 Any,
/// -1 Scalar, 0 OneOrMoreDimensions, n>0 exactly n dimensions).
pub(crate) fn value_matches(e: Expected, value_rank: i32, value: &Variant) -> bool {
    match value.type_id() {
        VariantTypeId::Empty => false,
        VariantTypeId::Scalar(s) => (-3..=-1).contains(&value_rank) && scalar_matches(e, s),
        VariantTypeId::Array(s, dims) => {
            let Variant::Array(arr) = value else {
                return false;
            };
            let rank = dims.map_or(1, |d| d.len().max(1));
            let rank_ok = match value_rank {
                -2 | 0 => true,
                -3 => rank == 1,
                n if n > 0 => usize::try_from(n).is_ok_and(|n| n == rank),
                _ => false,
            };
            rank_ok
                && scalar_matches(e, s)
                && arr
                    .values
                    .iter()
                    .all(|v| v.scalar_type_id() == Some(s) && !v.is_array())
        }
    }
}
