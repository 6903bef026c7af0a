#![forbid(unsafe_code)]
//! Southbound field connections: managed, redundant sessions toward field
//! servers (reference Sessions.md and HighAvailability.md).
//!
//! Sans-IO parts (plain data, time as an argument): [`policy`] (reconnect
//! delays), [`redundancy`] (ServiceLevel subranges, failover decisions),
//! [`failover`] (the machine making a connection's redundancy and failover
//! decisions from events, driven by [`conn`]),
//! [`limits`] (operation limits and batching), [`remap`] (namespace
//! allocation and node id remapping between the gateway and a field server).

pub mod coalesce;
pub mod conn;
pub mod diag;
pub mod events;
pub mod failover;
pub mod items;
pub mod limits;
pub mod policy;
pub mod proxy;
pub mod redundancy;
pub mod remap;
pub mod sequence;
pub mod spread;
pub mod tcp;

pub use conn::{
    ClientSetup, ConnState, FieldConnection, FieldError, FieldSettings, FieldStatus, Handling,
    HistoryEvent, Identity, LinkSession, NamespaceHook, Probe, ReconnectStats, ServerView,
    TrustCheck, LOST, RECONNECT_BUCKETS,
};
pub use events::{Audience, EventKey, EventTable, Taken};
pub use failover::FAILING_AFTER;
pub use items::{ItemKey, ItemTable};
