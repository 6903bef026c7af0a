//! Console and REST authentication: signed tokens, roles and login
//! throttling.
//!
//! A successful login yields a JWT (HS256) signed with a key kept in the
//! data directory (`console/jwt.key`, created on first start, mode 0600).
//! The console carries it in an HttpOnly, Secure, SameSite=Strict cookie;
//! scripts send it as `Authorization: Bearer`. Tokens are short-lived;
//! [`crate::access`] checks them on every request and yields an [`Authed`].

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::HeaderMap;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use uagate_store::Role;

use crate::error::ApiError;

/// Name of the console's session cookie.
pub const COOKIE: &str = "uagate_token";

/// How long a token is valid; the console renews it while the operator is
/// active.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(15 * 60);

/// Longest time a console session may be renewed for without a new
/// login, however active the operator is.
pub const MAX_SESSION: Duration = Duration::from_secs(12 * 3600);

/// Most logged-out sessions remembered until their tokens expire.
const MAX_REVOKED: usize = 65_536;

/// The signing key of console tokens, the CSRF key derived from it, and
/// the sessions ended by logout.
pub struct TokenKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    csrf_key: Vec<u8>,
    revoked: Mutex<HashMap<String, u64>>,
}

impl TokenKeys {
    /// Loads `<data>/console/jwt.key`, creating it (32 random bytes, owner
    /// read/write only) on first start. Called once when the console starts.
    pub fn load_or_create(data_dir: &Path) -> std::io::Result<TokenKeys> {
        let dir = data_dir.join("console");
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("jwt.key");
        let secret = match std::fs::read(&path) {
            Ok(bytes) if bytes.len() >= 32 => bytes,
            _ => {
                let bytes: [u8; 32] = rand::random();
                write_private(&path, &bytes)?;
                bytes.to_vec()
            }
        };
        Ok(TokenKeys::from_secret(&secret))
    }

    /// Keys from a secret held in memory (tests, or a key from elsewhere).
    pub fn from_secret(secret: &[u8]) -> TokenKeys {
        TokenKeys {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            csrf_key: hmac_sha256(secret, b"uagate console csrf"),
            revoked: Mutex::default(),
        }
    }

    /// A token for a new session of `user` (the stored name) with `role`,
    /// valid for [`TOKEN_LIFETIME`]; `stamp` is the user's credential stamp
    /// at login ([`uagate_store::Login::stamp`]): the session ends when the
    /// password is set again (see [`uagate_store::Store::user_standing`]).
    pub fn issue(&self, user: &str, role: Role, stamp: &str) -> Result<String, ApiError> {
        let now = unix_now();
        self.sign(&Claims {
            sub: user.to_string(),
            role: role.as_str().to_string(),
            cred: stamp.to_string(),
            sid: hex::encode(rand::random::<[u8; 16]>()),
            auth: now,
            iat: now,
            exp: now + TOKEN_LIFETIME.as_secs(),
        })
    }

    /// A fresh token for the same session (same CSRF token), or `None`
    /// when the session is older than [`MAX_SESSION`]. Called by
    /// [`crate::access::guard`] for an active operator once half the
    /// lifetime is gone.
    pub fn renew(&self, who: &Authed) -> Option<String> {
        let now = unix_now();
        if now.saturating_sub(who.auth_time) >= MAX_SESSION.as_secs() {
            return None;
        }
        self.sign(&Claims {
            sub: who.user.clone(),
            role: who.role.as_str().to_string(),
            cred: who.stamp.clone(),
            sid: who.sid.clone(),
            auth: who.auth_time,
            iat: now,
            exp: (now + TOKEN_LIFETIME.as_secs()).min(who.auth_time + MAX_SESSION.as_secs()),
        })
        .ok()
    }

    fn sign(&self, claims: &Claims) -> Result<String, ApiError> {
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &self.encoding)
            .map_err(ApiError::internal)
    }

    /// The user and role of a valid, unexpired token whose session was not
    /// logged out. The role is the one in the token; the [`Authed`]
    /// extractor replaces it with the stored one, and refuses the token
    /// when its credential stamp is not the user's now.
    pub fn verify(&self, token: &str) -> Result<Authed, ApiError> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 0;
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &validation)
            .map_err(|_| ApiError::Unauthenticated)?;
        let c = data.claims;
        if self.revoked.lock().contains_key(&c.sid) {
            return Err(ApiError::Unauthenticated);
        }
        let role = role_from_str(&c.role).ok_or(ApiError::Unauthenticated)?;
        Ok(Authed {
            csrf: self.csrf_token(&c.sid),
            user: c.sub,
            role,
            stamp: c.cred,
            sid: c.sid,
            auth_time: c.auth,
            issued: c.iat,
            expires: c.exp,
            via_cookie: false,
            follower_of: None,
            state_banner: None,
            waiting_for_restart: Vec::new(),
        })
    }

    /// Ends a session (logout): its tokens are refused from now on.
    pub fn revoke(&self, who: &Authed) {
        let now = unix_now();
        let mut revoked = self.revoked.lock();
        revoked.retain(|_, exp| *exp > now);
        if revoked.len() >= MAX_REVOKED {
            // Cannot remember more: forget the session ending soonest.
            if let Some(k) = revoked
                .iter()
                .min_by_key(|(_, e)| **e)
                .map(|(k, _)| k.clone())
            {
                revoked.remove(&k);
            }
        }
        revoked.insert(who.sid.clone(), who.expires);
    }

    /// The CSRF token of a session: an HMAC of its id, so it needs no
    /// server-side storage and survives token renewal.
    pub fn csrf_token(&self, sid: &str) -> String {
        hex::encode(&hmac_sha256(&self.csrf_key, sid.as_bytes())[..16])
    }
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    use hmac::Mac;
    // HMAC takes keys of any length, so this cannot fail.
    let mut mac = <hmac::Hmac<sha2::Sha256> as hmac::Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// The `Set-Cookie` value that carries `token` to the browser.
