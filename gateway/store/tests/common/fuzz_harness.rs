//! The body of the `trust_input` fuzz target, shared by
//! `fuzz/fuzz_targets/trust_input.rs` (via `#[path]`) and by
//! `tests/fuzz_smoke.rs` (a bounded loop on stable): arbitrary bytes as a
//! peer's certificate (the handshake's validation), as an uploaded
//! certificate's ApplicationUri and trust status, and as an uploaded CRL,
//! against a real store on SQLite whose trust list holds the seed corpus
//! (`fuzz/seeds/trust_input`: a trusted self-signed leaf, a trusted ECDSA
//! CA with its CRL, and a leaf that CA signed).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;

use uagate_store::{CertKind, Store, TrustVerdict};

/// A trusted self-signed RSA leaf.
pub const LEAF: &[u8] = include_bytes!("../../../../fuzz/seeds/trust_input/leaf.der");
/// A trusted ECDSA P-256 CA.
pub const CA: &[u8] = include_bytes!("../../../../fuzz/seeds/trust_input/ca.der");
/// A leaf signed by [`CA`] (not on any list).
pub const SIGNED: &[u8] = include_bytes!("../../../../fuzz/seeds/trust_input/signed.der");
/// [`CA`]'s CRL, listing nothing.
pub const CRL: &[u8] = include_bytes!("../../../../fuzz/seeds/trust_input/crl.der");

/// The store the inputs are checked against, made once per process.
pub struct Fixture {
    pub rt: tokio::runtime::Runtime,
    pub store: Store,
    _dir: tempfile::TempDir,
}

/// The process's fixture: a store with the seed corpus's trust list.
pub fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = rt.block_on(async {
            let store = Store::open(&dir.path().join("fuzz.db")).await.unwrap();
            store
                .trust_add("fuzz", LEAF, CertKind::Trusted)
                .await
                .unwrap();
            store
                .trust_add("fuzz", CA, CertKind::Trusted)
                .await
                .unwrap();
            store.add_crl("fuzz", CRL).await.unwrap();
            store
        });
        Fixture {
            rt,
            store,
            _dir: dir,
        }
    })
}

/// What must hold for any bytes: no panic, no database error, and
/// `Trusted` only for what the trust list trusts.
pub fn trust_input(data: &[u8]) {
    let f = fixture();
    f.rt.block_on(async {
        let verdict = f
            .store
            .validate_certificate(data, chrono::Utc::now())
            .await
            .expect("validation never fails for the input's sake");
        if verdict == TrustVerdict::Trusted {
            assert!(
                data == LEAF || data == CA || data == SIGNED,
                "trusted: {} bytes that are none of the trusted certificates",
                data.len()
            );
        }
        let _ = f.store.cert_status(data).await;
        let _ = uagate_store::certificate_application_uri(data);
        // An upload of garbage is refused; a CRL that is accepted must be
        // one the CA signed (the only issuer the store trusts).
        if f.store.add_crl("fuzz", data).await.is_ok() {
            assert!(data.len() >= 64, "a {}-byte CRL was accepted", data.len());
        }
    });
}
