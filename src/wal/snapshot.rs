//! Snapshots: writing one from (space id, tuple bytes) pairs, and reading it back block by
//! block, every checksum checked (format in `docs/format.md`).
//!
//! Writing goes to `<lsn>.snap.inprogress`, is fdatasync'ed, renamed to `<lsn>.snap`, and the
//! directory synced, so a crash leaves either no snapshot or a whole one. The async writer
//! uses glommio's buffered file so that a shard keeps serving while it writes; the blocking
//! one is for tools and tests. Reading is blocking `std::fs`, for recovery before serving.
//!
//! Rows are after-images, so a fuzzy snapshot (tuples changing while it is written) is fine:
//! replaying the WAL after its LSN fixes up whatever it caught half-way. Knows nothing of
//! spaces or indexes: tuples are opaque msgpack bytes grouped by space id.

use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use glommio::io::{Directory, OpenOptions};

use crate::wal::dir::{in_progress_file_name, snapshot_file_name};
use crate::wal::error::{Result, WalError};
use crate::wal::format::{
    decode_block, decode_block_header, decode_file_header, decode_schema_section,
    decode_schema_section_header, decode_trailer, encode_file_header, encode_schema_section,
    encode_trailer, is_trailer_magic, BlockBuilder, FileHeader, FileKind, Trailer,
    BLOCK_HEADER_SIZE_BYTES, BLOCK_PAYLOAD_BYTES_TARGET, BLOCK_TRAILER_SIZE_BYTES,
    FILE_HEADER_SIZE_BYTES, ROW_BODY_BYTES_MAX, SCHEMA_SECTION_HEADER_SIZE_BYTES,
    SCHEMA_SECTION_TRAILER_SIZE_BYTES, SNAPSHOT_TRAILER_SIZE_BYTES,
};

/// What a snapshot file says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotMeta<'a> {
    pub shard_id: u32,
    /// Every row up to and including this LSN is in the snapshot.
    pub lsn: u64,
    pub schema_fingerprint: u64,
    /// The definitions the tuples were written under, opaque here (the server's); empty
    /// when the writer has none to give.
    pub schema: &'a [u8],
}

/// The result of writing a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotWritten {
    pub path: PathBuf,
    pub tuple_count: u64,
    pub size_bytes: u64,
}

/// Turns tuples into the bytes of a snapshot file, in chunks of about a block, keeping the
/// running checksum the trailer needs. Pure: the writers below send the chunks to a file.
struct SnapshotEncoder {
    block: BlockBuilder,
    chunk: Vec<u8>,
    checksum_running: u32,
    block_count: u32,
    tuple_count: u64,
    /// Spaces whose blocks are finished: a space must not come back after another.
    spaces_done: Vec<u32>,
}

impl SnapshotEncoder {
    fn new(meta: &SnapshotMeta) -> SnapshotEncoder {
        let mut chunk = Vec::with_capacity(BLOCK_PAYLOAD_BYTES_TARGET + 4096);
        let header = FileHeader {
            kind: FileKind::Snapshot,
            shard_id: meta.shard_id,
            lsn: meta.lsn,
            schema_fingerprint: meta.schema_fingerprint,
        };
        encode_file_header(&header, &mut chunk);
        encode_schema_section(meta.schema, &mut chunk);
        SnapshotEncoder {
            block: BlockBuilder::default(),
            chunk,
            checksum_running: 0,
            block_count: 0,
            tuple_count: 0,
            spaces_done: Vec::new(),
        }
    }

    /// Adds a tuple; returns a chunk of file bytes when one is ready to write. A tuple over
    /// [`ROW_BODY_BYTES_MAX`] is refused: its block would pass what the readers take back
    /// (their block limit is derived from that size), and its length might not fit the
    /// format's u32.
    fn push(&mut self, space_id: u32, tuple: &[u8]) -> Result<Option<Vec<u8>>> {
        if tuple.len() > ROW_BODY_BYTES_MAX {
            return Err(WalError::SnapshotTupleTooLarge {
                space_id,
                tuple_bytes: tuple.len(),
            });
        }
        let space_changes = !self.block.is_empty() && self.block.space_id() != space_id;
        if space_changes {
            self.spaces_done.push(self.block.space_id());
        }
        assert!(
            !self.spaces_done.contains(&space_id),
            "snapshot input must give each space's tuples together; space {space_id} came back"
        );
        let mut ready = None;
        if space_changes || self.block.payload_bytes() >= BLOCK_PAYLOAD_BYTES_TARGET {
            ready = self.finish_block();
        }
        self.block.push_tuple(space_id, tuple);
        self.tuple_count += 1;
        Ok(ready)
    }

