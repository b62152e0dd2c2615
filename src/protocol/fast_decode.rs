//! A single-pass decoder for the requests that make up nearly all traffic: SELECT, INSERT,
//! REPLACE, UPDATE and DELETE with the usual keys, minimal-width maps and small integers.
//!
//! It walks header and body once with straight-line code and gives up (`None`) on anything
//! it does not expect: a rare header key, an unknown body key, a missing mandatory field,
//! a value of the wrong type, trailing bytes, a truncated packet. It never reports errors:
//! the general decoder ([`crate::protocol::decode_packet_general`]) decodes every packet
//! this one gives up on, so errors, their codes and the sync they carry come from one place.
//! When it does decode a packet, the result is exactly the general decoder's (see the
//! property tests in `protocol::tests`).

use crate::msgpack::{scalar_len, skip_value};
use crate::protocol::codes::{body_key, header_key, key_byte, request_type};
use crate::protocol::header::Header;
use crate::protocol::request::{low_32_bits, Delete, Insert, Request, Select, Update};

/// Decodes `packet` (header + body, no size prefix) if it has the common shape.
#[inline]
pub fn decode_common(packet: &[u8]) -> Option<(Header, Request<'_>)> {
    let mut buf = packet;
    let header = header(&mut buf)?;
    let request = match header.request_type {
        request_type::SELECT => Request::Select(select(buf)?),
        request_type::INSERT
        | request_type::REPLACE
        | request_type::UPDATE
        | request_type::DELETE => dml(header.request_type, buf)?,
        _ => return None,
    };
    Some((header, request))
}

/// A packet's header when it has the common shape (a fixmap of the keys the server reads,
/// uint values), and the bytes after it: what replies carry too, so a client reads them
/// here. `None` for anything else, which `header::decode_header` reads.
#[inline]
pub fn decode_header_common(packet: &[u8]) -> Option<(Header, &[u8])> {
    let mut buf = packet;
    let header = header(&mut buf)?;
    Some((header, buf))
}

#[inline(always)]
fn header(buf: &mut &[u8]) -> Option<Header> {
    header_in_usual_order(buf).or_else(|| header_in_any_order(buf))
}

/// `{REQUEST_TYPE, SYNC}`, what connectors send when not checking the schema version.
#[inline(always)]
fn header_in_usual_order(buf: &mut &[u8]) -> Option<Header> {
    let mut cursor = buf.strip_prefix(&[0x82, const { key_byte(header_key::REQUEST_TYPE) }])?;
    let request_type = uint(&mut cursor)?;
    let sync = keyed_uint::<{ header_key::SYNC }>(&mut cursor)?;
    *buf = cursor;
    Some(Header {
        request_type,
        sync,
        schema_version: 0,
        stream_id: 0,
    })
}

/// A fixmap header whose keys are the four the server reads, each with a uint value.
#[inline(always)]
fn header_in_any_order(buf: &mut &[u8]) -> Option<Header> {
    let pairs = fixmap(buf)?;
    let mut header = Header::default();
    for _ in 0..pairs {
        let key = fixint(buf)?;
        let value = uint(buf)?;
        match key as u64 {
            header_key::REQUEST_TYPE => header.request_type = value,
            header_key::SYNC => header.sync = value,
            header_key::SCHEMA_VERSION => header.schema_version = value,
            header_key::STREAM_ID => header.stream_id = value,
            _ => return None,
        }
    }
    Some(header)
}

#[inline(always)]
fn select(body: &[u8]) -> Option<Select<'_>> {
    select_in_usual_order(body).or_else(|| select_in_any_order(body))
}

/// `{SPACE_ID, INDEX_ID, LIMIT, OFFSET, ITERATOR, KEY}` in that order, as tarn's client and
/// go-tarantool write it: one compare per key instead of a dispatch.
#[inline(always)]
fn select_in_usual_order(body: &[u8]) -> Option<Select<'_>> {
    let mut buf = body.strip_prefix(&[0x86, const { key_byte(body_key::SPACE_ID) }])?;
    let space_id = uint32(&mut buf)?;
    let index_id = keyed_uint32::<{ body_key::INDEX_ID }>(&mut buf)?;
    let limit = keyed_uint32::<{ body_key::LIMIT }>(&mut buf)?;
    let offset = keyed_uint32::<{ body_key::OFFSET }>(&mut buf)?;
    let iterator = keyed_uint32::<{ body_key::ITERATOR }>(&mut buf)?;
    expect_key::<{ body_key::KEY }>(&mut buf)?;
    let key = array(&mut buf)?;
    if !buf.is_empty() {
        return None;
    }
    Some(Select {
        space_id,
        index_id,
        limit,
        offset,
        iterator,
        key,
        fetch_position: false,
        after_position: None,
        after_tuple: None,
    })
}

