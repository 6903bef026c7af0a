//! Records when this crate was built, for the Server object's
//! BuildInfo.BuildDate (Part 5 12.4): `SOURCE_DATE_EPOCH` when set (a
//! reproducible build, such as the appliance image), otherwise the time the
//! crate's sources were last compiled.

fn main() {
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=Cargo.toml");
    let seconds = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0)
        });
    println!("cargo:rustc-env=UAGATE_BUILD_EPOCH={seconds}");
}
