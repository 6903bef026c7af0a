//! The TLS listener certificate: first-start generation, a live TLS
//! acceptor built from `server_config()`, and replacing the certificate
//! while a connection stays open.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use uagate_server::tls_cert::{install, TlsError, TlsIdentity, CERT_FILE, KEY_FILE, TLS_DIR};

mod tlsclient;

use tlsclient::{leaf_of, presented, stored_leaf};

/// A connector pinned to `expected` offering `versions` and one ALPN id.
fn connector_with(
    expected: &CertificateDer<'static>,
    versions: &[&'static rustls::SupportedProtocolVersion],
    alpn: &[u8],
) -> TlsConnector {
    let provider = Arc::new(ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(tlsclient::Pinned {
            expected: expected.clone().into_owned(),
            provider,
        }))
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    TlsConnector::from(Arc::new(config))
}

async fn connect(
    addr: std::net::SocketAddr,
    expected: &CertificateDer<'static>,
) -> std::io::Result<TlsStream<TcpStream>> {
    tlsclient::connect(addr, expected).await
}

async fn echo_round_trip(stream: &mut TlsStream<TcpStream>, text: &[u8]) {
    stream.write_all(text).await.unwrap();
    stream.flush().await.unwrap();
    let mut back = vec![0u8; text.len()];
    tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back, text);
}

/// A TLS echo server on 127.0.0.1 with an ephemeral port.
async fn echo_server(identity: &TlsIdentity) -> std::net::SocketAddr {
    let acceptor = TlsAcceptor::from(identity.server_config());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = [0u8; 1024];
                loop {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if tls.write_all(&buf[..n]).await.is_err() || tls.flush().await.is_err()
                            {
                                break;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

/// A fresh self-signed pair for `host`, valid from yesterday for 30 days.
fn generated_pair(host: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![host.to_string()]).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    params.not_before = epoch + (now - Duration::from_secs(86_400));
    params.not_after = epoch + (now + Duration::from_secs(30 * 86_400));
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

#[test]
fn first_start_generates_and_later_starts_load_the_same_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = vec!["gw.example".to_string(), "127.0.0.2".to_string()];
    let first = TlsIdentity::load_or_create(dir.path(), &hosts).unwrap();
    let info = first.info();
    assert_eq!(info.subject, "CN=uagate TLS");
    for san in ["gw.example", "127.0.0.2", "localhost", "127.0.0.1"] {
        assert!(info.sans.iter().any(|s| s == san), "{:?}", info.sans);
    }
    let days = (info.not_after - info.not_before).num_days();
    assert!((729..=731).contains(&days), "validity {days} days");
    assert_eq!(info.fingerprint, first.fingerprint());
    let tls = dir.path().join(TLS_DIR);
    assert!(tls.join(CERT_FILE).exists() && tls.join(KEY_FILE).exists());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&tls.join(KEY_FILE)), 0o600);
        assert_eq!(mode(&tls), 0o700);
    }
    // The key never appears in the Debug output.
    let key_pem = std::fs::read_to_string(tls.join(KEY_FILE)).unwrap();
    let body: String = key_pem.lines().nth(1).unwrap().to_string();
    assert!(!format!("{first:?}").contains(&body));

    let second = TlsIdentity::load_or_create(dir.path(), &["other.example".into()]).unwrap();
    assert_eq!(second.fingerprint(), first.fingerprint());
    assert!(!second.reload(dir.path()).unwrap());
}

