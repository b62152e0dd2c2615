//! The server: one glommio executor per core, each with its shard, its listener on the
//! shared port, and the channel mesh to the others.
//!
//! Connections are balanced over the cores: the kernel spreads accepts over the listeners
//! (SO_REUSEPORT) by a hash of the client's address, which splits 16 connections over two
//! cores 8 to 8 one time in five, and 11 to 5 or worse one time in five too; a core serving
//! more connections than its share is the server's bottleneck under load. So the accepting
//! core serves a connection only if no other core serves fewer; else it hands the socket to
//! the core serving the fewest (Seastar's "connection distribution").
//!
//! Owns executors, listeners, connections, routing, fan-out and merge, sessions and the
//! system spaces. It knows nothing of file formats.
//!
//! * [`connection`]: one client socket: greeting, framing, buffers.
//! * [`dispatch`]: one client's requests, without sockets: session state, routing, merge.
//!   [`decoded`] keeps the packets a run decoded ahead, so each is decoded once.
//! * [`core`]: one core's shard and its batched messages to the other cores ([`batch`]),
//!   whose replies land in sessions' [`inbox`]es.
//! * [`crud`]: the tarantool/crud API, answered natively.
//! * [`data_dir`]: the data directory's lock, fingerprint and schema record.
//! * [`durability`]: recovery, the WAL writer, snapshots.
//! * [`layout`]: the data directory's shard count and placement, and moving every row when
//!   a start changes them.
//! * [`schema`]: config to storage definitions; the system spaces.
//! * [`session`]: users, authentication, grants.
//!
//! In-process use (a benchmark, a test) needs no sockets: [`start_cores`] runs one executor
//! per shard, each with its [`core::Core`] joined to the mesh, and hands each core to a
//! closure, which feeds packets to a [`dispatch::Session`]:
//!
//! ```no_run
//! # let config = tarn::config::Config::from_toml_str(tarn::config::SHIPPED_CONFIG_TOML).unwrap();
//! use tarn::server::{dispatch::Session, start_cores};
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

pub mod batch;
pub mod checksum;
pub mod connection;
pub mod core;
pub mod crud;
pub mod data_dir;
pub mod decoded;
pub mod dispatch;
pub mod durability;
pub mod heap;
pub mod inbox;
pub mod layout;
pub mod scheduling;
pub mod schema;
pub mod session;

use crate::config::Config;
use glommio::net::TcpListener;
use glommio::{LocalExecutorPoolBuilder, PoolPlacement};
use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The Tarantool version tarn answers as: the 2.11 line, whose clients send IPROTO_ID.
pub const ADVERTISED_VERSION: &str = "2.11.1";

/// What every core reads and nobody writes after start-up.
pub struct Shared {
    pub config: Config,
    pub users: session::Users,
    pub instance_uuid: uuid::Uuid,
    /// The data directory's fingerprint, carried by every WAL file and snapshot.
    pub fingerprint: u64,
    /// Snapshots asked for by `box.snapshot()` (a generation count), and per core the
    /// generation it has written; a failure is kept for the caller that waits.
    pub snapshot_requested: AtomicU64,
    pub snapshot_done: Vec<AtomicU64>,
    pub snapshot_failure: Mutex<Option<String>>,
}

impl Shared {
    pub fn new(config: Config, shard_count: usize, fingerprint: u64) -> Shared {
        Shared {
            users: session::Users::from_config(&config),
            config,
            instance_uuid: uuid::Uuid::new_v4(),
            fingerprint,
            snapshot_requested: AtomicU64::new(0),
            snapshot_done: (0..shard_count).map(|_| AtomicU64::new(0)).collect(),
            snapshot_failure: Mutex::new(None),
        }
    }
}

/// What the listening cores share: the connection count, the stop flag, and the address
/// core 0 bound (port 0 resolved) for the other cores to bind as well.
struct Listening {
    connections: AtomicUsize,
    /// Per core, the connections it serves or is being handed.
    served_by_core: Vec<AtomicUsize>,
    shutdown: Arc<AtomicBool>,
    bound: (Mutex<Option<SocketAddr>>, Condvar),
}

impl Listening {
    /// The core that should serve a connection `accepting` just accepted: the one serving the
    /// fewest, `accepting` itself on a tie (no hand-over). Counts the connection there.
    fn place_connection(&self, accepting: usize) -> usize {
        let load = |core: usize| self.served_by_core[core].load(Ordering::Relaxed);
        let mut target = accepting;
        for core in 0..self.served_by_core.len() {
            if load(core) < load(target) {
                target = core;
            }
        }
        self.served_by_core[target].fetch_add(1, Ordering::Relaxed);
        target
    }

