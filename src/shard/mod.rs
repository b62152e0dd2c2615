//! One core's state: its slice of every space, and the execution of decoded requests
//! against it, with the reply written straight into the caller's buffer.
//!
//! Knows nothing of sockets, executors or other shards: routing and fan-out are the
//! server's. Storage errors become Tarantool error replies here, in one place
//! ([`errors`]), since this is where a request's outcome turns into bytes.

pub mod errors;
pub mod prefetch;

use crate::protocol::reply::{self, DataReply};
use crate::protocol::request::{Request, Select};
use crate::protocol::ErrorCode;
use crate::shard::prefetch::PointTarget;
use crate::storage::{Engine, Result, Tuple};
use crate::wal::{Commit, RowKind, WalError, WalWriter};
use bumpalo::Bump;
use std::cell::Cell;

pub struct Shard {
    pub id: usize,
    pub engine: Engine,
    /// The shard's write-ahead log; `None` with `wal_mode = "none"`.
    pub wal: Option<WalWriter>,
    /// The WAL commit of the last write `execute` made, for the caller to await before
    /// the reply leaves: a write is acknowledged only once its row is written.
    pending_commit: Option<Commit>,
    /// Reused buffer for the primary key a delete row carries.
    key_scratch: Vec<u8>,
    /// The fetch-ahead lookup of the request about to be executed, if the pipeline walked
    /// one (see [`Shard::set_fetched`]); `execute` takes it, so it never outlives its request.
    fetched: Option<PointTarget>,
    /// Scratch for the work of one batch or one merge (for example the streams of a
    /// fanned-out select). Whoever uses it resets it when done; nothing in it outlives a
    /// synchronous stretch of code, so no await ever sees it.
    pub arena: ShardArena,
}

/// The shard's bump arena, counting the allocations made in it: perf-simple-query reports
/// them per request (arena-allocs/op, the analogue of ScyllaDB's logallocs/op), so scratch
/// that grows more often than expected shows. bumpalo keeps only chunk bytes, so the count
/// is kept here, where every use of the arena goes through.
#[derive(Default)]
pub struct ShardArena {
    bump: Bump,
    allocations: Cell<u64>,
}

impl ShardArena {
    /// A growable byte buffer in the arena with room for `capacity` bytes.
    pub fn bytes_with_capacity(&self, capacity: usize) -> ArenaBytes<'_> {
        if capacity > 0 {
            self.allocations.set(self.allocations.get() + 1);
        }
        ArenaBytes {
            bytes: bumpalo::collections::Vec::with_capacity_in(capacity, &self.bump),
            allocations: &self.allocations,
        }
    }

    /// A vector with room for `capacity` items, allocated at once.
    pub fn vec_with_capacity<T>(&self, capacity: usize) -> bumpalo::collections::Vec<'_, T> {
        if capacity > 0 && std::mem::size_of::<T>() > 0 {
            self.allocations.set(self.allocations.get() + 1);
        }
        bumpalo::collections::Vec::with_capacity_in(capacity, &self.bump)
    }

    /// Frees everything allocated since the last reset (the chunks stay for reuse).
    pub fn reset(&mut self) {
        self.bump.reset();
    }

    /// Allocations made in the arena since the shard started.
    pub fn allocations(&self) -> u64 {
        self.allocations.get()
    }
}

/// A byte buffer in a [`ShardArena`] that counts each time it (re)allocates.
pub struct ArenaBytes<'a> {
    bytes: bumpalo::collections::Vec<'a, u8>,
    allocations: &'a Cell<u64>,
}

impl std::ops::Deref for ArenaBytes<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// What a write changed, as the WAL records it: a whole new tuple, or a deleted tuple
/// (logged by its primary key).
#[derive(Debug, Clone)]
pub enum Written {
    Stored(Tuple),
    Deleted(Tuple),
}

impl Written {
    /// The tuple stored or deleted.
    pub fn tuple(&self) -> &Tuple {
        match self {
            Written::Stored(tuple) | Written::Deleted(tuple) => tuple,
        }
    }
}

/// Where [`Shard::scan`] writes its entries: a heap buffer or the shard's arena.
pub trait ScanSink {
    fn put(&mut self, bytes: &[u8]);
}

impl ScanSink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl ScanSink for ArenaBytes<'_> {
    fn put(&mut self, bytes: &[u8]) {
        if self.bytes.len() + bytes.len() > self.bytes.capacity() {
            self.allocations.set(self.allocations.get() + 1);
        }
        self.bytes.extend_from_slice(bytes);
    }
}

