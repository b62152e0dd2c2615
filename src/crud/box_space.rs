//! `box.space`'s data methods as a client calls them over CALL: `box.space.kv:len()`,
//! `box.space.kv:select(key, opts)`, `box.space.kv.index.primary:min(key)`,
//! `box.space.kv:insert(tuple)` and the rest of (n) in `docs/tarantool-reference.md`. They
//! share crud's seam (plan here, run on the shards, finish on the accepting core), so they
//! live beside it.
//!
//! The function name is resolved against the schema (a name Tarantool's Lua would not find
//! answers 33, as there); the arguments are read as Tarantool 2.6's Lua reads them, its
//! conversions and errors included; and the call is planned as what it amounts to: the
//! select that a get, select, min or max is ([`Plan::BoxSelect`], which the server answers
//! as the IPROTO SELECT it builds from it, routed and merged as any), the IPROTO write that
//! an insert, replace, update, upsert or delete is ([`Plan::BoxWrite`]: its reply is the
//! CALL's), a count every shard adds its part to ([`Plan::Len`], [`Plan::Sum`]: len,
//! count, bsize), or crud's truncate ([`Plan::Truncate`]).
//!
//! Must not know: how a select is routed or its reply merged (the server's).

use super::mp;
use super::select::index_by_name;
use super::{Plan, Raised};
use crate::msgpack::Value;
use crate::protocol::request::{Delete, Insert, Request, Select, Update, Upsert};
use crate::protocol::ErrorCode;
use crate::shard::errors::storage_error_code;
use crate::storage::index::Index;
use crate::storage::{Engine, IndexKind, IteratorType, Space, StorageError};

const PREFIX: &str = "box.space.";

/// Whether a CALL names a method of `box.space` (the session plans those here).
pub fn is_box_space_function(function_name: &str) -> bool {
    function_name.starts_with(PREFIX)
}

/// A `box.space` read that is a select: the request the server answers it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoxSelect {
    pub space_id: u32,
    pub index_id: u32,
    /// Tarantool's iterator code; one it does not know is answered by the select as 1.
    pub iterator: u32,
    /// A msgpack array.
    pub key: Vec<u8>,
    pub offset: u32,
    pub limit: u32,
    /// `select` returns one value, the list of its tuples; `get`, `min` and `max` return
    /// the tuple or nothing, which is what a SELECT's reply lists.
    pub one_list: bool,
}

impl BoxSelect {
    /// The IPROTO SELECT this read is.
    pub fn request(&self) -> Select<'_> {
        Select {
            space_id: self.space_id,
            index_id: self.index_id,
            limit: self.limit,
            offset: self.offset,
            iterator: self.iterator,
            key: &self.key,
            fetch_position: false,
            after_position: None,
            after_tuple: None,
        }
    }
}

/// A `box.space` write: the IPROTO request it is, whose reply is the CALL's (the tuple
/// written or removed, or nothing). Lua numbers update fields from 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoxWrite {
    Insert {
        space_id: u32,
        tuple: Vec<u8>,
    },
    Replace {
        space_id: u32,
        tuple: Vec<u8>,
    },
    Update {
        space_id: u32,
        index_id: u32,
        key: Vec<u8>,
        ops: Vec<u8>,
    },
    Upsert {
        space_id: u32,
        tuple: Vec<u8>,
        ops: Vec<u8>,
    },
    Delete {
        space_id: u32,
        index_id: u32,
        key: Vec<u8>,
    },
}

impl BoxWrite {
    /// The IPROTO request this write is.
    pub fn request(&self) -> Request<'_> {
        const LUA_INDEX_BASE: u32 = 1;
        match self {
            BoxWrite::Insert { space_id, tuple } => Request::Insert(Insert {
                space_id: *space_id,
                tuple,
            }),
            BoxWrite::Replace { space_id, tuple } => Request::Replace(Insert {
                space_id: *space_id,
                tuple,
            }),
            BoxWrite::Update {
                space_id,
                index_id,
                key,
                ops,
            } => Request::Update(Update {
                space_id: *space_id,
                index_id: *index_id,
                key,
                ops,
                index_base: LUA_INDEX_BASE,
            }),
            BoxWrite::Upsert {
                space_id,
                tuple,
                ops,
            } => Request::Upsert(Upsert {
                space_id: *space_id,
                index_id: 0,
                tuple,
                ops,
                index_base: LUA_INDEX_BASE,
            }),
            BoxWrite::Delete {
                space_id,
                index_id,
                key,
            } => Request::Delete(Delete {
                space_id: *space_id,
                index_id: *index_id,
                key,
            }),
        }
    }
}

