//! The memtx core of one shard: tuples, formats, keys, indexes, spaces, update and upsert.
//!
//! Pure and synchronous. It owns the in-memory data of one shard and every rule about it
//! (field types, key order, iterator semantics, update operations, memory quota). It must
//! not know about sockets, executors, files or the IPROTO wire format.

pub mod error;
pub mod msgpack;
pub mod update;

pub use error::{Result, StorageError};
