//! What the fuzz targets check, apart from libFuzzer: each target in `fuzz_targets/` is
//! one call into a module here, so that the main build can compile these checks and run
//! them on the checked-in seeds (`tests/fuzz_seeds.rs` includes this file) without the
//! fuzzer. Modules refer to each other through `super::`, which works both as this crate
//! and as a module of that test.
//!
//! * [`gen`]: fuzz bytes to MessagePack values, tuples, keys and update operations.
//! * [`check`]: an independent MessagePack walker and tuple validator, and space pictures.
//! * [`decode_request`]: the server's read path (moved here from its target).
//! * [`update_ops`], [`tuple_format`], [`wal_files`], [`crud_call`], [`schema_record`],
//!   [`replication_packets`]: the targets' bodies.

pub mod check;
pub mod crud_call;
pub mod decode_request;
pub mod gen;
pub mod replication_packets;
pub mod schema_record;
pub mod tuple_format;
pub mod update_ops;
pub mod wal_files;
