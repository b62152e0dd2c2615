//! One core's server context: its shard, the shared read-only state, its ends of the channel
//! mesh to the other cores, and the requests it is waiting on elsewhere.
//!
//! A request for another core's data travels as its IPROTO packet bytes inside a batch (see
//! [`batch`]); the owner serves it (`super::serve`) through the same `Shard::execute` and
//! answers with the encoded reply inside one reply batch, so a hop changes nothing in what
//! the client sees.
//! crud calls ride the same batches (`Kind::Crud*`): a point op as its CALL packet, a
//! `*_many` call's share as a crud ops payload, a fanned-out call's part as its CALL packet;
//! their writes are awaited in the WAL like any other before the reply batch leaves.
//!
//! Batching, per peer:
//!
//! * [`Core::queue`] appends a request to the peer's open batch and wakes the core's flusher
//!   task once (the first request of a batch). Every request queued before the flusher runs,
//!   that is during the rest of this reactor tick, joins the same batch.
//! * The flusher sends each open batch as one mesh message. The owner's receive loop (one
//!   task per peer) executes every request in the batch in order and answers with one reply
//!   batch, which the receive loop here spreads into the waiting sessions' inboxes.
//! * Batch buffers are recycled: a received batch's buffer goes to this core's spare pool
//!   and carries the next outgoing batch, so steady traffic allocates nothing.
//! * Sends never wait: a full channel puts the message on the peer's backlog, drained in
//!   order by one task, so two cores flooding each other cannot deadlock.
//!
//! Client connections ride the mesh too: a core that accepted a connection it should not
//! serve (see `server::listen`) hands its socket to the chosen core as an
//! [`Envelope::Connection`], which lands in that core's [`Core::next_handed_over`].
//!
//! Back of the envelope: a point request adds ~13 + packet bytes to a batch (a memcpy) and a
//! reply ~8 + reply bytes; the fixed costs (a task wake-up and a cross-thread notification,
//! a few µs) are paid per batch, so with tens of requests per tick they are ≪ 1 per request.

use crate::crud::CrudConfig;
use crate::placement::Catalog;
use crate::server::durability;
use crate::server::mesh::batch::{self, Kind};
use crate::server::mesh::inbox::Inbox;
use crate::server::{ddl, schema, schema_change};
use crate::server::{ServerError, Shared};
use crate::shard::{ScanPart, Shard};
use glommio::channels::channel_mesh::{Full, MeshBuilder, Receivers, Senders};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};

/// Messages in flight per direction between two cores before senders wait (on the backlog).
pub const MESH_CHANNEL_CAPACITY: usize = 1024;
/// An open batch past this size is sent at once rather than at the end of the tick.
const BATCH_FLUSH_BYTES: usize = 256 * 1024;
/// A fresh batch buffer's capacity.
const BATCH_INITIAL_BYTES: usize = 16 * 1024;
/// Spare batch buffers kept per core, and the largest one worth keeping.
const SPARE_BUFFERS_MAX: usize = 64;
const SPARE_BUFFER_BYTES_MAX: usize = 1024 * 1024;

/// What crosses between cores: a batch of requests, the batch of their replies, or a client
/// connection handed over to be served there.
pub enum Envelope {
    /// Requests routed to `owner` (by `placement::route` on the sending core), which asserts
    /// on arrival that it is that core.
    Requests {
        owner: usize,
        batch: Vec<u8>,
    },
    Replies(Vec<u8>),
    Connection(OwnedFd),
    /// A schema change every core makes (`server::ddl`): never inside a request batch.
    Schema(Arc<ddl::Round>),
}

/// Builds the mesh that [`Core::join`] joins on every core of a pool of `shard_count`.
pub fn mesh(shard_count: usize) -> MeshBuilder<Envelope, Full> {
    mesh_with_capacity(shard_count, MESH_CHANNEL_CAPACITY)
}

/// [`mesh`] with `capacity` messages per channel (tests use tiny ones to fill them).
pub fn mesh_with_capacity(shard_count: usize, capacity: usize) -> MeshBuilder<Envelope, Full> {
    assert!(shard_count >= 1 && capacity >= 1);
    MeshBuilder::full(shard_count, capacity)
}

