//! The one mapping from storage errors, and from the log's refusal of a write, to Tarantool
//! error codes, and their replies.

use crate::protocol::reply;
use crate::protocol::ErrorCode;
use crate::storage::StorageError;
use crate::wal::WalError;

pub fn storage_error_code(error: &StorageError) -> ErrorCode {
    use StorageError::*;
    match error {
        IllegalParams(_) => ErrorCode::ER_ILLEGAL_PARAMS,
        MemoryIssue { .. } => ErrorCode::ER_MEMORY_ISSUE,
        TupleFound { .. } => ErrorCode::ER_TUPLE_FOUND,
        KeyPartType { .. } => ErrorCode::ER_KEY_PART_TYPE,
        ExactMatch { .. } => ErrorCode::ER_EXACT_MATCH,
        InvalidMsgpack(_) => ErrorCode::ER_INVALID_MSGPACK,
        TupleNotArray => ErrorCode::ER_TUPLE_NOT_ARRAY,
        FieldType { .. } => ErrorCode::ER_FIELD_TYPE,
        UpdateSplice { .. } => ErrorCode::ER_UPDATE_SPLICE,
        UpdateArgType { .. } => ErrorCode::ER_UPDATE_ARG_TYPE,
        UnknownUpdateOp { .. } => ErrorCode::ER_UNKNOWN_UPDATE_OP,
        UpdateField { .. } => ErrorCode::ER_UPDATE_FIELD,
        KeyPartCount { .. } => ErrorCode::ER_KEY_PART_COUNT,
        NoSuchIndexId { .. } => ErrorCode::ER_NO_SUCH_INDEX_ID,
        NoSuchSpace(_) => ErrorCode::ER_NO_SUCH_SPACE,
        NoSuchFieldNo(_) => ErrorCode::ER_NO_SUCH_FIELD_NO,
        ExactFieldCount { .. } => ErrorCode::ER_EXACT_FIELD_COUNT,
        FieldMissing(_) => ErrorCode::ER_FIELD_MISSING,
        MoreThanOneTuple => ErrorCode::ER_MORE_THAN_ONE_TUPLE,
        CantUpdatePrimaryKey { .. } => ErrorCode::ER_CANT_UPDATE_PRIMARY_KEY,
        UpdateIntegerOverflow { .. } => ErrorCode::ER_UPDATE_INTEGER_OVERFLOW,
        UpdateDecimalOverflow { .. } => ErrorCode::ER_UPDATE_DECIMAL_OVERFLOW,
        UnsupportedIndexFeature { .. } => ErrorCode::ER_UNSUPPORTED_INDEX_FEATURE,
        ViewIsReadOnly(_) => ErrorCode::ER_VIEW_IS_RO,
        PartialKey { .. } => ErrorCode::ER_PARTIAL_KEY,
        NoSuchFieldName(_) => ErrorCode::ER_NO_SUCH_FIELD_NAME,
    }
}

pub fn encode_storage_error(
    out: &mut Vec<u8>,
    sync: u64,
    schema_version: u64,
    error: &StorageError,
) {
    reply::encode_error(
        out,
        sync,
        schema_version,
        storage_error_code(error),
        &error.to_string(),
    );
}

/// The reply to a write the WAL refused, the one place it is built (IPROTO writes, crud
/// calls, forwarded writes, writes spread over shards): `ER_WAL_IO`, never an
/// acknowledgement, and the write itself already undone. A synchronous rollback answers
/// Tarantool's `ER_SYNC_QUORUM_TIMEOUT` (the sync write that timed out) or `ER_SYNC_ROLLBACK`
/// (a write logged after it) instead. `reason` is the log's error where
/// this core's log refused; `None` where another shard's did (that shard logs its reason).
pub fn encode_log_refused(
    out: &mut Vec<u8>,
    sync: u64,
    schema_version: u64,
    reason: Option<&WalError>,
) {
    let code = match reason {
        // A synchronous rollback (`wal::writer`): Tarantool's codes and texts.
        Some(WalError::SyncQuorumTimeout) => ErrorCode::ER_SYNC_QUORUM_TIMEOUT,
        Some(WalError::SyncRollback) => ErrorCode::ER_SYNC_ROLLBACK,
        _ => ErrorCode::ER_WAL_IO,
    };
    if code != ErrorCode::ER_WAL_IO {
        let message = reason.map(ToString::to_string).unwrap_or_default();
        reply::encode_error(out, sync, schema_version, code, &message);
        return;
    }
    let message = log_refused_message(reason);
    reply::encode_error(out, sync, schema_version, ErrorCode::ER_WAL_IO, &message);
}

/// The text of `ER_WAL_IO` for a write the WAL refused. A flush that failed answers
/// Tarantool's own words; a log that stopped (or was closed) says why, so the client's
/// error tells the operator what to fix.
fn log_refused_message(reason: Option<&WalError>) -> std::borrow::Cow<'static, str> {
    const FAILED_TO_WRITE: &str = "Failed to write to disk";
    match reason {
        None | Some(WalError::WriteFailed { .. }) => std::borrow::Cow::Borrowed(FAILED_TO_WRITE),
        Some(other) => std::borrow::Cow::Owned(format!("{FAILED_TO_WRITE}: {other}")),
    }
}
