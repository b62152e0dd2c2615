//! The writer when the disk refuses: which rows are refused, what the rollback hook is
//! told, what is left in the files, and when writes resume. A sink in memory stands in for
//! the files, failing the calls a test chooses.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::rc::Rc;

use futures_lite::future::yield_now;

use super::*;
use crate::wal::format::RowKind;
use crate::wal::reader::{ReadMode, WalFile};

const FINGERPRINT: u64 = 0x5eed;

/// What the next calls of a [`MemorySink`] do, in order; a call with nothing queued works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PlannedOutcome {
    Works,
    /// Fails with this error kind, after yielding a few times so that rows are appended
    /// while the flush is "on the disk".
    Fails(io::ErrorKind),
    /// An append that writes its first half, then fails as a full disk does.
    ShortWrite,
}

#[derive(Default)]
struct Disk {
    /// Files by their first LSN.
    files: BTreeMap<u64, Vec<u8>>,
    plan: VecDeque<(&'static str, PlannedOutcome)>,
}

/// Files in memory. Each call takes the first planned outcome for its kind of call.
#[derive(Clone, Default)]
struct MemorySink {
    disk: Rc<RefCell<Disk>>,
    current: Option<u64>,
}

impl MemorySink {
    fn plan(&self, call: &'static str, outcome: PlannedOutcome) {
        self.disk.borrow_mut().plan.push_back((call, outcome));
    }

    async fn outcome(&self, call: &'static str) -> io::Result<PlannedOutcome> {
        let planned = {
            let mut disk = self.disk.borrow_mut();
            match disk.plan.front() {
                Some((kind, outcome)) if *kind == call => {
                    let outcome = *outcome;
                    disk.plan.pop_front();
                    outcome
                }
                _ => PlannedOutcome::Works,
            }
        };
        match planned {
            PlannedOutcome::Fails(kind) => {
                for _ in 0..4 {
                    yield_now().await;
                }
                Err(io::Error::new(kind, format!("injected {call} failure")))
            }
            other => Ok(other),
        }
    }

    fn file_lsns(&self) -> Vec<u64> {
        self.disk.borrow().files.keys().copied().collect()
    }

    /// Every LSN in the files, in file order, read strictly (any damage fails the test).
    fn lsns_on_disk(&self) -> Vec<u64> {
        let disk = self.disk.borrow();
        let mut lsns = Vec::new();
        for (lsn_first, bytes) in &disk.files {
            let file = WalFile::from_bytes(format!("{lsn_first}.wal").into(), bytes.clone())
                .expect("a whole header");
            for batch in file.batches(ReadMode::Strict) {
                lsns.extend(batch.expect("no damage").rows().map(|row| row.lsn));
            }
        }
        lsns
    }
}

impl Sink for MemorySink {
    async fn start_file(&mut self, lsn_first: u64) -> io::Result<()> {
        // Fails before it lets go of the previous file, as a full disk may.
        self.outcome("start_file").await?;
        self.current = Some(lsn_first);
        self.disk.borrow_mut().files.insert(lsn_first, Vec::new());
        Ok(())
    }

    async fn append(&mut self, bytes: Vec<u8>) -> io::Result<()> {
        let outcome = self.outcome("append").await?;
        let current = self.current.ok_or_else(|| io::Error::other("no file"))?;
        let mut disk = self.disk.borrow_mut();
        let file = disk.files.get_mut(&current).expect("an open file");
        if outcome == PlannedOutcome::ShortWrite {
            file.extend_from_slice(&bytes[..bytes.len() / 2]);
            return Err(io::Error::new(io::ErrorKind::WriteZero, "short write"));
        }
        file.extend_from_slice(&bytes);
        Ok(())
    }

    async fn sync_data(&mut self) -> io::Result<()> {
        self.outcome("sync_data").await.map(drop)
    }

    async fn close(&mut self) -> io::Result<()> {
        self.current = None;
        Ok(())
    }

