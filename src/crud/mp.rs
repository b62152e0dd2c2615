//! Small MessagePack helpers for crud's dynamically typed arguments: split arrays and maps
//! into the raw bytes of their elements, name a value's Lua type, write map headers.
//!
//! Borrowing only; the storage reader (`crate::msgpack`) does the decoding.

use crate::msgpack::{self, Value};

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

/// [`msgpack::take_value`] (the bytes of the next whole value, the cursor moved past
/// them; `None` when torn), with scalars measured from their marker: the arguments and
/// tuples of point calls are mostly numbers and strings, which then skip the general
/// decode.
///
/// Iterative, as `skip_value` is: a count of pending elements replaces recursion.
#[inline]
pub fn take<'a>(cursor: &mut &'a [u8]) -> Option<&'a [u8]> {
    // Most values are scalars: measured inline, with no loop to enter.
    let raw = *cursor;
    if let Some(len) = msgpack::scalar_len(raw) {
        let taken = raw.get(..len)?;
        *cursor = &raw[len..];
        return Some(taken);
    }
    take_container(cursor)
}

/// The whole length of a value whose marker alone gives it (fixints, nil, booleans,
/// fixstrs, fixed-width numbers); 0 for every other marker.
const FIXED_LEN: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut marker = 0;
    while marker < 256 {
        table[marker] = match marker as u8 {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => 1,
            byte @ 0xa0..=0xbf => 1 + (byte & 0x1f),
            0xcc | 0xd0 => 2,
            0xcd | 0xd1 => 3,
            0xca | 0xce | 0xd2 => 5,
            0xcb | 0xcf | 0xd3 => 9,
            _ => 0,
        };
        marker += 1;
    }
    table
};

/// [`take`] of anything but a scalar.
fn take_container<'a>(cursor: &mut &'a [u8]) -> Option<&'a [u8]> {
    let raw = *cursor;
    // One table look-up per element for scalars; `at` may run past the end only on the
    // last step, which the checks below catch.
    let mut at = 0usize;
    let mut pending = 1usize;
    while pending > 0 {
        pending -= 1;
        let marker = *raw.get(at)?;
        let fixed = FIXED_LEN[usize::from(marker)];
        if fixed != 0 {
            at += usize::from(fixed);
            continue;
        }
        at += match marker {
            0x80..=0x8f => {
                pending += 2 * usize::from(marker & 0x0f);
                1
            }
            0x90..=0x9f => {
                pending += usize::from(marker & 0x0f);
                1
            }
            0xd9 => 2 + usize::from(*raw.get(at + 1)?),
            _ => {
                let mut after = &raw[at..];
                msgpack::skip_value(&mut after).ok()?;
                raw.len() - at - after.len()
            }
        };
    }
    let taken = raw.get(..at)?;
    *cursor = &raw[at..];
    Some(taken)
}

/// An unsigned integer's value, read straight from its marker; `None` for anything else
/// (including integers encoded with a signed marker).
#[inline]
pub fn uint(raw: &[u8]) -> Option<u64> {
    msgpack::leading_uint(raw).map(|(value, _)| value)
}

