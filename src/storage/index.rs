//! Indexes: TREE (ordered, unique or not) and HASH (unique) over encoded keys.
//!
//! An index maps the encoded key of each tuple to the tuple. A non-unique index appends the
//! primary key's encoding to its own, so equal keys order by primary key (as in Tarantool)
//! and every entry is still distinct. Entries share the tuple with the primary index.
//!
//! Knows nothing of formats or quotas; the space decides what goes in.

use crate::msgpack::{self, Value};
use crate::storage::btree::bytes::{self, BytesTree};
use crate::storage::btree::{self, BTree, LookupCursor};
use crate::storage::bulk;
use crate::storage::error::{Result, StorageError};
use crate::storage::field_type::FieldType;
use crate::storage::key::{KeyBuf, KeyDef, KeyPart, SearchKeyBuf};
use crate::storage::prefetch::{prefetch_line, prefetch_slice};
use crate::storage::range::{IteratorType, KeyRange};
use crate::storage::slab::TupleSlab;
use crate::storage::tuple::{
    ArenaTuples, FieldMap, FieldSlot, SpaceFormat, Tuple, TupleRef, UnsignedKeyedTuples,
};
use smallvec::{Array, SmallVec};
use std::collections::{hash_map, HashMap};
use std::ops::Bound;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKind {
    Tree,
    Hash,
}

impl IndexKind {
    pub fn name(self) -> &'static str {
        match self {
            IndexKind::Tree => "TREE",
            IndexKind::Hash => "HASH",
        }
    }
}

#[derive(Debug, Clone)]
pub struct IndexDef {
    pub id: u32,
    pub name: Box<str>,
    pub kind: IndexKind,
    pub unique: bool,
    pub key_def: KeyDef,
}

impl IndexDef {
    /// A TREE index over `parts`.
    pub fn tree(
        id: u32,
        name: &str,
        unique: bool,
        parts: impl IntoIterator<Item = KeyPart>,
    ) -> IndexDef {
        IndexDef {
            id,
            name: name.into(),
            kind: IndexKind::Tree,
            unique,
            key_def: KeyDef::new(parts),
        }
    }
}

/// An index entry as built: the encoded key and the shared tuple.
pub type Entry = (KeyBuf, Tuple);
/// An entry of an index keyed by one unsigned part.
pub type UnsignedEntry = (u64, Tuple);

/// The key of an entry as a walk yields it: borrowed bytes (a HASH index's), an unsigned
/// key (whose bytes are its 8 big-endian ones, as `KeyPart::encode` writes them), or, in a
/// TREE index keyed as bytes, which keeps no keys, the key of the tuple beside it, written
/// on request. Every payload is word-aligned: with the unsigned key as bytes, a walk copied
/// a head through a misaligned 16-byte load that stalled on the store before it.
#[derive(Clone, Copy)]
pub enum IndexKey<'a> {
    Bytes(&'a [u8]),
    Unsigned(u64),
    OfTuple {
        /// The key's first 16 bytes, zero-padded, as the leaf keeps them.
        head: bytes::KeyHead,
        keys: &'a TreeTuples,
    },
}

impl<'a> IndexKey<'a> {
    /// The key's bytes; `tuple` is the entry's, which holds the key of an `OfTuple` key,
    /// written into `scratch`.
    #[inline]
    pub fn bytes<'k>(&'k self, tuple: &Tuple, scratch: &'k mut SearchKeyBuf) -> &'k [u8] {
        match self {
            IndexKey::Bytes(bytes) => bytes,
            IndexKey::Unsigned(key) => {
                scratch.clear();
                scratch.extend_from_slice(&key.to_be_bytes());
                scratch
            }
            IndexKey::OfTuple { keys, .. } => {
                scratch.clear();
                keys.write(tuple, scratch);
                scratch
            }
        }
    }

    /// The key's first 16 bytes, zero-padded: where two heads differ they order their
    /// keys (see [`bytes::head_of`]), and an `OfTuple` key's is at hand, where its whole
    /// key is written from the tuple.
    #[inline]
    pub fn head(&self) -> [u8; 16] {
        let [high, low] = match self {
            IndexKey::OfTuple { head, .. } => *head,
            IndexKey::Bytes(bytes) => bytes::head_of(bytes),
            IndexKey::Unsigned(key) => [*key, 0],
        };
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&high.to_be_bytes());
        bytes[8..].copy_from_slice(&low.to_be_bytes());
        bytes
    }

    /// Starts loading the key's bytes, where they are elsewhere than the entry (a long
    /// key on the heap); an unsigned key is already in hand.
    #[inline]
    pub fn prefetch(&self) {
        if let IndexKey::Bytes(bytes) = self {
            prefetch_slice(bytes);
        }
    }
}

/// How many entries ahead a bulk build's gather asks for the keys and tuples it will read.
const GATHER_PREFETCH_DISTANCE: usize = 16;

/// Keys longer than this leave the entry for the heap (`KeyBuf`'s inline capacity).
const INLINE_KEY_BYTES: usize = 16;

