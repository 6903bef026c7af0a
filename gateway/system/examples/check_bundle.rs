//! Checks a RAUC verity bundle's payload the way the updater does before
//! `rauc install`, and says how long it took: for trying a bundle by hand
//! and for measuring the check on a machine.
//!
//! ```text
//! cargo run --release -p uagate-system --example check_bundle -- BUNDLE [KEYRING]
//! ```
//!
//! `rauc info` (with `--keyring=KEYRING` when given, else the system's
//! keyring) checks the signature and states the verity parameters.
#![forbid(unsafe_code)]

use std::process::{Command, ExitCode};
use std::time::Instant;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(bundle) = args.next() else {
        eprintln!("usage: check_bundle BUNDLE [KEYRING]");
        return ExitCode::from(2);
    };
    let mut info = Command::new("rauc");
    info.arg("info");
    if let Some(keyring) = args.next() {
        let mut option = std::ffi::OsString::from("--keyring=");
        option.push(keyring);
        info.arg(option);
    }
    let started = Instant::now();
    let out = match info.arg("--output-format=readable").arg(&bundle).output() {
        Ok(out) => out,
        Err(e) => {
            eprintln!("cannot run rauc: {e}");
            return ExitCode::FAILURE;
        }
    };
    if !out.status.success() {
        eprintln!(
            "rauc info refused the bundle: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return ExitCode::FAILURE;
    }
    let info_took = started.elapsed();
    let Some(info) = uagate_system::parse_info(&String::from_utf8_lossy(&out.stdout)) else {
        eprintln!("rauc info printed no bundle description");
        return ExitCode::FAILURE;
    };
    let Some(verity) = info.verity else {
        println!(
            "format {}: no verity hash tree to check (rauc info {info_took:.2?})",
            info.format.as_deref().unwrap_or("unknown")
        );
        return ExitCode::SUCCESS;
    };
    let started = Instant::now();
    let checked = uagate_system::check_payload(bundle.as_ref(), &verity);
    let took = started.elapsed();
    let size = std::fs::metadata(&bundle).map(|m| m.len()).unwrap_or(0);
    let rate = size as f64 / took.as_secs_f64() / 1e6;
    match checked {
        Ok(()) => {
            println!(
                "ok: {size} bytes checked in {took:.2?} ({rate:.0} MB/s; rauc info {info_took:.2?})"
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("refused after {took:.2?}: {e}");
            ExitCode::FAILURE
        }
    }
}
