//! The weighted fair scheduler over owners.
