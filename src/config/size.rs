//! Byte sizes as users write them: `"1GiB"`, `"16MiB"`, `"512KiB"`, `"1000"`, `"1000B"`, or a
//! bare TOML integer (bytes).
//!
//! Owns the grammar of a size and nothing else; it does not know which setting a size belongs
//! to or what limits apply to it (the caller checks ranges and names the key).
//!
//! Grammar: a whole decimal number (`_` allowed between digits), an optional single space, and an
//! optional unit, case-insensitive: `B` (1), `KiB` (2^10), `MiB` (2^20), `GiB` (2^30),
//! `TiB` (2^40). Decimal units (`kB`, `MB`, `GB`, `TB`) are refused on purpose: half of the
//! people who write `2GB` mean 2^31 and half mean 2·10^9, and a memory limit is not the place to
//! guess. Fractions (`1.5GiB`) are refused too; write `1536MiB`.

/// Why a size string was refused. The caller adds the key path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SizeError {
    #[error("a size must not be empty")]
    Empty,
    #[error("{0:?} does not start with a whole number of bytes (e.g. \"1000\", \"16MiB\")")]
    NotANumber(String),
    #[error("{0:?} has a fraction; write a whole number in a smaller unit (e.g. \"1536MiB\")")]
    Fraction(String),
    #[error(
        "{text:?} uses the decimal unit {unit:?}, which is ambiguous; write {number}{binary} \
         for {number}·2^{shift} bytes, or the exact number of bytes"
    )]
    AmbiguousUnit {
        text: String,
        unit: String,
        number: u64,
        binary: &'static str,
        shift: u32,
    },
    #[error("{text:?} has an unknown unit {unit:?}; use B, KiB, MiB, GiB or TiB")]
    UnknownUnit { text: String, unit: String },
    #[error("{0:?} does not fit in 64 bits")]
    Overflow(String),
}

/// Binary units, lower-cased, with their power of two.
const BINARY_UNITS: [(&str, u32); 5] =
    [("b", 0), ("kib", 10), ("mib", 20), ("gib", 30), ("tib", 40)];

/// Decimal units that are refused, lower-cased, with the binary unit suggested instead.
const DECIMAL_UNITS: [(&str, &str, u32); 4] = [
    ("kb", "KiB", 10),
    ("mb", "MiB", 20),
    ("gb", "GiB", 30),
    ("tb", "TiB", 40),
];

/// Parses a size string into bytes. See the module documentation for the grammar.
pub fn parse_size_bytes(text: &str) -> Result<u64, SizeError> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(SizeError::Empty);
    }
    let digits_end = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '_'))
        .unwrap_or(trimmed.len());
    let (digits, rest) = trimmed.split_at(digits_end);
    let number = parse_number(digits, text)?;
    if rest.starts_with(['.', ',']) {
        return Err(SizeError::Fraction(text.to_owned()));
    }
    let unit = rest.strip_prefix(' ').unwrap_or(rest);
    let shift = unit_shift(unit, number, text)?;
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| SizeError::Overflow(text.to_owned()))
}

/// Parses the digits of a size; `_` may separate digits but not start or end the number.
fn parse_number(digits: &str, text: &str) -> Result<u64, SizeError> {
    let well_formed = !digits.is_empty()
        && !digits.starts_with('_')
        && !digits.ends_with('_')
        && !digits.contains("__");
    if !well_formed {
        return Err(SizeError::NotANumber(text.to_owned()));
    }
    let mut number: u64 = 0;
    for digit in digits.bytes().filter(|byte| *byte != b'_') {
        number = number
            .checked_mul(10)
            .and_then(|value| value.checked_add(u64::from(digit - b'0')))
            .ok_or_else(|| SizeError::Overflow(text.to_owned()))?;
    }
    Ok(number)
}

/// The power of two a unit stands for; the empty unit means bytes.
fn unit_shift(unit: &str, number: u64, text: &str) -> Result<u32, SizeError> {
    if unit.is_empty() {
        return Ok(0);
    }
    let lower = unit.to_ascii_lowercase();
    if let Some((_, shift)) = BINARY_UNITS.iter().find(|(name, _)| *name == lower) {
        return Ok(*shift);
    }
    if let Some((_, binary, shift)) = DECIMAL_UNITS.iter().find(|(name, _, _)| *name == lower) {
        return Err(SizeError::AmbiguousUnit {
            text: text.to_owned(),
            unit: unit.to_owned(),
            number,
            binary,
            shift: *shift,
        });
    }
    Err(SizeError::UnknownUnit {
        text: text.to_owned(),
        unit: unit.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_units_scale_by_powers_of_two() {
        assert_eq!(parse_size_bytes("1000"), Ok(1000));
        assert_eq!(parse_size_bytes("1000B"), Ok(1000));
        assert_eq!(parse_size_bytes("512KiB"), Ok(512 * 1024));
        assert_eq!(parse_size_bytes("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size_bytes("2TiB"), Ok(2 << 40));
        assert_eq!(parse_size_bytes("0"), Ok(0));
    }

    #[test]
    fn units_are_case_insensitive_and_may_follow_one_space() {
        assert_eq!(parse_size_bytes("1gib"), Ok(1 << 30));
        assert_eq!(parse_size_bytes("16 MiB"), Ok(16 << 20));
        assert_eq!(parse_size_bytes(" 4KIB "), Ok(4096));
        assert_eq!(parse_size_bytes("1_000_000"), Ok(1_000_000));
    }

    #[test]
    fn decimal_units_are_refused_with_a_suggestion() {
        let error = parse_size_bytes("2GB").unwrap_err();
        assert_eq!(
            error.to_string(),
            "\"2GB\" uses the decimal unit \"GB\", which is ambiguous; write 2GiB for 2·2^30 \
             bytes, or the exact number of bytes"
        );
        assert!(matches!(
            parse_size_bytes("5mb"),
            Err(SizeError::AmbiguousUnit { .. })
        ));
    }

    #[test]
    fn malformed_sizes_are_refused() {
        assert_eq!(parse_size_bytes(""), Err(SizeError::Empty));
        assert_eq!(parse_size_bytes("  "), Err(SizeError::Empty));
        assert_eq!(
            parse_size_bytes("GiB"),
            Err(SizeError::NotANumber("GiB".to_owned()))
        );
        assert_eq!(
            parse_size_bytes("-1"),
            Err(SizeError::NotANumber("-1".to_owned()))
        );
        assert_eq!(
            parse_size_bytes("_1"),
            Err(SizeError::NotANumber("_1".to_owned()))
        );
        assert_eq!(
            parse_size_bytes("1.5GiB"),
            Err(SizeError::Fraction("1.5GiB".to_owned()))
        );
        assert_eq!(
            parse_size_bytes("16 mebibytes").unwrap_err().to_string(),
            "\"16 mebibytes\" has an unknown unit \"mebibytes\"; use B, KiB, MiB, GiB or TiB"
        );
        assert_eq!(
            parse_size_bytes("16  MiB"),
            Err(SizeError::UnknownUnit {
                text: "16  MiB".to_owned(),
                unit: " MiB".to_owned()
            })
        );
    }

    #[test]
    fn overflow_is_refused() {
        assert_eq!(
            parse_size_bytes("18446744073709551616"),
            Err(SizeError::Overflow("18446744073709551616".to_owned()))
        );
        assert_eq!(
            parse_size_bytes("16777216TiB"),
            Err(SizeError::Overflow("16777216TiB".to_owned()))
        );
        assert_eq!(parse_size_bytes("16777215TiB"), Ok(16_777_215 << 40));
    }
}
