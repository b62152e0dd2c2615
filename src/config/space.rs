//! Spaces: id, name, placement across shards, format and indexes, checked as a whole.
//!
//! Owns the rules that need the whole space or all spaces: ids ≥ 512 and unique, names unique,
//! at least one index, the primary index (the first) unique and not nullable, index names
//! unique, and unique secondary indexes only on single-shard spaces. Knows nothing of storage,
//! the protocol or the system spaces the server builds from these definitions.

use super::error::ConfigError;
use super::field::{resolve_format, FieldConfig};
use super::file::RawSpace;
use super::index::{resolve_index, IndexConfig};

/// The smallest id of a user space; ids below are Tarantool's system spaces.
pub const SPACE_ID_MIN: u32 = 512;
/// The largest space id Tarantool accepts (`BOX_SPACE_MAX`).
pub const SPACE_ID_MAX: u32 = i32::MAX as u32;

/// Where a space's rows live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Placement {
    /// `shard = "all"` (the default): rows are spread over every shard by primary key. Point
    /// requests touch one shard; secondary-index selects fan out and merge.
    All,
    /// `shard = "single"`: the whole space lives on shard 0, so every index, including a unique
    /// secondary one, sees all rows.
    Single,
}

/// One space, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceConfig {
    pub id: u32,
    pub name: String,
    pub placement: Placement,
    /// Field number = position (0-based).
    pub format: Vec<FieldConfig>,
    /// Index id = position; index 0 is the primary index. Never empty.
    pub indexes: Vec<IndexConfig>,
    /// Tarantool's `is_sync`: a write is acknowledged once a quorum of instances has it
    /// (`docs/replication.md`, Synchronous replication).
    pub is_sync: bool,
}

impl SpaceConfig {
    /// The 0-based number of the field called `name`, if the format has one.
    pub fn field_number(&self, name: &str) -> Option<u32> {
        self.format
            .iter()
            .position(|field| field.name == name)
            .map(|position| u32::try_from(position).expect("a format has fewer than 2^32 fields"))
    }

    /// The primary index.
    pub fn primary_index(&self) -> &IndexConfig {
        &self.indexes[0]
    }
}

/// Resolves every space and checks ids and names across spaces.
pub(crate) fn resolve_spaces(raw_spaces: &[RawSpace]) -> Result<Vec<SpaceConfig>, ConfigError> {
    let mut spaces: Vec<SpaceConfig> = Vec::with_capacity(raw_spaces.len());
    for (position, raw) in raw_spaces.iter().enumerate() {
        let path = format!("space[{position}] {:?}", raw.name);
        let space = resolve_space(raw, &path)?;
        if let Some(earlier) = spaces.iter().position(|other| other.id == space.id) {
            return Err(ConfigError::invalid(
                path,
                format!("id {} is already used by space[{earlier}]", space.id),
            ));
        }
        if let Some(earlier) = spaces.iter().position(|other| other.name == space.name) {
            return Err(ConfigError::invalid(
                path,
                format!("name is already used by space[{earlier}]"),
            ));
        }
        spaces.push(space);
    }
    Ok(spaces)
}

fn resolve_space(raw: &RawSpace, path: &str) -> Result<SpaceConfig, ConfigError> {
    check_space_name(&raw.name, path)?;
    let id = check_space_id(raw.id, path)?;
    let placement = parse_placement(&raw.shard, path)?;
    let format = resolve_format(&raw.format, path)?;
    if raw.indexes.is_empty() {
        return Err(ConfigError::invalid(
            path,
            "a space needs at least one index (the first is the primary index)",
        ));
    }
    let mut indexes: Vec<IndexConfig> = Vec::with_capacity(raw.indexes.len());
    for (position, raw_index) in raw.indexes.iter().enumerate() {
        let index_path = if raw_index.name.is_empty() {
            format!("{path}: index[{position}]")
        } else {
            format!("{path}: index {:?}", raw_index.name)
        };
        if raw_index.name.is_empty() {
            return Err(ConfigError::invalid(
                index_path,
                "an index name must not be empty",
            ));
        }
        if let Some(earlier) = indexes
            .iter()
            .position(|index| index.name == raw_index.name)
        {
            return Err(ConfigError::invalid(
                index_path,
                format!("index name is already used by index[{earlier}] of this space"),
            ));
        }
        let index = resolve_index(raw_index, &format, &index_path)?;
        if position == 0 {
            check_primary_index(&index, &format, &index_path)?;
        } else {
            check_secondary_index(&index, placement, &index_path)?;
        }
        indexes.push(index);
    }
    Ok(SpaceConfig {
        id,
        name: raw.name.clone(),
        placement,
        format,
        indexes,
        is_sync: raw.is_sync,
    })
}

fn check_space_name(name: &str, path: &str) -> Result<(), ConfigError> {
    if name.is_empty() {
        return Err(ConfigError::invalid(path, "a space name must not be empty"));
    }
    if name.starts_with('_') {
        return Err(ConfigError::invalid(
            path,
            "names starting with \"_\" are reserved for system spaces",
        ));
    }
    Ok(())
}

fn check_space_id(id: u64, path: &str) -> Result<u32, ConfigError> {
    u32::try_from(id)
        .ok()
        .filter(|id| (SPACE_ID_MIN..=SPACE_ID_MAX).contains(id))
        .ok_or_else(|| {
            ConfigError::invalid(
                path,
                format!(
                    "id {id} is outside {SPACE_ID_MIN}..={SPACE_ID_MAX} (ids below \
                     {SPACE_ID_MIN} belong to system spaces)"
                ),
            )
        })
}

fn parse_placement(shard: &str, path: &str) -> Result<Placement, ConfigError> {
    match shard {
        "all" => Ok(Placement::All),
        "single" => Ok(Placement::Single),
        other => Err(ConfigError::invalid(
            path,
            format!("shard {other:?} is not one of \"all\", \"single\""),
        )),
    }
}

/// The primary index identifies a row and decides its shard: unique, never nil.
fn check_primary_index(
    index: &IndexConfig,
    format: &[FieldConfig],
    path: &str,
) -> Result<(), ConfigError> {
    if !index.unique {
        return Err(ConfigError::invalid(
            path,
            "the first index is the primary index and must be unique",
        ));
    }
    if let Some(part) = index.parts.iter().find(|part| part.is_nullable) {
        let field = &format[part.field_number as usize];
        return Err(ConfigError::invalid(
            path,
            format!(
                "the first index is the primary index and must not be nullable, but field {:?} \
                 is nullable",
                field.name
            ),
        ));
    }
    Ok(())
}

/// A unique secondary index on a spread space would need every shard to agree on every
/// insert; tarn does not offer that.
fn check_secondary_index(
    index: &IndexConfig,
    placement: Placement,
    path: &str,
) -> Result<(), ConfigError> {
    if index.unique && placement == Placement::All {
        return Err(ConfigError::invalid(
            path,
            "a unique secondary index needs shard = \"single\": with shard = \"all\" rows are \
             spread over shards by primary key and uniqueness across shards is not offered; \
             set unique = false or shard = \"single\"",
        ));
    }
    Ok(())
}
