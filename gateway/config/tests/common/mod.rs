//! Shared by the config tests.
pub mod fuzz_harness;
