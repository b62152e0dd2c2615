//! tarn: a thread-per-core, shard-per-core in-memory database spoken to over Tarantool's
//! binary protocol (IPROTO).
//!
//! # Layers
//!
//! The modules are the layers of the architecture, lowest first; each is testable without
//! the ones above it. Dependencies point one way: msgpack <- storage <- wal <- shard <- crud
//! <- server; protocol needs only msgpack; placement needs storage, protocol and config.
//! `tests/tidy.rs` reads the `uses:` and `must not know:` lines below and fails when a layer
//! names (`crate::x`) one it may not use, or when a module is missing here. See `docs/` for
//! the byte-level formats.
//!
//! - `msgpack`: reading, writing and skipping MessagePack values, borrowing from the input.
//!   - uses: nothing
//!   - must not know: storage, protocol, wal, shard, placement, crud, server, config,
//!     counting_allocator
//! - `storage`: one shard's data, pure and synchronous: tuples, formats, keys, indexes,
//!   spaces, update and upsert, the memory quota.
//!   - uses: msgpack
//!   - must not know: protocol, wal, shard, placement, crud, server, config,
//!     counting_allocator
//! - `protocol`: IPROTO bytes: framing, greeting, headers, requests, replies, error codes,
//!   the chap-sha1 scramble, the client side the tests and tools speak.
//!   - uses: msgpack
//!   - must not know: storage, wal, shard, placement, crud, server, config,
//!     counting_allocator
//! - `wal`: one shard's WAL and snapshot files: formats, the group-commit writer, the
//!   reader, recovery into an engine, checkpoint garbage collection, following a WAL as it
//!   grows.
//!   - uses: msgpack, storage
//!   - must not know: protocol, shard, placement, crud, server, config, counting_allocator
//! - `shard`: one core's state (its slice of every space and its log) and the execution of
//!   a decoded request against it, the reply written into the caller's buffer.
//!   - uses: msgpack, storage, wal, protocol
//!   - must not know: placement, crud, server, config, counting_allocator
//! - `placement`: which core owns a request's data, from the catalog and the key; pure.
//!   - uses: msgpack, storage, protocol, config
//!   - must not know: wal, shard, crud, server, counting_allocator
//! - `crud`: the tarantool/crud API on top of shards: arguments, plans, the shard-side
//!   run, results and crud's error objects; `box.space`'s data methods over CALL, planned on
//!   the same seam.
//!   - uses: msgpack, storage, wal, protocol, shard, placement, config
//!   - must not know: server, counting_allocator
//! - `server`: glommio executors, sockets and orchestration: listening, connections,
//!   sessions, the mesh between cores, durability, the data directory, replication (relays
//!   and the applier), each core's counters and the Prometheus endpoint, the OS calls.
//!   - uses: msgpack, storage, protocol, wal, shard, placement, crud, config
//!   - must not know: counting_allocator
//! - `config`: `conf/tarn.toml` and the command line, checked and resolved into plain data
//!   (with storage's field types).
//!   - uses: storage
//!   - must not know: msgpack, protocol, wal, shard, placement, crud, server,
//!     counting_allocator
//! - `counting_allocator`: the global allocator that counts allocations for the tests,
//!   benchmarks and perf-simple-query.
//!   - uses: nothing
//!   - must not know: msgpack, storage, protocol, wal, shard, placement, crud, server, config
//!
//! # The lint wall
//!
//! `unsafe` is denied but in the modules that need it (each says why at its `unsafe`); every
//! `unsafe` block carries a `// SAFETY:` comment; no `unwrap` outside tests (a `None` or an
//! `Err` is handled, or `expect` says why it cannot happen). Where bytes come from outside
//! (protocol, msgpack, the WAL readers), `expect` and truncating casts warn too, so each is
//! fixed or justified where it stands.

#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks, clippy::unwrap_used)]

pub mod config;
#[allow(unsafe_code)]
pub mod counting_allocator;
pub mod crud;
pub mod msgpack;
pub mod placement;
pub mod protocol;
pub mod server;
pub mod shard;
pub mod storage;
pub mod wal;