/// Unique indexes on one non-nullable unsigned part — most primary keys — are this
/// crate's wide-node B+tree keyed by `u64`: its order is the order of the key's encoding,
/// and a leaf entry is 8 bytes, a 32-bit hint of the key and the tuple's 32-bit arena
/// handle (see [`crate::storage::btree`]), so more of the tree fits in cache; point
/// lookups and replaces on the primary key are dominated by it. Every other TREE index is
/// the B+tree of byte keys ([`BytesTree`]): a leaf entry is the key's first 16 bytes and
/// the tuple's handle, and the key itself is written from the tuple where those tie
/// ([`TreeTuples`]). `repr(u8)`: a tag of its own, so a match is one jump (in the niches of
/// the trees' fields it took three instructions more, on every lookup).
#[repr(u8)]
enum IndexData {
    Tree(BytesTree<TreeTuples>),
    TreeUnsigned(BTree<UnsignedKeyedTuples>),
    Hash(HashMap<KeyBuf, Tuple, ahash::RandomState>),
    HashUnsigned(HashMap<u64, Tuple, ahash::RandomState>),
}

pub struct Index {
    pub def: IndexDef,
    /// The parts an entry key is made of: the index's own, then (non-unique only) the
    /// primary key's.
    entry_key_def: KeyDef,
    data: IndexData,
    /// Heap bytes of a HASH index's keys too long to stay inline in their entry.
    spilled_key_bytes: usize,
}

/// The `u64` of an unsigned key's 8-byte encoding; `None` for any other length.
#[inline]
fn unsigned_key(key: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = key.try_into().ok()?;
    Some(u64::from_be_bytes(bytes))
}

/// Translates a byte-string bound into the same set of 8-byte keys as a `u64` bound. A
/// shorter bound `s` stands for the least 8-byte key above it (`s` padded with zeros); a
/// longer one for its first 8 bytes, which every matching key exceeds.
fn unsigned_bound(bound: Bound<&[u8]>, is_start: bool) -> Bound<u64> {
    let (bytes, excluded) = match bound {
        Bound::Unbounded => return Bound::Unbounded,
        Bound::Included(bytes) => (bytes, false),
        Bound::Excluded(bytes) => (bytes, true),
    };
    let mut padded = [0u8; 8];
    let len = bytes.len().min(8);
    padded[..len].copy_from_slice(&bytes[..len]);
    let value = u64::from_be_bytes(padded);
    match (bytes.len().cmp(&8), is_start) {
        (std::cmp::Ordering::Equal, _) if excluded => Bound::Excluded(value),
        (std::cmp::Ordering::Equal, _) => Bound::Included(value),
        (std::cmp::Ordering::Less, true) => Bound::Included(value),
        (std::cmp::Ordering::Less, false) => Bound::Excluded(value),
        (std::cmp::Ordering::Greater, true) => Bound::Excluded(value),
        (std::cmp::Ordering::Greater, false) => Bound::Included(value),
    }
}

fn spilled_len(key: &[u8]) -> usize {
    if key.len() > INLINE_KEY_BYTES {
        key.len()
    } else {
        0
    }
}

impl Index {
    /// An empty index of `def` in a space whose primary key is `primary_key_def`, whose
    /// tuples have `field_map` and live in `slab`.
    pub fn new(
        def: IndexDef,
        primary_key_def: &KeyDef,
        field_map: &FieldMap,
        slab: &TupleSlab,
    ) -> Index {
        let mut entry_key_def = def.key_def.clone();
        if !def.unique {
            entry_key_def
                .parts
                .extend(primary_key_def.parts.iter().copied());
        }
        let unsigned_slot = match entry_key_def.parts.as_slice() {
            [part] if part.field_type == FieldType::Unsigned && !part.is_nullable => {
                field_map.slot_of(part.field_no)
            }
            _ => None,
        };
        let data = match (def.kind, unsigned_slot) {
            (IndexKind::Tree, None) => IndexData::Tree(BytesTree::new(TreeTuples::new(
                slab,
                &entry_key_def,
                field_map,
            ))),
            (IndexKind::Tree, Some(slot)) => {
                IndexData::TreeUnsigned(BTree::new(UnsignedKeyedTuples::new(slab, slot)))
            }
            (IndexKind::Hash, None) => IndexData::Hash(HashMap::default()),
            (IndexKind::Hash, Some(_)) => IndexData::HashUnsigned(HashMap::default()),
        };
        Index {
            def,
            entry_key_def,
            data,
            spilled_key_bytes: 0,
        }
    }

