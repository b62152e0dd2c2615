//! Field types and the fields of a space format.
//!
//! Owns the names of the field types (with Tarantool's short aliases), which types an index can
//! hold, and which types contain which. Knows nothing of msgpack or of how storage checks a
//! value against a type; the server maps [`FieldType`] to the engine's own type.

use super::error::ConfigError;
use super::file::RawField;

/// A field type of a space format or an index part, as Tarantool names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldType {
    Unsigned,
    Integer,
    Number,
    Double,
    String,
    Boolean,
    Varbinary,
    Scalar,
    Uuid,
    Decimal,
    Datetime,
    Array,
    Map,
    Any,
}

/// Every type with its canonical (lower-case) name.
const FIELD_TYPE_NAMES: [(FieldType, &str); 14] = [
    (FieldType::Unsigned, "unsigned"),
    (FieldType::Integer, "integer"),
    (FieldType::Number, "number"),
    (FieldType::Double, "double"),
    (FieldType::String, "string"),
    (FieldType::Boolean, "boolean"),
    (FieldType::Varbinary, "varbinary"),
    (FieldType::Scalar, "scalar"),
    (FieldType::Uuid, "uuid"),
    (FieldType::Decimal, "decimal"),
    (FieldType::Datetime, "datetime"),
    (FieldType::Array, "array"),
    (FieldType::Map, "map"),
    (FieldType::Any, "any"),
];

/// Tarantool's short spellings.
const FIELD_TYPE_ALIASES: [(FieldType, &str); 5] = [
    (FieldType::String, "str"),
    (FieldType::Number, "num"),
    (FieldType::Unsigned, "uint"),
    (FieldType::Integer, "int"),
    (FieldType::Boolean, "bool"),
];

impl FieldType {
    /// Parses a type name or alias, case-insensitively; `None` if unknown.
    pub fn from_name(name: &str) -> Option<FieldType> {
        let lower = name.to_ascii_lowercase();
        FIELD_TYPE_NAMES
            .iter()
            .chain(FIELD_TYPE_ALIASES.iter())
            .find(|(_, known)| *known == lower)
            .map(|(field_type, _)| *field_type)
    }

    /// The canonical lower-case name, as Tarantool prints it in `_space` formats.
    pub fn name(self) -> &'static str {
        FIELD_TYPE_NAMES
            .iter()
            .find(|(field_type, _)| *field_type == self)
            .map(|(_, name)| *name)
            .expect("every field type has a name")
    }

    /// Whether a TREE or HASH index part may have this type (not array, map or any).
    pub fn is_indexable(self) -> bool {
        !matches!(self, FieldType::Array | FieldType::Map | FieldType::Any)
    }

    /// Whether every value of `other` is also a value of `self`
    /// (any ⊃ scalar ⊃ number ⊃ integer ⊃ unsigned; number ⊃ double, decimal).
    pub fn contains(self, other: FieldType) -> bool {
        use FieldType::*;
        self == other
            || match self {
                Any => true,
                Scalar => other.is_indexable(),
                Number => matches!(other, Unsigned | Integer | Double | Decimal),
                Integer => other == Unsigned,
                _ => false,
            }
    }

    /// The narrower of two types when one contains the other, `None` when they share no values
    /// worth indexing (e.g. `string` and `unsigned`).
    pub fn narrower(self, other: FieldType) -> Option<FieldType> {
        if self.contains(other) {
            Some(other)
        } else if other.contains(self) {
            Some(self)
        } else {
            None
        }
    }
}

/// The names accepted for a field type, for error messages.
pub(crate) fn field_type_names() -> String {
    let names: Vec<&str> = FIELD_TYPE_NAMES.iter().map(|(_, name)| *name).collect();
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

/// One field of a space format. Its field number is its position in [`super::Space::format`]
/// (0-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub field_type: FieldType,
    /// Accepts nil (and may be absent when trailing).
    pub is_nullable: bool,
}

/// Checks a space format: names non-empty and unique, types known.
pub(crate) fn resolve_format(
    raw_fields: &[RawField],
    space_path: &str,
) -> Result<Vec<Field>, ConfigError> {
    let mut fields: Vec<Field> = Vec::with_capacity(raw_fields.len());
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
        fields.push(Field {
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
        for (field_type, name) in FIELD_TYPE_NAMES {
            assert_eq!(FieldType::from_name(name), Some(field_type));
            assert_eq!(field_type.name(), name);
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
