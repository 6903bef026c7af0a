//! Chain validation (`Store::validate_certificate`) against real SQLite
//! stores, with RSA CAs, intermediates, leaves and CRLs made by rcgen.
#![allow(clippy::unwrap_used)] // unwrap is fine in tests

use std::sync::OnceLock;

use chrono::{DateTime, TimeZone, Utc};
use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, CertificateRevocationListParams, DnType,
    IsCa, KeyIdMethod, KeyPair, KeyUsagePurpose, RevokedCertParams, SanType, SerialNumber,
    PKCS_RSA_SHA256,
};
use rsa::pkcs1::RsaPssParams;
use rsa::pkcs8::{EncodePrivateKey, LineEnding};
use rsa::{Pss, RsaPrivateKey};
use sha2::{Digest, Sha256};
use tempfile::TempDir;
use uagate_store::{CertKind, Store, TrustVerdict, MAX_CHAIN_LEN};
use x509_cert::der::asn1::{Any, BitString};
use x509_cert::der::{Decode, Encode};
use x509_cert::spki::{AlgorithmIdentifierOwned, ObjectIdentifier};
use x509_cert::Certificate;

const ACTOR: &str = "tester";

/// The moment all validations happen at unless a test says otherwise.
fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 6, 1, 12, 0, 0).unwrap()
}

/// RSA-2048 private keys (PKCS#8 PEM), generated once per test binary:
/// 0 root CA, 1 intermediate CA, 2 leaf, 3 impostor CA.
fn key_pems() -> &'static [String] {
    static KEYS: OnceLock<Vec<String>> = OnceLock::new();
    KEYS.get_or_init(|| {
        (0..4)
            .map(|_| {
                let key = RsaPrivateKey::new(&mut rand::rngs::OsRng, 2048).unwrap();
                key.to_pkcs8_pem(LineEnding::LF).unwrap().to_string()
            })
            .collect()
    })
}

fn key(i: usize) -> KeyPair {
    KeyPair::from_pem_and_sign_algo(&key_pems()[i], &PKCS_RSA_SHA256).unwrap()
}

fn rsa_key(i: usize) -> RsaPrivateKey {
    use rsa::pkcs8::DecodePrivateKey;
    RsaPrivateKey::from_pkcs8_pem(&key_pems()[i]).unwrap()
}

/// A certificate together with the key that signs on its behalf.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    fn der(&self) -> Vec<u8> {
        self.cert.der().to_vec()
    }
}

fn ca_params(cn: &str, from_year: i32, to_year: i32) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = date_time_ymd(from_year, 1, 1);
    params.not_after = date_time_ymd(to_year, 1, 1);
    params
}

/// Self-signed root CA valid 2024..2036.
fn root(cn: &str, key_index: usize) -> Ca {
    let key = key(key_index);
    let cert = ca_params(cn, 2024, 2036).self_signed(&key).unwrap();
    Ca { cert, key }
}

/// Intermediate CA issued by `issuer`, valid `from..to`.
fn intermediate(cn: &str, key_index: usize, issuer: &Ca, from: i32, to: i32) -> Ca {
    let key = key(key_index);
    let cert = ca_params(cn, from, to)
        .signed_by(&key, &issuer.cert, &issuer.key)
        .unwrap();
    Ca { cert, key }
}

fn leaf_params(cn: &str, serial: u64, from: i32, to: i32) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    params
        .subject_alt_names
        .push(SanType::URI(format!("urn:test:{cn}").try_into().unwrap()));
    params.serial_number = Some(SerialNumber::from(serial));
    params.not_before = date_time_ymd(from, 1, 1);
    params.not_after = date_time_ymd(to, 1, 1);
    params
}

/// Application certificate issued by `issuer`, valid `from..to`, DER.
fn leaf_by(issuer: &Ca, serial: u64, from: i32, to: i32) -> Vec<u8> {
    leaf_params("client", serial, from, to)
        .signed_by(&key(2), &issuer.cert, &issuer.key)
        .unwrap()
        .der()
        .to_vec()
}

