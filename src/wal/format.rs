//! The bytes of WAL and snapshot files: headers, batches, rows, blocks and the trailer, as
//! specified in `docs/format.md`.
//!
//! Pure functions over byte slices: no I/O, no storage types, no executor. The body of a row
//! or a snapshot tuple is opaque msgpack here. Decoders never panic on any input; they say
//! what is wrong with a [`DecodeError`], and the reader decides whether that is a torn tail or
//! corruption, since only it knows where the bytes sit in the file.

// Bytes here come from clients or disk: an `expect` or a truncating cast is fixed or says
// where it stands why it cannot fire.
#![warn(clippy::expect_used, clippy::cast_possible_truncation)]

use std::fmt;
use std::ops::Range;

/// `TWAL`: the first bytes of a WAL file.
pub const WAL_MAGIC: [u8; 4] = *b"TWAL";
/// `TSNP`: the first bytes of a snapshot file.
pub const SNAPSHOT_MAGIC: [u8; 4] = *b"TSNP";
/// `TBAT`: the first bytes of a batch.
pub const BATCH_MAGIC: [u8; 4] = *b"TBAT";
/// `TBLK`: the first bytes of a snapshot block.
pub const BLOCK_MAGIC: [u8; 4] = *b"TBLK";
/// `TEND`: the first bytes of a snapshot trailer.
pub const TRAILER_MAGIC: [u8; 4] = *b"TEND";
/// `TCLS`: the first bytes of the clean-close mark that ends a WAL file closed cleanly.
pub const CLOSE_MARK_MAGIC: [u8; 4] = *b"TCLS";
/// Version 3 added the clean-close mark; a version-2 file never has one.
pub const WAL_FORMAT_VERSION: u16 = 3;
/// The oldest WAL version this build reads.
pub const WAL_FORMAT_VERSION_OLDEST: u16 = 2;
/// Version 2: snapshot blocks are zstd-compressed. Version 3: a schema section follows the
/// header.
pub const SNAPSHOT_FORMAT_VERSION: u16 = 3;
/// The oldest snapshot version this build reads.
pub const SNAPSHOT_FORMAT_VERSION_OLDEST: u16 = 2;
/// `TSCM`: the first bytes of a snapshot's schema section.
pub const SCHEMA_SECTION_MAGIC: [u8; 4] = *b"TSCM";
/// Magic and length before a schema section's bytes, its checksum after them.
pub const SCHEMA_SECTION_HEADER_SIZE_BYTES: usize = 8;
pub const SCHEMA_SECTION_TRAILER_SIZE_BYTES: usize = 4;
/// A schema section claiming more is corrupt: thousands of spaces take far less.
pub const SCHEMA_SECTION_BYTES_LIMIT: usize = 64 << 20;
/// No row or file ever has this LSN (no LSN could follow it); headers and batches that claim
/// it are corrupt, so that every reader may add 1 to an LSN it has read.
pub const LSN_NEVER: u64 = u64::MAX;

pub const FILE_HEADER_SIZE_BYTES: usize = 32;
pub const BATCH_HEADER_SIZE_BYTES: usize = 20;
pub const BATCH_TRAILER_SIZE_BYTES: usize = 4;
pub const ROW_HEADER_SIZE_BYTES: usize = 17;
pub const BLOCK_HEADER_SIZE_BYTES: usize = 16;
pub const BLOCK_TRAILER_SIZE_BYTES: usize = 4;
pub const SNAPSHOT_TRAILER_SIZE_BYTES: usize = 20;
pub const CLOSE_MARK_SIZE_BYTES: usize = 24;

/// The largest row body (a whole tuple, or a key) the writer logs: a tuple as large as the
/// largest packet a client may send (`config::settings::MAX_PACKET_SIZE_BYTES_MAX`, which
/// `server::limits` holds to it). The writer refuses a larger one
/// ([`crate::wal::error::WalError::RowTooLarge`]) rather than log a row no reader would
/// take back.
pub const ROW_BODY_BYTES_MAX: usize = 1 << 30;
/// The writer closes a batch before its payload passes this, so one batch never holds a
/// whole flush of a very busy shard; only a row larger than it stands in a batch alone.
pub const BATCH_PAYLOAD_BYTES_MAX: usize = 16 << 20;
/// A reader refuses a larger payload length as corrupt instead of trusting it with memory:
/// the largest payload the writer writes, a batch of rows or one largest row.
pub const BATCH_PAYLOAD_BYTES_LIMIT: usize = max(
    BATCH_PAYLOAD_BYTES_MAX,
    ROW_HEADER_SIZE_BYTES + ROW_BODY_BYTES_MAX,
);
/// The snapshot writer closes a block once its payload passes this.
pub const BLOCK_PAYLOAD_BYTES_TARGET: usize = 1 << 20;
/// A reader refuses a larger block payload length (stored or decompressed) as corrupt: a
/// block the writer had not closed yet (below the target), one more tuple of the largest
/// size with its length, compressed by zstd at its worst.
pub const BLOCK_PAYLOAD_BYTES_LIMIT: usize =
    zstd_compress_bound(BLOCK_PAYLOAD_BYTES_TARGET + 4 + ROW_BODY_BYTES_MAX);

