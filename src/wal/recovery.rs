//! Recovery of one shard at start-up, and checkpoint garbage collection.
//!
//! Recovery reads the newest snapshot space by space, then replays the WAL rows after the
//! snapshot's LSN as replaces and deletes. It checks that the LSNs run without a gap from the
//! snapshot to the last row, cuts a torn tail off the newest WAL file with a warning, and
//! stops on corruption unless `force` is set. A snapshot that fails to read or check is
//! replaced by the older checkpoint and the WAL after it, with `force` only. The rules are
//! those of `docs/format.md`.
//!
//! A snapshot's tuples are staged (built, outside the target) until its last block and its
//! trailer have checked, and only then loaded, one bulk load per space so that indexes are
//! built by sorting: damage found anywhere in a snapshot leaves the target as it was, so
//! falling back to an older one starts from a clean target by construction.
//!
//! Blocking `std::fs`: it runs before the shard serves, one thread per shard, so shards
//! recover in parallel. What receives the data is a [`RecoveryTarget`]; `storage::Engine` is
//! one, which is the only place this layer touches storage. Knows nothing of the network.

// Bytes here come from clients or disk: an `expect` or a truncating cast is fixed or says
// where it stands why it cannot fire.
#![warn(clippy::expect_used, clippy::cast_possible_truncation)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::storage::{Engine, Tuple};
use crate::wal::dir::{self, snapshot_file_name, wal_file_name, Listing};
use crate::wal::error::{Result, WalError};
use crate::wal::format::{FileHeader, Row, RowKind, SchemaRow};
use crate::wal::reader::{ReadMode, WalFile};
use crate::wal::snapshot::{SnapshotBlock, SnapshotReader};

/// Where recovered data goes. Errors are strings because the layer that reports them (this
/// one) only needs their text; the target's own error types stay its own.
pub trait RecoveryTarget {
    /// One space's snapshot tuples, made ready to load but not in the target yet.
    type Staged;
    /// Makes ready the tuples of one space of a snapshot, which `blocks` hands out a block
    /// at a time; the target takes every block. `&self`: the snapshot may still turn out
    /// damaged in a later block or its trailer, and must then leave nothing behind.
    fn stage_space(
        &self,
        space_id: u32,
        blocks: &mut SpaceBlocks<'_>,
    ) -> Result<Self::Staged, String>;
    /// Replaces the contents of a space with staged tuples; called only once the whole
    /// snapshot has been read and checked.
    fn load_staged(&mut self, space_id: u32, staged: Self::Staged) -> Result<(), String>;
    fn replace(&mut self, space_id: u32, tuple: &[u8]) -> Result<(), String>;
    /// Deletes by primary key; a key that is not there is not an error (replay is idempotent).
    fn delete(&mut self, space_id: u32, key: &[u8]) -> Result<(), String>;
    /// The schema a snapshot's tuples were written under (its schema section), before they
    /// are staged: the target takes it as its definitions from here on. `None` (a version-2
    /// snapshot, or recovery from no snapshot): the definitions the target began with. The
    /// target holds no tuples yet. A target that knows no definitions takes only an empty one.
    fn begin_snapshot(&mut self, schema: Option<&[u8]>) -> Result<(), String> {
        match schema {
            None | Some([]) => Ok(()),
            Some(_) => Err("a snapshot with a schema, which this target cannot take".into()),
        }
    }
    /// A committed schema change of `space_id`, in place among the rows: those before it
    /// were written under the old definition, those after under `change.definition`. A
    /// target that knows no definitions refuses it.
    fn change_schema(&mut self, space_id: u32, change: SchemaRow<'_>) -> Result<(), String> {
        let _ = space_id;
        Err(format!(
            "a schema change (version {}), which this target cannot make",
            change.version
        ))
    }
}

impl RecoveryTarget for Engine {
    type Staged = Vec<Tuple>;

    fn stage_space(
        &self,
        space_id: u32,
        blocks: &mut SpaceBlocks<'_>,
    ) -> Result<Vec<Tuple>, String> {
        let space = self.space(space_id).map_err(|e| e.to_string())?;
        // Each block is turned into stored tuples and dropped before the next is read, so
        // the snapshot is never whole in memory and its blocks' pages are reused.
        let mut tuples = Vec::new();
        while let Some(block) = blocks.next_block() {
            tuples.reserve(block.tuple_count());
            for data in block.tuples() {
                tuples.push(space.build_tuple(data).map_err(|e| e.to_string())?);
            }
        }
        Ok(tuples)
    }

