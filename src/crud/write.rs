//! Point operations (one tuple, one owner shard) and batches of them (`*_many`), as they
//! run on the shard that owns the key. Owned data, so an op can travel in a cross-core
//! message; the outcome is owned bytes for the same reason.
//!
//! A batch keeps, for each applied op, what undoes it, so `rollback_on_error` can restore
//! the shard exactly (Tarantool does it with a transaction; tarn's shard has none, and a
//! shard runs one batch to the end before anything else touches it).
//!
//! Every change (an op, or an undo) reports what it did as a storage [`Change`], in the
//! order it happened, for the caller to log to the shard's WAL with `Shard::log` — exactly
//! the rows an IPROTO request making the same change would log.

use super::mp;
use crate::msgpack::write_array_len;
use crate::placement::{self, Catalog, Destination};
use crate::storage::key::SearchKeyBuf;
use crate::storage::{Change, Engine, Space, StorageError, Tuple};
use smallvec::SmallVec;
use std::borrow::Cow;

/// The bytes an op carries: borrowed from the request when they can be used as sent, else
/// built (a scalar key wrapped into an array, a tuple with its bucket_id filled in). Short
/// built ones stay inline, so a point op on a scalar key allocates nothing.
#[derive(Clone)]
pub enum OpBytes<'a> {
    Borrowed(&'a [u8]),
    Built(SmallVec<[u8; 24]>),
    /// A tuple rebuilt in this thread's scratch buffer (see [`Scratch`]).
    Scratch(Scratch),
    /// A tuple that is the request's bytes with one field's bytes swapped (see
    /// [`Spliced`]): storage joins it as it copies it in.
    Spliced(Spliced<'a>),
}

/// The request's tuple with one field replaced, kept as its three pieces: a filled-in
/// `bucket_id` costs no rebuilt copy, as storage copies the pieces straight into the stored
/// tuple (`Space::insert_pieces`). Joined, into a copy, only when something needs the
/// bytes whole ([`OpBytes::bytes`]: an undo, a forwarded op, a comparison).
///
/// It keeps no joined copy of its own: a point plan is built and moved on every call, and
/// a lazily filled cache in it made every move longer (a crud insert 3% slower).
#[derive(Clone)]
pub struct Spliced<'a> {
    /// The array header and the fields before the swapped one.
    head: &'a [u8],
    /// The swapped field's new bytes (a bucket_id: at most 9).
    value: [u8; 9],
    value_len: u8,
    /// The fields after the swapped one.
    tail: &'a [u8],
}

impl<'a> Spliced<'a> {
    /// `head`, then the first `value_len` bytes of `value`, then `tail`. The value comes
    /// as the whole buffer it was encoded into: copying a slice of unknown length costs a
    /// call to `memcpy`.
    pub fn new(head: &'a [u8], value: [u8; 9], value_len: usize, tail: &'a [u8]) -> Spliced<'a> {
        debug_assert!(value_len <= value.len());
        Spliced {
            head,
            value,
            value_len: value_len as u8,
            tail,
        }
    }

    /// The tuple's bytes as pieces, in order; the first holds the array header.
    pub fn pieces(&self) -> [&[u8]; 3] {
        [
            self.head,
            &self.value[..usize::from(self.value_len)],
            self.tail,
        ]
    }
}

/// Bytes built in a per-thread buffer that goes back to the thread when dropped, so a
/// point op that rewrites its tuple (a nil `bucket_id` filled in) reuses one allocation
/// from call to call instead of a malloc and a free each time: storage copies the tuple
/// into its own allocation anyway.
pub struct Scratch(Vec<u8>);

thread_local! {
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// A kept buffer larger than this is freed instead: one huge tuple must not pin its size
/// for the thread's life.
const SCRATCH_KEEP: usize = 64 * 1024;

impl Scratch {
    /// The thread's buffer (empty; a fresh one when another `Scratch` holds it), with room
    /// for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Scratch {
        let mut bytes = SCRATCH.take();
        bytes.clear();
        bytes.reserve(capacity);
        Scratch(bytes)
    }

    pub fn bytes_mut(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.0.capacity() <= SCRATCH_KEEP {
            // `try_with`: during thread teardown the slot may be gone; then just free.
            let bytes = std::mem::take(&mut self.0);
            let _ = SCRATCH.try_with(|slot| slot.set(bytes));
        }
    }
}

impl Clone for Scratch {
    fn clone(&self) -> Scratch {
        Scratch(self.0.clone())
    }
}

