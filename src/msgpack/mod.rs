//! Borrowing MessagePack reader: the one place that turns bytes into typed values.
//!
//! Owns the decoding of single values and the skipping of whole (nested) values without
//! recursion, so hostile input cannot overflow the stack. It knows nothing of tuples,
//! formats or indexes; writing goes through `rmp::encode` directly.
//!
//! The format byte decides the type, as in Tarantool: a non-negative number encoded with
//! an int format (0xd0..=0xd3) is `Int`, not `Uint`.

// Bytes here come from clients or disk: an `expect` is fixed or says where it stands why
// it cannot fire, and a truncating cast is fixed or says where it stands why it cannot
// truncate (or that truncating is meant).
#![warn(clippy::expect_used, clippy::cast_possible_truncation)]

use std::fmt;

/// A decoded MessagePack value; containers are decoded as their headers only.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Nil,
    Bool(bool),
    /// Encoded with a uint format (positive fixint, 0xcc..=0xcf).
    Uint(u64),
    /// Encoded with an int format (negative fixint, 0xd0..=0xd3); may be non-negative.
    Int(i64),
    F32(f32),
    F64(f64),
    Str(&'a [u8]),
    Bin(&'a [u8]),
    /// Array header: the element count; the elements follow in the buffer.
    Array(u32),
    /// Map header: the pair count; the pairs follow in the buffer.
    Map(u32),
    Ext(i8, &'a [u8]),
}

/// The MessagePack type of a value, named as Tarantool names it in error messages
/// (`mp_type_strs[]`, field_def.c in 2.11: a bin is a `blob` there, though the field type
/// that holds one is `varbinary`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpType {
    Nil,
    Uint,
    Int,
    Str,
    Bin,
    Array,
    Map,
    Bool,
    Float,
    Double,
    Ext,
}

impl MpType {
    pub fn name(self) -> &'static str {
        match self {
            MpType::Nil => "nil",
            MpType::Uint => "unsigned",
            MpType::Int => "integer",
            MpType::Str => "string",
            MpType::Bin => "blob",
            MpType::Array => "array",
            MpType::Map => "map",
            MpType::Bool => "boolean",
            MpType::Float => "float",
            MpType::Double => "double",
            MpType::Ext => "extension",
        }
    }
}

impl fmt::Display for MpType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Value<'_> {
    pub fn mp_type(&self) -> MpType {
        match self {
            Value::Nil => MpType::Nil,
            Value::Bool(_) => MpType::Bool,
            Value::Uint(_) => MpType::Uint,
            Value::Int(_) => MpType::Int,
            Value::F32(_) => MpType::Float,
            Value::F64(_) => MpType::Double,
            Value::Str(_) => MpType::Str,
            Value::Bin(_) => MpType::Bin,
            Value::Array(_) => MpType::Array,
            Value::Map(_) => MpType::Map,
            Value::Ext(..) => MpType::Ext,
        }
    }
}

/// The input ended early or held a byte that starts no MessagePack value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgpackError {
    Truncated,
    /// 0xc1 is the one byte MessagePack never uses.
    InvalidMarker,
}

impl fmt::Display for MsgpackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MsgpackError::Truncated => f.write_str("truncated MessagePack value"),
            MsgpackError::InvalidMarker => f.write_str("invalid MessagePack marker 0xc1"),
        }
    }
}

impl std::error::Error for MsgpackError {}

pub type Result<T> = std::result::Result<T, MsgpackError>;

#[inline]
fn take<'a>(buf: &mut &'a [u8], n: usize) -> Result<&'a [u8]> {
    if buf.len() < n {
        return Err(MsgpackError::Truncated);
    }
    let (head, tail) = buf.split_at(n);
    *buf = tail;
    Ok(head)
}

#[inline]
fn take_array<const N: usize>(buf: &mut &[u8]) -> Result<[u8; N]> {
    let bytes = take(buf, N)?;
    let mut out = [0u8; N];
    out.copy_from_slice(bytes);
    Ok(out)
}

#[inline]
fn be_len(buf: &mut &[u8], width: usize) -> Result<usize> {
    Ok(match width {
        1 => take_array::<1>(buf)?[0] as usize,
        2 => u16::from_be_bytes(take_array(buf)?) as usize,
        _ => u32::from_be_bytes(take_array(buf)?) as usize,
    })
}

