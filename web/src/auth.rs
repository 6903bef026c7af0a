//! Console and REST authentication: signed tokens, roles and login
//! throttling.
//!
//! A successful login yields a JWT (HS256) signed with a key kept in the
//! data directory (`console/jwt.key`, created on first start, mode 0600).
//! The console carries it in an HttpOnly, Secure, SameSite=Strict cookie;
//! scripts send it as `Authorization: Bearer`. Tokens are short-lived;
//! [`Authed`] is the extractor that checks them on every request.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use uagate_store::Role;

use crate::error::ApiError;
use crate::WebState;

/// Name of the console's session cookie.
pub const COOKIE: &str = "uagate_token";

/// How long a token is valid; the console renews it while the operator is
/// active.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(15 * 60);

/// Failed logins (per user name, and per address) before a lockout.
pub const MAX_FAILURES: u32 = 5;

/// How long a lockout lasts; failures older than this are forgotten.
pub const LOCKOUT: Duration = Duration::from_secs(5 * 60);

/// Most user names and addresses tracked by the throttle; the oldest entry
/// is dropped beyond it, so a spray of names cannot grow memory.
const MAX_TRACKED: usize = 4096;

/// The signing key of console tokens.
pub struct TokenKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
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
        }
    }

    /// A token for `user` with `role`, valid for [`TOKEN_LIFETIME`].
    pub fn issue(&self, user: &str, role: Role) -> Result<String, ApiError> {
        let now = unix_now();
        let claims = Claims {
            sub: user.to_string(),
            role: role.as_str().to_string(),
            iat: now,
            exp: now + TOKEN_LIFETIME.as_secs(),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(ApiError::internal)
    }

    /// The user and role of a valid, unexpired token.
    pub fn verify(&self, token: &str) -> Result<Authed, ApiError> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 0;
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &validation)
            .map_err(|_| ApiError::Unauthenticated)?;
        let role = role_from_str(&data.claims.role).ok_or(ApiError::Unauthenticated)?;
        Ok(Authed {
            user: data.claims.sub,
            role,
        })
    }
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

fn unix_now() -> u64 {
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

/// An authenticated caller; extracting it from a request refuses the
/// request with 401 when it carries no valid token.
#[derive(Debug, Clone)]
pub struct Authed {
    /// The user name.
    pub user: String,
    /// The user's role when the token was issued.
    pub role: Role,
}

impl Authed {
    /// Refuses with 403 unless the caller's role is `at_least` or higher.
    pub fn require(&self, at_least: Role) -> Result<(), ApiError> {
        if rank(self.role) >= rank(at_least) {
            Ok(())
        } else {
            Err(ApiError::Forbidden {
                role: self.role.as_str(),
            })
        }
    }
}

/// The token of a request: the Bearer header first, then the cookie.
fn token_of(parts: &Parts) -> Option<&str> {
    let headers = &parts.headers;
    if let Some(v) = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        return v.strip_prefix("Bearer ").map(str::trim);
    }
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('='))
}

impl FromRequestParts<WebState> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &WebState) -> Result<Self, ApiError> {
        let token = token_of(parts).ok_or(ApiError::Unauthenticated)?;
        state.keys.verify(token)
    }
}

/// Failed-login counting per user name and per client address, with a
/// lockout after [`MAX_FAILURES`]. Called before and after every login.
#[derive(Default)]
pub struct LoginThrottle {
    by_key: Mutex<HashMap<String, Failures>>,
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    first: Instant,
    locked_until: Option<Instant>,
}

impl LoginThrottle {
    fn keys(user: &str, addr: Option<IpAddr>) -> Vec<String> {
        let mut keys = vec![format!("user:{user}")];
        if let Some(a) = addr {
            keys.push(format!("addr:{a}"));
        }
        keys
    }

    /// Refuses with [`ApiError::Throttled`] while the user or the address
    /// is locked out.
    pub fn check(&self, user: &str, addr: Option<IpAddr>, now: Instant) -> Result<(), ApiError> {
        let map = self.by_key.lock();
        for k in Self::keys(user, addr) {
            if let Some(until) = map.get(&k).and_then(|f| f.locked_until) {
                if until > now {
                    return Err(ApiError::Throttled {
                        retry_after_s: (until - now).as_secs().max(1),
                    });
                }
            }
        }
        Ok(())
    }

    /// Counts a failed login; the [`MAX_FAILURES`]th within [`LOCKOUT`]
    /// locks the user name and the address out for [`LOCKOUT`].
    pub fn failed(&self, user: &str, addr: Option<IpAddr>, now: Instant) {
        let mut map = self.by_key.lock();
        for k in Self::keys(user, addr) {
            if !map.contains_key(&k) && map.len() >= MAX_TRACKED {
                if let Some(oldest) = map
                    .iter()
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
            if f.count >= MAX_FAILURES {
                f.locked_until = Some(now + LOCKOUT);
            }
        }
    }

    /// A successful login clears the user's count (not the address's).
    pub fn succeeded(&self, user: &str) {
        self.by_key.lock().remove(&format!("user:{user}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_foreign_ones_are_refused() {
        let keys = TokenKeys::from_secret(&[7u8; 32]);
        let t = keys.issue("ann", Role::Operator).unwrap();
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
        let viewer = Authed {
            user: "v".into(),
            role: Role::Viewer,
        };
        assert!(viewer.require(Role::Viewer).is_ok());
        assert!(viewer.require(Role::Operator).is_err());
        let admin = Authed {
            user: "a".into(),
            role: Role::Admin,
        };
        assert!(admin.require(Role::Operator).is_ok());
    }

    #[test]
    fn lockout_after_five_failures_then_expires() {
        let t = LoginThrottle::default();
        let now = Instant::now();
        let addr: Option<IpAddr> = Some([127, 0, 0, 9].into());
        for _ in 0..MAX_FAILURES - 1 {
            t.failed("bob", addr, now);
        }
        assert!(t.check("bob", addr, now).is_ok());
        t.failed("bob", addr, now);
        assert!(matches!(
            t.check("bob", addr, now),
            Err(ApiError::Throttled { .. })
        ));
        // The address is locked for other names too.
        assert!(t.check("eve", addr, now).is_err());
        assert!(t
            .check("bob", addr, now + LOCKOUT + Duration::from_secs(1))
            .is_ok());
    }
}
