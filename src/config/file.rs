//! The raw shape of `conf/tarn.toml`, exactly as serde reads it.
//!
//! Owns key names, defaults and the rejection of unknown keys (`deny_unknown_fields`). Values
//! stay as the user wrote them (strings, numbers); checking and resolving them is the job of
//! the other modules of this layer. Nothing outside `config` sees these types.

use std::fmt;
use std::path::PathBuf;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

/// The whole file. Every top-level key is optional; the defaults are those of the shipped file
/// except `[guest]`, which grants nothing by default.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    #[serde(default = "default_listen")]
    pub listen: String,
    #[serde(default)]
    pub shards: u64,
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    #[serde(default = "default_memory")]
    pub memory: RawSize,
    #[serde(default = "default_max_connections")]
    pub max_connections: u64,
    #[serde(default = "default_max_packet_size")]
    pub max_packet_size: RawSize,
    #[serde(default = "default_log_level")]
    pub log_level: String,
    #[serde(default = "default_wal_mode")]
    pub wal_mode: String,
    #[serde(default = "default_wal_max_file_size")]
    pub wal_max_file_size: RawSize,
    #[serde(default = "default_checkpoint_interval")]
    pub checkpoint_interval: u64,
    #[serde(default = "default_checkpoint_count")]
    pub checkpoint_count: u64,
    #[serde(default = "default_bucket_count")]
    pub bucket_count: u64,
    #[serde(default = "default_idle_poll_us")]
    pub idle_poll_us: u64,
    #[serde(default = "default_sched_slice_us")]
    pub sched_slice_us: u64,
    #[serde(default)]
    pub read_only: bool,
    #[serde(default)]
    pub replication: Vec<String>,
    #[serde(default = "default_wal_cleanup_delay")]
    pub wal_cleanup_delay: u64,
    #[serde(default = "default_replication_synchro_quorum")]
    pub replication_synchro_quorum: u64,
    #[serde(default = "default_replication_synchro_timeout")]
    pub replication_synchro_timeout: f64,
    /// "" = no Prometheus endpoint.
    #[serde(default)]
    pub metrics_listen: String,
    /// "" = the `listen` address.
    #[serde(default)]
    pub metrics_alias: String,
    #[serde(default)]
    pub guest: RawGuest,
    #[serde(default, rename = "user")]
    pub users: Vec<RawUser>,
    #[serde(default, rename = "space")]
    pub spaces: Vec<RawSpace>,
}

fn default_listen() -> String {
    "127.0.0.1:3301".to_owned()
}
fn default_data_dir() -> PathBuf {
    PathBuf::from("data")
}
fn default_memory() -> RawSize {
    RawSize::Text("1GiB".to_owned())
}
fn default_max_connections() -> u64 {
    10_000
}
fn default_max_packet_size() -> RawSize {
    RawSize::Text("16MiB".to_owned())
}
fn default_log_level() -> String {
    "info".to_owned()
}
fn default_wal_mode() -> String {
    // Tarantool's default too: an acknowledged write survives a crash of the process.
    "write".to_owned()
}
fn default_wal_cleanup_delay() -> u64 {
    // Tarantool's default: four hours.
    14_400
}
fn default_replication_synchro_quorum() -> u64 {
    // Tarantool's default: the master alone, so a sync space waits for nobody.
    1
}
fn default_replication_synchro_timeout() -> f64 {
    // Tarantool's default, in seconds.
    5.0
}
fn default_wal_max_file_size() -> RawSize {
    RawSize::Text("64MiB".to_owned())
}
fn default_checkpoint_interval() -> u64 {
    3600
}
fn default_checkpoint_count() -> u64 {
    2
}
fn default_bucket_count() -> u64 {
    3000
}
fn default_idle_poll_us() -> u64 {
    200
}
fn default_sched_slice_us() -> u64 {
    100
}
fn default_true() -> bool {
    true
}

/// `[guest]`: what a connection that never authenticates may do.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGuest {
    #[serde(default)]
    pub grants: Vec<String>,
}

/// One `[[user]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUser {
    pub name: String,
    pub password: String,
    #[serde(default)]
    pub grants: Vec<String>,
}

