//! DDL over CALL, as a migration calls it through `conn.call(...)`:
//! `box.schema.space.create(name, opts)`, `box.space.NAME:create_index(name, opts)`,
//! `box.space.NAME:drop()`, `box.space.NAME:rename(new)`, `box.space.NAME:format(format)`,
//! `box.space.NAME.index.INAME:drop()` and `box.space.NAME.index.INAME:alter(opts)`. Each is read as Tarantool 2.6's Lua reads it
//! (its option checks and errors, `docs/tarantool-reference.md` (o)) and planned against
//! this core's schema into the one change of one space's definition it makes
//! ([`SchemaPlan::Change`]); the server makes that change on every shard (`server::ddl`)
//! and then answers [`DdlReply`].
//!
//! Must not know: how a change reaches the shards, or how it is made durable.

use super::mp;
use super::Raised;
use crate::msgpack::Value;
use crate::placement::{Catalog, SpacePlacement};
use crate::protocol::ErrorCode;
use crate::shard::DefinitionChange;
use crate::storage::{
    Collation, Engine, FieldDef, FieldType, IndexDef, IndexKind, KeyDef, KeyPart, SpaceDef,
    SpaceFormat,
};

const SPACE_CREATE: &str = "box.schema.space.create";
/// User spaces' ids start here, as Tarantool's.
const USER_SPACE_ID_MIN: u32 = crate::config::space::SPACE_ID_MIN;
/// Tarantool's `BOX_SPACE_MAX`: the largest space id.
const SPACE_ID_MAX: u32 = i32::MAX as u32;
/// Tarantool's `BOX_INDEX_MAX`: indexes a space may have.
const INDEX_COUNT_MAX: u32 = 128;

/// What a DDL call amounts to.
#[derive(Debug, Clone)]
pub enum SchemaPlan {
    /// One space's new definition (or its drop) to make on every shard; answered with
    /// `reply` once made.
    Change {
        change: DefinitionChange,
        reply: DdlReply,
    },
    /// Nothing to change (`if_not_exists` found what was asked for): answered at once.
    Unchanged(DdlReply),
    /// Nothing to change, but Tarantool writes the definition back as it was (`index:alter`
    /// with options that change nothing): answered at once, and refused as a write on a
    /// read-only instance.
    Rewritten(DdlReply),
}

/// Whether Tarantool 2.6 raises `raised`, the error of DDL call `function_name`, from
/// `box.schema`'s Lua, before its first write to a system space: an argument check (1), a
/// space or an index that exists (10, 85), a method of nothing (33), a Lua error (32); and
/// tarn's refusal of what it does not serve (5). The other errors of a DDL come from the
/// system spaces' triggers, after that write, so a read-only instance answers 7 in their
/// place (observed: `docs/tarantool-reference.md` (p)); so does a format field without a
/// name in `box.schema.space.create`, which the `_space` trigger finds (`format()` checks
/// it in Lua).
pub fn raised_before_writing(function_name: &str, raised: &Raised) -> bool {
    if function_name == SPACE_CREATE && raised.message.starts_with("Illegal parameters, format[") {
        return false;
    }
    matches!(
        raised.code,
        ErrorCode::ER_ILLEGAL_PARAMS
            | ErrorCode::ER_SPACE_EXISTS
            | ErrorCode::ER_INDEX_EXISTS
            | ErrorCode::ER_NO_SUCH_PROC
            | ErrorCode::ER_PROC_LUA
            | ErrorCode::ER_UNSUPPORTED
    )
}

/// What a DDL call answers, from the schema once the change is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DdlReply {
    /// No value (`drop`, `rename`, `format`).
    Nothing,
    /// The space's `_space` row. Tarantool returns the space object, which it cannot
    /// encode (it answers 32 after making the space); tarn answers the row instead.
    SpaceRow { space_id: u32 },
    /// The index object's data fields, as Tarantool encodes them; `not_created` adds the
    /// second value `if_not_exists` returns for an index that was there.
    Index {
        space_id: u32,
        index_id: u32,
        not_created: bool,
    },
}

