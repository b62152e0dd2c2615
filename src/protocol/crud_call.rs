//! A single-pass decoder for the packets crud calls arrive as: a CALL (not CALL_16) whose
//! header is a fixmap of the keys the server reads and whose body is `{FUNCTION_NAME,
//! TUPLE}` (either order), the name one of crud's functions ([`CRUD_FUNCTION_NAMES`]).
//! Wire knowledge, so it lives in `protocol`: what crud makes of the call is `crud`'s.
//!
//! Such a packet costs the general decoder a header decode in [`crate::protocol`]'s fast
//! path, a second one in its general path, a generic body map walk, the UTF-8 check of
//! the name and a generic walk of the arguments. Here it is one pass: the name is matched
//! against crud's functions as bytes (a match is ASCII, so needs no UTF-8 check).
//!
//! **The arguments are not measured when they end the packet**, as every connector writes
//! them (`TUPLE` after `FUNCTION_NAME`): `args` is then the rest of the packet, which may
//! be torn or carry trailing bytes. Planning walks the arguments whole anyway, so it
//! checks them there (`crud`'s `plan_point` consumes them exactly or gives up; the general planner
//! checks them first), and answers a torn one with the error this decoder would have
//! ([`torn_args_error`]). Measuring them here too cost a crud insert about 6% of its
//! time. A caller that answers a call with an error before planning it (a wrong schema
//! version, a denied grant) asks [`is_torn`] first, so the decoder's error still comes
//! first.
//!
//! It gives up (`None`) on anything else and never reports errors: [`decode_packet`] then
//! hands the packet to [`protocol::decode_packet`], so errors, their codes and the sync
//! they carry come from one place. When the general decoder accepts a packet, this one's
//! result is exactly the same (see the property tests in `crud::tests`).

use crate::msgpack::leading_uint;
use crate::protocol::codes::{body_key, header_key, request_type};
use crate::protocol::error::{invalid_msgpack, ProtocolError};
use crate::protocol::header::{Header, PacketError};
use crate::protocol::request::{Call, Request};

/// [`protocol::decode_packet`](crate::protocol::decode_packet), with crud calls decoded
/// in one pass first. Other packets pay three byte compares: only a header that starts
/// with `REQUEST_TYPE: CALL`, as connectors write it, is tried here (a call whose header
/// starts otherwise is decoded the general way). Inlined, so that the general path's
/// large result is not copied through one more frame: every other request pays for this.
#[inline(always)]
pub fn decode_packet(packet: &[u8]) -> Result<(Header, Request<'_>), PacketError> {
    if let [0x80..=0x8f, 0x00, 0x0a, ..] = packet {
        if let Some(decoded) = decode_crud_call(packet) {
            return Ok(decoded);
        }
    }
    crate::protocol::decode_packet(packet)
}

/// Decodes `packet` (header + body, no size prefix) if it is a crud call of the common
/// shape.
#[inline]
pub fn decode_crud_call(packet: &[u8]) -> Option<(Header, Request<'_>)> {
    let mut buf = packet;
    let header = header(&mut buf)?;
    let call = body(buf)?;
    Some((header, Request::Call(call)))
}

/// A fixmap of REQUEST_TYPE (CALL), SYNC, SCHEMA_VERSION and STREAM_ID with uint values,
/// any order. A packet of another type is given up on at its type.
#[inline(always)]
fn header(buf: &mut &[u8]) -> Option<Header> {
    let (&marker, mut cursor) = buf.split_first()?;
    if marker & 0xf0 != 0x80 {
        return None;
    }
    let mut header = Header::default();
    for _ in 0..marker & 0x0f {
        let (&key, rest) = cursor.split_first()?;
        let (value, rest) = leading_uint(rest)?;
        cursor = rest;
        match u64::from(key) {
            header_key::REQUEST_TYPE if value == request_type::CALL => header.request_type = value,
            header_key::SYNC => header.sync = value,
            header_key::SCHEMA_VERSION => header.schema_version = value,
            header_key::STREAM_ID => header.stream_id = value,
            _ => return None,
        }
    }
    if header.request_type != request_type::CALL {
        return None;
    }
    *buf = cursor;
    Some(header)
}

