//! Certificate and CRL decoding: PEM/DER detection, thumbprints and the few
//! fields the trust store keeps next to the raw DER.

use std::borrow::Cow;

use chrono::{DateTime, SecondsFormat, Utc};
use sha1::{Digest, Sha1};
use x509_cert::crl::CertificateList;
use x509_cert::der::Decode;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{BasicConstraints, SubjectAltName};
use x509_cert::time::Time;
use x509_cert::Certificate;

use crate::error::{invalid, StoreError};

/// Largest certificate accepted (OPC UA certificates are a few KiB).
pub(crate) const MAX_CERT_LEN: usize = 64 * 1024;
/// Largest CRL accepted.
pub(crate) const MAX_CRL_LEN: usize = 16 * 1024 * 1024;

/// Fields extracted from a certificate.
#[derive(Debug, Clone)]
pub(crate) struct ParsedCert {
    pub thumbprint: String,
    pub subject: String,
    pub application_uri: Option<String>,
    pub not_before: String,
    pub not_after: String,
}

/// Fields extracted from a CRL.
#[derive(Debug, Clone)]
pub(crate) struct ParsedCrl {
    pub thumbprint: String,
    pub issuer: String,
    pub this_update: String,
    pub next_update: Option<String>,
    /// How many certificates it revokes.
    pub revoked: usize,
}

/// SHA-1 of the bytes, lowercase hex: the OPC UA certificate thumbprint.
pub(crate) fn thumbprint(der: &[u8]) -> String {
    hex::encode(Sha1::digest(der))
}

/// Normalises a thumbprint typed by an operator (case, `:` or space
/// separators) and checks it is 40 hex digits.
pub(crate) fn normalize_thumbprint(input: &str) -> Result<String, StoreError> {
    let t: String = input
        .chars()
        .filter(|c| !matches!(c, ':' | ' '))
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if t.len() == 40 && t.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(t)
    } else {
        Err(invalid(
            "thumbprint",
            "expected 40 hexadecimal digits (SHA-1)",
        ))
    }
}

/// Returns the DER payload of `bytes`: as is when it already is DER (starts
/// with an ASN.1 SEQUENCE), otherwise the single PEM block labelled `label`.
pub(crate) fn pem_or_der<'a>(
    bytes: &'a [u8],
    label: &str,
    what: &str,
) -> Result<Cow<'a, [u8]>, StoreError> {
    if bytes.first() == Some(&0x30) {
        return Ok(Cow::Borrowed(bytes));
    }
    let blocks = pem::parse_many(bytes)
        .map_err(|e| invalid(what, format!("neither DER nor valid PEM: {e}")))?;
    let mut matching: Vec<pem::Pem> = blocks.into_iter().filter(|p| p.tag() == label).collect();
    match matching.len() {
        1 => Ok(Cow::Owned(matching.remove(0).into_contents())),
        0 => Err(invalid(
            what,
            format!(
                "the file is neither DER nor PEM with a \"{label}\" block (a .der, .pem or .crt file is expected)"
            ),
        )),
        n => Err(invalid(
            what,
            format!("file holds {n} \"{label}\" PEM blocks; add them one at a time"),
        )),
    }
}

fn time_to_rfc3339(t: Time, what: &str) -> Result<String, StoreError> {
    let secs = i64::try_from(t.to_unix_duration().as_secs())
        .map_err(|_| invalid(what, "time out of range"))?;
    let dt = DateTime::<Utc>::from_timestamp(secs, 0)
        .ok_or_else(|| invalid(what, "time out of range"))?;
    Ok(dt.to_rfc3339_opts(SecondsFormat::Secs, true))
}

/// Decodes a DER X.509 certificate (exactly, no trailing bytes) and extracts
/// the fields kept in the trust store. Garbage yields `StoreError::Invalid`.
pub(crate) fn parse_certificate(der: &[u8]) -> Result<ParsedCert, StoreError> {
    const WHAT: &str = "certificate";
    if der.is_empty() {
        return Err(invalid(WHAT, "empty input"));
    }
    if der.len() > MAX_CERT_LEN {
        return Err(invalid(WHAT, format!("larger than {MAX_CERT_LEN} bytes")));
    }
    let cert = Certificate::from_der(der)
        .map_err(|e| invalid(WHAT, format!("not a DER-encoded X.509 certificate: {e}")))?;
    let tbs = &cert.tbs_certificate;
    let application_uri = match tbs.get::<SubjectAltName>() {
        Ok(Some((_critical, san))) => san.0.iter().find_map(|name| match name {
            GeneralName::UniformResourceIdentifier(uri) => Some(uri.as_str().to_owned()),
            _ => None,
        }),
        Ok(None) => None,
        Err(e) => {
            return Err(invalid(
                WHAT,
                format!("malformed subjectAltName extension: {e}"),
            ))
        }
    };
    Ok(ParsedCert {
        thumbprint: thumbprint(der),
        subject: tbs.subject.to_string(),
        application_uri,
        not_before: time_to_rfc3339(tbs.validity.not_before, WHAT)?,
        not_after: time_to_rfc3339(tbs.validity.not_after, WHAT)?,
    })
}