/// Whether `raw` starts with a whole array (every element readable), without collecting
/// its elements.
pub fn is_whole_array(raw: &[u8]) -> bool {
    let mut cursor = raw;
    let Ok(Value::Array(count)) = msgpack::read_value(&mut cursor) else {
        return false;
    };
    (0..count).all(|_| take(&mut cursor).is_some())
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
        let key = take(&mut self.rest)?;
        let value = take(&mut self.rest)?;
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
        take(&mut check)?;
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

/// The bytes of a string value (not checked to be UTF-8).
pub fn str_bytes(raw: &[u8]) -> Option<&[u8]> {
    // Short strings (names, most keys) need no general decode.
    if let Some(&marker @ 0xa0..=0xbf) = raw.first() {
        let len = usize::from(marker & 0x1f);
        if let Some(bytes) = raw.get(1..1 + len) {
            return Some(bytes);
        }
    }
    match value(raw) {
        Value::Str(bytes) => Some(bytes),
        _ => None,
    }
}

/// The text of a string value.
pub fn as_str(raw: &[u8]) -> Option<&str> {
    match value(raw) {
        Value::Str(bytes) => std::str::from_utf8(bytes).ok(),
        _ => None,
    }
}

/// Integers beyond this are cdata in Lua: a double holds them inexactly.
const EXACT_DOUBLE_MAX: u64 = 1 << 53;

/// The Lua type a value decodes to in Tarantool, as `checks` names it in messages. Maps
/// and arrays are tables; extensions (decimal, uuid, datetime) and 64-bit integers beyond
/// a double's exact range are cdata.
pub fn lua_type(raw: &[u8]) -> &'static str {
    // Values whose marker alone names the type (what arguments mostly are) skip the
    // general decode; a string's marker only when its bytes are all there.
    match raw.first() {
        Some(0x00..=0x7f | 0xe0..=0xff) => return "number",
        Some(&marker @ (0xca..=0xce | 0xd0..=0xd2)) => {
            let payload = match marker {
                0xcc | 0xd0 => 1,
                0xcd | 0xd1 => 2,
                0xcb => 8,
                _ => 4,
            };
            if raw.len() > payload {
                return "number";
            }
        }
        Some(0x80..=0x9f) => return "table", // fixmap, fixarray
        Some(0xc0) => return "nil",
        Some(0xc2 | 0xc3) => return "boolean",
        Some(&marker @ 0xa0..=0xbf) if raw.len() > usize::from(marker & 0x1f) => return "string",
        _ => {}
    }
    decoded_lua_type(raw)
}

/// What [`lua_type`] answers from a full decode, without the marker shortcuts.
fn decoded_lua_type(raw: &[u8]) -> &'static str {
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

pub use crate::msgpack::write_map_len;

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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every marker, whole or cut short: `take` and `uint` agree with the general decode.
    #[test]
    fn take_and_uint_agree_with_the_decode() {
        for marker in 0..=255u8 {
            for payload in 0..=40 {
                let mut raw = vec![marker];
                raw.extend((0..payload).map(|at| if at == 0 { 0x01 } else { 0xc0 }));
                let (mut fast, mut general) = (&raw[..], &raw[..]);
                let taken = take(&mut fast);
                let expected = msgpack::take_value(&mut general).ok();
                assert_eq!(taken, expected, "{raw:02x?}");
                if expected.is_some() {
                    assert_eq!(fast, general, "{raw:02x?}");
                }
                let decoded = match value(&raw) {
                    Value::Uint(u) if matches!(marker, 0x00..=0x7f | 0xcc..=0xcf) => Some(u),
                    _ => None,
                };
                assert_eq!(uint(&raw), decoded, "{raw:02x?}");
            }
        }
    }

    /// Containers of every marker, whole or cut short, are measured as `take_value` does.
    #[test]
    fn take_measures_containers_as_take_value_does() {
        for header in [0x92u8, 0x81, 0xdc] {
            for marker in 0..=255u8 {
                for payload in 0..=6 {
                    let mut raw = vec![header];
                    if header == 0xdc {
                        raw.extend_from_slice(&[0x00, 0x02]);
                    }
                    raw.push(marker);
                    raw.extend((0..payload).map(|at| if at == 0 { 0x01 } else { 0xc3 }));
                    let (mut fast, mut general) = (&raw[..], &raw[..]);
                    let expected = msgpack::take_value(&mut general).ok();
                    assert_eq!(take(&mut fast), expected, "{raw:02x?}");
                    if expected.is_some() {
                        assert_eq!(fast, general, "{raw:02x?}");
                    }
                }
            }
        }
    }

    /// Every marker, whole or cut short: the shortcuts answer as the decode does.
    #[test]
    fn lua_type_shortcuts_agree_with_the_decode() {
        for marker in 0..=255u8 {
            for payload in 0..=40 {
                let mut raw = vec![marker];
                raw.extend((0..payload).map(|at| if at == 0 { 0x01 } else { 0xff }));
                assert_eq!(lua_type(&raw), decoded_lua_type(&raw), "{raw:02x?}");
                let text = str_bytes(&raw);
                let decoded = match value(&raw) {
                    Value::Str(bytes) => Some(bytes),
                    _ => None,
                };
                assert_eq!(text, decoded, "{raw:02x?}");
            }
        }
    }
}
