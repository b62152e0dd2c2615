//! The layout record, `layout.toml`: its TOML form with a checksum line, read and written
//! crash-safely.

use super::directory::sync_dir;
use super::{
    io_error, Layout, LayoutError, Result, CHECKSUM_PREFIX, LAYOUT_FILE, LAYOUT_FILE_IN_PROGRESS,
    LAYOUT_VERSION, PLACEMENT_FUNCTION,
};
use crate::config::Placement;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// The record as TOML: `version`, `generation`, `shards`, `placement`, then one `[[space]]`
/// table per user space (`id`, `shard` = "all" | "single").
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordFile {
    version: u32,
    generation: u64,
    shards: u32,
    placement: String,
    #[serde(default)]
    space: Vec<RecordSpace>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordSpace {
    id: u32,
    shard: String,
}

const RECORD_HEADER: &str = "\
# The layout of this data directory: over how many shards its rows are spread, and how.
# Written by tarn at start-up (see docs/format.md); do not edit. A start with another shard
# count moves every row to its new shard and rewrites this file.
";

pub(super) fn encode_record(layout: &Layout) -> String {
    let record = RecordFile {
        version: LAYOUT_VERSION,
        generation: layout.generation,
        shards: u32::try_from(layout.shard_count).expect("the config caps shards at 1024"),
        placement: PLACEMENT_FUNCTION.into(),
        space: layout
            .spaces
            .iter()
            .map(|(&id, &placement)| RecordSpace {
                id,
                shard: match placement {
                    Placement::All => "all",
                    Placement::Single => "single",
                }
                .into(),
            })
            .collect(),
    };
    let mut text = format!(
        "{RECORD_HEADER}{}",
        toml::to_string(&record).expect("the record serializes")
    );
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let checksum = crc32c::crc32c(text.as_bytes());
    format!("{text}{CHECKSUM_PREFIX}{checksum:08x}\n")
}

/// The layout in a record's text; `Err` holds why it is not one.
pub(super) fn decode_record(text: &str, path: &Path) -> Result<Layout> {
    let damaged = |reason: String| LayoutError::Damaged {
        path: path.to_path_buf(),
        reason,
    };
    let body_end = text
        .trim_end_matches('\n')
        .rfind('\n')
        .map_or(0, |at| at + 1);
    let (body, checksum_line) = text.split_at(body_end);
    let checksum = checksum_line
        .trim_end_matches('\n')
        .strip_prefix(CHECKSUM_PREFIX)
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .ok_or_else(|| damaged("its last line is not its checksum".into()))?;
    if crc32c::crc32c(body.as_bytes()) != checksum {
        return Err(damaged("the checksum does not match".into()));
    }
    let table: toml::Table = toml::from_str(body).map_err(|error| damaged(error.to_string()))?;
    match table.get("version").and_then(toml::Value::as_integer) {
        Some(version) if version == i64::from(LAYOUT_VERSION) => {}
        Some(version) if version > i64::from(LAYOUT_VERSION) => {
            return Err(LayoutError::NewerVersion {
                path: path.to_path_buf(),
                found: version,
            })
        }
        _ => return Err(damaged("no known version".into())),
    }
    let record: RecordFile = toml::from_str(body).map_err(|error| damaged(error.to_string()))?;
    if record.placement != PLACEMENT_FUNCTION {
        return Err(LayoutError::UnknownPlacement {
            path: path.to_path_buf(),
            found: record.placement,
        });
    }
    if record.shards == 0 {
        return Err(damaged("it records 0 shards".into()));
    }
    let mut spaces = BTreeMap::new();
    for space in record.space {
        let placement = match space.shard.as_str() {
            "all" => Placement::All,
            "single" => Placement::Single,
            other => return Err(damaged(format!("space {}: shard = {other:?}", space.id))),
        };
        spaces.insert(space.id, placement);
    }
    Ok(Layout {
        generation: record.generation,
        shard_count: record.shards as usize,
        spaces,
    })
}

/// The recorded layout; `None` when the directory has no record.
pub(super) fn read_record(data_dir: &Path) -> Result<Option<Layout>> {
    let path = data_dir.join(LAYOUT_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io_error("reading", &path)(error)),
    };
    let text = String::from_utf8(bytes).map_err(|_| LayoutError::Damaged {
        path: path.clone(),
        reason: "it is not UTF-8 text".into(),
    })?;
    decode_record(&text, &path).map(Some)
}

/// Writes the record to a temporary name, fsyncs it, renames it over the old one and syncs
/// the directory: a crash leaves the old record or the new, never a mix.
pub(super) fn write_record(data_dir: &Path, layout: &Layout) -> Result<()> {
    let temporary = data_dir.join(LAYOUT_FILE_IN_PROGRESS);
    let path = data_dir.join(LAYOUT_FILE);
    let mut file = std::fs::File::create(&temporary).map_err(io_error("creating", &temporary))?;
    file.write_all(encode_record(layout).as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io_error("writing", &temporary))?;
    drop(file);
    std::fs::rename(&temporary, &path).map_err(io_error("renaming into place", &temporary))?;
    sync_dir(data_dir)?;
    tracing::info!(
        shards = layout.shard_count,
        generation = layout.generation,
        record = %path.display(),
        "layout recorded"
    );
    Ok(())
}
