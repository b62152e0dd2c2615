//! Index definitions: type, uniqueness, and parts resolved against a space format.
//!
//! Owns the rules one index must satisfy on its own (HASH is unique and not nullable, parts name
//! existing fields with indexable, compatible types, collations only on strings). The rules that
//! need the whole space (the primary index, uniqueness across shards) live in `space.rs`.
//! Knows nothing of how storage compares keys.

use super::error::ConfigError;
use super::field::{parse_field_type, FieldConfig, FieldType};
use super::file::{RawFieldRef, RawIndex, RawPart};

/// The data structure behind an index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IndexType {
    /// Ordered; supports ranges and non-unique keys.
    Tree,
    /// Point lookups only; always unique.
    Hash,
}

impl IndexType {
    /// The upper-case name Tarantool uses.
    pub fn name(self) -> &'static str {
        match self {
            IndexType::Tree => "TREE",
            IndexType::Hash => "HASH",
        }
    }
}

/// A string collation of an index part. Tarantool's `none` (plain byte order) is written as the
/// absence of a collation, `Option::None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CollationConfig {
    /// Byte order; Tarantool id 3.
    Binary,
    /// Unicode order (ICU tertiary strength); Tarantool id 1.
    Unicode,
    /// Unicode order ignoring case (ICU primary strength); Tarantool id 2.
    UnicodeCi,
}

impl CollationConfig {
    /// The Tarantool name.
    pub fn name(self) -> &'static str {
        match self {
            CollationConfig::Binary => "binary",
            CollationConfig::Unicode => "unicode",
            CollationConfig::UnicodeCi => "unicode_ci",
        }
    }

    /// The id Tarantool shows in `_index` part definitions.
    pub fn tarantool_id(self) -> u32 {
        match self {
            CollationConfig::Unicode => 1,
            CollationConfig::UnicodeCi => 2,
            CollationConfig::Binary => 3,
        }
    }
}

/// One key part, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexPartConfig {
    /// 0-based position of the field in the tuple.
    pub field_number: u32,
    /// The type the index compares by: the narrower of the format's type and the part's.
    pub field_type: FieldType,
    /// Whether nil is accepted (it sorts first). Always equal to the field's `is_nullable`.
    pub is_nullable: bool,
    /// `None` means plain byte order (Tarantool's `none`).
    pub collation: Option<CollationConfig>,
}

/// One index, resolved. Its index id is its position in [`super::SpaceConfig::indexes`]; id 0 is
/// the primary index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexConfig {
    pub name: String,
    pub index_type: IndexType,
    /// The type as the config spells it (`tree` when omitted), which `_index` shows: Tarantool
    /// stores the type as its creator wrote it (`'TREE'`, `'tree'`, `'Tree'`).
    pub type_name: String,
    pub unique: bool,
    pub parts: Vec<IndexPartConfig>,
}

/// Resolves one index against a format. `index_path` names it in errors.
pub(crate) fn resolve_index(
    raw: &RawIndex,
    format: &[FieldConfig],
    index_path: &str,
) -> Result<IndexConfig, ConfigError> {
    let index_type = parse_index_type(&raw.index_type, index_path)?;
    if index_type == IndexType::Hash && !raw.unique {
        return Err(ConfigError::invalid(
            index_path,
            "a HASH index must be unique (use TREE for a non-unique index)",
        ));
    }
    if raw.parts.is_empty() {
        return Err(ConfigError::invalid(
            index_path,
            "parts must name at least one field",
        ));
    }
    let mut parts: Vec<IndexPartConfig> = Vec::with_capacity(raw.parts.len());
    for raw_part in &raw.parts {
        let part_path = format!("{index_path}: part {}", raw_part.field);
        let part = resolve_part(raw_part, format, index_path, &part_path)?;
        if parts
            .iter()
            .any(|seen| seen.field_number == part.field_number)
        {
            return Err(ConfigError::invalid(
                part_path,
                "the field appears twice in the parts of this index",
            ));
        }
        if index_type == IndexType::Hash && part.is_nullable {
            return Err(ConfigError::invalid(
                part_path,
                "a HASH index cannot have a nullable part",
            ));
        }
        parts.push(part);
    }
    Ok(IndexConfig {
        name: raw.name.clone(),
        index_type,
        type_name: raw.index_type.clone(),
        unique: raw.unique,
        parts,
    })
}