impl Shard {
    pub fn new(id: usize, engine: Engine, wal: Option<WalWriter>) -> Shard {
        Shard {
            id,
            engine,
            wal,
            pending_commit: None,
            key_scratch: Vec::new(),
            fetched: None,
            arena: ShardArena::default(),
        }
    }

    /// Where the lookup of a point request will search, when it searches an index keyed by
    /// one unsigned part with an unsigned key: what [`prefetch::LookupPipeline`] fetches
    /// ahead. `None` for every other request.
    #[inline]
    pub fn point_target(&self, request: &Request<'_>) -> Option<PointTarget> {
        let single_uint = crate::storage::msgpack::single_uint_array;
        let (space_id, index_id, key) = match request {
            Request::Select(r) => (r.space_id, r.index_id, single_uint(r.key)?),
            Request::Update(r) => (r.space_id, r.index_id, single_uint(r.key)?),
            Request::Delete(r) => (r.space_id, r.index_id, single_uint(r.key)?),
            Request::Insert(r) | Request::Replace(r) => {
                let space = self.engine.find_space(r.space_id)?;
                (r.space_id, 0, space.leading_primary_key(r.tuple)?)
            }
            Request::Upsert(r) => {
                let space = self.engine.find_space(r.space_id)?;
                (r.space_id, 0, space.leading_primary_key(r.tuple)?)
            }
            _ => return None,
        };
        Some(PointTarget::new(space_id, index_id, key))
    }

    /// Starts fetching `target`'s lookup ahead; no effect on any result.
    #[inline]
    pub fn prefetch_start(&self, target: &mut PointTarget) {
        target.cursor = self
            .engine
            .find_space(target.space_id)
            .and_then(|space| space.prefetch_start(target.index_id, target.key));
    }

    /// Takes `target`'s lookup one load further; no effect on any result.
    #[inline]
    pub fn prefetch_step(&self, target: &mut PointTarget) {
        // A finished walk keeps its cursor: where it found the key, the request reads the
        // entry there (`set_fetched`).
        let Some(cursor) = target.cursor.as_mut().filter(|cursor| !cursor.is_done()) else {
            return;
        };
        match self.engine.find_space(target.space_id) {
            Some(space) => space.prefetch_step(target.index_id, target.key, cursor),
            None => target.cursor = None,
        }
    }

    /// Hands the next [`Shard::execute`] the fetch-ahead lookup of its request: a point
    /// select of that key then reads its entry where the walk found it (checked still
    /// there) instead of searching from the root. Any other request ignores it.
    #[inline]
    pub fn set_fetched(&mut self, lookup: Option<PointTarget>) {
        self.fetched = lookup;
    }

    /// The commit of the last write, if it must be awaited before replying.
    pub fn take_commit(&mut self) -> Option<Commit> {
        self.pending_commit.take()
    }

