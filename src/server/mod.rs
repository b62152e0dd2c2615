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
//! * [`durability`]: recovery, the WAL writer, snapshots.
//! * [`layout`]: the data directory's shard count and placement, and moving every row when
//!   a start changes them.
//! * [`schema`]: config to storage definitions; the system spaces.
//! * [`users`]: users, authentication, grants.
//! * [`os`]: the heap's set-up and the scheduler's treatment of a shard's thread.
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
pub mod decoded;
pub mod durability;
pub mod layout;
pub mod mesh;
pub mod moved_key;
pub mod os;
pub mod schema;
pub mod session;
pub mod users;

use crate::config::Config;
use glommio::net::TcpListener;
use glommio::{LocalExecutorPoolBuilder, PoolPlacement};
use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The Tarantool version tarn answers as: the 2.11 line, whose clients send IPROTO_ID.
pub const ADVERTISED_VERSION: &str = "2.11.1";

/// How long after SIGINT/SIGTERM connections may take to finish the requests they have
/// read; those still open then are cut.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// After the cut, how long the shutdown waits for the cut connections' tasks to end before
/// it closes the WALs anyway.
const SHUTDOWN_CUT_WAIT: Duration = Duration::from_secs(2);
/// Pending connections the kernel queues for accept.
const LISTEN_BACKLOG: i32 = 1024;

/// What every core reads and nobody writes after start-up.
pub struct Shared {
    pub config: Config,
    pub users: users::Users,
    pub instance_uuid: uuid::Uuid,
    /// The data directory's fingerprint, carried by every WAL file and snapshot.
    pub fingerprint: u64,
    /// Snapshots asked for by `box.snapshot()` (a generation count), and per core the
    /// generation it has written; a failure is kept for the caller that waits.
    pub snapshot_requested: AtomicU64,
    pub snapshot_done: Vec<AtomicU64>,
    pub snapshot_failure: Mutex<Option<String>>,
    /// What client connections hold, per core.
    pub net: connection::NetStats,
}

impl Shared {
    pub fn new(config: Config, shard_count: usize, fingerprint: u64) -> Shared {
        Shared {
            users: users::Users::from_config(&config),
            config,
            instance_uuid: uuid::Uuid::new_v4(),
            fingerprint,
            snapshot_requested: AtomicU64::new(0),
            snapshot_done: (0..shard_count).map(|_| AtomicU64::new(0)).collect(),
            snapshot_failure: Mutex::new(None),
            net: connection::NetStats::new(shard_count),
        }
    }
}

/// What the accepting cores share: the socket, the connection counts, the stop flag.
struct Listening {
    /// Bound at start-up; taken (and closed) once every core has its duplicate.
    socket: Mutex<Option<socket2::Socket>>,
    address: SocketAddr,
    /// [`LISTEN_PENDING`], [`LISTEN_STARTED`] or [`LISTEN_FAILED`]: core 0 starts listening
    /// once every shard has recovered; the other cores wait for it.
    listen_state: AtomicU8,
    duplicates_taken: AtomicUsize,
    connections: AtomicUsize,
    /// Per core, the connections it serves or is being handed.
    served_by_core: Vec<AtomicUsize>,
    shutdown: Arc<AtomicBool>,
    /// When the first core saw the stop flag, and how many have stopped accepting since.
    shutdown_started: OnceLock<Instant>,
    stopped_accepting: AtomicUsize,
    /// Connections cut at the end of the grace period.
    cut: AtomicUsize,
}

const LISTEN_PENDING: u8 = 0;
const LISTEN_STARTED: u8 = 1;
const LISTEN_FAILED: u8 = 2;

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
        // Release: the shutdown reads the count (Acquire) before it closes the WALs.
        self.connections.fetch_sub(1, Ordering::Release);
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

