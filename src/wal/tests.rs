//! Tests of the WAL layer: format round trips, torn tails and corruption, recovery rules,
//! snapshots, group commit and poisoning. A model [`RecoveryTarget`] stands in for storage.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::rc::Rc;

use proptest::prelude::*;

use crate::wal::dir::{snapshot_file_name, wal_file_name};
use crate::wal::format::*;
use crate::wal::reader::{ReadMode, WalFile};
use crate::wal::recovery::{collect_garbage, recover, RecoveryConfig, RecoveryTarget, SpaceBlocks};
use crate::wal::snapshot::{
    read_snapshot_all, write_snapshot, write_snapshot_blocking, SnapshotMeta,
};
use crate::wal::writer::{GlommioSink, Sink, WalWriter, WriterConfig};
use crate::wal::WalError;

const FINGERPRINT: u64 = 0x5eed;

/// Test tuples are `[key, value]` msgpack arrays of two positive fixints; keys `[key]`.
fn tuple(key: u8, value: u8) -> Vec<u8> {
    vec![0x92, key & 0x7f, value & 0x7f]
}

fn key(key: u8) -> Vec<u8> {
    vec![0x91, key & 0x7f]
}

/// A plain map keyed by (space, key byte): what storage should hold after recovery.
#[derive(Debug, Default, PartialEq, Eq)]
struct Model(BTreeMap<(u32, u8), Vec<u8>>);

impl RecoveryTarget for Model {
    type Staged = Vec<Vec<u8>>;

    fn stage_space(
        &self,
        _space_id: u32,
        blocks: &mut SpaceBlocks<'_>,
    ) -> Result<Vec<Vec<u8>>, String> {
        let mut tuples = Vec::new();
        while let Some(block) = blocks.next_block() {
            tuples.extend(block.tuples().map(<[u8]>::to_vec));
        }
        Ok(tuples)
    }

    fn load_staged(&mut self, space_id: u32, tuples: Vec<Vec<u8>>) -> Result<(), String> {
        self.0.retain(|(space, _), _| *space != space_id);
        for tuple in tuples {
            self.replace(space_id, &tuple)?;
        }
        Ok(())
    }

    fn replace(&mut self, space_id: u32, tuple: &[u8]) -> Result<(), String> {
        let key = *tuple.get(1).ok_or("short tuple")?;
        self.0.insert((space_id, key), tuple.to_vec());
        Ok(())
    }

    fn delete(&mut self, space_id: u32, key: &[u8]) -> Result<(), String> {
        let key = *key.get(1).ok_or("short key")?;
        self.0.remove(&(space_id, key));
        Ok(())
    }
}

fn wal_header(lsn_first: u64) -> Vec<u8> {
    let mut bytes = Vec::new();
    let header = FileHeader {
        kind: FileKind::Wal,
        shard_id: 0,
        lsn: lsn_first,
        schema_fingerprint: FINGERPRINT,
    };
    encode_file_header(&header, &mut bytes);
    bytes
}

/// Appends a batch of `count` replace rows from `lsn_first`; returns its start offset.
fn push_batch(bytes: &mut Vec<u8>, lsn_first: u64, count: u64) -> usize {
    let start = bytes.len();
    let bodies: Vec<Vec<u8>> = (0..count)
        .map(|i| tuple((lsn_first + i) as u8, 1))
        .collect();
    let rows = bodies.iter().enumerate().map(|(i, body)| Row {
        lsn: lsn_first + i as u64,
        kind: RowKind::Replace,
        space_id: 512,
        body,
    });
    encode_batch(rows, bytes);
    start
}

/// A WAL file with three batches of 3 rows (LSNs from `lsn_first`) and their offsets.
fn three_batch_file(lsn_first: u64) -> (Vec<u8>, [usize; 3]) {
    let mut bytes = wal_header(lsn_first);
    let a = push_batch(&mut bytes, lsn_first, 3);
    let b = push_batch(&mut bytes, lsn_first + 3, 3);
    let c = push_batch(&mut bytes, lsn_first + 6, 3);
    (bytes, [a, b, c])
}

fn lsns_read(file: &WalFile, mode: ReadMode) -> (Vec<u64>, Vec<WalError>) {
    let mut lsns = Vec::new();
    let mut errors = Vec::new();
    for batch in file.batches(mode) {
        match batch {
            Ok(batch) => lsns.extend(batch.rows().map(|row| row.lsn)),
            Err(error) => errors.push(error),
        }
    }
    (lsns, errors)
}

fn config(dir: &Path) -> RecoveryConfig {
    RecoveryConfig {
        dir: dir.to_path_buf(),
        shard_id: 0,
        schema_fingerprint: FINGERPRINT,
        force: false,
        schema_version_committed: 0,
    }
}

fn run_glommio<T>(future: impl std::future::Future<Output = T>) -> T {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .io_memory(1 << 20)
        .make()
        .expect("executor")
        .run(future)
}

// ---------------------------------------------------------------------------------------------
// Format

fn arbitrary_rows() -> impl Strategy<Value = Vec<(bool, u32, Vec<u8>)>> {
    proptest::collection::vec(
        (
            any::<bool>(),
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..64),
        ),
        1..20,
    )
}

proptest! {
    #[test]
    fn batches_round_trip(rows in arbitrary_rows(), lsn_first in 1u64..u64::MAX / 2) {
        let rows: Vec<Row<'_>> = rows
            .iter()
            .enumerate()
            .map(|(i, (delete, space_id, body))| Row {
                lsn: lsn_first + i as u64,
                kind: if *delete { RowKind::Delete } else { RowKind::Replace },
                space_id: *space_id,
                body,
            })
            .collect();
        let mut bytes = Vec::new();
        encode_batch(rows.iter().copied(), &mut bytes);
        bytes.extend_from_slice(b"trailing");
        let batch = decode_batch(&bytes).expect("decodes");
        prop_assert_eq!(batch.size_bytes, bytes.len() - 8);
        prop_assert_eq!(batch.lsn_first, lsn_first);
        prop_assert_eq!(batch.rows().collect::<Vec<_>>(), rows);
    }

    #[test]
    fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_batch(&bytes);
        let _ = decode_block(&bytes);
        let _ = decode_file_header(&bytes, FileKind::Wal);
        let _ = decode_trailer(&bytes, 0);
    }

    #[test]
    fn file_headers_round_trip(shard_id: u32, lsn: u64, schema_fingerprint: u64) {
        let header = FileHeader { kind: FileKind::Snapshot, shard_id, lsn, schema_fingerprint };
        let mut bytes = Vec::new();
        encode_file_header(&header, &mut bytes);
        prop_assert_eq!(decode_file_header(&bytes, FileKind::Snapshot), Ok(header));
        prop_assert!(decode_file_header(&bytes, FileKind::Wal).is_err());
    }
}

#[test]
fn builder_splits_batches_above_the_payload_limit() {
    let body = vec![0u8; BATCH_PAYLOAD_BYTES_MAX / 3];
    let mut builder = BatchBuilder::default();
    for lsn in 1..=4 {
        builder.push_row(lsn, RowKind::Replace, 1, &body);
    }
    let bytes = builder.take();
    let first = decode_batch(&bytes).expect("first batch");
    let second = decode_batch(&bytes[first.size_bytes..]).expect("second batch");
    assert_eq!((first.lsn_first, first.row_count), (1, 2));
    assert_eq!((second.lsn_first, second.row_count), (3, 2));
    assert_eq!(first.size_bytes + second.size_bytes, bytes.len());
}

// ---------------------------------------------------------------------------------------------
// Reader

#[test]
fn every_cut_inside_the_last_batch_is_a_torn_tail() {
    let (bytes, [_, _, last]) = three_batch_file(1);
    for cut in last + 1..bytes.len() {
        let file = WalFile::from_bytes("t.wal".into(), bytes[..cut].to_vec()).expect("header");
        let (lsns, errors) = lsns_read(&file, ReadMode::Strict);
        assert_eq!(lsns, (1..=6).collect::<Vec<_>>(), "cut at {cut}");
        assert!(
            matches!(errors.as_slice(), [WalError::Torn { offset, .. }] if *offset == last as u64),
            "cut at {cut}: {errors:?}"
        );
    }
    // A cut on a batch boundary is a clean end.
    let file = WalFile::from_bytes("t.wal".into(), bytes[..last].to_vec()).expect("header");
    assert_eq!(lsns_read(&file, ReadMode::Strict).1.len(), 0);
    // Too short for a header: torn at 0.
    let short = WalFile::from_bytes("t.wal".into(), bytes[..10].to_vec());
    assert!(matches!(short, Err(WalError::Torn { offset: 0, .. })));
}