/// Whether a CALL names a DDL function this module plans (before `box_space`'s methods).
pub fn is_schema_function(function_name: &str) -> bool {
    function_name == SPACE_CREATE
        || ["create_index", "drop", "rename", "format", "alter"]
            .iter()
            .any(|method| {
                function_name.starts_with("box.space.")
                    && function_name
                        .rsplit_once(':')
                        .is_some_and(|(_, called)| called == *method)
            })
}

/// Plans a DDL call against `engine`'s schema (every shard holds the same), whose spaces
/// `catalog` places.
pub fn plan(
    engine: &Engine,
    catalog: &Catalog,
    function_name: &str,
    args: &[u8],
) -> Result<SchemaPlan, Raised> {
    let args = mp::array_items(args).unwrap_or_default();
    let arg = |at: usize| args.get(at).copied().unwrap_or(mp::NIL);
    if function_name == SPACE_CREATE {
        return plan_space_create(engine, arg(0), arg(1));
    }
    let not_defined = || Raised {
        code: ErrorCode::ER_NO_SUCH_PROC,
        message: format!("Procedure '{function_name}' is not defined"),
    };
    let (path, method) = function_name
        .strip_prefix("box.space.")
        .and_then(|rest| rest.split_once(':'))
        .ok_or_else(not_defined)?;
    let (space_name, index_name) = match path.split_once(".index.") {
        Some((space, index)) => (space, Some(index)),
        None => (path, None),
    };
    if space_name.contains('.') || index_name.is_some_and(|name| name.contains('.')) {
        return Err(not_defined());
    }
    let space = engine
        .space_def_named(space_name.as_bytes())
        .ok_or_else(not_defined)?;
    match (index_name, method) {
        (None, "create_index") => {
            let spread = catalog.placement(space.id) == SpacePlacement::ByPrimaryKey;
            plan_create_index(space, spread, arg(0), arg(1))
        }
        (None, "drop") => plan_space_drop(&space),
        (None, "rename") => plan_rename(engine, space, arg(0)),
        (None, "format") => plan_format(space, arg(0)),
        (Some(index_name), "drop") => {
            let index_id = index_named(&space, index_name).ok_or_else(not_defined)?.id;
            plan_index_drop(space, index_id)
        }
        (Some(index_name), "alter") => {
            let at = space
                .indexes
                .iter()
                .position(|index| *index.name == *index_name)
                .ok_or_else(not_defined)?;
            let spread = catalog.placement(space.id) == SpacePlacement::ByPrimaryKey;
            plan_index_alter(space, spread, at, arg(0))
        }
        _ => Err(not_defined()),
    }
}

/// Index `name` of `space`, as `box.space.X.index.NAME` finds it.
fn index_named<'d>(space: &'d SpaceDef, name: &str) -> Option<&'d IndexDef> {
    space.indexes.iter().find(|index| *index.name == *name)
}

fn illegal(message: impl std::fmt::Display) -> Raised {
    Raised {
        code: ErrorCode::ER_ILLEGAL_PARAMS,
        message: format!("Illegal parameters, {message}"),
    }
}

fn raised(code: ErrorCode, message: String) -> Raised {
    Raised { code, message }
}

/// The pairs of an options map; nil is no options.
fn options(raw: &[u8]) -> Result<Vec<(&str, &[u8])>, Raised> {
    if mp::is_nil(raw) {
        return Ok(Vec::new());
    }
    let items = mp::map_items(raw)
        .filter(|_| matches!(mp::value(raw), Value::Map(_)))
        .ok_or_else(|| illegal("options should be a table"))?;
    items
        .into_iter()
        .map(|(key, value)| match mp::as_str(key) {
            Some(key) => Ok((key, value)),
            None => Err(illegal("options should be a table")),
        })
        .collect()
}

/// Refuses an option not in `known`, as Tarantool's `check_param_table` does.
fn check_known(options: &[(&str, &[u8])], known: &[&str]) -> Result<(), Raised> {
    match options.iter().find(|(key, _)| !known.contains(key)) {
        Some((key, _)) => Err(illegal(format_args!("unexpected option '{key}'"))),
        None => Ok(()),
    }
}

