//! IPROTO numeric constants: request/response types, header keys and body keys.
//!
//! Owns the numbers of spec §4 and §5 and the upper-case names Tarantool 2.11 prints for
//! them. It must not know how any of them is decoded or what a request means.

/// Request and response types (header key `REQUEST_TYPE`), spec §5.
pub mod request_type {
    pub const OK: u64 = 0x00;
    pub const SELECT: u64 = 1;
    pub const INSERT: u64 = 2;
    pub const REPLACE: u64 = 3;
    pub const UPDATE: u64 = 4;
    pub const DELETE: u64 = 5;
    pub const CALL_16: u64 = 6;
    pub const AUTH: u64 = 7;
    pub const EVAL: u64 = 8;
    pub const UPSERT: u64 = 9;
    pub const CALL: u64 = 10;
    pub const EXECUTE: u64 = 11;
    pub const NOP: u64 = 12;
    pub const PREPARE: u64 = 13;
    pub const BEGIN: u64 = 14;
    pub const COMMIT: u64 = 15;
    pub const ROLLBACK: u64 = 16;
    pub const PING: u64 = 64;
    /// Replication requests tarn does not serve; only their body-less form is answered as
    /// Tarantool answers it (see `decode_body`).
    pub const JOIN: u64 = 65;
    pub const SUBSCRIBE: u64 = 66;
    pub const REGISTER: u64 = 70;
    pub const ID: u64 = 73;
    pub const WATCH: u64 = 74;
    pub const UNWATCH: u64 = 75;
    pub const EVENT: u64 = 76;
    pub const CHUNK: u64 = 128;
    /// An error response carries `TYPE_ERROR | code`.
    pub const TYPE_ERROR: u64 = 0x8000;
}

/// Header map keys, spec §4.1.
pub mod header_key {
    pub const REQUEST_TYPE: u64 = 0x00;
    pub const SYNC: u64 = 0x01;
    pub const REPLICA_ID: u64 = 0x02;
    pub const LSN: u64 = 0x03;
    pub const TIMESTAMP: u64 = 0x04;
    pub const SCHEMA_VERSION: u64 = 0x05;
    pub const SERVER_VERSION: u64 = 0x06;
    pub const GROUP_ID: u64 = 0x07;
    pub const TSN: u64 = 0x08;
    pub const FLAGS: u64 = 0x09;
    pub const STREAM_ID: u64 = 0x0a;
}

/// Body map keys of requests and responses, spec §4.2 and §4.3.
pub mod body_key {
    pub const SPACE_ID: u64 = 0x10;
    pub const INDEX_ID: u64 = 0x11;
    pub const LIMIT: u64 = 0x12;
    pub const OFFSET: u64 = 0x13;
    pub const ITERATOR: u64 = 0x14;
    pub const INDEX_BASE: u64 = 0x15;
    pub const FETCH_POSITION: u64 = 0x1f;
    pub const KEY: u64 = 0x20;
    pub const TUPLE: u64 = 0x21;
    pub const FUNCTION_NAME: u64 = 0x22;
    pub const USER_NAME: u64 = 0x23;
    pub const INSTANCE_UUID: u64 = 0x24;
    pub const VCLOCK: u64 = 0x26;
    pub const EXPR: u64 = 0x27;
    pub const OPS: u64 = 0x28;
    pub const OPTIONS: u64 = 0x2b;
    pub const AFTER_POSITION: u64 = 0x2e;
    pub const AFTER_TUPLE: u64 = 0x2f;
    pub const DATA: u64 = 0x30;
    pub const ERROR_24: u64 = 0x31;
    pub const METADATA: u64 = 0x32;
    pub const POSITION: u64 = 0x35;
    pub const SQL_TEXT: u64 = 0x40;
    pub const SQL_BIND: u64 = 0x41;
    pub const SQL_INFO: u64 = 0x42;
    pub const STMT_ID: u64 = 0x43;
    pub const ERROR: u64 = 0x52;
    pub const VERSION: u64 = 0x54;
    pub const FEATURES: u64 = 0x55;
    pub const TIMEOUT: u64 = 0x56;
    pub const EVENT_KEY: u64 = 0x57;
    pub const EVENT_DATA: u64 = 0x58;
    pub const TXN_ISOLATION: u64 = 0x59;
    pub const AUTH_TYPE: u64 = 0x5b;
}

/// Keys of one entry of the `ERROR (0x52)` stack, spec §7.
pub mod error_key {
    /// The outer key of the 0x52 map: `{0: [entry, ...]}`.
    pub const STACK: u64 = 0x00;
    pub const TYPE: u64 = 0x00;
    pub const FILE: u64 = 0x01;
    pub const LINE: u64 = 0x02;
    pub const MESSAGE: u64 = 0x03;
    pub const ERRNO: u64 = 0x04;
    pub const CODE: u64 = 0x05;
    pub const FIELDS: u64 = 0x06;
}

/// IPROTO_ID feature ids, spec §8.
pub mod feature {
    pub const STREAMS: u32 = 0;
    pub const TRANSACTIONS: u32 = 1;
    pub const ERROR_EXTENSION: u32 = 2;
    pub const WATCHERS: u32 = 3;
    pub const PAGINATION: u32 = 4;
}

/// The msgpack extension type that carries an error object (spec §7).
pub const MP_ERROR_EXT_TYPE: i8 = 3;

/// The one byte that encodes `key`, a positive fixint: every key above is under 128. Call
/// it in a `const` context (`const { key_byte(header_key::SYNC) }`), where a key that is
/// not one fails the build.
#[allow(
    clippy::cast_possible_truncation,
    reason = "under 0x80, asserted first"
)]
pub const fn key_byte(key: u64) -> u8 {
    assert!(key < 0x80, "a key written as one byte is a positive fixint");
    key as u8
}

/// The upper-case name Tarantool prints for a request type in 229/230 messages.
pub fn request_type_name(request_type: u64) -> Option<&'static str> {
    use request_type::*;
    Some(match request_type {
        SELECT => "SELECT",
        INSERT => "INSERT",
        REPLACE => "REPLACE",
        UPDATE => "UPDATE",
        DELETE => "DELETE",
        CALL_16 => "CALL_16",
        AUTH => "AUTH",
        EVAL => "EVAL",
        UPSERT => "UPSERT",
        CALL => "CALL",
        EXECUTE => "EXECUTE",
        NOP => "NOP",
        PREPARE => "PREPARE",
        BEGIN => "BEGIN",
        COMMIT => "COMMIT",
        ROLLBACK => "ROLLBACK",
        PING => "PING",
        ID => "ID",
        WATCH => "WATCH",
        UNWATCH => "UNWATCH",
        _ => return None,
    })
}
