//! The errors of the WAL layer: I/O, damaged files, gaps in the log, a poisoned writer.
//!
//! Owns the wording operators see when a shard refuses to start or to write. Knows nothing
//! of how the server turns an error into a reply.

use std::path::PathBuf;

pub type Result<T, E = WalError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalError {
    #[error("{context}: {path}: {source}")]
    Io {
        context: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// Bytes that cannot be what the writer wrote, found where a torn write cannot explain
    /// them. `offset` is where the bad batch, block or header starts.
    #[error("corrupt file {file} at offset {offset}: {reason}")]
    Corrupt {
        file: PathBuf,
        offset: u64,
        reason: String,
    },

    /// The last batch of a file stops short or is half written: a crash during a write. In
    /// the newest WAL file recovery cuts the file here; anywhere else it is corruption.
    #[error("torn write at the end of {file} from offset {offset}")]
    Torn { file: PathBuf, offset: u64 },

    /// A snapshot fails to read or check, and an older checkpoint with the WAL files after it
    /// is kept: without `force_recovery` start-up stops here rather than pick it silently.
    #[error(
        "snapshot {snapshot} is damaged: {cause}. An older checkpoint can replace it: \
         {fallback} are kept. Start with --force-recovery to recover from them instead (the \
         damaged snapshot is then renamed to {snapshot}.damaged and kept)"
    )]
    SnapshotDamaged {
        snapshot: PathBuf,
        #[source]
        cause: Box<WalError>,
        /// What recovery would use instead: "the older snapshot X and the WAL files after it".
        fallback: String,
    },

    /// A snapshot fails to read or check, and nothing kept can replace it.
    #[error(
        "snapshot {snapshot} is damaged: {cause}. No older checkpoint can replace it: {why}. \
         Restore the data directory from a backup"
    )]
    SnapshotDamagedNoFallback {
        snapshot: PathBuf,
        #[source]
        cause: Box<WalError>,
        why: String,
    },

    /// Rows the snapshot does not hold are in no WAL file.
    #[error(
        "WAL rows {lsn_first_missing}..{lsn_next_found} are missing: expected file {expected_file} \
         after {after}"
    )]
    MissingRows {
        expected_file: PathBuf,
        after: String,
        lsn_first_missing: u64,
        lsn_next_found: u64,
    },

    #[error(
        "{file} was written for schema fingerprint {found:#018x}, but the configured schema is \
         {expected:#018x}: the spaces or indexes changed since it was written"
    )]
    SchemaMismatch {
        file: PathBuf,
        expected: u64,
        found: u64,
    },

    #[error("{file} belongs to shard {found}, not shard {expected}")]
    WrongShard {
        file: PathBuf,
        expected: u32,
        found: u32,
    },

    /// Applying a recovered row or snapshot tuple to the spaces failed.
    #[error("recovery of {file}: LSN {lsn}: {reason}")]
    Replay {
        file: PathBuf,
        lsn: u64,
        reason: String,
    },

    /// A write or fsync of the log failed earlier. Nothing after the last durable batch was
    /// acknowledged, and since the kernel may have dropped the dirty pages, retrying could
    /// report success for data that is gone: the writer refuses all writes until restart.
    #[error(
        "the WAL writer is stopped (an I/O error, or an abandoned schema change) and accepts no \
         writes until restart (rows after LSN {lsn_durable_last} were not made durable): {cause}"
    )]
    Poisoned {
        lsn_durable_last: u64,
        cause: String,
    },

    /// The flush that carried the row failed, and so did every row queued behind it; they
    /// were rolled back. The writer goes on (the disk was full: see `wal::writer`).
    #[error(
        "writing the WAL failed, so this write and every one after LSN {lsn_durable_last} \
         queued with it were rolled back: {cause}"
    )]
    WriteFailed {
        lsn_durable_last: u64,
        cause: String,
    },

    /// The writer was closed.
    #[error("the WAL writer is closed")]
    Closed,

    /// A synchronous row did not reach its quorum in `replication_synchro_timeout`: it and
    /// every row logged after it were rolled back (compensating rows undo them in the log).
    /// Tarantool's text of ER_SYNC_QUORUM_TIMEOUT.
    #[error("Quorum collection for a synchronous transaction is timed out")]
    SyncQuorumTimeout,

    /// The row was logged after a synchronous row that timed out, and was rolled back with
    /// it. Tarantool's text of ER_SYNC_ROLLBACK.
    #[error("A rollback for a synchronous transaction is received")]
    SyncRollback,

    /// A row body over [`crate::wal::format::ROW_BODY_BYTES_MAX`]: logged, it could not be
    /// read back, so the write is refused (and undone) instead.
    #[error(
        "a WAL row of {body_bytes} bytes is over the limit of {} bytes",
        crate::wal::format::ROW_BODY_BYTES_MAX
    )]
    RowTooLarge { body_bytes: usize },

    /// A tuple over [`crate::wal::format::ROW_BODY_BYTES_MAX`] given to the snapshot writer
    /// (with `wal_mode = none` no row limit stopped it earlier): written, the snapshot could
    /// not be read back, so the snapshot is refused instead.
    #[error(
        "a tuple of {tuple_bytes} bytes in space {space_id} is over the limit of {} bytes a \
         snapshot can hold",
        crate::wal::format::ROW_BODY_BYTES_MAX
    )]
    SnapshotTupleTooLarge { space_id: u32, tuple_bytes: usize },
}

impl WalError {
    pub(crate) fn io(
        context: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> WalError {
        WalError::Io {
            context,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corrupt(
        file: impl Into<PathBuf>,
        offset: u64,
        reason: impl Into<String>,
    ) -> WalError {
        WalError::Corrupt {
            file: file.into(),
            offset,
            reason: reason.into(),
        }
    }
}