/// The value of `key` among a map's raw pairs.
fn value_of<'a>(pairs: &[(&[u8], &'a [u8])], key: &str) -> Option<&'a [u8]> {
    pairs
        .iter()
        .find(|(k, _)| mp::as_str(k) == Some(key))
        .map(|(_, v)| *v)
}

fn option<'a>(options: &[(&str, &'a [u8])], key: &str) -> Option<&'a [u8]> {
    options
        .iter()
        .find(|(name, _)| *name == key)
        .map(|(_, value)| *value)
}

fn is_true(raw: Option<&[u8]>) -> bool {
    matches!(raw.map(mp::value), Some(Value::Bool(true)))
}

/// A name argument: a string, printable and at most 65000 bytes (Tarantool's identifier
/// rule, checked when the row is written).
fn name_argument<'a>(raw: &'a [u8], what: &str) -> Result<&'a str, Raised> {
    let name = mp::as_str(raw).ok_or_else(|| illegal(format_args!("{what} should be a string")))?;
    if name.is_empty() || name.len() > 65000 || name.chars().any(char::is_control) {
        return Err(raised(
            ErrorCode::ER_IDENTIFIER,
            format!(
                "Invalid identifier '{name}' (expected printable symbols only or it is too long)"
            ),
        ));
    }
    Ok(name)
}

const SPACE_OPTIONS: [&str; 10] = [
    "engine",
    "id",
    "field_count",
    "user",
    "format",
    "if_not_exists",
    "temporary",
    "is_local",
    "is_sync",
    "sql",
];

fn plan_space_create(engine: &Engine, name: &[u8], opts: &[u8]) -> Result<SchemaPlan, Raised> {
    let name = match mp::as_str(name) {
        Some(_) => name_argument(name, "name")?,
        None => return Err(illegal("name should be a string")),
    };
    let opts = options(opts)?;
    check_known(&opts, &SPACE_OPTIONS)?;
    if let Some(existing) = engine.space_def_named(name.as_bytes()) {
        if is_true(option(&opts, "if_not_exists")) {
            return Ok(SchemaPlan::Unchanged(DdlReply::SpaceRow {
                space_id: existing.id,
            }));
        }
        return Err(raised(
            ErrorCode::ER_SPACE_EXISTS,
            format!("Space '{name}' already exists"),
        ));
    }
    if let Some(engine_name) = option(&opts, "engine").and_then(mp::as_str) {
        if engine_name != "memtx" {
            return Err(raised(
                ErrorCode::ER_NO_SUCH_ENGINE,
                format!("Space engine '{engine_name}' does not exist"),
            ));
        }
    }
    let id = match option(&opts, "id") {
        Some(raw) if !mp::is_nil(raw) => match mp::value(raw) {
            Value::Uint(id) if id <= u64::from(SPACE_ID_MAX) => id as u32,
            Value::Uint(_) | Value::Int(_) | Value::F32(_) | Value::F64(_) => {
                return Err(raised(
                    ErrorCode::ER_CREATE_SPACE,
                    format!("Failed to create space '{name}': space id is too big"),
                ))
            }
            _ => return Err(illegal("options parameter 'id' should be of type number")),
        },
        _ => next_space_id(engine),
    };
    if engine.space_def(id).is_some() {
        return Err(duplicate_in("primary", "_space"));
    }
    if id < USER_SPACE_ID_MIN {
        return Err(raised(
            ErrorCode::ER_CREATE_SPACE,
            format!("Failed to create space '{name}': space id {id} is reserved for system spaces"),
        ));
    }
    let format = match option(&opts, "format") {
        Some(raw) if !mp::is_nil(raw) => parse_format(raw, name)?,
        _ => Vec::new(),
    };
    let is_sync = is_sync_option(option(&opts, "is_sync"))?;
    let def = SpaceDef {
        id,
        name: name.into(),
        format: SpaceFormat::new(format),
        indexes: Vec::new(),
        is_sync,
    };
    Ok(SchemaPlan::Change {
        change: DefinitionChange::Create(def),
        reply: DdlReply::SpaceRow { space_id: id },
    })
}

