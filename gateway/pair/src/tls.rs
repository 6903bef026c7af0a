//! The appliance's pair identity and the mutual TLS of the pair listener.
//!
//! Each appliance has a certificate used only between the appliances of a
//! pair (made at first start in its pair directory, never replicated). Both
//! ends of a pair connection present theirs. The TLS handshake only checks
//! that each end holds the key of the certificate it shows; who the peer
//! is — a pinned member, the appliance's own CLI, a joiner proving a
//! pairing code — is decided afterwards from the certificate's SHA-256
//! fingerprint ([`peer_fingerprint`]), and anything else is refused.

use std::path::Path;
use std::sync::Arc;

use ::ring::rand::SystemRandom;
use ::ring::signature::{self as ecdsa, EcdsaKeyPair, KeyPair as _};
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{ring, verify_tls12_signature, verify_tls13_signature};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::{
    self, ClientConfig, DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme,
};

use crate::error::PairError;
use crate::pairing::fingerprint;

/// File of the pair certificate (DER) in the pair directory.
pub const CERT_FILE: &str = "pair-cert.der";
/// File of its private key (PKCS#8 DER, readable by the owner only).
pub const KEY_FILE: &str = "pair-key.der";

/// This appliance's pair certificate and key.
#[derive(Clone)]
pub struct Identity {
    cert: CertificateDer<'static>,
    key: Arc<PrivateKeyDer<'static>>,
    signer: Arc<EcdsaKeyPair>,
    fingerprint: String,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// Loads the pair certificate of `dir`, or makes one (self-signed,
    /// common name `uagate pair <name>`) when there is none. Called when
    /// the pair node starts and by the CLI.
    pub fn load_or_create(dir: &Path, name: &str) -> Result<Identity, PairError> {
        let (cert_path, key_path) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
        if cert_path.exists() && key_path.exists() {
            let cert = std::fs::read(&cert_path)?;
            let key = std::fs::read(&key_path)?;
            return Identity::from_der(cert, key);
        }
        std::fs::create_dir_all(dir)?;
        let key = rcgen::KeyPair::generate().map_err(|e| PairError::Tls(e.to_string()))?;
        let mut params = rcgen::CertificateParams::new(vec!["uagate-pair".to_string()])
            .map_err(|e| PairError::Tls(e.to_string()))?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("uagate pair {name}"));
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2100, 1, 1);
        let cert = params
            .self_signed(&key)
            .map_err(|e| PairError::Tls(e.to_string()))?;
        let key_der = key.serialize_der();
        write_private(&key_path, &key_der)?;
        std::fs::write(&cert_path, cert.der())?;
        Identity::from_der(cert.der().to_vec(), key_der)
    }

    fn from_der(cert: Vec<u8>, key: Vec<u8>) -> Result<Identity, PairError> {
        let fingerprint = fingerprint(&cert);
        let signer = EcdsaKeyPair::from_pkcs8(
            &ecdsa::ECDSA_P256_SHA256_FIXED_SIGNING,
            &key,
            &SystemRandom::new(),
        )
        .map_err(|e| PairError::Tls(format!("the pair key is not a P-256 key: {e}")))?;
        Ok(Identity {
            cert: CertificateDer::from(cert),
            key: Arc::new(PrivateKeyDer::Pkcs8(key.into())),
            signer: Arc::new(signer),
            fingerprint,
        })
    }

    /// The public key (hex of the uncompressed P-256 point), as members
    /// know it ([`crate::PeerNode::public_key`]).
    pub fn public_key(&self) -> String {
        hex::encode(self.signer.public_key().as_ref())
    }

    /// Signs `message` with the pair key (hex of the fixed-size ECDSA
    /// signature). Called for every change this node proposes.
    pub fn sign(&self, message: &[u8]) -> Result<String, PairError> {
        let sig = self
            .signer
            .sign(&SystemRandom::new(), message)
            .map_err(|e| PairError::Tls(format!("signing failed: {e}")))?;
        Ok(hex::encode(sig.as_ref()))
    }

    /// SHA-256 fingerprint of the certificate (lowercase hex).
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The TLS configuration of the pair listener: asks every client for
    /// its certificate (any, see the module documentation).
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, PairError> {
        let provider = Arc::new(ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| PairError::Tls(e.to_string()))?
            .with_client_cert_verifier(Arc::new(AnyPeer { provider }))
            .with_single_cert(vec![self.cert.clone()], self.key.clone_key())
            .map_err(|e| PairError::Tls(e.to_string()))?;
        Ok(Arc::new(config))
    }

    /// The TLS configuration for connecting to another appliance's pair
    /// listener with this certificate.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, PairError> {
        let provider = Arc::new(ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| PairError::Tls(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyPeer { provider }))
            .with_client_auth_cert(vec![self.cert.clone()], self.key.clone_key())
            .map_err(|e| PairError::Tls(e.to_string()))?;
        Ok(Arc::new(config))
    }
}

/// Writes a private key readable by the owner only.
fn write_private(path: &Path, der: &[u8]) -> Result<(), PairError> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    options.mode(0o600);
    let mut f = options.open(path)?;
    f.write_all(der)?;
    f.sync_all()?;
    Ok(())
}

/// Whether `signature` (hex) is `public_key`'s (hex) over `message`.
pub fn verify(public_key: &str, message: &[u8], signature: &str) -> bool {
    let (Ok(key), Ok(sig)) = (hex::decode(public_key), hex::decode(signature)) else {
        return false;
    };
    ecdsa::UnparsedPublicKey::new(&ecdsa::ECDSA_P256_SHA256_FIXED, key)
        .verify(message, &sig)
        .is_ok()
}

/// The public key (hex) of the certificate a TLS peer presented: the
/// subject public key bits of its SubjectPublicKeyInfo.
pub fn peer_public_key(certs: Option<&[CertificateDer<'_>]>) -> Option<String> {
    use x509_cert::der::Decode;
    let der = certs?.first()?;
    let cert = x509_cert::Certificate::from_der(der.as_ref()).ok()?;
    let bits = cert
        .tbs_certificate
        .subject_public_key_info
        .subject_public_key
        .as_bytes()?;
    Some(hex::encode(bits))
}

/// The fingerprint of the certificate a TLS peer presented.
pub fn peer_fingerprint(certs: Option<&[CertificateDer<'_>]>) -> Option<String> {
    certs
        .and_then(|c| c.first())
        .map(|c| fingerprint(c.as_ref()))
}

/// Accepts any certificate whose handshake signature checks out; the
/// caller decides from the fingerprint afterwards.
#[derive(Debug)]
struct AnyPeer {
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl AnyPeer {
    fn tls12(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn tls13(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

impl ServerCertVerifier for AnyPeer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls12(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes()
    }
}

impl ClientCertVerifier for AnyPeer {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls12(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes()
    }
}
