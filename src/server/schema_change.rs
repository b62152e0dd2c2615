//! Schema changes at start-up: what differs between the spaces a data directory's data was
//! written with (its schema record, Tarantool's `_space` and `_index` rows, see
//! `data_dir.rs`) and the config's, and whether tarn can make the change.
//!
//! A changed space is recovered under its recorded definition, then put under the config's
//! ([`crate::storage::Engine::redefine_space`]): every tuple is checked against a format
//! whose rules changed, and each index the config adds is built over the recovered data by
//! one sort (the kept ones stay), so a change holds exactly when the data as it is now
//! satisfies it (a new unique index without duplicates, a narrower type no tuple violates),
//! whatever its history. A recorded space missing from the config
//! is refused before recovery unless the operator starts with `--drop-missing-spaces`: it is
//! then recovered as recorded and dropped. A new primary key is refused (rows are placed on
//! shards by it).
//!
//! Owns the decoding of recorded rows, the wording of changes and refusals, and making a
//! change on a recovered shard's engine; knows nothing of files, recovery or executors.

use crate::msgpack::{read_value, Value};
use crate::server::ServerError;
use crate::storage::text::msgpack_to_text;
use crate::storage::Engine;
use crate::storage::{
    Collation, FieldDef, FieldType, IndexDef, IndexKind, KeyDef, KeyPart, SpaceDef, SpaceFormat,
};
use std::time::Instant;

/// A recorded space that the config defines otherwise: recovered as `recorded`, then
/// rebuilt as `wanted`, or dropped where that is `None`.
#[derive(Debug, Clone)]
pub struct SpaceChange {
    pub recorded: SpaceDef,
    pub wanted: Option<SpaceDef>,
    /// What differs, one phrase each ("index 2 'email' added", ...).
    pub what: Vec<String>,
}

impl SpaceChange {
    /// "space 513 'customers' (index 3 'by_name' added, field 8 'note' added)".
    pub fn describe(&self) -> String {
        let space = self.wanted.as_ref().unwrap_or(&self.recorded);
        format!(
            "space {} '{}' ({})",
            space.id,
            space.name,
            self.what.join(", ")
        )
    }
}

/// The changes from the recorded spaces (id and rows) to the config's (id, name, rows and
/// definition), or why tarn refuses them; `drop_missing`: the operator's word that recorded
/// spaces missing from the config are dropped.
pub fn plan(
    recorded: &[(u32, Vec<u8>)],
    config: &[(u32, String, Vec<u8>, SpaceDef)],
    drop_missing: bool,
) -> Result<Vec<SpaceChange>, String> {
    let mut changes = Vec::new();
    for (id, on_disk) in recorded {
        let decode = || {
            decode_space_rows(on_disk)
                .map_err(|reason| format!("the record of space {id} is damaged: {reason}"))
        };
        let Some((_, name, rows, wanted)) = config.iter().find(|(config_id, ..)| config_id == id)
        else {
            if !drop_missing {
                return Err(format!(
                    "space {id} holds data on disk but is not in the config (on disk: {}): put \
                     the space back in the config, or start once with --drop-missing-spaces to \
                     drop its data",
                    describe_rows(on_disk)
                ));
            }
            changes.push(SpaceChange {
                recorded: decode()?,
                wanted: None,
                what: vec!["dropped: not in the config, --drop-missing-spaces".into()],
            });
            continue;
        };
        if rows == on_disk {
            continue;
        }
        let recorded = decode()?;
        if recorded.indexes.first().map(index_shape) != wanted.indexes.first().map(index_shape) {
            return Err(format!(
                "space {id} '{name}' changes its primary key: rows are placed on shards by \
                 it, so tarn cannot change it in place; keep the recorded primary index (on \
                 disk: {}, in the config: {})",
                describe_rows(on_disk),
                describe_rows(rows)
            ));
        }
        let what = differences(&recorded, wanted);
        if what.is_empty() {
            // The same definition written otherwise (by another version's encoder): nothing
            // to rebuild; the config's rows are recorded.
            continue;
        }
        changes.push(SpaceChange {
            recorded,
            wanted: Some(wanted.clone()),
            what,
        });
    }
    Ok(changes)
}