// Every length the readers accept fits the u32 length fields the writers write.
const _: () = assert!(BATCH_PAYLOAD_BYTES_LIMIT <= u32::MAX as usize);
const _: () = assert!(BLOCK_PAYLOAD_BYTES_LIMIT <= u32::MAX as usize);
// The limits the readers had before they were derived from the writers' constants: files
// written then are still read.
const _: () = assert!(BATCH_PAYLOAD_BYTES_LIMIT >= 1 << 30);
const _: () = assert!(BLOCK_PAYLOAD_BYTES_LIMIT >= 1 << 30);

const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

/// `ZSTD_COMPRESSBOUND`: the most bytes zstd compresses `size_bytes` into.
const fn zstd_compress_bound(size_bytes: usize) -> usize {
    let small_input_margin = if size_bytes < 128 << 10 {
        ((128 << 10) - size_bytes) >> 11
    } else {
        0
    };
    size_bytes + (size_bytes >> 8) + small_input_margin
}
/// Fast compression: snapshots are written while the shard serves.
const ZSTD_LEVEL: i32 = 1;

/// What a row does on replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RowKind {
    /// The body is the whole new tuple.
    Replace = 1,
    /// The body is the primary key of the deleted tuple.
    Delete = 2,
    /// A schema change of the row's space (see [`SchemaRow`]); it heads its batch.
    Schema = 3,
}

impl RowKind {
    pub fn from_byte(byte: u8) -> Option<RowKind> {
        match byte {
            1 => Some(RowKind::Replace),
            2 => Some(RowKind::Delete),
            3 => Some(RowKind::Schema),
            _ => None,
        }
    }
}

/// The body of a [`RowKind::Schema`] row: the schema version the change makes, then the
/// space's new definition, opaque here (the server's `_space` and `_index` rows; empty when
/// the change drops the space).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaRow<'a> {
    pub version: u64,
    pub definition: &'a [u8],
}

impl<'a> SchemaRow<'a> {
    /// `[version u64 LE][definition]`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(self.definition);
    }

    /// `None` for a body too short to hold the version.
    pub fn decode(body: &'a [u8]) -> Option<SchemaRow<'a>> {
        let version = u64::from_le_bytes(body.get(..8)?.try_into().ok()?);
        Some(SchemaRow {
            version,
            definition: &body[8..],
        })
    }
}

/// One decoded row, borrowing its body from the batch bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row<'a> {
    pub lsn: u64,
    pub kind: RowKind,
    pub space_id: u32,
    pub body: &'a [u8],
}

/// Which kind of file a header belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Wal,
    Snapshot,
}

impl FileKind {
    fn magic(self) -> [u8; 4] {
        match self {
            FileKind::Wal => WAL_MAGIC,
            FileKind::Snapshot => SNAPSHOT_MAGIC,
        }
    }

    /// The version this build writes.
    fn version(self) -> u16 {
        match self {
            FileKind::Wal => WAL_FORMAT_VERSION,
            FileKind::Snapshot => SNAPSHOT_FORMAT_VERSION,
        }
    }

    fn reads_version(self, version: u16) -> bool {
        match self {
            FileKind::Wal => (WAL_FORMAT_VERSION_OLDEST..=WAL_FORMAT_VERSION).contains(&version),
            FileKind::Snapshot => {
                (SNAPSHOT_FORMAT_VERSION_OLDEST..=SNAPSHOT_FORMAT_VERSION).contains(&version)
            }
        }
    }
}

/// A snapshot's schema section: `TSCM`, the length of the schema (u32), the schema (opaque
/// here: the server's definitions of its spaces), and a crc32c of the bytes before it.
pub fn encode_schema_section(schema: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&SCHEMA_SECTION_MAGIC);
    out.extend_from_slice(&length_u32(schema.len()).to_le_bytes());
    out.extend_from_slice(schema);
    let checksum = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&checksum.to_le_bytes());
}

/// The length of the schema a section header claims, checked against the limit.
pub fn decode_schema_section_header(bytes: &[u8]) -> Result<usize, DecodeError> {
    if bytes.len() < SCHEMA_SECTION_HEADER_SIZE_BYTES || bytes[0..4] != SCHEMA_SECTION_MAGIC {
        return Err(DecodeError::invalid("no schema section after the header"));
    }
    let length = u32_at(bytes, 4) as usize;
    if length > SCHEMA_SECTION_BYTES_LIMIT {
        return Err(DecodeError::invalid(format!(
            "schema section of {length} bytes, above the limit"
        )));
    }
    Ok(length)
}

