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
            tokens: offered.tokens.clone(),
            caller: None,
            transport_encrypted: false,
            transport: "opc.tcp",
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
        info.client_cert = Some(cert);
        Ok(info)
    }
}

/// The status a client sees for a certificate the trust list refuses.
fn verdict_status(verdict: TrustVerdict) -> StatusCode {
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
