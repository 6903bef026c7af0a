//! FrameReader fed arbitrary bytes in arbitrary splits; the first two bytes
//! pick the frame limit. Invariants are asserted in the shared harness.
#![no_main]

#[path = "../../gateway/proto/tests/common/fuzz_harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::uacp_framing(data);
});
