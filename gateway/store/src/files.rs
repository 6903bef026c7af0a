//! Who may read the files that hold secrets: the data directory and the
//! SQLite databases in it (argon2 hashes of the users' passwords, the
//! field servers' passwords, the pair's log holding the same values) are
//! for the gateway's own user only, whatever the umask of the shell or
//! service that started it. So is every other file in it (private keys,
//! certificates, the lock file, ...): [`private_umask`] keeps the files
//! the gateway creates from being readable by others, [`private_tree`]
//! mends those an older version (or a copy) left readable.

use std::io;
use std::path::{Path, PathBuf};

/// The mode of a directory holding secrets.
pub const PRIVATE_DIR_MODE: u32 = 0o700;
/// The mode of a database file (and of its `-wal` and `-shm` files).
pub const PRIVATE_FILE_MODE: u32 = 0o600;

/// Creates `dir` (and its missing parents) with mode 0700, or sets an
/// existing `dir` that belongs to this process's user to 0700 (one of
/// somebody else's is left as it is). Called for the data directory by
/// every command before it writes there, and by the pair for its own
/// directory in it.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        match std::fs::metadata(dir) {
            Ok(meta) => {
                let ours = meta.uid() == rustix::process::geteuid().as_raw();
                if ours && meta.permissions().mode() & 0o777 != PRIVATE_DIR_MODE {
                    std::fs::set_permissions(
                        dir,
                        std::fs::Permissions::from_mode(PRIVATE_DIR_MODE),
                    )?;
                }
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => std::fs::DirBuilder::new()
                .recursive(true)
                .mode(PRIVATE_DIR_MODE)
                .create(dir),
            Err(e) => Err(e),
        }
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir_all(dir)
    }
}

/// Makes sure the SQLite database `db` is readable by this process's user
/// only: creates it empty with mode 0600 when it is missing (SQLite gives
/// the `-wal` and `-shm` files it creates beside it the database's mode),
/// and sets an existing one, and existing `-wal`/`-shm` files (left by an
/// older version), to 0600. Called before the database is opened: by
/// [`crate::Store::open`], and by the pair for its Raft log.
pub fn private_db_file(db: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        // An empty file is an empty database to SQLite.
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .mode(PRIVATE_FILE_MODE)
            .open(db)?;
        for file in [db.to_path_buf(), sibling(db, "-wal"), sibling(db, "-shm")] {
            match std::fs::metadata(&file) {
                Ok(meta) if meta.permissions().mode() & 0o777 != PRIVATE_FILE_MODE => {
                    std::fs::set_permissions(
                        &file,
                        std::fs::Permissions::from_mode(PRIVATE_FILE_MODE),
                    )?
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
    #[cfg(not(unix))]
    {
        let _ = db;
        Ok(())
    }
}

/// The permission bits a file or directory in the data directory never
/// has: any for the group or others.
pub const NOT_PRIVATE: u32 = 0o077;

/// Adds [`NOT_PRIVATE`] to the process's umask: every file and directory
/// the process creates from now on, by its own code or a library's (the
/// OPC UA certificate store, SQLite), is for its own user only (0600,
/// 0700 at most), whatever the umask of the shell that started it (the
/// appliance's unit sets 0077 already). Called first by the `uagate`
/// binary, before any thread starts (the umask is the process's).
pub fn private_umask() {
    #[cfg(unix)]
    {
        use rustix::fs::Mode;
        use rustix::process::umask;
        let before = umask(Mode::from_raw_mode(NOT_PRIVATE));
        umask(before | Mode::from_raw_mode(NOT_PRIVATE));
    }
}

/// Removes [`NOT_PRIVATE`] bits from `dir` and from every file and
/// directory under it that belongs to this process's user, without
/// following symbolic links (others' files are left as they are). Returns
/// how many it changed. Called at start by the commands that hold the data
/// directory (`run`, `demo`, `witness`), so that files an older version
/// wrote readable by others (certificates, the lock file, the pair's
/// files, a private key copied in) are private from then on.
pub fn private_tree(dir: &Path) -> io::Result<usize> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let me = rustix::process::geteuid().as_raw();
        let mut changed = 0;
        let mut pending = vec![dir.to_path_buf()];
        while let Some(path) = pending.pop() {
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(m) => m,
                // Gone meanwhile (a database's -shm, a temporary file).
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(with_path(&path, e)),
            };
            if meta.file_type().is_symlink() || meta.uid() != me {
                continue;
            }
            let mode = meta.permissions().mode();
            if mode & NOT_PRIVATE != 0 {
                match std::fs::set_permissions(
                    &path,
                    std::fs::Permissions::from_mode(mode & !NOT_PRIVATE & 0o7777),
                ) {
                    Ok(()) => changed += 1,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(with_path(&path, e)),
                }
            }
            if meta.is_dir() {
                let entries = match std::fs::read_dir(&path) {
                    Ok(entries) => entries,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(with_path(&path, e)),
                };
                for entry in entries {
                    pending.push(entry.map_err(|e| with_path(&path, e))?.path());
                }
            }
        }
        Ok(changed)
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(0)
    }
}