    fn load_staged(&mut self, space_id: u32, tuples: Vec<Tuple>) -> Result<(), String> {
        let space = self.space_mut(space_id).map_err(|e| e.to_string())?;
        space.bulk_load_built(tuples).map_err(|e| e.to_string())
    }

    fn replace(&mut self, space_id: u32, tuple: &[u8]) -> Result<(), String> {
        let space = self.space_mut(space_id).map_err(|e| e.to_string())?;
        space.replace(tuple).map(drop).map_err(|e| e.to_string())
    }

    fn delete(&mut self, space_id: u32, key: &[u8]) -> Result<(), String> {
        let space = self.space_mut(space_id).map_err(|e| e.to_string())?;
        space.delete(0, key).map(drop).map_err(|e| e.to_string())
    }
}

/// One space's blocks of a snapshot, read as they are asked for. A read error ends the
/// blocks and is kept for recovery to report; the first block of the next space is kept
/// for its own load.
pub struct SpaceBlocks<'r> {
    reader: &'r mut SnapshotReader,
    progress: &'r mut Progress,
    space_id: u32,
    first: Option<SnapshotBlock>,
    current: Option<SnapshotBlock>,
    next_space_first: Option<SnapshotBlock>,
    error: Option<WalError>,
    tuples_read: u64,
}

impl SpaceBlocks<'_> {
    /// The next block of the space; the previous one is dropped first.
    pub fn next_block(&mut self) -> Option<&SnapshotBlock> {
        self.current = None;
        let block = match self.first.take() {
            Some(block) => block,
            None if self.error.is_some() || self.next_space_first.is_some() => return None,
            None => match self.reader.next_block() {
                Ok(Some(block)) if block.space_id == self.space_id => block,
                Ok(Some(block)) => {
                    self.next_space_first = Some(block);
                    return None;
                }
                Ok(None) => return None,
                Err(error) => {
                    self.error = Some(error);
                    return None;
                }
            },
        };
        self.tuples_read += block.tuple_count() as u64;
        self.progress.tick("snapshot", block.tuple_count() as u64);
        self.current = Some(block);
        self.current.as_ref()
    }
}

/// What recovery needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryConfig {
    /// The shard's directory, `data_dir/shard-<k>` (see [`dir::shard_dir`]).
    pub dir: PathBuf,
    pub shard_id: u32,
    pub schema_fingerprint: u64,
    /// `force_recovery`: skip damaged batches, rows that fail to apply, and LSN gaps, and
    /// replace a damaged snapshot by the older checkpoint.
    pub force: bool,
    /// The last schema version the server committed: a schema row of a later version was
    /// never committed, and the WAL is cut at it (see [`Recovered::uncommitted_cut`]).
    pub schema_version_committed: u64,
}

/// What recovery did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovered {
    /// LSN of the snapshot loaded; 0 if none.
    pub snapshot_lsn: u64,
    /// The last LSN recovered (snapshot or WAL).
    pub lsn_last: u64,
    pub tuples_loaded: u64,
    pub rows_replayed: u64,
    /// Force mode only: damaged batches skipped, rows that failed to apply.
    pub batches_skipped: u64,
    pub rows_skipped: u64,
    /// The newest WAL file was cut at this offset (a torn write).
    pub torn_cut: Option<(PathBuf, u64)>,
    /// Force mode only: damaged snapshots passed over for an older checkpoint, and the names
    /// they were renamed to (`<lsn>.snap.damaged`), newest first.
    pub snapshots_set_aside: Vec<(PathBuf, PathBuf)>,
    /// Force mode only: a WAL file none of whose rows could be read, renamed to
    /// `<lsn>.wal.damaged` because the writer's next file takes its name.
    pub wal_file_set_aside: Option<(PathBuf, PathBuf)>,
    /// A schema row of a version never committed was found: the file it was in was cut at
    /// its batch, and the later files renamed `<name>.uncommitted`. Nothing from the row on
    /// was acknowledged (the server holds acknowledgements behind a schema row until the
    /// change commits).
    pub uncommitted_cut: Option<UncommittedCut>,
}

