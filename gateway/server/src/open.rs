//! Deciding an OpenSecureChannel (Issue) for every UACP transport: the
//! policy and mode must be offered and, when secured, the client
//! certificate valid and in the trust list.

use opcua_crypto::{SecurityPolicy, X509};
use opcua_types::{ByteString, StatusCode};
use uagate_proto::OpenRequest;
use uagate_store::TrustVerdict;

use crate::{ChannelInfo, Engine};

impl Engine {
    /// Decides an OpenSecureChannel: the policy and mode must be offered and,
    /// when secured, the client certificate valid and in the trust list. An
    /// unknown certificate is recorded as rejected for the operator.
    pub(crate) async fn decide_open(&self, req: &OpenRequest) -> Result<ChannelInfo, StatusCode> {
        let offered = self
            .endpoints
            .offered()
            .iter()
            .find(|o| o.policy == req.policy && o.mode == req.mode)
            .ok_or(StatusCode::BadSecurityPolicyRejected)?;
        let mut info = ChannelInfo {
            channel_id: self.channels.allocate_id(),
            policy: req.policy,
            mode: req.mode,
            client_certificate: ByteString::null(),
            client_cert: None,
            application_owner: None,
            tokens: offered.tokens.clone(),
            caller: None,
            transport_encrypted: false,
            transport: "opc.tcp",
            peer: None,
        };
        if req.policy == SecurityPolicy::None {
            return Ok(info);
        }
        let der = req
            .client_certificate
            .clone()
            .ok_or(StatusCode::BadCertificateInvalid)?;
        let cert = X509::from_byte_string(&der).map_err(|_| StatusCode::BadCertificateInvalid)?;
        let verdict = self
            .store
            .validate_certificate(der.as_ref(), chrono::Utc::now())
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "trust list lookup failed");
                StatusCode::BadInternalError
            })?;
        if verdict == TrustVerdict::Untrusted {
            // Listed for the operator to approve with `uagate trust add`.
            if let Err(e) = self.store.record_rejected(der.as_ref()).await {
                tracing::warn!(error = %e, "could not record rejected certificate");
            }
        }
        if !verdict.is_trusted() {
            tracing::warn!(
                thumbprint = %cert.thumbprint().as_hex_string(),
                subject = %cert.subject_name(),
                %verdict,
                "client certificate refused"
            );
            return Err(verdict_status(verdict));
        }
        info.client_certificate = der;
        info.application_owner = ChannelInfo::owner_of(&cert);
        info.client_cert = Some(cert);
        Ok(info)
    }
}

/// The status a client sees for a certificate the trust list refuses.
pub(crate) fn verdict_status(verdict: TrustVerdict) -> StatusCode {
    match verdict {
        TrustVerdict::Trusted => StatusCode::Good,
        TrustVerdict::Untrusted => StatusCode::BadCertificateUntrusted,
        TrustVerdict::Revoked => StatusCode::BadCertificateRevoked,
        TrustVerdict::IssuerRevoked => StatusCode::BadCertificateIssuerRevoked,
        TrustVerdict::RevocationUnknown => StatusCode::BadCertificateRevocationUnknown,
        TrustVerdict::IssuerRevocationUnknown => StatusCode::BadCertificateIssuerRevocationUnknown,
        TrustVerdict::TimeInvalid => StatusCode::BadCertificateTimeInvalid,
        TrustVerdict::IssuerTimeInvalid => StatusCode::BadCertificateIssuerTimeInvalid,
        _ => StatusCode::BadCertificateInvalid,
    }
}

/// The first certificate (the leaf) of a DER certificate or of a chain of
/// DER certificates sent back to back (Part 6 §6.2.3: a SenderCertificate or
/// ClientCertificate may carry the issuer chain after the leaf). `None` when
/// `der` does not start with a complete DER SEQUENCE.
pub(crate) fn leaf_certificate(der: &[u8]) -> Option<&[u8]> {
    let (&tag, rest) = der.split_first()?;
    if tag != 0x30 {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (len, header) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, 2 + n)
    };
    der.get(..header.checked_add(len)?)
}

/// Whether two certificate fields name the same leaf certificate, whether or
/// not either carries its issuer chain: the CreateSession and ActivateSession
/// checks against the channel's certificate (Sessions.md: "supplying the
/// same leaf with an issuer chain is allowed").
pub(crate) fn same_leaf(a: &[u8], b: &[u8]) -> bool {
    match (leaf_certificate(a), leaf_certificate(b)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(name: &str) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn the_leaf_is_the_same_with_or_without_its_issuer_chain() {
        let leaf = cert("client");
        let issuer = cert("issuer-ca");
        let chain = [leaf.clone(), issuer.clone()].concat();
        assert_eq!(leaf_certificate(&chain), Some(leaf.as_slice()));
        assert_eq!(leaf_certificate(&leaf), Some(leaf.as_slice()));
        assert!(same_leaf(&leaf, &chain));
        assert!(same_leaf(&chain, &leaf));
        assert!(same_leaf(&chain, &chain));
        // Another leaf, even followed by the right chain, is not the same.
        let other = cert("other");
        assert!(!same_leaf(&leaf, &[other.clone(), issuer].concat()));
        assert!(!same_leaf(&leaf, &other));
        // Not a certificate: never the same (also not two empty fields).
        assert!(!same_leaf(b"", b""));
        assert!(!same_leaf(&leaf[..10], &leaf));
        assert_eq!(leaf_certificate(&[0x30, 0x85, 1, 2, 3, 4, 5]), None);
        assert_eq!(leaf_certificate(&[0x30, 0x03, 1, 2]), None);
    }
}
