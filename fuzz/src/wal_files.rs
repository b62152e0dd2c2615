//! The WAL and snapshot readers and recovery, on files the fuzzer writes. A file is built
//! from pieces the input chooses: a header (right, of the other kind, with a bad checksum,
//! or raw bytes), then batches or blocks whose fields the input sets and whose checksums
//! and compression are right unless the input says otherwise, raw bytes, zeros, and a cut
//! anywhere; checksums the fuzzer could never guess are computed for it.
//!
//! Three modes, by the first byte:
//! * a WAL file read by `WalFile::from_bytes`, its batches iterated in both read modes:
//!   strict mode yields the batches force mode yields up to the first error, each batch's
//!   rows number what it claims and run on from its first LSN;
//! * a snapshot read block by block with `SnapshotReader`;
//! * a shard directory of up to four such files (WALs, snapshots, an in-progress
//!   snapshot, named by LSNs the input picks, edge values included) recovered into an
//!   `Engine`, strict or forced. Whatever the bytes: an error or a recovery, never a
//!   panic; every stored tuple valid for its space; and a recovery that succeeded, run
//!   again on what it left (a torn tail cut off a file that is kept), recovers the same
//!   rows (and, strict, cuts nothing more).

use super::check::{check_space, picture, Picture};
use super::gen::{self, Bytes};
use std::path::{Path, PathBuf};
use tarn::storage::Engine;
use tarn::wal::format::{
    encode_file_header, encode_trailer, BlockBuilder, FileHeader, FileKind, Trailer, BATCH_MAGIC,
    BLOCK_MAGIC, FILE_HEADER_SIZE_BYTES,
};
use tarn::wal::{ReadMode, RecoveryConfig, WalFile};

const FINGERPRINT: u64 = 0x5eed_f00d;
const SPACE_IDS: [u32; 2] = [512, 513];

/// LSNs that file names and headers take: small ones that line up, and the edges.
fn any_lsn(bytes: &mut Bytes<'_>) -> u64 {
    const LSNS: [u64; 10] = [0, 1, 2, 3, 4, 5, 8, u64::MAX - 1, u64::MAX, 1 << 32];
    match bytes.byte() % 8 {
        7 => bytes.interesting_u64(),
        _ => LSNS[bytes.below(LSNS.len())],
    }
}

fn space_id(bytes: &mut Bytes<'_>) -> u32 {
    match bytes.byte() % 8 {
        0 => bytes.u32(),
        choice => SPACE_IDS[usize::from(choice) % 2],
    }
}

/// A file header of `kind` at `lsn`, usually right.
fn header(bytes: &mut Bytes<'_>, kind: FileKind, lsn: u64, out: &mut Vec<u8>) {
    let choice = bytes.byte();
    let kind = if choice % 16 == 1 {
        match kind {
            FileKind::Wal => FileKind::Snapshot,
            FileKind::Snapshot => FileKind::Wal,
        }
    } else {
        kind
    };
    let start = out.len();
    let shard_id = if choice % 16 == 2 { 1 } else { 0 };
    let schema_fingerprint = if choice % 16 == 3 { 7 } else { FINGERPRINT };
    let lsn = if choice % 16 == 4 {
        lsn.wrapping_add(1)
    } else {
        lsn
    };
    match choice % 16 {
        5 => {
            let len = usize::from(bytes.byte() % 40);
            out.extend_from_slice(bytes.take(len));
        }
        _ => encode_file_header(
            &FileHeader {
                kind,
                shard_id,
                lsn,
                schema_fingerprint,
            },
            out,
        ),
    }
    match choice % 16 {
        // The version, or any other byte, changed under the checksum.
        6 => flip(bytes, out, start),
        // Re-sealed: a version this build does not read.
        7 if out.len() - start == FILE_HEADER_SIZE_BYTES => {
            out[start + 4] = bytes.byte();
            let checksum = crc32c::crc32c(&out[start..start + 28]);
            out[start + 28..start + 32].copy_from_slice(&checksum.to_le_bytes());
        }
        _ => {}
    }
}

