//! Tarantool's numeric error codes (box/errcode.h, 2.11 numbering) and the error type name
//! that goes with each in the `0x52` error stack.
//!
//! A newtype rather than a closed enum: codes raised by other layers (or by a user's
//! `box.error`) must pass through unchanged, and an unknown code is still a valid code on
//! the wire. This module must not know message texts of other layers or any encoding.

use std::fmt;

/// A Tarantool error code as sent in `0x8000 | code` and in stack entry key `5`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ErrorCode(pub u32);

macro_rules! error_codes {
    ($($name:ident = $code:literal,)*) => {
        #[allow(non_upper_case_globals)]
        impl ErrorCode {
            $(pub const $name: ErrorCode = ErrorCode($code);)*

            /// Tarantool's constant name (`"ER_TUPLE_FOUND"`), for the codes this crate knows.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($code => Some(stringify!($name)),)*
                    _ => None,
                }
            }
        }

        #[cfg(test)]
        pub(crate) const ALL_KNOWN: &[ErrorCode] = &[$(ErrorCode::$name),*];
    };
}

error_codes! {
    ER_UNKNOWN = 0,
    ER_ILLEGAL_PARAMS = 1,
    ER_MEMORY_ISSUE = 2,
    ER_TUPLE_FOUND = 3,
    ER_TUPLE_NOT_FOUND = 4,
    ER_UNSUPPORTED = 5,
    ER_READONLY = 7,
    ER_CREATE_SPACE = 9,
    ER_SPACE_EXISTS = 10,
    ER_ALTER_SPACE = 12,
    ER_MODIFY_INDEX = 14,
    ER_LAST_DROP = 15,
    ER_DROP_PRIMARY_KEY = 17,
    ER_KEY_PART_TYPE = 18,
    ER_EXACT_MATCH = 19,
    ER_INVALID_MSGPACK = 20,
    ER_TUPLE_NOT_ARRAY = 22,
    ER_FIELD_TYPE = 23,
    ER_INDEX_FIELD_TYPE_MISMATCH = 24,
    ER_UPDATE_SPLICE = 25,
    ER_UPDATE_ARG_TYPE = 26,
    ER_UNKNOWN_UPDATE_OP = 28,
    ER_UPDATE_FIELD = 29,
    ER_FUNCTION_TX_ACTIVE = 30,
    ER_KEY_PART_COUNT = 31,
    ER_PROC_LUA = 32,
    ER_NO_SUCH_PROC = 33,
    ER_NO_SUCH_INDEX_ID = 35,
    ER_NO_SUCH_SPACE = 36,
    ER_NO_SUCH_FIELD_NO = 37,
    ER_EXACT_FIELD_COUNT = 38,
    ER_FIELD_MISSING = 39,
    ER_WAL_IO = 40,
    ER_MORE_THAN_ONE_TUPLE = 41,
    ER_ACCESS_DENIED = 42,
    ER_NO_SUCH_USER = 45,
    ER_USER_EXISTS = 46,
    ER_CREDS_MISMATCH = 47,
    ER_UNKNOWN_REQUEST_TYPE = 48,
    ER_NO_SUCH_FUNCTION = 51,
    ER_NO_SUCH_ENGINE = 57,
    ER_MULTISTATEMENT_TRANSACTION = 54,
    ER_MISSING_REQUEST_FIELD = 69,
    ER_ITERATOR_TYPE = 72,
    ER_IDENTIFIER = 70,
    ER_NO_CONNECTION = 77,
    ER_TIMEOUT = 78,
    ER_ACTIVE_TRANSACTION = 79,
    ER_INDEX_EXISTS = 85,
    ER_CANT_UPDATE_PRIMARY_KEY = 94,
    ER_UPDATE_INTEGER_OVERFLOW = 95,
    ER_TRANSACTION_CONFLICT = 97,
    ER_PROTOCOL = 104,
    ER_UPSERT_UNIQUE_SECONDARY_KEY = 105,
    ER_WRONG_SCHEMA_VERSION = 109,
    ER_MEMTX_MAX_TUPLE_SIZE = 110,
    ER_UNSUPPORTED_INDEX_FEATURE = 112,
    ER_VIEW_IS_RO = 113,
    ER_NO_TRANSACTION = 114,
    ER_SYSTEM = 115,
    ER_LOADING = 116,
    ER_PARTIAL_KEY = 136,
    ER_TRUNCATE_SYSTEM_SPACE = 137,
    ER_NO_SUCH_INDEX_NAME = 148,
    ER_SPACE_FIELD_IS_DUPLICATE = 149,
    ER_NO_SUCH_FIELD_NAME_IN_SPACE = 153,
    ER_TRANSACTION_YIELD = 154,
    ER_UPDATE_DECIMAL_OVERFLOW = 160,
    ER_NO_SUCH_FIELD_NAME = 201,
    ER_SYNC_QUORUM_TIMEOUT = 216,
    ER_SYNC_ROLLBACK = 217,
    ER_XLOG_GAP = 219,
    ER_UNABLE_TO_PROCESS_IN_STREAM = 229,
    ER_UNABLE_TO_PROCESS_OUT_OF_STREAM = 230,
    ER_TRANSACTION_TIMEOUT = 231,
    ER_ITERATOR_POSITION = 247,
    ER_UNKNOWN_AUTH_METHOD = 249,
    ER_INVALID_AUTH_DATA = 250,
    ER_INVALID_AUTH_REQUEST = 251,
    ER_AUTH_REQUIRED = 258,
}

