//! Argon2id password hashing. These functions are CPU- and memory-heavy and
//! are only called from `spawn_blocking`.

use std::sync::OnceLock;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use rand::rngs::OsRng;
use rand::RngCore;

use crate::error::StoreError;

/// Hash of a random password, verified against when a user is unknown so an
/// attacker cannot tell unknown users from wrong passwords by timing.
static DUMMY_HASH: OnceLock<String> = OnceLock::new();

/// Hashes `password` with argon2id (default parameters, random salt) into a
/// PHC string.
pub(crate) fn hash(password: &str) -> Result<String, StoreError> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| StoreError::Hash(e.to_string()))
}

/// Checks `password` against a stored PHC string; a corrupt hash never matches.
pub(crate) fn verify(password: &str, phc: &str) -> bool {
    match PasswordHash::new(phc) {
        Ok(parsed) => Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(e) => {
            tracing::warn!(error = %e, "stored password hash is not a valid PHC string");
            false
        }
    }
}

/// Spends the same work as a real verification, for unknown users.
pub(crate) fn verify_dummy(password: &str) {
    let phc = DUMMY_HASH.get_or_init(|| {
        let mut random = [0u8; 24];
        OsRng.fill_bytes(&mut random);
        hash(&hex::encode(random)).unwrap_or_default()
    });
    let _ = verify(password, phc);
}
