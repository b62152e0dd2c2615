//! Following one shard's WAL while its writer appends: the batches from a given LSN on, in
//! order, read from the files on disk, then from the newest file as it grows. What a relay
//! streams to a replica (`docs/replication.md`).
//!
//! The follower reads only batches whose rows the writer has reported written (`written`,
//! the writer's last durable LSN, published by the caller): a batch the writer is still
//! copying into the file is never looked at, so every batch read must check, and damage is
//! corruption, never a tail in progress. A batch is returned whole, as the file holds it; the
//! first one may hold rows before the LSN asked for, which the receiver skips.
//!
//! Knows nothing of the network: bytes out, for whoever sends them.

#![warn(clippy::expect_used, clippy::cast_possible_truncation)]

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::wal::dir;
use crate::wal::error::{Result, WalError};
use crate::wal::format::{
    decode_batch, decode_file_header, Batch, DecodeError, FileKind, RowKind, SchemaRow,
    FILE_HEADER_SIZE_BYTES,
};

/// Bytes read from a file at a time.
const READ_CHUNK_BYTES: usize = 1 << 20;

/// A batch as its file holds it, with what a relay needs to know of it (read while the
/// batch was checked, so that nobody checks it twice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowedBatch {
    pub lsn_first: u64,
    pub lsn_last: u64,
    /// The version of the schema change the batch begins with, if it does (a schema row
    /// always begins its batch).
    pub schema_change: Option<u64>,
    pub bytes: Vec<u8>,
}

impl FollowedBatch {
    fn of(batch: &Batch<'_>, bytes: &[u8]) -> FollowedBatch {
        let first = batch.rows().next();
        let schema_change = first
            .filter(|row| row.kind == RowKind::Schema)
            .and_then(|row| SchemaRow::decode(row.body))
            .map(|row| row.version);
        FollowedBatch {
            lsn_first: batch.lsn_first,
            lsn_last: batch.lsn_last(),
            schema_change,
            bytes: bytes[..batch.size_bytes].to_vec(),
        }
    }
}

/// A shard's WAL, followed from an LSN.
pub struct WalFollower {
    dir: PathBuf,
    shard_id: u32,
    /// The next row wanted: every row before it was returned (or was not asked for).
    lsn_next: u64,
    open: Option<OpenFile>,
}

struct OpenFile {
    path: PathBuf,
    file: File,
    /// Bytes read from the file and not yet returned: they start at `offset` in the file.
    pending: Vec<u8>,
    offset: u64,
}

impl WalFollower {
    /// Follows the WAL in `dir` (shard `shard_id`'s) from row `lsn_next` on.
    pub fn new(dir: PathBuf, shard_id: u32, lsn_next: u64) -> WalFollower {
        WalFollower {
            dir,
            shard_id,
            lsn_next: lsn_next.max(1),
            open: None,
        }
    }

    /// The next row not yet returned.
    pub fn lsn_next(&self) -> u64 {
        self.lsn_next
    }

    /// The next batch holding row `lsn_next` if its rows are all `<= written`, as the file
    /// holds it, with its first LSN; `None` when there is none yet. Rows the files no longer
    /// hold (collected after a checkpoint) are [`WalError::MissingRows`].
    pub fn next_batch(&mut self, written: u64) -> Result<Option<FollowedBatch>> {
        // Two rounds at most: the end of one file, then the next file.
        for _ in 0..2 {
            if self.lsn_next > written {
                return Ok(None);
            }
            if self.open.is_none() {
                self.open = Some(self.open_file_holding(self.lsn_next)?);
            }
            let Some(open) = self.open.as_mut() else {
                return Ok(None);
            };
            if let Some(batch) = open.next_batch(self.lsn_next, written)? {
                self.lsn_next = batch.lsn_last + 1;
                return Ok(Some(batch));
            }
            // This file holds nothing more; the row, written, is in a newer one.
            self.open = None;
        }
        Ok(None)
    }

