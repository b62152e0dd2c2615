//! Durability at the server level: each shard's recovery and WAL writer at start-up, and
//! snapshots (on `box.snapshot()` and every `checkpoint_interval`). The data directory as a
//! whole (its lock, fingerprint and schema record) is [`super::data_dir`]'s.
//!
//! File formats are the `wal` layer's; this module decides when to call it and with what.

use crate::config::{Config, WalMode};
use crate::server::mesh::core::Core;
use crate::server::recovering::Recovering;
use crate::server::schema;
use crate::server::{ServerError, Shared};
use crate::shard::Shard;
use crate::storage::{Engine, Tuple};
use crate::wal::{self, GlommioSink, RecoveryConfig, SnapshotMeta, WalWriter, WriterConfig};
use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How often each core looks for a snapshot request or a due checkpoint. Each look wakes
/// the core, which then polls for `idle_poll` before it sleeps again: at 10 ms this was half
/// of what an idle server spent; `box.snapshot()` waits up to this long more.
const CHECKPOINT_POLL: Duration = Duration::from_millis(50);

/// What [`recover_shard`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardRecovered {
    /// The LSN the shard's writer starts at.
    pub lsn_next: u64,
    /// `--force-recovery` passed over damaged data (a snapshot, batches, rows or a WAL
    /// file): a snapshot must be taken at once, or every later start needs the flag again.
    pub damage_skipped: bool,
}

/// One shard's directory, recovered into `engine`.
pub fn recover_shard(
    config: &Config,
    shard_id: usize,
    fingerprint: u64,
    schema_version: u64,
    engine: &mut Engine,
) -> Result<ShardRecovered, ServerError> {
    let dir = wal::dir::shard_dir(&config.data_dir, shard_id as u32);
    let started = Instant::now();
    let recovery = RecoveryConfig {
        dir: dir.clone(),
        shard_id: shard_id as u32,
        schema_fingerprint: fingerprint,
        force: config.durability.force_recovery,
        schema_version_committed: schema_version,
    };
    let recovered = wal::recover(&recovery, &mut Recovering::new(engine)).map_err(|error| {
        ServerError::Recovery {
            shard_id,
            hint: recovery_hint(config, &error),
            reason: error.to_string(),
        }
    })?;
    if recovered.batches_skipped + recovered.rows_skipped > 0 {
        tracing::warn!(
            shard = shard_id,
            batches = recovered.batches_skipped,
            rows = recovered.rows_skipped,
            "force_recovery skipped damaged data"
        );
    }
    tracing::info!(
        shard = shard_id,
        tuples = recovered.tuples_loaded,
        rows_replayed = recovered.rows_replayed,
        lsn = recovered.lsn_last,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "shard recovered"
    );
    let damage_skipped = recovered.batches_skipped + recovered.rows_skipped > 0
        || !recovered.snapshots_set_aside.is_empty()
        || recovered.wal_file_set_aside.is_some();
    Ok(ShardRecovered {
        lsn_next: recovered.lsn_next(),
        damage_skipped,
    })
}

/// What to add to a recovery error: the advice to skip damaged data, unless the flag is
/// set already or the error gives its own advice.
fn recovery_hint(config: &Config, error: &wal::WalError) -> &'static str {
    use wal::WalError::*;
    match error {
        _ if config.durability.force_recovery => "",
        SnapshotDamaged { .. } | SnapshotDamagedNoFallback { .. } => "",
        Corrupt { .. } | Torn { .. } | MissingRows { .. } | Replay { .. } => {
            " (start with --force-recovery to skip damaged data)"
        }
        _ => "",
    }
}

