//! The application instance certificate: created on first start in the
//! data directory (key file mode 0600) and loaded on every later start.

use std::path::Path;
use std::sync::Arc;

use opcua_crypto::{CertificateStore, PrivateKey, X509};
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
    write_pki_readme(&pki)?;
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
        let (der, key_pem) = new_instance_certificate(application_name, application_uri, hosts)?;
        write_private(&key_path, key_pem.as_bytes())?;
        if let Some(own) = cert_path.parent() {
            std::fs::create_dir_all(own)
                .map_err(|e| StartError::DataDir(format!("{}: {e}", own.display())))?;
        }
        std::fs::write(&cert_path, &der)
            .map_err(|e| StartError::DataDir(format!("{}: {e}", cert_path.display())))?;
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

/// What `<data>/pki/README.txt` says. The directory has the layout of
/// other OPC UA stacks (own, private, trusted, rejected), so an engineer
/// used to them may copy a certificate into `trusted/` and expect it to
/// count; uagate's trust lists are in the configuration database.
pub const PKI_README: &str = "\
This directory holds the gateway's OPC UA application instance certificate
(own/cert.der) and its private key (private/private.pem).

uagate does NOT read trusted/ or rejected/ as trust lists: a certificate
copied into trusted/ is not trusted, and one deleted there is not
distrusted. (The OPC UA library writes into them for field connections.)
The trust lists are in the configuration database, replicated to the
standby of a pair. To trust, approve or remove a certificate, or to
upload a CA's CRL, use the console's Certificates page, the REST API
(/api/v1/certificates, /api/v1/crls) or:

  uagate trust add FILE            a client or field server certificate
  uagate trust add --issuer FILE   a CA certificate
  uagate trust rejected            certificates refused as unknown
  uagate trust approve THUMBPRINT
  uagate trust remove THUMBPRINT
";

/// Writes [`PKI_README`] into `pki` when it is missing or different (a
/// newer version's words). Called at every start.
fn write_pki_readme(pki: &Path) -> Result<(), StartError> {
    let path = pki.join("README.txt");
    if std::fs::read_to_string(&path).ok().as_deref() == Some(PKI_README) {
        return Ok(());
    }
    std::fs::write(&path, PKI_README)
        .map_err(|e| StartError::DataDir(format!("{}: {e}", path.display())))
}

/// How far back a new certificate's validity starts: a field server or
/// client whose clock is behind the gateway's (a PLC set by hand, or
/// without time synchronisation) would otherwise refuse the certificate as
/// not yet valid (BadCertificateTimeInvalid) for that long.
const BACKDATED_DAYS: i64 = 1;

/// How long a new certificate is valid.
const VALID_DAYS: i64 = 5 * 365;

