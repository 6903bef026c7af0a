//! Certificate chain validation against the trust list (OPC UA Part 4
//! §6.1.3, Part 2 §8).
//!
//! Called by the engine on every secure-channel handshake through
//! [`Store::validate_certificate`]. A client certificate is trusted when its
//! own DER is on the Trusted list, or when it chains — through certificates
//! on the Trusted or Issuer lists — up to a CA certificate on the Trusted
//! list. Along such a chain every certificate must be inside its validity
//! period and every CA must have published an up-to-date CRL (stored with
//! [`Store::add_crl`]) that does not list the certificate below it.
//!
//! The checks run in the order of Part 4 Table 106: structure, chain
//! building and signatures (`Invalid`), trust (`Untrusted`), validity
//! period (`TimeInvalid`), revocation (`RevocationUnknown`, `Revoked`).
//!
//! Signatures: RSA only — `sha1WithRSAEncryption`, `sha256/384/512WithRSAEncryption`
//! and RSASSA-PSS with SHA-256/MGF1-SHA-256, keys up to 4096 bits. A chain
//! link signed with anything else cannot be verified and yields `Invalid`;
//! a self-signed leaf with such a key is judged by the Trusted list alone.

use std::collections::HashSet;
use std::fmt;

use chrono::{DateTime, Utc};
use rsa::pkcs1::{DecodeRsaPublicKey, RsaPssParams};
use rsa::{Pkcs1v15Sign, Pss, RsaPublicKey};
use sha1::Sha1;
use sha2::{Digest, Sha256, Sha384, Sha512};
use sqlx::Row;
use x509_cert::crl::CertificateList;
use x509_cert::der::asn1::BitString;
use x509_cert::der::{Decode, Encode, Header, Reader, SliceReader, Tag};
use x509_cert::ext::pkix::{BasicConstraints, KeyUsage};
use x509_cert::spki::{AlgorithmIdentifierOwned, ObjectIdentifier, SubjectPublicKeyInfoOwned};
use x509_cert::time::Time;
use x509_cert::Certificate;

use crate::error::StoreError;
use crate::x509::{thumbprint, MAX_CERT_LEN};
use crate::{kind_from_db, CertKind, Store};

/// Most certificates in one chain, leaf and trust anchor included. Longer
/// chains are cut off (and so end up untrusted unless an anchor was reached).
pub const MAX_CHAIN_LEN: usize = 8;

const RSA_ENCRYPTION: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
const SHA1_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.5");
const RSASSA_PSS: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.10");
const MGF1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.8");
const SHA256_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.11");
const SHA384_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.12");
const SHA512_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.13");
const SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.1");

/// Outcome of [`Store::validate_certificate`]: either `Trusted` or the reason
/// the certificate must be refused. [`TrustVerdict::status_name`] gives the
/// OPC UA status code name the engine returns to the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TrustVerdict {
    /// On the Trusted list, or chains up to a trusted CA with all checks
    /// passed. Status `Good`.
    Trusted,
    /// Neither on the Trusted list nor chaining up to a trusted CA
    /// (including an incomplete chain). `BadCertificateUntrusted`.
    Untrusted,
    /// The certificate is listed in its issuer's CRL. `BadCertificateRevoked`.
    Revoked,
    /// A CA of the chain is listed in its issuer's CRL.
    /// `BadCertificateIssuerRevoked`.
    IssuerRevoked,
    /// The certificate's issuer has no valid, up-to-date CRL in the store.
    /// `BadCertificateRevocationUnknown`.
    RevocationUnknown,
    /// The issuer of a CA in the chain has no valid, up-to-date CRL.
    /// `BadCertificateIssuerRevocationUnknown`.
    IssuerRevocationUnknown,
    /// The certificate is outside its validity period.
    /// `BadCertificateTimeInvalid`.
    TimeInvalid,
    /// A CA of the chain is outside its validity period.
    /// `BadCertificateIssuerTimeInvalid`.
    IssuerTimeInvalid,
    /// Undecodable, or a signature in the chain does not verify (or uses an
    /// unsupported algorithm). `BadCertificateInvalid`.
    Invalid,
}