#[test]
fn a_zeroed_or_garbled_last_batch_is_torn() {
    let (mut bytes, [_, _, last]) = three_batch_file(1);
    let end = bytes.len();
    bytes[end - 1] ^= 0xff; // the checksum of a batch that ends at the end of the file
    let file = WalFile::from_bytes("t.wal".into(), bytes.clone()).expect("header");
    assert!(matches!(
        lsns_read(&file, ReadMode::Strict).1.as_slice(),
        [WalError::Torn { offset, .. }] if *offset == last as u64
    ));
    bytes[last..].fill(0);
    let file = WalFile::from_bytes("t.wal".into(), bytes).expect("header");
    assert!(matches!(
        lsns_read(&file, ReadMode::Strict).1.as_slice(),
        [WalError::Torn { offset, .. }] if *offset == last as u64
    ));
}

#[test]
fn a_corrupt_middle_batch_is_corrupt_and_force_skips_exactly_it() {
    let (mut bytes, [_, middle, last]) = three_batch_file(1);
    bytes[(middle + last) / 2] ^= 0x01;
    let file = WalFile::from_bytes("c.wal".into(), bytes).expect("header");

    let (lsns, errors) = lsns_read(&file, ReadMode::Strict);
    assert_eq!(lsns, vec![1, 2, 3]);
    match errors.as_slice() {
        [WalError::Corrupt { file, offset, .. }] => {
            assert_eq!(file, Path::new("c.wal"));
            assert_eq!(*offset, middle as u64);
        }
        other => panic!("expected one Corrupt, got {other:?}"),
    }

    let (lsns, errors) = lsns_read(&file, ReadMode::Force);
    assert_eq!(lsns, vec![1, 2, 3, 7, 8, 9]);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(matches!(errors[0], WalError::Corrupt { offset, .. } if offset == middle as u64));
}

#[test]
fn a_damaged_length_in_the_middle_is_corrupt_not_torn() {
    // A huge payload length would read as "the file ends early"; the valid batch after it
    // shows the damage is in the middle, so nothing is cut.
    let (mut bytes, [_, middle, _]) = three_batch_file(1);
    bytes[middle + 10] = 0x30;
    let file = WalFile::from_bytes("c.wal".into(), bytes).expect("header");
    let (_, errors) = lsns_read(&file, ReadMode::Strict);
    assert!(
        matches!(errors.as_slice(), [WalError::Corrupt { offset, .. }] if *offset == middle as u64)
    );
}

// ---------------------------------------------------------------------------------------------
// Recovery

fn write_file(dir: &Path, name: String, bytes: &[u8]) {
    std::fs::write(dir.join(name), bytes).expect("write test file");
}

#[test]
fn recovery_replays_wal_after_the_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let meta = SnapshotMeta {
        shard_id: 0,
        lsn: 4,
        schema_fingerprint: FINGERPRINT,
        schema: &[],
    };
    let snapshot = [(512, tuple(1, 9)), (512, tuple(50, 9)), (513, tuple(2, 9))];
    write_snapshot_blocking(dir.path(), &meta, snapshot.iter().map(|(s, t)| (*s, t)))
        .expect("snapshot");
    let (file_one, _) = three_batch_file(1); // LSNs 1..=9, keys 1..=9, value 1
    write_file(dir.path(), wal_file_name(1), &file_one);
    let mut second = wal_header(10);
    let rows = [
        Row {
            lsn: 10,
            kind: RowKind::Delete,
            space_id: 512,
            body: &key(50),
        },
        Row {
            lsn: 11,
            kind: RowKind::Replace,
            space_id: 513,
            body: &tuple(3, 3),
        },
    ];
    encode_batch(rows, &mut second);
    write_file(dir.path(), wal_file_name(10), &second);

    let mut model = Model::default();
    let recovered = recover(&config(dir.path()), &mut model).expect("recovers");
    assert_eq!(recovered.snapshot_lsn, 4);
    assert_eq!(recovered.lsn_last, 11);
    assert_eq!(recovered.tuples_loaded, 3);
    assert_eq!(recovered.rows_replayed, 5 + 2); // LSNs 5..=9, then 10 and 11
    let mut expected = Model::default();
    expected.0.insert((512, 1), tuple(1, 9)); // LSN 1 is in the snapshot: not replayed
    for k in 5..=9 {
        expected.0.insert((512, k), tuple(k, 1));
    }
    expected.0.insert((513, 2), tuple(2, 9));
    expected.0.insert((513, 3), tuple(3, 3));
    assert_eq!(model, expected);
}

#[test]
fn a_missing_wal_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (one, _) = three_batch_file(1);
    let (three, _) = three_batch_file(19);
    write_file(dir.path(), wal_file_name(1), &one);
    write_file(dir.path(), wal_file_name(19), &three);
    match recover(&config(dir.path()), &mut Model::default()) {
        Err(WalError::MissingRows {
            expected_file,
            lsn_first_missing,
            lsn_next_found,
            ..
        }) => {
            assert_eq!(expected_file, dir.path().join(wal_file_name(10)));
            assert_eq!((lsn_first_missing, lsn_next_found), (10, 19));
        }
        other => panic!("expected MissingRows, got {other:?}"),
    }
    // Rows between a snapshot and the first WAL file are missing too.
    let dir = tempfile::tempdir().expect("tempdir");
    write_file(dir.path(), wal_file_name(19), &three);
    let result = recover(&config(dir.path()), &mut Model::default());
    assert!(
        matches!(
            result,
            Err(WalError::MissingRows {
                lsn_first_missing: 1,
                ..
            })
        ),
        "{result:?}"
    );
}

#[test]
fn recovery_cuts_a_torn_tail_of_the_newest_file_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (one, _) = three_batch_file(1);
    let (two, [_, _, last]) = three_batch_file(10);
    write_file(dir.path(), wal_file_name(1), &one);
    write_file(dir.path(), wal_file_name(10), &two[..two.len() - 5]);
    let recovered = recover(&config(dir.path()), &mut Model::default()).expect("recovers");
    assert_eq!(recovered.lsn_last, 15);
    assert_eq!(
        recovered.torn_cut,
        Some((dir.path().join(wal_file_name(10)), last as u64))
    );
    let size = std::fs::metadata(dir.path().join(wal_file_name(10)))
        .expect("stat")
        .len();
    assert_eq!(size, last as u64);
    // Recovering again finds a clean log.
    let again = recover(&config(dir.path()), &mut Model::default()).expect("recovers");
    assert_eq!((again.lsn_last, again.torn_cut), (15, None));

    // The same tear in an older file is corruption.
    write_file(dir.path(), wal_file_name(1), &one[..one.len() - 5]);
    let result = recover(&config(dir.path()), &mut Model::default());
    assert!(
        matches!(result, Err(WalError::Corrupt { .. })),
        "{result:?}"
    );
}

#[test]
fn force_recovery_skips_a_corrupt_batch_and_counts_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut one, [_, middle, last]) = three_batch_file(1);
    one[(middle + last) / 2] ^= 0x40;
    write_file(dir.path(), wal_file_name(1), &one);
    let strict = recover(&config(dir.path()), &mut Model::default());
    assert!(matches!(strict, Err(WalError::Corrupt { offset, .. }) if offset == middle as u64));
    let mut forced = config(dir.path());
    forced.force = true;
    let recovered = recover(&forced, &mut Model::default()).expect("force recovers");
    assert_eq!((recovered.batches_skipped, recovered.rows_replayed), (1, 6));
    assert_eq!(recovered.lsn_last, 9);
}

// ---------------------------------------------------------------------------------------------
// Snapshots and garbage collection

fn snapshot_tuples() -> Vec<(u32, Vec<u8>)> {
    // Big enough tuples that space 512 spans several blocks.
    let mut tuples: Vec<(u32, Vec<u8>)> =
        (0..40u32).map(|i| (512, vec![i as u8; 100_000])).collect();
    tuples.extend((0..10u8).map(|k| (513, tuple(k, k))));
    tuples
}

