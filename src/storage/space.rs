//! A space: its format, its indexes and the data operations on them.
//!
//! Every write computes all index keys and checks every constraint (format, uniqueness,
//! quota) before it touches any index, so a failing operation changes nothing. The primary
//! index owns the order of truth; secondary indexes share its tuples.
//!
//! Knows nothing of the wire or of other shards: requests arrive as msgpack byte slices.

use crate::msgpack;
use crate::storage::btree::LookupCursor;
use crate::storage::change::Change;
use crate::storage::error::{Result, StorageError};
use crate::storage::field_type::FieldType;
use crate::storage::index::{Index, IndexDef, IndexIter, IndexKey, IndexKind};
use crate::storage::key::{prefix_successor, KeyBuf, SearchKeyBuf};
use crate::storage::memory::MemoryQuota;
use crate::storage::range::{IteratorType, KeyRange};
use crate::storage::slab::TupleSlab;
use crate::storage::text::msgpack_to_text;
use crate::storage::tuple::{
    out_of_memory, FieldMap, SpaceFormat, Tuple, TupleRef, MAX_FIELD_SLOTS,
};
use crate::storage::update::UpdateOps;
use redefinition::Redefinition;
use smallvec::SmallVec;
use std::rc::Rc;

mod redefinition;

#[derive(Debug, Clone)]
pub struct SpaceDef {
    pub id: u32,
    pub name: Box<str>,
    pub format: SpaceFormat,
    /// Index 0 is the primary key.
    pub indexes: Vec<IndexDef>,
    /// Tarantool's `is_sync`: a write to it is acknowledged once a quorum of instances has
    /// its row (the server's limbo; storage only keeps the flag).
    pub is_sync: bool,
}

/// Bytes a space holds, by kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceMemory {
    /// The pages of the space's slab, whole, and its large tuples' allocations.
    pub tuple_bytes: usize,
    /// `(index id, bytes)` for every index.
    pub index_bytes: SmallVec<[(u32, usize); 4]>,
}

/// Keys of one tuple in every index, in index order.
type TupleKeys = SmallVec<[KeyBuf; 4]>;

pub struct Space {
    pub id: u32,
    pub name: Box<str>,
    pub format: SpaceFormat,
    /// See [`SpaceDef::is_sync`].
    pub is_sync: bool,
    field_map: FieldMap,
    indexes: Vec<Index>,
    quota: Rc<MemoryQuota>,
    /// Where the space's tuples live; it charges the quota for its pages itself.
    slab: TupleSlab,
    /// What this space has taken from the shard quota for its indexes: their
    /// `allocated_bytes` after its last write (see [`Space::settle_index_bytes`]).
    index_bytes: usize,
    /// Reused buffer for the new tuple of an update, so updates do not allocate twice.
    update_scratch: Vec<u8>,
    /// `double_fields[n]`: field `n` is typed `double` (by the format or an index part), so
    /// a float result of `+`/`-` is stored there as a float64 (see [`UpdateOps::apply`]).
    double_fields: Box<[bool]>,
    /// See [`Space::instance`].
    instance: u64,
    /// The next definition, while it is prepared (see [`redefinition`]).
    redefinition: Option<Box<Redefinition>>,
}

/// The field numbers `indexes` read, in their order (repeats included).
fn indexed_fields(indexes: &[IndexDef]) -> impl Iterator<Item = u32> + '_ {
    indexes
        .iter()
        .flat_map(|index| index.key_def.parts.iter().map(|part| part.field_no))
}

/// The next [`Space::instance`].
static NEXT_INSTANCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

#[derive(Clone, Copy)]
enum WriteMode {
    Insert,
    Replace,
}

impl Space {
    pub fn new(def: SpaceDef, quota: Rc<MemoryQuota>) -> Result<Space> {
        let invalid = |reason: String| {
            Err(StorageError::IllegalParams(
                format!("space '{}': {reason}", def.name).into(),
            ))
        };
        let Some(primary) = def.indexes.first() else {
            return invalid("a space needs a primary index".into());
        };
        if primary.id != 0 || !primary.unique {
            return invalid("index 0 must be the unique primary index".into());
        }
        for (position, index) in def.indexes.iter().enumerate() {
            if index.kind == IndexKind::Hash && !index.unique {
                return invalid(format!("HASH index '{}' must be unique", index.name));
            }
            if index.key_def.parts.is_empty() {
                return invalid(format!("index '{}' has no parts", index.name));
            }
            if let Some(part) = index
                .key_def
                .parts
                .iter()
                .find(|p| !p.field_type.is_indexable())
            {
                return invalid(format!(
                    "index '{}' cannot order field type '{}'",
                    index.name,
                    part.field_type.name()
                ));
            }
            if position > 0 && def.indexes[..position].iter().any(|i| i.id == index.id) {
                return invalid(format!("index id {} is defined twice", index.id));
            }
        }
        if primary.key_def.parts.iter().any(|part| part.is_nullable) {
            return invalid("primary key parts cannot be nullable".into());
        }
        let Some(field_map) = FieldMap::new(indexed_fields(&def.indexes)) else {
            return invalid(format!("more than {MAX_FIELD_SLOTS} fields are indexed"));
        };
        let primary_key_def = primary.key_def.clone();
        let double_fields = double_fields(&def.format, &def.indexes);
        let slab = TupleSlab::new(quota.clone());
        let indexes = def
            .indexes
            .into_iter()
            .map(|index_def| Index::new(index_def, &primary_key_def, &field_map, &slab))
            .collect();
        Ok(Space {
            id: def.id,
            name: def.name,
            format: def.format,
            is_sync: def.is_sync,
            field_map,
            indexes,
            quota,
            slab,
            index_bytes: 0,
            update_scratch: Vec::new(),
            double_fields,
            instance: NEXT_INSTANCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            redefinition: None,
        })
    }