/// Makes a new self-signed application instance certificate and its key,
/// as Part 6 6.2.2 describes one: RSA 2048 signed with SHA-256; subject
/// `CN=<application name>, O=uagate, OU=gateway, DC=<host name>` (the
/// host name makes two appliances' subjects differ); serial number from
/// the key's SHA-256 (unique per certificate, where the OPC UA library's
/// builder numbers every certificate 42, and certificate stores that index
/// by issuer and serial confuse two of them); URI subjectAltName the
/// application URI, DNS and IP entries `hosts`; not a CA; key usages and
/// extended key usages for both client and server. Returns the DER
/// certificate and the PKCS#8 PEM key. Called by [`load_or_create`].
fn new_instance_certificate(
    application_name: &str,
    application_uri: &str,
    hosts: &[String],
) -> Result<(Vec<u8>, String), StartError> {
    use rcgen::{
        CertificateParams, CustomExtension, DistinguishedName, DnType, DnValue,
        ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
    };
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        StartError::DataDir(format!(
            "creating the application instance certificate: {what}: {e}"
        ))
    };
    let key = PrivateKey::new(2048).map_err(|e| fail("RSA key", &e))?;
    let pkcs8 = key.to_der().map_err(|e| fail("RSA key", &e))?;
    let signer = KeyPair::from_pkcs8_der_and_sign_algo(
        &pkcs8.as_bytes().to_vec().into(),
        &rcgen::PKCS_RSA_SHA256,
    )
    .map_err(|e| fail("RSA key", &e))?;
    let mut params = CertificateParams::default();
    let mut subject = DistinguishedName::new();
    subject.push(DnType::CommonName, application_name);
    subject.push(DnType::OrganizationName, "uagate");
    subject.push(DnType::OrganizationalUnitName, "gateway");
    // domainComponent (RFC 4519), an IA5String.
    const DOMAIN_COMPONENT: &[u64] = &[0, 9, 2342, 19200300, 100, 1, 25];
    if let Some(host) = hosts.first().filter(|h| !h.is_empty()) {
        if let Ok(host) = rcgen::Ia5String::try_from(host.as_str()) {
            subject.push(
                DnType::CustomDnType(DOMAIN_COMPONENT.to_vec()),
                DnValue::Ia5String(host),
            );
        }
    }
    params.distinguished_name = subject;
    let uri = rcgen::Ia5String::try_from(application_uri)
        .map_err(|e| fail("server.application_uri", &e))?;
    params.subject_alt_names.push(SanType::URI(uri));
    for host in hosts {
        let name = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => match rcgen::Ia5String::try_from(host.as_str()) {
                Ok(name) => SanType::DnsName(name),
                // A host name that is not ASCII cannot be a DNS entry.
                Err(_) => continue,
            },
        };
        if !params.subject_alt_names.contains(&name) {
            params.subject_alt_names.push(name);
        }
    }
    let today = chrono::Utc::now().date_naive();
    let day = |date: chrono::NaiveDate| {
        use chrono::Datelike;
        rcgen::date_time_ymd(date.year(), date.month() as u8, date.day() as u8)
    };
    params.not_before = day(today - chrono::Days::new(BACKDATED_DAYS as u64));
    params.not_after = day(today + chrono::Days::new(VALID_DAYS as u64));
    // BasicConstraints (critical) with cA left at its default, false: an
    // empty SEQUENCE. rcgen's ExplicitNoCa writes the default out, which
    // DER forbids and strict parsers (Python's cryptography) refuse; with
    // NoCa it writes neither that nor the SubjectKeyIdentifier, which
    // node-opcua needs equal to the AuthorityKeyIdentifier to see that the
    // certificate signs itself (else BadCertificateChainIncomplete). Both
    // are written here, the key identifier being the first 20 bytes of the
    // public key's SHA-256 (RFC 7093 4.1).
    params.is_ca = IsCa::NoCa;
    let key_id = {
        use sha2::Digest;
        sha2::Sha256::digest(signer.public_key_raw())[..20].to_vec()
    };
    params.key_identifier_method = rcgen::KeyIdMethod::PreSpecified(key_id.clone());
    let mut subject_key_id = vec![0x04, key_id.len() as u8];
    subject_key_id.extend_from_slice(&key_id);
    params
        .custom_extensions
        .push(CustomExtension::from_oid_content(
            &[2, 5, 29, 14],
            subject_key_id,
        ));
    let mut not_a_ca = CustomExtension::from_oid_content(&[2, 5, 29, 19], vec![0x30, 0x00]);
    not_a_ca.set_criticality(true);
    params.custom_extensions.push(not_a_ca);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::ContentCommitment,
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::DataEncipherment,
        KeyUsagePurpose::KeyCertSign,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    let cert = params
        .self_signed(&signer)
        .map_err(|e| fail("signing", &e))?;
    let pem = pkcs8
        .to_pem("PRIVATE KEY", Default::default())
        .map_err(|e| fail("RSA key", &e))?;
    Ok((cert.der().to_vec(), pem.to_string()))
}