/// One `[[space]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSpace {
    pub name: String,
    pub id: u64,
    #[serde(default = "default_shard")]
    pub shard: String,
    #[serde(default)]
    pub format: Vec<RawField>,
    #[serde(default, rename = "index")]
    pub indexes: Vec<RawIndex>,
    /// Tarantool's space option: writes wait for `replication_synchro_quorum`.
    #[serde(default)]
    pub is_sync: bool,
}

fn default_shard() -> String {
    "all".to_owned()
}

/// One entry of a space's `format`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawField {
    pub name: String,
    #[serde(rename = "type")]
    pub field_type: String,
    #[serde(default)]
    pub is_nullable: bool,
}

/// One `[[space.index]]`. `unique` defaults to true, as in Tarantool.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawIndex {
    pub name: String,
    #[serde(rename = "type", default = "default_index_type")]
    pub index_type: String,
    #[serde(default = "default_true")]
    pub unique: bool,
    pub parts: Vec<RawPart>,
}

/// `box.schema.index.create`'s default, spelled as Tarantool stores it in `_index`.
fn default_index_type() -> String {
    "tree".to_owned()
}

/// How a part names its field: by name, or by 1-based field number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RawFieldRef {
    Name(String),
    Number(i64),
}

impl fmt::Display for RawFieldRef {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RawFieldRef::Name(name) => write!(formatter, "{name:?}"),
            RawFieldRef::Number(number) => write!(formatter, "{number}"),
        }
    }
}

/// One index part: `"id"`, `2`, or `{ field = "x", type = "...", collation = "...",
/// is_nullable = true }`.
#[derive(Debug, Clone)]
pub(crate) struct RawPart {
    pub field: RawFieldRef,
    pub field_type: Option<String>,
    pub collation: Option<String>,
    pub is_nullable: Option<bool>,
}

/// The table form of a part, read through serde so that unknown keys are refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPartTable {
    field: RawFieldRefSerde,
    #[serde(rename = "type")]
    field_type: Option<String>,
    collation: Option<String>,
    is_nullable: Option<bool>,
}

/// A field reference read from a string or an integer.
struct RawFieldRefSerde(RawFieldRef);

impl<'de> Deserialize<'de> for RawFieldRefSerde {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldRefVisitor;
        impl Visitor<'_> for FieldRefVisitor {
            type Value = RawFieldRefSerde;
            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("a field name or a 1-based field number")
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
                Ok(RawFieldRefSerde(RawFieldRef::Name(value.to_owned())))
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<Self::Value, E> {
                Ok(RawFieldRefSerde(RawFieldRef::Number(value)))
            }
        }
        deserializer.deserialize_any(FieldRefVisitor)
    }
}

impl<'de> Deserialize<'de> for RawPart {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PartVisitor;
        impl<'de> Visitor<'de> for PartVisitor {
            type Value = RawPart;
            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str(
                    "a field name, a 1-based field number, or a table \
                     { field = ..., type = ..., collation = ..., is_nullable = ... }",
                )
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<RawPart, E> {
                Ok(RawPart::bare(RawFieldRef::Name(value.to_owned())))
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<RawPart, E> {
                Ok(RawPart::bare(RawFieldRef::Number(value)))
            }
            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<RawPart, M::Error> {
                let table = RawPartTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(RawPart {
                    field: table.field.0,
                    field_type: table.field_type,
                    collation: table.collation,
                    is_nullable: table.is_nullable,
                })
            }
        }
        deserializer.deserialize_any(PartVisitor)
    }
}

impl RawPart {
    fn bare(field: RawFieldRef) -> Self {
        RawPart {
            field,
            field_type: None,
            collation: None,
            is_nullable: None,
        }
    }
}

/// A byte size as written: a TOML integer (bytes) or a string such as `"16MiB"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RawSize {
    Bytes(u64),
    Text(String),
}

impl<'de> Deserialize<'de> for RawSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SizeVisitor;
        impl Visitor<'_> for SizeVisitor {
            type Value = RawSize;
            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("a size such as \"16MiB\" or a number of bytes")
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<RawSize, E> {
                Ok(RawSize::Text(value.to_owned()))
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<RawSize, E> {
                u64::try_from(value)
                    .map(RawSize::Bytes)
                    .map_err(|_| E::custom(format!("a size cannot be negative, got {value}")))
            }
        }
        deserializer.deserialize_any(SizeVisitor)
    }
}
