//! The payload check ([`uagate_system::check_payload`]) against real
//! verity bundles made by `rauc bundle` (RAUC 1.8), with the parameters
//! `rauc info` prints for them read by [`uagate_system::parse_info`];
//! `rauc extract`, which checks the payload itself, is the reference for
//! where a damaged block is. A bundle of 70 MB has a hash tree of three
//! levels, one of 3 MB of two.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/bundles.rs"]
mod bundles;

use uagate_system::verity::{Layout, BLOCK};
use uagate_system::{check_payload, parse_info, Verity, VerityError};

/// A three-level bundle: more than 128 × 128 payload blocks.
const BIG: usize = 70_000_000;
/// A two-level bundle.
const SMALL: usize = 3_000_000;

/// The bundle's verity parameters as `rauc info` states them, and its
/// layout.
fn verity_of(b: &bundles::Signed) -> (Verity, Layout) {
    let info = parse_info(&b.info()).expect("rauc info output");
    assert_eq!(info.format.as_deref(), Some("verity"));
    assert_eq!(info.version.as_deref(), Some("1.2.3"));
    assert_eq!(info.compatible.as_deref(), Some("uagate-test"));
    let verity = info.verity.expect("verity parameters");
    let data = std::fs::read(&b.bundle).unwrap();
    let tail: [u8; 8] = data[data.len() - 8..].try_into().unwrap();
    let layout = Layout::of(b.len(), u64::from_be_bytes(tail), verity.tree_size).unwrap();
    (verity, layout)
}

#[test]
fn a_good_bundle_passes_and_has_the_layout_rauc_made() {
    let b = bundles::make("uagate-test", "1.2.3", BIG, 1);
    let (verity, layout) = verity_of(&b);
    assert_eq!(layout.levels.len(), 3, "{layout:?}");
    // The payload is the squashfs image: it starts with its magic.
    let head = std::fs::read(&b.bundle).unwrap();
    assert_eq!(&head[..4], b"hsqs");
    assert!(layout.data_size > BIG as u64);
    check_payload(&b.bundle, &verity).expect("a good bundle passes");
    assert_eq!(b.extract_failure(), None);
    // Another salt, another root hash: not this bundle's tree.
    let mut other = verity.clone();
    other.salt[0] ^= 1;
    assert!(matches!(
        check_payload(&b.bundle, &other),
        Err(VerityError::Tree { offset }) if offset == layout.data_size
    ));
    let mut other = verity.clone();
    other.root_hash[31] ^= 0x80;
    assert!(matches!(
        check_payload(&b.bundle, &other),
        Err(VerityError::Tree { .. })
    ));
}

#[test]
fn a_flipped_payload_byte_is_found_at_its_block_where_rauc_finds_it() {
    let b = bundles::make("uagate-test", "1.2.3", SMALL, 2);
    let (verity, layout) = verity_of(&b);
    assert_eq!(layout.levels.len(), 2, "{layout:?}");
    let last = layout.data_size - 1;
    for at in [0, 1_000_000, 129 * BLOCK + 17, last] {
        b.flip(at);
        let block = at / BLOCK * BLOCK;
        match check_payload(&b.bundle, &verity) {
            Err(VerityError::Data { offset }) => assert_eq!(offset, block, "byte {at}"),
            other => panic!("byte {at}: {other:?}"),
        }
        if at == 1_000_000 {
            assert_eq!(b.extract_failure(), Some(block), "rauc extract");
        }
        b.flip(at);
    }
    // Two damaged blocks: the first is named.
    b.flip(2_000_000);
    b.flip(500_000);
    let err = check_payload(&b.bundle, &verity).unwrap_err();
    assert!(
        matches!(err, VerityError::Data { offset } if offset == 500_000 / BLOCK * BLOCK),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "the payload block at byte 499712 does not match the signed hash tree"
    );
    b.flip(2_000_000);
    b.flip(500_000);
    check_payload(&b.bundle, &verity).expect("restored");
}