    pub fn len(&self) -> usize {
        match &self.data {
            IndexData::Tree(map) => map.len(),
            IndexData::TreeUnsigned(map) => map.len(),
            IndexData::Hash(map) => map.len(),
            IndexData::HashUnsigned(map) => map.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Encodes the entry key of `tuple`. A field of the wrong type or a missing required
    /// field is Tarantool's 23 / 39 error.
    pub fn encode_tuple_key<A: Array<Item = u8>>(
        &self,
        tuple: &Tuple,
        field_map: &FieldMap,
        format: &SpaceFormat,
        out: &mut SmallVec<A>,
    ) -> Result<()> {
        encode_tuple_key(&self.entry_key_def, tuple, field_map, format, out)
    }

    /// How the entry keys of tuples `a` and `b` (msgpack arrays) compare; tuples that do
    /// not give keys compare as bytes, after those that do.
    ///
    /// The keys are encoded a part at a time and compared as far as both reach: bytes that
    /// differ there decide, whatever follows, so two keys whose first 16 bytes tie (the
    /// merge of a fan-out asks for those) are most often told apart by their third part,
    /// without the rest encoded.
    pub fn compare_entry_keys(&self, a: &[u8], b: &[u8]) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        let key_def = &self.entry_key_def;
        let (a_fields, b_fields) = match (key_def.key_fields(a), key_def.key_fields(b)) {
            (Ok(a_fields), Ok(b_fields)) => (a_fields, b_fields),
            (Ok(_), Err(_)) => return Ordering::Less,
            (Err(_), Ok(_)) => return Ordering::Greater,
            (Err(_), Err(_)) => return a.cmp(b),
        };
        let (mut a_key, mut b_key) = (SearchKeyBuf::new(), SearchKeyBuf::new());
        for part in &key_def.parts {
            let field = part.field_no as usize;
            let a_part = encode_key_part(part, a_fields.get(field).copied(), &mut a_key);
            let b_part = encode_key_part(part, b_fields.get(field).copied(), &mut b_key);
            match (a_part, b_part) {
                (Ok(()), Ok(())) => {}
                (Ok(()), Err(_)) => return Ordering::Less,
                (Err(_), Ok(())) => return Ordering::Greater,
                (Err(_), Err(_)) => return a.cmp(b),
            }
            let common = a_key.len().min(b_key.len());
            match a_key[..common].cmp(&b_key[..common]) {
                Ordering::Equal => {}
                decided => return decided,
            }
        }
        a_key.cmp(&b_key)
    }

    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<TupleRef<'_>> {
        match &self.data {
            IndexData::Tree(map) => map.get(key),
            IndexData::TreeUnsigned(map) => map.get(unsigned_key(key)?),
            IndexData::Hash(map) => map.get(key).map(TupleRef::from),
            IndexData::HashUnsigned(map) => map.get(&unsigned_key(key)?).map(TupleRef::from),
        }
    }

