//! Pairing: how two appliances that have never met learn each other's
//! certificate without trusting the network between them. Sans-IO.
//!
//! `uagate pair invite` on the first appliance makes a one-time
//! [`PairingCode`] (valid [`INVITE_TTL`], single use) and prints it with the
//! SHA-256 fingerprint of its pair certificate. The operator types the code
//! on the second appliance (`uagate pair join HOST:PORT CODE`), which opens
//! a mutual-TLS connection to the first with its own pair certificate. Each
//! side sees the other's certificate in the TLS handshake (which proves the
//! peer holds its key) and proves it knows the code by a MAC over both
//! fingerprints ([`join_proof`], [`welcome_proof`]). A machine in the
//! middle has its own certificate, so the fingerprints it shows differ from
//! the ones the appliances see, and without the code it cannot make a MAC
//! over them: the join is refused and nothing is pinned. After the
//! exchange each appliance pins the other's fingerprint; replication
//! accepts no other certificate.

use std::fmt;
use std::time::Duration;

use hmac::{Hmac, Mac};
use rand::Rng;
use sha2::{Digest, Sha256};

/// How long a pairing code may be used after `uagate pair invite`.
pub const INVITE_TTL: Duration = Duration::from_secs(10 * 60);

/// Wrong codes tried against one invite before it is revoked (a guessed
/// code is then worthless even within its lifetime).
pub const MAX_FAILED_ATTEMPTS: u32 = 5;

/// Characters of a code: Crockford's base32 (no I, L, O, U), easy to read
/// aloud and to type.
const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Characters in a code (5 bits each: 100 bits).
const CODE_LEN: usize = 20;

/// A one-time pairing code: 20 characters of Crockford base32, shown in
/// groups of four (`ABCD-EFGH-JKMN-PQRS-TVWX`). Never logged: its `Debug`
/// is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct PairingCode(String);

impl PairingCode {
    /// A fresh random code (called by `uagate pair invite`).
    pub fn generate() -> PairingCode {
        let mut rng = rand::thread_rng();
        let code = (0..CODE_LEN)
            .map(|_| char::from(ALPHABET[rng.gen_range(0..ALPHABET.len())]))
            .collect();
        PairingCode(code)
    }

    /// Parses what an operator typed: case, hyphens and spaces do not
    /// matter, and the look-alikes O, I and L read as 0, 1 and 1.
    pub fn parse(typed: &str) -> Result<PairingCode, PairingError> {
        let code: String = typed
            .chars()
            .filter(|c| !matches!(c, '-' | ' '))
            .map(|c| match c.to_ascii_uppercase() {
                'O' => '0',
                'I' | 'L' => '1',
                c => c,
            })
            .collect();
        if code.len() != CODE_LEN || !code.bytes().all(|b| ALPHABET.contains(&b)) {
            return Err(PairingError::MalformedCode);
        }
        Ok(PairingCode(code))
    }

    /// The code without separators (what is stored and MACed).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PairingCode {
    /// Groups of four separated by hyphens.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, chunk) in self.0.as_bytes().chunks(4).enumerate() {
            if i > 0 {
                f.write_str("-")?;
            }
            f.write_str(std::str::from_utf8(chunk).map_err(|_| fmt::Error)?)?;
        }
        Ok(())
    }
}

impl fmt::Debug for PairingCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PairingCode(<redacted>)")
    }
}

/// Why a pairing step was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PairingError {
    /// Not a code `uagate pair invite` prints.
    #[error("the pairing code is malformed: 20 characters of 0-9 and A-Z (without I, L, O, U), in groups of four")]
    MalformedCode,
    /// The peer's proof does not match: a wrong code, or a machine in the
    /// middle.
    #[error(
        "the pairing code does not match (a wrong code, or another machine between the appliances)"
    )]
    ProofMismatch,
}

/// The SHA-256 fingerprint of a certificate (lowercase hex of the DER's
/// digest), as printed by `uagate pair invite` and pinned after pairing.
pub fn fingerprint(der: &[u8]) -> String {
    hex::encode(Sha256::digest(der))
}

fn mac(code: &PairingCode, label: &[u8], leader_fp: &str, joiner_fp: &str) -> Hmac<Sha256> {
    // HMAC takes keys of any length.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(code.as_str().as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    m.update(label);
    m.update(leader_fp.as_bytes());
    m.update(b"|");
    m.update(joiner_fp.as_bytes());
    m
}

const JOIN: &[u8] = b"uagate pair join v1|";
const WELCOME: &[u8] = b"uagate pair welcome v1|";

