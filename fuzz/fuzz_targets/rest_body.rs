//! Arbitrary bytes as the body of a REST call (the first byte picks the
//! route), sent by an administrator to the real router over a real gateway;
//! the properties are asserted in the shared harness.
#![no_main]

#[path = "../../web/tests/common/mod.rs"]
mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    common::fuzz_harness::rest_body(data);
});