/// Checks a whole section (header, schema, checksum) and returns its schema.
pub fn decode_schema_section(bytes: &[u8]) -> Result<&[u8], DecodeError> {
    let length = decode_schema_section_header(bytes)?;
    let end = SCHEMA_SECTION_HEADER_SIZE_BYTES + length;
    if bytes.len() != end + SCHEMA_SECTION_TRAILER_SIZE_BYTES {
        return Err(DecodeError::invalid("schema section of the wrong length"));
    }
    if u32_at(bytes, end) != crc32c::crc32c(&bytes[..end]) {
        return Err(DecodeError::invalid("schema section checksum mismatch"));
    }
    Ok(&bytes[SCHEMA_SECTION_HEADER_SIZE_BYTES..end])
}

/// The header shared by WAL and snapshot files. `lsn` is the first LSN of a WAL file, or the
/// LSN a snapshot is complete up to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    pub kind: FileKind,
    pub shard_id: u32,
    pub lsn: u64,
    pub schema_fingerprint: u64,
}

/// Why bytes do not decode. Offsets are relative to the slice given to the decoder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The bytes end before the structure does: `needed_bytes` in all.
    Incomplete { needed_bytes: usize },
    /// The structure is complete but wrong.
    Invalid { reason: String },
}

impl DecodeError {
    fn invalid(reason: impl Into<String>) -> DecodeError {
        DecodeError::Invalid {
            reason: reason.into(),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Incomplete { needed_bytes } => {
                write!(formatter, "incomplete: {needed_bytes} bytes needed")
            }
            DecodeError::Invalid { reason } => formatter.write_str(reason),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Little-endian field access. Readers are only called after a length check.

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

fn need(bytes: &[u8], needed_bytes: usize) -> Result<(), DecodeError> {
    if bytes.len() < needed_bytes {
        return Err(DecodeError::Incomplete { needed_bytes });
    }
    Ok(())
}

#[allow(
    clippy::expect_used,
    reason = "every length written is bounded below 4 GiB: ROW_BODY_BYTES_MAX, the limits' assertions"
)]
fn length_u32(length: usize) -> u32 {
    u32::try_from(length).expect("length fits in u32")
}

// ---------------------------------------------------------------------------------------------
// File header

pub fn encode_file_header(header: &FileHeader, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&header.kind.magic());
    out.extend_from_slice(&header.kind.version().to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&header.shard_id.to_le_bytes());
    out.extend_from_slice(&header.lsn.to_le_bytes());
    out.extend_from_slice(&header.schema_fingerprint.to_le_bytes());
    let checksum = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&checksum.to_le_bytes());
    debug_assert_eq!(out.len() - start, FILE_HEADER_SIZE_BYTES);
}

pub fn decode_file_header(bytes: &[u8], kind: FileKind) -> Result<FileHeader, DecodeError> {
    decode_file_header_versioned(bytes, kind).map(|(header, _)| header)
}

/// [`decode_file_header`] and the file's format version, which says what else the file may
/// hold (a WAL file of version 3 may end with a [`CloseMark`]).
pub fn decode_file_header_versioned(
    bytes: &[u8],
    kind: FileKind,
) -> Result<(FileHeader, u16), DecodeError> {
    need(bytes, FILE_HEADER_SIZE_BYTES)?;
    if bytes[0..4] != kind.magic() {
        return Err(DecodeError::invalid(format!(
            "bad file magic {:02x?}, expected {:?}",
            &bytes[0..4],
            kind
        )));
    }
    let checksum_expected = crc32c::crc32c(&bytes[0..28]);
    if u32_at(bytes, 28) != checksum_expected {
        return Err(DecodeError::invalid("file header checksum mismatch"));
    }
    let version = u16_at(bytes, 4);
    if !kind.reads_version(version) {
        let oldest = match kind {
            FileKind::Wal => WAL_FORMAT_VERSION_OLDEST,
            FileKind::Snapshot => SNAPSHOT_FORMAT_VERSION_OLDEST,
        };
        return Err(DecodeError::invalid(format!(
            "{kind:?} format version {version} is not supported (this build reads versions \
             {oldest} to {}; a newer tarn wrote it?)",
            kind.version()
        )));
    }
    let lsn = u64_at(bytes, 12);
    if lsn == LSN_NEVER {
        // Whatever reads on from it adds 1 to it.
        return Err(DecodeError::invalid(format!(
            "header LSN {lsn} is never written"
        )));
    }
    let header = FileHeader {
        kind,
        shard_id: u32_at(bytes, 8),
        lsn,
        schema_fingerprint: u64_at(bytes, 20),
    };
    Ok((header, version))
}

// ---------------------------------------------------------------------------------------------
// Clean-close mark

/// The record a writer appends to a WAL file it closes cleanly, after syncing every batch:
/// with it, a bad batch in the file cannot be a write cut short by a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloseMark {
    /// Where the mark starts: the file's size before it, so the end of its last batch.
    pub offset: u64,
    /// The LSN of the file's last row, or its first LSN - 1 if it holds none.
    pub lsn_last: u64,
}

