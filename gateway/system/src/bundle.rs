//! What `rauc info --output-format=readable BUNDLE` says about an update
//! bundle (RAUC 1.8), read into a [`BundleInfo`]: pure parsing, no IO.
//!
//! The updater runs `rauc info` before every install: RAUC checks the
//! bundle's signature against the appliance's keyring and prints the
//! signed manifest, whose version the System page shows and whose verity
//! parameters (salt, root hash, hash tree size) let the gateway check the
//! payload itself before RAUC writes anything ([`crate::verity`]).
//!
//! The readable output is a list of `Key: value` lines, the values of
//! text fields in single quotes, with ANSI escape sequences (bold image
//! names) here and there:
//!
//! ```text
//! Compatible:     'uagate-amd64'
//! Version:        '0.1.1'
//! Bundle Format:  verity
//!   Verity Salt:  '18a4…'
//!   Verity Hash:  'c499…'
//!   Verity Size:  1179648
//! ```

/// The length of a SHA-256 digest, the verity root hash of a RAUC bundle.
pub const ROOT_HASH_LEN: usize = 32;

/// A bundle as `rauc info` describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BundleInfo {
    /// The bundle's `compatible` (the kind of device it is made for).
    pub compatible: Option<String>,
    /// The bundle's version.
    pub version: Option<String>,
    /// The bundle format in lower case: `plain`, `verity` or `crypt`;
    /// `None` when RAUC did not say.
    pub format: Option<String>,
    /// The dm-verity parameters of the payload, when RAUC stated all three
    /// and they are well-formed (verity and crypt bundles). `None` for a
    /// plain bundle, whose whole payload RAUC checks itself.
    pub verity: Option<Verity>,
}

impl BundleInfo {
    /// Whether the format has a verity hash tree (everything but `plain`)
    /// while the parameters to check it were not found: then the gateway
    /// cannot check the payload before RAUC writes it.
    pub fn verity_unreadable(&self) -> bool {
        self.verity.is_none() && self.format.as_deref().is_some_and(|f| f != "plain")
    }
}

/// The dm-verity parameters of a bundle's payload, as signed in its
/// manifest: what [`crate::verity::check_payload`] checks the file with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verity {
    /// The salt put in front of every hashed block.
    pub salt: Vec<u8>,
    /// The root hash: SHA-256 of the salt and the hash tree's top block.
    pub root_hash: [u8; ROOT_HASH_LEN],
    /// The size of the hash tree in bytes, stored right after the payload.
    pub tree_size: u64,
}

/// Reads the readable output of `rauc info` (its standard output; RAUC's
/// `rauc-Message:` lines go to standard error). `None` when the text is
/// not such output: it names neither a `compatible` nor a bundle format.
/// Called by the updater before an install; the first occurrence of a key
/// counts (the bundle's own fields come before its images').
pub fn parse_info(text: &str) -> Option<BundleInfo> {
    let text = strip_ansi(text);
    let mut info = BundleInfo::default();
    let (mut salt, mut hash, mut size) = (None, None, None);
    let mut recognised = false;
    for line in text.lines() {
        let Some((key, value)) = line.trim().split_once(':') else {
            continue;
        };
        let value = value.trim();
        let slot = match key.trim() {
            "Compatible" => &mut info.compatible,
            "Version" => &mut info.version,
            "Bundle Format" => &mut info.format,
            "Verity Salt" => &mut salt,
            "Verity Hash" => &mut hash,
            "Verity Size" => &mut size,
            _ => continue,
        };
        if key.trim() == "Compatible" || key.trim() == "Bundle Format" {
            recognised = true;
        }
        if slot.is_none() {
            *slot = Some(unquote(value).to_string()).filter(|v| !v.is_empty());
        }
    }
    if !recognised {
        return None;
    }
    info.format = info.format.map(|f| f.to_ascii_lowercase());
    if info.format.as_deref() != Some("plain") {
        info.verity = verity(salt.as_deref(), hash.as_deref(), size.as_deref());
    }
    Some(info)
}

/// The verity parameters from their three values, when all are there and
/// well-formed: the salt and the root hash in hex (the hash 32 bytes), the
/// tree size a decimal number.
fn verity(salt: Option<&str>, hash: Option<&str>, size: Option<&str>) -> Option<Verity> {
    let salt = hex::decode(salt?).ok().filter(|s| !s.is_empty())?;
    let root_hash = <[u8; ROOT_HASH_LEN]>::try_from(hex::decode(hash?).ok()?).ok()?;
    let tree_size = size?.parse().ok()?;
    Some(Verity {
        salt,
        root_hash,
        tree_size,
    })
}

/// A value without the single quotes RAUC puts around text fields.
fn unquote(value: &str) -> &str {
    value
        .strip_prefix('\'')
        .and_then(|v| v.strip_suffix('\''))
        .unwrap_or(value)
}

