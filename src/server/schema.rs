//! The schema every shard holds: user spaces from the config, and the system spaces that
//! connectors read to resolve names (`_space`, `_vspace`, `_index`, `_vindex`), filled from
//! the same config with Tarantool's tuple formats.
//!
//! Knows the config's types and storage's definitions; nothing of sockets or files.

use crate::config::{self, Config};
use crate::msgpack::{write_array_len, write_str, write_uint};
use crate::placement::Catalog;
use crate::storage::{
    Collation, Engine, FieldDef, FieldType, IndexDef, IndexKind, KeyDef, KeyPart, SpaceDef,
    SpaceFormat,
};

pub const SPACE_ID_SPACE: u32 = 280;
pub const SPACE_ID_VSPACE: u32 = 281;
pub const SPACE_ID_INDEX: u32 = 288;
pub const SPACE_ID_VINDEX: u32 = 289;

/// What reply headers carry as the schema version: the committed version recorded in
/// `schema.bin` (0 until a schema change is made while serving) plus this, so that it is
/// never 0 (a request's 0 means "not checked").
pub const SCHEMA_VERSION_BASE: u64 = 1;

pub fn is_system_space(space_id: u32) -> bool {
    space_id < 512
}

pub fn is_view(space_id: u32) -> bool {
    matches!(space_id, SPACE_ID_VSPACE | SPACE_ID_VINDEX)
}

/// A system space of Tarantool 2.6 (read from its `_space`, 2026-12-02): its id, its name,
/// and whether it is a view (engine `sysview`, which answers writes with 113). tarn has four
/// of them; the others name what a write there would change in Tarantool's schema, and a
/// write to an id below 512 that is none of them is a write to a missing space (36).
/// Tarantool 2.11 adds the view `_vspace_sequence` (341).
pub const TARANTOOL_SYSTEM_SPACES: [(u32, &str, bool); 25] = [
    (257, "_vinyl_deferred_delete", false),
    (272, "_schema", false),
    (276, "_collation", false),
    (277, "_vcollation", true),
    (280, "_space", false),
    (281, "_vspace", true),
    (284, "_sequence", false),
    (285, "_sequence_data", false),
    (286, "_vsequence", true),
    (288, "_index", false),
    (289, "_vindex", true),
    (296, "_func", false),
    (297, "_vfunc", true),
    (304, "_user", false),
    (305, "_vuser", true),
    (312, "_priv", false),
    (313, "_vpriv", true),
    (320, "_cluster", false),
    (328, "_trigger", false),
    (330, "_truncate", false),
    (340, "_space_sequence", false),
    (356, "_fk_constraint", false),
    (364, "_ck_constraint", false),
    (372, "_func_index", false),
    (380, "_session_settings", false),
];

/// The name of Tarantool's system space `space_id`, and whether it is a view.
pub fn tarantool_system_space(space_id: u32) -> Option<(&'static str, bool)> {
    TARANTOOL_SYSTEM_SPACES
        .iter()
        .find(|(id, _, _)| *id == space_id)
        .map(|&(_, name, is_view)| (name, is_view))
}

fn field_type(ty: config::FieldType) -> FieldType {
    FieldType::from_name(ty.name()).unwrap_or(FieldType::Any)
}

fn collation(collation: Option<config::CollationConfig>) -> Collation {
    match collation {
        None => Collation::None,
        Some(config::CollationConfig::Binary) => Collation::Binary,
        Some(config::CollationConfig::Unicode) => Collation::Unicode,
        Some(config::CollationConfig::UnicodeCi) => Collation::UnicodeCi,
    }
}

pub fn space_def(space: &config::SpaceConfig) -> SpaceDef {
    SpaceDef {
        id: space.id,
        name: space.name.as_str().into(),
        format: SpaceFormat::new(
            space
                .format
                .iter()
                .map(|field| FieldDef {
                    name: field.name.as_str().into(),
                    field_type: field_type(field.field_type),
                    is_nullable: field.is_nullable,
                })
                .collect(),
        ),
        indexes: space
            .indexes
            .iter()
            .enumerate()
            .map(|(id, index)| IndexDef {
                id: id as u32,
                name: index.name.as_str().into(),
                kind: match index.index_type {
                    config::IndexType::Tree => IndexKind::Tree,
                    config::IndexType::Hash => IndexKind::Hash,
                },
                unique: index.unique,
                key_def: KeyDef::new(index.parts.iter().map(|part| KeyPart {
                    field_no: part.field_number,
                    field_type: field_type(part.field_type),
                    is_nullable: part.is_nullable,
                    collation: collation(part.collation),
                })),
            })
            .collect(),
        is_sync: space.is_sync,
    }
}