/// CRL of `ca` revoking `revoked` serials, valid this..next year.
fn crl(ca: &Ca, revoked: &[u64], this_year: i32, next_year: i32) -> Vec<u8> {
    CertificateRevocationListParams {
        this_update: date_time_ymd(this_year, 1, 1),
        next_update: date_time_ymd(next_year, 1, 1),
        crl_number: SerialNumber::from(1u64),
        issuing_distribution_point: None,
        revoked_certs: revoked
            .iter()
            .map(|s| RevokedCertParams {
                serial_number: SerialNumber::from(*s),
                revocation_time: date_time_ymd(2025, 6, 1),
                reason_code: None,
                invalidity_date: None,
            })
            .collect(),
        key_identifier_method: KeyIdMethod::Sha256,
    }
    .signed_by(&ca.cert, &ca.key)
    .unwrap()
    .der()
    .to_vec()
}

/// A current CRL revoking nothing.
fn empty_crl(ca: &Ca) -> Vec<u8> {
    crl(ca, &[], 2026, 2027)
}

async fn open_temp() -> (TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("config.db")).await.unwrap();
    (dir, store)
}

async fn verdict(store: &Store, der: &[u8]) -> TrustVerdict {
    store.validate_certificate(der, now()).await.unwrap()
}

/// Flips a bit in the last byte of the DER (inside the signature).
fn tamper(der: &[u8]) -> Vec<u8> {
    let mut bad = der.to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0x01;
    bad
}

#[test]
fn status_names() {
    assert_eq!(TrustVerdict::Trusted.status_name(), "Good");
    assert!(TrustVerdict::Trusted.is_trusted());
    assert_eq!(
        TrustVerdict::Untrusted.status_name(),
        "BadCertificateUntrusted"
    );
    assert_eq!(TrustVerdict::Revoked.status_name(), "BadCertificateRevoked");
    assert_eq!(
        TrustVerdict::IssuerRevoked.status_name(),
        "BadCertificateIssuerRevoked"
    );
    assert_eq!(
        TrustVerdict::RevocationUnknown.status_name(),
        "BadCertificateRevocationUnknown"
    );
    assert_eq!(
        TrustVerdict::IssuerRevocationUnknown.status_name(),
        "BadCertificateIssuerRevocationUnknown"
    );
    assert_eq!(
        TrustVerdict::TimeInvalid.status_name(),
        "BadCertificateTimeInvalid"
    );
    assert_eq!(
        TrustVerdict::IssuerTimeInvalid.status_name(),
        "BadCertificateIssuerTimeInvalid"
    );
    assert_eq!(TrustVerdict::Invalid.to_string(), "BadCertificateInvalid");
    assert!(!TrustVerdict::Invalid.is_trusted());
}

#[tokio::test]
async fn trusted_self_signed_leaf_needs_no_crl() {
    let (_dir, store) = open_temp().await;
    let der = leaf_params("self", 7, 2024, 2034)
        .self_signed(&key(2))
        .unwrap()
        .der()
        .to_vec();
    assert_eq!(verdict(&store, &der).await, TrustVerdict::Untrusted);
    store
        .trust_add(ACTOR, &der, CertKind::Trusted)
        .await
        .unwrap();
    assert_eq!(verdict(&store, &der).await, TrustVerdict::Trusted);
    // On the Issuer list only it is not trusted.
    store
        .trust_add(ACTOR, &der, CertKind::Issuer)
        .await
        .unwrap();
    assert_eq!(verdict(&store, &der).await, TrustVerdict::Untrusted);
    // Validity still applies to an explicitly trusted certificate.
    store
        .trust_add(ACTOR, &der, CertKind::Trusted)
        .await
        .unwrap();
    let late = Utc.with_ymd_and_hms(2035, 1, 1, 0, 0, 0).unwrap();
    assert_eq!(
        store.validate_certificate(&der, late).await.unwrap(),
        TrustVerdict::TimeInvalid
    );
}

