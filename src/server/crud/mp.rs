//! Small MessagePack helpers for crud's dynamically typed arguments: split arrays and maps
//! into the raw bytes of their elements, name a value's Lua type, write map headers.
//!
//! Borrowing only; the storage reader (`storage::msgpack`) does the decoding.

use crate::storage::msgpack::{self, Value};

pub const NIL: &[u8] = &[0xc0];

/// The one value at the start of `raw` (a container's header only); `Nil` when unreadable.
pub fn value(raw: &[u8]) -> Value<'_> {
    let mut cursor = raw;
    msgpack::read_value(&mut cursor).unwrap_or(Value::Nil)
}

pub fn is_nil(raw: &[u8]) -> bool {
    matches!(value(raw), Value::Nil)
}

/// The raw bytes of each element of an array, or `None` if `raw` is not a whole array.
pub fn array_items(raw: &[u8]) -> Option<Vec<&[u8]>> {
    let mut cursor = raw;
    let Ok(Value::Array(count)) = msgpack::read_value(&mut cursor) else {
        return None;
    };
    let mut items = Vec::with_capacity(count.min(1024) as usize);
    for _ in 0..count {
        items.push(msgpack::take_value(&mut cursor).ok()?);
    }
    Some(items)
}

/// Whether `raw` starts with a whole array (every element readable), without collecting
/// its elements.
pub fn is_whole_array(raw: &[u8]) -> bool {
    let mut cursor = raw;
    let Ok(Value::Array(count)) = msgpack::read_value(&mut cursor) else {
        return false;
    };
    (0..count).all(|_| msgpack::skip_value(&mut cursor).is_ok())
}

/// The key and value bytes of a map's pairs, borrowed in place: what [`map_items`] holds,
/// without the Vec. Only made by [`map_pairs`], which checked the whole map first.
#[derive(Debug, Clone)]
pub struct MapPairs<'a> {
    rest: &'a [u8],
    remaining: u32,
}

impl<'a> Iterator for MapPairs<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let key = msgpack::take_value(&mut self.rest).ok()?;
        let value = msgpack::take_value(&mut self.rest).ok()?;
        Some((key, value))
    }
}

/// The pairs of a map, or `None` if `raw` is not a whole map (as [`map_items`]).
pub fn map_pairs(raw: &[u8]) -> Option<MapPairs<'_>> {
    let mut cursor = raw;
    let Ok(Value::Map(count)) = msgpack::read_value(&mut cursor) else {
        return None;
    };
    let pairs = MapPairs {
        rest: cursor,
        remaining: count,
    };
    let mut check = cursor;
    for _ in 0..u64::from(count) * 2 {
        msgpack::skip_value(&mut check).ok()?;
    }
    Some(pairs)
}

/// The raw bytes of each key and value of a map, or `None` if `raw` is not a whole map.
pub fn map_items(raw: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    let mut cursor = raw;
    let Ok(Value::Map(count)) = msgpack::read_value(&mut cursor) else {
        return None;
    };
    let mut items = Vec::with_capacity(count.min(1024) as usize);
    for _ in 0..count {
        let key = msgpack::take_value(&mut cursor).ok()?;
        let value = msgpack::take_value(&mut cursor).ok()?;
        items.push((key, value));
    }
    Some(items)
}

/// The text of a string value.
pub fn as_str(raw: &[u8]) -> Option<&str> {
    match value(raw) {
        Value::Str(bytes) => std::str::from_utf8(bytes).ok(),
        _ => None,
    }
}

/// The Lua type a value decodes to in Tarantool, as `checks` names it in messages. Maps
/// and arrays are tables; extensions (decimal, uuid, datetime) and 64-bit integers beyond
/// a double's exact range are cdata.
pub fn lua_type(raw: &[u8]) -> &'static str {
    const EXACT_DOUBLE_MAX: u64 = 1 << 53;
    match value(raw) {
        Value::Nil => "nil",
        Value::Bool(_) => "boolean",
        Value::Uint(u) if u > EXACT_DOUBLE_MAX => "cdata",
        Value::Int(i) if i.unsigned_abs() > EXACT_DOUBLE_MAX => "cdata",
        Value::Uint(_) | Value::Int(_) | Value::F32(_) | Value::F64(_) => "number",
        Value::Str(_) | Value::Bin(_) => "string",
        Value::Array(_) | Value::Map(_) => "table",
        Value::Ext(..) => "cdata",
    }
}

pub use crate::storage::msgpack::write_map_len;

/// An array of already-encoded values.
pub fn array_of<'a>(items: impl ExactSizeIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    msgpack::write_array_len(&mut out, items.len() as u32);
    for item in items {
        out.extend_from_slice(item);
    }
    out
}

/// The fields of a tuple (a msgpack array) as raw values, up to `max_fields`.
pub fn tuple_fields(data: &[u8], max_fields: usize) -> Option<Vec<&[u8]>> {
    let mut cursor = data;
    let Ok(Value::Array(count)) = msgpack::read_value(&mut cursor) else {
        return None;
    };
    let take = (count as usize).min(max_fields);
    let mut fields = Vec::with_capacity(take);
    for _ in 0..take {
        fields.push(msgpack::take_value(&mut cursor).ok()?);
    }
    Some(fields)
}