/// The space option `is_sync`: a boolean, false when absent.
fn is_sync_option(raw: Option<&[u8]>) -> Result<bool, Raised> {
    match raw.map(mp::value) {
        None | Some(Value::Nil) => Ok(false),
        Some(Value::Bool(is_sync)) => Ok(is_sync),
        // Tarantool 2.6's words (`docs/tarantool-reference.md` (r)).
        Some(_) => Err(illegal(
            "options parameter 'is_sync' should be of type boolean",
        )),
    }
}

fn duplicate_in(index: &str, space: &str) -> Raised {
    raised(
        ErrorCode::ER_TUPLE_FOUND,
        format!("Duplicate key exists in unique index '{index}' in space '{space}'"),
    )
}

/// One more than the largest user space id in use.
fn next_space_id(engine: &Engine) -> u32 {
    engine
        .space_defs()
        .iter()
        .map(|def| def.id + 1)
        .max()
        .unwrap_or(0)
        .max(USER_SPACE_ID_MIN)
}

/// A space format: each field `{name = ..., type = ..., is_nullable = ...}` or
/// `{name, type}`; a field without a type is `any`.
fn parse_format(raw: &[u8], space_name: &str) -> Result<Vec<FieldDef>, Raised> {
    let fields = mp::array_items(raw).ok_or_else(|| illegal("format should be a table"))?;
    let mut defs: Vec<FieldDef> = Vec::with_capacity(fields.len());
    for (at, field) in fields.iter().enumerate() {
        let number = at + 1;
        let (name, type_name, nullable) = match mp::value(field) {
            Value::Map(_) => {
                let pairs = mp::map_items(field).unwrap_or_default();
                let get = |key: &str| value_of(&pairs, key);
                (
                    get("name").and_then(mp::as_str),
                    get("type").and_then(mp::as_str),
                    is_true(get("is_nullable")),
                )
            }
            Value::Array(_) => {
                let items = mp::array_items(field).unwrap_or_default();
                let get = |at: usize| items.get(at).and_then(|item| mp::as_str(item));
                (get(0), get(1), false)
            }
            _ => (None, None, false),
        };
        let name = name
            .ok_or_else(|| illegal(format_args!("format[{number}]: name (string) is expected")))?;
        let field_type = match type_name {
            None => FieldType::Any,
            Some(type_name) => FieldType::from_name(type_name).ok_or_else(|| {
                raised(
                    ErrorCode::ER_CREATE_SPACE,
                    format!("Failed to create space '{space_name}': field {number} has unknown field type"),
                )
            })?,
        };
        if defs.iter().any(|def| *def.name == *name) {
            return Err(raised(
                ErrorCode::ER_SPACE_FIELD_IS_DUPLICATE,
                format!("Space field '{name}' is duplicate"),
            ));
        }
        defs.push(FieldDef {
            name: name.into(),
            field_type,
            is_nullable: nullable,
        });
    }
    Ok(defs)
}

const INDEX_OPTIONS: [&str; 11] = [
    "type",
    "id",
    "unique",
    "if_not_exists",
    "parts",
    "sequence",
    "func",
    "hint",
    "dimension",
    "distance",
    "bloom_fpr",
];

/// `spread`: the space's rows are spread over the shards by primary key, so a unique
/// secondary index could not be kept unique across them (the config's rule, too).
fn plan_create_index(
    space: SpaceDef,
    spread: bool,
    name: &[u8],
    opts: &[u8],
) -> Result<SchemaPlan, Raised> {
    let name = match mp::as_str(name) {
        Some(_) => name_argument(name, "name")?,
        None => return Err(illegal("name should be a string")),
    };
    let opts = options(opts)?;
    check_known(&opts, &INDEX_OPTIONS)?;
    if let Some(existing) = index_named(&space, name) {
        if is_true(option(&opts, "if_not_exists")) {
            return Ok(SchemaPlan::Unchanged(DdlReply::Index {
                space_id: space.id,
                index_id: existing.id,
                not_created: true,
            }));
        }
        return Err(raised(
            ErrorCode::ER_INDEX_EXISTS,
            format!("Index '{name}' already exists"),
        ));
    }
    let modify = |reason: &str| {
        raised(
            ErrorCode::ER_MODIFY_INDEX,
            format!(
                "Can't create or modify index '{name}' in space '{}': {reason}",
                space.name
            ),
        )
    };
    let (kind, unique) = index_kind(&opts).map_err(|reason| match reason {
        Ok(reason) => modify(&reason),
        Err(raised) => raised,
    })?;
    if kind == IndexKind::Hash && !unique {
        return Err(modify("HASH index must be unique"));
    }
    let space_id = space.id;
    let defs = &space;
    let index_id = new_index_id(defs, &opts, (unique, spread), &modify)?;
    let parts = match option(&opts, "parts") {
        Some(raw) if !mp::is_nil(raw) => parse_parts(raw, &defs.format)?,
        _ => vec![default_part(&defs.format, 0)],
    };
    let key_def = KeyDef::new(parts);
    check_part_types(defs, &key_def)?;
    let mut def = space;
    def.indexes.push(IndexDef {
        id: index_id,
        name: name.into(),
        kind,
        unique,
        key_def,
    });
    def.indexes.sort_by_key(|index| index.id);
    Ok(SchemaPlan::Change {
        change: DefinitionChange::Redefine(def),
        reply: DdlReply::Index {
            space_id,
            index_id,
            not_created: false,
        },
    })
}

