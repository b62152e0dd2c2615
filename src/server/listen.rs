//! The listening socket and the accept loop of each core: one socket bound once (no
//! SO_REUSEPORT), a duplicate per core, and each accepted connection placed on the core
//! serving the fewest (see the server's module doc). Knows sockets and connection counts,
//! nothing of requests.

use crate::server::mesh::core::Core;
use crate::server::os::sockets;
use crate::server::{connection, session, ServerError, SHUTDOWN_CUT_WAIT, SHUTDOWN_GRACE};
use glommio::net::TcpListener;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Pending connections the kernel queues for accept.
const LISTEN_BACKLOG: i32 = 1024;

/// What the accepting cores share: the socket, the connection counts, the stop flag.
pub(crate) struct Listening {
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
    /// Binds the listening socket (before recovery, which may take long: a port in use
    /// fails the start at once); every core listens on a duplicate once all have recovered.
    pub(crate) fn bind(
        listen: SocketAddr,
        shard_count: usize,
        shutdown: Arc<AtomicBool>,
    ) -> Result<Listening, ServerError> {
        let socket = bind_listener(listen)?;
        let address = socket
            .local_addr()
            .ok()
            .and_then(|address| address.as_socket())
            .unwrap_or(listen);
        Ok(Listening {
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
        })
    }

    /// Milliseconds from the first core seeing the stop flag to now, and the connections
    /// cut at the end of the grace period.
    pub(crate) fn shutdown_summary(&self) -> (u64, usize) {
        let elapsed_ms = self
            .shutdown_started
            .get()
            .map_or(0, |started| started.elapsed().as_millis() as u64);
        (elapsed_ms, self.cut.load(Ordering::Relaxed))
    }

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

/// The start's error for a failed bind or listen: "address in use" gets its own, which
/// says what to do.
fn listen_failed(address: SocketAddr, source: std::io::Error) -> ServerError {
    match source.kind() {
        std::io::ErrorKind::AddrInUse => ServerError::AddressInUse { address },
        _ => ServerError::Listen { address, source },
    }
}

/// Binds the listening socket without SO_REUSEPORT, so no other socket can bind the same
/// address while it is open (SO_REUSEADDR, as std sets it, only lets a restart bind while
/// connections of the previous run linger in TIME_WAIT). Non-blocking because glommio
/// flips the flag around each accept, and every core's duplicate shares it.
fn bind_listener(address: SocketAddr) -> Result<socket2::Socket, ServerError> {
    use socket2::{Domain, Protocol, Socket, Type};
    let failed = |source| listen_failed(address, source);
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
                listen_failed(address, source)
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
    Ok(sockets::into_glommio_listener(duplicate))
}

/// One core's accept loop, until the stop flag is raised: serves the connections it accepts
/// and those handed over to it, and hands over those another core should serve. Then the
/// shutdown: see the module doc.
pub(crate) async fn serve_clients(
    core: Rc<Core>,
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
                let stream = sockets::into_glommio_stream(socket);
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
        let duplicate = sockets::duplicate(&stream);
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
    core: &Rc<Core>,
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
