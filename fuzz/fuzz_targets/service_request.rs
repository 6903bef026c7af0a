//! One service request, decoded and dispatched inside an activated session
//! of a real gateway over a real opc.tcp channel: the first byte
//! holds flags, the rest is the message body; the properties are asserted
//! in the shared harness (`gateway/server/tests/fuzzkit`).
#![no_main]

#[path = "../../gateway/server/tests/common/mod.rs"]
mod common;
#[path = "../../gateway/server/tests/fuzzkit/mod.rs"]
mod fuzzkit;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = fuzzkit::service_request(data);
});
