//! Restore detection. The database carries a random lineage id and a
//! high-water mark (its highest event id), which only grows. Each worker host
//! remembers the highest mark it has seen for that lineage in a small local
//! file; a database whose mark is lower than that is an older copy (a restored
//! backup), which may lag the cloud. The queue is then stopped until an
//! inventory pass (`oduflow reconcile --all`) has compared the provider with
//! the receipts. An operator can also declare a restore (`oduflow restore
//! declare`), which is the only way to catch one on a host that never saw the
//! newer state.

use anyhow::Result;
use oduflow_store::Store;
use std::path::PathBuf;

/// Tries, 5 ms apart, for the host's lineage lock (2 s in all).
const LOCK_TRIES_MAX: usize = 400;

fn state_dir() -> PathBuf {
    if let Ok(d) = std::env::var("ODUFLOW_STATE_DIR") {
        return PathBuf::from(d);
    }
    match std::env::var("HOME") {
        Ok(h) => PathBuf::from(h).join(".local/state/oduflow"),
        Err(_) => PathBuf::from(".oduflow-state"),
    }
}

/// Compares the database with this host's memory of it; declares a restore
/// when the database went backwards. Returns the reason if one is pending.
pub async fn check(store: &Store, now_ms: i64) -> Result<Option<String>> {
    let lineage = store.lineage().await?;
    let file = state_dir().join(format!("lineage-{lineage}"));
    // Processes on this host compare and update the mark one at a time, and
    // each reads the file before the database: a mark in the file was seen
    // before this read, so the database's can only be higher, unless it was
    // restored. (Reading the database first let a slower process compare its
    // older reading with a newer mark another had just written: a false
    // restore. Writing without the lock could lower the mark: a missed one.)
    let _ = oduflow_store::files::private_dir_all(&state_dir());
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(state_dir().join(format!("lineage-{lineage}.lock")));
    // Never a blocking lock here: a worker's restore watcher and its final
    // check run in one process, and a thread blocked on the lock could hold
    // up the very task that would release it. Polled, within a bound; past
    // it the check goes on without the lock (best effort, as before).
    let mut guard = None;
    if let Ok(f) = &lock {
        for _ in 0..LOCK_TRIES_MAX {
            match f.try_lock() {
                Ok(()) => {
                    guard = Some(f);
                    break;
                }
                Err(std::fs::TryLockError::WouldBlock) => tokio::time::sleep(std::time::Duration::from_millis(5)).await,
                Err(std::fs::TryLockError::Error(_)) => break,
            }
        }
    }
    // A `reconcile --all` that completed meanwhile moved the database to a
    // new lineage: this host's memory of the old one says nothing about it.
    if store.lineage().await? != lineage {
        if let Some(f) = guard {
            let _ = f.unlock();
        }
        return Ok(store.restore_pending().await?);
    }
    let (seen, seen_stamp) = remembered(&file);
    let mark = store.high_water_mark().await?;
    let behind = behind(store, seen, seen_stamp.as_deref(), mark).await?;
    if let Some(b) = &behind
        && store.restore_pending().await?.is_none()
    {
        store.restore_declare(&b.why, "lineage", now_ms).await?;
    }
    let diverged = behind.as_ref().is_some_and(|b| b.diverged);
    if !diverged && (mark > seen || (mark == seen && seen_stamp.is_none())) {
        // Best effort: a host that cannot remember still runs, and an
        // operator can declare a restore by hand.
        let stamp = store.event_stamp(mark).await?.unwrap_or_default();
        let _ = std::fs::write(&file, format!("{mark} {stamp}"));
    }
    if let Some(f) = guard {
        let _ = f.unlock();
    }
    Ok(store.restore_pending().await?)
}

/// This host's memory of a lineage: "<mark> <stamp>", the highest event id
/// seen and what that event was (0 and none when the file is missing).
fn remembered(file: &std::path::Path) -> (i64, Option<String>) {
    let remembered = std::fs::read_to_string(file).unwrap_or_default();
    let mut words = remembered.split_whitespace();
    let seen: i64 = words.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    (seen, words.next().map(str::to_owned))
}

/// Why a database at high-water mark `mark` is an older copy than the one
/// this host saw (`seen`, and the stamp of the event at it).
struct Behind {
    /// The event at `seen` is another one: the history diverged.
    diverged: bool,
    why: String,
}

async fn behind(store: &Store, seen: i64, seen_stamp: Option<&str>, mark: i64) -> Result<Option<Behind>> {
    // A restored copy that took a few writes before anyone compared can
    // reach (or pass) the remembered mark again; the event at that id is
    // then another one: the history diverged.
    let diverged = match seen_stamp {
        Some(stamp) if seen > 0 && mark >= seen => store.event_stamp(seen).await?.as_deref() != Some(stamp),
        _ => false,
    };
    Ok(if diverged {
        Some(Behind {
            diverged,
            why: format!(
                "the database's event {seen} is not the one this host saw: restored from a backup, then written to?"
            ),
        })
    } else if mark < seen {
        Some(Behind {
            diverged,
            why: format!(
                "database high-water mark {mark} is below {seen}, seen earlier by this host: restored from a backup?"
            ),
        })
    } else {
        None
    })
}

/// What `oduflow check` reports: the restore pending (declared, or what
/// this host's memory shows and the next worker or `serve` here would
/// declare), the database's high-water mark and this host's. Reads only:
/// declares nothing and writes no memory file.
pub async fn peek(store: &Store) -> Result<(Option<String>, i64, i64)> {
    let mark = store.high_water_mark().await?;
    if let Some(why) = store.restore_pending().await? {
        return Ok((Some(why), mark, 0));
    }
    let (seen, seen_stamp) = remembered(&state_dir().join(format!("lineage-{}", store.lineage().await?)));
    let why = behind(store, seen, seen_stamp.as_deref(), mark).await?.map(|b| {
        format!("not declared yet, but {}: the next worker or `oduflow serve` on this host will declare it", b.why)
    });
    Ok((why, mark, seen))
}