impl TrustVerdict {
    /// The OPC UA status code name for this verdict (`"Good"` for
    /// [`TrustVerdict::Trusted`]); the engine maps it to a `StatusCode`.
    pub fn status_name(&self) -> &'static str {
        match self {
            TrustVerdict::Trusted => "Good",
            TrustVerdict::Untrusted => "BadCertificateUntrusted",
            TrustVerdict::Revoked => "BadCertificateRevoked",
            TrustVerdict::IssuerRevoked => "BadCertificateIssuerRevoked",
            TrustVerdict::RevocationUnknown => "BadCertificateRevocationUnknown",
            TrustVerdict::IssuerRevocationUnknown => "BadCertificateIssuerRevocationUnknown",
            TrustVerdict::TimeInvalid => "BadCertificateTimeInvalid",
            TrustVerdict::IssuerTimeInvalid => "BadCertificateIssuerTimeInvalid",
            TrustVerdict::Invalid => "BadCertificateInvalid",
        }
    }

    /// `true` only for [`TrustVerdict::Trusted`].
    pub fn is_trusted(&self) -> bool {
        *self == TrustVerdict::Trusted
    }
}

impl fmt::Display for TrustVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.status_name())
    }
}

/// A decoded certificate with its original DER (signatures cover the exact
/// bytes) and whether it is on the Trusted list.
struct Node {
    der: Vec<u8>,
    cert: Certificate,
    thumbprint: String,
    trusted: bool,
}

impl Node {
    fn parse(der: Vec<u8>, trusted: bool) -> Option<Node> {
        if der.is_empty() || der.len() > MAX_CERT_LEN {
            return None;
        }
        let cert = Certificate::from_der(&der).ok()?;
        Some(Node {
            thumbprint: thumbprint(&der),
            der,
            cert,
            trusted,
        })
    }
}

/// Result of checking one signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SigCheck {
    Valid,
    Invalid,
    /// Algorithm or key type this module cannot verify.
    Unsupported,
}

/// The raw bytes of the first element inside the outer SEQUENCE of a signed
/// structure (the TBSCertificate / TBSCertList), exactly as signed.
fn signed_bytes(der: &[u8]) -> Option<&[u8]> {
    let mut reader = SliceReader::new(der).ok()?;
    let header = Header::decode(&mut reader).ok()?;
    if header.tag != Tag::Sequence {
        return None;
    }
    reader.tlv_bytes().ok()
}

/// Salt length of RSASSA-PSS parameters when they say SHA-256 with
/// MGF1-SHA-256 (the only PSS variant OPC UA uses); `None` otherwise.
fn pss_sha256_salt(alg: &AlgorithmIdentifierOwned) -> Option<usize> {
    let params = alg.parameters.as_ref()?.to_der().ok()?;
    let pss = RsaPssParams::from_der(&params).ok()?;
    let mgf_hash = pss.mask_gen.parameters.as_ref()?.oid;
    (pss.hash.oid == SHA256 && pss.mask_gen.oid == MGF1 && mgf_hash == SHA256)
        .then_some(usize::from(pss.salt_len))
}

/// Verifies `signature` (made with algorithm `alg`) over `tbs` with the RSA
/// key in `spki`.
fn verify_signature(
    tbs: &[u8],
    alg: &AlgorithmIdentifierOwned,
    signature: &BitString,
    spki: &SubjectPublicKeyInfoOwned,
) -> SigCheck {
    if spki.algorithm.oid != RSA_ENCRYPTION && spki.algorithm.oid != RSASSA_PSS {
        return SigCheck::Unsupported;
    }
    let Some(key_bytes) = spki.subject_public_key.as_bytes() else {
        return SigCheck::Invalid;
    };
    // Also refuses keys above 4096 bits (bounds the work per handshake).
    let Ok(key) = RsaPublicKey::from_pkcs1_der(key_bytes) else {
        return SigCheck::Unsupported;
    };
    let Some(sig) = signature.as_bytes() else {
        return SigCheck::Invalid;
    };
    let result = if alg.oid == SHA256_WITH_RSA {
        key.verify(Pkcs1v15Sign::new::<Sha256>(), &Sha256::digest(tbs), sig)
    } else if alg.oid == SHA1_WITH_RSA {
        key.verify(Pkcs1v15Sign::new::<Sha1>(), &Sha1::digest(tbs), sig)
    } else if alg.oid == SHA384_WITH_RSA {
        key.verify(Pkcs1v15Sign::new::<Sha384>(), &Sha384::digest(tbs), sig)
    } else if alg.oid == SHA512_WITH_RSA {
        key.verify(Pkcs1v15Sign::new::<Sha512>(), &Sha512::digest(tbs), sig)
    } else if alg.oid == RSASSA_PSS {
        let Some(salt) = pss_sha256_salt(alg) else {
            return SigCheck::Unsupported;
        };
        key.verify(
            Pss::new_with_salt::<Sha256>(salt),
            &Sha256::digest(tbs),
            sig,
        )
    } else {
        return SigCheck::Unsupported;
    };
    if result.is_ok() {
        SigCheck::Valid
    } else {
        SigCheck::Invalid
    }
}

