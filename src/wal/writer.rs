//! One shard's WAL writer: LSNs, group commit, file rotation, and what happens when the
//! disk refuses a write.
//!
//! Group commit: [`WalWriter::append`] encodes a row into the open batch synchronously (so a
//! caller holding the shard's `RefCell` borrow can log and release it before awaiting) and
//! returns a [`Commit`] future. One flusher task takes every row appended so far, writes them
//! with one `write` (and one `fdatasync` in fsync mode), then wakes every waiter of that
//! flush. While a flush is on the disk the next batch fills, so N writers in flight share one
//! write and one fsync.
//!
//! Back of the envelope: an NVMe fdatasync is ~20..100 µs, a tuple row ~100 B. At 1 M rows/s
//! per core one flush carries ~20..100 rows (2..10 KiB): the rows in flight wait one fsync
//! at most, and the disk sees ~10..50 k writes/s per core, far below its limits. The open
//! batch holds only rows whose writers are waiting, so its memory is bounded by the number of
//! requests in flight on the shard.
//!
//! A failed flush refuses its rows and every row queued behind it, as Tarantool rolls back
//! the failed transaction and all those after it: the writer hands the LSNs back (the next
//! row gets the one after the last durable row), calls the rollback hook
//! ([`WalWriter::on_rollback`]) so the shard undoes those writes in memory, and only then
//! wakes their commits, which fail. What happens next depends on the failure:
//!
//! * **Out of space** (`ENOSPC`, `EDQUOT`, a short write) while creating or appending: the
//!   bytes of the failed flush are cut off the file (a file the flush had begun is removed,
//!   and the cut is synced), so no torn batch is left behind, and the next flush begins a
//!   new file. Writes resume by themselves once there is room, without a restart.
//! * **Anything else**, and every `fdatasync` failure: the writer is poisoned and refuses all
//!   writes until restart ([`WalError::Poisoned`]). After a failed fsync the kernel may have
//!   dropped the dirty pages, so a retry that succeeded would acknowledge data that is gone
//!   (the lesson PostgreSQL and fjall learned). The failed flush's bytes are cut off the
//!   file here too, so that a restart does not replay rows that were refused; if even that
//!   fails (a dying disk), the error says the rows may come back.
//!
//! The appends between two failures form an epoch ([`Epoch`]): a failure ends the current
//! one and records which of its flushes were durable, so a commit decides its outcome from
//! its own epoch even when it is polled after later flushes succeeded.
//!
//! **Synchronous rows** (Tarantool's limbo, `docs/replication.md`): a row marked sync
//! ([`WalWriter::mark_sync`]) is acknowledged only once it is confirmed
//! ([`WalWriter::confirm`]: a quorum of instances has it), and so is every row logged after it,
//! sync or not, as in Tarantool. Commits from the oldest pending sync row's LSN on are held
//! like those behind a fence. A sync row never confirmed is rolled back with every row after
//! it ([`WalWriter::begin_sync_rollback`]): their rows are durable already, so the owner undoes
//! them in memory and appends compensating rows, and only once those are durable
//! ([`WalWriter::finish_sync_rollback`]) do the held commits fail, the sync row's with
//! [`WalError::SyncQuorumTimeout`] and the others' with [`WalError::SyncRollback`]. Rows that
//! are durable and behind no pending sync row are *settled*
//! ([`WalWriter::lsn_settled_last`]): only their undo may be forgotten. No sync row, no cost:
//! a commit compares its LSN with one cell, as it did for the fence alone.
//!
//! The file I/O sits behind [`Sink`] so that tests inject failures; [`GlommioSink`] is the
//! real one. Knows nothing of storage, requests or the network: rows carry raw msgpack.

use std::cell::{Cell, OnceCell, RefCell};
use std::future::{poll_fn, Future};
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use glommio::io::{BufferedFile, Directory, OpenOptions};

use crate::wal::dir::wal_file_name;
use crate::wal::error::{Result, WalError};
use crate::wal::format::{
    encode_close_mark, encode_file_header, BatchBuilder, CloseMark, FileHeader, FileKind, RowKind,
    CLOSE_MARK_SIZE_BYTES, FILE_HEADER_SIZE_BYTES, ROW_BODY_BYTES_MAX,
};

/// Where the writer's bytes go: a sequence of files, each appended to.
///
/// `async fn` in a public trait warns that callers cannot require `Send` futures; on a
/// thread-per-core runtime nothing is sent between threads, so that is intended.
#[allow(async_fn_in_trait)]
pub trait Sink {
    /// Closes the current file, if any, and creates the file for rows from `lsn_first`.
    async fn start_file(&mut self, lsn_first: u64) -> io::Result<()>;
    /// Appends all of `bytes` to the current file; a short write is an error.
    async fn append(&mut self, bytes: Vec<u8>) -> io::Result<()>;
    /// Makes the appended bytes durable (`fdatasync`).
    async fn sync_data(&mut self) -> io::Result<()>;
    /// Closes the current file.
    async fn close(&mut self) -> io::Result<()>;
    /// After a failed flush: cuts the file for rows from `lsn_first` back to its first
    /// `keep_bytes` bytes (removes it when `keep_bytes` is 0: the flush was to begin it, and
    /// it may not exist at all) and closes what is open, so the failed flush leaves nothing
    /// behind. Any other file stays as it is. A sink that cannot do this refuses, and the
    /// writer is then poisoned.
    async fn discard_after(&mut self, lsn_first: u64, keep_bytes: u64) -> io::Result<()> {
        let _ = (lsn_first, keep_bytes);
        Err(io::Error::other("this sink cannot discard a failed write"))
    }
}