/// Changes one byte of `out` at or after `from`.
fn flip(bytes: &mut Bytes<'_>, out: &mut [u8], from: usize) {
    if out.len() > from {
        let at = from + usize::from(bytes.u16()) % (out.len() - from);
        out[at] ^= bytes.byte() | 1;
    }
}

/// A batch whose rows start at `lsn_first`, mostly consistent; returns the LSN after it.
fn batch(bytes: &mut Bytes<'_>, lsn_first: u64, out: &mut Vec<u8>) -> u64 {
    let choice = bytes.byte();
    let row_count = bytes.below(4) as u32;
    let mut payload = Vec::new();
    let mut body = Vec::new();
    for row in 0..row_count {
        let lsn = if choice == 1 {
            bytes.interesting_u64()
        } else {
            lsn_first.wrapping_add(u64::from(row))
        };
        let kind = match bytes.byte() % 8 {
            0 => bytes.byte(),
            1..=2 => 2,
            _ => 1,
        };
        body.clear();
        if kind == 2 {
            gen::key(bytes, &mut body);
        } else {
            gen::tuple(bytes, &mut body);
        }
        payload.extend_from_slice(&lsn.to_le_bytes());
        payload.push(kind);
        payload.extend_from_slice(&space_id(bytes).to_le_bytes());
        let body_bytes = if choice == 2 {
            bytes.u32()
        } else {
            body.len() as u32
        };
        payload.extend_from_slice(&body_bytes.to_le_bytes());
        payload.extend_from_slice(&body);
    }
    let start = out.len();
    out.extend_from_slice(&BATCH_MAGIC);
    let claimed_rows = if choice == 3 { bytes.u32() } else { row_count };
    out.extend_from_slice(&claimed_rows.to_le_bytes());
    let payload_bytes = if choice == 4 {
        bytes.u32()
    } else {
        payload.len() as u32
    };
    out.extend_from_slice(&payload_bytes.to_le_bytes());
    out.extend_from_slice(&lsn_first.to_le_bytes());
    out.extend_from_slice(&payload);
    let checksum = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&checksum.to_le_bytes());
    if choice == 5 {
        flip(bytes, out, start);
    }
    lsn_first.wrapping_add(u64::from(row_count))
}

/// A snapshot block: tuples of one space, compressed with a recorded size (as written),
/// streamed without one, or not at all.
fn block(bytes: &mut Bytes<'_>, out: &mut Vec<u8>) -> (u32, u64) {
    let choice = bytes.byte();
    let space_id = space_id(bytes);
    let tuple_count = bytes.below(4) as u32;
    let mut builder = BlockBuilder::default();
    let mut payload = Vec::new();
    let mut tuple = Vec::new();
    for _ in 0..tuple_count {
        tuple.clear();
        gen::tuple(bytes, &mut tuple);
        builder.push_tuple(space_id, &tuple);
        payload.extend_from_slice(&(tuple.len() as u32).to_le_bytes());
        payload.extend_from_slice(&tuple);
    }
    if !choice.is_multiple_of(4) && tuple_count > 0 {
        let start = out.len();
        builder.finish(out);
        if choice % 16 == 1 {
            flip(bytes, out, start);
        }
        return (1, u64::from(tuple_count));
    }
    let compressed = match choice % 3 {
        0 => zstd::stream::encode_all(&payload[..], 1).unwrap_or_default(),
        1 => payload.clone(),
        _ => bytes.raw().to_vec(),
    };
    let start = out.len();
    out.extend_from_slice(&BLOCK_MAGIC);
    out.extend_from_slice(&space_id.to_le_bytes());
    let claimed = if choice % 8 == 4 {
        bytes.u32()
    } else {
        tuple_count
    };
    out.extend_from_slice(&claimed.to_le_bytes());
    out.extend_from_slice(&(compressed.len() as u32).to_le_bytes());
    out.extend_from_slice(&compressed);
    let checksum = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&checksum.to_le_bytes());
    (1, u64::from(claimed))
}