/// The options `index:alter` reads (Tarantool 2.6's `alter_index_template`, less vinyl's
/// and the functional and spatial indexes' options, which tarn has no use for).
const INDEX_ALTER_OPTIONS: [&str; 5] = ["id", "name", "type", "unique", "parts"];

/// `box.space.X.index.Y:alter(opts)` of the index at `at`: the index under its new
/// options, the others kept as they are (its type, uniqueness and parts default to its
/// own). Answers nothing.
fn plan_index_alter(
    space: SpaceDef,
    spread: bool,
    at: usize,
    raw_opts: &[u8],
) -> Result<SchemaPlan, Raised> {
    let opts = options(raw_opts)?;
    check_known(&opts, &INDEX_ALTER_OPTIONS)?;
    let index_id = space.indexes[at].id;
    let old = space.indexes[at].clone();
    let mut new = old.clone();
    rename_index(&space, &opts, &mut new)?;
    let modify = |reason: &str| {
        raised(
            ErrorCode::ER_MODIFY_INDEX,
            format!(
                "Can't create or modify index '{}' in space '{}': {reason}",
                new.name, space.name
            ),
        )
    };
    (new.kind, new.unique) = altered_kind(&old, &opts).map_err(|reason| match reason {
        Ok(reason) => modify(&reason),
        Err(raised) => raised,
    })?;
    if new.kind == IndexKind::Hash && !new.unique {
        return Err(modify("HASH index must be unique"));
    }
    if index_id == 0 && !new.unique {
        return Err(modify("primary key must be unique"));
    }
    if index_id != 0 && new.unique && !old.unique && spread {
        return Err(modify(
            "a unique secondary index needs the whole space on one shard, and tarn spreads \
             this space's rows over the shards by primary key",
        ));
    }
    if let Some(raw) = option(&opts, "parts").filter(|raw| !mp::is_nil(raw)) {
        new.key_def = KeyDef::new(parse_parts(raw, &space.format)?);
    }
    if index_id == 0 && spread && new.key_def != old.key_def {
        return Err(modify(
            "tarn places this space's rows on its shards by primary key, so the primary \
             key's parts cannot change",
        ));
    }
    let unchanged = new.name == old.name
        && new.kind == old.kind
        && new.unique == old.unique
        && new.key_def == old.key_def;
    if unchanged && mp::is_nil(raw_opts) {
        return Ok(SchemaPlan::Unchanged(DdlReply::Nothing));
    }
    if unchanged {
        return Ok(SchemaPlan::Rewritten(DdlReply::Nothing));
    }
    let mut def = space;
    def.indexes[at] = new;
    check_part_types(&def, &def.indexes[at].key_def)?;
    Ok(SchemaPlan::Change {
        change: DefinitionChange::Redefine(def),
        reply: DdlReply::Nothing,
    })
}

