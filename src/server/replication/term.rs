//! The replica set's term (`docs/replication.md`, "Promotion"): a number every instance keeps
//! in `<data_dir>/term.toml`, with the last term in which it accepted writes.
//!
//! `box.ctl.promote()` takes the next term and makes its instance the writable master; every
//! SUBSCRIBE, its answer and every heartbeat carry the sender's term, and an instance that
//! hears of a newer term than its own records it and stops accepting writes (it is fenced),
//! so two masters never both acknowledge writes once they have spoken. A fenced master stays
//! read-only across restarts whatever its config says: its term is behind the one it heard.
//!
//! Written to a temporary name, synced and renamed over the old one before the term is used:
//! a term is never forgotten after it was announced. Knows nothing of sockets or requests.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

pub const TERM_FILE: &str = "term.toml";
const TERM_FILE_IN_PROGRESS: &str = "term.toml.inprogress";

/// The term as this instance last recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TermRecord {
    /// The newest term this instance knows of (1 before any promotion).
    pub term: u64,
    /// The last term in which this instance accepted writes (0: never): its own rows are
    /// of that term, and a master of a newer one may not have them.
    pub led: u64,
}

impl Default for TermRecord {
    fn default() -> TermRecord {
        TermRecord { term: 1, led: 0 }
    }
}

/// Why the term could not be read or recorded.
#[derive(Debug, thiserror::Error)]
pub enum TermError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is damaged ({reason}): it must hold `term` and `led` (docs/replication.md)")]
    Damaged { path: PathBuf, reason: String },
}

impl TermRecord {
    /// Whether a master of a newer term than this instance's own last one exists: it must
    /// not accept writes, whatever its config says.
    pub fn is_fenced(&self) -> bool {
        self.led != 0 && self.term > self.led
    }

    pub fn read(data_dir: &Path) -> Result<TermRecord, TermError> {
        let path = data_dir.join(TERM_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(TermRecord::default())
            }
            Err(source) => return Err(TermError::Io { path, source }),
        };
        TermRecord::decode(&text).map_err(|reason| TermError::Damaged { path, reason })
    }

    /// Parses the file's text.
    pub fn decode(text: &str) -> Result<TermRecord, String> {
        let record: TermRecord = toml::from_str(text).map_err(|error| error.to_string())?;
        if record.term == 0 || record.led > record.term {
            return Err(format!("term {} with led {}", record.term, record.led));
        }
        Ok(record)
    }

    /// Replaces the record in `data_dir`, on disk before it returns.
    pub fn write(&self, data_dir: &Path) -> Result<(), TermError> {
        let temporary = data_dir.join(TERM_FILE_IN_PROGRESS);
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| TermError::Io { path, source }
        };
        let body = toml::to_string(self).unwrap_or_default();
        let text = format!(
            "# The replica set's term as this instance knows it, and the last term it accepted \
             writes in (docs/replication.md).\n# Written by tarn; do not edit.\n{body}"
        );
        let mut file = std::fs::File::create(&temporary).map_err(io(&temporary))?;
        file.write_all(text.as_bytes()).map_err(io(&temporary))?;
        file.sync_all().map_err(io(&temporary))?;
        drop(file);
        std::fs::rename(&temporary, data_dir.join(TERM_FILE)).map_err(io(&temporary))?;
        std::fs::File::open(data_dir)
            .and_then(|dir| dir.sync_all())
            .map_err(io(data_dir))
    }
}

/// The term of a running instance: read by relays and heartbeats with one load, changed
/// (rarely) under a lock that also orders the file's writes.
pub struct Terms {
    data_dir: PathBuf,
    current: AtomicU64,
    /// This process leads the current term: it took it ([`Terms::lead`]) and has heard of
    /// no newer one since.
    leading: AtomicBool,
    record: Mutex<TermRecord>,
}

impl Terms {
    pub fn new(data_dir: PathBuf, record: TermRecord) -> Terms {
        Terms {
            data_dir,
            current: AtomicU64::new(record.term),
            leading: AtomicBool::new(false),
            record: Mutex::new(record),
        }
    }

    /// The newest term this instance knows of.
    pub fn current(&self) -> u64 {
        self.current.load(Ordering::Acquire)
    }

    pub fn record(&self) -> TermRecord {
        *self.lock()
    }

    /// Whether this process leads the current term (see the field).
    pub fn is_leading(&self) -> bool {
        self.leading.load(Ordering::Acquire)
    }

    /// Records `term` if it is newer than this instance's; whether it was. The caller
    /// fences the instance (it is no longer the master of the newest term).
    pub fn observe(&self, term: u64) -> Result<bool, TermError> {
        let mut record = self.lock();
        if term <= record.term {
            return Ok(false);
        }
        let newer = TermRecord { term, ..*record };
        // No longer the leader, even if the record cannot be written.
        self.leading.store(false, Ordering::Release);
        newer.write(&self.data_dir)?;
        *record = newer;
        self.current.store(term, Ordering::Release);
        Ok(true)
    }

    /// This instance accepts writes from now on: in a term of its own when `promote`
    /// (`box.ctl.promote()`), else in the current one (a master by its config). Returns
    /// the term it leads.
    pub fn lead(&self, promote: bool) -> Result<u64, TermError> {
        let mut record = self.lock();
        let term = record.term + u64::from(promote);
        if record.led != term {
            let leading = TermRecord { term, led: term };
            leading.write(&self.data_dir)?;
            *record = leading;
            self.current.store(term, Ordering::Release);
        }
        self.leading.store(true, Ordering::Release);
        Ok(term)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TermRecord> {
        self.record.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_term_round_trips_and_only_grows() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            TermRecord::read(dir.path()).unwrap(),
            TermRecord { term: 1, led: 0 }
        );
        let terms = Terms::new(dir.path().to_owned(), TermRecord::default());
        assert!(!terms.is_leading());
        assert_eq!(terms.lead(false).unwrap(), 1);
        assert!(terms.is_leading());
        assert!(!terms.record().is_fenced());
        assert!(!terms.observe(1).unwrap(), "not newer");
        assert!(terms.is_leading());
        assert!(terms.observe(3).unwrap());
        assert!(!terms.is_leading());
        assert_eq!(terms.current(), 3);
        let record = TermRecord::read(dir.path()).unwrap();
        assert_eq!(record, TermRecord { term: 3, led: 1 });
        assert!(record.is_fenced(), "a master of term 3 exists");
        assert_eq!(terms.lead(true).unwrap(), 4);
        assert!(terms.is_leading());
        assert_eq!(
            TermRecord::read(dir.path()).unwrap(),
            TermRecord { term: 4, led: 4 }
        );
        assert!(!terms.observe(2).unwrap());
    }

    #[test]
    fn a_damaged_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(TERM_FILE), "term = 1\nled = 2\n").unwrap();
        let error = TermRecord::read(dir.path()).unwrap_err().to_string();
        assert!(error.contains("is damaged"), "{error}");
        std::fs::write(dir.path().join(TERM_FILE), "term = \"x\"\n").unwrap();
        assert!(TermRecord::read(dir.path()).is_err());
    }
}