pub fn encode_close_mark(mark: &CloseMark, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&CLOSE_MARK_MAGIC);
    out.extend_from_slice(&mark.offset.to_le_bytes());
    out.extend_from_slice(&mark.lsn_last.to_le_bytes());
    let checksum = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&checksum.to_le_bytes());
    debug_assert_eq!(out.len() - start, CLOSE_MARK_SIZE_BYTES);
}

/// Decodes the mark at the start of `bytes`.
pub fn decode_close_mark(bytes: &[u8]) -> Result<CloseMark, DecodeError> {
    need(bytes, CLOSE_MARK_SIZE_BYTES)?;
    if bytes[0..4] != CLOSE_MARK_MAGIC {
        return Err(DecodeError::invalid("bad clean-close mark magic"));
    }
    if u32_at(bytes, 20) != crc32c::crc32c(&bytes[0..20]) {
        return Err(DecodeError::invalid("clean-close mark checksum mismatch"));
    }
    Ok(CloseMark {
        offset: u64_at(bytes, 4),
        lsn_last: u64_at(bytes, 12),
    })
}

/// The mark that ends `file` (a whole WAL file, header first), if the file ends with a valid
/// one that says it starts where it does. A mark anywhere else is not one.
pub fn trailing_close_mark(file: &[u8]) -> Option<CloseMark> {
    let offset = file.len().checked_sub(CLOSE_MARK_SIZE_BYTES)?;
    if offset < FILE_HEADER_SIZE_BYTES {
        return None;
    }
    let mark = decode_close_mark(&file[offset..]).ok()?;
    (mark.offset == offset as u64).then_some(mark)
}

/// Whether `rest` (the bytes from where a batch was expected to the end of the file) is a
/// clean-close mark whose writing was cut short: its magic, and no longer than a mark.
pub fn is_partial_close_mark(rest: &[u8]) -> bool {
    rest.len() <= CLOSE_MARK_SIZE_BYTES && rest.starts_with(&CLOSE_MARK_MAGIC)
}

// ---------------------------------------------------------------------------------------------
// Batches

/// Builds batches in a buffer: open one, push rows, seal it (header fields and checksum are
/// filled in at sealing, so rows are copied once). Several sealed batches can share the
/// buffer: the writer sends them all with one write.
#[derive(Debug, Default)]
pub struct BatchBuilder {
    bytes: Vec<u8>,
    /// Offset of the open batch in `bytes`, if one is open.
    open_start: Option<usize>,
    open_row_count: u32,
    open_lsn_first: u64,
}

impl BatchBuilder {
    pub fn with_capacity(capacity_bytes: usize) -> BatchBuilder {
        BatchBuilder {
            bytes: Vec::with_capacity(capacity_bytes),
            ..BatchBuilder::default()
        }
    }

    /// Appends a row with `lsn`, opening a batch if none is open and closing the open one
    /// first if it would pass [`BATCH_PAYLOAD_BYTES_MAX`], or if the row is a schema row,
    /// which heads a batch (recovery cuts an uncommitted one off with its batch and all
    /// after it). LSNs must be consecutive.
    pub fn push_row(&mut self, lsn: u64, kind: RowKind, space_id: u32, body: &[u8]) {
        assert!(lsn > 0, "LSN 0 means nothing and is never written");
        if let Some(start) = self.open_start {
            assert_eq!(lsn, self.open_lsn_first + u64::from(self.open_row_count));
            let payload_bytes = self.bytes.len() - start - BATCH_HEADER_SIZE_BYTES;
            let full = payload_bytes + ROW_HEADER_SIZE_BYTES + body.len() > BATCH_PAYLOAD_BYTES_MAX;
            if full || kind == RowKind::Schema {
                self.seal();
            }
        }
        if self.open_start.is_none() {
            self.open_start = Some(self.bytes.len());
            self.open_row_count = 0;
            self.open_lsn_first = lsn;
            // Placeholder, filled in by `seal`.
            self.bytes
                .resize(self.bytes.len() + BATCH_HEADER_SIZE_BYTES, 0);
        }
        encode_row(lsn, kind, space_id, body, &mut self.bytes);
        self.open_row_count += 1;
    }

