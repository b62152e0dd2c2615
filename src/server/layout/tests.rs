use super::directory::staging_dir;
use super::record::{decode_record, encode_record};
use super::*;
use crate::msgpack::{write_array_len, write_str, write_uint};
use crate::placement::shard_of_key;
use crate::server::schema;
use crate::storage::key::SearchKeyBuf;
use crate::wal::{RecoveryConfig, SnapshotMeta};
use std::collections::BTreeSet;

const KV: u32 = 512;
const FINGERPRINT: u64 = 0x7a11;

fn config(data_dir: &Path) -> Config {
    let mut config =
        Config::from_toml_str(crate::config::SHIPPED_CONFIG_TOML).expect("shipped config");
    config.data_dir = data_dir.to_path_buf();
    config
}

fn kv_tuple(id: u64, value: &str) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_len(&mut out, 3);
    write_uint(&mut out, id);
    write_uint(&mut out, id % 3000);
    write_str(&mut out, value.as_bytes());
    out
}

/// The owner of a `kv` id as the request path routes it: its unsigned fast path hashes the
/// id's 8 big-endian bytes (`placement::route`).
fn kv_owner(id: u64, shard_count: usize) -> usize {
    shard_of_key(&id.to_be_bytes(), shard_count)
}

/// Writes `tuples` of `kv` as shard `shard_id`'s snapshot at `lsn`.
fn write_shard(data_dir: &Path, shard_id: usize, lsn: u64, tuples: &[Vec<u8>]) {
    let dir = wal::dir::shard_dir(data_dir, shard_id as u32);
    wal::dir::create(&dir).expect("shard dir");
    let meta = SnapshotMeta {
        shard_id: shard_id as u32,
        lsn,
        schema_fingerprint: FINGERPRINT,
        schema: &[],
    };
    wal::snapshot::write_snapshot_blocking(&dir, &meta, tuples.iter().map(|t| (KV, t)))
        .expect("snapshot");
}

/// Writes ids `0..count` as a directory of `shard_count` shards placed correctly.
fn write_layout(data_dir: &Path, shard_count: usize, count: u64) {
    for shard_id in 0..shard_count {
        let tuples: Vec<Vec<u8>> = (0..count)
            .filter(|&id| kv_owner(id, shard_count) == shard_id)
            .map(|id| kv_tuple(id, &format!("v{id}")))
            .collect();
        write_shard(data_dir, shard_id, 10 + shard_id as u64, &tuples);
    }
}

/// Recovers every shard of `shard_count` and returns each one's `kv` tuples.
fn recover_all(config: &Config, shard_count: usize) -> Vec<Vec<Vec<u8>>> {
    (0..shard_count)
        .map(|shard_id| {
            let mut engine = schema::build_engine(config, config.memory_bytes).expect("engine");
            let recovery = RecoveryConfig {
                dir: wal::dir::shard_dir(&config.data_dir, shard_id as u32),
                shard_id: shard_id as u32,
                schema_fingerprint: FINGERPRINT,
                force: false,
                schema_version_committed: 0,
            };
            let mut target = crate::server::recovering::Recovering::new(&mut engine);
            wal::recover(&recovery, &mut target).expect("recovers");
            let space = engine.space(KV).expect("kv");
            space.indexes()[0]
                .entries()
                .map(|(_, tuple)| tuple.data().to_vec())
                .collect()
        })
        .collect()
}

fn id_of(tuple: &[u8]) -> u64 {
    let mut fields = &tuple[1..];
    match crate::msgpack::read_value(&mut fields) {
        Ok(crate::msgpack::Value::Uint(id)) => id,
        other => panic!("id: {other:?}"),
    }
}

