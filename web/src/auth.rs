//! Console and REST authentication: signed tokens, roles and login
//! throttling.
//!
//! A successful login yields a JWT (HS256) signed with a key kept in the
//! data directory (`console/jwt.key`, created on first start, mode 0600).
//! The console carries it in an HttpOnly, Secure, SameSite=Strict cookie;
//! scripts send it as `Authorization: Bearer`. Tokens are short-lived;
//! [`crate::access`] checks them on every request and yields an [`Authed`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// Failed logins of one user name from one client address before that
/// pair is locked out. Failures from other addresses never lock a name
/// out: they slow it down (see [`SLOWDOWN_AFTER`]).
pub const MAX_FAILURES: u32 = 5;

/// Failed logins from one client address, whatever the names, before the
/// address is locked out (password spraying).
pub const MAX_ADDRESS_FAILURES: u32 = 20;

/// How long a lockout lasts; failures older than this are forgotten.
pub const LOCKOUT: Duration = Duration::from_secs(5 * 60);

/// Failed logins of one user name from all addresses together, within
/// [`LOCKOUT`], after which every login of that name is answered late:
/// [`SLOWDOWN_STEP`] per further failure, at most [`MAX_SLOWDOWN`]. The
/// right password still logs in, from any address that is not locked.
pub const SLOWDOWN_AFTER: u32 = 5;

/// Failed logins of all names from all addresses within [`LOCKOUT`] after
/// which every login is answered late (the global slowdown against a
/// distributed guess), by the same steps.
pub const GLOBAL_SLOWDOWN_AFTER: u32 = 50;

/// Delay added per failure past a slowdown threshold.
pub const SLOWDOWN_STEP: Duration = Duration::from_millis(250);

/// Longest delay a login waits before its password is checked.
pub const MAX_SLOWDOWN: Duration = Duration::from_secs(2);

/// Most counters the throttle keeps; the oldest is dropped beyond it, so a
/// spray of names or addresses cannot grow memory.
const MAX_TRACKED: usize = 4096;

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

/// Failed-login counting with lockouts per (user name, address) and per
/// address, and a slowdown per user name and for everyone. Called before
/// ([`LoginThrottle::check`]) and after every login and setup attempt.
#[derive(Default)]
pub struct LoginThrottle {
    by_key: Mutex<HashMap<ThrottleKey, Failures>>,
}

/// What a failure counter counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum ThrottleKey {
    /// One name from one address (or from an unknown address): locks.
    Pair(String, Option<IpAddr>),
    /// One address, any name: locks at [`MAX_ADDRESS_FAILURES`].
    Address(IpAddr),
    /// One name, any address: slows down.
    Name(String),
    /// Everyone: slows down.
    All,
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    first: Instant,
    locked_until: Option<Instant>,
}

impl LoginThrottle {
    /// Refuses with [`ApiError::Throttled`] while the (name, address) pair
    /// or the address is locked out; otherwise returns how long the login
    /// must wait before its password is checked (zero unless the name or
    /// everyone is being guessed at).
    pub fn check(
        &self,
        user: &str,
        addr: Option<IpAddr>,
        now: Instant,
    ) -> Result<Duration, ApiError> {
        let map = self.by_key.lock();
        let mut locks = vec![ThrottleKey::Pair(user.to_string(), addr)];
        locks.extend(addr.map(ThrottleKey::Address));
        for k in &locks {
            if let Some(until) = map.get(k).and_then(|f| f.locked_until) {
                if until > now {
                    return Err(ApiError::Throttled {
                        retry_after_s: (until - now).as_secs().max(1),
                    });
                }
            }
        }
        let recent = |k: &ThrottleKey| {
            map.get(k)
                .filter(|f| now.duration_since(f.first) <= LOCKOUT)
                .map_or(0, |f| f.count)
        };
        let name = slowdown(recent(&ThrottleKey::Name(user.to_string())), SLOWDOWN_AFTER);
        let all = slowdown(recent(&ThrottleKey::All), GLOBAL_SLOWDOWN_AFTER);
        Ok(name.max(all))
    }

    /// Counts a failed login: the [`MAX_FAILURES`]th of the (name,
    /// address) pair within [`LOCKOUT`] locks the pair out for
    /// [`LOCKOUT`], the [`MAX_ADDRESS_FAILURES`]th of the address locks the
    /// address out; the name's and everyone's counts feed the slowdown.
    pub fn failed(&self, user: &str, addr: Option<IpAddr>, now: Instant) {
        let mut map = self.by_key.lock();
        let mut keys = vec![
            (
                ThrottleKey::Pair(user.to_string(), addr),
                Some(MAX_FAILURES),
            ),
            (ThrottleKey::Name(user.to_string()), None),
            (ThrottleKey::All, None),
        ];
        if let Some(a) = addr {
            keys.push((ThrottleKey::Address(a), Some(MAX_ADDRESS_FAILURES)));
        }
        for (k, lock_at) in keys {
            if !map.contains_key(&k) && map.len() >= MAX_TRACKED {
                if let Some(oldest) = map
                    .iter()
                    .filter(|(k, _)| **k != ThrottleKey::All)
                    .min_by_key(|(_, f)| f.first)
                    .map(|(k, _)| k.clone())
                {
                    map.remove(&oldest);
                }
            }
            let f = map.entry(k).or_insert(Failures {
                count: 0,
                first: now,
                locked_until: None,
            });
            if now.duration_since(f.first) > LOCKOUT {
                *f = Failures {
                    count: 0,
                    first: now,
                    locked_until: None,
                };
            }
            f.count += 1;
            if lock_at.is_some_and(|n| f.count >= n) {
                f.locked_until = Some(now + LOCKOUT);
            }
        }
    }

