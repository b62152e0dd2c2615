//! The differential test's msgpack value tree: exact enough to compare two servers' replies
//! (uint and int, float32 and float64, str and bin stay distinct; floats compare by their bits,
//! so a NaN's sign and payload count), an encoder for the requests the generator builds, and a
//! compact text form for reports (`5`, `-5i`, `+5i` for a non-negative int-encoded number,
//! `1.5f32`, `1.5`, `"s"`, `b"\x00"`, `ext1(0c)`).
//!
//! Map equality ignores the order of pairs: no connector can observe it (they decode maps
//! into hash tables), and Tarantool's own order for Lua-built maps is a hash order.
//! Knows nothing of IPROTO.

use std::fmt;
use tarn::msgpack::{self, Value};

#[derive(Clone, Debug)]
pub enum V {
    Nil,
    Bool(bool),
    Uint(u64),
    /// An int-format number (0xd0..=0xd3 or a negative fixint), negative or not.
    Int(i64),
    /// The bits of a float32.
    F32(u32),
    /// The bits of a float64.
    F64(u64),
    Str(Vec<u8>),
    Bin(Vec<u8>),
    Array(Vec<V>),
    Map(Vec<(V, V)>),
    Ext(i8, Vec<u8>),
}

impl V {
    pub fn str(text: &str) -> V {
        V::Str(text.as_bytes().to_vec())
    }

    pub fn f64(value: f64) -> V {
        V::F64(value.to_bits())
    }

    pub fn f32(value: f32) -> V {
        V::F32(value.to_bits())
    }

    /// A signed number as Tarantool's encoder writes it: uint when non-negative.
    pub fn int(value: i64) -> V {
        if value >= 0 {
            V::Uint(value as u64)
        } else {
            V::Int(value)
        }
    }

