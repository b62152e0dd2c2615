//! The lock, the fingerprint's origin and the schema record, on real directories.

use super::*;
use crate::config::SHIPPED_CONFIG_TOML;
use crate::wal::format::{encode_file_header, FileHeader};
use std::collections::BTreeMap;

fn config_in(dir: &Path) -> Config {
    let mut config = Config::from_toml_str(SHIPPED_CONFIG_TOML).expect("shipped config");
    config.data_dir = dir.to_owned();
    config
}

/// Every file under `dir` with its bytes.
fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files.insert(path.clone(), b"<dir>".to_vec());
                pending.push(path);
            } else {
                files.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// A data file in `shard-<shard>` whose header carries `fingerprint`, then `rest`.
fn data_file(dir: &Path, shard: u32, kind: FileKind, lsn: u64, fingerprint: u64, rest: &[u8]) {
    let shard_dir = wal_dir::shard_dir(dir, shard);
    std::fs::create_dir_all(&shard_dir).unwrap();
    let name = match kind {
        FileKind::Wal => wal_dir::wal_file_name(lsn),
        FileKind::Snapshot => wal_dir::snapshot_file_name(lsn),
    };
    let mut bytes = Vec::new();
    let header = FileHeader {
        kind,
        shard_id: shard,
        lsn,
        schema_fingerprint: fingerprint,
    };
    encode_file_header(&header, &mut bytes);
    bytes.extend_from_slice(rest);
    std::fs::write(shard_dir.join(name), bytes).unwrap();
}

fn error_text(result: Result<DataDir, ServerError>) -> String {
    match result {
        Ok(_) => panic!("the open must fail"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn a_second_owner_is_refused_with_the_first_ones_pid_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_in(dir.path());
    let first = DataDir::open(&config).unwrap();
    first.record_schema().unwrap();
    let fingerprint = first.fingerprint();
    let before = contents(dir.path());
    assert_eq!(
        std::fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap(),
        format!("{}\n", std::process::id())
    );

    let message = error_text(DataDir::open(&config));
    assert_eq!(
        message,
        format!(
            "data_dir {} is in use by pid {}: stop that server first, or give this one \
             another data_dir",
            dir.path().display(),
            std::process::id()
        )
    );
    assert_eq!(contents(dir.path()), before);

    drop(first);
    let second = DataDir::open(&config).expect("free once the first is gone");
    assert_eq!(second.origin(), SchemaOrigin::Recorded);
    assert_eq!(second.fingerprint(), fingerprint);
}

#[test]
fn a_lock_file_left_by_a_dead_owner_does_not_block_and_is_put_back_on_failure() {
    let dir = tempfile::tempdir().unwrap();
    let lock_path = dir.path().join(LOCK_FILE);
    std::fs::write(&lock_path, "4000000000\n").unwrap();
    let data_dir = DataDir::open(&config_in(dir.path())).expect("no process holds the lock");
    assert_eq!(
        std::fs::read_to_string(&lock_path).unwrap(),
        format!("{}\n", std::process::id())
    );
    // Dropped before the schema was recorded: a failed start.
    drop(data_dir);
    assert_eq!(std::fs::read_to_string(&lock_path).unwrap(), "4000000000\n");
}

#[test]
fn a_failed_first_start_leaves_an_empty_directory() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = DataDir::open(&config_in(dir.path())).unwrap();
    assert_eq!(data_dir.origin(), SchemaOrigin::New);
    assert!(
        !dir.path().join(SCHEMA_FILE).exists(),
        "nothing recorded yet"
    );
    drop(data_dir);
    assert_eq!(contents(dir.path()), BTreeMap::new());
}

#[test]
fn the_schema_is_recorded_once_and_kept_across_starts() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_in(dir.path());
    let data_dir = DataDir::open(&config).unwrap();
    let fingerprint = data_dir.fingerprint();
    assert_eq!(fingerprint & 1, 1, "never 0");
    data_dir.record_schema().unwrap();
    data_dir.record_schema().unwrap();
    let recorded = std::fs::read(dir.path().join(SCHEMA_FILE)).unwrap();
    let on_disk = decode_schema_file(&recorded).unwrap();
    assert_eq!(on_disk.fingerprint, fingerprint);
    assert_eq!(on_disk.version, 0);
    let ids: Vec<u32> = on_disk.spaces.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, [512, 513]);
    drop(data_dir);
    assert!(
        dir.path().join(LOCK_FILE).exists(),
        "a started server's lock file stays"
    );

    let again = DataDir::open(&config).unwrap();
    assert_eq!(again.origin(), SchemaOrigin::Recorded);
    assert_eq!(again.fingerprint(), fingerprint);
}