/// Where recovery cut the WAL at a schema change that was never committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UncommittedCut {
    pub file: PathBuf,
    pub offset: u64,
    pub lsn: u64,
    pub version: u64,
    pub files_set_aside: Vec<PathBuf>,
}

impl Recovered {
    /// The LSN the writer starts at.
    pub fn lsn_next(&self) -> u64 {
        self.lsn_last + 1
    }
}

/// Recovers the shard in `config.dir` into `target`. A missing directory is an empty shard.
pub fn recover<T: RecoveryTarget>(config: &RecoveryConfig, target: &mut T) -> Result<Recovered> {
    let listing = dir::list(&config.dir)?;
    let mut progress = Progress::new(config.shard_id);
    let mut recovered = Recovered::default();
    let damaged =
        load_newest_usable_snapshot(config, &listing, target, &mut recovered, &mut progress)?;
    let wal_damaged = replay_wal(
        config,
        &listing.wal_files,
        target,
        &mut recovered,
        &mut progress,
    )?;
    if let Some(&(lsn_damaged, _)) = damaged.first() {
        report_fallback(config, lsn_damaged, &recovered);
    }
    // Only now, with the shard recovered: a start that fails leaves the directory as it was.
    for (_, path) in &damaged {
        let set_aside = dir::set_aside(path)?;
        recovered
            .snapshots_set_aside
            .push((path.clone(), set_aside));
    }
    set_aside_unread_newest_wal(config, &wal_damaged, &mut recovered)?;
    progress.finish(&recovered);
    Ok(recovered)
}

/// Whether a snapshot that failed with `error` is damaged (so an older checkpoint may stand
/// in for it), rather than the wrong file for this shard or schema, or refused by the target.
fn is_damage(error: &WalError) -> bool {
    matches!(
        error,
        WalError::Corrupt { .. } | WalError::Torn { .. } | WalError::Io { .. }
    )
}

/// Loads the newest snapshot that reads and checks. A damaged one is passed over for the
/// one before it (or for none, when the WAL starts at LSN 1) in force mode, if the WAL files
/// after that one are kept; otherwise recovery stops with what could be done. Returns the
/// damaged snapshots passed over, newest first.
fn load_newest_usable_snapshot<T: RecoveryTarget>(
    config: &RecoveryConfig,
    listing: &Listing,
    target: &mut T,
    recovered: &mut Recovered,
    progress: &mut Progress,
) -> Result<Vec<(u64, PathBuf)>> {
    let mut damaged = Vec::new();
    for position in (0..listing.snapshots.len()).rev() {
        let (lsn, path) = &listing.snapshots[position];
        let cause = match stage_snapshot(config, *lsn, path, target, progress) {
            Ok(staged) => {
                load_staged(*lsn, path, staged, target, recovered)?;
                return Ok(damaged);
            }
            Err(error) if is_damage(&error) => error,
            Err(error) => return Err(error),
        };
        let lsn_older = position
            .checked_sub(1)
            .map_or(0, |older| listing.snapshots[older].0);
        let fallback = match describe_fallback(config, listing, position, lsn_older) {
            Ok(fallback) => fallback,
            Err(why) => {
                return Err(WalError::SnapshotDamagedNoFallback {
                    snapshot: path.clone(),
                    cause: Box::new(cause),
                    why,
                })
            }
        };
        if !config.force {
            return Err(WalError::SnapshotDamaged {
                snapshot: path.clone(),
                cause: Box::new(cause),
                fallback,
            });
        }
        tracing::warn!(
            shard = config.shard_id,
            snapshot = %path.display(),
            error = %cause,
            instead = %fallback,
            "force recovery: the snapshot is damaged; recovering from the older checkpoint \
             and the WAL files after it instead"
        );
        damaged.push((*lsn, path.clone()));
    }
    // No snapshot: the definitions recovery began with (a damaged one may have set others).
    target
        .begin_snapshot(None)
        .map_err(|reason| WalError::Replay {
            file: config.dir.clone(),
            lsn: 0,
            reason: format!("schema: {reason}"),
        })?;
    Ok(damaged)
}

