//! Placement: which core owns a request's data. Pure: it reads the catalog and the key,
//! and knows nothing of executors, sockets or how a request travels to its owner.
//!
//! A request is routed once, where it is decoded: [`route`] of its
//! [`RequestTarget`] says whether it runs here, on one owner, or on every core; the hop
//! carries that answer and the owner does not work it out again.
//!
//! * [`catalog`]: per space, its [`SpacePlacement`] and primary key, by space id.
//! * [`checksum`]: the CRC-32C of a key's few bytes, which placement and crud's
//!   `bucket_id` both compute per request.

pub mod catalog;
// The one `unsafe` here: the SSE4.2 crc32 instruction, behind a CPU feature check.
#[allow(unsafe_code)]
pub mod checksum;

pub use catalog::{Catalog, SpacePlacement};

use crate::config::Placement;
use crate::protocol::{Request, RequestTarget};
use crate::storage::key::SearchKeyBuf;
use crate::storage::IteratorType;
use catalog::PrimaryKeyIn;

/// Where a request runs, as seen from the core that decoded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    /// On this core (which owns the data, or every core holds it, or the request has none).
    Here,
    /// On that core, another one: it owns the data.
    Owner(usize),
    /// A part on every core, merged here: a scan of a space spread over the shards.
    EveryCore,
}

impl Destination {
    /// The destination of a request that `owner` runs, seen from core `me`.
    #[inline]
    pub fn of_owner(owner: usize, me: usize) -> Destination {
        if owner == me {
            Destination::Here
        } else {
            Destination::Owner(owner)
        }
    }
}

/// Where a request on `target` runs, seen from core `me`.
///
/// A point select by primary key (EQ or REQ with every part) goes to the key's owner; any
/// other select of a spread space scans every core (so does a point select whose key does
/// not place: a partial key, or one that does not parse, which the scan then reports). A write goes to the owner of its
/// primary key, or runs here when that does not place (the local shard reports why). A
/// space whole on shard 0 runs there; a system space, here.
// Always inlined, so that one core's shortcut is a compare in the caller (measured: a call
// cost a get 16 instructions).
#[inline(always)]
pub fn route(target: &RequestTarget<'_>, catalog: &Catalog, me: usize) -> Destination {
    // One core owns everything: nothing to look up.
    if catalog.shard_count() == 1 {
        return Destination::Here;
    }
    match *target {
        RequestTarget::NoData | RequestTarget::Procedure => Destination::Here,
        RequestTarget::Read {
            space_id,
            index_id,
            iterator,
            key,
        } => match catalog.placement(space_id) {
            SpacePlacement::Everywhere => Destination::Here,
            SpacePlacement::Shard0 => Destination::of_owner(0, me),
            // EQ or REQ on the whole primary key: at most the one row its owner holds.
            SpacePlacement::ByPrimaryKey
                if index_id == 0
                    && (iterator == IteratorType::Eq as u32
                        || iterator == IteratorType::Req as u32) =>
            {
                match catalog.owner_of_key(space_id, PrimaryKeyIn::SearchKey(key)) {
                    Some(owner) => Destination::of_owner(owner, me),
                    None => Destination::EveryCore,
                }
            }
            SpacePlacement::ByPrimaryKey => Destination::EveryCore,
        },
        RequestTarget::Key {
            space_id,
            index_id,
            key,
        } => route_write(
            catalog,
            space_id,
            index_id,
            PrimaryKeyIn::SearchKey(key),
            me,
        ),
        RequestTarget::Tuple { space_id, tuple } => {
            route_write(catalog, space_id, 0, PrimaryKeyIn::Tuple(tuple), me)
        }
    }
}

/// [`route`] of `request`'s target. Where one core owns everything, the target is not even
/// worked out: a get on one core spends 10 instructions on it otherwise.
#[inline(always)]
pub fn route_request(request: &Request<'_>, catalog: &Catalog, me: usize) -> Destination {
    if catalog.shard_count() == 1 {
        return Destination::Here;
    }
    route(&request.target(), catalog, me)
}

/// [`route`] of a write to one row, found by `key` in `index_id`.
#[inline]
fn route_write(
    catalog: &Catalog,
    space_id: u32,
    index_id: u32,
    key: PrimaryKeyIn<'_>,
    me: usize,
) -> Destination {
    match catalog.placement(space_id) {
        // A write to a system space is refused wherever it would run.
        SpacePlacement::Everywhere => Destination::Here,
        SpacePlacement::Shard0 => Destination::of_owner(0, me),
        // By a secondary key, which does not say the row's owner: run here.
        SpacePlacement::ByPrimaryKey if index_id != 0 => Destination::Here,
        SpacePlacement::ByPrimaryKey => match catalog.owner_of_key(space_id, key) {
            Some(owner) => Destination::of_owner(owner, me),
            None => Destination::Here,
        },
    }
}

/// Where a request on one row of `space_id` runs, seen from core `me`, for callers that
/// encode the row's primary key themselves (crud's point ops): `encode_key` writes it into
/// the buffer, false when it does not encode (the local shard then reports why). It is called
/// only where the key decides. Never [`Destination::EveryCore`].
#[inline]
pub fn route_by_primary_key(
    catalog: &Catalog,
    space_id: u32,
    me: usize,
    encode_key: impl FnOnce(&mut SearchKeyBuf) -> bool,
) -> Destination {
    if catalog.shard_count() == 1 {
        return Destination::Here;
    }
    match catalog.placement(space_id) {
        SpacePlacement::Shard0 => Destination::of_owner(0, me),
        SpacePlacement::Everywhere => Destination::Here,
        SpacePlacement::ByPrimaryKey => {
            let mut key = SearchKeyBuf::new();
            if !encode_key(&mut key) {
                return Destination::Here;
            }
            Destination::of_owner(shard_of_key(&key, catalog.shard_count()), me)
        }
    }
}

/// Where a request that every core runs a part of (a crud fan-out) runs: on every core, or
/// here when one core owns everything.
#[inline]
pub fn route_to_every_core(catalog: &Catalog) -> Destination {
    if catalog.shard_count() == 1 {
        Destination::Here
    } else {
        Destination::EveryCore
    }
}

/// The shard that owns the row with `encoded_primary_key` in a space placed `placement`.
#[inline]
pub fn shard_of_row(placement: Placement, encoded_primary_key: &[u8], shard_count: usize) -> usize {
    match placement {
        Placement::Single => 0,
        Placement::All => shard_of_key(encoded_primary_key, shard_count),
    }
}

/// Placement: which shard owns an encoded primary key. CRC-32C is stable across builds
/// and restarts, which the per-shard WAL will rely on.
pub fn shard_of_key(encoded_primary_key: &[u8], shard_count: usize) -> usize {
    debug_assert!(shard_count > 0 && shard_count <= u32::MAX as usize);
    // A 32-bit division (the checksum is 32 bits): the same owner, and x86 divides 32-bit
    // operands in fewer cycles than 64-bit ones.
    (checksum::crc32c(encoded_primary_key) % shard_count as u32) as usize
}

#[cfg(test)]
mod tests;