    /// Opens the file whose rows start at or before `lsn` (the newest such file).
    fn open_file_holding(&self, lsn: u64) -> Result<OpenFile> {
        let listing = dir::list(&self.dir)?;
        let holding = listing
            .wal_files
            .iter()
            .filter(|(first, _)| *first <= lsn)
            .max_by_key(|(first, _)| *first);
        let Some((_, path)) = holding else {
            let lsn_next_found = listing.wal_files.first().map_or(0, |(first, _)| *first);
            return Err(WalError::MissingRows {
                expected_file: self.dir.join(dir::wal_file_name(lsn)),
                after: "the files a checkpoint let go".to_owned(),
                lsn_first_missing: lsn,
                lsn_next_found,
            });
        };
        let mut file = File::open(path).map_err(|e| WalError::io("opening WAL file", path, e))?;
        let mut header = [0u8; FILE_HEADER_SIZE_BYTES];
        file.read_exact(&mut header)
            .map_err(|e| WalError::io("reading WAL file header", path, e))?;
        let header = decode_file_header(&header, FileKind::Wal)
            .map_err(|error| WalError::corrupt(path, 0, format!("file header: {error}")))?;
        if header.shard_id != self.shard_id {
            return Err(WalError::WrongShard {
                file: path.clone(),
                expected: self.shard_id,
                found: header.shard_id,
            });
        }
        Ok(OpenFile {
            path: path.clone(),
            file,
            pending: Vec::new(),
            offset: FILE_HEADER_SIZE_BYTES as u64,
        })
    }
}

impl OpenFile {
    /// The next batch of this file that holds `lsn_next`, skipping those before it; `None`
    /// once the file's written batches are all read.
    fn next_batch(&mut self, lsn_next: u64, written: u64) -> Result<Option<FollowedBatch>> {
        loop {
            match decode_batch(&self.pending) {
                Ok(batch) if batch.lsn_last() < lsn_next => {
                    let size = batch.size_bytes;
                    self.consume(size);
                }
                Ok(batch) if batch.lsn_first > lsn_next => {
                    return Err(WalError::corrupt(
                        &self.path,
                        self.offset,
                        format!(
                            "batch starts at LSN {}, expected {lsn_next}",
                            batch.lsn_first
                        ),
                    ))
                }
                // Rows the writer has not reported: not to be sent yet.
                Ok(batch) if batch.lsn_last() > written => return Ok(None),
                Ok(batch) => {
                    let followed = FollowedBatch::of(&batch, &self.pending);
                    self.consume(batch.size_bytes);
                    return Ok(Some(followed));
                }
                Err(DecodeError::Incomplete { .. }) => {
                    if self.read_more()? == 0 {
                        return Ok(None);
                    }
                }
                // A clean-close mark ends the file; anything else written is damage.
                Err(DecodeError::Invalid { .. }) if self.pending.starts_with(b"TCLS") => {
                    return Ok(None)
                }
                Err(DecodeError::Invalid { reason }) => {
                    return Err(WalError::corrupt(&self.path, self.offset, reason))
                }
            }
        }
    }

    fn consume(&mut self, bytes: usize) {
        self.pending.drain(..bytes);
        self.offset += bytes as u64;
    }

    /// Reads what the file holds past `pending`; how many bytes came.
    fn read_more(&mut self) -> Result<usize> {
        let end = self.offset + self.pending.len() as u64;
        self.file
            .seek(SeekFrom::Start(end))
            .map_err(|e| WalError::io("seeking in WAL file", &self.path, e))?;
        let start = self.pending.len();
        self.pending.resize(start + READ_CHUNK_BYTES, 0);
        let read = self.file.read(&mut self.pending[start..]);
        let read = read.map_err(|e| WalError::io("reading WAL file", &self.path, e));
        self.pending.truncate(start + *read.as_ref().unwrap_or(&0));
        read
    }
}