#[tokio::test]
async fn trusted_ecdsa_self_signed_leaf_keeps_todays_behaviour() {
    let (_dir, store) = open_temp().await;
    let der = leaf_params("ecdsa", 8, 2024, 2034)
        .self_signed(&KeyPair::generate().unwrap())
        .unwrap()
        .der()
        .to_vec();
    assert_eq!(verdict(&store, &der).await, TrustVerdict::Untrusted);
    store
        .trust_add(ACTOR, &der, CertKind::Trusted)
        .await
        .unwrap();
    assert_eq!(verdict(&store, &der).await, TrustVerdict::Trusted);
}

#[tokio::test]
async fn leaf_of_trusted_ca_with_crl_is_trusted() {
    let (_dir, store) = open_temp().await;
    let ca = root("Root CA", 0);
    let leaf = leaf_by(&ca, 100, 2024, 2034);
    store
        .trust_add(ACTOR, &ca.der(), CertKind::Trusted)
        .await
        .unwrap();
    // CRL required for CA-issued certificates.
    assert_eq!(
        verdict(&store, &leaf).await,
        TrustVerdict::RevocationUnknown
    );
    store.add_crl(ACTOR, &empty_crl(&ca)).await.unwrap();
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Trusted);
    // The CA certificate itself (self-signed, trusted) validates too.
    assert_eq!(verdict(&store, &ca.der()).await, TrustVerdict::Trusted);
}

#[tokio::test]
async fn leaf_revoked_in_ca_crl() {
    let (_dir, store) = open_temp().await;
    let ca = root("Root CA", 0);
    let leaf = leaf_by(&ca, 100, 2024, 2034);
    let other = leaf_by(&ca, 101, 2024, 2034);
    store
        .trust_add(ACTOR, &ca.der(), CertKind::Trusted)
        .await
        .unwrap();
    store
        .add_crl(ACTOR, &crl(&ca, &[100], 2026, 2027))
        .await
        .unwrap();
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Revoked);
    assert_eq!(verdict(&store, &other).await, TrustVerdict::Trusted);
    // Explicitly trusting the revoked leaf does not override its CA's CRL.
    store
        .trust_add(ACTOR, &ca.der(), CertKind::Issuer)
        .await
        .unwrap();
    store
        .trust_add(ACTOR, &leaf, CertKind::Trusted)
        .await
        .unwrap();
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Revoked);
}

#[tokio::test]
async fn explicitly_trusted_ca_issued_leaf_needs_no_crl() {
    let (_dir, store) = open_temp().await;
    let ca = root("Root CA", 0);
    let leaf = leaf_by(&ca, 100, 2024, 2034);
    store
        .trust_add(ACTOR, &leaf, CertKind::Trusted)
        .await
        .unwrap();
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Trusted);
    store
        .trust_add(ACTOR, &ca.der(), CertKind::Issuer)
        .await
        .unwrap();
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Trusted);
}

#[tokio::test]
async fn outdated_crl_means_revocation_unknown() {
    let (_dir, store) = open_temp().await;
    let ca = root("Root CA", 0);
    let leaf = leaf_by(&ca, 100, 2024, 2034);
    store
        .trust_add(ACTOR, &ca.der(), CertKind::Trusted)
        .await
        .unwrap();
    store
        .add_crl(ACTOR, &crl(&ca, &[], 2024, 2025))
        .await
        .unwrap();
    assert_eq!(
        verdict(&store, &leaf).await,
        TrustVerdict::RevocationUnknown
    );
}

#[tokio::test]
async fn crl_with_bad_signature_is_ignored() {
    let (_dir, store) = open_temp().await;
    let ca = root("Root CA", 0);
    // Same name, different key: its CRL must not count for the real CA.
    let impostor = root("Root CA", 3);
    let leaf = leaf_by(&ca, 100, 2024, 2034);
    store
        .trust_add(ACTOR, &ca.der(), CertKind::Trusted)
        .await
        .unwrap();
    store
        .add_crl(ACTOR, &crl(&impostor, &[100], 2026, 2027))
        .await
        .unwrap();
    assert_eq!(
        verdict(&store, &leaf).await,
        TrustVerdict::RevocationUnknown
    );
    // A genuine CRL replaces it (same issuer name) and is honoured.
    store.add_crl(ACTOR, &empty_crl(&ca)).await.unwrap();
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Trusted);
    // Tampered genuine CRL: ignored again.
    let mut bad = crl(&ca, &[], 2026, 2028);
    let last = bad.len() - 1;
    bad[last] ^= 0x01;
    store.add_crl(ACTOR, &bad).await.unwrap();
    assert_eq!(
        verdict(&store, &leaf).await,
        TrustVerdict::RevocationUnknown
    );
}

