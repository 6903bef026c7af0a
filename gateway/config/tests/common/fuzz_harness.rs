//! The body of the `config_document` fuzz target, shared by
//! `fuzz/fuzz_targets/config_document.rs` (via `#[path]`) and by
//! `tests/fuzz_smoke.rs`, which runs it as a bounded loop on stable. It
//! checks what must hold for any configuration document, TOML (the file
//! and `uagate config import`) or JSON (`PUT /api/v1/config`): parsing never
//! panics; a refusal says what is wrong in a bounded message; a document
//! that is accepted exports (`uagate config export`) to TOML that is
//! accepted again and means the same.
#![allow(dead_code)]

use uagate_config::{Config, ConfigError};

/// Longest refusal message: a hostile document must not be echoed whole.
pub const MAX_MESSAGE: usize = 8 * 1024;

/// Feeds `data` as TOML (lossy UTF-8) and as JSON.
pub fn config_document(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    check(Config::from_toml(&text));
    if let Ok(doc) = serde_json::from_slice::<Config>(data) {
        check(doc.validate().map(|()| doc));
    }
}

/// The properties of one parse's outcome.
pub fn check(outcome: Result<Config, ConfigError>) {
    match outcome {
        Ok(config) => {
            let exported = config.to_toml();
            let again = Config::from_toml(&exported).unwrap_or_else(|e| {
                panic!("an accepted document exports to a refused one: {e}\n{exported}")
            });
            assert_eq!(again, config, "the export round trip changed the document");
        }
        Err(e) => {
            let message = e.to_string();
            assert!(!message.is_empty(), "a refusal without a message");
            assert!(
                message.len() <= MAX_MESSAGE,
                "a refusal of {} bytes",
                message.len()
            );
        }
    }
}