impl OpBytes<'_> {
    /// The same bytes, owning them (to outlive the request they were borrowed from).
    pub fn into_owned(self) -> OpBytes<'static> {
        match self {
            OpBytes::Borrowed(bytes) => OpBytes::Built(SmallVec::from_slice(bytes)),
            OpBytes::Built(bytes) => OpBytes::Built(bytes),
            OpBytes::Scratch(bytes) => OpBytes::Scratch(bytes),
            OpBytes::Spliced(spliced) => OpBytes::Built(spliced.pieces().concat().into()),
        }
    }

    /// `f` of the bytes, joined in this thread's scratch buffer when they are spliced
    /// rather than allocated: for a look at them on the hot path (the placement key).
    pub fn with_bytes<T>(&self, f: impl FnOnce(&[u8]) -> T) -> T {
        match self {
            OpBytes::Spliced(spliced) => {
                let pieces = spliced.pieces();
                let mut scratch = Scratch::with_capacity(pieces.iter().map(|p| p.len()).sum());
                for piece in pieces {
                    scratch.bytes_mut().extend_from_slice(piece);
                }
                f(&scratch.0)
            }
            OpBytes::Borrowed(bytes) => f(bytes),
            OpBytes::Built(bytes) => f(bytes),
            OpBytes::Scratch(bytes) => f(&bytes.0),
        }
    }

    /// The bytes, whole: borrowed, except for spliced bytes, which are joined into a copy
    /// (off the hot paths, which take them as pieces).
    pub fn bytes(&self) -> Cow<'_, [u8]> {
        match self {
            OpBytes::Borrowed(bytes) => Cow::Borrowed(bytes),
            OpBytes::Built(bytes) => Cow::Borrowed(bytes),
            OpBytes::Scratch(bytes) => Cow::Borrowed(&bytes.0),
            OpBytes::Spliced(spliced) => Cow::Owned(spliced.pieces().concat()),
        }
    }

    /// Stores the tuple these bytes are (`Space::insert`), straight from the pieces when
    /// spliced.
    pub fn insert_into(&self, space: &mut Space) -> Result<Change, StorageError> {
        match self {
            OpBytes::Spliced(spliced) => space.insert_pieces(&spliced.pieces()),
            bytes => space.insert(&bytes.bytes()),
        }
    }

    /// `Space::replace` of these bytes, as [`OpBytes::insert_into`].
    pub fn replace_into(&self, space: &mut Space) -> Result<Change, StorageError> {
        match self {
            OpBytes::Spliced(spliced) => space.replace_pieces(&spliced.pieces()),
            bytes => space.replace(&bytes.bytes()),
        }
    }
}

/// Equal when the bytes are: whether they were borrowed or built is no part of an op.
impl PartialEq for OpBytes<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for OpBytes<'_> {}

impl std::fmt::Debug for OpBytes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.bytes().fmt(f)
    }
}

impl<'a> From<&'a [u8]> for OpBytes<'a> {
    fn from(bytes: &'a [u8]) -> Self {
        OpBytes::Borrowed(bytes)
    }
}

impl From<Vec<u8>> for OpBytes<'_> {
    fn from(bytes: Vec<u8>) -> Self {
        OpBytes::Built(SmallVec::from_vec(bytes))
    }
}

/// One operation on the tuple with one primary key. Keys are msgpack arrays; tuples are
/// complete (bucket_id filled, objects flattened); ops use index base 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PointOp<'a> {
    Insert {
        tuple: OpBytes<'a>,
    },
    Replace {
        tuple: OpBytes<'a>,
    },
    Upsert {
        tuple: OpBytes<'a>,
        ops: OpBytes<'a>,
    },
    Update {
        key: OpBytes<'a>,
        ops: OpBytes<'a>,
    },
    Delete {
        key: OpBytes<'a>,
    },
    Get {
        key: OpBytes<'a>,
    },
}

/// crud's update/upsert operations are Lua's: 1-based field numbers (or names).
pub const CRUD_INDEX_BASE: u32 = 1;