fn tree(id: u32, name: &str, unique: bool, parts: &[(u32, FieldType)]) -> IndexDef {
    IndexDef {
        id,
        name: name.into(),
        kind: IndexKind::Tree,
        unique,
        key_def: KeyDef::new(
            parts
                .iter()
                .map(|&(field_no, ty)| KeyPart::new(field_no, ty)),
        ),
    }
}

fn named(names: &[(&str, FieldType)]) -> SpaceFormat {
    SpaceFormat::new(
        names
            .iter()
            .map(|&(name, ty)| FieldDef::new(name, ty))
            .collect(),
    )
}

fn space_space_def(id: u32, name: &str) -> SpaceDef {
    use FieldType::*;
    SpaceDef {
        id,
        name: name.into(),
        format: named(&[
            ("id", Unsigned),
            ("owner", Unsigned),
            ("name", String),
            ("engine", String),
            ("field_count", Unsigned),
            ("flags", Map),
            ("format", Array),
        ]),
        indexes: vec![
            tree(0, "primary", true, &[(0, Unsigned)]),
            tree(1, "owner", false, &[(1, Unsigned)]),
            tree(2, "name", true, &[(2, String)]),
        ],
        is_sync: false,
    }
}

fn index_space_def(id: u32, name: &str) -> SpaceDef {
    use FieldType::*;
    SpaceDef {
        id,
        name: name.into(),
        format: named(&[
            ("id", Unsigned),
            ("iid", Unsigned),
            ("name", String),
            ("type", String),
            ("opts", Map),
            ("parts", Array),
        ]),
        indexes: vec![
            tree(0, "primary", true, &[(0, Unsigned), (1, Unsigned)]),
            tree(2, "name", true, &[(0, Unsigned), (2, String)]),
        ],
        is_sync: false,
    }
}

/// `[id, owner, name, engine, field_count, flags, format]` as Tarantool stores it.
fn space_tuple(def: &SpaceDef, engine: &str) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_len(&mut out, 7);
    write_uint(&mut out, def.id as u64);
    write_uint(&mut out, 1);
    write_str(&mut out, def.name.as_bytes());
    write_str(&mut out, engine.as_bytes());
    write_uint(&mut out, 0);
    // The flags map as Tarantool 2.6 shows it: `{}`, or `{is_sync = true}` for a sync space.
    if def.is_sync {
        out.push(0x81);
        write_str(&mut out, b"is_sync");
        out.push(0xc3);
    } else {
        out.push(0x80);
    }
    write_array_len(&mut out, def.format.fields.len() as u32);
    for field in &def.format.fields {
        out.push(if field.is_nullable { 0x83 } else { 0x82 });
        write_str(&mut out, b"name");
        write_str(&mut out, field.name.as_bytes());
        write_str(&mut out, b"type");
        write_str(&mut out, field.field_type.name().as_bytes());
        if field.is_nullable {
            write_str(&mut out, b"is_nullable");
            out.push(0xc3);
        }
    }
    out
}

/// How an `_index` row is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IndexRowForm<'a> {
    /// What `_index`/`_vindex` show, as Tarantool stores it: the type as its creator spelled
    /// it, and the parts all in the short `[field, type]` form, or all as maps once any part
    /// needs options (`simplify_index_parts` in 2.6's schema.lua, `try_simplify_index_parts`
    /// in 2.11's, keep the map form for every part then).
    Tarantool { type_name: &'a str },
    /// The schema record of the data directory (`data_dir.rs`), compared byte for byte with
    /// the rows recorded by earlier starts: it must never change, so it keeps the lower-case
    /// type whatever the config's spelling, and the short form for each part without options.
    Record,
}