/// What can stand in for the snapshot at `position`: the one before it (LSN `lsn_older`,
/// 0 for none), if a WAL file starts early enough to hold the rows after it. Otherwise why not.
fn describe_fallback(
    config: &RecoveryConfig,
    listing: &Listing,
    position: usize,
    lsn_older: u64,
) -> Result<String, String> {
    let oldest_wal = listing.wal_files.first().map(|(lsn, _)| *lsn);
    let covered = oldest_wal.is_some_and(|lsn_first| lsn_first <= lsn_older + 1);
    let older = position
        .checked_sub(1)
        .map(|older| &listing.snapshots[older].1);
    let oldest_wal_text = match oldest_wal {
        Some(lsn_first) => format!("the oldest WAL file starts at LSN {lsn_first}"),
        None => "there is no WAL file".to_string(),
    };
    match (older, covered) {
        (Some(older), true) => Ok(format!(
            "the older snapshot {} and the WAL files after it",
            older.display()
        )),
        (None, true) => Ok(format!(
            "the WAL files from {} (LSN 1) on",
            config.dir.join(wal_file_name(1)).display()
        )),
        (Some(older), false) => Err(format!(
            "the older snapshot {} is kept, but not the WAL files after it ({oldest_wal_text}, \
             after LSN {})",
            older.display(),
            lsn_older + 1
        )),
        (None, false) => Err(format!(
            "there is no older snapshot, and {oldest_wal_text}, not at LSN 1"
        )),
    }
}

/// After a fallback: says whether the rows of the damaged snapshot were all recovered.
fn report_fallback(config: &RecoveryConfig, lsn_damaged: u64, recovered: &Recovered) {
    let damaged = config.dir.join(snapshot_file_name(lsn_damaged));
    if recovered.lsn_last >= lsn_damaged {
        tracing::warn!(
            shard = config.shard_id,
            snapshot = %damaged.display(),
            snapshot_used_lsn = recovered.snapshot_lsn,
            lsn_last = recovered.lsn_last,
            "force recovery: every row of the damaged snapshot was recovered from the older \
             checkpoint and the WAL"
        );
    } else {
        tracing::error!(
            shard = config.shard_id,
            snapshot = %damaged.display(),
            snapshot_used_lsn = recovered.snapshot_lsn,
            lsn_last = recovered.lsn_last,
            lsn_damaged,
            "force recovery: rows {}..={lsn_damaged} were in the damaged snapshot and are in \
             no WAL file: they are lost",
            recovered.lsn_last + 1
        );
    }
}

/// One space's staged tuples.
type StagedSpace<S> = (u32, S);

/// Reads and checks the whole snapshot, staging its tuples; the target is not changed.
fn stage_snapshot<T: RecoveryTarget>(
    config: &RecoveryConfig,
    lsn: u64,
    path: &Path,
    target: &mut T,
    progress: &mut Progress,
) -> Result<(Vec<StagedSpace<T::Staged>>, u64)> {
    let mut reader = SnapshotReader::open(path)?;
    check_header(config, path, &reader.header, lsn)?;
    target
        .begin_snapshot(reader.schema.as_deref())
        .map_err(|reason| WalError::Replay {
            file: path.to_path_buf(),
            lsn,
            reason: format!("schema: {reason}"),
        })?;
    let target = &*target;
    tracing::info!(shard = config.shard_id, snapshot = %path.display(), "loading snapshot");
    let mut staged: Vec<StagedSpace<T::Staged>> = Vec::new();
    let mut tuples_read = 0;
    let mut next_space_first = reader.next_block()?;
    while let Some(first) = next_space_first.take() {
        let space_id = first.space_id;
        if staged.iter().any(|(staged_id, _)| *staged_id == space_id) {
            // Loading it twice would keep only its second part.
            return Err(WalError::corrupt(
                path,
                first.offset,
                format!("space {space_id} comes back after another space's blocks"),
            ));
        }
        let mut blocks = SpaceBlocks {
            reader: &mut reader,
            progress: &mut *progress,
            space_id,
            first: Some(first),
            current: None,
            next_space_first: None,
            error: None,
            tuples_read: 0,
        };
        let space = target.stage_space(space_id, &mut blocks);
        if space.is_ok() {
            debug_assert!(
                blocks.next_block().is_none(),
                "the target takes every block"
            );
            while blocks.next_block().is_some() {}
        }
        if let Some(error) = blocks.error.take() {
            return Err(error);
        }
        let space = space.map_err(|reason| WalError::Replay {
            file: path.to_path_buf(),
            lsn,
            reason: format!("space {space_id}: {reason}"),
        })?;
        tuples_read += blocks.tuples_read;
        next_space_first = blocks.next_space_first.take();
        staged.push((space_id, space));
    }
    // The blocks ended at a valid trailer whose counts match: the snapshot is whole.
    Ok((staged, tuples_read))
}