impl ErrorCode {
    /// The error class name clients see in stack entry key `0` (spec §7).
    ///
    /// Tarantool picks the class at the raise site, not from the code, but for the codes a
    /// server like this raises the class is fixed by the code.
    pub fn type_name(self) -> &'static str {
        match self {
            ErrorCode::ER_MEMORY_ISSUE => "OutOfMemory",
            ErrorCode::ER_PROC_LUA => "LuajitError",
            ErrorCode::ER_ACCESS_DENIED => "AccessDeniedError",
            ErrorCode::ER_TIMEOUT => "TimedOut",
            ErrorCode::ER_SYSTEM => "SystemError",
            _ => "ClientError",
        }
    }

    /// The response type of an error reply carrying this code.
    pub fn response_type(self) -> u64 {
        crate::protocol::codes::request_type::TYPE_ERROR | u64::from(self.0)
    }
}

impl From<ErrorCode> for u32 {
    fn from(code: ErrorCode) -> u32 {
        code.0
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name} ({})", self.0),
            None => write!(f, "error code {}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_agree_with_tarantool() {
        assert_eq!(ErrorCode::ER_TUPLE_FOUND.0, 3);
        assert_eq!(ErrorCode::ER_INVALID_MSGPACK.0, 20);
        assert_eq!(ErrorCode::ER_UNKNOWN_REQUEST_TYPE.0, 48);
        assert_eq!(ErrorCode::ER_MISSING_REQUEST_FIELD.0, 69);
        assert_eq!(ErrorCode::ER_WRONG_SCHEMA_VERSION.0, 109);
        assert_eq!(ErrorCode::ER_INVALID_AUTH_REQUEST.0, 251);
        assert_eq!(ErrorCode(3).name(), Some("ER_TUPLE_FOUND"));
        assert_eq!(ErrorCode(9999).name(), None);
    }

    #[test]
    fn codes_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for code in ALL_KNOWN {
            assert!(seen.insert(code.0), "duplicate {}", code.0);
        }
    }

    #[test]
    fn type_names() {
        assert_eq!(ErrorCode::ER_ACCESS_DENIED.type_name(), "AccessDeniedError");
        assert_eq!(ErrorCode::ER_PROC_LUA.type_name(), "LuajitError");
        assert_eq!(ErrorCode::ER_MEMORY_ISSUE.type_name(), "OutOfMemory");
        assert_eq!(ErrorCode::ER_TUPLE_FOUND.type_name(), "ClientError");
        assert_eq!(ErrorCode::ER_TUPLE_FOUND.response_type(), 0x8003);
    }
}
