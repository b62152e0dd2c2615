//! The crud functions, their positional arguments and their options, validated as crud
//! 1.7.5 validates them with the `checks` module ([`parse`]); the caller places a refusal
//! as crud does: raised (IPROTO error 32, LuajitError) after the position of the `checks`
//! call ([`Func::checks_site`]), or, for crud.select, returned inside a SelectError.
//!
//! Message texts follow `checks` 3.4: `bad argument #2 to nil (table expected, got number)`,
//! `bad argument opts.timeout to nil (?number expected, got string)`,
//! `unexpected argument opts.badopt to nil` (the function name is `nil` because crud's
//! functions are reached through a tail call; min/max's checked function is `func`).
//! `docs/crud-reference.md` cites each.

mod options;

use super::mp;
use crate::protocol::ErrorCode;
use options::parse_opts;
pub use options::{number, Opts};

/// An error raised out of the call (not returned): the whole IPROTO reply is an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raised {
    pub code: ErrorCode,
    pub message: String,
}

impl Raised {
    /// A Lua error (32, LuajitError).
    pub fn lua(message: impl Into<String>) -> Raised {
        Raised {
            code: ErrorCode::ER_PROC_LUA,
            message: message.into(),
        }
    }
}

/// Every function of the crud API tarn answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Func {
    Insert,
    InsertObject,
    InsertMany,
    InsertObjectMany,
    Replace,
    ReplaceObject,
    ReplaceMany,
    ReplaceObjectMany,
    Upsert,
    UpsertObject,
    UpsertMany,
    UpsertObjectMany,
    Update,
    Delete,
    Get,
    Select,
    Pairs,
    Count,
    Len,
    Min,
    Max,
    Truncate,
    StorageInfo,
    Stats,
}

/// What a positional argument must be, in `checks` notation.
#[derive(Debug, Clone, Copy)]
enum ArgType {
    String,
    Table,
    OptionalTable,
    Any,
    OptionalStringOrNumber,
}

impl ArgType {
    fn name(self) -> &'static str {
        match self {
            ArgType::String => "string",
            ArgType::Table => "table",
            ArgType::OptionalTable => "?table",
            ArgType::Any => "?",
            ArgType::OptionalStringOrNumber => "?string|number",
        }
    }

    fn accepts(self, lua_type: &str) -> bool {
        match self {
            ArgType::String => lua_type == "string",
            ArgType::Table => lua_type == "table",
            ArgType::OptionalTable => matches!(lua_type, "table" | "nil"),
            ArgType::Any => true,
            ArgType::OptionalStringOrNumber => matches!(lua_type, "string" | "number" | "nil"),
        }
    }
}

impl Func {
    /// Every function, in declaration order (so `func as usize` is its place here, which
    /// the bytes between cores rely on): for tests that go through them all.
    pub const ALL: [Func; 24] = [
        Func::Insert,
        Func::InsertObject,
        Func::InsertMany,
        Func::InsertObjectMany,
        Func::Replace,
        Func::ReplaceObject,
        Func::ReplaceMany,
        Func::ReplaceObjectMany,
        Func::Upsert,
        Func::UpsertObject,
        Func::UpsertMany,
        Func::UpsertObjectMany,
        Func::Update,
        Func::Delete,
        Func::Get,
        Func::Select,
        Func::Pairs,
        Func::Count,
        Func::Len,
        Func::Min,
        Func::Max,
        Func::Truncate,
        Func::StorageInfo,
        Func::Stats,
    ];

    /// The function a CALL names (`crud.insert` …); `None` for anything else.
    pub fn from_name(function_name: &str) -> Option<Func> {
        Func::from_name_bytes(function_name.as_bytes())
    }

