//! Method validation for the Call service (OPC UA Part 4 5.11.2) and the
//! methods executed by the local space itself (`Gateway.Demo.Add`).
//!
//! The engine executes the standard `Server` methods (GetMonitoredItems,
//! RequestServerStateChange, ...); this module only tells it whether a
//! method belongs to an object, what its arguments are and whether the
//! supplied inputs fit them.

use opcua_nodes::{NodeType, TypeTree};
use opcua_types::{
    Argument, BrowseDirection, DateTime, NodeClass, NodeId, QualifiedName, ReferenceTypeId,
    StatusCode, Variant,
};

use crate::demo::DEMO_ADD;
use crate::space::gw;
use crate::typecheck::{expected_for, expected_static, value_matches, Expected};
use crate::LocalSpace;

/// The input and output arguments of a method (its `InputArguments` and
/// `OutputArguments` properties; empty when a property is absent).
///
/// Returned by [`LocalSpace::method_signature`] and checked against the
/// request's inputs with [`LocalSpace::validate_arguments`].
#[derive(Debug, Clone, PartialEq)]
pub struct MethodSignature {
    /// `InputArguments`, in call order.
    pub inputs: Vec<Argument>,
    /// `OutputArguments`, in result order.
    pub outputs: Vec<Argument>,
    /// What each input's DataType accepts, resolved through the type tree
    /// when the signature came from the local space.
    input_types: Vec<Expected>,
}

impl MethodSignature {
    /// A signature built outside the local space (e.g. for a method of a
    /// mounted field server). Input DataTypes are resolved without a type
    /// tree: built-in and abstract ns0 types are checked, others accept any
    /// non-null value.
    pub fn new(inputs: Vec<Argument>, outputs: Vec<Argument>) -> Self {
        let input_types = inputs
            .iter()
            .map(|a| expected_static(&a.data_type).unwrap_or(Expected::Any))
            .collect();
        Self {
            inputs,
            outputs,
            input_types,
        }
    }
}

/// The overall status of a Call operation from the per-argument results of
/// [`LocalSpace::validate_arguments`]: `BadInvalidArgument` when any is bad
/// (Part 4 5.11.2), else Good.
pub fn arguments_status(results: &[StatusCode]) -> StatusCode {
    if results.iter().any(|s| s.is_bad()) {
        StatusCode::BadInvalidArgument
    } else {
        StatusCode::Good
    }
}

impl LocalSpace {
    /// The signature of `method_id` when called on `object_id`.
    ///
    /// Called by the engine for each `CallMethodRequest` addressed to the
    /// local space. Errors: `BadNodeIdUnknown` (no such object),
    /// `BadNodeIdInvalid` (the object is not an Object or ObjectType),
    /// `BadMethodInvalid` (no such Method node, or it is not a HasComponent
    /// target of the object, of its TypeDefinition or of a supertype of it:
    /// e.g. `Server.GetMonitoredItems` i=11492 on `Server` i=2253, or
    /// `ServerType.GetMonitoredItems` i=11489 on `Server`),
    /// `BadNotExecutable` (the method's Executable attribute is false; the
    /// engine checks UserExecutable/roles itself).
    pub fn method_signature(
        &self,
        object_id: &NodeId,
        method_id: &NodeId,
    ) -> Result<MethodSignature, StatusCode> {
        let object = self.find(object_id).ok_or(StatusCode::BadNodeIdUnknown)?;
        let class = object.node_class();
        if !matches!(class, NodeClass::Object | NodeClass::ObjectType) {
            return Err(StatusCode::BadNodeIdInvalid);
        }
        let executable = match self.find(method_id) {
            Some(NodeType::Method(m)) => m.executable(),
            _ => return Err(StatusCode::BadMethodInvalid),
        };
        if !self.has_method(object_id, class, method_id) {
            return Err(StatusCode::BadMethodInvalid);
        }
        if !executable {
            return Err(StatusCode::BadNotExecutable);
        }
        let inputs = self.arguments(method_id, "InputArguments");
        let outputs = self.arguments(method_id, "OutputArguments");
        let input_types = inputs
            .iter()
            .map(|a| expected_for(&self.types, &a.data_type))
            .collect();
        Ok(MethodSignature {
            inputs,
            outputs,
            input_types,
        })
    }