/// Counters of cross-core traffic, for tests and benchmarks (tasks and messages per request).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MeshStats {
    /// Requests this core sent to other cores.
    pub requests_sent: u64,
    /// Request batches (mesh messages) this core sent.
    pub request_batches_sent: u64,
    /// Request batches this core received and answered (one reply batch each).
    pub request_batches_served: u64,
    /// Times the flusher task ran.
    pub flusher_runs: u64,
    /// Messages that found the channel full and went to the backlog.
    pub backlogged: u64,
}

/// One peer's outgoing side.
#[derive(Default)]
struct Outgoing {
    /// The batch being filled this tick; capacity 0 when none is open.
    open: Vec<u8>,
    /// Messages waiting for room in the channel, sent in order by one task.
    backlog: VecDeque<Envelope>,
    draining: bool,
}

/// Who waits for a ticket's reply: an inbox and its slot; a free entry (no inbox) holds the
/// next free ticket instead. Fields rather than an enum, so that taking and freeing a ticket
/// write an entry's two fields in place: building an enum value on the stack and copying it
/// in as one 16-byte move stalled on store forwarding, most of `Core::queue`'s time.
struct Waiter {
    inbox: Option<Rc<Inbox>>,
    /// The inbox's slot while waiting; the next free ticket while free.
    slot_or_next: u32,
}

const FREE_LIST_END: u32 = u32::MAX;

pub(super) struct Waiters {
    entries: Vec<Waiter>,
    free_head: u32,
}

impl Waiters {
    fn insert(&mut self, inbox: Rc<Inbox>, slot: u32) -> u32 {
        if self.free_head == FREE_LIST_END {
            let ticket = u32::try_from(self.entries.len()).expect("tickets under u32::MAX");
            assert!(ticket != FREE_LIST_END);
            self.entries.push(Waiter {
                inbox: Some(inbox),
                slot_or_next: slot,
            });
            return ticket;
        }
        let ticket = self.free_head;
        let entry = &mut self.entries[ticket as usize];
        assert!(entry.inbox.is_none(), "free list points at a busy ticket");
        self.free_head = entry.slot_or_next;
        entry.inbox = Some(inbox);
        entry.slot_or_next = slot;
        ticket
    }

    pub(super) fn remove(&mut self, ticket: u32) -> (Rc<Inbox>, u32) {
        let entry = &mut self.entries[ticket as usize];
        let Some(inbox) = entry.inbox.take() else {
            panic!("reply for ticket {ticket}, which nobody waits for");
        };
        let slot = entry.slot_or_next;
        entry.slot_or_next = self.free_head;
        self.free_head = ticket;
        (inbox, slot)
    }
}

pub struct Core {
    pub shard: RefCell<Shard>,
    /// This core's counters (`shared.metrics`' entry for it, kept at hand).
    pub metrics: Arc<crate::server::metrics::CoreMetrics>,
    pub shard_count: usize,
    pub shared: Arc<Shared>,
    /// What crud needs of the server, built once.
    pub crud: CrudConfig,
    /// The last LSN recovery found: a snapshot's when no write has moved it on.
    pub lsn_recovered: u64,
    /// Where each space's rows are: what routes every request. Replaced whole by a schema
    /// change (`server::ddl`), so a request holds the one it was routed by.
    catalog: RefCell<Rc<Catalog>>,
    /// What reply headers carry (see [`schema::SCHEMA_VERSION_BASE`]), and what a request's
    /// own is checked against.
    schema_version: Cell<u64>,
    id: usize,
    senders: Senders<Envelope>,
    outgoing: RefCell<Vec<Outgoing>>,
    pub(super) waiters: RefCell<Waiters>,
    spare_buffers: RefCell<Vec<Vec<u8>>>,
    flush_wanted: Cell<bool>,
    flusher: RefCell<Option<Waker>>,
    stats: Cell<MeshStats>,
    /// Connections other cores handed over, not yet taken by the accept loop.
    handed_over: RefCell<VecDeque<OwnedFd>>,
    handed_over_waiter: RefCell<Option<Waker>>,
}