#[test]
fn a_stored_pair_that_does_not_match_is_an_error_naming_the_files() {
    let dir = tempfile::tempdir().unwrap();
    TlsIdentity::load_or_create(dir.path(), &[]).unwrap();
    let (_, other_key) = generated_pair("x.example");
    let key_path = dir.path().join(TLS_DIR).join(KEY_FILE);
    std::fs::write(&key_path, other_key).unwrap();
    let err = TlsIdentity::load_or_create(dir.path(), &[]).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("does not match"), "{text}");
    assert!(text.contains(&key_path.display().to_string()), "{text}");

    // A lone certificate is reported, not silently replaced.
    std::fs::remove_file(&key_path).unwrap();
    let cert_before = std::fs::read(dir.path().join(TLS_DIR).join(CERT_FILE)).unwrap();
    let err = TlsIdentity::load_or_create(dir.path(), &[]).unwrap_err();
    assert!(err.to_string().contains("cannot read"), "{err}");
    assert!(err.to_string().contains(KEY_FILE), "{err}");
    assert_eq!(
        std::fs::read(dir.path().join(TLS_DIR).join(CERT_FILE)).unwrap(),
        cert_before
    );
    assert!(!key_path.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_swaps_the_certificate_for_new_handshakes_and_keeps_open_connections() {
    let dir = tempfile::tempdir().unwrap();
    let identity = TlsIdentity::load_or_create(dir.path(), &["gw.example".into()]).unwrap();
    let cert_a = stored_leaf(dir.path());
    let addr = echo_server(&identity).await;

    // The first handshake presents certificate A and negotiates ALPN.
    let mut first = connect(addr, &cert_a).await.unwrap();
    assert_eq!(presented(&first), cert_a);
    assert_eq!(first.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    echo_round_trip(&mut first, b"before").await;

    // Certificate B is installed and picked up.
    let (cert_b_pem, key_b_pem) = generated_pair("localhost");
    let cert_b = leaf_of(cert_b_pem.as_bytes());
    let installed = install(
        dir.path(),
        cert_b_pem.as_bytes(),
        key_b_pem.as_bytes(),
        chrono::Utc::now(),
    )
    .unwrap();
    assert_ne!(installed.fingerprint, identity.fingerprint());
    // Installing alone changes nothing in service.
    assert_eq!(presented(&connect(addr, &cert_a).await.unwrap()), cert_a);
    assert!(identity.reload(dir.path()).unwrap());
    assert_eq!(identity.fingerprint(), installed.fingerprint);
    assert!(!identity.reload(dir.path()).unwrap());

    // New handshakes present B; a client pinned to A is refused.
    let mut second = connect(addr, &cert_b).await.unwrap();
    assert_eq!(presented(&second), cert_b);
    echo_round_trip(&mut second, b"new").await;
    assert!(connect(addr, &cert_a).await.is_err());

    // The connection opened under A still works.
    echo_round_trip(&mut first, b"still alive").await;
    assert_eq!(presented(&first), cert_a);

    // An invalid install (key of another certificate) changes nothing:
    // not the files, not the live certificate.
    let tls = dir.path().join(TLS_DIR);
    let (cert_c_pem, _) = generated_pair("localhost");
    let (_, key_d_pem) = generated_pair("localhost");
    let err = install(
        dir.path(),
        cert_c_pem.as_bytes(),
        key_d_pem.as_bytes(),
        chrono::Utc::now(),
    )
    .unwrap_err();
    assert!(matches!(err, TlsError::KeyMismatch), "{err}");
    assert_eq!(
        std::fs::read_to_string(tls.join(CERT_FILE)).unwrap(),
        cert_b_pem
    );
    assert_eq!(
        std::fs::read_to_string(tls.join(KEY_FILE)).unwrap(),
        key_b_pem
    );
    assert!(!identity.reload(dir.path()).unwrap());
    assert_eq!(presented(&connect(addr, &cert_b).await.unwrap()), cert_b);

    // Files broken behind our back: reload names the problem and the
    // certificate in service stays.
    std::fs::write(tls.join(KEY_FILE), &key_d_pem).unwrap();
    let err = identity.reload(dir.path()).unwrap_err();
    assert!(err.to_string().contains("does not match"), "{err}");
    std::fs::write(tls.join(CERT_FILE), "garbage").unwrap();
    let err = identity.reload(dir.path()).unwrap_err();
    assert!(err.to_string().contains("no certificate"), "{err}");
    assert_eq!(identity.fingerprint(), installed.fingerprint);
    assert_eq!(presented(&connect(addr, &cert_b).await.unwrap()), cert_b);
    echo_round_trip(&mut first, b"unaffected").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls12_and_tls13_are_offered_with_h2_and_http11() {
    let dir = tempfile::tempdir().unwrap();
    let identity = TlsIdentity::load_or_create(dir.path(), &[]).unwrap();
    let cert = stored_leaf(dir.path());
    let addr = echo_server(&identity).await;
    let name = || ServerName::try_from("localhost").unwrap();
    for (version, expected) in [
        (&rustls::version::TLS12, rustls::ProtocolVersion::TLSv1_2),
        (&rustls::version::TLS13, rustls::ProtocolVersion::TLSv1_3),
    ] {
        for alpn in [&b"h2"[..], &b"http/1.1"[..]] {
            let tcp = TcpStream::connect(addr).await.unwrap();
            let mut tls = connector_with(&cert, &[version], alpn)
                .connect(name(), tcp)
                .await
                .unwrap();
            assert_eq!(tls.get_ref().1.protocol_version(), Some(expected));
            assert_eq!(tls.get_ref().1.alpn_protocol(), Some(alpn));
            echo_round_trip(&mut tls, b"ping").await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_picks_up_an_installed_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let identity = Arc::new(TlsIdentity::load_or_create(dir.path(), &[]).unwrap());
    let cancel = tokio_util::sync::CancellationToken::new();
    let watcher = {
        let identity = identity.clone();
        let data = dir.path().to_path_buf();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            identity
                .watch(&data, Duration::from_millis(50), cancel)
                .await
        })
    };
    let (cert, key) = generated_pair("localhost");
    let info = install(
        dir.path(),
        cert.as_bytes(),
        key.as_bytes(),
        chrono::Utc::now(),
    )
    .unwrap();
    let start = std::time::Instant::now();
    while identity.fingerprint() != info.fingerprint {
        assert!(start.elapsed() < Duration::from_secs(10), "not picked up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), watcher)
        .await
        .unwrap()
        .unwrap();
}