/// What each shard counts of a `box.space` read whose answer is the sum of the shards'.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardSum {
    /// `count(key, opts)`: the tuples the select would return, with no limit.
    Matching {
        space_id: u32,
        index_id: u32,
        iterator: u32,
        key: Vec<u8>,
    },
    /// A space's `bsize()`: the bytes of its tuples' MessagePack.
    TupleBytes { space_id: u32 },
    /// An index's `bsize()`: the memory the index holds.
    IndexBytes { space_id: u32, index_id: u32 },
}

impl ShardSum {
    pub fn space_id(&self) -> u32 {
        match self {
            ShardSum::Matching { space_id, .. }
            | ShardSum::TupleBytes { space_id }
            | ShardSum::IndexBytes { space_id, .. } => *space_id,
        }
    }

    /// This shard's count.
    pub fn count(&self, engine: &Engine) -> Result<u64, StorageError> {
        Ok(match self {
            ShardSum::Matching {
                space_id,
                index_id,
                iterator,
                key,
            } => engine
                .space(*space_id)?
                .select(*index_id, *iterator, key)?
                .count() as u64,
            ShardSum::TupleBytes { space_id } => {
                let space = engine.space(*space_id)?;
                let tuples = space.select(0, IteratorType::All as u32, &[0x90])?;
                tuples.map(|(_, tuple)| tuple.data().len() as u64).sum()
            }
            ShardSum::IndexBytes { space_id, index_id } => {
                let memory = engine.space(*space_id)?.memory();
                let index = memory.index_bytes.iter().find(|(id, _)| id == index_id);
                index.map_or(0, |&(_, bytes)| bytes as u64)
            }
        })
    }
}

/// The methods answered, by their Lua names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Len,
    Count,
    Bsize,
    Get,
    Select,
    /// Only an index has them.
    Min,
    Max,
    /// Only a space has them.
    Insert,
    Replace,
    Upsert,
    Update,
    Delete,
    Truncate,
}

impl Method {
    fn named(name: &str, of_index: bool) -> Option<Method> {
        Some(match name {
            "len" => Method::Len,
            "count" => Method::Count,
            "bsize" => Method::Bsize,
            "get" => Method::Get,
            "select" => Method::Select,
            "min" if of_index => Method::Min,
            "max" if of_index => Method::Max,
            "insert" if !of_index => Method::Insert,
            "replace" | "put" if !of_index => Method::Replace,
            "upsert" if !of_index => Method::Upsert,
            "update" => Method::Update,
            "delete" => Method::Delete,
            "truncate" if !of_index => Method::Truncate,
            _ => return None,
        })
    }
}

/// What a function name calls: a method of a space, or of one of its indexes.
struct Called<'e> {
    space: &'e Space,
    /// `None`: the space's own method, which works on its primary index.
    index: Option<&'e Index>,
    method: Method,
}

impl<'e> Called<'e> {
    /// `box.space.NAME:method` or `box.space.NAME.index.INAME:method`, as Lua resolves
    /// them: a dotted name is a path, so a name holding a dot is found by neither.
    fn resolve(engine: &'e Engine, function_name: &str) -> Option<Called<'e>> {
        let (path, method) = function_name.strip_prefix(PREFIX)?.split_once(':')?;
        let (space_name, index_name) = match path.split_once(".index.") {
            Some((space, index)) => (space, Some(index)),
            None => (path, None),
        };
        if space_name.contains('.') || index_name.is_some_and(|name| name.contains('.')) {
            return None;
        }
        let space = engine.space_named(space_name.as_bytes())?;
        let index = match index_name {
            Some(name) => Some(index_by_name(space, name)?),
            None => None,
        };
        let method = Method::named(method, index.is_some())?;
        Some(Called {
            space,
            index,
            method,
        })
    }

    fn index(&self) -> &'e Index {
        self.index.unwrap_or(&self.space.indexes()[0])
    }
}