/// Checks that `issuer`'s key signed `child`.
fn verify_cert(child: &Node, issuer: &Node) -> SigCheck {
    if child.cert.tbs_certificate.signature != child.cert.signature_algorithm {
        return SigCheck::Invalid;
    }
    let Some(tbs) = signed_bytes(&child.der) else {
        return SigCheck::Invalid;
    };
    verify_signature(
        tbs,
        &child.cert.signature_algorithm,
        &child.cert.signature,
        &issuer.cert.tbs_certificate.subject_public_key_info,
    )
}

/// May this certificate issue certificates? (basicConstraints cA = TRUE and,
/// when keyUsage is present, keyCertSign.)
fn is_ca(cert: &Certificate) -> bool {
    let tbs = &cert.tbs_certificate;
    let ca = matches!(tbs.get::<BasicConstraints>(), Ok(Some((_, bc))) if bc.ca);
    let usage_ok = match tbs.get::<KeyUsage>() {
        Ok(Some((_, ku))) => ku.key_cert_sign(),
        Ok(None) => true,
        Err(_) => false,
    };
    ca && usage_ok
}

/// May this certificate sign CRLs? (keyUsage absent or with cRLSign.)
fn may_sign_crl(cert: &Certificate) -> bool {
    match cert.tbs_certificate.get::<KeyUsage>() {
        Ok(Some((_, ku))) => ku.crl_sign(),
        Ok(None) => true,
        Err(_) => false,
    }
}

fn unix_secs(t: Time) -> i128 {
    i128::from(t.to_unix_duration().as_secs())
}

fn time_valid(cert: &Certificate, now: i128) -> bool {
    let validity = &cert.tbs_certificate.validity;
    unix_secs(validity.not_before) <= now && now <= unix_secs(validity.not_after)
}

/// Builds the chain from `leaf` upwards through `pool`, stopping at a
/// self-signed root, at the first trusted CA (the trust anchor), when no
/// issuer is found, or at [`MAX_CHAIN_LEN`]. For a leaf that is itself on
/// the Trusted list only its direct issuer is looked up (for the CRL check).
///
/// An issuer is a CA in the pool whose subject equals the current issuer
/// name and whose key verifies the current signature; trusted candidates
/// win over issuer-list ones. If a CA with the right name exists but none
/// verifies, the chain is broken by a bad signature: `Err(Invalid)`.
fn build_chain<'a>(leaf: &'a Node, pool: &'a [Node]) -> Result<Vec<&'a Node>, TrustVerdict> {
    let mut chain = vec![leaf];
    let mut seen: HashSet<&str> = HashSet::from([leaf.thumbprint.as_str()]);
    let mut current = leaf;
    loop {
        let is_leaf = chain.len() == 1;
        if !is_leaf && (current.trusted || leaf.trusted) {
            break;
        }
        let tbs = &current.cert.tbs_certificate;
        if tbs.subject == tbs.issuer {
            match verify_cert(current, current) {
                SigCheck::Valid => break,
                // A self-signed leaf with a key type we cannot verify (e.g.
                // ECDSA) keeps the pre-chain behaviour: trusted by its exact
                // bytes if on the Trusted list, else `Untrusted` (so the
                // engine records it for the operator to review).
                SigCheck::Unsupported if is_leaf => break,
                _ => return Err(TrustVerdict::Invalid),
            }
        }
        if chain.len() >= MAX_CHAIN_LEN {
            break;
        }
        let mut name_matched = false;
        let mut best: Option<&Node> = None;
        for candidate in pool {
            if seen.contains(candidate.thumbprint.as_str())
                || candidate.cert.tbs_certificate.subject != tbs.issuer
                || !is_ca(&candidate.cert)
            {
                continue;
            }
            name_matched = true;
            if verify_cert(current, candidate) == SigCheck::Valid
                && best.is_none_or(|b| candidate.trusted && !b.trusted)
            {
                best = Some(candidate);
            }
        }
        match best {
            Some(issuer) => {
                seen.insert(issuer.thumbprint.as_str());
                chain.push(issuer);
                current = issuer;
            }
            None if name_matched && !leaf.trusted => return Err(TrustVerdict::Invalid),
            None => break,
        }
    }
    Ok(chain)
}

