//! One core's state: its slice of every space, and the execution of decoded requests
//! against it, with the reply written straight into the caller's buffer.
//!
//! Knows nothing of sockets, executors or other shards: routing and fan-out are the
//! server's. Storage errors become Tarantool error replies here, in one place
//! ([`errors`]), since this is where a request's outcome turns into bytes.

pub mod errors;
pub mod prefetch;
pub mod undo;

use crate::protocol::reply::DataReply;
use crate::protocol::request::{Request, Select};
use crate::shard::prefetch::PointTarget;
use crate::shard::undo::UndoLog;
use crate::storage::index::IndexKey;
use crate::storage::tuple::TupleRef;
use crate::storage::{Change, Engine, Result, StorageError};
use crate::wal::{Commit, RowKind, WalError, WalWriter};
use std::cmp::Ordering;

pub struct Shard {
    pub id: usize,
    pub engine: Engine,
    /// The shard's write-ahead log; `None` with `wal_mode = "none"`.
    pub wal: Option<WalWriter>,
    /// The writes whose rows are not yet durable, for the rollback of a refused one.
    undo: UndoLog,
    /// Reused buffer for the primary key a delete row carries.
    key_scratch: Vec<u8>,
    /// Writes to `is_sync` spaces wait for a quorum (`replication_synchro_quorum` over 1 on
    /// the master of the current term, with a WAL): their rows are marked sync in the WAL
    /// writer. Shared by every core, set by the server when the instance starts, is promoted
    /// or is fenced; read (relaxed) by writes only.
    pub sync_writes: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// What one shard scans of a select every shard runs a part of: the select's range, and at
/// most `limit` entries of it (its offset plus its limit: the merge skips the offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanPart<'a> {
    pub space_id: u32,
    pub index_id: u32,
    /// The raw iterator number, checked by storage as a select's is.
    pub iterator: u32,
    /// The search key, a msgpack array.
    pub key: &'a [u8],
    pub limit: u32,
}

impl<'a> ScanPart<'a> {
    /// Each shard's part of `select`.
    pub fn of(select: &Select<'a>) -> ScanPart<'a> {
        ScanPart {
            space_id: select.space_id,
            index_id: select.index_id,
            iterator: select.iterator,
            key: select.key,
            limit: select.offset.saturating_add(select.limit),
        }
    }
}

/// Entries a scan walks ahead of the one it copies (see [`Shard::scan`]): enough to
/// overlap a tuple's miss with a few copies, few enough that the lines do not crowd out
/// each other.
const SCAN_AHEAD: usize = 4;

/// Appends one scan entry, `[key length u32 LE][key][tuple length u32 LE][tuple]`, with one
/// capacity check.
#[inline(always)]
fn put_scan_entry(out: &mut Vec<u8>, key: &[u8], key_is_head: bool, tuple: &[u8]) {
    out.reserve(8 + key.len() + tuple.len());
    let mut key_length = scan_length(key.len());
    if key_is_head {
        key_length = (u32::from_le_bytes(key_length) | SCAN_KEY_IS_HEAD).to_le_bytes();
    }
    out.extend_from_slice(&key_length);
    out.extend_from_slice(key);
    out.extend_from_slice(&scan_length(tuple.len()));
    out.extend_from_slice(tuple);
}

/// Set in a scan entry's key length when the key is only its first 16 bytes
/// ([`IndexKey::head`]): those order two entries where they differ, and where they tie the
/// merge compares the keys the tuples hold ([`Shard::compare_entry_keys`]).
pub const SCAN_KEY_IS_HEAD: u32 = 1 << 31;

/// A key's or a tuple's length in a scan entry.
#[inline]
fn scan_length(len: usize) -> [u8; 4] {
    u32::try_from(len)
        .expect("keys and tuples are bounded by the row limit, under 4 GiB")
        .to_le_bytes()
}

/// What the reply [`Shard::execute`] wrote waits on before it may leave. `#[must_use]`: the
/// compiler, not a convention, makes every caller see to the commit before it replies.
#[must_use = "a write's reply must wait for its commit"]
#[derive(Default)]
pub struct Executed {
    /// A write's WAL commit: the reply leaves once it is durable (a refusal replaces it
    /// with [`errors::encode_log_refused`]).
    pub commit: Option<Commit>,
    /// An UPDATE answered 94 because its new tuple has another primary key, which this
    /// shard does not hold. Tarantool answers 3 when another tuple holds that key; where
    /// the key belongs to another shard, only that shard can tell (the server asks it).
    pub moved_key: Option<MovedKey>,
}

impl Executed {
    /// What waits for `commit` only (if any): a write's reply.
    #[inline]
    pub fn waiting_for(commit: Option<Commit>) -> Executed {
        Executed {
            commit,
            moved_key: None,
        }
    }
}

/// See [`Executed::moved_key`].
#[derive(Debug)]
pub struct MovedKey {
    pub space_id: u32,
    /// The request's sync, for the reply that replaces the 94.
    pub sync: u64,
    /// The new tuple the update made (msgpack), which carries the new key.
    pub new_tuple: Box<[u8]>,
}

/// What a schema change does to one space (see [`Shard::change_schema`]).
#[derive(Debug, Clone)]
pub enum DefinitionChange {
    Create(crate::storage::SpaceDef),
    /// Its tuples kept, checked against the new definition and indexed by it.
    Redefine(crate::storage::SpaceDef),
    Drop(u32),
}

impl DefinitionChange {
    pub fn space_id(&self) -> u32 {
        match self {
            DefinitionChange::Create(def) | DefinitionChange::Redefine(def) => def.id,
            DefinitionChange::Drop(id) => *id,
        }
    }
}

/// Why [`Shard::change_schema`] did not make its change.
#[derive(Debug, thiserror::Error)]
pub enum SchemaChangeError {
    /// The data does not allow it; nothing changed.
    #[error("{0}")]
    Refused(StorageError),
    /// The log refused the schema row.
    #[error("the WAL refused the schema change: {0}")]
    NotLogged(WalError),
}

impl Shard {
    pub fn new(id: usize, engine: Engine, wal: Option<WalWriter>) -> Shard {
        Shard {
            id,
            engine,
            wal,
            undo: UndoLog::default(),
            key_scratch: Vec::new(),
            sync_writes: Default::default(),
        }
    }