/// Bytes of no structure: raw, zeros, or a magic followed by whatever.
fn junk(bytes: &mut Bytes<'_>, out: &mut Vec<u8>) {
    match bytes.byte() % 4 {
        0 => out.resize(out.len() + bytes.below(64), 0),
        1 => out.extend_from_slice(&BATCH_MAGIC),
        2 => out.extend_from_slice(&BLOCK_MAGIC),
        _ => out.extend_from_slice(bytes.raw()),
    }
}

/// A WAL file whose header says `lsn`; returns its bytes.
pub fn wal_file(bytes: &mut Bytes<'_>, lsn: u64) -> Vec<u8> {
    let mut out = Vec::new();
    header(bytes, FileKind::Wal, lsn, &mut out);
    let mut lsn_next = lsn;
    for _ in 0..bytes.below(6) {
        match bytes.byte() % 8 {
            0 => junk(bytes, &mut out),
            1 => {
                let lsn_first = any_lsn(bytes);
                lsn_next = batch(bytes, lsn_first, &mut out);
            }
            _ => lsn_next = batch(bytes, lsn_next, &mut out),
        }
    }
    cut(bytes, &mut out);
    out
}

/// A snapshot whose header says `lsn`; returns its bytes.
pub fn snapshot_file(bytes: &mut Bytes<'_>, lsn: u64) -> Vec<u8> {
    let mut out = Vec::new();
    header(bytes, FileKind::Snapshot, lsn, &mut out);
    let (mut block_count, mut tuple_count) = (0u32, 0u64);
    for _ in 0..bytes.below(5) {
        match bytes.byte() % 8 {
            0 => junk(bytes, &mut out),
            _ => {
                let (blocks, tuples) = block(bytes, &mut out);
                block_count += blocks;
                tuple_count += tuples;
            }
        }
    }
    let choice = bytes.byte();
    if !choice.is_multiple_of(8) {
        let trailer = Trailer {
            block_count: if choice % 8 == 1 {
                bytes.u32()
            } else {
                block_count
            },
            tuple_count,
        };
        let file_checksum = crc32c::crc32c(&out);
        encode_trailer(&trailer, file_checksum, &mut out);
        if choice % 8 == 2 {
            out.push(bytes.byte());
        }
    }
    cut(bytes, &mut out);
    out
}

/// Now and then, the file ends early.
fn cut(bytes: &mut Bytes<'_>, out: &mut Vec<u8>) {
    if bytes.byte().is_multiple_of(4) && !out.is_empty() {
        let keep = usize::from(bytes.u16()) % out.len();
        out.truncate(keep);
    }
}

/// A directory of this process's own under /dev/shm (or the temporary directory) that the
/// target empties and refills for each input.
fn scratch_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("tarn-fuzz-wal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        dir
    })
}

