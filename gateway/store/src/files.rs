//! Who may read the files that hold secrets: the data directory and the
//! SQLite databases in it (argon2 hashes of the users' passwords, the
//! field servers' passwords, the pair's log holding the same values) are
//! for the gateway's own user only, whatever the umask of the shell or
//! service that started it.

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
