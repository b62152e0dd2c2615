//! Objects to tuples (`*_object` functions) and the `bucket_id` field of a tuple.
//!
//! Flattening follows crud's `utils.flatten` (`crud/common/utils.lua:412`, 1.7.5): a key
//! that names no field is an error first, then, in format order, a missing non-nullable
//! field unless `skip_nullability_check_on_flatten`; `bucket_id` may always be omitted.
//! The tuple has every field of the format, absent ones nil (crud fills a table of
//! `box.NULL`s, which msgpack keeps).

use super::bucket::bucket_id_of_parts;
use super::mp;
use super::write::{OpBytes, Scratch, Spliced};
use crate::msgpack::{self, Value};
use crate::storage::Space;
use smallvec::SmallVec;

pub const BUCKET_ID_FIELD: &str = "bucket_id";

/// The number of the space's `bucket_id` field.
#[inline]
fn bucket_field_of(space: &Space) -> Option<u32> {
    space.format.field_no_by_name(BUCKET_ID_FIELD)
}

/// The message of a FlattenError (wrapped by the caller into its own class).
pub fn flatten(
    space: &Space,
    object: &[u8],
    skip_nullability_check: bool,
) -> Result<Vec<u8>, String> {
    let pairs: Vec<(String, &[u8])> = match mp::map_items(object) {
        Some(pairs) => pairs
            .into_iter()
            .map(|(key, value)| (key_text(key), value))
            .collect(),
        // A Lua table with array keys: its keys are 1, 2, ...
        None => mp::array_items(object)
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(at, value)| ((at + 1).to_string(), value))
            .collect(),
    };
    // Keys that name no field first, then the fields in format order.
    if let Some((name, _)) = pairs
        .iter()
        .find(|(name, _)| space.format.field_no_by_name(name).is_none())
    {
        return Err(format!("Unknown field \"{name}\" is specified"));
    }
    let format = &space.format.fields;
    let mut values: Vec<&[u8]> = Vec::with_capacity(format.len());
    for field in format {
        let value = pairs
            .iter()
            .find(|(name, _)| name.as_str() == &*field.name)
            .map(|(_, value)| *value)
            .filter(|value| !mp::is_nil(value));
        if value.is_none()
            && !field.is_nullable
            && !skip_nullability_check
            && &*field.name != BUCKET_ID_FIELD
        {
            return Err(format!(
                "Field \"{}\" isn't nullable (set skip_nullability_check_on_flatten option to true to skip check)",
                field.name
            ));
        }
        values.push(value.unwrap_or(mp::NIL));
    }
    // Every field of the format, absent ones nil: crud builds the tuple that long.
    Ok(mp::array_of(values.iter().copied()))
}

fn key_text(raw: &[u8]) -> String {
    match mp::as_str(raw) {
        Some(text) => text.to_string(),
        None => {
            let mut out = Vec::new();
            super::bucket::lua_tostring(raw, &mut out);
            String::from_utf8_lossy(&out).into_owned()
        }
    }
}

/// The FlattenError's text of a failed flatten (the caller wraps it in its own class).
pub fn flatten_error_text(message: &str) -> String {
    format!("Object is specified in bad format: FlattenError: {message}")
}

/// Fills the tuple's `bucket_id` field when the space has one: from `opts.bucket_id`, else
/// crud's formula over the primary key. A tuple that already holds a different bucket_id
/// than `opts.bucket_id`, or an invalid bucket_id, is crud's BucketIDError; a bucket_id past
/// `bucket_count` has no route. Spaces without the field pass unchanged.
///
/// A tuple that needs no change is returned as the caller's bytes; a filled one is the
/// caller's bytes with only the field (and the array header) rewritten.
pub fn set_bucket_id<'t>(
    space: &Space,
    tuple: &'t [u8],
    opts_bucket_id: Option<&[u8]>,
    bucket_count: u32,
) -> Result<OpBytes<'t>, BucketError> {
    let Some(bucket_field) = bucket_field_of(space) else {
        return Ok(tuple.into());
    };
    debug_assert!(
        {
            let mut rest = tuple;
            mp::take(&mut rest).is_some() && rest.is_empty()
        },
        "not one whole value: {tuple:02x?}"
    );
    let mut cursor = tuple;
    let Some(fields) = TupleFields::take(space, &mut cursor, bucket_field as usize) else {
        // Not an array: storage will name the problem.
        return Ok(tuple.into());
    };
    let filled = with_bucket_id(tuple, &fields, bucket_field, opts_bucket_id, bucket_count)
        .map_err(BucketError::Invalid)?;
    let present = fields
        .bucket_id
        .map(|(start, end)| &tuple[start..end])
        .filter(|raw| !is_nil_field(raw));
    if let Some(chosen) = present.or(opts_bucket_id) {
        if !bucket_id_routes(chosen, bucket_count) {
            let mut text = Vec::new();
            super::bucket::lua_tostring(chosen, &mut text);
            return Err(BucketError::NoRoute(
                String::from_utf8_lossy(&text).into_owned(),
            ));
        }
    }
    Ok(filled)
}

