//! The in-process driver: tarn's shards run in this process and the load is fed to them as
//! IPROTO packets through [`Session`], with no sockets.
//!
//! [`start_cores`] starts `--smp` pinned executors, one shard each. On every core one task:
//!
//! 1. checks that the placement this driver computes (`shard_of_key` over the key's 8
//!    big-endian bytes) is the one the server computes from the space's key definition;
//! 2. populates the keys of `0..--partitions` that its shard owns (REPLACE, locally);
//! 3. encodes, once, the request packet of every key it will draw (see [`Packets`]), so
//!    the measured loop only draws an index and hands bytes to the session;
//! 4. waits for the sampler, then runs rounds until stopped or out of budget.
//!
//! "`--concurrency C` in flight" is one [`Session`] per core pipelining C packets: `submit`
//! each (with its lookup fetched a few packets ahead, `LookupPipeline`), then one `finish`,
//! exactly what a server connection does with a read buffer holding C requests
//! (`server::connection`). Local requests are answered during `submit`; requests
//! for other cores travel in one batch per peer per round and `finish` waits for all their
//! replies at once; with a WAL, the round's writes share one WAL write (and fsync). The next
//! round starts when the whole round is answered, so between C and 0 are in flight.
//! (C sessions of one request each would pay a task wake-up per remote request instead.)
//!
//! Operations: get is SELECT EQ limit 1, `--write` REPLACE, `--update` `+ 1` on bucket_id,
//! `--select-range L` SELECT GE limit L (with more than one shard every core scans: a
//! fan-out), `--select-secondary L` SELECT GE limit L on `customers`' 5-part non-unique
//! index (a fan-out too; `customers` rows are populated instead of `kv` keys), `--delete` a DELETE followed in the same round by the REPLACE that puts the key
//! back, so the space never drains; only the DELETE counts as an operation, so delete's
//! per-op figures include one replace.
//!
//! `--shard-aware true` (the default): each core draws only keys its own shard owns, so
//! every request is local. `false`: each core draws from all keys, so with N shards
//! (N - 1)/N of requests hop to another core. `--query-single-key` uses key 0, or with
//! `--shard-aware true` each core's smallest owned key.
//!
//! Latency: every operation of a round is recorded with the round's time, from its first
//! `submit` to the end of its `finish`.
//!
//! Counters: operations and errors are counted per round; tasks are glommio's
//! `executor_stats().tasks_executed()` (every task run on the core: this one, the mesh
//! receive loops, the flusher, WAL waits), read once per round. Each core also reports how
//! many requests and batches it sent to other cores (`Core::stats`).
//!
//! Memory: the packet table holds one packet per drawn key (about 30 bytes for a get,
//! 50 for a replace): 10,000 keys are ~0.5 MB per core; 10^7 keys would be ~0.5 GB.

use std::cell::Cell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tarn::msgpack::{write_array_len, write_uint};
use tarn::placement::shard_of_key;
use tarn::protocol::client::{decode_reply, split_server_frame};
use tarn::protocol::frame::split_frame;
use tarn::server::mesh::core::{Core, MeshStats};
use tarn::server::session::Session;
use tarn::server::start_cores;
use tarn::storage::key::SearchKeyBuf;
use tarn::storage::prefetch::prefetch_slice;

use crate::cli::{Budget, LoadConfig, Operation, IN_PROCESS_WAL_DEFAULT};
use crate::connect::describe;
use crate::driver::{Driver, DriverError, LoadProgress, MeshReport, Outcome, Scope};
use crate::histogram::Histogram;
use crate::workload::{encode_operation, encode_populate, KeyGenerator, KV_SPACE_ID};
use tarn::config::WalMode;

/// Requests per round while populating, whatever --concurrency says.
const POPULATE_ROUND: usize = 256;

/// Everything a core needs to know, shared by the cores.
#[derive(Debug, Clone)]
struct InProcessRunPlan {
    shards: usize,
    operation: Operation,
    concurrency: usize,
    operations_per_shard: Option<u64>,
    partitions: u64,
    seed: u64,
    single_key: bool,
    shard_aware: bool,
    wal: WalMode,
    idle_poll_us: Option<u64>,
}

pub struct InProcess {
    plan: InProcessRunPlan,
}