impl Core {
    /// Joins the mesh (every core of the pool must), builds this core's shard with its share
    /// of the memory, and starts the tasks that serve the other cores. Call inside the
    /// core's glommio executor.
    pub async fn join(
        shared: Arc<Shared>,
        mesh: MeshBuilder<Envelope, Full>,
    ) -> Result<Rc<Core>, ServerError> {
        let shard_count = mesh.nr_peers();
        let (senders, receivers) = mesh
            .join()
            .await
            .map_err(|error| ServerError::Executors(format!("channel mesh: {error}")))?;
        let id = senders.peer_id();
        let memory_bytes = shared.config.memory_bytes / shard_count as u64;
        let mut engine =
            schema::build_engine_with(&shared.config, &shared.made_spaces, memory_bytes)?;
        // A space the config changes is recovered as its data was written, then changed.
        for change in &shared.schema_changes {
            match change.wanted {
                Some(_) => engine.redefine_space(change.recorded.clone())?,
                // Its rows are recovered into it, then dropped with it.
                None => engine.create_space(change.recorded.clone())?,
            }
        }
        // Every core recovers its own shard, so all shards recover in parallel.
        let fingerprint = shared.fingerprint;
        let recovered = durability::recover_shard(
            &shared.config,
            id,
            fingerprint,
            shared.schema_version,
            &mut engine,
        )?;
        schema_change::apply(&shared.schema_changes, id, &mut engine)?;
        // Recovery and the config's changes may have made, changed or dropped spaces.
        schema::refresh_system_spaces(&mut engine, &shared.config)?;
        let catalog = schema::catalog_of(&engine, &shared.config, shard_count);
        let lsn_next = recovered.lsn_next;
        let wal = durability::start_wal(&shared.config, id, fingerprint, lsn_next)?;
        let core = Rc::new(Core {
            shard: RefCell::new(Shard::new(id, engine, wal)),
            metrics: shared.metrics.core(id),
            shard_count,
            crud: CrudConfig::new(&shared.config, &shared.instance_uuid),
            lsn_recovered: lsn_next - 1,
            catalog: RefCell::new(Rc::new(catalog)),
            schema_version: Cell::new(schema::SCHEMA_VERSION_BASE + shared.schema_version),
            shared,
            id,
            senders,
            outgoing: RefCell::new((0..shard_count).map(|_| Outgoing::default()).collect()),
            waiters: RefCell::new(Waiters {
                entries: Vec::new(),
                free_head: FREE_LIST_END,
            }),
            spare_buffers: RefCell::default(),
            flush_wanted: Cell::new(false),
            flusher: RefCell::default(),
            stats: Cell::default(),
            handed_over: RefCell::default(),
            handed_over_waiter: RefCell::default(),
        });
        durability::roll_back_refused_writes(&core);
        crate::server::replication::synchro::start(&core);
        if let Some(wal) = &core.shard.borrow().wal {
            wal.publish_durable_to(core.shared.wal_written[id].clone());
        }
        core.start_tasks(receivers);
        let checkpoint =
            durability::checkpoint_loop(core.clone(), core.lsn_recovered, recovered.damage_skipped);
        glommio::spawn_local(checkpoint).detach();
        Ok(core)
    }

    pub fn id(&self) -> usize {
        self.id
    }

    /// The catalog requests are routed by now.
    #[inline]
    pub fn catalog(&self) -> Rc<Catalog> {
        self.catalog.borrow().clone()
    }

    /// The schema version replies carry now.
    #[inline]
    pub fn schema_version(&self) -> u64 {
        self.schema_version.get()
    }

    /// After a schema change: what requests are routed by from now on.
    pub(in crate::server) fn set_catalog(&self, catalog: Catalog) {
        *self.catalog.borrow_mut() = Rc::new(catalog);
    }

    /// Once a schema change is committed: the version replies carry from now on.
    pub(in crate::server) fn set_schema_version(&self, version: u64) {
        self.schema_version.set(version);
    }

