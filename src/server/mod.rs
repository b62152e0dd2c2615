//! The server: one glommio executor per core, each with its shard, accepting on the one
//! listening socket, and the channel mesh to the others.
//!
//! One socket, bound once without SO_REUSEPORT, so no other process can join the port: a
//! second server on it fails at start with "address in use". It is bound before recovery
//! (to fail early) and listens once every shard has recovered; each core accepts on its own
//! duplicate of it. Connections are balanced over the cores: whichever core the kernel wakes
//! for an accept serves the connection only if no other core serves fewer; else it hands the
//! socket to the core serving the fewest (Seastar's "connection distribution"). (Left to the
//! kernel, SO_REUSEPORT's hash of the client's address split 16 connections over two cores
//! 8 to 8 only one time in five, and a core serving more than its share is the bottleneck.)
//!
//! Shutdown (SIGINT, SIGTERM): every core stops accepting and tells its connections to stop
//! reading ([`connection::CoreConnections::stop_reading`]); each finishes the requests it has
//! read, their WAL writes and hops to other cores included, answers them and closes. Shards
//! keep serving each other until every connection on every core has closed, then close
//! their WALs. A connection that has not finished [`SHUTDOWN_GRACE`] after the signal is cut.
//!
//! Owns executors, listeners, connections, routing, fan-out and merge, sessions and the
//! system spaces. It knows nothing of file formats.
//!
//! * [`connection`]: one client socket: greeting, framing, buffers.
//! * [`session`]: one client's requests, without sockets: admission, routing, fan-out and
//!   merge, reply order. [`decoded`] keeps the packets a run decoded ahead, so each is
//!   decoded once; [`moved_key`] asks another core whether an UPDATE's new key is taken.
//! * [`mesh`]: one core's shard and its batched messages to the other cores, whose replies
//!   land in sessions' inboxes.
//! * [`data_dir`]: the data directory's lock, fingerprint and schema record.
//! * [`durability`]: recovery, the WAL writer, snapshots. [`recovering`]: the engine while it
//!   recovers, following the schema its data was written under (snapshot sections, schema
//!   rows).
//! * [`layout`]: the data directory's shard count and placement, and moving every row when
//!   a start changes them.
//! * [`schema`]: config to storage definitions; the system spaces; definitions as recorded
//!   rows. [`schema_change`]: a changed config's migration of the recorded spaces.
//! * [`users`]: users, authentication, grants.
//! * [`os`]: the heap's set-up and the scheduler's treatment of a shard's thread.
//! * [`metrics`]: each core's counters, what each shard publishes once a second, and the
//!   Prometheus endpoint on a thread of its own (`metrics_listen`, `docs/metrics.md`).
//!
//! In-process use (a benchmark, a test) needs no sockets: [`start_cores`] runs one executor
//! per shard, each with its [`mesh::core::Core`] joined to the mesh, and hands each core to a
//! closure, which feeds packets to a [`session::Session`]:
//!
//! ```no_run
//! # let config = tarn::config::Config::from_toml_str(tarn::config::SHIPPED_CONFIG_TOML).unwrap();
//! use tarn::server::{session::Session, start_cores};
//! let replies_bytes = start_cores(config, 2, |core| async move {
//!     let mut session = Session::new(core);
//!     let (mut packet, mut out) = (Vec::new(), Vec::new());
//!     tarn::protocol::client::encode_ping(&mut packet, 1);
//!     // `packet` without its size prefix: header + body.
//!     let (body, _) = tarn::protocol::frame::split_frame(&packet).unwrap().unwrap();
//!     session.handle_packet(body, &mut out).await;
//!     out.len()
//! })
//! .unwrap();
//! ```
//!
//! Every core's closure must finish before any core stops serving the others, so
//! `start_cores` keeps each core answering its peers until all closures are done.

pub mod connection;
pub mod data_dir;
pub mod ddl;
pub mod decoded;
pub mod durability;
pub mod layout;
mod limits;
pub mod listen;
pub mod mesh;
pub mod metrics;
pub mod moved_key;
#[allow(unsafe_code)]
pub mod os;
pub mod recovering;
pub mod reload;
pub mod replication;
pub mod schema;
pub mod schema_change;
pub mod session;
pub mod users;

use crate::config::Config;
use glommio::{LocalExecutorPoolBuilder, PoolPlacement};
use listen::Listening;
use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The Tarantool version tarn answers as: the 2.11 line, whose clients send IPROTO_ID.
pub const ADVERTISED_VERSION: &str = "2.11.1";

