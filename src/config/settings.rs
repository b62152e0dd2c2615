//! Server-wide scalar settings: listen address, shard count, data directory, memory and
//! connection limits, log level, bucket count.
//!
//! Owns their names, ranges and the wording of their errors. Knows nothing of executors,
//! sockets or allocators; the server applies the numbers.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::error::ConfigError;
use super::file::RawSize;
use super::size::parse_size_bytes;

/// The most shards (cores) a server may run.
pub const SHARD_COUNT_MAX: u32 = 1024;
/// The least memory for the whole server.
pub const MEMORY_BYTES_MIN: u64 = 16 << 20;
/// The most simultaneous client connections.
pub const MAX_CONNECTIONS_MAX: u32 = 1_000_000;
/// The smallest accepted cap on one IPROTO packet.
pub const MAX_PACKET_SIZE_BYTES_MIN: u64 = 1 << 10;
/// The largest accepted cap on one IPROTO packet.
pub const MAX_PACKET_SIZE_BYTES_MAX: u64 = 1 << 30;

/// How much the server logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    /// The name used in the file and on the command line (also a valid `tracing` filter).
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }

    pub(crate) fn parse(name: &str) -> Result<LogLevel, ConfigError> {
        use LogLevel::*;
        [Error, Warn, Info, Debug, Trace]
            .into_iter()
            .find(|level| level.name() == name)
            .ok_or_else(|| {
                ConfigError::invalid(
                    "log_level",
                    format!("{name:?} is not one of error, warn, info, debug, trace"),
                )
            })
    }
}

pub(crate) fn parse_listen(text: &str) -> Result<SocketAddr, ConfigError> {
    text.parse().map_err(|_| {
        ConfigError::invalid(
            "listen",
            format!(
                "{text:?} is not a socket address; write IP:PORT such as \"127.0.0.1:3301\" \
                 or \"[::1]:3301\" (host names are not resolved)"
            ),
        )
    })
}

pub(crate) fn check_shard_count(shards: u64) -> Result<u32, ConfigError> {
    u32::try_from(shards)
        .ok()
        .filter(|count| *count <= SHARD_COUNT_MAX)
        .ok_or_else(|| {
            ConfigError::invalid(
                "shards",
                format!("{shards} is outside 0..={SHARD_COUNT_MAX} (0 means one per core)"),
            )
        })
}

/// The data directory as an absolute path: a relative one is taken from the working
/// directory at start-up, once, here.
///
/// Nothing after the config layer may see a relative path. glommio's `Directory::open`
/// passes -1 instead of `AT_FDCWD` to `openat`, so a relative directory path fails with
/// EBADF "Bad file descriptor" (a glommio bug, DataDog/glommio#637, in
/// `vendor/glommio/src/io/directory.rs`; its file opens resolve relative paths themselves).
/// The WAL writer opens its shard directory that way to fsync a new file's name, and the
/// snapshot writer to fsync the rename, so with a relative `data_dir` every write in `write`
/// or `fsync` mode and every `box.snapshot` failed.
pub(crate) fn resolve_data_dir(data_dir: &Path) -> Result<PathBuf, ConfigError> {
    if data_dir.as_os_str().is_empty() {
        return Err(ConfigError::invalid(
            "data_dir",
            "must not be empty (write \".\" for the working directory)",
        ));
    }
    absolute(data_dir, "data_dir")
}

/// `path` made absolute against the working directory (lexically: `.` components go,
/// symbolic links and `..` stay as written, and the path need not exist yet).
pub(crate) fn absolute(path: &Path, key: &str) -> Result<PathBuf, ConfigError> {
    std::path::absolute(path).map_err(|error| {
        ConfigError::invalid(
            key,
            format!(
                "cannot make {} absolute against the working directory: {error}",
                path.display()
            ),
        )
    })
}