/// `alter`'s `id` (which must stay the index's own) and `name` options, onto `index`.
fn rename_index(
    space: &SpaceDef,
    opts: &[(&str, &[u8])],
    index: &mut IndexDef,
) -> Result<(), Raised> {
    if let Some(id) = option(opts, "id").filter(|raw| !mp::is_nil(raw)) {
        if mp::value(id) != Value::Uint(u64::from(index.id)) {
            return Err(raised(
                ErrorCode::ER_CANT_UPDATE_PRIMARY_KEY,
                "Attempt to modify a tuple field which is part of index 'primary' in space \
                 '_index'"
                    .into(),
            ));
        }
    }
    if let Some(name) = option(opts, "name").filter(|raw| !mp::is_nil(raw)) {
        let name = name_argument(name, "name")?;
        if index_named(space, name).is_some_and(|other| other.id != index.id) {
            return Err(duplicate_in("name", "_index"));
        }
        index.name = name.into();
    }
    Ok(())
}

/// `alter`'s type and uniqueness: the options', else `old`'s own (see [`index_kind`]).
fn altered_kind(
    old: &IndexDef,
    opts: &[(&str, &[u8])],
) -> Result<(IndexKind, bool), Result<String, Raised>> {
    let mut given = opts.to_vec();
    if option(opts, "unique").is_none() {
        let unique: &[u8] = if old.unique { b"\xc3" } else { b"\xc2" };
        given.push(("unique", unique));
    }
    if option(opts, "type").is_none() {
        let kind: &[u8] = match old.kind {
            IndexKind::Tree => b"\xa4tree",
            IndexKind::Hash => b"\xa4hash",
        };
        given.push(("type", kind));
    }
    index_kind(&given)
}

/// The new index's id (the option, else one past the largest), checked as Tarantool checks
/// it, and against tarn's rule on unique secondary indexes of a `spread` space.
fn new_index_id(
    defs: &SpaceDef,
    opts: &[(&str, &[u8])],
    (unique, spread): (bool, bool),
    modify: &dyn Fn(&str) -> Raised,
) -> Result<u32, Raised> {
    let index_id = match option(opts, "id").map(mp::value) {
        None | Some(Value::Nil) => defs
            .indexes
            .iter()
            .map(|index| index.id + 1)
            .max()
            .unwrap_or(0),
        Some(Value::Uint(id)) if id < u64::from(INDEX_COUNT_MAX) => id as u32,
        Some(_) => return Err(modify("index id too big")),
    };
    if defs.indexes.iter().any(|index| index.id == index_id) {
        return Err(duplicate_in("primary", "_index"));
    }
    if index_id == 0 && !unique {
        return Err(modify("primary key must be unique"));
    }
    if index_id != 0 && unique && spread {
        return Err(modify(
            "a unique secondary index needs the whole space on one shard, and tarn spreads \
             this space's rows over the shards by primary key; create it with unique = false",
        ));
    }
    if index_id != 0 && defs.indexes.is_empty() {
        return Err(raised(
            ErrorCode::ER_NO_SUCH_INDEX_ID,
            format!("No index #0 is defined in space '{}'", defs.name),
        ));
    }
    Ok(index_id)
}

/// The index's type and uniqueness from its options (TREE and unique by default); an
/// unsupported type is `Err(Ok(reason))`, for the caller's ER_MODIFY_INDEX.
fn index_kind(opts: &[(&str, &[u8])]) -> Result<(IndexKind, bool), Result<String, Raised>> {
    let type_name = option(opts, "type").and_then(mp::as_str).unwrap_or("tree");
    let kind = match type_name.to_ascii_lowercase().as_str() {
        "tree" => IndexKind::Tree,
        "hash" => IndexKind::Hash,
        other => {
            return Err(Ok(format!(
                "{} indexes are not supported by tarn (only TREE and HASH)",
                other.to_ascii_uppercase()
            )))
        }
    };
    let unique = match option(opts, "unique").map(mp::value) {
        None | Some(Value::Nil) => true,
        Some(Value::Bool(unique)) => unique,
        Some(_) => {
            return Err(Err(illegal(
                "options parameter 'unique' should be of type boolean",
            )))
        }
    };
    Ok((kind, unique))
}

