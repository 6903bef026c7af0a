//! Deterministic pseudo-random inputs for the stable smoke runs of the fuzz
//! targets: a small generator and a byte mutator. Shared by the smoke tests
//! of several crates (the others include this file with `#[path]`).
#![allow(dead_code)]

/// xorshift64*: small, deterministic, good enough to pick mutations.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Either random bytes or `seed` with a few random edits.
pub fn input(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    if rng.below(2) == 0 {
        let n = rng.below(300);
        return rng.bytes(n);
    }
    let mut v = seed.to_vec();
    for _ in 0..=rng.below(4) {
        if v.is_empty() {
            break;
        }
        let at = rng.below(v.len());
        match rng.below(6) {
            0 => v[at] ^= 1 << rng.below(8),
            1 => v[at] = rng.next() as u8,
            2 => v.truncate(at),
            3 => {
                let n = rng.below(16) + 1;
                let junk = rng.bytes(n);
                v.splice(at..at, junk);
            }
            // Size fields and the like: overwrite four bytes with an extreme value.
            4 => {
                let x = [0u32, 1, 8, 0x7fff_ffff, u32::MAX][rng.below(5)];
                for (i, b) in x.to_le_bytes().into_iter().enumerate() {
                    if let Some(slot) = v.get_mut(at + i) {
                        *slot = b;
                    }
                }
            }
            _ => {
                let end = (at + rng.below(64)).min(v.len());
                let dup = v[at..end].to_vec();
                v.splice(at..at, dup);
            }
        }
    }
    v
}

/// The inputs kept in `<repo>/fuzz/regressions/<target>` (each once broke
/// a property of that fuzz target), sorted by name; `repo` is the
/// repository root. Panics when there are none, so that a moved directory
/// does not silently skip them.
pub fn regressions(repo: &std::path::Path, target: &str) -> Vec<Vec<u8>> {
    let dir = repo.join("fuzz/regressions").join(target);
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "regression inputs in {}", dir.display());
    paths
        .iter()
        .map(|p| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect()
}
