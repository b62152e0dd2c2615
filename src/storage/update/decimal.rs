//! Decimal `+`/`-` of update operations, as Tarantool's `decimal.c` computes them.
//!
//! Tarantool keeps decimals in libdecnumber with one context: 38 digits, adjusted exponent
//! at most 37 (so |x| < 10^38), `emin` -1 (so at most 38 digits after the point), rounding
//! half away from zero, no clamping. A result is refused when any condition other than
//! inexact / rounded / underflow / subnormal / clamped was raised (overflow, above all).
//! The `dec` crate binds the same library, so digits, scale and rounding come out
//! identical; this module only sets the context and does the msgpack framing (MP_EXT
//! type 1: the scale as a msgpack int, then packed BCD with the sign in the last nibble).
//!
//! It must not know about fields or ops: it converts, adds and packs numbers.

use dec::{Context, Decimal, Rounding};

/// 13 units of 3 digits: 39, the capacity Tarantool's `decimal_t` has for its 38 digits.
pub(super) type Dec = Decimal<13>;

/// Tarantool's `DECIMAL_MAX_DIGITS`.
const DIGITS_MAX: i32 = 38;

/// Ext header (3) + scale (2) + 20 BCD bytes, with room to spare.
const PACKED_BYTES_MAX: usize = 28;

/// A decimal ready to be written: the whole msgpack ext value.
#[derive(Clone, Copy)]
pub(super) struct Packed {
    bytes: [u8; PACKED_BYTES_MAX],
    len: u8,
}

impl Packed {
    pub(super) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Packed({:02x?})", self.as_bytes())
    }
}

fn context() -> Context<Dec> {
    let mut context = Context::<Dec>::default();
    // Constants within the bounds these setters check; they cannot fail.
    let _ = context.set_precision(DIGITS_MAX as usize);
    let _ = context.set_max_exponent(DIGITS_MAX as isize - 1);
    let _ = context.set_min_exponent(-1);
    context.set_rounding(Rounding::HalfUp);
    context.set_clamp(false);
    context
}

/// `decimal_check_status`: the result, unless a condition other than the harmless ones
/// was raised or it is not finite.
fn checked(context: &Context<Dec>, value: Dec) -> Option<Dec> {
    let status = context.status();
    let harmful = status.conversion_syntax()
        || status.division_by_zero()
        || status.division_impossible()
        || status.division_undefined()
        || status.insufficient_storage()
        || status.invalid_context()
        || status.invalid_operation()
        || status.overflow();
    (!harmful && value.is_finite()).then_some(value)
}

/// `decimal_unpack` of an MP_EXT type 1 payload; `None` where Tarantool refuses it.
pub(super) fn unpack(payload: &[u8]) -> Option<Dec> {
    let mut cursor = payload;
    let scale = match crate::msgpack::read_value(&mut cursor).ok()? {
        crate::msgpack::Value::Uint(n) => i64::try_from(n).ok()?,
        crate::msgpack::Value::Int(n) => n,
        _ => return None,
    };
    if scale > i64::from(DIGITS_MAX) || scale <= -i64::from(DIGITS_MAX) {
        return None;
    }
    // Capacity 39 digits + the sign nibble.
    if cursor.is_empty() || cursor.len() > 20 {
        return None;
    }
    let value = Dec::from_packed_bcd(cursor, scale as i32).ok()?;
    (precision(&value) <= DIGITS_MAX).then_some(value)
}

/// `decimal_precision`.
fn precision(value: &Dec) -> i32 {
    let digits = value.digits() as i32;
    let exponent = value.exponent();
    if exponent <= 0 {
        digits.max(-exponent)
    } else {
        digits + exponent
    }
}

pub(super) fn from_u64(n: u64) -> Dec {
    context().from_u64(n)
}

pub(super) fn from_i64(n: i64) -> Dec {
    context().from_i64(n)
}

/// `decimal_from_double`: the text `printf("%.15g")` makes of it, parsed; `None` for NaN,
/// ±inf and magnitudes of 10^38 and more.
pub(super) fn from_f64(x: f64) -> Option<Dec> {
    if !x.is_finite() {
        return None;
    }
    let text = format_g15(x);
    let mut context = context();
    let value = context.parse(text).ok()?;
    checked(&context, value)
}

