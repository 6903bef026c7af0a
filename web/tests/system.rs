//! The System page's REST side (`/api/v1/system`) against a fake `rauc`
//! program: the shell script `tests/fake-rauc/rauc`, copied into a
//! temporary directory with a real-shaped status sample beside it and
//! passed to the web state in its updater settings (no process-wide
//! environment). What an install does is written in the uploaded
//! "bundle" (see the script), or the bundle is a real verity bundle made
//! by `rauc bundle`, which the fake hands to the real `rauc info`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

#[path = "../../gateway/system/tests/support/bundles.rs"]
mod bundles;

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use common::{get, Fixture};
use serde_json::Value;

/// The fake rauc's directory: the script, `status.json`, and what it
/// writes.
struct FakeRauc {
    dir: tempfile::TempDir,
}

impl FakeRauc {
    fn new() -> FakeRauc {
        let dir = tempfile::tempdir().unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        std::fs::copy(root.join("tests/fake-rauc/rauc"), dir.path().join("rauc")).unwrap();
        std::fs::copy(
            root.join("gateway/system/tests/data/booted-a-b-good.json"),
            dir.path().join("status.json"),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("os-release"),
            "PRETTY_NAME=\"uagate appliance\"\nVERSION_ID=\"12\"\nIMAGE_VERSION=\"2025.06.1\"\n",
        )
        .unwrap();
        FakeRauc { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn settings(&self) -> uagate_system::Settings {
        uagate_system::Settings {
            rauc: self.path("rauc"),
            os_release: self.path("os-release"),
            reboot_request: self.path("reboot"),
        }
    }
}

/// A gateway whose updater uses `settings`.
async fn gateway(settings: uagate_system::Settings) -> Fixture {
    let mut f = Fixture::start().await;
    let data = f.data_dir().to_path_buf();
    f.state = f.state.clone().with_system(settings, &data);
    f
}

fn upload(token: &str, bundle: &str) -> Request<Body> {
    upload_bytes(token, bundle.as_bytes().to_vec())
}

fn upload_bytes(token: &str, bundle: Vec<u8>) -> Request<Body> {
    Request::builder()
        .method(Method::POST)
        .uri("/api/v1/system/update")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .body(Body::from(bundle))
        .unwrap()
}

fn post(uri: &str, token: &str) -> Request<Body> {
    Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap()
}

/// `GET /api/v1/system` until the update's state is no longer `busy`
/// (receiving or installing), at most 20 s.
async fn settled(f: &Fixture, token: &str) -> Value {
    for _ in 0..400 {
        let (s, b, _) = f.call(get("/api/v1/system", Some(token))).await;
        assert_eq!(s, StatusCode::OK, "{b}");
        let state = b["update"]["state"].as_str().unwrap().to_string();
        if state != "installing" && state != "receiving" {
            return b;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the update did not finish");
}

/// The audit trail's kinds, oldest first.
async fn audit_kinds(f: &Fixture, admin: &str) -> Vec<String> {
    let (s, b, _) = f.call(get("/api/v1/audit?limit=100", Some(admin))).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let mut kinds: Vec<String> = b
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .filter(|k| k.starts_with("event.system_"))
        .collect();
    kinds.sort();
    kinds
}

#[tokio::test]
async fn status_shows_the_image_the_slots_and_an_idle_update() {
    let rauc = FakeRauc::new();
    let f = gateway(rauc.settings()).await;
    let viewer = f.token("viewer").await;
    let (s, b, _) = f.call(get("/api/v1/system", Some(&viewer))).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["appliance"], true);
    assert_eq!(b["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(b["image_version"], "2025.06.1");
    assert_eq!(b["compatible"], "uagate-appliance-x86_64");
    assert_eq!(b["booted_slot"], "A");
    assert_eq!(b["message"], Value::Null);
    let slots = b["slots"].as_array().unwrap();
    assert_eq!(slots.len(), 2, "{b}");
    assert_eq!(slots[0]["slot"], "A");
    assert_eq!(slots[0]["state"], "booted");
    assert_eq!(slots[0]["boot_status"], "good");
    assert_eq!(slots[0]["version"], "0.1.1");
    assert_eq!(slots[1]["slot"], "B");
    assert_eq!(slots[1]["state"], "inactive");
    assert_eq!(slots[1]["boot_status"], "good");
    assert_eq!(slots[1]["version"], "0.1.0");
    assert_eq!(slots[1]["installed"], "2025-05-02T09:14:31Z");
    assert_eq!(b["update"]["state"], "idle");
    assert_eq!(b["update"]["message"], Value::Null);
    f.stop().await;
}

#[tokio::test]
async fn an_install_runs_in_the_background_one_at_a_time_and_shows_installed() {
    let rauc = FakeRauc::new();
    let f = gateway(rauc.settings()).await;
    let admin = f.token("admin").await;
    let (s, b, _) = f.call(upload(&admin, "version=0.2.0\nslow\n")).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    // While RAUC works, the state says what goes where, and a second
    // bundle (or a restart) is refused.
    let mut seen = Value::Null;
    for _ in 0..200 {
        let (_, b, _) = f.call(get("/api/v1/system", Some(&admin))).await;
        if b["update"]["state"] == "installing" {
            seen = b;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        seen["update"]["message"], "Installing uagate 0.2.0 into slot B…",
        "{seen}"
    );
    assert!(seen["update"]["since"].as_str().unwrap().ends_with('Z'));
    let (s, b, _) = f.call(upload(&admin, "version=0.3.0\n")).await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert_eq!(b["code"], "conflict");
    assert!(
        b["message"]
            .as_str()
            .unwrap()
            .contains("being installed already"),
        "{b}"
    );
    let (s, b, _) = f.call(post("/api/v1/system/reboot", &admin)).await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert!(!rauc.path("reboot").exists());
    // RAUC finishes.
    std::fs::write(rauc.path("go"), "").unwrap();
    let b = settled(&f, &admin).await;
    assert_eq!(b["update"]["state"], "installed", "{b}");
    assert_eq!(
        b["update"]["message"],
        "Installed 0.2.0 into slot B. Restart the appliance to use it."
    );
    assert_eq!(b["slots"][1]["version"], "0.2.0", "{b}");
    // The uploaded bundle is gone.
    let bundle = f.data_dir().join("updates").join("upload.raucb");
    assert!(!bundle.exists(), "{} is left behind", bundle.display());
    // Audited: started, then finished.
    for _ in 0..100 {
        if audit_kinds(&f, &admin).await.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        audit_kinds(&f, &admin).await,
        [
            "event.system_update_finished",
            "event.system_update_started"
        ]
    );
    f.stop().await;
}

#[tokio::test]
async fn a_bundle_with_a_bad_signature_is_refused_in_clear_words() {
    let rauc = FakeRauc::new();
    let f = gateway(rauc.settings()).await;
    let admin = f.token("admin").await;
    let (s, b, _) = f.call(upload(&admin, "version=6.6.6\nbadsig\n")).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let b = settled(&f, &admin).await;
    assert_eq!(b["update"]["state"], "failed", "{b}");
    assert_eq!(
        b["update"]["message"],
        "Refused: the update bundle's signature is not valid for this appliance. Nothing was \
         changed. RAUC: signature verification failed: Verify error:self-signed certificate in \
         certificate chain"
    );
    // Nothing was installed: B still holds 0.1.0, and RAUC refused it in
    // `rauc info`, before any `rauc install`.
    assert_eq!(b["slots"][1]["version"], "0.1.0");
    assert!(!f.data_dir().join("updates/upload.raucb").exists());
    assert!(!rauc.path("install-calls").exists());
    // Another device's bundle is named as such.
    let (s, _, _) = f.call(upload(&admin, "version=1.0\nmismatch\n")).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let b = settled(&f, &admin).await;
    let message = b["update"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "Refused: the update bundle is for another kind of device (acme-router; this \
             appliance is uagate-appliance-x86_64). Nothing was changed."
        ),
        "{message}"
    );
    for _ in 0..100 {
        if audit_kinds(&f, &admin).await.len() == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let kinds = audit_kinds(&f, &admin).await;
    assert_eq!(
        kinds,
        [
            "event.system_update_failed",
            "event.system_update_failed",
            "event.system_update_started",
            "event.system_update_started"
        ]
    );
    f.stop().await;
}

#[tokio::test]
async fn only_an_admin_updates_or_restarts_and_a_restart_makes_the_request_file() {
    let rauc = FakeRauc::new();
    let f = gateway(rauc.settings()).await;
    for role in ["viewer", "operator"] {
        let t = f.token(role).await;
        let (s, b, _) = f.call(upload(&t, "version=0.2.0\n")).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{role}: {b}");
        let (s, b, _) = f.call(post("/api/v1/system/reboot", &t)).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{role}: {b}");
    }
    assert!(!rauc.path("installed").exists());
    assert!(!rauc.path("reboot").exists());
    let admin = f.token("admin").await;
    // An empty body is no bundle.
    let (s, b, _) = f.call(upload(&admin, "")).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(settled(&f, &admin).await["update"]["state"], "idle");
    // A declared length past 2 GiB is refused before anything is stored.
    let big = Request::builder()
        .method(Method::POST)
        .uri("/api/v1/system/update")
        .header(header::AUTHORIZATION, format!("Bearer {admin}"))
        .header(header::CONTENT_LENGTH, (3u64 << 30).to_string())
        .body(Body::empty())
        .unwrap();
    let (s, b, _) = f.call(big).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE, "{b}");
    assert_eq!(b["code"], "too_large");
    let (s, b, _) = f.call(post("/api/v1/system/reboot", &admin)).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let mut made = false;
    for _ in 0..100 {
        if rauc.path("reboot").exists() {
            made = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(made, "the reboot request file was not created");
    let kinds = audit_kinds(&f, &admin).await;
    assert_eq!(kinds, ["event.system_reboot"]);
    f.stop().await;
}

#[tokio::test]
async fn off_the_appliance_it_says_so_and_refuses_changes() {
    let rauc = FakeRauc::new();
    let settings = uagate_system::Settings {
        rauc: rauc.path("no-such-rauc"),
        ..rauc.settings()
    };
    let f = gateway(settings).await;
    let admin = f.token("admin").await;
    let (s, b, _) = f.call(get("/api/v1/system", Some(&admin))).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["appliance"], false);
    assert_eq!(b["slots"], Value::Array(vec![]));
    assert_eq!(b["booted_slot"], Value::Null);
    assert!(
        b["message"]
            .as_str()
            .unwrap()
            .contains("not running on the appliance image"),
        "{b}"
    );
    let (s, b, _) = f.call(upload(&admin, "version=0.2.0\n")).await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert!(
        b["message"]
            .as_str()
            .unwrap()
            .starts_with("this gateway is not running on the appliance image"),
        "{b}"
    );
    let (s, b, _) = f.call(post("/api/v1/system/reboot", &admin)).await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert!(!rauc.path("reboot").exists());
    assert!(!f.data_dir().join("updates/upload.raucb").exists());
    f.stop().await;
}

#[tokio::test]
async fn a_tampered_verity_bundle_is_refused_before_anything_is_written() {
    let bundle = bundles::make("uagate-appliance-x86_64", "0.4.0", 2_000_000, 21);
    let rauc = FakeRauc::new();
    std::fs::copy(&bundle.keyring, rauc.path("keyring.pem")).unwrap();
    let f = gateway(rauc.settings()).await;
    let admin = f.token("admin").await;
    let mut bytes = std::fs::read(&bundle.bundle).unwrap();
    // A byte of the payload's 300th block.
    bytes[300 * 4096 + 1000] ^= 0x01;
    let (s, b, _) = f.call(upload_bytes(&admin, bytes.clone())).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let b = settled(&f, &admin).await;
    assert_eq!(b["update"]["state"], "failed", "{b}");
    assert_eq!(
        b["update"]["message"],
        "Refused: the update bundle's contents do not match its signature: it was damaged on the \
         way or altered. Nothing was changed. Check: the payload block at byte 1228800 does not \
         match the signed hash tree"
    );
    assert!(
        !rauc.path("install-calls").exists(),
        "rauc install was called"
    );
    assert_eq!(b["slots"][1]["version"], "0.1.0");
    assert!(!f.data_dir().join("updates/upload.raucb").exists());
    // The same bundle unharmed is checked and installed.
    bytes[300 * 4096 + 1000] ^= 0x01;
    let (s, b, _) = f.call(upload_bytes(&admin, bytes)).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let b = settled(&f, &admin).await;
    assert_eq!(b["update"]["state"], "installed", "{b}");
    assert_eq!(
        b["update"]["message"],
        "Installed 0.4.0 into slot B. Restart the appliance to use it."
    );
    assert!(rauc.path("install-calls").exists());
    f.stop().await;
}
