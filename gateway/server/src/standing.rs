//! Live sessions and secure channels follow the stored users and trust
//! list: what would be refused at login or OpenSecureChannel now does not
//! go on working because it was let in before.
//!
//! Whenever the change log moves (a change made here, or one replicated
//! from the other appliance of a pair), the engine asks the store about
//! every user, user certificate and client certificate a live session or
//! channel rests on ([`Standing`]) and rules on each session ([`rule`]):
//! - the user was removed, or their password was set since the login
//!   (the credential stamp differs): the session ends, its subscriptions
//!   with it; the client's next request gets BadSessionIdInvalid;
//! - the user's role changed: the session goes on with the new role (a
//!   demoted operator's next Write is BadUserAccessDenied);
//! - the user certificate of an X509 login is no longer trusted (removed
//!   from the trust list, revoked by a CRL): the session ends.
//!
//! A secure channel whose client certificate is no longer trusted is
//! closed with the status OpenSecureChannel would give it now
//! (BadCertificateUntrusted, BadCertificateRevoked, …), and the sessions
//! bound to it end; an opc.https connection of such a TLS client
//! certificate is closed, and the sessions created over such connections
//! end too (every opc.https connection shares one logical channel, so the
//! session's token would work on another connection). Called by [`crate::Engine`] from the configuration
//! watch (`reconfigure.rs`), which polls the change log every second.

use std::collections::HashMap;
use std::fmt;

use opcua_types::ByteString;
use uagate_store::{Role, TrustVerdict, UserStanding};

use crate::session::UserIdentity;

/// How an active session proved who it acts for, kept so that the proof
/// can be checked again when the stored users or trust list change.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Credential {
    /// Nothing to check again (anonymous).
    #[default]
    None,
    /// A password: the user's credential stamp at login
    /// ([`uagate_store::Login::stamp`]).
    Password {
        /// The stamp; it changes whenever the user's password is set.
        stamp: String,
    },
    /// A user certificate (X509 identity token), DER.
    Certificate {
        /// The certificate as the client sent it.
        der: ByteString,
    },
}

/// What the store says now about the users and certificates the live
/// sessions and channels rest on. Built by the engine for one re-check.
#[derive(Debug, Default)]
pub struct Standing {
    /// Each user name of a live session: its standing, `None` when the
    /// user no longer exists.
    pub users: HashMap<String, Option<UserStanding>>,
    /// Each certificate (DER) of a live session or channel: its verdict.
    pub certs: HashMap<Vec<u8>, TrustVerdict>,
}

/// Why a session was ended by a re-check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndReason {
    /// Its user was removed.
    UserRemoved,
    /// Its user's password was set after the login.
    PasswordChanged,
    /// The certificate it logged in with is refused now.
    UserCertificate(TrustVerdict),
    /// The client certificate of its secure channel is refused now.
    ClientCertificate(TrustVerdict),
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndReason::UserRemoved => f.write_str("its user was removed"),
            EndReason::PasswordChanged => f.write_str("its user's password was changed"),
            EndReason::UserCertificate(v) => write!(f, "its user certificate is refused now: {v}"),
            EndReason::ClientCertificate(v) => {
                write!(f, "its client certificate is refused now: {v}")
            }
        }
    }
}

/// What happens to one session after a re-check.
#[derive(Debug, Clone, PartialEq)]
pub enum Ruling {
    /// Nothing changes.
    Keep,
    /// The session goes on with this role (its user's role changed).
    Role(Role),
    /// The session ends.
    End(EndReason),
}

/// Rules on an active session of `identity`, logged in with `credential`,
/// by what the store says now. A name or certificate missing from
/// `standing` was not asked about and keeps the session (the next re-check
/// asks).
pub fn rule(identity: &UserIdentity, credential: &Credential, standing: &Standing) -> Ruling {
    match (identity, credential) {
        (UserIdentity::User { name, role }, credential) => match standing.users.get(name) {
            None => Ruling::Keep,
            Some(None) => Ruling::End(EndReason::UserRemoved),
            Some(Some(now)) => match credential {
                Credential::Password { stamp } if *stamp != now.stamp => {
                    Ruling::End(EndReason::PasswordChanged)
                }
                _ if now.role != *role => Ruling::Role(now.role),
                _ => Ruling::Keep,
            },
        },
        (UserIdentity::Certificate { .. }, Credential::Certificate { der }) => {
            match standing.certs.get(der.as_ref()) {
                Some(v) if !v.is_trusted() => Ruling::End(EndReason::UserCertificate(*v)),
                _ => Ruling::Keep,
            }
        }
        _ => Ruling::Keep,
    }
}