#[test]
fn a_lost_schema_is_rebuilt_from_the_data_files_and_recorded_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let fingerprint = 0x1234_5678_9abc_def1;
    data_file(dir.path(), 0, FileKind::Snapshot, 7, fingerprint, b"");
    data_file(dir.path(), 0, FileKind::Wal, 8, fingerprint, b"batches");
    // A shard beyond the configured count still counts, and a torn new file holds nothing.
    data_file(dir.path(), 5, FileKind::Wal, 1, fingerprint, b"");
    let torn = wal_dir::shard_dir(dir.path(), 5).join(wal_dir::wal_file_name(3));
    std::fs::write(&torn, b"TWAL").unwrap();
    let before = contents(dir.path());

    let data_dir = DataDir::open(&config_in(dir.path())).unwrap();
    assert_eq!(data_dir.origin(), SchemaOrigin::Rebuilt);
    assert_eq!(data_dir.fingerprint(), fingerprint);
    data_dir.record_schema().unwrap();
    let recorded = std::fs::read(dir.path().join(SCHEMA_FILE)).unwrap();
    assert_eq!(
        decode_schema_file(&recorded).unwrap().fingerprint,
        fingerprint
    );
    drop(data_dir);

    // Without the record step (a failed start) nothing stays behind.
    std::fs::remove_file(dir.path().join(SCHEMA_FILE)).unwrap();
    std::fs::remove_file(dir.path().join(LOCK_FILE)).unwrap();
    drop(DataDir::open(&config_in(dir.path())).unwrap());
    assert_eq!(contents(dir.path()), before);
}

#[test]
fn data_files_of_two_directories_refuse_a_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    data_file(dir.path(), 0, FileKind::Wal, 1, 0x11, b"");
    data_file(dir.path(), 1, FileKind::Wal, 1, 0x23, b"");
    let message = error_text(DataDir::open(&config_in(dir.path())));
    assert!(
        message.contains("it is missing, and the data files carry different fingerprints"),
        "{message}"
    );
    assert!(
        message.contains("0x0000000000000011 in 1 file(s)"),
        "{message}"
    );
    assert!(
        message.contains("0x0000000000000023 in 1 file(s)"),
        "{message}"
    );
    assert!(!dir.path().join(SCHEMA_FILE).exists());
    assert!(!dir.path().join(LOCK_FILE).exists());
}

#[test]
fn only_damaged_headers_refuse_a_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let shard_dir = wal_dir::shard_dir(dir.path(), 0);
    std::fs::create_dir_all(&shard_dir).unwrap();
    std::fs::write(shard_dir.join(wal_dir::wal_file_name(1)), [0x5a; 64]).unwrap();
    let message = error_text(DataDir::open(&config_in(dir.path())));
    assert!(
        message.contains("it is missing, and no data file has a readable header"),
        "{message}"
    );
    assert!(message.contains("bad file magic"), "{message}");
}

#[test]
fn a_schema_record_of_another_directory_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_in(dir.path());
    let data_dir = DataDir::open(&config).unwrap();
    data_dir.record_schema().unwrap();
    let recorded = data_dir.fingerprint();
    drop(data_dir);
    data_file(dir.path(), 0, FileKind::Wal, 1, recorded ^ 0x10, b"");
    let message = error_text(DataDir::open(&config));
    assert!(
        message.contains(&format!("it records fingerprint {recorded:#018x}")),
        "{message}"
    );
    assert!(
        message.contains("remove it, and tarn rebuilds it"),
        "{message}"
    );
}

#[test]
fn a_new_primary_key_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = DataDir::open(&config_in(dir.path())).unwrap();
    data_dir.record_schema().unwrap();
    drop(data_dir);
    let before = contents(dir.path());

    let changed =
        SHIPPED_CONFIG_TOML.replacen(r#"parts = ["id"]"#, r#"parts = ["id", "bucket_id"]"#, 1);
    let mut config = Config::from_toml_str(&changed).unwrap();
    config.data_dir = dir.path().to_owned();
    let message = error_text(DataDir::open(&config));
    assert!(
        message.contains("space 512 'kv' changes its primary key: rows are placed on shards by it"),
        "{message}"
    );
    assert_eq!(contents(dir.path()), before);
}