#[test]
fn snapshot_round_trips_blocking_and_on_glommio() {
    let dir = tempfile::tempdir().expect("tempdir");
    let meta = SnapshotMeta {
        shard_id: 3,
        lsn: 77,
        schema_fingerprint: FINGERPRINT,
        schema: &[],
    };
    let tuples = snapshot_tuples();
    let written = write_snapshot_blocking(dir.path(), &meta, tuples.iter().map(|(s, t)| (*s, t)))
        .expect("write");
    assert_eq!(written.path, dir.path().join(snapshot_file_name(77)));
    assert_eq!(written.tuple_count, tuples.len() as u64);
    let (header, read) = read_snapshot_all(&written.path).expect("read");
    assert_eq!(
        (header.shard_id, header.lsn, header.schema_fingerprint),
        (3, 77, FINGERPRINT)
    );
    assert_eq!(read, tuples);
    let blocking_bytes = std::fs::read(&written.path).expect("read bytes");

    let dir_async = tempfile::tempdir().expect("tempdir");
    let path = dir_async.path().to_path_buf();
    let tuples_async = tuples.clone();
    let written = run_glommio(async move {
        write_snapshot(&path, &meta, tuples_async.iter().map(|(s, t)| (*s, t))).await
    })
    .expect("write on glommio");
    assert_eq!(
        std::fs::read(&written.path).expect("read bytes"),
        blocking_bytes
    );
    assert!(!dir_async
        .path()
        .join("00000000000000000077.snap.inprogress")
        .exists());
}

#[test]
fn a_damaged_snapshot_is_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let meta = SnapshotMeta {
        shard_id: 0,
        lsn: 5,
        schema_fingerprint: FINGERPRINT,
        schema: &[],
    };
    let written = write_snapshot_blocking(dir.path(), &meta, snapshot_tuples()).expect("write");
    let mut bytes = std::fs::read(&written.path).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    std::fs::write(&written.path, &bytes).expect("write");
    assert!(matches!(
        read_snapshot_all(&written.path),
        Err(WalError::Corrupt { .. })
    ));
    bytes[middle] ^= 1;
    std::fs::write(&written.path, &bytes[..bytes.len() - 1]).expect("write");
    assert!(matches!(
        read_snapshot_all(&written.path),
        Err(WalError::Corrupt { .. })
    ));
}

#[test]
fn recovery_loads_every_block_of_every_space_and_stops_on_a_damaged_block() {
    let dir = tempfile::tempdir().expect("tempdir");
    let meta = SnapshotMeta {
        shard_id: 0,
        lsn: 5,
        schema_fingerprint: FINGERPRINT,
        schema: &[],
    };
    // Space 512 spans several blocks; its tuples are [i, [i; 100_000 bytes]] pairs keyed i.
    let big = |i: u8| {
        let mut tuple = vec![0x92, i, 0xc6];
        tuple.extend_from_slice(&100_000u32.to_be_bytes());
        tuple.extend(std::iter::repeat_n(i, 100_000));
        tuple
    };
    let mut tuples: Vec<(u32, Vec<u8>)> = (0..40u8).map(|i| (512, big(i))).collect();
    tuples.extend((0..10u8).map(|k| (513, tuple(k, k))));
    let written = write_snapshot_blocking(dir.path(), &meta, tuples.iter().map(|(s, t)| (*s, t)))
        .expect("write");
    write_file(dir.path(), wal_file_name(6), &wal_header(6));
    let mut model = Model::default();
    let recovered = recover(&config(dir.path()), &mut model).expect("recovers");
    assert_eq!(recovered.tuples_loaded, 50);
    let expected: BTreeMap<(u32, u8), Vec<u8>> = tuples
        .iter()
        .map(|(space, tuple)| ((*space, tuple[1]), tuple.clone()))
        .collect();
    assert_eq!(model.0, expected);

    let mut bytes = std::fs::read(&written.path).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    std::fs::write(&written.path, &bytes).expect("write");
    // No older checkpoint: the WAL starts at 6, after the snapshot.
    let error = recover(&config(dir.path()), &mut Model::default()).unwrap_err();
    match error {
        WalError::SnapshotDamagedNoFallback {
            snapshot,
            cause,
            why,
        } => {
            assert_eq!(snapshot, written.path);
            assert!(
                matches!(*cause, WalError::Corrupt { ref file, .. } if *file == written.path),
                "{cause}"
            );
            assert_eq!(
                why,
                "there is no older snapshot, and the oldest WAL file starts at LSN 6, not at LSN 1"
            );
        }
        other => panic!("expected a corrupt snapshot, got {other}"),
    }
}

#[test]
fn a_snapshot_of_another_schema_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let meta = SnapshotMeta {
        shard_id: 0,
        lsn: 5,
        schema_fingerprint: FINGERPRINT + 1,
        schema: &[],
    };
    write_snapshot_blocking(dir.path(), &meta, [(512, tuple(1, 1))]).expect("write");
    let result = recover(&config(dir.path()), &mut Model::default());
    assert!(
        matches!(result, Err(WalError::SchemaMismatch { found, expected, .. })
            if found == FINGERPRINT + 1 && expected == FINGERPRINT),
        "{result:?}"
    );
}

#[test]
fn garbage_collection_keeps_snapshots_and_the_wal_they_need() {
    let dir = tempfile::tempdir().expect("tempdir");
    for lsn in [1, 5, 9] {
        write_file(dir.path(), snapshot_file_name(lsn), b"");
    }
    for lsn in [1, 4, 6, 8, 12] {
        write_file(dir.path(), wal_file_name(lsn), b"");
    }
    write_file(
        dir.path(),
        "00000000000000000013.snap.inprogress".into(),
        b"",
    );
    let removed = collect_garbage(dir.path(), 2, None).expect("gc");
    // Oldest kept snapshot is 5: replay starts at LSN 6, in the file that starts at 6.
    assert_eq!(
        removed.snapshots_removed,
        vec![dir.path().join(snapshot_file_name(1))]
    );
    assert_eq!(
        removed.wal_files_removed,
        vec![
            dir.path().join(wal_file_name(1)),
            dir.path().join(wal_file_name(4))
        ]
    );
    assert_eq!(removed.in_progress_removed.len(), 1);
    assert!(dir.path().join(wal_file_name(6)).exists());
}

// ---------------------------------------------------------------------------------------------
// Writer

fn writer_config(fsync: bool) -> WriterConfig {
    WriterConfig {
        shard_id: 0,
        schema_fingerprint: FINGERPRINT,
        fsync,
        max_file_size_bytes: 4096,
        lsn_next: 1,
    }
}

#[test]
fn concurrent_appends_share_flushes_and_are_all_durable() {
    // Each writer appends, awaits durability, appends again: the shape of a connection
    // pipeline. Rows of one round share a flush.
    const WRITERS: u64 = 100;
    const ROUNDS: u64 = 10;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    let (results, stats) = run_glommio(async move {
        let writer = WalWriter::start(GlommioSink::new(&path), writer_config(true));
        let tasks: Vec<_> = (0..WRITERS)
            .map(|i| {
                let writer = writer.clone();
                glommio::spawn_local(async move {
                    let mut lsns = Vec::new();
                    for round in 0..ROUNDS {
                        let body = tuple(i as u8, round as u8);
                        lsns.push(writer.append(RowKind::Replace, 512, &body)?.await?);
                    }
                    Ok::<_, WalError>(lsns)
                })
            })
            .collect();
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await);
        }
        writer.close().await.expect("close");
        (results, writer.stats())
    });
    let mut lsns: Vec<u64> = results
        .into_iter()
        .flat_map(|r| r.expect("durable"))
        .collect();
    lsns.sort_unstable();
    let appends = WRITERS * ROUNDS;
    assert_eq!(lsns, (1..=appends).collect::<Vec<_>>());
    assert_eq!(stats.rows_appended, appends);
    assert!(stats.flushes < appends / 10, "{stats:?}");
    assert_eq!(stats.syncs, stats.flushes);
    assert!(stats.files_started > 1, "4 KiB files rotate: {stats:?}");

    let mut model = Model::default();
    let recovered = recover(&config(dir.path()), &mut model).expect("recovers");
    assert_eq!(recovered.lsn_last, appends);
    assert_eq!(recovered.rows_replayed, appends);
    // The last round of every writer is what replay leaves.
    assert_eq!(model.0.len(), WRITERS as usize);
    assert!(model.0.values().all(|t| t[2] == ROUNDS as u8 - 1));
    assert_eq!(recovered.torn_cut, None);
}

/// An in-memory sink whose calls fail from the `fail_at`-th on (counting from 1).
struct FaultySink {
    calls: Rc<Cell<u32>>,
    fail_at: u32,
    written: Rc<RefCell<Vec<u8>>>,
}