    pub fn as_uint(&self) -> Option<u64> {
        match self {
            V::Uint(value) => Some(*value),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            V::Str(bytes) => std::str::from_utf8(bytes).ok(),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[V]> {
        match self {
            V::Array(items) => Some(items),
            _ => None,
        }
    }

    /// The value under the uint key `key` of a map.
    pub fn get(&self, key: u64) -> Option<&V> {
        match self {
            V::Map(pairs) => pairs
                .iter()
                .find(|(k, _)| k.as_uint() == Some(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// The value under the string key `key` of a map.
    pub fn get_str(&self, key: &str) -> Option<&V> {
        match self {
            V::Map(pairs) => pairs
                .iter()
                .find(|(k, _)| k.as_str() == Some(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            V::Nil => out.push(0xc0),
            V::Bool(value) => out.push(if *value { 0xc3 } else { 0xc2 }),
            V::Uint(value) => msgpack::write_uint(out, *value),
            V::Int(value) => encode_int(out, *value),
            V::F32(bits) => {
                out.push(0xca);
                out.extend_from_slice(&bits.to_be_bytes());
            }
            V::F64(bits) => {
                out.push(0xcb);
                out.extend_from_slice(&bits.to_be_bytes());
            }
            V::Str(bytes) => msgpack::write_str(out, bytes),
            V::Bin(bytes) => {
                encode_len(out, [0xc4, 0xc5, 0xc6], None, bytes.len());
                out.extend_from_slice(bytes);
            }
            V::Array(items) => {
                msgpack::write_array_len(out, items.len() as u32);
                for item in items {
                    item.encode(out);
                }
            }
            V::Map(pairs) => {
                msgpack::write_map_len(out, pairs.len() as u32);
                for (key, value) in pairs {
                    key.encode(out);
                    value.encode(out);
                }
            }
            V::Ext(kind, bytes) => {
                match bytes.len() {
                    1 => out.push(0xd4),
                    2 => out.push(0xd5),
                    4 => out.push(0xd6),
                    8 => out.push(0xd7),
                    16 => out.push(0xd8),
                    len => encode_len(out, [0xc7, 0xc8, 0xc9], None, len),
                }
                out.push(*kind as u8);
                out.extend_from_slice(bytes);
            }
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// Decodes one whole value from `bytes`, or says why not.
    pub fn decode_all(bytes: &[u8]) -> Result<V, String> {
        let mut rest = bytes;
        let value = V::decode(&mut rest)?;
        if !rest.is_empty() {
            return Err(format!("{} bytes after the value", rest.len()));
        }
        Ok(value)
    }

    pub fn decode(buf: &mut &[u8]) -> Result<V, String> {
        let value = msgpack::read_value(buf).map_err(|error| format!("{error:?}"))?;
        Ok(match value {
            Value::Nil => V::Nil,
            Value::Bool(value) => V::Bool(value),
            Value::Uint(value) => V::Uint(value),
            Value::Int(value) => V::Int(value),
            Value::F32(value) => V::F32(value.to_bits()),
            Value::F64(value) => V::F64(value.to_bits()),
            Value::Str(bytes) => V::Str(bytes.to_vec()),
            Value::Bin(bytes) => V::Bin(bytes.to_vec()),
            Value::Ext(kind, bytes) => V::Ext(kind, bytes.to_vec()),
            Value::Array(count) => V::Array(
                (0..count)
                    .map(|_| V::decode(buf))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Map(count) => V::Map(
                (0..count)
                    .map(|_| Ok((V::decode(buf)?, V::decode(buf)?)))
                    .collect::<Result<_, String>>()?,
            ),
        })
    }

    /// A total order over values, for sorting rows whose order a server may choose (a HASH
    /// index's): by the encoded bytes.
    pub fn sort_key(&self) -> Vec<u8> {
        self.to_bytes()
    }
}

/// An int-format number in its shortest int form (never a uint format, even when >= 0).
fn encode_int(out: &mut Vec<u8>, value: i64) {
    if (-32..0).contains(&value) {
        out.push(value as i8 as u8);
    } else if i8::try_from(value).is_ok() {
        out.extend_from_slice(&[0xd0, value as i8 as u8]);
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

fn encode_len(out: &mut Vec<u8>, markers: [u8; 3], fix: Option<u8>, len: usize) {
    if let (Some(fix), true) = (fix, len < 32) {
        out.push(fix | len as u8);
    } else if len <= u8::MAX as usize {
        out.extend_from_slice(&[markers[0], len as u8]);
    } else if len <= u16::MAX as usize {
        out.push(markers[1]);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(markers[2]);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
}

impl PartialEq for V {
    fn eq(&self, other: &V) -> bool {
        match (self, other) {
            (V::Nil, V::Nil) => true,
            (V::Bool(a), V::Bool(b)) => a == b,
            (V::Uint(a), V::Uint(b)) => a == b,
            (V::Int(a), V::Int(b)) => a == b,
            (V::F32(a), V::F32(b)) => a == b,
            (V::F64(a), V::F64(b)) => a == b,
            (V::Str(a), V::Str(b)) | (V::Bin(a), V::Bin(b)) => a == b,
            (V::Array(a), V::Array(b)) => a == b,
            (V::Map(a), V::Map(b)) => {
                // The same pairs in any order, compared by value, not by encoding.
                a.len() == b.len()
                    && sorted(a)
                        .iter()
                        .zip(sorted(b).iter())
                        .all(|((_, ka, va), (_, kb, vb))| ka == kb && va == vb)
            }
            (V::Ext(ka, a), V::Ext(kb, b)) => ka == kb && a == b,
            _ => false,
        }
    }
}

/// A map's pairs sorted by their keys' bytes.
fn sorted(pairs: &[(V, V)]) -> Vec<(Vec<u8>, &V, &V)> {
    let mut pairs: Vec<(Vec<u8>, &V, &V)> =
        pairs.iter().map(|(k, v)| (k.sort_key(), k, v)).collect();
    pairs.sort_by(|x, y| x.0.cmp(&y.0));
    pairs
}

impl fmt::Display for V {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            V::Nil => write!(f, "nil"),
            V::Bool(value) => write!(f, "{value}"),
            V::Uint(value) => write!(f, "{value}"),
            V::Int(value) if *value >= 0 => write!(f, "+{value}i"),
            V::Int(value) => write!(f, "{value}i"),
            V::F32(bits) => write_float(f, f32::from_bits(*bits) as f64, *bits as u64, "f32"),
            V::F64(bits) => write_float(f, f64::from_bits(*bits), *bits, ""),
            V::Str(bytes) => match std::str::from_utf8(bytes) {
                Ok(text) => write!(f, "{text:?}"),
                Err(_) => write!(f, "str{:?}", bytes),
            },
            V::Bin(bytes) => {
                write!(f, "b\"")?;
                for byte in bytes {
                    write!(f, "\\x{byte:02x}")?;
                }
                write!(f, "\"")
            }
            V::Array(items) => {
                write!(f, "[")?;
                for (at, item) in items.iter().enumerate() {
                    if at > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{item}")?;
                }
                write!(f, "]")
            }
            V::Map(pairs) => {
                write!(f, "{{")?;
                for (at, (key, value)) in pairs.iter().enumerate() {
                    if at > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{key}: {value}")?;
                }
                write!(f, "}}")
            }
            V::Ext(kind, bytes) => {
                write!(f, "ext{kind}(")?;
                for byte in bytes {
                    write!(f, "{byte:02x}")?;
                }
                write!(f, ")")
            }
        }
    }
}

/// A float with a decimal point always, its kind suffix, and a NaN's bits (their sign and
/// payload are what a server may get wrong).
fn write_float(f: &mut fmt::Formatter<'_>, value: f64, bits: u64, suffix: &str) -> fmt::Result {
    if value.is_nan() {
        return write!(f, "nan{suffix}(0x{bits:x})");
    }
    if value.is_infinite() || value.fract() != 0.0 || value.abs() >= 1e16 {
        write!(f, "{value:?}{suffix}")
    } else {
        write!(f, "{value:.1}{suffix}")
    }
}

#[cfg(test)]
mod tests {
    use super::V;

    #[test]
    fn values_round_trip_with_their_kinds() {
        let value = V::Array(vec![
            V::Uint(5),
            V::Int(5),
            V::Int(-1),
            V::Int(i64::MIN),
            V::f32(1.5),
            V::f64(1.5),
            V::str("s"),
            V::Bin(vec![0]),
            V::Ext(1, vec![0x0c]),
            V::Map(vec![(V::str("a"), V::Nil)]),
            V::Bin(vec![7; 300]),
        ]);
        let back = V::decode_all(&value.to_bytes()).expect("decodes");
        assert_eq!(back, value);
        assert_ne!(V::Uint(5), V::Int(5));
        assert_ne!(V::f32(1.5), V::f64(1.5));
        assert_ne!(V::str("a"), V::Bin(b"a".to_vec()));
        assert_ne!(V::f64(f64::NAN), V::f64(-f64::NAN));
        assert_eq!(
            V::Map(vec![(V::Uint(1), V::Nil), (V::Uint(2), V::Bool(true))]),
            V::Map(vec![(V::Uint(2), V::Bool(true)), (V::Uint(1), V::Nil)])
        );
        assert_eq!(
            value.to_string(),
            "[5, +5i, -1i, -9223372036854775808i, 1.5f32, 1.5, \"s\", b\"\\x00\", ext1(0c), \
             {\"a\": nil}, "
                .to_string()
                + &format!("b\"{}\"]", "\\x07".repeat(300))
        );
    }
}
