//! tarn: a thread-per-core, shard-per-core in-memory database spoken to over Tarantool's
//! binary protocol (IPROTO).
//!
//! The modules are the layers of the architecture, lowest first; each is testable without
//! the ones above it:
//!
//! * [`storage`]: tuples, formats, keys, indexes, spaces, update/upsert — one shard's data.
//! * [`wal`]: WAL and snapshot files, the group-commit writer, recovery, checkpoint GC.
//!
//! See `docs/` for the byte-level formats.

pub mod config;
pub mod crud;
pub mod msgpack;
pub mod placement;
pub mod protocol;
pub mod server;
pub mod shard;
pub mod storage;
pub mod wal;
