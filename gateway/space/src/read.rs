//! The Attribute service set (Read) over the local space (OPC UA Part 4 5.10.2).

use opcua_nodes::{NodeType, TypeTree};
use opcua_types::{
    AttributeId, DataEncoding, DataTypeId, DataValue, DateTime, LocalizedText, NodeId,
    NumericRange, ReadValueId, StatusCode, TimestampsToReturn, Variant,
};

use crate::LocalSpace;

fn status_only(status: StatusCode) -> DataValue {
    DataValue {
        value: None,
        status: Some(status),
        source_timestamp: None,
        source_picoseconds: None,
        server_timestamp: None,
        server_picoseconds: None,
    }
}

/// A read attribute before index range and timestamps are applied.
struct RawAttribute {
    value: Variant,
    status: StatusCode,
    /// Source timestamp; only set for the Value attribute.
    source: Option<DateTime>,
}

impl LocalSpace {
    /// Reads one attribute (one `ReadValueId` of a Read request).
    ///
    /// Called by the dispatcher for each element of `nodesToRead` that
    /// belongs to the local space. `max_age` is accepted for interface
    /// completeness: every value here is current, so any age is satisfied
    /// (`BadMaxAgeInvalid` and `BadTimestampsToReturnInvalid` are service-level
    /// results checked by the dispatcher). The server timestamp is `now`; the
    /// source timestamp is only returned for the Value attribute (for
    /// stored values the one written or set, else the start time).
    ///
    /// Cheap enough for per-item sampling by the subscription engine: one
    /// hash lookup, no I/O, and for the Value attribute only a clone of the
    /// stored value (or the computation of a live `Server` value).
    pub fn read(
        &self,
        now: DateTime,
        req: &ReadValueId,
        timestamps: TimestampsToReturn,
        max_age: f64,
    ) -> DataValue {
        let _ = max_age;
        let Some(node) = self.find(&req.node_id) else {
            return status_only(StatusCode::BadNodeIdUnknown);
        };
        let Ok(attribute) = AttributeId::from_u32(req.attribute_id) else {
            return status_only(StatusCode::BadAttributeIdInvalid);
        };
        if let Err(e) = self.check_data_encoding(node, attribute, req) {
            return status_only(e);
        }
        let raw = match self.attribute(now, node, attribute) {
            Ok(r) => r,
            Err(e) => return status_only(e),
        };
        let value = match apply_index_range(raw.value, &req.index_range) {
            Ok(v) => v,
            Err(e) => return status_only(e),
        };
        let (want_source, want_server) = match timestamps {
            TimestampsToReturn::Source => (true, false),
            TimestampsToReturn::Server => (false, true),
            TimestampsToReturn::Both => (true, true),
            TimestampsToReturn::Neither | TimestampsToReturn::Invalid => (false, false),
        };
        DataValue {
            value: Some(value),
            status: Some(raw.status),
            source_timestamp: if want_source { raw.source } else { None },
            source_picoseconds: None,
            server_timestamp: want_server.then_some(now),
            server_picoseconds: None,
        }
    }

    /// Part 4 Table 178: a data encoding may only be requested for the Value
    /// of a Variable whose DataType is a Structure; we encode only
    /// "Default Binary".
    fn check_data_encoding(
        &self,
        node: &NodeType,
        attribute: AttributeId,
        req: &ReadValueId,
    ) -> Result<(), StatusCode> {
        let enc = &req.data_encoding;
        if enc.is_null() || enc.name.is_empty() && enc.namespace_index == 0 {
            return Ok(());
        }
        if attribute != AttributeId::Value {
            return Err(StatusCode::BadDataEncodingInvalid);
        }
        let data_type = match node {
            NodeType::Variable(v) => v.data_type(),
            NodeType::VariableType(v) => v.data_type().clone(),
            _ => return Err(StatusCode::BadDataEncodingInvalid),
        };
        let structure: NodeId = DataTypeId::Structure.into();
        if !self.types.is_subtype_of(&data_type, &structure) {
            return Err(StatusCode::BadDataEncodingInvalid);
        }
        match DataEncoding::from_browse_name(enc.clone()) {
            Ok(DataEncoding::Binary) if enc.namespace_index == 0 => Ok(()),
            _ => Err(StatusCode::BadDataEncodingUnsupported),
        }
    }