    /// Makes a schema change on this shard, in one step of its thread: the engine's
    /// definition of space `change.space_id()`, then its schema row (`row_body`, an encoded
    /// [`crate::wal::format::SchemaRow`]) at the head of a batch of its own, with the fence
    /// up from it (see `docs/ddl.md`). Returns the row's commit (`None` without a WAL). A
    /// change the engine refuses (a tuple the new format refuses, a duplicate in a new
    /// unique index) changes and logs nothing; a log that refuses the row (it refuses every
    /// write then, until restart) leaves the engine changed, which no write can follow.
    pub fn change_schema(
        &mut self,
        change: DefinitionChange,
        row_body: &[u8],
    ) -> std::result::Result<Option<Commit>, SchemaChangeError> {
        let space_id = change.space_id();
        match change {
            DefinitionChange::Create(def) => self.engine.create_space(def),
            DefinitionChange::Redefine(def) => self.engine.redefine_space(def),
            DefinitionChange::Drop(id) => self.engine.drop_space(id),
        }
        .map_err(SchemaChangeError::Refused)?;
        let Some(wal) = &self.wal else {
            return Ok(None);
        };
        let commit = wal
            .append(RowKind::Schema, space_id, row_body)
            .map_err(SchemaChangeError::NotLogged)?;
        wal.fence(commit.lsn());
        Ok(Some(commit))
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
        // entry there (`execute`'s `fetched`).
        let Some(cursor) = target.cursor.as_mut().filter(|cursor| !cursor.is_done()) else {
            return;
        };
        match self.engine.find_space(target.space_id) {
            Some(space) => space.prefetch_step(target.index_id, target.key, cursor),
            None => target.cursor = None,
        }
    }

