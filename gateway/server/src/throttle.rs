//! Failed-login counting shared by every password check of the appliance:
//! the console's login and setup forms, REST logins and OPC UA
//! ActivateSession with a UserName token. One instance per gateway, so a
//! guess through one door counts at the other. Called before
//! ([`LoginThrottle::check`]) and after every such check.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

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

/// Most counters the throttle keeps; the oldest is dropped beyond it (one
/// not locking anything if there is one), so a spray of names or addresses
/// can neither grow memory nor lift a lockout.
const MAX_TRACKED: usize = 4096;

/// A login refused without looking at its password: its (name, address)
/// pair or its address is locked out for `retry_after` more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Locked {
    /// How long the lockout still lasts.
    pub retry_after: Duration,
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
    /// Refuses with [`Locked`] while the (name, address) pair
    /// or the address is locked out; otherwise returns how long the login
    /// must wait before its password is checked (zero unless the name or
    /// everyone is being guessed at).
    pub fn check(
        &self,
        user: &str,
        addr: Option<IpAddr>,
        now: Instant,
    ) -> Result<Duration, Locked> {
        let map = self.by_key.lock();
        let mut locks = vec![ThrottleKey::Pair(user.to_string(), addr)];
        locks.extend(addr.map(ThrottleKey::Address));
        for k in &locks {
            if let Some(until) = map.get(k).and_then(|f| f.locked_until) {
                if until > now {
                    return Err(Locked {
                        retry_after: until - now,
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
                // The oldest counter goes, one whose lockout is over before
                // any in force: a spray of new names or addresses must not
                // lift a lockout.
                if let Some(oldest) = map
                    .iter()
                    .filter(|(k, _)| **k != ThrottleKey::All)
                    .min_by_key(|(_, f)| (f.locked_until.is_some_and(|u| u > now), f.first))
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
        assert!(matches!(t.check("bob", guesser, now), Err(Locked { .. })));
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

    #[test]
    fn a_spray_of_new_counters_does_not_lift_a_lockout() {
        let t = LoginThrottle::default();
        let now = Instant::now();
        let guesser: Option<IpAddr> = Some([127, 0, 0, 9].into());
        for _ in 0..MAX_FAILURES {
            t.failed("bob", guesser, now);
        }
        assert!(t.check("bob", guesser, now).is_err());
        // Later, many more counters than the throttle keeps.
        let later = now + Duration::from_secs(1);
        for i in 0..2 * MAX_TRACKED as u32 {
            t.failed(
                &format!("u{i}"),
                Some(std::net::Ipv4Addr::from(0x0a00_0000 + i).into()),
                later,
            );
        }
        assert!(t.tracked() <= MAX_TRACKED);
        assert!(
            matches!(t.check("bob", guesser, later), Err(Locked { .. })),
            "the spray lifted bob's lockout"
        );
    }
}
