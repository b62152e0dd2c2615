//! A replica's position: `<data_dir>/replica.toml`, what it has applied of its master's WAL,
//! per master shard, and which master (by its data directory's fingerprint) that is.
//!
//! Written only after the rows it counts are durable in the replica's own WAL (the applier
//! awaits their commits first), so a restart resumes at or before what was applied; rows
//! applied twice are after-images and change nothing. Written to a temporary name and renamed
//! over the old one: a crash leaves the old position or the new. Absent: the replica has not
//! finished copying its master (a bootstrap starts over).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::protocol::replication::Vclock;

pub const POSITION_FILE: &str = "replica.toml";
const POSITION_FILE_IN_PROGRESS: &str = "replica.toml.inprogress";
/// Present while a copy of the master is under way: its spaces may be emptied again.
const COPYING_FILE: &str = "replica.copying";

/// What a replica has applied, and of whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// The master's data directory fingerprint.
    pub master_fingerprint: u64,
    /// Per master shard, the last LSN applied.
    pub applied: Vec<u64>,
    /// The master's last schema change made here.
    pub master_schema_version: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PositionFile {
    /// Hex: TOML's integers stop at 2^63.
    master_fingerprint: String,
    applied: Vec<u64>,
    #[serde(default)]
    master_schema_version: u64,
}

/// Why the position could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PositionError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} is damaged ({reason}): remove it and empty the data directory to copy the \
         master again"
    )]
    Damaged { path: PathBuf, reason: String },
}

impl Position {
    /// The position as a vclock, one entry per master shard.
    pub fn vclock(&self) -> Vclock {
        self.applied.iter().map(|lsn| Some(*lsn)).collect()
    }

    /// Reads the position in `data_dir`; `None` when there is none.
    pub fn read(data_dir: &Path) -> Result<Option<Position>, PositionError> {
        let path = data_dir.join(POSITION_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(PositionError::Io { path, source }),
        };
        Position::decode(&text)
            .map(Some)
            .map_err(|reason| PositionError::Damaged { path, reason })
    }

    /// Parses the file's text.
    pub fn decode(text: &str) -> Result<Position, String> {
        let file: PositionFile = toml::from_str(text).map_err(|error| error.to_string())?;
        let digits = file.master_fingerprint.trim_start_matches("0x");
        let master_fingerprint = u64::from_str_radix(digits, 16).map_err(|_| {
            format!(
                "master_fingerprint {:?} is not hex",
                file.master_fingerprint
            )
        })?;
        let shards = file.applied.len() as u64;
        if !(1..=crate::protocol::replication::VCLOCK_SHARDS_MAX).contains(&shards) {
            return Err(format!("{shards} master shards"));
        }
        Ok(Position {
            master_fingerprint,
            applied: file.applied,
            master_schema_version: file.master_schema_version,
        })
    }

    fn encode(&self) -> String {
        let file = PositionFile {
            master_fingerprint: format!("{:#018x}", self.master_fingerprint),
            applied: self.applied.clone(),
            master_schema_version: self.master_schema_version,
        };
        let body = toml::to_string(&file).unwrap_or_default();
        format!(
            "# What this replica has applied of its master's WAL, per master shard \
             (docs/replication.md).\n# Written by tarn; do not edit.\n{body}"
        )
    }

    /// Replaces the position in `data_dir`; `sync`: on disk before it returns (the WAL is
    /// fsynced too).
    pub fn write(&self, data_dir: &Path, sync: bool) -> Result<(), PositionError> {
        let temporary = data_dir.join(POSITION_FILE_IN_PROGRESS);
        let path = data_dir.join(POSITION_FILE);
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| PositionError::Io { path, source }
        };
        let mut file = std::fs::File::create(&temporary).map_err(io(&temporary))?;
        file.write_all(self.encode().as_bytes())
            .map_err(io(&temporary))?;
        if sync {
            file.sync_all().map_err(io(&temporary))?;
        }
        drop(file);
        std::fs::rename(&temporary, &path).map_err(io(&temporary))?;
        // A position ends a copy.
        match std::fs::remove_file(data_dir.join(COPYING_FILE)) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                return Err(io(&data_dir.join(COPYING_FILE))(error))
            }
            _ => {}
        }
        if sync {
            std::fs::File::open(data_dir)
                .and_then(|dir| dir.sync_all())
                .map_err(io(data_dir))?;
        }
        Ok(())
    }

    /// Marks a copy of the master as under way (before the spaces are emptied for it), so
    /// that a copy cut short is started over, while a data directory that never was a
    /// replica's is not emptied.
    pub fn mark_copying(data_dir: &Path) -> Result<(), PositionError> {
        let path = data_dir.join(COPYING_FILE);
        let io = |source| PositionError::Io {
            path: path.clone(),
            source,
        };
        std::fs::write(
            &path,
            b"a copy of the master is under way (docs/replication.md)\n",
        )
        .map_err(io)?;
        std::fs::File::open(data_dir)
            .and_then(|dir| dir.sync_all())
            .map_err(io)
    }

    /// Whether a copy of the master was started and has not ended.
    pub fn copying(data_dir: &Path) -> bool {
        data_dir.join(COPYING_FILE).exists()
    }

    /// Removes the position: the data directory no longer holds a copy of the master.
    pub fn remove(data_dir: &Path) -> Result<(), PositionError> {
        let path = data_dir.join(POSITION_FILE);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(PositionError::Io { path, source }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_round_trips_through_its_file() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Position::read(dir.path()).unwrap(), None);
        let position = Position {
            master_fingerprint: u64::MAX,
            applied: vec![0, 17, 5],
            master_schema_version: 4,
        };
        Position::mark_copying(dir.path()).unwrap();
        assert!(Position::copying(dir.path()));
        position.write(dir.path(), true).unwrap();
        assert!(!Position::copying(dir.path()), "a position ends the copy");
        assert_eq!(Position::read(dir.path()).unwrap(), Some(position.clone()));
        assert_eq!(position.vclock().as_slice(), &[Some(0), Some(17), Some(5)]);
        Position::remove(dir.path()).unwrap();
        assert_eq!(Position::read(dir.path()).unwrap(), None);
    }

    #[test]
    fn a_damaged_file_says_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(POSITION_FILE), "applied = [1]\n").unwrap();
        let error = Position::read(dir.path()).unwrap_err().to_string();
        assert!(error.contains("is damaged"), "{error}");
        assert!(error.contains("copy the master again"), "{error}");
        assert!(Position::decode("master_fingerprint = \"0x1\"\napplied = []\n").is_err());
        assert!(Position::decode("master_fingerprint = \"zz\"\napplied = [1]\n").is_err());
    }
}
