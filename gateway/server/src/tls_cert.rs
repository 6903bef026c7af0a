//! The TLS certificate of the opc.wss / opc.https listener.
//!
//! It is distinct from the OPC UA application instance certificate
//! (`<data>/pki`, see [`crate::pki`]): OPC 10000-6 §7.5.3 lets administrators
//! use a TLS certificate other than the application instance certificate,
//! and this is the certificate browsers and reverse proxies validate (DNS/IP
//! subjectAltNames), while the application certificate carries the
//! ApplicationUri. See `docs/tls.md`.
//!
//! Storage: `<data>/tls/cert.pem` (chain, leaf first) and `<data>/tls/key.pem`
//! (mode 0600, directory 0700 on Unix). [`install`] writes both to temporary
//! files in the same directory, syncs them, then renames key and certificate.
//! A reader between the two renames could see a new key next to the old
//! certificate; every load validates that the key matches the leaf
//! certificate, re-reads once on a mismatch, and [`TlsIdentity::reload`]
//! keeps the certificate in service when the pair on disk does not validate.
//! A mismatched pair is therefore never served.

use std::io::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use parking_lot::RwLock;
use tokio_rustls::rustls;
use tokio_rustls::rustls::crypto::ring as ring_provider;
use tokio_rustls::rustls::pki_types::pem::{PemObject, SectionKind};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::ServerConfig;
use tokio_util::sync::CancellationToken;

/// Subdirectory of the data directory holding the TLS certificate and key.
pub const TLS_DIR: &str = "tls";
/// File name of the certificate chain (PEM, leaf first).
pub const CERT_FILE: &str = "cert.pem";
/// File name of the private key (PEM).
pub const KEY_FILE: &str = "key.pem";
/// Common name of a generated self-signed certificate.
pub const GENERATED_CN: &str = "uagate TLS";
/// Validity of a generated self-signed certificate (2 years).
const GENERATED_VALIDITY_DAYS: i64 = 730;
/// A certificate expiring sooner than this is warned about when loaded.
const EXPIRY_WARNING_DAYS: i64 = 30;

/// Why a TLS certificate or key was refused or could not be stored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file or directory could not be read, written or created.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was attempted ("cannot read", "cannot write", ...).
        action: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The stored pair in `<data>/tls` was refused.
    #[error("TLS certificate {} / key {}: {source}", cert.display(), key.display())]
    Stored {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// The problem.
        source: Box<TlsError>,
    },
    /// The certificate input holds no certificate.
    #[error("no certificate found in the certificate PEM (expected a -----BEGIN CERTIFICATE----- block)")]
    NoCertificate,
    /// The PEM text is malformed.
    #[error("unparsable PEM in the {what}: {detail}")]
    Pem {
        /// "certificate" or "private key".
        what: &'static str,
        /// What the PEM parser said.
        detail: String,
    },
    /// A certificate in the chain is not valid X.509 DER.
    #[error("certificate #{index} of the chain is not a valid X.509 certificate: {detail}")]
    BadCertificate {
        /// Position in the chain, 0 = leaf.
        index: usize,
        /// What is wrong.
        detail: String,
    },
    /// The key input holds no private key.
    #[error("no private key found in the key PEM (expected a PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block)")]
    NoPrivateKey,
    /// The key input holds several private keys.
    #[error("the key PEM holds {0} private keys; exactly one is required")]
    MultiplePrivateKeys(usize),
    /// The private key is of a type or encoding rustls cannot use.
    #[error("unsupported private key: {0}")]
    UnsupportedKey(String),
    /// The private key is not the one of the leaf certificate.
    #[error("the private key does not match the leaf certificate's public key")]
    KeyMismatch,
    /// The leaf certificate is not valid yet.
    #[error("the leaf certificate is not valid before {not_before} (now {now})")]
    NotYetValid {
        /// Start of validity.
        not_before: DateTime<Utc>,
        /// The time checked.
        now: DateTime<Utc>,
    },
    /// The leaf certificate has expired.
    #[error("the leaf certificate expired at {not_after} (now {now})")]
    Expired {
        /// End of validity.
        not_after: DateTime<Utc>,
        /// The time checked.
        now: DateTime<Utc>,
    },
    /// The leaf certificate names no host.
    #[error(
        "the leaf certificate has no DNS or IP subjectAltName (browsers and proxies ignore the CN)"
    )]
    NoSubjectAltName,
    /// Generating the self-signed certificate failed.
    #[error("cannot generate the self-signed TLS certificate: {0}")]
    Generate(String),
    /// The TLS configuration could not be built.
    #[error("cannot build the TLS configuration: {0}")]
    Config(String),
}