/// Writes a private key file that is never readable by others, not even
/// between its creation and a later chmod.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), StartError> {
    let fail = |e: std::io::Error| StartError::DataDir(format!("{}: {e}", path.display()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(fail)?;
    std::io::Write::write_all(&mut file, bytes).map_err(fail)?;
    restrict(path, 0o600)
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
    use opcua_crypto::X509Data;

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
        let placeholder = |rdn: &str| {
            let rdn = rdn.trim();
            rdn.starts_with("C=") || rdn.starts_with("ST=")
        };
        assert!(
            !summary.subject.split(',').any(placeholder),
            "{}",
            summary.subject
        );
        assert!(id.cert.is_hostname_valid("plc-gw.example").is_ok());
        // Loaded again unchanged: the same certificate.
        let again =
            load_or_create(dir.path(), "Line 1 gateway", "urn:uagate:line1", &hosts).unwrap();
        assert_eq!(parsed(&again).thumbprint, summary.thumbprint);
        assert!(!dir.path().join("pki/own/cert.der.replaced").exists());
    }

    /// The pki directory says that its trusted/ and rejected/ are not the
    /// trust lists; an outdated text is replaced at the next start.
    #[test]
    fn the_pki_directory_says_where_the_trust_lists_are() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = vec!["gw".to_string()];
        load_or_create(dir.path(), "gw", "urn:uagate:gw", &hosts).unwrap();
        let readme = dir.path().join("pki/README.txt");
        let text = std::fs::read_to_string(&readme).unwrap();
        assert!(
            text.contains("does NOT read trusted/ or rejected/"),
            "{text}"
        );
        assert!(text.contains("uagate trust add FILE"), "{text}");
        std::fs::write(&readme, "old words").unwrap();
        load_or_create(dir.path(), "gw", "urn:uagate:gw", &hosts).unwrap();
        assert_eq!(std::fs::read_to_string(&readme).unwrap(), PKI_README);
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

    /// Two appliances get certificates that certificate stores keep apart
    /// (different serial numbers and subjects), valid from a day back so
    /// that a PLC with a slow clock takes them, and loadable by the OPC UA
    /// library as the gateway's own identity.
    #[test]
    fn new_certificates_differ_in_serial_and_subject_and_start_a_day_back() {
        use x509_cert::der::Decode;
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let id_a = load_or_create(a.path(), "uagate", "urn:uagate:a", &["gw-a".into()]).unwrap();
        let id_b = load_or_create(b.path(), "uagate", "urn:uagate:b", &["gw-b".into()]).unwrap();
        let parse = |id: &Identity| {
            x509_cert::Certificate::from_der(&id.cert.to_der().unwrap())
                .unwrap()
                .tbs_certificate
        };
        let (tbs_a, tbs_b) = (parse(&id_a), parse(&id_b));
        // Not a CA, written as DER requires (the default cA false left out:
        // Python's cryptography refuses an explicit one).
        let constraints = tbs_a
            .extensions
            .iter()
            .flatten()
            .find(|e| e.extn_id.to_string() == "2.5.29.19")
            .expect("basicConstraints");
        assert!(constraints.critical);
        assert_eq!(constraints.extn_value.as_bytes(), [0x30, 0x00]);
        // Self-signed as node-opcua sees it: the subject key identifier is
        // there and equals the authority key identifier.
        let extension = |oid: &str| {
            tbs_a
                .extensions
                .iter()
                .flatten()
                .find(|e| e.extn_id.to_string() == oid)
                .unwrap_or_else(|| panic!("extension {oid}"))
                .extn_value
                .as_bytes()
                .to_vec()
        };
        let subject_key_id = extension("2.5.29.14");
        let authority_key_id = extension("2.5.29.35");
        assert_eq!(subject_key_id.len(), 22);
        // AuthorityKeyIdentifier ::= SEQUENCE { [0] keyIdentifier, ... }
        assert_eq!(&authority_key_id[4..24], &subject_key_id[2..]);
        assert_ne!(tbs_a.serial_number, tbs_b.serial_number);
        assert_ne!(
            tbs_a.serial_number.as_bytes(),
            [42],
            "the OPC UA library's builder numbers every certificate 42"
        );
        assert_ne!(tbs_a.subject.to_string(), tbs_b.subject.to_string());
        assert!(
            tbs_a.subject.to_string().contains("gw-a"),
            "{}",
            tbs_a.subject
        );
        let not_before = tbs_a.validity.not_before.to_system_time();
        let age = std::time::SystemTime::now()
            .duration_since(not_before)
            .unwrap();
        assert!(age >= std::time::Duration::from_secs(24 * 3600), "{age:?}");
        let not_after = tbs_a.validity.not_after.to_system_time();
        assert!(not_after.duration_since(not_before).unwrap().as_secs() > 4 * 365 * 86400);
        // The key belongs to the certificate: what it signs, the
        // certificate's public key verifies.
        let mut signature = vec![0u8; 256];
        let len = id_a.key.sign_sha256(b"hello", &mut signature).unwrap();
        let public = id_a.cert.public_key().unwrap();
        assert!(public.verify_sha256(b"hello", &signature[..len]).unwrap());
        // Not readable by others.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(a.path().join("pki/private/private.pem"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "{mode:o}");
        }
    }
}