    fn finish_block(&mut self) -> Option<Vec<u8>> {
        if self.block.finish(&mut self.chunk) > 0 {
            self.block_count += 1;
        }
        (!self.chunk.is_empty()).then(|| self.take_chunk())
    }

    fn take_chunk(&mut self) -> Vec<u8> {
        self.checksum_running = crc32c::crc32c_append(self.checksum_running, &self.chunk);
        std::mem::replace(
            &mut self.chunk,
            Vec::with_capacity(BLOCK_PAYLOAD_BYTES_TARGET + 4096),
        )
    }

    /// The last block and the trailer.
    fn finish(mut self) -> (Vec<u8>, u64) {
        let mut last = self.finish_block().unwrap_or_default();
        let trailer = Trailer {
            block_count: self.block_count,
            tuple_count: self.tuple_count,
        };
        encode_trailer(&trailer, self.checksum_running, &mut last);
        (last, self.tuple_count)
    }
}

/// Writes a snapshot of `tuples` into `dir` on the current glommio executor and returns
/// once `<lsn>.snap` is durable. Each space's tuples must come together.
pub async fn write_snapshot<T: AsRef<[u8]>>(
    dir: &Path,
    meta: &SnapshotMeta<'_>,
    tuples: impl IntoIterator<Item = (u32, T)>,
) -> Result<SnapshotWritten> {
    let path_in_progress = dir.join(in_progress_file_name(meta.lsn));
    let path = dir.join(snapshot_file_name(meta.lsn));
    let io_error = |context: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |error: glommio::GlommioError<()>| WalError::io(context, path, error.into())
    };
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .buffered_open(&path_in_progress)
        .await
        .map_err(io_error("creating snapshot", &path_in_progress))?;
    let mut position_bytes = 0u64;
    let mut encoder = SnapshotEncoder::new(meta);
    for (space_id, tuple) in tuples {
        if let Some(chunk) = encoder.push(space_id, tuple.as_ref())? {
            position_bytes += write_all_at(&file, chunk, position_bytes, &path_in_progress).await?;
        }
    }
    let (last, tuple_count) = encoder.finish();
    position_bytes += write_all_at(&file, last, position_bytes, &path_in_progress).await?;
    file.fdatasync()
        .await
        .map_err(io_error("syncing snapshot", &path_in_progress))?;
    file.close()
        .await
        .map_err(io_error("closing snapshot", &path_in_progress))?;
    std::fs::rename(&path_in_progress, &path)
        .map_err(|e| WalError::io("renaming snapshot", &path, e))?;
    let directory = Directory::open(dir)
        .await
        .map_err(io_error("opening data directory", dir))?;
    directory
        .sync()
        .await
        .map_err(io_error("syncing data directory", dir))?;
    let _ = directory.close().await;
    Ok(SnapshotWritten {
        path,
        tuple_count,
        size_bytes: position_bytes,
    })
}

async fn write_all_at(
    file: &glommio::io::BufferedFile,
    chunk: Vec<u8>,
    position_bytes: u64,
    path: &Path,
) -> Result<u64> {
    let length_bytes = chunk.len();
    let written_bytes = file
        .write_at(chunk, position_bytes)
        .await
        .map_err(|e| WalError::io("writing snapshot", path, e.into()))?;
    if written_bytes != length_bytes {
        let error = io::Error::new(
            io::ErrorKind::WriteZero,
            format!("short write: {written_bytes} of {length_bytes} bytes (disk full?)"),
        );
        return Err(WalError::io("writing snapshot", path, error));
    }
    Ok(length_bytes as u64)
}