impl FaultySink {
    fn call(&self) -> io::Result<()> {
        self.calls.set(self.calls.get() + 1);
        if self.calls.get() >= self.fail_at {
            return Err(io::Error::other("injected EIO"));
        }
        Ok(())
    }
}

impl Sink for FaultySink {
    async fn start_file(&mut self, _lsn_first: u64) -> io::Result<()> {
        self.call()
    }

    async fn append(&mut self, bytes: Vec<u8>) -> io::Result<()> {
        self.call()?;
        self.written.borrow_mut().extend_from_slice(&bytes);
        Ok(())
    }

    async fn sync_data(&mut self) -> io::Result<()> {
        self.call()
    }

    async fn close(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_failed_flush_poisons_the_writer_and_fails_every_pending_append() {
    let written = Rc::new(RefCell::new(Vec::new()));
    let sink = FaultySink {
        calls: Rc::new(Cell::new(0)),
        // start_file, append and sync of the first flush succeed; the second flush fails.
        fail_at: 4,
        written: written.clone(),
    };
    let results = run_glommio(async move {
        let writer = WalWriter::start(sink, writer_config(true));
        let first = writer
            .append(RowKind::Replace, 512, &tuple(0, 0))
            .expect("append");
        let first = first.await;
        let pending: Vec<_> = (1..50u8)
            .map(|i| {
                let writer = writer.clone();
                glommio::spawn_local(async move {
                    writer.append(RowKind::Replace, 512, &tuple(i, 0))?.await
                })
            })
            .collect();
        let mut results = vec![first];
        for task in pending {
            results.push(task.await);
        }
        let later = writer
            .append(RowKind::Replace, 512, &tuple(99, 0))
            .map(|c| c.lsn());
        assert!(writer.poisoned().is_some());
        assert!(writer.close().await.is_err());
        (results, later)
    });
    let (results, later) = results;
    assert_eq!(results[0].as_ref().ok(), Some(&1));
    for result in &results[1..] {
        assert!(
            matches!(result, Err(WalError::Poisoned { lsn_durable_last: 1, cause }) if cause.contains("injected")),
            "{result:?}"
        );
    }
    assert!(matches!(later, Err(WalError::Poisoned { .. })));
    // Only the acknowledged row reached the sink.
    let file = WalFile::from_bytes("mem.wal".into(), written.borrow().clone()).expect("header");
    let (lsns, errors) = lsns_read(&file, ReadMode::Strict);
    assert_eq!(lsns, vec![1]);
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn recovery_into_a_real_engine_bulk_loads_and_replays() {
    use crate::storage::{Engine, FieldType, IndexDef, KeyPart, SpaceDef, SpaceFormat};
    let mut engine = Engine::new(1 << 20);
    engine
        .create_space(SpaceDef {
            id: 512,
            name: "kv".into(),
            format: SpaceFormat::default(),
            indexes: vec![IndexDef::tree(
                0,
                "primary",
                true,
                vec![KeyPart::new(0, FieldType::Unsigned)],
            )],
            is_sync: false,
        })
        .expect("space");
    let dir = tempfile::tempdir().expect("tempdir");
    let meta = SnapshotMeta {
        shard_id: 0,
        lsn: 3,
        schema_fingerprint: FINGERPRINT,
        schema: &[],
    };
    write_snapshot_blocking(dir.path(), &meta, (1..=3u8).map(|k| (512, tuple(k, 0))))
        .expect("snapshot");
    let mut wal = wal_header(4);
    let rows = [
        Row {
            lsn: 4,
            kind: RowKind::Delete,
            space_id: 512,
            body: &key(2),
        },
        Row {
            lsn: 5,
            kind: RowKind::Replace,
            space_id: 512,
            body: &tuple(3, 5),
        },
        Row {
            lsn: 6,
            kind: RowKind::Delete,
            space_id: 512,
            body: &key(40),
        },
    ];
    encode_batch(rows, &mut wal);
    write_file(dir.path(), wal_file_name(4), &wal);

    let recovered = recover(&config(dir.path()), &mut engine).expect("recovers");
    assert_eq!(
        (
            recovered.lsn_next(),
            recovered.tuples_loaded,
            recovered.rows_replayed
        ),
        (7, 3, 3)
    );
    let space = engine.space(512).expect("space");
    assert_eq!(space.len(), 2);
    assert_eq!(
        space
            .get(0, &key(3))
            .expect("get")
            .map(|t| t.data().to_vec()),
        Some(tuple(3, 5))
    );
    assert!(space.get(0, &key(2)).expect("get").is_none());
}

#[test]
fn rotation_begins_a_file_at_the_next_lsn_even_with_nothing_to_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    let config = WriterConfig {
        max_file_size_bytes: 1 << 20,
        ..writer_config(false)
    };
    let wal_file_lsns = |dir: &Path| -> Vec<u64> {
        let listing = crate::wal::dir::list(dir).expect("list");
        listing.wal_files.iter().map(|(lsn, _)| *lsn).collect()
    };
    let files_after_idle_rotations = run_glommio(async move {
        let writer = WalWriter::start(GlommioSink::new(&path), config);
        let append = |k: u8| {
            writer
                .append(RowKind::Replace, 512, &tuple(k, 1))
                .expect("append")
        };
        for k in 1..=3 {
            append(k).await.expect("durable");
        }
        // Nothing waits to be written: the new file is created at once, empty; a second
        // rotation of that still empty file changes nothing.
        writer.rotate();
        glommio::timer::sleep(std::time::Duration::from_millis(50)).await;
        writer.rotate();
        glommio::timer::sleep(std::time::Duration::from_millis(50)).await;
        let files = wal_file_lsns(&path);
        append(4).await.expect("durable");
        // A row waiting when the rotation is asked for begins the new file.
        let pending = append(5);
        writer.rotate();
        pending.await.expect("durable");
        writer.close().await.expect("close");
        files
    });
    assert_eq!(files_after_idle_rotations, vec![1, 4]);
    assert_eq!(wal_file_lsns(dir.path()), vec![1, 4, 5]);
    let lsns = |lsn_first: u64| {
        let file = WalFile::open(&dir.path().join(wal_file_name(lsn_first))).expect("opens");
        assert_eq!(file.header.lsn, lsn_first);
        lsns_read(&file, ReadMode::Strict).0
    };
    assert_eq!(lsns(1), vec![1, 2, 3]);
    assert_eq!(lsns(4), vec![4]);
    assert_eq!(lsns(5), vec![5]);
}

// ---------------------------------------------------------------------------------------------
// Clean-close mark

/// `bytes` (a whole WAL file) with a clean-close mark appended whose last LSN is `lsn_last`.
fn with_close_mark(mut bytes: Vec<u8>, lsn_last: u64) -> Vec<u8> {
    let offset = bytes.len() as u64;
    encode_close_mark(&CloseMark { offset, lsn_last }, &mut bytes);
    bytes
}

#[test]
fn close_marks_round_trip_and_count_only_at_the_end_of_a_file() {
    let mark = CloseMark {
        offset: 1234,
        lsn_last: 99,
    };
    let mut bytes = Vec::new();
    encode_close_mark(&mark, &mut bytes);
    assert_eq!(bytes.len(), CLOSE_MARK_SIZE_BYTES);
    assert_eq!(&bytes[0..4], b"TCLS");
    assert_eq!(&bytes[4..12], &1234u64.to_le_bytes());
    assert_eq!(&bytes[12..20], &99u64.to_le_bytes());
    assert_eq!(&bytes[20..24], &crc32c::crc32c(&bytes[0..20]).to_le_bytes());
    assert_eq!(decode_close_mark(&bytes), Ok(mark));
    for at in 0..CLOSE_MARK_SIZE_BYTES {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x10;
        assert!(decode_close_mark(&damaged).is_err(), "flip at {at}");
    }

    let (file, _) = three_batch_file(1);
    let sealed = with_close_mark(file.clone(), 9);
    assert_eq!(
        trailing_close_mark(&sealed),
        Some(CloseMark {
            offset: file.len() as u64,
            lsn_last: 9
        })
    );
    assert_eq!(trailing_close_mark(&file), None);
    // A valid mark that does not say where it is is not one: bytes were added or lost.
    let mut moved = file.clone();
    encode_close_mark(
        &CloseMark {
            offset: file.len() as u64 - 1,
            lsn_last: 9,
        },
        &mut moved,
    );
    assert_eq!(trailing_close_mark(&moved), None);
    // A header with only a mark after it: a file closed before its first row.
    let empty = with_close_mark(wal_header(10), 9);
    assert_eq!(
        trailing_close_mark(&empty).map(|mark| mark.offset),
        Some(32)
    );
}

#[test]
fn a_file_closed_cleanly_reads_as_a_normal_wal_file() {
    let (bytes, _) = three_batch_file(1);
    let file = WalFile::from_bytes("s.wal".into(), with_close_mark(bytes, 9)).expect("header");
    assert!(file.closed_cleanly());
    assert_eq!(file.format_version, 3);
    let (lsns, errors) = lsns_read(&file, ReadMode::Strict);
    assert_eq!(lsns, (1..=9).collect::<Vec<_>>());
    assert!(errors.is_empty(), "{errors:?}");

    let empty =
        WalFile::from_bytes("e.wal".into(), with_close_mark(wal_header(10), 9)).expect("header");
    assert!(empty.closed_cleanly());
    let (lsns, errors) = lsns_read(&empty, ReadMode::Strict);
    assert!(lsns.is_empty() && errors.is_empty(), "{lsns:?} {errors:?}");
}

#[test]
fn a_bad_last_batch_before_a_clean_close_mark_is_corrupt_not_torn() {
    let (bytes, [_, _, last]) = three_batch_file(1);
    let end = bytes.len();
    let sealed = with_close_mark(bytes, 9);
    // Every damage the torn-tail rules would excuse at the end of an unmarked file: a bad
    // checksum, a flipped body byte, a zeroed batch.
    let mut damages: Vec<Vec<u8>> = Vec::new();
    for at in [end - 1, end - 6, last + 25] {
        let mut damaged = sealed.clone();
        damaged[at] ^= 0x01;
        damages.push(damaged);
    }
    let mut zeroed = sealed.clone();
    zeroed[last..end].fill(0);
    damages.push(zeroed);
    for damaged in damages {
        let unmarked = WalFile::from_bytes("u.wal".into(), damaged[..end].to_vec()).expect("hdr");
        assert!(
            matches!(
                lsns_read(&unmarked, ReadMode::Strict).1.as_slice(),
                [WalError::Torn { .. }]
            ),
            "without the mark the same bytes are a torn tail"
        );
        let file = WalFile::from_bytes("s.wal".into(), damaged).expect("header");
        assert!(file.closed_cleanly());
        let (lsns, errors) = lsns_read(&file, ReadMode::Strict);
        assert_eq!(lsns, (1..=6).collect::<Vec<_>>());
        match errors.as_slice() {
            [WalError::Corrupt { offset, reason, .. }] => {
                assert_eq!(*offset, last as u64);
                assert!(
                    reason.ends_with("(the file was closed cleanly, so this is not a torn write)"),
                    "{reason}"
                );
            }
            other => panic!("expected one Corrupt, got {other:?}"),
        }
        let (lsns, errors) = lsns_read(&file, ReadMode::Force);
        assert_eq!(lsns, (1..=6).collect::<Vec<_>>());
        assert!(
            matches!(errors.as_slice(), [WalError::Corrupt { offset, .. }] if *offset == last as u64),
            "{errors:?}"
        );
    }
}

#[test]
fn a_close_mark_cut_short_is_a_torn_tail_that_loses_no_row() {
    let (bytes, _) = three_batch_file(1);
    let end = bytes.len();
    let sealed = with_close_mark(bytes, 9);
    for cut in end + 1..sealed.len() {
        let file = WalFile::from_bytes("t.wal".into(), sealed[..cut].to_vec()).expect("header");
        assert!(!file.closed_cleanly());
        let (lsns, errors) = lsns_read(&file, ReadMode::Strict);
        assert_eq!(lsns, (1..=9).collect::<Vec<_>>(), "cut at {cut}");
        assert!(
            matches!(errors.as_slice(), [WalError::Torn { offset, .. }] if *offset == end as u64),
            "cut at {cut}: {errors:?}"
        );
    }
    // Whole but with a bad checksum: the sectors of the mark did not all reach the disk.
    let mut garbled = sealed.clone();
    garbled[end + 13] ^= 0x01;
    let file = WalFile::from_bytes("t.wal".into(), garbled).expect("header");
    assert!(!file.closed_cleanly());
    assert!(matches!(
        lsns_read(&file, ReadMode::Strict).1.as_slice(),
        [WalError::Torn { offset, .. }] if *offset == end as u64
    ));
}

#[test]
fn a_close_mark_that_names_another_last_lsn_is_corrupt() {
    let (bytes, _) = three_batch_file(1);
    let end = bytes.len();
    let file = WalFile::from_bytes("m.wal".into(), with_close_mark(bytes, 12)).expect("header");
    let (lsns, errors) = lsns_read(&file, ReadMode::Strict);
    assert_eq!(lsns, (1..=9).collect::<Vec<_>>());
    match errors.as_slice() {
        [WalError::Corrupt { offset, reason, .. }] => {
            assert_eq!(*offset, end as u64);
            assert_eq!(
                reason,
                "the clean-close mark says the last row is LSN 12, the batches end at LSN 9"
            );
        }
        other => panic!("expected one Corrupt, got {other:?}"),
    }
}

/// `header` rewritten as format version 2 (before the clean-close mark), checksum fixed.
fn as_version_2(mut file: Vec<u8>) -> Vec<u8> {
    file[4..6].copy_from_slice(&2u16.to_le_bytes());
    let checksum = crc32c::crc32c(&file[0..28]);
    file[28..32].copy_from_slice(&checksum.to_le_bytes());
    file
}

#[test]
fn version_2_files_are_read_as_before_and_never_closed_cleanly() {
    let (bytes, [_, _, last]) = three_batch_file(1);
    let end = bytes.len();
    let old = as_version_2(bytes.clone());
    let file = WalFile::from_bytes("v2.wal".into(), old.clone()).expect("version 2 reads");
    assert_eq!(file.format_version, 2);
    assert_eq!(
        lsns_read(&file, ReadMode::Strict).0,
        (1..=9).collect::<Vec<_>>()
    );
    // Bytes that would be a mark mean nothing in a version-2 file.
    let mut damaged = with_close_mark(old, 9);
    damaged[end - 1] ^= 0x01;
    let file = WalFile::from_bytes("v2.wal".into(), damaged).expect("header");
    assert!(!file.closed_cleanly());
    assert!(matches!(
        lsns_read(&file, ReadMode::Strict).1.as_slice(),
        [WalError::Corrupt { offset, .. }] if *offset == last as u64
    ));
    // A version this build does not know is refused, saying so.
    let mut newer = bytes;
    newer[4..6].copy_from_slice(&4u16.to_le_bytes());
    let checksum = crc32c::crc32c(&newer[0..28]);
    newer[28..32].copy_from_slice(&checksum.to_le_bytes());
    match WalFile::from_bytes("v4.wal".into(), newer) {
        Err(WalError::Corrupt {
            offset: 0, reason, ..
        }) => assert_eq!(
            reason,
            "file header: Wal format version 4 is not supported (this build reads versions 2 \
             to 3; a newer tarn wrote it?)"
        ),
        other => panic!("expected a refused version, got {other:?}"),
    }
}

#[test]
fn a_wal_file_of_zeros_is_torn_at_zero() {
    let file = WalFile::from_bytes("z.wal".into(), vec![0; 4096]);
    assert!(
        matches!(file, Err(WalError::Torn { offset: 0, .. })),
        "{file:?}"
    );
    let mut header_zeroed = three_batch_file(1).0;
    header_zeroed[0..32].fill(0);
    let file = WalFile::from_bytes("h.wal".into(), header_zeroed);
    assert!(
        matches!(file, Err(WalError::Corrupt { offset: 0, .. })),
        "{file:?}"
    );
}

#[test]
fn recovery_refuses_a_bad_last_batch_of_a_cleanly_closed_newest_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (one, _) = three_batch_file(1);
    let (two, [_, _, last]) = three_batch_file(10);
    let mut two = with_close_mark(two, 18);
    let end = two.len() - CLOSE_MARK_SIZE_BYTES;
    two[end - 6] ^= 0x01;
    write_file(dir.path(), wal_file_name(1), &one);
    write_file(dir.path(), wal_file_name(10), &two);
    let path = dir.path().join(wal_file_name(10));
    let result = recover(&config(dir.path()), &mut Model::default());
    assert!(
        matches!(&result, Err(WalError::Corrupt { file, offset, .. }) if *file == path && *offset == last as u64),
        "{result:?}"
    );
    assert_eq!(
        std::fs::read(&path).expect("read"),
        two,
        "nothing is cut from the file"
    );
    let mut forced = config(dir.path());
    forced.force = true;
    let mut model = Model::default();
    let recovered = recover(&forced, &mut model).expect("force recovers");
    assert_eq!(
        (
            recovered.batches_skipped,
            recovered.lsn_last,
            recovered.torn_cut.clone()
        ),
        (1, 15, None)
    );
    assert_eq!(model.0.len(), 15);
    assert_eq!(recovered.wal_file_set_aside, None);
}

#[test]
fn recovery_cuts_a_close_mark_cut_short_and_keeps_every_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (one, _) = three_batch_file(1);
    let end = one.len();
    let sealed = with_close_mark(one, 9);
    write_file(dir.path(), wal_file_name(1), &sealed[..end + 10]);
    let recovered = recover(&config(dir.path()), &mut Model::default()).expect("recovers");
    assert_eq!(recovered.lsn_last, 9);
    assert_eq!(
        recovered.torn_cut,
        Some((dir.path().join(wal_file_name(1)), end as u64))
    );
}