impl PointOp<'_> {
    /// Stores the tuple of an insert or a replace (from its pieces when spliced); `None`,
    /// and nothing done, for the other ops.
    pub fn store_into(&self, space: &mut Space) -> Option<Result<Change, StorageError>> {
        match self {
            PointOp::Insert { tuple } => Some(tuple.insert_into(space)),
            PointOp::Replace { tuple } => Some(tuple.replace_into(space)),
            _ => None,
        }
    }

    /// Where this op on `space_id` runs, seen from core `me`: the owner of its key
    /// (placement's answer), or here when the key does not parse (the local shard then
    /// reports the error). The accepting core routes with it, and the owner asserts with it
    /// that the op it was sent is its own.
    pub fn route(
        &self,
        catalog: &Catalog,
        engine: &Engine,
        space_id: u32,
        me: usize,
    ) -> Destination {
        placement::route_by_primary_key(catalog, space_id, me, |key| {
            engine
                .find_space(space_id)
                .is_some_and(|space| self.placement_key(space, key).is_ok())
        })
    }

    /// The encoded primary key that places this op on a shard (`shard_of_key`); an error
    /// when the key or tuple does not parse, which the owner-less caller may answer from
    /// any shard (the local one reports the same error).
    pub fn placement_key(&self, space: &Space, out: &mut SearchKeyBuf) -> Result<(), StorageError> {
        let key_def = &space.indexes()[0].def.key_def;
        match self {
            PointOp::Insert { tuple }
            | PointOp::Replace { tuple }
            | PointOp::Upsert { tuple, .. } => {
                tuple.with_bytes(|tuple| key_def.encode_from_tuple_data(tuple, out))
            }
            PointOp::Update { key, .. } | PointOp::Delete { key } | PointOp::Get { key } => {
                let parts = key_def.encode_search_key(&key.bytes(), out)?;
                if parts != key_def.part_count() {
                    return Err(StorageError::ExactMatch {
                        expected: key_def.part_count(),
                        actual: parts,
                    });
                }
                Ok(())
            }
        }
    }
}

/// How to put a shard back as it was before an op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Undo {
    Nothing,
    /// The op created this primary key (a msgpack key): delete it.
    Delete(Vec<u8>),
    /// The op changed or removed this tuple: put it back.
    Restore(Vec<u8>),
}

/// An applied op: the row it returns (new, old or found tuple), its undo, and the change
/// to log (none for a read, or a write that changed nothing). The row is the stored tuple
/// itself (shared, not copied): the reply is written straight from it.
#[derive(Debug)]
pub struct Applied {
    pub row: Option<Tuple>,
    pub undo: Undo,
    pub change: Change,
}

/// The primary key of a tuple as a msgpack array (for lookups before a write).
fn primary_key_of(space: &Space, tuple: &[u8]) -> Vec<u8> {
    let parts = &space.indexes()[0].def.key_def.parts;
    let max = parts
        .iter()
        .map(|p| p.field_no as usize + 1)
        .max()
        .unwrap_or(0);
    let fields = mp::tuple_fields(tuple, max).unwrap_or_default();
    let mut key = Vec::new();
    write_array_len(&mut key, parts.len() as u32);
    for part in parts {
        key.extend_from_slice(
            fields
                .get(part.field_no as usize)
                .copied()
                .unwrap_or(mp::NIL),
        );
    }
    key
}

fn existing(space: &Space, key: &[u8]) -> Option<Vec<u8>> {
    space
        .get(0, key)
        .ok()
        .flatten()
        .map(|tuple| tuple.data().to_vec())
}

fn undo_for(old: Option<Vec<u8>>, key: Vec<u8>) -> Undo {
    match old {
        Some(old) => Undo::Restore(old),
        None => Undo::Delete(key),
    }
}

/// Runs one op on the space of its owner shard, keeping its undo (for a batch).
pub fn apply(space: &mut Space, op: &PointOp) -> Result<Applied, StorageError> {
    apply_with(space, op, true)
}

/// [`apply`] without the undo (`Undo::Nothing`): a lone point op is never rolled back, so
/// it skips the lookup and copy of the old tuple that an undo costs.
pub fn apply_point(space: &mut Space, op: &PointOp) -> Result<Applied, StorageError> {
    apply_with(space, op, false)
}