/// Makes each change on one shard's `engine`, recovered under the recorded definitions:
/// the first the data does not allow refuses the start.
pub fn apply(
    changes: &[SpaceChange],
    shard_id: usize,
    engine: &mut Engine,
) -> Result<(), ServerError> {
    for change in changes {
        let started = Instant::now();
        let id = change.recorded.id;
        let tuples = engine.space(id).map_or(0, |space| space.len());
        let made = match &change.wanted {
            Some(wanted) => {
                tracing::info!(
                    shard = shard_id,
                    space = id,
                    tuples,
                    "schema change: checking the recovered tuples, building what is added"
                );
                engine.redefine_space(wanted.clone())
            }
            None => {
                tracing::info!(
                    shard = shard_id,
                    space = id,
                    tuples,
                    "schema change: dropping the space and its recovered tuples"
                );
                engine.drop_space(id)
            }
        };
        made.map_err(|error| ServerError::SchemaChange {
            shard_id,
            change: change.describe(),
            reason: error.to_string(),
        })?;
        tracing::info!(
            shard = shard_id,
            space = id,
            tuples,
            seconds = format_args!("{:.3}", started.elapsed().as_secs_f64()),
            "schema change made: {}",
            change.describe()
        );
    }
    Ok(())
}

/// What makes an index order and constrain its entries: its kind, uniqueness and parts.
fn index_shape(index: &IndexDef) -> (IndexKind, bool, &KeyDef) {
    (index.kind, index.unique, &index.key_def)
}

/// One phrase per difference between two definitions of a space.
fn differences(recorded: &SpaceDef, wanted: &SpaceDef) -> Vec<String> {
    let mut what = Vec::new();
    if recorded.name != wanted.name {
        what.push(format!("renamed from '{}'", recorded.name));
    }
    if recorded.is_sync != wanted.is_sync {
        what.push(format!("is_sync set to {}", wanted.is_sync));
    }
    let (old_fields, new_fields) = (&recorded.format.fields, &wanted.format.fields);
    for number in 0..old_fields.len().max(new_fields.len()) {
        let label = |field: &FieldDef| format!("field {} '{}'", number + 1, field.name);
        match (old_fields.get(number), new_fields.get(number)) {
            (Some(old), None) => what.push(format!("{} removed from the format", label(old))),
            (None, Some(new)) => what.push(format!("{} added as {}", label(new), field_text(new))),
            (Some(old), Some(new)) if old != new => what.push(format!(
                "{} from {} to {}",
                label(new),
                field_text(old),
                field_text(new)
            )),
            _ => {}
        }
    }
    for old in &recorded.indexes {
        match wanted.indexes.iter().find(|new| new.id == old.id) {
            None => what.push(format!("index {} '{}' dropped", old.id, old.name)),
            Some(new) if index_shape(new) != index_shape(old) => what.push(format!(
                "index {} '{}' rebuilt as {}",
                new.id,
                new.name,
                index_text(new)
            )),
            Some(new) if new.name != old.name => what.push(format!(
                "index {} renamed from '{}' to '{}'",
                new.id, old.name, new.name
            )),
            Some(_) => {}
        }
    }
    for new in &wanted.indexes {
        if !recorded.indexes.iter().any(|old| old.id == new.id) {
            what.push(format!(
                "index {} '{}' added as {}",
                new.id,
                new.name,
                index_text(new)
            ));
        }
    }
    what
}

fn field_text(field: &FieldDef) -> String {
    match field.is_nullable {
        true => format!("nullable {}", field.field_type.name()),
        false => field.field_type.name().to_string(),
    }
}

fn index_text(index: &IndexDef) -> String {
    let parts: Vec<String> = index
        .key_def
        .parts
        .iter()
        .map(|part| format!("{} {}", part.field_no + 1, part.field_type.name()))
        .collect();
    let unique = if index.unique { "unique" } else { "non-unique" };
    format!(
        "{unique} {} on [{}]",
        index.kind.name().to_ascii_lowercase(),
        parts.join(", ")
    )
}