fn empty(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

pub fn run(data: &[u8]) {
    let mut bytes = Bytes::new(data);
    match bytes.byte() % 4 {
        0 => read_wal(&mut bytes),
        1 => read_snapshot(&mut bytes),
        _ => recover_dir(&mut bytes),
    }
}

fn read_wal(bytes: &mut Bytes<'_>) {
    let lsn = any_lsn(bytes);
    let file_bytes = if bytes.byte().is_multiple_of(16) {
        bytes.raw().to_vec()
    } else {
        wal_file(bytes, lsn)
    };
    let Ok(file) = WalFile::from_bytes(PathBuf::from("fuzz.wal"), file_bytes) else {
        return;
    };
    let mut batches_by_mode = Vec::new();
    for mode in [ReadMode::Strict, ReadMode::Force] {
        let mut read = Vec::new();
        let mut errors = 0;
        for batch in file.batches(mode) {
            let Ok(batch) = batch else {
                errors += 1;
                assert!(errors <= file.size_bytes() + 1, "errors without end");
                continue;
            };
            let rows: Vec<_> = batch.rows().collect();
            assert_eq!(rows.len(), batch.row_count as usize);
            for (at, row) in rows.iter().enumerate() {
                assert_eq!(Some(row.lsn), batch.lsn_first.checked_add(at as u64));
            }
            read.push((batch.lsn_first, batch.row_count, batch.size_bytes));
        }
        if mode == ReadMode::Strict {
            assert!(errors <= 1, "strict mode stops at the first error");
        }
        batches_by_mode.push(read);
    }
    let (strict, force) = (&batches_by_mode[0], &batches_by_mode[1]);
    assert_eq!(
        strict[..],
        force[..strict.len()],
        "force mode reads what strict mode reads"
    );
}

fn read_snapshot(bytes: &mut Bytes<'_>) {
    let lsn = any_lsn(bytes);
    let file_bytes = if bytes.byte().is_multiple_of(16) {
        bytes.raw().to_vec()
    } else {
        snapshot_file(bytes, lsn)
    };
    let dir = scratch_dir();
    empty(dir);
    let path = dir.join("fuzz.snap");
    std::fs::write(&path, &file_bytes).expect("the scratch directory takes a file");
    let Ok(mut reader) = tarn::wal::SnapshotReader::open(&path) else {
        return;
    };
    let mut blocks = 0;
    while let Ok(Some(block)) = reader.next_block() {
        blocks += 1;
        assert!(blocks <= file_bytes.len(), "blocks without end");
        assert_eq!(block.tuples().count(), block.tuple_count());
    }
}

/// The engine recovery loads into: the update target's first two spaces.
fn engine() -> Engine {
    let mut engine = Engine::new(1 << 26);
    for (variant, id) in [(0u8, SPACE_IDS[0]), (1, SPACE_IDS[1])] {
        let mut def = super::update_ops::space_def(variant);
        def.id = id;
        def.name = format!("s{id}").into();
        engine.create_space(def).expect("the fuzz spaces are valid");
    }
    engine
}

fn contents(engine: &Engine) -> Vec<Picture> {
    engine
        .spaces()
        .iter()
        .map(|space| {
            check_space(space);
            picture(space, 0)
        })
        .collect()
}

fn recover_dir(bytes: &mut Bytes<'_>) {
    let root = scratch_dir();
    empty(root);
    let dir = root.join("shard-0");
    let _ = std::fs::create_dir(&dir);
    empty(&dir);
    let force = bytes.bool();
    for _ in 0..1 + bytes.below(4) {
        let lsn = any_lsn(bytes);
        let (name, file_bytes) = match bytes.byte() % 8 {
            0..=3 => (tarn::wal::dir::wal_file_name(lsn), wal_file(bytes, lsn)),
            4..=6 => (
                tarn::wal::dir::snapshot_file_name(lsn),
                snapshot_file(bytes, lsn),
            ),
            _ => (
                tarn::wal::dir::in_progress_file_name(lsn),
                snapshot_file(bytes, lsn),
            ),
        };
        std::fs::write(dir.join(name), file_bytes).expect("the scratch directory takes a file");
    }
    let config = RecoveryConfig {
        dir: dir.clone(),
        shard_id: 0,
        schema_fingerprint: FINGERPRINT,
        force,
        schema_version_committed: 0,
    };
    let mut first = engine();
    let Ok(recovered) = tarn::wal::recover(&config, &mut first) else {
        contents(&first);
        return;
    };
    if matches!(recovered.torn_cut, Some((_, 0))) || recovered.wal_file_set_aside.is_some() {
        // The newest file was removed whole, or the first file to read was renamed away as
        // unreadable: an older file, which this recovery had no need to read, is now one the
        // next recovery reads, and what it makes of that file is its own.
        return;
    }
    let mut second = engine();
    let again = tarn::wal::recover(&config, &mut second);
    let again = match again {
        Ok(again) => again,
        Err(error) => panic!("recovered {recovered:?}, then not: {error}"),
    };
    // Forced, a damaged file the first recovery skipped may be the newest one now, and
    // cut as torn: only a strict recovery has nothing left to cut.
    if !force {
        assert_eq!(
            again.torn_cut, None,
            "the first recovery cut {:?}",
            recovered.torn_cut
        );
    }
    assert_eq!(
        (again.snapshot_lsn, again.lsn_last),
        (recovered.snapshot_lsn, recovered.lsn_last)
    );
    assert_eq!(contents(&first), contents(&second));
}