fn load_staged<T: RecoveryTarget>(
    lsn: u64,
    path: &Path,
    (staged, tuples_read): (Vec<StagedSpace<T::Staged>>, u64),
    target: &mut T,
    recovered: &mut Recovered,
) -> Result<()> {
    for (space_id, space) in staged {
        target
            .load_staged(space_id, space)
            .map_err(|reason| WalError::Replay {
                file: path.to_path_buf(),
                lsn,
                reason: format!("space {space_id}: {reason}"),
            })?;
    }
    recovered.tuples_loaded = tuples_read;
    recovered.snapshot_lsn = lsn;
    recovered.lsn_last = lsn;
    Ok(())
}

fn check_header(
    config: &RecoveryConfig,
    path: &Path,
    header: &FileHeader,
    lsn_from_name: u64,
) -> Result<()> {
    if header.shard_id != config.shard_id {
        return Err(WalError::WrongShard {
            file: path.to_path_buf(),
            expected: config.shard_id,
            found: header.shard_id,
        });
    }
    if header.schema_fingerprint != config.schema_fingerprint {
        return Err(WalError::SchemaMismatch {
            file: path.to_path_buf(),
            expected: config.schema_fingerprint,
            found: header.schema_fingerprint,
        });
    }
    if header.lsn != lsn_from_name {
        return Err(WalError::corrupt(
            path,
            0,
            format!("header LSN {} differs from the file name", header.lsn),
        ));
    }
    Ok(())
}

/// The index of the first WAL file to read after snapshot LSN `lsn_snapshot`.
fn first_needed_file(
    config: &RecoveryConfig,
    wal_files: &[(u64, PathBuf)],
    lsn_snapshot: u64,
) -> Result<Option<usize>> {
    let Some(&(lsn_first, _)) = wal_files.first() else {
        return Ok(None);
    };
    let count_before = wal_files.partition_point(|(lsn, _)| *lsn <= lsn_snapshot + 1);
    if count_before == 0 {
        let error = WalError::MissingRows {
            expected_file: config.dir.join(wal_file_name(lsn_snapshot + 1)),
            after: format!("snapshot {lsn_snapshot}"),
            lsn_first_missing: lsn_snapshot + 1,
            lsn_next_found: lsn_first,
        };
        if !config.force {
            return Err(error);
        }
        tracing::warn!(shard = config.shard_id, %error, "force recovery: going on");
        return Ok(Some(0));
    }
    Ok(Some(count_before - 1))
}

/// Replays the WAL after the snapshot; returns the files in which force mode skipped
/// damaged data.
fn replay_wal<T: RecoveryTarget>(
    config: &RecoveryConfig,
    wal_files: &[(u64, PathBuf)],
    target: &mut T,
    recovered: &mut Recovered,
    progress: &mut Progress,
) -> Result<Vec<PathBuf>> {
    let Some(start) = first_needed_file(config, wal_files, recovered.snapshot_lsn)? else {
        return Ok(Vec::new());
    };
    let mut replay = Replay {
        config,
        target,
        recovered,
        progress,
        damaged_files: Vec::new(),
        lsn_last_read: None,
    };
    for (position, (lsn_name, path)) in wal_files.iter().enumerate().skip(start) {
        let newest = position + 1 == wal_files.len();
        let file = match WalFile::open(path) {
            Ok(file) => file,
            Err(WalError::Torn { offset, .. }) if newest => {
                cut_torn_tail(config, path, offset, replay.recovered)?;
                break;
            }
            Err(error) => {
                replay.skip(error, path)?;
                continue;
            }
        };
        check_header(config, path, &file.header, *lsn_name)?;
        if let Some(lsn_last) = replay.lsn_last_read {
            check_follows(config, wal_files, position, lsn_last)?;
        }
        replay.lsn_last_read = Some(file.header.lsn.saturating_sub(1));
        if let FileEnd::Uncommitted(cut) = replay.batches(&file, path, newest)? {
            cut_uncommitted(config, cut, &wal_files[position + 1..], replay.recovered)?;
            break;
        }
    }
    Ok(replay.damaged_files)
}

