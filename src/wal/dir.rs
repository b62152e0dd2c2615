//! A shard's data directory: the names of its WAL and snapshot files and what is in it.
//!
//! Owns the naming rules of `docs/format.md` (`shard-<k>/`, `<lsn:020>.wal`, `<lsn:020>.snap`,
//! `<lsn:020>.snap.inprogress`, and `<name>.damaged` for a file force recovery set aside).
//! Knows nothing of what is inside the files.

use std::path::{Path, PathBuf};

use crate::wal::error::{Result, WalError};

pub const WAL_SUFFIX: &str = ".wal";
pub const SNAPSHOT_SUFFIX: &str = ".snap";
pub const IN_PROGRESS_SUFFIX: &str = ".snap.inprogress";
/// Added to the name of a file that force recovery could not use and kept for inspection;
/// no listing includes it.
pub const DAMAGED_SUFFIX: &str = ".damaged";
/// A WAL file set aside because it follows an uncommitted schema change.
pub const UNCOMMITTED_SUFFIX: &str = ".uncommitted";

/// `<data_dir>/shard-<k>`.
pub fn shard_dir(data_dir: &Path, shard_id: u32) -> PathBuf {
    data_dir.join(format!("shard-{shard_id}"))
}

pub fn wal_file_name(lsn_first: u64) -> String {
    format!("{lsn_first:020}{WAL_SUFFIX}")
}

pub fn snapshot_file_name(lsn: u64) -> String {
    format!("{lsn:020}{SNAPSHOT_SUFFIX}")
}

pub fn in_progress_file_name(lsn: u64) -> String {
    format!("{lsn:020}{IN_PROGRESS_SUFFIX}")
}

/// The LSN in a name like `<20 digits><suffix>`, or `None` for any other name.
fn parse_lsn(name: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The files of one shard directory, each list sorted by LSN.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Listing {
    pub wal_files: Vec<(u64, PathBuf)>,
    pub snapshots: Vec<(u64, PathBuf)>,
    pub in_progress: Vec<PathBuf>,
}

/// Lists `dir`; a directory that does not exist is empty (a shard's first start).
pub fn list(dir: &Path) -> Result<Listing> {
    let mut listing = Listing::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(listing),
        Err(error) => return Err(WalError::io("listing data directory", dir, error)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| WalError::io("listing data directory", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = entry.path();
        if let Some(lsn) = parse_lsn(name, WAL_SUFFIX) {
            listing.wal_files.push((lsn, path));
        } else if let Some(lsn) = parse_lsn(name, SNAPSHOT_SUFFIX) {
            listing.snapshots.push((lsn, path));
        } else if parse_lsn(name, IN_PROGRESS_SUFFIX).is_some() {
            listing.in_progress.push(path);
        }
    }
    listing.wal_files.sort();
    listing.snapshots.sort();
    listing.in_progress.sort();
    Ok(listing)
}

/// Renames `path` to `<path>.damaged` (replacing a file of that name) and syncs the
/// directory; returns the new name.
pub fn set_aside(path: &Path) -> Result<PathBuf> {
    set_aside_as(path, DAMAGED_SUFFIX)
}

/// Renames a WAL file whose rows all follow a schema change that was never committed to
/// `<path>.uncommitted` (none of its rows was acknowledged), syncing the directory.
pub fn set_aside_uncommitted(path: &Path) -> Result<PathBuf> {
    set_aside_as(path, UNCOMMITTED_SUFFIX)
}

fn set_aside_as(path: &Path, suffix: &str) -> Result<PathBuf> {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    let set_aside = PathBuf::from(name);
    std::fs::rename(path, &set_aside)
        .map_err(|e| WalError::io("setting a damaged file aside", path, e))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::File::open(dir)
        .and_then(|directory| directory.sync_all())
        .map_err(|e| WalError::io("syncing data directory", dir, e))?;
    Ok(set_aside)
}

/// Makes the directory (and its parents) if missing.
pub fn create(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| WalError::io("creating data directory", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sort_as_numbers() {
        assert_eq!(wal_file_name(1), "00000000000000000001.wal");
        assert_eq!(
            parse_lsn(&wal_file_name(u64::MAX), WAL_SUFFIX),
            Some(u64::MAX)
        );
        assert_eq!(
            parse_lsn(&snapshot_file_name(42), SNAPSHOT_SUFFIX),
            Some(42)
        );
        assert_eq!(parse_lsn(&in_progress_file_name(42), SNAPSHOT_SUFFIX), None);
        assert_eq!(parse_lsn("1.wal", WAL_SUFFIX), None);
        assert!(wal_file_name(9) < wal_file_name(10));
    }
}