/// What the CRLs of one issuer say about one certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Revocation {
    Good,
    Revoked,
    /// No CRL whose signature verifies and that is current at `now`.
    Unknown,
}

/// Checks `subject` against the CRLs stored for `issuer`. CRLs that do not
/// decode, name another issuer, or whose signature does not verify with the
/// issuer's key are ignored. A listing in any verified CRL counts (even an
/// outdated one); "good" needs a verified CRL with thisUpdate <= now <=
/// nextUpdate (or no nextUpdate).
fn revocation(subject: &Node, issuer: &Node, crls: &[Vec<u8>], now: i128) -> Revocation {
    if !may_sign_crl(&issuer.cert) {
        return Revocation::Unknown;
    }
    let issuer_tbs = &issuer.cert.tbs_certificate;
    let serial = &subject.cert.tbs_certificate.serial_number;
    let mut current = false;
    for der in crls {
        let Ok(crl) = CertificateList::from_der(der) else {
            continue;
        };
        let tbs = &crl.tbs_cert_list;
        if tbs.issuer != issuer_tbs.subject || tbs.signature != crl.signature_algorithm {
            continue;
        }
        let Some(signed) = signed_bytes(der) else {
            continue;
        };
        let check = verify_signature(
            signed,
            &crl.signature_algorithm,
            &crl.signature,
            &issuer_tbs.subject_public_key_info,
        );
        if check != SigCheck::Valid {
            tracing::warn!(issuer = %tbs.issuer, "ignoring CRL whose signature does not verify");
            continue;
        }
        let listed = tbs
            .revoked_certificates
            .iter()
            .flatten()
            .any(|r| r.serial_number == *serial);
        if listed {
            return Revocation::Revoked;
        }
        if unix_secs(tbs.this_update) <= now
            && tbs.next_update.is_none_or(|next| now <= unix_secs(next))
        {
            current = true;
        }
    }
    if current {
        Revocation::Good
    } else {
        Revocation::Unknown
    }
}

impl Store {
    /// Decides whether a peer's certificate (DER) is trusted at `now`, per
    /// OPC UA Part 4 §6.1.3. Called by the engine on every secure-channel
    /// handshake; it maps [`TrustVerdict::status_name`] to a `StatusCode`.
    ///
    /// * On the Trusted list itself (e.g. a self-signed application
    ///   certificate): `Trusted` if time-valid and, when self-signed with an
    ///   RSA key, its signature verifies; no CRL is required, but if its
    ///   issuer is in the store and a verified CRL of that issuer lists it,
    ///   `Revoked`.
    /// * Otherwise it must chain through Trusted/Issuer-list CAs to a CA on
    ///   the Trusted list; every certificate up to that anchor must be
    ///   time-valid and every CA below and including the anchor must have a
    ///   current, verified CRL not listing the certificate it issued (CRL
    ///   required, as the .NET stack does by default).
    ///
    /// Read-only: this does **not** record an untrusted certificate on the
    /// Rejected list; the engine calls [`Store::record_rejected`] itself
    /// when the verdict is [`TrustVerdict::Untrusted`]. Undecodable input is
    /// `Ok(TrustVerdict::Invalid)`; `Err` only for database failures.
    pub async fn validate_certificate(
        &self,
        der: &[u8],
        now: DateTime<Utc>,
    ) -> Result<TrustVerdict, StoreError> {
        let Some(mut leaf) = Node::parse(der.to_vec(), false) else {
            return Ok(TrustVerdict::Invalid);
        };
        let pool = self.chain_pool().await?;
        leaf.trusted = pool
            .iter()
            .any(|n| n.trusted && n.thumbprint == leaf.thumbprint);
        let now = i128::from(now.timestamp());
        let verdict = match build_chain(&leaf, &pool) {
            Err(verdict) => verdict,
            Ok(chain) => self.judge_chain(&chain, now).await?,
        };
        tracing::debug!(thumbprint = %leaf.thumbprint, %verdict, "certificate validated");
        Ok(verdict)
    }

