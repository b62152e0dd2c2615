//! The server: one glommio executor per core, each with its shard, its listener on the
//! shared port (SO_REUSEPORT spreads connections), and the channel mesh to the others.
//!
//! Owns executors, listeners, connections, routing, fan-out and merge, sessions and the
//! system spaces. It knows nothing of file formats.
//!
//! * [`connection`]: one client: framing, dispatch, routing, merge.
//! * [`core`]: one core's shard and its messages to the other cores.
//! * [`crud`]: the tarantool/crud API, answered natively.
//! * [`durability`]: recovery, the WAL writer, snapshots.
//! * [`schema`]: config to storage definitions; the system spaces.
//! * [`session`]: users, authentication, grants.

pub mod connection;
pub mod core;
pub mod crud;
pub mod durability;
pub mod oneshot;
pub mod schema;
pub mod session;

use crate::config::Config;
use crate::shard::Shard;
use glommio::channels::channel_mesh::{Full, MeshBuilder};
use glommio::net::TcpListener;
use glommio::{LocalExecutorPoolBuilder, PoolPlacement};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The Tarantool version tarn answers as: the 2.11 line, whose clients send IPROTO_ID.
pub const ADVERTISED_VERSION: &str = "2.11.1";
/// Messages in flight per direction between two cores before senders wait.
const MESH_CHANNEL_CAPACITY: usize = 4096;

/// What every core reads and nobody writes after start-up.
pub struct Shared {
    pub config: Config,
    pub users: session::Users,
    pub instance_uuid: uuid::Uuid,
    connections: AtomicUsize,
    shutdown: Arc<AtomicBool>,
    /// The address core 0 bound (port 0 resolved), for the other cores to bind as well.
    bound: (Mutex<Option<SocketAddr>>, Condvar),
    /// Snapshots asked for by `box.snapshot()` (a generation count), and per core the
    /// generation it has written; a failure is kept for the caller that waits.
    pub snapshot_requested: AtomicU64,
    pub snapshot_done: Vec<AtomicU64>,
    pub snapshot_failure: Mutex<Option<String>>,
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
    #[error("recovery of shard {shard_id} failed: {reason} (start with --force-recovery to skip damaged data)")]
    Recovery { shard_id: usize, reason: String },
}

/// Placement: which shard owns an encoded primary key. CRC-32C is stable across builds
/// and restarts, which the per-shard WAL will rely on.
pub fn shard_of_key(encoded_primary_key: &[u8], shard_count: usize) -> usize {
    (crc32c::crc32c(encoded_primary_key) as usize) % shard_count
}

pub fn shard_count_for(config: &Config) -> usize {
    match config.shard_count {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n as usize,
    }
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
    let fingerprint = durability::prepare_data_dir(&config)?;
    tracing::info!(
        shards = shard_count,
        spaces = config.spaces.len(),
        memory_bytes = config.memory_bytes,
        "starting tarn {}",
        env!("CARGO_PKG_VERSION")
    );
    let shared = Arc::new(Shared {
        users: session::Users::from_config(&config),
        config,
        instance_uuid: uuid::Uuid::new_v4(),
        connections: AtomicUsize::new(0),
        shutdown,
        bound: (Mutex::new(None), Condvar::new()),
        snapshot_requested: AtomicU64::new(0),
        snapshot_done: (0..shard_count).map(|_| AtomicU64::new(0)).collect(),
        snapshot_failure: Mutex::new(None),
    });
    let mesh = MeshBuilder::full(shard_count, MESH_CHANNEL_CAPACITY);
    let handles = LocalExecutorPoolBuilder::new(PoolPlacement::MaxSpread(shard_count, None))
        .on_all_shards(move || {
            let shared = shared.clone();
            let mesh = mesh.clone();
            async move { run_core(shared, mesh, shard_count, fingerprint).await }
        })
        .map_err(|error| ServerError::Executors(error.to_string()))?;
    let mut first_error = None;
    for result in handles.join_all() {
        match result {
            Ok(Ok(())) => {}
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
        None => {
            tracing::info!("tarn stopped");
            Ok(())
        }
    }
}

async fn run_core(
    shared: Arc<Shared>,
    mesh: MeshBuilder<core::Envelope, Full>,
    shard_count: usize,
    fingerprint: u64,
) -> Result<(), ServerError> {
    let (senders, receivers) = mesh
        .join()
        .await
        .map_err(|error| ServerError::Executors(format!("channel mesh: {error}")))?;
    let id = senders.peer_id();
    let memory_bytes = shared.config.memory_bytes / shard_count as u64;
    let mut engine = schema::build_engine(&shared.config, memory_bytes)?;
    let lsn_next = durability::recover_shard(&shared.config, id, fingerprint, &mut engine)?;
    let wal = durability::start_wal(&shared.config, id, fingerprint, lsn_next)?;
    let core = core::Core::new(Shard::new(id, engine, wal), senders);
    core.listen_to_peers(receivers);
    glommio::spawn_local(durability::checkpoint_loop(
        core.clone(),
        shared.clone(),
        fingerprint,
        lsn_next - 1,
    ))
    .detach();

    let listener = bind(&shared, id)?;
    let mut shutdown_watch = Some(glommio::spawn_local({
        let shared = shared.clone();
        async move {
            while !shared.shutdown.load(Ordering::Relaxed) {
                glommio::timer::sleep(Duration::from_millis(50)).await;
            }
        }
    }));
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
        let open = shared.connections.fetch_add(1, Ordering::Relaxed) + 1;
        if open > shared.config.max_connections as usize {
            shared.connections.fetch_sub(1, Ordering::Relaxed);
            tracing::warn!(
                max_connections = shared.config.max_connections,
                "connection refused: max_connections reached"
            );
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        let connection = connection::Connection::new(core.clone(), shared.clone());
        let shared = shared.clone();
        glommio::spawn_local(async move {
            if let Err(error) = connection.serve(stream).await {
                tracing::debug!(%error, "connection closed with an error");
            }
            shared.connections.fetch_sub(1, Ordering::Relaxed);
        })
        .detach();
    }
    if id == 0 {
        tracing::info!("shutting down on signal");
    }
    let wal = core.shard.borrow().wal.clone();
    if let Some(wal) = wal {
        if let Err(error) = wal.close().await {
            tracing::error!(shard = id, %error, "closing the WAL failed");
        }
    }
    Ok(())
}

/// Core 0 binds the configured address; the others wait for the port it got and bind the
/// same one, so `listen = "127.0.0.1:0"` works with any number of cores.
fn bind(shared: &Shared, id: usize) -> Result<TcpListener, ServerError> {
    let (lock, ready) = &shared.bound;
    let address = if id == 0 {
        shared.config.listen
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