impl crate::Engine {
    /// Checks every live session and secured channel against the stored
    /// users and trust list and ends what would be refused now (see the
    /// module doc). Called by the configuration watch whenever the change
    /// log moved; a store failure leaves everything as it is until the
    /// next change.
    pub(crate) async fn recheck_standing(&self) {
        let (names, user_certs) = {
            let sessions = self.sessions.lock();
            let mut names = std::collections::BTreeSet::new();
            let mut certs = Vec::new();
            for s in sessions.iter() {
                if let Some(UserIdentity::User { name, .. }) = s.identity() {
                    names.insert(name.clone());
                }
                if let crate::session::Phase::Active(a) = &s.phase {
                    if let Credential::Certificate { der } = &a.credential {
                        certs.push(der.as_ref().to_vec());
                    }
                }
                // The client certificate it was created with: an opc.https
                // session outlives the TLS connection that brought it.
                if !s.client_certificate.is_null() {
                    certs.push(s.client_certificate.as_ref().to_vec());
                }
            }
            (names, certs)
        };
        let channels = self.channels.certificates();
        let mut standing = Standing::default();
        for name in names {
            match self.store.user_standing(&name).await {
                Ok(now) => {
                    standing.users.insert(name, now);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot re-check the users of live sessions");
                    return;
                }
            }
        }
        let now = chrono::Utc::now();
        for der in user_certs
            .into_iter()
            .chain(channels.iter().map(|(_, c)| c.as_ref().to_vec()))
        {
            if standing.certs.contains_key(&der) {
                continue;
            }
            match self.store.validate_certificate(&der, now).await {
                Ok(v) => {
                    standing.certs.insert(der, v);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot re-check the certificates of live channels");
                    return;
                }
            }
        }
        let refused: Vec<(u32, TrustVerdict)> = channels
            .iter()
            .filter_map(|(id, cert)| {
                let v = *standing.certs.get(cert.as_ref())?;
                (!v.is_trusted()).then_some((*id, v))
            })
            .collect();
        let (ended, count) = {
            let mut sessions = self.sessions.lock();
            let ended = sessions.apply_standing(&standing, &refused);
            (ended, sessions.len())
        };
        self.answer_ended_publishes();
        for (id, client, why) in &ended {
            tracing::warn!(session = %id, client = %client, "session ended: {why}");
        }
        for (channel, verdict) in &refused {
            if self
                .channels
                .refuse(*channel, crate::open::verdict_status(*verdict))
            {
                tracing::warn!(
                    channel,
                    "secure channel (or opc.https connection) closed: its client certificate \
                     is refused now: {verdict}"
                );
            }
        }
        if !ended.is_empty() {
            self.space.publish_session_count(count);
            self.sessions.notify_changed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standing(user: Option<(Role, &str)>, cert: Option<TrustVerdict>) -> Standing {
        let mut s = Standing::default();
        s.users.insert(
            "otto".into(),
            user.map(|(role, stamp)| UserStanding {
                role,
                stamp: stamp.into(),
            }),
        );
        if let Some(v) = cert {
            s.certs.insert(b"cert".to_vec(), v);
        }
        s
    }

    fn otto(role: Role) -> UserIdentity {
        UserIdentity::User {
            name: "otto".into(),
            role,
        }
    }

    fn password(stamp: &str) -> Credential {
        Credential::Password {
            stamp: stamp.into(),
        }
    }

    #[test]
    fn a_password_session_follows_its_user() {
        let op = otto(Role::Operator);
        let same = standing(Some((Role::Operator, "s1")), None);
        assert_eq!(rule(&op, &password("s1"), &same), Ruling::Keep);
        let demoted = standing(Some((Role::Viewer, "s1")), None);
        assert_eq!(
            rule(&op, &password("s1"), &demoted),
            Ruling::Role(Role::Viewer)
        );
        let reset = standing(Some((Role::Viewer, "s2")), None);
        assert_eq!(
            rule(&op, &password("s1"), &reset),
            Ruling::End(EndReason::PasswordChanged),
            "a new password ends the session even when the role changed too"
        );
        let removed = standing(None, None);
        assert_eq!(
            rule(&op, &password("s1"), &removed),
            Ruling::End(EndReason::UserRemoved)
        );
        let other = UserIdentity::User {
            name: "anna".into(),
            role: Role::Operator,
        };
        assert_eq!(
            rule(&other, &password("s1"), &removed),
            Ruling::Keep,
            "a user not asked about is kept"
        );
    }

    #[test]
    fn a_certificate_session_follows_the_trust_list() {
        let id = UserIdentity::Certificate {
            thumbprint: "ab".into(),
        };
        let cred = Credential::Certificate {
            der: ByteString::from(b"cert".to_vec()),
        };
        for (verdict, ruling) in [
            (TrustVerdict::Trusted, Ruling::Keep),
            (
                TrustVerdict::Untrusted,
                Ruling::End(EndReason::UserCertificate(TrustVerdict::Untrusted)),
            ),
            (
                TrustVerdict::Revoked,
                Ruling::End(EndReason::UserCertificate(TrustVerdict::Revoked)),
            ),
        ] {
            assert_eq!(rule(&id, &cred, &standing(None, Some(verdict))), ruling);
        }
        assert_eq!(
            rule(
                &UserIdentity::Anonymous,
                &Credential::None,
                &standing(None, None)
            ),
            Ruling::Keep
        );
    }
}
