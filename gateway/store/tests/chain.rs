//! Chain validation (`Store::validate_certificate`) against real SQLite
//! stores, with RSA, ECDSA and Ed25519 CAs, intermediates, leaves and CRLs
//! made by rcgen.
#![allow(clippy::unwrap_used)] // unwrap is fine in tests

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, CertificateRevocationListParams, DnType,
    IsCa, KeyIdMethod, KeyPair, KeyUsagePurpose, RevokedCertParams, SanType, SerialNumber,
    PKCS_ECDSA_P256_SHA256, PKCS_ECDSA_P384_SHA384, PKCS_ED25519, PKCS_RSA_SHA256,
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

/// Puts `der` on the `kind` list (a test's step; it must succeed).
async fn add(store: &uagate_store::Store, der: &[u8], kind: CertKind) {
    store.trust_add(ACTOR, der, kind).await.unwrap();
}

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
    add(&store, &der, CertKind::Trusted).await;
    assert_eq!(verdict(&store, &der).await, TrustVerdict::Trusted);
    // The issuer list does not take it: it is no CA.
    let refused = store
        .trust_add(ACTOR, &der, CertKind::Issuer)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("not a CA certificate"),
        "{refused}"
    );
    assert_eq!(verdict(&store, &der).await, TrustVerdict::Trusted);
    // Validity still applies to an explicitly trusted certificate.
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
    add(&store, &der, CertKind::Trusted).await;
    assert_eq!(verdict(&store, &der).await, TrustVerdict::Trusted);
}

#[tokio::test]
async fn leaf_of_trusted_ca_with_crl_is_trusted() {
    let (_dir, store) = open_temp().await;
    let ca = root("Root CA", 0);
    let leaf = leaf_by(&ca, 100, 2024, 2034);
    add(&store, &ca.der(), CertKind::Trusted).await;
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
    add(&store, &ca.der(), CertKind::Trusted).await;
    store
        .add_crl(ACTOR, &crl(&ca, &[100], 2026, 2027))
        .await
        .unwrap();
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Revoked);
    assert_eq!(verdict(&store, &other).await, TrustVerdict::Trusted);
    // A CA on the trusted list does not move to the issuer list by an add:
    // whoever presents the CA certificate itself would be refused from
    // then on. Removed first, it goes there.
    let refused = store
        .trust_add(ACTOR, &ca.der(), CertKind::Issuer)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("is on the trusted list"),
        "{refused}"
    );
    let thumbprint = uagate_store::describe_certificate(&ca.der())
        .unwrap()
        .thumbprint;
    store.trust_remove(ACTOR, &thumbprint).await.unwrap();
    // Explicitly trusting the revoked leaf does not override its CA's CRL.
    add(&store, &ca.der(), CertKind::Issuer).await;
    add(&store, &leaf, CertKind::Trusted).await;
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Revoked);
}

#[tokio::test]
async fn explicitly_trusted_ca_issued_leaf_needs_no_crl() {
    let (_dir, store) = open_temp().await;
    let ca = root("Root CA", 0);
    let leaf = leaf_by(&ca, 100, 2024, 2034);
    add(&store, &leaf, CertKind::Trusted).await;
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Trusted);
    add(&store, &ca.der(), CertKind::Issuer).await;
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Trusted);
}

#[tokio::test]
async fn outdated_crl_means_revocation_unknown() {
    let (_dir, store) = open_temp().await;
    let ca = root("Root CA", 0);
    let leaf = leaf_by(&ca, 100, 2024, 2034);
    add(&store, &ca.der(), CertKind::Trusted).await;
    store
        .add_crl(ACTOR, &crl(&ca, &[], 2024, 2025))
        .await
        .unwrap();
    assert_eq!(
        verdict(&store, &leaf).await,
        TrustVerdict::RevocationUnknown
    );
}

/// Stores a CRL as a replicated change does, without the checks of
/// `Store::add_crl` (as an older build or another appliance may have).
async fn store_crl_unchecked(store: &Store, der: &[u8]) {
    store
        .apply(uagate_store::Proposal::now(
            ACTOR,
            uagate_store::Change::AddCrl { der: der.to_vec() },
        ))
        .await
        .unwrap();
}