    /// Which space this is among every space built in the process: never reused, so a
    /// cache of what a space's definition implies (crud's encoded metadata) can tell it
    /// from a space built later with the same id, or at the same address, with one compare.
    /// A space's definition (its `format`, its indexes) is fixed once it is built.
    pub fn instance(&self) -> u64 {
        self.instance
    }

    pub fn len(&self) -> usize {
        self.indexes[0].len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn indexes(&self) -> &[Index] {
        &self.indexes
    }

    /// The slab the space's tuples live in.
    pub fn slab(&self) -> &TupleSlab {
        &self.slab
    }

    pub fn index(&self, index_id: u32) -> Result<&Index> {
        self.find_index(index_id)
            .ok_or_else(|| StorageError::NoSuchIndexId {
                index_id,
                space: self.name.clone(),
            })
    }

    fn index_position(&self, index_id: u32) -> Result<usize> {
        self.indexes
            .iter()
            .position(|index| index.def.id == index_id)
            .ok_or_else(|| StorageError::NoSuchIndexId {
                index_id,
                space: self.name.clone(),
            })
    }

    /// Encodes an exact-match key for a unique index, checked in Tarantool's order: 41 for a
    /// non-unique index, then 19 for a key of the wrong length (whatever its parts hold),
    /// then 18 for a part of the wrong type or a nil.
    fn encode_exact_key(&self, index: &Index, key: &[u8], out: &mut SearchKeyBuf) -> Result<()> {
        if !index.def.unique {
            return Err(StorageError::MoreThanOneTuple);
        }
        index.def.key_def.encode_exact_key(key, out)
    }

    /// `[id]` looked up in a unique index keyed by one unsigned part, without encoding the
    /// key: the common point request. `None` when the key or the index is of another shape
    /// (then the general path decides, errors included).
    /// `fetched` is a fetch-ahead lookup in this index (its key and cursor), used when it is
    /// of this key.
    #[inline]
    fn lookup_unsigned<'s>(
        index: &'s Index,
        key: &[u8],
        fetched: Option<(u64, &LookupCursor)>,
    ) -> Option<Option<(IndexKey<'s>, TupleRef<'s>)>> {
        if !index.def.unique {
            return None;
        }
        let key = msgpack::single_uint_array(key)?;
        let cursor =
            fetched.and_then(|(fetched_key, cursor)| (fetched_key == key).then_some(cursor));
        index.get_entry_unsigned(key, cursor)
    }

    /// Starts fetching ahead a point lookup of the unsigned `key` in `index_id`, for a
    /// request that runs a few requests from now (see [`Index::prefetch_start`]); `None`
    /// when there is nothing to walk.
    #[inline]
    pub fn prefetch_start(&self, index_id: u32, key: u64) -> Option<LookupCursor> {
        self.find_index(index_id)?.prefetch_start(key)
    }

    /// One more load of a lookup [`Space::prefetch_start`] began.
    #[inline]
    pub fn prefetch_step(&self, index_id: u32, key: u64, cursor: &mut LookupCursor) {
        if let Some(index) = self.find_index(index_id) {
            index.prefetch_step(key, cursor);
        }
    }

    #[inline]
    fn find_index(&self, index_id: u32) -> Option<&Index> {
        self.indexes.iter().find(|index| index.def.id == index_id)
    }

    /// The primary key of `tuple` (msgpack array bytes, not yet validated) when the primary
    /// index is keyed by the tuple's first field alone and that field is an unsigned
    /// integer: what a write's lookup will search for. `None` otherwise.
    #[inline]
    pub fn leading_primary_key(&self, tuple: &[u8]) -> Option<u64> {
        let parts = &self.indexes.first()?.def.key_def.parts;
        if parts.len() != 1 || parts[0].field_no != 0 {
            return None;
        }
        match tuple.split_first()? {
            (0x91..=0x9f, fields) => msgpack::leading_uint(fields).map(|(key, _)| key),
            _ => None,
        }
    }

