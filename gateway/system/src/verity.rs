//! Checks the payload of a RAUC verity bundle against its dm-verity hash
//! tree before RAUC writes anything.
//!
//! RAUC checks a verity bundle's signature up front, but its payload only
//! while writing it (through dm-verity): a bundle damaged on the way, or
//! altered, fails halfway through writing the other slot. The updater
//! calls [`check_payload`] after `rauc info` (which checked the signature
//! and printed the signed [`Verity`] parameters) and before `rauc
//! install`, so such a bundle is refused with nothing written.
//!
//! A verity bundle file (RAUC 1.8) is, in this order:
//!
//! 1. the payload (a squashfs image), padded to whole 4096-byte blocks;
//! 2. its hash tree, [`Verity::tree_size`] bytes;
//! 3. the CMS signature (which holds the manifest with the parameters);
//! 4. the signature's size, a big-endian `u64`, in the last 8 bytes.
//!
//! The hash tree is dm-verity's, format 1, as `veritysetup` makes it:
//! 4096-byte data and hash blocks, SHA-256, the salt in front of every
//! hashed block (`sha256(salt ‖ block)`), 128 digests to a hash block and
//! the rest of it zeros. Level 0 holds the digests of the payload blocks,
//! each level above the digests of the blocks of the one below, up to a
//! level of one block; the levels are stored top level first, and the
//! root hash is the digest of that top block.
//!
//! The check reads the file in bounded pieces (the hash levels above
//! level 0, about 1/16000 of the payload, then 512 KiB at a time) and is
//! blocking: async callers run it with `spawn_blocking`.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::bundle::{Verity, ROOT_HASH_LEN};

/// The size of a data block and of a hash block.
pub const BLOCK: u64 = 4096;

/// The size of a SHA-256 digest.
const DIGEST: usize = ROOT_HASH_LEN;

/// How many digests a hash block holds.
const PER_BLOCK: u64 = BLOCK / DIGEST as u64;

/// The size of the signature size field at the end of the file.
const SIZE_FIELD: u64 = 8;

/// Why a bundle's payload does not pass the check. The messages name the
/// offset in the file, as RAUC's own "Verification failed at position N"
/// does, and are shown to the operator as the detail of the refusal.
#[derive(Debug, thiserror::Error)]
pub enum VerityError {
    /// The sizes the file and its signature state do not fit the file:
    /// it is truncated, or not laid out as a verity bundle.
    #[error("the file does not have the layout its signature states: {0}")]
    Layout(String),
    /// A payload block does not match its digest in the hash tree: the
    /// payload was damaged or altered. The first such block.
    #[error("the payload block at byte {offset} does not match the signed hash tree")]
    Data {
        /// The block's offset in the file.
        offset: u64,
    },
    /// A block of the hash tree does not match the digest above it (or,
    /// for the top block, the signed root hash).
    #[error("the hash tree block at byte {offset} does not match the signed root hash")]
    Tree {
        /// The block's offset in the file.
        offset: u64,
    },
    /// The file could not be read.
    #[error("cannot read the bundle: {0}")]
    Io(#[from] std::io::Error),
}

/// One level of the hash tree: where it is in the file and how many
/// blocks it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level {
    /// The offset of its first block in the file.
    pub offset: u64,
    /// Its number of hash blocks.
    pub blocks: u64,
}

/// Where the payload and the levels of its hash tree are in a bundle
/// file, worked out from the sizes ([`Layout::of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The payload's size in bytes, from the start of the file.
    pub data_size: u64,
    /// The hash tree's levels, level 0 (the payload blocks' digests)
    /// first, the top level (one block) last.
    pub levels: Vec<Level>,
}