    /// [`Func::from_name`] of a name's bytes, which need not be UTF-8 checked first: every
    /// name that matches is ASCII.
    pub fn from_name_bytes(function_name: &[u8]) -> Option<Func> {
        use Func::*;
        Some(match function_name.strip_prefix(b"crud.")? {
            b"insert" => Insert,
            b"insert_object" => InsertObject,
            b"insert_many" => InsertMany,
            b"insert_object_many" => InsertObjectMany,
            b"replace" => Replace,
            b"replace_object" => ReplaceObject,
            b"replace_many" => ReplaceMany,
            b"replace_object_many" => ReplaceObjectMany,
            b"upsert" => Upsert,
            b"upsert_object" => UpsertObject,
            b"upsert_many" => UpsertMany,
            b"upsert_object_many" => UpsertObjectMany,
            b"update" => Update,
            b"delete" => Delete,
            b"get" => Get,
            b"select" => Select,
            b"pairs" => Pairs,
            b"count" => Count,
            b"len" => Len,
            b"min" => Min,
            b"max" => Max,
            b"truncate" => Truncate,
            b"storage_info" => StorageInfo,
            b"stats" => Stats,
            _ => return None,
        })
    }

    /// The name a CALL gives this function (`crud.insert` …).
    pub fn name(self) -> &'static str {
        use Func::*;
        match self {
            Insert => "crud.insert",
            InsertObject => "crud.insert_object",
            InsertMany => "crud.insert_many",
            InsertObjectMany => "crud.insert_object_many",
            Replace => "crud.replace",
            ReplaceObject => "crud.replace_object",
            ReplaceMany => "crud.replace_many",
            ReplaceObjectMany => "crud.replace_object_many",
            Upsert => "crud.upsert",
            UpsertObject => "crud.upsert_object",
            UpsertMany => "crud.upsert_many",
            UpsertObjectMany => "crud.upsert_object_many",
            Update => "crud.update",
            Delete => "crud.delete",
            Get => "crud.get",
            Select => "crud.select",
            Pairs => "crud.pairs",
            Count => "crud.count",
            Len => "crud.len",
            Min => "crud.min",
            Max => "crud.max",
            Truncate => "crud.truncate",
            StorageInfo => "crud.storage_info",
            Stats => "crud.stats",
        }
    }

    /// The class name of the errors this function returns (`InsertError` …).
    pub fn error_class(self) -> &'static str {
        use Func::*;
        match self {
            Insert | InsertObject => "InsertError",
            InsertMany | InsertObjectMany => "InsertManyError",
            Replace | ReplaceObject => "ReplaceError",
            ReplaceMany | ReplaceObjectMany => "ReplaceManyError",
            Upsert | UpsertObject => "UpsertError",
            UpsertMany | UpsertObjectMany => "UpsertManyError",
            Update => "UpdateError",
            Delete => "DeleteError",
            Get => "GetError",
            Select | Pairs => "SelectError",
            Count => "CountError",
            Len => "LenError",
            Min | Max => "BorderError",
            Truncate => "TruncateError",
            StorageInfo | Stats => "StorageInfoError",
        }
    }

    /// The verb of `Failed to <verb>: <box message>`.
    pub fn verb(self) -> &'static str {
        use Func::*;
        match self {
            Insert | InsertObject | InsertMany | InsertObjectMany => "insert",
            Replace | ReplaceObject | ReplaceMany | ReplaceObjectMany => "replace",
            Upsert | UpsertObject | UpsertMany | UpsertObjectMany => "upsert",
            Update => "update",
            Delete => "delete",
            Get => "get",
            Select | Pairs => "select",
            Count => "count",
            Len => "len",
            Min => "get min",
            Max => "get max",
            Truncate => "truncate",
            StorageInfo | Stats => "get storage info",
        }
    }

    /// The crud source file errors name, for the informational `file` key.
    pub fn source_file(self) -> &'static str {
        use Func::*;
        match self {
            Insert | InsertObject => "crud/insert.lua",
            InsertMany | InsertObjectMany => "crud/insert_many.lua",
            Replace | ReplaceObject => "crud/replace.lua",
            ReplaceMany | ReplaceObjectMany => "crud/replace_many.lua",
            Upsert | UpsertObject => "crud/upsert.lua",
            UpsertMany | UpsertObjectMany => "crud/upsert_many.lua",
            Update => "crud/update.lua",
            Delete => "crud/delete.lua",
            Get => "crud/get.lua",
            Select | Pairs => "crud/select.lua",
            Count => "crud/count.lua",
            Len => "crud/len.lua",
            Min | Max => "crud/borders.lua",
            Truncate => "crud/truncate.lua",
            StorageInfo | Stats => "crud/storage_info.lua",
        }
    }

    pub fn is_object(self) -> bool {
        use Func::*;
        matches!(
            self,
            InsertObject
                | InsertObjectMany
                | ReplaceObject
                | ReplaceObjectMany
                | UpsertObject
                | UpsertObjectMany
        )
    }

    pub fn is_many(self) -> bool {
        use Func::*;
        matches!(
            self,
            InsertMany
                | InsertObjectMany
                | ReplaceMany
                | ReplaceObjectMany
                | UpsertMany
                | UpsertObjectMany
        )
    }

    /// Positional argument types (after which come the options, always last).
    fn positional(self) -> &'static [ArgType] {
        use ArgType as A;
        use Func::*;
        match self {
            Insert | InsertObject | Replace | ReplaceObject | InsertMany | InsertObjectMany
            | ReplaceMany | ReplaceObjectMany | UpsertMany | UpsertObjectMany => {
                &[A::String, A::Table]
            }
            Upsert | UpsertObject => &[A::String, A::Table, A::Table],
            Update => &[A::String, A::Any, A::Table],
            Delete | Get => &[A::String, A::Any],
            Select | Pairs | Count => &[A::String, A::OptionalTable],
            Len | Truncate => &[A::String],
            Min | Max => &[A::String, A::OptionalStringOrNumber],
            StorageInfo | Stats => &[],
        }
    }
}