/// How long after SIGINT/SIGTERM connections may take to finish the requests they have
/// read; those still open then are cut.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// After the cut, how long the shutdown waits for the cut connections' tasks to end before
/// it closes the WALs anyway.
const SHUTDOWN_CUT_WAIT: Duration = Duration::from_secs(2);
/// What every core reads; after start-up only its atomics change (the read-only state, the
/// snapshot generations, the connection counts).
pub struct Shared {
    pub config: Config,
    pub users: users::Users,
    pub instance_uuid: uuid::Uuid,
    /// Whether client writes are refused with ER_READONLY (Tarantool's `read_only`):
    /// `config.read_only` at start (or a term recorded newer than this instance's last one
    /// as master); promotion clears it, a newer term heard sets it. Read with one relaxed load per
    /// write ([`Shared::is_read_only`]), so a write admitted just before it changes may still
    /// run.
    read_only: AtomicBool,
    /// The data directory's fingerprint, carried by every WAL file and snapshot.
    pub fingerprint: u64,
    /// The schema version `schema.bin` records as committed: recovery cuts the WAL at a
    /// schema row of a later one (see `docs/ddl.md`).
    pub schema_version: u64,
    /// Snapshots asked for by `box.snapshot()` (a generation count), and per core the
    /// generation it has written; a failure is kept for the caller that waits.
    pub snapshot_requested: AtomicU64,
    pub snapshot_done: Vec<AtomicU64>,
    pub snapshot_failure: Mutex<Option<String>>,
    /// What client connections hold, per core.
    pub net: connection::NetStats,
    /// Per core, the counters the Prometheus endpoint reads (see [`metrics`]).
    pub metrics: metrics::Metrics,
    /// The recorded spaces the config changes: each core recovers them as recorded, then
    /// makes the change (see `schema_change.rs`).
    pub schema_changes: Vec<schema_change::SpaceChange>,
    /// The spaces made or changed over CALL that were recorded: recovery begins with them
    /// (see `data_dir.rs`).
    pub made_spaces: Vec<crate::storage::SpaceDef>,
    /// Schema changes while serving: one at a time, and the record they commit to.
    pub ddl: ddl::Ddl,
    /// Per shard, the last LSN its WAL writer has written (0 without a WAL): how far a
    /// relay may read its files.
    pub wal_written: Vec<Arc<AtomicU64>>,
    /// When the server started (`box.info.uptime`).
    pub started: std::time::Instant,
    /// The master followed and the replicas following, for `box.info`.
    pub replication: replication::status::ReplicationStatus,
    /// The replica set's term as this instance knows it (promotion, fencing).
    pub terms: replication::term::Terms,
    /// `box.ctl.promote()` asked the applier to stop applying; it clears `applying` once
    /// it has (see `replication::promote`).
    pub promotion: replication::promote::PromotionGate,
    /// Whether writes to `is_sync` spaces wait for a quorum now: every shard holds this
    /// switch ([`Shared::update_sync_writes`]).
    pub sync_writes: Arc<AtomicBool>,
}