/// Each shard holds exactly the ids `0..count` it owns at `shard_count`, with value `v<id>`.
fn assert_placed(config: &Config, shard_count: usize, count: u64) {
    let shards = recover_all(config, shard_count);
    let mut seen = BTreeSet::new();
    for (shard_id, tuples) in shards.iter().enumerate() {
        for tuple in tuples {
            let id = id_of(tuple);
            assert_eq!(kv_owner(id, shard_count), shard_id, "id {id}");
            assert_eq!(tuple, &kv_tuple(id, &format!("v{id}")));
            assert!(seen.insert(id), "id {id} twice");
        }
    }
    assert_eq!(seen, (0..count).collect::<BTreeSet<_>>());
}

fn entries(data_dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(data_dir)
        .expect("list")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .into_string()
                .expect("utf-8")
        })
        .collect();
    names.sort();
    names
}

#[test]
fn the_record_round_trips_and_refuses_damage() {
    let dir = tempfile::tempdir().expect("dir");
    let mut layout = Layout::from_config(&config(dir.path()), 3, 4);
    layout.spaces.insert(900, Placement::Single);
    let text = encode_record(&layout);
    let path = dir.path().join(LAYOUT_FILE);
    assert_eq!(decode_record(&text, &path).expect("decodes"), layout);
    assert!(text.contains("shards = 3\n"), "{text}");

    let edited = text.replace("shards = 3", "shards = 2");
    assert!(matches!(
        decode_record(&edited, &path),
        Err(LayoutError::Damaged { .. })
    ));
    let cut = &text[..text.len() - 5];
    assert!(matches!(
        decode_record(cut, &path),
        Err(LayoutError::Damaged { .. })
    ));
    let resealed = |body: &str| {
        let checksum = crc32c::crc32c(body.as_bytes());
        format!("{body}{CHECKSUM_PREFIX}{checksum:08x}\n")
    };
    let body = &text[..text.rfind(CHECKSUM_PREFIX).expect("checksum line")];
    let newer = resealed(&body.replace("version = 1", "version = 2\nfuture = true"));
    assert!(matches!(
        decode_record(&newer, &path),
        Err(LayoutError::NewerVersion { found: 2, .. })
    ));
    let other_function = resealed(&body.replace(PLACEMENT_FUNCTION, "jump-hash"));
    assert!(matches!(
        decode_record(&other_function, &path),
        Err(LayoutError::UnknownPlacement { .. })
    ));
}

#[test]
fn owners_agree_with_the_request_paths_unsigned_fast_path() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    let mut engine = schema::build_engine(&config, config.memory_bytes).expect("engine");
    let space = engine.space_mut(KV).expect("kv");
    let layout = Layout::from_config(&config, 3, 0);
    let mut key = SearchKeyBuf::new();
    for id in [0, 1, 2, 255, 256, 65_537, u64::MAX] {
        let tuple = space.build_tuple(&kv_tuple(id, "x")).expect("tuple");
        key.clear();
        space.indexes()[0]
            .def
            .key_def
            .encode_from_tuple_data(tuple.data(), &mut key)
            .expect("key");
        assert_eq!(layout.owner(KV, &key), kv_owner(id, 3), "id {id}");
    }
    let mut single = layout.clone();
    single.spaces.insert(KV, Placement::Single);
    assert_eq!(single.owner(KV, &key), 0);
}

#[test]
fn an_empty_directory_takes_the_configured_count() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    let layout = prepare(&config, 3, FINGERPRINT).expect("prepare");
    assert_eq!(layout.shard_count, 3);
    assert_eq!(read_record(dir.path()).expect("read"), Some(layout));
    // Still no rows: another count is taken as it is, with nothing moved.
    let layout = prepare(&config, 2, FINGERPRINT).expect("prepare");
    assert_eq!((layout.shard_count, layout.generation), (2, 0));
    assert_eq!(entries(dir.path()), [LAYOUT_FILE]);
}