    /// The tuple with exactly `key` in a unique index.
    pub fn get(&self, index_id: u32, key: &[u8]) -> Result<Option<TupleRef<'_>>> {
        let index = self.index(index_id)?;
        if let Some(found) = Self::lookup_unsigned(index, key, None) {
            return Ok(found.map(|(_, tuple)| tuple));
        }
        let mut encoded = SearchKeyBuf::new();
        self.encode_exact_key(index, key, &mut encoded)?;
        Ok(index.get(&encoded))
    }

    /// Starts a lazy walk of `index_id` with a Tarantool iterator over `key` (a msgpack
    /// array of up to the index's part count). Offset and limit are the caller's.
    pub fn select(&self, index_id: u32, iterator: u32, key: &[u8]) -> Result<IndexIter<'_>> {
        self.select_fetched(index_id, iterator, key, None)
    }

    /// [`Space::select`] with a fetch-ahead lookup in `index_id` (its key and cursor), which
    /// a point select of that key reads its entry through (see [`Index::get_entry_unsigned`]).
    pub fn select_fetched(
        &self,
        index_id: u32,
        iterator: u32,
        key: &[u8],
        fetched: Option<(u64, &LookupCursor)>,
    ) -> Result<IndexIter<'_>> {
        // Tarantool's order: the iterator (1), the index (35), the key's part count (31),
        // a partial HASH key (136), the parts' types (18), what the index supports (112).
        let iterator = IteratorType::from_code(iterator)?;
        let index = self.index(index_id)?;
        if matches!(iterator, IteratorType::Eq | IteratorType::Req) {
            if let Some(found) = Self::lookup_unsigned(index, key, fetched) {
                index.check_iterator(iterator, 1, &self.name)?;
                return Ok(IndexIter::One(found));
            }
        } else if let Some(entries) =
            msgpack::single_uint_array(key).and_then(|key| index.range_unsigned(iterator, key))
        {
            // A whole unsigned key in a TREE keyed by it: every check below passes.
            return Ok(entries);
        }
        let key_def = &index.def.key_def;
        index.check_partial_key(iterator, key_def.search_key_part_count(key)?)?;
        let mut encoded = SearchKeyBuf::new();
        let parts = key_def.encode_search_key(key, &mut encoded)?;
        index.check_iterator_supported(iterator, &self.name)?;
        let exact = index.def.unique && parts == index.def.key_def.part_count();
        if exact && matches!(iterator, IteratorType::Eq | IteratorType::Req) {
            // At most one tuple matches: a lookup, not a range walk.
            return Ok(IndexIter::One(index.get_entry(&encoded)));
        }
        let mut successor = SearchKeyBuf::new();
        let has_successor = prefix_successor(&encoded, &mut successor);
        let range =
            KeyRange::for_iterator(iterator, &encoded, has_successor.then_some(&successor[..]));
        Ok(index.iter(&range, iterator, &encoded))
    }

    /// Stores `data` as a new tuple; refused (`ER_TUPLE_FOUND`) if its primary key is taken.
    pub fn insert(&mut self, data: &[u8]) -> Result<Change> {
        if let Some(written) = self.put_in_unsigned_leaf(data, WriteMode::Insert) {
            return written;
        }
        self.prefetch_primary_entry(data);
        let tuple = self.build_tuple(data)?;
        self.put(tuple, WriteMode::Insert)
    }

    /// Stores `data`, displacing the tuple with its primary key if there is one.
    pub fn replace(&mut self, data: &[u8]) -> Result<Change> {
        if let Some(written) = self.put_in_unsigned_leaf(data, WriteMode::Replace) {
            return written;
        }
        self.prefetch_primary_entry(data);
        let tuple = self.build_tuple(data)?;
        self.put(tuple, WriteMode::Replace)
    }

    /// `insert` of the tuple whose bytes are the concatenation of `pieces`: copied once,
    /// straight into the stored tuple, for a caller whose tuple is a request's bytes with a
    /// field swapped. Same checks, errors and outcome as `insert` of the joined bytes. The
    /// primary key is looked for in the first piece alone (a hint, checked once built).
    pub fn insert_pieces<const N: usize>(&mut self, pieces: &[&[u8]; N]) -> Result<Change> {
        self.put_pieces(pieces, WriteMode::Insert)
    }

    /// `replace` of the concatenation of `pieces`, as [`Space::insert_pieces`].
    pub fn replace_pieces<const N: usize>(&mut self, pieces: &[&[u8]; N]) -> Result<Change> {
        self.put_pieces(pieces, WriteMode::Replace)
    }

    fn put_pieces<const N: usize>(
        &mut self,
        pieces: &[&[u8]; N],
        mode: WriteMode,
    ) -> Result<Change> {
        let first = pieces.first().copied().unwrap_or_default();
        let build = |format: &SpaceFormat, slab: &TupleSlab, field_map: &FieldMap| {
            format.build_tuple_from_pieces(slab, field_map, pieces)
        };
        if let Some(written) = self.put_in_unsigned_leaf_with(first, mode, build) {
            return written;
        }
        self.prefetch_primary_entry(first);
        let tuple = build(&self.format, &self.slab, &self.field_map)?;
        self.put(tuple, mode)
    }

    /// Starts loading the primary index's entry for the tuple `data` is about to become, so
    /// the cache miss of the write's lookup overlaps validating and building the tuple
    /// instead of following it. `data` is not validated yet: this is a hint, and a wrong
    /// one costs a wasted load, nothing else.
    #[inline]
    fn prefetch_primary_entry(&self, data: &[u8]) {
        let primary = &self.indexes[0];
        if let [part] = primary.def.key_def.parts.as_slice() {
            if let Some(key) = unvalidated_uint_field(data, part.field_no) {
                primary.prefetch_unsigned(key);
            }
        }
    }

    /// Deletes by an exact key of a unique index; the change holds the deleted tuple, if
    /// there was one.
    pub fn delete(&mut self, index_id: u32, key: &[u8]) -> Result<Change> {
        let position = self.index_position(index_id)?;
        let mut encoded = SearchKeyBuf::new();
        self.encode_exact_key(&self.indexes[position], key, &mut encoded)?;
        let Some(old) = self.indexes[position]
            .get_for_write(&encoded)
            .map(TupleRef::to_tuple)
        else {
            return Ok(Change::NONE);
        };
        self.remove_from_all_indexes(&old)?;
        Ok(Change {
            old: Some(old),
            new: None,
        })
    }

    /// Applies update operations to the tuple with exactly `key` in a unique index. Changes
    /// nothing when no tuple has that key (then the ops are not even read, as in
    /// Tarantool).
    pub fn update(
        &mut self,
        index_id: u32,
        key: &[u8],
        ops: &[u8],
        index_base: u32,
    ) -> Result<Change> {
        let position = self.index_position(index_id)?;
        let mut encoded = SearchKeyBuf::new();
        self.encode_exact_key(&self.indexes[position], key, &mut encoded)?;
        let Some(old) = self.indexes[position]
            .get_for_write(&encoded)
            .map(TupleRef::to_tuple)
        else {
            return Ok(Change::NONE);
        };
        let format = &self.format;
        let ops = UpdateOps::decode(ops, index_base, &|name| format.field_no_by_name(name))?;
        let mut scratch = std::mem::take(&mut self.update_scratch);
        scratch.clear();
        let applied = ops.apply(old.data(), &mut scratch, &self.double_fields);
        let built = applied.and_then(|()| self.build_tuple(&scratch));
        self.update_scratch = scratch;
        let new = built?;
        if !self.same_primary_key(&old, &new)? {
            return Err(self.primary_key_moved(&new));
        }
        self.put(new, WriteMode::Replace)
    }

    /// The error of an update whose new tuple has another primary key: Tarantool replaces
    /// in the primary index first, so a key another tuple holds is 3 (that tuple is the old
    /// one in the message), a free key 94.
    fn primary_key_moved(&self, new: &Tuple) -> StorageError {
        let primary = &self.indexes[0];
        let mut key = KeyBuf::new();
        let holder = primary
            .encode_tuple_key(new, &self.field_map, &self.format, &mut key)
            .ok()
            .and_then(|()| primary.get(&key));
        match holder {
            Some(holder) => self.duplicate(primary, &holder, new),
            None => StorageError::CantUpdatePrimaryKey {
                space: self.name.clone(),
                new_tuple: new.data().into(),
            },
        }
    }

    /// Inserts `data` if its primary key is absent, else applies `ops` to the stored tuple,
    /// skipping (and logging) operations that fail, as Tarantool does.
    pub fn upsert(&mut self, data: &[u8], ops: &[u8], index_base: u32) -> Result<()> {
        self.upsert_stored(data, ops, index_base).map(drop)
    }

    /// `upsert`, returning what it changed (nothing when it skipped the whole upsert
    /// because the operations would have changed the primary key), for the WAL.
    pub fn upsert_stored(&mut self, data: &[u8], ops: &[u8], index_base: u32) -> Result<Change> {
        self.prefetch_primary_entry(data);
        // Validated up front (errors are returned even when the key exists), but only
        // built when it is inserted: an existing key makes a new tuple from the old one.
        let offsets = self.format.check_tuple(&self.field_map, data)?;
        let format = &self.format;
        let ops = UpdateOps::decode(ops, index_base, &|name| format.field_no_by_name(name))?;
        let mut primary_key = SearchKeyBuf::new();
        let primary = &self.indexes[0];
        if primary
            .def
            .key_def
            .encode_from_tuple_data(data, &mut primary_key)
            .is_err()
        {
            // Let the tuple path name the field the way insert would (23 / 39).
            let candidate = self.format.build_checked(&self.slab, data, &offsets)?;
            let mut key = KeyBuf::new();
            primary.encode_tuple_key(&candidate, &self.field_map, &self.format, &mut key)?;
            primary_key = SearchKeyBuf::from_slice(&key);
        }
        let Some(old) = self.indexes[0].get(&primary_key).map(TupleRef::to_tuple) else {
            let candidate = self.format.build_checked(&self.slab, data, &offsets)?;
            return self.put(candidate, WriteMode::Insert);
        };
        let mut scratch = std::mem::take(&mut self.update_scratch);
        scratch.clear();
        let space_name = &self.name;
        let applied = ops.apply_skipping_failures(
            old.data(),
            &mut scratch,
            &self.double_fields,
            &mut |error| {
                tracing::warn!(space = %space_name, %error, "UPSERT operation skipped");
            },
        );
        let built = applied.and_then(|()| self.build_tuple(&scratch));
        self.update_scratch = scratch;
        let new = built?;
        if !self.same_primary_key(&old, &new)? {
            tracing::warn!(
                space = %self.name,
                "UPSERT skipped: {}",
                StorageError::CantUpdatePrimaryKey {
                    space: self.name.clone(),
                    new_tuple: Box::default(),
                }
            );
            return Ok(Change::NONE);
        }
        self.put(new, WriteMode::Replace)
    }

    /// Writes the primary key of a stored tuple as a msgpack array (what a DELETE of it
    /// would carry), e.g. for the WAL's delete rows.
    pub fn write_primary_key(&self, tuple: &Tuple, out: &mut Vec<u8>) {
        let parts = &self.indexes[0].def.key_def.parts;
        crate::msgpack::write_array_len(out, parts.len() as u32);
        for part in parts {
            let field = self
                .field_map
                .slot_of(part.field_no)
                .and_then(|slot| tuple.field_in_slot(slot))
                .and_then(|mut field| crate::msgpack::take_value(&mut field).ok());
            // A stored tuple has every primary key field; nil keeps the array well formed.
            out.extend_from_slice(field.unwrap_or(&[0xc0]));
        }
    }

    /// Removes every tuple, returning their memory to the quota (a tuple's slot goes back
    /// when its last reference does).
    pub fn truncate(&mut self) {
        for index in &mut self.indexes {
            index.clear();
        }
        if let Some(redefinition) = &mut self.redefinition {
            redefinition.clear();
        }
        self.settle_index_bytes();
    }

    /// Charges the quota with what the indexes hold now, or gives back what they no longer
    /// do: after every change to them. Never refused (the bytes are held already): a write
    /// is refused before it starts when the quota is over its limit (see
    /// [`Space::refuse_when_over_limit`]), so the limit is passed by at most one write's
    /// index nodes.
    #[inline]
    fn settle_index_bytes(&mut self) {
        let now: usize = self
            .indexes
            .iter()
            .map(Index::allocated_bytes)
            .sum::<usize>()
            + self
                .redefinition
                .as_ref()
                .map_or(0, |redefinition| redefinition.allocated_bytes());
        if now > self.index_bytes {
            self.quota
                .reserve_past_limit((now - self.index_bytes) as u64);
        } else {
            self.quota.release((self.index_bytes - now) as u64);
        }
        self.index_bytes = now;
    }

    /// ER_MEMORY_ISSUE for a write of `new` when the quota is already past its limit (index
    /// nodes are charged after the write that made them).
    #[inline]
    fn refuse_when_over_limit(&self, new: &Tuple) -> Result<()> {
        if self.quota.is_over_limit() {
            return Err(out_of_memory(new.allocated_bytes()));
        }
        Ok(())
    }

    /// Replaces the contents with `tuples` (msgpack arrays): validates each, then sorts once
    /// per index and builds it from the sorted run. Recovery and index creation use this.
    pub fn bulk_load<'a>(&mut self, tuples: impl IntoIterator<Item = &'a [u8]>) -> Result<()> {
        let built = tuples
            .into_iter()
            .map(|data| self.build_tuple(data))
            .collect::<Result<Vec<Tuple>>>()?;
        self.bulk_load_built(built)
    }

    /// A stored tuple of this space from `data` (a msgpack array), checked against the
    /// format, in the space's slab (refused when its memory does not fit the quota): the
    /// first half of [`Space::bulk_load`], for callers that hold the data only a part at a
    /// time.
    pub fn build_tuple(&self, data: &[u8]) -> Result<Tuple> {
        self.format.build_tuple(&self.slab, &self.field_map, data)
    }

    /// The second half of [`Space::bulk_load`], over tuples [`Space::build_tuple`] made (of
    /// this space, or of a space of the same definition in another engine: those are
    /// copied into this one's slab). Refused when the indexes take the quota past its
    /// limit.
    pub fn bulk_load_built(&mut self, built: Vec<Tuple>) -> Result<()> {
        self.truncate();
        let built = built
            .into_iter()
            .map(|tuple| tuple.adopted_by(&self.slab))
            .collect::<Result<Vec<Tuple>>>()?;
        for position in 0..self.indexes.len() {
            if let Err(error) = self.build_index(position, &built) {
                self.truncate();
                return Err(error);
            }
        }
        self.settle_index_bytes();
        if self.quota.is_over_limit() {
            let index_bytes = self.index_bytes;
            self.truncate();
            return Err(self.out_of_memory(index_bytes));
        }
        Ok(())
    }

    /// This space's tuples under another definition `def` (same id, the same primary key:
    /// the caller's), as a new space of the same quota: each tuple checked against the new
    /// format and rebuilt with its field map, and every index built by one sort, so that a
    /// tuple the new format refuses or a duplicate in a new unique index refuses the whole
    /// change and this space stays as it was. Holds both copies of the tuples meanwhile.
    pub fn redefined(&self, def: SpaceDef) -> Result<Space> {
        debug_assert_eq!(def.id, self.id, "a space is redefined under its own id");
        let mut space = Space::new(def, self.quota.clone())?;
        let tuples = self.indexes[0]
            .entries()
            .map(|(_, tuple)| space.build_tuple(tuple.data()))
            .collect::<Result<Vec<Tuple>>>()?;
        space.bulk_load_built(tuples)?;
        Ok(space)
    }

    /// The definition this space was built from.
    pub fn def(&self) -> SpaceDef {
        SpaceDef {
            id: self.id,
            name: self.name.clone(),
            format: self.format.clone(),
            indexes: self.indexes.iter().map(|index| index.def.clone()).collect(),
            is_sync: self.is_sync,
        }
    }

    /// Adds a secondary index over the existing tuples, built by one sort: the space
    /// [`Space::redefined`] with it, so a refused index leaves the space as it was.
    pub fn add_index(&mut self, def: IndexDef) -> Result<()> {
        if self.indexes.iter().any(|index| index.def.id == def.id) {
            return Err(StorageError::IllegalParams(
                format!(
                    "index id {} already exists in space '{}'",
                    def.id, self.name
                )
                .into(),
            ));
        }
        let mut with_index = self.def();
        with_index.indexes.push(def);
        *self = self.redefined(with_index)?;
        Ok(())
    }

    /// Rebuilds the index at `position` from `tuples`; returns the bytes of its entries.
    fn build_index(&mut self, position: usize, tuples: &[Tuple]) -> Result<usize> {
        self.indexes[position].bulk_build(tuples, &self.field_map, &self.format, &self.name)
    }

    /// Bytes held by the tuples and by each index.
    pub fn memory(&self) -> SpaceMemory {
        SpaceMemory {
            tuple_bytes: self.slab.held_bytes(),
            index_bytes: self
                .indexes
                .iter()
                .map(|index| (index.def.id, index.allocated_bytes()))
                .collect(),
        }
    }

    fn tuple_keys(&self, tuple: &Tuple) -> Result<TupleKeys> {
        self.indexes
            .iter()
            .map(|index| {
                let mut key = KeyBuf::new();
                index.encode_tuple_key(tuple, &self.field_map, &self.format, &mut key)?;
                Ok(key)
            })
            .collect()
    }

    fn same_primary_key(&self, old: &Tuple, new: &Tuple) -> Result<bool> {
        let (mut old_key, mut new_key) = (KeyBuf::new(), KeyBuf::new());
        let primary = &self.indexes[0];
        primary.encode_tuple_key(old, &self.field_map, &self.format, &mut old_key)?;
        primary.encode_tuple_key(new, &self.field_map, &self.format, &mut new_key)?;
        Ok(old_key == new_key)
    }

    fn duplicate(&self, index: &Index, old: &Tuple, new: &Tuple) -> StorageError {
        StorageError::TupleFound {
            index: index.def.name.clone(),
            space: self.name.clone(),
            old_tuple: msgpack_to_text(old.data()).into(),
            new_tuple: msgpack_to_text(new.data()).into(),
        }
    }

    fn out_of_memory(&self, size_bytes: usize) -> StorageError {
        out_of_memory(size_bytes)
    }

    /// Stores `new`, replacing the tuple with the same primary key if `mode` allows. All
    /// checks run before the first index is touched.
    fn put(&mut self, new: Tuple, mode: WriteMode) -> Result<Change> {
        if self.indexes.len() == 1 && self.redefinition.is_none() {
            return self.put_primary_only(new, mode);
        }
        let keys = self.tuple_keys(&new)?;
        let old = self.indexes[0].get(&keys[0]).map(TupleRef::to_tuple);
        if let (WriteMode::Insert, Some(old)) = (&mode, &old) {
            return Err(self.duplicate(&self.indexes[0], old, &new));
        }
        for (index, key) in self.indexes.iter().zip(&keys).skip(1) {
            if !index.def.unique {
                continue;
            }
            if let Some(existing) = index.get(key) {
                let is_the_replaced_tuple =
                    old.as_ref().is_some_and(|o| Tuple::ptr_eq(o, &existing));
                if !is_the_replaced_tuple {
                    return Err(self.duplicate(index, &existing, &new));
                }
            }
        }
        // The old tuple shares the new one's primary key; only its secondary keys differ.
        let old_secondary_keys: TupleKeys = match &old {
            Some(old) => self.indexes[1..]
                .iter()
                .map(|index| {
                    let mut key = KeyBuf::new();
                    index.encode_tuple_key(old, &self.field_map, &self.format, &mut key)?;
                    Ok(key)
                })
                .collect::<Result<_>>()?,
            None => TupleKeys::new(),
        };
        let build_keys = match &self.redefinition {
            Some(redefinition) => Some(self.redefinition_keys(redefinition, &new, old.as_ref())?),
            None => None,
        };
        self.refuse_when_over_limit(&new)?;

        if let (Some(redefinition), Some(build_keys)) = (&mut self.redefinition, build_keys) {
            redefinition.put(build_keys, &new, old.as_ref());
        }
        let mut keys = keys.into_iter();
        let primary_key = keys.next().expect("a space has a primary index");
        let mut old_secondary_keys = old_secondary_keys.into_iter();
        for (index, key) in self.indexes.iter_mut().skip(1).zip(keys) {
            if let Some(old_key) = old_secondary_keys.next() {
                if old_key != key {
                    index.remove(&old_key);
                }
            }
            index.insert(key, new.clone());
        }
        self.indexes[0].insert(primary_key, new.clone());
        debug_assert!(self
            .indexes
            .iter()
            .all(|index| index.len() == self.indexes[0].len()));
        self.settle_index_bytes();
        Ok(Change {
            old,
            new: Some(new),
        })
    }

    /// `put` for a space with no secondary index: one walk of the tree instead of a
    /// lookup and then an insert. The new tuple goes in first; a duplicate puts the old one
    /// back, so a failure still changes nothing. Nothing here reads the old tuple.
    fn put_primary_only(&mut self, new: Tuple, mode: WriteMode) -> Result<Change> {
        let primary = &self.indexes[0];
        let key = match primary.unsigned_tuple_key(&new, &self.field_map) {
            Some(key) => PrimaryKey::Unsigned(key),
            None => {
                let mut key = KeyBuf::new();
                primary.encode_tuple_key(&new, &self.field_map, &self.format, &mut key)?;
                PrimaryKey::Encoded(key)
            }
        };
        self.refuse_when_over_limit(&new)?;
        let old = key.put(&mut self.indexes[0], new.clone());
        if let (WriteMode::Insert, Some(old)) = (&mode, &old) {
            let error = self.duplicate(&self.indexes[0], old, &new);
            key.put(&mut self.indexes[0], old.clone());
            self.settle_index_bytes();
            return Err(error);
        }
        self.settle_index_bytes();
        Ok(Change {
            old,
            new: Some(new),
        })
    }

    /// `insert` / `replace` of the tuple `data` into a space whose one index is a TREE on
    /// one unsigned part, most spaces: the leaf is found from the request's key before the
    /// tuple is validated and built, so its cache miss overlaps that work, and the write
    /// lands in it without a second walk. Every check comes before the leaf changes, so a
    /// failure changes nothing. `None` (nothing done) when the space, the tree or the
    /// request is of another shape.
    fn put_in_unsigned_leaf(&mut self, data: &[u8], mode: WriteMode) -> Option<Result<Change>> {
        self.put_in_unsigned_leaf_with(data, mode, |format, slab, field_map| {
            format.build_tuple(slab, field_map, data)
        })
    }

    /// [`Space::put_in_unsigned_leaf`] of the tuple `build` makes, its key read from `data`
    /// (the tuple's bytes, or a prefix of them) as a hint, checked once it is built.
    #[inline(always)]
    fn put_in_unsigned_leaf_with(
        &mut self,
        data: &[u8],
        mode: WriteMode,
        build: impl FnOnce(&SpaceFormat, &TupleSlab, &FieldMap) -> Result<Tuple>,
    ) -> Option<Result<Change>> {
        let [primary] = self.indexes.as_slice() else {
            return None;
        };
        if self.redefinition.is_some() {
            return None;
        }
        let [part] = primary.def.key_def.parts.as_slice() else {
            return None;
        };
        let field_no = part.field_no;
        let key = unvalidated_uint_field(data, field_no)?;
        let Space {
            indexes,
            format,
            field_map,
            quota,
            slab,
            ..
        } = self;
        let leaf = indexes[0].unsigned_leaf(key)?;
        let new = match build(format, slab, field_map) {
            Ok(new) => new,
            Err(error) => return Some(Err(error)),
        };
        let key_field = field_map
            .slot_of(field_no)
            .and_then(|slot| new.field_in_slot(slot));
        if key_field
            .and_then(msgpack::leading_uint)
            .map(|(value, _)| value)
            != Some(key)
        {
            // Only a key of another type gets here; the general path names the error.
            return Some(self.put(new, mode));
        }
        let leaf = leaf.search(key);
        let refused_as_duplicate = match (&mode, leaf.value()) {
            (WriteMode::Insert, Some(old)) => Some(old.to_tuple()),
            _ => None,
        };
        if let Some(old) = refused_as_duplicate {
            return Some(Err(self.duplicate(&self.indexes[0], &old, &new)));
        }
        if quota.is_over_limit() {
            return Some(Err(out_of_memory(new.allocated_bytes())));
        }
        let old = match leaf.put(key, new.clone()) {
            Ok(old) => old,
            Err((key, new)) => {
                // The leaf is full: the tree splits it, and holds a node more.
                let old = indexes[0].insert_unsigned(key, new);
                self.settle_index_bytes();
                old
            }
        };
        Some(Ok(Change {
            old,
            new: Some(new),
        }))
    }

    /// Puts back what `change` did, as if its write had never happened: the new tuple
    /// leaves every index and the old one returns. For writes the log refused, undone
    /// newest first, so `change` is always the latest write still standing in this space:
    /// the new tuple is where the write put it and the old tuple's keys are free again.
    /// Never refused for memory: the old tuple is held already, and the index nodes it
    /// takes are charged even past the limit.
    pub fn undo(&mut self, change: Change) -> Result<()> {
        if let Some(new) = &change.new {
            debug_assert!(
                self.indexes[0]
                    .get(&self.tuple_keys(new)?[0])
                    .is_some_and(|stored| Tuple::ptr_eq(&stored, new)),
                "undo of a write that is not the latest for its key"
            );
            self.remove_from_all_indexes(new)?;
        }
        if let Some(old) = change.old {
            self.put_back(old)?;
        }
        Ok(())
    }

    /// Stores a tuple that was in this space a moment ago and whose keys are free.
    fn put_back(&mut self, old: Tuple) -> Result<()> {
        let keys = self.tuple_keys(&old)?;
        for (index, key) in self.indexes.iter_mut().zip(keys) {
            let displaced = index.insert(key, old.clone());
            debug_assert!(displaced.is_none(), "a key taken by another tuple");
        }
        self.put_back_in_redefinition(&old);
        self.settle_index_bytes();
        Ok(())
    }

    fn remove_from_all_indexes(&mut self, old: &Tuple) -> Result<()> {
        let keys = self.tuple_keys(old)?;
        for (index, key) in self.indexes.iter_mut().zip(&keys) {
            let removed = index.remove(key);
            debug_assert!(removed.is_some_and(|t| Tuple::ptr_eq(&t, old)));
        }
        self.remove_from_redefinition(old);
        self.settle_index_bytes();
        Ok(())
    }
}

