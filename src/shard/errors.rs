//! The one mapping from storage errors to Tarantool error codes, and their replies.

use crate::protocol::reply;
use crate::protocol::ErrorCode;
use crate::storage::StorageError;

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
