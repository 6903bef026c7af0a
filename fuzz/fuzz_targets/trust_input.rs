//! Arbitrary bytes as a peer certificate, an uploaded certificate and an
//! uploaded CRL against a real store; the properties are asserted in the
//! shared harness.
#![no_main]

#[path = "../../gateway/store/tests/common/fuzz_harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::trust_input(data);
});
