//! A configuration document (TOML and JSON) from arbitrary bytes; the
//! properties are asserted in the shared harness.
#![no_main]

#[path = "../../gateway/config/tests/common/fuzz_harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::config_document(data);
});
