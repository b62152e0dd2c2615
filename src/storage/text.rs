//! Tarantool's text form of MessagePack values, as printed inside error messages
//! (`[1, "a", 30]`, `{"k": true}`).
//!
//! Only for messages: never parsed back, never on a hot path.

use crate::msgpack::{self, Value};
use std::fmt::Write;

/// Renders one value (containers included). Malformed input is rendered up to the fault.
pub fn msgpack_to_text(bytes: &[u8]) -> String {
    let mut out = String::new();
    let mut cursor = bytes;
    write_value(&mut cursor, &mut out, 0);
    out
}

const MAX_DEPTH: usize = 32;

fn write_value(cursor: &mut &[u8], out: &mut String, depth: usize) {
    let Ok(value) = msgpack::read_value(cursor) else {
        return;
    };
    match value {
        Value::Nil => out.push_str("null"),
        Value::Bool(b) => out.push_str(if b { "true" } else { "false" }),
        Value::Uint(u) => {
            let _ = write!(out, "{u}");
        }
        Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Value::F32(f) => write_float(out, f as f64),
        Value::F64(f) => write_float(out, f),
        Value::Str(bytes) | Value::Bin(bytes) => write_string(out, bytes),
        Value::Ext(ty, bytes) => {
            let _ = write!(out, "(extension: type {ty}, len {})", bytes.len());
        }
        Value::Array(count) => {
            out.push('[');
            for i in 0..count {
                if i > 0 {
                    out.push_str(", ");
                }
                if depth >= MAX_DEPTH {
                    out.push_str("...");
                    let _ = msgpack::skip_value(cursor);
                } else {
                    write_value(cursor, out, depth + 1);
                }
            }
            out.push(']');
        }
        Value::Map(count) => {
            out.push('{');
            for i in 0..count {
                if i > 0 {
                    out.push_str(", ");
                }
                if depth >= MAX_DEPTH {
                    out.push_str("...");
                    let _ = msgpack::skip_value(cursor);
                    let _ = msgpack::skip_value(cursor);
                } else {
                    write_value(cursor, out, depth + 1);
                    out.push_str(": ");
                    write_value(cursor, out, depth + 1);
                }
            }
            out.push('}');
        }
    }
}

fn write_float(out: &mut String, value: f64) {
    if value.is_finite() && value == value.trunc() && value.abs() < 1e15 {
        let _ = write!(out, "{value:.0}");
    } else {
        let _ = write!(out, "{value}");
    }
}

fn write_string(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for ch in String::from_utf8_lossy(bytes).chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_tarantool() {
        // [1, "a", 30, {"k": true}, null, -5, 1.5]
        let bytes = [
            0x97, 0x01, 0xa1, b'a', 0x1e, 0x81, 0xa1, b'k', 0xc3, 0xc0, 0xfb, 0xcb, 0x3f, 0xf8, 0,
            0, 0, 0, 0, 0,
        ];
        assert_eq!(
            msgpack_to_text(&bytes),
            "[1, \"a\", 30, {\"k\": true}, null, -5, 1.5]"
        );
    }
}