/// The most positional arguments a crud function takes (upsert's and update's three).
const MAX_POSITIONAL: usize = 3;

/// A call's arguments, split and checked: `positional[i]` is argument `#i+1` (nil when
/// omitted), `opts` the options argument. Borrowed from the packet, and held in place
/// rather than in a Vec: a point call allocates nothing to read its arguments.
#[derive(Debug, Clone)]
pub struct Args<'a> {
    pub positional: [&'a [u8]; MAX_POSITIONAL],
    pub opts: Opts<'a>,
}

impl<'a> Args<'a> {
    pub fn get(&self, position: usize) -> &'a [u8] {
        self.positional.get(position).copied().unwrap_or(mp::NIL)
    }
}

/// Why the arguments were refused. crud checks them with `checks`, whose message the
/// caller places: raised after the position of the `checks` call for most functions,
/// returned inside a SelectError by crud.select (see `mod.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgError {
    /// A `checks` message, without its position.
    Checks(String),
    /// crud.select indexed `opts` before checking it: a number or `true` is raised as Lua's
    /// "attempt to index" error; this is the value's Lua type.
    SelectOpts(&'static str),
}

impl Func {
    /// Where the function's `checks` call is: the position of its raised messages.
    pub fn checks_site(self) -> super::sites::Site {
        use super::sites::{self as s, site};
        use Func::*;
        match self {
            Insert => site(s::INSERT, 191),
            InsertObject => site(s::INSERT, 230),
            InsertMany => site(s::INSERT_MANY, 277),
            InsertObjectMany => site(s::INSERT_MANY, 321),
            Replace => site(s::REPLACE, 189),
            ReplaceObject => site(s::REPLACE, 228),
            ReplaceMany => site(s::REPLACE_MANY, 277),
            ReplaceObjectMany => site(s::REPLACE_MANY, 321),
            Upsert => site(s::UPSERT, 198),
            UpsertObject => site(s::UPSERT, 241),
            UpsertMany => site(s::UPSERT_MANY, 296),
            UpsertObjectMany => site(s::UPSERT_MANY, 341),
            Update => site(s::UPDATE, 249),
            Delete => site(s::DELETE, 223),
            Get => site(s::GET, 236),
            Select => s::SELECT_CHECKS,
            Pairs => site(s::SELECT, 205),
            Count => site(s::COUNT, 329),
            Len => site(s::LEN, 44),
            Min | Max => site(s::BORDERS, 66),
            Truncate => site(s::TRUNCATE, 48),
            StorageInfo | Stats => site(s::STORAGE_INFO, 39),
        }
    }

