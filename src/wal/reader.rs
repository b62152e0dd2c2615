//! Reading one WAL file: its header, then its batches in order, each checked, with the
//! difference between a torn tail and corruption decided here (rules in `docs/format.md`).
//! A file that ends with a clean-close mark was synced and closed by its writer, so no bad
//! batch in it is a torn tail; the mark itself is not a batch and ends the iteration.
//!
//! Synchronous `std::fs`: recovery runs before a shard serves anything, one thread per shard,
//! so blocking reads cost nothing and keep this testable without a reactor. A file is read
//! whole: WAL files are bounded by `wal_max_file_size` (64 MiB by default) and a damaged
//! region is easiest to skip over with all of it in hand. Knows nothing of storage or of
//! which file is the newest: the caller decides what a torn tail means.

// Bytes here come from clients or disk: an `expect` or a truncating cast is fixed or says
// where it stands why it cannot fire.
#![warn(clippy::expect_used, clippy::cast_possible_truncation)]

use std::path::{Path, PathBuf};

use crate::wal::error::{Result, WalError};
use crate::wal::format::{
    batch_size_claimed, decode_batch, decode_file_header_versioned, is_partial_close_mark,
    trailing_close_mark, Batch, CloseMark, DecodeError, FileHeader, FileKind, BATCH_MAGIC,
    FILE_HEADER_SIZE_BYTES,
};

/// The first WAL format version whose files may end with a clean-close mark.
const CLOSE_MARK_SINCE_VERSION: u16 = 3;

/// A WAL file read into memory with its header checked.
#[derive(Debug)]
pub struct WalFile {
    pub path: PathBuf,
    pub header: FileHeader,
    pub format_version: u16,
    /// The clean-close mark that ends the file, if its writer closed it cleanly.
    pub close_mark: Option<CloseMark>,
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
    /// Reads the file and checks its header. A file shorter than a header, or all zeros (its
    /// size grew but nothing written reached the disk), is torn at 0.
    pub fn open(path: &Path) -> Result<WalFile> {
        let bytes = std::fs::read(path).map_err(|e| WalError::io("reading WAL file", path, e))?;
        WalFile::from_bytes(path.to_path_buf(), bytes)
    }

    pub fn from_bytes(path: PathBuf, bytes: Vec<u8>) -> Result<WalFile> {
        let (header, format_version) = match decode_file_header_versioned(&bytes, FileKind::Wal) {
            Ok(decoded) => decoded,
            Err(DecodeError::Incomplete { .. }) => {
                return Err(WalError::Torn {
                    file: path,
                    offset: 0,
                })
            }
            Err(DecodeError::Invalid { .. }) if bytes.iter().all(|byte| *byte == 0) => {
                return Err(WalError::Torn {
                    file: path,
                    offset: 0,
                })
            }
            Err(DecodeError::Invalid { reason }) => {
                return Err(WalError::corrupt(path, 0, format!("file header: {reason}")))
            }
        };
        let close_mark = (format_version >= CLOSE_MARK_SINCE_VERSION)
            .then(|| trailing_close_mark(&bytes))
            .flatten();
        Ok(WalFile {
            path,
            header,
            format_version,
            close_mark,
            bytes,
        })
    }

    /// Whether the writer closed the file cleanly (it ends with a valid clean-close mark).
    pub fn closed_cleanly(&self) -> bool {
        self.close_mark.is_some()
    }

    /// Where the batches end: at the clean-close mark, or at the end of the file.
    fn batches_end(&self) -> usize {
        match self.close_mark {
            // `trailing_close_mark` checked that the offset is inside the file.
            Some(mark) => usize::try_from(mark.offset).unwrap_or(self.bytes.len()),
            None => self.bytes.len(),
        }
    }

    pub fn size_bytes(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// The batches in file order, up to the clean-close mark if there is one. In
    /// [`ReadMode::Strict`] iteration ends after the first error; in [`ReadMode::Force`] it
    /// goes on after a `Corrupt` (the skipped batch) and ends after a `Torn`. A file closed
    /// cleanly never yields `Torn`.
    pub fn batches(&self, mode: ReadMode) -> BatchIter<'_> {
        BatchIter {
            file: self,
            bytes: &self.bytes[..self.batches_end()],
            mode,
            at: FILE_HEADER_SIZE_BYTES,
            lsn_next: Some(self.header.lsn),
            finished: false,
        }
    }
}

pub struct BatchIter<'a> {
    file: &'a WalFile,
    /// The file's bytes up to where its batches end.
    bytes: &'a [u8],
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
        let bytes = self.bytes;
        if self.finished {
            return None;
        }
        if self.at >= bytes.len() {
            self.finished = true;
            return self.check_close_mark().map(Err);
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
        let closed_cleanly = self.file.closed_cleanly();
        let may_end_with_mark = self.file.format_version >= CLOSE_MARK_SINCE_VERSION;
        if next_valid.is_none() && !closed_cleanly && is_torn_tail(rest, may_end_with_mark) {
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
        let reason = if closed_cleanly {
            format!("{reason} (the file was closed cleanly, so this is not a torn write)")
        } else {
            reason
        };
        Some(Err(WalError::corrupt(&self.file.path, offset, reason)))
    }
}

impl BatchIter<'_> {
    /// After the last batch of a file closed cleanly: its mark must name the last row read.
    fn check_close_mark(&self) -> Option<WalError> {
        let mark = self.file.close_mark?;
        let lsn_last = self.lsn_next?.checked_sub(1)?;
        (lsn_last != mark.lsn_last).then(|| {
            WalError::corrupt(
                &self.file.path,
                mark.offset,
                format!(
                    "the clean-close mark says the last row is LSN {}, the batches end at LSN \
                     {lsn_last}",
                    mark.lsn_last
                ),
            )
        })
    }
}

/// Whether bad bytes that run to the end of the file look like an interrupted write: the
/// batch stops short, ends exactly at the end with a bad checksum, or was never written; or,
/// in a file that may end with a clean-close mark, the mark was being written.
fn is_torn_tail(rest: &[u8], may_end_with_mark: bool) -> bool {
    match decode_batch(rest) {
        // A whole, checked batch in the wrong place is not a half-finished write.
        Ok(_) => false,
        Err(DecodeError::Incomplete { .. }) => true,
        Err(DecodeError::Invalid { .. }) => {
            batch_size_claimed(rest) == Some(rest.len())
                || rest.iter().all(|byte| *byte == 0)
                || (may_end_with_mark && is_partial_close_mark(rest))
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