#[tokio::test]
async fn crl_with_bad_signature_is_refused_and_ignored() {
    let (_dir, store) = open_temp().await;
    let ca = root("Root CA", 0);
    // Same name, different key: its CRL must not count for the real CA.
    let impostor = root("Root CA", 3);
    let leaf = leaf_by(&ca, 100, 2024, 2034);
    add(&store, &ca.der(), CertKind::Trusted).await;
    store.add_crl(ACTOR, &empty_crl(&ca)).await.unwrap();
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Trusted);
    // Added, the impostor's CRL is refused: the CA's own stays in force.
    let refused = store
        .add_crl(ACTOR, &crl(&impostor, &[100], 2026, 2028))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("does not verify"), "{refused}");
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Trusted);
    // So is a tampered genuine one.
    let mut bad = crl(&ca, &[], 2026, 2028);
    let last = bad.len() - 1;
    bad[last] ^= 0x01;
    assert!(store.add_crl(ACTOR, &bad).await.is_err());
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Trusted);
    // Stored without those checks (an older build's log), it is ignored:
    // the CA then has no CRL that counts.
    store_crl_unchecked(&store, &crl(&impostor, &[100], 2026, 2028)).await;
    assert_eq!(
        verdict(&store, &leaf).await,
        TrustVerdict::RevocationUnknown
    );
    store_crl_unchecked(&store, &bad).await;
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
    add(&store, &ca.der(), CertKind::Issuer).await;
    store.add_crl(ACTOR, &empty_crl(&ca)).await.unwrap();
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Untrusted);
}

#[tokio::test]
async fn unknown_leaf_is_untrusted_and_garbage_is_invalid() {
    let (_dir, store) = open_temp().await;
    let ca = root("Root CA", 0);
    let stranger = root("Stranger CA", 3);
    add(&store, &ca.der(), CertKind::Trusted).await;
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
    add(&store, &ca.der(), CertKind::Trusted).await;
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
    add(&store, &broken, CertKind::Trusted).await;
    assert_eq!(verdict(&store, &broken).await, TrustVerdict::Invalid);
}

#[tokio::test]
async fn intermediate_path() {
    let (_dir, store) = open_temp().await;
    let ca = root("Root CA", 0);
    let inter = intermediate("Intermediate CA", 1, &ca, 2024, 2034);
    let leaf = leaf_by(&inter, 300, 2024, 2034);
    add(&store, &ca.der(), CertKind::Trusted).await;
    // Intermediate unknown: chain incomplete.
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Untrusted);
    add(&store, &inter.der(), CertKind::Issuer).await;
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
    add(&store, &inter.der(), CertKind::Trusted).await;
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
    add(&store, &ca.der(), CertKind::Trusted).await;
    add(&store, &inter.der(), CertKind::Issuer).await;
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
    add(&store, &ca.der(), CertKind::Trusted).await;
    store.add_crl(ACTOR, &empty_crl(&ca)).await.unwrap();
    // root <- I1 <- I2 ... each with a CRL; leaf + n intermediates + root.
    let mut cas = vec![ca];
    let mut leaves = Vec::new();
    for i in 1..MAX_CHAIN_LEN {
        let next = intermediate(&format!("Intermediate {i}"), 1, &cas[i - 1], 2024, 2034);
        add(&store, &next.der(), CertKind::Issuer).await;
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
    add(&store, a1.der(), CertKind::Issuer).await;
    add(&store, b1.der(), CertKind::Issuer).await;
    let leaf = leaf_by(&a0, 1, 2024, 2034);
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Untrusted);
    // Trusting the cross-certified B closes a trusted path A -> B.
    add(&store, b1.der(), CertKind::Trusted).await;
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
    add(&store, &ca.der(), CertKind::Trusted).await;
    store.add_crl(ACTOR, &empty_crl(&ca)).await.unwrap();
    let leaf = resign_pss(&leaf_by(&ca, 100, 2024, 2034), 0, 32);
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Trusted);
    assert_eq!(verdict(&store, &tamper(&leaf)).await, TrustVerdict::Invalid);
    // PSS signature by the wrong key.
    let forged = resign_pss(&leaf_by(&ca, 100, 2024, 2034), 3, 32);
    assert_eq!(verdict(&store, &forged).await, TrustVerdict::Invalid);
}

// ---------------------------------------------------------------------------
// Chains checked by webpki (issue 21 item 6): intermediates, revocation at
// each level, expired CAs, loops, depth and the non-RSA algorithms.

