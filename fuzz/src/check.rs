//! Checks the targets share, written apart from the code under test: a MessagePack walker
//! of its own, a tuple validator that applies a space's format and key parts by the rules
//! of `storage::field_type` read off that file (not by calling it), and a picture of a
//! space's contents to compare before and after a write.

use tarn::storage::index::IndexKind;
use tarn::storage::{FieldType, Space};

/// What the first byte of a value says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Nil,
    Bool,
    Uint,
    Int,
    F32,
    F64,
    Str,
    Bin,
    Array(u64),
    Map(u64),
    Ext(i8, usize),
}

fn be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0, |n, &b| (n << 8) | u64::from(b))
}

/// The kind of the value at `at`, and where its payload ends (for containers, where their
/// header ends).
fn head(data: &[u8], at: usize) -> Option<(Kind, usize)> {
    let marker = *data.get(at)?;
    let field = |width: usize| -> Option<u64> { data.get(at + 1..at + 1 + width).map(be) };
    let sized = |kind: Kind, width: usize| -> Option<(Kind, usize)> {
        let len = usize::try_from(field(width)?).ok()?;
        let end = (at + 1 + width).checked_add(len)?;
        (end <= data.len()).then_some((kind, end))
    };
    let fixed = |kind: Kind, len: usize| {
        let end = at + 1 + len;
        (end <= data.len()).then_some((kind, end))
    };
    match marker {
        0x00..=0x7f => fixed(Kind::Uint, 0),
        0x80..=0x8f => fixed(Kind::Map(u64::from(marker & 0x0f)), 0),
        0x90..=0x9f => fixed(Kind::Array(u64::from(marker & 0x0f)), 0),
        0xa0..=0xbf => fixed(Kind::Str, usize::from(marker & 0x1f)),
        0xc0 => fixed(Kind::Nil, 0),
        0xc1 => None,
        0xc2 | 0xc3 => fixed(Kind::Bool, 0),
        0xc4..=0xc6 => sized(Kind::Bin, 1 << (marker - 0xc4)),
        0xc7..=0xc9 => {
            let width = 1usize << (marker - 0xc7);
            let len = usize::try_from(field(width)?).ok()?;
            let ext_type = *data.get(at + 1 + width)? as i8;
            let end = (at + 2 + width).checked_add(len)?;
            (end <= data.len()).then_some((Kind::Ext(ext_type, len), end))
        }
        0xca => fixed(Kind::F32, 4),
        0xcb => fixed(Kind::F64, 8),
        0xcc..=0xcf => fixed(Kind::Uint, 1 << (marker - 0xcc)),
        0xd0..=0xd3 => fixed(Kind::Int, 1 << (marker - 0xd0)),
        0xd4..=0xd8 => {
            let len = 1usize << (marker - 0xd4);
            let ext_type = *data.get(at + 1)? as i8;
            let end = at + 2 + len;
            (end <= data.len()).then_some((Kind::Ext(ext_type, len), end))
        }
        0xd9..=0xdb => sized(Kind::Str, 1 << (marker - 0xd9)),
        0xdc => Some((Kind::Array(field(2)?), at + 3)).filter(|&(_, end)| end <= data.len()),
        0xdd => Some((Kind::Array(field(4)?), at + 5)).filter(|&(_, end)| end <= data.len()),
        0xde => Some((Kind::Map(field(2)?), at + 3)).filter(|&(_, end)| end <= data.len()),
        0xdf => Some((Kind::Map(field(4)?), at + 5)).filter(|&(_, end)| end <= data.len()),
        0xe0..=0xff => fixed(Kind::Int, 0),
    }
}

/// The end of the whole value at `at`, nested values included; `None` if it is not one.
fn value_end(data: &[u8], at: usize) -> Option<usize> {
    let mut pending: u64 = 1;
    let mut at = at;
    while pending > 0 {
        pending -= 1;
        let (kind, end) = head(data, at)?;
        match kind {
            Kind::Array(n) => pending += n,
            Kind::Map(n) => pending += 2 * n,
            _ => {}
        }
        // Every value takes a byte at least: more pending values than bytes left is a lie.
        if pending > (data.len() - end) as u64 {
            return None;
        }
        at = end;
    }
    Some(at)
}

/// Whether `data` is exactly one whole MessagePack value.
pub fn is_one_value(data: &[u8]) -> bool {
    value_end(data, 0) == Some(data.len())
}

/// The fields of `data` if it is exactly one whole array.
pub fn array_fields(data: &[u8]) -> Option<Vec<&[u8]>> {
    let (Kind::Array(count), mut at) = head(data, 0)? else {
        return None;
    };
    let mut fields = Vec::new();
    for _ in 0..count {
        let end = value_end(data, at)?;
        fields.push(&data[at..end]);
        at = end;
    }
    (at == data.len()).then_some(fields)
}