/// A part on field `field_no` (0-based) without a type: the format's type of that field,
/// else `unsigned` for the first field and `scalar` for others (as Tarantool 2.6 chose).
fn default_part(format: &SpaceFormat, field_no: u32) -> KeyPart {
    let (field_type, nullable) = match format.fields.get(field_no as usize) {
        Some(field) => (field.field_type, field.is_nullable),
        None if field_no == 0 => (FieldType::Unsigned, false),
        None => (FieldType::Scalar, false),
    };
    let part = KeyPart::new(field_no, field_type);
    if nullable {
        part.nullable()
    } else {
        part
    }
}

/// Index parts in any of the forms Tarantool accepts: `{1, 'unsigned', 2, 'string'}`,
/// `{{1, 'unsigned'}, {'name'}}`, `{{field = 1, type = 'unsigned', is_nullable = true,
/// collation = 'unicode'}}`, or field names; fields numbered from 1.
fn parse_parts(raw: &[u8], format: &SpaceFormat) -> Result<Vec<KeyPart>, Raised> {
    let items = mp::array_items(raw).ok_or_else(|| illegal("options.parts must be a table"))?;
    let reader = PartReader { format };
    let mut parts = Vec::new();
    let mut at = 0;
    while at < items.len() {
        let item = items[at];
        at += 1;
        match mp::value(item) {
            Value::Uint(_) => {
                // The flat form: a field number, then its type if a string follows.
                let type_name = items
                    .get(at)
                    .copied()
                    .filter(|next| matches!(mp::value(next), Value::Str(_)));
                at += type_name.is_some() as usize;
                parts.push(reader.part(reader.field_no(item)?, type_name)?);
            }
            Value::Str(_) => parts.push(reader.part(reader.field_no(item)?, None)?),
            Value::Array(_) => {
                let inner = mp::array_items(item).unwrap_or_default();
                let first = inner
                    .first()
                    .ok_or_else(|| illegal("options.parts: expected field number or name"))?;
                parts.push(reader.part(reader.field_no(first)?, inner.get(1).copied())?);
            }
            Value::Map(_) => parts.push(reader.map_part(item)?),
            _ => return Err(illegal("options.parts: expected table")),
        }
    }
    if parts.is_empty() {
        return Err(illegal("options.parts must not be empty"));
    }
    Ok(parts)
}

/// Reads one index part against the space's format (fields by number from 1, or by name).
struct PartReader<'f> {
    format: &'f SpaceFormat,
}

impl PartReader<'_> {
    fn field_no(&self, raw: &[u8]) -> Result<u32, Raised> {
        match mp::value(raw) {
            Value::Uint(number) if number >= 1 && number <= u64::from(u32::MAX) => {
                Ok(number as u32 - 1)
            }
            Value::Str(name) => self
                .format
                .fields
                .iter()
                .position(|field| field.name.as_bytes() == name)
                .map(|at| at as u32)
                .ok_or_else(|| {
                    illegal(format_args!(
                        "options.parts: field was not found by name '{}'",
                        String::from_utf8_lossy(name)
                    ))
                }),
            _ => Err(illegal("options.parts: expected field number or name")),
        }
    }

    /// The part on `field`, of `type_name` or else the format's type.
    fn part(&self, field: u32, type_name: Option<&[u8]>) -> Result<KeyPart, Raised> {
        let Some(raw) = type_name else {
            return Ok(default_part(self.format, field));
        };
        let name = mp::as_str(raw).ok_or_else(|| illegal("options.parts: expected type"))?;
        let field_type = FieldType::from_name(name)
            .ok_or_else(|| illegal(format_args!("options.parts: unknown field type '{name}'")))?;
        Ok(KeyPart::new(field, field_type))
    }

    /// `{field = ..., type = ..., is_nullable = ..., collation = ...}`.
    fn map_part(&self, item: &[u8]) -> Result<KeyPart, Raised> {
        let pairs = mp::map_items(item).unwrap_or_default();
        let get = |key: &str| value_of(&pairs, key);
        let field = get("field").ok_or_else(|| illegal("options.parts: field is expected"))?;
        let mut part = self.part(self.field_no(field)?, get("type"))?;
        if let Some(nullable) = get("is_nullable") {
            part.is_nullable = is_true(Some(nullable));
        }
        if let Some(collation) = get("collation") {
            part.collation = match mp::as_str(collation) {
                Some("unicode") => Collation::Unicode,
                Some("unicode_ci") => Collation::UnicodeCi,
                Some("binary") => Collation::Binary,
                _ => return Err(illegal("options.parts: unknown collation")),
            };
        }
        Ok(part)
    }
}