    fn attribute(
        &self,
        now: DateTime,
        node: &NodeType,
        attribute: AttributeId,
    ) -> Result<RawAttribute, StatusCode> {
        let plain = |value: Variant| RawAttribute {
            value,
            status: StatusCode::Good,
            source: None,
        };
        let n = node.as_node();
        match attribute {
            AttributeId::Description => {
                return Ok(plain(
                    n.description()
                        .cloned()
                        .unwrap_or_else(LocalizedText::null)
                        .into(),
                ))
            }
            AttributeId::WriteMask => {
                return Ok(plain(n.write_mask().map(|m| m.bits()).unwrap_or(0).into()))
            }
            AttributeId::UserWriteMask => {
                return Ok(plain(
                    n.user_write_mask().map(|m| m.bits()).unwrap_or(0).into(),
                ))
            }
            _ => {}
        }
        if let NodeType::Variable(var) = node {
            match attribute {
                AttributeId::Value => {
                    if let Some(v) = self.live_value(now, n.node_id()) {
                        return Ok(RawAttribute {
                            value: v,
                            status: StatusCode::Good,
                            source: Some(now),
                        });
                    }
                    let stored = var.value(
                        TimestampsToReturn::Source,
                        &NumericRange::None,
                        &DataEncoding::Binary,
                        0.0,
                    );
                    return Ok(RawAttribute {
                        value: stored.value.unwrap_or(Variant::Empty),
                        status: stored.status.unwrap_or(StatusCode::Good),
                        // Values written or set keep their source timestamp;
                        // static ones have not changed since the space was built.
                        source: Some(stored.source_timestamp.unwrap_or(self.rt.start_time)),
                    });
                }
                AttributeId::ArrayDimensions => {
                    return Ok(plain(
                        var.array_dimensions()
                            .map(Variant::from)
                            .unwrap_or(Variant::Empty),
                    ))
                }
                AttributeId::MinimumSamplingInterval => {
                    // Values here are computed on demand: any rate is supported.
                    return Ok(plain(var.minimum_sampling_interval().unwrap_or(0.0).into()));
                }
                AttributeId::AccessLevelEx => {
                    return Ok(plain(u32::from(var.access_level().bits()).into()))
                }
                _ => {}
            }
        }
        let dv = n
            .get_attribute(
                TimestampsToReturn::Neither,
                attribute,
                &NumericRange::None,
                &DataEncoding::Binary,
            )
            .ok_or(StatusCode::BadAttributeIdInvalid)?;
        if let Some(status) = dv.status {
            if status.is_bad() {
                return Err(status);
            }
        }
        Ok(RawAttribute {
            value: dv.value.unwrap_or(Variant::Empty),
            status: dv.status.unwrap_or(StatusCode::Good),
            source: (attribute == AttributeId::Value).then_some(self.rt.start_time),
        })
    }
}

/// Applies a Part 4 7.27 NumericRange to a value. Syntax errors were already
/// rejected when the range was decoded; every other mismatch is
/// `BadIndexRangeNoData` (lower bound out of range, non-array value). Upper
/// bounds past the end yield partial results. Strings are indexed by
/// character, ByteStrings by byte; two ranges on a one-dimensional array of
/// Strings/ByteStrings select elements, then a substring of each.
pub(crate) fn apply_index_range(
    value: Variant,
    range: &NumericRange,
) -> Result<Variant, StatusCode> {
    match range {
        NumericRange::None => Ok(value),
        NumericRange::Index(i) => slice(&value, *i as usize, *i as usize),
        NumericRange::Range(lo, hi) => slice(&value, *lo as usize, *hi as usize),
        NumericRange::MultipleRanges(ranges) => {
            let [outer, inner] = ranges.as_slice() else {
                return Err(StatusCode::BadIndexRangeNoData);
            };
            let Variant::Array(arr) = &value else {
                return Err(StatusCode::BadIndexRangeNoData);
            };
            if arr.dimensions.as_ref().is_some_and(|d| d.len() > 1) {
                return Err(StatusCode::BadIndexRangeNoData);
            }
            let Variant::Array(picked) = apply_index_range(value.clone(), outer)? else {
                return Err(StatusCode::BadIndexRangeNoData);
            };
            let mut out = Vec::with_capacity(picked.values.len());
            for v in picked.values {
                if !matches!(v, Variant::String(_) | Variant::ByteString(_)) {
                    return Err(StatusCode::BadIndexRangeNoData);
                }
                out.push(apply_index_range(v, inner)?);
            }
            Ok(Variant::from((picked.value_type, out)))
        }
    }
}

fn slice(value: &Variant, lo: usize, hi: usize) -> Result<Variant, StatusCode> {
    match value {
        Variant::String(s) => {
            let Some(s) = s.value() else {
                return Err(StatusCode::BadIndexRangeNoData);
            };
            let chars: Vec<char> = s.chars().collect();
            if lo >= chars.len() {
                return Err(StatusCode::BadIndexRangeNoData);
            }
            let hi = hi.min(chars.len() - 1);
            let sub: String = chars[lo..=hi].iter().collect();
            Ok(Variant::String(sub.into()))
        }
        Variant::ByteString(b) => {
            let Some(bytes) = b.value.as_ref() else {
                return Err(StatusCode::BadIndexRangeNoData);
            };
            if lo >= bytes.len() {
                return Err(StatusCode::BadIndexRangeNoData);
            }
            let hi = hi.min(bytes.len() - 1);
            Ok(Variant::ByteString(bytes[lo..=hi].to_vec().into()))
        }
        Variant::Array(arr) => {
            if arr.dimensions.as_ref().is_some_and(|d| d.len() > 1) {
                return Err(StatusCode::BadIndexRangeNoData);
            }
            if lo >= arr.values.len() {
                return Err(StatusCode::BadIndexRangeNoData);
            }
            let hi = hi.min(arr.values.len() - 1);
            Ok(Variant::from((
                arr.value_type,
                arr.values[lo..=hi].to_vec(),
            )))
        }
        _ => Err(StatusCode::BadIndexRangeNoData),
    }
}
