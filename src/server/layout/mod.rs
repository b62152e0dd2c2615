//! The data directory's layout: over how many shards its rows are spread and by which
//! placement function, recorded in `<data_dir>/layout.toml`; and, when a start asks for
//! another layout (another shard count, or a space moved between `shard = "all"` and
//! `"single"`), re-placing every row by its key before any shard serves.
//!
//! Owns the layout record, the `relayout-<generation>.inprogress/` staging directory and the
//! order of the steps that make a move crash-safe. Knows the config, storage engines (which
//! hold the rows while they move) and the `wal` layer's recovery and snapshot writer; nothing
//! of cores, the network or the WAL writer. The shard directories keep their names
//! (`shard-<k>`), so nothing else in the server needs to know a move ever happened.
//!
//! This file holds the layout and the decision to move; `relayout` the move itself,
//! `directory` the shard and staging directories, `record` the `layout.toml` format.
//!
//! # A move, and where a crash leaves it
//!
//! 1. Every old shard directory is recovered (snapshot + WAL, as at any start) into an engine
//!    of its own, one after another; each tuple goes to its owner in the new layout.
//! 2. Each new shard's tuples are loaded into an engine with the new shard's memory share
//!    (so rows that do not fit are refused here, before anything changes) and written as one
//!    snapshot into `relayout-<g>.inprogress/shard-<n>/`, at the highest LSN of the old shards.
//!    The staging directory and `data_dir` are synced.
//! 3. **Commit**: the layout record with the new shard count and generation `g` is written to
//!    `layout.toml.inprogress`, fsynced, renamed over `layout.toml`, and `data_dir` synced.
//!    That rename decides which layout is live: before it the old one (an interrupted start
//!    leaves a staging directory whose generation the record does not name, removed at the
//!    next start, which then moves the rows again), after it the new one.
//! 4. Each `shard-<n>` of the old layout is removed and the staged `shard-<n>` renamed into its
//!    place; old `shard-<k>` beyond the new count are removed; then the staging directory. A
//!    start that finds the staging directory of the recorded generation finishes this step:
//!    while `relayout-<g>.inprogress/shard-<n>` exists, `shard-<n>` is absent or old.
//!
//! # Cost, back of the envelope
//!
//! Old shards are read one after another on the starting thread (engines are per thread), so
//! reading runs at one shard's recovery rate, not all cores'; each old shard is read once.
//! Routing is a key encoding and a CRC-32C per tuple, in memory. The tuples are not copied:
//! new engines take the old engines' tuple handles. Peak memory is about what the server holds
//! when serving (the tuples once, one old shard's indexes, one new shard's indexes). Then the
//! new snapshots are written one after another (zstd, one core), and the cores load them in
//! parallel as at every start. A start at the recorded layout does none of this: one small
//! file is read.
//!
//! # A directory without a record
//!
//! Written by a tarn before this record existed: its shard count is 1 + the highest `k` of the
//! `shard-<k>` directories present (tarn creates every shard's directory at start-up in `write`
//! and `fsync` modes, and at every snapshot in any mode), and its spaces are assumed to be
//! placed as the config says. A directory with no WAL or snapshot file in any shard directory
//! holds no data and takes the configured layout. Rows are routed by their key, not by the
//! directory they were found in, so an inferred count that is too high or too low still puts
//! every row where it belongs.
//!
//! # Rows in the wrong shard
//!
//! A directory damaged by an older tarn restarted at another shard count can hold a row in a
//! shard that does not own it, and the same key in two shards. A move keeps the copy in the
//! shard that owns the key in the old layout (what a get by primary key saw); a misplaced row
//! whose key no owner holds is kept (once); the others are dropped, counted in a warning.

mod directory;
mod record;
mod relayout;

pub use relayout::Step;

use directory::{discard_unfinished, finish_move, list_shard_dirs};
use record::{read_record, write_record};
use relayout::relayout;

