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

use crate::config::{Config, Placement};
use crate::placement::shard_of_row;
use crate::server::schema;
use crate::storage::key::SearchKeyBuf;
use crate::storage::{StorageError, Tuple};
use crate::wal::{self, RecoveryConfig, SnapshotMeta, WalError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
    let prepared = prepare_for_recovery(config, shard_count, fingerprint)?;
    prepared.record(&config.data_dir)?;
    Ok(prepared.layout)
}

/// Run before any shard recovers: finishes or discards what an interrupted move left, and
/// moves every row (committing the new record) when `config` and `shard_count` ask for
/// another layout than the one the data was written in. A record that is only stale is left
/// for [`Prepared::record`].
pub fn prepare_for_recovery(
    config: &Config,
    shard_count: usize,
    fingerprint: u64,
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
    relayout(config, fingerprint, &old, &new)?;
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

/// The steps of a move a test can crash at (see [`TEST_CRASH_AT_ENV`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The first new shard's snapshot is in the staging directory; nothing is committed.
    Staging,
    /// The new layout record is renamed into place; no old directory is removed yet.
    Committed,
    /// The first staged shard directory was renamed into place.
    Moving,
}

impl Step {
    pub fn name(self) -> &'static str {
        match self {
            Step::Staging => "staging",
            Step::Committed => "committed",
            Step::Moving => "moving",
        }
    }
}

fn crash_here_if_asked(step: Step) {
    let Ok(wanted) = std::env::var(TEST_CRASH_AT_ENV) else {
        return;
    };
    if wanted != step.name() {
        return;
    }
    tracing::error!(
        step = step.name(),
        "{TEST_CRASH_AT_ENV}: killing the process (test hook)"
    );
    // SAFETY: kill(2) on our own pid; SIGKILL cannot be caught, so nothing runs after it.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    std::process::abort();
}

/// What the rows of one new shard are, gathered from every old shard.
struct NewShardRows {
    /// Per user space (config order): the tuples whose old shard owned them.
    owned: Vec<Vec<Tuple>>,
    /// Tuples found in an old shard that did not own them: (space position, tuple).
    misplaced: Vec<(usize, Tuple)>,
}

#[derive(Debug, Default)]
struct MoveCounts {
    tuples: u64,
    /// Tuples whose new shard differs from the old shard they were read from.
    tuples_moved: u64,
    misplaced_kept: u64,
    misplaced_dropped: u64,
    lsn_last: u64,
}

fn relayout(config: &Config, fingerprint: u64, old: &Layout, new: &Layout) -> Result<()> {
    let started = Instant::now();
    let data_dir = &config.data_dir;
    tracing::info!(
        shards_old = old.shard_count,
        shards_new = new.shard_count,
        data_dir = %data_dir.display(),
        "the data directory is laid out for another shard count or placement: moving every row \
         to its owner before serving"
    );
    let mut counts = MoveCounts::default();
    let rows = read_old_shards(config, fingerprint, old, new, &mut counts)?;
    let staging = staging_dir(data_dir, new.generation);
    std::fs::create_dir_all(&staging).map_err(io_error("creating", &staging))?;
    // Each new shard's rows are dropped once its snapshot is staged.
    for (shard_id, shard_rows) in rows.into_iter().enumerate() {
        let written = stage_new_shard(
            config,
            fingerprint,
            old,
            new,
            shard_id,
            shard_rows,
            &staging,
            &mut counts,
        )?;
        tracing::info!(
            shard = shard_id,
            tuples = written.tuple_count,
            size_bytes = written.size_bytes,
            snapshot = %written.path.display(),
            "new layout: shard snapshot staged"
        );
        crash_here_if_asked(Step::Staging);
    }
    sync_dir(&staging)?;
    sync_dir(data_dir)?;
    if counts.misplaced_kept + counts.misplaced_dropped > 0 {
        tracing::warn!(
            kept = counts.misplaced_kept,
            dropped_as_duplicates = counts.misplaced_dropped,
            "rows found in a shard that does not own their key (left by an older tarn restarted \
             at another shard count): kept where no owner held the key, else the owner's copy won"
        );
    }
    write_record(data_dir, new)?;
    crash_here_if_asked(Step::Committed);
    finish_move(data_dir, new)?;
    tracing::info!(
        shards_old = old.shard_count,
        shards_new = new.shard_count,
        tuples = counts.tuples,
        tuples_moved = counts.tuples_moved,
        lsn = counts.lsn_last,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "rows moved to the new layout; its snapshots are the new checkpoint"
    );
    Ok(())
}

