//! A channel opened with the policy and mode the first byte picks (None and
//! every policy the gateway offers, Sign and SignAndEncrypt), then the rest
//! fed raw (forged frames) or sealed by the client as MSG bodies, so both
//! the failing security checks and the decoding behind passing ones are
//! reached. The properties are asserted in the shared harness.
#![no_main]

#[path = "../../gateway/proto/tests/common/fuzz_harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::secure_channel_policies(data);
});
