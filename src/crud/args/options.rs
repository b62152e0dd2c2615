//! The options argument of a crud call (the table after the positional arguments): which
//! options each function declares, the `checks` type of each, and the few crud acts on
//! ([`Opts`]). Knows nothing of the positional arguments beyond the options' position.

use super::{bad_argument, positional_name, ArgError, Func};
use crate::crud::mp;

const WRITE_OPTIONS: &[&str] = &[
    "timeout",
    "vshard_router",
    "bucket_id",
    "fields",
    "noreturn",
    "fetch_latest_metadata",
    "add_space_schema_hash",
];
const WRITE_OBJECT_OPTIONS: &[&str] = &[
    "timeout",
    "vshard_router",
    "bucket_id",
    "fields",
    "noreturn",
    "fetch_latest_metadata",
    "add_space_schema_hash",
    "skip_nullability_check_on_flatten",
];
const MANY_OPTIONS: &[&str] = &[
    "timeout",
    "vshard_router",
    "fields",
    "noreturn",
    "fetch_latest_metadata",
    "add_space_schema_hash",
    "stop_on_error",
    "rollback_on_error",
];
const MANY_OBJECT_OPTIONS: &[&str] = &[
    "timeout",
    "vshard_router",
    "fields",
    "noreturn",
    "fetch_latest_metadata",
    "add_space_schema_hash",
    "stop_on_error",
    "rollback_on_error",
    "skip_nullability_check_on_flatten",
];
const KEY_WRITE_OPTIONS: &[&str] = &[
    "timeout",
    "vshard_router",
    "bucket_id",
    "fields",
    "noreturn",
    "fetch_latest_metadata",
];
const GET_OPTIONS: &[&str] = &[
    "timeout",
    "vshard_router",
    "bucket_id",
    "fields",
    "mode",
    "prefer_replica",
    "balance",
    "request_timeout",
    "fetch_latest_metadata",
];
const SELECT_OPTIONS: &[&str] = &[
    "timeout",
    "vshard_router",
    "first",
    "after",
    "batch_size",
    "bucket_id",
    "force_map_call",
    "fields",
    "fullscan",
    "mode",
    "prefer_replica",
    "balance",
    "yield_every",
    "request_timeout",
    "fetch_latest_metadata",
    "readview",
    "readview_info",
];
const PAIRS_OPTIONS: &[&str] = &[
    "timeout",
    "vshard_router",
    "first",
    "after",
    "batch_size",
    "bucket_id",
    "force_map_call",
    "fields",
    "fullscan",
    "mode",
    "prefer_replica",
    "balance",
    "yield_every",
    "request_timeout",
    "fetch_latest_metadata",
    "use_tomap",
];
const COUNT_OPTIONS: &[&str] = &[
    "timeout",
    "vshard_router",
    "bucket_id",
    "force_map_call",
    "fullscan",
    "mode",
    "prefer_replica",
    "balance",
    "yield_every",
    "request_timeout",
];
const LEN_OPTIONS: &[&str] = &[
    "timeout",
    "request_timeout",
    "vshard_router",
    "mode",
    "prefer_replica",
    "balance",
];
const BORDER_OPTIONS: &[&str] = &[
    "timeout",
    "request_timeout",
    "vshard_router",
    "fields",
    "mode",
    "fetch_latest_metadata",
];
const TIMEOUT_OPTIONS: &[&str] = &["timeout", "vshard_router"];

impl Func {
    fn options(self) -> &'static [&'static str] {
        use Func::*;
        match self {
            Insert | Replace | Upsert => WRITE_OPTIONS,
            InsertObject | ReplaceObject | UpsertObject => WRITE_OBJECT_OPTIONS,
            InsertMany | ReplaceMany | UpsertMany => MANY_OPTIONS,
            InsertObjectMany | ReplaceObjectMany | UpsertObjectMany => MANY_OBJECT_OPTIONS,
            Update | Delete => KEY_WRITE_OPTIONS,
            Get => GET_OPTIONS,
            Select => SELECT_OPTIONS,
            Pairs => PAIRS_OPTIONS,
            Count => COUNT_OPTIONS,
            Len => LEN_OPTIONS,
            Min | Max => BORDER_OPTIONS,
            Truncate | StorageInfo | Stats => TIMEOUT_OPTIONS,
        }
    }
}

/// The `checks` type of an option of `func`, as printed in its message.
fn option_type(func: Func, name: &str) -> &'static str {
    match name {
        "timeout" | "request_timeout" | "first" | "batch_size" | "yield_every" => "?number",
        // Any value passes `checks`; crud validates it later (a BucketIDError).
        "bucket_id" => "?",
        "after" => "?table|cdata",
        "fields" | "readview_info" => "?table",
        // crud.select declares its own checker: "read" or "write".
        "mode" if func == Func::Select => "?vshard_call_mode",
        "mode" => "?string",
        "vshard_router" => "?string|table",
        _ => "?boolean",
    }
}