impl Shared {
    pub fn new(config: Config, shard_count: usize, fingerprint: u64) -> Shared {
        let config_data_dir = config.data_dir.clone();
        Shared {
            users: users::Users::from_config(&config),
            read_only: AtomicBool::new(config.read_only),
            config,
            instance_uuid: uuid::Uuid::new_v4(),
            fingerprint,
            schema_version: 0,
            snapshot_requested: AtomicU64::new(0),
            snapshot_done: (0..shard_count).map(|_| AtomicU64::new(0)).collect(),
            snapshot_failure: Mutex::new(None),
            net: connection::NetStats::new(shard_count),
            metrics: metrics::Metrics::new(shard_count),
            schema_changes: Vec::new(),
            made_spaces: Vec::new(),
            ddl: ddl::Ddl::new(None),
            wal_written: (0..shard_count)
                .map(|_| Arc::new(AtomicU64::new(0)))
                .collect(),
            started: std::time::Instant::now(),
            replication: replication::status::ReplicationStatus::new(shard_count),
            terms: replication::term::Terms::new(
                config_data_dir,
                replication::term::TermRecord::default(),
            ),
            promotion: replication::promote::PromotionGate::default(),
            sync_writes: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl Shared {
    /// Per shard, the last LSN its WAL has written (what a relay may send, what a master's
    /// `box.info.vclock` shows).
    pub fn wal_written_vclock(&self) -> crate::protocol::replication::Vclock {
        let lsns = self.wal_written.iter();
        lsns.map(|lsn| Some(lsn.load(Ordering::Acquire))).collect()
    }

    /// Whether client writes are refused (see the field `read_only`).
    #[inline(always)]
    pub fn is_read_only(&self) -> bool {
        self.read_only.load(Ordering::Relaxed)
    }

    /// Makes the instance read-only or writable for the writes admitted from now on (a
    /// promotion clears it); `box.info.ro` answers it.
    pub fn set_read_only(&self, read_only: bool) {
        self.read_only.store(read_only, Ordering::Relaxed);
    }

    /// Whether this instance is the writable master of the newest term it knows (by its
    /// config, or promoted): its applier, if it has an upstream, only watches the term.
    pub fn leads_term(&self) -> bool {
        !self.is_read_only() && self.terms.is_leading()
    }

    /// Sets whether writes to `is_sync` spaces wait for a quorum: on the master of the
    /// current term only, when the config asks for a quorum (see `replication::synchro`).
    pub fn update_sync_writes(&self) {
        let holds = replication::synchro::may_hold_sync_writes(&self.config) && self.leads_term();
        self.sync_writes.store(holds, Ordering::Relaxed);
    }

    /// Records a term heard from `peer`; if it is newer than this instance's, the instance
    /// stops accepting writes (fencing: another instance leads that term). An error to
    /// record it fences too: a term heard and forgotten could let two masters write.
    pub fn observe_term(&self, term: u64, peer: &str) {
        let was_read_only = self.is_read_only();
        match self.terms.observe(term) {
            Ok(false) => return,
            Ok(true) => {}
            Err(error) => tracing::error!(%error, term, %peer, "cannot record a newer term"),
        }
        self.set_read_only(true);
        self.update_sync_writes();
        match was_read_only {
            true => tracing::info!(term, %peer, "replication: a newer term"),
            false => tracing::warn!(term, %peer,
                "replication: another instance leads a newer term; this one no longer accepts \
                 writes (read-only)"),
        }
    }

    /// [`Shared::new`] with what `data_dir` recorded: its schema version, the spaces made
    /// over CALL, the config's changes to plan.
    fn with_data_dir(
        config: Config,
        shard_count: usize,
        data_dir: &data_dir::DataDir,
    ) -> Result<Shared, ServerError> {
        let mut shared = Shared::new(config, shard_count, data_dir.fingerprint());
        shared.schema_changes = data_dir.schema_changes().to_vec();
        shared.schema_version = data_dir.schema_version();
        shared.made_spaces = data_dir.made_spaces()?;
        shared.ddl = ddl::Ddl::new(Some(data_dir.schema_record()));
        shared.take_term()?;
        shared.update_sync_writes();
        Ok(shared)
    }
}

impl Shared {
    /// Reads the term recorded in the data directory. A master by its config (writable,
    /// following no one) leads the current term, unless it heard of a newer one (then it
    /// starts read-only: fenced); a master has no position of another (its own writes
    /// follow it). An instance with an upstream follows it after a restart, promoted
    /// before or not: its config says so.
    fn take_term(&mut self) -> Result<(), ServerError> {
        let data_dir = self.config.data_dir.clone();
        let failed = |reason: String| ServerError::DataDir {
            path: data_dir.clone(),
            reason,
        };
        let record = replication::term::TermRecord::read(&data_dir)
            .map_err(|error| failed(error.to_string()))?;
        self.terms = replication::term::Terms::new(data_dir.clone(), record);
        if self.config.read_only {
            return Ok(());
        }
        if record.is_fenced() {
            tracing::warn!(
                term = record.term,
                led = record.led,
                "this instance was the master of an older term and another leads a newer one: \
                 it starts read-only, whatever read_only says (docs/replication.md)"
            );
            self.set_read_only(true);
            return Ok(());
        }
        // A writable instance that follows a master (Tarantool allows it) leads no term
        // until it is promoted.
        if !self.config.replication.is_empty() {
            return Ok(());
        }
        self.terms
            .lead(false)
            .map_err(|error| failed(error.to_string()))?;
        replication::promote::forget_position(&data_dir).map_err(|error| failed(error.to_string()))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot start executors: {0}")]
    Executors(String),
    #[error(
        "cannot listen on {address}: address in use (another process listens on it; stop it \
         or change `listen`)"
    )]
    AddressInUse { address: SocketAddr },
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error(
        "cannot serve metrics on {address}: address in use (another process listens on it; \
         stop it or change `metrics_listen`)"
    )]
    MetricsAddressInUse { address: SocketAddr },
    #[error("cannot serve metrics on {address}: {source}")]
    MetricsListen {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("schema: {0}")]
    Schema(#[from] crate::storage::StorageError),
    #[error("signal handler: {0}")]
    Signal(std::io::Error),
    #[error("data directory {path}: {reason}")]
    DataDir {
        path: std::path::PathBuf,
        reason: String,
    },
    #[error("data directory layout: {0}")]
    Layout(#[from] layout::LayoutError),
    #[error(
        "data_dir {} is in use by {owner}: stop that server first, or give this one another \
         data_dir",
        path.display()
    )]
    DataDirInUse {
        path: std::path::PathBuf,
        /// "pid N", as the owner wrote it into the lock file.
        owner: String,
    },
    #[error(
        "memory {memory_bytes} over {shard_count} shards is {per_shard} bytes a shard, more \
         than the {max} bytes of tuple pages a shard can hold: lower `memory` or raise `shards`"
    )]
    MemoryPerShard {
        memory_bytes: u64,
        shard_count: usize,
        per_shard: u64,
        max: u64,
    },
    #[error("another shard failed to start")]
    PeerFailed,
    #[error(
        "shard {shard_id}: the config changes {change}, which its data does not allow: \
         {reason}. Nothing was changed on disk: start with the recorded definition of the \
         space, or change the data first"
    )]
    SchemaChange {
        shard_id: usize,
        /// The space and what the config changes in it.
        change: String,
        reason: String,
    },
    #[error("recovery of shard {shard_id} failed: {reason}{hint}")]
    Recovery {
        shard_id: usize,
        reason: String,
        /// What to do about it, when `reason` does not say.
        hint: &'static str,
    },
}