#[test]
fn another_format_opens_with_the_change_planned_and_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = DataDir::open(&config_in(dir.path())).unwrap();
    data_dir.record_schema().unwrap();
    drop(data_dir);
    let before = contents(dir.path());

    let changed = SHIPPED_CONFIG_TOML.replace(
        r#"{ name = "value", type = "string" }"#,
        r#"{ name = "value", type = "unsigned" }"#,
    );
    let mut config = Config::from_toml_str(&changed).unwrap();
    config.data_dir = dir.path().to_owned();
    let data_dir = DataDir::open(&config).unwrap();
    let changes: Vec<String> = data_dir
        .schema_changes()
        .iter()
        .map(|c| c.describe())
        .collect();
    assert_eq!(
        changes,
        ["space 512 'kv' (field 3 'value' from string to unsigned)"]
    );
    drop(data_dir);
    assert_eq!(contents(dir.path()), before);
}

#[test]
fn a_damaged_schema_record_says_how_to_go_on() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(SCHEMA_FILE), [1, 2, 3]).unwrap();
    let message = error_text(DataDir::open(&config_in(dir.path())));
    assert!(
        message.contains("the schema record is damaged; remove it, and tarn rebuilds it"),
        "{message}"
    );
}

#[test]
fn schema_records_round_trip_and_truncations_do_not_decode() {
    let spaces = vec![
        (512, "a".to_owned(), vec![0x91, 0x01]),
        (513, "b".to_owned(), vec![]),
    ];
    let bytes = encode_schema_file(7, 0, &spaces, &[]);
    let decoded = |version| SchemaFile {
        fingerprint: 7,
        version,
        spaces: vec![(512, vec![0x91, 0x01]), (513, vec![])],
        made: vec![],
    };
    assert_eq!(decode_schema_file(&bytes), Some(decoded(0)));
    let versioned = encode_schema_file(7, 9, &spaces, &[]);
    assert_eq!(versioned.len(), bytes.len() + 16, "the version's entry");
    assert_eq!(decode_schema_file(&versioned), Some(decoded(9)));
    for length in 0..bytes.len() {
        if length == 8 || length == 18 {
            continue; // whole records: the fingerprint alone, or with the first space
        }
        assert_eq!(decode_schema_file(&bytes[..length]), None, "{length}");
    }
}

#[test]
fn made_spaces_round_trip_beside_the_config_spaces() {
    let spaces = vec![(512, "a".to_owned(), vec![0x91, 0x01])];
    let made = vec![(512, vec![0x91, 0x02]), (600, vec![0x90])];
    let bytes = encode_schema_file(7, 3, &spaces, &made);
    assert_eq!(
        decode_schema_file(&bytes),
        Some(SchemaFile {
            fingerprint: 7,
            version: 3,
            spaces: vec![(512, vec![0x91, 0x01])],
            made,
        })
    );
}

/// A made definition stands while the config's entry of its id is as recorded; a changed
/// (or new) config entry is planned as a change from the made one.
#[test]
fn made_spaces_are_kept_until_the_config_changes_their_entry() {
    let config: ConfigSpaces = vec![
        (512, "kept".into(), vec![1]),
        (513, "changed".into(), vec![9]),
        (514, "named now".into(), vec![4]),
    ];
    let recorded = vec![(512, vec![1]), (513, vec![2])];
    let made = vec![
        (512, vec![10]),
        (513, vec![11]),
        (514, vec![12]),
        (600, vec![13]),
    ];
    let (for_plan, kept) = with_made_spaces(&config, recorded, made);
    assert_eq!(
        for_plan,
        vec![(512, vec![1]), (513, vec![11]), (514, vec![12])]
    );
    assert_eq!(kept, vec![(512, vec![10]), (600, vec![13])]);
}

#[test]
fn the_owner_is_described_from_the_lock_file_text() {
    assert_eq!(describe_owner("123\n"), "pid 123");
    assert_eq!(
        describe_owner(""),
        "another process (its pid is not written yet)"
    );
}
