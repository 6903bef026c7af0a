//! The process's open-file limit (RLIMIT_NOFILE) against the channels the
//! configuration allows.
//!
//! Every connection is a file descriptor, so `server.max_channel_count`
//! connections need about as many descriptors plus the gateway's own
//! (listeners, SQLite, the pair, the console, field connections). Many
//! systems start services with a soft limit of 1024 and a far higher hard
//! limit; [`start`](crate::start) raises the soft limit to the hard one,
//! which needs no privilege, and warns when even the hard limit is below
//! what the configuration needs (accepts would then fail with EMFILE long
//! before `max_channel_count` is reached).

use uagate_config::Config;

/// Descriptors the gateway holds besides its northbound connections:
/// listeners, the SQLite database and its WAL, the pair and console
/// connections, field connections, log files, with room to spare.
pub const OWN_DESCRIPTORS: u64 = 256;

/// What start-up found and did with the open-file limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    /// Soft limit before start-up.
    pub before: u64,
    /// Soft limit now.
    pub soft: u64,
    /// Hard limit (the ceiling an unprivileged process may raise to).
    pub hard: u64,
    /// Descriptors the configuration needs ([`needed`]).
    pub needed: u64,
}

impl FdLimit {
    /// Whether the soft limit now covers what the configuration needs.
    pub fn is_enough(&self) -> bool {
        self.soft >= self.needed
    }
}

/// Descriptors `config` needs: one per channel it allows (its opc.tcp,
/// opc.wss and opc.https connections together) plus [`OWN_DESCRIPTORS`].
pub fn needed(config: &Config) -> u64 {
    u64::from(config.server.max_channel_count).saturating_add(OWN_DESCRIPTORS)
}

/// The soft limit to set given the current `soft` and `hard` limits: the
/// hard limit, never lower than what is already set.
pub fn target_soft(soft: u64, hard: u64) -> u64 {
    soft.max(hard)
}

/// Raises this process's soft RLIMIT_NOFILE to its hard limit (when it is
/// lower) and reports the limits against `needed` descriptors.
pub fn raise(needed: u64) -> std::io::Result<FdLimit> {
    use rlimit::Resource;
    let (before, hard) = Resource::NOFILE.get()?;
    let soft = target_soft(before, hard);
    if soft != before {
        Resource::NOFILE.set(soft, hard)?;
    }
    Ok(FdLimit {
        before,
        soft,
        hard,
        needed,
    })
}

/// [`raise`] for `config`, logged: raised (info), still short (warning
/// naming `server.max_channel_count`), or not possible (warning).
pub fn raise_for(config: &Config) -> Option<FdLimit> {
    match raise(needed(config)) {
        Ok(l) => {
            if l.soft != l.before {
                tracing::info!(
                    from = l.before,
                    to = l.soft,
                    "open-file limit (RLIMIT_NOFILE) raised to the hard limit"
                );
            }
            if !l.is_enough() {
                tracing::warn!(
                    limit = l.soft,
                    needed = l.needed,
                    max_channel_count = config.server.max_channel_count,
                    "open-file limit (RLIMIT_NOFILE, hard limit included) is below server.max_channel_count + {OWN_DESCRIPTORS}: connections beyond it will be refused by the system; raise the hard limit (e.g. LimitNOFILE= in the service unit)"
                );
            }
            Some(l)
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read or raise the open-file limit (RLIMIT_NOFILE)");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_limit_goes_to_the_hard_limit_never_down() {
        assert_eq!(target_soft(1024, 524_288), 524_288);
        assert_eq!(target_soft(20_000, 20_000), 20_000);
        // Never lowered (a soft limit above the hard one cannot exist, but
        // the rule holds anyway).
        assert_eq!(target_soft(4096, 1024), 4096);
    }

    #[test]
    fn need_is_channels_plus_own_descriptors() {
        let mut c = Config::default();
        c.server.max_channel_count = 10_013;
        assert_eq!(needed(&c), 10_013 + OWN_DESCRIPTORS);
        let l = FdLimit {
            before: 1024,
            soft: 1024,
            hard: 1024,
            needed: needed(&c),
        };
        assert!(!l.is_enough());
        assert!(FdLimit { soft: 20_000, ..l }.is_enough());
    }

    #[test]
    fn raise_sets_the_soft_limit_to_the_hard_one() {
        use rlimit::Resource;
        // Not lowered first: other tests of this process hold sockets.
        let (soft, hard) = Resource::NOFILE.get().unwrap();
        let l = raise(100).unwrap();
        assert_eq!(l.before, soft);
        assert_eq!((l.soft, l.hard), (hard, hard));
        assert_eq!(Resource::NOFILE.get().unwrap(), (hard, hard));
        assert!(l.soft >= l.before);
    }
}
