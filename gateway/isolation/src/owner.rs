//! Owners: the accounting groups that resources are charged to, and the
//! class of work a charge belongs to.
//!
//! An owner is an observed address (before authentication), a verified
//! application certificate or live Session (after authentication), or an
//! operator-configured trusted owner. Keys are bounded in length so the owner
//! table stays bounded in memory; they are never used as metric labels.

use std::fmt;
use std::net::IpAddr;

/// Longest accepted owner key text, in bytes (without the kind prefix): the
/// largest `isolation.max_owner_key_length` the configuration accepts. The
/// configured limit itself is enforced where keys enter: trusted owner keys
/// when the configuration is validated (`uagate plan` names the key), so
/// every key that passes is one admission can use. Derived keys (an
/// address, a 20-byte certificate thumbprint in hex, a session id) are far
/// shorter.
pub const MAX_OWNER_KEY_LEN: usize = 4096;

/// What kind of evidence an [`OwnerKey`] was built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OwnerKind {
    /// An observed network address (not an identity: NAT can merge many clients).
    Address,
    /// A verified application instance certificate (by thumbprint).
    Application,
    /// A verified, live Session.
    Session,
    /// An operator-configured trusted owner (`isolation.trusted_owners[].key`).
    Trusted,
}

impl OwnerKind {
    fn prefix(self) -> &'static str {
        match self {
            OwnerKind::Address => "addr:",
            OwnerKind::Application => "app:",
            OwnerKind::Session => "session:",
            OwnerKind::Trusted => "trusted:",
        }
    }
}

/// The key of one accounting group. Cheap to clone, totally ordered, and its
/// text at most [`MAX_OWNER_KEY_LEN`] bytes long. Two keys are equal when they are of
/// the same kind and have the same text; IPv4 and IPv4-mapped IPv6 addresses
/// produce the same key.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OwnerKey {
    kind: OwnerKind,
    /// Kind prefix + text, e.g. `addr:10.0.0.1`.
    /// Shared: a clone (one per request) only counts a reference.
    text: std::sync::Arc<str>,
}

impl OwnerKey {
    /// The owner for an ordinary connection observed from `addr`. IPv4-mapped
    /// IPv6 addresses (`::ffff:a.b.c.d`) are normalized to IPv4.
    pub fn from_addr(addr: IpAddr) -> OwnerKey {
        let addr = normalize_ip(addr);
        OwnerKey {
            kind: OwnerKind::Address,
            text: format!("{}{addr}", OwnerKind::Address.prefix()).into(),
        }
    }

    /// The owner for a caller whose application instance certificate was
    /// verified (never for a certificate offered under SecurityPolicy None).
    /// `thumbprint` is the certificate's digest (e.g. SHA-1, 20 bytes); returns
    /// `None` when it is empty or too long to fit the key bound.
    pub fn from_application_thumbprint(thumbprint: &[u8]) -> Option<OwnerKey> {
        if thumbprint.is_empty() {
            return None;
        }
        let mut text = String::from(OwnerKind::Application.prefix());
        if 2 * thumbprint.len() > MAX_OWNER_KEY_LEN {
            return None;
        }
        for b in thumbprint {
            text.push_str(&format!("{b:02x}"));
        }
        Some(OwnerKey {
            kind: OwnerKind::Application,
            text: text.into(),
        })
    }

    /// The owner for requests carried by a verified live Session; `session_id`
    /// is the server-assigned Session identifier rendered as text. Returns
    /// `None` when it is empty, too long, or contains control characters.
    pub fn from_session(session_id: &str) -> Option<OwnerKey> {
        Self::checked(OwnerKind::Session, session_id)
    }

    /// The key of a configured trusted owner (`isolation.trusted_owners[].key`).
    /// Returns `None` when the name is empty, too long, or contains control
    /// characters (the plan validation reports such a name as invalid).
    pub fn trusted(name: &str) -> Option<OwnerKey> {
        Self::checked(OwnerKind::Trusted, name)
    }

    fn checked(kind: OwnerKind, text: &str) -> Option<OwnerKey> {
        let prefix = kind.prefix();
        if text.is_empty() || text.len() > MAX_OWNER_KEY_LEN || text.chars().any(char::is_control) {
            return None;
        }
        Some(OwnerKey {
            kind,
            text: format!("{prefix}{text}").into(),
        })
    }

    /// What kind of evidence this key was built from.
    pub fn kind(&self) -> OwnerKind {
        self.kind
    }