#[test]
fn a_stale_record_is_left_for_after_recovery() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    let prepared = prepare_for_recovery(&config, &[], 2, FINGERPRINT, 0, None).expect("prepare");
    assert_eq!(prepared.layout.shard_count, 2);
    assert_eq!(
        entries(dir.path()),
        Vec::<String>::new(),
        "nothing written yet"
    );
    prepared.record(dir.path()).expect("record");
    assert_eq!(
        read_record(dir.path()).expect("read"),
        Some(prepared.layout)
    );
    // Recorded and unchanged: nothing left to write.
    let again = prepare_for_recovery(&config, &[], 2, FINGERPRINT, 0, None).expect("again");
    assert!(!again.record_stale);
}

#[test]
fn a_directory_without_a_record_is_read_at_its_highest_shard_directory() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    write_layout(dir.path(), 3, 300);
    // The same count: nothing moves, the record is written.
    let layout = prepare(&config, 3, FINGERPRINT).expect("prepare");
    assert_eq!((layout.shard_count, layout.generation), (3, 0));
    assert_eq!(
        entries(dir.path()),
        [LAYOUT_FILE, "shard-0", "shard-1", "shard-2"]
    );
    assert_placed(&config, 3, 300);
}

#[test]
fn rows_move_to_their_owners_at_another_count() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    write_layout(dir.path(), 2, 1000);
    let layout = prepare(&config, 3, FINGERPRINT).expect("to 3");
    assert_eq!((layout.shard_count, layout.generation), (3, 1));
    assert_eq!(
        entries(dir.path()),
        [LAYOUT_FILE, "shard-0", "shard-1", "shard-2"]
    );
    assert_placed(&config, 3, 1000);
    // Each new shard is one snapshot at the old shards' highest LSN.
    let listing = wal::dir::list(&wal::dir::shard_dir(dir.path(), 2)).expect("list");
    assert_eq!(listing.snapshots.len(), 1);
    assert_eq!(listing.snapshots[0].0, 11);
    assert!(listing.wal_files.is_empty());

    let layout = prepare(&config, 2, FINGERPRINT).expect("to 2");
    assert_eq!((layout.shard_count, layout.generation), (2, 2));
    assert_eq!(entries(dir.path()), [LAYOUT_FILE, "shard-0", "shard-1"]);
    assert_placed(&config, 2, 1000);

    let layout = prepare(&config, 1, FINGERPRINT).expect("to 1");
    assert_eq!((layout.shard_count, layout.generation), (1, 3));
    assert_eq!(entries(dir.path()), [LAYOUT_FILE, "shard-0"]);
    assert_placed(&config, 1, 1000);
    // And again at the same count: nothing to do.
    assert_eq!(prepare(&config, 1, FINGERPRINT).expect("again"), layout);
}

#[test]
fn a_space_that_moves_to_shard_0_is_gathered_there() {
    let dir = tempfile::tempdir().expect("dir");
    let mut config = config(dir.path());
    write_layout(dir.path(), 2, 100);
    prepare(&config, 2, FINGERPRINT).expect("record");
    config.spaces[0].placement = Placement::Single;
    let layout = prepare(&config, 2, FINGERPRINT).expect("to single");
    assert_eq!(layout.spaces[&KV], Placement::Single);
    let shards = recover_all(&config, 2);
    assert_eq!(shards[0].len(), 100);
    assert!(shards[1].is_empty());
}

#[test]
fn an_unfinished_move_before_its_commit_is_discarded() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    write_layout(dir.path(), 2, 200);
    // What a crash after staging one shard of a move to 3 leaves: no record names it.
    let staging = staging_dir(dir.path(), 1);
    write_shard(&staging, 0, 11, &[kv_tuple(1, "staged")]);
    std::fs::write(dir.path().join(LAYOUT_FILE_IN_PROGRESS), "half").expect("write");
    let layout = prepare(&config, 2, FINGERPRINT).expect("prepare");
    assert_eq!((layout.shard_count, layout.generation), (2, 0));
    assert_eq!(entries(dir.path()), [LAYOUT_FILE, "shard-0", "shard-1"]);
    assert_placed(&config, 2, 200);
}