pub fn shard_count_for(config: &Config) -> usize {
    match config.shard_count {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n as usize,
    }
}

/// Starts `shard_count` pinned executors, each with its shard and its [`mesh::core::Core`] joined
/// to the mesh, runs `per_core(core)` on each, and returns their outputs in core order once
/// every one has finished. A core whose closure finished keeps serving its peers' requests
/// until all have, so closures may talk across cores freely.
pub fn start_cores<F, Fut, T>(
    config: Config,
    shard_count: usize,
    per_core: F,
) -> Result<Vec<T>, ServerError>
where
    F: Fn(Rc<mesh::core::Core>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    assert!(shard_count >= 1);
    // A pool that cannot be placed fails here, before the layout below moves any row.
    let placement = placement_for(shard_count)?;
    let (data_dir, layout) = open_data_dir(&config, shard_count)?;
    let shared = Arc::new(Shared::with_data_dir(config, shard_count, &data_dir)?);
    let (data_dir, layout) = (Arc::new(data_dir), Arc::new(layout));
    let mesh = mesh::core::mesh(shard_count);
    let per_core = Arc::new(per_core);
    let barriers = Arc::new(StartBarriers::new(shard_count));
    let handles = executor_pool(placement, shared.config.idle_poll)
        .on_all_shards(move || {
            let (shared, mesh) = (shared.clone(), mesh.clone());
            let (per_core, barriers) = (per_core.clone(), barriers.clone());
            let (data_dir, layout) = (data_dir.clone(), layout.clone());
            async move {
                if let Some(slice) = shared.config.sched_slice {
                    os::scheduling::ask_for_slice(slice);
                }
                let core = mesh::core::Core::join(shared, mesh).await;
                if let Ok(core) = &core {
                    os::threads::name_this_thread(&format!("shard-{}", core.id()));
                }
                // No core starts its work (e.g. listening) before every shard has recovered;
                // a core that failed counts too, so the others do not wait forever, and then
                // none starts: a server missing a shard must not serve.
                let all_joined = barriers.all_ok(&barriers.joined, core.is_ok()).await;
                let core = match core {
                    Ok(_) if !all_joined => Err(ServerError::PeerFailed),
                    Ok(core) => durability::snapshot_schema_changes(&core)
                        .await
                        .map(|()| core),
                    Err(error) => Err(error),
                };
                // Every shard has made and snapshotted the config's schema changes (a failed
                // change refuses the start before any shard writes its snapshot).
                let all_snapshotted = barriers.all_ok(&barriers.snapshotted, core.is_ok()).await;
                let output = match core {
                    Ok(_) if !all_snapshotted => Err(ServerError::PeerFailed),
                    // Every shard recovered: only now are the layout and the schema
                    // recorded (by the first core here; the others wait for it), so a
                    // failed start writes nothing.
                    Ok(core) => match data_dir.record_schema_after(|| {
                        let path = data_dir.path();
                        layout.record(path).map_err(|error| error.to_string())
                    }) {
                        Ok(()) => Ok(per_core(core).await),
                        Err(error) => Err(error),
                    },
                    Err(error) => Err(error),
                };
                arrive_and_wait(&barriers.finished, shard_count).await;
                output
            }
        })
        .map_err(|error| ServerError::Executors(error.to_string()))?;
    gather_outputs(handles.join_all(), shard_count)
}

