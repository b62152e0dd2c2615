//! A core's connections: the registry of the ones it serves (for wake-ups at shutdown and
//! the cut after the grace period), the spare buffer sets it lends them, and the counts
//! every core publishes ([`NetStats`], in `box.info` and the shutdown log). Knows nothing
//! of what a connection reads or writes.

use super::{Connection, READ_CHUNK_BYTES, WRITE_FLUSH_BYTES};
use crate::server::os;
use crate::server::session::Session;
use glommio::net::TcpStream;
use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Waker;
use std::time::{Duration, Instant};

/// A fresh reply buffer's capacity, and the largest one given back to the spares as it is
/// (a bigger one, grown by a large reply, is replaced by a fresh one).
pub(super) const REPLY_INITIAL_BYTES: usize = 64 * 1024;
pub(super) const REPLY_KEPT_BYTES_MAX: usize = 2 * WRITE_FLUSH_BYTES;
/// A packet list that grew past this many entries (a read of tiny packets) is replaced.
pub(super) const PACKETS_KEPT_MAX: usize = 4096;
/// Spare buffer sets each core keeps for connections that get work (the rest are freed):
/// enough for the connections busy at once under load (a set freed and made again costs an
/// allocation and zeroing 64 KiB), 8 MiB at most.
pub(super) const SPARE_SETS_MAX: usize = 64;
/// Memory freed by closing connections after which the heap's free memory is returned to
/// the system, and how long after the close that crossed it.
pub(super) const TRIM_AFTER_FREED_BYTES: usize = 4 << 20;
pub(super) const TRIM_DELAY: Duration = Duration::from_millis(100);

/// What the client connections of every core hold, for `box.info` and the logs. Each core
/// writes only its own entry (no cache line is shared between writers).
pub struct NetStats {
    by_core: Box<[CoreNetStats]>,
}

#[derive(Default)]
#[repr(align(128))]
pub(super) struct CoreNetStats {
    connections: AtomicUsize,
    /// Buffers lent to connections, spare, partial packets kept while idle, and sessions'
    /// own buffers (as counted when each went idle).
    buffer_bytes: AtomicUsize,
    /// The fixed part of the open connections: their tasks (session included).
    task_bytes: AtomicUsize,
}

impl NetStats {
    pub fn new(core_count: usize) -> NetStats {
        NetStats {
            by_core: (0..core_count).map(|_| CoreNetStats::default()).collect(),
        }
    }

    /// Client connections open on every core.
    pub fn connections(&self) -> usize {
        let counts = self.by_core.iter();
        counts
            .map(|core| core.connections.load(Ordering::Relaxed))
            .sum()
    }

    /// Client connections open on each core, by core id.
    pub fn connections_by_core(&self) -> Vec<usize> {
        let counts = self.by_core.iter();
        counts
            .map(|core| core.connections.load(Ordering::Relaxed))
            .collect()
    }

    /// Bytes held for client connections on every core: their tasks and sessions, and the
    /// buffers lent to them or kept spare. Kernel socket buffers are not counted.
    pub fn memory_bytes(&self) -> usize {
        let cores = self.by_core.iter();
        cores
            .map(|core| {
                core.buffer_bytes.load(Ordering::Relaxed) + core.task_bytes.load(Ordering::Relaxed)
            })
            .sum()
    }
}

/// What one read needs and an idle connection does not: the read buffer (its length is
/// what may be read into, always initialised), the replies, the packets found.
pub(super) struct Buffers {
    pub(super) read: Vec<u8>,
    pub(super) out: Vec<u8>,
    pub(super) packets: Vec<Range<usize>>,
}

impl Buffers {
    pub(super) fn new() -> Buffers {
        Buffers {
            read: vec![0; READ_CHUNK_BYTES],
            out: Vec::with_capacity(REPLY_INITIAL_BYTES),
            packets: Vec::new(),
        }
    }

    pub(super) fn bytes(&self) -> usize {
        self.read.capacity()
            + self.out.capacity()
            + self.packets.capacity() * std::mem::size_of::<Range<usize>>()
    }
}

