//! Reading one WAL file: its header, then its batches in order, each checked, with the
//! difference between a torn tail and corruption decided here (rules in `docs/format.md`).
//!
//! Synchronous `std::fs`: recovery runs before a shard serves anything, one thread per shard,
//! so blocking reads cost nothing and keep this testable without a reactor. A file is read
//! whole: WAL files are bounded by `wal_max_file_size` (64 MiB by default) and a damaged
//! region is easiest to skip over with all of it in hand. Knows nothing of storage or of
//! which file is the newest: the caller decides what a torn tail means.

use std::path::{Path, PathBuf};

use crate::wal::error::{Result, WalError};
use crate::wal::format::{
    batch_size_claimed, decode_batch, decode_file_header, Batch, DecodeError, FileHeader, FileKind,
    BATCH_MAGIC, FILE_HEADER_SIZE_BYTES,
};

/// A WAL file read into memory with its header checked.
#[derive(Debug)]
pub struct WalFile {
    pub path: PathBuf,
    pub header: FileHeader,
    bytes: Vec<u8>,
}

/// How a reader treats a bad batch that is not a torn tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// Stop with [`WalError::Corrupt`].
    Strict,
    /// Report it with [`WalError::Corrupt`], then skip to the next valid batch (`force_recovery`).
    Force,
}

impl WalFile {
    /// Reads the file and checks its header. A file shorter than a header is torn at 0.
    pub fn open(path: &Path) -> Result<WalFile> {
        let bytes = std::fs::read(path).map_err(|e| WalError::io("reading WAL file", path, e))?;
        WalFile::from_bytes(path.to_path_buf(), bytes)
    }

    pub fn from_bytes(path: PathBuf, bytes: Vec<u8>) -> Result<WalFile> {
        let header = match decode_file_header(&bytes, FileKind::Wal) {
            Ok(header) => header,
            Err(DecodeError::Incomplete { .. }) => {
                return Err(WalError::Torn {
                    file: path,
                    offset: 0,
                })
            }
            Err(DecodeError::Invalid { reason }) => {
                return Err(WalError::corrupt(path, 0, format!("file header: {reason}")))
            }
        };
        Ok(WalFile {
            path,
            header,
            bytes,
        })
    }

    pub fn size_bytes(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// The batches in file order. In [`ReadMode::Strict`] iteration ends after the first error;
    /// in [`ReadMode::Force`] it goes on after a `Corrupt` (the skipped batch) and ends after a
    /// `Torn`.
    pub fn batches(&self, mode: ReadMode) -> BatchIter<'_> {
        BatchIter {
            file: self,
            mode,
            at: FILE_HEADER_SIZE_BYTES,
            lsn_next: Some(self.header.lsn),
            finished: false,
        }
    }
}

pub struct BatchIter<'a> {
    file: &'a WalFile,
    mode: ReadMode,
    /// Offset of the next batch.
    at: usize,
    /// The LSN the next batch must start at; `None` after a skipped region, when only
    /// "greater than the last seen" can be asked of it.
    lsn_next: Option<u64>,
    finished: bool,
}

impl BatchIter<'_> {
    /// Offset of the next batch: after the iteration ends on a torn tail, where to cut.
    pub fn offset(&self) -> u64 {
        self.at as u64
    }
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = Result<Batch<'a>>;

    fn next(&mut self) -> Option<Result<Batch<'a>>> {
        let bytes = &self.file.bytes;
        if self.finished || self.at >= bytes.len() {
            return None;
        }
        let rest = &bytes[self.at..];
        let reason = match decode_batch(rest) {
            Ok(batch) => match self.lsn_next {
                Some(lsn_next) if batch.lsn_first != lsn_next => format!(
                    "batch starts at LSN {}, expected {lsn_next}",
                    batch.lsn_first
                ),
                _ => {
                    self.at += batch.size_bytes;
                    self.lsn_next = Some(batch.lsn_last() + 1);
                    return Some(Ok(batch));
                }
            },
            Err(error) => error.to_string(),
        };
        let offset = self.at as u64;
        let next_valid = find_next_batch(bytes, self.at + 1);
        if next_valid.is_none() && is_torn_tail(rest) {
            self.finished = true;
            return Some(Err(WalError::Torn {
                file: self.file.path.clone(),
                offset,
            }));
        }
        match (self.mode, next_valid) {
            (ReadMode::Force, Some(next_at)) => {
                self.at = next_at;
                self.lsn_next = None;
            }
            _ => self.finished = true,
        }
        Some(Err(WalError::corrupt(&self.file.path, offset, reason)))
    }
}

/// Whether bad bytes that run to the end of the file look like an interrupted write: the
/// batch stops short, ends exactly at the end with a bad checksum, or was never written.
fn is_torn_tail(rest: &[u8]) -> bool {
    match decode_batch(rest) {
        // A whole, checked batch in the wrong place is not a half-finished write.
        Ok(_) => false,
        Err(DecodeError::Incomplete { .. }) => true,
        Err(DecodeError::Invalid { .. }) => {
            batch_size_claimed(rest) == Some(rest.len()) || rest.iter().all(|byte| *byte == 0)
        }
    }
}

/// The offset of the first valid batch at or after `from`, found by its magic and checksum.
fn find_next_batch(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while at + BATCH_MAGIC.len() <= bytes.len() {
        let found = bytes[at..]
            .windows(BATCH_MAGIC.len())
            .position(|window| window == BATCH_MAGIC)?;
        at += found;
        if decode_batch(&bytes[at..]).is_ok() {
            return Some(at);
        }
        at += 1;
    }
    None
}
