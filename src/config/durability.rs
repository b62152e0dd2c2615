//! Durability settings: WAL mode, WAL file size, checkpoints, forced recovery.
//!
//! Owns the names and ranges of these settings only. Knows nothing of the WAL file format, the
//! writer or recovery itself.

use super::error::ConfigError;
use super::file::RawSize;
use super::settings::size_in_range;

/// When a write is acknowledged relative to the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum WalMode {
    /// No log: writes since the last checkpoint are lost on restart.
    None,
    /// Write each batch to the log before acknowledging; survives a crash of the process, not
    /// of the machine.
    Write,
    /// Write and fsync before acknowledging; survives a power loss.
    Fsync,
}

impl WalMode {
    /// The name used in the file and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            WalMode::None => "none",
            WalMode::Write => "write",
            WalMode::Fsync => "fsync",
        }
    }

    pub(crate) fn parse(name: &str) -> Result<WalMode, ConfigError> {
        [WalMode::None, WalMode::Write, WalMode::Fsync]
            .into_iter()
            .find(|mode| mode.name() == name)
            .ok_or_else(|| {
                ConfigError::invalid(
                    "wal_mode",
                    format!("{name:?} is not one of none, write, fsync"),
                )
            })
    }
}

/// The smallest WAL file before rotation.
pub const WAL_MAX_FILE_SIZE_BYTES_MIN: u64 = 1 << 20;

/// Durability settings, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Durability {
    pub wal_mode: WalMode,
    /// A WAL file is closed and a new one started once it passes this size.
    pub wal_max_file_size_bytes: u64,
    /// Seconds between automatic snapshots; 0 turns them off.
    pub checkpoint_interval_seconds: u64,
    /// Snapshots kept (with the WAL files needed after the oldest); at least 1.
    pub checkpoint_count: u32,
    /// Command line only: skip damaged WAL rows during recovery instead of refusing to start.
    pub force_recovery: bool,
}

pub(crate) fn resolve_durability(
    wal_mode: &str,
    wal_max_file_size: &RawSize,
    checkpoint_interval_seconds: u64,
    checkpoint_count: u64,
    force_recovery: bool,
) -> Result<Durability, ConfigError> {
    let wal_mode = WalMode::parse(wal_mode)?;
    let wal_max_file_size_bytes = size_in_range(
        wal_max_file_size,
        "wal_max_file_size",
        WAL_MAX_FILE_SIZE_BYTES_MIN,
        u64::MAX,
    )?;
    let checkpoint_count = u32::try_from(checkpoint_count)
        .ok()
        .filter(|count| *count >= 1)
        .ok_or_else(|| {
            ConfigError::invalid(
                "checkpoint_count",
                format!("{checkpoint_count} is outside 1..={}", u32::MAX),
            )
        })?;
    Ok(Durability {
        wal_mode,
        wal_max_file_size_bytes,
        checkpoint_interval_seconds,
        checkpoint_count,
        force_recovery,
    })
}