/// Recovers each old shard in turn and hands its tuples to their new owners.
fn read_old_shards(
    config: &Config,
    fingerprint: u64,
    old: &Layout,
    new: &Layout,
    counts: &mut MoveCounts,
) -> Result<Vec<NewShardRows>> {
    let space_ids: Vec<u32> = config.spaces.iter().map(|space| space.id).collect();
    let mut rows: Vec<NewShardRows> = (0..new.shard_count)
        .map(|_| NewShardRows {
            owned: space_ids.iter().map(|_| Vec::new()).collect(),
            misplaced: Vec::new(),
        })
        .collect();
    let mut key = SearchKeyBuf::new();
    for shard_id in 0..old.shard_count {
        let started = Instant::now();
        let dir = wal::dir::shard_dir(&config.data_dir, shard_id as u32);
        if !dir.exists() {
            continue;
        }
        // Each old shard may hold up to the whole memory budget: the quota that binds is the
        // new shards', checked when they are loaded.
        let mut engine =
            schema::build_engine(config, config.memory_bytes).map_err(LayoutError::Storage)?;
        let recovery = RecoveryConfig {
            dir,
            shard_id: shard_id as u32,
            schema_fingerprint: fingerprint,
            force: config.durability.force_recovery,
        };
        let recovered =
            wal::recover(&recovery, &mut engine).map_err(|source| LayoutError::OldShard {
                shard_id,
                shards_old: old.shard_count,
                shards_new: new.shard_count,
                source,
            })?;
        if recovered.batches_skipped + recovered.rows_skipped > 0 {
            tracing::warn!(
                shard = shard_id,
                batches = recovered.batches_skipped,
                rows = recovered.rows_skipped,
                "force_recovery skipped damaged data in the old layout; the move drops it for good"
            );
        }
        counts.lsn_last = counts.lsn_last.max(recovered.lsn_last);
        let (tuples_before, moved_before) = (counts.tuples, counts.tuples_moved);
        for (position, &space_id) in space_ids.iter().enumerate() {
            let space = engine.space(space_id).map_err(LayoutError::Storage)?;
            let primary = &space.indexes()[0];
            for (_, tuple) in primary.entries() {
                key.clear();
                primary
                    .def
                    .key_def
                    .encode_from_tuple_data(tuple.data(), &mut key)
                    .map_err(LayoutError::Storage)?;
                let owner_new = new.owner(space_id, &key);
                let shard_rows = &mut rows[owner_new];
                if old.owner(space_id, &key) == shard_id {
                    shard_rows.owned[position].push(tuple.clone());
                } else {
                    shard_rows.misplaced.push((position, tuple.clone()));
                }
                counts.tuples += 1;
                counts.tuples_moved += u64::from(owner_new != shard_id);
            }
        }
        tracing::info!(
            shard = shard_id,
            tuples = counts.tuples - tuples_before,
            tuples_moved = counts.tuples_moved - moved_before,
            lsn_last = recovered.lsn_last,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "old layout: shard read"
        );
    }
    Ok(rows)
}