/// `{FUNCTION_NAME: "crud.<function>", TUPLE: [...]}`, the whole rest of the packet.
#[inline(always)]
fn body(body: &[u8]) -> Option<Call<'_>> {
    let mut buf = body.strip_prefix(&[0x82])?;
    let (mut func, mut args) = (None, None);
    for keys_after in [1, 0] {
        let (&key, rest) = buf.split_first()?;
        buf = rest;
        match u64::from(key) {
            body_key::FUNCTION_NAME => func = Some(function(&mut buf)?),
            // Last: the rest of the packet, unmeasured (see the module docs).
            body_key::TUPLE if keys_after == 0 && starts_with_array(buf) => {
                args = Some(std::mem::take(&mut buf));
            }
            body_key::TUPLE => args = Some(array(&mut buf)?),
            _ => return None,
        }
    }
    if !buf.is_empty() {
        return None;
    }
    Some(Call {
        // The same text as the packet's: the name matched it byte for byte.
        function_name: func?,
        args: args?,
        is_call_16: false,
    })
}

/// A fixstr or str8 naming one of crud's functions; the name, as a static string.
#[inline(always)]
fn function(buf: &mut &[u8]) -> Option<&'static str> {
    let (&marker, rest) = buf.split_first()?;
    let (len, rest) = match marker {
        0xa0..=0xbf => (usize::from(marker & 0x1f), rest),
        0xd9 => {
            let (&len, rest) = rest.split_first()?;
            (usize::from(len), rest)
        }
        _ => return None,
    };
    let name = rest.get(..len)?;
    let func = crud_function_name(name)?;
    *buf = &rest[len..];
    Some(func)
}

/// The names of the crud functions a CALL may name (tarantool/crud's API).
pub const CRUD_FUNCTION_NAMES: [&str; 24] = [
    "crud.insert",
    "crud.insert_object",
    "crud.insert_many",
    "crud.insert_object_many",
    "crud.replace",
    "crud.replace_object",
    "crud.replace_many",
    "crud.replace_object_many",
    "crud.upsert",
    "crud.upsert_object",
    "crud.upsert_many",
    "crud.upsert_object_many",
    "crud.update",
    "crud.delete",
    "crud.get",
    "crud.select",
    "crud.pairs",
    "crud.count",
    "crud.len",
    "crud.min",
    "crud.max",
    "crud.truncate",
    "crud.storage_info",
    "crud.stats",
];

/// The one of [`CRUD_FUNCTION_NAMES`] that `name` spells, byte for byte; needs no UTF-8
/// check first (every name that matches is ASCII).
#[inline(always)]
pub fn crud_function_name(name: &[u8]) -> Option<&'static str> {
    // A match on the bytes compiles to a switch on the length, then compares.
    let at = match name.strip_prefix(b"crud.")? {
        b"insert" => 0,
        b"insert_object" => 1,
        b"insert_many" => 2,
        b"insert_object_many" => 3,
        b"replace" => 4,
        b"replace_object" => 5,
        b"replace_many" => 6,
        b"replace_object_many" => 7,
        b"upsert" => 8,
        b"upsert_object" => 9,
        b"upsert_many" => 10,
        b"upsert_object_many" => 11,
        b"update" => 12,
        b"delete" => 13,
        b"get" => 14,
        b"select" => 15,
        b"pairs" => 16,
        b"count" => 17,
        b"len" => 18,
        b"min" => 19,
        b"max" => 20,
        b"truncate" => 21,
        b"storage_info" => 22,
        b"stats" => 23,
        _ => return None,
    };
    Some(CRUD_FUNCTION_NAMES[at])
}

/// A whole array value, header included.
#[inline(always)]
fn array<'a>(buf: &mut &'a [u8]) -> Option<&'a [u8]> {
    if !starts_with_array(buf) {
        return None;
    }
    crate::msgpack::take_value(buf).ok()
}

#[inline(always)]
fn starts_with_array(buf: &[u8]) -> bool {
    matches!(buf.first(), Some(0x90..=0x9f | 0xdc | 0xdd))
}

/// The error the general decoder gives a CALL whose arguments are torn or followed by
/// trailing bytes.
pub fn torn_args_error() -> ProtocolError {
    ProtocolError::InvalidMsgpack(invalid_msgpack::PACKET_BODY)
}

/// Whether `args` are not exactly one whole value: the arguments of a call this decoder
/// left unmeasured, which the general decoder would have refused. Always `false` for
/// arguments the general decoder decoded.
pub fn is_torn(args: &[u8]) -> bool {
    let mut rest = args;
    crate::msgpack::take_value(&mut rest).is_err() || !rest.is_empty()
}

/// [`is_torn`] of a request's arguments, if it is a call: for a caller about to answer a
/// request with an error of its own, which must not come before the decoder's.
pub fn has_torn_args(request: &Request<'_>) -> bool {
    matches!(request, Request::Call(call) if is_torn(call.args))
}
