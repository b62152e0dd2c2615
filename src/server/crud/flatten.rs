//! Objects to tuples (`*_object` functions) and the `bucket_id` field of a tuple.
//!
//! Flattening follows crud's `utils.flatten`: fields in format order, a missing
//! non-nullable field is an error unless `skip_nullability_check_on_flatten` (checked
//! first), then a key that names no field is an error; `bucket_id` may always be omitted.
//! Trailing nils are dropped, as Tarantool's Lua encoder drops a table's trailing holes.

use super::bucket::bucket_id_of;
use super::mp;
use crate::storage::msgpack::{write_array_len, write_uint, Value};
use crate::storage::Space;

pub const BUCKET_ID_FIELD: &str = "bucket_id";

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
    let format = &space.format.fields;
    let mut values: Vec<&[u8]> = Vec::with_capacity(format.len());
    let mut used = 0usize;
    for field in format {
        let found = pairs.iter().find(|(name, _)| name.as_str() == &*field.name);
        let value = found
            .map(|(_, value)| *value)
            .filter(|value| !mp::is_nil(value));
        if found.is_some() {
            used += 1;
        }
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
    if used != pairs.len() {
        if let Some((name, _)) = pairs
            .iter()
            .find(|(name, _)| space.format.field_no_by_name(name).is_none())
        {
            return Err(format!("Unknown field \"{name}\" is specified"));
        }
    }
    let len = values
        .iter()
        .rposition(|value| !mp::is_nil(value))
        .map_or(0, |at| at + 1);
    Ok(mp::array_of(values[..len].iter().copied()))
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

/// The full error text of a failed flatten, as crud wraps it.
pub fn flatten_error_text(message: &str) -> String {
    format!(
        "Failed to flatten object: FlattenError: Object is specified in bad format: FlattenError: {message}"
    )
}

/// Fills the tuple's `bucket_id` field when the space has one: from `opts.bucket_id`, else
/// crud's formula over the primary key. A tuple that already holds a different bucket_id
/// than `opts.bucket_id` is crud's ShardingError. Spaces without the field pass unchanged.
/// Errors are the full `err` text.
pub fn set_bucket_id(
    space: &Space,
    tuple: &[u8],
    opts_bucket_id: Option<&[u8]>,
    bucket_count: u32,
) -> Result<Vec<u8>, String> {
    let Some(bucket_field) = space.format.field_no_by_name(BUCKET_ID_FIELD) else {
        return Ok(tuple.to_vec());
    };
    let bucket_field = bucket_field as usize;
    let Some(mut fields) = mp::tuple_fields(tuple, usize::MAX) else {
        // Not an array: storage will name the problem.
        return Ok(tuple.to_vec());
    };
    let present = fields
        .get(bucket_field)
        .copied()
        .filter(|value| !mp::is_nil(value));
    let computed;
    let bucket_id: &[u8] = match (present, opts_bucket_id) {
        (Some(present), Some(given)) if !same_number(present, given) => {
            return Err(format!(
                "Failed to get bucket ID: ShardingError: Tuple and opts.bucket_id contain different bucket_id values: {} and {}",
                crate::storage::text::msgpack_to_text(present),
                crate::storage::text::msgpack_to_text(given)
            ));
        }
        (Some(_), _) => return Ok(tuple.to_vec()),
        (None, Some(given)) => given,
        (None, None) => {
            let pk_parts: Vec<&[u8]> = space.indexes()[0]
                .def
                .key_def
                .parts
                .iter()
                .map(|part| {
                    fields
                        .get(part.field_no as usize)
                        .copied()
                        .unwrap_or(mp::NIL)
                })
                .collect();
            let mut encoded = Vec::new();
            write_uint(&mut encoded, bucket_id_of(&pk_parts, bucket_count));
            computed = encoded;
            &computed
        }
    };
    if fields.len() <= bucket_field {
        fields.resize(bucket_field + 1, mp::NIL);
    }
    fields[bucket_field] = bucket_id;
    let mut out = Vec::with_capacity(tuple.len() + 4);
    write_array_len(&mut out, fields.len() as u32);
    for field in fields {
        out.extend_from_slice(field);
    }
    Ok(out)
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
