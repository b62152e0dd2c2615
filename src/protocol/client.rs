//! The client side of the protocol: request encoders and a small reply decoder, for tests,
//! the benchmark tool and load generators.
//!
//! Owns nothing the server needs; it mirrors `request.rs` and `reply.rs` so that every
//! decoder can be checked against an encoder. Tuples, keys, ops and args are raw msgpack.
//! It must not know sockets or connection state.

use crate::msgpack::{
    read_value, skip_value, take_value, write_array_len, write_f64, write_str, write_uint, Value,
};
use crate::protocol::auth::{scramble, CHAP_SHA1};
use crate::protocol::codes::{body_key, error_key, header_key, key_byte, request_type};
use crate::protocol::error::{invalid_msgpack, ProtocolError};
use crate::protocol::error_code::ErrorCode;
use crate::protocol::fast_decode::decode_header_common;
use crate::protocol::frame::SERVER_PREFIX_SIZE;
use crate::protocol::header::{decode_header, Header};
use crate::protocol::reply::{begin_packet, finish_packet};
use crate::protocol::request::{
    low_32_bits, Auth, Begin, Call, Delete, Eval, Id, Insert, Request, Select, Update, Upsert,
    Watch,
};

/// Writes `{0: type, 1: sync[, 5: schema_version][, 10: stream_id]}`.
fn write_request_header(out: &mut Vec<u8>, request_type: u64, header: &Header) {
    let extra = u8::from(header.schema_version != 0) + u8::from(header.stream_id != 0);
    out.push(0x82 + extra);
    out.push(const { key_byte(header_key::REQUEST_TYPE) });
    write_uint(out, request_type);
    out.push(const { key_byte(header_key::SYNC) });
    write_uint(out, header.sync);
    if header.schema_version != 0 {
        out.push(const { key_byte(header_key::SCHEMA_VERSION) });
        write_uint(out, header.schema_version);
    }
    if header.stream_id != 0 {
        out.push(const { key_byte(header_key::STREAM_ID) });
        write_uint(out, header.stream_id);
    }
}

fn key_uint(out: &mut Vec<u8>, key: u64, value: u64) {
    write_uint(out, key);
    write_uint(out, value);
}

fn key_raw(out: &mut Vec<u8>, key: u64, raw: &[u8]) {
    write_uint(out, key);
    out.extend_from_slice(raw);
}

fn key_str(out: &mut Vec<u8>, key: u64, text: &[u8]) {
    write_uint(out, key);
    write_str(out, text);
}

/// Encodes a whole request packet (server-style `0xce` prefix, which servers accept).
/// `header.request_type` is ignored: the request decides it.
pub fn encode_request_with_header(out: &mut Vec<u8>, header: &Header, request: &Request<'_>) {
    let mark = begin_packet(out);
    write_request_header(out, request.request_type(), header);
    write_request_body(out, request);
    finish_packet(out, mark);
}

/// Encodes a whole request packet with only type and sync in the header.
pub fn encode_request(out: &mut Vec<u8>, sync: u64, request: &Request<'_>) {
    let header = Header {
        sync,
        ..Header::default()
    };
    encode_request_with_header(out, &header, request);
}