    /// Closes the open batch, if any: header and checksum.
    pub fn seal(&mut self) {
        let Some(start) = self.open_start.take() else {
            return;
        };
        assert!(self.open_row_count >= 1);
        let payload_bytes = self.bytes.len() - start - BATCH_HEADER_SIZE_BYTES;
        let header = &mut self.bytes[start..start + BATCH_HEADER_SIZE_BYTES];
        header[0..4].copy_from_slice(&BATCH_MAGIC);
        header[4..8].copy_from_slice(&self.open_row_count.to_le_bytes());
        header[8..12].copy_from_slice(&length_u32(payload_bytes).to_le_bytes());
        header[12..20].copy_from_slice(&self.open_lsn_first.to_le_bytes());
        let checksum = crc32c::crc32c(&self.bytes[start..]);
        self.bytes.extend_from_slice(&checksum.to_le_bytes());
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn len_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Seals the open batch and hands over every byte, leaving an empty buffer of the same
    /// capacity behind, so the steady state reuses capacity rather than growing from zero.
    pub fn take(&mut self) -> Vec<u8> {
        self.seal();
        let capacity_bytes = self.bytes.capacity();
        std::mem::replace(&mut self.bytes, Vec::with_capacity(capacity_bytes))
    }
}

fn encode_row(lsn: u64, kind: RowKind, space_id: u32, body: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&lsn.to_le_bytes());
    out.push(kind as u8);
    out.extend_from_slice(&space_id.to_le_bytes());
    out.extend_from_slice(&length_u32(body.len()).to_le_bytes());
    out.extend_from_slice(body);
}

/// Encodes one sealed batch of `rows` (LSNs consecutive) into `out`. Tests and tools use it;
/// the writer uses [`BatchBuilder`].
pub fn encode_batch<'a>(rows: impl IntoIterator<Item = Row<'a>>, out: &mut Vec<u8>) {
    let mut builder = BatchBuilder::default();
    for row in rows {
        builder.push_row(row.lsn, row.kind, row.space_id, row.body);
    }
    out.extend_from_slice(&builder.take());
}

/// A checked batch: its rows are known to parse and to be consecutive.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    pub lsn_first: u64,
    pub row_count: u32,
    /// Bytes the batch takes, header and checksum included.
    pub size_bytes: usize,
    payload: &'a [u8],
}

impl<'a> Batch<'a> {
    pub fn lsn_last(&self) -> u64 {
        self.lsn_first + u64::from(self.row_count) - 1
    }

    pub fn rows(&self) -> RowIter<'a> {
        RowIter {
            payload: self.payload,
            at: 0,
        }
    }
}

/// The rows of a checked batch.
pub struct RowIter<'a> {
    payload: &'a [u8],
    at: usize,
}

impl<'a> Iterator for RowIter<'a> {
    type Item = Row<'a>;

    fn next(&mut self) -> Option<Row<'a>> {
        if self.at >= self.payload.len() {
            return None;
        }
        // The batch was checked by `decode_batch`, so a row that does not parse is a bug.
        #[allow(clippy::expect_used, reason = "checked by `decode_batch`")]
        let (row, size_bytes) =
            decode_row(&self.payload[self.at..]).expect("rows of a checked batch parse");
        self.at += size_bytes;
        Some(row)
    }
}

fn decode_row(bytes: &[u8]) -> Result<(Row<'_>, usize), DecodeError> {
    if bytes.len() < ROW_HEADER_SIZE_BYTES {
        return Err(DecodeError::invalid("row header runs past the payload"));
    }
    let kind_byte = bytes[8];
    let kind = RowKind::from_byte(kind_byte)
        .ok_or_else(|| DecodeError::invalid(format!("unknown row kind {kind_byte}")))?;
    let body_bytes = u32_at(bytes, 13) as usize;
    let size_bytes = ROW_HEADER_SIZE_BYTES + body_bytes;
    if bytes.len() < size_bytes {
        return Err(DecodeError::invalid("row body runs past the payload"));
    }
    let row = Row {
        lsn: u64_at(bytes, 0),
        kind,
        space_id: u32_at(bytes, 9),
        body: &bytes[ROW_HEADER_SIZE_BYTES..size_bytes],
    };
    Ok((row, size_bytes))
}

/// The size a batch starting at `bytes` claims, from its header alone, if the header is there
/// and plausible. The reader uses it to tell a torn tail from damage in the middle.
pub fn batch_size_claimed(bytes: &[u8]) -> Option<usize> {
    if bytes.len() < BATCH_HEADER_SIZE_BYTES || bytes[0..4] != BATCH_MAGIC {
        return None;
    }
    let payload_bytes = u32_at(bytes, 8) as usize;
    if payload_bytes > BATCH_PAYLOAD_BYTES_LIMIT {
        return None;
    }
    Some(BATCH_HEADER_SIZE_BYTES + payload_bytes + BATCH_TRAILER_SIZE_BYTES)
}