/// A connection's slot in its core's registry: how to wake it when the server stops, and
/// its socket, to cut it when it does not finish in time.
pub(super) struct Registered {
    waker: Option<Waker>,
    socket: RawFd,
    task_bytes: usize,
}

/// One core's client connections: the registry that lets shutdown reach them, the spare
/// buffers they borrow, and the counts published to [`NetStats`].
pub struct CoreConnections {
    core_id: usize,
    shared: std::sync::Arc<crate::server::Shared>,
    registered: RefCell<slab::Slab<Registered>>,
    spares: RefCell<Vec<Buffers>>,
    /// Bytes of every buffer set this core's connections hold or keep spare, and of their
    /// kept partial packets.
    buffer_bytes: Cell<usize>,
    task_bytes: Cell<usize>,
    stopping: Cell<bool>,
    pub(super) cut: Cell<bool>,
    /// Bytes freed by connections since free memory was last returned to the system.
    freed_since_trim: Cell<usize>,
    trim_scheduled: Cell<bool>,
}

impl CoreConnections {
    pub fn new(core_id: usize, shared: std::sync::Arc<crate::server::Shared>) -> Rc<Self> {
        Rc::new(CoreConnections {
            core_id,
            shared,
            registered: RefCell::default(),
            spares: RefCell::default(),
            buffer_bytes: Cell::new(0),
            task_bytes: Cell::new(0),
            stopping: Cell::new(false),
            cut: Cell::new(false),
            freed_since_trim: Cell::new(0),
            trim_scheduled: Cell::new(false),
        })
    }

    /// Serves a client connection on this core, in a task of its own; `on_close` runs when
    /// it has closed.
    pub fn spawn(
        self: &Rc<Self>,
        session: Session,
        stream: TcpStream,
        on_close: impl FnOnce() + 'static,
    ) {
        let slot = self.registered.borrow_mut().insert(Registered {
            waker: None,
            socket: stream.as_raw_fd(),
            task_bytes: 0,
        });
        self.publish_open();
        self.shared.metrics.cores()[self.core_id].count_connection_accepted();
        let connection = Connection {
            session,
            connections: self.clone(),
            slot,
            lent: None,
            partial: Vec::new(),
            filled: 0,
            session_counted_bytes: 0,
        };
        let serving = connection.serve(stream, on_close);
        // An idle connection costs mostly this future (the session and what is kept across
        // awaits), allocated once as its task: spawned as it is (a wrapping future would
        // hold a second copy of it).
        let task_bytes = std::mem::size_of_val(&serving);
        if let Some(registered) = self.registered.borrow_mut().get_mut(slot) {
            registered.task_bytes = task_bytes;
        }
        self.count_tasks(task_bytes, 0);
        glommio::spawn_local(serving).detach();
    }

    /// Connections open on this core.
    pub(super) fn open_count(&self) -> usize {
        self.registered.borrow().len()
    }

    /// Whether the server is shutting down: connections read no more requests.
    pub fn stopping(&self) -> bool {
        self.stopping.get()
    }

    /// Shutdown: every connection finishes the requests it has read, answers them and
    /// closes; one waiting for its client closes now.
    pub fn stop_reading(&self) {
        self.stopping.set(true);
        self.wake_all();
    }

    /// Wakes every connection waiting for its client, so that it looks at the shutdown.
    pub(super) fn wake_all(&self) {
        // Taken first: a woken task may run at once and register again.
        let wakers: Vec<Waker> = {
            let mut registered = self.registered.borrow_mut();
            registered
                .iter_mut()
                .filter_map(|(_, r)| r.waker.take())
                .collect()
        };
        for waker in wakers {
            waker.wake();
        }
    }

    /// Shutdown's grace period is over: every connection still open has its socket shut
    /// down, which ends its writes and reads with an error. Returns how many were cut.
    pub fn cut(&self) -> usize {
        self.cut.set(true);
        for (_, connection) in self.registered.borrow().iter() {
            // The descriptor is open: a connection leaves the registry as its task ends,
            // before its socket closes.
            os::sockets::shut_down(connection.socket);
        }
        self.wake_all();
        self.open_count()
    }