/// A CA chain root (trusted) -> intermediate (Issuer list), both with a
/// current empty CRL unless the test says otherwise.
struct TwoLevel {
    root: Ca,
    inter: Ca,
}

fn two_level() -> TwoLevel {
    let root = root("Root CA", 0);
    let inter = intermediate("Intermediate CA", 1, &root, 2024, 2034);
    TwoLevel { root, inter }
}

async fn store_two_level(pki: &TwoLevel, root_crl: bool, inter_crl: bool) -> (TempDir, Store) {
    let (dir, store) = open_temp().await;
    add(&store, &pki.root.der(), CertKind::Trusted).await;
    add(&store, &pki.inter.der(), CertKind::Issuer).await;
    if root_crl {
        store.add_crl(ACTOR, &empty_crl(&pki.root)).await.unwrap();
    }
    if inter_crl {
        store.add_crl(ACTOR, &empty_crl(&pki.inter)).await.unwrap();
    }
    (dir, store)
}

#[tokio::test]
async fn chain_with_intermediate_needs_the_intermediate() {
    let pki = two_level();
    let leaf = leaf_by(&pki.inter, 400, 2024, 2034);
    let (_dir, store) = open_temp().await;
    add(&store, &pki.root.der(), CertKind::Trusted).await;
    store.add_crl(ACTOR, &empty_crl(&pki.root)).await.unwrap();
    let info = store
        .trust_add(ACTOR, &pki.inter.der(), CertKind::Issuer)
        .await
        .unwrap();
    store.add_crl(ACTOR, &empty_crl(&pki.inter)).await.unwrap();
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Trusted);
    // CRLs for both CAs, but the intermediate itself is unknown.
    store.trust_remove(ACTOR, &info.thumbprint).await.unwrap();
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Untrusted);
}

#[tokio::test]
async fn revoked_leaf_under_intermediate() {
    let pki = two_level();
    let (_dir, store) = store_two_level(&pki, true, false).await;
    store
        .add_crl(ACTOR, &crl(&pki.inter, &[401], 2026, 2027))
        .await
        .unwrap();
    let revoked = leaf_by(&pki.inter, 401, 2024, 2034);
    let fine = leaf_by(&pki.inter, 402, 2024, 2034);
    assert_eq!(verdict(&store, &revoked).await, TrustVerdict::Revoked);
    assert_eq!(verdict(&store, &fine).await, TrustVerdict::Trusted);
}

#[tokio::test]
async fn revoked_intermediate_is_issuer_revoked() {
    let pki = two_level();
    let (_dir, store) = store_two_level(&pki, false, true).await;
    let leaf = leaf_by(&pki.inter, 403, 2024, 2034);
    store
        .add_crl(
            ACTOR,
            &crl_raw_serial(&pki.root, &x509_serial(&pki.inter.der())),
        )
        .await
        .unwrap();
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::IssuerRevoked);
    // The leaf's own CRL is looked at first: a revoked leaf under a
    // revoked intermediate is `Revoked`.
    store
        .add_crl(ACTOR, &crl(&pki.inter, &[403], 2026, 2028))
        .await
        .unwrap();
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Revoked);
}

#[tokio::test]
async fn missing_crl_of_leaf_issuer_then_of_root() {
    let pki = two_level();
    let leaf = leaf_by(&pki.inter, 404, 2024, 2034);
    // Only the root published a CRL: the leaf's issuer did not.
    let (_dir, store) = store_two_level(&pki, true, false).await;
    assert_eq!(
        verdict(&store, &leaf).await,
        TrustVerdict::RevocationUnknown
    );
    // Only the intermediate published one: the root's, covering the
    // intermediate, is missing.
    let (_dir2, store) = store_two_level(&pki, false, true).await;
    assert_eq!(
        verdict(&store, &leaf).await,
        TrustVerdict::IssuerRevocationUnknown
    );
    // An out-of-date root CRL counts as missing.
    store
        .add_crl(ACTOR, &crl(&pki.root, &[], 2024, 2025))
        .await
        .unwrap();
    assert_eq!(
        verdict(&store, &leaf).await,
        TrustVerdict::IssuerRevocationUnknown
    );
    store.add_crl(ACTOR, &empty_crl(&pki.root)).await.unwrap();
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Trusted);
}