/// Decodes and checks the batch at the start of `bytes` (which may hold more after it).
pub fn decode_batch(bytes: &[u8]) -> Result<Batch<'_>, DecodeError> {
    need(bytes, BATCH_HEADER_SIZE_BYTES)?;
    if bytes[0..4] != BATCH_MAGIC {
        return Err(DecodeError::invalid(format!(
            "bad batch magic {:02x?}",
            &bytes[0..4]
        )));
    }
    let row_count = u32_at(bytes, 4);
    let payload_bytes = u32_at(bytes, 8) as usize;
    let lsn_first = u64_at(bytes, 12);
    if payload_bytes > BATCH_PAYLOAD_BYTES_LIMIT {
        return Err(DecodeError::invalid(format!(
            "batch payload length {payload_bytes} is above the limit"
        )));
    }
    let payload_end = BATCH_HEADER_SIZE_BYTES + payload_bytes;
    let size_bytes = payload_end + BATCH_TRAILER_SIZE_BYTES;
    need(bytes, size_bytes)?;
    let checksum_expected = crc32c::crc32c(&bytes[..payload_end]);
    if u32_at(bytes, payload_end) != checksum_expected {
        return Err(DecodeError::invalid("batch checksum mismatch"));
    }
    if row_count == 0 || lsn_first == 0 {
        return Err(DecodeError::invalid("batch with no rows or LSN 0"));
    }
    // The last LSN stays below `LSN_NEVER`, so the one after it is an LSN too.
    if lsn_first.checked_add(u64::from(row_count)).is_none() {
        return Err(DecodeError::invalid(format!(
            "batch of {row_count} rows from LSN {lsn_first} reaches LSN {LSN_NEVER}, which is never written"
        )));
    }
    let payload = &bytes[BATCH_HEADER_SIZE_BYTES..payload_end];
    check_rows(payload, row_count, lsn_first)?;
    Ok(Batch {
        lsn_first,
        row_count,
        size_bytes,
        payload,
    })
}

fn check_rows(payload: &[u8], row_count: u32, lsn_first: u64) -> Result<(), DecodeError> {
    let mut at = 0;
    let mut rows_seen: u32 = 0;
    while at < payload.len() {
        let (row, size_bytes) = decode_row(&payload[at..])?;
        let lsn_expected = lsn_first.checked_add(u64::from(rows_seen));
        if Some(row.lsn) != lsn_expected {
            return Err(DecodeError::invalid(format!(
                "row {rows_seen} has LSN {}, expected {lsn_expected:?}",
                row.lsn
            )));
        }
        rows_seen += 1;
        at += size_bytes;
    }
    if rows_seen != row_count {
        return Err(DecodeError::invalid(format!(
            "batch claims {row_count} rows, payload holds {rows_seen}"
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Snapshot blocks and trailer

/// Builds snapshot blocks: tuples of one space until the payload passes the target size.
#[derive(Debug, Default)]
pub struct BlockBuilder {
    bytes: Vec<u8>,
    space_id: u32,
    tuple_count: u32,
}

impl BlockBuilder {
    pub fn is_empty(&self) -> bool {
        self.tuple_count == 0
    }

    pub fn space_id(&self) -> u32 {
        self.space_id
    }

    pub fn payload_bytes(&self) -> usize {
        self.bytes.len().saturating_sub(BLOCK_HEADER_SIZE_BYTES)
    }

    /// Adds a tuple; the caller finishes the block first when the space changes, and refuses
    /// a tuple over [`ROW_BODY_BYTES_MAX`] (as the snapshot writer does), which keeps every
    /// length here below 4 GiB.
    pub fn push_tuple(&mut self, space_id: u32, tuple: &[u8]) {
        if self.tuple_count == 0 {
            self.bytes.clear();
            self.bytes.resize(BLOCK_HEADER_SIZE_BYTES, 0);
            self.space_id = space_id;
        }
        assert_eq!(space_id, self.space_id, "one space per block");
        self.bytes
            .extend_from_slice(&length_u32(tuple.len()).to_le_bytes());
        self.bytes.extend_from_slice(tuple);
        self.tuple_count += 1;
    }

    /// Finishes the block into `out` and empties the builder; returns its tuple count.
    /// The payload is stored zstd-compressed: tuples of one space repeat their shape, and a
    /// snapshot no larger than the data's msgpack is what users compare against.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> u32 {
        let tuple_count = self.tuple_count;
        if tuple_count == 0 {
            return 0;
        }
        #[allow(
            clippy::expect_used,
            reason = "compressing into a growable buffer cannot fail"
        )]
        let compressed = zstd::bulk::compress(&self.bytes[BLOCK_HEADER_SIZE_BYTES..], ZSTD_LEVEL)
            .expect("zstd compresses any input into a growable buffer");
        let start = out.len();
        out.extend_from_slice(&BLOCK_MAGIC);
        out.extend_from_slice(&self.space_id.to_le_bytes());
        out.extend_from_slice(&tuple_count.to_le_bytes());
        out.extend_from_slice(&length_u32(compressed.len()).to_le_bytes());
        out.extend_from_slice(&compressed);
        let checksum = crc32c::crc32c(&out[start..]);
        out.extend_from_slice(&checksum.to_le_bytes());
        self.tuple_count = 0;
        self.bytes.clear();
        tuple_count
    }
}

/// A block's fixed header fields, read before its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    pub space_id: u32,
    pub tuple_count: u32,
    pub payload_bytes: usize,
}

/// What follows the blocks: either another block's header or the trailer. Both start with
/// a 4-byte magic; the caller reads [`BLOCK_HEADER_SIZE_BYTES`] or the trailer accordingly.
pub fn is_trailer_magic(bytes: &[u8]) -> bool {
    bytes.len() >= 4 && bytes[0..4] == TRAILER_MAGIC
}

pub fn decode_block_header(bytes: &[u8]) -> Result<BlockHeader, DecodeError> {
    need(bytes, BLOCK_HEADER_SIZE_BYTES)?;
    if bytes[0..4] != BLOCK_MAGIC {
        return Err(DecodeError::invalid(format!(
            "bad block magic {:02x?}",
            &bytes[0..4]
        )));
    }
    let header = BlockHeader {
        space_id: u32_at(bytes, 4),
        tuple_count: u32_at(bytes, 8),
        payload_bytes: u32_at(bytes, 12) as usize,
    };
    if header.payload_bytes > BLOCK_PAYLOAD_BYTES_LIMIT || header.tuple_count == 0 {
        return Err(DecodeError::invalid(format!(
            "implausible block header: {header:?}"
        )));
    }
    Ok(header)
}

/// Decompresses a block payload, refusing to grow past the payload limit (a damaged or
/// hostile frame must not exhaust memory).
fn decompress_bounded(compressed: &[u8]) -> Result<Vec<u8>, DecodeError> {
    use std::io::Read;
    let invalid = |error: std::io::Error| {
        DecodeError::invalid(format!("block payload does not decompress: {error}"))
    };
    // A block written by `zstd::bulk::compress` records its payload's size in its frame:
    // one call then decompresses straight into a buffer of that size, where a stream
    // would go through its window and a growing buffer.
    if let Ok(Some(size_bytes)) = zstd::zstd_safe::get_frame_content_size(compressed) {
        if size_bytes > BLOCK_PAYLOAD_BYTES_LIMIT as u64 {
            return Err(DecodeError::invalid(
                "block payload is larger than the limit",
            ));
        }
        #[allow(
            clippy::cast_possible_truncation,
            reason = "at most BLOCK_PAYLOAD_BYTES_LIMIT, a usize, checked above"
        )]
        let payload = zstd::bulk::decompress(compressed, size_bytes as usize).map_err(invalid)?;
        if payload.len() as u64 != size_bytes {
            return Err(DecodeError::invalid(format!(
                "block payload is {} bytes, its frame says {size_bytes}",
                payload.len()
            )));
        }
        return Ok(payload);
    }
    let decoder = zstd::stream::read::Decoder::new(compressed).map_err(invalid)?;
    let mut payload = Vec::new();
    decoder
        .take(BLOCK_PAYLOAD_BYTES_LIMIT as u64 + 1)
        .read_to_end(&mut payload)
        .map_err(invalid)?;
    if payload.len() > BLOCK_PAYLOAD_BYTES_LIMIT {
        return Err(DecodeError::invalid(
            "block payload is larger than the limit",
        ));
    }
    Ok(payload)
}