/// Whether the non-nil value `field` is of `field_type`.
fn is_of_type(field: &[u8], field_type: FieldType) -> bool {
    let Some((kind, _)) = head(field, 0) else {
        return false;
    };
    let number = matches!(
        kind,
        Kind::Uint | Kind::Int | Kind::F32 | Kind::F64 | Kind::Ext(1, _)
    );
    match field_type {
        FieldType::Any => true,
        FieldType::Unsigned => kind == Kind::Uint,
        FieldType::Integer => matches!(kind, Kind::Uint | Kind::Int),
        FieldType::Number => number,
        FieldType::Double => kind == Kind::F64,
        FieldType::String => kind == Kind::Str,
        FieldType::Boolean => kind == Kind::Bool,
        FieldType::Varbinary => kind == Kind::Bin,
        FieldType::Scalar => {
            number
                || matches!(
                    kind,
                    Kind::Bool | Kind::Str | Kind::Bin | Kind::Ext(2 | 4, _)
                )
        }
        FieldType::Uuid => kind == Kind::Ext(2, 16),
        FieldType::Decimal => matches!(kind, Kind::Ext(1, _)),
        FieldType::Datetime => matches!(kind, Kind::Ext(4, _)),
        FieldType::Array => matches!(kind, Kind::Array(_)),
        FieldType::Map => matches!(kind, Kind::Map(_)),
    }
}

/// One rule on a field: its type, and whether nil (or its absence) is allowed.
#[derive(Debug, Clone, Copy)]
struct Rule {
    field_type: FieldType,
    nullable: bool,
}

/// Why `data` may not be stored in `space` (its format and every index's key parts), or
/// `None` if it may.
pub fn tuple_problem(space: &Space, data: &[u8]) -> Option<String> {
    let Some(fields) = array_fields(data) else {
        return Some("not one whole msgpack array".into());
    };
    let format = &space.format;
    if format.exact_field_count != 0 && fields.len() as u64 != u64::from(format.exact_field_count) {
        return Some(format!(
            "{} fields, the space wants {}",
            fields.len(),
            format.exact_field_count
        ));
    }
    let mut rules: Vec<(usize, Rule)> = format
        .fields
        .iter()
        .enumerate()
        .map(|(no, def)| {
            let rule = Rule {
                field_type: def.field_type,
                nullable: def.is_nullable,
            };
            (no, rule)
        })
        .collect();
    for index in space.indexes() {
        for part in &index.def.key_def.parts {
            let rule = Rule {
                field_type: part.field_type,
                nullable: part.is_nullable,
            };
            rules.push((part.field_no as usize, rule));
        }
    }
    for (no, rule) in rules {
        let present = fields.get(no).filter(|field| field[0] != 0xc0);
        // A nil that is there is a value of type any; a missing field is nobody's.
        let nil_allowed = rule.nullable || (rule.field_type == FieldType::Any && no < fields.len());
        match present {
            None if !nil_allowed => return Some(format!("field {no} is nil or missing: {rule:?}")),
            Some(field) if !is_of_type(field, rule.field_type) => {
                return Some(format!("field {no} is not {rule:?}"))
            }
            _ => {}
        }
    }
    None
}

/// Every index's tuples in its order (sorted for HASH indexes, whose order is the map's),
/// and the bytes the space and its quota count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picture {
    indexes: Vec<Vec<Vec<u8>>>,
    len: usize,
    tuple_bytes: usize,
    quota_used_bytes: u64,
}

pub fn picture(space: &Space, quota_used_bytes: u64) -> Picture {
    let indexes = space
        .indexes()
        .iter()
        .map(|index| {
            let mut tuples: Vec<Vec<u8>> = index
                .entries()
                .map(|(_, tuple)| tuple.data().to_vec())
                .collect();
            if index.def.kind == IndexKind::Hash {
                tuples.sort();
            }
            tuples
        })
        .collect();
    Picture {
        indexes,
        len: space.len(),
        tuple_bytes: space.memory().tuple_bytes,
        quota_used_bytes,
    }
}

/// Every tuple of every index may be stored in `space`, and every index holds the same
/// tuples as the primary one.
pub fn check_space(space: &Space) {
    let picture = picture(space, 0);
    let mut primary = picture.indexes[0].clone();
    assert_eq!(primary.len(), space.len());
    for tuple in &primary {
        if let Some(problem) = tuple_problem(space, tuple) {
            panic!("space {} stores {tuple:02x?}: {problem}", space.name);
        }
    }
    primary.sort();
    for (position, index) in picture.indexes.iter().enumerate().skip(1) {
        let mut tuples = index.clone();
        tuples.sort();
        assert_eq!(
            tuples, primary,
            "index at {position} of space {}",
            space.name
        );
    }
}