    /// Sends a schema change's round to `peer`, which follows it (`ddl::follow`).
    pub(in crate::server) fn send_schema_round(
        self: &Rc<Core>,
        peer: usize,
        round: Arc<ddl::Round>,
    ) {
        self.send(peer, Envelope::Schema(round));
    }

    pub fn stats(&self) -> MeshStats {
        self.stats.get()
    }

    pub(super) fn count(&self, update: impl FnOnce(&mut MeshStats)) {
        let mut stats = self.stats.get();
        update(&mut stats);
        self.stats.set(stats);
    }

    fn start_tasks(self: &Rc<Core>, receivers: Receivers<Envelope>) {
        if self.shard_count == 1 {
            return;
        }
        let receivers = Rc::new(receivers);
        for peer in (0..self.shard_count).filter(|&peer| peer != self.id) {
            let core = self.clone();
            let receivers = receivers.clone();
            glommio::spawn_local(async move {
                while let Ok(Some(envelope)) = receivers.recv_from(peer).await {
                    match envelope {
                        Envelope::Requests { owner, batch } => {
                            assert_eq!(owner, core.id, "a batch for core {owner} arrived here");
                            core.serve_batch(peer, batch)
                        }
                        Envelope::Replies(batch) => core.deliver_replies(batch),
                        Envelope::Connection(socket) => core.receive_connection(socket),
                        Envelope::Schema(round) => {
                            glommio::spawn_local(ddl::follow(core.clone(), round)).detach();
                        }
                    }
                }
            })
            .detach();
        }
        let core = self.clone();
        glommio::spawn_local(async move {
            loop {
                core.flush_requested().await;
                core.flush_all();
            }
        })
        .detach();
    }

    /// Hands a client connection's socket to `peer`, which serves it from its
    /// [`Core::next_handed_over`]. Never waits. A peer that has stopped (the server is
    /// shutting down) drops it, which closes the connection.
    pub fn hand_over(self: &Rc<Core>, peer: usize, socket: OwnedFd) {
        assert!(peer != self.id && peer < self.shard_count, "peer {peer}");
        self.send(peer, Envelope::Connection(socket));
    }

    /// The next connection another core handed over to this one.
    pub fn next_handed_over(&self) -> impl std::future::Future<Output = OwnedFd> + '_ {
        std::future::poll_fn(move |cx| {
            if let Some(socket) = self.handed_over.borrow_mut().pop_front() {
                return Poll::Ready(socket);
            }
            *self.handed_over_waiter.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
    }

    fn receive_connection(&self, socket: OwnedFd) {
        self.handed_over.borrow_mut().push_back(socket);
        if let Some(waker) = self.handed_over_waiter.borrow_mut().take() {
            waker.wake();
        }
    }

    /// Queues a request for `peer` in this tick's batch; its reply will land in `inbox` at
    /// the returned slot. Never waits.
    pub fn queue(
        self: &Rc<Core>,
        peer: usize,
        kind: Kind,
        limit: u32,
        packet: &[u8],
        inbox: &Rc<Inbox>,
    ) -> u32 {
        self.queue_entry(peer, inbox, |batch, ticket| {
            batch::push_request(batch, kind, ticket, limit, packet)
        })
    }

    /// [`Core::queue`] of the packet `write_packet` appends, encoded straight into the
    /// batch (a crud payload).
    pub fn queue_with(
        self: &Rc<Core>,
        peer: usize,
        kind: Kind,
        inbox: &Rc<Inbox>,
        write_packet: impl FnOnce(&mut Vec<u8>),
    ) -> u32 {
        self.queue_entry(peer, inbox, |batch, ticket| {
            batch::push_request_with(batch, kind, ticket, 0, write_packet)
        })
    }

    /// Queues `part` of a select every core scans for core `peer` (see
    /// [`batch::push_scan`]); returns its reply's slot in `inbox`.
    pub fn queue_scan(self: &Rc<Core>, peer: usize, part: &ScanPart<'_>, inbox: &Rc<Inbox>) -> u32 {
        self.queue_entry(peer, inbox, |batch, ticket| {
            batch::push_scan(batch, ticket, part)
        })
    }

    /// Reserves the reply's slot and ticket, and has `push` append the entry for that ticket.
    #[inline(always)]
    fn queue_entry(
        self: &Rc<Core>,
        peer: usize,
        inbox: &Rc<Inbox>,
        push: impl FnOnce(&mut Vec<u8>, u32),
    ) -> u32 {
        assert!(peer != self.id && peer < self.shard_count, "peer {peer}");
        let slot = inbox.reserve();
        let ticket = self.waiters.borrow_mut().insert(inbox.clone(), slot);
        let full = {
            let mut outgoing = self.outgoing.borrow_mut();
            let open = &mut outgoing[peer].open;
            if open.capacity() == 0 {
                *open = self.take_buffer();
            }
            push(open, ticket);
            open.len() >= BATCH_FLUSH_BYTES
        };
        self.count(|stats| stats.requests_sent += 1);
        if full {
            self.flush_peer(peer);
        } else if !self.flush_wanted.replace(true) {
            if let Some(waker) = self.flusher.borrow_mut().take() {
                waker.wake();
            }
        }
        slot
    }

    fn flush_requested(&self) -> impl std::future::Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            if self.flush_wanted.get() {
                return Poll::Ready(());
            }
            *self.flusher.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
    }

