//! The data directory as a move sees it: the `shard-<k>` directories, the staging
//! directory of a move, and what an interrupted move left behind.

use super::relayout::{crash_here_if_asked, Step};
use super::{
    io_error, Layout, LayoutError, Result, LAYOUT_FILE_IN_PROGRESS, STAGING_PREFIX, STAGING_SUFFIX,
};
use crate::wal;
use std::path::{Path, PathBuf};

pub(super) fn staging_dir(data_dir: &Path, generation: u64) -> PathBuf {
    data_dir.join(format!("{STAGING_PREFIX}{generation}{STAGING_SUFFIX}"))
}

/// Step 4 of a move whose record is committed: puts the staged shard directories in place
/// of the old ones. Idempotent, so a start after a crash anywhere in it finishes it.
pub(super) fn finish_move(data_dir: &Path, layout: &Layout) -> Result<()> {
    let staging = staging_dir(data_dir, layout.generation);
    if !staging.exists() {
        return Ok(());
    }
    tracing::info!(
        shards = layout.shard_count,
        staging = %staging.display(),
        "putting the shard directories of the committed layout in place"
    );
    for shard_id in 0..layout.shard_count {
        let staged = wal::dir::shard_dir(&staging, shard_id as u32);
        if !staged.exists() {
            // Already moved by an earlier, interrupted start.
            continue;
        }
        let live = wal::dir::shard_dir(data_dir, shard_id as u32);
        remove_dir_all_if_present(&live)?;
        std::fs::rename(&staged, &live).map_err(io_error("moving into place", &staged))?;
        crash_here_if_asked(Step::Moving);
    }
    sync_dir(data_dir)?;
    for dir in list_shard_dirs(data_dir)? {
        if dir.id >= layout.shard_count {
            remove_dir_all_if_present(&dir.path)?;
        }
    }
    sync_dir(data_dir)?;
    remove_dir_all_if_present(&staging)?;
    sync_dir(data_dir)
}

/// Removes what an interrupted move left before its commit: any staging directory still
/// here (a committed one was finished first) and a half-written record.
pub(super) fn discard_unfinished(data_dir: &Path) -> Result<()> {
    let entries = match std::fs::read_dir(data_dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(io_error("listing", data_dir)(error)),
    };
    let mut removed = false;
    for entry in entries {
        let entry = entry.map_err(io_error("listing", data_dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = entry.path();
        if name == LAYOUT_FILE_IN_PROGRESS {
            std::fs::remove_file(&path).map_err(io_error("removing", &path))?;
            removed = true;
        } else if parse_staging_name(name).is_some() {
            tracing::warn!(
                staging = %path.display(),
                "removing what an interrupted move to another shard count left; the layout it \
                 started from is intact"
            );
            remove_dir_all_if_present(&path)?;
            removed = true;
        }
    }
    if removed {
        sync_dir(data_dir)?;
    }
    Ok(())
}

fn parse_staging_name(name: &str) -> Option<u64> {
    let digits = name
        .strip_prefix(STAGING_PREFIX)?
        .strip_suffix(STAGING_SUFFIX)?;
    parse_decimal(digits)
}

/// A decimal without sign or leading zeros, as `format!("{n}")` writes it.
fn parse_decimal(digits: &str) -> Option<u64> {
    let canonical = digits == "0" || (!digits.starts_with('0') && !digits.is_empty());
    if !canonical || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

pub(super) struct ShardDir {
    pub(super) id: usize,
    pub(super) path: PathBuf,
    /// Holds a WAL file or a snapshot.
    pub(super) has_data: bool,
}

/// The `shard-<k>` directories in `data_dir`, by id.
pub(super) fn list_shard_dirs(data_dir: &Path) -> Result<Vec<ShardDir>> {
    let entries = match std::fs::read_dir(data_dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(io_error("listing", data_dir)(error)),
    };
    let mut dirs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_error("listing", data_dir))?;
        let name = entry.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|name| name.strip_prefix("shard-"))
            .and_then(parse_decimal)
            .and_then(|id| usize::try_from(id).ok())
        else {
            continue;
        };
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        let listing = wal::dir::list(&path).map_err(LayoutError::Wal)?;
        let has_data = !listing.wal_files.is_empty() || !listing.snapshots.is_empty();
        dirs.push(ShardDir { id, path, has_data });
    }
    dirs.sort_by_key(|dir| dir.id);
    Ok(dirs)
}

fn remove_dir_all_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(io_error("removing", path)(error)),
    }
}

pub(super) fn sync_dir(path: &Path) -> Result<()> {
    std::fs::File::open(path)
        .and_then(|directory| directory.sync_all())
        .map_err(io_error("syncing directory", path))
}