impl InProcess {
    pub fn new(config: &LoadConfig) -> InProcess {
        let args = &config.args;
        InProcess {
            plan: InProcessRunPlan {
                shards: config.smp,
                operation: config.operation,
                concurrency: args.concurrency,
                operations_per_shard: match config.budget {
                    Budget::OperationsPerShard(n) => Some(n),
                    Budget::Duration(_) => None,
                },
                partitions: args.partitions,
                seed: config.seed,
                single_key: args.query_single_key,
                shard_aware: args.shard_aware.unwrap_or(true),
                wal: args.wal.unwrap_or(IN_PROCESS_WAL_DEFAULT),
                idle_poll_us: args.idle_poll_us,
            },
        }
    }
}

/// What one core hands back.
struct CoreOutcome {
    latency_ns: Histogram,
    /// Cross-core traffic of this core during the measured rounds.
    mesh: MeshStats,
}

impl Driver for InProcess {
    fn workers(&self) -> usize {
        self.plan.shards
    }

    fn scope(&self) -> Scope {
        Scope::Process
    }

    fn run(self: Box<Self>, progress: Arc<LoadProgress>) -> Result<Outcome, DriverError> {
        let plan = Arc::new(self.plan);
        let data_dir = TemporaryDataDir::create()?;
        let mut config = tarn::config::Config::from_toml_str(tarn::config::SHIPPED_CONFIG_TOML)
            .map_err(|e| DriverError::Setup(format!("shipped config: {e}")))?;
        config.data_dir = data_dir.path.clone();
        config.durability.wal_mode = plan.wal;
        if let Some(idle_poll_us) = plan.idle_poll_us {
            config.idle_poll = std::time::Duration::from_micros(idle_poll_us);
        }
        let outputs = {
            let (plan, progress) = (plan.clone(), progress.clone());
            start_cores(config, plan.shards, move |core| {
                let (plan, progress) = (plan.clone(), progress.clone());
                async move {
                    let result = core_main(core, &plan, &progress).await;
                    if result.is_err() {
                        progress.stop();
                    }
                    progress.worker_done();
                    result
                }
            })
        };
        let outputs = outputs.map_err(|e| {
            progress.stop();
            DriverError::Setup(format!("starting the shards: {e}"))
        })?;
        let mut latency_ns = Histogram::default();
        let mut mesh = MeshStats::default();
        for output in outputs {
            let core = output?;
            latency_ns.merge(&core.latency_ns);
            mesh = add_mesh(mesh, core.mesh);
        }
        let operations = progress.totals().operations;
        Ok(Outcome {
            latency_ns: Some(latency_ns),
            populated_keys: plan.partitions,
            mesh: Some(MeshReport {
                stats: mesh,
                operations,
            }),
        })
    }
}

fn add_mesh(a: MeshStats, b: MeshStats) -> MeshStats {
    MeshStats {
        requests_sent: a.requests_sent + b.requests_sent,
        request_batches_sent: a.request_batches_sent + b.request_batches_sent,
        request_batches_served: a.request_batches_served + b.request_batches_served,
        flusher_runs: a.flusher_runs + b.flusher_runs,
        backlogged: a.backlogged + b.backlogged,
    }
}

fn mesh_since(now: MeshStats, then: MeshStats) -> MeshStats {
    MeshStats {
        requests_sent: now.requests_sent - then.requests_sent,
        request_batches_sent: now.request_batches_sent - then.request_batches_sent,
        request_batches_served: now.request_batches_served - then.request_batches_served,
        flusher_runs: now.flusher_runs - then.flusher_runs,
        backlogged: now.backlogged - then.backlogged,
    }
}

/// A fresh data directory for the run's WAL and schema record, removed at the end.
struct TemporaryDataDir {
    path: PathBuf,
}

impl TemporaryDataDir {
    fn create() -> Result<TemporaryDataDir, DriverError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let name = format!("perf-simple-query-{}-{nanos}", std::process::id());
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir(&path)
            .map_err(|e| DriverError::Setup(format!("data dir {}: {e}", path.display())))?;
        Ok(TemporaryDataDir { path })
    }
}

impl Drop for TemporaryDataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Request packets (without size prefix) stored back to back, one per key, by index.
#[derive(Default)]
struct Packets {
    bytes: Vec<u8>,
    /// `ends[i]` is where packet `i` ends; it starts where packet `i - 1` ended.
    ends: Vec<usize>,
}