    fn flush_all(self: &Rc<Core>) {
        self.flush_wanted.set(false);
        self.count(|stats| stats.flusher_runs += 1);
        for peer in 0..self.shard_count {
            self.flush_peer(peer);
        }
    }

    fn flush_peer(self: &Rc<Core>, peer: usize) {
        let open = std::mem::take(&mut self.outgoing.borrow_mut()[peer].open);
        if open.is_empty() {
            self.recycle(open);
            return;
        }
        self.count(|stats| stats.request_batches_sent += 1);
        self.send(
            peer,
            Envelope::Requests {
                owner: peer,
                batch: open,
            },
        );
    }

    /// Sends without waiting: a full channel puts the message on the peer's backlog, which
    /// one task drains in order; so the receive loops never block and two cores answering
    /// each other can never deadlock on full channels.
    pub(super) fn send(self: &Rc<Core>, peer: usize, envelope: Envelope) {
        {
            let mut outgoing = self.outgoing.borrow_mut();
            if outgoing[peer].draining {
                outgoing[peer].backlog.push_back(envelope);
                return;
            }
        }
        // No borrow is held across calls into glommio, which may run other code of ours.
        let envelope = match self.senders.try_send_to(peer, envelope) {
            Ok(()) => return,
            Err(glommio::GlommioError::WouldBlock(glommio::ResourceType::Channel(envelope))) => {
                envelope
            }
            Err(error) => {
                tracing::debug!(peer, %error, "message to another core lost");
                return;
            }
        };
        {
            let mut outgoing = self.outgoing.borrow_mut();
            outgoing[peer].backlog.push_back(envelope);
            outgoing[peer].draining = true;
        }
        self.count(|stats| stats.backlogged += 1);
        let core = self.clone();
        glommio::spawn_local(async move { core.drain_backlog(peer).await }).detach();
    }

    async fn drain_backlog(&self, peer: usize) {
        loop {
            let next = {
                let mut outgoing = self.outgoing.borrow_mut();
                let out = &mut outgoing[peer];
                match out.backlog.pop_front() {
                    Some(envelope) => envelope,
                    None => {
                        out.draining = false;
                        return;
                    }
                }
            };
            if let Err(error) = self.senders.send_to(peer, next).await {
                tracing::debug!(peer, %error, "message to another core lost");
            }
        }
    }

    pub(super) fn take_buffer(&self) -> Vec<u8> {
        self.spare_buffers
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BATCH_INITIAL_BYTES))
    }

    pub(super) fn recycle(&self, mut buffer: Vec<u8>) {
        let mut spare = self.spare_buffers.borrow_mut();
        if buffer.capacity() > 0
            && buffer.capacity() <= SPARE_BUFFER_BYTES_MAX
            && spare.len() < SPARE_BUFFERS_MAX
        {
            buffer.clear();
            spare.push(buffer);
        }
    }
}