    /// [`Index::get`] for a write about to change what it finds (`BTree::get_for_write`).
    #[inline]
    pub fn get_for_write(&self, key: &[u8]) -> Option<TupleRef<'_>> {
        match &self.data {
            IndexData::TreeUnsigned(map) => map.get_for_write(unsigned_key(key)?),
            _ => self.get(key),
        }
    }

    /// The entry with exactly `key`, as a walk would yield it.
    #[inline]
    pub fn get_entry(&self, key: &[u8]) -> Option<(IndexKey<'_>, TupleRef<'_>)> {
        match &self.data {
            IndexData::Tree(map) => map.get(key).map(|tuple| {
                (
                    IndexKey::OfTuple {
                        head: bytes::head_of(key),
                        keys: map.store(),
                    },
                    tuple,
                )
            }),
            IndexData::Hash(map) => map.get_key_value(key).map(bytes_entry),
            IndexData::TreeUnsigned(map) => {
                let k = unsigned_key(key)?;
                map.get(k).map(|t| (IndexKey::Unsigned(k), t))
            }
            IndexData::HashUnsigned(map) => map
                .get_key_value(&unsigned_key(key)?)
                .map(|(k, t)| (IndexKey::Unsigned(*k), TupleRef::from(t))),
        }
    }

    /// The entry with unsigned key `key` in an index keyed by one unsigned part: the lookup
    /// of `get_entry` without encoding the key. `None` when the index is keyed otherwise.
    /// `fetched` is a fetch-ahead lookup of `key` in this index, if any: where it proves
    /// the entry's place, the lookup reads it there instead of descending from the root.
    #[inline]
    pub fn get_entry_unsigned(
        &self,
        key: u64,
        fetched: Option<&LookupCursor>,
    ) -> Option<Option<(IndexKey<'_>, TupleRef<'_>)>> {
        let found = match &self.data {
            IndexData::TreeUnsigned(map) => fetched
                .and_then(|cursor| map.found_at(key, cursor))
                .or_else(|| map.get(key)),
            IndexData::HashUnsigned(map) => map.get(&key).map(TupleRef::from),
            IndexData::Tree(_) | IndexData::Hash(_) => return None,
        };
        Some(found.map(|tuple| (IndexKey::Unsigned(key), tuple)))
    }

    /// The entries of a TREE index keyed by one unsigned part from `key` on, in the
    /// direction of `iterator` (GE, GT, LE or LT): a scan from a whole unsigned key, found
    /// without encoding it or working out byte bounds. `None` for any other index or
    /// iterator, which the general path serves.
    #[inline]
    pub fn range_unsigned(&self, iterator: IteratorType, key: u64) -> Option<IndexIter<'_>> {
        let IndexData::TreeUnsigned(map) = &self.data else {
            return None;
        };
        let (start, end) = match iterator {
            IteratorType::Ge => (Bound::Included(key), Bound::Unbounded),
            IteratorType::Gt => (Bound::Excluded(key), Bound::Unbounded),
            IteratorType::Le => (Bound::Unbounded, Bound::Included(key)),
            IteratorType::Lt => (Bound::Unbounded, Bound::Excluded(key)),
            _ => return None,
        };
        Some(IndexIter::TreeUnsigned {
            entries: map.range(start, end),
            descending: iterator.is_descending(),
        })
    }

    /// Starts fetching ahead the lookup of the unsigned `key`, for a request that runs a
    /// few requests from now; [`Index::prefetch_step`] takes it one load further. `None`
    /// when there is nothing (more) to fetch: an index keyed otherwise, or a hash index,
    /// whose tuple is fetched at once since it has no path to walk.
    #[inline]
    pub fn prefetch_start(&self, key: u64) -> Option<LookupCursor> {
        match &self.data {
            IndexData::TreeUnsigned(map) => Some(map.prefetch_start()),
            IndexData::HashUnsigned(map) => {
                if let Some(tuple) = map.get(&key) {
                    tuple.prefetch_for_read();
                }
                None
            }
            IndexData::Tree(_) | IndexData::Hash(_) => None,
        }
    }

    /// One more load of the lookup [`Index::prefetch_start`] began; at the end of the
    /// path, the tuple's first lines.
    #[inline]
    pub fn prefetch_step(&self, key: u64, cursor: &mut LookupCursor) {
        if let IndexData::TreeUnsigned(map) = &self.data {
            if let Some(tuple) = map.prefetch_step(key, cursor) {
                tuple.prefetch_for_read();
            }
        }
    }

    /// Inserts or overwrites; returns the tuple previously stored under this exact key.
    pub fn insert(&mut self, key: KeyBuf, tuple: Tuple) -> Option<Tuple> {
        match &mut self.data {
            IndexData::Tree(map) => map.insert(&key, tuple),
            IndexData::Hash(map) => {
                let spilled = spilled_len(&key);
                let old = map.insert(key, tuple);
                if old.is_none() {
                    self.spilled_key_bytes += spilled;
                }
                old
            }
            IndexData::TreeUnsigned(map) => map.insert(expect_unsigned(&key), tuple),
            IndexData::HashUnsigned(map) => map.insert(expect_unsigned(&key), tuple),
        }
    }

    /// A loader of this index's contents from `len` entries in key order, for a TREE index
    /// keyed as bytes (see [`bytes::SortedLoader`]); `None` for the others.
    pub fn sorted_loader(&self, len: usize) -> Option<bytes::SortedLoader<TreeTuples>> {
        match &self.data {
            IndexData::Tree(map) => Some(bytes::SortedLoader::new(map.store().clone(), len)),
            _ => None,
        }
    }

    /// Replaces the contents with `tree`, loaded by [`Index::sorted_loader`].
    pub fn install(&mut self, tree: BytesTree<TreeTuples>) {
        debug_assert!(matches!(self.data, IndexData::Tree(_)));
        self.spilled_key_bytes = 0;
        self.data = IndexData::Tree(tree);
    }

    /// Whether [`Index::sorted_loader`] gives a loader.
    pub fn loads_sorted(&self) -> bool {
        matches!(self.data, IndexData::Tree(_))
    }

    /// `insert` under a key held elsewhere (a scratch buffer): a TREE index keeps no copy.
    pub fn insert_slice(&mut self, key: &[u8], tuple: Tuple) -> Option<Tuple> {
        match &mut self.data {
            IndexData::Tree(map) => map.insert(key, tuple),
            _ => self.insert(KeyBuf::from_slice(key), tuple),
        }
    }

    /// The key of `tuple` in an index keyed by one unsigned part, read from the tuple's
    /// field map without encoding it. `None` when the index is keyed otherwise or the field
    /// is not a plain unsigned integer: the general path then decides, errors included.
    #[inline]
    pub fn unsigned_tuple_key(&self, tuple: &Tuple, field_map: &FieldMap) -> Option<u64> {
        if !matches!(
            self.data,
            IndexData::TreeUnsigned(_) | IndexData::HashUnsigned(_)
        ) {
            return None;
        }
        let [part] = self.entry_key_def.parts.as_slice() else {
            return None;
        };
        let field = tuple.field_in_slot(field_map.slot_of(part.field_no)?)?;
        msgpack::leading_uint(field).map(|(value, _)| value)
    }

    /// `insert` with a key from `unsigned_tuple_key`, as the integer.
    #[inline]
    pub fn insert_unsigned(&mut self, key: u64, tuple: Tuple) -> Option<Tuple> {
        match &mut self.data {
            IndexData::TreeUnsigned(map) => map.insert(key, tuple),
            IndexData::HashUnsigned(map) => map.insert(key, tuple),
            IndexData::Tree(_) | IndexData::Hash(_) => {
                debug_assert!(false, "an unsigned key for an index keyed otherwise");
                self.insert(KeyBuf::from_slice(&key.to_be_bytes()), tuple)
            }
        }
    }

    /// The leaf of a TREE index keyed by one unsigned part where `key` is or would be,
    /// already loading (`BTree::leaf_for_write`); `None` for other indexes and an empty tree.
    /// Always inlined: each of `Space`'s two leaf writers (bytes, pieces) keeps the descent
    /// in its own frame, as the one writer did.
    #[inline(always)]
    pub fn unsigned_leaf(
        &mut self,
        key: u64,
    ) -> Option<btree::LeafHandle<'_, UnsignedKeyedTuples>> {
        match &mut self.data {
            IndexData::TreeUnsigned(map) => map.leaf_for_write(key),
            _ => None,
        }
    }

    /// Starts loading where unsigned `key` is or would be, for a write that follows soon;
    /// a hint that does nothing on indexes keyed otherwise.
    #[inline]
    pub fn prefetch_unsigned(&self, key: u64) {
        if let IndexData::TreeUnsigned(map) = &self.data {
            map.prefetch_leaf(key);
        }
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<Tuple> {
        match &mut self.data {
            IndexData::Tree(map) => map.remove(key),
            IndexData::Hash(map) => {
                let removed = map.remove(key);
                if removed.is_some() {
                    self.spilled_key_bytes -= spilled_len(key);
                }
                removed
            }
            IndexData::TreeUnsigned(map) => map.remove(unsigned_key(key)?),
            IndexData::HashUnsigned(map) => map.remove(&unsigned_key(key)?),
        }
    }

    pub fn clear(&mut self) {
        match &mut self.data {
            IndexData::Tree(map) => map.clear(),
            IndexData::TreeUnsigned(map) => map.clear(),
            IndexData::Hash(map) => map.clear(),
            IndexData::HashUnsigned(map) => map.clear(),
        }
        self.spilled_key_bytes = 0;
    }

    /// Replaces the contents with one entry per tuple of `tuples`, keyed as
    /// [`Index::encode_tuple_key`] keys it, sorted once and filled from the sorted run.
    /// Returns the quota bytes of the entries. A key that does not encode, or two tuples
    /// with one key in a unique index (Tarantool's duplicate error), fails the build and
    /// leaves the contents as they were.
    pub fn bulk_build(
        &mut self,
        tuples: &[Tuple],
        field_map: &FieldMap,
        format: &SpaceFormat,
        space_name: &str,
    ) -> Result<usize> {
        match self.data {
            IndexData::TreeUnsigned(_) | IndexData::HashUnsigned(_) => {
                self.bulk_build_unsigned(tuples, field_map, format, space_name)
            }
            IndexData::Tree(_) | IndexData::Hash(_) => {
                self.bulk_build_bytes(tuples, field_map, format, space_name)
            }
        }
    }

    /// [`Index::bulk_build`] for keys of one unsigned part: the entries are sorted as
    /// `(u64, tuple)` pairs, and not at all when they come in order, as a primary index's
    /// do from a snapshot (written in primary key order).
    fn bulk_build_unsigned(
        &mut self,
        tuples: &[Tuple],
        field_map: &FieldMap,
        format: &SpaceFormat,
        space_name: &str,
    ) -> Result<usize> {
        let mut scratch = SearchKeyBuf::new();
        let mut entries: Vec<UnsignedEntry> = Vec::with_capacity(tuples.len());
        let mut ascending = true;
        for tuple in tuples {
            scratch.clear();
            self.encode_tuple_key(tuple, field_map, format, &mut scratch)?;
            let key = expect_unsigned(&scratch);
            ascending &= entries.last().is_none_or(|(last, _)| *last < key);
            entries.push((key, tuple.clone()));
        }
        if !ascending {
            entries.sort_unstable_by_key(|(key, _)| *key);
            if let Some(pair) = entries.windows(2).find(|pair| pair[0].0 == pair[1].0) {
                return Err(self.duplicate(space_name, &pair[0].1, &pair[1].1));
            }
        }
        debug_assert!(entries.windows(2).all(|pair| pair[0].0 < pair[1].0));
        self.spilled_key_bytes = 0;
        self.data = match &self.data {
            IndexData::TreeUnsigned(map) => {
                IndexData::TreeUnsigned(BTree::from_sorted(map.store().clone(), entries))
            }
            _ => {
                let mut map = HashMap::with_capacity_and_hasher(entries.len(), Default::default());
                map.extend(entries);
                IndexData::HashUnsigned(map)
            }
        };
        Ok(self.allocated_bytes())
    }

    /// [`Index::bulk_build`] for keys kept as bytes. The keys are encoded into one buffer
    /// and sorted there, and the entries gathered in key order: a TREE index fills its
    /// leaves from the sorted run, a HASH index allocates each key in that order.
    fn bulk_build_bytes(
        &mut self,
        tuples: &[Tuple],
        field_map: &FieldMap,
        format: &SpaceFormat,
        space_name: &str,
    ) -> Result<usize> {
        let mut scratch = SearchKeyBuf::new();
        let mut keys: Vec<u8> = Vec::with_capacity(tuples.len() * INLINE_KEY_BYTES);
        // Key `i` is `keys[bounds[i]..bounds[i + 1]]`.
        let mut bounds: Vec<usize> = Vec::with_capacity(tuples.len() + 1);
        bounds.push(0);
        // The entries' references to the tuples, taken while the tuples are read in order:
        // taken in key order, each would be a cache miss on a tuple's reference count.
        let mut shared: Vec<Option<Tuple>> = Vec::with_capacity(tuples.len());
        let mut spilled_key_bytes = 0;
        for tuple in tuples {
            scratch.clear();
            self.encode_tuple_key(tuple, field_map, format, &mut scratch)?;
            keys.extend_from_slice(&scratch);
            bounds.push(keys.len());
            if self.def.kind == IndexKind::Hash {
                spilled_key_bytes += spilled_len(&scratch);
            }
            shared.push(Some(tuple.clone()));
        }
        let key_of = |position: usize| &keys[bounds[position]..bounds[position + 1]];
        let sorted = bulk::sort_by_key(tuples.len(), key_of);
        if let Some((a, b)) = sorted.first_duplicate {
            return Err(self.duplicate(space_name, &tuples[a], &tuples[b]));
        }
        // The gather below reads each key's bounds, its bytes and its tuple reference at
        // random places; asking for them ahead (the bounds twice as far, since the bytes'
        // address comes from them) overlaps those cache misses with the allocations.
        let shared_start = shared.as_ptr();
        let bounds_start = bounds.as_ptr();
        let entries = sorted.order.iter().enumerate().map(|(rank, &position)| {
            if let Some(&further) = sorted.order.get(rank + 2 * GATHER_PREFETCH_DISTANCE) {
                prefetch_line(bounds_start.wrapping_add(further).cast());
            }
            if let Some(&ahead) = sorted.order.get(rank + GATHER_PREFETCH_DISTANCE) {
                prefetch_slice(key_of(ahead));
                prefetch_line(shared_start.wrapping_add(ahead).cast());
            }
            let tuple = shared[position].take();
            debug_assert!(tuple.is_some(), "the sort yields each position once");
            let tuple = tuple.unwrap_or_else(|| tuples[position].clone());
            (key_of(position), tuple)
        });
        self.data = match &self.data {
            IndexData::Tree(map) => {
                IndexData::Tree(BytesTree::from_sorted(map.store().clone(), entries))
            }
            _ => {
                let mut map = HashMap::with_capacity_and_hasher(tuples.len(), Default::default());
                map.extend(entries.map(|(key, tuple)| (KeyBuf::from_slice(key), tuple)));
                IndexData::Hash(map)
            }
        };
        self.spilled_key_bytes = spilled_key_bytes;
        Ok(self.allocated_bytes())
    }

    fn duplicate(&self, space_name: &str, old: &Tuple, new: &Tuple) -> StorageError {
        StorageError::TupleFound {
            index: self.def.name.clone(),
            space: space_name.into(),
            old_tuple: crate::storage::text::msgpack_to_text(old.data()).into(),
            new_tuple: crate::storage::text::msgpack_to_text(new.data()).into(),
        }
    }

    /// Bytes held by the index itself (nodes, entries and spilled keys; tuples are counted
    /// by the space's slab): tarn's B+trees count their nodes as they make and free them,
    /// O(1); for std's hash maps the slack is estimated at two bytes an entry.
    #[inline]
    pub fn allocated_bytes(&self) -> usize {
        let (entry_size, overhead_per_entry) = match &self.data {
            IndexData::TreeUnsigned(map) => return map.node_bytes(),
            IndexData::Tree(map) => return map.node_bytes(),
            IndexData::Hash(_) => (std::mem::size_of::<Entry>(), 2),
            IndexData::HashUnsigned(_) => (std::mem::size_of::<UnsignedEntry>(), 2),
        };
        self.len() * (entry_size + overhead_per_entry) + self.spilled_key_bytes
    }

    /// Validates an iterator and key against this index's type, the checks Tarantool makes
    /// before iterating; `parts` is the number of key parts given.
    #[inline]
    pub fn check_iterator(&self, iterator: IteratorType, parts: u32, space: &str) -> Result<()> {
        self.check_partial_key(iterator, parts)?;
        self.check_iterator_supported(iterator, space)
    }

    /// 136 for a HASH lookup by a key of fewer parts than the index has (an empty key is
    /// fine for ALL and GT), as Tarantool's `key_validate`: it comes before the key's types
    /// are checked.
    pub fn check_partial_key(&self, iterator: IteratorType, parts: u32) -> Result<()> {
        let full = self.def.key_def.part_count();
        let partial_hash_lookup = self.def.kind == IndexKind::Hash
            && parts != full
            && !(parts == 0 && matches!(iterator, IteratorType::All | IteratorType::Gt));
        if partial_hash_lookup {
            return Err(StorageError::PartialKey {
                index_type: "HASH",
                expected: full,
                actual: parts,
            });
        }
        Ok(())
    }

    /// 112 for an iterator this index's type does not offer: Tarantool finds that when it
    /// creates the iterator, after every check of the key.
    #[inline]
    pub fn check_iterator_supported(&self, iterator: IteratorType, space: &str) -> Result<()> {
        let supported = match self.def.kind {
            IndexKind::Tree => matches!(
                iterator,
                IteratorType::Eq
                    | IteratorType::Req
                    | IteratorType::All
                    | IteratorType::Lt
                    | IteratorType::Le
                    | IteratorType::Ge
                    | IteratorType::Gt
            ),
            IndexKind::Hash => matches!(
                iterator,
                IteratorType::Eq | IteratorType::All | IteratorType::Gt
            ),
        };
        if !supported {
            return Err(StorageError::UnsupportedIndexFeature {
                index: self.def.name.clone(),
                index_type: self.def.kind.name(),
                space: space.into(),
                feature: "requested iterator type",
            });
        }
        Ok(())
    }

    /// Walks the index. For TREE indexes `range` decides everything; for HASH indexes the
    /// iterator and key decide (EQ: one lookup, ALL: everything, GT: after the key's place).
    pub fn iter<'a>(
        &'a self,
        range: &KeyRange<'_>,
        hash_iterator: IteratorType,
        key: &[u8],
    ) -> IndexIter<'a> {
        let descending = range.is_descending();
        match &self.data {
            IndexData::Tree(map) => match range.std_bounds() {
                None => IndexIter::Empty,
                Some((start, end)) => IndexIter::Tree {
                    entries: map.range(start, end),
                    keys: map.store(),
                    descending,
                },
            },
            IndexData::TreeUnsigned(map) => {
                let Some((start, end)) = range.std_bounds() else {
                    return IndexIter::Empty;
                };
                let (start, end) = (unsigned_bound(start, true), unsigned_bound(end, false));
                IndexIter::TreeUnsigned {
                    entries: map.range(start, end),
                    descending,
                }
            }
            IndexData::Hash(map) => match hash_iterator {
                IteratorType::Eq => IndexIter::One(
                    map.get_key_value(key)
                        .map(|(k, t)| (IndexKey::Bytes(k), TupleRef::from(t))),
                ),
                IteratorType::Gt if !key.is_empty() => {
                    let mut entries = map.iter();
                    // Deprecated HASH GT: the entries after the key's place in hash order.
                    match entries.by_ref().any(|(k, _)| k.as_slice() == key) {
                        true => IndexIter::Hash(entries),
                        false => IndexIter::Empty,
                    }
                }
                _ => IndexIter::Hash(map.iter()),
            },
            IndexData::HashUnsigned(map) => {
                let wanted = unsigned_key(key);
                match hash_iterator {
                    IteratorType::Eq => IndexIter::One(
                        wanted
                            .and_then(|k| map.get_key_value(&k))
                            .map(|(k, t)| (IndexKey::Unsigned(*k), TupleRef::from(t))),
                    ),
                    IteratorType::Gt if !key.is_empty() => {
                        let mut entries = map.iter();
                        match entries.by_ref().any(|(k, _)| Some(*k) == wanted) {
                            true => IndexIter::HashUnsigned(entries),
                            false => IndexIter::Empty,
                        }
                    }
                    _ => IndexIter::HashUnsigned(map.iter()),
                }
            }
        }
    }

    /// Entry keys and tuples in key order (TREE) or hash order (HASH); for checks and tests.
    pub fn entries(&self) -> IndexIter<'_> {
        self.iter(&KeyRange::ALL, IteratorType::All, &[])
    }
}

