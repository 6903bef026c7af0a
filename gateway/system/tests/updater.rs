//! The [`Updater`] against the fake `rauc` (`tests/fake-rauc/rauc`,
//! copied into a temporary directory with a real-shaped status sample),
//! with real verity bundles made by `rauc bundle`: the fake hands `rauc
//! info` on a real bundle to the real RAUC, so the signature and the
//! verity parameters the gateway checks the payload with are real, and it
//! records every `rauc install` in `install-calls`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/bundles.rs"]
mod bundles;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use uagate_system::{DetailBy, Settings, SystemError, UpdateState, Updater};

/// The fake rauc's directory, with `keyring.pem` for `bundle`.
struct Fake {
    dir: tempfile::TempDir,
}

impl Fake {
    fn new(keyring: &Path) -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        std::fs::copy(root.join("tests/fake-rauc/rauc"), dir.path().join("rauc")).unwrap();
        std::fs::copy(
            root.join("gateway/system/tests/data/booted-a-b-good.json"),
            dir.path().join("status.json"),
        )
        .unwrap();
        std::fs::copy(keyring, dir.path().join("keyring.pem")).unwrap();
        Fake { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn updater(&self) -> Arc<Updater> {
        Arc::new(Updater::new(
            Settings {
                rauc: self.path("rauc"),
                os_release: self.path("os-release"),
                reboot_request: self.path("reboot"),
            },
            self.path("updates"),
        ))
    }

    /// Whether the fake's `rauc install` ran.
    fn installed_anything(&self) -> bool {
        self.path("install-calls").exists()
    }
}

/// Uploads `bytes` to `updater` and installs them.
async fn install(
    updater: &Arc<Updater>,
    bytes: &[u8],
) -> Result<uagate_system::Update, SystemError> {
    let mut upload = updater.receive().await.unwrap();
    for piece in bytes.chunks(1 << 20) {
        upload.write(piece).await.unwrap();
    }
    upload.install().await
}

#[tokio::test]
async fn a_good_verity_bundle_is_checked_then_installed() {
    let b = bundles::make("uagate-appliance-x86_64", "0.3.0", 3_000_000, 11);
    let fake = Fake::new(&b.keyring);
    let updater = fake.updater();
    let update = install(&updater, &std::fs::read(&b.bundle).unwrap())
        .await
        .expect("installed");
    assert_eq!(update.version.as_deref(), Some("0.3.0"));
    assert_eq!(update.slot.as_deref(), Some("B"));
    assert!(fake.installed_anything());
    assert!(matches!(updater.state(), UpdateState::Installed { .. }));
}

#[tokio::test]
async fn a_tampered_verity_bundle_is_refused_before_rauc_install() {
    let b = bundles::make("uagate-appliance-x86_64", "0.3.0", 3_000_000, 12);
    let fake = Fake::new(&b.keyring);
    let updater = fake.updater();
    let mut bytes = std::fs::read(&b.bundle).unwrap();
    bytes[1_234_567] ^= 0x10;
    let err = install(&updater, &bytes).await.unwrap_err();
    let SystemError::Install { message, refused } = err else {
        panic!("{err:?}")
    };
    assert!(refused);
    let expected = "Refused: the update bundle's contents do not match its signature: it was \
                    damaged on the way or altered. Nothing was changed. Check: the payload block \
                    at byte 1232896 does not match the signed hash tree";
    assert_eq!(message, expected);
    let UpdateState::Failed { failure, .. } = updater.state() else {
        panic!("{:?}", updater.state())
    };
    assert!(failure.refused);
    assert_eq!(failure.detail_by, DetailBy::Check);
    assert_eq!(failure.message(), expected);
    assert!(!fake.installed_anything(), "rauc install was called");
    assert!(!fake.path("updates/upload.raucb").exists());
    // RAUC agrees on where it is damaged.
    std::fs::write(&b.bundle, &bytes).unwrap();
    assert_eq!(b.extract_failure(), Some(1_232_896));
    // A truncated bundle: RAUC itself refuses its signature.
    let err = install(&updater, &bytes[..bytes.len() - 100])
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with(
            "Refused: the update bundle's signature is not valid for this appliance. Nothing was \
             changed. RAUC: "
        ),
        "{message}"
    );
    assert!(!fake.installed_anything(), "rauc install was called");
}

#[tokio::test]
async fn a_bundle_signed_by_another_key_is_refused_by_rauc_info() {
    let b = bundles::make("uagate-appliance-x86_64", "0.3.0", 3_000_000, 13);
    let other = bundles::make("uagate-appliance-x86_64", "0.3.0", 3_000_000, 14);
    // The appliance trusts `other`'s key, not `b`'s.
    let fake = Fake::new(&other.keyring);
    let updater = fake.updater();
    let err = install(&updater, &std::fs::read(&b.bundle).unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, SystemError::Install { refused: true, .. }));
    let UpdateState::Failed { failure, .. } = updater.state() else {
        panic!("{:?}", updater.state())
    };
    assert_eq!(
        failure.reason,
        "the update bundle's signature is not valid for this appliance. Nothing was changed."
    );
    assert_eq!(failure.detail_by, DetailBy::Rauc);
    let detail = failure.detail.unwrap();
    assert!(
        detail.starts_with("signature verification failed"),
        "{detail}"
    );
    assert!(!fake.installed_anything(), "rauc install was called");
}

#[tokio::test]
async fn a_text_bundle_with_a_bad_signature_is_refused_without_installing() {
    let dir = tempfile::tempdir().unwrap();
    let keyring = dir.path().join("none.pem");
    std::fs::write(&keyring, "").unwrap();
    let fake = Fake::new(&keyring);
    let updater = fake.updater();
    let err = install(&updater, b"version=6.6.6\nbadsig\n")
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Refused: the update bundle's signature is not valid for this appliance. Nothing was \
         changed. RAUC: signature verification failed: Verify error:self-signed certificate in \
         certificate chain"
    );
    assert!(!fake.installed_anything(), "rauc install was called");
    // A plain (text) bundle is not checked by the gateway: RAUC installs it.
    let update = install(&updater, b"version=0.2.0\n")
        .await
        .expect("installed");
    assert_eq!(update.version.as_deref(), Some("0.2.0"));
    assert!(fake.installed_anything());
}