    fn connection_closed(&self, core: usize) {
        self.served_by_core[core].fetch_sub(1, Ordering::Relaxed);
        self.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot start executors: {0}")]
    Executors(String),
    #[error("cannot listen on {address}: {source}")]
    Listen {
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
    #[error("another shard failed to start")]
    PeerFailed,
    #[error("recovery of shard {shard_id} failed: {reason}{hint}")]
    Recovery {
        shard_id: usize,
        reason: String,
        /// What to do about it, when `reason` does not say.
        hint: &'static str,
    },
}

/// Placement: which shard owns an encoded primary key. CRC-32C is stable across builds
/// and restarts, which the per-shard WAL will rely on.
pub fn shard_of_key(encoded_primary_key: &[u8], shard_count: usize) -> usize {
    debug_assert!(shard_count > 0 && shard_count <= u32::MAX as usize);
    // A 32-bit division (the checksum is 32 bits): the same owner, and x86 divides 32-bit
    // operands in fewer cycles than 64-bit ones.
    (checksum::crc32c(encoded_primary_key) % shard_count as u32) as usize
}

/// Asks for the shard thread's scheduler slice (see [`scheduling`]); a refusal costs
/// throughput, not correctness, so it is logged and the shard goes on.
fn ask_for_slice(slice: Duration) {
    let slice_us = slice.as_micros() as u64;
    match scheduling::request_slice(slice) {
        Ok(scheduling::SliceRequest::Set) => tracing::debug!(slice_us, "scheduler slice set"),
        Ok(scheduling::SliceRequest::KeptPolicy(policy)) => {
            tracing::info!(
                policy,
                "shard thread not on a fair policy; sched_slice_us not applied"
            )
        }
        Err(error) => tracing::warn!(%error, slice_us, "could not set the scheduler slice"),
    }
}

/// Names the calling thread as `top -H` and `/proc/PID/task/TID/comm` show it (the kernel
/// keeps the first 15 bytes). Only a diagnostic: a failure changes nothing else.
fn name_this_thread(name: &str) {
    let Ok(name) = std::ffi::CString::new(name) else {
        return;
    };
    // SAFETY: PR_SET_NAME reads a NUL-terminated string (at most 16 bytes of it) from the
    // pointer, which `name` keeps valid for the call.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr() as libc::c_ulong, 0, 0, 0) };
}

pub fn shard_count_for(config: &Config) -> usize {
    match config.shard_count {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n as usize,
    }
}

/// Starts `shard_count` pinned executors, each with its shard and its [`core::Core`] joined
/// to the mesh, runs `per_core(core)` on each, and returns their outputs in core order once
/// every one has finished. A core whose closure finished keeps serving its peers' requests
/// until all have, so closures may talk across cores freely.
pub fn start_cores<F, Fut, T>(
    config: Config,
    shard_count: usize,
    per_core: F,
) -> Result<Vec<T>, ServerError>
where
    F: Fn(Rc<core::Core>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    assert!(shard_count >= 1);
    // A pool that cannot be placed fails here, before the layout below moves any row.
    let placement = placement_for(shard_count)?;
    // Before any core recovers: this process must own the directory, and the schema the data
    // was written with must still hold. The lock is held until this function returns.
    let data_dir = Arc::new(data_dir::DataDir::open(&config)?);
    // Also before: rows written at another shard count are moved to their owners here.
    let layout = Arc::new(layout::prepare_for_recovery(
        &config,
        shard_count,
        data_dir.fingerprint(),
    )?);
    let shared = Arc::new(Shared::new(config, shard_count, data_dir.fingerprint()));
    let mesh = core::mesh(shard_count);
    let per_core = Arc::new(per_core);
    let finished = Arc::new(AtomicUsize::new(0));
    let joined = Arc::new(AtomicUsize::new(0));
    let any_failed = Arc::new(AtomicBool::new(false));
    let handles = LocalExecutorPoolBuilder::new(placement)
        // A core that sleeps is woken by the kernel when work arrives: tens of microseconds
        // on a VM, paid by the request that woke it (on several shards once more by a hop to
        // a sleeping peer). So after each burst of work it polls for `idle_poll` first. The
        // vendored glommio yields the CPU on each empty round of that spin (patch 6 in
        // `vendor/glommio/TARN-PATCHES.md`), so a client on the same core is not starved.
        .spin_before_park(shared.config.idle_poll)
        // glommio names each executor's thread, and the helper thread it starts for blocking
        // calls, `tarn-N` (N its own count from 1); once a shard knows its id, its executor's
        // thread is renamed `shard-ID`, the id its log lines carry.
        .name("tarn")
        .on_all_shards(move || {
            let (shared, mesh) = (shared.clone(), mesh.clone());
            let (per_core, finished) = (per_core.clone(), finished.clone());
            let (joined, any_failed) = (joined.clone(), any_failed.clone());
            let (data_dir, layout) = (data_dir.clone(), layout.clone());
            async move {
                if let Some(slice) = shared.config.sched_slice {
                    ask_for_slice(slice);
                }
                let core = core::Core::join(shared, mesh).await;
                if let Ok(core) = &core {
                    name_this_thread(&format!("shard-{}", core.id()));
                }
                // No core starts its work (e.g. listening) before every shard has recovered;
                // a core that failed counts too, so the others do not wait forever, and then
                // none starts: a server missing a shard must not serve.
                if core.is_err() {
                    any_failed.store(true, Ordering::Release);
                }
                joined.fetch_add(1, Ordering::AcqRel);
                while joined.load(Ordering::Acquire) < shard_count {
                    glommio::timer::sleep(Duration::from_millis(1)).await;
                }
                let output = match core {
                    Ok(_) if any_failed.load(Ordering::Acquire) => Err(ServerError::PeerFailed),
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
                finished.fetch_add(1, Ordering::AcqRel);
                while finished.load(Ordering::Acquire) < shard_count {
                    glommio::timer::sleep(Duration::from_millis(1)).await;
                }
                output
            }
        })
        .map_err(|error| ServerError::Executors(error.to_string()))?;
    let mut outputs = Vec::with_capacity(shard_count);
    let mut first_error = None;
    for result in handles.join_all() {
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

/// Runs the server until SIGINT or SIGTERM.
pub fn run(config: Config) -> Result<(), ServerError> {
    let shard_count = shard_count_for(&config);
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
    let listening = Arc::new(Listening {
        connections: AtomicUsize::new(0),
        served_by_core: (0..shard_count).map(|_| AtomicUsize::new(0)).collect(),
        shutdown,
        bound: (Mutex::new(None), Condvar::new()),
    });
    let results = start_cores(config, shard_count, move |core| {
        serve_clients(core, listening.clone())
    })?;
    match results.into_iter().find_map(Result::err) {
        Some(error) => Err(error),
        None => {
            tracing::info!("tarn stopped");
            Ok(())
        }
    }
}

/// One core's accept loop, until the stop flag is raised: serves the connections it accepts
/// and those handed over to it, and hands over those another core should serve.
async fn serve_clients(core: Rc<core::Core>, listening: Arc<Listening>) -> Result<(), ServerError> {
    let id = core.id();
    let shared = core.shared.clone();
    let listener = bind(&listening, &shared.config, id)?;
    let mut shutdown_watch = Some(glommio::spawn_local({
        let listening = listening.clone();
        async move {
            while !listening.shutdown.load(Ordering::Relaxed) {
                glommio::timer::sleep(Duration::from_millis(50)).await;
            }
        }
    }));
    let served = Rc::new(std::cell::Cell::new(0u64));
    // Its own task: racing it with `accept` would drop accepts in flight, and with them
    // the connections the kernel gave them.
    let handed_over_loop = glommio::spawn_local({
        let (core, listening, served) = (core.clone(), listening.clone(), served.clone());
        async move {
            loop {
                let socket = core.next_handed_over().await;
                // SAFETY: the socket is a connected TCP stream, owned by nobody else now.
                let stream = unsafe { glommio::net::TcpStream::from_raw_fd(socket.into_raw_fd()) };
                serve_connection(&core, &listening, stream);
                served.set(served.get() + 1);
            }
        }
    });
    let mut handed_over = 0u64;
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            if let Some(watch) = shutdown_watch.as_mut() {
                watch.await;
            }
            None
        })
        .await;
        let stream = match accepted {
            None => break,
            Some(Ok(stream)) => stream,
            Some(Err(error)) => {
                tracing::warn!(%error, "accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let open = listening.connections.fetch_add(1, Ordering::Relaxed) + 1;
        if open > shared.config.max_connections as usize {
            listening.connections.fetch_sub(1, Ordering::Relaxed);
            tracing::warn!(
                max_connections = shared.config.max_connections,
                "connection refused: max_connections reached"
            );
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        let target = listening.place_connection(id);
        if target == id {
            serve_connection(&core, &listening, stream);
            served.set(served.get() + 1);
            continue;
        }
        // glommio's stream cannot give up its descriptor, so a duplicate travels and the
        // stream closes its own.
        // SAFETY: the descriptor is the stream's, open while `stream` lives.
        let duplicate = unsafe { BorrowedFd::borrow_raw(stream.as_raw_fd()) }.try_clone_to_owned();
        drop(stream);
        match duplicate {
            Ok(socket) => {
                core.hand_over(target, socket);
                handed_over += 1;
            }
            Err(error) => {
                tracing::warn!(%error, "could not hand a connection over to another core");
                listening.connection_closed(target);
            }
        }
    }
    handed_over_loop.cancel().await;
    if id == 0 {
        tracing::info!("shutting down on signal");
    }
    if core.shard_count > 1 {
        let mesh = core.stats();
        tracing::info!(
            shard = id,
            connections_served = served.get(),
            connections_handed_over = handed_over,
            requests_forwarded = mesh.requests_sent,
            batches_sent = mesh.request_batches_sent,
            batches_served = mesh.request_batches_served,
            "traffic to other shards"
        );
    }
    let wal = core.shard.borrow().wal.clone();
    if let Some(wal) = wal {
        if let Err(error) = wal.close().await {
            tracing::error!(shard = id, %error, "closing the WAL failed");
        }
    }
    Ok(())
}

/// Serves one client connection on this core, in a task of its own.
fn serve_connection(
    core: &Rc<core::Core>,
    listening: &Arc<Listening>,
    stream: glommio::net::TcpStream,
) {
    let connection = connection::Connection::new(dispatch::Session::new(core.clone()));
    let (listening, id) = (listening.clone(), core.id());
    glommio::spawn_local(async move {
        if let Err(error) = connection.serve(stream).await {
            tracing::debug!(%error, "connection closed with an error");
        }
        listening.connection_closed(id);
    })
    .detach();
}

/// Core 0 binds the configured address; the others wait for the port it got and bind the
/// same one, so `listen = "127.0.0.1:0"` works with any number of cores.
fn bind(listening: &Listening, config: &Config, id: usize) -> Result<TcpListener, ServerError> {
    let (lock, ready) = &listening.bound;
    let address = if id == 0 {
        config.listen
    } else {
        let mut bound = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        while bound.is_none() {
            bound = ready
                .wait(bound)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        bound.expect("checked above")
    };
    let listener = TcpListener::bind(address).map_err(|error| ServerError::Listen {
        address,
        source: std::io::Error::other(error.to_string()),
    })?;
    if id == 0 {
        let local = listener.local_addr().map_err(|error| ServerError::Listen {
            address,
            source: std::io::Error::other(error.to_string()),
        })?;
        *lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(local);
        ready.notify_all();
        tracing::info!("listening on {local}");
    }
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listening(served_by_core: &[usize]) -> Listening {
        Listening {
            connections: AtomicUsize::new(served_by_core.iter().sum()),
            served_by_core: served_by_core
                .iter()
                .map(|&n| AtomicUsize::new(n))
                .collect(),
            shutdown: Arc::default(),
            bound: (Mutex::new(None), Condvar::new()),
        }
    }

    fn loads(listening: &Listening) -> Vec<usize> {
        let counts = listening.served_by_core.iter();
        counts.map(|n| n.load(Ordering::Relaxed)).collect()
    }

    #[test]
    fn a_connection_goes_to_the_core_serving_fewest_and_stays_on_a_tie() {
        let listening = listening(&[2, 2, 1]);
        assert_eq!(listening.place_connection(0), 2);
        assert_eq!(loads(&listening), [2, 2, 2]);
        // A tie: the accepting core keeps it, whichever it is.
        assert_eq!(listening.place_connection(1), 1);
        assert_eq!(listening.place_connection(0), 0);
        assert_eq!(loads(&listening), [3, 3, 2]);
        assert_eq!(listening.place_connection(0), 2);
        // Closing frees the place where the connection was served.
        listening.connections.fetch_add(4, Ordering::Relaxed);
        listening.connection_closed(1);
        assert_eq!(loads(&listening), [3, 2, 3]);
        assert_eq!(listening.place_connection(2), 1);
    }
}