/// Plans a `box.space` method call (see the module docs).
pub fn plan(engine: &Engine, function_name: &str, args: &[u8]) -> Result<Plan<'static>, Raised> {
    let Some(called) = Called::resolve(engine, function_name) else {
        return Err(Raised {
            code: ErrorCode::ER_NO_SUCH_PROC,
            message: format!("Procedure '{function_name}' is not defined"),
        });
    };
    let args = mp::array_items(args).unwrap_or_default();
    let arg = |at: usize| args.get(at).copied().unwrap_or(mp::NIL);
    let space = called.space;
    let index = called.index();
    let ids = (space.id, index.def.id);
    match called.method {
        Method::Len => Ok(Plan::Len { space_id: space.id }),
        Method::Bsize => Ok(Plan::Sum(match called.index {
            Some(index) => ShardSum::IndexBytes {
                space_id: space.id,
                index_id: index.def.id,
            },
            None => ShardSum::TupleBytes { space_id: space.id },
        })),
        Method::Count => plan_count(space, ids, arg(0), arg(1)),
        Method::Select => plan_select(ids, arg(0), arg(1)),
        Method::Get => plan_get(space, ids, arg(0)),
        Method::Min | Method::Max => plan_border(space, index, arg(0), called.method),
        Method::Insert | Method::Replace | Method::Upsert | Method::Update | Method::Delete => {
            plan_write(ids, called.method, arg(0), arg(1)).map(Plan::BoxWrite)
        }
        Method::Truncate if space.id < crate::config::space::SPACE_ID_MIN => Err(Raised {
            code: ErrorCode::ER_TRUNCATE_SYSTEM_SPACE,
            message: format!("Can't truncate a system space, space '{}'", space.name),
        }),
        // Every shard deletes its tuples, each delete logged (see `crud::run`).
        Method::Truncate => Ok(Plan::Truncate {
            space_id: space.id,
            returns_nothing: true,
        }),
    }
}

/// A write method's arguments, checked as Tarantool 2.6's Lua checks them (a map where a
/// tuple, key or operations go is refused with 22; a key may be a scalar; `update` and
/// `upsert` need a table of operations), as the IPROTO request it then makes.
fn plan_write(
    (space_id, index_id): (u32, u32),
    method: Method,
    first: &[u8],
    second: &[u8],
) -> Result<BoxWrite, Raised> {
    let usage = |text: &str| Raised::lua(text);
    Ok(match method {
        Method::Insert | Method::Replace => {
            let tuple = array_of(first)?.ok_or_else(not_an_array)?;
            match method {
                Method::Insert => BoxWrite::Insert { space_id, tuple },
                _ => BoxWrite::Replace { space_id, tuple },
            }
        }
        Method::Upsert => {
            const USAGE: &str = "Usage space:upsert(tuple_key, ops)";
            if !is_table(first) || !is_table(second) {
                return Err(usage(USAGE));
            }
            let tuple = array_of(first)?.ok_or_else(not_an_array)?;
            let ops = array_of(second)?.ok_or_else(not_an_array)?;
            BoxWrite::Upsert {
                space_id,
                tuple,
                ops,
            }
        }
        Method::Update => {
            if !is_table(second) {
                return Err(usage("Usage index:update(key, ops)"));
            }
            let key = write_key(first)?;
            let ops = array_of(second)?.ok_or_else(not_an_array)?;
            BoxWrite::Update {
                space_id,
                index_id,
                key,
                ops,
            }
        }
        _ => BoxWrite::Delete {
            space_id,
            index_id,
            key: write_key(first)?,
        },
    })
}

fn is_table(raw: &[u8]) -> bool {
    matches!(mp::value(raw), Value::Array(_) | Value::Map(_))
}

/// An array as given; `None` for anything but a table; 22 for a map.
fn array_of(raw: &[u8]) -> Result<Option<Vec<u8>>, Raised> {
    match mp::value(raw) {
        Value::Array(_) => Ok(Some(raw.to_vec())),
        Value::Map(_) => Err(not_an_array()),
        _ => Ok(None),
    }
}

/// The key of an update or delete: a scalar is a key of one part, nil the empty key, a map
/// refused (22).
fn write_key(raw: &[u8]) -> Result<Vec<u8>, Raised> {
    match array_of(raw)? {
        Some(key) => Ok(key),
        None => Ok(key_of(raw)),
    }
}

fn not_an_array() -> Raised {
    storage_raised(&StorageError::TupleNotArray)
}