impl Packets {
    fn encode(operation: Operation, seed: u64, keys: &[u64]) -> Packets {
        let mut packets = Packets::default();
        let (mut framed, mut scratch) = (Vec::new(), Vec::new());
        for &key in keys {
            framed.clear();
            encode_operation(&mut framed, &mut scratch, operation, seed, key, key);
            let (packet, used) = split_frame(&framed)
                .expect("a request this tool encoded frames")
                .expect("a whole packet");
            assert_eq!(used, framed.len());
            packets.bytes.extend_from_slice(packet);
            packets.ends.push(packets.bytes.len());
        }
        packets
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn get(&self, index: usize) -> &[u8] {
        let start = if index == 0 { 0 } else { self.ends[index - 1] };
        &self.bytes[start..self.ends[index]]
    }
}

/// The encoded primary key of `key`, as placement hashes it: its 8 big-endian bytes.
fn placement_of(key: u64, shards: usize) -> usize {
    shard_of_key(&key.to_be_bytes(), shards)
}

/// Panics unless the server encodes the primary key of `kv` as this driver assumes.
fn assert_key_encoding(core: &Core, keys: &[u64]) {
    let shard = core.shard.borrow();
    let space = shard
        .engine
        .space(KV_SPACE_ID)
        .expect("space kv (512) exists");
    let key_def = &space.indexes()[0].def.key_def;
    for &key in keys {
        let mut search_key = Vec::new();
        write_array_len(&mut search_key, 1);
        write_uint(&mut search_key, key);
        let mut encoded = SearchKeyBuf::new();
        key_def
            .encode_search_key(&search_key, &mut encoded)
            .expect("an unsigned key");
        assert_eq!(
            &encoded[..],
            &key.to_be_bytes(),
            "encoded primary key of {key}"
        );
    }
}

/// Keys this core draws during the measurement.
fn drawn_keys(plan: &InProcessRunPlan, owned: &[u64]) -> Result<Vec<u64>, DriverError> {
    match (plan.single_key, plan.shard_aware) {
        (false, true) => Ok(owned.to_vec()),
        (false, false) => Ok((0..plan.partitions).collect()),
        (true, false) => Ok(vec![0]),
        (true, true) => Ok(vec![*owned.first().ok_or_else(no_owned_keys(plan))?]),
    }
    .and_then(|keys| {
        if keys.is_empty() {
            return Err(no_owned_keys(plan)());
        }
        Ok(keys)
    })
}

fn no_owned_keys(plan: &InProcessRunPlan) -> impl Fn() -> DriverError + '_ {
    move || {
        DriverError::Setup(format!(
            "a shard owns none of the {} keys; give more --partitions or --shard-aware false",
            plan.partitions
        ))
    }
}

async fn core_main(
    core: Rc<Core>,
    plan: &InProcessRunPlan,
    progress: &LoadProgress,
) -> Result<CoreOutcome, DriverError> {
    let id = core.id();
    assert_eq!(core.shard_count, plan.shards);
    progress.register_current_thread();
    let owned: Vec<u64> = (0..plan.partitions)
        .filter(|&key| placement_of(key, plan.shards) == id)
        .collect();
    assert_key_encoding(&core, &[0, 1, 255, 256, plan.partitions - 1, u64::MAX]);
    let mut session = Session::new(core.clone());
    let mut out = Vec::with_capacity(64 * 1024);
    populate(&mut session, plan, &owned, &mut out).await?;

    let keys = drawn_keys(plan, &owned)?;
    let packets = Packets::encode(plan.operation, plan.seed, &keys);
    let restores = match plan.operation {
        Operation::Delete => Some(Packets::encode(Operation::Replace, plan.seed, &keys)),
        _ => None,
    };
    drop(keys);
    let draws = KeyGenerator::new(plan.seed, id as u64, packets.len() as u64, false);

    progress.worker_ready();
    // Nothing runs on any core until measuring starts (populating is local), so the
    // executor may block: see `LoadProgress::block_until_released`.
    progress.block_until_released();
    if !progress.is_measuring() {
        return Ok(CoreOutcome {
            latency_ns: Histogram::default(),
            mesh: MeshStats::default(),
        });
    }
    let mut load = Load {
        session,
        out,
        packets,
        restores,
        draws,
        budget: Cell::new(plan.operations_per_shard),
        concurrency: plan.concurrency,
        latency_ns: Histogram::default(),
        round: Vec::with_capacity(2 * plan.concurrency),
    };
    let mesh_before = core.stats();
    load.run(id, progress).await?;
    Ok(CoreOutcome {
        latency_ns: load.latency_ns,
        mesh: mesh_since(core.stats(), mesh_before),
    })
}