/// Why a tuple's bucket_id could not be set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BucketError {
    /// A BucketIDError's text.
    Invalid(String),
    /// vshard has no bucket of this id (its Lua text).
    NoRoute(String),
}

/// Whether the present bucket_id at `field` of `tuple` is one a point call may use as it
/// is: valid and routed (otherwise the general path names the error).
#[inline]
fn present_bucket_usable(tuple: &[u8], field: Option<(usize, usize)>, bucket_count: u32) -> bool {
    match field.map(|(start, end)| &tuple[start..end]) {
        Some(raw) if !is_nil_field(raw) => {
            validate_bucket_id(raw, "data").is_ok() && bucket_id_routes(raw, bucket_count)
        }
        _ => true,
    }
}

/// `tuple` with the field at `field` (its nil) replaced by `bucket_id`, as pieces.
#[inline]
fn splice_bucket_id(tuple: &[u8], field: (usize, usize), bucket_id: u64) -> OpBytes<'_> {
    let mut computed = [0u8; 9];
    let value_len = encode_uint(bucket_id, &mut computed).len();
    OpBytes::Spliced(Spliced::new(
        &tuple[..field.0],
        computed,
        value_len,
        &tuple[field.1..],
    ))
}

/// [`set_bucket_id`] without `opts.bucket_id`, of the tuple at the start of `cursor`, which
/// is measured in the same walk (the cursor moves past it): the point calls' one walk over
/// their tuple. `None` when it is not a whole array; then nothing is planned from it.
///
/// With `splice`, a nil bucket_id is filled as [`OpBytes::Spliced`], for a caller whose
/// storage write takes pieces (insert, replace); without, the tuple is rebuilt whole (an
/// upsert's storage reads it as one slice, which a splice would join on the heap).
#[inline]
pub fn take_with_bucket_id<'t>(
    space: &Space,
    cursor: &mut &'t [u8],
    bucket_count: u32,
    splice: bool,
) -> Option<OpBytes<'t>> {
    let start = *cursor;
    let Some(bucket_field) = bucket_field_of(space) else {
        if !matches!(start.first(), Some(0x90..=0x9f | 0xdc | 0xdd)) {
            return None;
        }
        return mp::take(cursor).map(OpBytes::from);
    };
    if let ([part], [marker @ 0x90..=0x9f, fields @ ..]) =
        (space.indexes()[0].def.key_def.parts.as_slice(), start)
    {
        // One key part and a short array, nearly every call: the walk finds the key and
        // the bucket_id field itself, with nothing collected.
        let (key_field, bucket_field) = (part.field_no as usize, bucket_field as usize);
        let mut key = mp::NIL;
        let mut bucket = None;
        let mut rest = fields;
        for field_no in 0..usize::from(marker & 0x0f) {
            let at = start.len() - rest.len();
            let value = take_field(&mut rest)?;
            if field_no == bucket_field {
                bucket = Some((at, at + value.len()));
            }
            if field_no == key_field {
                key = value;
            }
        }
        *cursor = rest;
        let tuple = &start[..start.len() - rest.len()];
        if let Some((at, end)) = bucket.filter(|&(at, end)| splice && is_nil_field(&tuple[at..end]))
        {
            let bucket_id = bucket_id_of_parts([key], bucket_count);
            return Some(splice_bucket_id(tuple, (at, end), bucket_id));
        }
        let mut again = tuple;
        let fields = TupleFields::take(space, &mut again, bucket_field)?;
        if !present_bucket_usable(tuple, fields.bucket_id, bucket_count) {
            return None;
        }
        return with_bucket_id(tuple, &fields, bucket_field as u32, None, bucket_count).ok();
    }
    let fields = TupleFields::take(space, cursor, bucket_field as usize)?;
    let tuple = &start[..start.len() - cursor.len()];
    if let (Some((start, end)), [0x90..=0x9f, ..]) = (fields.bucket_id, tuple) {
        // Only under a fixarray header: `set_bucket_id` writes the header afresh in its
        // shortest form, which for a fixarray is the same byte.
        if splice && is_nil_field(&tuple[start..end]) {
            // The common case, a nil in place: the header stays, only the field changes.
            let bucket_id = bucket_id_of_parts(fields.pk_parts.iter().copied(), bucket_count);
            return Some(splice_bucket_id(tuple, (start, end), bucket_id));
        }
    }
    if !present_bucket_usable(tuple, fields.bucket_id, bucket_count) {
        return None;
    }
    // Without opts.bucket_id there is no disagreement to report.
    with_bucket_id(tuple, &fields, bucket_field, None, bucket_count).ok()
}