/// `count(key, opts)`: checked here as the shards would refuse it (every shard holds the
/// same schema), so a refusal is answered with its own code.
fn plan_count(
    space: &Space,
    (space_id, index_id): (u32, u32),
    key: &[u8],
    opts: &[u8],
) -> Result<Plan<'static>, Raised> {
    let (key, iterator) = key_and_iterator(key, opts)?;
    let Some(iterator) = iterator.filter(|&code| IteratorType::is_known_code(code)) else {
        return Err(invalid_iterator());
    };
    if let Err(error) = space.select(index_id, iterator, &key) {
        return Err(storage_raised(&error));
    }
    Ok(Plan::Sum(ShardSum::Matching {
        space_id,
        index_id,
        iterator,
        key,
    }))
}

/// `select(key, opts)`: the select with the iterator, offset and limit the options give.
fn plan_select(
    (space_id, index_id): (u32, u32),
    key: &[u8],
    opts: &[u8],
) -> Result<Plan<'static>, Raised> {
    let (key, iterator) = key_and_iterator(key, opts)?;
    if mp::value(opts) == Value::Bool(false) {
        // `check_select_opts` indexes any opts but nil for the offset.
        return Err(lua_error(
            1524,
            "attempt to index local 'opts' (a boolean value)",
        ));
    }
    let offset = select_number(opts, b"offset", 4, 0)?;
    let limit = select_number(opts, b"limit", 5, u32::MAX)?;
    Ok(Plan::BoxSelect(BoxSelect {
        space_id,
        index_id,
        // One the select path answers as Tarantool's C code does: 1, "Invalid iterator type".
        iterator: iterator.unwrap_or(u32::MAX),
        key,
        offset,
        limit,
        one_list: true,
    }))
}

/// `get(key)`: the exact-match checks (41, 19, 18, in Tarantool's order) made here, then
/// the select of the one tuple.
fn plan_get(
    space: &Space,
    (space_id, index_id): (u32, u32),
    key: &[u8],
) -> Result<Plan<'static>, Raised> {
    let key = key_of(key);
    if let Err(error) = space.get(index_id, &key) {
        return Err(storage_raised(&error));
    }
    Ok(Plan::BoxSelect(BoxSelect {
        space_id,
        index_id,
        iterator: IteratorType::Eq as u32,
        key,
        offset: 0,
        limit: 1,
        one_list: false,
    }))
}

/// `min(key)` / `max(key)`: the first tuple GE the key, the last LE it; options are
/// ignored, as there. A HASH index has no order.
fn plan_border(
    space: &Space,
    index: &Index,
    key: &[u8],
    method: Method,
) -> Result<Plan<'static>, Raised> {
    let (iterator, feature) = match method {
        Method::Max => (IteratorType::Le, "max()"),
        _ => (IteratorType::Ge, "min()"),
    };
    if index.def.kind == IndexKind::Hash {
        return Err(storage_raised(&StorageError::UnsupportedIndexFeature {
            index: index.def.name.clone(),
            index_type: index.def.kind.name(),
            space: space.name.clone(),
            feature,
        }));
    }
    Ok(Plan::BoxSelect(BoxSelect {
        space_id: space.id,
        index_id: index.def.id,
        iterator: iterator as u32,
        key: key_of(key),
        offset: 0,
        limit: 1,
        one_list: false,
    }))
}

/// The key as Tarantool's Lua passes it on (`tuple_encode`): nil is the empty key, a
/// table its array part (none for a map), any other value a key of that one part.
fn key_of(raw: &[u8]) -> Vec<u8> {
    match raw.first() {
        None | Some(0xc0) => vec![0x90],
        Some(0x90..=0x9f | 0xdc | 0xdd) => raw.to_vec(),
        Some(0x80..=0x8f | 0xde | 0xdf) => vec![0x90],
        Some(_) => {
            let mut key = Vec::with_capacity(raw.len() + 1);
            key.push(0x91);
            key.extend_from_slice(raw);
            key
        }
    }
}

/// The key a read is given, and the iterator its options give (see [`iterator_of`]).
fn key_and_iterator(key: &[u8], opts: &[u8]) -> Result<(Vec<u8>, Option<u32>), Raised> {
    let key = key_of(key);
    let iterator = iterator_of(opts, key == [0x90])?;
    Ok((key, iterator))
}

