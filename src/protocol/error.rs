//! `ProtocolError`: every failure this layer detects, with Tarantool 2.11's message text.
//!
//! The layer owns its mapping to error codes (`ProtocolError::code`). It must not know
//! storage or session errors; the server maps those itself.

use crate::protocol::error_code::ErrorCode;
use thiserror::Error;

/// The `%s` of `Invalid MsgPack - %s` (error 20), one per place Tarantool checks.
pub mod invalid_msgpack {
    /// The size prefix is not a msgpack uint.
    pub const PACKET_LENGTH: &str = "packet length";
    /// The header is not a map, or a key/known value has the wrong type.
    pub const PACKET_HEADER: &str = "packet header";
    /// The body is malformed, has trailing bytes, or a known key has the wrong type.
    pub const PACKET_BODY: &str = "packet body";
    /// CALL / EVAL / AUTH sent without a body.
    pub const MISSING_REQUEST_BODY: &str = "missing request body";
    /// IPROTO_ID body absent or malformed.
    pub const REQUEST_BODY: &str = "request body";
    /// AUTH tuple shorter than `[method, scramble]` (non-guest) or method not a string.
    pub const AUTH_REQUEST_BODY: &str = "authentication request body";
}

/// The largest packet Tarantool accepts (`IPROTO_PACKET_SIZE_MAX`, 2 GiB).
pub const PACKET_LEN_MAX: u64 = 2 * 1024 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// Error 20; the argument is one of the [`invalid_msgpack`] constants.
    #[error("Invalid MsgPack - {0}")]
    InvalidMsgpack(&'static str),
    /// Error 20: the size prefix announces more than [`PACKET_LEN_MAX`].
    #[error("Invalid MsgPack - too big packet size in the header: {0}")]
    PacketTooLarge(u64),
    /// Error 48.
    #[error("Unknown request type {0}")]
    UnknownRequestType(u64),
    /// Error 69; the argument is the 2.11 upper-case key name (`SPACE_ID`).
    #[error("Missing mandatory field '{0}' in request")]
    MissingRequestField(&'static str),
    /// Error 249.
    #[error("Unknown authentication method '{0}'")]
    UnknownAuthMethod(Box<str>),
    /// Error 251, e.g. `Invalid 'chap-sha1' request: invalid scramble size`.
    #[error("Invalid '{method}' request: {reason}")]
    InvalidAuthRequest {
        method: &'static str,
        reason: &'static str,
    },
    /// Error 47: unknown user and wrong password look the same in 2.11.
    #[error("User not found or supplied credentials are invalid")]
    CredsMismatch,
    /// Error 109. Tarantool passes its arguments swapped (spec §10): the client's value
    /// is printed after "current", the server's after "in request".
    #[error("Wrong schema version, current: {request_version}, in request: {server_version}")]
    WrongSchemaVersion {
        server_version: u64,
        request_version: u64,
    },
    /// Error 229; the argument is the request type name (`AUTH`).
    #[error("Unable to process {0} request in stream")]
    InStream(&'static str),
    /// Error 230; the argument is the request type name (`BEGIN`).
    #[error("Unable to process {0} request out of stream")]
    OutOfStream(&'static str),
}

impl ProtocolError {
    pub fn code(&self) -> ErrorCode {
        match self {
            ProtocolError::InvalidMsgpack(_) | ProtocolError::PacketTooLarge(_) => {
                ErrorCode::ER_INVALID_MSGPACK
            }
            ProtocolError::UnknownRequestType(_) => ErrorCode::ER_UNKNOWN_REQUEST_TYPE,
            ProtocolError::MissingRequestField(_) => ErrorCode::ER_MISSING_REQUEST_FIELD,
            ProtocolError::UnknownAuthMethod(_) => ErrorCode::ER_UNKNOWN_AUTH_METHOD,
            ProtocolError::InvalidAuthRequest { .. } => ErrorCode::ER_INVALID_AUTH_REQUEST,
            ProtocolError::CredsMismatch => ErrorCode::ER_CREDS_MISMATCH,
            ProtocolError::WrongSchemaVersion { .. } => ErrorCode::ER_WRONG_SCHEMA_VERSION,
            ProtocolError::InStream(_) => ErrorCode::ER_UNABLE_TO_PROCESS_IN_STREAM,
            ProtocolError::OutOfStream(_) => ErrorCode::ER_UNABLE_TO_PROCESS_OUT_OF_STREAM,
        }
    }

    /// Whether Tarantool closes the connection after replying (a broken frame can't be
    /// resynchronised).
    pub fn closes_connection(&self) -> bool {
        matches!(
            self,
            ProtocolError::InvalidMsgpack(invalid_msgpack::PACKET_LENGTH)
                | ProtocolError::PacketTooLarge(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_match_tarantool_2_11() {
        let cases: &[(ProtocolError, u32, &str)] = &[
            (
                ProtocolError::InvalidMsgpack(invalid_msgpack::PACKET_BODY),
                20,
                "Invalid MsgPack - packet body",
            ),
            (
                ProtocolError::UnknownRequestType(12),
                48,
                "Unknown request type 12",
            ),
            (
                ProtocolError::MissingRequestField("SPACE_ID"),
                69,
                "Missing mandatory field 'SPACE_ID' in request",
            ),
            (
                ProtocolError::UnknownAuthMethod("pap-sha256".into()),
                249,
                "Unknown authentication method 'pap-sha256'",
            ),
            (
                ProtocolError::InvalidAuthRequest {
                    method: "chap-sha1",
                    reason: "invalid scramble size",
                },
                251,
                "Invalid 'chap-sha1' request: invalid scramble size",
            ),
            (
                ProtocolError::CredsMismatch,
                47,
                "User not found or supplied credentials are invalid",
            ),
            (
                ProtocolError::WrongSchemaVersion {
                    server_version: 86,
                    request_version: 5,
                },
                109,
                "Wrong schema version, current: 5, in request: 86",
            ),
            (
                ProtocolError::InStream("AUTH"),
                229,
                "Unable to process AUTH request in stream",
            ),
            (
                ProtocolError::OutOfStream("BEGIN"),
                230,
                "Unable to process BEGIN request out of stream",
            ),
        ];
        for (error, code, message) in cases {
            assert_eq!(error.code().0, *code, "{error:?}");
            assert_eq!(error.to_string(), *message);
        }
    }
}