pub fn session_cookie(token: &str) -> String {
    format!(
        "{COOKIE}={token}; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age={}",
        TOKEN_LIFETIME.as_secs()
    )
}

/// The `Set-Cookie` value that removes the session cookie (logout).
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=0")
}

#[cfg(unix)]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

#[cfg(not(unix))]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, bytes)
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// What a token says.
#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    role: String,
    /// The user's credential stamp at login: the session ends when the
    /// password is set again. A token without one (issued before the
    /// stamp existed) is refused.
    cred: String,
    /// Session id: stays the same across renewals; keys the CSRF token.
    sid: String,
    /// When the user logged in (bounds renewal).
    auth: u64,
    iat: u64,
    exp: u64,
}

/// The stable role names of the store, back to the role.
pub fn role_from_str(s: &str) -> Option<Role> {
    [Role::Admin, Role::Operator, Role::Viewer]
        .into_iter()
        .find(|r| r.as_str() == s)
}

/// How much a role may do: admin > operator > viewer.
fn rank(role: Role) -> u8 {
    match role {
        Role::Admin => 2,
        Role::Operator => 1,
        Role::Viewer => 0,
    }
}

/// An authenticated caller; extracting it from a request (see
/// [`crate::access`]) refuses the request with 401 when it carries no valid token, or the user no longer
/// exists.
#[derive(Debug, Clone)]
pub struct Authed {
    /// The user name.
    pub user: String,
    /// The user's current role.
    pub role: Role,
    /// The user's credential stamp when the session began (see
    /// [`uagate_store::Store::user_standing`]).
    pub stamp: String,
    /// The console session (stable across renewals).
    pub sid: String,
    /// The session's CSRF token (forms and htmx send it back).
    pub csrf: String,
    /// When the user logged in, Unix seconds.
    pub auth_time: u64,
    /// When this token was issued, Unix seconds.
    pub issued: u64,
    /// When this token expires, Unix seconds.
    pub expires: u64,
    /// Whether the token came in the session cookie (so CSRF rules apply).
    pub via_cookie: bool,
    /// Set on a pair member that is not the configuration leader: the
    /// leader's console URL (empty when unknown). Every console page shows
    /// a read-only banner linking to it.
    pub follower_of: Option<String>,
    /// While an operator's maintenance state is in force: what every
    /// console page says about it in a banner.
    pub state_banner: Option<crate::ops::StateBanner>,
    /// Stored settings not in force until the gateway restarts (empty when
    /// none): every console page lists them in a banner.
    pub waiting_for_restart: Vec<String>,
}

impl Authed {
    /// Whether the caller's role is `at_least` or higher: for showing or
    /// hiding controls, and for [`crate::access`], which refuses a route's
    /// callers below its least role.
    pub fn can(&self, at_least: Role) -> bool {
        rank(self.role) >= rank(at_least)
    }
}

/// The value of the cookie `name` of a request.
pub(crate) fn cookie_value<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix(name)?.strip_prefix('='))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_foreign_ones_are_refused() {
        let keys = TokenKeys::from_secret(&[7u8; 32]);
        let t = keys.issue("ann", Role::Operator, "stamp").unwrap();
        let a = keys.verify(&t).unwrap();
        assert_eq!(a.user, "ann");
        assert_eq!(a.role, Role::Operator);
        let other = TokenKeys::from_secret(&[8u8; 32]);
        assert!(matches!(other.verify(&t), Err(ApiError::Unauthenticated)));
        assert!(matches!(
            keys.verify("x.y.z"),
            Err(ApiError::Unauthenticated)
        ));
    }

    #[test]
    fn roles_are_ordered() {
        let keys = TokenKeys::from_secret(&[7u8; 32]);
        let mut viewer = keys
            .verify(&keys.issue("v", Role::Viewer, "stamp").unwrap())
            .unwrap();
        assert!(viewer.can(Role::Viewer));
        assert!(!viewer.can(Role::Operator));
        viewer.role = Role::Admin;
        assert!(viewer.can(Role::Operator));
        assert!(viewer.can(Role::Admin));
    }

    #[test]
    fn renewal_keeps_the_session_and_logout_revokes_it() {
        let keys = TokenKeys::from_secret(&[7u8; 32]);
        let first = keys
            .verify(&keys.issue("ann", Role::Admin, "stamp").unwrap())
            .unwrap();
        let renewed = keys.verify(&keys.renew(&first).unwrap()).unwrap();
        assert_eq!(renewed.sid, first.sid);
        assert_eq!(renewed.csrf, first.csrf);
        assert_eq!(renewed.auth_time, first.auth_time);
        // Another session has another CSRF token.
        let other = keys
            .verify(&keys.issue("ann", Role::Admin, "stamp").unwrap())
            .unwrap();
        assert_ne!(other.csrf, first.csrf);
        // A session past the absolute limit is not renewed.
        let mut old = first.clone();
        old.auth_time -= MAX_SESSION.as_secs();
        assert!(keys.renew(&old).is_none());
        // Logout: every token of the session is refused, others are not.
        let token = keys.renew(&first).unwrap();
        keys.revoke(&first);
        assert!(matches!(
            keys.verify(&token),
            Err(ApiError::Unauthenticated)
        ));
        assert!(keys
            .verify(&keys.issue("ann", Role::Admin, "stamp").unwrap())
            .is_ok());
    }
}