use crate::config::{Config, Placement};
use crate::placement::shard_of_row;
use crate::storage::StorageError;
use crate::wal::{self, WalError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const LAYOUT_FILE: &str = "layout.toml";
const LAYOUT_FILE_IN_PROGRESS: &str = "layout.toml.inprogress";
const LAYOUT_VERSION: u32 = 1;
/// The placement function every shard count is read with: `placement::shard_of_key`.
pub const PLACEMENT_FUNCTION: &str = "crc32c-primary-key-modulo-shards";
const STAGING_PREFIX: &str = "relayout-";
const STAGING_SUFFIX: &str = ".inprogress";
const CHECKSUM_PREFIX: &str = "# crc32c ";
/// How often a long snapshot write logs its progress.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(10);

/// **Test only.** Names a step of a move ([`Step`]) at which the process kills itself with
/// SIGKILL, so tests can crash it exactly there. Unset in production; read only during a move.
pub const TEST_CRASH_AT_ENV: &str = "TARN_TEST_RELAYOUT_CRASH_AT";

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    #[error(
        "the config changes {change} and the data was written over {shards_old} shards, not \
         {shards_new}: rows move between shards under the recorded schema only, so make one \
         change a start: first start with the recorded schema at {shards_new} shards, then \
         with the changed one"
    )]
    WithSchemaChange {
        change: String,
        shards_old: usize,
        shards_new: usize,
    },
    #[error("{context} {path}: {source}")]
    Io {
        context: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the layout record {path} is damaged ({reason}). It says over how many shards the rows \
         are spread; restore it from a backup, or, if no move was interrupted (no \
         relayout-*.inprogress directory beside it), remove it and tarn infers the count from \
         the shard-<k> directories"
    )]
    Damaged { path: PathBuf, reason: String },
    #[error(
        "the layout record {path} has version {found}; this tarn reads version \
         {LAYOUT_VERSION}: start the newer tarn that wrote it"
    )]
    NewerVersion { path: PathBuf, found: i64 },
    #[error(
        "the layout record {path} places rows by {found:?}, which this tarn does not know \
         (it knows {PLACEMENT_FUNCTION:?}): start the tarn that wrote it"
    )]
    UnknownPlacement { path: PathBuf, found: String },
    #[error(
        "moving rows to {shards_new} shards: reading shard {shard_id} of the old layout \
         ({shards_old} shards) failed, nothing was changed: {source} (start with \
         --force-recovery to skip damaged data)"
    )]
    OldShard {
        shard_id: usize,
        shards_old: usize,
        shards_new: usize,
        #[source]
        source: WalError,
    },
    #[error(
        "moving rows to {shards_new} shards: shard {shard_id} of the new layout: {reason}; \
         nothing was changed (the data directory keeps its {shards_old} shards)"
    )]
    NewShard {
        shard_id: usize,
        shards_old: usize,
        shards_new: usize,
        reason: String,
    },
    #[error("moving rows: {0}")]
    Storage(#[source] StorageError),
    #[error("{0}")]
    Wal(#[source] WalError),
}

type Result<T, E = LayoutError> = std::result::Result<T, E>;

fn io_error(context: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> LayoutError {
    let path = path.to_path_buf();
    move |source| LayoutError::Io {
        context,
        path,
        source,
    }
}

/// Which shard holds which row: the shard count, and per user space whether it is spread by
/// primary key or whole on shard 0. The placement function is always [`PLACEMENT_FUNCTION`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Counts the moves this directory went through; names the staging directory of a move.
    pub generation: u64,
    pub shard_count: usize,
    pub spaces: BTreeMap<u32, Placement>,
}

impl Layout {
    pub fn from_config(config: &Config, shard_count: usize, generation: u64) -> Layout {
        assert!(shard_count >= 1);
        Layout {
            generation,
            shard_count,
            spaces: config
                .spaces
                .iter()
                .map(|space| (space.id, space.placement))
                .collect(),
        }
    }

    /// The shard that owns the row with `encoded_primary_key` in `space_id`, as the request
    /// path routes it (see `placement::route`).
    pub fn owner(&self, space_id: u32, encoded_primary_key: &[u8]) -> usize {
        let placement = self.spaces.get(&space_id).copied();
        shard_of_row(
            placement.unwrap_or(Placement::All),
            encoded_primary_key,
            self.shard_count,
        )
    }

    /// Whether every row has the same owner in both (the generation does not matter).
    fn places_like(&self, other: &Layout) -> bool {
        self.shard_count == other.shard_count && self.spaces == other.spaces
    }
}

/// What [`prepare_for_recovery`] found, and the write it leaves for after recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// The layout the shards now have.
    pub layout: Layout,
    /// The record is missing or differs from `layout` although no row had to move (a first
    /// start, a space added, a directory of an older tarn): [`Prepared::record`] writes it.
    record_stale: bool,
}