/// The iterator the options give (`check_iterator_type`): ALL for an empty key and EQ for
/// another when they give none. `None` for a number Tarantool's C code refuses (1).
fn iterator_of(opts: &[u8], key_is_empty: bool) -> Result<Option<u32>, Raised> {
    let default = match key_is_empty {
        true => IteratorType::All,
        false => IteratorType::Eq,
    };
    let given = match mp::value(opts) {
        Value::Nil | Value::Bool(false) | Value::Array(_) => return Ok(Some(default as u32)),
        Value::Str(_) | Value::Bin(_) => opts,
        Value::Map(_) => match map_value(opts, b"iterator") {
            // A missing key, or `false`: Lua's `opts.iterator` is falsy.
            None | Some([0xc2]) => return Ok(Some(default as u32)),
            Some(given) => given,
        },
        other => {
            let lua_type = if matches!(other, Value::Bool(_)) {
                "boolean"
            } else {
                mp::lua_type(opts)
            };
            let message = format!("attempt to index local 'opts' (a {lua_type} value)");
            return Err(lua_error(1338, &message));
        }
    };
    iterator_code(given)
}

/// An iterator option's value: a number as given (a float truncated), or a name in any
/// case; anything else is an unknown type, named as Lua's `tostring` would.
fn iterator_code(given: &[u8]) -> Result<Option<u32>, Raised> {
    const NAMES: [&str; 12] = [
        "EQ",
        "REQ",
        "ALL",
        "LT",
        "LE",
        "GE",
        "GT",
        "BITS_ALL_SET",
        "BITS_ANY_SET",
        "BITS_ALL_NOT_SET",
        "OVERLAPS",
        "NEIGHBOR",
    ];
    let code = |number: Option<i64>| number.and_then(|number| u32::try_from(number).ok());
    let shown = match mp::value(given) {
        Value::Uint(number) => return Ok(code(i64::try_from(number).ok())),
        Value::Int(number) => return Ok(code(Some(number))),
        Value::F32(number) => return Ok(code(float_to_int(f64::from(number)))),
        Value::F64(number) => return Ok(code(float_to_int(number))),
        Value::Str(name) | Value::Bin(name) => {
            let upper = name.to_ascii_uppercase();
            if let Some(at) = NAMES.iter().position(|known| known.as_bytes() == upper) {
                return Ok(Some(at as u32));
            }
            String::from_utf8_lossy(name).into_owned()
        }
        Value::Bool(true) => "true".to_owned(),
        // msgpack's nil is `box.NULL` there, a truthy cdata.
        Value::Nil => "cdata<void *>: NULL".to_owned(),
        // Lua shows a table's address, which tarn has not.
        _ => "table".to_owned(),
    };
    Err(Raised {
        code: ErrorCode::ER_ITERATOR_TYPE,
        message: format!("Unknown iterator type '{shown}'"),
    })
}

/// `offset` or `limit` of select's options as LuaJIT's FFI passes them to the C
/// `box_select` as an `unsigned int`: integers wrap, floats are truncated (0 beyond an
/// int64), booleans are 0 or 1; `default` when absent or nil.
fn select_number(opts: &[u8], name: &[u8], argument: u32, default: u32) -> Result<u32, Raised> {
    let Some(given) = map_value(opts, name) else {
        return Ok(default);
    };
    Ok(match mp::value(given) {
        Value::Nil => default,
        Value::Uint(number) => number as u32,
        Value::Int(number) => number as u32,
        Value::F32(number) => float_to_int(f64::from(number)).unwrap_or(0) as u32,
        Value::F64(number) => float_to_int(number).unwrap_or(0) as u32,
        Value::Bool(flag) => u32::from(flag),
        _ => {
            let lua_type = mp::lua_type(given);
            let message = format!(
                "bad argument #{argument} to 'box_select' (cannot convert '{lua_type}' to 'unsigned int')"
            );
            return Err(lua_error(1541, &message));
        }
    })
}

/// A float truncated to an integer, `None` where a conversion to int64 has no answer.
fn float_to_int(number: f64) -> Option<i64> {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0; // 2^63
    (number.is_finite() && number.abs() < LIMIT).then(|| number.trunc() as i64)
}

/// The value of a string key of a map of options; `None` when `opts` is not a map or
/// has no such key.
fn map_value<'a>(opts: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    mp::map_pairs(opts)?
        .find(|(key, _)| mp::str_bytes(key) == Some(name))
        .map(|(_, value)| value)
}