/// An entry of a map keyed by bytes, as a walk yields it.
fn bytes_entry<'a>((key, tuple): (&'a KeyBuf, &'a Tuple)) -> (IndexKey<'a>, TupleRef<'a>) {
    (IndexKey::Bytes(key), TupleRef::from(tuple))
}

/// The `u64` of a key this index encoded itself; anything else is a bug in the caller.
fn expect_unsigned(key: &[u8]) -> u64 {
    debug_assert_eq!(key.len(), 8, "an unsigned key encodes to 8 bytes");
    unsigned_key(key).unwrap_or(0)
}

/// Encodes the key of `key_def` taken from `tuple`'s fields.
pub fn encode_tuple_key<A: Array<Item = u8>>(
    key_def: &KeyDef,
    tuple: &Tuple,
    field_map: &FieldMap,
    format: &SpaceFormat,
    out: &mut SmallVec<A>,
) -> Result<()> {
    let fault_of = |part: &KeyPart, fault| match fault {
        KeyPartFault::Missing => StorageError::FieldMissing(format.label(part.field_no)),
        KeyPartFault::Type(actual) => StorageError::FieldType {
            field: format.label(part.field_no),
            expected: part.field_type.name(),
            actual,
        },
        KeyPartFault::Malformed(error) => error,
    };
    for (at, part) in key_def.parts.iter().enumerate() {
        let slot = field_map
            .slot_of(part.field_no)
            .expect("every indexed field has a slot");
        if !tuple.has_slot(slot) {
            let rest = &key_def.parts[at..];
            let field_nos: SmallVec<[u32; 8]> = rest.iter().map(|part| part.field_no).collect();
            let fields = tuple.fields_by_walking(&field_nos);
            for (part, field) in rest.iter().zip(fields) {
                encode_key_part(part, field, out).map_err(|fault| fault_of(part, fault))?;
            }
            return Ok(());
        }
        encode_key_part(part, tuple.field_in_slot(slot), out)
            .map_err(|fault| fault_of(part, fault))?;
    }
    Ok(())
}