/// `[space_id, iid, name, type, {unique}, parts]` in `form`.
fn index_tuple(space_id: u32, index: &IndexDef, form: IndexRowForm<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_len(&mut out, 6);
    write_uint(&mut out, space_id as u64);
    write_uint(&mut out, index.id as u64);
    write_str(&mut out, index.name.as_bytes());
    match form {
        IndexRowForm::Tarantool { type_name } => write_str(&mut out, type_name.as_bytes()),
        IndexRowForm::Record => {
            write_str(&mut out, index.kind.name().to_ascii_lowercase().as_bytes())
        }
    }
    out.push(0x81);
    write_str(&mut out, b"unique");
    out.push(if index.unique { 0xc3 } else { 0xc2 });
    write_array_len(&mut out, index.key_def.parts.len() as u32);
    let collation_id = |part: &KeyPart| match part.collation {
        Collation::None => None,
        Collation::Binary => Some(3),
        Collation::Unicode => Some(1),
        Collation::UnicodeCi => Some(2),
    };
    let needs_map = |part: &KeyPart| part.is_nullable || collation_id(part).is_some();
    let all_maps =
        matches!(form, IndexRowForm::Tarantool { .. }) && index.key_def.parts.iter().any(needs_map);
    for part in &index.key_def.parts {
        let collation_id = collation_id(part);
        if !all_maps && !needs_map(part) {
            write_array_len(&mut out, 2);
            write_uint(&mut out, part.field_no as u64);
            write_str(&mut out, part.field_type.name().as_bytes());
            continue;
        }
        let entries = 2 + part.is_nullable as u8 + collation_id.is_some() as u8;
        out.push(0x80 | entries);
        write_str(&mut out, b"field");
        write_uint(&mut out, part.field_no as u64);
        write_str(&mut out, b"type");
        write_str(&mut out, part.field_type.name().as_bytes());
        if part.is_nullable {
            write_str(&mut out, b"is_nullable");
            out.push(0xc3);
        }
        if let Some(id) = collation_id {
            write_str(&mut out, b"collation");
            write_uint(&mut out, id);
        }
    }
    out
}

/// Each user space's definition as Tarantool would store it: its `_space` row followed by
/// its `_index` rows. Comparing these tells whether data written under one config can be
/// read under another.
pub fn user_space_rows(config: &Config) -> Vec<(u32, String, Vec<u8>)> {
    config
        .spaces
        .iter()
        .map(|space| (space.id, space.name.clone(), space_rows(&space_def(space))))
        .collect()
}

/// A space's definition as its recorded rows: the `_space` row, then the `_index` rows, in
/// the record's form (what `schema_change::decode_space_rows` reads back).
pub fn space_rows(def: &SpaceDef) -> Vec<u8> {
    let mut rows = space_tuple(def, "memtx");
    for index in &def.indexes {
        rows.extend_from_slice(&index_tuple(def.id, index, IndexRowForm::Record));
    }
    rows
}

/// The pseudo space id of the entry that holds a schema version (8 bytes LE) among
/// [`write_entries`]'s.
const VERSION_ENTRY_ID: u32 = u32::MAX;

/// Definitions as `schema.bin` and a snapshot's schema section hold them: per space
/// `[id u32 LE][rows length u32 LE][rows]`, the version first as an entry of id
/// `0xffffffff` when it is not 0 (so that a version-0 record reads as before versions).
pub fn write_entries<'r>(
    out: &mut Vec<u8>,
    version: u64,
    spaces: impl IntoIterator<Item = (u32, &'r [u8])>,
) {
    let mut entry = |id: u32, bytes: &[u8]| {
        out.extend_from_slice(&id.to_le_bytes());
        let length = u32::try_from(bytes.len()).expect("a space's rows are far below 4 GiB");
        out.extend_from_slice(&length.to_le_bytes());
        out.extend_from_slice(bytes);
    };
    if version > 0 {
        entry(VERSION_ENTRY_ID, &version.to_le_bytes());
    }
    for (id, rows) in spaces {
        entry(id, rows);
    }
}

/// Each recorded space's id and rows.
pub type RecordedSpaces = Vec<(u32, Vec<u8>)>;

/// [`write_entries`] read back: the version and each space's id and rows; `None` when the
/// bytes are not whole entries.
pub fn read_entries(mut rest: &[u8]) -> Option<(u64, RecordedSpaces)> {
    let mut spaces = Vec::new();
    let mut version = 0;
    while !rest.is_empty() {
        let id = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?);
        let length = u32::from_le_bytes(rest.get(4..8)?.try_into().ok()?) as usize;
        let entry = rest.get(8..8usize.checked_add(length)?)?;
        if id == VERSION_ENTRY_ID {
            version = u64::from_le_bytes(entry.try_into().ok()?);
        } else {
            spaces.push((id, entry.to_vec()));
        }
        rest = &rest[8 + length..];
    }
    Some((version, spaces))
}

/// Every tuple of `engine`'s user spaces with its space id, space by space: what a snapshot
/// holds.
pub fn user_tuples(engine: &Engine) -> impl Iterator<Item = (u32, crate::storage::TupleRef<'_>)> {
    engine
        .spaces()
        .iter()
        .filter(|space| !is_system_space(space.id))
        .flat_map(|space| {
            space.indexes()[0]
                .entries()
                .map(move |(_, tuple)| (space.id, tuple))
        })
}

