#![forbid(unsafe_code)]
//! `uagate-space`: the gateway's local OPC UA address space and the sans-IO
//! implementation of the View (Browse, BrowseNext, TranslateBrowsePathsToNodeIds,
//! RegisterNodes) and Attribute (Read, Write) service sets over it, plus the
//! validation half of the Method service set (Call): method signatures and
//! argument checks, and execution of the space's own demo method.
//!
//! The local space holds the standard namespace 0 node set (the `Server` object
//! with live `ServerStatus`, `NamespaceArray`, `ServerCapabilities`, ...) and
//! the gateway namespace `urn:uagate:gateway` with an `Objects/Gateway` folder
//! and the `Gateway/Demo` object (writable variables, an AnalogItem, a
//! counter the engine drives and the `Add` method). For each mounted field
//! connection it holds the mount folder `Objects/<name>` and the status object
//! `Objects/Gateway/FieldConnections/<name>` (see [`LocalSpace::add_mount`]).
//!
//! Nothing here performs I/O or reads a clock: the session dispatcher passes the
//! current time (`now`) into every call that needs it, and owns one
//! [`ContinuationPoints`] store per session.

mod browse;
mod demo;
mod limits;
mod live;
mod method;
mod mounts;
mod read;
mod redundancy;
mod space;
mod typecheck;
mod write;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_mounts;
#[cfg(test)]
mod tests_ops;

pub use browse::{page_references, ContinuationPoints};
pub use demo::{
    DEMO_ADD, DEMO_COUNTER, DEMO_LEVEL, DEMO_LEVEL_EURANGE, DEMO_SETPOINT, DEMO_VECTOR,
    GATEWAY_DEMO,
};
pub use limits::{BuildInfo, SpaceLimits};
pub use method::{arguments_status, MethodSignature};
pub use mounts::{FieldStatusValues, FIELD_STATUS_VARS, GATEWAY_FIELD_CONNECTIONS};
pub use space::{
    LocalSpace, GATEWAY_FOLDER, GATEWAY_HOSTNAME, GATEWAY_NAMESPACE_URI, GATEWAY_NS,
    GATEWAY_SESSION_COUNT, GATEWAY_UPTIME,
};

/// Errors of the local address space (configuration-time failures; service
/// failures are reported as OPC UA status codes inside the results).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpaceError {
    /// The namespace table is full (OPC UA namespace indexes are `u16`).
    #[error("namespace table is full, cannot add {0}")]
    NamespaceTableFull(String),
    /// A namespace URI was empty.
    #[error("namespace URI must not be empty")]
    EmptyNamespaceUri,
    /// [`LocalSpace::set_value`]: no such node in the local space.
    #[error("node {0} does not exist in the local space")]
    UnknownNode(opcua_types::NodeId),
    /// [`LocalSpace::set_value`]: the node is not a Variable.
    #[error("node {0} is not a variable")]
    NotAVariable(opcua_types::NodeId),
    /// [`LocalSpace::set_value`]: the variable's value is computed by the
    /// space (e.g. `Server/ServerStatus`) and cannot be set.
    #[error("the value of {0} is computed and cannot be set")]
    ComputedValue(opcua_types::NodeId),
    /// [`LocalSpace::set_value`]: the value does not match the variable's
    /// DataType or ValueRank.
    #[error("value does not match the data type or value rank of {0}")]
    TypeMismatch(opcua_types::NodeId),
    /// [`LocalSpace::add_mount`]: the mount name is empty.
    #[error("invalid field connection name {0:?}")]
    InvalidMountName(String),
    /// [`LocalSpace::add_mount`]: a field connection of that name is
    /// already mounted.
    #[error("field connection {0} is already mounted")]
    MountExists(String),
    /// [`LocalSpace::add_mount`]: the Objects folder already has a child
    /// with the mount's browse name (e.g. `Gateway`).
    #[error("the Objects folder already has a child named {0}")]
    BrowseNameInUse(String),
    /// [`LocalSpace::add_mount`]: a node id the mount needs is already used
    /// by another node.
    #[error("node id {0} is already in use")]
    NodeIdInUse(opcua_types::NodeId),
    /// [`LocalSpace::set_field_status`]: no field connection of that name is
    /// mounted.
    #[error("field connection {0} is not mounted")]
    UnknownMount(String),
}