/// Before any core recovers: takes the data directory (this process must own it; the lock is
/// held as long as the returned value) and plans the changes the config makes to its recorded
/// schema; then moves rows written at another shard count to their owners.
fn open_data_dir(
    config: &Config,
    shard_count: usize,
) -> Result<(data_dir::DataDir, layout::Prepared), ServerError> {
    let data_dir = data_dir::DataDir::open(config)?;
    let schema_change = data_dir
        .schema_changes()
        .first()
        .map(|change| change.describe());
    let layout = layout::prepare_for_recovery(
        config,
        &data_dir.made_spaces()?,
        shard_count,
        data_dir.fingerprint(),
        data_dir.schema_version(),
        schema_change,
    )?;
    Ok((data_dir, layout))
}

/// The executors of the shards, one per place in `placement`.
fn executor_pool(placement: PoolPlacement, idle_poll: Duration) -> LocalExecutorPoolBuilder {
    LocalExecutorPoolBuilder::new(placement)
        // A core that sleeps is woken by the kernel when work arrives: tens of microseconds
        // on a VM, paid by the request that woke it (on several shards once more by a hop to
        // a sleeping peer). So after each burst of work it polls for `idle_poll` first. The
        // vendored glommio yields the CPU on each empty round of that spin (patch 6 in
        // `vendor/glommio/TARN-PATCHES.md`), so a client on the same core is not starved.
        .spin_before_park(idle_poll)
        // glommio names each executor's thread, and the helper thread it starts for blocking
        // calls, `tarn-N` (N its own count from 1); once a shard knows its id, its executor's
        // thread is renamed `shard-ID`, the id its log lines carry.
        .name("tarn")
}

/// The points where every core of a starting pool waits for all the others, and whether any
/// core failed on the way.
struct StartBarriers {
    shard_count: usize,
    joined: AtomicUsize,
    snapshotted: AtomicUsize,
    finished: AtomicUsize,
    any_failed: AtomicBool,
}

impl StartBarriers {
    fn new(shard_count: usize) -> StartBarriers {
        StartBarriers {
            shard_count,
            joined: AtomicUsize::new(0),
            snapshotted: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
            any_failed: AtomicBool::new(false),
        }
    }

    /// Counts this core in at `arrived`, failed (`ok` false) or not, and waits for every
    /// core there: whether none has failed so far.
    async fn all_ok(&self, arrived: &AtomicUsize, ok: bool) -> bool {
        if !ok {
            self.any_failed.store(true, Ordering::Release);
        }
        arrive_and_wait(arrived, self.shard_count).await;
        !self.any_failed.load(Ordering::Acquire)
    }
}