/// What an administrator needs to know about a TLS certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsInfo {
    /// Subject of the leaf certificate, e.g. `CN=uagate TLS`.
    pub subject: String,
    /// DNS names and IP addresses of the leaf's subjectAltName, in order.
    pub sans: Vec<String>,
    /// Start of validity.
    pub not_before: DateTime<Utc>,
    /// End of validity.
    pub not_after: DateTime<Utc>,
    /// SHA-256 of the leaf certificate's DER, lowercase hex.
    pub fingerprint: String,
}

/// A validated certificate chain with its signing key.
struct Loaded {
    key: Arc<CertifiedKey>,
    info: TlsInfo,
}

/// The certificate resolver of the TLS listener: hands out whatever
/// certificate is current, swapped by [`TlsIdentity::reload`].
struct LiveResolver {
    current: RwLock<Arc<Loaded>>,
}

impl std::fmt::Debug for LiveResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is never printed.
        f.debug_struct("LiveResolver")
            .field("fingerprint", &self.current.read().info.fingerprint)
            .finish()
    }
}

impl ResolvesServerCert for LiveResolver {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().key.clone())
    }
}

/// The TLS identity of the opc.wss / opc.https listener: a server
/// configuration built once around a resolver whose certificate can be
/// replaced while running.
pub struct TlsIdentity {
    resolver: Arc<LiveResolver>,
    config: Arc<ServerConfig>,
}

impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsIdentity")
            .field("fingerprint", &self.fingerprint())
            .finish()
    }
}