/// [`write_snapshot`] with blocking `std::fs`, for tools and tests.
pub fn write_snapshot_blocking<T: AsRef<[u8]>>(
    dir: &Path,
    meta: &SnapshotMeta<'_>,
    tuples: impl IntoIterator<Item = (u32, T)>,
) -> Result<SnapshotWritten> {
    let path_in_progress = dir.join(in_progress_file_name(meta.lsn));
    let path = dir.join(snapshot_file_name(meta.lsn));
    let io_error = |context: &'static str| {
        let path = path_in_progress.clone();
        move |error: io::Error| WalError::io(context, path, error)
    };
    let mut file = File::create(&path_in_progress).map_err(io_error("creating snapshot"))?;
    let mut encoder = SnapshotEncoder::new(meta);
    let mut size_bytes = 0u64;
    for (space_id, tuple) in tuples {
        if let Some(chunk) = encoder.push(space_id, tuple.as_ref())? {
            file.write_all(&chunk)
                .map_err(io_error("writing snapshot"))?;
            size_bytes += chunk.len() as u64;
        }
    }
    let (last, tuple_count) = encoder.finish();
    file.write_all(&last)
        .map_err(io_error("writing snapshot"))?;
    size_bytes += last.len() as u64;
    file.sync_data().map_err(io_error("syncing snapshot"))?;
    drop(file);
    std::fs::rename(&path_in_progress, &path)
        .map_err(|e| WalError::io("renaming snapshot", &path, e))?;
    File::open(dir)
        .and_then(|directory| directory.sync_all())
        .map_err(|e| WalError::io("syncing data directory", dir, e))?;
    Ok(SnapshotWritten {
        path,
        tuple_count,
        size_bytes,
    })
}

/// One checked block: the tuples of one space.
#[derive(Debug)]
pub struct SnapshotBlock {
    pub space_id: u32,
    /// Where the block starts in its file.
    pub offset: u64,
    bytes: Vec<u8>,
    tuples: Vec<Range<usize>>,
}

impl SnapshotBlock {
    pub fn tuples(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.tuples.iter().map(|range| &self.bytes[range.clone()])
    }

    pub fn tuple_count(&self) -> usize {
        self.tuples.len()
    }
}

/// Reads a snapshot block by block; the trailer is checked when the blocks end.
pub struct SnapshotReader {
    path: PathBuf,
    input: BufReader<File>,
    /// The file's length at open: a block header that claims more is refused before its
    /// buffer is allocated.
    size_bytes: u64,
    pub header: FileHeader,
    /// The schema section's contents (format version 3); `None` for a version-2 file.
    pub schema: Option<Vec<u8>>,
    offset: u64,
    checksum_running: u32,
    block_count: u32,
    tuple_count: u64,
    finished: bool,
}

impl SnapshotReader {
    pub fn open(path: &Path) -> Result<SnapshotReader> {
        let file = File::open(path).map_err(|e| WalError::io("opening snapshot", path, e))?;
        let size_bytes = file
            .metadata()
            .map_err(|e| WalError::io("opening snapshot", path, e))?
            .len();
        let mut reader = SnapshotReader {
            path: path.to_path_buf(),
            input: BufReader::with_capacity(1 << 20, file),
            size_bytes,
            header: FileHeader {
                kind: FileKind::Snapshot,
                shard_id: 0,
                lsn: 0,
                schema_fingerprint: 0,
            },
            schema: None,
            offset: 0,
            checksum_running: 0,
            block_count: 0,
            tuple_count: 0,
            finished: false,
        };
        let mut bytes = [0u8; FILE_HEADER_SIZE_BYTES];
        reader.read_exact(&mut bytes)?;
        reader.header = decode_file_header(&bytes, FileKind::Snapshot)
            .map_err(|error| reader.corrupt(0, format!("header: {error}")))?;
        if u16::from_le_bytes([bytes[4], bytes[5]]) >= 3 {
            reader.schema = Some(reader.read_schema_section()?);
        }
        Ok(reader)
    }

    fn read_schema_section(&mut self) -> Result<Vec<u8>> {
        let start = self.offset;
        let mut bytes = vec![0u8; SCHEMA_SECTION_HEADER_SIZE_BYTES];
        self.read_exact(&mut bytes)?;
        let length = decode_schema_section_header(&bytes)
            .map_err(|error| self.corrupt(start, error.to_string()))?;
        let rest_bytes = (length + SCHEMA_SECTION_TRAILER_SIZE_BYTES) as u64;
        if self.offset + rest_bytes > self.size_bytes {
            return Err(self.corrupt(self.offset, "the file ends early"));
        }
        bytes.resize(
            SCHEMA_SECTION_HEADER_SIZE_BYTES + length + SCHEMA_SECTION_TRAILER_SIZE_BYTES,
            0,
        );
        self.read_exact(&mut bytes[SCHEMA_SECTION_HEADER_SIZE_BYTES..])?;
        let schema = decode_schema_section(&bytes)
            .map_err(|error| self.corrupt(start, error.to_string()))?;
        Ok(schema.to_vec())
    }

