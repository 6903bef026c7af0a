//! The `rest_body` fuzz target (fuzz/) as a bounded, deterministic loop on
//! stable: a valid body for every fed route first (each must be accepted,
//! so the loop starts from bodies that get past the first checks), then
//! edits of them (fixed seed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../../gateway/proto/tests/common/mutate.rs"]
mod mutate;

use common::fuzz_harness::{call, rest_body, rest_fixture, ROUTES};
use mutate::Rng;
use serde_json::json;

const ITERATIONS: usize = 1_500;

#[test]
fn rest_bodies_keep_the_properties() {
    let r = rest_fixture();
    let config = r.rt.block_on(async {
        let admin = r.admin().await;
        let (s, doc, _) = r
            .fixture
            .call(common::get("/api/v1/config", Some(&admin)))
            .await;
        assert!(s.is_success(), "{doc}");
        doc
    });
    // Room for a trusted owner's connection reserve.
    let mut config = config;
    config["server"]["max_channel_count"] = json!(120);
    let cert = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/trust_input/leaf.der"),
    )
    .unwrap();
    let valid: Vec<(usize, Vec<u8>)> = vec![
        (0, config.to_string().into_bytes()),
        (1, config.to_string().into_bytes()),
        (2, json!({"level": 200, "reason": "fuzz seed", "expires_in_s": 300}).to_string().into_bytes()),
        (3, json!({"username": "fuzz-seed", "password": "fuzz seed password", "role": "viewer"}).to_string().into_bytes()),
        (4, json!({"key": "scada", "weight": 4, "reservations": [{"stage": "request_execution", "reserved": 2}], "ingress": ["10.8.0.0/16"]}).to_string().into_bytes()),
        (5, json!({"cidr": "10.9.0.0/16", "class": "reconnect"}).to_string().into_bytes()),
        (6, json!({"name": "fuzz", "endpoints": ["opc.tcp://127.0.0.1:9"], "security_mode": "none", "security_policy": "None"}).to_string().into_bytes()),
        (7, cert.clone()),
        (8, std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/trust_input/crl.der")).unwrap()),
    ];
    for (route, body) in &valid {
        let (method, uri, content_type) = ROUTES[*route];
        let (status, answer) = call(method, uri, content_type, body.clone());
        assert!(
            status.is_success(),
            "seed {method} {uri}: {status} {answer}"
        );
    }
    if std::env::var_os("UAGATE_WRITE_SEEDS").is_some() {
        // `UAGATE_WRITE_SEEDS=1 cargo test -p uagate-web --test fuzz_smoke`:
        // the valid bodies as the target's seed corpus (route byte first).
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/rest_body");
        std::fs::create_dir_all(&dir).unwrap();
        for (route, body) in &valid {
            let mut data = vec![*route as u8];
            data.extend_from_slice(body);
            std::fs::write(dir.join(format!("route-{route}")), data).unwrap();
        }
    }
    let mut rng = Rng(0x5eed_0000_0000_0007);
    let mut next = move || rng.next();
    const TOKENS: &[&str] = &[
        "0",
        "-1",
        "1e999",
        "\"\"",
        "null",
        "[]",
        "{}",
        "\"\\u0000\"",
        "99999999999999999999",
        "true",
    ];
    for _ in 0..ITERATIONS {
        let (route, body) = &valid[(next() % valid.len() as u64) as usize];
        let mut body = body.clone();
        for _ in 0..=(next() % 3) {
            let at = (next() % (body.len() as u64 + 1)) as usize;
            match next() % 3 {
                0 => {
                    let t = TOKENS[(next() % TOKENS.len() as u64) as usize].as_bytes();
                    let end = (at + (next() % 6) as usize).min(body.len());
                    body.splice(at..end, t.iter().copied());
                }
                1 if at < body.len() => body[at] = next() as u8,
                _ => body.truncate(at),
            }
        }
        let mut data = vec![*route as u8];
        data.extend_from_slice(&body);
        rest_body(&data);
    }
}