/// The `_space` and `_index` rows in Tarantool's text form.
pub fn describe_rows(rows: &[u8]) -> String {
    let mut rest = rows;
    let mut parts = Vec::new();
    while !rest.is_empty() {
        let Ok(row) = crate::msgpack::take_value(&mut rest) else {
            break;
        };
        parts.push(msgpack_to_text(row));
    }
    parts.join(" ")
}

// ---------------------------------------------------------------------------------------------
// Recorded rows

/// The definition a space's recorded rows give: its `_space` row
/// `[id, owner, name, engine, field_count, flags, format]` and then its `_index` rows
/// `[space_id, iid, name, type, {unique}, parts]`, as `schema::user_space_rows` writes them.
pub fn decode_space_rows(rows: &[u8]) -> Result<SpaceDef, String> {
    let mut rest = rows;
    let reader = &mut rest;
    expect_array(reader, 7, "_space row")?;
    let id = read_u32(reader, "space id")?;
    read_uint(reader, "owner")?;
    let name = read_text(reader, "space name")?.into();
    read_text(reader, "engine")?;
    read_uint(reader, "field count")?;
    let is_sync = read_space_flags(reader)?;
    let field_count = read_array(reader, "format")?;
    let fields = (0..field_count)
        .map(|_| read_field(reader))
        .collect::<Result<Vec<FieldDef>, String>>()?;
    let mut indexes = Vec::new();
    while !reader.is_empty() {
        let index = read_index(reader)?;
        if index.0 != id {
            return Err(format!(
                "an index row of space {} among space {id}'s",
                index.0
            ));
        }
        indexes.push(index.1);
    }
    Ok(SpaceDef {
        id,
        name,
        format: SpaceFormat::new(fields),
        indexes,
        is_sync,
    })
}

/// The `_space` row's flags map: `is_sync` is the one tarn keeps; other keys are skipped.
fn read_space_flags(reader: &mut &[u8]) -> Result<bool, String> {
    let pairs = read_map(reader, "space flags")?;
    let mut is_sync = false;
    for _ in 0..pairs {
        match read_text(reader, "space flag")? {
            "is_sync" => is_sync = read_bool(reader, "is_sync")?,
            _ => skip(reader)?,
        }
    }
    Ok(is_sync)
}

/// One format entry: `{name, type[, is_nullable]}`.
fn read_field(reader: &mut &[u8]) -> Result<FieldDef, String> {
    let pairs = read_map(reader, "format field")?;
    let (mut name, mut field_type, mut is_nullable) = (None, None, false);
    for _ in 0..pairs {
        match read_text(reader, "format key")? {
            "name" => name = Some(read_text(reader, "field name")?),
            "type" => field_type = Some(read_field_type(reader)?),
            "is_nullable" => is_nullable = read_bool(reader, "is_nullable")?,
            other => return Err(format!("unknown format key '{other}'")),
        }
    }
    let (Some(name), Some(field_type)) = (name, field_type) else {
        return Err("a format field without a name or a type".into());
    };
    let mut field = FieldDef::new(name, field_type);
    field.is_nullable = is_nullable;
    Ok(field)
}

/// One `_index` row: its space id and the index.
fn read_index(reader: &mut &[u8]) -> Result<(u32, IndexDef), String> {
    expect_array(reader, 6, "_index row")?;
    let space_id = read_u32(reader, "index's space id")?;
    let id = read_u32(reader, "index id")?;
    let name = read_text(reader, "index name")?.into();
    let kind = match read_text(reader, "index type")? {
        "tree" => IndexKind::Tree,
        "hash" => IndexKind::Hash,
        other => return Err(format!("unknown index type '{other}'")),
    };
    let mut unique = false;
    for _ in 0..read_map(reader, "index options")? {
        match read_text(reader, "index option")? {
            "unique" => unique = read_bool(reader, "unique")?,
            other => return Err(format!("unknown index option '{other}'")),
        }
    }
    let part_count = read_array(reader, "index parts")?;
    let parts = (0..part_count)
        .map(|_| read_part(reader))
        .collect::<Result<Vec<KeyPart>, String>>()?;
    let index = IndexDef {
        id,
        name,
        kind,
        unique,
        key_def: KeyDef::new(parts),
    };
    Ok((space_id, index))
}

