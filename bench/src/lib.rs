#![forbid(unsafe_code)]
//! Shared pieces of the uagate benchmark clients.
//!
//! - [`service`]: binary encoding and decoding of the few service messages
//!   the hand-made clients use, the [`service::Call`] trait of a session
//!   that can send them, session setup and the benchmark Read.
//! - [`uacp`]: a hand-made UA-TCP (UACP) client for SecurityPolicy None
//!   over any frame transport: Hello, OpenSecureChannel, CreateSession,
//!   anonymous ActivateSession, requests, CloseSession and CLO.
//! - [`stats`]: the measuring loop, percentiles and process CPU time.
//!
//! These are measuring tools, not tests: nothing here asserts timing.

use std::time::Duration;

use opcua_types::{NodeId, ReadValueId, VariableId};

pub mod service;
pub mod stats;
pub mod uacp;

/// The ten Value attributes read by every benchmark request: namespace-0
/// Server nodes that both uagate and async-opcua-server implement.
pub const NODES: [VariableId; 10] = [
    VariableId::Server_ServerArray,
    VariableId::Server_NamespaceArray,
    VariableId::Server_ServerStatus,
    VariableId::Server_ServerStatus_StartTime,
    VariableId::Server_ServerStatus_CurrentTime,
    VariableId::Server_ServerStatus_State,
    VariableId::Server_ServerStatus_BuildInfo_ProductName,
    VariableId::Server_ServerStatus_BuildInfo_ProductUri,
    VariableId::Server_ServerStatus_BuildInfo_ManufacturerName,
    VariableId::Server_ServiceLevel,
];

/// Timeout for connecting and for any single request.
pub const STEP: Duration = Duration::from_secs(30);

/// The Value attributes of [`NODES`] as Read operands.
pub fn nodes_to_read() -> Vec<ReadValueId> {
    NODES
        .iter()
        .map(|v| ReadValueId::from(NodeId::from(*v)))
        .collect()
}