    /// Trust, validity and revocation steps over a built chain (leaf first).
    async fn judge_chain(&self, chain: &[&Node], now: i128) -> Result<TrustVerdict, StoreError> {
        let leaf_trusted = chain.first().is_some_and(|leaf| leaf.trusted);
        let anchor = if leaf_trusted {
            0
        } else {
            match chain.iter().skip(1).position(|n| n.trusted) {
                Some(i) => i + 1,
                None => return Ok(TrustVerdict::Untrusted),
            }
        };
        for (k, node) in chain.iter().take(anchor + 1).enumerate() {
            if !time_valid(&node.cert, now) {
                return Ok(if k == 0 {
                    TrustVerdict::TimeInvalid
                } else {
                    TrustVerdict::IssuerTimeInvalid
                });
            }
        }
        if leaf_trusted {
            // Explicitly trusted: a CRL is optional, but honoured if present.
            if let [leaf, issuer, ..] = chain {
                let crls = self.crls_of(issuer).await?;
                if revocation(leaf, issuer, &crls, now) == Revocation::Revoked {
                    return Ok(TrustVerdict::Revoked);
                }
            }
            return Ok(TrustVerdict::Trusted);
        }
        for k in 0..anchor {
            let (subject, issuer) = (chain[k], chain[k + 1]);
            let crls = self.crls_of(issuer).await?;
            match (revocation(subject, issuer, &crls, now), k == 0) {
                (Revocation::Good, _) => {}
                (Revocation::Revoked, true) => return Ok(TrustVerdict::Revoked),
                (Revocation::Revoked, false) => return Ok(TrustVerdict::IssuerRevoked),
                (Revocation::Unknown, true) => return Ok(TrustVerdict::RevocationUnknown),
                (Revocation::Unknown, false) => return Ok(TrustVerdict::IssuerRevocationUnknown),
            }
        }
        Ok(TrustVerdict::Trusted)
    }

    /// All certificates on the Trusted and Issuer lists, decoded. Rows that
    /// no longer decode are skipped with a warning.
    async fn chain_pool(&self) -> Result<Vec<Node>, StoreError> {
        let rows = sqlx::query("SELECT kind, der FROM certs WHERE kind IN ('trusted', 'issuer')")
            .fetch_all(&self.pool)
            .await?;
        let mut pool = Vec::with_capacity(rows.len());
        for row in rows {
            let kind: String = row.try_get("kind")?;
            let der: Vec<u8> = row.try_get("der")?;
            let trusted = kind_from_db(&kind)? == CertKind::Trusted;
            match Node::parse(der, trusted) {
                Some(node) => pool.push(node),
                None => tracing::warn!("stored certificate does not decode; skipped"),
            }
        }
        Ok(pool)
    }

    /// The stored CRLs (DER) whose issuer name is `issuer`'s subject.
    async fn crls_of(&self, issuer: &Node) -> Result<Vec<Vec<u8>>, StoreError> {
        Ok(sqlx::query_scalar("SELECT der FROM crls WHERE issuer = ?1")
            .bind(issuer.cert.tbs_certificate.subject.to_string())
            .fetch_all(&self.pool)
            .await?)
    }
}
