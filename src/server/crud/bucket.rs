//! crud's `bucket_id` (spec §18.6): `crc32(tostring(pk_1) .. tostring(pk_2) ..) %
//! bucket_count + 1`, where crc32 is Tarantool's `digest.crc32`: CRC-32C (Castagnoli) with
//! the register started at 0xFFFFFFFF and **no** final XOR.
//!
//! The `crc32c` crate computes the standard CRC-32C, which does apply the final XOR, so
//! Tarantool's value is its bitwise complement.

use crate::storage::field_type::EXT_UUID;
use crate::storage::msgpack::Value;

/// Tarantool's `digest.crc32(bytes)`.
pub fn tarantool_crc32(bytes: &[u8]) -> u32 {
    !crc32c::crc32c(bytes)
}

/// The bucket of a primary key given as its parts' raw msgpack values.
pub fn bucket_id_of(pk_parts: &[&[u8]], bucket_count: u32) -> u64 {
    debug_assert!(bucket_count > 0);
    let mut text = Vec::with_capacity(32);
    for part in pk_parts {
        lua_tostring(part, &mut text);
    }
    u64::from(tarantool_crc32(&text) % bucket_count.max(1)) + 1
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
