#![forbid(unsafe_code)]
//! Resource isolation (see ../shared/reference/ResourceIsolation.md): the
//! runtime plan built from the configuration, owner accounting with leases,
//! and the weighted fair scheduler. Pure data structures: no tokio, no
//! clock reads (time is an argument).

pub mod owner;
pub mod plan;
pub mod provider;
pub mod scheduler;
pub mod shares;