/// The schema section of a snapshot of `engine`: its user spaces' definitions at `version`.
pub fn snapshot_schema(engine: &Engine, version: u64) -> Vec<u8> {
    let rows: Vec<(u32, Vec<u8>)> = engine
        .space_defs()
        .iter()
        .filter(|def| !is_system_space(def.id))
        .map(|def| (def.id, space_rows(def)))
        .collect();
    let mut out = Vec::new();
    write_entries(
        &mut out,
        version,
        rows.iter().map(|(id, rows)| (*id, &rows[..])),
    );
    out
}

/// Builds one shard's engine: the config's spaces (empty), `made` (spaces made over CALL and
/// recorded, see `data_dir.rs`; one of a config space's id replaces the config's), and the
/// system spaces describing them.
pub fn build_engine_with(
    config: &Config,
    made: &[SpaceDef],
    memory_limit_bytes: u64,
) -> crate::storage::Result<Engine> {
    let mut engine = Engine::new(memory_limit_bytes);
    for def in system_defs() {
        engine.create_space(def)?;
    }
    let from_config = config
        .spaces
        .iter()
        .filter(|space| !made.iter().any(|def| def.id == space.id))
        .map(space_def);
    for def in from_config.chain(made.iter().cloned()) {
        engine.create_space(def)?;
    }
    refresh_system_spaces(&mut engine, config)?;
    Ok(engine)
}

/// [`build_engine_with`] the config's spaces only.
pub fn build_engine(config: &Config, memory_limit_bytes: u64) -> crate::storage::Result<Engine> {
    build_engine_with(config, &[], memory_limit_bytes)
}

fn system_defs() -> [SpaceDef; 4] {
    [
        space_space_def(SPACE_ID_SPACE, "_space"),
        space_space_def(SPACE_ID_VSPACE, "_vspace"),
        index_space_def(SPACE_ID_INDEX, "_index"),
        index_space_def(SPACE_ID_VINDEX, "_vindex"),
    ]
}

/// Refills `_space`, `_vspace`, `_index` and `_vindex` from the spaces `engine` holds: after
/// recovery (which may have made, changed or dropped spaces) and after every schema change.
pub fn refresh_system_spaces(engine: &mut Engine, config: &Config) -> crate::storage::Result<()> {
    let defs = engine.space_defs();
    let space_rows: Vec<Vec<u8>> = defs
        .iter()
        .map(|def| {
            let engine_name = if is_system_space(def.id) {
                "sysview"
            } else {
                "memtx"
            };
            space_tuple(def, engine_name)
        })
        .collect();
    let index_rows: Vec<Vec<u8>> = defs
        .iter()
        .flat_map(|def| def.indexes.iter().map(move |index| (def, index)))
        .map(|(def, index)| {
            let type_name = index_type_name(config, def.id, index);
            index_tuple(
                def.id,
                index,
                IndexRowForm::Tarantool {
                    type_name: &type_name,
                },
            )
        })
        .collect();
    for def in system_defs() {
        let rows = if matches!(def.id, SPACE_ID_SPACE | SPACE_ID_VSPACE) {
            &space_rows
        } else {
            &index_rows
        };
        let space = engine.space_mut(def.id)?;
        space.truncate();
        space.bulk_load(rows.iter().map(Vec::as_slice))?;
    }
    Ok(())
}

/// An index's type as `_index` shows it: as the config spells it for a config space's index
/// (Tarantool keeps its creator's spelling), else in lower case (Tarantool's own system
/// spaces were created with `'tree'`, and so is an index made over CALL without a type).
fn index_type_name(config: &Config, space_id: u32, index: &IndexDef) -> String {
    let configured = config
        .spaces
        .iter()
        .find(|space| space.id == space_id)
        .and_then(|space| space.indexes.get(index.id as usize))
        .filter(|configured| configured.name == *index.name);
    match configured {
        Some(configured) => configured.type_name.clone(),
        None => index.kind.name().to_ascii_lowercase(),
    }
}

