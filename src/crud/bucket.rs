//! crud's `bucket_id` (spec §18.6): `crc32(tostring(pk_1) .. tostring(pk_2) ..) %
//! bucket_count + 1`, where crc32 is Tarantool's `digest.crc32`: CRC-32C (Castagnoli) with
//! the register started at 0xFFFFFFFF and **no** final XOR.
//!
//! The `crc32c` crate computes the standard CRC-32C, which does apply the final XOR, so
//! Tarantool's value is its bitwise complement.

use crate::msgpack::Value;
use crate::placement::checksum::crc32c_append;
use crate::storage::field_type::EXT_UUID;

/// Tarantool's `digest.crc32(bytes)`.
pub fn tarantool_crc32(bytes: &[u8]) -> u32 {
    !crc32c::crc32c(bytes)
}

/// The bucket of a primary key given as its parts' raw msgpack values.
pub fn bucket_id_of(pk_parts: &[&[u8]], bucket_count: u32) -> u64 {
    bucket_id_of_parts(pk_parts.iter().copied(), bucket_count)
}

/// [`bucket_id_of`] over the parts as they come. The checksum is fed each part's text in
/// turn instead of the concatenated text: integers and strings (nearly every key) are
/// never formatted into a heap buffer.
pub fn bucket_id_of_parts<'a>(
    pk_parts: impl IntoIterator<Item = &'a [u8]>,
    bucket_count: u32,
) -> u64 {
    debug_assert!(bucket_count > 0);
    // crc32c_append continues the standard CRC-32C, whose start is 0 (its register is
    // pre-inverted inside); the final complement is Tarantool's missing final XOR.
    let mut crc = 0u32;
    for part in pk_parts {
        crc = append_lua_tostring(crc, part);
    }
    u64::from(!crc % bucket_count.max(1)) + 1
}

/// Continues `crc` over Lua's `tostring` of a value, as [`lua_tostring`] writes it.
#[inline]
fn append_lua_tostring(crc: u32, raw: &[u8]) -> u32 {
    const EXACT_DOUBLE_MAX: u64 = 1 << 53;
    let mut digits = [0u8; DECIMAL_MAX];
    // Unsigned keys, nearly every key, before anything is decoded.
    if let Some(u) = super::mp::uint(raw).filter(|&u| u <= EXACT_DOUBLE_MAX) {
        return crc32c_append(crc, decimal(u, false, &mut digits));
    }
    append_other(crc, raw)
}

/// [`append_lua_tostring`] of anything but an unsigned integer marker.
#[inline(never)]
fn append_other(crc: u32, raw: &[u8]) -> u32 {
    const EXACT_DOUBLE_MAX: u64 = 1 << 53;
    let mut digits = [0u8; DECIMAL_MAX];
    match super::mp::value(raw) {
        Value::Uint(u) if u <= EXACT_DOUBLE_MAX => {
            crc32c_append(crc, decimal(u, false, &mut digits))
        }
        Value::Int(i) if i.unsigned_abs() <= EXACT_DOUBLE_MAX => {
            crc32c_append(crc, decimal(i.unsigned_abs(), i < 0, &mut digits))
        }
        Value::Str(bytes) | Value::Bin(bytes) => crc32c_append(crc, bytes),
        _ => {
            let mut text = Vec::new();
            lua_tostring(raw, &mut text);
            crc32c_append(crc, &text)
        }
    }
}

/// The longest decimal text [`decimal`] writes: `u64::MAX`'s 20 digits and a sign.
const DECIMAL_MAX: usize = 21;

/// "00" to "99", so [`decimal`] writes two digits per division.
const DIGIT_PAIRS: [u8; 200] = {
    let mut pairs = [0u8; 200];
    let mut n = 0;
    while n < 100 {
        pairs[2 * n] = b'0' + (n / 10) as u8;
        pairs[2 * n + 1] = b'0' + (n % 10) as u8;
        n += 1;
    }
    pairs
};

/// The decimal text of `magnitude` (with a minus sign when `negative`), at the end of
/// `buffer`.
#[inline(always)]
fn decimal(mut magnitude: u64, negative: bool, buffer: &mut [u8; DECIMAL_MAX]) -> &[u8] {
    let mut start = buffer.len();
    while magnitude >= 100 {
        let pair = (magnitude % 100) as usize;
        magnitude /= 100;
        start -= 2;
        buffer[start..start + 2].copy_from_slice(&DIGIT_PAIRS[2 * pair..2 * pair + 2]);
    }
    if magnitude >= 10 {
        let pair = magnitude as usize;
        start -= 2;
        buffer[start..start + 2].copy_from_slice(&DIGIT_PAIRS[2 * pair..2 * pair + 2]);
    } else {
        start -= 1;
        buffer[start] = b'0' + magnitude as u8;
    }
    if negative {
        start -= 1;
        buffer[start] = b'-';
    }
    &buffer[start..]
}