/// How the batches of one WAL file ended.
enum FileEnd {
    /// At the file's end, or at its torn tail (cut).
    Read,
    /// At a schema row of an uncommitted version, where the WAL is to be cut.
    Uncommitted(UncommittedCut),
}

/// The WAL replay under way.
struct Replay<'r, T> {
    config: &'r RecoveryConfig,
    target: &'r mut T,
    recovered: &'r mut Recovered,
    progress: &'r mut Progress,
    /// The files in which force mode skipped damaged data.
    damaged_files: Vec<PathBuf>,
    /// The last LSN read, to check that the next file follows it.
    lsn_last_read: Option<u64>,
}

impl<T: RecoveryTarget> Replay<'_, T> {
    /// In force mode counts `error` and notes its file; otherwise returns it.
    fn skip(&mut self, error: WalError, path: &Path) -> Result<()> {
        skip_or_fail(self.config, torn_is_corrupt(error), self.recovered)?;
        if self.damaged_files.last().map(PathBuf::as_path) != Some(path) {
            self.damaged_files.push(path.to_path_buf());
        }
        Ok(())
    }

    /// Replays the rows of `file` after the snapshot, batch by batch.
    fn batches(&mut self, file: &WalFile, path: &Path, newest: bool) -> Result<FileEnd> {
        let mode = match self.config.force {
            true => ReadMode::Force,
            false => ReadMode::Strict,
        };
        let lsn_snapshot = self.recovered.snapshot_lsn;
        let mut batches = file.batches(mode);
        loop {
            let offset = batches.offset();
            let batch = match batches.next() {
                None => return Ok(FileEnd::Read),
                Some(Ok(batch)) => batch,
                Some(Err(WalError::Torn { offset, .. })) if newest => {
                    cut_torn_tail(self.config, path, offset, self.recovered)?;
                    return Ok(FileEnd::Read);
                }
                Some(Err(error)) => {
                    self.skip(error, path)?;
                    continue;
                }
            };
            for (position, row) in batch.rows().enumerate() {
                if row.kind == RowKind::Schema {
                    let at = (offset, position);
                    if let Some(cut) = uncommitted_schema_row(self.config, path, at, &row)? {
                        return Ok(FileEnd::Uncommitted(cut));
                    }
                }
                if row.lsn > lsn_snapshot {
                    apply_row(self.config, path, &row, self.target, self.recovered)?;
                }
            }
            self.progress.tick("wal", u64::from(batch.row_count));
            self.lsn_last_read = Some(batch.lsn_last());
            self.recovered.lsn_last = self.recovered.lsn_last.max(batch.lsn_last());
        }
    }
}

/// The cut a schema row calls for when its version is one the server never committed; it
/// is row `position` of the batch at `offset`. Such a row heads its batch (the writer opens
/// one for it), so nothing of the batch was applied yet; one that does not is corruption, as
/// a row that fails to decode.
fn uncommitted_schema_row(
    config: &RecoveryConfig,
    path: &Path,
    (offset, position): (u64, usize),
    row: &Row<'_>,
) -> Result<Option<UncommittedCut>> {
    let Some(change) = SchemaRow::decode(row.body) else {
        return Ok(None); // `apply_row` reports it
    };
    if change.version <= config.schema_version_committed {
        return Ok(None);
    }
    if position != 0 {
        let reason = format!(
            "the uncommitted schema row at LSN {} does not head its batch",
            row.lsn
        );
        return Err(WalError::corrupt(path, offset, reason));
    }
    Ok(Some(UncommittedCut {
        file: path.to_path_buf(),
        offset,
        lsn: row.lsn,
        version: change.version,
        files_set_aside: Vec::new(),
    }))
}

/// Cuts the WAL at a schema row that was never committed: its file at its batch, the files
/// after it renamed aside. What it removes was never acknowledged.
fn cut_uncommitted(
    config: &RecoveryConfig,
    mut cut: UncommittedCut,
    later_files: &[(u64, PathBuf)],
    recovered: &mut Recovered,
) -> Result<()> {
    tracing::warn!(
        shard = config.shard_id,
        file = %cut.file.display(),
        offset = cut.offset,
        lsn = cut.lsn,
        version = cut.version,
        committed = config.schema_version_committed,
        later_files = later_files.len(),
        "a schema change that was never committed: cutting the WAL at it (no row from it on \
         was acknowledged); the schema stays at the committed version"
    );
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&cut.file)
        .map_err(|e| WalError::io("opening WAL file", &cut.file, e))?;
    file.set_len(cut.offset)
        .and_then(|()| file.sync_all())
        .map_err(|e| WalError::io("cutting WAL file", &cut.file, e))?;
    for (_, path) in later_files {
        cut.files_set_aside.push(dir::set_aside_uncommitted(path)?);
    }
    recovered.uncommitted_cut = Some(cut);
    Ok(())
}