fn write_request_body(out: &mut Vec<u8>, request: &Request<'_>) {
    match request {
        Request::Select(s) => {
            let extra = u8::from(s.fetch_position)
                + u8::from(s.after_position.is_some())
                + u8::from(s.after_tuple.is_some());
            out.push(0x86 + extra);
            key_uint(out, body_key::SPACE_ID, s.space_id.into());
            key_uint(out, body_key::INDEX_ID, s.index_id.into());
            key_uint(out, body_key::LIMIT, s.limit.into());
            key_uint(out, body_key::OFFSET, s.offset.into());
            key_uint(out, body_key::ITERATOR, s.iterator.into());
            key_raw(out, body_key::KEY, s.key);
            if s.fetch_position {
                key_raw(out, body_key::FETCH_POSITION, &[0xc3]);
            }
            if let Some(position) = s.after_position {
                key_str(out, body_key::AFTER_POSITION, position);
            }
            if let Some(tuple) = s.after_tuple {
                key_raw(out, body_key::AFTER_TUPLE, tuple);
            }
        }
        Request::Insert(i) | Request::Replace(i) => {
            out.push(0x82);
            key_uint(out, body_key::SPACE_ID, i.space_id.into());
            key_raw(out, body_key::TUPLE, i.tuple);
        }
        Request::Update(u) => {
            out.push(0x85);
            key_uint(out, body_key::SPACE_ID, u.space_id.into());
            key_uint(out, body_key::INDEX_ID, u.index_id.into());
            key_uint(out, body_key::INDEX_BASE, u.index_base.into());
            key_raw(out, body_key::KEY, u.key);
            key_raw(out, body_key::TUPLE, u.ops);
        }
        Request::Delete(d) => {
            out.push(0x83);
            key_uint(out, body_key::SPACE_ID, d.space_id.into());
            key_uint(out, body_key::INDEX_ID, d.index_id.into());
            key_raw(out, body_key::KEY, d.key);
        }
        Request::Upsert(u) => {
            out.push(0x85);
            key_uint(out, body_key::SPACE_ID, u.space_id.into());
            key_uint(out, body_key::INDEX_ID, u.index_id.into());
            key_uint(out, body_key::INDEX_BASE, u.index_base.into());
            key_raw(out, body_key::TUPLE, u.tuple);
            key_raw(out, body_key::OPS, u.ops);
        }
        Request::Call(c) => {
            out.push(0x82);
            key_str(out, body_key::FUNCTION_NAME, c.function_name.as_bytes());
            key_raw(out, body_key::TUPLE, c.args);
        }
        Request::Eval(e) => {
            out.push(0x82);
            key_str(out, body_key::EXPR, e.expr.as_bytes());
            key_raw(out, body_key::TUPLE, e.args);
        }
        Request::Auth(a) => {
            out.push(0x82);
            key_str(out, body_key::USER_NAME, a.user_name.as_bytes());
            write_uint(out, body_key::TUPLE);
            match a.method {
                None => out.push(0x90),
                Some(method) => {
                    out.push(0x92);
                    write_str(out, method.as_bytes());
                    match a.scramble {
                        Some(scramble) => write_str(out, scramble),
                        None => out.push(0xc0),
                    }
                }
            }
        }
        Request::Id(id) => {
            out.push(0x82 + u8::from(id.auth_type.is_some()));
            key_uint(out, body_key::VERSION, id.version);
            write_uint(out, body_key::FEATURES);
            write_array_len(out, id.features.count_ones());
            for feature in (0..64).filter(|f| id.features & (1 << f) != 0) {
                write_uint(out, feature);
            }
            if let Some(auth_type) = id.auth_type {
                key_str(out, body_key::AUTH_TYPE, auth_type.as_bytes());
            }
        }
        Request::Execute(raw) | Request::Prepare(raw) | Request::Subscribe(raw) => {
            out.extend_from_slice(raw.body)
        }
        Request::Begin(b) => {
            out.push(0x81 + u8::from(b.timeout_seconds.is_some()));
            key_uint(out, body_key::TXN_ISOLATION, b.isolation.into());
            if let Some(timeout) = b.timeout_seconds {
                write_uint(out, body_key::TIMEOUT);
                write_f64(out, timeout);
            }
        }
        Request::Ping | Request::Commit | Request::Rollback => {}
        Request::Watch(w) | Request::Unwatch(w) => {
            out.push(0x81);
            key_str(out, body_key::EVENT_KEY, w.key.as_bytes());
        }
    }
}

/// SELECT with every field given (pagination off).
pub fn encode_select(out: &mut Vec<u8>, sync: u64, select: &Select<'_>) {
    encode_request(out, sync, &Request::Select(*select));
}

pub fn encode_insert(out: &mut Vec<u8>, sync: u64, space_id: u32, tuple: &[u8]) {
    encode_request(out, sync, &Request::Insert(Insert { space_id, tuple }));
}

pub fn encode_replace(out: &mut Vec<u8>, sync: u64, space_id: u32, tuple: &[u8]) {
    encode_request(out, sync, &Request::Replace(Insert { space_id, tuple }));
}

pub fn encode_update(out: &mut Vec<u8>, sync: u64, update: &Update<'_>) {
    encode_request(out, sync, &Request::Update(*update));
}

pub fn encode_upsert(out: &mut Vec<u8>, sync: u64, upsert: &Upsert<'_>) {
    encode_request(out, sync, &Request::Upsert(*upsert));
}

pub fn encode_delete(out: &mut Vec<u8>, sync: u64, space_id: u32, index_id: u32, key: &[u8]) {
    let delete = Delete {
        space_id,
        index_id,
        key,
    };
    encode_request(out, sync, &Request::Delete(delete));
}

pub fn encode_call(out: &mut Vec<u8>, sync: u64, function_name: &str, args: &[u8]) {
    let call = Call {
        function_name,
        args,
        is_call_16: false,
    };
    encode_request(out, sync, &Request::Call(call));
}

pub fn encode_eval(out: &mut Vec<u8>, sync: u64, expr: &str, args: &[u8]) {
    encode_request(out, sync, &Request::Eval(Eval { expr, args }));
}

pub fn encode_ping(out: &mut Vec<u8>, sync: u64) {
    encode_request(out, sync, &Request::Ping);
}

/// AUTH with chap-sha1, scrambled from the greeting salt, as connectors send it.
pub fn encode_auth(out: &mut Vec<u8>, sync: u64, user_name: &str, salt: &[u8], password: &[u8]) {
    let scramble = scramble(salt, password);
    let auth = Auth {
        user_name,
        method: Some(CHAP_SHA1),
        scramble: Some(&scramble),
    };
    encode_request(out, sync, &Request::Auth(auth));
}