impl TlsIdentity {
    /// Loads `<data_dir>/tls/{cert,key}.pem`; when both are missing,
    /// generates a self-signed ECDSA P-256 certificate (CN "uagate TLS",
    /// 2 years, SAN = `hosts` plus "localhost" and "127.0.0.1") and stores
    /// it. A lone certificate or key file, a stored pair that does not
    /// parse, whose key does not match or that names no host is an error; an expired stored certificate is
    /// served with a warning (clients will refuse it; replace it with
    /// `uagate tls set`).
    pub fn load_or_create(data_dir: &Path, hosts: &[String]) -> Result<TlsIdentity, TlsError> {
        let dir = data_dir.join(TLS_DIR);
        let cert_path = dir.join(CERT_FILE);
        let key_path = dir.join(KEY_FILE);
        // Only when both are missing: a lone certificate or key is an
        // administrator's half-finished change, reported rather than replaced.
        if !cert_path.exists() && !key_path.exists() {
            let now = Utc::now();
            let (cert_pem, key_pem) = generate_self_signed(
                hosts,
                now - chrono::Duration::hours(1),
                now + chrono::Duration::days(GENERATED_VALIDITY_DAYS),
            )?;
            let info = install(data_dir, cert_pem.as_bytes(), key_pem.as_bytes(), now)?;
            tracing::info!(
                path = %cert_path.display(),
                sha256 = %info.fingerprint,
                not_after = %info.not_after,
                sans = %info.sans.join(","),
                "created self-signed TLS certificate"
            );
        } else {
            restrict(&dir, 0o700)?;
            if key_path.exists() {
                restrict(&key_path, 0o600)?;
            }
        }
        let loaded = read_stored(data_dir, None)?;
        let now = Utc::now();
        if loaded.info.not_after < now {
            tracing::warn!(
                path = %cert_path.display(),
                not_after = %loaded.info.not_after,
                "TLS certificate has expired; clients will refuse it (replace it with `uagate tls set`)"
            );
        } else if loaded.info.not_after < now + chrono::Duration::days(EXPIRY_WARNING_DAYS) {
            tracing::warn!(
                path = %cert_path.display(),
                not_after = %loaded.info.not_after,
                "TLS certificate expires soon"
            );
        }
        tracing::info!(
            sha256 = %loaded.info.fingerprint,
            not_after = %loaded.info.not_after,
            "TLS certificate loaded"
        );
        let resolver = Arc::new(LiveResolver {
            current: RwLock::new(Arc::new(loaded)),
        });
        let mut config =
            ServerConfig::builder_with_provider(Arc::new(ring_provider::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| TlsError::Config(e.to_string()))?
                .with_no_client_auth()
                .with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(TlsIdentity {
            resolver,
            config: Arc::new(config),
        })
    }

    /// The same server configuration, but asking clients for a certificate
    /// (mutual TLS; `required` refuses a client without one). The TLS layer
    /// only checks that the client holds the key of the certificate it
    /// presents; whether the certificate is trusted is decided against the
    /// SQLite trust list after the handshake (see `tls.rs`), where unknown
    /// certificates are also listed for the operator.
    pub fn server_config_with_client_auth(
        &self,
        required: bool,
    ) -> Result<Arc<ServerConfig>, TlsError> {
        let provider = Arc::new(ring_provider::default_provider());
        let verifier = Arc::new(AnyClientCert {
            required,
            provider: provider.clone(),
        });
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(self.resolver.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// The server configuration of the TLS listener (TLS 1.2 and 1.3, ring,
    /// no client authentication, ALPN `h2` and `http/1.1`). Built once; its
    /// certificate follows [`TlsIdentity::reload`].
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.config.clone()
    }

    /// Re-reads `<data_dir>/tls/{cert,key}.pem`. Returns `Ok(true)` when a
    /// different, valid certificate was found and is now served to new
    /// handshakes (established connections keep theirs), `Ok(false)` when the
    /// files hold the certificate in service, and an error naming the
    /// problem when the files do not validate; the certificate in service
    /// then stays.
    pub fn reload(&self, data_dir: &Path) -> Result<bool, TlsError> {
        let loaded = read_stored(data_dir, Some(Utc::now()))?;
        let mut current = self.resolver.current.write();
        if current.info.fingerprint == loaded.info.fingerprint {
            return Ok(false);
        }
        tracing::info!(
            previous = %current.info.fingerprint,
            sha256 = %loaded.info.fingerprint,
            not_after = %loaded.info.not_after,
            "TLS certificate replaced; new handshakes use it"
        );
        *current = Arc::new(loaded);
        Ok(true)
    }

    /// Calls [`TlsIdentity::reload`] every `period` until `cancel` fires.
    /// A refused pair is logged (warn) once per distinct problem; the
    /// certificate in service stays.
    pub async fn watch(&self, data_dir: &Path, period: Duration, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_problem: Option<String> = None;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tick.tick() => {}
            }
            match self.reload(data_dir) {
                Ok(_) => last_problem = None,
                Err(e) => {
                    let text = e.to_string();
                    if last_problem.as_deref() != Some(text.as_str()) {
                        tracing::warn!(
                            error = %text,
                            sha256 = %self.fingerprint(),
                            "TLS certificate on disk refused; keeping the one in service"
                        );
                        last_problem = Some(text);
                    }
                }
            }
        }
    }

    /// SHA-256 of the leaf certificate in service, lowercase hex.
    pub fn fingerprint(&self) -> String {
        self.resolver.current.read().info.fingerprint.clone()
    }

    /// Subject, SANs, validity and fingerprint of the certificate in service.
    pub fn info(&self) -> TlsInfo {
        self.resolver.current.read().info.clone()
    }
}

/// The host names a first start uses: this machine's host name,
/// "localhost" and "127.0.0.1".
pub fn default_hosts() -> Vec<String> {
    let mut hosts = Vec::new();
    if let Ok(h) = opcua_crypto::hostname() {
        if !h.is_empty() {
            hosts.push(h);
        }
    }
    for h in ["localhost", "127.0.0.1"] {
        if !hosts.iter().any(|x| x == h) {
            hosts.push(h.to_string());
        }
    }
    hosts
}

/// Validates a PEM certificate chain (leaf first) and PEM private key:
/// both parse, exactly one key, the key matches the leaf, the leaf is valid
/// at `now` and names at least one DNS name or IP address.
pub fn validate_pem(
    cert_pem: &[u8],
    key_pem: &[u8],
    now: DateTime<Utc>,
) -> Result<TlsInfo, TlsError> {
    check_pair(cert_pem, key_pem, Some(now)).map(|l| l.info)
}

