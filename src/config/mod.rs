//! The config layer: `conf/tarn.toml` and the command line, checked and resolved into
//! [`Config`].
//!
//! Owns the file format, the flags, every validation rule on them and the wording of their
//! errors. Knows nothing of the protocol, the WAL or the server, and of storage only its
//! field types: [`Config`] is plain data (field numbers, storage's [`FieldType`]s,
//! placement, sizes in bytes) that the server turns into engine definitions.
//!
//! Map of the modules:
//!
//! * `file`: raw serde structs, key names, defaults, unknown keys refused.
//! * [`cli`]: clap flags and how they override the file.
//! * [`size`]: byte sizes (`"16MiB"`).
//! * [`settings`]: listen, shards, data_dir, memory and connection limits, log level, buckets.
//! * [`durability`]: WAL mode and size, checkpoints, forced recovery.
//! * [`access`]: guest grants, users.
//! * [`replication`]: the master followed (`replication`), `read_only`.
//! * [`metrics`]: the Prometheus endpoint (`metrics_listen`, `metrics_alias`).
//! * [`field`], [`index`], [`space`]: space formats, indexes and spaces.
//! * [`error`]: the error type, [`ConfigError`].
//!
//! Flow: read the text (or the built-in copy) → serde into the raw structs → flags replace
//! values → every value is checked and resolved → [`Config`]. Paths (the config file's,
//! `data_dir`) leave this layer absolute, resolved against the working directory at load,
//! so what the server opens and logs never depends on where it is looked up from. Errors name the key path, with
//! 0-based array positions: `space[1] "customers": index "composite": part "zz" is not a field
//! of the space format`.

pub mod access;
pub mod cli;
pub mod durability;
pub mod error;
pub mod field;
mod file;
pub mod index;
pub mod metrics;
pub mod replication;
pub mod settings;
pub mod size;
pub mod space;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

pub use access::{AccessConfig, Grants, User};
pub use cli::CliArgs;
pub use durability::{Durability, WalMode};
pub use error::ConfigError;
pub use field::{FieldConfig, FieldType};
pub use index::{CollationConfig, IndexConfig, IndexPartConfig, IndexType};
pub use metrics::MetricsConfig;
pub use replication::Upstream;
pub use settings::LogLevel;
pub use size::{parse_size_bytes, SizeError};
pub use space::{Placement, SpaceConfig};

use file::RawConfig;

/// The config file read when `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "conf/tarn.toml";

/// The shipped `conf/tarn.toml`, built into the binary so that `tarn` with no flags runs from
/// any working directory.
pub const SHIPPED_CONFIG_TOML: &str = include_str!("../../conf/tarn.toml");

/// Where the config text came from, for the start-up log and error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// A file, by its absolute path.
    File(PathBuf),
    /// The copy of `conf/tarn.toml` built into the binary: the default path did not exist.
    BuiltIn,
    /// Text handed to [`Config::from_toml_str`].
    Text,
}

impl std::fmt::Display for ConfigSource {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigSource::File(path) => write!(formatter, "{}", path.display()),
            ConfigSource::BuiltIn => write!(formatter, "built-in {DEFAULT_CONFIG_PATH}"),
            ConfigSource::Text => formatter.write_str("text"),
        }
    }
}

/// The whole server configuration, checked and resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Where the text was read from.
    pub source: ConfigSource,
    /// Where IPROTO clients connect.
    pub listen: SocketAddr,
    /// Shards (one pinned thread each); 0 = one per core. At most [`settings::SHARD_COUNT_MAX`].
    pub shard_count: u32,
    /// WAL and snapshot files, the schema record and the lock file; always absolute (a
    /// relative path in the file or a flag is resolved against the working directory).
    pub data_dir: PathBuf,
    /// Memory for data of the whole server; the server gives each shard an equal share.
    pub memory_bytes: u64,
    /// Connections accepted at once; more are closed on accept.
    pub max_connections: u32,
    /// The largest IPROTO packet (header + body) a client may send.
    pub max_packet_size_bytes: u64,
    pub log_level: LogLevel,
    /// Buckets of crud's `bucket_id` formula (`crc32(key) % bucket_count + 1`).
    pub bucket_count: u32,
    /// How long a shard that ran out of work keeps polling before it sleeps.
    pub idle_poll: std::time::Duration,
    /// The scheduler slice each shard's thread asks for; `None` = the kernel's default.
    pub sched_slice: Option<std::time::Duration>,
    pub durability: Durability,
    /// Writes from clients are refused (ER_READONLY); a replica's own applier still writes.
    pub read_only: bool,
    /// The master this instance follows (at most one), as `box.cfg.replication` names it.
    pub replication: Vec<Upstream>,
    /// How long a master keeps the WAL files a replica that left still needs.
    pub wal_cleanup_delay: std::time::Duration,
    /// Synchronous replication: the quorum and how long a sync write waits for it.
    pub synchro: replication::Synchro,
    /// The Prometheus endpoint (off unless `metrics_listen` is set).
    pub metrics: MetricsConfig,
    pub access: AccessConfig,
    /// In file order; ids and names are unique.
    pub spaces: Vec<SpaceConfig>,
    /// The operator's word, for one start, that the data of a recorded space missing from
    /// `spaces` is to be dropped (`--drop-missing-spaces`); without it such a start is refused.
    pub drop_missing_spaces: bool,
}