/// Settings of one writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterConfig {
    pub shard_id: u32,
    /// Written into every file header; recovery compares it to the schema it runs with.
    pub schema_fingerprint: u64,
    /// `fdatasync` after each flush before acknowledging (`wal_mode = "fsync"`).
    pub fsync: bool,
    /// A new file is started before a flush that would take the current one past this.
    pub max_file_size_bytes: u64,
    /// The LSN of the first row appended: one after the last recovered LSN.
    pub lsn_next: u64,
}

/// Counters of one writer, for tests and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    pub rows_appended: u64,
    /// Writes of one or more batches: with concurrent writers, fewer than rows.
    pub flushes: u64,
    pub syncs: u64,
    pub bytes_written: u64,
    pub files_started: u64,
    /// Flushes the disk refused, and the rows they (and those queued behind) took along.
    pub flushes_failed: u64,
    pub rows_refused: u64,
}

struct WriterState {
    builder: BatchBuilder,
    lsn_next: u64,
    /// The LSN of the first row in `builder`, meaningful when it is not empty.
    lsn_first_unflushed: u64,
    lsn_durable_last: u64,
    /// Rows appended now are written by the flush of this generation.
    generation_open: u64,
    /// Every generation up to this one is resolved: durable, or refused with its epoch.
    generation_durable: u64,
    /// The epoch the appends made now belong to.
    epoch: Rc<Epoch>,
    poisoned: Option<String>,
    /// The next flush starts a new file (asked for at a checkpoint).
    rotation_requested: bool,
    closing: bool,
    flusher_done: bool,
    /// Commit and close futures waiting for a flush; all are woken after each, and re-check.
    waiters: Vec<Waker>,
    flusher_waker: Option<Waker>,
    stats: WriterStats,
    failure_log: FailureLog,
}

/// The appends between two failed flushes. Its end, once set, says which of its
/// generations were durable and why the rest were refused.
#[derive(Default)]
struct Epoch {
    end: OnceCell<EpochEnd>,
    /// Ended by a synchronous rollback instead: rows from this LSN on were rolled back
    /// (that LSN's row is the sync row that timed out); those before it are durable.
    sync_rolled_back_from: OnceCell<u64>,
}

struct EpochEnd {
    /// The epoch's generations up to this one are durable; the later ones were refused.
    generation_durable_last: u64,
    lsn_durable_last: u64,
    cause: String,
    poisoned: bool,
}

impl EpochEnd {
    fn error(&self) -> WalError {
        if self.poisoned {
            WalError::Poisoned {
                lsn_durable_last: self.lsn_durable_last,
                cause: self.cause.clone(),
            }
        } else {
            WalError::WriteFailed {
                lsn_durable_last: self.lsn_durable_last,
                cause: self.cause.clone(),
            }
        }
    }
}

/// Called with the last durable LSN when a flush fails, before any refused commit is
/// woken: the owner undoes every write logged after that LSN.
type RollbackHook = Box<dyn FnMut(u64)>;

struct WriterShared {
    state: RefCell<WriterState>,
    /// `state.lsn_durable_last`, readable without a borrow: every write reads it (the
    /// shard forgets the undo of what is durable).
    lsn_durable_last: Cell<u64>,
    /// Apart from `state`, so the hook runs with no borrow of it held.
    on_rollback: RefCell<Option<RollbackHook>>,
    /// Where the last durable LSN is told to other threads (a relay; see
    /// [`WalWriter::publish_durable_to`]).
    published: RefCell<Option<Arc<AtomicU64>>>,
    /// Rows from this LSN on are not acknowledged, durable or not, until the fence is lifted
    /// ([`WalWriter::fence`]); `u64::MAX`: no fence.
    fence_lsn: Cell<u64>,
    /// The oldest pending sync row's LSN (or the one being rolled back); `u64::MAX`: none.
    limbo_first: Cell<u64>,
    /// The lower of `fence_lsn` and `limbo_first`: commits from it on are held. Apart from
    /// `state`: every commit compares against it.
    hold_from: Cell<u64>,
    /// The last LSN durable and behind no pending sync row: what a write may forget the
    /// undo of. Every write reads it.
    lsn_settled_last: Cell<u64>,
    /// Commits durable but held by the fence or the limbo; woken when either moves.
    held_waiters: RefCell<Vec<Waker>>,
    limbo: RefCell<Limbo>,
}

/// The synchronous rows not yet confirmed (Tarantool's limbo).
#[derive(Default)]
struct Limbo {
    /// Oldest first: each sync row's LSN and when it was logged.
    pending: std::collections::VecDeque<(u64, Instant)>,
    /// A rollback under way: the epoch it ends and the first LSN it rolls back.
    rolling_back: Option<(Rc<Epoch>, u64)>,
    /// Who waits for a first pending row ([`WalWriter::limbo_pending`]).
    watcher: Option<Waker>,
}

/// A synchronous rollback begun ([`WalWriter::begin_sync_rollback`]): the rows from `lsn_first`
/// on are to be undone and compensated, then the rollback finished.
#[must_use = "a rollback holds its commits until it is finished"]
pub struct SyncRollback {
    pub lsn_first: u64,
}

/// A shard's WAL writer; cheap to clone (all clones share one log).
#[derive(Clone)]
pub struct WalWriter {
    shared: Rc<WriterShared>,
}

