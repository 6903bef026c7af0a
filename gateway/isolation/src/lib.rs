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

/// A hash map for the per-request lookups of the request path (owners,
/// channels, connections). It hashes with foldhash, seeded at random per
/// map, instead of the standard SipHash: SipHash over owner keys was about
/// 2 % of the gateway's CPU in the proxied Read benchmark, and a random seed
/// still keeps a caller from predicting collisions.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::quality::RandomState>;

/// The set counterpart of [`FastMap`].
pub type FastSet<K> = std::collections::HashSet<K, foldhash::quality::RandomState>;
