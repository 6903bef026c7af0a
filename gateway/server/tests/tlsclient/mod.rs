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

/// A connection to `addr` trusting only `expected` that presents the client
/// certificate `chain` with `key` (mutual TLS).
pub async fn connect_with_client_cert(
    addr: std::net::SocketAddr,
    expected: &CertificateDer<'static>,
    chain: Vec<CertificateDer<'static>>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let provider = Arc::new(ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned {
            expected: expected.clone().into_owned(),
            provider,
        }))
        .with_client_auth_cert(chain, key)
        .map_err(std::io::Error::other)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").unwrap();
    TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
}

/// Sends one HTTP/1.1 request on `stream` and returns (status, headers in
/// lower case, body); the body is read by Content-Length.
pub async fn http1(
    stream: &mut TlsStream<TcpStream>,
    method: &str,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<(u16, Vec<(String, String)>, Vec<u8>)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let head = format!(
        "{method} / HTTP/1.1\r\nHost: localhost\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.flush().await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let text = String::from_utf8_lossy(&buf[..header_end]).into_owned();
    let mut lines = text.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("no status line"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[header_end + 4..].to_vec();
    while body.len() < len {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok((status, headers, body))
}

/// A self-signed client certificate (DER) with application URI
/// `urn:uagate:test:mtls`, and its key.
pub fn client_identity() -> (
    CertificateDer<'static>,
    tokio_rustls::rustls::pki_types::PrivateKeyDer<'static>,
) {
    use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["client.example".to_string()]).unwrap();
    params.subject_alt_names.push(rcgen::SanType::URI(
        rcgen::Ia5String::try_from("urn:uagate:test:mtls").unwrap(),
    ));
    let cert = params.self_signed(&key).unwrap();
    (
        cert.der().clone(),
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    )
}