#[test]
fn a_cleanly_closed_writer_marks_its_file_and_a_failed_one_does_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    run_glommio(async move {
        let writer = WalWriter::start(GlommioSink::new(&path), writer_config(false));
        for k in 1..=3 {
            let commit = writer
                .append(RowKind::Replace, 512, &tuple(k, 1))
                .expect("append");
            commit.await.expect("durable");
        }
        writer.close().await.expect("close");
    });
    let bytes = std::fs::read(dir.path().join(wal_file_name(1))).expect("read");
    assert_eq!(
        trailing_close_mark(&bytes),
        Some(CloseMark {
            offset: (bytes.len() - CLOSE_MARK_SIZE_BYTES) as u64,
            lsn_last: 3
        })
    );
    let recovered = recover(&config(dir.path()), &mut Model::default()).expect("recovers");
    assert_eq!((recovered.lsn_last, recovered.torn_cut), (3, None));

    // A writer that stops on an I/O error leaves the file as it was: no mark.
    let written = Rc::new(RefCell::new(Vec::new()));
    let sink = FaultySink {
        calls: Rc::new(Cell::new(0)),
        fail_at: 4,
        written: written.clone(),
    };
    run_glommio(async move {
        let writer = WalWriter::start(sink, writer_config(true));
        let first = writer
            .append(RowKind::Replace, 512, &tuple(0, 0))
            .expect("append");
        first.await.expect("durable");
        let second = writer
            .append(RowKind::Replace, 512, &tuple(1, 0))
            .expect("append");
        assert!(second.await.is_err());
        assert!(writer.close().await.is_err());
    });
    let written = written.borrow();
    assert_eq!(trailing_close_mark(&written), None);
    let file = WalFile::from_bytes("mem.wal".into(), written.clone()).expect("header");
    let (lsns, errors) = lsns_read(&file, ReadMode::Strict);
    assert_eq!(lsns, vec![1]);
    assert!(errors.is_empty(), "{errors:?}");
}