/// Starts the shard's WAL writer, unless `wal_mode = "none"`.
pub fn start_wal(
    config: &Config,
    shard_id: usize,
    fingerprint: u64,
    lsn_next: u64,
) -> Result<Option<WalWriter>, ServerError> {
    let durability = &config.durability;
    if durability.wal_mode == WalMode::None {
        return Ok(None);
    }
    let dir = wal::dir::shard_dir(&config.data_dir, shard_id as u32);
    wal::dir::create(&dir).map_err(|error| ServerError::Recovery {
        shard_id,
        reason: error.to_string(),
        hint: "",
    })?;
    Ok(Some(WalWriter::start(
        GlommioSink::new(dir),
        WriterConfig {
            shard_id: shard_id as u32,
            schema_fingerprint: fingerprint,
            fsync: durability.wal_mode == WalMode::Fsync,
            max_file_size_bytes: durability.wal_max_file_size_bytes,
            lsn_next,
        },
    )))
}

/// Makes a failed WAL flush undo, in the shard, every write not yet durable, before any of
/// their writers is answered (see `wal::writer` and `shard::undo`).
pub fn roll_back_refused_writes(core: &Rc<Core>) {
    let shard = core.shard.borrow();
    let Some(wal) = &shard.wal else {
        return;
    };
    let core_weak = Rc::downgrade(core);
    wal.on_rollback(move |lsn_durable_last| {
        let Some(core) = core_weak.upgrade() else {
            return;
        };
        // The hook runs in the WAL's flusher task, between other tasks; no task holds the
        // shard across an await, so it is free here.
        core.shard.borrow_mut().roll_back_after(lsn_durable_last);
    });
}

/// Per core: takes a snapshot when `box.snapshot()` asks for one or when
/// `checkpoint_interval` has passed, then removes what `checkpoint_count` no longer needs.
/// `lsn_last` is the last LSN recovered; `at_once` takes the first snapshot right away
/// (after a forced recovery skipped damaged data).
pub async fn checkpoint_loop(core: Rc<Core>, lsn_last: u64, at_once: bool) {
    let me = core.id();
    let shared = core.shared.clone();
    let interval = match shared.config.durability.checkpoint_interval_seconds {
        0 => None,
        seconds => Some(Duration::from_secs(seconds)),
    };
    let mut last_checkpoint = Instant::now();
    let mut due_now = at_once;
    if at_once {
        tracing::warn!(
            shard = me,
            "taking a snapshot now: recovery skipped damaged data, and until a snapshot \
             replaces it every start would need --force-recovery"
        );
    }
    loop {
        glommio::timer::sleep(CHECKPOINT_POLL).await;
        let requested = shared.snapshot_requested.load(Ordering::Acquire);
        let asked = requested > shared.snapshot_done[me].load(Ordering::Acquire);
        let due = std::mem::take(&mut due_now)
            || interval.is_some_and(|interval| last_checkpoint.elapsed() >= interval);
        if !asked && !due {
            continue;
        }
        let schema_version = core.schema_version() - schema::SCHEMA_VERSION_BASE;
        match take_snapshot(&core.shard, &shared, (schema_version, lsn_last)).await {
            Ok(()) => {}
            Err(reason) => {
                tracing::error!(shard = me, %reason, "snapshot failed");
                *shared
                    .snapshot_failure
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(reason);
            }
        }
        last_checkpoint = Instant::now();
        shared.snapshot_done[me].store(requested, Ordering::Release);
    }
}

/// After the config's schema changes were made on every shard (see `schema_change.rs`),
/// before the new schema is recorded: a snapshot of this shard, so that a later recovery
/// under the new schema starts from it and never replays rows written under the old one.
/// Nothing when there were no changes.
pub async fn snapshot_schema_changes(core: &Rc<Core>) -> Result<(), ServerError> {
    if core.shared.schema_changes.is_empty() {
        return Ok(());
    }
    let shared = &core.shared;
    let schema_version = core.schema_version() - schema::SCHEMA_VERSION_BASE;
    take_snapshot(&core.shard, shared, (schema_version, core.lsn_recovered))
        .await
        .map_err(|reason| ServerError::Recovery {
            shard_id: core.id(),
            reason: format!("the snapshot after the schema change failed: {reason}"),
            hint: "",
        })
}