fn apply_with(space: &mut Space, op: &PointOp, keep_undo: bool) -> Result<Applied, StorageError> {
    let old_of = |space: &Space, key: &[u8]| keep_undo.then(|| existing(space, key)).flatten();
    let key_of = |space: &Space, tuple: &[u8]| {
        if keep_undo {
            primary_key_of(space, tuple)
        } else {
            Vec::new()
        }
    };
    let undo_of = |old: Option<Vec<u8>>, key: Vec<u8>| {
        if keep_undo {
            undo_for(old, key)
        } else {
            Undo::Nothing
        }
    };
    Ok(match op {
        PointOp::Insert { tuple } => {
            let change = tuple.insert_into(space)?;
            let row = change.new.clone();
            let key = row
                .as_ref()
                .map_or_else(Vec::new, |new| key_of(space, new.data()));
            Applied {
                undo: undo_of(None, key),
                row,
                change,
            }
        }
        PointOp::Replace { tuple } => {
            let key = key_of(space, &tuple.bytes());
            let old = old_of(space, &key);
            let change = tuple.replace_into(space)?;
            Applied {
                row: change.new.clone(),
                undo: undo_of(old, key),
                change,
            }
        }
        PointOp::Upsert { tuple, ops } => {
            let (tuple, ops) = (tuple.bytes(), ops.bytes());
            let key = key_of(space, &tuple);
            let old = old_of(space, &key);
            let change = space.upsert_stored(&tuple, &ops, CRUD_INDEX_BASE)?;
            Applied {
                row: None,
                undo: undo_of(old, key),
                change,
            }
        }
        PointOp::Update { key, ops } => {
            let (key, ops) = (key.bytes(), ops.bytes());
            let old = old_of(space, &key);
            let change = space.update(0, &key, &ops, CRUD_INDEX_BASE)?;
            Applied {
                undo: match (&change.new, old) {
                    (Some(_), Some(old)) => Undo::Restore(old),
                    _ => Undo::Nothing,
                },
                row: change.new.clone(),
                change,
            }
        }
        PointOp::Delete { key } => {
            let change = space.delete(0, &key.bytes())?;
            Applied {
                undo: match &change.old {
                    Some(old) if keep_undo => Undo::Restore(old.data().to_vec()),
                    _ => Undo::Nothing,
                },
                row: change.old.clone(),
                change,
            }
        }
        PointOp::Get { key } => Applied {
            row: space.get(0, &key.bytes())?.map(|tuple| tuple.to_tuple()),
            undo: Undo::Nothing,
            change: Change::NONE,
        },
    })
}

/// Puts the shard back as it was before the op that returned `undo`; returns the change
/// to log.
pub fn undo(space: &mut Space, undo: &Undo) -> Change {
    let outcome = match undo {
        Undo::Nothing => Ok(Change::NONE),
        Undo::Delete(key) => space.delete(0, key),
        Undo::Restore(old) => space.replace(old),
    };
    // The tuple was in the space a moment ago (or the key was absent): restoring it only
    // fails if the quota shrank in between, which a single-threaded shard cannot see.
    debug_assert!(outcome.is_ok(), "undo failed: {outcome:?}");
    outcome.unwrap_or_default()
}

/// What became of one op of a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchItem {
    /// Applied; the row it returns.
    Done(Option<Vec<u8>>),
    /// Failed with this box error message (text only, so an outcome can cross cores).
    Failed(String),
    /// Skipped because an earlier op failed and `stop_on_error` was set.
    NotPerformed,
    /// Applied, then undone because an op failed and `rollback_on_error` was set.
    RolledBack,
}

/// Runs a batch on one shard, in order, with crud's storage-side rules: without
/// `stop_on_error` every op is attempted; with it, the ops after the first failure are
/// not performed; with `rollback_on_error`, a failure undoes every applied op of the
/// batch (on this shard).
pub fn apply_batch(
    engine: &mut Engine,
    space_id: u32,
    ops: &[PointOp],
    stop_on_error: bool,
    rollback_on_error: bool,
) -> Vec<BatchItem> {
    let mut changes = Vec::new();
    apply_batch_logged(
        engine,
        space_id,
        ops,
        stop_on_error,
        rollback_on_error,
        &mut changes,
    )
}

/// [`apply_batch`], appending every change it made (ops and undos, in order) to `changes`.
pub fn apply_batch_logged(
    engine: &mut Engine,
    space_id: u32,
    ops: &[PointOp],
    stop_on_error: bool,
    rollback_on_error: bool,
    changes: &mut Vec<Change>,
) -> Vec<BatchItem> {
    let space = match engine.space_mut(space_id) {
        Ok(space) => space,
        Err(error) => {
            let message = error.to_string();
            return ops
                .iter()
                .map(|_| BatchItem::Failed(message.clone()))
                .collect();
        }
    };
    let mut items = Vec::with_capacity(ops.len());
    let mut undos: Vec<(usize, Undo)> = Vec::new();
    let mut failed = false;
    for op in ops {
        if failed && stop_on_error {
            items.push(BatchItem::NotPerformed);
            continue;
        }
        match apply(space, op) {
            Ok(applied) => {
                undos.push((items.len(), applied.undo));
                items.push(BatchItem::Done(applied.row.map(|row| row.data().to_vec())));
                if !applied.change.is_none() {
                    changes.push(applied.change);
                }
            }
            Err(error) => {
                failed = true;
                items.push(BatchItem::Failed(error.to_string()));
            }
        }
    }
    if failed && rollback_on_error {
        for (at, undo_op) in undos.iter().rev() {
            let change = undo(space, undo_op);
            if !change.is_none() {
                changes.push(change);
            }
            items[*at] = BatchItem::RolledBack;
        }
    }
    items
}
