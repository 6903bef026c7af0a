#![forbid(unsafe_code)]
//! `uagate-space`: the gateway's local OPC UA address space and the sans-IO
//! implementation of the View (Browse, BrowseNext, TranslateBrowsePathsToNodeIds,
//! RegisterNodes) and Attribute (Read) service sets over it.
//!
//! The local space holds the standard namespace 0 node set (the `Server` object
//! with live `ServerStatus`, `NamespaceArray`, `ServerCapabilities`, ...) and
//! the gateway namespace `urn:uagate:gateway` with an `Objects/Gateway` folder.
//!
//! Nothing here performs I/O or reads a clock: the session dispatcher passes the
//! current time (`now`) into every call that needs it, and owns one
//! [`ContinuationPoints`] store per session.

mod browse;
mod limits;
mod live;
mod read;
mod space;

#[cfg(test)]
mod tests;

pub use browse::{page_references, ContinuationPoints};
pub use limits::{BuildInfo, SpaceLimits};
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
}