/// The bucket_id step of [`set_bucket_id`] once the tuple's fields are found, in the order
/// of crud's `tuple_set_and_return_bucket_id`: the tuple's own bucket_id is validated,
/// then `opts.bucket_id`, then the two compared. Errors are BucketIDError texts.
fn with_bucket_id<'t>(
    tuple: &'t [u8],
    fields: &TupleFields<'t>,
    bucket_field: u32,
    opts_bucket_id: Option<&[u8]>,
    bucket_count: u32,
) -> Result<OpBytes<'t>, String> {
    let present = fields
        .bucket_id
        .filter(|&(start, end)| !is_nil_field(&tuple[start..end]));
    if let Some((start, end)) = present {
        validate_bucket_id(&tuple[start..end], "data")?;
    }
    if let Some(given) = opts_bucket_id {
        validate_bucket_id(given, "opts")?;
    }
    let mut computed = [0u8; 9];
    let bucket_id: &[u8] = match (present, opts_bucket_id) {
        (Some((start, end)), Some(given)) if !same_number(&tuple[start..end], given) => {
            let text = |raw: &[u8]| {
                let mut out = Vec::new();
                super::bucket::lua_tostring(raw, &mut out);
                String::from_utf8_lossy(&out).into_owned()
            };
            return Err(format!(
                "Tuple and opts.bucket_id contain different bucket_id values: {} and {}",
                text(&tuple[start..end]),
                text(given)
            ));
        }
        (Some(_), _) => return Ok(tuple.into()),
        (None, Some(given)) => given,
        (None, None) => {
            let bucket_id = bucket_id_of_parts(fields.pk_parts.iter().copied(), bucket_count);
            encode_uint(bucket_id, &mut computed)
        }
    };
    // The array is rewritten with a fresh header, as long as it needs to be, and without
    // anything that trailed it.
    let bucket_field = bucket_field as usize;
    let count = fields.count.max(bucket_field + 1);
    let mut scratch = Scratch::with_capacity(tuple.len() + 4 + (count - fields.count));
    let out = scratch.bytes_mut();
    msgpack::write_array_len(out, count as u32);
    match fields.bucket_id {
        Some((start, end)) => {
            out.extend_from_slice(&tuple[fields.first..start]);
            out.extend_from_slice(bucket_id);
            out.extend_from_slice(&tuple[end..]);
        }
        None => {
            out.extend_from_slice(&tuple[fields.first..]);
            out.resize(out.len() + (bucket_field - fields.count), mp::NIL[0]);
            out.extend_from_slice(bucket_id);
        }
    }
    Ok(OpBytes::Scratch(scratch))
}

/// Where a tuple's fields are, for [`set_bucket_id`]: byte offsets into it.
struct TupleFields<'t> {
    count: usize,
    /// The first field's start (the fields end where the tuple does).
    first: usize,
    /// The bucket_id field's bytes, when the tuple is long enough to have it.
    bucket_id: Option<(usize, usize)>,
    /// The primary key's values, in key part order (nil for fields the tuple lacks).
    pk_parts: SmallVec<[&'t [u8]; 4]>,
}

