//! The catalog: per space, how its rows are placed over the shards and the primary key that
//! places them, looked up by space id in O(1) for the ids spaces usually have. Built once at
//! start from the schema; the request path reads it and never scans the config.
//!
//! Knows storage's key definitions and the config's placement, nothing of engines or cores.

use crate::config::Placement;
use crate::msgpack;
use crate::placement::shard_of_key;
use crate::storage::key::SearchKeyBuf;
use crate::storage::{FieldType, KeyDef};

/// Which shards hold a space's tuples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpacePlacement {
    /// Spread by primary key over all shards.
    ByPrimaryKey,
    /// Whole on shard 0 (spaces with unique secondary indexes).
    Shard0,
    /// A read-only copy on every shard (the system spaces).
    Everywhere,
}

/// Ids below this are Tarantool's system spaces, which every shard holds whole.
const SYSTEM_SPACE_IDS: u32 = 512;
/// Ids below this find their space by position; larger ones (rare) by binary search. As the
/// engine's own table: 8 KiB of positions at most.
const DIRECT_SPACE_IDS: u32 = 1 << 13;
/// A direct slot without a space.
const NO_SPACE: u16 = u16::MAX;

/// One user space as placement sees it.
#[derive(Debug, Clone)]
struct CatalogSpace {
    id: u32,
    placement: SpacePlacement,
    /// `None` for a space without indexes (its requests fail where they run).
    primary_key: Option<KeyDef>,
}

