//! Indexes: TREE (ordered, unique or not) and HASH (unique) over encoded keys.
//!
//! An index maps the encoded key of each tuple to the tuple. A non-unique index appends the
//! primary key's encoding to its own, so equal keys order by primary key (as in Tarantool)
//! and every entry is still distinct. Entries share the tuple with the primary index.
//!
//! Knows nothing of formats or quotas; the space decides what goes in.

use crate::storage::error::{Result, StorageError};
use crate::storage::key::{KeyBuf, KeyDef, KeyPart};
use crate::storage::msgpack::{self, Value};
use crate::storage::range::{IteratorType, KeyRange};
use crate::storage::tuple::{FieldMap, SpaceFormat, Tuple};
use std::collections::{btree_map, hash_map, BTreeMap, HashMap};

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

/// An index entry as stored: the encoded key and the shared tuple.
pub type Entry = (KeyBuf, Tuple);

enum IndexData {
    Tree(BTreeMap<KeyBuf, Tuple>),
    Hash(HashMap<KeyBuf, Tuple, ahash::RandomState>),
}

pub struct Index {
    pub def: IndexDef,
    /// The parts an entry key is made of: the index's own, then (non-unique only) the
    /// primary key's.
    entry_key_def: KeyDef,
    data: IndexData,
    /// Heap bytes of keys too long to stay inline in their entry.
    spilled_key_bytes: usize,
}