#[tokio::test]
async fn expired_ca_is_issuer_time_invalid() {
    // Expired trusted root (the trust anchor; webpki itself does not look
    // at an anchor's dates).
    let (_dir, store) = open_temp().await;
    let key = key(0);
    let old_root = Ca {
        cert: ca_params("Old Root", 2015, 2025).self_signed(&key).unwrap(),
        key,
    };
    add(&store, &old_root.der(), CertKind::Trusted).await;
    store.add_crl(ACTOR, &empty_crl(&old_root)).await.unwrap();
    let leaf = leaf_by(&old_root, 405, 2024, 2034);
    assert_eq!(
        verdict(&store, &leaf).await,
        TrustVerdict::IssuerTimeInvalid
    );
    // Back when the root was valid (and its CRL not yet issued).
    let then = Utc.with_ymd_and_hms(2024, 6, 1, 0, 0, 0).unwrap();
    assert_eq!(
        store.validate_certificate(&leaf, then).await.unwrap(),
        TrustVerdict::RevocationUnknown
    );

    // Expired intermediate under a valid root.
    let pki = two_level();
    let old_inter = intermediate("Intermediate CA", 1, &pki.root, 2020, 2025);
    let (_dir2, store) = open_temp().await;
    add(&store, &pki.root.der(), CertKind::Trusted).await;
    add(&store, &old_inter.der(), CertKind::Issuer).await;
    store.add_crl(ACTOR, &empty_crl(&pki.root)).await.unwrap();
    store.add_crl(ACTOR, &empty_crl(&old_inter)).await.unwrap();
    let leaf = leaf_by(&old_inter, 406, 2024, 2034);
    assert_eq!(
        verdict(&store, &leaf).await,
        TrustVerdict::IssuerTimeInvalid
    );
    // A renewed intermediate (same name and key, valid dates) next to the
    // expired one: a path through it is found.
    add(&store, &pki.inter.der(), CertKind::Issuer).await;
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Trusted);
}

#[tokio::test]
async fn expired_ca_leading_nowhere_is_untrusted() {
    // Table 106 checks trust before validity: an expired CA that does not
    // lead to a trusted CA makes the leaf `Untrusted`, not
    // `IssuerTimeInvalid`; an expired leaf from an unknown CA likewise.
    let (_dir, store) = open_temp().await;
    let stranger = root("Stranger CA", 3);
    let old_inter = intermediate("Old Stranger Intermediate", 1, &stranger, 2020, 2025);
    add(&store, &old_inter.der(), CertKind::Issuer).await;
    store.add_crl(ACTOR, &empty_crl(&old_inter)).await.unwrap();
    let leaf = leaf_by(&old_inter, 407, 2024, 2034);
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Untrusted);
    let expired = leaf_by(&stranger, 408, 2020, 2025);
    assert_eq!(verdict(&store, &expired).await, TrustVerdict::Untrusted);
    // Once the stranger root is trusted, the dates are what is wrong.
    add(&store, &stranger.der(), CertKind::Trusted).await;
    store.add_crl(ACTOR, &empty_crl(&stranger)).await.unwrap();
    assert_eq!(
        verdict(&store, &leaf).await,
        TrustVerdict::IssuerTimeInvalid
    );
    assert_eq!(verdict(&store, &expired).await, TrustVerdict::TimeInvalid);
}

#[tokio::test]
async fn expired_leaf_under_intermediate_is_time_invalid() {
    let pki = two_level();
    let (_dir, store) = store_two_level(&pki, true, true).await;
    let expired = leaf_by(&pki.inter, 409, 2020, 2025);
    assert_eq!(verdict(&store, &expired).await, TrustVerdict::TimeInvalid);
    let not_yet = leaf_by(&pki.inter, 410, 2027, 2030);
    assert_eq!(verdict(&store, &not_yet).await, TrustVerdict::TimeInvalid);
}

/// ECDSA P-256 key pairs (fast to make, unlike RSA).
fn ec_key() -> KeyPair {
    KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap()
}