// ---------------------------------------------------------------------------------------------
// A damaged snapshot and the older checkpoint

/// A shard directory as `checkpoint_count = 2` leaves it: snapshots at 5 and 12 (keys 1..=5
/// and 1..=12 of space 512, value 1), `1.wal` with LSNs 1..=9 and `10.wal` with 10..=18.
/// Snapshot 12 also holds tuples no row of the WAL touches (space 514 key 7, space 512 key
/// 99): they are in no other file, so a fallback that left any of snapshot 12 behind would
/// show them. Returns the paths of the two snapshots.
fn two_checkpoints(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let meta = |lsn| SnapshotMeta {
        shard_id: 0,
        lsn,
        schema_fingerprint: FINGERPRINT,
        schema: &[],
    };
    let older = write_snapshot_blocking(dir, &meta(5), (1..=5u8).map(|k| (512, tuple(k, 1))))
        .expect("snapshot 5");
    // Space 514 first, then 512 over several blocks: the damage below comes after whole
    // spaces were read.
    let big = |k: u8| {
        let mut tuple = vec![0x92, k, 0xc6];
        tuple.extend_from_slice(&100_000u32.to_be_bytes());
        tuple.extend(std::iter::repeat_n(k, 100_000));
        tuple
    };
    let mut newer: Vec<(u32, Vec<u8>)> = vec![(514, tuple(7, 7))];
    newer.extend((1..=12u8).map(|k| (512, tuple(k, 1))));
    newer.extend((20..40u8).map(|k| (512, big(k + 80))));
    newer.push((512, tuple(99, 9)));
    let newest = write_snapshot_blocking(dir, &meta(12), newer.iter().map(|(s, t)| (*s, t)))
        .expect("snapshot 12");
    write_file(dir, wal_file_name(1), &three_batch_file(1).0);
    write_file(dir, wal_file_name(10), &three_batch_file(10).0);
    (older.path, newest.path)
}

/// What snapshot 5 and the WAL give: keys 1..=18 of space 512.
fn two_checkpoints_expected() -> Model {
    let mut expected = Model::default();
    for k in 1..=18 {
        expected.0.insert((512, k), tuple(k, 1));
    }
    expected
}

#[test]
fn a_damaged_newest_snapshot_is_refused_naming_the_older_checkpoint_and_forced_uses_it() {
    // The newest snapshot damaged three ways: cut short (the trailer is gone: found after
    // every space was read), a flipped byte in the last block of space 512 (found after
    // space 514 and the first block of 512 were read), a damaged header.
    type Damage = fn(&mut Vec<u8>, usize);
    let damages: [(&str, Damage); 3] = [
        ("truncated", |bytes, _| bytes.truncate(bytes.len() - 7)),
        ("flipped", |bytes, last_block| {
            bytes[last_block + 20] ^= 0x20
        }),
        ("header", |bytes, _| bytes[14] ^= 0x01),
    ];
    for (name, damage) in damages {
        let dir = tempfile::tempdir().expect("tempdir");
        let (older, newest) = two_checkpoints(dir.path());
        let mut blocks = Vec::new();
        let mut reader = crate::wal::snapshot::SnapshotReader::open(&newest).expect("open");
        while let Some(block) = reader.next_block().expect("reads") {
            blocks.push((block.space_id, block.offset));
        }
        assert_eq!(
            blocks.iter().map(|(space, _)| *space).collect::<Vec<_>>(),
            vec![514, 512, 512]
        );
        let last_block = blocks[2].1;
        let mut bytes = std::fs::read(&newest).expect("read");
        damage(&mut bytes, last_block as usize);
        std::fs::write(&newest, &bytes).expect("write");

        let error = recover(&config(dir.path()), &mut Model::default()).unwrap_err();
        let WalError::SnapshotDamaged {
            snapshot,
            cause,
            fallback,
        } = &error
        else {
            panic!("{name}: expected SnapshotDamaged, got {error}");
        };
        assert_eq!(snapshot, &newest, "{name}");
        let offset_expected = match name {
            "truncated" => bytes.len() as u64 - 13, // the trailer, 20 bytes, lost 7
            "flipped" => last_block,
            _ => 0,
        };
        assert!(
            matches!(**cause, WalError::Corrupt { offset, .. } if offset == offset_expected),
            "{name}: {cause}"
        );
        assert_eq!(
            fallback,
            &format!(
                "the older snapshot {} and the WAL files after it",
                older.display()
            )
        );
        let text = error.to_string();
        assert!(
            text.starts_with(&format!(
                "snapshot {} is damaged: corrupt file ",
                newest.display()
            )),
            "{text}"
        );
        assert!(
            text.ends_with(&format!(
                ". An older checkpoint can replace it: the older snapshot {} and the WAL files \
                 after it are kept. Start with --force-recovery to recover from them instead \
                 (the damaged snapshot is then renamed to {}.damaged and kept)",
                older.display(),
                newest.display()
            )),
            "{text}"
        );
        assert_eq!(
            std::fs::read(&newest).expect("kept"),
            bytes,
            "{name}: untouched"
        );

        let mut forced = config(dir.path());
        forced.force = true;
        let mut model = Model::default();
        let recovered = recover(&forced, &mut model).expect("force recovers");
        assert_eq!(model, two_checkpoints_expected(), "{name}");
        assert_eq!(
            (
                recovered.snapshot_lsn,
                recovered.tuples_loaded,
                recovered.lsn_last
            ),
            (5, 5, 18),
            "{name}"
        );
        let set_aside = dir.path().join("00000000000000000012.snap.damaged");
        assert_eq!(
            recovered.snapshots_set_aside,
            vec![(newest.clone(), set_aside.clone())]
        );
        assert!(!newest.exists() && set_aside.exists(), "{name}");
        assert_eq!(std::fs::read(&set_aside).expect("kept"), bytes);

        // Set aside, it no longer stops a start without force.
        let mut again = Model::default();
        let recovered = recover(&config(dir.path()), &mut again).expect("recovers");
        assert_eq!(
            (again, recovered.snapshot_lsn),
            (two_checkpoints_expected(), 5)
        );
    }
}

