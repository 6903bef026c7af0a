//! A ServerConnection fed arbitrary bytes. The first byte chooses whether a
//! valid Hello + OpenSecureChannel(None) handshake precedes the input (so the
//! open channel's paths are reached) or the raw bytes start the connection.
#![no_main]

#[path = "../../gateway/proto/tests/common/fuzz_harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some((first, rest)) = data.split_first() {
        harness::secure_channel_input(rest, first & 1 == 0);
    }
});
