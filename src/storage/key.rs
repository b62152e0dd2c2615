//! Key definitions and the order-preserving byte encoding of keys.
//!
//! A key part names a tuple field, its type, nullability and collation. Keys are encoded so
//! that comparing encodings with `memcmp` gives Tarantool's order for that key definition:
//! numbers of every representation compare mathematically, scalar values order by class
//! (nil < boolean < number < string < varbinary < uuid < datetime), strings bytewise with the
//! shorter first (or in the part's ICU collation), nil first. Every part encoding is self-delimiting, so a key's encoding is a
//! prefix of the encoding of any longer key that starts with the same parts — which is what
//! makes partial-key iteration a plain byte range.
//!
//! Byte layout per part (see `docs/format.md`): an optional nullability byte (0 nil, 1 value)
//! for nullable parts, then
//! * unsigned: 8 bytes big-endian;
//! * integer: 1 sign byte (0 negative, 1 non-negative) + 8 bytes big-endian two's complement;
//! * number, double, decimal: a class byte (NaN, below -2^64, negative, non-negative, from
//!   2^64) then for the finite classes the integer magnitude (8 bytes) and a fraction marker
//!   (0 integral, or 1 + the fraction's f64 bits), bitwise inverted for negative numbers;
//! * string, varbinary: bytes with 0x00 escaped as 0x00 0xFF, terminated by 0x00 0x00; a
//!   string under `unicode` or `unicode_ci` is its ICU sort key ([`collation`]) in place of
//!   its bytes, so that strings the collation calls equal encode equal;
//! * boolean: 1 byte; uuid: its 16 bytes; datetime: biased seconds (8) + nanoseconds (4);
//! * scalar: a class byte, then the class's encoding.
//!
//! Knows nothing of indexes or spaces: it turns field values and search keys into bytes.

use crate::msgpack::{self, Value};
use crate::storage::collation::{self, IcuStrength, SortKeyBuf};
use crate::storage::error::{Result, StorageError};
use crate::storage::field_type::{FieldType, EXT_DATETIME, EXT_DECIMAL, EXT_UUID};
use smallvec::{Array, SmallVec};

/// An encoded key as an index entry holds it. Keys of one or two numeric parts stay
/// inline; the entry stays 40 bytes.
pub type KeyBuf = SmallVec<[u8; 16]>;
/// An encoded key being searched for: lives on the stack for the request, so it can be
/// wide enough for a five-part key without touching the heap.
pub type SearchKeyBuf = SmallVec<[u8; 96]>;

/// How strings of a key part compare: bytewise (`None`, `Binary`), or as Tarantool's ICU
/// collations of the root locale, `Unicode` at tertiary strength and `UnicodeCi` at primary
/// strength (case and accents ignored); see [`collation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Collation {
    #[default]
    None,
    Binary,
    Unicode,
    UnicodeCi,
}