pub(crate) fn check_max_connections(max_connections: u64) -> Result<u32, ConfigError> {
    u32::try_from(max_connections)
        .ok()
        .filter(|count| (1..=MAX_CONNECTIONS_MAX).contains(count))
        .ok_or_else(|| {
            ConfigError::invalid(
                "max_connections",
                format!("{max_connections} is outside 1..={MAX_CONNECTIONS_MAX}"),
            )
        })
}

pub(crate) fn check_bucket_count(bucket_count: u64) -> Result<u32, ConfigError> {
    u32::try_from(bucket_count)
        .ok()
        .filter(|count| *count >= 1)
        .ok_or_else(|| {
            ConfigError::invalid(
                "bucket_count",
                format!("{bucket_count} is outside 1..={}", u32::MAX),
            )
        })
}

/// The longest idle poll: past a millisecond, polling costs a core's time for a wake-up
/// the kernel would give sooner.
pub const IDLE_POLL_US_MAX: u64 = 1000;

pub(crate) fn check_idle_poll(idle_poll_us: u64) -> Result<std::time::Duration, ConfigError> {
    if idle_poll_us > IDLE_POLL_US_MAX {
        return Err(ConfigError::invalid(
            "idle_poll_us",
            format!("{idle_poll_us} is outside 0..={IDLE_POLL_US_MAX}"),
        ));
    }
    Ok(std::time::Duration::from_micros(idle_poll_us))
}

/// The range of scheduler slices Linux accepts for a fair-policy thread (it clamps others).
pub const SCHED_SLICE_US_MIN: u64 = 100;
pub const SCHED_SLICE_US_MAX: u64 = 100_000;

pub(crate) fn check_sched_slice(
    sched_slice_us: u64,
) -> Result<Option<std::time::Duration>, ConfigError> {
    match sched_slice_us {
        0 => Ok(None),
        SCHED_SLICE_US_MIN..=SCHED_SLICE_US_MAX => {
            Ok(Some(std::time::Duration::from_micros(sched_slice_us)))
        }
        _ => Err(ConfigError::invalid(
            "sched_slice_us",
            format!(
                "{sched_slice_us} is neither 0 (the kernel's default) nor in \
                 {SCHED_SLICE_US_MIN}..={SCHED_SLICE_US_MAX}"
            ),
        )),
    }
}

/// Parses a size and checks `minimum..=maximum`, naming `key` in errors.
pub(crate) fn size_in_range(
    raw: &RawSize,
    key: &str,
    minimum: u64,
    maximum: u64,
) -> Result<u64, ConfigError> {
    let bytes = match raw {
        RawSize::Bytes(bytes) => *bytes,
        RawSize::Text(text) => {
            parse_size_bytes(text).map_err(|error| ConfigError::invalid(key, error.to_string()))?
        }
    };
    if bytes < minimum || bytes > maximum {
        let range = if maximum == u64::MAX {
            format!("at least {}", describe_bytes(minimum))
        } else {
            format!(
                "between {} and {}",
                describe_bytes(minimum),
                describe_bytes(maximum)
            )
        };
        return Err(ConfigError::invalid(
            key,
            format!("{} bytes is too {}; it must be {range}", bytes, {
                if bytes < minimum {
                    "small"
                } else {
                    "large"
                }
            }),
        ));
    }
    Ok(bytes)
}

/// The shortest exact binary-unit spelling of a byte count, e.g. `16MiB`, `1000B`.
pub fn describe_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
    for (unit, shift) in UNITS {
        if bytes != 0 && bytes.is_multiple_of(1u64 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_bytes_picks_the_largest_exact_unit() {
        assert_eq!(describe_bytes(0), "0B");
        assert_eq!(describe_bytes(1000), "1000B");
        assert_eq!(describe_bytes(1024), "1KiB");
        assert_eq!(describe_bytes(1536 << 20), "1536MiB");
        assert_eq!(describe_bytes(1 << 30), "1GiB");
    }
}
