//! Tarantool's field types: their names, which MessagePack values each accepts, and
//! which of them an index may be built on.
//!
//! Knows nothing of tuples or indexes; it classifies single values.

use crate::msgpack::Value;

/// MessagePack extension type numbers Tarantool assigns.
pub const EXT_DECIMAL: i8 = 1;
pub const EXT_UUID: i8 = 2;
pub const EXT_DATETIME: i8 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldType {
    Any,
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
}

impl FieldType {
    /// Every type, in declaration order.
    pub const ALL: [FieldType; 14] = [
        FieldType::Any,
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
    ];

    /// Parses a type name as Tarantool spells it, with its short aliases.
    pub fn from_name(name: &str) -> Option<FieldType> {
        Some(match name.to_ascii_lowercase().as_str() {
            "any" => FieldType::Any,
            "unsigned" | "uint" => FieldType::Unsigned,
            "integer" | "int" => FieldType::Integer,
            "number" | "num" => FieldType::Number,
            "double" => FieldType::Double,
            "string" | "str" => FieldType::String,
            "boolean" | "bool" => FieldType::Boolean,
            "varbinary" => FieldType::Varbinary,
            "scalar" => FieldType::Scalar,
            "uuid" => FieldType::Uuid,
            "decimal" => FieldType::Decimal,
            "datetime" => FieldType::Datetime,
            "array" => FieldType::Array,
            "map" => FieldType::Map,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            FieldType::Any => "any",
            FieldType::Unsigned => "unsigned",
            FieldType::Integer => "integer",
            FieldType::Number => "number",
            FieldType::Double => "double",
            FieldType::String => "string",
            FieldType::Boolean => "boolean",
            FieldType::Varbinary => "varbinary",
            FieldType::Scalar => "scalar",
            FieldType::Uuid => "uuid",
            FieldType::Decimal => "decimal",
            FieldType::Datetime => "datetime",
            FieldType::Array => "array",
            FieldType::Map => "map",
        }
    }

    /// Whether TREE and HASH indexes can order values of this type.
    pub fn is_indexable(self) -> bool {
        !matches!(self, FieldType::Any | FieldType::Array | FieldType::Map)
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

    /// The narrower of two types when one contains the other, `None` when they share no
    /// values worth indexing (e.g. `string` and `unsigned`).
    pub fn narrower(self, other: FieldType) -> Option<FieldType> {
        if self.contains(other) {
            Some(other)
        } else if other.contains(self) {
            Some(self)
        } else {
            None
        }
    }

    /// Whether a non-nil value of this MessagePack type is a valid value of the field type.
    /// Nil is the caller's business (it depends on nullability).
    pub fn accepts(self, value: &Value<'_>) -> bool {
        match self {
            FieldType::Any => match value {
                Value::Ext(ext_type, _) => any_takes_extension(*ext_type),
                _ => true,
            },
            FieldType::Unsigned => matches!(value, Value::Uint(_)),
            FieldType::Integer => matches!(value, Value::Uint(_) | Value::Int(_)),
            FieldType::Number => is_number(value),
            // Tarantool 2.6 .. 2.11.0 accept only MP_DOUBLE here.
            FieldType::Double => matches!(value, Value::F64(_)),
            FieldType::String => matches!(value, Value::Str(_)),
            FieldType::Boolean => matches!(value, Value::Bool(_)),
            FieldType::Varbinary => matches!(value, Value::Bin(_)),
            FieldType::Scalar => {
                is_number(value)
                    || matches!(value, Value::Bool(_) | Value::Str(_) | Value::Bin(_))
                    || matches!(value, Value::Ext(EXT_UUID | EXT_DATETIME, _))
            }
            FieldType::Uuid => matches!(value, Value::Ext(EXT_UUID, bytes) if bytes.len() == 16),
            FieldType::Decimal => matches!(value, Value::Ext(EXT_DECIMAL, _)),
            FieldType::Datetime => matches!(value, Value::Ext(EXT_DATETIME, _)),
            FieldType::Array => matches!(value, Value::Array(_)),
            FieldType::Map => matches!(value, Value::Map(_)),
        }
    }
}

/// Whether an `any` field takes an extension of this type. Tarantool refuses a negative type
/// in every field, and MP_UNKNOWN_EXTENSION (0) in `any` (`field_ext_type[FIELD_TYPE_ANY]`
/// lacks its bit; `field_mp_type_is_compatible`, field_def.h). It tests the type's bit as
/// `1U << ext_type`, which x86 takes modulo 32: 2.6 refuses 32, 64 and 96 as well, and so
/// does tarn. (The same shift makes 2.6 take type 33 as a decimal and 34 as a uuid in typed
/// fields, which then crash its comparators when indexed: tarn refuses those; see
/// docs/tarantool-reference.md.)
fn any_takes_extension(ext_type: i8) -> bool {
    ext_type >= 0 && ext_type % 32 != 0
}

fn is_number(value: &Value<'_>) -> bool {
    matches!(
        value,
        Value::Uint(_) | Value::Int(_) | Value::F32(_) | Value::F64(_) | Value::Ext(EXT_DECIMAL, _)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_aliases_parse() {
        for ty in FieldType::ALL {
            assert_eq!(FieldType::from_name(ty.name()), Some(ty));
        }
        assert_eq!(FieldType::from_name("STR"), Some(FieldType::String));
        assert_eq!(FieldType::from_name("uint"), Some(FieldType::Unsigned));
        assert_eq!(FieldType::from_name("text"), None);
    }

    #[test]
    fn unsigned_rejects_int_format_even_when_positive() {
        assert!(FieldType::Unsigned.accepts(&Value::Uint(5)));
        assert!(!FieldType::Unsigned.accepts(&Value::Int(5)));
        assert!(FieldType::Integer.accepts(&Value::Int(-5)));
        assert!(!FieldType::Integer.accepts(&Value::F64(1.0)));
        assert!(FieldType::Number.accepts(&Value::F32(1.0)));
        assert!(!FieldType::Double.accepts(&Value::Uint(1)));
    }

    #[test]
    fn scalar_takes_plain_values_but_not_containers() {
        assert!(FieldType::Scalar.accepts(&Value::Bool(true)));
        assert!(FieldType::Scalar.accepts(&Value::Bin(b"x")));
        assert!(FieldType::Scalar.accepts(&Value::Ext(EXT_UUID, &[0; 16])));
        assert!(!FieldType::Scalar.accepts(&Value::Array(1)));
        assert!(!FieldType::Scalar.accepts(&Value::Map(0)));
        assert!(!FieldType::Scalar.accepts(&Value::Ext(9, &[])));
    }

    /// What Tarantool 2.6 answered for each extension type in an `any` field (23 or ok).
    #[test]
    fn any_refuses_negative_and_unknown_extension_types() {
        for refused in [0i8, -1, -128, 32, 64, 96] {
            assert!(
                !FieldType::Any.accepts(&Value::Ext(refused, &[1, 2])),
                "{refused}"
            );
        }
        for taken in [1i8, 2, 5, 31, 33, 127] {
            assert!(
                FieldType::Any.accepts(&Value::Ext(taken, &[1, 2])),
                "{taken}"
            );
        }
        assert!(FieldType::Any.accepts(&Value::Array(1)));
    }
}