/// The writer's first file is named after the next LSN and created with truncation, which
/// is right for a file holding no row. If force mode could read no row of the file of that
/// name (its header or every batch damaged), truncating it would destroy what is left of
/// it, so it is renamed `<name>.damaged` first.
fn set_aside_unread_newest_wal(
    config: &RecoveryConfig,
    damaged_files: &[PathBuf],
    recovered: &mut Recovered,
) -> Result<()> {
    let next = config.dir.join(wal_file_name(recovered.lsn_next()));
    if !damaged_files.contains(&next) {
        return Ok(());
    }
    let set_aside = dir::set_aside(&next)?;
    tracing::warn!(
        shard = config.shard_id,
        file = %next.display(),
        renamed_to = %set_aside.display(),
        "force recovery: no row of this WAL file could be read; it is kept under another name \
         so that the next WAL file does not overwrite it"
    );
    recovered.wal_file_set_aside = Some((next, set_aside));
    Ok(())
}

/// In force mode counts and logs `error`; otherwise returns it.
fn skip_or_fail(config: &RecoveryConfig, error: WalError, recovered: &mut Recovered) -> Result<()> {
    if !config.force {
        return Err(error);
    }
    tracing::warn!(shard = config.shard_id, %error, "force recovery: skipping damaged data");
    recovered.batches_skipped += 1;
    Ok(())
}

/// A torn write anywhere but at the end of the newest file cannot be a crash mid-write: the
/// writer went on to write more after it.
fn torn_is_corrupt(error: WalError) -> WalError {
    match error {
        WalError::Torn { file, offset } => WalError::Corrupt {
            file,
            offset,
            reason: "torn write in a WAL file that is not the newest".into(),
        },
        other => other,
    }
}

fn check_follows(
    config: &RecoveryConfig,
    wal_files: &[(u64, PathBuf)],
    position: usize,
    lsn_last: u64,
) -> Result<()> {
    let lsn_first = wal_files[position].0;
    if lsn_first == lsn_last + 1 {
        return Ok(());
    }
    let error = WalError::MissingRows {
        expected_file: config.dir.join(wal_file_name(lsn_last + 1)),
        after: wal_files[position - 1].1.display().to_string(),
        lsn_first_missing: lsn_last + 1,
        lsn_next_found: lsn_first,
    };
    if !config.force {
        return Err(error);
    }
    tracing::warn!(shard = config.shard_id, %error, "force recovery: going on");
    Ok(())
}

fn apply_row(
    config: &RecoveryConfig,
    path: &Path,
    row: &Row<'_>,
    target: &mut impl RecoveryTarget,
    recovered: &mut Recovered,
) -> Result<()> {
    let result = match row.kind {
        RowKind::Replace => target.replace(row.space_id, row.body),
        RowKind::Delete => target.delete(row.space_id, row.body),
        RowKind::Schema => match SchemaRow::decode(row.body) {
            Some(change) => target.change_schema(row.space_id, change),
            None => Err("a schema row too short to hold its version".into()),
        },
    };
    match result {
        Ok(()) => recovered.rows_replayed += 1,
        Err(reason) => {
            let error = WalError::Replay {
                file: path.to_path_buf(),
                lsn: row.lsn,
                reason: format!("space {}: {reason}", row.space_id),
            };
            if !config.force {
                return Err(error);
            }
            tracing::warn!(shard = config.shard_id, %error, "force recovery: skipping row");
            recovered.rows_skipped += 1;
        }
    }
    Ok(())
}