    /// The next block, or `None` after a valid trailer that ends the file.
    pub fn next_block(&mut self) -> Result<Option<SnapshotBlock>> {
        if self.finished {
            return Ok(None);
        }
        let start = self.offset;
        let checksum_before = self.checksum_running;
        let mut bytes = vec![0u8; BLOCK_HEADER_SIZE_BYTES];
        self.read_exact(&mut bytes)?;
        if is_trailer_magic(&bytes) {
            self.read_trailer(start, checksum_before, bytes)?;
            return Ok(None);
        }
        let header =
            decode_block_header(&bytes).map_err(|error| self.corrupt(start, error.to_string()))?;
        // A damaged length (up to the 1 GiB limit) must not cost its size in memory: the
        // read below would fail the same way after zeroing the buffer.
        let rest_bytes = (header.payload_bytes + BLOCK_TRAILER_SIZE_BYTES) as u64;
        if self.offset + rest_bytes > self.size_bytes {
            return Err(self.corrupt(self.offset, "the file ends early"));
        }
        bytes.resize(
            BLOCK_HEADER_SIZE_BYTES + header.payload_bytes + BLOCK_TRAILER_SIZE_BYTES,
            0,
        );
        self.read_exact(&mut bytes[BLOCK_HEADER_SIZE_BYTES..])?;
        let (payload, tuples) = match decode_block(&bytes) {
            Ok((_, payload, tuples)) => (payload, tuples),
            Err(error) => return Err(self.corrupt(start, error.to_string())),
        };
        self.block_count += 1;
        self.tuple_count += u64::from(header.tuple_count);
        Ok(Some(SnapshotBlock {
            space_id: header.space_id,
            offset: start,
            bytes: payload,
            tuples,
        }))
    }

    /// `checksum_before` is the running checksum of every byte before the trailer.
    fn read_trailer(&mut self, start: u64, checksum_before: u32, mut bytes: Vec<u8>) -> Result<()> {
        bytes.resize(SNAPSHOT_TRAILER_SIZE_BYTES, 0);
        self.read_exact(&mut bytes[BLOCK_HEADER_SIZE_BYTES..])?;
        let trailer = decode_trailer(&bytes, checksum_before)
            .map_err(|error| self.corrupt(start, error.to_string()))?;
        if trailer.block_count != self.block_count || trailer.tuple_count != self.tuple_count {
            return Err(self.corrupt(
                start,
                format!(
                    "trailer counts {trailer:?} differ from the file's {} blocks and {} tuples",
                    self.block_count, self.tuple_count
                ),
            ));
        }
        let mut extra = [0u8; 1];
        match self.input.read(&mut extra) {
            Ok(0) => {}
            Ok(_) => return Err(self.corrupt(self.offset, "bytes after the trailer")),
            Err(e) => return Err(WalError::io("reading snapshot", &self.path, e)),
        }
        self.finished = true;
        Ok(())
    }

    fn read_exact(&mut self, bytes: &mut [u8]) -> Result<()> {
        match self.input.read_exact(bytes) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Err(self.corrupt(self.offset, "the file ends early"));
            }
            Err(e) => return Err(WalError::io("reading snapshot", &self.path, e)),
        }
        self.offset += bytes.len() as u64;
        self.checksum_running = crc32c::crc32c_append(self.checksum_running, bytes);
        Ok(())
    }

    fn corrupt(&self, offset: u64, reason: impl Into<String>) -> WalError {
        WalError::corrupt(&self.path, offset, reason)
    }
}

/// A tuple and the space it belongs to.
pub type SpaceTuple = (u32, Vec<u8>);

