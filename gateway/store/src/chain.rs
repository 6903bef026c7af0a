//! Certificate chain validation against the trust list (OPC UA Part 4
//! §6.1.3, Part 2 §8).
//!
//! Called by the engine on every secure-channel handshake (and for TLS
//! client certificates and X509 user tokens) through
//! [`Store::validate_certificate`]. A client certificate is trusted when its
//! own DER is on the Trusted list, or when it chains — through CA
//! certificates on the Trusted or Issuer lists — up to a CA certificate on
//! the Trusted list. Along such a chain every certificate must be inside its
//! validity period and every CA must have published an up-to-date CRL
//! (stored with [`Store::add_crl`]) that does not list the certificate below
//! it.
//!
//! Path building, signature checks, the validity periods of the leaf and the
//! intermediates, and CRL checking (CRL signature, scope, nextUpdate, listed
//! serials) are done by `rustls-webpki`. This module keeps the OPC UA rules
//! on top of it:
//!
//! * a certificate on the Trusted list is trusted by its own DER (webpki
//!   does not take an end-entity certificate as its own trust anchor);
//! * trust anchors are the CA certificates on the Trusted list, and their
//!   validity period is checked too (webpki does not look at it);
//! * every CA must have a CRL: a missing one is `RevocationUnknown`, not
//!   "not revoked";
//! * the verdict follows the order of Part 4 Table 106 — structure and
//!   signatures (`Invalid`), trust (`Untrusted`), validity period
//!   (`TimeInvalid`), revocation (`RevocationUnknown`, `Revoked`) — and
//!   tells the leaf's own problem from its issuers' (`Issuer…` codes).
//!   webpki stops at the first problem it meets on a path, so the chain is
//!   checked in passes: first without CRLs (which path, which signature or
//!   validity problem), then the leaf's CRL, then the CAs' CRLs.
//!
//! The ApplicationUri check (the certificate's URI subjectAltName against
//! the ApplicationUri of CreateSession) is not done here: the engine does it
//! in its session service with [`crate::certificate_application_uri`].
//!
//! Signatures: what webpki verifies with *ring* — RSA PKCS#1 v1.5 with
//! SHA-256/384/512 and RSASSA-PSS with SHA-256/384/512 (rsaEncryption keys
//! of 2048 to 8192 bits), ECDSA P-256/P-384 with SHA-256/384, and Ed25519.
//! SHA-1 signatures and RSA keys under 2048 bits are refused (`Invalid`);
//! none of the security policies the gateway offers allows them. A
//! self-signed certificate on the Trusted list whose signature algorithm is
//! none of these is judged by the Trusted list alone.

use std::collections::HashSet;
use std::fmt;
use std::ptr;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use rustls_pki_types::{CertificateDer, TrustAnchor, UnixTime};
use sqlx::Row;
use webpki::{
    anchor_from_trusted_cert, BorrowedCertRevocationList, CertRevocationList, EndEntityCert,
    ExpirationPolicy, ExtendedKeyUsageValidator, KeyPurposeIdIter, RevocationCheckDepth,
    RevocationOptions, RevocationOptionsBuilder, UnknownStatusPolicy, VerifiedPath,
};
use x509_cert::der::{Decode, Encode, Header, Reader, SliceReader, Tag};
use x509_cert::ext::pkix::{BasicConstraints, KeyUsage};
use x509_cert::spki::AlgorithmIdentifierOwned;
use x509_cert::time::Time;
use x509_cert::Certificate;

use crate::error::StoreError;
use crate::x509::{thumbprint, MAX_CERT_LEN};
use crate::{kind_from_db, CertKind, Store};

/// Most certificates in one chain, leaf and trust anchor included (so at
/// most six intermediates, which is also webpki's own limit). A certificate
/// whose only paths to a trusted CA are longer is refused as `Untrusted`.
pub const MAX_CHAIN_LEN: usize = 8;

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
    der: CertificateDer<'static>,
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
            der: CertificateDer::from(der),
            cert,
            trusted,
        })
    }

    /// The DER as webpki takes it, borrowed.
    fn webpki_der(&self) -> CertificateDer<'_> {
        CertificateDer::from(self.der.as_ref())
    }

    /// Subject and issuer names are equal (self-issued).
    fn self_issued(&self) -> bool {
        let tbs = &self.cert.tbs_certificate;
        tbs.subject == tbs.issuer
    }
}