#[inline(always)]
fn select_in_any_order(mut buf: &[u8]) -> Option<Select<'_>> {
    let pairs = fixmap(&mut buf)?;
    let (mut space_id, mut limit, mut key) = (None, None, None);
    let (mut index_id, mut offset, mut iterator) = (0, 0, 0);
    for _ in 0..pairs {
        match fixint(&mut buf)? as u64 {
            body_key::SPACE_ID => space_id = Some(uint32(&mut buf)?),
            body_key::INDEX_ID => index_id = uint32(&mut buf)?,
            body_key::LIMIT => limit = Some(uint32(&mut buf)?),
            body_key::OFFSET => offset = uint32(&mut buf)?,
            body_key::ITERATOR => iterator = uint32(&mut buf)?,
            body_key::KEY => key = Some(array(&mut buf)?),
            _ => return None,
        }
    }
    if !buf.is_empty() {
        return None;
    }
    Some(Select {
        space_id: space_id?,
        index_id,
        limit: limit?,
        offset,
        iterator,
        key: key?,
        fetch_position: false,
        after_position: None,
        after_tuple: None,
    })
}

/// INSERT, REPLACE, UPDATE and DELETE bodies. Like the general decoder, every DML key is
/// read and type-checked whichever request it is, and only then are the mandatory ones
/// looked for.
#[inline(always)]
fn dml(type_code: u64, body: &[u8]) -> Option<Request<'_>> {
    dml_in_usual_order(type_code, body).or_else(|| dml_in_any_order(type_code, body))
}

/// The layouts tarn's client writes: `{SPACE_ID, TUPLE}` for INSERT and REPLACE,
/// `{SPACE_ID, INDEX_ID, KEY}` for DELETE, `{SPACE_ID, INDEX_ID, INDEX_BASE, KEY, TUPLE}`
/// for UPDATE.
#[inline(always)]
fn dml_in_usual_order(type_code: u64, body: &[u8]) -> Option<Request<'_>> {
    let (&map, body) = body.split_first()?;
    let mut buf = body.strip_prefix(&[const { key_byte(body_key::SPACE_ID) }])?;
    let space_id = uint32(&mut buf)?;
    let request = match (type_code, map) {
        (request_type::INSERT | request_type::REPLACE, 0x82) => {
            expect_key::<{ body_key::TUPLE }>(&mut buf)?;
            let insert = Insert {
                space_id,
                tuple: array(&mut buf)?,
            };
            if type_code == request_type::INSERT {
                Request::Insert(insert)
            } else {
                Request::Replace(insert)
            }
        }
        (request_type::DELETE, 0x83) => {
            let index_id = keyed_uint32::<{ body_key::INDEX_ID }>(&mut buf)?;
            expect_key::<{ body_key::KEY }>(&mut buf)?;
            Request::Delete(Delete {
                space_id,
                index_id,
                key: array(&mut buf)?,
            })
        }
        (request_type::UPDATE, 0x85) => {
            let index_id = keyed_uint32::<{ body_key::INDEX_ID }>(&mut buf)?;
            let index_base = keyed_uint32::<{ body_key::INDEX_BASE }>(&mut buf)?;
            expect_key::<{ body_key::KEY }>(&mut buf)?;
            let key = array(&mut buf)?;
            expect_key::<{ body_key::TUPLE }>(&mut buf)?;
            Request::Update(Update {
                space_id,
                index_id,
                key,
                ops: array(&mut buf)?,
                index_base,
            })
        }
        _ => return None,
    };
    buf.is_empty().then_some(request)
}

#[inline(always)]
fn dml_in_any_order(type_code: u64, mut buf: &[u8]) -> Option<Request<'_>> {
    let pairs = fixmap(&mut buf)?;
    let (mut space_id, mut key, mut tuple) = (None, None, None);
    let (mut index_id, mut index_base) = (0, 0);
    for _ in 0..pairs {
        match fixint(&mut buf)? as u64 {
            body_key::SPACE_ID => space_id = Some(uint32(&mut buf)?),
            body_key::INDEX_ID => index_id = uint32(&mut buf)?,
            body_key::INDEX_BASE => index_base = uint32(&mut buf)?,
            body_key::KEY => key = Some(array(&mut buf)?),
            body_key::TUPLE => tuple = Some(array(&mut buf)?),
            // OPS (upsert only) and unknown keys are rare: the general decoder has them.
            _ => return None,
        }
    }
    if !buf.is_empty() {
        return None;
    }
    let space_id = space_id?;
    Some(match type_code {
        request_type::INSERT => Request::Insert(Insert {
            space_id,
            tuple: tuple?,
        }),
        request_type::REPLACE => Request::Replace(Insert {
            space_id,
            tuple: tuple?,
        }),
        request_type::UPDATE => Request::Update(Update {
            space_id,
            index_id,
            key: key?,
            ops: tuple?,
            index_base,
        }),
        _ => Request::Delete(Delete {
            space_id,
            index_id,
            key: key?,
        }),
    })
}