impl<'t> TupleFields<'t> {
    /// The fields of the array at the start of `cursor`, every one walked so that the
    /// cursor ends past the array; `None` when it is not an array or is torn.
    #[inline]
    fn take(space: &Space, cursor: &mut &'t [u8], bucket_field: usize) -> Option<TupleFields<'t>> {
        let tuple = *cursor;
        let parts = &space.indexes()[0].def.key_def.parts;
        let mut rest = tuple;
        let count = match rest.split_first() {
            Some((&marker @ 0x90..=0x9f, after)) => {
                rest = after;
                usize::from(marker & 0x0f)
            }
            Some((0xdc | 0xdd, _)) => match msgpack::read_value(&mut rest) {
                Ok(Value::Array(count)) => count as usize,
                _ => return None,
            },
            _ => return None,
        };
        let first = tuple.len() - rest.len();
        let mut fields = TupleFields {
            count,
            first,
            bucket_id: None,
            pk_parts: if parts.len() <= 4 {
                SmallVec::from_buf_and_len([mp::NIL; 4], parts.len())
            } else {
                SmallVec::from_elem(mp::NIL, parts.len())
            },
        };
        if let [part] = parts.as_slice() {
            // One key part, most keys: one compare per field, not a loop over the parts.
            let key_field = part.field_no as usize;
            for field_no in 0..count {
                let start = tuple.len() - rest.len();
                let value = take_field(&mut rest)?;
                if field_no == bucket_field {
                    fields.bucket_id = Some((start, start + value.len()));
                }
                if field_no == key_field {
                    fields.pk_parts[0] = value;
                }
            }
        } else {
            for field_no in 0..count {
                let start = tuple.len() - rest.len();
                let value = take_field(&mut rest)?;
                if field_no == bucket_field {
                    fields.bucket_id = Some((start, start + value.len()));
                }
                for (part, slot) in parts.iter().zip(fields.pk_parts.iter_mut()) {
                    if part.field_no as usize == field_no {
                        *slot = value;
                    }
                }
            }
        }
        *cursor = rest;
        Some(fields)
    }
}

/// [`mp::is_nil`], answered from the marker for the values a bucket_id field holds.
#[inline(always)]
fn is_nil_field(raw: &[u8]) -> bool {
    match raw.first() {
        Some(0xc0) => true,
        Some(0x00..=0x7f | 0xcc..=0xcf) => false,
        _ => mp::is_nil(raw),
    }
}

/// [`mp::take`] with the common fields (numbers, nil, strings up to 64 KiB) measured here
/// by their marker, inline: a tuple's walk is most of a write's planning.
#[inline(always)]
fn take_field<'t>(cursor: &mut &'t [u8]) -> Option<&'t [u8]> {
    let raw = *cursor;
    let len = match *raw.first()? {
        0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => 1,
        marker @ 0xa0..=0xbf => 1 + usize::from(marker & 0x1f),
        0xcc | 0xd0 => 2,
        0xcd | 0xd1 => 3,
        0xca | 0xce | 0xd2 => 5,
        0xcb | 0xcf | 0xd3 => 9,
        0xd9 => 2 + usize::from(*raw.get(1)?),
        0xda => 3 + usize::from(u16::from_be_bytes([*raw.get(1)?, *raw.get(2)?])),
        _ => return mp::take(cursor),
    };
    let taken = raw.get(..len)?;
    *cursor = &raw[len..];
    Some(taken)
}

/// msgpack's shortest encoding of an unsigned integer (as `write_uint`), into `buffer`.
fn encode_uint(value: u64, buffer: &mut [u8; 9]) -> &[u8] {
    let len = if value < 0x80 {
        buffer[0] = value as u8;
        1
    } else if value <= u64::from(u8::MAX) {
        buffer[..2].copy_from_slice(&[0xcc, value as u8]);
        2
    } else if value <= u64::from(u16::MAX) {
        buffer[0] = 0xcd;
        buffer[1..3].copy_from_slice(&(value as u16).to_be_bytes());
        3
    } else if value <= u64::from(u32::MAX) {
        buffer[0] = 0xce;
        buffer[1..5].copy_from_slice(&(value as u32).to_be_bytes());
        5
    } else {
        buffer[0] = 0xcf;
        buffer[1..9].copy_from_slice(&value.to_be_bytes());
        9
    };
    &buffer[..len]
}

/// crud's `validate_bucket_id`: a bucket_id is an integral number of at least 1.
/// `where_` is `data` (the tuple's) or `opts`.
pub fn validate_bucket_id(raw: &[u8], where_: &str) -> Result<(), String> {
    let valid = match mp::value(raw) {
        Value::Uint(u) => u >= 1,
        Value::Int(i) => i >= 1,
        Value::F32(f) => f >= 1.0 && f.floor() == f,
        Value::F64(f) => f >= 1.0 && f.floor() == f,
        _ => false,
    };
    if valid {
        return Ok(());
    }
    Err(format!(
        "Invalid bucket_id in {where_}: expected unsigned, got {}",
        mp::lua_type(raw)
    ))
}

/// Whether a valid bucket_id names a bucket vshard has (1 to `bucket_count`); vshard has
/// no route to any other.
pub fn bucket_id_routes(raw: &[u8], bucket_count: u32) -> bool {
    match mp::value(raw) {
        Value::Uint(u) => u <= u64::from(bucket_count),
        Value::Int(i) => i <= i64::from(bucket_count),
        Value::F32(f) => f as f64 <= f64::from(bucket_count),
        Value::F64(f) => f <= f64::from(bucket_count),
        _ => false,
    }
}

fn same_number(a: &[u8], b: &[u8]) -> bool {
    let as_f64 = |raw: &[u8]| match mp::value(raw) {
        Value::Uint(u) => Some(u as f64),
        Value::Int(i) => Some(i as f64),
        Value::F32(f) => Some(f as f64),
        Value::F64(f) => Some(f),
        _ => None,
    };
    a == b || matches!((as_f64(a), as_f64(b)), (Some(x), Some(y)) if x == y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msgpack::write_uint;

    #[test]
    fn encodes_as_write_uint_does() {
        for value in [0, 1, 127, 128, 255, 256, 65_535, 65_536, 1 << 32, u64::MAX] {
            let mut expected = Vec::new();
            write_uint(&mut expected, value);
            assert_eq!(encode_uint(value, &mut [0; 9]), &expected[..], "{value}");
        }
    }
}