/// Reads one value (a container's header only) and advances `buf` past it.
#[inline]
pub fn read_value<'a>(buf: &mut &'a [u8]) -> Result<Value<'a>> {
    let (&marker, rest) = buf.split_first().ok_or(MsgpackError::Truncated)?;
    *buf = rest;
    Ok(match marker {
        0x00..=0x7f => Value::Uint(marker as u64),
        0x80..=0x8f => Value::Map((marker & 0x0f) as u32),
        0x90..=0x9f => Value::Array((marker & 0x0f) as u32),
        0xa0..=0xbf => Value::Str(take(buf, (marker & 0x1f) as usize)?),
        0xc0 => Value::Nil,
        0xc1 => return Err(MsgpackError::InvalidMarker),
        0xc2 => Value::Bool(false),
        0xc3 => Value::Bool(true),
        0xc4..=0xc6 => {
            let n = be_len(buf, 1 << (marker - 0xc4))?;
            Value::Bin(take(buf, n)?)
        }
        0xc7..=0xc9 => {
            let n = be_len(buf, 1 << (marker - 0xc7))?;
            let ty = take_array::<1>(buf)?[0] as i8;
            Value::Ext(ty, take(buf, n)?)
        }
        0xca => Value::F32(f32::from_be_bytes(take_array(buf)?)),
        0xcb => Value::F64(f64::from_be_bytes(take_array(buf)?)),
        0xcc => Value::Uint(take_array::<1>(buf)?[0] as u64),
        0xcd => Value::Uint(u16::from_be_bytes(take_array(buf)?) as u64),
        0xce => Value::Uint(u32::from_be_bytes(take_array(buf)?) as u64),
        0xcf => Value::Uint(u64::from_be_bytes(take_array(buf)?)),
        0xd0 => Value::Int(take_array::<1>(buf)?[0] as i8 as i64),
        0xd1 => Value::Int(i16::from_be_bytes(take_array(buf)?) as i64),
        0xd2 => Value::Int(i32::from_be_bytes(take_array(buf)?) as i64),
        0xd3 => Value::Int(i64::from_be_bytes(take_array(buf)?)),
        0xd4..=0xd8 => {
            let n = 1usize << (marker - 0xd4);
            let ty = take_array::<1>(buf)?[0] as i8;
            Value::Ext(ty, take(buf, n)?)
        }
        0xd9..=0xdb => {
            let n = be_len(buf, 1 << (marker - 0xd9))?;
            Value::Str(take(buf, n)?)
        }
        0xdc => Value::Array(u16::from_be_bytes(take_array(buf)?) as u32),
        0xdd => Value::Array(u32::from_be_bytes(take_array(buf)?)),
        0xde => Value::Map(u16::from_be_bytes(take_array(buf)?) as u32),
        0xdf => Value::Map(u32::from_be_bytes(take_array(buf)?)),
        0xe0..=0xff => Value::Int(marker as i8 as i64),
    })
}

/// Skips one whole value, containers included, and advances `buf` past it.
///
/// Iterative: a pending-element counter replaces recursion, so depth costs nothing.
pub fn skip_value(buf: &mut &[u8]) -> Result<()> {
    let mut pending: u64 = 1;
    while pending > 0 {
        pending -= 1;
        // Fix-size containers, numbers and short strings are most of what requests and
        // replies carry: stepped over here; the rest (and every error) by `read_value`.
        if let Some((&marker, rest)) = buf.split_first() {
            match marker {
                0x80..=0x8f => {
                    pending += 2 * u64::from(marker & 0x0f);
                    *buf = rest;
                    continue;
                }
                0x90..=0x9f => {
                    pending += u64::from(marker & 0x0f);
                    *buf = rest;
                    continue;
                }
                _ => {
                    if let Some(rest) = scalar_len(buf).and_then(|len| buf.get(len..)) {
                        *buf = rest;
                        continue;
                    }
                }
            }
        }
        match read_value(buf)? {
            Value::Array(n) => pending += n as u64,
            Value::Map(n) => pending += 2 * n as u64,
            _ => {}
        }
    }
    Ok(())
}

/// Returns the bytes of the next whole value and advances `buf` past it.
#[inline]
pub fn take_value<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8]> {
    let start = *buf;
    skip_value(buf)?;
    Ok(&start[..start.len() - buf.len()])
}

/// Reads an array header, or returns `None` (without advancing) if the value is not one.
#[inline]
pub fn read_array_len(buf: &mut &[u8]) -> Result<Option<u32>> {
    let mut probe = *buf;
    match read_value(&mut probe)? {
        Value::Array(n) => {
            *buf = probe;
            Ok(Some(n))
        }
        _ => Ok(None),
    }
}