/// Loads one new shard's rows into an engine with its memory share, then writes them as its
/// snapshot in the staging directory.
#[allow(clippy::too_many_arguments)]
fn stage_new_shard(
    config: &Config,
    fingerprint: u64,
    old: &Layout,
    new: &Layout,
    shard_id: usize,
    rows: NewShardRows,
    staging: &Path,
    counts: &mut MoveCounts,
) -> Result<wal::SnapshotWritten> {
    let refuse = |reason: String| LayoutError::NewShard {
        shard_id,
        shards_old: old.shard_count,
        shards_new: new.shard_count,
        reason,
    };
    // The share `Core::join` gives each shard: rows that would not fit there are refused now.
    let memory_bytes = config.memory_bytes / new.shard_count as u64;
    let mut engine = schema::build_engine(config, memory_bytes).map_err(LayoutError::Storage)?;
    // The tuples were built by spaces of the same definitions (one config), so their field
    // maps are this engine's: the handles move, the bytes are not copied.
    for (space, owned) in config.spaces.iter().zip(rows.owned) {
        let target = engine.space_mut(space.id).map_err(LayoutError::Storage)?;
        target
            .bulk_load_built(owned)
            .map_err(|error| refuse(format!("space {} '{}': {error}", space.id, space.name)))?;
    }
    for (position, tuple) in rows.misplaced {
        let space = &config.spaces[position];
        let target = engine.space_mut(space.id).map_err(LayoutError::Storage)?;
        match target.insert(tuple.data()) {
            Ok(_) => counts.misplaced_kept += 1,
            Err(StorageError::TupleFound { .. }) => counts.misplaced_dropped += 1,
            Err(error) => {
                return Err(refuse(format!(
                    "space {} '{}': {error}",
                    space.id, space.name
                )))
            }
        }
    }
    let dir = wal::dir::shard_dir(staging, shard_id as u32);
    std::fs::create_dir_all(&dir).map_err(io_error("creating", &dir))?;
    let meta = SnapshotMeta {
        shard_id: shard_id as u32,
        lsn: counts.lsn_last,
        schema_fingerprint: fingerprint,
    };
    let mut progress = SnapshotProgress::new(shard_id);
    let tuples = engine
        .spaces()
        .iter()
        .filter(|space| !schema::is_system_space(space.id))
        .flat_map(|space| {
            space.indexes()[0]
                .entries()
                .map(move |(_, tuple)| (space.id, tuple.clone()))
        })
        .inspect(|_| progress.tick());
    wal::snapshot::write_snapshot_blocking(&dir, &meta, tuples)
        .map_err(|error| refuse(format!("writing its snapshot: {error}")))
}

/// Logs a long snapshot write every [`PROGRESS_INTERVAL`].
struct SnapshotProgress {
    shard_id: usize,
    logged: Instant,
    tuples: u64,
}

impl SnapshotProgress {
    fn new(shard_id: usize) -> SnapshotProgress {
        SnapshotProgress {
            shard_id,
            logged: Instant::now(),
            tuples: 0,
        }
    }

    fn tick(&mut self) {
        self.tuples += 1;
        if self.tuples.is_multiple_of(65_536) && self.logged.elapsed() >= PROGRESS_INTERVAL {
            tracing::info!(
                shard = self.shard_id,
                tuples_written = self.tuples,
                "new layout: writing the shard's snapshot"
            );
            self.logged = Instant::now();
        }
    }
}

fn staging_dir(data_dir: &Path, generation: u64) -> PathBuf {
    data_dir.join(format!("{STAGING_PREFIX}{generation}{STAGING_SUFFIX}"))
}