/// The joiner's proof that it knows `code`, bound to the leader's
/// certificate as the joiner saw it and to its own.
pub fn join_proof(code: &PairingCode, leader_fp: &str, joiner_fp: &str) -> Vec<u8> {
    mac(code, JOIN, leader_fp, joiner_fp)
        .finalize()
        .into_bytes()
        .to_vec()
}

/// The leader's answer: its proof that it knows `code`, over the same two
/// fingerprints as it saw them.
pub fn welcome_proof(code: &PairingCode, leader_fp: &str, joiner_fp: &str) -> Vec<u8> {
    mac(code, WELCOME, leader_fp, joiner_fp)
        .finalize()
        .into_bytes()
        .to_vec()
}

/// Checks a joiner's proof (by the inviting appliance, with its own
/// fingerprint and the one the TLS handshake showed). Constant time.
pub fn verify_join(
    code: &PairingCode,
    leader_fp: &str,
    joiner_fp: &str,
    proof: &[u8],
) -> Result<(), PairingError> {
    mac(code, JOIN, leader_fp, joiner_fp)
        .verify_slice(proof)
        .map_err(|_| PairingError::ProofMismatch)
}

/// Checks the leader's answer (by the joining appliance). Constant time.
pub fn verify_welcome(
    code: &PairingCode,
    leader_fp: &str,
    joiner_fp: &str,
    proof: &[u8],
) -> Result<(), PairingError> {
    mac(code, WELCOME, leader_fp, joiner_fp)
        .verify_slice(proof)
        .map_err(|_| PairingError::ProofMismatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_random_readable_and_parse_back() {
        let a = PairingCode::generate();
        let b = PairingCode::generate();
        assert_ne!(a, b);
        let shown = a.to_string();
        assert_eq!(shown.len(), 24);
        assert_eq!(shown.matches('-').count(), 4);
        assert_eq!(PairingCode::parse(&shown).unwrap(), a);
        assert_eq!(PairingCode::parse(&shown.to_lowercase()).unwrap(), a);
        assert_eq!(PairingCode::parse(a.as_str()).unwrap(), a);
        assert_eq!(format!("{a:?}"), "PairingCode(<redacted>)");
    }

    #[test]
    fn look_alikes_are_forgiven_and_garbage_is_refused() {
        let c = PairingCode::parse("O1L0-0000-0000-0000-0000").unwrap();
        assert_eq!(c.as_str(), "01100000000000000000");
        for bad in [
            "",
            "ABCD",
            "ABCD-EFGH-JKMN-PQRS-TVWXY",
            "ABCD-EFGH-JKMN-PQRS-TVW!",
            "UUUU-UUUU-UUUU-UUUU-UUUU",
        ] {
            assert_eq!(
                PairingCode::parse(bad),
                Err(PairingError::MalformedCode),
                "{bad}"
            );
        }
    }

    #[test]
    fn proofs_bind_the_code_and_both_fingerprints() {
        let code = PairingCode::generate();
        let (l, j) = (fingerprint(b"leader cert"), fingerprint(b"joiner cert"));
        let p = join_proof(&code, &l, &j);
        assert_eq!(verify_join(&code, &l, &j, &p), Ok(()));
        // Another code.
        let other = PairingCode::generate();
        assert_eq!(
            verify_join(&other, &l, &j, &p),
            Err(PairingError::ProofMismatch)
        );
        // A machine in the middle: the joiner saw its certificate, not the leader's.
        let mitm = fingerprint(b"mitm cert");
        let seen_by_joiner = join_proof(&code, &mitm, &j);
        assert_eq!(
            verify_join(&code, &l, &j, &seen_by_joiner),
            Err(PairingError::ProofMismatch)
        );
        // ... or the leader saw the middle's certificate as the joiner's.
        assert_eq!(
            verify_join(&code, &l, &mitm, &p),
            Err(PairingError::ProofMismatch)
        );
        // A join proof is not a welcome proof (no reflection).
        assert_eq!(
            verify_welcome(&code, &l, &j, &p),
            Err(PairingError::ProofMismatch)
        );
        let w = welcome_proof(&code, &l, &j);
        assert_eq!(verify_welcome(&code, &l, &j, &w), Ok(()));
        // A truncated proof.
        assert_eq!(
            verify_join(&code, &l, &j, &p[..16]),
            Err(PairingError::ProofMismatch)
        );
    }

    #[test]
    fn fingerprints_are_sha256_hex() {
        assert_eq!(
            fingerprint(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