/// Appends Lua's `tostring` of a decoded msgpack value: decimal integers (64-bit ones
/// beyond a double's exact range are cdata and print with `ULL`/`LL`), `%.14g` numbers,
/// strings as they are, `true`/`false`, uuids in their text form.
pub fn lua_tostring(raw: &[u8], out: &mut Vec<u8>) {
    use std::io::Write;
    const EXACT_DOUBLE_MAX: u64 = 1 << 53;
    let _ = match super::mp::value(raw) {
        Value::Nil => write!(out, "nil"),
        Value::Bool(b) => write!(out, "{b}"),
        Value::Uint(u) if u > EXACT_DOUBLE_MAX => write!(out, "{u}ULL"),
        Value::Uint(u) => write!(out, "{u}"),
        Value::Int(i) if i.unsigned_abs() > EXACT_DOUBLE_MAX => write!(out, "{i}LL"),
        Value::Int(i) => write!(out, "{i}"),
        Value::F32(f) => write!(out, "{}", format_g14(f as f64)),
        Value::F64(f) => write!(out, "{}", format_g14(f)),
        Value::Str(bytes) | Value::Bin(bytes) => out.write_all(bytes),
        Value::Ext(EXT_UUID, bytes) if bytes.len() == 16 => match uuid::Uuid::from_slice(bytes) {
            Ok(uuid) => write!(out, "{uuid}"),
            Err(_) => Ok(()),
        },
        _ => write!(out, "{}", crate::storage::text::msgpack_to_text(raw)),
    };
}

/// C's `%.14g`, as LuaJIT's `tostring` prints numbers.
fn format_g14(value: f64) -> String {
    if value.is_nan() {
        return "nan".into();
    }
    if value.is_infinite() {
        return if value > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    if value == 0.0 {
        return if value.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let exponent = value.abs().log10().floor() as i32;
    let scientific = format!("{value:.13e}");
    // Rounding to 14 digits may carry into the next power of ten.
    let (mantissa, exp) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exp: i32 = exp.parse().unwrap_or(exponent);
    if !(-4..14).contains(&exp) {
        let mantissa = trim_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    let decimals = (13 - exp).max(0) as usize;
    trim_zeros(&format!("{value:.decimals$}")).to_string()
}

fn trim_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The part-by-part checksum equals the one over the concatenated text.
    #[test]
    fn bucket_id_matches_the_concatenated_text() {
        use crate::msgpack::{write_f64, write_int, write_str, write_uint};
        let mut values: Vec<Vec<u8>> = Vec::new();
        for u in [
            0,
            7,
            127,
            128,
            255,
            65_535,
            1 << 32,
            1 << 53,
            (1 << 53) + 1,
            u64::MAX,
        ] {
            let mut raw = Vec::new();
            write_uint(&mut raw, u);
            values.push(raw);
        }
        for i in [
            -1,
            -32,
            -33,
            -129,
            i64::from(i32::MIN),
            -(1 << 53),
            -(1 << 53) - 1,
            i64::MIN,
        ] {
            let mut raw = Vec::new();
            write_int(&mut raw, i);
            values.push(raw);
        }
        for text in ["", "a", "customer-42", "ключ"] {
            let mut raw = Vec::new();
            write_str(&mut raw, text.as_bytes());
            values.push(raw);
        }
        for f in [1.5, -0.0, 1e20] {
            let mut raw = Vec::new();
            write_f64(&mut raw, f);
            values.push(raw);
        }
        values.push(vec![0xc0]);
        values.push(vec![0xc3]);
        let concatenated = |parts: &[&[u8]]| {
            let mut text = Vec::new();
            for part in parts {
                lua_tostring(part, &mut text);
            }
            u64::from(tarantool_crc32(&text) % 3000) + 1
        };
        for first in &values {
            assert_eq!(bucket_id_of(&[first], 3000), concatenated(&[first]));
            for second in &values {
                let parts: [&[u8]; 2] = [first, second];
                assert_eq!(bucket_id_of(&parts, 3000), concatenated(&parts));
            }
        }
    }

    #[test]
    fn decimal_matches_format() {
        let mut values = vec![0, 9, 10, 99, 100, 101, 999, 1000, u64::MAX, u64::MAX - 1];
        values.extend((0..64).map(|shift| 1u64 << shift));
        values.extend((0..64).map(|shift| (1u64 << shift) - 1));
        values.extend((1..20).map(|power| 10u64.pow(power)));
        values.extend((1..20).map(|power| 10u64.pow(power) - 1));
        for value in values {
            let mut buffer = [0u8; DECIMAL_MAX];
            assert_eq!(
                decimal(value, false, &mut buffer),
                value.to_string().as_bytes()
            );
            assert_eq!(
                decimal(value, true, &mut buffer),
                format!("-{value}").as_bytes()
            );
        }
    }

    #[test]
    fn g14_matches_lua_tostring() {
        assert_eq!(format_g14(1.5), "1.5");
        assert_eq!(format_g14(10.0), "10");
        assert_eq!(format_g14(0.1), "0.1");
        assert_eq!(format_g14(1e20), "1e+20");
        assert_eq!(format_g14(1e-5), "1e-05");
        assert_eq!(format_g14(123456789012346.0), "1.2345678901235e+14");
        assert_eq!(format_g14(-2.25), "-2.25");
    }
}