    /// How many arguments crud's checked function takes before the caller's first one
    /// (select's and min/max's checked functions take the router, min/max also the border
    /// name), and the name `checks` prints for it (`debug.getinfo`: `func` where
    /// `schema.wrap_func_reload` calls it, `nil` after a tail call).
    fn checked_as(self) -> (usize, &'static str) {
        match self {
            Func::Select => (1, "nil"),
            Func::Min | Func::Max => (2, "func"),
            _ => (0, "nil"),
        }
    }
}

fn bad_argument(func: Func, argument: &str, expected: &str, got: &str) -> ArgError {
    let (_, name) = func.checked_as();
    ArgError::Checks(format!(
        "bad argument {argument} to {name} ({expected} expected, got {got})"
    ))
}

fn positional_name(func: Func, position: usize) -> String {
    format!("#{}", position + func.checked_as().0)
}

/// Splits and checks the arguments of `func` (a msgpack array, the CALL's TUPLE).
pub fn parse<'a>(func: Func, args: &'a [u8]) -> Result<Args<'a>, ArgError> {
    let positional_types = func.positional();
    debug_assert!(positional_types.len() <= MAX_POSITIONAL);
    // The positional arguments, then the options; arguments past those are ignored, but
    // must still be readable (a torn array is rejected as a whole).
    let mut items = [mp::NIL; MAX_POSITIONAL + 1];
    if !split_args(args, &mut items) {
        return Err(bad_argument(func, "#1", "string", "no value"));
    }
    let opts_position = positional_types.len();
    let opts_raw = items[opts_position];
    if func == Func::Select {
        // `opts = opts or {}; opts.vshard_router` runs before `checks`: false is no options,
        // and a string indexes as the string library does.
        match mp::lua_type(opts_raw) {
            "number" => return Err(ArgError::SelectOpts("number")),
            "boolean" if opts_raw == [0xc3] => return Err(ArgError::SelectOpts("boolean")),
            "boolean" => items[opts_position] = mp::NIL,
            _ => {}
        }
    }
    let mut positional = [mp::NIL; MAX_POSITIONAL];
    for (at, expected) in positional_types.iter().enumerate() {
        let raw = items[at];
        let got = mp::lua_type(raw);
        if !expected.accepts(got) {
            return Err(bad_argument(
                func,
                &positional_name(func, at + 1),
                expected.name(),
                got,
            ));
        }
        positional[at] = raw;
    }
    let opts = parse_opts(func, items[opts_position], opts_position + 1)?;
    Ok(Args { positional, opts })
}

/// Fills `items` with the first elements of the array `args` (the rest stay nil); false
/// when `args` is not a whole array.
fn split_args<'a>(args: &'a [u8], items: &mut [&'a [u8]]) -> bool {
    use crate::msgpack::{self, Value};
    let mut cursor = args;
    let Ok(Value::Array(count)) = msgpack::read_value(&mut cursor) else {
        return false;
    };
    for at in 0..count as usize {
        let Some(item) = mp::take(&mut cursor) else {
            return false;
        };
        if let Some(slot) = items.get_mut(at) {
            *slot = item;
        }
    }
    true
}
