//! A tiny JSON value and writer for `--json-result` (the crate has no serde_json).
//!
//! Numbers that are not finite and absent values are written as `null`, so an unavailable
//! counter can never appear as 0.

use std::fmt::Write;

#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    pub fn object() -> Json {
        Json::Object(Vec::new())
    }

    /// Adds a member to an object (builder style); panics on a non-object (a bug).
    pub fn with(mut self, key: &str, value: impl Into<Json>) -> Json {
        match &mut self {
            Json::Object(members) => members.push((key.to_string(), value.into())),
            other => panic!("with() on non-object {other:?}"),
        }
        self
    }

    pub fn to_pretty_string(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, 0);
        out.push('\n');
        out
    }

    fn write(&self, out: &mut String, depth: usize) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(i) => write!(out, "{i}").unwrap(),
            Json::Float(f) if f.is_finite() => write!(out, "{f:?}").unwrap(),
            Json::Float(_) => out.push_str("null"),
            Json::Str(s) => write_string(out, s),
            Json::Array(items) if items.iter().all(Json::is_scalar) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write(out, depth + 1);
                }
                out.push(']');
            }
            Json::Array(items) => {
                write_block(out, depth, '[', ']', items.iter().map(|v| (None, v)))
            }
            Json::Object(members) => write_block(
                out,
                depth,
                '{',
                '}',
                members.iter().map(|(k, v)| (Some(k.as_str()), v)),
            ),
        }
    }

    fn is_scalar(&self) -> bool {
        !matches!(self, Json::Array(_) | Json::Object(_))
    }
}

fn write_block<'a>(
    out: &mut String,
    depth: usize,
    open: char,
    close: char,
    items: impl ExactSizeIterator<Item = (Option<&'a str>, &'a Json)>,
) {
    if items.len() == 0 {
        out.push(open);
        out.push(close);
        return;
    }
    out.push(open);
    let count = items.len();
    for (i, (key, value)) in items.enumerate() {
        out.push('\n');
        push_indent(out, depth + 1);
        if let Some(key) = key {
            write_string(out, key);
            out.push_str(": ");
        }
        value.write(out, depth + 1);
        if i + 1 < count {
            out.push(',');
        }
    }
    out.push('\n');
    push_indent(out, depth);
    out.push(close);
}

fn push_indent(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push_str("  ");
    }
}

fn write_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32).unwrap(),
            c => out.push(c),
        }
    }
    out.push('"');
}

impl From<bool> for Json {
    fn from(b: bool) -> Json {
        Json::Bool(b)
    }
}

impl From<f64> for Json {
    fn from(f: f64) -> Json {
        Json::Float(f)
    }
}

impl From<u64> for Json {
    fn from(i: u64) -> Json {
        Json::Int(i.into())
    }
}

impl From<usize> for Json {
    fn from(i: usize) -> Json {
        Json::Int(i as i128)
    }
}

impl From<u32> for Json {
    fn from(i: u32) -> Json {
        Json::Int(i.into())
    }
}

impl From<&str> for Json {
    fn from(s: &str) -> Json {
        Json::Str(s.to_string())
    }
}

impl From<String> for Json {
    fn from(s: String) -> Json {
        Json::Str(s)
    }
}

impl<T: Into<Json>> From<Option<T>> for Json {
    fn from(value: Option<T>) -> Json {
        value.map_or(Json::Null, Into::into)
    }
}

impl<T: Into<Json>> From<Vec<T>> for Json {
    fn from(items: Vec<T>) -> Json {
        Json::Array(items.into_iter().map(Into::into).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_strings() {
        let mut out = String::new();
        write_string(&mut out, "a\"b\\c\nd\u{1}é");
        assert_eq!(out, r#""a\"b\\c\nd\u0001é""#);
    }

    #[test]
    fn unavailable_numbers_are_null() {
        let json = Json::object()
            .with("missing", None::<f64>)
            .with("nan", f64::NAN)
            .with("inf", f64::INFINITY)
            .with("zero", 0.0)
            .with("count", 3u64);
        assert_eq!(
            json.to_pretty_string(),
            "{\n  \"missing\": null,\n  \"nan\": null,\n  \"inf\": null,\n  \"zero\": 0.0,\n  \"count\": 3\n}\n"
        );
    }

    #[test]
    fn nests_arrays_and_objects() {
        let json = Json::object()
            .with("xs", vec![1u64, 2])
            .with("empty", Json::Array(vec![]))
            .with("objs", Json::Array(vec![Json::object().with("a", true)]));
        assert_eq!(
            json.to_pretty_string(),
            "{\n  \"xs\": [1, 2],\n  \"empty\": [],\n  \"objs\": [\n    {\n      \"a\": true\n    }\n  ]\n}\n"
        );
    }
}