/// Result of checking a self-signed certificate's own signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SigCheck {
    Valid,
    Invalid,
    /// Algorithm or key type webpki cannot verify.
    Unsupported,
}

/// The raw bytes of the first element inside the outer SEQUENCE of a signed
/// structure (the TBSCertificate), exactly as signed.
fn signed_bytes(der: &[u8]) -> Option<&[u8]> {
    let mut reader = SliceReader::new(der).ok()?;
    let header = Header::decode(&mut reader).ok()?;
    if header.tag != Tag::Sequence {
        return None;
    }
    reader.tlv_bytes().ok()
}

/// The contents of an AlgorithmIdentifier SEQUENCE (without its tag and
/// length): the form webpki's algorithm tables compare against.
fn alg_id_contents(alg: &AlgorithmIdentifierOwned) -> Option<Vec<u8>> {
    let der = alg.to_der().ok()?;
    let mut reader = SliceReader::new(&der).ok()?;
    let header = Header::decode(&mut reader).ok()?;
    Some(reader.read_slice(header.length).ok()?.to_vec())
}

/// Checks a self-signed certificate's signature with its own key, using
/// webpki's *ring* algorithms ([`webpki::ALL_VERIFICATION_ALGS`]). Called
/// for a self-signed certificate on the Trusted list, which webpki's path
/// building does not handle.
fn self_signature(node: &Node) -> SigCheck {
    let cert = &node.cert;
    if cert.tbs_certificate.signature != cert.signature_algorithm {
        return SigCheck::Invalid;
    }
    let spki = &cert.tbs_certificate.subject_public_key_info;
    let (Some(tbs), Some(signature), Some(key), Some(sig_alg), Some(key_alg)) = (
        signed_bytes(node.der.as_ref()),
        cert.signature.as_bytes(),
        spki.subject_public_key.as_bytes(),
        alg_id_contents(&cert.signature_algorithm),
        alg_id_contents(&spki.algorithm),
    ) else {
        return SigCheck::Invalid;
    };
    let mut supported = false;
    for alg in webpki::ALL_VERIFICATION_ALGS.iter().filter(|alg| {
        alg.signature_alg_id().as_ref() == sig_alg && alg.public_key_alg_id().as_ref() == key_alg
    }) {
        if alg.verify_signature(key, tbs, signature).is_ok() {
            return SigCheck::Valid;
        }
        supported = true;
    }
    if supported {
        SigCheck::Invalid
    } else {
        SigCheck::Unsupported
    }
}

/// May this certificate issue certificates? (basicConstraints cA = TRUE and,
/// when keyUsage is present, keyCertSign.) Only such certificates are given
/// to webpki, as trust anchors or intermediates (webpki itself ignores
/// keyUsage and does not check a trust anchor at all).
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
/// webpki checks this for intermediates; for the trust anchor it is checked
/// here.
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

fn webpki_time(t: Time) -> UnixTime {
    UnixTime::since_unix_epoch(t.to_unix_duration())
}

/// The verification time as webpki takes it (times before 1970 are
/// clamped to the epoch).
fn webpki_now(now: DateTime<Utc>) -> UnixTime {
    UnixTime::since_unix_epoch(Duration::from_secs(
        u64::try_from(now.timestamp()).unwrap_or(0),
    ))
}

/// The extended key usage policy given to webpki: any well-formed list, or
/// none. OPC UA application certificates usually carry both serverAuth and
/// clientAuth, but peers with only one of them or without the extension
/// exist, and the store never required one.
struct AnyKeyPurpose;

impl ExtendedKeyUsageValidator for AnyKeyPurpose {
    fn validate(&self, iter: KeyPurposeIdIter<'_, '_>) -> Result<(), webpki::Error> {
        for purpose in iter {
            purpose?;
        }
        Ok(())
    }
}

