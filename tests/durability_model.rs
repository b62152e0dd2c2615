//! A model-based crash test of the write path, in redb's manner: random requests (IPROTO
//! writes, crud point calls, batches and truncates, and reads) run on a shard whose WAL sits
//! on a disk that fills up, refuses an ordinary write or fails an fsync; the server "crashes"
//! at random quiet moments and recovers from what is on disk.
//!
//! The model is a second shard without a WAL that replays exactly what the first one
//! acknowledged. After every step both hold the same tuples in every index and the same
//! quota, so every write the log refused was rolled back, with everything queued behind it;
//! each acknowledged request got the model's reply, byte for byte; and after every crash the
//! shard recovered from disk holds the model's tuples: no acknowledged write lost, no refused
//! write back.
//!
//! A step runs its requests the way a connection's read does (all submitted, then their
//! commits awaited), optionally as two groups with a yield between, so that the second
//! group's rows queue behind a flush that is already on the disk. Requests of a step after
//! its first refused one are not replayed: until the rollback they saw writes that never
//! happened, as Tarantool's readers do (dirty reads), and all their writes were refused.

use futures_lite::future::yield_now;
use proptest::prelude::*;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use tarn::config::{Config, SHIPPED_CONFIG_TOML};
use tarn::crud::plan_and_run;
use tarn::crud::CrudConfig;
use tarn::msgpack::{write_array_len, write_map_len, write_str, write_uint};
use tarn::protocol::client::decode_reply;
use tarn::protocol::request::{Delete, Insert, Request, Select, Update, Upsert};
use tarn::protocol::ErrorCode;
use tarn::server::durability::take_snapshot;
use tarn::server::recovering::Recovering;
use tarn::server::schema::build_engine;
use tarn::shard::{Executed, Shard};
use tarn::storage::Engine;
use tarn::wal::{recover, GlommioSink, RecoveryConfig, Sink, WalWriter, WriterConfig};

const KV: u32 = 512;
const CUSTOMERS: u32 = 513;
const FINGERPRINT: u64 = 0xfeed;
/// Small, so that some writes are refused for memory too: the system spaces' rows take
/// about 95 KiB (a 4 KiB sub-page for each of their 22 sizes, and index nodes), which
/// leaves 160 KiB for the data: each size of kv tuple takes a sub-page of its own, and
/// there are some seventy, so the quota runs out once about forty are in use.
const MEMORY_BYTES: u64 = 256 * 1024;
const SCHEMA_VERSION: u64 = 1;

/// The disk under the WAL: a byte budget (what still fits), and faults planned for the
/// next call of a kind.
#[derive(Default)]
struct Disk {
    room_bytes: Cell<u64>,
    faults: RefCell<VecDeque<Fault>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The next append fails with EIO: the writer stops.
    WriteEio,
    /// The next fdatasync fails: the writer stops.
    SyncEio,
}

/// The real sink, on a disk that fills: an append larger than the room left writes what
/// fits, as a full file system does, then fails with ENOSPC.
struct FillingSink {
    inner: GlommioSink,
    disk: Rc<Disk>,
}

impl FillingSink {
    fn take_fault(&self, fault: Fault) -> bool {
        let mut faults = self.disk.faults.borrow_mut();
        let planned = faults.front() == Some(&fault);
        if planned {
            faults.pop_front();
        }
        planned
    }
}

fn full() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOSPC)
}

impl Sink for FillingSink {
    async fn start_file(&mut self, lsn_first: u64) -> io::Result<()> {
        if self.disk.room_bytes.get() < 64 {
            return Err(full());
        }
        self.inner.start_file(lsn_first).await
    }

    async fn append(&mut self, bytes: Vec<u8>) -> io::Result<()> {
        if self.take_fault(Fault::WriteEio) {
            return Err(io::Error::other("injected EIO"));
        }
        let room = self.disk.room_bytes.get();
        if bytes.len() as u64 > room {
            self.disk.room_bytes.set(0);
            if room > 0 {
                self.inner.append(bytes[..room as usize].to_vec()).await?;
            }
            return Err(full());
        }
        self.disk.room_bytes.set(room - bytes.len() as u64);
        self.inner.append(bytes).await
    }

    async fn sync_data(&mut self) -> io::Result<()> {
        if self.take_fault(Fault::SyncEio) {
            return Err(io::Error::other("injected fsync EIO"));
        }
        self.inner.sync_data().await
    }