/// The text without ANSI escape sequences (`ESC [ … final byte`, and a
/// lone `ESC` with the character after it).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        if chars.next() == Some('[') {
            // Parameters and intermediates up to the final byte (@ to ~).
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rauc info --output-format=readable` on the appliance's 0.1.1
    /// bundle (RAUC 1.8), escape sequences and tabs as printed.
    const SAMPLE: &str = "Compatible: \t'uagate-amd64'\n\
        Version:    \t'0.1.1'\n\
        Description:\t'uagate appliance 0.1.1'\n\
        Build:      \t'4d81860553cf'\n\
        Hooks:      \t''\n\
        Bundle Format: \tverity\n  \
        Verity Salt: \t'18a4982ad430d6e54a80f09d2ca4a606f4bee4f80fec8760d1df287b667797ed'\n  \
        Verity Hash: \t'c4992d23e8e78784b87b996730905aad960133aa9062059db5a8243434f536d5'\n  \
        Verity Size: \t1179648\n\
        \n\
        1 Image:\n  \
        \u{1b}[1m[rootfs]\u{1b}[0m\n\
        \tFilename:  rootfs.img\n\
        \tChecksum:  9d2f3c6ab1d9f4e5b2c8a7e6d5c4b3a2918f7e6d5c4b3a2918f7e6d5c4b3a291\n\
        \tSize:      148373504\n\
        \tHooks:     \n\
        \n\
        Certificate Chain:\n \
        0 Subject: O = uagate development, CN = uagate development update signing\n   \
        Issuer: O = uagate development, CN = uagate development update signing\n";

    #[test]
    fn reads_version_and_verity_parameters_of_a_real_sample() {
        let info = parse_info(SAMPLE).expect("recognised");
        assert_eq!(info.compatible.as_deref(), Some("uagate-amd64"));
        assert_eq!(info.version.as_deref(), Some("0.1.1"));
        assert_eq!(info.format.as_deref(), Some("verity"));
        let v = info.verity.expect("verity parameters");
        assert_eq!(
            hex::encode(&v.salt),
            "18a4982ad430d6e54a80f09d2ca4a606f4bee4f80fec8760d1df287b667797ed"
        );
        assert_eq!(
            hex::encode(v.root_hash),
            "c4992d23e8e78784b87b996730905aad960133aa9062059db5a8243434f536d5"
        );
        assert_eq!(v.tree_size, 1_179_648);
        assert!(!parse_info(SAMPLE).is_some_and(|i| i.verity_unreadable()));
    }

    #[test]
    fn escape_sequences_anywhere_are_ignored() {
        let coloured = SAMPLE
            .replace("Version:", "\u{1b}[1mVersion:\u{1b}[0m")
            .replace("Verity Size: \t", "Verity Size: \t\u{1b}[33m")
            .replace("1179648", "1179648\u{1b}[0m");
        let info = parse_info(&coloured).expect("recognised");
        assert_eq!(info.version.as_deref(), Some("0.1.1"));
        assert_eq!(info.verity.expect("verity").tree_size, 1_179_648);
        assert_eq!(strip_ansi("a\u{1b}[1;31mb\u{1b}[0mc\u{1b}"), "abc");
    }

    #[test]
    fn a_plain_bundle_has_no_verity_parameters_to_check() {
        let plain = "Compatible: \t'uagate-amd64'\nVersion:    \t'0.2.0'\n\
                     Description:\t'(null)'\nBuild:      \t'(null)'\nHooks:      \t''\n\
                     Bundle Format: \tplain\n\n1 Image:\n  [rootfs]\n\tFilename:  rootfs.img\n";
        let info = parse_info(plain).expect("recognised");
        assert_eq!(info.version.as_deref(), Some("0.2.0"));
        assert_eq!(info.format.as_deref(), Some("plain"));
        assert_eq!(info.verity, None);
        assert!(!info.verity_unreadable());
    }

    #[test]
    fn malformed_verity_parameters_are_not_taken() {
        for (from, to) in [
            // Not hex.
            ("'18a4982a", "'zz a4982a"),
            // A root hash that is not 32 bytes.
            ("36d5'", "'"),
            // A size that is not a number.
            ("1179648", "1179648 bytes"),
        ] {
            let broken = SAMPLE.replace(from, to);
            let info = parse_info(&broken).expect("recognised");
            assert_eq!(info.verity, None, "{to}");
            assert!(info.verity_unreadable(), "{to}");
        }
        let missing = SAMPLE.replace("Verity Hash", "Verity Hush");
        assert!(parse_info(&missing)
            .expect("recognised")
            .verity_unreadable());
    }

    #[test]
    fn garbage_is_not_rauc_info() {
        assert_eq!(parse_info(""), None);
        assert_eq!(parse_info("\u{1b}[1m\u{1b}"), None);
        assert_eq!(
            parse_info("Failed to load bundle: not a RAUC bundle\n"),
            None
        );
        assert_eq!(
            parse_info("{\"compatible\":\"uagate-amd64\",\"version\":\"0.1.1\"}"),
            None
        );
        assert_eq!(parse_info("Version: '1'\nVerity Size: 4096\n"), None);
        // Only the first occurrence of a key counts.
        let twice = format!("{SAMPLE}Version: '9.9.9'\n");
        assert_eq!(
            parse_info(&twice).and_then(|i| i.version).as_deref(),
            Some("0.1.1")
        );
    }
}
