//! The values the store applies: every write to SQLite is one of them.
//!
//! A change is a plain value: what changes ([`Change`] or [`LocalChange`]),
//! who asks and when ([`Proposal`]). The proposer does everything that is
//! not deterministic — reading the clock, hashing a password, converting
//! PEM to DER — before it builds the value; [`crate::Store::apply`] only
//! validates it and applies it, so the same values applied in the same order
//! to two stores give the same result.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

use crate::model::{CertKind, Role};

/// Whether a change is part of the configuration both appliances of a pair
/// share, or belongs to this appliance alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Replicated to the standby: a [`Change`].
    Replicated,
    /// Node-local, never replicated: a [`LocalChange`].
    Local,
}

impl Scope {
    /// The stable lowercase name stored in the change log.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Replicated => "replicated",
            Scope::Local => "local",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Setting holding the server state an operator requested (maintenance,
/// shutdown); node-local: each appliance is put into maintenance on its own.
pub const REQUESTED_STATE_SETTING: &str = "server.requested_state";

/// Setting holding the gateway namespace indexes given to the field servers'
/// namespaces; node-local: each appliance allocates them from what its own
/// field sessions report.
pub const FIELD_NAMESPACES_SETTING: &str = "field.namespaces";

/// Setting holding this appliance's part of the configuration document (its
/// `[listen]` table and `server.application_uri`, as TOML); node-local: each
/// appliance listens on its own addresses. The rest of the document is the
/// replicated setting `config.document`.
pub const CONFIG_NODE_SETTING: &str = "config.node";

/// The settings that are node-local ([`LocalChange::SetSetting`]); every other
/// key is replicated ([`Change::SetSetting`]). The scope of a key is fixed by
/// this list alone, never by what a store holds, so it is the same on both
/// appliances.
pub const NODE_LOCAL_SETTINGS: &[&str] = &[
    REQUESTED_STATE_SETTING,
    FIELD_NAMESPACES_SETTING,
    CONFIG_NODE_SETTING,
];

/// The scope of a setting key: [`Scope::Local`] for [`NODE_LOCAL_SETTINGS`].
pub fn setting_scope(key: &str) -> Scope {
    if NODE_LOCAL_SETTINGS.contains(&key) {
        Scope::Local
    } else {
        Scope::Replicated
    }
}

/// An argon2id password hash (PHC string), computed by the proposer. Its
/// `Debug` output is redacted; it never enters the change log.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PasswordHash(String);

impl PasswordHash {
    /// Wraps a PHC string; [`crate::Store::apply`] checks it is argon2id.
    pub fn new(phc: impl Into<String>) -> PasswordHash {
        PasswordHash(phc.into())
    }

    /// The PHC string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for PasswordHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PasswordHash(<redacted>)")
    }
}

/// A change of the configuration both appliances share. Shipped to the
/// standby as is (serde) and applied there by [`crate::Store::apply`].
///
/// Each variant is logged under one change-log kind (in brackets).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Creates a user (`user.add`: name, role). Refused with
    /// [`crate::StoreError::UserExists`] for a taken name, in any case
    /// (see [`crate::user_key`]).
    AddUser {
        /// Login name in its canonical form (see [`crate::user_name`]).
        name: String,
        /// The password's argon2id hash.
        password_hash: PasswordHash,
        /// The user's role.
        role: Role,
    },
    /// Replaces a user's password (`user.password`: name).
    SetPassword {
        /// The user (the stored name in any case).
        name: String,
        /// The new password's argon2id hash.
        password_hash: PasswordHash,
    },
    /// Changes a user's role (`user.role`: name, role, previous). Demoting
    /// the last admin is refused.
    SetRole {
        /// The user (the stored name in any case).
        name: String,
        /// The new role.
        role: Role,
    },
    /// Deletes a user (`user.delete`: name). Deleting the last admin is
    /// refused.
    DeleteUser {
        /// The user (the stored name in any case).
        name: String,
    },
    /// Puts a certificate on the trusted or issuer list (`trust.add`), off
    /// the rejected list or the other list if it was there.
    TrustAdd {
        /// The certificate, DER.
        der: Vec<u8>,
        /// [`CertKind::Trusted`] or [`CertKind::Issuer`].
        kind: CertKind,
    },
    /// Removes a certificate from the trusted or issuer list
    /// (`trust.remove`: thumbprint, kind). A certificate on the rejected
    /// list only is unknown here: see [`LocalChange::RemoveRejected`].
    TrustRemove {
        /// SHA-1 thumbprint, 40 hex digits.
        thumbprint: String,
    },
    /// Stores a CRL, replacing an older one of the same issuer (`crl.add`);
    /// an older one than the stored is refused.
    AddCrl {
        /// The CRL, DER.
        der: Vec<u8>,
    },
    /// Sets a replicated setting (`setting.set`: key, value, before). Keys
    /// in [`NODE_LOCAL_SETTINGS`] are refused: see [`LocalChange::SetSetting`].
    SetSetting {
        /// Key (`a-z 0-9 . _ -`).
        key: String,
        /// Value, up to 64 KiB.
        value: String,
    },
    /// Increments the replication epoch (`epoch.bump`: the new epoch,
    /// which also stamps the entry).
    BumpEpoch,
    /// An operator action that changes no stored state, for the audit
    /// trail (its own `kind`, which starts with `event.`).
    Event {
        /// `event.…`, at most 64 bytes.
        kind: String,
        /// A JSON object (text), at most 64 KiB; logged as is.
        payload: String,
    },
}