    /// Executes a data request (select or write) on this shard's slice and appends the
    /// whole reply packet, success or error, to `out`. A write that needs the WAL leaves
    /// its commit in [`Shard::take_commit`]. Other request types are the server's.
    pub fn execute(
        &mut self,
        sync: u64,
        schema_version: u64,
        request: &Request<'_>,
        out: &mut Vec<u8>,
    ) {
        let start = out.len();
        debug_assert!(self.pending_commit.is_none(), "a commit was not awaited");
        // Taken whatever the request: a lookup handed over is for this request only.
        let fetched = self.fetched.take();
        // What each write answers with is the tuple it logs (UPSERT: nothing), so one
        // tuple handle serves both.
        let (space_id, written, answers_with_written) = match request {
            Request::Select(select) => {
                if let Err(error) = self.select(select, fetched, sync, schema_version, out) {
                    out.truncate(start);
                    errors::encode_storage_error(out, sync, schema_version, &error);
                }
                return;
            }
            Request::Insert(insert) => (
                insert.space_id,
                self.engine
                    .space_mut(insert.space_id)
                    .and_then(|s| s.insert(insert.tuple))
                    .map(|t| Some(Written::Stored(t))),
                true,
            ),
            Request::Replace(replace) => (
                replace.space_id,
                self.engine
                    .space_mut(replace.space_id)
                    .and_then(|s| s.replace(replace.tuple))
                    .map(|t| Some(Written::Stored(t))),
                true,
            ),
            Request::Update(update) => (
                update.space_id,
                self.engine
                    .space_mut(update.space_id)
                    .and_then(|s| {
                        s.update(update.index_id, update.key, update.ops, update.index_base)
                    })
                    .map(|t| t.map(Written::Stored)),
                true,
            ),
            Request::Delete(delete) => (
                delete.space_id,
                self.engine
                    .space_mut(delete.space_id)
                    .and_then(|s| s.delete(delete.index_id, delete.key))
                    .map(|t| t.map(Written::Deleted)),
                true,
            ),
            Request::Upsert(upsert) => (
                upsert.space_id,
                self.engine
                    .space_mut(upsert.space_id)
                    .and_then(|s| s.upsert_stored(upsert.tuple, upsert.ops, upsert.index_base))
                    .map(|t| t.map(Written::Stored)),
                // UPSERT always answers with no tuple.
                false,
            ),
            _ => {
                debug_assert!(false, "not a data request: {request:?}");
                return;
            }
        };
        let written = match written {
            Ok(written) => written,
            Err(error) => {
                errors::encode_storage_error(out, sync, schema_version, &error);
                return;
            }
        };
        if let Some(written) = &written {
            if let Err(error) = self.log(space_id, written) {
                tracing::error!(shard = self.id, %error, "WAL write refused; the request fails");
                reply::encode_error(
                    out,
                    sync,
                    schema_version,
                    ErrorCode::ER_WAL_IO,
                    "Failed to write to disk",
                );
                return;
            }
        }
        let mut data = DataReply::begin(out, sync, schema_version);
        if let (Some(written), true) = (&written, answers_with_written) {
            data.push_raw(out, written.tuple().data());
        }
        data.finish(out);
    }

    /// Appends the change to the WAL (if there is one) and keeps its commit for
    /// [`Shard::take_commit`]. Rows are durable in LSN order, so after several calls the
    /// kept (last) commit covers every row logged since the last take. For writers that
    /// change the engine themselves (crud) and must log exactly what `execute` would.
    pub fn log(&mut self, space_id: u32, written: &Written) -> std::result::Result<(), WalError> {
        let Some(wal) = &self.wal else {
            return Ok(());
        };
        let commit = match written {
            Written::Stored(tuple) => wal.append(RowKind::Replace, space_id, tuple.data())?,
            Written::Deleted(tuple) => {
                self.key_scratch.clear();
                if let Ok(space) = self.engine.space(space_id) {
                    space.write_primary_key(tuple, &mut self.key_scratch);
                }
                wal.append(RowKind::Delete, space_id, &self.key_scratch)?
            }
        };
        self.pending_commit = Some(commit);
        Ok(())
    }

    fn select(
        &self,
        select: &Select<'_>,
        fetched: Option<PointTarget>,
        sync: u64,
        schema_version: u64,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let space = self.engine.space(select.space_id)?;
        let fetched = fetched
            .as_ref()
            .filter(|target| {
                target.space_id == select.space_id && target.index_id == select.index_id
            })
            .and_then(|target| Some((target.key, target.cursor.as_ref()?)));
        let entries =
            space.select_fetched(select.index_id, select.iterator, select.key, fetched)?;
        let mut data = DataReply::begin(out, sync, schema_version);
        for (_, tuple) in entries
            .skip(select.offset as usize)
            .take(select.limit as usize)
        {
            data.push_raw(out, tuple.data());
        }
        data.finish(out);
        Ok(())
    }

    /// The part of a fanned-out select this shard contributes: up to `limit` entries in
    /// index order, as `[key length u32 LE][key][tuple]`, for the accepting core to merge.
    pub fn scan(&self, select: &Select<'_>, limit: usize, out: &mut impl ScanSink) -> Result<()> {
        let space = self.engine.space(select.space_id)?;
        for (key, tuple) in space
            .select(select.index_id, select.iterator, select.key)?
            .take(limit)
        {
            let key = key.as_bytes();
            out.put(&(key.len() as u32).to_le_bytes());
            out.put(key);
            out.put(tuple.data());
        }
        Ok(())
    }

    /// Checks that [`Shard::scan`] of `select` would succeed, without walking anything.
    pub fn check_scan(&self, select: &Select<'_>) -> Result<()> {
        let space = self.engine.space(select.space_id)?;
        space.select(select.index_id, select.iterator, select.key)?;
        Ok(())
    }
}