/// Is there, by names alone, a chain of at most [`MAX_CHAIN_LEN`]
/// certificates from `leaf` through `cas` to a CA on the Trusted list?
/// Called when webpki reports a validity problem: webpki checks validity
/// periods while it builds paths, but Table 106 puts the trust-list check
/// first, so a certificate that could never reach a trusted CA is
/// `Untrusted` whatever its dates.
fn reaches_trusted_ca_by_name(leaf: &Node, cas: &[&Node]) -> bool {
    let mut seen: HashSet<usize> = HashSet::new();
    let mut names = vec![&leaf.cert.tbs_certificate.issuer];
    for _ in 1..MAX_CHAIN_LEN {
        let mut next = Vec::new();
        for name in names {
            for (i, ca) in cas.iter().enumerate() {
                let tbs = &ca.cert.tbs_certificate;
                if tbs.subject == *name && seen.insert(i) {
                    if ca.trusted {
                        return true;
                    }
                    next.push(&tbs.issuer);
                }
            }
        }
        if next.is_empty() {
            break;
        }
        names = next;
    }
    false
}

/// Which CRL the trust anchor itself must be able to sign on a path
/// (webpki checks cRLSign for intermediates only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AnchorCrl {
    /// Revocation is not checked in this pass.
    NotChecked,
    /// Only the leaf's CRL is checked: the anchor signs it when it issued
    /// the leaf directly.
    LeafOnly,
    /// Every certificate below the anchor is checked.
    Chain,
}

/// A path webpki verified, by position in [`Candidates`]: the trust anchor
/// and the intermediates from the leaf's issuer upwards.
#[derive(Debug)]
struct ChainPath {
    anchor: usize,
    intermediates: Vec<usize>,
}

/// The webpki inputs built from the trust list: trust anchors (for chain
/// validation the CA certificates on the Trusted list), with the node each
/// came from, and intermediates (every CA certificate on the Trusted or
/// Issuer list).
struct Candidates<'a> {
    anchors: Vec<TrustAnchor<'a>>,
    anchor_nodes: Vec<&'a Node>,
    intermediates: Vec<CertificateDer<'a>>,
    /// Whether a path's trust anchor must be inside its validity period.
    anchor_validity: bool,
}

impl<'a> Candidates<'a> {
    /// Builds the inputs: `anchors` become trust anchors, `intermediates`
    /// may appear between the leaf and an anchor. Certificates webpki
    /// cannot parse are left out (with a warning) so that they cannot mask
    /// the error that matters.
    fn new(
        anchors: &[&'a Node],
        intermediates: &[&'a Node],
        anchor_validity: bool,
    ) -> Candidates<'a> {
        let mut candidates = Candidates {
            anchors: Vec::new(),
            anchor_nodes: Vec::new(),
            intermediates: Vec::new(),
            anchor_validity,
        };
        for node in anchors {
            match anchor_from_trusted_cert(&node.der) {
                Ok(anchor) => {
                    candidates.anchors.push(anchor);
                    candidates.anchor_nodes.push(node);
                }
                Err(e) => tracing::warn!(
                    thumbprint = %node.thumbprint, error = %e,
                    "CA certificate not usable as trust anchor; skipped"
                ),
            }
        }
        for node in intermediates {
            let der = node.webpki_der();
            match EndEntityCert::try_from(&der) {
                Ok(_) => candidates.intermediates.push(der),
                Err(e) => tracing::warn!(
                    thumbprint = %node.thumbprint, error = %e,
                    "CA certificate not usable for chain building; skipped"
                ),
            }
        }
        candidates
    }

    /// Runs webpki path building for `leaf` at `time`: over all candidates,
    /// or only over `only` (a path found before). `revocation` turns CRL
    /// checking on. Every complete path is also checked by
    /// [`Candidates::check_path`]; a path it refuses makes webpki look for
    /// another one.
    fn verify(
        &self,
        leaf: &EndEntityCert<'_>,
        only: Option<&ChainPath>,
        time: UnixTime,
        revocation: Option<RevocationOptions<'_>>,
        anchor_crl: AnchorCrl,
    ) -> Result<ChainPath, webpki::Error> {
        let (anchors, intermediates) = match only {
            Some(path) => (
                match self.anchors.get(path.anchor) {
                    Some(anchor) => std::slice::from_ref(anchor),
                    None => return Err(webpki::Error::UnknownIssuer),
                },
                path.intermediates
                    .iter()
                    .filter_map(|&i| self.intermediates.get(i).cloned())
                    .collect(),
            ),
            None => (&self.anchors[..], self.intermediates.clone()),
        };
        let check = |path: &VerifiedPath<'_>| self.check_path(path, time, anchor_crl);
        let verified = leaf.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            anchors,
            &intermediates,
            time,
            AnyKeyPurpose,
            revocation,
            Some(&check),
        )?;
        self.locate(&verified)
    }

