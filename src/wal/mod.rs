//! The write-ahead log and snapshots of one shard: file formats, the writer, the reader,
//! recovery and checkpoint garbage collection. The byte-level contract is `docs/format.md`.
//!
//! Knows nothing of the network or of requests. Rows carry raw msgpack (the whole new tuple,
//! or the deleted primary key), so the files do not depend on storage internals; only
//! [`recovery`] touches `crate::storage`, to bulk-load and replay into an `Engine`.
//!
//! * [`format`]: pure encode/decode of headers, batches, rows, snapshot blocks and trailer.
//! * [`dir`]: file names in `data_dir/shard-<k>/` and listing them.
//! * [`reader`]: one WAL file's batches, torn tail versus corruption.
//! * [`writer`]: LSNs, group commit, rotation, poisoning after an I/O error.
//! * [`snapshot`]: writing (`.inprogress`, fsync, rename) and reading snapshots.
//! * [`follow`]: one shard's batches from an LSN on, as its writer appends (a relay's).
//! * [`recovery`]: newest snapshot + WAL rows after it; checkpoint garbage collection.

pub mod dir;
pub mod error;
pub mod follow;
pub mod format;
pub mod reader;
pub mod recovery;
pub mod snapshot;
pub mod writer;

pub use error::{Result, WalError};
pub use format::{Row, RowKind};
pub use reader::{ReadMode, WalFile};
pub use recovery::{collect_garbage, recover, Recovered, RecoveryConfig, RecoveryTarget};
pub use snapshot::{SnapshotMeta, SnapshotReader, SnapshotWritten};
pub use writer::{Commit, GlommioSink, Sink, WalWriter, WriterConfig, WriterStats};

#[cfg(test)]
mod tests;