    /// Executes a data request (select or write) on this shard's slice and appends the
    /// whole reply packet, success or error, to `out`; returns what that reply waits on.
    /// `fetched` is the request's fetch-ahead lookup, if the pipeline walked one: a point
    /// select of that key then reads its entry where the walk found it (checked still
    /// there) instead of searching from the root; any other request ignores it. Other
    /// request types are the server's.
    pub fn execute(
        &mut self,
        sync: u64,
        schema_version: u64,
        request: &Request<'_>,
        fetched: Option<PointTarget>,
        out: &mut Vec<u8>,
    ) -> Executed {
        let start = out.len();
        // What each write answers with is the tuple it logs (UPSERT: nothing), so one
        // tuple handle serves both.
        let (space_id, change, answers_with_tuple) = match request {
            Request::Select(select) => {
                if let Err(error) = self.select(select, fetched, sync, schema_version, out) {
                    out.truncate(start);
                    errors::encode_storage_error(out, sync, schema_version, &error);
                }
                return Executed::default();
            }
            Request::Insert(insert) => (
                insert.space_id,
                self.engine
                    .space_mut(insert.space_id)
                    .and_then(|s| s.insert(insert.tuple)),
                true,
            ),
            Request::Replace(replace) => (
                replace.space_id,
                self.engine
                    .space_mut(replace.space_id)
                    .and_then(|s| s.replace(replace.tuple)),
                true,
            ),
            Request::Update(update) => (
                update.space_id,
                self.engine.space_mut(update.space_id).and_then(|s| {
                    s.update(update.index_id, update.key, update.ops, update.index_base)
                }),
                true,
            ),
            Request::Delete(delete) => (
                delete.space_id,
                self.engine
                    .space_mut(delete.space_id)
                    .and_then(|s| s.delete(delete.index_id, delete.key)),
                true,
            ),
            Request::Upsert(upsert) => (
                upsert.space_id,
                self.engine
                    .space_mut(upsert.space_id)
                    .and_then(|s| s.upsert_stored(upsert.tuple, upsert.ops, upsert.index_base)),
                // UPSERT always answers with no tuple.
                false,
            ),
            _ => {
                debug_assert!(false, "not a data request: {request:?}");
                return Executed::default();
            }
        };
        let change = match change {
            Ok(change) => change,
            Err(error) => {
                errors::encode_storage_error(out, sync, schema_version, &error);
                let moved_key = match error {
                    StorageError::CantUpdatePrimaryKey { new_tuple, .. } => Some(MovedKey {
                        space_id,
                        sync,
                        new_tuple,
                    }),
                    _ => None,
                };
                return Executed {
                    commit: None,
                    moved_key,
                };
            }
        };
        // The reply is written ahead of the log, from the change the log then keeps; if the
        // log refuses the row, the write is undone and the reply taken back.
        let mut data = DataReply::begin(out, sync, schema_version);
        if let (Some(tuple), true) = (change.tuple(), answers_with_tuple) {
            data.push_raw(out, tuple.data());
        }
        data.finish(out);
        match self.log(space_id, change) {
            Ok(commit) => Executed::waiting_for(commit),
            Err(error) => {
                out.truncate(start);
                errors::encode_log_refused(out, sync, schema_version, Some(&error));
                Executed::default()
            }
        }
    }

    /// Appends `change` to the WAL (if there is one) and returns its commit (`None` without
    /// a WAL, or when nothing changed), keeping its undo until the row is durable. Rows are
    /// durable in LSN order, so of several calls the last commit covers every row logged
    /// before it. A row the log refuses at once is undone here, before the error returns:
    /// the caller only answers it. For writers that change the engine themselves (crud) and
    /// must log exactly what `execute` would.
    #[inline]
    pub fn log(
        &mut self,
        space_id: u32,
        change: Change,
    ) -> std::result::Result<Option<Commit>, WalError> {
        self.append_to_log(space_id, change)
            .map_err(|(error, refused)| {
                // The latest write (nothing ran since it), so undoing it alone restores the
                // space; earlier writes still in flight keep their own fate.
                self.undo_refused(space_id, [refused]);
                error
            })
    }