fn parse_index_type(name: &str, index_path: &str) -> Result<IndexType, ConfigError> {
    match name.to_ascii_uppercase().as_str() {
        "TREE" => Ok(IndexType::Tree),
        "HASH" => Ok(IndexType::Hash),
        _ => Err(ConfigError::invalid(
            index_path,
            format!("type {name:?} is not one of TREE, HASH"),
        )),
    }
}

fn resolve_part(
    raw: &RawPart,
    format: &[FieldConfig],
    index_path: &str,
    part_path: &str,
) -> Result<IndexPartConfig, ConfigError> {
    let field_number = find_field(&raw.field, format, index_path)?;
    let field = &format[field_number];
    let field_type = part_type(raw, field, part_path)?;
    let is_nullable = match raw.is_nullable {
        Some(is_nullable) if is_nullable != field.is_nullable => {
            return Err(ConfigError::invalid(
                part_path,
                format!(
                    "is_nullable = {is_nullable} in the part, but the field is {} in the \
                     space format",
                    if field.is_nullable {
                        "nullable"
                    } else {
                        "not nullable"
                    }
                ),
            ));
        }
        _ => field.is_nullable,
    };
    let collation = parse_collation(raw.collation.as_deref(), field_type, part_path)?;
    Ok(IndexPartConfig {
        field_number: u32::try_from(field_number).expect("a format has fewer than 2^32 fields"),
        field_type,
        is_nullable,
        collation,
    })
}

/// The 0-based number of the field a part names. The error names the index, with the part
/// in the reason: `index "v": part "zz" is not a field of the space format`.
fn find_field(
    field_ref: &RawFieldRef,
    format: &[FieldConfig],
    index_path: &str,
) -> Result<usize, ConfigError> {
    let found = match field_ref {
        RawFieldRef::Name(name) => format.iter().position(|field| field.name == *name),
        RawFieldRef::Number(number) => usize::try_from(*number)
            .ok()
            .filter(|number| (1..=format.len()).contains(number))
            .map(|number| number - 1),
    };
    found.ok_or_else(|| {
        let hint = match field_ref {
            RawFieldRef::Name(_) => String::new(),
            RawFieldRef::Number(_) => format!(
                " (field numbers are 1-based and the format has {} fields)",
                format.len()
            ),
        };
        ConfigError::invalid(
            index_path,
            format!("part {field_ref} is not a field of the space format{hint}"),
        )
    })
}

/// The type the part compares by; checks it is indexable and compatible with the field.
fn part_type(
    raw: &RawPart,
    field: &FieldConfig,
    part_path: &str,
) -> Result<FieldType, ConfigError> {
    let resolved = match &raw.field_type {
        None => field.field_type,
        Some(name) => {
            let declared = parse_field_type(name, part_path)?;
            field.field_type.narrower(declared).ok_or_else(|| {
                ConfigError::invalid(
                    part_path,
                    format!(
                        "type {} is incompatible with the field's type {} in the space format",
                        declared.name(),
                        field.field_type.name()
                    ),
                )
            })?
        }
    };
    if !resolved.is_indexable() {
        return Err(ConfigError::invalid(
            part_path,
            format!(
                "type {} cannot be indexed (array, map and any are not indexable)",
                resolved.name()
            ),
        ));
    }
    Ok(resolved)
}

fn parse_collation(
    name: Option<&str>,
    field_type: FieldType,
    part_path: &str,
) -> Result<Option<CollationConfig>, ConfigError> {
    let collation = match name {
        None | Some("none") => return Ok(None),
        Some("binary") => CollationConfig::Binary,
        Some("unicode") => CollationConfig::Unicode,
        Some("unicode_ci") => CollationConfig::UnicodeCi,
        Some(other) => {
            return Err(ConfigError::invalid(
                part_path,
                format!("collation {other:?} is not one of none, binary, unicode, unicode_ci"),
            ))
        }
    };
    if !matches!(field_type, FieldType::String | FieldType::Scalar) {
        return Err(ConfigError::invalid(
            part_path,
            format!(
                "collation {} applies only to string and scalar parts, not {}",
                collation.name(),
                field_type.name()
            ),
        ));
    }
    Ok(Some(collation))
}