#[tokio::test]
async fn ca_only_on_issuer_list_is_untrusted() {
    let (_dir, store) = open_temp().await;
    let ca = root("Root CA", 0);
    let leaf = leaf_by(&ca, 100, 2024, 2034);
    store
        .trust_add(ACTOR, &ca.der(), CertKind::Issuer)
        .await
        .unwrap();
    store.add_crl(ACTOR, &empty_crl(&ca)).await.unwrap();
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Untrusted);
}

#[tokio::test]
async fn unknown_leaf_is_untrusted_and_garbage_is_invalid() {
    let (_dir, store) = open_temp().await;
    let ca = root("Root CA", 0);
    let stranger = root("Stranger CA", 3);
    store
        .trust_add(ACTOR, &ca.der(), CertKind::Trusted)
        .await
        .unwrap();
    store.add_crl(ACTOR, &empty_crl(&ca)).await.unwrap();
    // Issuer not in the store at all.
    let leaf = leaf_by(&stranger, 5, 2024, 2034);
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Untrusted);
    // Nothing recorded by validation: rejection is left to the engine.
    assert!(store.certs(CertKind::Rejected).await.unwrap().is_empty());
    assert_eq!(
        verdict(&store, b"not a certificate").await,
        TrustVerdict::Invalid
    );
    assert_eq!(verdict(&store, &[]).await, TrustVerdict::Invalid);
}

#[tokio::test]
async fn tampered_signature_is_invalid() {
    let (_dir, store) = open_temp().await;
    let ca = root("Root CA", 0);
    let leaf = leaf_by(&ca, 100, 2024, 2034);
    store
        .trust_add(ACTOR, &ca.der(), CertKind::Trusted)
        .await
        .unwrap();
    store.add_crl(ACTOR, &empty_crl(&ca)).await.unwrap();
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Trusted);
    assert_eq!(verdict(&store, &tamper(&leaf)).await, TrustVerdict::Invalid);
    // Signed by a different key under the trusted CA's name.
    let impostor = root("Root CA", 3);
    let forged = leaf_by(&impostor, 100, 2024, 2034);
    assert_eq!(verdict(&store, &forged).await, TrustVerdict::Invalid);
    // A trusted self-signed certificate whose signature is broken.
    let self_signed = leaf_params("self", 9, 2024, 2034)
        .self_signed(&key(2))
        .unwrap()
        .der()
        .to_vec();
    let broken = tamper(&self_signed);
    store
        .trust_add(ACTOR, &broken, CertKind::Trusted)
        .await
        .unwrap();
    assert_eq!(verdict(&store, &broken).await, TrustVerdict::Invalid);
}

#[tokio::test]
async fn intermediate_path() {
    let (_dir, store) = open_temp().await;
    let ca = root("Root CA", 0);
    let inter = intermediate("Intermediate CA", 1, &ca, 2024, 2034);
    let leaf = leaf_by(&inter, 300, 2024, 2034);
    store
        .trust_add(ACTOR, &ca.der(), CertKind::Trusted)
        .await
        .unwrap();
    // Intermediate unknown: chain incomplete.
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Untrusted);
    store
        .trust_add(ACTOR, &inter.der(), CertKind::Issuer)
        .await
        .unwrap();
    // No CRL from the intermediate (the leaf's issuer).
    assert_eq!(
        verdict(&store, &leaf).await,
        TrustVerdict::RevocationUnknown
    );
    store.add_crl(ACTOR, &empty_crl(&inter)).await.unwrap();
    // No CRL from the root (the intermediate's issuer).
    assert_eq!(
        verdict(&store, &leaf).await,
        TrustVerdict::IssuerRevocationUnknown
    );
    store.add_crl(ACTOR, &empty_crl(&ca)).await.unwrap();
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Trusted);

    // Intermediate revoked by the root.
    let inter_serial = x509_serial(&inter.der());
    store
        .add_crl(ACTOR, &crl_raw_serial(&ca, &inter_serial))
        .await
        .unwrap();
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::IssuerRevoked);

    // Trusting the intermediate directly makes it the anchor: the root and
    // its CRL no longer matter.
    store
        .trust_add(ACTOR, &inter.der(), CertKind::Trusted)
        .await
        .unwrap();
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Trusted);
}