/// Writes an array header of the shortest form.
#[inline]
pub fn write_array_len(out: &mut Vec<u8>, len: u32) {
    if len < 16 {
        #[allow(clippy::cast_possible_truncation, reason = "under 16, checked above")]
        out.push(0x90 | len as u8);
    } else if let Ok(len) = u16::try_from(len) {
        out.push(0xdc);
        out.extend_from_slice(&len.to_be_bytes());
    } else {
        out.push(0xdd);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

/// Writes a map header of the shortest form.
#[inline]
pub fn write_map_len(out: &mut Vec<u8>, len: u32) {
    if len < 16 {
        #[allow(clippy::cast_possible_truncation, reason = "under 16, checked above")]
        out.push(0x80 | len as u8);
    } else if let Ok(len) = u16::try_from(len) {
        out.push(0xde);
        out.extend_from_slice(&len.to_be_bytes());
    } else {
        out.push(0xdf);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

/// Writes an unsigned integer of the shortest form.
#[inline]
pub fn write_uint(out: &mut Vec<u8>, value: u64) {
    if value < 128 {
        #[allow(clippy::cast_possible_truncation, reason = "under 128, checked above")]
        out.push(value as u8);
    } else if let Ok(value) = u8::try_from(value) {
        out.extend_from_slice(&[0xcc, value]);
    } else if let Ok(value) = u16::try_from(value) {
        out.push(0xcd);
        out.extend_from_slice(&value.to_be_bytes());
    } else if let Ok(value) = u32::try_from(value) {
        out.push(0xce);
        out.extend_from_slice(&value.to_be_bytes());
    } else {
        out.push(0xcf);
        out.extend_from_slice(&value.to_be_bytes());
    }
}

/// The longest msgpack uint: a marker and 8 bytes.
pub const UINT_BYTES_MAX: usize = 9;

/// [`write_uint`]'s bytes in a fixed buffer, and how many of them there are: for encoders
/// that assemble a whole packet on the stack and append it with one copy.
#[inline(always)]
pub fn uint_bytes(value: u64) -> ([u8; UINT_BYTES_MAX], usize) {
    let mut bytes = [0u8; UINT_BYTES_MAX];
    let len = if value < 128 {
        #[allow(clippy::cast_possible_truncation, reason = "under 128, checked above")]
        let fixint = value as u8;
        bytes[0] = fixint;
        1
    } else if let Ok(value) = u8::try_from(value) {
        bytes[..2].copy_from_slice(&[0xcc, value]);
        2
    } else if let Ok(value) = u16::try_from(value) {
        bytes[0] = 0xcd;
        bytes[1..3].copy_from_slice(&value.to_be_bytes());
        3
    } else if let Ok(value) = u32::try_from(value) {
        bytes[0] = 0xce;
        bytes[1..5].copy_from_slice(&value.to_be_bytes());
        5
    } else {
        bytes[0] = 0xcf;
        bytes[1..9].copy_from_slice(&value.to_be_bytes());
        9
    };
    (bytes, len)
}

/// Writes a signed integer: non-negative values as uint (as Tarantool does), negative ones
/// in the shortest int form.
#[inline]
pub fn write_int(out: &mut Vec<u8>, value: i64) {
    if value >= 0 {
        write_uint(out, value as u64);
    } else if value >= -32 {
        #[allow(clippy::cast_possible_truncation, reason = "in -32..0, checked above")]
        out.push(value as i8 as u8);
    } else if let Ok(value) = i8::try_from(value) {
        out.extend_from_slice(&[0xd0, value as u8]);
    } else if let Ok(value) = i16::try_from(value) {
        out.push(0xd1);
        out.extend_from_slice(&value.to_be_bytes());
    } else if let Ok(value) = i32::try_from(value) {
        out.push(0xd2);
        out.extend_from_slice(&value.to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&value.to_be_bytes());
    }
}

/// Writes a string header for `len` bytes in the shortest form; the bytes follow it.
///
/// No msgpack string is over `u32::MAX` bytes: such a length saturates, so the string
/// cannot be read back, and neither can what carries it, which is then over its own u32
/// limit too (a reply packet, which `protocol::reply::finish_packet` replaces whole by an
/// error; a WAL row, which the writer refuses).
#[inline]
pub fn write_str_header(out: &mut Vec<u8>, len: usize) {
    if len < 32 {
        #[allow(clippy::cast_possible_truncation, reason = "under 32, checked above")]
        out.push(0xa0 | len as u8);
    } else if let Ok(len) = u8::try_from(len) {
        out.extend_from_slice(&[0xd9, len]);
    } else if let Ok(len) = u16::try_from(len) {
        out.push(0xda);
        out.extend_from_slice(&len.to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
    }
}

/// Writes a string header and its bytes in the shortest form.
#[inline]
pub fn write_str(out: &mut Vec<u8>, bytes: &[u8]) {
    write_str_header(out, bytes.len());
    out.extend_from_slice(bytes);
}

/// Writes a double as 0xcb.
#[inline]
pub fn write_f64(out: &mut Vec<u8>, value: f64) {
    out.push(0xcb);
    out.extend_from_slice(&value.to_be_bytes());
}

/// Writes a float as 0xca.
#[inline]
pub fn write_f32(out: &mut Vec<u8>, value: f32) {
    out.push(0xca);
    out.extend_from_slice(&value.to_be_bytes());
}

/// The encoded length of a number, nil, boolean or short string at the start of `bytes`
/// (possibly past its end: the caller checks); `None` for anything else.
#[inline(always)]
pub fn scalar_len(bytes: &[u8]) -> Option<usize> {
    let (&marker, rest) = bytes.split_first()?;
    Some(match marker {
        0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => 1,
        0xa0..=0xbf => 1 + usize::from(marker & 0x1f),
        0xcc | 0xd0 => 2,
        0xcd | 0xd1 => 3,
        0xca | 0xce | 0xd2 => 5,
        0xcb | 0xcf | 0xd3 => 9,
        0xd9 => 2 + usize::from(*rest.first()?),
        _ => return None,
    })
}

/// The unsigned integer `bytes` start with, when its marker says it is one (a positive
/// fixint or `uint 8/16/32/64`), and the bytes after it; `None` for anything else, which the
/// caller decodes the general way (and so reports errors the general way).
#[inline]
pub fn leading_uint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let (&marker, payload) = bytes.split_first()?;
    let (value, used) = match marker {
        0x00..=0x7f => (u64::from(marker), 0),
        0xcc => (u64::from(*payload.first()?), 1),
        0xcd => (
            u64::from(u16::from_be_bytes(payload.get(..2)?.try_into().ok()?)),
            2,
        ),
        0xce => (
            u64::from(u32::from_be_bytes(payload.get(..4)?.try_into().ok()?)),
            4,
        ),
        0xcf => (u64::from_be_bytes(payload.get(..8)?.try_into().ok()?), 8),
        _ => return None,
    };
    Some((value, &payload[used..]))
}

/// The integer of `bytes` when they are exactly a one-element array holding an unsigned
/// integer (`[id]`, the usual primary key); `None` for anything else.
#[inline]
pub fn single_uint_array(bytes: &[u8]) -> Option<u64> {
    let (&0x91, rest) = bytes.split_first()? else {
        return None;
    };
    let (value, after) = leading_uint(rest)?;
    after.is_empty().then_some(value)
}

#[cfg(test)]
mod tests {

    #[test]
    fn type_names_are_2_11s_mp_type_strs() {
        let names: Vec<&str> = [
            MpType::Nil,
            MpType::Uint,
            MpType::Int,
            MpType::Str,
            MpType::Bin,
            MpType::Array,
            MpType::Map,
            MpType::Bool,
            MpType::Float,
            MpType::Double,
            MpType::Ext,
        ]
        .iter()
        .map(|ty| ty.name())
        .collect();
        assert_eq!(
            names,
            [
                "nil",
                "unsigned",
                "integer",
                "string",
                "blob",
                "array",
                "map",
                "boolean",
                "float",
                "double",
                "extension"
            ]
        );
    }

    #[test]
    fn single_uint_array_reads_exactly_one_unsigned_in_a_one_element_array() {
        for value in [
            0u64,
            127,
            128,
            255,
            256,
            65_535,
            65_536,
            u32::MAX as u64,
            u64::MAX,
        ] {
            let mut key = vec![0x91];
            write_uint(&mut key, value);
            assert_eq!(single_uint_array(&key), Some(value), "{key:?}");
            // Any non-canonical width is fine too, as in the general decoder.
            let mut wide = vec![0x91, 0xcf];
            wide.extend_from_slice(&value.to_be_bytes());
            assert_eq!(single_uint_array(&wide), Some(value));
            let mut trailing = key.clone();
            trailing.push(0);
            assert_eq!(single_uint_array(&trailing), None);
            assert_eq!(single_uint_array(&key[..key.len() - 1]), None, "cut short");
        }
        for other in [
            &[0x90][..],
            &[0x92, 1, 2],
            &[0x91, 0xff],
            &[0x91, 0xd0, 1],
            &[0x91, 0xc0],
            &[1],
        ] {
            assert_eq!(single_uint_array(other), None, "{other:?}");
        }
    }

    use super::*;

    #[test]
    fn int_formats_are_int_even_when_positive() {
        let mut buf: &[u8] = &[0xd0, 0x05];
        assert_eq!(read_value(&mut buf), Ok(Value::Int(5)));
        let mut buf: &[u8] = &[0xcc, 0xff];
        assert_eq!(read_value(&mut buf), Ok(Value::Uint(255)));
        let mut buf: &[u8] = &[0xff];
        assert_eq!(read_value(&mut buf), Ok(Value::Int(-1)));
    }

    #[test]
    fn skip_walks_nested_containers() {
        // [1, {"a": [2, 3]}, "x"] then a trailing 7
        let bytes = [
            0x93, 0x01, 0x81, 0xa1, b'a', 0x92, 0x02, 0x03, 0xa1, b'x', 0x07,
        ];
        let mut buf: &[u8] = &bytes;
        let whole = take_value(&mut buf).unwrap();
        assert_eq!(whole.len(), 10);
        assert_eq!(buf, &[0x07]);
    }

    #[test]
    fn truncated_and_invalid_input_is_an_error() {
        let mut buf: &[u8] = &[0x92, 0x01];
        assert_eq!(skip_value(&mut buf), Err(MsgpackError::Truncated));
        let mut buf: &[u8] = &[0xc1];
        assert_eq!(read_value(&mut buf), Err(MsgpackError::InvalidMarker));
        let mut buf: &[u8] = &[0xdb, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(read_value(&mut buf), Err(MsgpackError::Truncated));
    }

    #[test]
    fn deep_nesting_does_not_recurse() {
        let mut bytes = vec![0x91; 1_000_000];
        bytes.push(0xc0);
        let mut buf: &[u8] = &bytes;
        skip_value(&mut buf).unwrap();
        assert!(buf.is_empty());
    }

    #[test]
    fn uint_bytes_are_what_write_uint_writes() {
        for width_edge in [0u64, 0x7f, 0xff, 0xffff, 0xffff_ffff, u64::MAX] {
            for value in [width_edge, width_edge.wrapping_add(1)] {
                let mut written = Vec::new();
                write_uint(&mut written, value);
                let (bytes, len) = uint_bytes(value);
                assert_eq!(&bytes[..len], &written[..], "{value}");
            }
        }
    }

    /// The skipper as it reads: every value through `read_value`, nothing stepped over.
    fn skip_by_read_value(buf: &mut &[u8]) -> Result<()> {
        let mut pending: u64 = 1;
        while pending > 0 {
            pending -= 1;
            match read_value(buf)? {
                Value::Array(n) => pending += u64::from(n),
                Value::Map(n) => pending += 2 * u64::from(n),
                _ => {}
            }
        }
        Ok(())
    }

    proptest::proptest! {
        /// Where `skip_value` steps over values itself, it must stop where the reader
        /// would, or fail as it would: on arbitrary bytes (mostly invalid or cut short)
        /// and on bytes biased to the markers it steps over.
        #[test]
        fn skip_agrees_with_reading_every_value(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::prelude::any::<u8>(),
                    0x80u8..=0x9f,
                    0xa0u8..=0xbf,
                    proptest::sample::select(vec![0xcc_u8, 0xcd, 0xce, 0xcf, 0xd0, 0xd9, 0xca, 0xcb]),
                ],
                0..48,
            )
        ) {
            let (mut fast, mut model): (&[u8], &[u8]) = (&bytes, &bytes);
            let fast_result = skip_value(&mut fast);
            let model_result = skip_by_read_value(&mut model);
            proptest::prop_assert_eq!(fast_result, model_result);
            if model_result.is_ok() {
                proptest::prop_assert_eq!(fast.len(), model.len());
            }
        }
    }

    #[test]
    fn writers_pick_shortest_forms() {
        let mut out = Vec::new();
        write_uint(&mut out, 127);
        write_uint(&mut out, 128);
        write_int(&mut out, -33);
        write_int(&mut out, 7);
        write_array_len(&mut out, 16);
        assert_eq!(out, [0x7f, 0xcc, 0x80, 0xd0, 0xdf, 0x07, 0xdc, 0x00, 0x10]);
    }
}