/// Tarantool refuses a field indexed with two types (24), and a part's type the format's
/// field type cannot hold (the format check of the `_index` row).
fn check_part_types(def: &SpaceDef, key_def: &KeyDef) -> Result<(), Raised> {
    for part in &key_def.parts {
        let other = def
            .indexes
            .iter()
            .flat_map(|index| index.key_def.parts.iter())
            .find(|other| other.field_no == part.field_no && other.field_type != part.field_type);
        if let Some(other) = other {
            return Err(raised(
                ErrorCode::ER_INDEX_FIELD_TYPE_MISMATCH,
                format!(
                    "Field {} has type '{}' in one index, but type '{}' in another",
                    part.field_no + 1,
                    other.field_type.name(),
                    part.field_type.name()
                ),
            ));
        }
    }
    Ok(())
}

/// Tarantool's refusal to drop a system space or one of its indexes.
fn refuse_system_drop(space: &SpaceDef) -> Result<(), Raised> {
    if space.id >= USER_SPACE_ID_MIN {
        return Ok(());
    }
    Err(raised(
        ErrorCode::ER_LAST_DROP,
        format!(
            "Can't drop the primary key in a system space, space '{}'",
            space.name
        ),
    ))
}

fn plan_space_drop(space: &SpaceDef) -> Result<SchemaPlan, Raised> {
    refuse_system_drop(space)?;
    Ok(SchemaPlan::Change {
        change: DefinitionChange::Drop(space.id),
        reply: DdlReply::Nothing,
    })
}

fn plan_index_drop(space: SpaceDef, index_id: u32) -> Result<SchemaPlan, Raised> {
    refuse_system_drop(&space)?;
    let mut def = space;
    if index_id == 0 && def.indexes.len() > 1 {
        return Err(raised(
            ErrorCode::ER_DROP_PRIMARY_KEY,
            format!(
                "Can't drop primary key in space '{}' while secondary keys exist",
                def.name
            ),
        ));
    }
    def.indexes.retain(|index| index.id != index_id);
    Ok(SchemaPlan::Change {
        change: DefinitionChange::Redefine(def),
        reply: DdlReply::Nothing,
    })
}

fn plan_rename(engine: &Engine, space: SpaceDef, new_name: &[u8]) -> Result<SchemaPlan, Raised> {
    let name = match mp::as_str(new_name) {
        Some(_) => name_argument(new_name, "space_name")?,
        None => return Err(illegal("space_name should be a string")),
    };
    if space.id < USER_SPACE_ID_MIN {
        return Err(raised(
            ErrorCode::ER_ALTER_SPACE,
            format!("Can't modify space '{}': system space", space.name),
        ));
    }
    if engine
        .space_def_named(name.as_bytes())
        .is_some_and(|other| other.id != space.id)
    {
        return Err(duplicate_in("name", "_space"));
    }
    let mut def = space;
    def.name = name.into();
    Ok(SchemaPlan::Change {
        change: DefinitionChange::Redefine(def),
        reply: DdlReply::Nothing,
    })
}

/// `format(new)`: the space redefined with it (each tuple checked against it); `format()`
/// with no argument is a read, which `box_space` does not answer yet.
fn plan_format(space: SpaceDef, format: &[u8]) -> Result<SchemaPlan, Raised> {
    if mp::is_nil(format) {
        return Err(raised(
            ErrorCode::ER_UNSUPPORTED,
            "tarn does not answer format() without an argument; read _vspace".into(),
        ));
    }
    if space.id < USER_SPACE_ID_MIN {
        return Err(raised(
            ErrorCode::ER_ALTER_SPACE,
            format!("Can't modify space '{}': system space", space.name),
        ));
    }
    let mut def = space;
    def.format = SpaceFormat::new(parse_format(format, &def.name)?);
    Ok(SchemaPlan::Change {
        change: DefinitionChange::Redefine(def),
        reply: DdlReply::Nothing,
    })
}

#[cfg(test)]
mod tests;
