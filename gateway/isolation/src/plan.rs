//! The runtime plan: per-stage capacities derived from the configuration.
