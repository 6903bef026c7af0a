//! The `config_document` fuzz target (fuzz/) as a bounded, deterministic
//! loop on stable: the seed corpus must be accepted, then 20,000 inputs
//! (fixed seed), most of them edits of the seeds, must keep the harness's
//! properties.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::fuzz_harness::{check, config_document};

const ITERATIONS: usize = 20_000;

fn seeds() -> Vec<Vec<u8>> {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/config_document");
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    out.sort();
    assert!(out.len() >= 3, "seed corpus in {}", dir.display());
    out
}

#[path = "../../proto/tests/common/mutate.rs"]
mod mutate;

use mutate::Rng;

/// Tokens that make an edited document more interesting than random bytes.
const TOKENS: &[&str] = &[
    "0",
    "-1",
    "4294967296",
    "18446744073709551616",
    "\"\"",
    "\"0s\"",
    "\"99999999999h\"",
    "[]",
    "{}",
    "[[field_servers]]\n",
    "[server]\n",
    "=",
    "\n",
    "\"opc.tcp://[::1]:0\"",
    "\"none\"",
    "true",
    "1e309",
    "\"\\u0000\"",
    "nan",
    "inf",
];

#[test]
fn inputs_the_fuzzer_found_keep_the_properties() {
    // Each file in fuzz/regressions/config_document once broke a property
    // (a refusal quoting a 2 KB line of the document: 8 KB of message).
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for input in mutate::regressions(&repo, "config_document") {
        config_document(&input);
    }
}

#[test]
fn the_seeds_are_accepted() {
    for seed in seeds() {
        let text = String::from_utf8(seed).unwrap();
        check(Ok(uagate_config::Config::from_toml(&text)
            .unwrap_or_else(|e| panic!("seed refused: {e}\n{text}"))));
    }
}

#[test]
fn edited_documents_keep_the_properties() {
    let seeds = seeds();
    let mut rng = Rng(0x5eed_c0f1_9000_0001);
    for _ in 0..ITERATIONS {
        let mut doc = seeds[rng.below(seeds.len())].clone();
        for _ in 0..=rng.below(4) {
            let at = rng.below(doc.len() + 1);
            match rng.below(4) {
                0 => {
                    let t = TOKENS[rng.below(TOKENS.len())].as_bytes();
                    doc.splice(at..at, t.iter().copied());
                }
                1 => {
                    let end = (at + rng.below(24)).min(doc.len());
                    doc.drain(at..end);
                }
                2 if at < doc.len() => doc[at] = rng.next() as u8,
                _ => {
                    // Replace a number or string value on a line.
                    if let Some(eq) = doc[at.min(doc.len())..].iter().position(|&b| b == b'=') {
                        let start = at + eq + 1;
                        let end = doc[start..]
                            .iter()
                            .position(|&b| b == b'\n')
                            .map_or(doc.len(), |n| start + n);
                        let t = TOKENS[rng.below(TOKENS.len())].as_bytes();
                        doc.splice(start..end, t.iter().copied());
                    }
                }
            }
        }
        config_document(&doc);
    }
}

#[test]
fn json_documents_keep_the_properties() {
    // The REST form of the seeds, then edits of it.
    let seeds = seeds();
    let mut rng = Rng(0x0dd5_eed5_0000_0002);
    let json: Vec<Vec<u8>> = seeds
        .iter()
        .map(|s| {
            let c = uagate_config::Config::from_toml(std::str::from_utf8(s).unwrap()).unwrap();
            serde_json::to_vec(&c).unwrap()
        })
        .collect();
    for j in &json {
        config_document(j);
    }
    for _ in 0..ITERATIONS / 4 {
        let mut doc = json[rng.below(json.len())].clone();
        let at = rng.below(doc.len());
        let t = TOKENS[rng.below(TOKENS.len())].as_bytes();
        let end = (at + rng.below(8)).min(doc.len());
        doc.splice(at..end, t.iter().copied());
        config_document(&doc);
    }
}