/// Why a field does not make its key part.
enum KeyPartFault {
    Missing,
    Type(msgpack::MpType),
    Malformed(StorageError),
}

/// Appends the encoding of key part `part` from `field`, the tuple's bytes from that
/// field on (`None`: the tuple ends before it).
#[inline]
fn encode_key_part<A: Array<Item = u8>>(
    part: &KeyPart,
    field: Option<&[u8]>,
    out: &mut SmallVec<A>,
) -> std::result::Result<(), KeyPartFault> {
    if part.field_type == FieldType::Unsigned && !part.is_nullable {
        // The common key part: its bytes are the integer's, no `Value` needed.
        if let Some((value, _)) = field.and_then(msgpack::leading_uint) {
            out.extend_from_slice(&value.to_be_bytes());
            return Ok(());
        }
    }
    let value = match field {
        Some(mut field) => msgpack::read_value(&mut field)
            .map_err(|error| KeyPartFault::Malformed(error.into()))?,
        None if part.is_nullable => Value::Nil,
        None => return Err(KeyPartFault::Missing),
    };
    if !part.accepts(&value) {
        return Err(KeyPartFault::Type(value.mp_type()));
    }
    part.encode(&value, out);
    Ok(())
}

/// The tuples of a TREE index keyed as bytes, as its leaves keep them (arena handles), and
/// the key of each, written from the tuple's fields: the index keeps no copy of it.
/// Its `KeyStore` implementation, which reads the tuples through their handles, is in
/// `tuple`, beside the other stores of tuples.
#[derive(Clone)]
pub struct TreeTuples {
    pub(crate) tuples: ArenaTuples,
    /// The entry key's parts, each with the field map slot of its field.
    parts: SmallVec<[(KeyPart, FieldSlot); 6]>,
    /// No entry key is shorter: 8 bytes for each plain unsigned part (others not counted).
    pub(crate) shortest_key: usize,
}