    async fn close(&mut self) -> io::Result<()> {
        self.inner.close().await
    }

    async fn discard_after(&mut self, lsn_first: u64, keep_bytes: u64) -> io::Result<()> {
        self.inner.discard_after(lsn_first, keep_bytes).await
    }
}

/// One request of a step.
#[derive(Debug, Clone)]
enum Op {
    Insert(u64, u8),
    Replace(u64, u8),
    Delete(u64),
    /// `value = v` on a kv tuple.
    Update(u64, u8),
    /// Insert `[id, id, v]`, or `value = v`.
    Upsert(u64, u8),
    /// A customers row: a non-unique secondary index over small values.
    Customer(u64, u8, u8),
    DeleteCustomer(u64),
    CrudReplace(u64, u8),
    CrudDelete(u64),
    /// crud.insert_many with rollback_on_error: an existing id rolls the batch back.
    CrudInsertMany(Vec<u64>),
    CrudTruncate,
    SelectAll,
}

#[derive(Debug, Clone)]
enum Step {
    /// Requests submitted together; the second group after a yield, behind the first
    /// group's flush; with `true`, a snapshot taken while their rows are in flight.
    Requests(Vec<Op>, Vec<Op>, bool),
    /// Space is freed on the disk.
    Free(u64),
    Fault(Fault),
    /// The process dies (with no write in flight) and starts again from its files.
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    let id = 0u64..40;
    let value = any::<u8>();
    prop_oneof![
        4 => (id.clone(), value).prop_map(|(i, v)| Op::Insert(i, v)),
        6 => (id.clone(), value).prop_map(|(i, v)| Op::Replace(i, v)),
        3 => id.clone().prop_map(Op::Delete),
        2 => (id.clone(), value).prop_map(|(i, v)| Op::Update(i, v)),
        2 => (id.clone(), value).prop_map(|(i, v)| Op::Upsert(i, v)),
        3 => (id.clone(), 0u8..3, 0u8..3).prop_map(|(i, a, b)| Op::Customer(i, a, b)),
        1 => id.clone().prop_map(Op::DeleteCustomer),
        2 => (id.clone(), value).prop_map(|(i, v)| Op::CrudReplace(i, v)),
        1 => id.clone().prop_map(Op::CrudDelete),
        1 => proptest::collection::vec(id, 1..4).prop_map(Op::CrudInsertMany),
        1 => Just(Op::CrudTruncate),
        1 => Just(Op::SelectAll),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let ops = || proptest::collection::vec(op(), 0..5);
    prop_oneof![
        12 => (ops(), ops(), proptest::bool::weighted(0.15))
            .prop_map(|(a, b, snapshot)| Step::Requests(a, b, snapshot)),
        2 => (0u64..4096).prop_map(Step::Free),
        1 => Just(Step::Fault(Fault::WriteEio)),
        1 => Just(Step::Fault(Fault::SyncEio)),
        2 => Just(Step::Crash),
    ]
}

fn config() -> Config {
    Config::from_toml_str(SHIPPED_CONFIG_TOML).expect("the shipped config")
}

fn engine(config: &Config) -> Engine {
    build_engine(config, MEMORY_BYTES).expect("schema")
}

fn kv_tuple(id: u64, value: u8) -> Vec<u8> {
    let mut tuple = Vec::new();
    write_array_len(&mut tuple, 3);
    write_uint(&mut tuple, id);
    write_uint(&mut tuple, id);
    // Values long enough to fill the disk and the quota within a few dozen writes.
    write_str(&mut tuple, &vec![b'a' + value % 26; 16 + value as usize]);
    tuple
}

fn key(id: u64) -> Vec<u8> {
    let mut key = Vec::new();
    write_array_len(&mut key, 1);
    write_uint(&mut key, id);
    key
}

fn set_value_ops(value: u8) -> Vec<u8> {
    let mut ops = Vec::new();
    write_array_len(&mut ops, 1);
    write_array_len(&mut ops, 3);
    write_str(&mut ops, b"=");
    write_uint(&mut ops, 3);
    write_str(&mut ops, &vec![b'z'; 1 + value as usize % 40]);
    ops
}

fn customer(id: u64, a: u8, b: u8) -> Vec<u8> {
    let mut tuple = Vec::new();
    write_array_len(&mut tuple, 7);
    for field in [id, id, a.into(), b.into(), 0, 0] {
        write_uint(&mut tuple, field);
    }
    write_str(&mut tuple, b"customer");
    tuple
}

/// The msgpack arguments of a crud call on kv.
fn crud_args(op: &Op) -> (&'static str, Vec<u8>) {
    let mut args = Vec::new();
    let name = match op {
        Op::CrudReplace(id, value) => {
            write_array_len(&mut args, 2);
            write_str(&mut args, b"kv");
            args.extend_from_slice(&kv_tuple(*id, *value));
            "crud.replace"
        }
        Op::CrudDelete(id) => {
            write_array_len(&mut args, 2);
            write_str(&mut args, b"kv");
            write_uint(&mut args, *id);
            "crud.delete"
        }
        Op::CrudInsertMany(ids) => {
            write_array_len(&mut args, 3);
            write_str(&mut args, b"kv");
            write_array_len(&mut args, ids.len() as u32);
            for id in ids {
                args.extend_from_slice(&kv_tuple(*id, 7));
            }
            write_map_len(&mut args, 2);
            write_str(&mut args, b"rollback_on_error");
            args.push(0xc3);
            write_str(&mut args, b"stop_on_error");
            args.push(0xc3);
            "crud.insert_many"
        }
        Op::CrudTruncate => {
            write_array_len(&mut args, 1);
            write_str(&mut args, b"kv");
            "crud.truncate"
        }
        other => unreachable!("not a crud op: {other:?}"),
    };
    (name, args)
}

/// Runs `op` on `shard`, appending its reply to `out`; the commit to await, if it wrote.
fn run_op(shard: &mut Shard, crud: &CrudConfig, sync: u64, op: &Op, out: &mut Vec<u8>) -> Executed {
    let (tuple, key_bytes, ops);
    let request = match op {
        Op::Insert(id, value) => {
            tuple = kv_tuple(*id, *value);
            Request::Insert(Insert {
                space_id: KV,
                tuple: &tuple,
            })
        }
        Op::Replace(id, value) => {
            tuple = kv_tuple(*id, *value);
            Request::Replace(Insert {
                space_id: KV,
                tuple: &tuple,
            })
        }
        Op::Delete(id) => {
            key_bytes = key(*id);
            Request::Delete(Delete {
                space_id: KV,
                index_id: 0,
                key: &key_bytes,
            })
        }
        Op::Update(id, value) => {
            (key_bytes, ops) = (key(*id), set_value_ops(*value));
            Request::Update(Update {
                space_id: KV,
                index_id: 0,
                key: &key_bytes,
                ops: &ops,
                index_base: 0,
            })
        }
        Op::Upsert(id, value) => {
            (tuple, ops) = (kv_tuple(*id, *value), set_value_ops(*value));
            Request::Upsert(Upsert {
                space_id: KV,
                index_id: 0,
                tuple: &tuple,
                ops: &ops,
                index_base: 0,
            })
        }
        Op::Customer(id, a, b) => {
            tuple = customer(*id, *a, *b);
            Request::Replace(Insert {
                space_id: CUSTOMERS,
                tuple: &tuple,
            })
        }
        Op::DeleteCustomer(id) => {
            key_bytes = key(*id);
            Request::Delete(Delete {
                space_id: CUSTOMERS,
                index_id: 0,
                key: &key_bytes,
            })
        }
        Op::SelectAll => Request::Select(Select {
            space_id: KV,
            index_id: 0,
            limit: u32::MAX,
            offset: 0,
            iterator: 2,
            key: &[0x90],
            fetch_position: false,
            after_position: None,
            after_tuple: None,
        }),
        crud_op => {
            let (function_name, args) = crud_args(crud_op);
            let ran = plan_and_run(shard, crud, sync, SCHEMA_VERSION, function_name, &args, out);
            return Executed::waiting_for(ran.commit);
        }
    };
    shard.execute(sync, SCHEMA_VERSION, &request, None, out)
}

fn is_log_refusal(reply: &[u8]) -> bool {
    let packet = &reply[5..];
    decode_reply(packet).expect("a reply").error_code() == Some(ErrorCode::ER_WAL_IO)
}

/// Every user space's indexes, as (space id, index id, tuples in index order); and the
/// quota used.
type Contents = (Vec<(u32, u32, Vec<Vec<u8>>)>, Option<u64>);

fn contents(engine: &Engine, with_quota: bool) -> Contents {
    let mut spaces = Vec::new();
    for id in [KV, CUSTOMERS] {
        let space = engine.space(id).expect("space");
        for index in space.indexes() {
            let tuples = index.entries().map(|(_, t)| t.data().to_vec()).collect();
            spaces.push((id, index.def.id, tuples));
        }
    }
    (spaces, with_quota.then(|| engine.quota().used_bytes()))
}

/// The shard under test: its WAL on `disk` in `dir`, its rollback hook wired as the
/// server wires it, and the flusher task (cancelled at a crash).
struct Live {
    shard: Rc<RefCell<Shard>>,
    flusher: glommio::Task<()>,
}

fn start_live(config: &Config, dir: &Path, disk: &Rc<Disk>) -> Live {
    let mut engine = engine(config);
    let recovery = RecoveryConfig {
        dir: dir.to_path_buf(),
        shard_id: 0,
        schema_fingerprint: FINGERPRINT,
        force: false,
        schema_version_committed: 0,
    };
    let recovered = recover(&recovery, &mut Recovering::new(&mut engine)).expect("recovers");
    let sink = FillingSink {
        inner: GlommioSink::new(dir),
        disk: disk.clone(),
    };
    let (wal, flusher) = WalWriter::new(
        sink,
        WriterConfig {
            shard_id: 0,
            schema_fingerprint: FINGERPRINT,
            fsync: true,
            max_file_size_bytes: 8192,
            lsn_next: recovered.lsn_next(),
        },
    );
    let flusher = glommio::spawn_local(flusher);
    let shard = Rc::new(RefCell::new(Shard::new(0, engine, Some(wal.clone()))));
    let weak = Rc::downgrade(&shard);
    wal.on_rollback(move |lsn_durable_last| {
        if let Some(shard) = weak.upgrade() {
            shard.borrow_mut().roll_back_after(lsn_durable_last);
        }
    });
    Live { shard, flusher }
}

/// Runs one step's two groups on the live shard; returns each request's reply, in order,
/// and the outcome of the snapshot taken while their rows were in flight, if asked for.
async fn run_requests(
    live: &Live,
    crud: &CrudConfig,
    groups: [&[Op]; 2],
    snapshot_with: Option<&Config>,
) -> (Vec<Vec<u8>>, Option<Result<(), String>>) {
    let mut waiting = Vec::new();
    let mut sync = 0;
    for (group, ops) in groups.iter().enumerate() {
        if group == 1 {
            // The first group's rows are taken by the flusher and written; the second
            // group's rows queue behind that flush.
            yield_now().await;
        }
        for op in ops.iter() {
            sync += 1;
            let mut reply = Vec::new();
            let commit = {
                let mut shard = live.shard.borrow_mut();
                run_op(&mut shard, crud, sync, op, &mut reply).commit
            };
            waiting.push((reply, commit));
        }
    }
    let replies = async {
        let mut replies = Vec::new();
        for (reply, commit) in waiting {
            match commit {
                Some(commit) => match commit.await {
                    Ok(_) => replies.push(reply),
                    // What the server sends instead; its text is the shard's business.
                    Err(_) => replies.push(refused_reply()),
                },
                None => replies.push(reply),
            }
        }
        replies
    };
    let Some(config) = snapshot_with else {
        return (replies.await, None);
    };
    // The snapshot is polled first: it copies the shard with these rows still in flight.
    let shared = tarn::server::Shared::new(config.clone(), 1, FINGERPRINT);
    let snapshot = take_snapshot(&live.shard, &shared, (0, 0));
    let (snapshot, replies) = futures_lite::future::zip(snapshot, replies).await;
    (replies, Some(snapshot))
}

fn refused_reply() -> Vec<u8> {
    let mut out = Vec::new();
    tarn::protocol::reply::encode_error(
        &mut out,
        0,
        SCHEMA_VERSION,
        ErrorCode::ER_WAL_IO,
        "Failed to write to disk",
    );
    out
}

fn temporary_dir() -> tempfile::TempDir {
    // tmpfs where there is one: fsync is free there, and a thousand cases run in seconds.
    match Path::new("/dev/shm").is_dir() {
        true => tempfile::tempdir_in("/dev/shm").expect("temp dir"),
        false => tempfile::tempdir().expect("temp dir"),
    }
}

fn run_case(room_bytes: u64, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let dir = temporary_dir();
    let dir_path: PathBuf = dir.path().to_path_buf();
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .io_memory(1 << 20)
        .make()
        .expect("executor")
        .run(async move { run_steps(&dir_path, room_bytes, steps).await })
}

async fn run_steps(
    data_dir: &Path,
    room_bytes: u64,
    steps: Vec<Step>,
) -> Result<(), TestCaseError> {
    let mut config = config();
    config.data_dir = data_dir.to_path_buf();
    let shard_dir = tarn::wal::dir::shard_dir(data_dir, 0);
    std::fs::create_dir_all(&shard_dir).expect("shard dir");
    let dir = shard_dir.as_path();
    let crud = CrudConfig::new(&config, &uuid::Uuid::nil());
    let disk = Rc::new(Disk::default());
    disk.room_bytes.set(room_bytes);
    let mut live = start_live(&config, dir, &disk);
    let mut model = Shard::new(0, engine(&config), None);
    let mut refused_since_start = false;
    for (at, step) in steps.iter().enumerate() {
        match step {
            Step::Requests(first, second, snapshot) => {
                let flushes = || {
                    live.shard
                        .borrow()
                        .wal
                        .as_ref()
                        .map(|wal| wal.stats().flushes)
                };
                let flushes_before = flushes();
                let with = snapshot.then_some(&config);
                let (replies, snapshot) = run_requests(&live, &crud, [first, second], with).await;
                match snapshot {
                    Some(Ok(())) => count(|c| &c.snapshots_written, 1),
                    Some(Err(reason)) if reason.contains("refused by the WAL") => {
                        count(|c| &c.snapshots_not_written, 1)
                    }
                    Some(Err(reason)) if reason.contains("refuses writes since an I/O error") => {
                        count(|c| &c.snapshots_refused_while_stopped, 1)
                    }
                    Some(Err(reason)) => prop_assert!(false, "step {}: snapshot: {}", at, reason),
                    None => {}
                }
                let refused = replies.iter().filter(|reply| is_log_refusal(reply)).count();
                count(|c| &c.refused, refused as u64);
                let refused_first = replies[..first.len()].iter().any(|r| is_log_refusal(r));
                let refused_second = replies[first.len()..].iter().any(|r| is_log_refusal(r));
                if refused_first && refused_second {
                    count(|c| &c.refused_behind_a_flush, 1);
                }
                if refused_since_start && flushes() > flushes_before {
                    count(|c| &c.resumed, 1);
                }
                refused_since_start |= refused > 0;
                let ops = first.iter().chain(second);
                // The model replays what was acknowledged, up to the first refusal.
                for (sync, (op, reply)) in ops.zip(&replies).enumerate() {
                    if is_log_refusal(reply) {
                        break;
                    }
                    let mut expected = Vec::new();
                    // The model has no WAL: nothing to wait for.
                    let _executed = run_op(&mut model, &crud, sync as u64 + 1, op, &mut expected);
                    prop_assert_eq!(reply, &expected, "step {}: reply to {:?}", at, op);
                }
            }
            Step::Free(bytes) => disk.room_bytes.set(disk.room_bytes.get() + bytes),
            Step::Fault(fault) => disk.faults.borrow_mut().push_back(*fault),
            Step::Crash => {
                let Live { shard, flusher } = live;
                flusher.cancel().await;
                drop(shard);
                let mut recovered = engine(&config);
                let recovery = RecoveryConfig {
                    dir: dir.to_path_buf(),
                    shard_id: 0,
                    schema_fingerprint: FINGERPRINT,
                    force: false,
                    schema_version_committed: 0,
                };
                recover(&recovery, &mut Recovering::new(&mut recovered))
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(
                    contents(&recovered, false),
                    contents(&model.engine, false),
                    "step {}: recovered after a crash",
                    at
                );
                if recovered.space(KV).is_ok_and(|space| !space.is_empty()) {
                    count(|c| &c.recovered_crashes, 1);
                }
                disk.faults.borrow_mut().clear();
                refused_since_start = false;
                live = start_live(&config, dir, &disk);
                continue;
            }
        }
        // The quota counts what each shard holds, and a logging shard holds the tuples of
        // its last writes a little longer (undo records, the retired ring): let both go.
        live.shard.borrow_mut().release_settled_writes();
        model.release_settled_writes();
        let shard = live.shard.borrow();
        prop_assert_eq!(
            contents(&shard.engine, true),
            contents(&model.engine, true),
            "step {}: live and model differ after {:?}",
            at,
            step
        );
    }
    live.flusher.cancel().await;
    Ok(())
}

/// What the cases exercised, summed over all of them: a run that never refused a queued
/// row or recovered a crash would prove nothing, so the test checks that it did.
#[derive(Debug, Default)]
struct Coverage {
    /// Requests refused by the log.
    refused: Cell<u64>,
    /// Steps where the second group was refused along with the first group's flush.
    refused_behind_a_flush: Cell<u64>,
    /// Steps that made rows durable after a refusal, with no restart in between.
    resumed: Cell<u64>,
    /// Crashes that recovered tuples.
    recovered_crashes: Cell<u64>,
    /// Snapshots taken while rows were in flight: written, and not written because some
    /// of those rows were refused.
    snapshots_written: Cell<u64>,
    snapshots_not_written: Cell<u64>,
    /// Snapshots asked for while the log was stopped (after EIO or a failed fsync).
    snapshots_refused_while_stopped: Cell<u64>,
}

thread_local! {
    static COVERAGE: Coverage = Coverage::default();
}

fn count(field: impl Fn(&Coverage) -> &Cell<u64>, by: u64) {
    COVERAGE.with(|coverage| field(coverage).set(field(coverage).get() + by));
}

#[test]
fn no_acknowledged_write_is_lost_and_no_refused_write_comes_back() {
    let config = ProptestConfig {
        cases: 1000,
        max_shrink_iters: 2000,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let cases = (0u64..6000, proptest::collection::vec(step(), 1..40));
    if let Err(error) = runner.run(&cases, |(room_bytes, steps)| run_case(room_bytes, steps)) {
        panic!("{error}");
    }
    COVERAGE.with(|coverage| {
        eprintln!("what the cases exercised: {coverage:?}");
        assert!(coverage.refused.get() > 1000, "{coverage:?}");
        assert!(coverage.refused_behind_a_flush.get() > 50, "{coverage:?}");
        // Seeds differ run to run: measured 169-254 over six runs of 2026-12-07 (the bound
        // was 200, and failed one run in three).
        assert!(coverage.resumed.get() > 100, "{coverage:?}");
        assert!(coverage.recovered_crashes.get() > 200, "{coverage:?}");
        assert!(coverage.snapshots_written.get() > 200, "{coverage:?}");
        assert!(coverage.snapshots_not_written.get() > 20, "{coverage:?}");
        assert!(
            coverage.snapshots_refused_while_stopped.get() > 20,
            "{coverage:?}"
        );
    });
}

/// Found by the test: a failed fdatasync left the refused row in the file, and the restart
/// replayed it.
#[test]
fn a_row_whose_fsync_failed_does_not_come_back_after_a_crash() {
    let steps = vec![
        Step::Fault(Fault::SyncEio),
        Step::Free(473),
        Step::Requests(vec![], vec![Op::Upsert(0, 0)], false),
        Step::Crash,
    ];
    run_case(0, steps).unwrap();
}

/// Found by the test: a crud batch that rolled itself back (an existing id) on a stopped
/// log undid its first insert before the batch's own undo of it.
#[test]
fn a_refused_batch_that_rolled_itself_back_is_undone_newest_first() {
    let steps = vec![
        Step::Free(920),
        Step::Requests(vec![], vec![Op::CrudInsertMany(vec![28])], false),
        Step::Fault(Fault::WriteEio),
        Step::Requests(vec![Op::CrudInsertMany(vec![0])], vec![], false),
        Step::Requests(vec![Op::CrudInsertMany(vec![0, 28])], vec![], false),
    ];
    run_case(951, steps).unwrap();
}

/// Found by the test: a snapshot rotated the WAL, the new file could not be created (no
/// room), and the writer removed the previous file, durable rows and all.
#[test]
fn a_rotated_file_that_cannot_be_created_loses_no_durable_row() {
    let steps = vec![
        Step::Requests(vec![Op::Insert(0, 166)], vec![], false),
        Step::Requests(
            vec![Op::Insert(1, 14), Op::Upsert(2, 95)],
            vec![
                Op::Customer(0, 0, 0),
                Op::Replace(0, 197),
                Op::Insert(3, 37),
                Op::Replace(0, 144),
            ],
            false,
        ),
        Step::Requests(
            vec![Op::Insert(4, 180), Op::Replace(0, 134)],
            vec![Op::CrudInsertMany(vec![5])],
            true,
        ),
        Step::Crash,
    ];
    run_case(1494, steps).unwrap();
}