/// REPLACEs every key of `owned` (all local) for the plan's operation (see
/// [`encode_populate`]), `POPULATE_ROUND` per round; any error fails.
async fn populate(
    session: &mut Session,
    plan: &InProcessRunPlan,
    owned: &[u64],
    out: &mut Vec<u8>,
) -> Result<(), DriverError> {
    let (mut framed, mut scratch) = (Vec::new(), Vec::new());
    for round in owned.chunks(POPULATE_ROUND) {
        for &key in round {
            framed.clear();
            encode_populate(&mut framed, &mut scratch, plan.operation, plan.seed, key);
            let (packet, _) = split_frame(&framed)
                .expect("a request this tool encoded frames")
                .expect("a whole packet");
            session.submit(packet, out).await;
        }
        session.finish(out).await;
        let mut failure = None;
        let (replies, _) = scan_replies(out, |text| {
            failure.get_or_insert_with(text);
        })?;
        assert_eq!(replies, round.len(), "one reply per populating request");
        out.clear();
        if let Some(text) = failure {
            return Err(DriverError::Setup(format!("populating keys: {text}")));
        }
    }
    Ok(())
}

/// The measured loop of one core.
struct Load {
    session: Session,
    out: Vec<u8>,
    packets: Packets,
    /// With --delete: the REPLACE that restores each key, sent right after its DELETE.
    restores: Option<Packets>,
    draws: KeyGenerator,
    /// Operations this core may still start; `None` = until stopped.
    budget: Cell<Option<u64>>,
    concurrency: usize,
    latency_ns: Histogram,
    /// The packets of the current round, in the order they are submitted.
    round: Vec<RoundPacket>,
}

/// One packet of a round: the operation on key `index`, or the REPLACE restoring it.
#[derive(Debug, Clone, Copy)]
enum RoundPacket {
    Operation(usize),
    Restore(usize),
}

impl Load {
    /// Operations of the next round: up to `concurrency`, fewer at the end of the budget.
    fn claim(&self) -> usize {
        match self.budget.get() {
            None => self.concurrency,
            Some(left) => {
                let take = left.min(self.concurrency as u64);
                self.budget.set(Some(left - take));
                take as usize
            }
        }
    }

    async fn run(&mut self, id: usize, progress: &LoadProgress) -> Result<(), DriverError> {
        let counts = &progress.workers[id];
        // Starts this core's task count from zero (the call takes the counts).
        let _ = glommio::executor().executor_stats();
        loop {
            if progress.should_stop() {
                return Ok(());
            }
            let operations = self.claim();
            if operations == 0 {
                return Ok(());
            }
            let started = Instant::now();
            // The round's packets, as a read buffer would hold them: each DELETE followed
            // by the REPLACE that restores its key. A server finds its packets in the read
            // buffer a socket read just filled, in cache; this tool keeps one packet per key,
            // megabytes at a million keys, so it fetches the round's packets first.
            self.round.clear();
            for _ in 0..operations {
                let index = self.draws.next_key() as usize;
                prefetch_slice(self.packets.get(index));
                self.round.push(RoundPacket::Operation(index));
                if self.restores.is_some() {
                    self.round.push(RoundPacket::Restore(index));
                }
            }
            // As `server::connection` runs a read: lookups fetched a few packets ahead.
            let packet = |at: usize| {
                let restores = self.restores.as_ref();
                self.round.get(at).map(|entry| match *entry {
                    RoundPacket::Operation(index) => self.packets.get(index),
                    RoundPacket::Restore(index) => restores.map_or(&[][..], |r| r.get(index)),
                })
            };
            let mut run = self.session.start_run();
            for at in 0..self.round.len() {
                self.session.prefetch_before(&mut run, at, packet);
                let running = packet(at).expect("a packet of this round");
                if let Some(deferred) = self.session.submit_in(&mut run, at, running, &mut self.out)
                {
                    self.session
                        .run_deferred(running, deferred, &mut self.out)
                        .await;
                }
            }
            self.session.finish(&mut self.out).await;
            let elapsed_ns = started.elapsed().as_nanos() as u64;
            self.latency_ns.record_many(elapsed_ns, operations as u64);
            let (replies, errors) = scan_replies(&self.out, |text| progress.record_error(text))?;
            let expected = operations * if self.restores.is_some() { 2 } else { 1 };
            assert_eq!(replies, expected, "one reply per request");
            self.out.clear();
            let tasks = glommio::executor().executor_stats().tasks_executed();
            counts
                .operations
                .fetch_add(operations as u64, Ordering::Relaxed);
            counts.tasks.fetch_add(tasks, Ordering::Relaxed);
            let arena_allocations = self.session.core().shard.borrow().arena_allocations();
            counts
                .arena_allocations
                .store(arena_allocations, Ordering::Relaxed);
            if errors > 0 {
                counts.errors.fetch_add(errors, Ordering::Relaxed);
            }
            // A round of local requests never waits; let the core's other tasks run.
            glommio::yield_if_needed().await;
        }
    }
}

