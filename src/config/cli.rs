//! The command line of the `tarn` binary (clap derive).
//!
//! Owns the flags, their help text, and how they override the file: a flag that is given
//! replaces the file's value before validation, so a flag is checked by the same rules as the
//! file. Knows nothing of what the server does with the values.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::durability::WalMode;
use super::file::{RawConfig, RawSize};
use super::settings::LogLevel;
use super::size::parse_size_bytes;
use super::DEFAULT_CONFIG_PATH;

/// `tarn` command-line arguments. Every flag but `--config`, `--force-recovery` and
/// `--drop-missing-spaces` overrides the key of the same name in the config file.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Parser)]
#[command(
    name = "tarn",
    version,
    about = "Thread-per-core, shard-per-core in-memory database speaking Tarantool's binary \
             protocol",
    after_help = "Flags override the config file. Sizes are written like 1GiB, 16MiB, 512KiB \
                  or 1000 (bytes); decimal units such as GB are refused as ambiguous."
)]
pub struct CliArgs {
    /// Config file [default: conf/tarn.toml]. If the default file does not exist, the copy of
    /// conf/tarn.toml built into the binary is used; a path given here must exist.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Address to accept IPROTO connections on, as IP:PORT (e.g. 127.0.0.1:3301).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,

    /// Number of shards, one thread pinned to a core each; 0 = one per core.
    #[arg(long, value_name = "N")]
    pub shards: Option<u64>,

    /// Directory for WAL and snapshot files; a relative path is resolved against the working
    /// directory at start-up. One server at a time: it holds a lock file there.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// Log verbosity.
    #[arg(long, value_name = "LEVEL", value_enum)]
    pub log_level: Option<LogLevel>,

    /// Durability of writes (the file's default: write).
    #[arg(long, value_name = "MODE", value_enum)]
    pub wal_mode: Option<WalMode>,

    /// Memory for data of the whole server, split evenly across shards (e.g. 4GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_bytes)]
    pub memory: Option<u64>,

    /// Microseconds a shard out of work keeps polling before it sleeps (0..=1000).
    #[arg(long, value_name = "US")]
    pub idle_poll_us: Option<u64>,

    /// Scheduler slice of each shard's thread in microseconds (100..=100000; 0 = the
    /// kernel's default).
    #[arg(long, value_name = "US")]
    pub sched_slice_us: Option<u64>,

    /// Refuse writes from clients (ER_READONLY), as Tarantool's `read_only`; a replica.
    #[arg(long)]
    pub read_only: bool,

    /// Follow this master, `[user[:password]@]IP:PORT`, as Tarantool's `replication`
    /// (replaces the file's list).
    #[arg(long, value_name = "URI")]
    pub replication: Option<String>,

    /// Instances (this one included) that must have a write to an `is_sync` space in their
    /// WAL before it is acknowledged, as Tarantool's `replication_synchro_quorum`.
    #[arg(long, value_name = "N")]
    pub replication_synchro_quorum: Option<u64>,

    /// Seconds a write to an `is_sync` space waits for its quorum before it is rolled back,
    /// as Tarantool's `replication_synchro_timeout`.
    #[arg(long, value_name = "SECONDS")]
    pub replication_synchro_timeout: Option<Seconds>,

    /// Serve Prometheus metrics (`GET /metrics`) on this address, IP:PORT; port 0 takes a
    /// free one, logged as "metrics on ADDR".
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,

    /// Skip damaged WAL rows during recovery instead of refusing to start.
    #[arg(long)]
    pub force_recovery: bool,

    /// Drop the data of every space the data directory holds that the config no longer
    /// has (without it, such a start is refused).
    #[arg(long)]
    pub drop_missing_spaces: bool,
}

impl CliArgs {
    /// The config file to read: the one given, or [`DEFAULT_CONFIG_PATH`].
    pub fn config_path(&self) -> &Path {
        self.config
            .as_deref()
            .unwrap_or(Path::new(DEFAULT_CONFIG_PATH))
    }

    /// Replaces the file's values with the flags that were given.
    pub(crate) fn override_file(&self, raw: &mut RawConfig) {
        if let Some(listen) = self.listen {
            raw.listen = listen.to_string();
        }
        if let Some(shards) = self.shards {
            raw.shards = shards;
        }
        if let Some(data_dir) = &self.data_dir {
            raw.data_dir = data_dir.clone();
        }
        if let Some(log_level) = self.log_level {
            raw.log_level = log_level.name().to_owned();
        }
        if let Some(wal_mode) = self.wal_mode {
            raw.wal_mode = wal_mode.name().to_owned();
        }
        if let Some(idle_poll_us) = self.idle_poll_us {
            raw.idle_poll_us = idle_poll_us;
        }
        if let Some(sched_slice_us) = self.sched_slice_us {
            raw.sched_slice_us = sched_slice_us;
        }
        if self.read_only {
            raw.read_only = true;
        }
        if let Some(uri) = &self.replication {
            raw.replication = vec![uri.clone()];
        }
        if let Some(quorum) = self.replication_synchro_quorum {
            raw.replication_synchro_quorum = quorum;
        }
        if let Some(Seconds(timeout)) = self.replication_synchro_timeout {
            raw.replication_synchro_timeout = timeout;
        }
        if let Some(metrics_listen) = self.metrics_listen {
            raw.metrics_listen = metrics_listen.to_string();
        }
        if let Some(memory_bytes) = self.memory {
            raw.memory = RawSize::Bytes(memory_bytes);
        }
    }
}

/// A flag's seconds (a float), compared bit for bit so that the flags stay `Eq`.
#[derive(Debug, Clone, Copy)]
pub struct Seconds(pub f64);

impl PartialEq for Seconds {
    fn eq(&self, other: &Seconds) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Seconds {}

impl std::str::FromStr for Seconds {
    type Err = std::num::ParseFloatError;

    fn from_str(text: &str) -> Result<Seconds, Self::Err> {
        text.parse().map(Seconds)
    }
}
