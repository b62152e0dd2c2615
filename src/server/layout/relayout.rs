//! A move: every old shard read, its rows sent to their new owners, each new shard staged
//! as one snapshot, then the record committed and the directories swapped (the steps of
//! the parent module's "A move, and where a crash leaves it").

use super::directory::{finish_move, staging_dir, sync_dir};
use super::record::write_record;
use super::{io_error, Layout, LayoutError, Result, PROGRESS_INTERVAL, TEST_CRASH_AT_ENV};
use crate::config::Config;
use crate::server::recovering::Recovering;
use crate::server::schema;
use crate::storage::key::SearchKeyBuf;
use crate::storage::{SpaceDef, StorageError, Tuple};
use crate::wal::{self, RecoveryConfig, SnapshotMeta};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

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

pub(super) fn crash_here_if_asked(step: Step) {
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
    crate::server::os::process::kill_self();
}

/// What the rows of one new shard are, gathered from every old shard.
#[derive(Default)]
struct NewShardRows {
    /// Per user space id: the tuples whose old shard owned them.
    owned: BTreeMap<u32, Vec<Tuple>>,
    /// Tuples found in an old shard that did not own them: (space id, tuple).
    misplaced: Vec<(u32, Tuple)>,
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

pub(super) fn relayout(
    config: &Config,
    made: &[SpaceDef],
    fingerprint: u64,
    schema_version: u64,
    old: &Layout,
    new: &Layout,
) -> Result<()> {
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
    let versions = (fingerprint, schema_version);
    let (rows, defs) = read_old_shards(config, made, versions, (old, new), &mut counts)?;
    let staging = staging_dir(data_dir, new.generation);
    std::fs::create_dir_all(&staging).map_err(io_error("creating", &staging))?;
    // Each new shard's rows are dropped once its snapshot is staged.
    for (shard_id, shard_rows) in rows.into_iter().enumerate() {
        let written = stage_new_shard(
            config,
            (&defs, fingerprint, schema_version),
            (old, new),
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

/// Recovers each old shard in turn and hands its tuples to their new owners; with them,
/// the user spaces' definitions recovery ended with (the config's and those made over CALL,
/// as every shard has them once the schema changes in its log are replayed).
fn read_old_shards(
    config: &Config,
    made: &[SpaceDef],
    (fingerprint, schema_version): (u64, u64),
    (old, new): (&Layout, &Layout),
    counts: &mut MoveCounts,
) -> Result<(Vec<NewShardRows>, Vec<SpaceDef>)> {
    let mut rows: Vec<NewShardRows> = (0..new.shard_count)
        .map(|_| NewShardRows::default())
        .collect();
    let mut defs: Vec<SpaceDef> = Vec::new();
    let mut key = SearchKeyBuf::new();
    for shard_id in 0..old.shard_count {
        let started = Instant::now();
        let dir = wal::dir::shard_dir(&config.data_dir, shard_id as u32);
        if !dir.exists() {
            continue;
        }
        // Each old shard may hold up to the whole memory budget: the quota that binds is the
        // new shards', checked when they are loaded.
        let mut engine = schema::build_engine_with(config, made, config.memory_bytes)
            .map_err(LayoutError::Storage)?;
        let recovery = RecoveryConfig {
            dir,
            shard_id: shard_id as u32,
            schema_fingerprint: fingerprint,
            force: config.durability.force_recovery,
            schema_version_committed: schema_version,
        };
        let recovered =
            wal::recover(&recovery, &mut Recovering::new(&mut engine)).map_err(|source| {
                LayoutError::OldShard {
                    shard_id,
                    shards_old: old.shard_count,
                    shards_new: new.shard_count,
                    source,
                }
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
        for def in engine.space_defs() {
            if !schema::is_system_space(def.id) && !defs.iter().any(|seen| seen.id == def.id) {
                defs.push(def);
            }
        }
        let user_spaces = engine
            .spaces()
            .iter()
            .filter(|space| !schema::is_system_space(space.id));
        for space in user_spaces {
            let space_id = space.id;
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
                    let owned = shard_rows.owned.entry(space_id).or_default();
                    owned.push(tuple.to_tuple());
                } else {
                    shard_rows.misplaced.push((space_id, tuple.to_tuple()));
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
    Ok((rows, defs))
}

/// Loads one new shard's rows into an engine with its memory share, then writes them as its
/// snapshot in the staging directory.
fn stage_new_shard(
    config: &Config,
    (defs, fingerprint, schema_version): (&[SpaceDef], u64, u64),
    (old, new): (&Layout, &Layout),
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
    let mut engine =
        schema::build_engine_with(config, defs, memory_bytes).map_err(LayoutError::Storage)?;
    // The tuples were built by spaces of the same definitions, so their field maps are this
    // engine's: the handles move, the bytes are not copied.
    for (space_id, owned) in rows.owned {
        let target = engine.space_mut(space_id).map_err(LayoutError::Storage)?;
        target
            .bulk_load_built(owned)
            .map_err(|error| refuse(format!("space {space_id} '{}': {error}", target.name)))?;
    }
    for (space_id, tuple) in rows.misplaced {
        let target = engine.space_mut(space_id).map_err(LayoutError::Storage)?;
        match target.insert(tuple.data()) {
            Ok(_) => counts.misplaced_kept += 1,
            Err(StorageError::TupleFound { .. }) => counts.misplaced_dropped += 1,
            Err(error) => {
                let name = &target.name;
                return Err(refuse(format!("space {space_id} '{name}': {error}")));
            }
        }
    }
    // The definitions the tuples were loaded with, so that recovery loads them so too.
    let section = schema::snapshot_schema(&engine, schema_version);
    let dir = wal::dir::shard_dir(staging, shard_id as u32);
    std::fs::create_dir_all(&dir).map_err(io_error("creating", &dir))?;
    let meta = SnapshotMeta {
        shard_id: shard_id as u32,
        lsn: counts.lsn_last,
        schema_fingerprint: fingerprint,
        schema: &section,
    };
    let mut progress = SnapshotProgress::new(shard_id);
    let tuples = schema::user_tuples(&engine).inspect(|_| progress.tick());
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