/// Checks the whole snapshot and returns its header and (space id, tuple) pairs; for tests
/// and tools, since it holds everything in memory.
pub fn read_snapshot_all(path: &Path) -> Result<(FileHeader, Vec<SpaceTuple>)> {
    let mut reader = SnapshotReader::open(path)?;
    let mut tuples = Vec::new();
    while let Some(block) = reader.next_block()? {
        tuples.extend(block.tuples().map(|tuple| (block.space_id, tuple.to_vec())));
    }
    Ok((reader.header, tuples))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::format::{BlockBuilder, BLOCK_MAGIC};

    fn header_bytes() -> Vec<u8> {
        let mut bytes = Vec::new();
        let header = FileHeader {
            kind: FileKind::Snapshot,
            shard_id: 0,
            lsn: 5,
            schema_fingerprint: 1,
        };
        crate::wal::format::encode_file_header(&header, &mut bytes);
        encode_schema_section(b"schema", &mut bytes);
        bytes
    }

    fn read_error(bytes: &[u8]) -> WalError {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000005.snap");
        std::fs::write(&path, bytes).unwrap();
        let mut reader = SnapshotReader::open(&path).unwrap();
        match reader.next_block() {
            Err(WalError::Corrupt { offset, reason, .. }) => WalError::Corrupt {
                file: PathBuf::new(),
                offset,
                reason,
            },
            other => panic!("{other:?}"),
        }
    }

    /// Seen while running the `wal_files` fuzz target (its RSS passed 1 GB): a block header
    /// claiming a payload of up to the 1 GiB limit made the reader allocate and zero a
    /// buffer of that size before finding that the file ends early. It is refused from the
    /// file's length now. (The error was the same before; only the buffer is gone, which
    /// this test does not measure.)
    #[test]
    fn a_block_longer_than_the_file_ends_it_early() {
        let mut bytes = header_bytes();
        bytes.extend_from_slice(&BLOCK_MAGIC);
        bytes.extend_from_slice(&512u32.to_le_bytes());
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&(1u32 << 30).to_le_bytes());
        bytes.extend_from_slice(&[0; 64]);
        let expected = WalError::Corrupt {
            file: PathBuf::new(),
            offset: (header_bytes().len() + BLOCK_HEADER_SIZE_BYTES) as u64,
            reason: "the file ends early".into(),
        };
        assert_eq!(read_error(&bytes).to_string(), expected.to_string());
        // A real block cut short by one byte: the same error, at the same place.
        let mut bytes = header_bytes();
        let mut builder = BlockBuilder::default();
        builder.push_tuple(512, &[0x91, 0x01]);
        builder.finish(&mut bytes);
        bytes.pop();
        assert_eq!(read_error(&bytes).to_string(), expected.to_string());
    }

    #[test]
    fn the_schema_section_is_read_back_and_checked() {
        let bytes = header_bytes();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000005.snap");
        std::fs::write(&path, &bytes).unwrap();
        let reader = SnapshotReader::open(&path).unwrap();
        assert_eq!(reader.schema.as_deref(), Some(&b"schema"[..]));
        // Any byte of the section changed, or the section cut short: corrupt, at its start.
        for at in FILE_HEADER_SIZE_BYTES..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            std::fs::write(&path, &damaged).unwrap();
            let error = SnapshotReader::open(&path).err().expect("refused");
            assert!(matches!(error, WalError::Corrupt { .. }), "{at}: {error}");
            std::fs::write(&path, &bytes[..at]).unwrap();
            assert!(SnapshotReader::open(&path).is_err(), "cut at {at}");
        }
    }

    /// A tuple the snapshot readers would refuse (past the row limit; past 4 GiB its length
    /// would not even fit the format's u32) is refused when written, as a typed error rather
    /// than a panic: with `wal_mode = none` no row limit stops it before. The tuple is
    /// never read (the check comes first), so its zeroed pages are never touched.
    #[test]
    fn a_tuple_over_the_row_limit_is_refused_not_written_or_panicked_on() {
        let dir = tempfile::tempdir().unwrap();
        let meta = SnapshotMeta {
            shard_id: 0,
            lsn: 5,
            schema_fingerprint: 1,
            schema: &[],
        };
        let huge = vec![0u8; ROW_BODY_BYTES_MAX + 1];
        let tuples = [(512, vec![0x91, 0x01]), (512, huge)];
        match write_snapshot_blocking(dir.path(), &meta, tuples) {
            Err(WalError::SnapshotTupleTooLarge {
                space_id,
                tuple_bytes,
            }) => assert_eq!((space_id, tuple_bytes), (512, ROW_BODY_BYTES_MAX + 1)),
            other => panic!("{other:?}"),
        }
        assert!(!dir.path().join(snapshot_file_name(5)).exists());
    }
}