/// Counts this core in at `arrived` and waits until every one of the `shard_count` cores
/// has: a barrier across executors that share no runtime.
async fn arrive_and_wait(arrived: &AtomicUsize, shard_count: usize) {
    arrived.fetch_add(1, Ordering::AcqRel);
    while arrived.load(Ordering::Acquire) < shard_count {
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
}

/// Every core's output, or the error that explains a failed start.
fn gather_outputs<T, E: std::fmt::Display>(
    results: Vec<Result<Result<T, ServerError>, E>>,
    shard_count: usize,
) -> Result<Vec<T>, ServerError> {
    let mut outputs = Vec::with_capacity(shard_count);
    let mut first_error = None;
    for result in results {
        match result {
            Ok(Ok(output)) => outputs.push(output),
            // The failing core's own error says what went wrong; report that one.
            Ok(Err(ServerError::PeerFailed)) => {}
            Ok(Err(error)) => {
                first_error.get_or_insert(error);
            }
            Err(error) => {
                first_error.get_or_insert(ServerError::Executors(error.to_string()));
            }
        }
    }
    match first_error {
        Some(error) => Err(error),
        None if outputs.len() < shard_count => Err(ServerError::PeerFailed),
        None => Ok(outputs),
    }
}

/// Where the shards' threads run: one pinned to each of `shard_count` CPUs as far apart as
/// the machine allows; with more shards than online CPUs, all of them on any online CPU,
/// sharing (slower, but it starts: a data directory written at a higher shard count, or a
/// test of one, must not need as many CPUs).
fn placement_for(shard_count: usize) -> Result<PoolPlacement, ServerError> {
    let pinned = || PoolPlacement::MaxSpread(shard_count, None);
    if pinned().generate_cpu_set().is_ok() {
        return Ok(pinned());
    }
    let online = glommio::CpuSet::online()
        .map_err(|error| ServerError::Executors(format!("listing the online CPUs: {error}")))?;
    tracing::warn!(
        shards = shard_count,
        cpus = online.len(),
        "more shards than CPUs: shard threads are not pinned and share the CPUs"
    );
    Ok(PoolPlacement::Fenced(shard_count, online))
}

/// Starts a serving core's own tasks besides its clients': the metrics publication (and on
/// core 0, the endpoint's state), the config reloader and the applier (core 0).
fn start_core_tasks(
    core: &Rc<mesh::core::Core>,
    metrics_endpoint: Option<&metrics::endpoint::Endpoint>,
    reloader: Option<&Arc<reload::Reloader>>,
) {
    if let Some(endpoint) = metrics_endpoint {
        glommio::spawn_local(metrics::publish_loop(core.clone())).detach();
        if core.id() == 0 {
            endpoint.serve(core.shared.clone());
        }
    }
    if let (0, Some(reloader)) = (core.id(), reloader) {
        glommio::spawn_local(reload::watch(core.clone(), reloader.clone())).detach();
    }
    if let (0, Some(upstream)) = (core.id(), core.shared.config.replication.first()) {
        let follow = replication::applier::follow(core.clone(), upstream.clone());
        glommio::spawn_local(follow).detach();
    }
}

/// Runs the server until SIGINT or SIGTERM.
pub fn run(config: Config) -> Result<(), ServerError> {
    run_reloading(config, None)
}

/// [`run`], reloading the config's spaces with `read_config` on each SIGHUP (see
/// [`reload`]).
pub fn run_reloading(
    config: Config,
    read_config: Option<reload::ConfigReader>,
) -> Result<(), ServerError> {
    let shard_count = shard_count_for(&config);
    let per_shard = config.memory_bytes / shard_count as u64;
    if per_shard > crate::storage::slab::MAX_PAGE_BYTES {
        return Err(ServerError::MemoryPerShard {
            memory_bytes: config.memory_bytes,
            shard_count,
            per_shard,
            max: crate::storage::slab::MAX_PAGE_BYTES,
        });
    }
    let shutdown = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, shutdown.clone()).map_err(ServerError::Signal)?;
    }
    // Fail on a bad schema here, with a message, rather than on every core.
    schema::build_engine(&config, config.memory_bytes)?;
    // The binary logs the config, data directory, WAL mode and sizes before this.
    tracing::info!(
        shards = shard_count,
        spaces = config.spaces.len(),
        "schema checked"
    );
    os::open_files::raise_open_files_limit(config.max_connections as u64, shard_count);
    // Before recovery, which may take long: a port in use fails the start at once.
    let listening = Arc::new(Listening::bind(config.listen, shard_count, shutdown)?);
    // On the main thread, before the shards' pinned threads exist: its threads are not
    // pinned to any shard's core. It answers 503 until core 0 hands it the state below.
    let metrics_endpoint = config
        .metrics
        .listen
        .map(metrics::endpoint::Endpoint::start);
    let metrics_endpoint = metrics_endpoint.transpose()?.map(Arc::new);
    let reloader = match read_config {
        Some(read) => Some(Arc::new(reload::Reloader::new(read, &config)?)),
        None => None,
    };
    let results = start_cores(config, shard_count, {
        let listening = listening.clone();
        let metrics_endpoint = metrics_endpoint.clone();
        move |core| {
            start_core_tasks(&core, metrics_endpoint.as_deref(), reloader.as_ref());
            listen::serve_clients(core, listening.clone())
        }
    })?;
    match results.into_iter().find_map(Result::err) {
        Some(error) => Err(error),
        None => {
            let (elapsed_ms, cut) = listening.shutdown_summary();
            tracing::info!(
                elapsed_ms,
                cut,
                "shutdown finished: connections closed, WALs closed; tarn stopped"
            );
            Ok(())
        }
    }
}