    /// [`Shard::log`] of several changes made one after another, oldest first, returning
    /// the last commit (which covers them all); if the log refuses one, it and every change
    /// after it are undone, newest first (the ones before it were appended and share the
    /// fate of their flush).
    pub fn log_all(
        &mut self,
        space_id: u32,
        changes: impl IntoIterator<Item = Change>,
    ) -> std::result::Result<Option<Commit>, WalError> {
        let mut changes = changes.into_iter();
        let mut last = None;
        while let Some(change) = changes.next() {
            match self.append_to_log(space_id, change) {
                Ok(Some(commit)) => last = Some(commit),
                Ok(None) => {}
                Err((error, refused)) => {
                    let mut unlogged: Vec<Change> =
                        std::iter::once(refused).chain(changes).collect();
                    unlogged.reverse();
                    self.undo_refused(space_id, unlogged);
                    return Err(error);
                }
            }
        }
        Ok(last)
    }

    /// Appends `change`'s row and keeps its undo; on a refusal hands the change back, not
    /// undone (the caller knows what ran after it).
    #[inline]
    fn append_to_log(
        &mut self,
        space_id: u32,
        change: Change,
    ) -> std::result::Result<Option<Commit>, (WalError, Change)> {
        let Some(wal) = &self.wal else {
            if let Some(old) = change.old {
                self.engine.retire(old);
            }
            return Ok(None);
        };
        let appended = match (&change.new, &change.old) {
            (Some(new), _) => wal.append(RowKind::Replace, space_id, new.data()),
            (None, Some(deleted)) => {
                self.key_scratch.clear();
                if let Ok(space) = self.engine.space(space_id) {
                    space.write_primary_key(deleted, &mut self.key_scratch);
                }
                wal.append(RowKind::Delete, space_id, &self.key_scratch)
            }
            (None, None) => return Ok(None),
        };
        match appended {
            Ok(commit) => {
                self.undo
                    .release_durable(wal.lsn_settled_last(), &mut self.engine);
                let sync_writes = self.sync_writes.load(std::sync::atomic::Ordering::Relaxed);
                if sync_writes && self.engine.is_sync(space_id) {
                    wal.mark_sync(commit.lsn());
                }
                self.undo.push(commit.lsn(), space_id, change);
                Ok(Some(commit))
            }
            Err(error) => {
                // The log said why when it stopped (once, not once per write).
                tracing::debug!(shard = self.id, %error, "the WAL refused a write; it is undone");
                Err((error, change))
            }
        }
    }

    /// Undoes changes the log refused before they were kept, in the order given (newest
    /// first).
    fn undo_refused(&mut self, space_id: u32, newest_first: impl IntoIterator<Item = Change>) {
        let Ok(space) = self.engine.space_mut(space_id) else {
            return;
        };
        for change in newest_first {
            let undone = space.undo(change);
            debug_assert!(undone.is_ok(), "undo failed: {undone:?}");
        }
    }

    /// Lets go of every tuple the shard holds only in case a write is refused: the undo
    /// records of durable writes and the retired ring. Their slots (and the quota's bytes
    /// for them) come back now rather than over the next writes: for a quiet moment, and
    /// for tests that compare what a shard holds with a shard that never logged.
    pub fn release_settled_writes(&mut self) {
        if let Some(wal) = &self.wal {
            self.undo
                .release_all_durable(wal.lsn_settled_last(), &mut self.engine);
        }
        self.engine.free_retired();
    }

    /// Undoes every write whose row is not durable (LSN after `lsn_durable_last`), newest
    /// first: the log refused the flush that carried the oldest of them, and with it every
    /// row queued behind. Called by the WAL writer's failure path before any of those
    /// writers is answered.
    pub fn roll_back_after(&mut self, lsn_durable_last: u64) {
        let undone = self
            .undo
            .roll_back_after(lsn_durable_last, &mut self.engine);
        // The writer's error line (rate-limited) counts them; this one is per failure.
        tracing::debug!(
            shard = self.id,
            writes_undone = undone,
            lsn_durable_last,
            "a WAL write failed: every write not yet durable is rolled back and refused"
        );
    }