/// Validates the pair (see [`validate_pem`]) and stores it as
/// `<data_dir>/tls/{cert,key}.pem`, each written to a temporary file,
/// synced and renamed (key first). Refused input leaves the files as they were.
pub fn install(
    data_dir: &Path,
    cert_pem: &[u8],
    key_pem: &[u8],
    now: DateTime<Utc>,
) -> Result<TlsInfo, TlsError> {
    let info = validate_pem(cert_pem, key_pem, now)?;
    let dir = data_dir.join(TLS_DIR);
    std::fs::create_dir_all(&dir).map_err(|source| TlsError::Io {
        action: "cannot create",
        path: dir.clone(),
        source,
    })?;
    restrict(&dir, 0o700)?;
    let key_tmp = write_temp(&dir, KEY_FILE, key_pem, 0o600)?;
    let cert_tmp = match write_temp(&dir, CERT_FILE, cert_pem, 0o644) {
        Ok(p) => p,
        Err(e) => {
            let _ = std::fs::remove_file(&key_tmp);
            return Err(e);
        }
    };
    let renamed = rename(&key_tmp, &dir.join(KEY_FILE))
        .and_then(|()| rename(&cert_tmp, &dir.join(CERT_FILE)));
    if let Err(e) = renamed {
        let _ = std::fs::remove_file(&key_tmp);
        let _ = std::fs::remove_file(&cert_tmp);
        return Err(e);
    }
    sync_dir(&dir)?;
    Ok(info)
}

/// Reads and validates the stored pair (`now` = None skips the validity
/// period check). On a key mismatch the files are read once more: an
/// [`install`] may have renamed the key but not yet the certificate.
fn read_stored(data_dir: &Path, now: Option<DateTime<Utc>>) -> Result<Loaded, TlsError> {
    let dir = data_dir.join(TLS_DIR);
    let cert_path = dir.join(CERT_FILE);
    let key_path = dir.join(KEY_FILE);
    let attempt = || -> Result<Loaded, TlsError> {
        // Certificate first: the installer renames it last.
        let cert = read(&cert_path)?;
        let key = read(&key_path)?;
        check_pair(&cert, &key, now).map_err(|source| TlsError::Stored {
            cert: cert_path.clone(),
            key: key_path.clone(),
            source: Box::new(source),
        })
    };
    match attempt() {
        Err(TlsError::Stored { source, .. }) if matches!(*source, TlsError::KeyMismatch) => {
            attempt()
        }
        other => other,
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Io {
        action: "cannot read",
        path: path.to_path_buf(),
        source,
    })
}

fn check_pair(
    cert_pem: &[u8],
    key_pem: &[u8],
    now: Option<DateTime<Utc>>,
) -> Result<Loaded, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            what: "certificate",
            detail: e.to_string(),
        })?;
    let Some(leaf) = chain.first() else {
        return Err(TlsError::NoCertificate);
    };
    for (index, der) in chain.iter().enumerate() {
        opcua_crypto::X509::from_der(der).map_err(|e| TlsError::BadCertificate {
            index,
            detail: e.to_string(),
        })?;
    }
    let x509 = opcua_crypto::X509::from_der(leaf).map_err(|e| TlsError::BadCertificate {
        index: 0,
        detail: e.to_string(),
    })?;
    let bad_leaf = |detail: &str| TlsError::BadCertificate {
        index: 0,
        detail: detail.to_string(),
    };
    let not_before = x509
        .not_before()
        .map_err(|_| bad_leaf("unreadable notBefore"))?;
    let not_after = x509
        .not_after()
        .map_err(|_| bad_leaf("unreadable notAfter"))?;
    let sans = subject_alt_names(leaf).ok_or_else(|| bad_leaf("malformed DER"))?;

    let key = private_key(key_pem)?;
    let signing_key = ring_provider::sign::any_supported_type(&key)
        .map_err(|e| TlsError::UnsupportedKey(e.to_string()))?;
    let certified = CertifiedKey::new(chain.clone(), signing_key);
    match certified.keys_match() {
        Ok(()) => {}
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            return Err(TlsError::KeyMismatch)
        }
        Err(e) => return Err(bad_leaf(&e.to_string())),
    }
    if let Some(now) = now {
        if now < not_before {
            return Err(TlsError::NotYetValid { not_before, now });
        }
        if now > not_after {
            return Err(TlsError::Expired { not_after, now });
        }
    }
    if sans.is_empty() {
        return Err(TlsError::NoSubjectAltName);
    }
    let info = TlsInfo {
        subject: x509.subject_name(),
        sans,
        not_before,
        not_after,
        fingerprint: sha256_hex(leaf)?,
    };
    Ok(Loaded {
        key: Arc::new(certified),
        info,
    })
}