    /// A successful login clears the count of its (name, address) pair;
    /// the address's, the name's and everyone's counts run out with time.
    pub fn succeeded(&self, user: &str, addr: Option<IpAddr>) {
        self.by_key
            .lock()
            .remove(&ThrottleKey::Pair(user.to_string(), addr));
    }

    /// How many counters the throttle holds (bounded by its capacity).
    pub fn tracked(&self) -> usize {
        self.by_key.lock().len()
    }
}

/// The delay for `count` recent failures past a threshold of `after`.
fn slowdown(count: u32, after: u32) -> Duration {
    let over = count.saturating_sub(after.saturating_sub(1));
    SLOWDOWN_STEP.saturating_mul(over).min(MAX_SLOWDOWN)
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

    #[test]
    fn a_name_is_locked_only_from_the_address_that_guessed_it() {
        let t = LoginThrottle::default();
        let now = Instant::now();
        let guesser: Option<IpAddr> = Some([127, 0, 0, 9].into());
        let admin: Option<IpAddr> = Some([127, 0, 0, 10].into());
        for _ in 0..MAX_FAILURES - 1 {
            t.failed("bob", guesser, now);
        }
        assert!(t.check("bob", guesser, now).is_ok());
        t.failed("bob", guesser, now);
        assert!(matches!(
            t.check("bob", guesser, now),
            Err(ApiError::Throttled { .. })
        ));
        // The same name from another address is slowed, not locked.
        let delay = t.check("bob", admin, now).unwrap();
        assert_eq!(delay, SLOWDOWN_STEP);
        // Another name from the guessing address is neither.
        assert_eq!(t.check("eve", guesser, now).unwrap(), Duration::ZERO);
        // The lockout ends, and old failures no longer slow anything.
        let later = now + LOCKOUT + Duration::from_secs(1);
        assert_eq!(t.check("bob", guesser, later).unwrap(), Duration::ZERO);
    }

    #[test]
    fn the_slowdown_grows_per_failure_up_to_its_cap() {
        let t = LoginThrottle::default();
        let now = Instant::now();
        let admin: Option<IpAddr> = Some([10, 0, 0, 1].into());
        assert_eq!(t.check("root", admin, now).unwrap(), Duration::ZERO);
        for i in 0..40u8 {
            // Every guess from its own address: no lockout anywhere.
            t.failed("root", Some([10, 1, 0, i].into()), now);
        }
        assert_eq!(t.check("root", admin, now).unwrap(), MAX_SLOWDOWN);
        assert_eq!(slowdown(SLOWDOWN_AFTER - 1, SLOWDOWN_AFTER), Duration::ZERO);
        assert_eq!(
            slowdown(SLOWDOWN_AFTER + 1, SLOWDOWN_AFTER),
            SLOWDOWN_STEP * 2
        );
    }

    #[test]
    fn spraying_names_locks_the_address_and_slows_everyone() {
        let t = LoginThrottle::default();
        let now = Instant::now();
        let sprayer: Option<IpAddr> = Some([192, 0, 2, 1].into());
        for i in 0..MAX_ADDRESS_FAILURES {
            assert!(t.check(&format!("user{i}"), sprayer, now).is_ok());
            t.failed(&format!("user{i}"), sprayer, now);
        }
        assert!(t.check("admin", sprayer, now).is_err());
        assert!(t.check("admin", Some([192, 0, 2, 2].into()), now).is_ok());
        // A distributed guess over many names slows every login.
        for i in 0..GLOBAL_SLOWDOWN_AFTER {
            t.failed(
                &format!("n{i}"),
                Some([198, 51, 100, (i % 250) as u8].into()),
                now,
            );
        }
        assert!(t.check("admin", Some([192, 0, 2, 2].into()), now).unwrap() > Duration::ZERO);
    }

    #[test]
    fn the_counters_stay_bounded() {
        let t = LoginThrottle::default();
        let now = Instant::now();
        for i in 0..3 * MAX_TRACKED as u32 {
            t.failed(
                &format!("u{i}"),
                Some(std::net::Ipv4Addr::from(i).into()),
                now,
            );
        }
        assert!(t.tracked() <= MAX_TRACKED, "{}", t.tracked());
    }
}