impl WalWriter {
    /// Starts the writer with its flusher task on the current glommio executor.
    pub fn start<S: Sink + 'static>(sink: S, config: WriterConfig) -> WalWriter {
        let (writer, flusher) = WalWriter::new(sink, config);
        glommio::spawn_local(flusher).detach();
        writer
    }

    /// The writer and its flusher future, for the caller to spawn on any single-threaded
    /// executor. Nothing is written until the flusher runs.
    pub fn new<S: Sink + 'static>(
        sink: S,
        config: WriterConfig,
    ) -> (WalWriter, impl Future<Output = ()>) {
        assert!(config.lsn_next >= 1, "LSNs start at 1");
        assert!(config.max_file_size_bytes > FILE_HEADER_SIZE_BYTES as u64);
        let shared = Rc::new(WriterShared {
            state: RefCell::new(WriterState {
                builder: BatchBuilder::with_capacity(64 << 10),
                lsn_next: config.lsn_next,
                lsn_first_unflushed: config.lsn_next,
                lsn_durable_last: config.lsn_next - 1,
                generation_open: 1,
                generation_durable: 0,
                epoch: Rc::default(),
                poisoned: None,
                rotation_requested: false,
                closing: false,
                flusher_done: false,
                waiters: Vec::new(),
                flusher_waker: None,
                stats: WriterStats::default(),
                failure_log: FailureLog::default(),
            }),
            on_rollback: RefCell::new(None),
            published: RefCell::new(None),
            lsn_durable_last: Cell::new(config.lsn_next - 1),
            fence_lsn: Cell::new(NO_FENCE),
            limbo_first: Cell::new(NO_FENCE),
            hold_from: Cell::new(NO_FENCE),
            lsn_settled_last: Cell::new(config.lsn_next - 1),
            held_waiters: RefCell::new(Vec::new()),
            limbo: RefCell::default(),
        });
        let flusher = run_flusher(shared.clone(), sink, config);
        (WalWriter { shared }, flusher)
    }

    /// Holds the acknowledgement of every row from `lsn` on, durable or not, until
    /// [`WalWriter::lift_fence`]: their commits resolve only then (or fail at once, if the
    /// log refuses them). A schema change's row sets it at its own LSN, so that nothing
    /// written after the change is acknowledged before every shard has the change
    /// (`docs/ddl.md`). The change's own commit can be awaited past it
    /// ([`Commit::ignoring_fence`]). One fence at a time.
    pub fn fence(&self, lsn: u64) {
        assert_eq!(self.shared.fence_lsn.get(), NO_FENCE, "one fence at a time");
        assert!(lsn != NO_FENCE);
        self.shared.fence_lsn.set(lsn);
        self.shared.refresh_holds();
    }

    /// Lifts the fence: the commits it held resolve.
    pub fn lift_fence(&self) {
        self.shared.fence_lsn.set(NO_FENCE);
        self.shared.refresh_holds();
        self.shared.wake_held();
    }

    /// Gives up a schema change whose fence is up: the writer refuses every row from now
    /// on (as after an I/O error, until restart), and the commits the fence holds fail. Their
    /// rows follow a schema row that was never committed, which recovery cuts away.
    pub fn abandon_fence(&self, cause: String) {
        self.stop(cause);
    }

    /// Refuses every row from now on (as after an I/O error, until restart); commits held by
    /// the fence fail. For a state the log can no longer be trusted to match: an abandoned
    /// schema change, rows undoing a synchronous rollback that were not logged.
    pub fn stop(&self, cause: String) {
        {
            let mut state = self.shared.state.borrow_mut();
            state.poisoned.get_or_insert(cause);
        }
        self.shared.wake_held();
    }

    /// Sets what undoes the writes of a failed flush (see the module doc). The hook gets
    /// the last durable LSN and must undo every write logged after it, newest first; it
    /// runs in the flusher task, before any refused commit resolves.
    pub fn on_rollback(&self, hook: impl FnMut(u64) + 'static) {
        *self.shared.on_rollback.borrow_mut() = Some(Box::new(hook));
    }

    /// Stores the last durable LSN into `target` now and after every flush (release order:
    /// a thread that reads it finds the batches up to it in the file). Relays read it to
    /// know how far a WAL file may be read while it grows.
    pub fn publish_durable_to(&self, target: Arc<AtomicU64>) {
        target.store(self.shared.lsn_durable_last.get(), AtomicOrdering::Release);
        *self.shared.published.borrow_mut() = Some(target);
    }

    /// Logs one row and returns the future of its durability, which resolves to its LSN.
    /// Rows appended with no `.await` between them land in the same batch, so they become
    /// durable (and are recovered) together.
    pub fn append(&self, kind: RowKind, space_id: u32, body: &[u8]) -> Result<Commit> {
        let mut state = self.shared.state.borrow_mut();
        state.check_accepting()?;
        if body.len() > ROW_BODY_BYTES_MAX {
            return Err(WalError::RowTooLarge {
                body_bytes: body.len(),
            });
        }
        let lsn = state.lsn_next;
        if state.builder.is_empty() {
            state.lsn_first_unflushed = lsn;
        }
        state.builder.push_row(lsn, kind, space_id, body);
        state.lsn_next = lsn + 1;
        state.stats.rows_appended += 1;
        let generation = state.generation_open;
        if let Some(waker) = state.flusher_waker.take() {
            waker.wake();
        }
        Ok(Commit {
            shared: self.shared.clone(),
            epoch: state.epoch.clone(),
            generation,
            lsn,
        })
    }

    /// A commit that resolves once every row appended so far is durable, or fails if any
    /// of them is refused: what a snapshot of the rows applied so far waits for.
    pub fn commit_appended(&self) -> Commit {
        let state = self.shared.state.borrow();
        let generation = if state.builder.is_empty() {
            state.generation_open - 1
        } else {
            state.generation_open
        };
        Commit {
            shared: self.shared.clone(),
            epoch: state.epoch.clone(),
            generation,
            lsn: state.lsn_next - 1,
        }
    }

    /// Starts a new file with the next row, or at once (an empty file) if nothing waits to be
    /// written. Called when a checkpoint is taken at `lsn_next() - 1`: the rows after it then
    /// begin a file, so recovery from that checkpoint skips every older file without reading
    /// it, and garbage collection can remove them.
    pub fn rotate(&self) {
        let mut state = self.shared.state.borrow_mut();
        state.rotation_requested = true;
        if let Some(waker) = state.flusher_waker.take() {
            waker.wake();
        }
    }

    /// Marks the row just appended at `lsn` synchronous: its commit, and every later one,
    /// is held until [`WalWriter::confirm`] reaches it (see the module doc).
    #[cold]
    pub fn mark_sync(&self, lsn: u64) {
        let mut limbo = self.shared.limbo.borrow_mut();
        debug_assert!(limbo.pending.back().is_none_or(|&(last, _)| last < lsn));
        limbo.pending.push_back((lsn, Instant::now()));
        if let Some(watcher) = limbo.watcher.take() {
            watcher.wake();
        }
        drop(limbo);
        self.shared.refresh_holds();
    }

    /// The oldest pending sync row: its LSN and when it was logged.
    pub fn limbo_oldest(&self) -> Option<(u64, Instant)> {
        self.shared.limbo.borrow().pending.front().copied()
    }

    /// Sync rows pending (Tarantool's `box.info.synchro.queue.len`).
    pub fn limbo_len(&self) -> usize {
        self.shared.limbo.borrow().pending.len()
    }

    /// Resolves once a sync row is pending.
    pub async fn limbo_pending(&self) {
        poll_fn(|cx| {
            let mut limbo = self.shared.limbo.borrow_mut();
            if limbo.pending.is_empty() {
                limbo.watcher = Some(cx.waker().clone());
                return Poll::Pending;
            }
            Poll::Ready(())
        })
        .await;
    }

    /// Every pending sync row up to `lsn` has its quorum: the commits they held resolve
    /// (those behind a later pending sync row stay held).
    pub fn confirm(&self, lsn: u64) {
        let mut limbo = self.shared.limbo.borrow_mut();
        let before = limbo.pending.len();
        while limbo
            .pending
            .front()
            .is_some_and(|&(first, _)| first <= lsn)
        {
            limbo.pending.pop_front();
        }
        let confirmed = limbo.pending.len() != before;
        drop(limbo);
        if confirmed {
            self.shared.refresh_holds();
            self.shared.wake_held();
        }
    }

    /// Begins the rollback of the oldest pending sync row and of every row logged after it
    /// (all pending sync rows among them): appends from now on belong to a new epoch, and the
    /// rolled-back rows' commits stay held until [`WalWriter::finish_sync_rollback`]. The
    /// caller then undoes those rows in memory and appends their compensating rows, in one
    /// step. `None` when nothing is pending, or the oldest pending row is not durable yet
    /// (a rollback waits for it: the rows before it are then durable, and their commits
    /// succeed).
    pub fn begin_sync_rollback(&self) -> Option<SyncRollback> {
        let mut limbo = self.shared.limbo.borrow_mut();
        assert!(limbo.rolling_back.is_none(), "one rollback at a time");
        let (lsn_first, _) = limbo.pending.front().copied()?;
        if lsn_first > self.shared.lsn_durable_last.get() {
            return None;
        }
        limbo.pending.clear();
        let epoch = std::mem::take(&mut self.shared.state.borrow_mut().epoch);
        limbo.rolling_back = Some((epoch, lsn_first));
        drop(limbo);
        self.shared.refresh_holds();
        Some(SyncRollback { lsn_first })
    }

    /// Ends a rollback once its compensating rows are durable (or could not be made so):
    /// the rolled-back commits fail now, the timed-out sync row's with
    /// [`WalError::SyncQuorumTimeout`], the others' with [`WalError::SyncRollback`].
    pub fn finish_sync_rollback(&self, rollback: SyncRollback) {
        let taken = self.shared.limbo.borrow_mut().rolling_back.take();
        let Some((epoch, lsn_first)) = taken else {
            debug_assert!(false, "no rollback under way");
            return;
        };
        debug_assert_eq!(lsn_first, rollback.lsn_first);
        let _ = epoch.sync_rolled_back_from.set(lsn_first);
        self.shared.refresh_holds();
        self.shared.wake_held();
    }

    /// The last LSN durable and behind no pending sync row (see the module doc).
    #[inline]
    pub fn lsn_settled_last(&self) -> u64 {
        self.shared.lsn_settled_last.get()
    }

    /// The LSN the next append gets.
    pub fn lsn_next(&self) -> u64 {
        self.shared.state.borrow().lsn_next
    }

    /// The last LSN known to be written (and synced in fsync mode).
    #[inline]
    pub fn lsn_durable_last(&self) -> u64 {
        self.shared.lsn_durable_last.get()
    }

    pub fn stats(&self) -> WriterStats {
        self.shared.state.borrow().stats
    }

    /// Why the writer refuses writes, if it does.
    pub fn poisoned(&self) -> Option<String> {
        self.shared.state.borrow().poisoned.clone()
    }

    /// Stops accepting rows, flushes those already appended, closes the file.
    pub async fn close(&self) -> Result<()> {
        {
            let mut state = self.shared.state.borrow_mut();
            state.closing = true;
            if let Some(waker) = state.flusher_waker.take() {
                waker.wake();
            }
        }
        poll_fn(|cx| {
            let mut state = self.shared.state.borrow_mut();
            if state.flusher_done {
                return Poll::Ready(match &state.poisoned {
                    Some(_) => Err(state.poisoned_error()),
                    None => Ok(()),
                });
            }
            state.waiters.push(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

impl WriterState {
    fn check_accepting(&self) -> Result<()> {
        if self.poisoned.is_some() {
            return Err(self.poisoned_error());
        }
        if self.closing {
            return Err(WalError::Closed);
        }
        Ok(())
    }

    fn poisoned_error(&self) -> WalError {
        WalError::Poisoned {
            lsn_durable_last: self.lsn_durable_last,
            cause: self.poisoned.clone().unwrap_or_default(),
        }
    }

    fn wake_waiters(&mut self) {
        for waker in self.waiters.drain(..) {
            waker.wake();
        }
    }

    /// A flush failed: its rows and every row appended since are refused. Ends the epoch
    /// (its generations after `generation_durable` fail), hands their LSNs back and empties
    /// the open batch. Returns the last durable LSN, for the rollback hook.
    fn refuse_unflushed(&mut self, cause: String, poisoned: bool) -> u64 {
        let rows_refused = self.lsn_next - 1 - self.lsn_durable_last;
        let end = EpochEnd {
            generation_durable_last: self.generation_durable,
            lsn_durable_last: self.lsn_durable_last,
            cause: cause.clone(),
            poisoned,
        };
        let ended = self.epoch.end.set(end).is_ok();
        debug_assert!(ended, "an epoch ends once");
        self.epoch = Rc::default();
        // The failed flush's generation and the open one are resolved (refused); the next
        // flush takes a fresh generation right after them.
        self.generation_durable = self.generation_open;
        self.generation_open += 1;
        drop(self.builder.take());
        self.lsn_next = self.lsn_durable_last + 1;
        self.lsn_first_unflushed = self.lsn_next;
        if poisoned {
            self.poisoned = Some(cause);
        }
        self.stats.flushes_failed += 1;
        self.stats.rows_refused += rows_refused;
        self.lsn_durable_last
    }
}

/// Resolves to the row's LSN once the flush that carries it is written (and synced in fsync
/// mode), or to the error that refused it ([`WalError::WriteFailed`], or
/// [`WalError::Poisoned`] when the writer stopped).
#[must_use = "a row is acknowledged only once its commit resolves"]
pub struct Commit {
    shared: Rc<WriterShared>,
    epoch: Rc<Epoch>,
    generation: u64,
    lsn: u64,
}

/// [`WriterShared::fence_lsn`] when there is none.
const NO_FENCE: u64 = u64::MAX;

impl Commit {
    pub fn lsn(&self) -> u64 {
        self.lsn
    }

    /// The future of this row's durability alone, which no fence holds: what a schema
    /// change waits for before it is committed (and its fence lifted).
    pub fn ignoring_fence(self) -> Durable {
        Durable(self)
    }

    /// Ready once the rows up to this one are durable or refused; the fence aside.
    fn poll_durable(&self, cx: &mut Context<'_>) -> Poll<Result<u64>> {
        if let Some(end) = self.epoch.end.get() {
            return Poll::Ready(if self.generation <= end.generation_durable_last {
                Ok(self.lsn)
            } else {
                Err(end.error())
            });
        }
        if let Some(&lsn_first) = self.epoch.sync_rolled_back_from.get() {
            // A rollback begins only once its first row is durable, so the rows before it
            // are durable too.
            return Poll::Ready(match self.lsn.cmp(&lsn_first) {
                std::cmp::Ordering::Less => Ok(self.lsn),
                std::cmp::Ordering::Equal => Err(WalError::SyncQuorumTimeout),
                std::cmp::Ordering::Greater => Err(WalError::SyncRollback),
            });
        }
        let mut state = self.shared.state.borrow_mut();
        if state.generation_durable >= self.generation {
            debug_assert!(state.lsn_durable_last >= self.lsn);
            return Poll::Ready(Ok(self.lsn));
        }
        if state.flusher_done {
            return Poll::Ready(Err(WalError::Closed));
        }
        state.waiters.push(cx.waker().clone());
        Poll::Pending
    }
}

impl Future for Commit {
    type Output = Result<u64>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<u64>> {
        let outcome = std::task::ready!(self.poll_durable(cx));
        if outcome.is_ok() && self.lsn >= self.shared.hold_from.get() {
            return self.poll_held(cx);
        }
        Poll::Ready(outcome)
    }
}

impl Commit {
    /// A durable row at or after the fence or the oldest pending sync row.
    #[cold]
    fn poll_held(&self, cx: &mut Context<'_>) -> Poll<Result<u64>> {
        let state = self.shared.state.borrow();
        if state.flusher_done {
            // Closed with the fence up (the change behind it never committed) or a sync
            // row pending (never confirmed).
            return Poll::Ready(Err(WalError::Closed));
        }
        if self.lsn >= self.shared.fence_lsn.get() && state.poisoned.is_some() {
            // The change behind the fence was abandoned, or the log failed after it.
            return Poll::Ready(Err(state.poisoned_error()));
        }
        drop(state);
        self.shared
            .held_waiters
            .borrow_mut()
            .push(cx.waker().clone());
        Poll::Pending
    }
}

/// A commit awaited past the fence ([`Commit::ignoring_fence`]).
pub struct Durable(Commit);

impl Future for Durable {
    type Output = Result<u64>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<u64>> {
        self.0.poll_durable(cx)
    }
}

/// What one flush writes.
struct Flush {
    generation: u64,
    lsn_first: u64,
    lsn_last: u64,
    bytes: Vec<u8>,
    /// Begin a new file with this flush (a requested rotation).
    start_file: bool,
}

/// Waits for rows, takes them all, writes them; stops after closing or when poisoned.
async fn run_flusher<S: Sink>(shared: Rc<WriterShared>, mut sink: S, config: WriterConfig) {
    let mut file = FileProgress::default();
    while let Some(flush) = poll_fn(|cx| take_flush(&shared, cx)).await {
        let Flush {
            generation,
            lsn_first,
            lsn_last,
            bytes,
            start_file,
        } = flush;
        let result = write_flush(&mut sink, &config, &mut file, start_file, lsn_first, bytes).await;
        let failure = match result {
            Ok(written) => {
                record_durable(&shared, generation, lsn_last, &written);
                continue;
            }
            Err(failure) => failure,
        };
        // The bytes of the failed flush must not stay in the file, whatever the failure:
        // recovery would replay rows that were refused (after a failed fsync the written
        // pages may well reach the disk later), and a torn batch in a file that is not the
        // newest is corruption to it.
        let discarded = discard_failed_flush(&mut sink, &mut file).await;
        let poisoned = !failure.recoverable() || discarded.is_err();
        let cause = failure.describe(&discarded);
        let lsn_durable_last = refuse_after_failure(&shared, &config, lsn_first, cause, poisoned);
        // Undone before any refused writer is answered (their commits wake below).
        if let Some(hook) = shared.on_rollback.borrow_mut().as_mut() {
            hook(lsn_durable_last);
        }
        shared.state.borrow_mut().wake_waiters();
        if poisoned {
            break;
        }
    }
    let sealed = seal_on_clean_close(&shared, &mut sink, &file).await;
    let close_result = sealed.and(sink.close().await);
    let mut state = shared.state.borrow_mut();
    if let Err(error) = close_result {
        if state.poisoned.is_none() {
            state.poisoned = Some(format!("closing the WAL file: {error}"));
        }
    }
    state.flusher_done = true;
    state.wake_waiters();
    drop(state);
    // A commit the fence or the limbo holds is never acknowledged now: it fails (see
    // `Commit::poll_held`).
    shared.wake_held();
}

impl WriterShared {
    /// Recomputes `limbo_first`, `hold_from` and `lsn_settled_last` after the fence or the
    /// limbo changed.
    fn refresh_holds(&self) {
        let limbo = self.limbo.borrow();
        let limbo_first = match &limbo.rolling_back {
            Some((_, lsn_first)) => *lsn_first,
            None => limbo.pending.front().map_or(NO_FENCE, |&(lsn, _)| lsn),
        };
        self.limbo_first.set(limbo_first);
        self.hold_from.set(limbo_first.min(self.fence_lsn.get()));
        let durable = self.lsn_durable_last.get();
        self.lsn_settled_last.set(durable.min(limbo_first - 1));
    }

    fn wake_held(&self) {
        for waker in self.held_waiters.take() {
            waker.wake();
        }
    }
}

/// A flush of `generation` is durable up to `lsn_last`: its commits may return.
fn record_durable(shared: &WriterShared, generation: u64, lsn_last: u64, written: &Written) {
    let mut state = shared.state.borrow_mut();
    assert_eq!(state.generation_durable + 1, generation);
    state.generation_durable = generation;
    state.lsn_durable_last = lsn_last;
    shared.lsn_durable_last.set(lsn_last);
    shared
        .lsn_settled_last
        .set(lsn_last.min(shared.limbo_first.get() - 1));
    if let Some(published) = shared.published.borrow().as_ref() {
        published.store(lsn_last, AtomicOrdering::Release);
    }
    state.stats.flushes += 1;
    state.stats.bytes_written += written.bytes;
    state.stats.syncs += u64::from(written.synced);
    state.stats.files_started += u64::from(written.started_file);
    state.wake_waiters();
}

/// Logs a failed flush (at most once a second) and refuses every row not durable; returns
/// the last durable LSN, which the rollback hook undoes back to.
fn refuse_after_failure(
    shared: &WriterShared,
    config: &WriterConfig,
    lsn_first: u64,
    cause: String,
    poisoned: bool,
) -> u64 {
    let mut state = shared.state.borrow_mut();
    let rows_refused = state.lsn_next - 1 - state.lsn_durable_last;
    if state.failure_log.should_log() {
        let suppressed = state.failure_log.take_suppressed();
        tracing::error!(
            shard = config.shard_id,
            lsn_first,
            rows_refused,
            earlier_failures_not_logged = suppressed,
            stopped = poisoned,
            "WAL write failed: {cause}; {}",
            if poisoned {
                "the writer refuses all writes until restart"
            } else {
                "those writes are rolled back; writes resume when there is room"
            }
        );
    }
    let lsn_durable_last = state.refuse_unflushed(cause, poisoned);
    drop(state);
    // Refused sync rows wait for no quorum now: their commits fail with their epoch.
    let mut limbo = shared.limbo.borrow_mut();
    limbo.pending.retain(|&(lsn, _)| lsn <= lsn_durable_last);
    drop(limbo);
    shared.refresh_holds();
    lsn_durable_last
}

/// Cuts a failed flush's bytes off the file (what `file` counts is what earlier flushes
/// wrote: none, when the failed flush began the file); the next flush starts a new file.
async fn discard_failed_flush<S: Sink>(sink: &mut S, file: &mut FileProgress) -> io::Result<()> {
    let FileProgress {
        open,
        size_bytes,
        lsn_first,
    } = std::mem::take(file);
    if !open {
        return Ok(());
    }
    sink.discard_after(lsn_first, size_bytes).await
}

/// Error lines for failed flushes, at most one a second: a full disk fails every flush
/// tried, and each would otherwise log.
#[derive(Default)]
struct FailureLog {
    logged_at: Option<Instant>,
    suppressed: u64,
}

const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(1);

impl FailureLog {
    fn should_log(&mut self) -> bool {
        let due = self
            .logged_at
            .is_none_or(|at| at.elapsed() >= FAILURE_LOG_INTERVAL);
        if due {
            self.logged_at = Some(Instant::now());
        } else {
            self.suppressed += 1;
        }
        due
    }

    fn take_suppressed(&mut self) -> u64 {
        std::mem::take(&mut self.suppressed)
    }
}

/// Ends the open file of a writer closed without error with a clean-close mark
/// (`docs/format.md`), after syncing it, so that recovery reads damage in it as corruption
/// rather than as a torn write. A failed writer leaves its file unmarked.
async fn seal_on_clean_close<S: Sink>(
    shared: &WriterShared,
    sink: &mut S,
    file: &FileProgress,
) -> io::Result<()> {
    let lsn_last = {
        let state = shared.state.borrow();
        if state.poisoned.is_some() || !file.open {
            return Ok(());
        }
        state.lsn_durable_last
    };
    sink.sync_data().await?;
    let mut mark = Vec::with_capacity(CLOSE_MARK_SIZE_BYTES);
    let offset = file.size_bytes;
    encode_close_mark(&CloseMark { offset, lsn_last }, &mut mark);
    sink.append(mark).await?;
    sink.sync_data().await
}

fn take_flush(shared: &WriterShared, cx: &mut Context<'_>) -> Poll<Option<Flush>> {
    let mut state = shared.state.borrow_mut();
    let rotation_only = state.builder.is_empty() && state.rotation_requested && !state.closing;
    if state.builder.is_empty() && !rotation_only {
        if state.closing {
            return Poll::Ready(None);
        }
        state.flusher_waker = Some(cx.waker().clone());
        return Poll::Pending;
    }
    let flush = Flush {
        generation: state.generation_open,
        lsn_first: if rotation_only {
            state.lsn_next
        } else {
            state.lsn_first_unflushed
        },
        lsn_last: state.lsn_next - 1,
        bytes: state.builder.take(),
        start_file: std::mem::take(&mut state.rotation_requested),
    };
    state.generation_open += 1;
    state.lsn_first_unflushed = state.lsn_next;
    Poll::Ready(Some(flush))
}

#[derive(Default)]
struct FileProgress {
    open: bool,
    size_bytes: u64,
    /// The first LSN of the current file: its name.
    lsn_first: u64,
}

struct Written {
    bytes: u64,
    synced: bool,
    started_file: bool,
}

/// Which step of a flush failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FlushStep {
    StartFile,
    Append,
    Sync,
}

struct FlushFailure {
    step: FlushStep,
    error: io::Error,
}

impl FlushFailure {
    /// Out of space while creating or appending: nothing is lost by refusing the rows and
    /// trying again later. A failed sync never is: see the module doc.
    fn recoverable(&self) -> bool {
        self.step != FlushStep::Sync && is_out_of_space(&self.error)
    }

    fn describe(&self, discarded: &io::Result<()>) -> String {
        let step = match self.step {
            FlushStep::StartFile => "creating a WAL file",
            FlushStep::Append => "writing",
            FlushStep::Sync => "fdatasync",
        };
        match discarded {
            // A double fault: the refused rows may still be in the file, and a restart
            // would replay them. Say so; nothing more can be done without a working disk.
            Err(error) => format!(
                "{step}: {} (then cutting the refused rows off the file failed: {error}; \
                 they may be replayed at restart)",
                self.error
            ),
            Ok(()) => format!("{step}: {}", self.error),
        }
    }
}

/// `ENOSPC`, `EDQUOT`, or a short write (the disk filled during it).
pub fn is_out_of_space(error: &io::Error) -> bool {
    // glommio's errors keep the kind but not always the raw code.
    matches!(
        error.kind(),
        io::ErrorKind::WriteZero | io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    ) || matches!(error.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

async fn write_flush<S: Sink>(
    sink: &mut S,
    config: &WriterConfig,
    file: &mut FileProgress,
    start_file: bool,
    lsn_first: u64,
    flush_bytes: Vec<u8>,
) -> std::result::Result<Written, FlushFailure> {
    let failed = |step| move |error| FlushFailure { step, error };
    let flush_size_bytes = flush_bytes.len() as u64;
    // A file always gets at least one flush, so an oversized flush still makes progress;
    // for the same reason a rotation of a file with no rows yet is already done.
    let file_has_rows = file.size_bytes > FILE_HEADER_SIZE_BYTES as u64;
    let started_file = !file.open
        || (file_has_rows
            && (start_file || file.size_bytes + flush_size_bytes > config.max_file_size_bytes));
    if flush_bytes.is_empty() && !started_file {
        return Ok(Written {
            bytes: 0,
            synced: false,
            started_file,
        });
    }
    let bytes = if started_file {
        // Counted open from here: a failure from now on may leave the file behind, and
        // the discard must see it.
        file.open = true;
        file.size_bytes = 0;
        file.lsn_first = lsn_first;
        sink.start_file(lsn_first)
            .await
            .map_err(failed(FlushStep::StartFile))?;
        let mut bytes = Vec::with_capacity(FILE_HEADER_SIZE_BYTES + flush_bytes.len());
        let header = FileHeader {
            kind: FileKind::Wal,
            shard_id: config.shard_id,
            lsn: lsn_first,
            schema_fingerprint: config.schema_fingerprint,
        };
        encode_file_header(&header, &mut bytes);
        bytes.extend_from_slice(&flush_bytes);
        bytes
    } else {
        flush_bytes
    };
    let size_bytes = bytes.len() as u64;
    sink.append(bytes)
        .await
        .map_err(failed(FlushStep::Append))?;
    if config.fsync {
        sink.sync_data().await.map_err(failed(FlushStep::Sync))?;
    }
    // Only now: until the flush succeeds, `size_bytes` is where a failed one is cut.
    file.size_bytes += size_bytes;
    Ok(Written {
        bytes: size_bytes,
        synced: config.fsync,
        started_file,
    })
}

/// The real sink: files in a shard directory through glommio's buffered (page cache) I/O,
/// which takes appends of any size and offers `fdatasync`. (`DmaFile` would need aligned
/// writes and re-writing the last partial block of every flush.)
pub struct GlommioSink {
    dir: PathBuf,
    file: Option<BufferedFile>,
    /// The path of the open file (set as its creation is tried).
    path: Option<PathBuf>,
    position_bytes: u64,
}

impl GlommioSink {
    /// The directory must exist (recovery creates it).
    pub fn new(dir: impl Into<PathBuf>) -> GlommioSink {
        GlommioSink {
            dir: dir.into(),
            file: None,
            path: None,
            position_bytes: 0,
        }
    }

    fn file(&self) -> io::Result<&BufferedFile> {
        self.file
            .as_ref()
            .ok_or_else(|| io::Error::other("no WAL file is open"))
    }
}

impl Sink for GlommioSink {
    async fn start_file(&mut self, lsn_first: u64) -> io::Result<()> {
        self.close().await?;
        let path = self.dir.join(wal_file_name(lsn_first));
        self.path = Some(path.clone());
        // Truncate: a file of the same name holds no batch (recovery cut it or found it
        // empty), since the LSNs it would hold were never written anywhere.
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .buffered_open(&path)
            .await?;
        // The new name must be durable before rows in it are acknowledged.
        let directory = Directory::open(&self.dir).await?;
        directory.sync().await?;
        directory.close().await?;
        self.file = Some(file);
        self.position_bytes = 0;
        Ok(())
    }

    async fn append(&mut self, bytes: Vec<u8>) -> io::Result<()> {
        let length_bytes = bytes.len();
        let position_bytes = self.position_bytes;
        let written_bytes = self.file()?.write_at(bytes, position_bytes).await?;
        // glommio takes the buffer, so a short write cannot be resumed; it means a full disk
        // and the next write would fail anyway.
        if written_bytes != length_bytes {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write: {written_bytes} of {length_bytes} bytes (disk full?)"),
            ));
        }
        self.position_bytes += written_bytes as u64;
        Ok(())
    }

    async fn sync_data(&mut self) -> io::Result<()> {
        self.file()?.fdatasync().await?;
        Ok(())
    }

    async fn close(&mut self) -> io::Result<()> {
        self.path = None;
        if let Some(file) = self.file.take() {
            file.close().await?;
        }
        Ok(())
    }

    async fn discard_after(&mut self, lsn_first: u64, keep_bytes: u64) -> io::Result<()> {
        let path = self.dir.join(wal_file_name(lsn_first));
        let is_open = self.path.as_ref() == Some(&path);
        self.position_bytes = 0;
        self.path = None;
        let file = self.file.take();
        if let (Some(file), true) = (&file, is_open && keep_bytes > 0) {
            // Shrinking frees blocks, so it works on a full disk; synced, so that after a
            // power loss the cut bytes do not come back as a torn batch mid-log.
            file.truncate(keep_bytes).await?;
            file.fdatasync().await?;
        }
        // Whatever is open closes (it may be the previous file, whole, if the failure came
        // before the switch); the next flush starts a new file.
        if let Some(file) = file {
            file.close().await?;
        }
        if keep_bytes > 0 {
            return Ok(());
        }
        match std::fs::remove_file(&path) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
            _ => {}
        }
        let directory = Directory::open(&self.dir).await?;
        directory.sync().await?;
        directory.close().await?;
        Ok(())
    }
}

#[cfg(test)]
#[path = "writer_tests.rs"]
mod tests;