    /// Checks the request's `inputArguments` against `sig` (Part 4 5.11.2).
    ///
    /// `Err(BadArgumentsMissing)` for too few, `Err(BadTooManyArguments)` for
    /// too many inputs. Otherwise one result per input: Good, or
    /// `BadTypeMismatch` (null, wrong built-in type or ValueRank). When any
    /// is bad the operation's status is `BadInvalidArgument` (see
    /// [`arguments_status`]) and these go into `inputArgumentResults`.
    pub fn validate_arguments(
        sig: &MethodSignature,
        inputs: &[Variant],
    ) -> Result<Vec<StatusCode>, StatusCode> {
        if inputs.len() < sig.inputs.len() {
            return Err(StatusCode::BadArgumentsMissing);
        }
        if inputs.len() > sig.inputs.len() {
            return Err(StatusCode::BadTooManyArguments);
        }
        Ok(sig
            .inputs
            .iter()
            .zip(inputs)
            .enumerate()
            .map(|(i, (arg, v))| {
                let e =
                    sig.input_types.get(i).copied().unwrap_or_else(|| {
                        expected_static(&arg.data_type).unwrap_or(Expected::Any)
                    });
                if value_matches(e, arg.value_rank, v) {
                    StatusCode::Good
                } else {
                    StatusCode::BadTypeMismatch
                }
            })
            .collect())
    }

    /// Executes a method implemented by the local space itself.
    ///
    /// `None` when `method` is not such a method (the engine executes it);
    /// otherwise the output arguments, or the operation's error
    /// (`BadMethodInvalid`, `BadArgumentsMissing`, `BadTooManyArguments`,
    /// `BadInvalidArgument`). Today only `Gateway.Demo.Add(a, b) -> a + b`.
    pub fn call_local(
        &mut self,
        now: DateTime,
        object: &NodeId,
        method: &NodeId,
        inputs: &[Variant],
    ) -> Option<Result<Vec<Variant>, StatusCode>> {
        let _ = now;
        if *method != gw(DEMO_ADD) {
            return None;
        }
        Some(self.call_add(object, method, inputs))
    }

    fn call_add(
        &self,
        object: &NodeId,
        method: &NodeId,
        inputs: &[Variant],
    ) -> Result<Vec<Variant>, StatusCode> {
        let sig = self.method_signature(object, method)?;
        let results = Self::validate_arguments(&sig, inputs)?;
        let status = arguments_status(&results);
        if status.is_bad() {
            return Err(status);
        }
        match inputs {
            [Variant::Double(a), Variant::Double(b)] => Ok(vec![Variant::Double(a + b)]),
            _ => Err(StatusCode::BadInvalidArgument),
        }
    }

    /// `true` when `method` is a HasComponent target of `object`, or of its
    /// type (definition) or one of that type's supertypes.
    fn has_method(&self, object: &NodeId, class: NodeClass, method: &NodeId) -> bool {
        if self.is_component(object, method) {
            return true;
        }
        let mut ty = if class == NodeClass::ObjectType {
            self.types.get_supertype(object).cloned()
        } else {
            self.type_definition(object)
        };
        // Type hierarchies are shallow; the bound guards against cycles.
        for _ in 0..32 {
            let Some(t) = ty else {
                return false;
            };
            if self.is_component(&t, method) {
                return true;
            }
            ty = self.types.get_supertype(&t).cloned();
        }
        false
    }

    fn is_component(&self, source: &NodeId, target: &NodeId) -> bool {
        self.space
            .find_references(
                source,
                Some((ReferenceTypeId::HasComponent, true)),
                &self.types,
                BrowseDirection::Forward,
            )
            .any(|r| r.target_node == target)
    }

    /// The `Argument`s stored in the property `name` of `method`.
    fn arguments(&self, method: &NodeId, name: &str) -> Vec<Argument> {
        let wanted = QualifiedName::new(0, name);
        let prop = self
            .space
            .find_references(
                method,
                Some((ReferenceTypeId::HasProperty, false)),
                &self.types,
                BrowseDirection::Forward,
            )
            .map(|r| r.target_node.clone())
            .find(|id| {
                self.find(id)
                    .is_some_and(|n| n.as_node().browse_name() == &wanted)
            });
        let Some(Some(NodeType::Variable(var))) = prop.map(|p| self.find(&p)) else {
            return Vec::new();
        };
        let value = crate::write::stored_value(var);
        let Variant::Array(arr) = value else {
            return Vec::new();
        };
        arr.values
            .iter()
            .filter_map(|v| match v {
                Variant::ExtensionObject(eo) => eo.inner_as::<Argument>().cloned(),
                _ => None,
            })
            .collect()
    }
}