#[tokio::test]
async fn loop_between_two_issuers_ends_quickly() {
    // "Loop A" certificates are issued by "Loop B" and vice versa, several
    // of each with distinct keys; none is trusted. Path building must give
    // up (`Untrusted`), within a bound.
    const EACH: usize = 6;
    let a_keys: Vec<KeyPair> = (0..EACH).map(|_| ec_key()).collect();
    let b_keys: Vec<KeyPair> = (0..EACH).map(|_| ec_key()).collect();
    // Stand-ins that give rcgen the issuer name for signing.
    let a_issuer: Vec<rcgen::Certificate> = a_keys
        .iter()
        .map(|k| ca_params("Loop A", 2024, 2034).self_signed(k).unwrap())
        .collect();
    let b_issuer: Vec<rcgen::Certificate> = b_keys
        .iter()
        .map(|k| ca_params("Loop B", 2024, 2034).self_signed(k).unwrap())
        .collect();
    let (_dir, store) = open_temp().await;
    for i in 0..EACH {
        let a = ca_params("Loop A", 2024, 2034)
            .signed_by(&a_keys[i], &b_issuer[i], &b_keys[i])
            .unwrap();
        let b = ca_params("Loop B", 2024, 2034)
            .signed_by(
                &b_keys[i],
                &a_issuer[(i + 1) % EACH],
                &a_keys[(i + 1) % EACH],
            )
            .unwrap();
        add(&store, a.der(), CertKind::Issuer).await;
        add(&store, b.der(), CertKind::Issuer).await;
    }
    let leaf = leaf_params("client", 411, 2024, 2034)
        .signed_by(&ec_key(), &a_issuer[0], &a_keys[0])
        .unwrap()
        .der()
        .to_vec();
    let started = Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(60),
        store.validate_certificate(&leaf, now()),
    )
    .await
    .expect("validation did not end")
    .unwrap();
    assert_eq!(result, TrustVerdict::Untrusted);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn ten_deep_chain_is_refused() {
    // Root + 8 intermediates + leaf = 10 certificates > MAX_CHAIN_LEN, every
    // CA with a current CRL: refused as `Untrusted` (no acceptable path).
    const { assert!(10 > MAX_CHAIN_LEN) };
    let (_dir, store) = open_temp().await;
    let key = ec_key();
    let root = Ca {
        cert: ca_params("Deep Root", 2024, 2036)
            .self_signed(&key)
            .unwrap(),
        key,
    };
    add(&store, &root.der(), CertKind::Trusted).await;
    store.add_crl(ACTOR, &empty_crl(&root)).await.unwrap();
    let mut top = root;
    let mut leaves = Vec::new();
    for depth in 1..=8 {
        let key = ec_key();
        let cert = ca_params(&format!("Deep {depth}"), 2024, 2034)
            .signed_by(&key, &top.cert, &top.key)
            .unwrap();
        let ca = Ca { cert, key };
        add(&store, &ca.der(), CertKind::Issuer).await;
        store.add_crl(ACTOR, &empty_crl(&ca)).await.unwrap();
        leaves.push(
            leaf_params("client", 500 + depth, 2024, 2034)
                .signed_by(&ec_key(), &ca.cert, &ca.key)
                .unwrap()
                .der()
                .to_vec(),
        );
        top = ca;
    }
    // 6 intermediates: 8 certificates, accepted.
    assert_eq!(verdict(&store, &leaves[5]).await, TrustVerdict::Trusted);
    // 7 and 8 intermediates: 9 and 10 certificates, refused.
    assert_eq!(verdict(&store, &leaves[6]).await, TrustVerdict::Untrusted);
    let started = Instant::now();
    assert_eq!(verdict(&store, &leaves[7]).await, TrustVerdict::Untrusted);
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn ecdsa_and_ed25519_leaves_under_ecdsa_ca() {
    let (_dir, store) = open_temp().await;
    let key = ec_key();
    let ca = Ca {
        cert: ca_params("EC Root", 2024, 2036).self_signed(&key).unwrap(),
        key,
    };
    add(&store, &ca.der(), CertKind::Trusted).await;
    let sign = |serial: u64, leaf_key: &KeyPair| {
        leaf_params("client", serial, 2024, 2034)
            .signed_by(leaf_key, &ca.cert, &ca.key)
            .unwrap()
            .der()
            .to_vec()
    };
    let p256 = sign(600, &ec_key());
    let p384 = sign(
        601,
        &KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384).unwrap(),
    );
    let ed25519 = sign(602, &KeyPair::generate_for(&PKCS_ED25519).unwrap());
    // No CRL from the ECDSA CA yet.
    assert_eq!(
        verdict(&store, &p256).await,
        TrustVerdict::RevocationUnknown
    );
    store.add_crl(ACTOR, &empty_crl(&ca)).await.unwrap();
    assert_eq!(verdict(&store, &p256).await, TrustVerdict::Trusted);
    assert_eq!(verdict(&store, &p384).await, TrustVerdict::Trusted);
    assert_eq!(verdict(&store, &ed25519).await, TrustVerdict::Trusted);
    assert_eq!(verdict(&store, &tamper(&p256)).await, TrustVerdict::Invalid);
    assert_eq!(
        verdict(&store, &tamper(&ed25519)).await,
        TrustVerdict::Invalid
    );
    // The ECDSA CA's CRL revokes the Ed25519 leaf.
    store
        .add_crl(ACTOR, &crl(&ca, &[602], 2026, 2028))
        .await
        .unwrap();
    assert_eq!(verdict(&store, &ed25519).await, TrustVerdict::Revoked);
    assert_eq!(verdict(&store, &p256).await, TrustVerdict::Trusted);
}