/// The single private key of a PEM text.
fn private_key(key_pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    let mut keys = Vec::new();
    for section in <(SectionKind, Vec<u8>)>::pem_slice_iter(key_pem) {
        let (kind, der) = section.map_err(|e| TlsError::Pem {
            what: "private key",
            detail: e.to_string(),
        })?;
        if let Some(key) = PrivateKeyDer::from_pem(kind, der) {
            keys.push(key);
        }
    }
    match keys.len() {
        0 => Err(TlsError::NoPrivateKey),
        1 => keys.pop().ok_or(TlsError::NoPrivateKey),
        n => Err(TlsError::MultiplePrivateKeys(n)),
    }
}

/// SHA-256 of `data` as lowercase hex.
fn sha256_hex(data: &[u8]) -> Result<String, TlsError> {
    use sha2::Digest as _;
    Ok(hex::encode(sha2::Sha256::digest(data)))
}

/// Generates a self-signed ECDSA P-256 certificate for `hosts` plus
/// "localhost" and "127.0.0.1"; returns (certificate PEM, key PEM).
pub(crate) fn generate_self_signed(
    hosts: &[String],
    not_before: DateTime<Utc>,
    not_after: DateTime<Utc>,
) -> Result<(String, String), TlsError> {
    use rcgen::{
        CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, KeyPair,
        KeyUsagePurpose, SanType,
    };
    let mut names: Vec<String> = Vec::new();
    for h in hosts
        .iter()
        .map(|h| h.trim().to_string())
        .chain(["localhost".to_string(), "127.0.0.1".to_string()])
    {
        if !h.is_empty() && !names.iter().any(|n| n.eq_ignore_ascii_case(&h)) {
            names.push(h);
        }
    }
    let mut sans = Vec::new();
    for name in &names {
        match name.parse::<IpAddr>() {
            Ok(ip) => sans.push(SanType::IpAddress(ip)),
            Err(_) => match rcgen::Ia5String::try_from(name.as_str()) {
                Ok(dns) => sans.push(SanType::DnsName(dns)),
                Err(_) => {
                    tracing::warn!(host = %name, "not a valid DNS name; left out of the TLS certificate")
                }
            },
        }
    }
    let mut params = CertificateParams::default();
    params.subject_alt_names = sans;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, GENERATED_CN);
    params.distinguished_name = dn;
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    params.not_before = epoch + unix_secs(not_before)?;
    params.not_after = epoch + unix_secs(not_after)?;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().map_err(|e| TlsError::Generate(e.to_string()))?;
    let cert = params
        .self_signed(&key)
        .map_err(|e| TlsError::Generate(e.to_string()))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Seconds since 1970 of a chrono time (rcgen's `time` type is built from it).
fn unix_secs(t: DateTime<Utc>) -> Result<Duration, TlsError> {
    u64::try_from(t.timestamp())
        .map(Duration::from_secs)
        .map_err(|_| TlsError::Generate(format!("time before 1970: {t}")))
}

/// Client certificates for mutual TLS: any certificate is accepted at the
/// TLS layer as long as the client proves it holds its key (the handshake
/// signatures are verified); trust is decided afterwards against the trust
/// list, which lives in SQLite and is consulted asynchronously.
#[derive(Debug)]
struct AnyClientCert {
    required: bool,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::server::danger::ClientCertVerifier for AnyClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        self.required
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// DNS names and IP addresses of a certificate's subjectAltName
/// extension, or None when the DER is malformed. Other name forms are
/// skipped.
fn subject_alt_names(cert_der: &[u8]) -> Option<Vec<String>> {
    use x509_cert::der::Decode as _;
    use x509_cert::ext::pkix::name::GeneralName;
    use x509_cert::ext::pkix::SubjectAltName;
    let cert = x509_cert::Certificate::from_der(cert_der).ok()?;
    let san = match cert.tbs_certificate.get::<SubjectAltName>().ok()? {
        Some((_critical, san)) => san.0,
        None => Vec::new(),
    };
    let mut sans = Vec::new();
    for name in san {
        match name {
            GeneralName::DnsName(n) => sans.push(n.to_string()),
            GeneralName::IpAddress(ip) => {
                let b = ip.as_bytes();
                let addr = match b.len() {
                    4 => IpAddr::from(<[u8; 4]>::try_from(b).ok()?),
                    16 => IpAddr::from(<[u8; 16]>::try_from(b).ok()?),
                    _ => return None,
                };
                sans.push(addr.to_string());
            }
            _ => {}
        }
    }
    Some(sans)
}

fn write_temp(dir: &Path, name: &str, data: &[u8], mode: u32) -> Result<PathBuf, TlsError> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let path = dir.join(format!(".{name}.{}.{nanos}.tmp", std::process::id()));
    let io = |source| TlsError::Io {
        action: "cannot write",
        path: path.clone(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(&path).map_err(io)?;
    let written = file.write_all(data).and_then(|()| file.sync_all());
    if let Err(e) = written {
        drop(file);
        let _ = std::fs::remove_file(&path);
        return Err(io(e));
    }
    Ok(path)
}

fn rename(from: &Path, to: &Path) -> Result<(), TlsError> {
    std::fs::rename(from, to).map_err(|source| TlsError::Io {
        action: "cannot replace",
        path: to.to_path_buf(),
        source,
    })
}

/// Makes the renames durable.
#[cfg(unix)]
fn sync_dir(dir: &Path) -> Result<(), TlsError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| TlsError::Io {
            action: "cannot sync",
            path: dir.to_path_buf(),
            source,
        })
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> Result<(), TlsError> {
    Ok(())
}

/// Sets the Unix permission bits of the key file or TLS directory.
#[cfg(unix)]
fn restrict(path: &Path, mode: u32) -> Result<(), TlsError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|source| {
        TlsError::Io {
            action: "cannot set permissions of",
            path: path.to_path_buf(),
            source,
        }
    })
}