/// The newest snapshot of the shard in `dir`, with its LSN; `None` when there is none.
pub fn newest_snapshot(dir: &Path) -> Result<Option<(u64, PathBuf)>> {
    Ok(dir::list(dir)?
        .snapshots
        .into_iter()
        .max_by_key(|(lsn, _)| *lsn))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::format::{encode_batch, encode_file_header, FileHeader, Row, RowKind};

    fn write_file(
        dir: &Path,
        lsn_first: u64,
        batches: &[(u64, u32)],
        out_bytes: &mut Vec<Vec<u8>>,
    ) {
        let mut file = Vec::new();
        let header = FileHeader {
            kind: FileKind::Wal,
            shard_id: 3,
            lsn: lsn_first,
            schema_fingerprint: 1,
        };
        encode_file_header(&header, &mut file);
        for &(first, rows) in batches {
            let mut batch = Vec::new();
            let bodies: Vec<Vec<u8>> = (0..rows)
                .map(|at| vec![0x91, u8::try_from(at % 100).unwrap()])
                .collect();
            encode_batch(
                (0..rows).map(|at| Row {
                    lsn: first + u64::from(at),
                    kind: RowKind::Replace,
                    space_id: 512,
                    body: &bodies[at as usize],
                }),
                &mut batch,
            );
            file.extend_from_slice(&batch);
            out_bytes.push(batch);
        }
        std::fs::write(dir.join(dir::wal_file_name(lsn_first)), file).unwrap();
    }

    /// What the follower gives: a batch's first LSN and bytes.
    fn next(follower: &mut WalFollower, written: u64) -> Option<(u64, Vec<u8>)> {
        let batch = follower.next_batch(written).unwrap()?;
        assert_eq!(batch.schema_change, None, "these files hold no schema row");
        Some((batch.lsn_first, batch.bytes))
    }

    #[test]
    fn batches_come_in_order_across_files_up_to_what_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut batches = Vec::new();
        write_file(dir.path(), 1, &[(1, 2), (3, 3)], &mut batches);
        write_file(dir.path(), 6, &[(6, 1), (7, 2)], &mut batches);
        let mut follower = WalFollower::new(dir.path().to_owned(), 3, 4);
        // Row 4 is in the batch of rows 3..=5: that batch comes whole.
        assert_eq!(next(&mut follower, 8), Some((3, batches[1].clone())));
        assert_eq!(next(&mut follower, 8), Some((6, batches[2].clone())));
        // Rows 7 and 8 are in the file, but only 7 is written: not yet.
        assert_eq!(next(&mut follower, 7), None);
        assert_eq!(next(&mut follower, 8), Some((7, batches[3].clone())));
        assert_eq!(next(&mut follower, 8), None);
        assert_eq!(follower.lsn_next(), 9);

        // The newest file grows: the follower reads on from where it stopped.
        let mut more = Vec::new();
        write_file(dir.path(), 6, &[(6, 1), (7, 2), (9, 1)], &mut more);
        assert_eq!(next(&mut follower, 9), Some((9, more[2].clone())));
    }

    #[test]
    fn rows_no_file_holds_are_missing_and_damage_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let mut batches = Vec::new();
        write_file(dir.path(), 10, &[(10, 2)], &mut batches);
        let mut early = WalFollower::new(dir.path().to_owned(), 3, 4);
        assert!(matches!(
            early.next_batch(11),
            Err(WalError::MissingRows {
                lsn_first_missing: 4,
                ..
            })
        ));
        let mut other_shard = WalFollower::new(dir.path().to_owned(), 4, 10);
        assert!(matches!(
            other_shard.next_batch(11),
            Err(WalError::WrongShard { .. })
        ));

        let path = dir.path().join(dir::wal_file_name(10));
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
        let mut follower = WalFollower::new(dir.path().to_owned(), 3, 10);
        assert!(matches!(
            follower.next_batch(11),
            Err(WalError::Corrupt { .. })
        ));
    }

    #[test]
    fn a_batch_that_begins_with_a_schema_change_says_its_version() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = Vec::new();
        let header = FileHeader {
            kind: FileKind::Wal,
            shard_id: 0,
            lsn: 1,
            schema_fingerprint: 1,
        };
        encode_file_header(&header, &mut file);
        let mut change = Vec::new();
        SchemaRow {
            version: 7,
            definition: &[],
        }
        .encode(&mut change);
        let rows = [
            (RowKind::Schema, &change[..]),
            (RowKind::Replace, &[0x91, 1][..]),
        ];
        encode_batch(
            rows.iter().enumerate().map(|(at, (kind, body))| Row {
                lsn: 1 + at as u64,
                kind: *kind,
                space_id: 512,
                body,
            }),
            &mut file,
        );
        std::fs::write(dir.path().join(dir::wal_file_name(1)), file).unwrap();
        let batch = WalFollower::new(dir.path().to_owned(), 0, 1)
            .next_batch(2)
            .unwrap()
            .unwrap();
        assert_eq!(
            (batch.lsn_first, batch.lsn_last, batch.schema_change),
            (1, 2, Some(7))
        );
    }
}
