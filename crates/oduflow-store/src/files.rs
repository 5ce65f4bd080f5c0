//! Files and folders oduflow creates on the host (the SQLite database, its
//! lock folder, the state directory): private to its user whatever the
//! umask, since they hold the fleet's records and secrets' neighbours.

use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// Creates `dir` and any missing parent, each new one readable by its owner
/// only (0700). An existing folder keeps its mode.
pub fn private_dir_all(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Creates `file` empty, readable and writable by its owner only (0600),
/// unless it exists. SQLite gives its write-ahead log and shared-memory
/// files the mode of the database file.
pub fn private_file(file: &Path) -> io::Result<()> {
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(file) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}
