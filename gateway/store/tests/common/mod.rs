//! Helpers shared by the store's integration tests: a store on a fresh
//! SQLite file, and certificates and CRLs made with rcgen.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::PathBuf;
pub mod fuzz_harness;

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, CertificateRevocationListParams, DnType,
    IsCa, KeyIdMethod, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use tempfile::TempDir;
use uagate_store::Store;

/// A store on a new SQLite file in a temp dir (kept alive by the TempDir).
pub async fn open_temp() -> (TempDir, PathBuf, Store) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.db");
    let store = Store::open(&path).await.unwrap();
    (dir, path, store)
}

/// Self-signed leaf certificate with an application URI, DER.
pub fn make_cert(cn: &str, uri: &str) -> Vec<u8> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    params
        .subject_alt_names
        .push(SanType::URI(uri.try_into().unwrap()));
    params.not_before = date_time_ymd(2024, 1, 1);
    params.not_after = date_time_ymd(2034, 1, 1);
    let key = KeyPair::generate().unwrap();
    params.self_signed(&key).unwrap().der().to_vec()
}

pub fn make_ca() -> (rcgen::Certificate, KeyPair) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "Test CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    (cert, key)
}

pub fn make_crl(
    ca: &rcgen::Certificate,
    key: &KeyPair,
    day: u8,
) -> rcgen::CertificateRevocationList {
    CertificateRevocationListParams {
        this_update: date_time_ymd(2024, 1, day),
        next_update: date_time_ymd(2024, 2, day),
        crl_number: SerialNumber::from(u64::from(day)),
        issuing_distribution_point: None,
        revoked_certs: vec![],
        key_identifier_method: KeyIdMethod::Sha256,
    }
    .signed_by(ca, key)
    .unwrap()
}