impl TreeTuples {
    fn new(slab: &TupleSlab, entry_key_def: &KeyDef, field_map: &FieldMap) -> TreeTuples {
        let parts = entry_key_def
            .parts
            .iter()
            .map(|part| {
                let slot = field_map
                    .slot_of(part.field_no)
                    .expect("every indexed field has a slot");
                (*part, slot)
            })
            .collect();
        let shortest_key = entry_key_def
            .parts
            .iter()
            .map(|part| match part.field_type {
                FieldType::Unsigned if !part.is_nullable => 8,
                _ => 0,
            })
            .sum();
        TreeTuples {
            tuples: ArenaTuples::new(slab),
            parts,
            shortest_key,
        }
    }

    /// Appends the entry key of `tuple`, a tuple this index holds (so every part encodes).
    #[inline]
    pub fn write<A: Array<Item = u8>>(&self, tuple: &Tuple, out: &mut SmallVec<A>) {
        for (at, (part, slot)) in self.parts.iter().enumerate() {
            if !tuple.has_slot(*slot) {
                return self.write_walking(&self.parts[at..], tuple, out);
            }
            let encoded = encode_key_part(part, tuple.field_in_slot(*slot), out);
            debug_assert!(encoded.is_ok(), "a stored tuple's key encodes");
        }
    }

