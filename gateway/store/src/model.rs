//! Plain data types returned by and passed to the [`crate::Store`].

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::change::Scope;
use crate::error::{invalid, StoreError};

/// Role of a console/REST user; decides what the user may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// May change everything, including users.
    Admin,
    /// May operate the gateway (trust list, settings) but not manage users.
    Operator,
    /// Read-only access.
    Viewer,
}

impl Role {
    /// The stable lowercase name stored in the database and used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::Viewer => "viewer",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "admin" => Ok(Role::Admin),
            "operator" => Ok(Role::Operator),
            "viewer" => Ok(Role::Viewer),
            other => Err(invalid(
                "role",
                format!("unknown role {other:?} (expected admin, operator or viewer)"),
            )),
        }
    }
}

/// Which list of the trust store a certificate is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CertKind {
    /// Trusted application instance certificate (peer may connect).
    Trusted,
    /// Issuer (CA) certificate used to build/verify chains.
    Issuer,
    /// Certificate presented by a peer and rejected; kept for review.
    Rejected,
}

impl CertKind {
    /// The stable lowercase name stored in the database and used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            CertKind::Trusted => "trusted",
            CertKind::Issuer => "issuer",
            CertKind::Rejected => "rejected",
        }
    }
}

impl fmt::Display for CertKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CertKind {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "trusted" => Ok(CertKind::Trusted),
            "issuer" => Ok(CertKind::Issuer),
            "rejected" => Ok(CertKind::Rejected),
            other => Err(invalid(
                "kind",
                format!(
                    "unknown certificate kind {other:?} (expected trusted, issuer or rejected)"
                ),
            )),
        }
    }
}

/// A certificate in the trust store, with the fields the console shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertInfo {
    /// SHA-1 of the DER encoding, lowercase hex (the OPC UA thumbprint).
    pub thumbprint: String,
    /// Which list it is on.
    pub kind: CertKind,
    /// Subject distinguished name (RFC 4514 string).
    pub subject: String,
    /// First URI in the subjectAltName extension, the OPC UA application URI.
    pub application_uri: Option<String>,
    /// Start of validity, RFC 3339 UTC.
    pub not_before: String,
    /// End of validity, RFC 3339 UTC.
    pub not_after: String,
    /// The certificate itself, DER.
    pub der: Vec<u8>,
    /// When the store first saw this certificate, RFC 3339 UTC.
    pub first_seen: String,
    /// When it was last presented (rejected list) or last added, RFC 3339
    /// UTC.
    #[serde(default)]
    pub last_seen: String,
    /// On the rejected list: whether this appliance refused it itself
    /// (false when only the other appliance of a pair did).
    #[serde(default = "yes")]
    pub refused_here: bool,
    /// On the rejected list: the pair address of the other appliance that
    /// refused it and reported it here; `None` if none did.
    #[serde(default)]
    pub refused_by: Option<String>,
    /// On the rejected list of a paired appliance: refused here and not on
    /// the primary's list yet (the report waits for the primary).
    #[serde(default)]
    pub report_pending: bool,
}

fn yes() -> bool {
    true
}

/// What a certificate says about itself (for display; no list membership).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertSummary {
    /// SHA-1 of the DER encoding, lowercase hex (the OPC UA thumbprint).
    pub thumbprint: String,
    /// Subject distinguished name (RFC 4514 string).
    pub subject: String,
    /// First URI in the subjectAltName extension.
    pub application_uri: Option<String>,
    /// Start of validity, RFC 3339 UTC.
    pub not_before: String,
    /// End of validity, RFC 3339 UTC.
    pub not_after: String,
}

/// A stored CRL as the console and REST list it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrlInfo {
    /// The CA that issued it (RFC 4514 string); one CRL per CA is kept.
    pub issuer: String,
    /// SHA-1 of its DER encoding, lowercase hex.
    pub thumbprint: String,
    /// When the CA issued it, RFC 3339 UTC.
    pub this_update: String,
    /// When the CA promised the next one, RFC 3339 UTC; after that time the
    /// certificates that CA issued are refused (revocation unknown) until a
    /// newer CRL is stored. `None` when the CRL names no next update.
    pub next_update: Option<String>,
    /// How many certificates it revokes.
    pub revoked: usize,
}

/// One entry of the append-only change log: the audit trail of every change
/// [`crate::Store::apply`] made, replicated and node-local alike.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeLogEntry {
    /// Strictly increasing sequence number, never reused.
    pub seq: i64,
    /// Replication epoch in force when the change was made.
    pub epoch: i64,
    /// Who made the change (user name, or `"engine"` for automatic changes).
    pub actor: String,
    /// When, RFC 3339 UTC with milliseconds.
    pub at: String,
    /// What kind of change, e.g. `"user.add"`, `"trust.add"`, `"setting.set"`.
    pub kind: String,
    /// JSON object describing the change; never contains secrets.
    pub payload: String,
    /// Whether the change is replicated or node-local (then the standby
    /// never sees it).
    pub scope: Scope,
}

/// Which change-log entries [`crate::Store::change_log_filtered`] returns:
/// every condition that is set must hold. Built by the console's audit
/// page, its CSV export and the REST audit trail.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogFilter {
    /// Only this actor's entries (exact name).
    pub actor: Option<String>,
    /// Only kinds starting with one of these (compared as plain text, so
    /// `_` and `%` are not wildcards); empty: every kind.
    pub kind_prefixes: Vec<String>,
    /// Only entries made at or after this time.
    pub from: Option<chrono::DateTime<chrono::Utc>>,
    /// Only entries made before this time.
    pub to: Option<chrono::DateTime<chrono::Utc>>,
    /// Only entries with a smaller sequence number (paging newest first).
    pub before_seq: Option<i64>,
    /// Only entries with a larger sequence number (paging oldest first).
    pub after_seq: Option<i64>,
}

/// The order [`crate::Store::change_log_filtered`] returns entries in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogOrder {
    /// Ascending sequence numbers.
    OldestFirst,
    /// Descending sequence numbers.
    NewestFirst,
}