#[test]
fn a_damaged_snapshot_loads_nothing_into_a_real_engine() {
    use crate::storage::{Engine, FieldType, IndexDef, KeyPart, SpaceDef, SpaceFormat};
    let mut engine = Engine::new(64 << 20);
    for id in [512, 514] {
        engine
            .create_space(SpaceDef {
                id,
                name: format!("s{id}").into(),
                format: SpaceFormat::default(),
                indexes: vec![IndexDef::tree(
                    0,
                    "primary",
                    true,
                    vec![KeyPart::new(0, FieldType::Unsigned)],
                )],
                is_sync: false,
            })
            .expect("space");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, newest) = two_checkpoints(dir.path());
    let bytes = std::fs::read(&newest).expect("read");
    std::fs::write(&newest, &bytes[..bytes.len() - 1]).expect("truncate");
    let mut forced = config(dir.path());
    forced.force = true;
    let recovered = recover(&forced, &mut engine).expect("force recovers");
    assert_eq!((recovered.snapshot_lsn, recovered.lsn_last), (5, 18));
    assert_eq!(engine.space(514).expect("space").len(), 0);
    let space = engine.space(512).expect("space");
    assert_eq!(space.len(), 18);
    assert!(space.get(0, &key(99)).expect("get").is_none());
}

#[test]
fn every_snapshot_damaged_falls_back_to_the_wal_from_lsn_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (older, newest) = two_checkpoints(dir.path());
    for path in [&older, &newest] {
        let bytes = std::fs::read(path).expect("read");
        std::fs::write(path, &bytes[..bytes.len() - 1]).expect("truncate");
    }
    let mut forced = config(dir.path());
    forced.force = true;
    // Without force, the older snapshot is named: its own damage is found only once it is read.
    let result = recover(&config(dir.path()), &mut Model::default());
    assert!(
        matches!(&result, Err(WalError::SnapshotDamaged { snapshot, .. }) if *snapshot == newest),
        "{result:?}"
    );
    let mut model = Model::default();
    let recovered = recover(&forced, &mut model).expect("force recovers");
    assert_eq!(model, two_checkpoints_expected());
    assert_eq!((recovered.snapshot_lsn, recovered.rows_replayed), (0, 18));
    assert_eq!(recovered.snapshots_set_aside.len(), 2);
}

#[test]
fn a_damaged_snapshot_whose_older_checkpoint_lost_its_wal_is_refused_even_forced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (older, newest) = two_checkpoints(dir.path());
    std::fs::remove_file(dir.path().join(wal_file_name(1))).expect("remove");
    let bytes = std::fs::read(&newest).expect("read");
    std::fs::write(&newest, &bytes[..bytes.len() - 1]).expect("truncate");
    for force in [false, true] {
        let mut config = config(dir.path());
        config.force = force;
        match recover(&config, &mut Model::default()) {
            Err(WalError::SnapshotDamagedNoFallback { snapshot, why, .. }) => {
                assert_eq!(snapshot, newest);
                assert_eq!(
                    why,
                    format!(
                        "the older snapshot {} is kept, but not the WAL files after it (the \
                         oldest WAL file starts at LSN 10, after LSN 6)",
                        older.display()
                    )
                );
            }
            other => panic!("force {force}: expected no fallback, got {other:?}"),
        }
        assert!(newest.exists());
    }
}

#[test]
fn a_newest_snapshot_of_another_schema_is_not_passed_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    two_checkpoints(dir.path());
    let meta = SnapshotMeta {
        shard_id: 0,
        lsn: 15,
        schema_fingerprint: FINGERPRINT + 1,
        schema: &[],
    };
    write_snapshot_blocking(dir.path(), &meta, [(512, tuple(1, 1))]).expect("write");
    let mut forced = config(dir.path());
    forced.force = true;
    let result = recover(&forced, &mut Model::default());
    assert!(
        matches!(result, Err(WalError::SchemaMismatch { .. })),
        "{result:?}"
    );
}

#[test]
fn force_recovery_keeps_an_unreadable_newest_wal_file_from_being_overwritten() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_file(dir.path(), wal_file_name(1), &three_batch_file(1).0);
    let (mut second, _) = three_batch_file(10);
    second[3] ^= 0x01; // the header's magic: no row of the file can be read
    write_file(dir.path(), wal_file_name(10), &second);
    let path = dir.path().join(wal_file_name(10));
    let strict = recover(&config(dir.path()), &mut Model::default());
    assert!(
        matches!(&strict, Err(WalError::Corrupt { file, offset: 0, .. }) if *file == path),
        "{strict:?}"
    );
    let mut forced = config(dir.path());
    forced.force = true;
    let recovered = recover(&forced, &mut Model::default()).expect("force recovers");
    // The writer's next file would be 10.wal, created with truncation.
    assert_eq!(recovered.lsn_next(), 10);
    let set_aside = dir.path().join("00000000000000000010.wal.damaged");
    assert_eq!(
        recovered.wal_file_set_aside,
        Some((path.clone(), set_aside.clone()))
    );
    assert!(!path.exists());
    // The next writer takes the name; the damaged bytes stay beside it.
    let dir_path = dir.path().to_path_buf();
    run_glommio(async move {
        let config = WriterConfig {
            lsn_next: 10,
            ..writer_config(false)
        };
        let writer = WalWriter::start(GlommioSink::new(&dir_path), config);
        let commit = writer
            .append(RowKind::Replace, 512, &tuple(10, 2))
            .expect("append");
        commit.await.expect("durable");
        writer.close().await.expect("close");
    });
    assert_eq!(std::fs::read(&set_aside).expect("kept"), second);
    let file = WalFile::open(&path).expect("the new file");
    assert_eq!(lsns_read(&file, ReadMode::Strict).0, vec![10]);
}

/// [`Model`] that also takes schema changes, noting each with how many tuples the model held
/// when it came (so a test sees that it came in place among the rows).
#[derive(Debug, Default)]
struct SchemaModel {
    data: Model,
    changes: Vec<(u32, u64, Vec<u8>, usize)>,
    /// The schema of each snapshot recovery began, in order.
    began: Vec<Option<Vec<u8>>>,
}

impl RecoveryTarget for SchemaModel {
    type Staged = Vec<Vec<u8>>;

    fn stage_space(
        &self,
        space_id: u32,
        blocks: &mut SpaceBlocks<'_>,
    ) -> Result<Self::Staged, String> {
        self.data.stage_space(space_id, blocks)
    }

    fn load_staged(&mut self, space_id: u32, staged: Self::Staged) -> Result<(), String> {
        self.data.load_staged(space_id, staged)
    }

    fn replace(&mut self, space_id: u32, tuple: &[u8]) -> Result<(), String> {
        self.data.replace(space_id, tuple)
    }

    fn delete(&mut self, space_id: u32, key: &[u8]) -> Result<(), String> {
        self.data.delete(space_id, key)
    }

    fn begin_snapshot(&mut self, schema: Option<&[u8]>) -> Result<(), String> {
        self.began.push(schema.map(<[u8]>::to_vec));
        Ok(())
    }

    fn change_schema(&mut self, space_id: u32, change: SchemaRow<'_>) -> Result<(), String> {
        let held = self.data.0.len();
        self.changes
            .push((space_id, change.version, change.definition.to_vec(), held));
        Ok(())
    }
}

fn schema_body(version: u64, definition: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    SchemaRow {
        version,
        definition,
    }
    .encode(&mut body);
    body
}