    /// `write`'s `parts` of a tuple built before the index was (it has no slots for their
    /// fields): every field found in one walk of its array.
    #[cold]
    fn write_walking<A: Array<Item = u8>>(
        &self,
        parts: &[(KeyPart, FieldSlot)],
        tuple: &Tuple,
        out: &mut SmallVec<A>,
    ) {
        let field_nos: SmallVec<[u32; 8]> = parts.iter().map(|(part, _)| part.field_no).collect();
        for ((part, _), field) in parts.iter().zip(tuple.fields_by_walking(&field_nos)) {
            let encoded = encode_key_part(part, field, out);
            debug_assert!(encoded.is_ok(), "a stored tuple's key encodes");
        }
    }
}

/// A lazy walk over an index: each step is O(1) amortised after an O(log n) seek.
// The B+tree range carries its root-to-leaf paths inline and so outweighs the other
// variants; boxing it would put an allocation on every select.
#[allow(clippy::large_enum_variant)]
pub enum IndexIter<'a> {
    Empty,
    Tree {
        entries: bytes::BytesRange<'a, TreeTuples>,
        keys: &'a TreeTuples,
        descending: bool,
    },
    TreeUnsigned {
        entries: btree::Range<'a, UnsignedKeyedTuples>,
        descending: bool,
    },
    One(Option<(IndexKey<'a>, TupleRef<'a>)>),
    Hash(hash_map::Iter<'a, KeyBuf, Tuple>),
    HashUnsigned(hash_map::Iter<'a, u64, Tuple>),
}

impl<'a> Iterator for IndexIter<'a> {
    type Item = (IndexKey<'a>, TupleRef<'a>);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            IndexIter::Empty => None,
            IndexIter::Tree {
                entries,
                keys,
                descending,
            } => {
                let (head, tuple) = if *descending {
                    entries.next_back()?
                } else {
                    entries.next()?
                };
                Some((IndexKey::OfTuple { head, keys }, tuple))
            }
            IndexIter::TreeUnsigned {
                entries,
                descending,
            } => {
                let (key, tuple) = if *descending {
                    entries.next_back()?
                } else {
                    entries.next()?
                };
                Some((IndexKey::Unsigned(key), tuple))
            }
            IndexIter::One(entry) => entry.take(),
            IndexIter::Hash(entries) => entries
                .next()
                .map(|(k, t)| (IndexKey::Bytes(k), TupleRef::from(t))),
            IndexIter::HashUnsigned(entries) => entries
                .next()
                .map(|(k, t)| (IndexKey::Unsigned(*k), TupleRef::from(t))),
        }
    }
}
