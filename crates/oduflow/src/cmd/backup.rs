//! `oduflow backup FILE`: a consistent copy of a SQLite database, taken
//! while workers run (`VACUUM INTO`). A plain `cp` of a database in WAL mode
//! can miss commits still in its `-wal` file, or copy a torn mix of both.

use crate::config::{BadInput, Config};
use crate::output::outln;
use crate::setup::open;
use anyhow::{Context, Result};
use oduflow_store::{Backend, Store};
use std::path::Path;

pub async fn run(cfg: &Config, file: &Path) -> Result<()> {
    if Store::check_url(&cfg.database_url)? == Backend::Postgres {
        return Err(BadInput(format!("{}: nothing was written", oduflow_store::StoreError::BackupUnsupported)).into());
    }
    if file.exists() {
        return Err(BadInput(format!("{} exists: name a new file; nothing was written", file.display())).into());
    }
    let (dir, name) = match (file.parent(), file.file_name()) {
        (Some(d), Some(n)) => (if d.as_os_str().is_empty() { Path::new(".") } else { d }, n),
        _ => return Err(BadInput(format!("{} is not a file name", file.display())).into()),
    };
    if !dir.is_dir() {
        return Err(BadInput(format!("{}: no such directory; nothing was written", dir.display())).into());
    }
    let Some(path) = file.to_str() else {
        return Err(BadInput(format!("{}: the file name must be UTF-8", file.display())).into());
    };
    let store = open(cfg).await?;
    // Written under a temporary name, made durable, then renamed: an
    // interrupted backup never leaves a truncated FILE behind.
    let partial = dir.join(format!(".{}.partial-{}", name.to_string_lossy(), std::process::id()));
    let partial_str = partial.to_str().context("the temporary file name is not UTF-8")?;
    let written = async {
        // Made empty and private first (VACUUM INTO fills an empty file):
        // a copy of the fleet's records is its user's alone, as the
        // database is, whatever the umask.
        oduflow_store::files::private_file(&partial)?;
        store.sqlite_backup_into(partial_str).await?;
        std::fs::File::open(&partial)?.sync_all()?;
        std::fs::rename(&partial, file)?;
        std::fs::File::open(dir)?.sync_all()?;
        anyhow::Ok(())
    }
    .await;
    if let Err(e) = written {
        let _ = std::fs::remove_file(&partial);
        return Err(e.context(format!("backup to {path} failed")));
    }
    outln!("backup written: {path} (a consistent copy of {})", oduflow_store::redact_url(&cfg.database_url))?;
    Ok(())
}
