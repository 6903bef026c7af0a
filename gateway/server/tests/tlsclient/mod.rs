//! TLS client pieces shared by the tests of the TLS listener: a verifier
//! pinned to one exact server certificate (the gateway's self-signed TLS
//! certificate is read from its data directory), and connectors.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{ring, verify_tls12_signature, verify_tls13_signature};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{self, ClientConfig, DigitallySignedStruct, SignatureScheme};
use tokio_rustls::TlsConnector;
use uagate_server::tls_cert::{CERT_FILE, TLS_DIR};

/// Accepts exactly one server certificate (by DER); signatures are checked
/// against it with the ring provider.
#[derive(Debug)]
pub struct Pinned {
    pub expected: CertificateDer<'static>,
    pub provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.expected.as_ref() {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General("not the pinned certificate".into()))
        }
    }

    fn verify_tls12_signature(
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

    fn verify_tls13_signature(
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

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The leaf certificate of a PEM chain.
pub fn leaf_of(cert_pem: &[u8]) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(cert_pem).unwrap()
}

/// The TLS certificate stored in a gateway's data directory.
pub fn stored_leaf(data: &Path) -> CertificateDer<'static> {
    leaf_of(&std::fs::read(data.join(TLS_DIR).join(CERT_FILE)).unwrap())
}

/// A connector trusting only `expected`, offering the ALPN ids `alpn`.
pub fn connector(expected: &CertificateDer<'static>, alpn: &[&[u8]]) -> TlsConnector {
    let provider = Arc::new(ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned {
            expected: expected.clone().into_owned(),
            provider,
        }))
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    TlsConnector::from(Arc::new(config))
}

/// A TLS connection to `addr` trusting only `expected` (ALPN http/1.1).
pub async fn connect(
    addr: std::net::SocketAddr,
    expected: &CertificateDer<'static>,
) -> std::io::Result<TlsStream<TcpStream>> {
    connect_alpn(addr, expected, &[b"http/1.1"]).await
}

/// A TLS connection to `addr` trusting only `expected`, with ALPN `alpn`.
pub async fn connect_alpn(
    addr: std::net::SocketAddr,
    expected: &CertificateDer<'static>,
    alpn: &[&[u8]],
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").unwrap();
    connector(expected, alpn).connect(name, tcp).await
}

/// The certificate the server presented on `stream`.
pub fn presented(stream: &TlsStream<TcpStream>) -> CertificateDer<'static> {
    stream.get_ref().1.peer_certificates().unwrap()[0]
        .clone()
        .into_owned()
}
