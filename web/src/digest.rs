//! How the console and the audit log write a certificate's digests: one
//! format for all of them, so an operator comparing a fingerprint between
//! two pages, the audit log and another tool reads the same text.
//!
//! - The **fingerprint** is the SHA-256 of the certificate: what an
//!   operator compares (certificates, the TLS certificate, the pair
//!   certificates, a field server's certificate before trusting it).
//! - The **thumbprint** is the SHA-1 OPC UA keys its trust lists by (the
//!   certificate's identity there); shown labelled "thumbprint", never
//!   as a fingerprint.
//!
//! Both are written by [`digest_text`]: upper-case hex in colon-separated
//! pairs (`3F:9A:…:E1`). In HTML, [`Digest::html`] lets the line break
//! after a colon (never inside a pair) so a fingerprint wraps at 390 px.

use std::fmt;

use sha2::Digest as _;

/// The console's one way of writing a digest: upper-case hex, two digits
/// per byte, colon-separated (`3F:9A:E1`). Every fingerprint and
/// thumbprint the console or the audit log shows goes through it.
pub fn digest_text(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 3);
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        out.push_str(&format!("{b:02X}"));
    }
    out
}

/// A digest as the console shows it (see [`digest_text`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digest(String);

impl Digest {
    /// The SHA-256 fingerprint of a certificate (its DER).
    pub fn fingerprint(der: &[u8]) -> Digest {
        Digest(digest_text(&sha2::Sha256::digest(der)))
    }

    /// A digest the gateway keeps as hex (the pair certificates'
    /// fingerprints, the TLS certificate's, OPC UA thumbprints): case and
    /// `:` or space separators do not matter. Text that is not hex is
    /// shown as it is.
    pub fn from_hex(hex_text: &str) -> Digest {
        let digits: String = hex_text
            .chars()
            .filter(|c| !matches!(c, ':' | ' '))
            .collect();
        match hex::decode(&digits) {
            Ok(bytes) if !bytes.is_empty() => Digest(digest_text(&bytes)),
            _ => Digest(hex_text.to_string()),
        }
    }

    /// The text (`3F:9A:…`).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The text for an HTML page: the same characters, with a break
    /// opportunity (`<wbr>`) after every colon so a narrow screen wraps
    /// it between pairs. Safe to insert unescaped: only hex digits and
    /// colons (anything else is escaped).
    pub fn html(&self) -> String {
        let mut out = String::with_capacity(self.0.len() * 2);
        for c in self.0.chars() {
            match c {
                ':' => out.push_str(":<wbr>"),
                c if c.is_ascii_alphanumeric() => out.push(c),
                '&' => out.push_str("&amp;"),
                '<' => out.push_str("&lt;"),
                '>' => out.push_str("&gt;"),
                '"' => out.push_str("&quot;"),
                '\'' => out.push_str("&#39;"),
                c => out.push(c),
            }
        }
        out
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_format_for_fingerprints_and_thumbprints() {
        assert_eq!(digest_text(&[0x3f, 0x9a, 0x00, 0xe1]), "3F:9A:00:E1");
        assert_eq!(digest_text(&[]), "");
        // The SHA-256 of the bytes "abc".
        let fp = Digest::fingerprint(b"abc");
        assert_eq!(
            fp.as_str(),
            "BA:78:16:BF:8F:01:CF:EA:41:41:40:DE:5D:AE:22:23:B0:03:61:A3:96:17:7A:9C:B4:10:FF:61:F2:00:15:AD"
        );
        // The pair's lower-case hex and an upper-case TLS fingerprint read
        // the same as the fingerprint computed from the DER.
        let hex_lower = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(Digest::from_hex(hex_lower), fp);
        assert_eq!(Digest::from_hex(&hex_lower.to_ascii_uppercase()), fp);
        assert_eq!(Digest::from_hex(fp.as_str()), fp);
        // A SHA-1 thumbprint: the same format, 20 pairs.
        let thumbprint = Digest::from_hex("a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(
            thumbprint.to_string(),
            "A9:99:3E:36:47:06:81:6A:BA:3E:25:71:78:50:C2:6C:9C:D0:D8:9D"
        );
    }

    #[test]
    fn not_hex_is_shown_as_it_is() {
        assert_eq!(Digest::from_hex("").as_str(), "");
        assert_eq!(Digest::from_hex("?").as_str(), "?");
        assert_eq!(Digest::from_hex("abc").as_str(), "abc");
    }

    #[test]
    fn html_breaks_between_pairs_only_and_escapes() {
        assert_eq!(
            Digest::from_hex("3f9ae1").html(),
            "3F:<wbr>9A:<wbr>E1",
            "a break after each colon, none inside a pair"
        );
        assert_eq!(Digest::from_hex("<b>").html(), "&lt;b&gt;");
    }
}