/// Step 4 of a move whose record is committed: puts the staged shard directories in place
/// of the old ones. Idempotent, so a start after a crash anywhere in it finishes it.
fn finish_move(data_dir: &Path, layout: &Layout) -> Result<()> {
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
fn discard_unfinished(data_dir: &Path) -> Result<()> {
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

struct ShardDir {
    id: usize,
    path: PathBuf,
    /// Holds a WAL file or a snapshot.
    has_data: bool,
}

/// The `shard-<k>` directories in `data_dir`, by id.
fn list_shard_dirs(data_dir: &Path) -> Result<Vec<ShardDir>> {
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

fn sync_dir(path: &Path) -> Result<()> {
    std::fs::File::open(path)
        .and_then(|directory| directory.sync_all())
        .map_err(io_error("syncing directory", path))
}

/// The record as TOML: `version`, `generation`, `shards`, `placement`, then one `[[space]]`
/// table per user space (`id`, `shard` = "all" | "single").
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordFile {
    version: u32,
    generation: u64,
    shards: u32,
    placement: String,
    #[serde(default)]
    space: Vec<RecordSpace>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordSpace {
    id: u32,
    shard: String,
}

const RECORD_HEADER: &str = "\
# The layout of this data directory: over how many shards its rows are spread, and how.
# Written by tarn at start-up (see docs/format.md); do not edit. A start with another shard
# count moves every row to its new shard and rewrites this file.
";

fn encode_record(layout: &Layout) -> String {
    let record = RecordFile {
        version: LAYOUT_VERSION,
        generation: layout.generation,
        shards: u32::try_from(layout.shard_count).expect("the config caps shards at 1024"),
        placement: PLACEMENT_FUNCTION.into(),
        space: layout
            .spaces
            .iter()
            .map(|(&id, &placement)| RecordSpace {
                id,
                shard: match placement {
                    Placement::All => "all",
                    Placement::Single => "single",
                }
                .into(),
            })
            .collect(),
    };
    let mut text = format!(
        "{RECORD_HEADER}{}",
        toml::to_string(&record).expect("the record serializes")
    );
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let checksum = crc32c::crc32c(text.as_bytes());
    format!("{text}{CHECKSUM_PREFIX}{checksum:08x}\n")
}

/// The layout in a record's text; `Err` holds why it is not one.
fn decode_record(text: &str, path: &Path) -> Result<Layout> {
    let damaged = |reason: String| LayoutError::Damaged {
        path: path.to_path_buf(),
        reason,
    };
    let body_end = text
        .trim_end_matches('\n')
        .rfind('\n')
        .map_or(0, |at| at + 1);
    let (body, checksum_line) = text.split_at(body_end);
    let checksum = checksum_line
        .trim_end_matches('\n')
        .strip_prefix(CHECKSUM_PREFIX)
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .ok_or_else(|| damaged("its last line is not its checksum".into()))?;
    if crc32c::crc32c(body.as_bytes()) != checksum {
        return Err(damaged("the checksum does not match".into()));
    }
    let table: toml::Table = toml::from_str(body).map_err(|error| damaged(error.to_string()))?;
    match table.get("version").and_then(toml::Value::as_integer) {
        Some(version) if version == i64::from(LAYOUT_VERSION) => {}
        Some(version) if version > i64::from(LAYOUT_VERSION) => {
            return Err(LayoutError::NewerVersion {
                path: path.to_path_buf(),
                found: version,
            })
        }
        _ => return Err(damaged("no known version".into())),
    }
    let record: RecordFile = toml::from_str(body).map_err(|error| damaged(error.to_string()))?;
    if record.placement != PLACEMENT_FUNCTION {
        return Err(LayoutError::UnknownPlacement {
            path: path.to_path_buf(),
            found: record.placement,
        });
    }
    if record.shards == 0 {
        return Err(damaged("it records 0 shards".into()));
    }
    let mut spaces = BTreeMap::new();
    for space in record.space {
        let placement = match space.shard.as_str() {
            "all" => Placement::All,
            "single" => Placement::Single,
            other => return Err(damaged(format!("space {}: shard = {other:?}", space.id))),
        };
        spaces.insert(space.id, placement);
    }
    Ok(Layout {
        generation: record.generation,
        shard_count: record.shards as usize,
        spaces,
    })
}

/// The recorded layout; `None` when the directory has no record.
fn read_record(data_dir: &Path) -> Result<Option<Layout>> {
    let path = data_dir.join(LAYOUT_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io_error("reading", &path)(error)),
    };
    let text = String::from_utf8(bytes).map_err(|_| LayoutError::Damaged {
        path: path.clone(),
        reason: "it is not UTF-8 text".into(),
    })?;
    decode_record(&text, &path).map(Some)
}

/// Writes the record to a temporary name, fsyncs it, renames it over the old one and syncs
/// the directory: a crash leaves the old record or the new, never a mix.
fn write_record(data_dir: &Path, layout: &Layout) -> Result<()> {
    let temporary = data_dir.join(LAYOUT_FILE_IN_PROGRESS);
    let path = data_dir.join(LAYOUT_FILE);
    let mut file = std::fs::File::create(&temporary).map_err(io_error("creating", &temporary))?;
    file.write_all(encode_record(layout).as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io_error("writing", &temporary))?;
    drop(file);
    std::fs::rename(&temporary, &path).map_err(io_error("renaming into place", &temporary))?;
    sync_dir(data_dir)?;
    tracing::info!(
        shards = layout.shard_count,
        generation = layout.generation,
        record = %path.display(),
        "layout recorded"
    );
    Ok(())
}

#[cfg(test)]
mod tests;