impl Config {
    /// Parses and checks a config text; no flags, `force_recovery` off. For tests and tools.
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        let source = ConfigSource::Text;
        let raw = parse_raw(text, &source)?;
        resolve(&raw, source, false)
    }

    /// The space with this name, if any.
    pub fn space(&self, name: &str) -> Option<&SpaceConfig> {
        self.spaces.iter().find(|space| space.name == name)
    }
}

/// Reads the config file named by `args` (or the built-in copy, see [`SHIPPED_CONFIG_TOML`]),
/// applies the flags and checks the result.
pub fn load(args: &CliArgs) -> Result<Config, ConfigError> {
    let (text, source) = read_config_text(args.config.as_deref())?;
    let mut raw = parse_raw(&text, &source)?;
    args.override_file(&mut raw);
    let mut config = resolve(&raw, source, args.force_recovery)?;
    config.drop_missing_spaces = args.drop_missing_spaces;
    Ok(config)
}

/// The text of the config file and where it came from. A missing default file falls back to
/// the built-in copy; a missing explicit file is an error.
fn read_config_text(explicit_path: Option<&Path>) -> Result<(String, ConfigSource), ConfigError> {
    read_config_text_or(explicit_path, Path::new(DEFAULT_CONFIG_PATH))
}

/// [`read_config_text`] with the default path as a parameter, so tests can point it elsewhere.
fn read_config_text_or(
    explicit_path: Option<&Path>,
    default_path: &Path,
) -> Result<(String, ConfigSource), ConfigError> {
    let given = explicit_path.unwrap_or(default_path);
    let path = std::path::absolute(given).map_err(|source| ConfigError::Read {
        path: given.to_owned(),
        source,
    })?;
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok((text, ConfigSource::File(path))),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound && explicit_path.is_none() => {
            Ok((SHIPPED_CONFIG_TOML.to_owned(), ConfigSource::BuiltIn))
        }
        Err(source) => Err(ConfigError::Read { path, source }),
    }
}

fn parse_raw(text: &str, source: &ConfigSource) -> Result<RawConfig, ConfigError> {
    toml::from_str(text).map_err(|error| ConfigError::Syntax {
        origin: source.to_string(),
        source: Box::new(error),
    })
}

/// Checks every value and resolves names into numbers; the first error wins.
fn resolve(
    raw: &RawConfig,
    source: ConfigSource,
    force_recovery: bool,
) -> Result<Config, ConfigError> {
    let listen = settings::parse_listen(&raw.listen)?;
    let shard_count = settings::check_shard_count(raw.shards)?;
    let data_dir = settings::resolve_data_dir(&raw.data_dir)?;
    let memory_bytes =
        settings::size_in_range(&raw.memory, "memory", settings::MEMORY_BYTES_MIN, u64::MAX)?;
    let max_connections = settings::check_max_connections(raw.max_connections)?;
    let max_packet_size_bytes = settings::size_in_range(
        &raw.max_packet_size,
        "max_packet_size",
        settings::MAX_PACKET_SIZE_BYTES_MIN,
        settings::MAX_PACKET_SIZE_BYTES_MAX,
    )?;
    let log_level = LogLevel::parse(&raw.log_level)?;
    let bucket_count = settings::check_bucket_count(raw.bucket_count)?;
    let idle_poll = settings::check_idle_poll(raw.idle_poll_us)?;
    let sched_slice = settings::check_sched_slice(raw.sched_slice_us)?;
    let durability = durability::resolve_durability(
        &raw.wal_mode,
        &raw.wal_max_file_size,
        raw.checkpoint_interval,
        raw.checkpoint_count,
        force_recovery,
    )?;
    let replication = replication::resolve_upstreams(&raw.replication)?;
    let synchro = replication::resolve_synchro(
        raw.replication_synchro_quorum,
        raw.replication_synchro_timeout,
    )?;
    let metrics = metrics::resolve_metrics(&raw.metrics_listen, &raw.metrics_alias, listen)?;
    let access = access::resolve_access(&raw.guest, &raw.users)?;
    let spaces = space::resolve_spaces(&raw.spaces)?;
    Ok(Config {
        source,
        listen,
        shard_count,
        data_dir,
        memory_bytes,
        max_connections,
        max_packet_size_bytes,
        log_level,
        bucket_count,
        idle_poll,
        sched_slice,
        durability,
        read_only: raw.read_only,
        replication,
        wal_cleanup_delay: std::time::Duration::from_secs(raw.wal_cleanup_delay),
        synchro,
        metrics,
        access,
        spaces,
        drop_missing_spaces: false,
    })
}

#[cfg(test)]
mod tests;