    /// The OPC UA checks webpki does not make on a complete path: at most
    /// [`MAX_CHAIN_LEN`] certificates, the trust anchor inside its validity
    /// period (when asked for) and, when its CRL is needed, allowed to sign
    /// CRLs.
    fn check_path(
        &self,
        path: &VerifiedPath<'_>,
        time: UnixTime,
        anchor_crl: AnchorCrl,
    ) -> Result<(), webpki::Error> {
        let intermediates = path.intermediate_certificates().count();
        if intermediates + 2 > MAX_CHAIN_LEN {
            return Err(webpki::Error::MaximumPathDepthExceeded);
        }
        let anchor = self
            .anchors
            .iter()
            .position(|a| ptr::eq(a, path.anchor()))
            .and_then(|i| self.anchor_nodes.get(i))
            .ok_or(webpki::Error::UnknownIssuer)?;
        let validity = &anchor.cert.tbs_certificate.validity;
        let (not_before, not_after) = (
            webpki_time(validity.not_before),
            webpki_time(validity.not_after),
        );
        if self.anchor_validity && time < not_before {
            return Err(webpki::Error::CertNotValidYet { time, not_before });
        }
        if self.anchor_validity && time > not_after {
            return Err(webpki::Error::CertExpired { time, not_after });
        }
        let signs_a_crl = match anchor_crl {
            AnchorCrl::NotChecked => false,
            AnchorCrl::LeafOnly => intermediates == 0,
            AnchorCrl::Chain => true,
        };
        if signs_a_crl && !may_sign_crl(&anchor.cert) {
            return Err(webpki::Error::IssuerNotCrlSigner);
        }
        Ok(())
    }

    /// The positions of a verified path's anchor and intermediates.
    fn locate(&self, path: &VerifiedPath<'_>) -> Result<ChainPath, webpki::Error> {
        let anchor = self
            .anchors
            .iter()
            .position(|a| ptr::eq(a, path.anchor()))
            .ok_or(webpki::Error::UnknownIssuer)?;
        let intermediates = path
            .intermediate_certificates()
            .map(|cert| {
                self.intermediates
                    .iter()
                    .position(|der| der.as_ref() == cert.der().as_ref())
                    .ok_or(webpki::Error::UnknownIssuer)
            })
            .collect::<Result<_, _>>()?;
        Ok(ChainPath {
            anchor,
            intermediates,
        })
    }
}

/// The verdict for a path-building failure (no CRLs involved), in the
/// order of Table 106: bad signatures and unusable certificates are
/// `Invalid`, no path to a trusted CA is `Untrusted`, then validity.
fn path_error_verdict(
    error: &webpki::Error,
    leaf: &Node,
    cas: &[&Node],
    now: i128,
) -> TrustVerdict {
    use webpki::Error as E;
    match error {
        E::CertExpired { .. } | E::CertNotValidYet { .. } | E::InvalidCertValidity => {
            if !reaches_trusted_ca_by_name(leaf, cas) {
                TrustVerdict::Untrusted
            } else if !time_valid(&leaf.cert, now) {
                TrustVerdict::TimeInvalid
            } else {
                TrustVerdict::IssuerTimeInvalid
            }
        }
        // No (short enough, acceptable) path to a trusted CA. A CA
        // certificate presented as the leaf lands here too: the operator
        // may trust it by its DER.
        E::UnknownIssuer
        | E::MaximumPathDepthExceeded
        | E::MaximumSignatureChecksExceeded
        | E::MaximumPathBuildCallsExceeded
        | E::MaximumNameConstraintComparisonsExceeded
        | E::CertDistrusted
        | E::CaUsedAsEndEntity
        | E::EndEntityUsedAsCa
        | E::PathLenConstraintViolated
        | E::NameConstraintViolation => TrustVerdict::Untrusted,
        // Signatures that do not verify or use an unsupported algorithm,
        // and anything malformed.
        _ => TrustVerdict::Invalid,
    }
}

