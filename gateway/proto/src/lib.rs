#![forbid(unsafe_code)]
//! Sans-IO OPC UA over TCP (UACP): framing, the server-side secure channel
//! state machine and chunk reassembly. Bytes and `now` go in; events, bytes
//! to send and the next deadline come out. No sockets, no clocks, no tokio.

pub mod connection;
pub mod decode;
pub mod error;
pub mod frame;

pub use connection::{
    CloseReason, Event, Limits, OpenRenewGate, OpenRequest, ReassemblyBudget, RenewGate,
    ServerConnection, UnlimitedReassembly, MIN_BUFFER_SIZE, SCRATCH_KEEP,
};
pub use error::ProtoError;
pub use opcua_core::comms::secure_channel::SecureChannel;