    pub(super) fn own_stats(&self) -> &CoreNetStats {
        &self.shared.net.by_core[self.core_id]
    }

    pub(super) fn publish_open(&self) {
        let open = self.registered.borrow().len();
        self.own_stats().connections.store(open, Ordering::Relaxed);
    }

    pub(super) fn count_tasks(&self, added: usize, removed: usize) {
        let bytes = self.task_bytes.get() + added - removed;
        self.task_bytes.set(bytes);
        self.own_stats().task_bytes.store(bytes, Ordering::Relaxed);
    }

    pub(super) fn count_buffers(&self, added: usize, removed: usize) {
        let bytes = self.buffer_bytes.get() + added - removed;
        self.buffer_bytes.set(bytes);
        self.own_stats()
            .buffer_bytes
            .store(bytes, Ordering::Relaxed);
    }

    pub(super) fn lend(&self) -> Buffers {
        if let Some(buffers) = self.spares.borrow_mut().pop() {
            return buffers;
        }
        let buffers = Buffers::new();
        self.count_buffers(buffers.bytes(), 0);
        buffers
    }

    /// Takes back a set lent with `counted_bytes`: kept spare if there is room (grown parts
    /// replaced by fresh ones), else freed.
    pub(super) fn give_back(self: &Rc<Self>, mut buffers: Buffers, counted_bytes: usize) {
        let mut spares = self.spares.borrow_mut();
        if spares.len() >= SPARE_SETS_MAX {
            drop(spares);
            drop(buffers);
            self.count_buffers(0, counted_bytes);
            self.freed(counted_bytes);
            return;
        }
        if buffers.read.len() != READ_CHUNK_BYTES {
            buffers.read = vec![0; READ_CHUNK_BYTES];
        }
        if buffers.out.capacity() > REPLY_KEPT_BYTES_MAX {
            buffers.out = Vec::with_capacity(REPLY_INITIAL_BYTES);
        }
        buffers.out.clear();
        if buffers.packets.capacity() > PACKETS_KEPT_MAX {
            buffers.packets = Vec::new();
        }
        buffers.packets.clear();
        let bytes = buffers.bytes();
        spares.push(buffers);
        drop(spares);
        self.count_buffers(bytes, counted_bytes);
    }

    pub(super) fn set_waker(&self, slot: usize, waker: &Waker) {
        let mut registered = self.registered.borrow_mut();
        if let Some(entry) = registered.get_mut(slot) {
            match &entry.waker {
                Some(known) if known.will_wake(waker) => {}
                _ => entry.waker = Some(waker.clone()),
            }
        }
    }

    /// Takes a closed connection out of the registry; it freed `freed_bytes` besides its task.
    pub(super) fn close(self: &Rc<Self>, slot: usize, freed_bytes: usize) {
        let closed = self.registered.borrow_mut().remove(slot);
        self.count_tasks(0, closed.task_bytes);
        self.publish_open();
        self.freed(closed.task_bytes + freed_bytes);
    }

    /// Counts memory freed by closed connections; after a few MiB (many closes, or large
    /// buffers) the process's free heap memory goes back to the system, a moment later.
    /// glibc's malloc keeps freed memory otherwise: `free` returns only the top of a heap,
    /// and not its last 64 MiB (the top pad `heap::grow_in_large_steps` sets).
    pub(super) fn freed(self: &Rc<Self>, bytes: usize) {
        let freed = self.freed_since_trim.get() + bytes;
        self.freed_since_trim.set(freed);
        if freed < TRIM_AFTER_FREED_BYTES || self.trim_scheduled.replace(true) {
            return;
        }
        let connections = self.clone();
        glommio::spawn_local(async move {
            // Closes come in bursts: let this one end first.
            glommio::timer::sleep(TRIM_DELAY).await;
            let freed_bytes = connections.freed_since_trim.replace(0);
            connections.trim_scheduled.set(false);
            let started = Instant::now();
            crate::server::os::heap::return_free_memory();
            tracing::debug!(
                shard = connections.core_id,
                freed_bytes,
                elapsed_us = started.elapsed().as_micros() as u64,
                "free heap memory returned to the system after connections closed"
            );
        })
        .detach();
    }
}