fn option_accepts(expected: &str, raw: &[u8]) -> bool {
    let lua_type = mp::lua_type(raw);
    match expected {
        _ if lua_type == "nil" => true,
        "?" => true,
        "?vshard_call_mode" => matches!(mp::as_str(raw), Some("read" | "write")),
        _ => expected
            .trim_start_matches('?')
            .split('|')
            .any(|ty| ty == lua_type),
    }
}

/// The options crud acts on; the others are accepted and ignored (timeouts, replica
/// choice, batch sizes: irrelevant to a single process).
#[derive(Debug, Clone, Default)]
pub struct Opts<'a> {
    /// Raw msgpack of `opts.bucket_id`.
    pub bucket_id: Option<&'a [u8]>,
    /// Raw msgpack array of field names.
    pub fields: Option<&'a [u8]>,
    pub noreturn: bool,
    pub first: Option<i64>,
    /// Raw msgpack array: the tuple to continue after.
    pub after: Option<&'a [u8]>,
    pub stop_on_error: bool,
    pub rollback_on_error: bool,
    pub skip_nullability_check_on_flatten: bool,
    pub yield_every: Option<f64>,
    pub batch_size: Option<f64>,
    /// `opts.mode` when it is a string (crud routes by it: anything but "read" and
    /// "write" is a CallError).
    pub mode: Option<&'a str>,
}

/// `checks`' name of a table key: `.key` for a string, `[n]` for a number, `[?]` else.
fn key_name(key: &[u8]) -> String {
    if let Some(name) = mp::as_str(key) {
        return format!(".{name}");
    }
    if mp::lua_type(key) == "number" {
        let mut text = Vec::new();
        crate::crud::bucket::lua_tostring(key, &mut text);
        return format!("[{}]", String::from_utf8_lossy(&text));
    }
    "[?]".to_string()
}

pub(super) fn parse_opts(func: Func, raw: &[u8], position: usize) -> Result<Opts<'_>, ArgError> {
    let mut opts = Opts::default();
    // No options (as the connector sends most calls): nil, `{}`, or an empty table sent
    // as an array.
    if matches!(raw, [0xc0 | 0x80 | 0x90, ..]) || mp::is_nil(raw) {
        return Ok(opts);
    }
    let (_, name) = func.checked_as();
    let pairs: Vec<(&[u8], &[u8])> = match mp::map_pairs(raw) {
        Some(pairs) => pairs.collect(),
        None => match mp::array_items(raw) {
            // A Lua table with keys 1, 2, ...: none of them is an option.
            Some(_) => {
                return Err(ArgError::Checks(format!(
                    "unexpected argument opts[1] to {name}"
                )))
            }
            None => {
                return Err(bad_argument(
                    func,
                    &positional_name(func, position),
                    "?table",
                    mp::lua_type(raw),
                ))
            }
        },
    };
    // `checks` looks at the declared options first, then at the keys it does not know.
    for &(key, value) in &pairs {
        let Some(option) = mp::as_str(key).filter(|key| func.options().contains(key)) else {
            continue;
        };
        let expected = option_type(func, option);
        if !option_accepts(expected, value) {
            return Err(bad_argument(
                func,
                &format!("opts.{option}"),
                expected,
                mp::lua_type(value),
            ));
        }
    }
    for (key, value) in pairs {
        let Some(option) = mp::as_str(key).filter(|key| func.options().contains(key)) else {
            return Err(ArgError::Checks(format!(
                "unexpected argument opts{} to {name}",
                key_name(key)
            )));
        };
        if mp::is_nil(value) {
            continue;
        }
        let flag = matches!(mp::value(value), crate::msgpack::Value::Bool(true));
        match option {
            "bucket_id" => opts.bucket_id = Some(value),
            "fields" => opts.fields = Some(value),
            "after" => opts.after = Some(value),
            "noreturn" => opts.noreturn = flag,
            "stop_on_error" => opts.stop_on_error = flag,
            "rollback_on_error" => opts.rollback_on_error = flag,
            "skip_nullability_check_on_flatten" => opts.skip_nullability_check_on_flatten = flag,
            "first" => opts.first = Some(number(value).round() as i64),
            "yield_every" => opts.yield_every = Some(number(value)),
            "batch_size" => opts.batch_size = Some(number(value)),
            "mode" => opts.mode = mp::as_str(value),
            _ => {}
        }
    }
    Ok(opts)
}

/// A Lua number's value (the caller checked the type).
pub fn number(raw: &[u8]) -> f64 {
    use crate::msgpack::Value;
    match mp::value(raw) {
        Value::Uint(u) => u as f64,
        Value::Int(i) => i as f64,
        Value::F32(f) => f as f64,
        Value::F64(f) => f,
        _ => 0.0,
    }
}