/// A fixmap header's pair count.
#[inline(always)]
fn fixmap(buf: &mut &[u8]) -> Option<u8> {
    let (&marker, rest) = buf.split_first()?;
    if marker & 0xf0 != 0x80 {
        return None;
    }
    *buf = rest;
    Some(marker & 0x0f)
}

/// Exactly the map key `KEY` (a fixint).
#[inline(always)]
fn expect_key<const KEY: u64>(buf: &mut &[u8]) -> Option<()> {
    *buf = buf.strip_prefix(&[const { key_byte(KEY) }])?;
    Some(())
}

/// The map key `KEY`, then a uint value.
#[inline(always)]
fn keyed_uint<const KEY: u64>(buf: &mut &[u8]) -> Option<u64> {
    expect_key::<KEY>(buf)?;
    uint(buf)
}

/// The map key `KEY`, then a uint value for a `u32` field (see [`uint32`]).
#[inline(always)]
fn keyed_uint32<const KEY: u64>(buf: &mut &[u8]) -> Option<u32> {
    expect_key::<KEY>(buf)?;
    uint32(buf)
}

/// A uint value for a `u32` field: Tarantool keeps the low 32 bits of wider values, as the
/// general decoder does.
#[inline(always)]
fn uint32(buf: &mut &[u8]) -> Option<u32> {
    uint(buf).map(low_32_bits)
}

/// A positive fixint: every map key the server knows is one.
#[inline(always)]
fn fixint(buf: &mut &[u8]) -> Option<u8> {
    let (&byte, rest) = buf.split_first()?;
    if byte >= 0x80 {
        return None;
    }
    *buf = rest;
    Some(byte)
}

/// An unsigned integer of any uint width (an int format is not one, as in Tarantool).
#[inline(always)]
fn uint(buf: &mut &[u8]) -> Option<u64> {
    let (&marker, rest) = buf.split_first()?;
    let (value, rest) = match marker {
        0x00..=0x7f => (u64::from(marker), rest),
        0xcc => {
            let (&byte, rest) = rest.split_first()?;
            (u64::from(byte), rest)
        }
        0xcd => {
            let (bytes, rest) = rest.split_first_chunk::<2>()?;
            (u64::from(u16::from_be_bytes(*bytes)), rest)
        }
        0xce => {
            let (bytes, rest) = rest.split_first_chunk::<4>()?;
            (u64::from(u32::from_be_bytes(*bytes)), rest)
        }
        0xcf => {
            let (bytes, rest) = rest.split_first_chunk::<8>()?;
            (u64::from_be_bytes(*bytes), rest)
        }
        _ => return None,
    };
    *buf = rest;
    Some(value)
}

/// A whole array value, header included. Keys and tuples are usually flat arrays of
/// numbers and short strings, walked here inline; the first element that is anything else
/// hands the rest of the array to the general skipper.
#[inline(always)]
fn array<'a>(buf: &mut &'a [u8]) -> Option<&'a [u8]> {
    let start = *buf;
    let (&marker, mut cursor) = start.split_first()?;
    let count = match marker {
        0x90..=0x9f => u32::from(marker & 0x0f),
        0xdc => {
            let (bytes, rest) = cursor.split_first_chunk::<2>()?;
            cursor = rest;
            u32::from(u16::from_be_bytes(*bytes))
        }
        0xdd => {
            let (bytes, rest) = cursor.split_first_chunk::<4>()?;
            cursor = rest;
            u32::from_be_bytes(*bytes)
        }
        _ => return None,
    };
    for walked in 0..count {
        match scalar_len(cursor) {
            Some(len) => cursor = cursor.get(len..)?,
            None => {
                for _ in walked..count {
                    skip_value(&mut cursor).ok()?;
                }
                break;
            }
        }
    }
    let used = start.len() - cursor.len();
    *buf = cursor;
    Some(&start[..used])
}