/// Walks the replies in `out`: returns how many there are and how many are errors, and
/// calls `on_error` with a way to describe each error. An OK reply is recognised from its
/// first three bytes (`{0x00: 0, ...}`, as tarn writes it); anything else is decoded.
fn scan_replies(
    out: &[u8],
    mut on_error: impl FnMut(&dyn Fn() -> String),
) -> Result<(usize, u64), DriverError> {
    let bad = |e: tarn::protocol::ProtocolError| DriverError::Connection(format!("bad reply: {e}"));
    let (mut rest, mut replies, mut errors) = (out, 0usize, 0u64);
    while let Some((packet, used)) = split_server_frame(rest).map_err(bad)? {
        rest = &rest[used..];
        replies += 1;
        if packet.starts_with(&[0x83, 0x00, 0x00]) {
            continue;
        }
        let reply = decode_reply(packet).map_err(bad)?;
        if reply.is_error() {
            errors += 1;
            on_error(&|| describe(&reply));
        }
    }
    assert!(rest.is_empty(), "a partial reply in the session's output");
    Ok((replies, errors))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_are_found_by_index() {
        let packets = Packets::encode(Operation::Get, 1, &[5, 300, 70_000]);
        assert_eq!(packets.len(), 3);
        for (index, key) in [5u64, 300, 70_000].into_iter().enumerate() {
            let (header, request) = tarn::protocol::decode_packet(packets.get(index)).unwrap();
            assert_eq!(header.sync, key);
            let tarn::protocol::Request::Select(select) = request else {
                panic!("not a select");
            };
            let mut expected = Vec::new();
            write_array_len(&mut expected, 1);
            write_uint(&mut expected, key);
            assert_eq!(select.key, &expected[..]);
        }
    }

    #[test]
    fn replies_are_counted_and_errors_found() {
        use tarn::protocol::reply;
        let mut out = Vec::new();
        let mark = reply::begin_data_reply(&mut out, 1, 1, 0);
        reply::finish_packet(&mut out, mark);
        reply::encode_error(
            &mut out,
            2,
            1,
            tarn::protocol::ErrorCode::ER_WAL_IO,
            "Failed to write to disk",
        );
        reply::encode_ok(&mut out, 3, 1);
        let mut texts = Vec::new();
        let (replies, errors) = scan_replies(&out, |text| texts.push(text())).unwrap();
        assert_eq!((replies, errors), (3, 1));
        assert!(texts[0].contains("Failed to write to disk"), "{texts:?}");
    }

    #[test]
    fn drawn_keys_follow_shard_awareness() {
        let plan = InProcessRunPlan {
            shards: 2,
            operation: Operation::Get,
            concurrency: 1,
            operations_per_shard: None,
            partitions: 100,
            seed: 1,
            single_key: false,
            shard_aware: true,
            wal: WalMode::None,
            idle_poll_us: None,
        };
        let owned: Vec<u64> = (0..100).filter(|&k| placement_of(k, 2) == 1).collect();
        assert!(!owned.is_empty() && owned.len() < 100);
        assert_eq!(drawn_keys(&plan, &owned).unwrap(), owned);
        let unaware = InProcessRunPlan {
            shard_aware: false,
            ..plan.clone()
        };
        assert_eq!(drawn_keys(&unaware, &owned).unwrap().len(), 100);
        let single = InProcessRunPlan {
            single_key: true,
            ..plan.clone()
        };
        assert_eq!(drawn_keys(&single, &owned).unwrap(), vec![owned[0]]);
        assert!(drawn_keys(&single, &[]).is_err());
    }
}