/// `e` with the path it happened at in its message.
#[cfg(unix)]
fn with_path(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// `db` with `suffix` appended to its file name (`uagate.db-wal`).
#[cfg(unix)]
fn sibling(db: &Path, suffix: &str) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

#[cfg(all(test, unix))]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_new_directory_and_database_are_private() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        let db = dir.join("x.db");
        private_db_file(&db).unwrap();
        assert_eq!(mode(&db), 0o600);
        assert_eq!(std::fs::metadata(&db).unwrap().len(), 0);
    }

    #[test]
    fn a_tree_left_readable_is_made_private_without_following_links() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, b"not ours to change").unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o644)).unwrap();
        let dir = tmp.path().join("data");
        let key = dir.join("pki/private/private.pem");
        let cert = dir.join("pki/own/cert.der");
        let lock = dir.join("uagate.lock");
        std::fs::create_dir_all(key.parent().unwrap()).unwrap();
        std::fs::create_dir_all(cert.parent().unwrap()).unwrap();
        for (f, m) in [(&key, 0o644), (&cert, 0o664), (&lock, 0o604)] {
            std::fs::write(f, b"x").unwrap();
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(m)).unwrap();
        }
        let dirs = [
            dir.clone(),
            dir.join("pki"),
            dir.join("pki/own"),
            dir.join("pki/private"),
        ];
        for d in &dirs {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::os::unix::fs::symlink(&outside, dir.join("link")).unwrap();
        assert_eq!(private_tree(&dir).unwrap(), 7);
        assert_eq!(mode(&key), 0o600);
        assert_eq!(mode(&cert), 0o600);
        assert_eq!(mode(&lock), 0o600);
        for d in &dirs {
            assert_eq!(mode(d), 0o700, "{}", d.display());
        }
        assert_eq!(mode(&outside), 0o644, "a link's target is left alone");
        assert_eq!(private_tree(&dir).unwrap(), 0, "nothing left to change");
    }

    #[test]
    fn files_made_after_private_umask_are_private() {
        let tmp = tempfile::tempdir().unwrap();
        private_umask();
        let f = tmp.path().join("made");
        std::fs::write(&f, b"x").unwrap();
        let d = tmp.path().join("dir");
        std::fs::create_dir(&d).unwrap();
        assert_eq!(mode(&f) & NOT_PRIVATE, 0);
        assert_eq!(mode(&d) & NOT_PRIVATE, 0);
    }

    #[test]
    fn existing_ones_of_ours_are_made_private_and_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let db = dir.join("x.db");
        std::fs::write(&db, b"kept").unwrap();
        std::fs::write(dir.join("x.db-wal"), b"").unwrap();
        for f in [&db, &dir.join("x.db-wal")] {
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        private_dir(&dir).unwrap();
        private_db_file(&db).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&db), 0o600);
        assert_eq!(mode(&dir.join("x.db-wal")), 0o600);
        assert_eq!(std::fs::read(&db).unwrap(), b"kept");
    }
}