/// Whether a DER certificate may issue certificates: its basic constraints
/// say `cA`. Asked before a certificate goes on the issuer list.
pub(crate) fn is_ca(der: &[u8]) -> Result<bool, StoreError> {
    let cert = Certificate::from_der(der).map_err(|e| {
        invalid(
            "certificate",
            format!("not a DER-encoded X.509 certificate: {e}"),
        )
    })?;
    match cert.tbs_certificate.get::<BasicConstraints>() {
        Ok(found) => Ok(found.is_some_and(|(_, bc)| bc.ca)),
        Err(e) => Err(invalid(
            "certificate",
            format!("malformed basicConstraints extension: {e}"),
        )),
    }
}

/// Whether the signature of the DER CRL `crl` verifies with the public key
/// of the DER certificate `ca`: RSA PKCS#1 v1.5 and PSS with SHA-256/384/512,
/// ECDSA P-256/P-384 and Ed25519, as the chain checks take them. Asked
/// when a CRL is added, so that a CRL of another key with the CA's name
/// never replaces the CA's own.
pub(crate) fn crl_signed_by(crl: &[u8], ca: &[u8]) -> Result<bool, StoreError> {
    use ring::signature as sig;
    use x509_cert::der::Encode;
    let list = CertificateList::from_der(crl)
        .map_err(|e| invalid("crl", format!("not a DER-encoded X.509 CRL: {e}")))?;
    let cert = Certificate::from_der(ca).map_err(|e| {
        invalid(
            "certificate",
            format!("not a DER-encoded X.509 certificate: {e}"),
        )
    })?;
    let tbs = list
        .tbs_cert_list
        .to_der()
        .map_err(|e| invalid("crl", format!("cannot re-encode: {e}")))?;
    let Some(signature) = list.signature.as_bytes() else {
        return Ok(false);
    };
    let Some(key) = cert
        .tbs_certificate
        .subject_public_key_info
        .subject_public_key
        .as_bytes()
    else {
        return Ok(false);
    };
    let algorithms: &[&dyn sig::VerificationAlgorithm] =
        match list.signature_algorithm.oid.to_string().as_str() {
            "1.2.840.113549.1.1.11" => &[&sig::RSA_PKCS1_2048_8192_SHA256],
            "1.2.840.113549.1.1.12" => &[&sig::RSA_PKCS1_2048_8192_SHA384],
            "1.2.840.113549.1.1.13" => &[&sig::RSA_PKCS1_2048_8192_SHA512],
            // RSASSA-PSS: the hash is in the parameters; one of them verifies.
            "1.2.840.113549.1.1.10" => &[
                &sig::RSA_PSS_2048_8192_SHA256,
                &sig::RSA_PSS_2048_8192_SHA384,
                &sig::RSA_PSS_2048_8192_SHA512,
            ],
            // ECDSA: the curve is the key's; one of them verifies.
            "1.2.840.10045.4.3.2" => &[&sig::ECDSA_P256_SHA256_ASN1, &sig::ECDSA_P384_SHA256_ASN1],
            "1.2.840.10045.4.3.3" => &[&sig::ECDSA_P384_SHA384_ASN1, &sig::ECDSA_P256_SHA384_ASN1],
            "1.3.101.112" => &[&sig::ED25519],
            _ => &[],
        };
    Ok(algorithms.iter().any(|alg| {
        sig::UnparsedPublicKey::new(*alg, key)
            .verify(&tbs, signature)
            .is_ok()
    }))
}

/// Decodes a DER X.509 CRL and extracts issuer and update times.
pub(crate) fn parse_crl(der: &[u8]) -> Result<ParsedCrl, StoreError> {
    const WHAT: &str = "crl";
    if der.is_empty() {
        return Err(invalid(WHAT, "empty input"));
    }
    if der.len() > MAX_CRL_LEN {
        return Err(invalid(WHAT, format!("larger than {MAX_CRL_LEN} bytes")));
    }
    let crl = CertificateList::from_der(der)
        .map_err(|e| invalid(WHAT, format!("not a DER-encoded X.509 CRL: {e}")))?;
    let tbs = &crl.tbs_cert_list;
    Ok(ParsedCrl {
        thumbprint: thumbprint(der),
        issuer: tbs.issuer.to_string(),
        this_update: time_to_rfc3339(tbs.this_update, WHAT)?,
        next_update: tbs
            .next_update
            .map(|t| time_to_rfc3339(t, WHAT))
            .transpose()?,
        revoked: tbs.revoked_certificates.as_ref().map_or(0, Vec::len),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn thumbprint_normalisation() {
        let t = "AB:cd".to_owned() + &"0".repeat(36);
        assert_eq!(
            normalize_thumbprint(&t).unwrap(),
            "abcd".to_owned() + &"0".repeat(36)
        );
        assert!(normalize_thumbprint("xyz").is_err());
        assert!(normalize_thumbprint(&"g".repeat(40)).is_err());
    }

    #[test]
    fn garbage_is_invalid() {
        for bad in [
            &b""[..],
            b"\x30\x03\x02\x01\x01",
            b"hello",
            b"\x30\x82\xff\xff",
        ] {
            assert!(matches!(
                parse_certificate(bad),
                Err(StoreError::Invalid { .. })
            ));
        }
        assert!(matches!(
            pem_or_der(
                b"-----BEGIN FOO-----\nAAAA\n-----END FOO-----\n",
                "CERTIFICATE",
                "certificate"
            ),
            Err(StoreError::Invalid { .. })
        ));
    }
}