/// Asks for the shard thread's scheduler slice (see [`scheduling`]); a refusal costs
/// throughput, not correctness, so it is logged and the shard goes on.
fn ask_for_slice(slice: Duration) {
    let slice_us = slice.as_micros() as u64;
    match os::scheduling::request_slice(slice) {
        Ok(os::scheduling::SliceRequest::Set) => tracing::debug!(slice_us, "scheduler slice set"),
        Ok(os::scheduling::SliceRequest::KeptPolicy(policy)) => {
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
    let mesh = mesh::core::mesh(shard_count);
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
                let core = mesh::core::Core::join(shared, mesh).await;
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
    raise_open_files_limit(config.max_connections as u64, shard_count);
    // Before recovery, which may take long: a port in use fails the start at once.
    let socket = bind_listener(config.listen)?;
    let address = socket
        .local_addr()
        .ok()
        .and_then(|address| address.as_socket())
        .unwrap_or(config.listen);
    let listening = Arc::new(Listening {
        socket: Mutex::new(Some(socket)),
        address,
        listen_state: AtomicU8::new(LISTEN_PENDING),
        duplicates_taken: AtomicUsize::new(0),
        connections: AtomicUsize::new(0),
        served_by_core: (0..shard_count).map(|_| AtomicUsize::new(0)).collect(),
        shutdown,
        shutdown_started: OnceLock::new(),
        stopped_accepting: AtomicUsize::new(0),
        cut: AtomicUsize::new(0),
    });
    let results = start_cores(config, shard_count, {
        let listening = listening.clone();
        move |core| serve_clients(core, listening.clone())
    })?;
    match results.into_iter().find_map(Result::err) {
        Some(error) => Err(error),
        None => {
            let elapsed_ms = listening
                .shutdown_started
                .get()
                .map_or(0, |started| started.elapsed().as_millis() as u64);
            tracing::info!(
                elapsed_ms,
                cut = listening.cut.load(Ordering::Relaxed),
                "shutdown finished: connections closed, WALs closed; tarn stopped"
            );
            Ok(())
        }
    }
}

/// Raises the soft limit on open descriptors to the hard limit (each connection is one), and
/// says when `max_connections` cannot be reached even so.
fn raise_open_files_limit(max_connections: u64, shard_count: usize) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct given, nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        let error = std::io::Error::last_os_error();
        tracing::warn!(%error, "cannot read the open files limit");
        return;
    }
    let soft_before = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            let error = std::io::Error::last_os_error();
            tracing::warn!(%error, soft = soft_before, "cannot raise the open files limit");
            limit.rlim_cur = soft_before;
        }
    }
    tracing::info!(
        soft = limit.rlim_cur,
        soft_at_start = soft_before,
        hard = limit.rlim_max,
        "open files limit (RLIMIT_NOFILE)"
    );
    // The shards' rings, event descriptors, WAL and snapshot files need some too.
    let reserved = 64 + 16 * shard_count as u64;
    if max_connections + reserved > limit.rlim_cur {
        tracing::warn!(
            max_connections,
            open_files_limit = limit.rlim_cur,
            "max_connections exceeds what the open files limit allows (about {}); accepts \
             beyond it fail: raise the hard limit (ulimit -Hn, LimitNOFILE=) or lower \
             max_connections",
            limit.rlim_cur.saturating_sub(reserved)
        );
    }
}

/// Binds the listening socket without SO_REUSEPORT, so no other socket can bind the same
/// address while it is open (SO_REUSEADDR, as std sets it, only lets a restart bind while
/// connections of the previous run linger in TIME_WAIT). Non-blocking because glommio
/// flips the flag around each accept, and every core's duplicate shares it.
fn bind_listener(address: SocketAddr) -> Result<socket2::Socket, ServerError> {
    use socket2::{Domain, Protocol, Socket, Type};
    let failed = |source: std::io::Error| match source.kind() {
        std::io::ErrorKind::AddrInUse => ServerError::AddressInUse { address },
        _ => ServerError::Listen { address, source },
    };
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )
    .map_err(failed)?;
    socket.set_reuse_address(true).map_err(failed)?;
    socket.set_nonblocking(true).map_err(failed)?;
    socket.bind(&address.into()).map_err(failed)?;
    Ok(socket)
}

/// This core's listener: a duplicate of the shared socket. Core 0 starts listening first
/// (every shard has recovered by now); the others wait for it.
async fn listener_for_core(
    listening: &Listening,
    id: usize,
    shard_count: usize,
) -> Result<TcpListener, ServerError> {
    let address = listening.address;
    let duplicate = {
        let socket = listening
            .socket
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(socket) = socket.as_ref() else {
            return Err(ServerError::PeerFailed);
        };
        if id == 0 {
            let listened = socket.listen(LISTEN_BACKLOG).map_err(|source| {
                listening
                    .listen_state
                    .store(LISTEN_FAILED, Ordering::Release);
                match source.kind() {
                    std::io::ErrorKind::AddrInUse => ServerError::AddressInUse { address },
                    _ => ServerError::Listen { address, source },
                }
            });
            listened?;
            listening
                .listen_state
                .store(LISTEN_STARTED, Ordering::Release);
            tracing::info!("listening on {address}");
        }
        socket
            .try_clone()
            .map_err(|source| ServerError::Listen { address, source })?
    };
    loop {
        match listening.listen_state.load(Ordering::Acquire) {
            LISTEN_STARTED => break,
            LISTEN_FAILED => return Err(ServerError::PeerFailed),
            _ => glommio::timer::sleep(Duration::from_millis(1)).await,
        }
    }
    // The last core to take its duplicate closes the original, so the socket closes (and
    // refuses connections) as soon as every core has stopped accepting.
    if listening.duplicates_taken.fetch_add(1, Ordering::AcqRel) + 1 == shard_count {
        drop(
            listening
                .socket
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take(),
        );
    }
    // SAFETY: a listening TCP socket's descriptor, owned by nothing else from here on.
    Ok(unsafe { TcpListener::from_raw_fd(duplicate.into_raw_fd()) })
}