/// One index part: `[field, type]` or `{field, type[, is_nullable][, collation]}`.
fn read_part(reader: &mut &[u8]) -> Result<KeyPart, String> {
    match read_value(reader).map_err(|error| error.to_string())? {
        Value::Array(2) => {
            let field_no = read_u32(reader, "part field")?;
            Ok(KeyPart::new(field_no, read_field_type(reader)?))
        }
        Value::Map(pairs) => {
            let (mut field_no, mut field_type) = (None, None);
            let (mut is_nullable, mut collation) = (false, Collation::None);
            for _ in 0..pairs {
                match read_text(reader, "part key")? {
                    "field" => field_no = Some(read_u32(reader, "part field")?),
                    "type" => field_type = Some(read_field_type(reader)?),
                    "is_nullable" => is_nullable = read_bool(reader, "is_nullable")?,
                    "collation" => collation = collation_of(read_uint(reader, "collation")?)?,
                    other => return Err(format!("unknown part key '{other}'")),
                }
            }
            let (Some(field_no), Some(field_type)) = (field_no, field_type) else {
                return Err("an index part without a field or a type".into());
            };
            let mut part = KeyPart::new(field_no, field_type);
            part.is_nullable = is_nullable;
            part.collation = collation;
            Ok(part)
        }
        other => Err(format!("an index part is {other:?}")),
    }
}

/// The collation of Tarantool's id, as `schema::index_tuple` writes it.
fn collation_of(id: u64) -> Result<Collation, String> {
    match id {
        1 => Ok(Collation::Unicode),
        2 => Ok(Collation::UnicodeCi),
        3 => Ok(Collation::Binary),
        other => Err(format!("unknown collation id {other}")),
    }
}

fn read_field_type(reader: &mut &[u8]) -> Result<FieldType, String> {
    let name = read_text(reader, "field type")?;
    FieldType::from_name(name).ok_or_else(|| format!("unknown field type '{name}'"))
}

fn read_uint(reader: &mut &[u8], what: &str) -> Result<u64, String> {
    match read_value(reader).map_err(|error| error.to_string())? {
        Value::Uint(value) => Ok(value),
        other => Err(format!("{what} is {other:?}, not an unsigned integer")),
    }
}

fn read_u32(reader: &mut &[u8], what: &str) -> Result<u32, String> {
    let value = read_uint(reader, what)?;
    u32::try_from(value).map_err(|_| format!("{what} {value} is over 32 bits"))
}

fn read_text<'a>(reader: &mut &'a [u8], what: &str) -> Result<&'a str, String> {
    match read_value(reader).map_err(|error| error.to_string())? {
        Value::Str(bytes) => std::str::from_utf8(bytes).map_err(|_| format!("{what} is not UTF-8")),
        other => Err(format!("{what} is {other:?}, not a string")),
    }
}

fn read_bool(reader: &mut &[u8], what: &str) -> Result<bool, String> {
    match read_value(reader).map_err(|error| error.to_string())? {
        Value::Bool(value) => Ok(value),
        other => Err(format!("{what} is {other:?}, not a boolean")),
    }
}

fn read_array(reader: &mut &[u8], what: &str) -> Result<u32, String> {
    match read_value(reader).map_err(|error| error.to_string())? {
        Value::Array(len) => Ok(len),
        other => Err(format!("{what} is {other:?}, not an array")),
    }
}

fn read_map(reader: &mut &[u8], what: &str) -> Result<u32, String> {
    match read_value(reader).map_err(|error| error.to_string())? {
        Value::Map(pairs) => Ok(pairs),
        other => Err(format!("{what} is {other:?}, not a map")),
    }
}

fn expect_array(reader: &mut &[u8], len: u32, what: &str) -> Result<(), String> {
    match read_array(reader, what)? {
        found if found == len => Ok(()),
        found => Err(format!("{what} has {found} fields, not {len}")),
    }
}

fn skip(reader: &mut &[u8]) -> Result<(), String> {
    crate::msgpack::skip_value(reader).map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests;