impl Drop for Space {
    /// Gives the quota back what the indexes held; the tuples give back their pages as
    /// their last references go.
    fn drop(&mut self) {
        for index in &mut self.indexes {
            index.clear();
        }
        if let Some(redefinition) = &mut self.redefinition {
            redefinition.clear();
        }
        self.quota.release(self.index_bytes as u64);
    }
}

/// A primary key as `put_primary_only` holds it: the integer of a key of one unsigned part,
/// which needs no encoding, or the encoded bytes of any other.
enum PrimaryKey {
    Unsigned(u64),
    Encoded(KeyBuf),
}

impl PrimaryKey {
    /// Stores `tuple` under this key; returns the tuple it displaced.
    #[inline]
    fn put(&self, index: &mut Index, tuple: Tuple) -> Option<Tuple> {
        match self {
            PrimaryKey::Unsigned(key) => index.insert_unsigned(*key, tuple),
            PrimaryKey::Encoded(key) => index.insert(key.clone(), tuple),
        }
    }
}

/// Which fields Tarantool's format types `double`: those the space format declares so, and
/// those an index part compares as doubles (a part's type narrows its field's).
fn double_fields<'d>(
    format: &SpaceFormat,
    indexes: impl IntoIterator<Item = &'d IndexDef>,
) -> Box<[bool]> {
    let mut doubles: Vec<bool> = format
        .fields
        .iter()
        .map(|field| field.field_type == FieldType::Double)
        .collect();
    for index in indexes {
        for part in &index.key_def.parts {
            if part.field_type == FieldType::Double {
                let field_no = part.field_no as usize;
                if doubles.len() <= field_no {
                    doubles.resize(field_no + 1, false);
                }
                doubles[field_no] = true;
            }
        }
    }
    doubles.into_boxed_slice()
}

/// The unsigned integer in field `field_no` of the msgpack array `data` when every field
/// before it is a scalar, else `None`. Reads no further than it needs and validates
/// nothing else: for hints, never for decisions.
#[inline]
fn unvalidated_uint_field(data: &[u8], field_no: u32) -> Option<u64> {
    let (&marker, mut fields) = data.split_first()?;
    match marker {
        0x90..=0x9f => {}
        0xdc => fields = fields.get(2..)?,
        0xdd => fields = fields.get(4..)?,
        _ => return None,
    }
    for _ in 0..field_no {
        fields = fields.get(msgpack::scalar_len(fields)?..)?;
    }
    msgpack::leading_uint(fields).map(|(value, _)| value)
}

#[cfg(test)]
#[path = "space_tests.rs"]
mod tests;