/// A checked block: its header, its decompressed payload and where each tuple is in it.
pub type DecodedBlock = (BlockHeader, Vec<u8>, Vec<Range<usize>>);

/// Checks a whole block (header, payload, checksum), decompresses its payload and returns
/// it with the place of each tuple in it.
pub fn decode_block(bytes: &[u8]) -> Result<DecodedBlock, DecodeError> {
    let header = decode_block_header(bytes)?;
    let payload_end = BLOCK_HEADER_SIZE_BYTES + header.payload_bytes;
    need(bytes, payload_end + BLOCK_TRAILER_SIZE_BYTES)?;
    if u32_at(bytes, payload_end) != crc32c::crc32c(&bytes[..payload_end]) {
        return Err(DecodeError::invalid("block checksum mismatch"));
    }
    let compressed = &bytes[BLOCK_HEADER_SIZE_BYTES..payload_end];
    let payload = decompress_bounded(compressed)?;
    // Each tuple takes its 4-byte length at least: the count alone may be a damaged one.
    let mut tuples = Vec::with_capacity((header.tuple_count as usize).min(payload.len() / 4));
    let mut at = 0;
    while at < payload.len() {
        if payload.len() - at < 4 {
            return Err(DecodeError::invalid("tuple length runs past the block"));
        }
        let tuple_bytes = u32_at(&payload, at) as usize;
        at += 4;
        if payload.len() - at < tuple_bytes {
            return Err(DecodeError::invalid("tuple runs past the block"));
        }
        tuples.push(at..at + tuple_bytes);
        at += tuple_bytes;
    }
    if tuples.len() != header.tuple_count as usize {
        return Err(DecodeError::invalid(format!(
            "block claims {} tuples, payload holds {}",
            header.tuple_count,
            tuples.len()
        )));
    }
    Ok((header, payload, tuples))
}

