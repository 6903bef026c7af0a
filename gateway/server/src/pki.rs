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
/// SHA-256, 5 years, subjectAltName: the application URI as a URI, host
/// names and listen IPs) when missing, or when the one there does not name
/// `application_uri` as its URI (made by an earlier version, or the
/// configured `server.application_uri` changed). Called once at start.
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
    let replace = cert_path.exists() && key_path.exists() && {
        let der = std::fs::read(&cert_path)
            .map_err(|e| StartError::DataDir(format!("{}: {e}", cert_path.display())))?;
        let carried = uagate_store::certificate_application_uri(&der)
            .ok()
            .flatten();
        if carried.as_deref() == Some(application_uri) {
            false
        } else {
            retire(&cert_path, &key_path, &der)?;
            tracing::warn!(
                path = %cert_path.display(),
                carried = carried.as_deref().unwrap_or("none"),
                application_uri,
                "the application instance certificate does not name the application URI as its \
                 URI subjectAltName (OPC UA Part 6 6.2.2), so clients refuse it: replaced by a \
                 new one (the old one is kept beside it, ending in .replaced); field servers and \
                 clients that trusted the old certificate must trust the new one"
            );
            true
        }
    };
    if replace || !cert_path.exists() || !key_path.exists() {
        let mut args = X509Data {
            key_size: 2048,
            common_name: application_name.to_string(),
            organization: "uagate".into(),
            organizational_unit: "gateway".into(),
            // No placeholder country or state: an empty entry is left out.
            country: String::new(),
            state: String::new(),
            alt_host_names: Default::default(),
            certificate_duration_days: 5 * 365,
        };
        // Part 6 6.2.2: the application URI is a URI entry (clients compare
        // it with the server's ApplicationUri), the host names and addresses
        // DNS and IP entries.
        args.alt_host_names.add_uri(application_uri);
        args.alt_host_names.add_addresses(hosts);
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

/// Keeps a certificate being replaced, and its key, beside the new ones
/// (`<file>.replaced`, the key still 0600): an operator who must go back
/// to it can.
fn retire(cert_path: &Path, key_path: &Path, der: &[u8]) -> Result<(), StartError> {
    let keep = |path: &Path| {
        let mut name = path.as_os_str().to_owned();
        name.push(".replaced");
        std::path::PathBuf::from(name)
    };
    std::fs::write(keep(cert_path), der)
        .map_err(|e| StartError::DataDir(format!("{}: {e}", cert_path.display())))?;
    std::fs::rename(key_path, keep(key_path))
        .map_err(|e| StartError::DataDir(format!("{}: {e}", key_path.display())))?;
    restrict(&keep(key_path), 0o600)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(identity: &Identity) -> uagate_store::CertSummary {
        uagate_store::describe_certificate(&identity.cert.to_der().unwrap()).unwrap()
    }

    /// What a strict OPC UA client checks (Part 6 6.2.2): the application
    /// URI is the certificate's URI subjectAltName, and the host names are
    /// DNS entries; no placeholder country or state in the subject.
    #[test]
    fn a_new_certificate_names_the_application_uri_as_a_uri() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = ["plc-gw.example".to_string(), "192.0.2.7".to_string()];
        let id = load_or_create(dir.path(), "Line 1 gateway", "urn:uagate:line1", &hosts).unwrap();
        let summary = parsed(&id);
        assert_eq!(summary.application_uri.as_deref(), Some("urn:uagate:line1"));
        assert!(!summary.subject.contains("C="), "{}", summary.subject);
        assert!(!summary.subject.contains("ST="), "{}", summary.subject);
        assert!(id.cert.is_hostname_valid("plc-gw.example").is_ok());
        // Loaded again unchanged: the same certificate.
        let again =
            load_or_create(dir.path(), "Line 1 gateway", "urn:uagate:line1", &hosts).unwrap();
        assert_eq!(parsed(&again).thumbprint, summary.thumbprint);
        assert!(!dir.path().join("pki/own/cert.der.replaced").exists());
    }

    /// A certificate that does not carry the application URI as its URI (an
    /// earlier version wrote it as a DNS name; or the configured URI
    /// changed) is replaced at start, and the old one is kept beside it.
    #[test]
    fn a_certificate_without_the_uri_is_replaced_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertificateStore::new(&dir.path().join("pki"));
        store.ensure_pki_path().unwrap();
        // The form an earlier version made: every name as a DNS or IP entry.
        let old = X509Data {
            key_size: 2048,
            common_name: "gw".into(),
            organization: "uagate".into(),
            organizational_unit: "gateway".into(),
            country: "DE".into(),
            state: "-".into(),
            alt_host_names: vec!["urn:uagate:line1".to_string(), "localhost".to_string()].into(),
            certificate_duration_days: 365,
        };
        store
            .create_and_store_application_instance_cert(&old, true)
            .unwrap();
        let old_der = std::fs::read(store.own_certificate_path()).unwrap();
        assert_eq!(
            uagate_store::certificate_application_uri(&old_der).unwrap(),
            None,
            "the old form has no URI entry"
        );
        let id = load_or_create(dir.path(), "gw", "urn:uagate:line1", &[]).unwrap();
        assert_eq!(
            parsed(&id).application_uri.as_deref(),
            Some("urn:uagate:line1")
        );
        let kept = std::fs::read(dir.path().join("pki/own/cert.der.replaced")).unwrap();
        assert_eq!(kept, old_der);
        assert!(dir.path().join("pki/private/private.pem.replaced").exists());
        // Another configured URI: replaced again.
        let first = parsed(&id).thumbprint;
        let id = load_or_create(dir.path(), "gw", "urn:plant:gw-a", &[]).unwrap();
        assert_eq!(
            parsed(&id).application_uri.as_deref(),
            Some("urn:plant:gw-a")
        );
        assert_ne!(parsed(&id).thumbprint, first);
    }
}