/// Parses stored CRLs (issuer name, DER) for webpki, leaving out (with a
/// warning) those it refuses.
fn webpki_crls(stored: &[(String, Vec<u8>)]) -> Vec<CertRevocationList<'_>> {
    let mut crls = Vec::with_capacity(stored.len());
    for (issuer, der) in stored {
        match BorrowedCertRevocationList::from_der(der) {
            Ok(parsed) => crls.push(parsed.into()),
            Err(e) => tracing::warn!(%issuer, error = %e, "CRL not usable; ignored"),
        }
    }
    crls
}

impl Store {
    /// Decides whether a peer's certificate (DER) is trusted at `now`, per
    /// OPC UA Part 4 §6.1.3. Called by the engine on every secure-channel
    /// handshake; it maps [`TrustVerdict::status_name`] to a `StatusCode`.
    ///
    /// * On the Trusted list itself (e.g. a self-signed application
    ///   certificate): `Trusted` if time-valid and, when self-signed with a
    ///   key webpki supports, its signature verifies; no CRL is required,
    ///   but if its issuer is in the store and a verified CRL of that
    ///   issuer lists it, `Revoked`.
    /// * Otherwise webpki must find a path through Trusted/Issuer-list CAs
    ///   to a CA on the Trusted list; every certificate up to and including
    ///   that anchor must be time-valid and every CA on the path must have
    ///   a current, verified CRL not listing the certificate it issued (CRL
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
        let verdict = if leaf.trusted {
            self.judge_listed(&leaf, &pool, now).await?
        } else {
            self.judge_chain(&leaf, &pool, now).await?
        };
        tracing::debug!(thumbprint = %leaf.thumbprint, %verdict, "certificate validated");
        Ok(verdict)
    }

    /// A leaf on the Trusted list: self-signature (when self-signed),
    /// validity, and — optional, but honoured — its issuer's CRL.
    async fn judge_listed(
        &self,
        leaf: &Node,
        pool: &[Node],
        now: DateTime<Utc>,
    ) -> Result<TrustVerdict, StoreError> {
        let self_issued = leaf.self_issued();
        // A self-signed certificate with a key type webpki cannot verify
        // is judged by the Trusted list alone.
        if self_issued && self_signature(leaf) == SigCheck::Invalid {
            return Ok(TrustVerdict::Invalid);
        }
        if !time_valid(&leaf.cert, i128::from(now.timestamp())) {
            return Ok(TrustVerdict::TimeInvalid);
        }
        if !self_issued && self.listed_in_issuer_crl(leaf, pool, now).await? {
            return Ok(TrustVerdict::Revoked);
        }
        Ok(TrustVerdict::Trusted)
    }

    /// Whether a CA of the store that issued `leaf` (name and signature)
    /// lists it in a CRL whose signature verifies, current or not. Called
    /// for a leaf trusted by its DER, for which a CRL is optional.
    async fn listed_in_issuer_crl(
        &self,
        leaf: &Node,
        pool: &[Node],
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let issuer_name = &leaf.cert.tbs_certificate.issuer;
        let issuers: Vec<&Node> = pool
            .iter()
            .filter(|n| n.cert.tbs_certificate.subject == *issuer_name && is_ca(&n.cert))
            .collect();
        if issuers.is_empty() {
            return Ok(false);
        }
        let crl_ders = self.crls_of(&issuer_name.to_string()).await?;
        // Listed counts even in an outdated CRL: no thisUpdate filter here.
        let crls: Vec<CertRevocationList<'_>> = crl_ders
            .iter()
            .filter_map(|der| BorrowedCertRevocationList::from_der(der).ok())
            .map(CertRevocationList::from)
            .collect();
        let crl_refs: Vec<&CertRevocationList<'_>> = crls.iter().collect();
        let Ok(builder) = RevocationOptionsBuilder::new(&crl_refs) else {
            return Ok(false);
        };
        let revocation = builder
            .with_depth(RevocationCheckDepth::EndEntity)
            .with_status_policy(UnknownStatusPolicy::Allow)
            .with_expiration_policy(ExpirationPolicy::Ignore)
            .build();
        let Ok(end_entity) = EndEntityCert::try_from(&leaf.der) else {
            return Ok(false);
        };
        // The leaf is already known time-valid. The issuers' own dates and
        // standing do not matter here (no anchor validity check): only a
        // listing in a CRL whose signature verifies does.
        let candidates = Candidates::new(&issuers, &[], false);
        let result = candidates.verify(
            &end_entity,
            None,
            webpki_now(now),
            Some(revocation),
            AnchorCrl::NotChecked,
        );
        Ok(matches!(result, Err(webpki::Error::CertRevoked)))
    }

    /// A leaf not on the Trusted list: webpki path building without CRLs,
    /// then the leaf's CRL, then the CAs' CRLs.
    async fn judge_chain(
        &self,
        leaf: &Node,
        pool: &[Node],
        now: DateTime<Utc>,
    ) -> Result<TrustVerdict, StoreError> {
        let Ok(end_entity) = EndEntityCert::try_from(&leaf.der) else {
            return Ok(TrustVerdict::Invalid);
        };
        let cas: Vec<&Node> = pool.iter().filter(|n| is_ca(&n.cert)).collect();
        let trusted_cas: Vec<&Node> = cas.iter().copied().filter(|n| n.trusted).collect();
        let candidates = Candidates::new(&trusted_cas, &cas, true);
        let time = webpki_now(now);
        let secs = i128::from(now.timestamp());

        // Structure, signatures, trust and validity periods.
        let path = match candidates.verify(&end_entity, None, time, None, AnchorCrl::NotChecked) {
            Ok(path) => path,
            Err(e) => {
                tracing::debug!(thumbprint = %leaf.thumbprint, error = %e, "no valid path");
                return Ok(path_error_verdict(&e, leaf, &cas, secs));
            }
        };

        // Revocation: every CA on the path needs a current CRL.
        let stored = self.crls_in_force(now).await?;
        let crls = webpki_crls(&stored);
        let crl_refs: Vec<&CertRevocationList<'_>> = crls.iter().collect();
        let Ok(builder) = RevocationOptionsBuilder::new(&crl_refs) else {
            return Ok(TrustVerdict::RevocationUnknown);
        };
        let revocation = |depth| {
            Some(
                builder
                    .with_depth(depth)
                    .with_status_policy(UnknownStatusPolicy::Deny)
                    .with_expiration_policy(ExpirationPolicy::Enforce)
                    .build(),
            )
        };
        let whole_path = candidates.verify(
            &end_entity,
            Some(&path),
            time,
            revocation(RevocationCheckDepth::Chain),
            AnchorCrl::Chain,
        );
        let Err(path_error) = whole_path else {
            return Ok(TrustVerdict::Trusted);
        };
        // Another path (e.g. a re-issued CA next to a revoked one) may pass.
        if candidates
            .verify(
                &end_entity,
                None,
                time,
                revocation(RevocationCheckDepth::Chain),
                AnchorCrl::Chain,
            )
            .is_ok()
        {
            return Ok(TrustVerdict::Trusted);
        }
        tracing::debug!(thumbprint = %leaf.thumbprint, error = %path_error, "revocation check failed");
        // The leaf's own CRL first, then its issuers'.
        let leaf_only = candidates.verify(
            &end_entity,
            Some(&path),
            time,
            revocation(RevocationCheckDepth::EndEntity),
            AnchorCrl::LeafOnly,
        );
        Ok(match (leaf_only, path_error) {
            (Err(webpki::Error::CertRevoked), _) => TrustVerdict::Revoked,
            (Err(_), _) => TrustVerdict::RevocationUnknown,
            (Ok(_), webpki::Error::CertRevoked) => TrustVerdict::IssuerRevoked,
            (Ok(_), _) => TrustVerdict::IssuerRevocationUnknown,
        })
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

    /// The stored CRLs (issuer name, DER) already in force at `now`
    /// (thisUpdate not in the future; webpki itself only looks at
    /// nextUpdate). `this_update` is stored as RFC 3339 UTC with whole
    /// seconds, so it compares as text.
    async fn crls_in_force(
        &self,
        now: DateTime<Utc>,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let rows = sqlx::query("SELECT issuer, der FROM crls WHERE this_update <= ?1")
            .bind(now.to_rfc3339_opts(SecondsFormat::Secs, true))
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("issuer")?, row.try_get("der")?)))
            .collect()
    }

    /// The stored CRLs (DER) whose issuer name is `issuer`.
    async fn crls_of(&self, issuer: &str) -> Result<Vec<Vec<u8>>, StoreError> {
        Ok(sqlx::query_scalar("SELECT der FROM crls WHERE issuer = ?1")
            .bind(issuer)
            .fetch_all(&self.pool)
            .await?)
    }
}