impl Layout {
    /// The layout of a file of `file_len` bytes whose last 8 bytes say
    /// `signature_size` and whose signature says `tree_size`; a
    /// [`VerityError::Layout`] when these do not fit: the file is too
    /// short for them, the payload is not whole blocks (or less than two,
    /// which RAUC does not make), or the tree is not the size the payload
    /// needs. Called by [`check_payload`].
    pub fn of(file_len: u64, signature_size: u64, tree_size: u64) -> Result<Layout, VerityError> {
        let data_size = file_len
            .checked_sub(SIZE_FIELD)
            .and_then(|n| n.checked_sub(signature_size))
            .and_then(|n| n.checked_sub(tree_size))
            .ok_or_else(|| {
                VerityError::Layout(format!(
                    "the file is {file_len} bytes, too short for a {signature_size}-byte \
                     signature and a {tree_size}-byte hash tree"
                ))
            })?;
        if data_size % BLOCK != 0 || data_size < 2 * BLOCK {
            return Err(VerityError::Layout(format!(
                "the payload would be {data_size} bytes, not two or more whole {BLOCK}-byte blocks"
            )));
        }
        // Blocks per level, bottom up, until a level has one block.
        let mut counts = Vec::new();
        let mut n = data_size / BLOCK;
        loop {
            n = n.div_ceil(PER_BLOCK);
            counts.push(n);
            if n == 1 {
                break;
            }
        }
        let needed = counts.iter().sum::<u64>() * BLOCK;
        if needed != tree_size {
            return Err(VerityError::Layout(format!(
                "the hash tree is {tree_size} bytes, but a {data_size}-byte payload has one of \
                 {needed} bytes"
            )));
        }
        // Stored top level first.
        let mut levels = vec![
            Level {
                offset: 0,
                blocks: 0
            };
            counts.len()
        ];
        let mut offset = data_size;
        for (i, &blocks) in counts.iter().enumerate().rev() {
            levels[i] = Level { offset, blocks };
            offset += blocks * BLOCK;
        }
        Ok(Layout { data_size, levels })
    }
}

/// Checks the bundle file at `path` against the signed `verity`
/// parameters: the top hash block against the root hash, every hash
/// block against the digest above it, then every payload block against
/// its digest. `Ok` when all match; otherwise the first mismatch (a hash
/// tree block before the payload blocks it covers). Blocking: reads the
/// whole file. Called by the updater (in `spawn_blocking`) before `rauc
/// install`.
pub fn check_payload(path: &Path, verity: &Verity) -> Result<(), VerityError> {
    let file = File::open(path)?;
    let file_len = file.metadata()?.len();
    if file_len < SIZE_FIELD {
        return Err(VerityError::Layout(format!(
            "the file is {file_len} bytes, too short to be a bundle"
        )));
    }
    let mut field = [0u8; SIZE_FIELD as usize];
    file.read_exact_at(&mut field, file_len - SIZE_FIELD)?;
    let layout = Layout::of(file_len, u64::from_be_bytes(field), verity.tree_size)?;
    let salted = Sha256::new_with_prefix(&verity.salt);
    let digest =
        |block: &[u8]| -> [u8; DIGEST] { salted.clone().chain_update(block).finalize().into() };
    let levels = &layout.levels;
    let bottom = levels[0];
    let mut block = vec![0u8; BLOCK as usize];

    // The top block against the root hash.
    let top = levels[levels.len() - 1];
    file.read_exact_at(&mut block, top.offset)?;
    if digest(&block) != verity.root_hash {
        return Err(VerityError::Tree { offset: top.offset });
    }

    // The levels above level 0 lie before it (top first): in memory, each
    // one's blocks against the digests in the level above.
    let upper_start = layout.data_size;
    let mut upper = vec![0u8; usize_of(bottom.offset - upper_start)?];
    file.read_exact_at(&mut upper, upper_start)?;
    let at = |offset: u64| usize_of(offset - upper_start);
    for i in (2..levels.len()).rev() {
        let (parent, child) = (levels[i], levels[i - 1]);
        for j in 0..child.blocks {
            let offset = child.offset + j * BLOCK;
            let start = at(offset)?;
            let want = at(parent.offset)? + usize_of(j)? * DIGEST;
            if digest(&upper[start..start + BLOCK as usize])[..] != upper[want..want + DIGEST] {
                return Err(VerityError::Tree { offset });
            }
        }
    }

    // Level 0 block by block, each against the level above (the top block
    // was checked against the root), then the payload blocks it covers.
    let data_blocks = layout.data_size / BLOCK;
    let mut data = vec![0u8; (PER_BLOCK * BLOCK) as usize];
    for k in 0..bottom.blocks {
        let offset = bottom.offset + k * BLOCK;
        file.read_exact_at(&mut block, offset)?;
        if levels.len() > 1 {
            let want = at(levels[1].offset)? + usize_of(k)? * DIGEST;
            if digest(&block)[..] != upper[want..want + DIGEST] {
                return Err(VerityError::Tree { offset });
            }
        }
        let first = k * PER_BLOCK;
        let count = PER_BLOCK.min(data_blocks - first);
        let chunk = &mut data[..usize_of(count * BLOCK)?];
        file.read_exact_at(chunk, first * BLOCK)?;
        for (b, (payload, want)) in chunk
            .chunks_exact(BLOCK as usize)
            .zip(block.chunks_exact(DIGEST))
            .enumerate()
        {
            if digest(payload)[..] != *want {
                return Err(VerityError::Data {
                    offset: (first + b as u64) * BLOCK,
                });
            }
        }
    }
    Ok(())
}