/// One core's accept loop, until the stop flag is raised: serves the connections it accepts
/// and those handed over to it, and hands over those another core should serve. Then the
/// shutdown: see the module doc.
async fn serve_clients(
    core: Rc<mesh::core::Core>,
    listening: Arc<Listening>,
) -> Result<(), ServerError> {
    let id = core.id();
    let shared = core.shared.clone();
    let listener = listener_for_core(&listening, id, core.shard_count).await?;
    let connections = connection::CoreConnections::new(id, shared.clone());
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
        let connections = connections.clone();
        async move {
            loop {
                let socket = core.next_handed_over().await;
                // SAFETY: the socket is a connected TCP stream, owned by nobody else now.
                let stream = unsafe { glommio::net::TcpStream::from_raw_fd(socket.into_raw_fd()) };
                serve_connection(&core, &connections, &listening, stream);
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
            serve_connection(&core, &connections, &listening, stream);
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
    drop(listener);
    let started = *listening.shutdown_started.get_or_init(Instant::now);
    listening.stopped_accepting.fetch_add(1, Ordering::AcqRel);
    if id == 0 {
        tracing::info!(
            connections = listening.connections.load(Ordering::Relaxed),
            connection_memory_bytes = shared.net.memory_bytes(),
            grace_s = SHUTDOWN_GRACE.as_secs(),
            "shutting down on signal: accepting no more; open connections finish the \
             requests they have read"
        );
    }
    connections.stop_reading();
    // Done once no core accepts any more and every connection has closed: a connection
    // another core accepts or hands over still sends its requests here. (One handed over
    // now is still served: it closes at once, and only then counts as closed.)
    let all_closed = || {
        listening.stopped_accepting.load(Ordering::Acquire) == core.shard_count
            && listening.connections.load(Ordering::Acquire) == 0
    };
    wait_until(&all_closed, started + SHUTDOWN_GRACE).await;
    if !all_closed() {
        let cut = connections.cut();
        listening.cut.fetch_add(cut, Ordering::Relaxed);
        if cut > 0 {
            tracing::warn!(
                shard = id,
                cut,
                grace_s = SHUTDOWN_GRACE.as_secs(),
                "connections still busy after the grace period were cut"
            );
        }
        wait_until(&all_closed, Instant::now() + SHUTDOWN_CUT_WAIT).await;
    }
    handed_over_loop.cancel().await;
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
    // Every connection on every core is done: no request is left for this shard's WAL.
    let wal = core.shard.borrow().wal.clone();
    if let Some(wal) = wal {
        if let Err(error) = wal.close().await {
            tracing::error!(shard = id, %error, "closing the WAL failed");
        }
    }
    Ok(())
}

/// Waits until `done()` or `deadline`, looking every millisecond.
async fn wait_until(done: &impl Fn() -> bool, deadline: Instant) {
    while !done() && Instant::now() < deadline {
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
}

/// Serves one client connection on this core, in a task of its own.
fn serve_connection(
    core: &Rc<mesh::core::Core>,
    connections: &Rc<connection::CoreConnections>,
    listening: &Arc<Listening>,
    stream: glommio::net::TcpStream,
) {
    let (listening, id) = (listening.clone(), core.id());
    let session = session::Session::new(core.clone());
    connections.spawn(session, stream, move || listening.connection_closed(id));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listening(served_by_core: &[usize]) -> Listening {
        Listening {
            socket: Mutex::new(None),
            address: "127.0.0.1:0".parse().unwrap(),
            listen_state: AtomicU8::new(LISTEN_PENDING),
            duplicates_taken: AtomicUsize::new(0),
            connections: AtomicUsize::new(served_by_core.iter().sum()),
            served_by_core: served_by_core
                .iter()
                .map(|&n| AtomicUsize::new(n))
                .collect(),
            shutdown: Arc::default(),
            shutdown_started: OnceLock::new(),
            stopped_accepting: AtomicUsize::new(0),
            cut: AtomicUsize::new(0),
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