/// Serial number bytes of a certificate.
fn x509_serial(der: &[u8]) -> Vec<u8> {
    Certificate::from_der(der)
        .unwrap()
        .tbs_certificate
        .serial_number
        .as_bytes()
        .to_vec()
}

/// Current CRL of `ca` revoking the certificate with these serial bytes.
fn crl_raw_serial(ca: &Ca, serial: &[u8]) -> Vec<u8> {
    CertificateRevocationListParams {
        this_update: date_time_ymd(2026, 2, 1),
        next_update: date_time_ymd(2027, 1, 1),
        crl_number: SerialNumber::from(2u64),
        issuing_distribution_point: None,
        revoked_certs: vec![RevokedCertParams {
            serial_number: SerialNumber::from_slice(serial),
            revocation_time: date_time_ymd(2026, 1, 15),
            reason_code: None,
            invalidity_date: None,
        }],
        key_identifier_method: KeyIdMethod::Sha256,
    }
    .signed_by(&ca.cert, &ca.key)
    .unwrap()
    .der()
    .to_vec()
}

#[tokio::test]
async fn expired_leaf_and_expired_intermediate() {
    let (_dir, store) = open_temp().await;
    let ca = root("Root CA", 0);
    let inter = intermediate("Old Intermediate", 1, &ca, 2020, 2025);
    store
        .trust_add(ACTOR, &ca.der(), CertKind::Trusted)
        .await
        .unwrap();
    store
        .trust_add(ACTOR, &inter.der(), CertKind::Issuer)
        .await
        .unwrap();
    store.add_crl(ACTOR, &empty_crl(&ca)).await.unwrap();
    store.add_crl(ACTOR, &empty_crl(&inter)).await.unwrap();

    let expired = leaf_by(&ca, 100, 2020, 2025);
    assert_eq!(verdict(&store, &expired).await, TrustVerdict::TimeInvalid);
    let not_yet = leaf_by(&ca, 101, 2027, 2030);
    assert_eq!(verdict(&store, &not_yet).await, TrustVerdict::TimeInvalid);
    let under_old = leaf_by(&inter, 102, 2024, 2034);
    assert_eq!(
        verdict(&store, &under_old).await,
        TrustVerdict::IssuerTimeInvalid
    );
    // While the intermediate was valid, the chain gets past the time step.
    let then = Utc.with_ymd_and_hms(2024, 6, 1, 0, 0, 0).unwrap();
    assert_eq!(
        store.validate_certificate(&under_old, then).await.unwrap(),
        // ...but the stored CRLs (thisUpdate 2026) are not yet current.
        TrustVerdict::RevocationUnknown
    );
}