/// A size or index as `usize`, for a buffer (a layout error where it does
/// not fit, on a 32-bit target).
fn usize_of(n: u64) -> Result<usize, VerityError> {
    usize::try_from(n).map_err(|_| VerityError::Layout(format!("{n} bytes do not fit in memory")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(layout: &Layout) -> Vec<(u64, u64)> {
        layout.levels.iter().map(|l| (l.offset, l.blocks)).collect()
    }

    #[test]
    fn the_levels_are_stored_top_first_after_the_payload() {
        // The 5 MB bundle made in the experiment: 1221 payload blocks, 10
        // level-0 blocks and a top block, a 1040-byte signature.
        let data = 1221 * BLOCK;
        let l = Layout::of(data + 45056 + 1040 + 8, 1040, 45056).expect("fits");
        assert_eq!(l.data_size, data);
        assert_eq!(sizes(&l), [(data + BLOCK, 10), (data, 1)]);
        // 128 payload blocks need one hash block, 129 three.
        let l = Layout::of(128 * BLOCK + BLOCK + 8, 0, BLOCK).expect("fits");
        assert_eq!(sizes(&l), [(128 * BLOCK, 1)]);
        let l = Layout::of(129 * BLOCK + 3 * BLOCK + 8, 0, 3 * BLOCK).expect("fits");
        assert_eq!(sizes(&l), [(130 * BLOCK, 2), (129 * BLOCK, 1)]);
        // The appliance's 0.1.1 bundle: 36235 payload blocks, three levels.
        let l = Layout::of(36235 * BLOCK + 1_179_648 + 1296 + 8, 1296, 1_179_648).expect("fits");
        assert_eq!(
            l.levels.iter().map(|l| l.blocks).collect::<Vec<_>>(),
            [284, 3, 1]
        );
    }

    #[test]
    fn sizes_that_do_not_fit_the_file_are_a_layout_error() {
        let layout = |len, sig, tree| match Layout::of(len, sig, tree) {
            Err(VerityError::Layout(why)) => why,
            other => panic!("{other:?}"),
        };
        assert!(layout(100, 1000, 0).contains("too short"));
        assert!(layout(10 * BLOCK, u64::MAX, BLOCK).contains("too short"));
        assert!(layout(10 * BLOCK, 0, u64::MAX).contains("too short"));
        // Not whole blocks.
        assert!(layout(10 * BLOCK + 9, 0, BLOCK).contains("whole"));
        // One payload block: RAUC does not make such bundles.
        assert!(layout(2 * BLOCK + 8, 0, BLOCK).contains("whole"));
        // A tree of the wrong size for its payload.
        assert!(layout(200 * BLOCK + 8, 0, BLOCK).contains("has one of"));
    }
}