#[cfg(not(unix))]
fn restrict(_path: &Path, _mode: u32) -> Result<(), TlsError> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        Utc::now()
    }

    fn pair(hosts: &[&str], from_days: i64, to_days: i64) -> (String, String) {
        let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        generate_self_signed(
            &hosts,
            now() + chrono::Duration::days(from_days),
            now() + chrono::Duration::days(to_days),
        )
        .unwrap()
    }

    /// A certificate without any subjectAltName extension.
    fn pair_without_san() -> (String, String) {
        let mut params = rcgen::CertificateParams::default();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CommonName, "no-san.example");
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn good_pair_is_described() {
        let (cert, key) = pair(&["gw.example", "127.0.0.2"], -1, 30);
        let info = validate_pem(cert.as_bytes(), key.as_bytes(), now()).unwrap();
        assert_eq!(info.subject, "CN=uagate TLS");
        assert_eq!(
            info.sans,
            ["gw.example", "127.0.0.2", "localhost", "127.0.0.1"]
        );
        assert!(info.not_before < now() && now() < info.not_after);
        assert_eq!(info.fingerprint.len(), 64);
        assert!(info
            .fingerprint
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)));
        // The fingerprint is the SHA-256 of the leaf DER.
        let der = CertificateDer::from_pem_slice(cert.as_bytes()).unwrap();
        assert_eq!(info.fingerprint, sha256_hex(&der).unwrap());
        assert_eq!(
            sha256_hex(b"abc").unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn key_of_another_certificate_is_refused() {
        let (cert, _) = pair(&["a.example"], -1, 30);
        let (_, other_key) = pair(&["a.example"], -1, 30);
        let err = validate_pem(cert.as_bytes(), other_key.as_bytes(), now()).unwrap_err();
        assert!(matches!(err, TlsError::KeyMismatch), "{err}");
        assert!(err.to_string().contains("does not match"), "{err}");
    }

    #[test]
    fn expired_and_not_yet_valid_certificates_are_refused() {
        let (cert, key) = pair(&["old.example"], -30, -1);
        let err = validate_pem(cert.as_bytes(), key.as_bytes(), now()).unwrap_err();
        assert!(matches!(err, TlsError::Expired { .. }), "{err}");
        assert!(err.to_string().contains("expired"), "{err}");
        let (cert, key) = pair(&["future.example"], 2, 30);
        let err = validate_pem(cert.as_bytes(), key.as_bytes(), now()).unwrap_err();
        assert!(matches!(err, TlsError::NotYetValid { .. }), "{err}");
    }

    #[test]
    fn certificate_without_subject_alt_name_is_refused() {
        let (cert, key) = pair_without_san();
        let err = validate_pem(cert.as_bytes(), key.as_bytes(), now()).unwrap_err();
        assert!(matches!(err, TlsError::NoSubjectAltName), "{err}");
        assert!(err.to_string().contains("subjectAltName"), "{err}");
    }

    #[test]
    fn garbage_and_missing_parts_are_refused_naming_the_problem() {
        let (cert, key) = pair(&["a.example"], -1, 30);
        let err = validate_pem(b"hello", key.as_bytes(), now()).unwrap_err();
        assert!(matches!(err, TlsError::NoCertificate), "{err}");
        let broken = "-----BEGIN CERTIFICATE-----\n!!!not base64!!!\n-----END CERTIFICATE-----\n";
        let err = validate_pem(broken.as_bytes(), key.as_bytes(), now()).unwrap_err();
        assert!(matches!(err, TlsError::Pem { .. }), "{err}");
        let not_x509 = "-----BEGIN CERTIFICATE-----\naGVsbG8gd29ybGQ=\n-----END CERTIFICATE-----\n";
        let err = validate_pem(not_x509.as_bytes(), key.as_bytes(), now()).unwrap_err();
        assert!(matches!(err, TlsError::BadCertificate { .. }), "{err}");
        let err = validate_pem(cert.as_bytes(), b"garbage", now()).unwrap_err();
        assert!(matches!(err, TlsError::NoPrivateKey), "{err}");
        // A certificate is not a key.
        let err = validate_pem(cert.as_bytes(), cert.as_bytes(), now()).unwrap_err();
        assert!(matches!(err, TlsError::NoPrivateKey), "{err}");
        let two = format!("{key}{key}");
        let err = validate_pem(cert.as_bytes(), two.as_bytes(), now()).unwrap_err();
        assert!(matches!(err, TlsError::MultiplePrivateKeys(2)), "{err}");
    }

    #[test]
    fn truncated_certificates_have_no_subject_alt_names() {
        let (cert, _) = pair(&["a.example"], -1, 30);
        let der = CertificateDer::from_pem_slice(cert.as_bytes()).unwrap();
        assert!(subject_alt_names(&der).is_some());
        for cut in [0, 1, 2, 10, der.len() / 2, der.len() - 1] {
            assert!(subject_alt_names(&der[..cut]).is_none(), "cut at {cut}");
        }
    }

    #[test]
    fn install_refuses_invalid_input_and_keeps_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair(&["a.example"], -1, 30);
        let info = install(dir.path(), cert.as_bytes(), key.as_bytes(), now()).unwrap();
        let (_, other_key) = pair(&["b.example"], -1, 30);
        let err = install(dir.path(), cert.as_bytes(), other_key.as_bytes(), now()).unwrap_err();
        assert!(matches!(err, TlsError::KeyMismatch), "{err}");
        let tls = dir.path().join(TLS_DIR);
        assert_eq!(std::fs::read_to_string(tls.join(CERT_FILE)).unwrap(), cert);
        assert_eq!(std::fs::read_to_string(tls.join(KEY_FILE)).unwrap(), key);
        // No temporary files are left behind.
        let names: Vec<_> = std::fs::read_dir(&tls)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        let loaded = read_stored(dir.path(), Some(now())).unwrap();
        assert_eq!(loaded.info, info);
    }
}