    /// Rolls back a synchronous row that timed out and every write logged after it (the
    /// WAL writer's rollback `rollback`, begun by the caller): undoes them in memory, newest
    /// first, and logs a compensating row for each, in that order, since their own rows are
    /// durable and may have reached replicas. Returns the commit of the compensating rows
    /// (`None` when there were none) and how many writes were undone.
    pub fn roll_back_sync(
        &mut self,
        rollback: &crate::wal::writer::SyncRollback,
    ) -> (std::result::Result<Option<Commit>, WalError>, usize) {
        use crate::shard::undo::Compensation;
        let Shard {
            engine,
            wal,
            undo,
            key_scratch,
            ..
        } = self;
        let Some(wal) = wal.as_ref() else {
            return (Ok(None), 0);
        };
        let mut refused = None;
        let mut logged = false;
        let undone = undo.roll_back_compensating(
            rollback.lsn_first,
            engine,
            key_scratch,
            |space_id, compensation| {
                let appended = match compensation {
                    Compensation::Replace(tuple) => wal.append(RowKind::Replace, space_id, tuple),
                    Compensation::Delete(key) => wal.append(RowKind::Delete, space_id, key),
                };
                match appended {
                    Ok(_) => logged = true,
                    Err(error) => {
                        refused.get_or_insert(error);
                    }
                }
            },
        );
        let outcome = match refused {
            Some(error) => Err(error),
            None => Ok(logged.then(|| wal.commit_appended())),
        };
        (outcome, undone)
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

    /// Objects allocated in this shard's tuple arena since it started (tuples, one per
    /// write that stores one): perf-simple-query's arena-allocs/op.
    pub fn arena_allocations(&self) -> u64 {
        self.engine.quota().arena().allocations()
    }

    /// How the entry keys of index `index_id` of space `space_id` taken from tuples `a`
    /// and `b` (msgpack) compare: the merge of a fan-out's parts asks where their heads
    /// tie. Tuples that do not give keys (an index dropped since the scan) compare as
    /// bytes, so the merge's order is still total.
    pub fn compare_entry_keys(&self, space_id: u32, index_id: u32, a: &[u8], b: &[u8]) -> Ordering {
        let index = self
            .engine
            .space(space_id)
            .and_then(|space| space.index(index_id));
        match index {
            Ok(index) => index.compare_entry_keys(a, b),
            Err(_) => a.cmp(b),
        }
    }

    /// The part of a fanned-out select this shard contributes: up to `limit` entries in
    /// index order, as `[key length u32 LE][key][tuple length u32 LE][tuple]`, for the
    /// accepting core to merge (the lengths spare it decoding the tuples to find them). A
    /// key a TREE index keeps as a head goes as its 16 bytes, flagged [`SCAN_KEY_IS_HEAD`].
    ///
    /// A scan waits on memory, not on instructions: each entry's tuple (and a long key,
    /// which lives on the heap) is a cache miss at a million rows. So the walk runs
    /// [`SCAN_AHEAD`] entries ahead of the copy, each entry's lines loading from when the
    /// walk reaches it, and the misses of a scan overlap instead of adding up.
    pub fn scan(&self, part: &ScanPart<'_>, out: &mut Vec<u8>) -> Result<()> {
        let space = self.engine.space(part.space_id)?;
        let limit = usize::try_from(part.limit).unwrap_or(usize::MAX);
        let mut entries = space
            .select(part.index_id, part.iterator, part.key)?
            .take(limit)
            .inspect(|(key, tuple)| {
                key.prefetch();
                tuple.prefetch_for_read();
            });
        // A ring: `ahead[at]` is the oldest entry walked and not yet copied.
        let mut ahead: [Option<(IndexKey<'_>, TupleRef<'_>)>; SCAN_AHEAD] = [None; SCAN_AHEAD];
        for slot in &mut ahead {
            *slot = entries.next();
        }
        let mut at = 0;
        while let Some((key, tuple)) = ahead[at].take() {
            ahead[at] = entries.next();
            let data = tuple.data();
            match key {
                IndexKey::Bytes(bytes) => put_scan_entry(out, bytes, false, data),
                IndexKey::Unsigned(key) => put_scan_entry(out, &key.to_be_bytes(), false, data),
                // A key kept as a head goes as that: writing the whole key from the tuple
                // took a third of a secondary select's time, and only ties need it.
                IndexKey::OfTuple { .. } => put_scan_entry(out, &key.head(), true, data),
            }
            at = (at + 1) % SCAN_AHEAD;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "sync_tests.rs"]
mod sync_tests;
