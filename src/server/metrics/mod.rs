//! The numbers the Prometheus endpoint shows, kept so that the request path pays one plain
//! store per count and shares no cache line with another core (see `docs/metrics.md`).
//!
//! Owns each core's counters ([`CoreMetrics`]), what each core publishes on a timer of
//! its own ([`publish_loop`]: what only its shard's engine, WAL writer and mesh know), the
//! text of a scrape ([`report`], written with [`exposition`]) and the HTTP thread that
//! serves it ([`endpoint`]). Must not know how requests are executed or answered: callers
//! count, this module adds up.
//!
//! Who writes what:
//!
//! * Connections and sessions count on their own core's [`CoreMetrics`] as requests pass
//!   (requests, operations by type, bytes in and out, connections accepted): one relaxed
//!   load and store of an atomic only that core writes; no read-modify-write instruction,
//!   no lock, no line another core writes. The `CoreMetrics` of two cores never share a
//!   cache line (128-byte aligned: two lines, for the adjacent-line prefetcher).
//! * Every [`PUBLISH_INTERVAL`] each core copies what its engine (space lengths and
//!   sizes, memory), WAL writer and mesh know into atomics of its own, and its list of
//!   spaces into a mutex the HTTP thread only clones an `Arc` out of: never on the
//!   request path.
//! * The HTTP thread reads everything with relaxed loads and sums the cores: a scrape
//!   sees each counter as of some moment in the last interval, never a torn value.
//!
//! Back of the envelope: a request adds about four stores to lines its core owns (ops,
//! requests and bytes counted per read, not per request); at 1 M requests a second per
//! core that is well under 1 ns of a request's ~1 µs.

pub mod endpoint;
pub mod exposition;
pub mod report;

use crate::server::mesh::core::Core;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often each core publishes what its engine, WAL and mesh know.
pub const PUBLISH_INTERVAL: Duration = Duration::from_secs(1);

/// The operations `box.stat()` names in Tarantool 2.6, in its spelling (lower case, as
/// the metrics module's `operation` label has them), with the IPROTO request types that
/// count as each. `ERROR` is not counted (see `docs/metrics.md`), so it is not shown.
pub const OPERATIONS: [(&str, &[u64]); 11] = [
    ("select", &[1]),
    ("insert", &[2]),
    ("replace", &[3]),
    ("update", &[4]),
    ("delete", &[5]),
    ("call", &[6, 10]),
    ("auth", &[7]),
    ("eval", &[8]),
    ("upsert", &[9]),
    ("execute", &[11]),
    ("prepare", &[13]),
];

/// Slots of [`CoreMetrics::operations`]: one per entry of [`OPERATIONS`], and slot 0 for
/// the requests that are no operation (ping, id, nop, ...), counted and not shown.
const OPERATION_SLOTS: usize = OPERATIONS.len() + 1;
/// The request types below this have a slot by [`SLOT_OF_TYPE`]; the others are slot 0.
const TYPES_WITH_SLOT: usize = 16;
const SLOT_OF_TYPE: [u8; TYPES_WITH_SLOT] = slot_of_type();

const fn slot_of_type() -> [u8; TYPES_WITH_SLOT] {
    let mut slots = [0u8; TYPES_WITH_SLOT];
    let mut operation = 0;
    while operation < OPERATIONS.len() {
        let types = OPERATIONS[operation].1;
        let mut at = 0;
        while at < types.len() {
            slots[types[at] as usize] = operation as u8 + 1;
            at += 1;
        }
        operation += 1;
    }
    slots
}

/// Adds `amount` to a counter only the calling core writes: a load and a store, not a
/// locked read-modify-write (the exporter's loads see the old or the new value).
#[inline(always)]
fn bump(counter: &AtomicU64, amount: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(amount),
        Ordering::Relaxed,
    );
}

/// One core's numbers. Written only by that core's thread; read by the HTTP thread.
#[derive(Default)]
#[repr(align(128))]
pub struct CoreMetrics {
    /// Counted on the request path.
    live: LiveCounters,
    /// Copied from the engine, WAL writer and mesh every [`PUBLISH_INTERVAL`].
    published: PublishedCounters,
    /// This core's share of every user space, replaced whole at each publication.
    spaces: Mutex<Arc<[SpaceSample]>>,
}

#[derive(Default)]
struct LiveCounters {
    /// IPROTO packets read from clients (Tarantool's `box.stat.net().REQUESTS.total`).
    requests: AtomicU64,
    operations: [AtomicU64; OPERATION_SLOTS],
    bytes_received: AtomicU64,
    bytes_sent: AtomicU64,
    connections_accepted: AtomicU64,
}

#[derive(Default)]
struct PublishedCounters {
    wal_rows: AtomicU64,
    wal_flushes: AtomicU64,
    wal_syncs: AtomicU64,
    wal_bytes: AtomicU64,
    wal_flushes_failed: AtomicU64,
    hops: AtomicU64,
    hop_batches_sent: AtomicU64,
    hop_batches_served: AtomicU64,
    hops_backlogged: AtomicU64,
    memory_data_bytes: AtomicU64,
    memory_index_bytes: AtomicU64,
    quota_used_bytes: AtomicU64,
    /// Publications so far (0: nothing published yet).
    publications: AtomicU64,
}