#[test]
fn a_flipped_hash_tree_byte_is_found_on_every_level() {
    let b = bundles::make("uagate-test", "1.2.3", BIG, 3);
    let (verity, layout) = verity_of(&b);
    let [bottom, middle, top] = layout.levels[..] else {
        panic!("{layout:?}")
    };
    assert_eq!(top.blocks, 1);
    // Level 0's third block, level 1's second block, the top block (a
    // digest in it, then its zero padding).
    for at in [
        bottom.offset + 2 * BLOCK + 100,
        middle.offset + BLOCK + 5,
        top.offset + 40,
        top.offset + BLOCK - 1,
    ] {
        b.flip(at);
        match check_payload(&b.bundle, &verity) {
            Err(VerityError::Tree { offset }) => {
                assert_eq!(offset, at / BLOCK * BLOCK, "byte {at}")
            }
            other => panic!("byte {at}: {other:?}"),
        }
        b.flip(at);
    }
    // Level 0's padding after the last digest (the last payload block's).
    let data_blocks = layout.data_size / BLOCK;
    let padding = bottom.offset + data_blocks * 32 + 3;
    assert!(padding < bottom.offset + bottom.blocks * BLOCK);
    b.flip(padding);
    assert!(matches!(
        check_payload(&b.bundle, &verity),
        Err(VerityError::Tree { offset }) if offset == padding / BLOCK * BLOCK
    ));
    b.flip(padding);
    check_payload(&b.bundle, &verity).expect("restored");
}

#[test]
fn a_truncated_or_lengthened_bundle_is_refused() {
    let b = bundles::make("uagate-test", "1.2.3", SMALL, 4);
    let (verity, layout) = verity_of(&b);
    let whole = std::fs::read(&b.bundle).unwrap();
    let layout_error = |bytes: &[u8]| {
        std::fs::write(&b.bundle, bytes).unwrap();
        match check_payload(&b.bundle, &verity) {
            Err(VerityError::Layout(why)) => why,
            other => panic!("{} bytes: {other:?}", bytes.len()),
        }
    };
    // Cut short: the last 8 bytes are no longer the signature's size.
    let why = layout_error(&whole[..whole.len() - 1]);
    assert!(why.contains("too short"), "{why}");
    layout_error(&whole[..whole.len() - 4096]);
    // Cut inside the payload, the signature and its size kept.
    let sig = whole.len() as u64 - layout.levels[0].offset - layout.levels[0].blocks * BLOCK;
    let tail = &whole[whole.len() - sig as usize..];
    let cut = [&whole[..BLOCK as usize * 100], tail].concat();
    let why = layout_error(&cut);
    assert!(why.contains("hash tree"), "{why}");
    // A block more in front: a payload of one block more (a tree of
    // another size, or the first block not the one hashed).
    let longer = [&[0u8; BLOCK as usize][..], &whole].concat();
    std::fs::write(&b.bundle, longer).unwrap();
    let err = check_payload(&b.bundle, &verity).unwrap_err();
    assert!(
        matches!(
            err,
            VerityError::Data { offset: 0 } | VerityError::Layout(_)
        ),
        "{err:?}"
    );
    // Too short to be a bundle at all.
    let why = layout_error(b"hsqs");
    assert!(why.contains("4 bytes"), "{why}");
    // The stated tree size is not this payload's.
    std::fs::write(&b.bundle, &whole).unwrap();
    let mut wrong = verity.clone();
    wrong.tree_size += BLOCK;
    assert!(matches!(
        check_payload(&b.bundle, &wrong),
        Err(VerityError::Layout(_))
    ));
    check_payload(&b.bundle, &verity).expect("restored");
    // No file.
    std::fs::remove_file(&b.bundle).unwrap();
    assert!(matches!(
        check_payload(&b.bundle, &verity),
        Err(VerityError::Io(_))
    ));
}