impl Index {
    pub fn new(def: IndexDef, primary_key_def: &KeyDef) -> Index {
        let mut entry_key_def = def.key_def.clone();
        if !def.unique {
            entry_key_def
                .parts
                .extend(primary_key_def.parts.iter().copied());
        }
        let data = match def.kind {
            IndexKind::Tree => IndexData::Tree(BTreeMap::new()),
            IndexKind::Hash => IndexData::Hash(HashMap::default()),
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
            IndexData::Hash(map) => map.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Encodes the entry key of `tuple`. A field of the wrong type or a missing required
    /// field is Tarantool's 23 / 39 error.
    pub fn encode_tuple_key(
        &self,
        tuple: &Tuple,
        field_map: &FieldMap,
        format: &SpaceFormat,
        out: &mut KeyBuf,
    ) -> Result<()> {
        encode_tuple_key(&self.entry_key_def, tuple, field_map, format, out)
    }

    pub fn get(&self, key: &[u8]) -> Option<&Tuple> {
        match &self.data {
            IndexData::Tree(map) => map.get(key),
            IndexData::Hash(map) => map.get(key),
        }
    }

    /// Inserts or overwrites; returns the tuple previously stored under this exact key.
    pub fn insert(&mut self, key: KeyBuf, tuple: Tuple) -> Option<Tuple> {
        let spilled = spilled_len(&key);
        let old = match &mut self.data {
            IndexData::Tree(map) => map.insert(key, tuple),
            IndexData::Hash(map) => map.insert(key, tuple),
        };
        if old.is_none() {
            self.spilled_key_bytes += spilled;
        }
        old
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<Tuple> {
        let removed = match &mut self.data {
            IndexData::Tree(map) => map.remove_entry(key),
            IndexData::Hash(map) => map.remove_entry(key),
        };
        removed.map(|(key, tuple)| {
            self.spilled_key_bytes -= spilled_len(&key);
            tuple
        })
    }

    pub fn clear(&mut self) {
        match &mut self.data {
            IndexData::Tree(map) => map.clear(),
            IndexData::Hash(map) => map.clear(),
        }
        self.spilled_key_bytes = 0;
    }

    /// Replaces the contents with `entries`, sorting once and building the tree from the
    /// sorted run (no one-by-one inserts). Fails with 3 on a duplicate in a unique index.
    pub fn bulk_build(&mut self, mut entries: Vec<Entry>, space_name: &str) -> Result<()> {
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        if let Some(pair) = entries.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            return Err(StorageError::TupleFound {
                index: self.def.name.clone(),
                space: space_name.into(),
                old_tuple: crate::storage::text::msgpack_to_text(pair[0].1.data()).into(),
                new_tuple: crate::storage::text::msgpack_to_text(pair[1].1.data()).into(),
            });
        }
        self.spilled_key_bytes = entries.iter().map(|(key, _)| spilled_len(key)).sum();
        self.data = match self.def.kind {
            // Sorted input makes the tree's own sort a single linear pass.
            IndexKind::Tree => IndexData::Tree(entries.into_iter().collect()),
            IndexKind::Hash => IndexData::Hash(entries.into_iter().collect()),
        };
        Ok(())
    }

    /// Approximate bytes held by the index itself (entries and spilled keys; tuples are
    /// counted by the space). B-tree node slack is estimated at one third of the entries.
    pub fn allocated_bytes(&self) -> usize {
        let entry_bytes = self.len() * std::mem::size_of::<Entry>();
        let overhead = match self.def.kind {
            IndexKind::Tree => entry_bytes / 3,
            IndexKind::Hash => self.len() * 2,
        };
        entry_bytes + overhead + self.spilled_key_bytes
    }

    /// Bytes one more entry with this key would add, for the quota check.
    pub fn entry_bytes(key: &KeyBuf) -> usize {
        std::mem::size_of::<Entry>() + spilled_len(key)
    }

    /// Validates an iterator and key against this index's type, the checks Tarantool makes
    /// before iterating; `parts` is the number of key parts given.
    pub fn check_iterator(&self, iterator: IteratorType, parts: u32, space: &str) -> Result<()> {
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
        match &self.data {
            IndexData::Tree(map) => match range.std_bounds() {
                None => IndexIter::Empty,
                Some(bounds) => {
                    let entries = map.range::<[u8], _>(bounds);
                    if range.is_descending() {
                        IndexIter::TreeDescending(entries)
                    } else {
                        IndexIter::TreeAscending(entries)
                    }
                }
            },
            IndexData::Hash(map) => match hash_iterator {
                IteratorType::Eq => IndexIter::HashOne(map.get_key_value(key)),
                IteratorType::Gt if !key.is_empty() => {
                    let mut entries = map.iter();
                    // Deprecated HASH GT: the entries after the key's place in hash order.
                    let found = entries.by_ref().any(|(k, _)| k.as_slice() == key);
                    if found {
                        IndexIter::HashAll(entries)
                    } else {
                        IndexIter::Empty
                    }
                }
                _ => IndexIter::HashAll(map.iter()),
            },
        }
    }

    /// Entry keys and tuples in key order (TREE) or hash order (HASH); for checks and tests.
    pub fn entries(&self) -> IndexIter<'_> {
        self.iter(&KeyRange::ALL, IteratorType::All, &[])
    }
}

fn spilled_len(key: &KeyBuf) -> usize {
    if key.spilled() {
        key.capacity()
    } else {
        0
    }
}

/// Encodes the key of `key_def` taken from `tuple`'s fields.
pub fn encode_tuple_key(
    key_def: &KeyDef,
    tuple: &Tuple,
    field_map: &FieldMap,
    format: &SpaceFormat,
    out: &mut KeyBuf,
) -> Result<()> {
    for part in &key_def.parts {
        let slot = field_map
            .slot_of(part.field_no)
            .expect("every indexed field has a slot");
        let value = match tuple.field_in_slot(slot) {
            Some(mut field) => msgpack::read_value(&mut field)?,
            None if part.is_nullable => Value::Nil,
            None => return Err(StorageError::FieldMissing(format.label(part.field_no))),
        };
        if !part.accepts(&value) {
            return Err(StorageError::FieldType {
                field: format.label(part.field_no),
                expected: part.field_type.name(),
                actual: value.mp_type(),
            });
        }
        part.encode(&value, out);
    }
    Ok(())
}

/// A lazy walk over an index: each step is O(1) amortised after an O(log n) seek.
pub enum IndexIter<'a> {
    Empty,
    TreeAscending(btree_map::Range<'a, KeyBuf, Tuple>),
    TreeDescending(btree_map::Range<'a, KeyBuf, Tuple>),
    HashOne(Option<(&'a KeyBuf, &'a Tuple)>),
    HashAll(hash_map::Iter<'a, KeyBuf, Tuple>),
}

impl<'a> Iterator for IndexIter<'a> {
    type Item = (&'a KeyBuf, &'a Tuple);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            IndexIter::Empty => None,
            IndexIter::TreeAscending(range) => range.next(),
            IndexIter::TreeDescending(range) => range.next_back(),
            IndexIter::HashOne(entry) => entry.take(),
            IndexIter::HashAll(entries) => entries.next(),
        }
    }
}