/// One space's numbers on one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceSample {
    pub name: Arc<str>,
    pub len: u64,
    /// The bytes its tuples hold (slab pages and large tuples' allocations).
    pub tuple_bytes: u64,
    /// `(index name, bytes)` for every index.
    pub index_bytes: Vec<(Arc<str>, u64)>,
}

impl CoreMetrics {
    /// Counts one request of IPROTO type `request_type` (a session calls it once a packet
    /// has decoded).
    #[inline(always)]
    pub fn count_request_type(&self, request_type: u64) {
        let slot = SLOT_OF_TYPE
            .get(request_type as usize)
            .copied()
            .unwrap_or(0);
        bump(&self.live.operations[usize::from(slot)], 1);
    }

    /// Counts `packets` requests read from a client.
    #[inline(always)]
    pub fn count_requests(&self, packets: usize) {
        bump(&self.live.requests, packets as u64);
    }

    #[inline(always)]
    pub fn count_received(&self, bytes: usize) {
        bump(&self.live.bytes_received, bytes as u64);
    }

    #[inline(always)]
    pub fn count_sent(&self, bytes: usize) {
        bump(&self.live.bytes_sent, bytes as u64);
    }

    pub fn count_connection_accepted(&self) {
        bump(&self.live.connections_accepted, 1);
    }

    /// This core's share of the user spaces, as last published.
    pub fn spaces(&self) -> Arc<[SpaceSample]> {
        let spaces = self.spaces.lock();
        spaces
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// Every core's [`CoreMetrics`], by core id.
pub struct Metrics {
    by_core: Vec<Arc<CoreMetrics>>,
}

impl Metrics {
    pub fn new(core_count: usize) -> Metrics {
        Metrics {
            by_core: (0..core_count).map(|_| Arc::default()).collect(),
        }
    }

    /// Core `id`'s counters, for that core to keep.
    pub fn core(&self, id: usize) -> Arc<CoreMetrics> {
        self.by_core[id].clone()
    }

    pub fn cores(&self) -> &[Arc<CoreMetrics>] {
        &self.by_core
    }
}

/// Publishes what `core`'s engine, WAL writer and mesh know into its [`CoreMetrics`], now
/// and every [`PUBLISH_INTERVAL`], for as long as the core runs.
pub async fn publish_loop(core: Rc<Core>) {
    loop {
        publish(&core);
        glommio::timer::sleep(PUBLISH_INTERVAL).await;
    }
}

/// One publication of `core`'s numbers.
pub fn publish(core: &Core) {
    let metrics = &core.metrics;
    let published = &metrics.published;
    let store = |counter: &AtomicU64, value: u64| counter.store(value, Ordering::Relaxed);
    let mesh = core.stats();
    store(&published.hops, mesh.requests_sent);
    store(&published.hop_batches_sent, mesh.request_batches_sent);
    store(&published.hop_batches_served, mesh.request_batches_served);
    store(&published.hops_backlogged, mesh.backlogged);
    // A task that holds the shard across an await (none should) skips this publication
    // rather than panicking the core.
    let Ok(shard) = core.shard.try_borrow() else {
        return;
    };
    if let Some(wal) = &shard.wal {
        let wal = wal.stats();
        store(&published.wal_rows, wal.rows_appended);
        store(&published.wal_flushes, wal.flushes);
        store(&published.wal_syncs, wal.syncs);
        store(&published.wal_bytes, wal.bytes_written);
        store(&published.wal_flushes_failed, wal.flushes_failed);
    }
    let spaces = space_samples(&shard.engine);
    let data_bytes = spaces.iter().map(|space| space.tuple_bytes).sum();
    let index_bytes = spaces
        .iter()
        .flat_map(|space| space.index_bytes.iter().map(|(_, bytes)| bytes))
        .sum();
    store(&published.memory_data_bytes, data_bytes);
    store(&published.memory_index_bytes, index_bytes);
    store(
        &published.quota_used_bytes,
        shard.engine.quota().used_bytes(),
    );
    drop(shard);
    let spaces: Arc<[SpaceSample]> = spaces.into();
    *metrics
        .spaces
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = spaces;
    bump(&published.publications, 1);
}

/// The user spaces of an engine as the metrics module shows them: not the system ones (id
/// up to 511, or a name starting with `_`).
fn space_samples(engine: &crate::storage::Engine) -> Vec<SpaceSample> {
    const SYSTEM_ID_MAX: u32 = 511;
    let user_spaces = engine
        .spaces()
        .iter()
        .filter(|space| space.id > SYSTEM_ID_MAX && !space.name.starts_with('_'));
    user_spaces
        .map(|space| SpaceSample {
            name: Arc::from(&*space.name),
            len: space.len() as u64,
            tuple_bytes: space.slab().held_bytes() as u64,
            index_bytes: space
                .indexes()
                .iter()
                .map(|index| (Arc::from(&*index.def.name), index.allocated_bytes() as u64))
                .collect(),
        })
        .collect()
}
