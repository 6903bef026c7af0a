//! Real RAUC verity bundles for tests, made by `rauc bundle` (RAUC 1.8)
//! in a temporary directory and signed with a throw-away key, and what
//! `rauc info` says about them. Shared by `gateway/system/tests/verity.rs`
//! and `web/tests/system.rs` (included with `#[path]`).
//!
//! Needs the programs `rauc`, `mksquashfs` and `openssl` (Debian packages
//! rauc, squashfs-tools and openssl; `scripts/test-setup.sh` installs
//! them): a test fails naming the package when one is missing.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A signed bundle and the certificate that verifies it.
pub struct Signed {
    /// The directory holding everything; removed when dropped.
    pub dir: tempfile::TempDir,
    /// The bundle file.
    pub bundle: PathBuf,
    /// The signing certificate, the keyring for `rauc info --keyring`.
    pub keyring: PathBuf,
}

/// Fails the test unless `program` is on `PATH`, naming the Debian
/// package that has it.
fn need(program: &str, package: &str) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path).any(|d| d.join(program).is_file());
    assert!(
        found,
        "`{program}` is not installed: these tests make real RAUC bundles; install the Debian \
         package {package} (scripts/test-setup.sh installs rauc, squashfs-tools and openssl)"
    );
}

/// Runs a command; panics with its output when it fails.
fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Makes a verity bundle with `compatible` and `version` whose one image
/// is `image_bytes` of pseudo-random bytes (from `seed`), stored without
/// compression so the payload is about that size.
pub fn make(compatible: &str, version: &str, image_bytes: usize, seed: u64) -> Signed {
    need("rauc", "rauc");
    need("mksquashfs", "squashfs-tools");
    need("openssl", "openssl");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (key, cert) = (d.join("key.pem"), d.join("cert.pem"));
    run(Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "3650",
            "-subj",
            "/CN=uagate test bundles",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert));
    let content = d.join("content");
    std::fs::create_dir(&content).unwrap();
    std::fs::write(
        content.join("manifest.raucm"),
        format!(
            "[update]\ncompatible={compatible}\nversion={version}\n\n[bundle]\nformat=verity\n\n\
             [image.rootfs]\nfilename=rootfs.img\n"
        ),
    )
    .unwrap();
    write_noise(&content.join("rootfs.img"), image_bytes, seed);
    let bundle = d.join("update.raucb");
    run(Command::new("rauc")
        .arg("bundle")
        .arg("--mksquashfs-args=-noI -noD -noF -noX")
        .arg(format!("--cert={}", cert.display()))
        .arg(format!("--key={}", key.display()))
        .arg(&content)
        .arg(&bundle));
    std::fs::remove_dir_all(&content).unwrap();
    Signed {
        dir,
        bundle,
        keyring: cert,
    }
}

/// Writes `len` pseudo-random bytes (xorshift from `seed`) to `path`.
fn write_noise(path: &Path, len: usize, seed: u64) {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut x = seed | 1;
    let mut left = len;
    while left > 0 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = x.to_le_bytes();
        let n = left.min(8);
        file.write_all(&bytes[..n]).unwrap();
        left -= n;
    }
    file.flush().unwrap();
}

impl Signed {
    /// `rauc info --output-format=readable` on the bundle with its
    /// keyring: the standard output.
    pub fn info(&self) -> String {
        let out = run(Command::new("rauc")
            .arg("info")
            .arg(format!("--keyring={}", self.keyring.display()))
            .arg("--output-format=readable")
            .arg(&self.bundle));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Inverts the bits of the byte at `offset` of the bundle (twice
    /// restores it).
    pub fn flip(&self, offset: u64) {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.bundle)
            .unwrap();
        let mut b = [0u8];
        f.seek(SeekFrom::Start(offset)).unwrap();
        f.read_exact(&mut b).unwrap();
        f.seek(SeekFrom::Start(offset)).unwrap();
        f.write_all(&[!b[0]]).unwrap();
    }

    /// What `rauc extract` (which checks the payload against the hash
    /// tree) says: `None` when it extracted the bundle, else the position
    /// from its "Verification failed at position N".
    pub fn extract_failure(&self) -> Option<u64> {
        let to = self.dir.path().join("extracted");
        let _ = std::fs::remove_dir_all(&to);
        let out = Command::new("rauc")
            .arg("extract")
            .arg(format!("--keyring={}", self.keyring.display()))
            .arg(&self.bundle)
            .arg(&to)
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&to);
        if out.status.success() {
            return None;
        }
        let text = String::from_utf8_lossy(&out.stderr);
        let position = text
            .split("Verification failed at position ")
            .nth(1)
            .and_then(|rest| rest.split('.').next())
            .and_then(|n| n.parse().ok());
        Some(position.unwrap_or_else(|| panic!("rauc extract failed otherwise: {text}")))
    }

    /// The bundle file's length.
    pub fn len(&self) -> u64 {
        std::fs::metadata(&self.bundle).unwrap().len()
    }
}
