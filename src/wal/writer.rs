//! One shard's WAL writer: LSNs, group commit, file rotation, and refusing to write after an
//! I/O error.
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
//! After a failed write or fsync the writer is poisoned: the flush's waiters and every later
//! append fail with [`WalError::Poisoned`]. After an fsync error the kernel may have dropped
//! the dirty pages, so a retry that succeeds would acknowledge data that is gone.
//!
//! The file I/O sits behind [`Sink`] so that tests inject failures; [`GlommioSink`] is the
//! real one. Knows nothing of storage, requests or the network: rows carry raw msgpack.

use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use glommio::io::{BufferedFile, Directory, OpenOptions};

use crate::wal::dir::wal_file_name;
use crate::wal::error::{Result, WalError};
use crate::wal::format::{
    encode_close_mark, encode_file_header, BatchBuilder, CloseMark, FileHeader, FileKind, RowKind,
    CLOSE_MARK_SIZE_BYTES, FILE_HEADER_SIZE_BYTES,
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
}

struct State {
    builder: BatchBuilder,
    lsn_next: u64,
    /// The LSN of the first row in `builder`, meaningful when it is not empty.
    lsn_first_unflushed: u64,
    lsn_durable_last: u64,
    /// Rows appended now are written by the flush of this generation.
    generation_open: u64,
    generation_durable: u64,
    poisoned: Option<String>,
    /// The next flush starts a new file (asked for at a checkpoint).
    rotation_requested: bool,
    closing: bool,
    flusher_done: bool,
    /// Commit and close futures waiting for a flush; all are woken after each, and re-check.
    waiters: Vec<Waker>,
    flusher_waker: Option<Waker>,
    stats: WriterStats,
}

struct Shared {
    state: RefCell<State>,
}

/// A shard's WAL writer; cheap to clone (all clones share one log).
#[derive(Clone)]
pub struct WalWriter {
    shared: Rc<Shared>,
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
        let shared = Rc::new(Shared {
            state: RefCell::new(State {
                builder: BatchBuilder::with_capacity(64 << 10),
                lsn_next: config.lsn_next,
                lsn_first_unflushed: config.lsn_next,
                lsn_durable_last: config.lsn_next - 1,
                generation_open: 1,
                generation_durable: 0,
                poisoned: None,
                rotation_requested: false,
                closing: false,
                flusher_done: false,
                waiters: Vec::new(),
                flusher_waker: None,
                stats: WriterStats::default(),
            }),
        });
        let flusher = run_flusher(shared.clone(), sink, config);
        (WalWriter { shared }, flusher)
    }

    /// Logs one row and returns the future of its durability, which resolves to its LSN.
    /// Rows appended with no `.await` between them land in the same batch, so they become
    /// durable (and are recovered) together.
    pub fn append(&self, kind: RowKind, space_id: u32, body: &[u8]) -> Result<Commit> {
        let mut state = self.shared.state.borrow_mut();
        state.check_accepting()?;
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
            generation,
            lsn,
        })
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

    /// The LSN the next append gets.
    pub fn lsn_next(&self) -> u64 {
        self.shared.state.borrow().lsn_next
    }

    /// The last LSN known to be written (and synced in fsync mode).
    pub fn lsn_durable_last(&self) -> u64 {
        self.shared.state.borrow().lsn_durable_last
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

impl State {
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
}

/// Resolves to the row's LSN once the flush that carries it is written (and synced in fsync
/// mode), or to [`WalError::Poisoned`] if that flush failed.
#[must_use = "a row is acknowledged only once its commit resolves"]
pub struct Commit {
    shared: Rc<Shared>,
    generation: u64,
    lsn: u64,
}

impl Commit {
    pub fn lsn(&self) -> u64 {
        self.lsn
    }
}

impl Future for Commit {
    type Output = Result<u64>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<u64>> {
        let mut state = self.shared.state.borrow_mut();
        if state.generation_durable >= self.generation {
            debug_assert!(state.lsn_durable_last >= self.lsn);
            return Poll::Ready(Ok(self.lsn));
        }
        if state.poisoned.is_some() {
            return Poll::Ready(Err(state.poisoned_error()));
        }
        if state.flusher_done {
            return Poll::Ready(Err(WalError::Closed));
        }
        state.waiters.push(cx.waker().clone());
        Poll::Pending
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

/// Waits for rows, takes them all, writes them; stops after closing or a failure.
async fn run_flusher<S: Sink>(shared: Rc<Shared>, mut sink: S, config: WriterConfig) {
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
        let mut state = shared.state.borrow_mut();
        match result {
            Ok(written) => {
                assert_eq!(state.generation_durable + 1, generation);
                state.generation_durable = generation;
                state.lsn_durable_last = lsn_last;
                state.stats.flushes += 1;
                state.stats.bytes_written += written.bytes;
                state.stats.syncs += u64::from(written.synced);
                state.stats.files_started += u64::from(written.started_file);
                state.wake_waiters();
            }
            Err(error) => {
                tracing::error!(
                    shard = config.shard_id,
                    lsn_first,
                    %error,
                    "WAL write failed; the writer refuses all writes until restart"
                );
                state.poisoned = Some(error.to_string());
                state.wake_waiters();
                break;
            }
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
}

/// Ends the open file of a writer closed without error with a clean-close mark
/// (`docs/format.md`), after syncing it, so that recovery reads damage in it as corruption
/// rather than as a torn write. A failed writer leaves its file unmarked.
async fn seal_on_clean_close<S: Sink>(
    shared: &Shared,
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

fn take_flush(shared: &Shared, cx: &mut Context<'_>) -> Poll<Option<Flush>> {
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
}

struct Written {
    bytes: u64,
    synced: bool,
    started_file: bool,
}

async fn write_flush<S: Sink>(
    sink: &mut S,
    config: &WriterConfig,
    file: &mut FileProgress,
    start_file: bool,
    lsn_first: u64,
    flush_bytes: Vec<u8>,
) -> io::Result<Written> {
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
        sink.start_file(lsn_first).await?;
        file.open = true;
        file.size_bytes = 0;
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
    sink.append(bytes).await?;
    file.size_bytes += size_bytes;
    if config.fsync {
        sink.sync_data().await?;
    }
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
    position_bytes: u64,
}

impl GlommioSink {
    /// The directory must exist (recovery creates it).
    pub fn new(dir: impl Into<PathBuf>) -> GlommioSink {
        GlommioSink {
            dir: dir.into(),
            file: None,
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
        if let Some(file) = self.file.take() {
            file.close().await?;
        }
        Ok(())
    }
}