pub fn encode_id(out: &mut Vec<u8>, sync: u64, version: u64, features: &[u32]) {
    let features = features
        .iter()
        .filter(|&&f| f < 64)
        .fold(0u64, |acc, &f| acc | (1 << f));
    let id = Id {
        version,
        features,
        auth_type: None,
    };
    encode_request(out, sync, &Request::Id(id));
}

pub fn encode_begin(out: &mut Vec<u8>, sync: u64, stream_id: u64, begin: &Begin) {
    let header = Header {
        sync,
        stream_id,
        ..Header::default()
    };
    encode_request_with_header(out, &header, &Request::Begin(*begin));
}

pub fn encode_watch(out: &mut Vec<u8>, sync: u64, key: &str) {
    encode_request(out, sync, &Request::Watch(Watch { key }));
}

/// Splits one server packet (which must use the `0xce` prefix) off the front of `buf`.
pub fn split_server_frame(buf: &[u8]) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    let Some(prefix) = buf.get(..SERVER_PREFIX_SIZE) else {
        return Ok(None);
    };
    if prefix[0] != 0xce {
        return Err(ProtocolError::InvalidMsgpack(
            invalid_msgpack::PACKET_LENGTH,
        ));
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    Ok(buf
        .get(SERVER_PREFIX_SIZE..SERVER_PREFIX_SIZE + len)
        .map(|packet| (packet, SERVER_PREFIX_SIZE + len)))
}

/// A decoded reply: the header (status in `request_type`) and the raw body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply<'a> {
    pub header: Header,
    pub body: &'a [u8],
}

/// Decodes a reply packet (the bytes after the size prefix).
pub fn decode_reply(packet: &[u8]) -> Result<Reply<'_>, ProtocolError> {
    let (header, body) = match decode_header_common(packet) {
        Some(decoded) => decoded,
        None => decode_header(packet).map_err(|e| e.error)?,
    };
    let mut rest = body;
    if !body.is_empty() && (skip_value(&mut rest).is_err() || !rest.is_empty()) {
        return Err(ProtocolError::InvalidMsgpack(invalid_msgpack::PACKET_BODY));
    }
    Ok(Reply { header, body })
}

/// Finds `key` in the map `map` and returns its raw value.
fn map_get(map: &[u8], key: u64) -> Option<&[u8]> {
    let mut buf = map;
    let Ok(Value::Map(pairs)) = read_value(&mut buf) else {
        return None;
    };
    for _ in 0..pairs {
        let k = read_value(&mut buf).ok()?;
        let value = take_value(&mut buf).ok()?;
        if k == Value::Uint(key) {
            return Some(value);
        }
    }
    None
}

fn as_str(value: &[u8]) -> Option<&str> {
    let mut buf = value;
    match read_value(&mut buf) {
        Ok(Value::Str(bytes)) => std::str::from_utf8(bytes).ok(),
        _ => None,
    }
}

impl<'a> Reply<'a> {
    pub fn status(&self) -> u64 {
        self.header.request_type
    }

    pub fn sync(&self) -> u64 {
        self.header.sync
    }

    pub fn is_error(&self) -> bool {
        self.status() & request_type::TYPE_ERROR != 0
    }

    /// The code of an error reply. Of a status wider than 32 bits the low 32 bits count, as
    /// in Tarantool, whose header keeps the type in a `uint32_t`.
    pub fn error_code(&self) -> Option<ErrorCode> {
        self.is_error()
            .then(|| ErrorCode(low_32_bits(self.status() & !request_type::TYPE_ERROR)))
    }

    /// The raw value under a body key.
    pub fn field(&self, key: u64) -> Option<&'a [u8]> {
        map_get(self.body, key)
    }

    /// The raw `0x30` array.
    pub fn data(&self) -> Option<&'a [u8]> {
        self.field(body_key::DATA)
    }

    /// The `0x31` message.
    pub fn error_message(&self) -> Option<&'a str> {
        self.field(body_key::ERROR_24).and_then(as_str)
    }

    /// The top entry of the `0x52` stack as (type name, message, code).
    pub fn error_top(&self) -> Option<(&'a str, &'a str, u64)> {
        let stack = map_get(self.field(body_key::ERROR)?, error_key::STACK)?;
        let mut buf = stack;
        let Ok(Value::Array(n)) = read_value(&mut buf) else {
            return None;
        };
        if n == 0 {
            return None;
        }
        let entry = take_value(&mut buf).ok()?;
        let type_name = as_str(map_get(entry, error_key::TYPE)?)?;
        let message = as_str(map_get(entry, error_key::MESSAGE)?)?;
        let mut code = map_get(entry, error_key::CODE)?;
        let Ok(Value::Uint(code)) = read_value(&mut code) else {
            return None;
        };
        Some((type_name, message, code))
    }
}