/// A primary key as a request carries it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PrimaryKeyIn<'a> {
    /// A search key (msgpack array) that must give every part of the primary key.
    SearchKey(&'a [u8]),
    /// Inside a whole tuple (msgpack array).
    Tuple(&'a [u8]),
}

/// Every user space's placement and primary key, and the shard count they are placed over.
#[derive(Debug, Clone)]
pub struct Catalog {
    shard_count: usize,
    /// Sorted by id.
    spaces: Vec<CatalogSpace>,
    /// For each id below [`DIRECT_SPACE_IDS`] (up to the largest such id in use), its
    /// space's position in `spaces`, or [`NO_SPACE`].
    position_by_id: Vec<u16>,
}

impl Catalog {
    /// The catalog of `spaces` (id, placement, primary key) over `shard_count` shards.
    pub fn new(
        shard_count: usize,
        spaces: impl IntoIterator<Item = (u32, Placement, Option<KeyDef>)>,
    ) -> Catalog {
        assert!(shard_count >= 1 && shard_count <= u32::MAX as usize);
        let mut spaces: Vec<CatalogSpace> = spaces
            .into_iter()
            .map(|(id, placement, primary_key)| CatalogSpace {
                id,
                placement: match placement {
                    Placement::All => SpacePlacement::ByPrimaryKey,
                    Placement::Single => SpacePlacement::Shard0,
                },
                primary_key,
            })
            .collect();
        spaces.sort_by_key(|space| space.id);
        assert!(spaces.len() < usize::from(NO_SPACE), "too many spaces");
        let direct = || {
            spaces
                .iter()
                .enumerate()
                .filter(|(_, space)| space.id < DIRECT_SPACE_IDS)
        };
        let direct_len = direct().map(|(_, space)| space.id as usize + 1).max();
        let mut position_by_id = vec![NO_SPACE; direct_len.unwrap_or(0)];
        for (position, space) in direct() {
            position_by_id[space.id as usize] = position as u16;
        }
        Catalog {
            shard_count,
            spaces,
            position_by_id,
        }
    }

    /// The number of shards the rows are placed over.
    #[inline]
    pub fn shard_count(&self) -> usize {
        self.shard_count
    }

    /// How `space_id` is placed. A space the catalog does not know is taken as spread by
    /// primary key: its requests go where such a space's would, and fail there.
    #[inline]
    pub fn placement(&self, space_id: u32) -> SpacePlacement {
        if space_id < SYSTEM_SPACE_IDS {
            return SpacePlacement::Everywhere;
        }
        self.space(space_id)
            .map_or(SpacePlacement::ByPrimaryKey, |space| space.placement)
    }

    #[inline]
    fn space(&self, space_id: u32) -> Option<&CatalogSpace> {
        let position = if space_id < DIRECT_SPACE_IDS {
            match self.position_by_id.get(space_id as usize) {
                Some(&position) if position != NO_SPACE => usize::from(position),
                _ => return None,
            }
        } else {
            self.spaces
                .binary_search_by_key(&space_id, |space| space.id)
                .ok()?
        };
        self.spaces.get(position)
    }

    /// The shard that owns the row with primary key `key` in `space_id` when the space is
    /// spread by primary key; `None` when the key does not give the whole primary key or
    /// does not parse, or the space is unknown.
    #[inline]
    pub(crate) fn owner_of_key(&self, space_id: u32, key: PrimaryKeyIn<'_>) -> Option<usize> {
        let key_def = self.space(space_id)?.primary_key.as_ref()?;
        // The usual primary key, one unsigned part, encodes to its 8 big-endian bytes: no
        // need for the general encoder (the same bytes, so the same owner).
        if let [part] = key_def.parts.as_slice() {
            if part.field_type == FieldType::Unsigned && !part.is_nullable {
                let id = match key {
                    PrimaryKeyIn::SearchKey(key) => msgpack::single_uint_array(key),
                    PrimaryKeyIn::Tuple(tuple) if part.field_no == 0 => leading_field_uint(tuple),
                    PrimaryKeyIn::Tuple(_) => None,
                };
                if let Some(id) = id {
                    return Some(shard_of_key(&id.to_be_bytes(), self.shard_count));
                }
            }
        }
        let mut encoded = SearchKeyBuf::new();
        match key {
            PrimaryKeyIn::SearchKey(key) => {
                let parts = key_def.encode_search_key(key, &mut encoded).ok()?;
                if parts != key_def.part_count() {
                    return None;
                }
            }
            PrimaryKeyIn::Tuple(tuple) => {
                key_def.encode_from_tuple_data(tuple, &mut encoded).ok()?
            }
        }
        Some(shard_of_key(&encoded, self.shard_count))
    }
}

/// The first field of a tuple (a msgpack array of up to 15 fields) when it is an unsigned
/// integer, as `Space::leading_primary_key` reads it.
#[inline]
fn leading_field_uint(tuple: &[u8]) -> Option<u64> {
    match tuple.split_first()? {
        (0x91..=0x9f, fields) => msgpack::leading_uint(fields).map(|(key, _)| key),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::KeyPart;

    fn unsigned_key() -> Option<KeyDef> {
        Some(KeyDef::new([KeyPart::new(0, FieldType::Unsigned)]))
    }

    #[test]
    fn finds_each_space_by_id_small_or_large() {
        let catalog = Catalog::new(
            4,
            [
                (1_000_000, Placement::Single, unsigned_key()),
                (512, Placement::All, unsigned_key()),
                (600, Placement::Single, None),
            ],
        );
        assert_eq!(catalog.placement(280), SpacePlacement::Everywhere);
        assert_eq!(catalog.placement(512), SpacePlacement::ByPrimaryKey);
        assert_eq!(catalog.placement(600), SpacePlacement::Shard0);
        assert_eq!(catalog.placement(1_000_000), SpacePlacement::Shard0);
        // Unknown spaces, below and above the direct table.
        assert_eq!(catalog.placement(601), SpacePlacement::ByPrimaryKey);
        assert_eq!(catalog.placement(9_999), SpacePlacement::ByPrimaryKey);
        assert!(catalog
            .owner_of_key(601, PrimaryKeyIn::SearchKey(&[0x91, 1]))
            .is_none());
        assert!(catalog
            .owner_of_key(600, PrimaryKeyIn::SearchKey(&[0x91, 1]))
            .is_none());
    }

    #[test]
    fn a_key_places_the_same_as_search_key_as_inside_its_tuple_and_encoded() {
        let catalog = Catalog::new(7, [(512, Placement::All, unsigned_key())]);
        for id in [0u64, 1, 127, 128, 65_536, u64::MAX] {
            let mut key = vec![0x91];
            msgpack::write_uint(&mut key, id);
            let mut tuple = vec![0x92];
            msgpack::write_uint(&mut tuple, id);
            msgpack::write_str(&mut tuple, b"value");
            let mut encoded = SearchKeyBuf::new();
            let key_def = unsigned_key().expect("key");
            key_def
                .encode_search_key(&key, &mut encoded)
                .expect("encodes");
            let owner = Some(shard_of_key(&encoded, 7));
            assert_eq!(
                catalog.owner_of_key(512, PrimaryKeyIn::SearchKey(&key)),
                owner
            );
            assert_eq!(
                catalog.owner_of_key(512, PrimaryKeyIn::Tuple(&tuple)),
                owner
            );
        }
        // A partial or broken key places nowhere.
        assert_eq!(
            catalog.owner_of_key(512, PrimaryKeyIn::SearchKey(&[0x90])),
            None
        );
        assert_eq!(
            catalog.owner_of_key(512, PrimaryKeyIn::SearchKey(&[0x91, 0xc1])),
            None
        );
    }
}