    /// The full key text including its kind prefix (for logs at debug level
    /// only; never a metric label).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The key text without its kind prefix (e.g. the trusted owner's name).
    pub fn name(&self) -> &str {
        self.text.get(self.kind.prefix().len()..).unwrap_or("")
    }

    /// Length of the key in bytes, kind prefix included.
    pub fn len(&self) -> usize {
        self.text.len()
    }

    /// Always false: keys are never empty. Present for API completeness.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }
}

impl fmt::Debug for OwnerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerKey({})", self.text)
    }
}

impl fmt::Display for OwnerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Maps an IPv4-mapped IPv6 address to IPv4; leaves everything else alone.
pub fn normalize_ip(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// The class of a piece of work, which decides which reserve it may use.
/// Protected classes come only from verified evidence (an ingress rule, a
/// live Session binding), never from a request's name alone.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum OwnerClass {
    /// Ordinary traffic: shared capacity only.
    Ordinary,
    /// Initial startup of a connection or Session through a protected ingress.
    Bootstrap,
    /// Recovery of a connection or Session (protected ingress or verified live Session).
    Reconnect,
    /// Recovery/maintenance requests at the decoded-request stages.
    Control,
    /// A channel that already carries an activated Session: may use the
    /// reconnect reserve at the `ReassemblyBytes` stage only (ordinary
    /// elsewhere), and does not take the reconnect class's owner-table entry.
    SessionBound,
    /// A configured trusted owner; the key must be one of the configured keys.
    Trusted(OwnerKey),
}

impl OwnerClass {
    /// Bounded label for logs and metrics (never contains the owner key).
    pub fn label(&self) -> &'static str {
        match self {
            OwnerClass::Ordinary => "ordinary",
            OwnerClass::Bootstrap => "bootstrap",
            OwnerClass::Reconnect => "reconnect",
            OwnerClass::Control => "control",
            OwnerClass::SessionBound => "session_bound",
            OwnerClass::Trusted(_) => "trusted",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn ipv4_and_mapped_ipv6_are_one_owner() {
        let v4 = OwnerKey::from_addr(IpAddr::V4(Ipv4Addr::new(10, 0, 5, 7)));
        let mapped = OwnerKey::from_addr(IpAddr::V6(Ipv4Addr::new(10, 0, 5, 7).to_ipv6_mapped()));
        assert_eq!(v4, mapped);
        assert_eq!(v4.as_str(), "addr:10.0.5.7");
        let other = OwnerKey::from_addr(IpAddr::V4(Ipv4Addr::new(10, 0, 5, 8)));
        assert_ne!(v4, other);
        let v6 = OwnerKey::from_addr(IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert_eq!(v6.as_str(), "addr:::1");
        // IPv4-compatible (not mapped) addresses are not merged.
        let compat =
            OwnerKey::from_addr(IpAddr::V6(Ipv4Addr::new(10, 0, 5, 7).to_ipv6_compatible()));
        assert_ne!(v4, compat);
    }

    #[test]
    fn kinds_do_not_collide_and_keys_are_bounded() {
        let t = OwnerKey::trusted("plant-control").unwrap();
        let s = OwnerKey::from_session("plant-control").unwrap();
        assert_ne!(t, s);
        assert_eq!(t.name(), "plant-control");
        assert_eq!(t.kind(), OwnerKind::Trusted);
        assert!(OwnerKey::trusted("").is_none());
        assert!(OwnerKey::trusted("bad\nname").is_none());
        let max = "x".repeat(MAX_OWNER_KEY_LEN);
        assert_eq!(
            OwnerKey::trusted(&max).unwrap().len(),
            MAX_OWNER_KEY_LEN + "trusted:".len()
        );
        assert!(OwnerKey::trusted(&format!("{max}x")).is_none());
        // Issue 17: a key the configuration accepts (default limit 256) is
        // one admission can use.
        let key = "k".repeat(200);
        assert_eq!(OwnerKey::trusted(&key).unwrap().name(), key);
        let app = OwnerKey::from_application_thumbprint(&[0xab; 20]).unwrap();
        assert_eq!(app.as_str(), format!("app:{}", "ab".repeat(20)));
        assert!(OwnerKey::from_application_thumbprint(&[]).is_none());
        assert!(OwnerKey::from_application_thumbprint(&[1; 64]).is_some());
        assert!(OwnerKey::from_application_thumbprint(&[1; 2049]).is_none());
    }
}
