//! The `trust_input` fuzz target (fuzz/) as a bounded, deterministic loop
//! on stable: the seeds get their expected verdicts, then 5,000 inputs
//! (fixed seed), most of them edits of the seeds, keep the harness's
//! properties.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::fuzz_harness::{fixture, trust_input, CA, CRL, LEAF, SIGNED};
use uagate_store::TrustVerdict;

const ITERATIONS: usize = 5_000;

#[test]
fn the_seeds_get_their_verdicts() {
    let f = fixture();
    for (name, der) in [("leaf", LEAF), ("ca", CA), ("signed", SIGNED)] {
        let v =
            f.rt.block_on(f.store.validate_certificate(der, chrono::Utc::now()))
                .unwrap();
        assert_eq!(v, TrustVerdict::Trusted, "{name}");
    }
    for seed in [LEAF, CA, SIGNED, CRL] {
        trust_input(seed);
    }
}

#[test]
fn edited_seeds_keep_the_properties() {
    let seeds = [LEAF, CA, SIGNED, CRL];
    let mut x: u64 = 0x7e57_7000_0000_0003_u64;
    let mut next = move || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    for i in 0..ITERATIONS {
        let mut v = seeds[i % seeds.len()].to_vec();
        for _ in 0..=(next() % 3) {
            let at = (next() % v.len() as u64) as usize;
            match next() % 4 {
                0 => v[at] ^= 1 << (next() % 8),
                1 => v[at] = next() as u8,
                2 => v.truncate(at),
                _ => {
                    // A length byte pushed to an extreme.
                    v[at] = [0x00, 0x7f, 0x80, 0x81, 0x84, 0xff][(next() % 6) as usize];
                }
            }
            if v.is_empty() {
                break;
            }
        }
        trust_input(&v);
    }
}