/// The snapshot trailer's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer {
    pub block_count: u32,
    pub tuple_count: u64,
}

/// Encodes the trailer; `file_checksum` is the running crc32c of every byte before it.
pub fn encode_trailer(trailer: &Trailer, file_checksum: u32, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&TRAILER_MAGIC);
    out.extend_from_slice(&trailer.block_count.to_le_bytes());
    out.extend_from_slice(&trailer.tuple_count.to_le_bytes());
    let checksum = crc32c::crc32c_append(file_checksum, &out[start..]);
    out.extend_from_slice(&checksum.to_le_bytes());
}

/// Decodes the trailer and checks it against the running checksum of the bytes before it.
pub fn decode_trailer(bytes: &[u8], file_checksum: u32) -> Result<Trailer, DecodeError> {
    need(bytes, SNAPSHOT_TRAILER_SIZE_BYTES)?;
    if !is_trailer_magic(bytes) {
        return Err(DecodeError::invalid("bad trailer magic"));
    }
    let checksum_expected = crc32c::crc32c_append(file_checksum, &bytes[0..16]);
    if u32_at(bytes, 16) != checksum_expected {
        return Err(DecodeError::invalid("snapshot file checksum mismatch"));
    }
    Ok(Trailer {
        block_count: u32_at(bytes, 4),
        tuple_count: u64_at(bytes, 8),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `wal_files` fuzz target (fuzz/regressions/wal_files/snapshot_lsn_max):
    /// a snapshot named and headed `u64::MAX`, beside a WAL file, made recovery add 1 to
    /// its LSN and panic (in a build with overflow checks; without, wrap to LSN 0).
    #[test]
    fn a_header_at_the_last_lsn_is_corrupt() {
        for kind in [FileKind::Wal, FileKind::Snapshot] {
            for lsn in [0, 1, LSN_NEVER - 1, LSN_NEVER] {
                let header = FileHeader {
                    kind,
                    shard_id: 3,
                    lsn,
                    schema_fingerprint: 9,
                };
                let mut bytes = Vec::new();
                encode_file_header(&header, &mut bytes);
                let decoded = decode_file_header(&bytes, kind);
                if lsn == LSN_NEVER {
                    assert_eq!(
                        decoded,
                        Err(DecodeError::invalid(
                            "header LSN 18446744073709551615 is never written"
                        ))
                    );
                } else {
                    assert_eq!(decoded, Ok(header));
                }
            }
        }
    }

    /// Found by the `wal_files` fuzz target (fuzz/regressions/wal_files/block_tuple_count_huge):
    /// a block whose header claims 2^32 - 1 tuples made the reader reserve room for that
    /// many before counting them (64 GiB: the allocation failed and the process aborted).
    #[test]
    fn a_block_claiming_more_tuples_than_it_holds_is_refused_without_reserving_them() {
        let mut builder = BlockBuilder::default();
        builder.push_tuple(512, &[0x91, 0x01]);
        let mut bytes = Vec::new();
        builder.finish(&mut bytes);
        bytes[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        let payload_end = bytes.len() - BLOCK_TRAILER_SIZE_BYTES;
        let checksum = crc32c::crc32c(&bytes[..payload_end]);
        bytes[payload_end..].copy_from_slice(&checksum.to_le_bytes());
        assert_eq!(
            decode_block(&bytes),
            Err(DecodeError::invalid(
                "block claims 4294967295 tuples, payload holds 1"
            ))
        );
    }

    /// A batch whose rows run up to `u64::MAX` made `Batch::lsn_last` overflow (and the
    /// reader's "next LSN" after it): such a batch is corrupt, one that stops short of it
    /// is not.
    #[test]
    fn a_batch_that_reaches_the_last_lsn_is_corrupt() {
        let batch = |lsn_first: u64, row_count: u64| {
            let mut bytes = Vec::new();
            let mut builder = BatchBuilder::default();
            for lsn in (0..row_count).map(|row| lsn_first + row) {
                builder.push_row(lsn, RowKind::Delete, 512, &[0x91, 0x01]);
            }
            bytes.extend_from_slice(&builder.take());
            bytes
        };
        let bytes = batch(LSN_NEVER - 2, 2);
        let decoded = decode_batch(&bytes).expect("stops short of u64::MAX");
        assert_eq!(decoded.lsn_last(), LSN_NEVER - 1);
        for (lsn_first, row_count) in [(LSN_NEVER - 1, 2), (LSN_NEVER, 1)] {
            let bytes = batch(lsn_first, row_count);
            assert_eq!(
                decode_batch(&bytes).map(|batch| batch.lsn_first),
                Err(DecodeError::invalid(format!(
                    "batch of {row_count} rows from LSN {lsn_first} reaches LSN {LSN_NEVER}, which is never written"
                )))
            );
        }
    }
}