impl Change {
    /// What the change is, for an operator, without its secrets: the
    /// change-log kind and its subject (a user name, a thumbprint, a
    /// setting key), e.g. `("user.add", "olga")`. Called where a change is
    /// shown outside the change log (the pair's diverged list).
    pub fn summary(&self) -> (&'static str, String) {
        match self {
            Change::AddUser { name, role, .. } => {
                ("user.add", format!("{name} ({})", role.as_str()))
            }
            Change::SetPassword { name, .. } => ("user.password", name.clone()),
            Change::SetRole { name, role } => ("user.role", format!("{name} ({})", role.as_str())),
            Change::DeleteUser { name } => ("user.delete", name.clone()),
            Change::TrustAdd { der, .. } => ("trust.add", crate::x509::thumbprint(der)),
            Change::TrustRemove { thumbprint } => ("trust.remove", thumbprint.clone()),
            Change::AddCrl { .. } => ("crl.add", String::new()),
            Change::SetSetting { key, .. } => ("setting.set", key.clone()),
            Change::BumpEpoch => ("epoch.bump", String::new()),
            Change::Event { kind, .. } => ("event", kind.clone()),
        }
    }
}

/// A change of node-local state, never replicated. Applied through the
/// same [`crate::Store::apply`] and logged like a [`Change`], with the
/// change-log entry marked [`Scope::Local`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LocalChange {
    /// A peer presented this untrusted certificate: put it on the rejected
    /// list (`trust.reject`) or, when it is there already, refresh its
    /// `last_seen` (no log entry); left alone when it is trusted or an
    /// issuer. The list is capped at [`crate::REJECTED_CAP`].
    RecordRejected {
        /// The certificate, DER.
        der: Vec<u8>,
        /// The pair address of the other appliance that refused it and
        /// reported it to this one (the primary); `None` when this
        /// appliance refused it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
        /// Whether a first sighting waits to be reported to the primary
        /// (this appliance is paired); cleared by
        /// [`LocalChange::RejectedReported`].
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        report: bool,
    },
    /// A certificate this appliance refused is listed on the primary now
    /// (or will never be): it no longer waits to be reported. Silent (no
    /// change-log entry); nothing when it is not on the rejected list.
    RejectedReported {
        /// SHA-1 thumbprint, 40 hex digits.
        thumbprint: String,
    },
    /// Removes a certificate from the rejected list (`trust.remove`:
    /// thumbprint, kind `rejected`).
    RemoveRejected {
        /// SHA-1 thumbprint, 40 hex digits.
        thumbprint: String,
    },
    /// Sets a node-local setting (`setting.set`: key, value, before); only
    /// keys in [`NODE_LOCAL_SETTINGS`].
    SetSetting {
        /// One of [`NODE_LOCAL_SETTINGS`].
        key: String,
        /// Value, up to 64 KiB.
        value: String,
    },
    /// An operator action on this appliance that changes no stored state
    /// (a ServiceLevel override, a closed session, a forced failover), for
    /// its audit trail (its own `kind`, which starts with `event.`). Each
    /// appliance of a pair audits what was done to it.
    Event {
        /// `event.…`, at most 64 bytes.
        kind: String,
        /// A JSON object (text), at most 64 KiB; logged as is.
        payload: String,
    },
}

/// A change with who asks and when, ready for [`crate::Store::apply`].
/// `Proposal` (of a [`Change`]) is what the pair replicates;
/// [`LocalProposal`] never leaves the appliance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal<C = Change> {
    /// Who asks: a user name, or `engine`, `gateway`, `cli`, … for
    /// automatic changes.
    pub actor: String,
    /// When, fixed by the proposer: RFC 3339 UTC with milliseconds, e.g.
    /// `2024-05-01T12:00:00.123Z` (exactly this form; see [`Proposal::new`]).
    pub at: String,
    /// What changes.
    pub change: C,
}

/// A proposal of a node-local change.
pub type LocalProposal = Proposal<LocalChange>;

impl<C> Proposal<C> {
    /// A proposal at `at` (truncated to milliseconds).
    pub fn new(actor: impl Into<String>, at: DateTime<Utc>, change: C) -> Proposal<C> {
        Proposal {
            actor: actor.into(),
            at: format_at(at),
            change,
        }
    }

    /// A proposal stamped with the current time: the proposer's clock read.
    pub fn now(actor: impl Into<String>, change: C) -> Proposal<C> {
        Proposal::new(actor, Utc::now(), change)
    }
}

/// The one textual form of a change's time.
pub(crate) fn format_at(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The two kinds of change values [`crate::Store::apply`] takes:
/// [`Change`] and [`LocalChange`]. Sealed.
pub trait Scoped: sealed::Sealed {
    /// The scope of every value of this type.
    const SCOPE: Scope;
}

impl Scoped for Change {
    const SCOPE: Scope = Scope::Replicated;
}

impl Scoped for LocalChange {
    const SCOPE: Scope = Scope::Local;
}

pub(crate) mod sealed {
    /// Either change type, for the one write path.
    #[derive(Debug)]
    pub enum AnyChange {
        Replicated(super::Change),
        Local(super::LocalChange),
    }

    pub trait Sealed {
        fn into_any(self) -> AnyChange;
    }

    impl Sealed for super::Change {
        fn into_any(self) -> AnyChange {
            AnyChange::Replicated(self)
        }
    }

    impl Sealed for super::LocalChange {
        fn into_any(self) -> AnyChange {
            AnyChange::Local(self)
        }
    }
}