    async fn discard_after(&mut self, lsn_first: u64, keep_bytes: u64) -> io::Result<()> {
        self.current = None;
        let mut disk = self.disk.borrow_mut();
        match keep_bytes {
            0 => {
                disk.files.remove(&lsn_first);
            }
            keep => disk
                .files
                .get_mut(&lsn_first)
                .expect("the file written to")
                .truncate(keep as usize),
        }
        Ok(())
    }
}

fn config(fsync: bool) -> WriterConfig {
    WriterConfig {
        shard_id: 0,
        schema_fingerprint: FINGERPRINT,
        fsync,
        max_file_size_bytes: 1 << 20,
        lsn_next: 1,
    }
}

fn row(key: u8) -> Vec<u8> {
    vec![0x92, key & 0x7f, 1]
}

fn run<T>(future: impl Future<Output = T>) -> T {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .io_memory(1 << 20)
        .make()
        .expect("executor")
        .run(future)
}

/// Starts a writer on `sink` whose rollback hook records what it is told.
fn writer_recording_rollbacks(
    sink: &MemorySink,
    fsync: bool,
) -> (WalWriter, Rc<RefCell<Vec<u64>>>) {
    let writer = WalWriter::start(sink.clone(), config(fsync));
    let rollbacks = Rc::new(RefCell::new(Vec::new()));
    let recorded = rollbacks.clone();
    writer.on_rollback(move |lsn_durable_last| recorded.borrow_mut().push(lsn_durable_last));
    (writer, rollbacks)
}

fn append(writer: &WalWriter, key: u8) -> Commit {
    writer
        .append(RowKind::Replace, 512, &row(key))
        .expect("accepting")
}

async fn outcomes(commits: Vec<Commit>) -> Vec<Result<u64>> {
    let mut outcomes = Vec::new();
    for commit in commits {
        outcomes.push(commit.await);
    }
    outcomes
}

fn refused_after(outcome: &Result<u64>, lsn: u64) -> bool {
    matches!(outcome, Err(WalError::WriteFailed { lsn_durable_last, .. }) if *lsn_durable_last == lsn)
}

#[test]
fn out_of_space_refuses_the_flush_and_every_row_behind_it_then_writes_resume() {
    let sink = MemorySink::default();
    let observed = sink.clone();
    let (outcomes, later, rollbacks, stats) = run(async move {
        let (writer, rollbacks) = writer_recording_rollbacks(&sink, false);
        append(&writer, 1).await.expect("durable");
        sink.plan("append", PlannedOutcome::Fails(io::ErrorKind::StorageFull));
        let mut commits: Vec<Commit> = (2..=10).map(|k| append(&writer, k)).collect();
        // The flusher takes rows 2..=10 and its write "runs"; rows 11..=20 queue behind.
        yield_now().await;
        commits.extend((11..=20).map(|k| append(&writer, k)));
        let outcomes = outcomes(commits).await;
        let later = outcomes_of([append(&writer, 21), append(&writer, 22)]).await;
        writer.close().await.expect("closes");
        (outcomes, later, rollbacks, writer.stats())
    });
    assert_eq!(outcomes.len(), 19);
    assert!(outcomes.iter().all(|o| refused_after(o, 1)), "{outcomes:?}");
    assert_eq!(rollbacks.borrow().as_slice(), [1]);
    // The LSNs of the refused rows are handed back: the next rows follow LSN 1.
    assert_eq!(later, [2, 3]);
    assert_eq!((stats.flushes_failed, stats.rows_refused), (1, 19));
    // The failed bytes are gone; the next flush began a file of its own.
    assert_eq!(observed.file_lsns(), [1, 2]);
    assert_eq!(observed.lsns_on_disk(), [1, 2, 3]);
}

async fn outcomes_of(commits: [Commit; 2]) -> Vec<u64> {
    let mut lsns = Vec::new();
    for commit in commits {
        lsns.push(commit.await.expect("durable"));
    }
    lsns
}

#[test]
fn a_short_write_is_cut_off_the_file_it_went_into() {
    let sink = MemorySink::default();
    let observed = sink.clone();
    let (refused, resumed) = run(async move {
        let (writer, _) = writer_recording_rollbacks(&sink, true);
        append(&writer, 1).await.expect("durable");
        append(&writer, 2).await.expect("durable");
        sink.plan("append", PlannedOutcome::ShortWrite);
        let refused = append(&writer, 3).await;
        let resumed = append(&writer, 4).await;
        writer.close().await.expect("closes");
        (refused, resumed)
    });
    assert!(refused_after(&refused, 2), "{refused:?}");
    assert_eq!(resumed.expect("durable"), 3);
    assert_eq!(observed.file_lsns(), [1, 3]);
    assert_eq!(observed.lsns_on_disk(), [1, 2, 3]);
}

#[test]
fn a_file_that_could_not_be_created_is_removed_and_writes_resume() {
    let sink = MemorySink::default();
    let observed = sink.clone();
    let (first, second, resumed, poisoned) = run(async move {
        let (writer, _) = writer_recording_rollbacks(&sink, false);
        // The very first flush creates the first file: out of space, twice.
        sink.plan(
            "start_file",
            PlannedOutcome::Fails(io::ErrorKind::StorageFull),
        );
        let first = append(&writer, 1).await;
        sink.plan(
            "append",
            PlannedOutcome::Fails(io::ErrorKind::QuotaExceeded),
        );
        let second = append(&writer, 1).await;
        let resumed = append(&writer, 1).await;
        let poisoned = writer.poisoned();
        writer.close().await.expect("closes");
        (first, second, resumed, poisoned)
    });
    assert!(refused_after(&first, 0), "{first:?}");
    assert!(refused_after(&second, 0), "{second:?}");
    assert_eq!(resumed.expect("durable"), 1);
    assert_eq!(poisoned, None);
    assert_eq!(observed.lsns_on_disk(), [1]);
}

#[test]
fn a_failed_fsync_poisons_the_writer_even_when_it_says_the_disk_is_full() {
    let sink = MemorySink::default();
    let observed = sink.clone();
    let (outcomes, later, rollbacks, closed, poisoned) = run(async move {
        let (writer, rollbacks) = writer_recording_rollbacks(&sink, true);
        append(&writer, 1).await.expect("durable");
        sink.plan(
            "sync_data",
            PlannedOutcome::Fails(io::ErrorKind::StorageFull),
        );
        let commits: Vec<Commit> = (2..=5).map(|k| append(&writer, k)).collect();
        let outcomes = outcomes(commits).await;
        let later = writer
            .append(RowKind::Replace, 512, &row(6))
            .map(|c| c.lsn());
        let poisoned = writer.poisoned();
        (outcomes, later, rollbacks, writer.close().await, poisoned)
    });
    assert!(
        outcomes.iter().all(|o| matches!(
            o,
            Err(WalError::Poisoned {
                lsn_durable_last: 1,
                ..
            })
        )),
        "{outcomes:?}"
    );
    assert!(matches!(later, Err(WalError::Poisoned { .. })), "{later:?}");
    assert!(poisoned.is_some_and(|cause| cause.contains("fdatasync")));
    assert_eq!(rollbacks.borrow().as_slice(), [1]);
    assert!(closed.is_err());
    // Written but not synced: on the disk, the bytes are there (the kernel may keep them or
    // not); what matters is that nobody was told they were durable.
    assert_eq!(observed.lsns_on_disk()[0], 1);
}

#[test]
fn a_commit_durable_before_a_failure_stays_durable_when_polled_after_it() {
    let sink = MemorySink::default();
    let (early, refused, appended) = run(async move {
        let (writer, _) = writer_recording_rollbacks(&sink, false);
        let early = append(&writer, 1);
        while writer.lsn_durable_last() < 1 {
            yield_now().await;
        }
        sink.plan("append", PlannedOutcome::Fails(io::ErrorKind::StorageFull));
        let covering = writer.commit_appended();
        let refused = append(&writer, 2).await;
        // Another row made durable after the failure: the old epoch's flush still decides.
        append(&writer, 3).await.expect("durable");
        let appended = (covering.await, writer.commit_appended().await);
        (early.await, refused, appended)
    });
    assert_eq!(early.expect("durable"), 1);
    assert!(refused_after(&refused, 1), "{refused:?}");
    // Before the failure everything appended was durable already; after it, so is row 2.
    assert_eq!(appended.0.expect("durable"), 1);
    assert_eq!(appended.1.expect("durable"), 2);
}

#[test]
fn a_commit_of_everything_appended_fails_when_any_of_it_is_refused() {
    let sink = MemorySink::default();
    let outcome = run(async move {
        let (writer, _) = writer_recording_rollbacks(&sink, false);
        append(&writer, 1).await.expect("durable");
        sink.plan("append", PlannedOutcome::Fails(io::ErrorKind::StorageFull));
        let row = append(&writer, 2);
        let covering = writer.commit_appended();
        let _ = row.await;
        covering.await
    });
    assert!(refused_after(&outcome, 1), "{outcome:?}");
}

#[test]
fn any_other_write_error_poisons() {
    let sink = MemorySink::default();
    let (outcome, later) = run(async move {
        let (writer, _) = writer_recording_rollbacks(&sink, false);
        sink.plan("append", PlannedOutcome::Fails(io::ErrorKind::Other));
        let outcome = append(&writer, 1).await;
        let later = writer
            .append(RowKind::Replace, 512, &row(2))
            .map(|c| c.lsn());
        (outcome, later)
    });
    assert!(
        matches!(
            outcome,
            Err(WalError::Poisoned {
                lsn_durable_last: 0,
                ..
            })
        ),
        "{outcome:?}"
    );
    assert!(matches!(later, Err(WalError::Poisoned { .. })));
}

/// Found by `tests/durability_model.rs`: a rotated file that could not be created made the
/// writer remove the previous file, whose rows were durable.
#[test]
fn a_new_file_that_could_not_be_created_leaves_the_previous_one_whole() {
    let sink = MemorySink::default();
    let observed = sink.clone();
    let (refused, resumed) = run(async move {
        let (writer, _) = writer_recording_rollbacks(&sink, false);
        for key in 1..=3 {
            append(&writer, key).await.expect("durable");
        }
        writer.rotate();
        sink.plan(
            "start_file",
            PlannedOutcome::Fails(io::ErrorKind::StorageFull),
        );
        let refused = append(&writer, 4).await;
        let resumed = append(&writer, 4).await;
        writer.close().await.expect("closes");
        (refused, resumed)
    });
    assert!(refused_after(&refused, 3), "{refused:?}");
    assert_eq!(resumed.expect("durable"), 4);
    assert_eq!(observed.file_lsns(), [1, 4]);
    assert_eq!(observed.lsns_on_disk(), [1, 2, 3, 4]);
}

/// A schema row appended, with the fence up from it (as a schema change's switch does).
fn fenced_schema_row(writer: &WalWriter) -> Commit {
    let change = writer
        .append(RowKind::Schema, 512, &[0; 8])
        .expect("accepting");
    writer.fence(change.lsn());
    change
}

#[test]
fn a_fence_holds_the_acknowledgement_of_rows_from_it_on_until_it_is_lifted() {
    let sink = MemorySink::default();
    let (before, held_while_fenced, change, after) = run(async move {
        let (writer, _) = writer_recording_rollbacks(&sink, false);
        let before = append(&writer, 1);
        let change = fenced_schema_row(&writer);
        let after = append(&writer, 3);
        // Everything is durable, but the rows from the fence on are not acknowledged.
        let before = before.await.expect("durable");
        let change = change.ignoring_fence().await.expect("durable");
        while writer.lsn_durable_last() < 3 {
            yield_now().await;
        }
        let mut after = Box::pin(after);
        let held = futures_lite::future::poll_once(&mut after).await.is_none();
        writer.lift_fence();
        let after = after.await.expect("acknowledged once lifted");
        (before, held, change, after)
    });
    assert_eq!((before, change, after), (1, 2, 3));
    assert!(held_while_fenced);
}

#[test]
fn rows_behind_a_fence_fail_when_the_log_refuses_them_or_closes() {
    let sink = MemorySink::default();
    let (refused, closed) = run(async move {
        let (writer, _) = writer_recording_rollbacks(&sink, false);
        append(&writer, 1).await.expect("durable");
        sink.plan("append", PlannedOutcome::Fails(io::ErrorKind::StorageFull));
        let _change = fenced_schema_row(&writer);
        let refused = append(&writer, 3).await;
        // Written after the failure, durable, but behind the fence when the log closes.
        let held = append(&writer, 4);
        while writer.lsn_durable_last() < 2 {
            yield_now().await;
        }
        writer.close().await.expect("closes");
        (refused, held.await)
    });
    assert!(refused_after(&refused, 1), "{refused:?}");
    assert!(matches!(closed, Err(WalError::Closed)), "{closed:?}");
}

#[test]
fn an_abandoned_fence_fails_the_rows_it_holds_and_refuses_new_ones() {
    let sink = MemorySink::default();
    let (before, held, later) = run(async move {
        let (writer, _) = writer_recording_rollbacks(&sink, false);
        let before = append(&writer, 1);
        let change = fenced_schema_row(&writer);
        let held = append(&writer, 3);
        change.ignoring_fence().await.expect("durable");
        writer.abandon_fence("the schema change was given up".into());
        let later = writer.append(RowKind::Replace, 512, &[0x91, 0x01]).err();
        (before.await, held.await, later)
    });
    assert_eq!(before.expect("before the fence: acknowledged"), 1);
    assert!(matches!(held, Err(WalError::Poisoned { .. })), "{held:?}");
    assert!(
        matches!(later, Some(WalError::Poisoned { .. })),
        "{later:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Synchronous rows (the limbo)

fn append_sync(writer: &WalWriter, key: u8) -> Commit {
    let commit = append(writer, key);
    writer.mark_sync(commit.lsn());
    commit
}

async fn until_durable(writer: &WalWriter, lsn: u64) {
    while writer.lsn_durable_last() < lsn {
        yield_now().await;
    }
}

async fn is_held(commit: &mut Pin<Box<Commit>>) -> bool {
    futures_lite::future::poll_once(commit).await.is_none()
}

#[test]
fn a_sync_row_and_every_row_after_it_wait_for_its_confirmation() {
    let sink = MemorySink::default();
    let outcome = run(async move {
        let (writer, _) = writer_recording_rollbacks(&sink, false);
        let before = append(&writer, 1);
        let mut sync = Box::pin(append_sync(&writer, 2));
        let mut after = Box::pin(append(&writer, 3));
        until_durable(&writer, 3).await;
        let before = before.await.expect("durable and before the sync row");
        let held = (is_held(&mut sync).await, is_held(&mut after).await);
        // Durable, but not settled: a write may not forget their undo.
        let settled_while_held = writer.lsn_settled_last();
        assert_eq!(writer.limbo_len(), 1);
        writer.confirm(1);
        let still_held = is_held(&mut sync).await;
        writer.confirm(2);
        let confirmed = (
            sync.await.expect("confirmed"),
            after.await.expect("behind it"),
        );
        (
            before,
            held,
            settled_while_held,
            still_held,
            confirmed,
            writer.lsn_settled_last(),
        )
    });
    let (before, held, settled_while_held, still_held, confirmed, settled) = outcome;
    assert_eq!(before, 1);
    assert_eq!(held, (true, true));
    assert_eq!(settled_while_held, 1);
    assert!(
        still_held,
        "a confirmation short of the sync row releases nothing"
    );
    assert_eq!(confirmed, (2, 3));
    assert_eq!(settled, 3);
}

#[test]
fn a_confirmation_releases_rows_up_to_the_next_pending_sync_row() {
    let sink = MemorySink::default();
    let (first, held, second) = run(async move {
        let (writer, _) = writer_recording_rollbacks(&sink, false);
        let first = append_sync(&writer, 1);
        let mut second = Box::pin(append_sync(&writer, 2));
        let mut third = Box::pin(append(&writer, 3));
        until_durable(&writer, 3).await;
        writer.confirm(1);
        let first = first.await.expect("confirmed");
        let held = is_held(&mut second).await && is_held(&mut third).await;
        assert_eq!(writer.lsn_settled_last(), 1);
        writer.confirm(3);
        (
            first,
            held,
            (second.await.expect("ok"), third.await.expect("ok")),
        )
    });
    assert_eq!((first, held, second), (1, true, (2, 3)));
}

#[test]
fn a_sync_rollback_fails_the_sync_row_and_every_row_after_it_once_finished() {
    let sink = MemorySink::default();
    let (before, during, outcomes, compensation, after) = run(async move {
        let (writer, _) = writer_recording_rollbacks(&sink, false);
        let before = append(&writer, 1);
        let sync = append_sync(&writer, 2);
        let later = append(&writer, 3);
        until_durable(&writer, 3).await;
        let rollback = writer.begin_sync_rollback().expect("a durable pending row");
        assert_eq!(rollback.lsn_first, 2);
        assert_eq!(writer.limbo_len(), 0);
        // The compensating rows, appended in the same step, wait for nothing but the disk.
        let compensation = append(&writer, 3);
        let compensation = compensation.ignoring_fence().await.expect("durable");
        let mut sync = Box::pin(sync);
        let during = is_held(&mut sync).await;
        writer.finish_sync_rollback(rollback);
        let outcomes = outcomes(vec![*Pin::into_inner(sync), later]).await;
        // A write after the rollback is acknowledged as usual.
        let after = append(&writer, 5).await;
        (before.await, during, outcomes, compensation, after)
    });
    assert_eq!(before.expect("before the sync row"), 1);
    assert!(during, "held until the compensating rows are durable");
    assert!(
        matches!(outcomes[0], Err(WalError::SyncQuorumTimeout)),
        "{outcomes:?}"
    );
    assert!(
        matches!(outcomes[1], Err(WalError::SyncRollback)),
        "{outcomes:?}"
    );
    assert_eq!(compensation, 4);
    assert_eq!(after.expect("acknowledged"), 5);
}

#[test]
fn a_rollback_waits_for_its_sync_row_to_be_durable_and_a_refused_sync_row_leaves_the_limbo() {
    let sink = MemorySink::default();
    let (not_yet, refused, pending) = run(async move {
        let (writer, _) = writer_recording_rollbacks(&sink, false);
        append(&writer, 1).await.expect("durable");
        sink.plan("append", PlannedOutcome::Fails(io::ErrorKind::StorageFull));
        let sync = append_sync(&writer, 2);
        let not_yet = writer.begin_sync_rollback().is_none();
        let refused = sync.await;
        (not_yet, refused, writer.limbo_len())
    });
    assert!(not_yet, "not durable yet: no rollback");
    assert!(refused_after(&refused, 1), "{refused:?}");
    assert_eq!(pending, 0);
}