/// Cuts the newest WAL file at a torn batch: those rows were never acknowledged. A file too
/// short for its header is removed.
fn cut_torn_tail(
    config: &RecoveryConfig,
    path: &Path,
    offset: u64,
    recovered: &mut Recovered,
) -> Result<()> {
    tracing::warn!(
        shard = config.shard_id,
        file = %path.display(),
        offset,
        "cutting a torn write off the end of the newest WAL file"
    );
    if offset == 0 {
        std::fs::remove_file(path).map_err(|e| WalError::io("removing torn WAL file", path, e))?;
    } else {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| WalError::io("opening torn WAL file", path, e))?;
        file.set_len(offset)
            .and_then(|()| file.sync_all())
            .map_err(|e| WalError::io("cutting torn WAL file", path, e))?;
    }
    recovered.torn_cut = Some((path.to_path_buf(), offset));
    Ok(())
}

/// Logs recovery progress at least every 10 s or every million rows, and a final line.
pub struct Progress {
    shard_id: u32,
    started: Instant,
    logged: Instant,
    rows_read: u64,
    rows_read_at_log: u64,
}

const PROGRESS_INTERVAL: Duration = Duration::from_secs(10);
const PROGRESS_ROWS: u64 = 1_000_000;

impl Progress {
    fn new(shard_id: u32) -> Progress {
        let now = Instant::now();
        Progress {
            shard_id,
            started: now,
            logged: now,
            rows_read: 0,
            rows_read_at_log: 0,
        }
    }

    #[allow(clippy::cast_possible_truncation, reason = "a rate, for the log")]
    fn tick(&mut self, phase: &'static str, rows: u64) {
        self.rows_read += rows;
        let rows_since = self.rows_read - self.rows_read_at_log;
        if rows_since < PROGRESS_ROWS && self.logged.elapsed() < PROGRESS_INTERVAL {
            return;
        }
        let seconds = self.logged.elapsed().as_secs_f64().max(1e-9);
        tracing::info!(
            shard = self.shard_id,
            phase,
            rows_read = self.rows_read,
            rows_per_second = (rows_since as f64 / seconds) as u64,
            "recovering"
        );
        self.logged = Instant::now();
        self.rows_read_at_log = self.rows_read;
    }

    fn finish(&self, recovered: &Recovered) {
        tracing::info!(
            shard = self.shard_id,
            seconds = self.started.elapsed().as_secs_f64(),
            snapshot_lsn = recovered.snapshot_lsn,
            lsn_last = recovered.lsn_last,
            tuples_loaded = recovered.tuples_loaded,
            rows_replayed = recovered.rows_replayed,
            batches_skipped = recovered.batches_skipped,
            rows_skipped = recovered.rows_skipped,
            "recovery done"
        );
    }
}

/// What [`collect_garbage`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GarbageCollected {
    pub snapshots_removed: Vec<PathBuf>,
    pub wal_files_removed: Vec<PathBuf>,
    pub in_progress_removed: Vec<PathBuf>,
}

/// Keeps the newest `checkpoint_count` snapshots and the WAL files needed after the oldest of
/// them, and those holding rows after `replicas_need_after` (what the replicas still need);
/// removes the rest and any `.snap.inprogress`. Call it after a snapshot is written, never
/// while one is being written in the same directory. With no snapshot, nothing is removed.
pub fn collect_garbage(
    dir: &Path,
    checkpoint_count: u32,
    replicas_need_after: Option<u64>,
) -> Result<GarbageCollected> {
    assert!(checkpoint_count >= 1);
    let listing = dir::list(dir)?;
    let mut removed = GarbageCollected::default();
    for path in &listing.in_progress {
        remove(path)?;
        removed.in_progress_removed.push(path.clone());
    }
    let keep_from = listing
        .snapshots
        .len()
        .saturating_sub(checkpoint_count as usize);
    let Some(&(lsn_oldest_kept, _)) = listing.snapshots.get(keep_from) else {
        return Ok(removed);
    };
    for (_, path) in &listing.snapshots[..keep_from] {
        remove(path)?;
        removed.snapshots_removed.push(path.clone());
    }
    // A file is unneeded when the next one starts at or before the first LSN to replay,
    // or to send to a replica.
    let needed_after = replicas_need_after.map_or(lsn_oldest_kept, |lsn| lsn.min(lsn_oldest_kept));
    for pair in listing.wal_files.windows(2) {
        if pair[1].0 <= needed_after + 1 {
            remove(&pair[0].1)?;
            removed.wal_files_removed.push(pair[0].1.clone());
        }
    }
    Ok(removed)
}

fn remove(path: &Path) -> Result<()> {
    std::fs::remove_file(path).map_err(|e| WalError::io("removing old checkpoint file", path, e))
}