/// `%.15g`: 15 significant digits (rounded half to even on the exact binary value, as
/// glibc does and Rust's `{:e}` does), trailing fraction zeros dropped, exponent form
/// below 1e-4 and from 1e15. Only the value's digits and exponent matter to the parser,
/// so the exponent form is written in decNumber's syntax.
fn format_g15(x: f64) -> String {
    let scientific = format!("{x:.14e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    // Digits `%g` keeps: in fixed form the integer part always stays.
    let keep_min = if (-4..15).contains(&exponent) {
        (exponent + 1).max(1) as usize
    } else {
        1
    };
    let trimmed_len = digits.trim_end_matches('0').len().max(keep_min);
    let kept = &digits[..trimmed_len.min(digits.len())];
    let value_exponent = exponent - (kept.len() as i32 - 1);
    format!(
        "{}{}E{}",
        if negative { "-" } else { "" },
        kept,
        value_exponent
    )
}

/// `a + b` or `a - b`; `None` on overflow (Tarantool's 160).
pub(super) fn add(a: &Dec, b: &Dec, subtract: bool) -> Option<Dec> {
    let mut context = context();
    let mut result = *a;
    if subtract {
        context.sub(&mut result, b);
    } else {
        context.add(&mut result, b);
    }
    checked(&context, result)
}

/// `mp_encode_decimal`.
pub(super) fn pack(value: &Dec) -> Packed {
    let (digits, exponent, bits, units) = value.to_raw_parts();
    let negative = bits & 0x80 != 0;
    let mut packed = Packed {
        bytes: [0; PACKED_BYTES_MAX],
        len: 0,
    };
    // decimal_len: the scale's msgpack size + ceil((digits + 1) / 2).
    let digits = digits.clamp(1, 39) as usize;
    let bcd_len = 1 + digits / 2;
    // The scale lies in [-37, 38]: a positive fixint, a negative fixint or an int8, as
    // mp_encode_uint / mp_encode_int choose.
    let scale = -exponent;
    let (scale_buf, scale_len): ([u8; 2], usize) = match scale {
        0..=127 => ([scale as u8, 0], 1),
        -32..=-1 => ([scale as i8 as u8, 0], 1),
        _ => ([0xd0, scale.clamp(-128, -33) as i8 as u8], 2),
    };
    let payload_len = scale_len + bcd_len;
    let mut at = 0;
    let mut push = |byte: u8, packed: &mut Packed| {
        packed.bytes[at] = byte;
        at += 1;
    };
    match payload_len {
        1 => push(0xd4, &mut packed),
        2 => push(0xd5, &mut packed),
        4 => push(0xd6, &mut packed),
        8 => push(0xd7, &mut packed),
        16 => push(0xd8, &mut packed),
        len => {
            push(0xc7, &mut packed);
            push(len as u8, &mut packed);
        }
    }
    push(0x01, &mut packed);
    for &byte in &scale_buf[..scale_len] {
        push(byte, &mut packed);
    }
    // Coefficient digits, most significant first, behind a zero nibble when their count
    // is even; then the sign nibble.
    let digit = |index_from_least: usize| -> u8 {
        let unit = units.get(index_from_least / 3).copied().unwrap_or(0);
        let place = [1u16, 10, 100][index_from_least % 3];
        ((unit / place) % 10) as u8
    };
    let mut nibbles = [0u8; 40];
    let mut count = 0;
    if digits.is_multiple_of(2) {
        nibbles[0] = 0;
        count = 1;
    }
    for index in (0..digits).rev() {
        nibbles[count] = digit(index);
        count += 1;
    }
    nibbles[count] = if negative { 0x0d } else { 0x0c };
    count += 1;
    for pair in nibbles[..count].chunks(2) {
        push((pair[0] << 4) | pair[1], &mut packed);
    }
    packed.len = at as u8;
    packed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(packed: Packed) -> String {
        packed
            .as_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn parse(text: &str) -> Dec {
        context().parse(text).unwrap()
    }

    #[test]
    fn packs_as_tarantool_encodes() {
        assert_eq!(hex(pack(&from_u64(2))), "d501002c");
        assert_eq!(hex(pack(&parse("2.10"))), "c7030102210c");
        assert_eq!(hex(pack(&parse("-1.1"))), "c7030101011d");
        assert_eq!(hex(pack(&parse("0"))), "d501000c");
        assert_eq!(hex(pack(&parse("1E+2"))), "d501fe1c");
        assert_eq!(hex(pack(&parse("1E+33"))), "c70301d0df1c");
    }

    #[test]
    fn unpack_round_trips_and_refuses_what_tarantool_refuses() {
        let value = unpack(&[0x02, 0x21, 0x0c]).unwrap();
        assert_eq!(hex(pack(&value)), "c7030102210c");
        assert!(unpack(&[]).is_none());
        assert!(unpack(&[0x00]).is_none());
        assert!(unpack(&[39, 0x1c]).is_none());
        assert!(unpack(&[0x00, 0xac]).is_none());
        // Any of A-F is a sign nibble, as decPacked reads them.
        assert!(unpack(&[0x00, 0x1a]).is_some());
    }

    #[test]
    fn g15_text_matches_printf() {
        assert_eq!(format_g15(0.1), "1E-1");
        assert_eq!(format_g15(100.0), "100E0");
        assert_eq!(format_g15(1e20), "1E20");
        assert_eq!(format_g15(-0.0), "-0E0");
        assert_eq!(format_g15(1234567890123445.0), "123456789012344E1");
        assert_eq!(format_g15(1.5e-7), "15E-8");
    }

    #[test]
    fn arithmetic_rounds_and_overflows_as_tarantool() {
        let max = parse("99999999999999999999999999999999999999");
        assert!(add(&max, &from_u64(1), false).is_none());
        let almost = parse("9999999999999999999999999999999999999.9");
        let sum = add(&almost, &from_u64(1), false).unwrap();
        assert_eq!(
            hex(pack(&sum)),
            "c7150100010000000000000000000000000000000000001c"
        );
        let tiny = from_f64(5e-324).unwrap();
        let sum = add(&from_u64(1), &tiny, false).unwrap();
        assert_eq!(
            hex(pack(&sum)),
            "c7150125010000000000000000000000000000000000000c"
        );
        assert!(from_f64(1e300).is_none());
        assert!(from_f64(f64::NAN).is_none());
        let zero = add(&from_i64(-1), &from_u64(1), false).unwrap();
        assert_eq!(hex(pack(&zero)), "d501000c");
    }
}
