//! The data directory (`--data`): private to the gateway's user, and held
//! by one long-running command at a time.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::path::Path;

use anyhow::{bail, Context, Result};

/// The lock file in a data directory; it holds the pid of the command
/// that has the lock (for the message another one prints).
pub const LOCK_FILE: &str = "uagate.lock";

/// Creates `dir` (mode 0700), or makes an existing one of ours 0700: it
/// holds the store (password hashes, field-server passwords), the pair's
/// log and keys. Called by every command before it writes there.
pub fn prepare(dir: &Path) -> Result<()> {
    uagate_store::files::private_dir(dir)
        .with_context(|| format!("cannot create data directory {}", dir.display()))
}

/// An exclusive lock on a data directory, held by `run`, `demo` and
/// `witness` for as long as they run: a second gateway on the same
/// directory would share its databases under the same pair identity and
/// take its pair listener file (`pair/listen`) over. The operating system
/// drops the lock when the process ends, however it ends; the lock file
/// stays. The short commands (`user`, `trust`, `config`, `pair`, `plan`,
/// `tls`) take no lock: they work beside the running gateway.
#[must_use = "the directory is held only while the lock lives"]
pub struct DataDirLock {
    /// The open lock file; closing it releases the lock.
    _file: File,
}

impl DataDirLock {
    /// Takes the lock on `dir` (prepared first, see [`prepare`]), or
    /// refuses with "data directory DIR is in use by another uagate (pid
    /// N)" when another process holds it; then makes every file in `dir`
    /// private to this user (see [`uagate_store::files::private_tree`]).
    /// Called first by the long-running commands, before they open
    /// anything in `dir`.
    pub fn acquire(dir: &Path) -> Result<DataDirLock> {
        prepare(dir)?;
        let path = dir.join(LOCK_FILE);
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(uagate_store::files::PRIVATE_FILE_MODE);
        }
        let mut file = options
            .open(&path)
            .with_context(|| format!("cannot open the lock file {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let pid = match file.read_to_string(&mut holder) {
                    Ok(_) => holder.trim().parse::<u32>().ok(),
                    Err(_) => None,
                };
                let pid = pid.map_or_else(|| "unknown".to_string(), |p| p.to_string());
                bail!(
                    "data directory {} is in use by another uagate (pid {pid})",
                    dir.display()
                );
            }
            Err(TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", path.display()))
            }
        }
        file.set_len(0)
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .with_context(|| format!("cannot write the lock file {}", path.display()))?;
        let changed = uagate_store::files::private_tree(dir)
            .with_context(|| format!("cannot make the data directory {} private", dir.display()))?;
        if changed > 0 {
            tracing::info!(
                dir = %dir.display(),
                changed,
                "files in the data directory that others could read made private to this user"
            );
        }
        Ok(DataDirLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_held_directory_is_refused_naming_the_holder_and_freed_on_drop() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d");
        let held = DataDirLock::acquire(&dir).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap(),
            format!("{}\n", std::process::id())
        );
        let refused = DataDirLock::acquire(&dir).err().unwrap().to_string();
        assert_eq!(
            refused,
            format!(
                "data directory {} is in use by another uagate (pid {})",
                dir.display(),
                std::process::id()
            )
        );
        drop(held);
        let _again = DataDirLock::acquire(&dir).unwrap();
    }
}
