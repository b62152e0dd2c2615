//! Placement: which core owns a request's data. Pure: it reads the catalog and the key,
//! and knows nothing of executors, sockets or how a request travels to its owner.
//!
//! * [`checksum`]: the CRC-32C of a key's few bytes, which placement and crud's
//!   `bucket_id` both compute per request.

pub mod checksum;

/// Placement: which shard owns an encoded primary key. CRC-32C is stable across builds
/// and restarts, which the per-shard WAL will rely on.
pub fn shard_of_key(encoded_primary_key: &[u8], shard_count: usize) -> usize {
    debug_assert!(shard_count > 0 && shard_count <= u32::MAX as usize);
    // A 32-bit division (the checksum is 32 bits): the same owner, and x86 divides 32-bit
    // operands in fewer cycles than 64-bit ones.
    (checksum::crc32c(encoded_primary_key) % shard_count as u32) as usize
}