#[test]
fn a_committed_move_is_finished_at_the_next_start() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    // A move from 2 shards to 1, committed, crashed before any directory was swapped.
    write_layout(dir.path(), 2, 50);
    let staging = staging_dir(dir.path(), 1);
    let all: Vec<Vec<u8>> = (0..60).map(|id| kv_tuple(id, &format!("v{id}"))).collect();
    write_shard(&staging, 0, 11, &all);
    let committed = Layout::from_config(&config, 1, 1);
    write_record(dir.path(), &committed).expect("commit");
    assert_eq!(
        prepare(&config, 1, FINGERPRINT).expect("prepare"),
        committed
    );
    assert_eq!(entries(dir.path()), [LAYOUT_FILE, "shard-0"]);
    // The staged rows (60), not the old ones (50).
    assert_placed(&config, 1, 60);

    // The same, crashed after the new shard-0 was in place but before old shard-1 went.
    write_shard(dir.path(), 1, 10, &[kv_tuple(1, "old")]);
    std::fs::create_dir_all(&staging).expect("staging");
    assert_eq!(
        prepare(&config, 1, FINGERPRINT).expect("prepare"),
        committed
    );
    assert_eq!(entries(dir.path()), [LAYOUT_FILE, "shard-0"]);
    assert_placed(&config, 1, 60);
}

#[test]
fn rows_in_a_shard_that_does_not_own_them_keep_one_copy() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    let owned_by_0: Vec<u64> = (0..100).filter(|&id| kv_owner(id, 2) == 0).collect();
    let (duplicated, stray) = (owned_by_0[0], owned_by_0[1]);
    // Shard 0 lacks `stray`; shard 1 holds its own rows plus a stale `duplicated` and `stray`.
    let shard_0: Vec<Vec<u8>> = owned_by_0
        .iter()
        .filter(|&&id| id != stray)
        .map(|&id| kv_tuple(id, &format!("v{id}")))
        .collect();
    let mut shard_1: Vec<Vec<u8>> = (0..100)
        .filter(|&id| kv_owner(id, 2) == 1)
        .map(|id| kv_tuple(id, &format!("v{id}")))
        .collect();
    shard_1.push(kv_tuple(duplicated, "stale"));
    shard_1.push(kv_tuple(stray, &format!("v{stray}")));
    shard_1.sort_by_key(|tuple| id_of(tuple));
    write_shard(dir.path(), 0, 5, &shard_0);
    write_shard(dir.path(), 1, 5, &shard_1);
    prepare(&config, 2, FINGERPRINT).expect("record 2");
    prepare(&config, 1, FINGERPRINT).expect("to 1");
    assert_placed(&config, 1, 100);
}

#[test]
fn rows_beyond_the_recorded_count_are_moved_too() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    write_layout(dir.path(), 2, 100);
    prepare(&config, 2, FINGERPRINT).expect("record 2");
    // What an older tarn started at 3 shards on this directory would add.
    let added: Vec<Vec<u8>> = (100..150)
        .filter(|&id| kv_owner(id, 3) == 2)
        .map(|id| kv_tuple(id, &format!("v{id}")))
        .collect();
    write_shard(dir.path(), 2, 3, &added);
    let in_shard_0: Vec<Vec<u8>> = (0..150)
        .filter(|&id| (id < 100 && kv_owner(id, 2) == 0) || (id >= 100 && kv_owner(id, 3) == 0))
        .map(|id| kv_tuple(id, &format!("v{id}")))
        .collect();
    let in_shard_1: Vec<Vec<u8>> = (0..150)
        .filter(|&id| (id < 100 && kv_owner(id, 2) == 1) || (id >= 100 && kv_owner(id, 3) == 1))
        .map(|id| kv_tuple(id, &format!("v{id}")))
        .collect();
    write_shard(dir.path(), 0, 20, &in_shard_0);
    write_shard(dir.path(), 1, 20, &in_shard_1);
    let layout = prepare(&config, 3, FINGERPRINT).expect("to 3");
    assert_eq!((layout.shard_count, layout.generation), (3, 1));
    assert_placed(&config, 3, 150);
}