/// Writes a snapshot of the shard as it is now, with the definitions of its spaces, which
/// `schema_version` made. `lsn_recovered` is the snapshot's LSN when there is no WAL
/// (nothing moves it on). A schema change not yet committed when the copy is taken is in
/// it; the copy waits for its writes, which the change's fence holds, so a snapshot of a
/// change that is then abandoned is never written.
pub async fn take_snapshot(
    shard: &RefCell<Shard>,
    shared: &Shared,
    (schema_version, lsn_recovered): (u64, u64),
) -> Result<(), String> {
    let config = &shared.config;
    let me = shard.borrow().id;
    let dir: PathBuf = wal::dir::shard_dir(&config.data_dir, me as u32);
    wal::dir::create(&dir).map_err(|error| error.to_string())?;
    let ShardCopy {
        lsn,
        tuples,
        applied,
        section,
    } = copy_shard(&shard.borrow(), schema_version, lsn_recovered)?;
    if let Some(applied) = applied {
        applied.await.map_err(|error| {
            format!("writes it holds were refused by the WAL, so it is not written: {error}")
        })?;
    }
    let started = Instant::now();
    let meta = SnapshotMeta {
        shard_id: me as u32,
        lsn,
        schema_fingerprint: shared.fingerprint,
        schema: &section,
    };
    let written = wal::snapshot::write_snapshot(&dir, &meta, tuples)
        .await
        .map_err(|error| error.to_string())?;
    let replicas_need_after = shared
        .replication
        .needed_after(me, config.wal_cleanup_delay);
    let removed = wal::collect_garbage(
        &dir,
        config.durability.checkpoint_count,
        replicas_need_after,
    )
    .map_err(|error| error.to_string())?;
    tracing::info!(
        shard = me,
        lsn,
        tuples = written.tuple_count,
        size_bytes = written.size_bytes,
        elapsed_ms = started.elapsed().as_millis() as u64,
        files_removed = removed.snapshots_removed.len() + removed.wal_files_removed.len(),
        "snapshot written"
    );
    Ok(())
}

/// What a snapshot is written from: the shard's tuples at `lsn`, and its definitions.
struct ShardCopy {
    lsn: u64,
    tuples: Vec<(u32, Tuple)>,
    /// Resolves once every write the copy holds is durable.
    applied: Option<wal::Commit>,
    section: Vec<u8>,
}

/// Rows are after-images, so a point-in-time copy of the tuple handles is enough; the
/// writing runs while writes go on. The copy holds every write applied so far, some not
/// yet durable: it is kept only once they all are (a write the log refuses is rolled back,
/// and a snapshot holding it would bring it back).
fn copy_shard(shard: &Shard, schema_version: u64, lsn_recovered: u64) -> Result<ShardCopy, String> {
    let section = schema::snapshot_schema(&shard.engine, schema_version);
    let (lsn, applied) = match &shard.wal {
        Some(wal) => {
            if let Some(cause) = wal.poisoned() {
                return Err(format!(
                    "the WAL refuses writes since an I/O error ({cause}); restart the server \
                     to recover from what is on disk"
                ));
            }
            // Rows after the checkpoint begin a new file: the older become removable.
            wal.rotate();
            (wal.lsn_next() - 1, Some(wal.commit_appended()))
        }
        None => (lsn_recovered, None),
    };
    let tuples: Vec<(u32, Tuple)> = schema::user_tuples(&shard.engine)
        .map(|(space_id, tuple)| (space_id, tuple.to_tuple()))
        .collect();
    Ok(ShardCopy {
        lsn,
        tuples,
        applied,
        section,
    })
}

/// `box.snapshot()`: asks every core for a snapshot and waits until all have one.
pub async fn request_snapshot(shared: &Shared) -> Result<(), String> {
    let generation = shared.snapshot_requested.fetch_add(1, Ordering::AcqRel) + 1;
    loop {
        let all_done = shared
            .snapshot_done
            .iter()
            .all(|done| done.load(Ordering::Acquire) >= generation);
        if all_done {
            break;
        }
        glommio::timer::sleep(CHECKPOINT_POLL).await;
    }
    match shared
        .snapshot_failure
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .take()
    {
        Some(reason) => Err(reason),
        None => Ok(()),
    }
}