#[tokio::test]
async fn trusted_self_signed_ed25519_leaf_signature_is_checked() {
    let (_dir, store) = open_temp().await;
    let der = leaf_params("ed", 603, 2024, 2034)
        .self_signed(&KeyPair::generate_for(&PKCS_ED25519).unwrap())
        .unwrap()
        .der()
        .to_vec();
    add(&store, &der, CertKind::Trusted).await;
    assert_eq!(verdict(&store, &der).await, TrustVerdict::Trusted);
    let broken = tamper(&der);
    add(&store, &broken, CertKind::Trusted).await;
    assert_eq!(verdict(&store, &broken).await, TrustVerdict::Invalid);
}

#[tokio::test]
async fn leaf_with_bad_signature_under_intermediate_is_invalid() {
    let pki = two_level();
    let (_dir, store) = store_two_level(&pki, true, true).await;
    let leaf = leaf_by(&pki.inter, 604, 2024, 2034);
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Trusted);
    assert_eq!(verdict(&store, &tamper(&leaf)).await, TrustVerdict::Invalid);
    // Signed by another key under the intermediate's name.
    let impostor = intermediate("Intermediate CA", 3, &pki.root, 2024, 2034);
    let forged = leaf_by(&impostor, 604, 2024, 2034);
    assert_eq!(verdict(&store, &forged).await, TrustVerdict::Invalid);
}

#[tokio::test]
async fn revoked_intermediate_next_to_its_renewal() {
    // The root revoked an intermediate and re-issued it (same name and
    // key, new serial). Path building without CRLs may pick the revoked
    // one first; the renewed one must still be found.
    let pki = two_level();
    // rcgen derives a default serial from the key: give the old one its own.
    let mut params = ca_params("Intermediate CA", 2024, 2034);
    params.serial_number = Some(SerialNumber::from(77u64));
    let old = Ca {
        cert: params
            .signed_by(&key(1), &pki.root.cert, &pki.root.key)
            .unwrap(),
        key: key(1),
    };
    assert_ne!(x509_serial(&old.der()), x509_serial(&pki.inter.der()));
    let (_dir, store) = open_temp().await;
    add(&store, &pki.root.der(), CertKind::Trusted).await;
    add(&store, &old.der(), CertKind::Issuer).await;
    store.add_crl(ACTOR, &empty_crl(&pki.inter)).await.unwrap();
    store
        .add_crl(ACTOR, &crl_raw_serial(&pki.root, &x509_serial(&old.der())))
        .await
        .unwrap();
    let leaf = leaf_by(&pki.inter, 605, 2024, 2034);
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::IssuerRevoked);
    add(&store, &pki.inter.der(), CertKind::Issuer).await;
    assert_eq!(verdict(&store, &leaf).await, TrustVerdict::Trusted);
}

/// A CRL is checked against its CA's key when added, for every key type
/// the chain checks take: RSA, ECDSA P-256 and P-384, Ed25519.
#[tokio::test]
async fn crls_of_every_key_type_verify_when_added() {
    let (_dir, store) = open_temp().await;
    let keys = [
        ("RSA CA", key(0)),
        (
            "P-256 CA",
            KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap(),
        ),
        (
            "P-384 CA",
            KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384).unwrap(),
        ),
        ("Ed25519 CA", KeyPair::generate_for(&PKCS_ED25519).unwrap()),
    ];
    for (name, key) in keys {
        let ca = Ca {
            cert: ca_params(name, 2024, 2036).self_signed(&key).unwrap(),
            key,
        };
        add(&store, &ca.der(), CertKind::Trusted).await;
        store
            .add_crl(ACTOR, &empty_crl(&ca))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