#[tokio::test]
async fn chain_length_is_bounded() {
    let (_dir, store) = open_temp().await;
    let ca = root("Root CA", 0);
    store
        .trust_add(ACTOR, &ca.der(), CertKind::Trusted)
        .await
        .unwrap();
    store.add_crl(ACTOR, &empty_crl(&ca)).await.unwrap();
    // root <- I1 <- I2 ... each with a CRL; leaf + n intermediates + root.
    let mut cas = vec![ca];
    let mut leaves = Vec::new();
    for i in 1..MAX_CHAIN_LEN {
        let next = intermediate(&format!("Intermediate {i}"), 1, &cas[i - 1], 2024, 2034);
        store
            .trust_add(ACTOR, &next.der(), CertKind::Issuer)
            .await
            .unwrap();
        store.add_crl(ACTOR, &empty_crl(&next)).await.unwrap();
        leaves.push(leaf_by(&next, 1000 + i as u64, 2024, 2034));
        cas.push(next);
    }
    // MAX_CHAIN_LEN - 2 intermediates: chain of exactly MAX_CHAIN_LEN.
    assert_eq!(
        verdict(&store, &leaves[MAX_CHAIN_LEN - 3]).await,
        TrustVerdict::Trusted
    );
    // One more and the anchor is out of reach.
    assert_eq!(
        verdict(&store, &leaves[MAX_CHAIN_LEN - 2]).await,
        TrustVerdict::Untrusted
    );
}

#[tokio::test]
async fn issuer_loop_terminates() {
    let (_dir, store) = open_temp().await;
    // A and B cross-certify each other; neither is trusted.
    let a0 = root("Loop A", 0);
    let b0 = root("Loop B", 1);
    let a1 = ca_params("Loop A", 2024, 2034)
        .signed_by(&key(0), &b0.cert, &b0.key)
        .unwrap();
    let b1 = ca_params("Loop B", 2024, 2034)
        .signed_by(&key(1), &a0.cert, &a0.key)
        .unwrap();
    store
        .trust_add(ACTOR, a1.der(), CertKind::Issuer)
        .await
        .unwrap();
    store
        .trust_add(ACTOR, b1.der(), CertKind::Issuer)
        .await
        .unwrap();
    let leaf = leaf_by(&a0, 1, 2024, 2034);
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Untrusted);
    // Trusting the cross-certified B closes a trusted path A -> B.
    store
        .trust_add(ACTOR, b1.der(), CertKind::Trusted)
        .await
        .unwrap();
    store.add_crl(ACTOR, &empty_crl(&a0)).await.unwrap();
    store.add_crl(ACTOR, &empty_crl(&b0)).await.unwrap();
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Trusted);
}

const RSASSA_PSS: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.10");

/// Re-signs a certificate with RSASSA-PSS (SHA-256, MGF1-SHA-256) using
/// private key `key_index` (rcgen cannot produce PSS signatures).
fn resign_pss(der: &[u8], key_index: usize, salt: u8) -> Vec<u8> {
    let mut cert = Certificate::from_der(der).unwrap();
    let params = RsaPssParams::new::<Sha256>(salt).to_der().unwrap();
    let alg = AlgorithmIdentifierOwned {
        oid: RSASSA_PSS,
        parameters: Some(Any::from_der(&params).unwrap()),
    };
    cert.tbs_certificate.signature = alg.clone();
    cert.signature_algorithm = alg;
    let tbs = cert.tbs_certificate.to_der().unwrap();
    let sig = rsa_key(key_index)
        .sign_with_rng(
            &mut rand::rngs::OsRng,
            Pss::new_with_salt::<Sha256>(usize::from(salt)),
            &Sha256::digest(&tbs),
        )
        .unwrap();
    cert.signature = BitString::from_bytes(&sig).unwrap();
    cert.to_der().unwrap()
}

#[tokio::test]
async fn rsassa_pss_signatures_verify() {
    let (_dir, store) = open_temp().await;
    let ca = root("Root CA", 0);
    store
        .trust_add(ACTOR, &ca.der(), CertKind::Trusted)
        .await
        .unwrap();
    store.add_crl(ACTOR, &empty_crl(&ca)).await.unwrap();
    let leaf = resign_pss(&leaf_by(&ca, 100, 2024, 2034), 0, 32);
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Trusted);
    assert_eq!(verdict(&store, &tamper(&leaf)).await, TrustVerdict::Invalid);
    // PSS signature by the wrong key.
    let forged = resign_pss(&leaf_by(&ca, 100, 2024, 2034), 3, 32);
    assert_eq!(verdict(&store, &forged).await, TrustVerdict::Invalid);
}