#[test]
fn a_schema_row_heads_its_batch() {
    let body = schema_body(3, b"def");
    let mut builder = BatchBuilder::default();
    builder.push_row(1, RowKind::Replace, 512, &tuple(1, 1));
    builder.push_row(2, RowKind::Schema, 512, &body);
    builder.push_row(3, RowKind::Replace, 512, &tuple(3, 1));
    let mut bytes = wal_header(1);
    bytes.extend_from_slice(&builder.take());
    let file = WalFile::from_bytes("x.wal".into(), bytes).expect("header");
    let batches: Vec<Vec<(u64, RowKind)>> = file
        .batches(ReadMode::Strict)
        .map(|batch| {
            let batch = batch.expect("valid");
            batch.rows().map(|row| (row.lsn, row.kind)).collect()
        })
        .collect();
    assert_eq!(
        batches,
        [
            vec![(1, RowKind::Replace)],
            vec![(2, RowKind::Schema), (3, RowKind::Replace)]
        ]
    );
    assert_eq!(
        SchemaRow::decode(&body),
        Some(SchemaRow {
            version: 3,
            definition: b"def"
        })
    );
    assert_eq!(SchemaRow::decode(&body[..7]), None);
}

/// LSNs 1..=3 replace keys 1..=3; LSN 4 changes space 512's schema to version 1 and LSN 5
/// replaces key 5 (one batch); LSN 6 changes it to version 2 and LSN 7 replaces key 7 (one
/// batch); the next file holds LSN 8, key 8. Returns the first file's size before version 2.
fn files_with_two_schema_changes(dir: &Path) -> u64 {
    let mut first = wal_header(1);
    push_batch(&mut first, 1, 3);
    let committed = schema_body(1, b"one");
    let uncommitted = schema_body(2, b"two");
    let (key_5, key_7) = (tuple(5, 1), tuple(7, 1));
    let row = |lsn, kind, body| Row {
        lsn,
        kind,
        space_id: 512,
        body,
    };
    encode_batch(
        [
            row(4, RowKind::Schema, &committed),
            row(5, RowKind::Replace, &key_5),
        ],
        &mut first,
    );
    let before_uncommitted = first.len() as u64;
    encode_batch(
        [
            row(6, RowKind::Schema, &uncommitted),
            row(7, RowKind::Replace, &key_7),
        ],
        &mut first,
    );
    write_file(dir, wal_file_name(1), &first);
    let mut second = wal_header(8);
    push_batch(&mut second, 8, 1);
    write_file(dir, wal_file_name(8), &second);
    before_uncommitted
}

#[test]
fn recovery_makes_committed_schema_changes_in_place_and_cuts_at_an_uncommitted_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cut_at = files_with_two_schema_changes(dir.path());
    let config = RecoveryConfig {
        schema_version_committed: 1,
        ..config(dir.path())
    };
    let mut model = SchemaModel::default();
    let recovered = recover(&config, &mut model).expect("recovers");
    assert_eq!(model.changes, [(512, 1, b"one".to_vec(), 3)]);
    let keys: Vec<u8> = model.data.0.keys().map(|&(_, key)| key).collect();
    assert_eq!(keys, [1, 2, 3, 5], "nothing from the uncommitted change on");
    assert_eq!(recovered.lsn_last, 5);
    let cut = recovered.uncommitted_cut.expect("cut");
    assert_eq!((cut.offset, cut.lsn, cut.version), (cut_at, 6, 2));
    assert_eq!(cut.file, dir.path().join(wal_file_name(1)));
    let set_aside = dir.path().join(format!("{}.uncommitted", wal_file_name(8)));
    assert_eq!(cut.files_set_aside, std::slice::from_ref(&set_aside));
    assert!(set_aside.exists());
    let size = std::fs::metadata(dir.path().join(wal_file_name(1)))
        .expect("kept")
        .len();
    assert_eq!(size, cut_at);

    // The next start finds the same, and nothing more to cut.
    let mut again = SchemaModel::default();
    let recovered = recover(&config, &mut again).expect("recovers again");
    assert!(recovered.uncommitted_cut.is_none());
    assert_eq!((again.data, again.changes), (model.data, model.changes));
}

#[test]
fn a_committed_schema_change_replays_wherever_it_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    files_with_two_schema_changes(dir.path());
    let config = RecoveryConfig {
        schema_version_committed: 2,
        ..config(dir.path())
    };
    let mut model = SchemaModel::default();
    let recovered = recover(&config, &mut model).expect("recovers");
    assert!(recovered.uncommitted_cut.is_none());
    assert_eq!(
        model.changes,
        [(512, 1, b"one".to_vec(), 3), (512, 2, b"two".to_vec(), 4)]
    );
    assert_eq!(recovered.lsn_last, 8);
    // A target that knows no schema refuses the change, naming it.
    let error = recover(&config, &mut Model::default()).expect_err("refused");
    assert!(
        error
            .to_string()
            .contains("a schema change (version 1), which this target cannot make"),
        "{error}"
    );
}

#[test]
fn an_uncommitted_schema_row_inside_a_batch_is_corruption() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut file = wal_header(1);
    let body = schema_body(5, b"x");
    // Built by hand: the builder would have opened a batch for the schema row.
    let rows = [
        encode_row_for_test(1, RowKind::Replace, &tuple(1, 1)),
        encode_row_for_test(2, RowKind::Schema, &body),
    ]
    .concat();
    file.extend_from_slice(&batch_of_raw_rows(1, 2, &rows));
    write_file(dir.path(), wal_file_name(1), &file);
    let error = recover(&config(dir.path()), &mut SchemaModel::default()).expect_err("corrupt");
    assert!(
        error.to_string().contains("does not head its batch"),
        "{error}"
    );
}

fn encode_row_for_test(lsn: u64, kind: RowKind, body: &[u8]) -> Vec<u8> {
    let mut row = lsn.to_le_bytes().to_vec();
    row.push(kind as u8);
    row.extend_from_slice(&512u32.to_le_bytes());
    row.extend_from_slice(&(body.len() as u32).to_le_bytes());
    row.extend_from_slice(body);
    row
}

/// A sealed batch around rows already encoded, as `docs/format.md` lays it out.
fn batch_of_raw_rows(lsn_first: u64, row_count: u32, rows: &[u8]) -> Vec<u8> {
    let mut batch = b"TBAT".to_vec();
    batch.extend_from_slice(&row_count.to_le_bytes());
    batch.extend_from_slice(&(rows.len() as u32).to_le_bytes());
    batch.extend_from_slice(&lsn_first.to_le_bytes());
    batch.extend_from_slice(rows);
    let checksum = crc32c::crc32c(&batch);
    batch.extend_from_slice(&checksum.to_le_bytes());
    batch
}

/// The same snapshot as format version 2 wrote it: no schema section.
fn as_snapshot_version_2(bytes: &[u8]) -> Vec<u8> {
    let section = SCHEMA_SECTION_HEADER_SIZE_BYTES
        + u32::from_le_bytes(bytes[36..40].try_into().expect("4 bytes")) as usize
        + SCHEMA_SECTION_TRAILER_SIZE_BYTES;
    let mut old = bytes[..FILE_HEADER_SIZE_BYTES].to_vec();
    old[4..6].copy_from_slice(&2u16.to_le_bytes());
    let header_checksum = crc32c::crc32c(&old[..28]);
    old[28..32].copy_from_slice(&header_checksum.to_le_bytes());
    old.extend_from_slice(&bytes[FILE_HEADER_SIZE_BYTES + section..]);
    let checksum_at = old.len() - 4;
    let checksum = crc32c::crc32c(&old[..checksum_at]);
    old[checksum_at..].copy_from_slice(&checksum.to_le_bytes());
    old
}

#[test]
fn a_snapshot_gives_recovery_its_schema_and_a_version_2_one_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    let meta = SnapshotMeta {
        shard_id: 0,
        lsn: 4,
        schema_fingerprint: FINGERPRINT,
        schema: b"definitions",
    };
    let tuples = [(512, tuple(1, 9))];
    let written = write_snapshot_blocking(dir.path(), &meta, tuples.iter().map(|(s, t)| (*s, t)))
        .expect("snapshot");
    let mut model = SchemaModel::default();
    recover(&config(dir.path()), &mut model).expect("recovers");
    assert_eq!(model.began, [Some(b"definitions".to_vec())]);
    assert_eq!(model.data.0.len(), 1);
    let error = recover(&config(dir.path()), &mut Model::default()).expect_err("refused");
    assert!(error.to_string().contains("cannot take"), "{error}");

    let old = as_snapshot_version_2(&std::fs::read(&written.path).expect("read"));
    std::fs::write(&written.path, old).expect("write");
    let mut model = SchemaModel::default();
    recover(&config(dir.path()), &mut model).expect("recovers version 2");
    assert_eq!(model.began, [None]);
    let keys: Vec<u8> = model.data.0.keys().map(|&(_, key)| key).collect();
    assert_eq!(keys, [1]);
    recover(&config(dir.path()), &mut Model::default()).expect("a version-2 snapshot needs none");
}
