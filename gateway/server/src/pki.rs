//! The application instance certificate: created on first start in the
//! data directory (key file mode 0600) and loaded on every later start.

use std::path::Path;
use std::sync::Arc;

use opcua_crypto::{CertificateStore, PrivateKey, X509Data, X509};
use parking_lot::RwLock;

use crate::error::StartError;

/// Our certificate, key and the certificate store object the secure
/// channel code reads them from.
pub struct Identity {
    /// The store rooted at `<data>/pki` (own/cert.der, private/private.pem).
    pub store: Arc<RwLock<CertificateStore>>,
    /// Our certificate.
    pub cert: X509,
    /// Our private key.
    pub key: PrivateKey,
}

/// Loads the instance certificate from `<data>/pki`, creating it (RSA 2048,
/// SHA-256, 5 years, SAN = application URI, host names and listen IPs) when
/// missing. Called once at start.
pub fn load_or_create(
    data_dir: &Path,
    application_name: &str,
    application_uri: &str,
    hosts: &[String],
) -> Result<Identity, StartError> {
    let pki = data_dir.join("pki");
    let store = CertificateStore::new(&pki);
    store.ensure_pki_path().map_err(StartError::DataDir)?;
    // The private directory is closed before any key is written into it.
    let private_dir = pki.join("private");
    std::fs::create_dir_all(&private_dir)
        .map_err(|e| StartError::DataDir(format!("{}: {e}", private_dir.display())))?;
    restrict(&private_dir, 0o700)?;
    let cert_path = store.own_certificate_path();
    let key_path = store.own_private_key_path();
    if !cert_path.exists() || !key_path.exists() {
        let mut names = vec![application_uri.to_string()];
        names.extend(hosts.iter().cloned());
        let args = X509Data {
            key_size: 2048,
            common_name: application_name.to_string(),
            organization: "uagate".into(),
            organizational_unit: "gateway".into(),
            country: "DE".into(),
            state: "-".into(),
            alt_host_names: names.into(),
            certificate_duration_days: 5 * 365,
        };
        store
            .create_and_store_application_instance_cert(&args, true)
            .map_err(StartError::DataDir)?;
        tracing::info!(path = %cert_path.display(), "created application instance certificate");
    }
    restrict(&key_path, 0o600)?;
    let cert = store.read_own_cert().map_err(StartError::DataDir)?;
    let key = store.read_own_pkey().map_err(StartError::DataDir)?;
    Ok(Identity {
        store: Arc::new(RwLock::new(store)),
        cert,
        key,
    })
}

/// Puts `der` into the trusted directory of the PKI at `pki_dir` under the
/// name the OPC UA certificate store looks it up by, so that the store
/// trusts it without first storing it as an unknown certificate (and
/// warning about it). Used by `uagate demo` for its own simulators and
/// gateway, which trust each other by construction.
pub fn place_trusted(pki_dir: &Path, der: &[u8]) -> Result<(), StartError> {
    let cert = X509::from_der(der).map_err(|e| StartError::DataDir(e.to_string()))?;
    let store = CertificateStore::new(pki_dir);
    let dir = store.trusted_certs_dir();
    std::fs::create_dir_all(&dir)
        .map_err(|e| StartError::DataDir(format!("{}: {e}", dir.display())))?;
    let path = dir.join(CertificateStore::cert_file_name(&cert));
    std::fs::write(&path, der).map_err(|e| StartError::DataDir(format!("{}: {e}", path.display())))
}

/// Sets the Unix permission bits of a key file or directory.
#[cfg(unix)]
fn restrict(path: &Path, mode: u32) -> Result<(), StartError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| StartError::DataDir(format!("{}: {e}", path.display())))
}

#[cfg(not(unix))]
fn restrict(_path: &Path, _mode: u32) -> Result<(), StartError> {
    Ok(())
}
