//! The fields of a space format, and field types as the config file spells them.
//!
//! The types are storage's own ([`FieldType`]: names, aliases, which types an index can
//! hold, which contain which), so the config resolves straight into what the engine is
//! built from, with no names in between. Owns the order of the names in error messages.

use super::error::ConfigError;
use super::file::RawField;

pub use crate::storage::FieldType;

/// Every type, in the order error messages list their names.
const FIELD_TYPE_NAMES: [FieldType; 14] = [
    FieldType::Unsigned,
    FieldType::Integer,
    FieldType::Number,
    FieldType::Double,
    FieldType::String,
    FieldType::Boolean,
    FieldType::Varbinary,
    FieldType::Scalar,
    FieldType::Uuid,
    FieldType::Decimal,
    FieldType::Datetime,
    FieldType::Array,
    FieldType::Map,
    FieldType::Any,
];

/// The names accepted for a field type, for error messages.
pub(crate) fn field_type_names() -> String {
    let names: Vec<&str> = FIELD_TYPE_NAMES
        .iter()
        .map(|field_type| field_type.name())
        .collect();
    names.join(", ")
}

/// Parses a field type, naming `key_path` in the error.
pub(crate) fn parse_field_type(name: &str, key_path: &str) -> Result<FieldType, ConfigError> {
    FieldType::from_name(name).ok_or_else(|| {
        ConfigError::invalid(
            key_path,
            format!(
                "type {name:?} is not one of {} (or the aliases str, num, uint, int, bool)",
                field_type_names()
            ),
        )
    })
}

/// One field of a space format. Its field number is its position in [`super::SpaceConfig::format`]
/// (0-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldConfig {
    pub name: String,
    pub field_type: FieldType,
    /// Accepts nil (and may be absent when trailing).
    pub is_nullable: bool,
}

/// Checks a space format: names non-empty and unique, types known.
pub(crate) fn resolve_format(
    raw_fields: &[RawField],
    space_path: &str,
) -> Result<Vec<FieldConfig>, ConfigError> {
    let mut fields: Vec<FieldConfig> = Vec::with_capacity(raw_fields.len());
    for (position, raw) in raw_fields.iter().enumerate() {
        let path = format!("{space_path}: format[{position}] {:?}", raw.name);
        if raw.name.is_empty() {
            return Err(ConfigError::invalid(path, "a field name must not be empty"));
        }
        if let Some(earlier) = fields.iter().position(|field| field.name == raw.name) {
            return Err(ConfigError::invalid(
                path,
                format!("field name is already used by format[{earlier}]"),
            ));
        }
        fields.push(FieldConfig {
            name: raw.name.clone(),
            field_type: parse_field_type(&raw.field_type, &path)?,
            is_nullable: raw.is_nullable,
        });
    }
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases_parse() {
        assert_eq!(FieldType::from_name("unsigned"), Some(FieldType::Unsigned));
        assert_eq!(FieldType::from_name("uint"), Some(FieldType::Unsigned));
        assert_eq!(FieldType::from_name("STR"), Some(FieldType::String));
        assert_eq!(FieldType::from_name("num"), Some(FieldType::Number));
        assert_eq!(FieldType::from_name("int"), Some(FieldType::Integer));
        assert_eq!(FieldType::from_name("bool"), Some(FieldType::Boolean));
        assert_eq!(FieldType::from_name("interval"), None);
        for field_type in FIELD_TYPE_NAMES {
            assert_eq!(FieldType::from_name(field_type.name()), Some(field_type));
        }
    }

    #[test]
    fn containment_follows_tarantool() {
        use FieldType::*;
        assert!(Any.contains(Map));
        assert!(Scalar.contains(Uuid));
        assert!(!Scalar.contains(Array));
        assert!(Number.contains(Unsigned));
        assert!(Number.contains(Double));
        assert!(Integer.contains(Unsigned));
        assert!(!Unsigned.contains(Integer));
        assert!(!String.contains(Unsigned));
        assert_eq!(Unsigned.narrower(Scalar), Some(Unsigned));
        assert_eq!(Scalar.narrower(String), Some(String));
        assert_eq!(String.narrower(Unsigned), None);
        assert_eq!(Double.narrower(Integer), None);
    }
}