impl Collation {
    pub fn from_name(name: &str) -> Option<Collation> {
        Some(match name {
            "none" | "" => Collation::None,
            "binary" => Collation::Binary,
            "unicode" => Collation::Unicode,
            "unicode_ci" => Collation::UnicodeCi,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyPart {
    /// 0-based tuple field number.
    pub field_no: u32,
    pub field_type: FieldType,
    pub is_nullable: bool,
    pub collation: Collation,
}

impl KeyPart {
    pub fn new(field_no: u32, field_type: FieldType) -> KeyPart {
        KeyPart {
            field_no,
            field_type,
            is_nullable: false,
            collation: Collation::None,
        }
    }

    pub fn nullable(mut self) -> KeyPart {
        self.is_nullable = true;
        self
    }

    /// Whether `value` may stand in this part (nil only if nullable).
    pub fn accepts(&self, value: &Value<'_>) -> bool {
        match value {
            Value::Nil => self.is_nullable,
            // An indexed field holds a whole value; containers are never comparable.
            Value::Array(_) | Value::Map(_) => false,
            _ => self.field_type.accepts(value),
        }
    }

    /// Appends the encoding of `value`, which the caller has checked with `accepts`.
    pub fn encode<A: Array<Item = u8>>(&self, value: &Value<'_>, out: &mut SmallVec<A>) {
        debug_assert!(
            self.accepts(value),
            "{value:?} is not a {:?}",
            self.field_type
        );
        if self.is_nullable {
            if matches!(value, Value::Nil) {
                out.push(0);
                return;
            }
            out.push(1);
        }
        match self.field_type {
            FieldType::Unsigned => match value {
                Value::Uint(u) => out.extend_from_slice(&u.to_be_bytes()),
                _ => unreachable_encoding(value),
            },
            FieldType::Integer => encode_integer(value, out),
            FieldType::Number | FieldType::Double | FieldType::Decimal => encode_number(value, out),
            FieldType::String | FieldType::Varbinary => match value {
                Value::Str(bytes) | Value::Bin(bytes) => encode_bytes(bytes, self.collation, out),
                _ => unreachable_encoding(value),
            },
            FieldType::Boolean => out.push(matches!(value, Value::Bool(true)) as u8),
            FieldType::Uuid | FieldType::Datetime => encode_ext(value, out),
            FieldType::Scalar => encode_scalar(value, self.collation, out),
            FieldType::Any | FieldType::Array | FieldType::Map => unreachable_encoding(value),
        }
    }
}

#[cold]
fn unreachable_encoding(value: &Value<'_>) {
    // `accepts` guards every call; reaching here is a bug in the caller, never bad input.
    debug_assert!(false, "no key encoding for {value:?}");
}

/// The ordered parts of an index key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyDef {
    pub parts: SmallVec<[KeyPart; 4]>,
}

impl KeyDef {
    pub fn new(parts: impl IntoIterator<Item = KeyPart>) -> KeyDef {
        KeyDef {
            parts: parts.into_iter().collect(),
        }
    }

    pub fn part_count(&self) -> u32 {
        self.parts.len() as u32
    }

    /// Encodes a search key (a msgpack array of up to `part_count` values) and returns how
    /// many parts it gave. Errors are Tarantool's: 31 for too many parts, 18 for a part of
    /// the wrong type (part numbers 0-based).
    pub fn encode_search_key<A: Array<Item = u8>>(
        &self,
        key: &[u8],
        out: &mut SmallVec<A>,
    ) -> Result<u32> {
        let mut cursor = key;
        let count = self.read_part_count(&mut cursor)?;
        if count > self.part_count() {
            return Err(self.too_many_parts(count));
        }
        self.encode_parts(cursor, count, true, out)?;
        Ok(count)
    }

    /// How many parts a search key (a msgpack array) has: 31 past this key's part count,
    /// the first check Tarantool's `key_validate` makes of a select's key.
    pub fn search_key_part_count(&self, key: &[u8]) -> Result<u32> {
        let count = self.read_part_count(&mut &key[..])?;
        if count > self.part_count() {
            return Err(self.too_many_parts(count));
        }
        Ok(count)
    }

    /// Encodes the key of an exact match (DELETE, UPDATE, a get) in the order Tarantool's
    /// `exact_key_validate` checks it: exactly `part_count` parts, else 19 whatever the
    /// parts hold; then each part's type, 18, where nil is refused even in a nullable part
    /// (an exact match never looks up nil).
    pub fn encode_exact_key<A: Array<Item = u8>>(
        &self,
        key: &[u8],
        out: &mut SmallVec<A>,
    ) -> Result<()> {
        let mut cursor = key;
        let count = self.read_part_count(&mut cursor)?;
        if count != self.part_count() {
            return Err(StorageError::ExactMatch {
                expected: self.part_count(),
                actual: count,
            });
        }
        self.encode_parts(cursor, count, false, out)
    }

    fn read_part_count(&self, cursor: &mut &[u8]) -> Result<u32> {
        match msgpack::read_value(cursor)? {
            Value::Array(count) => Ok(count),
            _ => Err(StorageError::TupleNotArray),
        }
    }

    fn too_many_parts(&self, count: u32) -> StorageError {
        StorageError::KeyPartCount {
            expected: self.part_count(),
            actual: count,
        }
    }

    /// Encodes the first `count` parts (at most `part_count`) of the values at `cursor`;
    /// nil only where `nil_allowed` and the part is nullable.
    fn encode_parts<A: Array<Item = u8>>(
        &self,
        mut cursor: &[u8],
        count: u32,
        nil_allowed: bool,
        out: &mut SmallVec<A>,
    ) -> Result<()> {
        for (part_no, part) in self.parts.iter().take(count as usize).enumerate() {
            let start = cursor;
            let value = msgpack::read_value(&mut cursor)?;
            let nil_refused = !nil_allowed && matches!(value, Value::Nil);
            if nil_refused || !part.accepts(&value) {
                return Err(StorageError::KeyPartType {
                    part: part_no as u32,
                    expected: part.field_type.name(),
                });
            }
            if matches!(value, Value::Array(_) | Value::Map(_)) {
                cursor = start;
                msgpack::skip_value(&mut cursor)?;
            }
            part.encode(&value, out);
        }
        Ok(())
    }
}

impl KeyDef {
    /// The fields of tuple `data` (msgpack) up to this key's last one, each as its bytes;
    /// fewer where the tuple ends sooner.
    pub fn key_fields<'t>(&self, data: &'t [u8]) -> Result<SmallVec<[&'t [u8]; 8]>> {
        let mut fields = SmallVec::new();
        let Some(last_field) = self.parts.iter().map(|part| part.field_no).max() else {
            return Ok(fields);
        };
        let mut cursor = data;
        let count = match msgpack::read_value(&mut cursor)? {
            Value::Array(count) => count,
            _ => return Err(StorageError::TupleNotArray),
        };
        for _ in 0..count.min(last_field + 1) {
            fields.push(msgpack::take_value(&mut cursor)?);
        }
        Ok(fields)
    }

    /// Encodes this key as taken from a tuple's msgpack bytes, parsing only up to the last
    /// key field. For placement, before a tuple is built; errors mean "not a valid tuple",
    /// which the owner of the request will report precisely.
    pub fn encode_from_tuple_data<A: Array<Item = u8>>(
        &self,
        data: &[u8],
        out: &mut SmallVec<A>,
    ) -> Result<()> {
        let fields = self.key_fields(data)?;
        for part in &self.parts {
            let value = match fields.get(part.field_no as usize) {
                Some(field) => msgpack::read_value(&mut &field[..])?,
                None => Value::Nil,
            };
            if !part.accepts(&value) {
                return Err(StorageError::KeyPartType {
                    part: part.field_no,
                    expected: part.field_type.name(),
                });
            }
            part.encode(&value, out);
        }
        Ok(())
    }
}

fn encode_integer<A: Array<Item = u8>>(value: &Value<'_>, out: &mut SmallVec<A>) {
    match *value {
        Value::Int(i) if i < 0 => {
            out.push(0);
            out.extend_from_slice(&(i as u64).to_be_bytes());
        }
        Value::Int(i) => {
            out.push(1);
            out.extend_from_slice(&(i as u64).to_be_bytes());
        }
        Value::Uint(u) => {
            out.push(1);
            out.extend_from_slice(&u.to_be_bytes());
        }
        _ => unreachable_encoding(value),
    }
}

const NUMBER_NAN: u8 = 0x01;
const NUMBER_BELOW_NEG_2_64: u8 = 0x02;
const NUMBER_NEGATIVE: u8 = 0x03;
const NUMBER_NON_NEGATIVE: u8 = 0x04;
const NUMBER_FROM_2_64: u8 = 0x05;
const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;

fn encode_number<A: Array<Item = u8>>(value: &Value<'_>, out: &mut SmallVec<A>) {
    match *value {
        Value::Uint(u) => encode_magnitude(false, u, 0.0, out),
        Value::Int(i) => encode_magnitude(i < 0, i.unsigned_abs(), 0.0, out),
        Value::F32(f) => encode_f64(f as f64, out),
        Value::F64(f) => encode_f64(f, out),
        Value::Ext(EXT_DECIMAL, payload) => encode_decimal(payload, out),
        _ => unreachable_encoding(value),
    }
}

fn sortable_f64_bits(x: f64) -> [u8; 8] {
    let bits = x.to_bits();
    let ordered = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    ordered.to_be_bytes()
}

fn encode_f64<A: Array<Item = u8>>(x: f64, out: &mut SmallVec<A>) {
    if x.is_nan() {
        out.push(NUMBER_NAN);
    } else if x <= -TWO_POW_64 {
        out.push(NUMBER_BELOW_NEG_2_64);
        out.extend_from_slice(&sortable_f64_bits(x));
    } else if x >= TWO_POW_64 {
        out.push(NUMBER_FROM_2_64);
        out.extend_from_slice(&sortable_f64_bits(x));
    } else {
        let magnitude = x.abs();
        let integral = magnitude.trunc();
        // Exact: the fraction of a double below 2^64 is itself a double.
        let fraction = magnitude - integral;
        encode_magnitude(x < 0.0 && x != 0.0, integral as u64, fraction, out);
    }
}

/// Encodes a finite number given as sign, integer magnitude and fraction in [0, 1).
fn encode_magnitude<A: Array<Item = u8>>(
    negative: bool,
    integral: u64,
    fraction: f64,
    out: &mut SmallVec<A>,
) {
    debug_assert!((0.0..1.0).contains(&fraction));
    let negative = negative && (integral != 0 || fraction != 0.0);
    out.push(if negative {
        NUMBER_NEGATIVE
    } else {
        NUMBER_NON_NEGATIVE
    });
    let start = out.len();
    out.extend_from_slice(&integral.to_be_bytes());
    if fraction == 0.0 {
        out.push(0);
    } else {
        out.push(1);
        out.extend_from_slice(&fraction.to_bits().to_be_bytes());
    }
    if negative {
        // A larger magnitude is a smaller number. The fraction marker keeps the inverted
        // encoding prefix-free: 0x00 (integral) inverts to 0xFF, above any fraction's 0xFE.
        for byte in &mut out[start..] {
            *byte = !*byte;
        }
    }
}

/// Decimal (ext 1): scale as a msgpack int, then packed BCD with the sign in the last nibble.
/// Exact for up to 38 digits with an integer part below 2^64; beyond that the value is
/// ordered by its nearest double.
fn encode_decimal<A: Array<Item = u8>>(payload: &[u8], out: &mut SmallVec<A>) {
    let Some((negative, digits, scale)) = decode_decimal(payload) else {
        // Not a decimal Tarantool would produce; order it as zero rather than fail an index.
        encode_magnitude(false, 0, 0.0, out);
        return;
    };
    let pow = |n: u32| 10u128.checked_pow(n);
    let split = if scale >= 0 {
        pow(scale as u32).map(|div| (digits / div, digits % div, div))
    } else {
        pow((-scale) as u32)
            .and_then(|mul| digits.checked_mul(mul))
            .map(|whole| (whole, 0, 1))
    };
    match split {
        Some((integral, remainder, divisor)) if integral <= u64::MAX as u128 => {
            let fraction = remainder as f64 / divisor as f64;
            // Rounding can reach 1.0 for fractions a hair below it; keep the class invariant.
            let fraction = if fraction >= 1.0 {
                f64::from_bits(1.0f64.to_bits() - 1)
            } else {
                fraction
            };
            encode_magnitude(negative, integral as u64, fraction, out)
        }
        _ => {
            let magnitude = digits as f64 * 10f64.powi(-scale);
            encode_f64(if negative { -magnitude } else { magnitude }, out)
        }
    }
}

fn decode_decimal(payload: &[u8]) -> Option<(bool, u128, i32)> {
    let mut cursor = payload;
    let scale = match msgpack::read_value(&mut cursor).ok()? {
        Value::Uint(u) => i32::try_from(u).ok()?,
        Value::Int(i) => i32::try_from(i).ok()?,
        _ => return None,
    };
    let (&last, body) = cursor.split_last()?;
    let negative = matches!(last & 0x0f, 0x0b | 0x0d);
    let mut digits: u128 = 0;
    let nibbles = body
        .iter()
        .flat_map(|byte| [byte >> 4, byte & 0x0f])
        .chain(std::iter::once(last >> 4));
    for nibble in nibbles {
        if nibble > 9 {
            return None;
        }
        digits = digits.checked_mul(10)?.checked_add(nibble as u128)?;
    }
    Some((negative, digits, scale))
}

fn encode_bytes<A: Array<Item = u8>>(bytes: &[u8], collation: Collation, out: &mut SmallVec<A>) {
    let strength = match collation {
        Collation::None | Collation::Binary => return encode_escaped(bytes, out),
        Collation::Unicode => IcuStrength::Tertiary,
        Collation::UnicodeCi => IcuStrength::Primary,
    };
    let mut sort_key = SortKeyBuf::new();
    collation::write_sort_key(strength, bytes, &mut sort_key);
    encode_escaped(&sort_key, out);
}

/// `bytes` with 0x00 escaped as 0x00 0xFF, then the terminator 0x00 0x00.
fn encode_escaped<A: Array<Item = u8>>(bytes: &[u8], out: &mut SmallVec<A>) {
    // Runs without a zero byte are copied whole: keys are built for every write and
    // every bulk-loaded tuple, and most strings hold no zero at all.
    let mut runs = bytes.split(|&byte| byte == 0);
    if let Some(first) = runs.next() {
        out.extend_from_slice(first);
    }
    for run in runs {
        out.extend_from_slice(&[0, 0xff]);
        out.extend_from_slice(run);
    }
    out.extend_from_slice(&[0, 0]);
}

fn encode_ext<A: Array<Item = u8>>(value: &Value<'_>, out: &mut SmallVec<A>) {
    match *value {
        Value::Ext(EXT_UUID, bytes) => out.extend_from_slice(bytes),
        Value::Ext(EXT_DATETIME, bytes) => {
            let mut seconds = [0u8; 8];
            let mut nanoseconds = [0u8; 4];
            seconds.copy_from_slice(bytes.get(..8).unwrap_or(&[0; 8]));
            if let Some(nsec) = bytes.get(8..12) {
                nanoseconds.copy_from_slice(nsec);
            }
            let seconds = i64::from_le_bytes(seconds) as u64 ^ (1 << 63);
            out.extend_from_slice(&seconds.to_be_bytes());
            out.extend_from_slice(&i32::from_le_bytes(nanoseconds).to_be_bytes());
        }
        _ => unreachable_encoding(value),
    }
}

const SCALAR_BOOLEAN: u8 = 0x01;
const SCALAR_NUMBER: u8 = 0x02;
const SCALAR_STRING: u8 = 0x03;
const SCALAR_VARBINARY: u8 = 0x04;
const SCALAR_UUID: u8 = 0x05;
const SCALAR_DATETIME: u8 = 0x06;

fn encode_scalar<A: Array<Item = u8>>(
    value: &Value<'_>,
    collation: Collation,
    out: &mut SmallVec<A>,
) {
    match value {
        Value::Bool(b) => out.extend_from_slice(&[SCALAR_BOOLEAN, *b as u8]),
        Value::Uint(_) | Value::Int(_) | Value::F32(_) | Value::F64(_) => {
            out.push(SCALAR_NUMBER);
            encode_number(value, out);
        }
        Value::Ext(EXT_DECIMAL, _) => {
            out.push(SCALAR_NUMBER);
            encode_number(value, out);
        }
        Value::Str(bytes) => {
            out.push(SCALAR_STRING);
            encode_bytes(bytes, collation, out);
        }
        Value::Bin(bytes) => {
            out.push(SCALAR_VARBINARY);
            encode_bytes(bytes, Collation::Binary, out);
        }
        Value::Ext(EXT_UUID, _) => {
            out.push(SCALAR_UUID);
            encode_ext(value, out);
        }
        Value::Ext(EXT_DATETIME, _) => {
            out.push(SCALAR_DATETIME);
            encode_ext(value, out);
        }
        _ => unreachable_encoding(value),
    }
}

/// The smallest byte string greater than every string that starts with `prefix`, or `None`
/// if there is none (the prefix is all 0xFF). Turns "starts with" into an exclusive bound.
pub fn prefix_successor<A: Array<Item = u8>>(prefix: &[u8], out: &mut SmallVec<A>) -> bool {
    let Some(last_incrementable) = prefix.iter().rposition(|&byte| byte != 0xff) else {
        return false;
    };
    out.clear();
    out.extend_from_slice(&prefix[..=last_incrementable]);
    out[last_incrementable] += 1;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode_one(part: KeyPart, msgpack_value: &[u8]) -> KeyBuf {
        let mut cursor = msgpack_value;
        let value = msgpack::read_value(&mut cursor).unwrap();
        assert!(part.accepts(&value), "{value:?}");
        let mut out = KeyBuf::new();
        part.encode(&value, &mut out);
        out
    }

    fn mp(write: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = Vec::new();
        write(&mut out);
        out
    }

    #[test]
    fn scalar_order_matches_tarantool() {
        // The order Tarantool shows for a scalar index.
        let values: Vec<Vec<u8>> = vec![
            vec![0xc2],
            vec![0xc3],
            mp(|o| msgpack::write_int(o, i64::MIN)),
            mp(|o| msgpack::write_int(o, -1)),
            mp(|o| msgpack::write_uint(o, 1)),
            mp(|o| msgpack::write_f64(o, 1.5)),
            mp(|o| msgpack::write_uint(o, u64::MAX)),
            mp(|o| msgpack::write_str(o, b"B")),
            mp(|o| msgpack::write_str(o, b"a")),
            vec![0xc4, 3, b'b', b'i', b'n'],
        ];
        let part = KeyPart::new(0, FieldType::Scalar);
        let encoded: Vec<KeyBuf> = values.iter().map(|v| encode_one(part, v)).collect();
        for pair in encoded.windows(2) {
            assert!(pair[0] < pair[1], "{:?} !< {:?}", pair[0], pair[1]);
        }
    }

    #[test]
    fn numbers_compare_mathematically_across_representations() {
        let part = KeyPart::new(0, FieldType::Number);
        let int_one = encode_one(part, &mp(|o| msgpack::write_uint(o, 1)));
        let int_format_one = encode_one(part, &[0xd0, 0x01]);
        let double_one = encode_one(part, &mp(|o| msgpack::write_f64(o, 1.0)));
        let float_one = encode_one(part, &mp(|o| msgpack::write_f32(o, 1.0)));
        assert_eq!(int_one, double_one);
        assert_eq!(int_one, int_format_one);
        assert_eq!(int_one, float_one);
        let ordered = [
            mp(|o| msgpack::write_f64(o, f64::NAN)),
            mp(|o| msgpack::write_f64(o, f64::NEG_INFINITY)),
            mp(|o| msgpack::write_f64(o, -1e30)),
            mp(|o| msgpack::write_int(o, i64::MIN)),
            mp(|o| msgpack::write_f64(o, -2.5)),
            mp(|o| msgpack::write_int(o, -2)),
            mp(|o| msgpack::write_f64(o, -1e-300)),
            mp(|o| msgpack::write_f64(o, 0.0)),
            mp(|o| msgpack::write_f64(o, 1e-300)),
            mp(|o| msgpack::write_f64(o, 0.5)),
            mp(|o| msgpack::write_uint(o, (1 << 53) + 1)),
            mp(|o| msgpack::write_f64(o, (1u64 << 53) as f64 + 2.0)),
            mp(|o| msgpack::write_uint(o, u64::MAX)),
            mp(|o| msgpack::write_f64(o, 1e30)),
            mp(|o| msgpack::write_f64(o, f64::INFINITY)),
        ];
        let encoded: Vec<KeyBuf> = ordered.iter().map(|v| encode_one(part, v)).collect();
        for pair in encoded.windows(2) {
            assert!(pair[0] < pair[1], "{:?} !< {:?}", pair[0], pair[1]);
        }
        let negative_zero = encode_one(part, &mp(|o| msgpack::write_f64(o, -0.0)));
        assert_eq!(negative_zero, encode_one(part, &[0x00]));
    }

    #[test]
    fn decimals_order_with_other_numbers() {
        let part = KeyPart::new(0, FieldType::Number);
        // -12.34, 12.345, 100 as Tarantool encodes them.
        let minus_12_34 = encode_one(part, &[0xd6, 0x01, 0x02, 0x01, 0x23, 0x4d]);
        let plus_12_345 = encode_one(part, &[0xd6, 0x01, 0x03, 0x12, 0x34, 0x5c]);
        let hundred = encode_one(part, &[0xc7, 0x03, 0x01, 0x00, 0x10, 0x0c]);
        let twelve = encode_one(part, &[0x0c]);
        assert!(minus_12_34 < twelve && twelve < plus_12_345 && plus_12_345 < hundred);
        assert_eq!(hundred, encode_one(part, &[100]));
    }

    #[test]
    fn strings_order_bytewise_shorter_first_and_stay_prefix_free() {
        let part = KeyPart::new(0, FieldType::String);
        let a = encode_one(part, &[0xa1, b'a']);
        let a_nul = encode_one(part, &[0xa2, b'a', 0]);
        let a_one = encode_one(part, &[0xa2, b'a', 1]);
        let upper_b = encode_one(part, &[0xa1, b'B']);
        assert!(upper_b < a && a < a_nul && a_nul < a_one);
        let ci = KeyPart {
            collation: Collation::UnicodeCi,
            ..part
        };
        assert_eq!(encode_one(ci, &[0xa1, b'A']), encode_one(ci, &[0xa1, b'a']));
    }

    #[test]
    fn collated_strings_follow_icu_in_string_and_scalar_parts() {
        let str_of = |text: &str| mp(|o| msgpack::write_str(o, text.as_bytes()));
        for field_type in [FieldType::String, FieldType::Scalar] {
            let unicode = KeyPart {
                collation: Collation::Unicode,
                ..KeyPart::new(0, field_type)
            };
            let ci = KeyPart {
                collation: Collation::UnicodeCi,
                ..unicode
            };
            // Tertiary: case after accents after letters; primary: only letters count.
            let a = encode_one(unicode, &str_of("a"));
            let upper_a = encode_one(unicode, &str_of("A"));
            let a_umlaut = encode_one(unicode, &str_of("ä"));
            let upper_b = encode_one(unicode, &str_of("B"));
            assert!(
                a < upper_a && upper_a < a_umlaut && a_umlaut < upper_b,
                "{field_type:?}"
            );
            assert_eq!(encode_one(ci, &str_of("ä")), encode_one(ci, &str_of("A")));
            assert_eq!(encode_one(ci, &str_of("ß")), encode_one(ci, &str_of("SS")));
            assert!(encode_one(ci, &str_of("A")) < encode_one(ci, &str_of("b")));
            // Ill-formed UTF-8 is U+FFFD per maximal subpart, as ICU reads it.
            assert_eq!(encode_one(ci, &[0xa1, 0xff]), encode_one(ci, &[0xa1, 0xc3]));
            // The encoding stays prefix-free: a part after the string cannot leak into it.
            let ab = encode_one(ci, &str_of("ab"));
            assert!(!ab.starts_with(&encode_one(ci, &str_of("a"))));
        }
        // A collation changes strings only: numbers and varbinary keep their scalar order.
        let ci = KeyPart {
            collation: Collation::UnicodeCi,
            ..KeyPart::new(0, FieldType::Scalar)
        };
        let number = encode_one(ci, &[0x05]);
        let string = encode_one(ci, &[0xa1, b'A']);
        let bin = encode_one(ci, &[0xc4, 1, b'a']);
        assert!(number < string && string < bin);
    }

    #[test]
    fn nil_sorts_first_in_nullable_parts() {
        let part = KeyPart::new(0, FieldType::Unsigned).nullable();
        assert!(encode_one(part, &[0xc0]) < encode_one(part, &[0x00]));
        assert!(!KeyPart::new(0, FieldType::Unsigned).accepts(&Value::Nil));
    }

    #[test]
    fn integers_order_across_sign() {
        let part = KeyPart::new(0, FieldType::Integer);
        let minus_two = encode_one(part, &[0xfe]);
        let minus_one = encode_one(part, &[0xff]);
        let zero = encode_one(part, &[0x00]);
        let big = encode_one(part, &mp(|o| msgpack::write_uint(o, u64::MAX)));
        assert!(minus_two < minus_one && minus_one < zero && zero < big);
        assert_eq!(encode_one(part, &[0xd0, 0x05]), encode_one(part, &[0x05]));
    }

    #[test]
    fn search_key_errors_are_tarantools() {
        let def = KeyDef::new([
            KeyPart::new(0, FieldType::Unsigned),
            KeyPart::new(1, FieldType::String),
        ]);
        let mut out = KeyBuf::new();
        assert_eq!(
            def.encode_search_key(&[0x93, 1, 0xa1, b'a', 2], &mut out),
            Err(StorageError::KeyPartCount {
                expected: 2,
                actual: 3
            })
        );
        assert_eq!(
            def.encode_search_key(&[0x92, 1, 2], &mut out)
                .unwrap_err()
                .to_string(),
            "Supplied key type of part 1 does not match index part type: expected string"
        );
        out.clear();
        assert_eq!(def.encode_search_key(&[0x91, 7], &mut out), Ok(1));
        assert_eq!(&out[..], &7u64.to_be_bytes());
    }

    #[test]
    fn prefix_successor_bounds_every_extension() {
        let mut out = KeyBuf::new();
        assert!(prefix_successor(&[1, 0xff, 0xff], &mut out));
        assert_eq!(&out[..], &[2]);
        assert!(!prefix_successor(&[0xff], &mut out));
        assert!(!prefix_successor(&[], &mut out));
    }

    #[test]
    fn a_non_nullable_unsigned_part_encodes_to_its_big_endian_bytes() {
        // Placement (server::dispatch) hashes these 8 bytes directly for the usual primary
        // key; they must be what the general encoder writes, or a key would change shards.
        let key_def = KeyDef::new([KeyPart::new(0, FieldType::Unsigned)]);
        for id in [
            0u64,
            1,
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
            crate::msgpack::write_uint(&mut key, id);
            let mut encoded = SearchKeyBuf::new();
            assert_eq!(key_def.encode_search_key(&key, &mut encoded), Ok(1));
            assert_eq!(&encoded[..], &id.to_be_bytes()[..]);
            let mut tuple = vec![0x92];
            crate::msgpack::write_uint(&mut tuple, id);
            crate::msgpack::write_str(&mut tuple, b"x");
            let mut from_tuple = SearchKeyBuf::new();
            key_def
                .encode_from_tuple_data(&tuple, &mut from_tuple)
                .expect("valid tuple");
            assert_eq!(&from_tuple[..], &id.to_be_bytes()[..]);
        }
    }
}