impl Prepared {
    /// Writes the layout record if it is stale. The server calls it once every shard has
    /// recovered, so that a start that fails (a damaged WAL, say) leaves the record as it
    /// was; until then the old record (or none) describes the rows just as well.
    pub fn record(&self, data_dir: &Path) -> Result<()> {
        if !self.record_stale {
            return Ok(());
        }
        write_record(data_dir, &self.layout)
    }
}

/// [`prepare_for_recovery`], then [`Prepared::record`]: the layout the shards now have.
pub fn prepare(config: &Config, shard_count: usize, fingerprint: u64) -> Result<Layout> {
    let prepared = prepare_for_recovery(config, &[], shard_count, fingerprint, 0, None)?;
    prepared.record(&config.data_dir)?;
    Ok(prepared.layout)
}

/// Run before any shard recovers: finishes or discards what an interrupted move left, and
/// moves every row (committing the new record) when `config` and `shard_count` ask for
/// another layout than the one the data was written in. A record that is only stale is left
/// for [`Prepared::record`].
///
/// `schema_change` describes a change the config makes to a recorded space, if any: rows are
/// moved under the recorded schema only, so a move is then refused.
pub fn prepare_for_recovery(
    config: &Config,
    made: &[crate::storage::SpaceDef],
    shard_count: usize,
    fingerprint: u64,
    schema_version: u64,
    schema_change: Option<String>,
) -> Result<Prepared> {
    let data_dir = &config.data_dir;
    let recorded = read_record(data_dir)?;
    let generation = recorded.as_ref().map_or(0, |layout| layout.generation);
    if let Some(layout) = &recorded {
        finish_move(data_dir, layout)?;
    }
    discard_unfinished(data_dir)?;
    let wanted = Layout::from_config(config, shard_count, generation);
    let present = list_shard_dirs(data_dir)?;
    let Some(highest_with_data) = present
        .iter()
        .filter(|dir| dir.has_data)
        .map(|dir| dir.id)
        .max()
    else {
        tracing::info!(shards = shard_count, "data directory holds no rows yet");
        return Ok(Prepared {
            record_stale: recorded.as_ref() != Some(&wanted),
            layout: wanted,
        });
    };
    // Rows beyond the recorded count were written by something else than this layout (an
    // older tarn started on the directory?): only a move puts them where they belong.
    let beyond_record = recorded
        .as_ref()
        .is_some_and(|layout| highest_with_data >= layout.shard_count);
    let old = match &recorded {
        Some(layout) => {
            let mut old = with_config_spaces(layout, &wanted);
            if beyond_record {
                tracing::warn!(
                    shards_recorded = layout.shard_count,
                    directory = %wal::dir::shard_dir(data_dir, highest_with_data as u32).display(),
                    "a shard directory beyond the recorded shard count holds data (written by an \
                     older tarn?); every row is moved to its owner"
                );
                old.shard_count = highest_with_data + 1;
            }
            old
        }
        None => {
            let shard_count_inferred = present.iter().map(|dir| dir.id).max().unwrap_or(0) + 1;
            tracing::info!(
                shards = shard_count_inferred,
                "no layout record in the data directory (written by an older tarn): shard count \
                 inferred from the shard-<k> directories"
            );
            Layout {
                shard_count: shard_count_inferred,
                ..wanted.clone()
            }
        }
    };
    if old.places_like(&wanted) && !beyond_record {
        tracing::info!(shards = shard_count, "data directory layout matches");
        return Ok(Prepared {
            record_stale: recorded.as_ref() != Some(&wanted),
            layout: wanted,
        });
    }
    let new = Layout {
        generation: generation + 1,
        ..wanted
    };
    if let Some(change) = schema_change {
        return Err(LayoutError::WithSchemaChange {
            change,
            shards_old: old.shard_count,
            shards_new: new.shard_count,
        });
    }
    relayout(config, made, fingerprint, schema_version, &old, &new)?;
    Ok(Prepared {
        layout: new,
        record_stale: false,
    })
}

/// `recorded` with the placements of spaces it does not know taken from `wanted` (spaces
/// added since it was written hold no rows yet).
fn with_config_spaces(recorded: &Layout, wanted: &Layout) -> Layout {
    let spaces = wanted
        .spaces
        .iter()
        .map(|(&id, &placement)| (id, *recorded.spaces.get(&id).unwrap_or(&placement)))
        .collect();
    Layout {
        spaces,
        ..recorded.clone()
    }
}

#[cfg(test)]
mod tests;
