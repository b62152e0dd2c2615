//! The result object `{metadata, rows}` (spec §18.2) and the `fields` option.
//!
//! Metadata is the space format as stored (`name`, `type`, `is_nullable` when set); with
//! `fields`, only those entries in that order, and each row cut to the same columns.

use super::error::CrudError;
use super::mp::{self, write_map_len};
use crate::msgpack::{write_array_len, write_str};
use crate::storage::{Space, SpaceFormat};
use std::cell::RefCell;

/// Which columns a result carries: every field of the format, or these field numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Columns {
    All,
    /// 0-based field numbers, in output order.
    Fields(Vec<u32>),
}

/// Resolves `opts.fields` (a msgpack array of names) against the format.
/// Unknown name ⇒ FilterFieldsError `Space format doesn't contain field named "<name>"`.
pub fn resolve_fields(format: &SpaceFormat, fields: Option<&[u8]>) -> Result<Columns, CrudError> {
    let Some(raw) = fields else {
        return Ok(Columns::All);
    };
    let unknown = super::error::by_func::unknown_field;
    let names =
        mp::array_items(raw).ok_or_else(|| unknown(&crate::storage::text::msgpack_to_text(raw)))?;
    let mut numbers = Vec::with_capacity(names.len());
    for name in names {
        let text = match mp::as_str(name) {
            Some(text) => text.to_string(),
            None => crate::storage::text::msgpack_to_text(name),
        };
        let field_no = format
            .field_no_by_name(&text)
            .ok_or_else(|| unknown(&text))?;
        numbers.push(field_no);
    }
    Ok(Columns::Fields(numbers))
}

impl Columns {
    /// select's columns: the requested ones, then every field of `extra` (scan index and
    /// primary key parts) not requested yet, as crud appends them.
    pub fn enriched(&self, extra: impl IntoIterator<Item = u32>) -> Columns {
        match self {
            Columns::All => Columns::All,
            Columns::Fields(fields) => {
                let mut fields = fields.clone();
                for field_no in extra {
                    if !fields.contains(&field_no) {
                        fields.push(field_no);
                    }
                }
                Columns::Fields(fields)
            }
        }
    }

    /// Where field `field_no` sits in a row of these columns.
    pub fn position_of(&self, field_no: u32) -> Option<usize> {
        match self {
            Columns::All => Some(field_no as usize),
            Columns::Fields(fields) => fields.iter().position(|&f| f == field_no),
        }
    }
}

/// Writes the metadata array for `columns`.
pub fn write_metadata(out: &mut Vec<u8>, format: &SpaceFormat, columns: &Columns) {
    let write_entry = |out: &mut Vec<u8>, field_no: u32| match format.fields.get(field_no as usize)
    {
        Some(field) => {
            write_map_len(out, 2 + u32::from(field.is_nullable));
            write_str(out, b"name");
            write_str(out, field.name.as_bytes());
            write_str(out, b"type");
            write_str(out, field.field_type.name().as_bytes());
            if field.is_nullable {
                write_str(out, b"is_nullable");
                out.push(0xc3);
            }
        }
        None => out.push(0x80),
    };
    match columns {
        Columns::All => {
            write_array_len(out, format.fields.len() as u32);
            for field_no in 0..format.fields.len() as u32 {
                write_entry(out, field_no);
            }
        }
        Columns::Fields(fields) => {
            write_array_len(out, fields.len() as u32);
            for &field_no in fields {
                write_entry(out, field_no);
            }
        }
    }
}

/// Writes one row (a tuple's msgpack array) cut to `columns`; absent fields are nil.
pub fn write_row(out: &mut Vec<u8>, tuple: &[u8], columns: &Columns) {
    match columns {
        Columns::All => out.extend_from_slice(tuple),
        Columns::Fields(fields) => {
            let max = fields.iter().map(|&f| f as usize + 1).max().unwrap_or(0);
            let values = mp::tuple_fields(tuple, max).unwrap_or_default();
            write_array_len(out, fields.len() as u32);
            for &field_no in fields {
                out.extend_from_slice(values.get(field_no as usize).copied().unwrap_or(mp::NIL));
            }
        }
    }
}

/// The start of every point reply's result with all columns, `{metadata: [...], rows:`,
/// encoded once per space: a space's format never changes (the schema is the config), and
/// encoding it field by field is most of what a point reply costs.
#[derive(Debug, Clone, Default)]
pub struct MetadataCache {
    spaces: RefCell<Vec<CachedResultStart>>,
}

#[derive(Debug, Clone)]
struct CachedResultStart {
    /// `Space::instance` of the space it was encoded from: one cache may meet engines
    /// built from different schemas (as tests do), and a space's instance is never reused.
    instance: u64,
    space_id: u32,
    encoded: Box<[u8]>,
    /// The format it was encoded from, to check in debug builds that it is still the
    /// space's (a compare that allocates nothing: the allocation tests count debug runs).
    #[cfg(debug_assertions)]
    fields: Vec<crate::storage::FieldDef>,
}

/// A cache holds no identity of its own.
impl PartialEq for MetadataCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for MetadataCache {}

impl MetadataCache {
    /// Writes [`write_result`] of `rows` with every column, the metadata from the cache.
    pub fn write_result_all(&self, out: &mut Vec<u8>, space: &Space, rows: &[&[u8]]) {
        self.write_result_start(out, space);
        write_array_len(out, rows.len() as u32);
        for row in rows {
            out.extend_from_slice(row);
        }
    }

    fn write_result_start(&self, out: &mut Vec<u8>, space: &Space) {
        let instance = space.instance();
        let mut spaces = self.spaces.borrow_mut();
        let cached = spaces.iter().position(|cached| cached.instance == instance);
        let at = cached.unwrap_or_else(|| {
            // A space built again at this id replaces the entry of the one before it.
            spaces.retain(|cached| cached.space_id != space.id);
            spaces.push(CachedResultStart {
                instance,
                space_id: space.id,
                encoded: encode_result_start(space).into_boxed_slice(),
                #[cfg(debug_assertions)]
                fields: space.format.fields.clone(),
            });
            spaces.len() - 1
        });
        #[cfg(debug_assertions)]
        assert!(
            spaces[at].fields == space.format.fields,
            "space {} changed its format after it was built",
            space.id
        );
        out.extend_from_slice(&spaces[at].encoded);
    }
}

fn encode_result_start(space: &Space) -> Vec<u8> {
    let mut encoded = Vec::new();
    write_map_len(&mut encoded, 2);
    write_str(&mut encoded, b"metadata");
    write_metadata(&mut encoded, &space.format, &Columns::All);
    write_str(&mut encoded, b"rows");
    encoded
}

/// Writes `{metadata: [...], rows: [...]}`, or `{metadata}` alone when `rows` is `None`.
pub fn write_result(
    out: &mut Vec<u8>,
    format: &SpaceFormat,
    columns: &Columns,
    rows: Option<&[&[u8]]>,
) {
    write_map_len(out, 1 + u32::from(rows.is_some()));
    write_str(out, b"metadata");
    write_metadata(out, format, columns);
    if let Some(rows) = rows {
        write_str(out, b"rows");
        write_array_len(out, rows.len() as u32);
        for row in rows {
            write_row(out, row, columns);
        }
    }
}