/// A Lua error raised in Tarantool 2.6's `builtin/box/schema.lua` at `line`.
fn lua_error(line: u32, message: &str) -> Raised {
    Raised::lua(format!("builtin/box/schema.lua:{line}: {message}"))
}

fn invalid_iterator() -> Raised {
    storage_raised(&StorageError::IllegalParams("Invalid iterator type".into()))
}

fn storage_raised(error: &StorageError) -> Raised {
    Raised {
        code: storage_error_code(error),
        message: error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn number(opts: &[u8]) -> Result<u32, Raised> {
        select_number(opts, b"limit", 5, 7)
    }

    #[test]
    fn limits_convert_as_luajit_passes_them_to_an_unsigned_int() {
        // {limit = ...}: 0x81 0xa5 "limit" then the value.
        let with = |value: &[u8]| [&[0x81, 0xa5][..], b"limit", value].concat();
        assert_eq!(number(&[0x80]).unwrap(), 7, "absent: the default");
        assert_eq!(number(&with(&[0xc0])).unwrap(), 7, "nil: the default");
        assert_eq!(number(&with(&[0x05])).unwrap(), 5);
        assert_eq!(number(&with(&[0xff])).unwrap(), u32::MAX, "-1 wraps");
        assert_eq!(
            number(&with(&[0xcf, 0, 0, 0, 1, 0, 0, 0, 1])).unwrap(),
            1,
            "2^32 + 1"
        );
        let float = |value: f64| with(&[&[0xcb][..], &value.to_bits().to_be_bytes()].concat());
        assert_eq!(number(&float(2.9)).unwrap(), 2);
        assert_eq!(number(&float(-2.5)).unwrap(), u32::MAX - 1);
        assert_eq!(number(&float(1e10)).unwrap(), 1_410_065_408);
        assert_eq!(number(&float(1e20)).unwrap(), 0, "no int64 holds it");
        assert_eq!(number(&with(&[0xc3])).unwrap(), 1);
        let refused = number(&with(&[0xa1, b'x'])).unwrap_err();
        assert_eq!(refused.code, ErrorCode::ER_PROC_LUA);
        assert_eq!(
            refused.message,
            "builtin/box/schema.lua:1541: bad argument #5 to 'box_select' (cannot convert 'string' to 'unsigned int')"
        );
    }

    #[test]
    fn keys_are_what_lua_passes_on() {
        assert_eq!(key_of(&[]), [0x90]);
        assert_eq!(key_of(&[0xc0]), [0x90]);
        assert_eq!(
            key_of(&[0x81, 0xa1, b'a', 0x01]),
            [0x90],
            "a map has no array part"
        );
        assert_eq!(key_of(&[0x92, 0x01, 0x02]), [0x92, 0x01, 0x02]);
        assert_eq!(key_of(&[0x05]), [0x91, 0x05]);
    }

    #[test]
    fn iterators_by_name_number_or_default() {
        let eq = Some(IteratorType::Eq as u32);
        let all = Some(IteratorType::All as u32);
        assert_eq!(iterator_of(&[0xc0], true).unwrap(), all);
        assert_eq!(iterator_of(&[0xc0], false).unwrap(), eq);
        assert_eq!(
            iterator_of(&[0xc2], false).unwrap(),
            eq,
            "false opts are none"
        );
        assert_eq!(iterator_of(&[0xa2, b'g', b't'], false).unwrap(), Some(6));
        let map = |value: &[u8]| [&[0x81, 0xa8][..], b"iterator", value].concat();
        assert_eq!(iterator_of(&map(&[0x03]), false).unwrap(), Some(3));
        assert_eq!(
            iterator_of(&map(&[0x63]), false).unwrap(),
            Some(99),
            "the select refuses it"
        );
        assert_eq!(iterator_of(&map(&[0xff]), false).unwrap(), None);
        assert_eq!(iterator_of(&map(&[0xc2]), true).unwrap(), all);
        let unknown = iterator_of(&map(&[0xc0]), false).unwrap_err();
        assert_eq!(unknown.code, ErrorCode::ER_ITERATOR_TYPE);
        assert_eq!(
            unknown.message,
            "Unknown iterator type 'cdata<void *>: NULL'"
        );
        let indexed = iterator_of(&[0x05], false).unwrap_err();
        assert_eq!(
            indexed.message,
            "builtin/box/schema.lua:1338: attempt to index local 'opts' (a number value)"
        );
    }
}