/// The placement catalog of the user spaces `engine` holds over `shard_count` shards: a
/// config space is placed as the config says, one made over CALL is spread by primary key.
pub fn catalog_of(engine: &Engine, config: &Config, shard_count: usize) -> Catalog {
    Catalog::new(
        shard_count,
        engine
            .spaces()
            .iter()
            .filter(|space| !is_system_space(space.id))
            .map(|space| {
                let placement = config
                    .spaces
                    .iter()
                    .find(|configured| configured.id == space.id)
                    .map_or(config::Placement::All, |configured| configured.placement);
                let primary_key = space
                    .indexes()
                    .first()
                    .map(|index| index.def.key_def.clone());
                (space.id, placement, primary_key)
            }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::text::msgpack_to_text;

    #[test]
    fn system_spaces_describe_the_shipped_config() {
        let config = Config::from_toml_str(crate::config::SHIPPED_CONFIG_TOML).unwrap();
        let engine = build_engine(&config, 1 << 30).unwrap();
        let vspace = engine.space(SPACE_ID_VSPACE).unwrap();
        let kv = vspace.get(0, &[0x91, 0xcd, 0x02, 0x00]).unwrap().unwrap();
        assert_eq!(
            msgpack_to_text(kv.data()),
            "[512, 1, \"kv\", \"memtx\", 0, {}, [{\"name\": \"id\", \"type\": \"unsigned\"}, {\"name\": \"bucket_id\", \"type\": \"unsigned\"}, {\"name\": \"value\", \"type\": \"string\"}]]"
        );
        let vindex = engine.space(SPACE_ID_VINDEX).unwrap();
        let composite = vindex
            .get(0, &[0x92, 0xcd, 0x02, 0x01, 0x01])
            .unwrap()
            .unwrap();
        assert_eq!(
            msgpack_to_text(composite.data()),
            "[513, 1, \"composite\", \"TREE\", {\"unique\": false}, [[2, \"unsigned\"], [3, \"unsigned\"], [4, \"unsigned\"], [5, \"unsigned\"], [6, \"string\"]]]"
        );
        assert_eq!(engine.space(513).unwrap().indexes().len(), 3);
        let own_primary = vindex
            .get(0, &[0x92, 0xcd, 0x01, 0x21, 0x00])
            .unwrap()
            .unwrap();
        assert_eq!(
            msgpack_to_text(own_primary.data()),
            "[289, 0, \"primary\", \"tree\", {\"unique\": true}, [[0, \"unsigned\"], [1, \"unsigned\"]]]"
        );
    }

    const MIXED_PARTS: &str = r#"
[[space]]
name = "t"
id = 700
format = [
    { name = "id", type = "unsigned" },
    { name = "ns", type = "string", is_nullable = true },
    { name = "b", type = "boolean" },
]
[[space.index]]
name = "primary"
parts = ["id"]
[[space.index]]
name = "by_ns_b"
type = "Tree"
unique = false
parts = [{ field = "ns", is_nullable = true }, "b"]
"#;

    /// What Tarantool 2.6 stored for `create_index('by_ns_b', {type = 'Tree', parts =
    /// {{'ns', 'string', is_nullable = true}, {'b', 'boolean'}}})`, and `'tree'` for an index
    /// created without a type (docs/tarantool-reference.md, "`_index` rows").
    #[test]
    fn index_rows_spell_the_type_as_configured_and_keep_all_parts_maps() {
        let config = Config::from_toml_str(MIXED_PARTS).unwrap();
        let engine = build_engine(&config, 1 << 30).unwrap();
        let vindex = engine.space(SPACE_ID_VINDEX).unwrap();
        let row = |iid: u8| {
            let key = [0x92, 0xcd, 0x02, 0xbc, iid];
            msgpack_to_text(vindex.get(0, &key).unwrap().unwrap().data())
        };
        assert_eq!(
            row(0),
            "[700, 0, \"primary\", \"tree\", {\"unique\": true}, [[0, \"unsigned\"]]]"
        );
        assert_eq!(
            row(1),
            "[700, 1, \"by_ns_b\", \"Tree\", {\"unique\": false}, [{\"field\": 1, \"type\": \"string\", \"is_nullable\": true}, {\"field\": 2, \"type\": \"boolean\"}]]"
        );
    }

    /// The data directory's schema record is compared byte for byte with what earlier starts
    /// wrote: its form must not follow the `_index` rows' changes.
    #[test]
    fn the_schema_record_keeps_its_form() {
        let config = Config::from_toml_str(MIXED_PARTS).unwrap();
        let rows = user_space_rows(&config);
        let mut rest = &rows[0].2[..];
        let mut texts = Vec::new();
        while !rest.is_empty() {
            texts.push(msgpack_to_text(
                crate::msgpack::take_value(&mut rest).unwrap(),
            ));
        }
        assert_eq!(
            texts[1..],
            [
                "[700, 0, \"primary\", \"tree\", {\"unique\": true}, [[0, \"unsigned\"]]]",
                "[700, 1, \"by_ns_b\", \"tree\", {\"unique\": false}, [{\"field\": 1, \"type\": \"string\", \"is_nullable\": true}, [2, \"boolean\"]]]",
            ]
        );
    }
}
