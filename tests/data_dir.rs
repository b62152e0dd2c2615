//! The data directory and start-up, against the real binary: durable by default, a relative
//! `data_dir`, the start-up log, one owner per directory, a lost `schema.bin`, and a failed
//! start that changes nothing.

use crate::common;

use common::{Client, Server};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tarn::protocol::client::{self, decode_reply};

const SHIPPED: &str = include_str!("../conf/tarn.toml");

fn value(id: u64) -> String {
    format!("value-{id}")
}

/// Replaces `ids` with [`value`]s, each acknowledged before the next (one batch each).
fn write(server: &Server, ids: std::ops::RangeInclusive<u64>) {
    let mut client = Client::connect(server);
    for id in ids {
        let mut request = Vec::new();
        client::encode_replace(&mut request, id, 512, &common::kv_tuple(id, &value(id)));
        client.send(&request);
        let reply = client.read_packet().expect("reply");
        let reply = decode_reply(&reply).unwrap();
        assert!(
            !reply.is_error(),
            "replace {id}: {:?}",
            reply.error_message()
        );
    }
}

fn expected(ids: std::ops::RangeInclusive<u64>) -> Vec<(u64, String)> {
    ids.map(|id| (id, value(id))).collect()
}

/// Fails naming each path added, removed or changed between two [`common::dir_contents`].
fn assert_unchanged(
    before: &BTreeMap<PathBuf, Option<Vec<u8>>>,
    after: &BTreeMap<PathBuf, Option<Vec<u8>>>,
    what: &str,
) {
    let paths: std::collections::BTreeSet<&PathBuf> = before.keys().chain(after.keys()).collect();
    let changed: Vec<String> = paths
        .into_iter()
        .filter(|path| before.get(*path) != after.get(*path))
        .map(|path| {
            let size = |files: &BTreeMap<PathBuf, Option<Vec<u8>>>| match files.get(path) {
                None => "absent".to_string(),
                Some(None) => "a directory".to_string(),
                Some(Some(bytes)) => format!("{} bytes", bytes.len()),
            };
            format!(
                "{}: {} before, {} after",
                path.display(),
                size(before),
                size(after)
            )
        })
        .collect();
    assert!(
        changed.is_empty(),
        "{what} changed the data directory: {changed:#?}"
    );
}

/// `tarn` on an ephemeral port with `args`, logging at info, colour left to tarn's choice.
fn tarn(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tarn"));
    command
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR");
    command
}

/// Runs a tarn that must refuse to start; its exit code and log. Killed (and the test
/// failed) if it listens instead.
fn refused_start(mut command: Command) -> (Option<i32>, String) {
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tarn");
    let mut stderr = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut log = String::new();
        let _ = stderr.read_to_string(&mut log);
        log
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "tarn started where it must refuse: {}",
                reader.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.code(), reader.join().unwrap())
}

fn start_with_config(dir: &Path, config_toml: &str, shards: u32) -> Result<Server, String> {
    Server::try_start_with(dir, config_toml, shards, &[])
}

#[test]
fn the_shipped_config_keeps_acknowledged_rows_through_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    // No --wal-mode: the shipped default applies.
    let server = Server::start_in(dir.path(), 2, "", &[]);
    write(&server, 1..=100);
    let log = server.log_so_far();
    server.kill9();
    let server = Server::start_in(dir.path(), 2, "", &[]);
    assert_eq!(common::kv_values(server.addr), expected(1..=100));
    assert!(log.contains("wal_mode=write"), "{log}");
}

/// The shipped `data_dir = "data"`, relative, from a fresh working directory: writes,
/// `box.snapshot` and recovery all work, and the log names every path absolutely.
fn a_relative_data_dir_works(wal_mode: &str) {
    let work = tempfile::tempdir().unwrap();
    let work_path = std::fs::canonicalize(work.path()).unwrap();
    std::fs::write(work_path.join("tarn.toml"), SHIPPED).unwrap();
    let start = || {
        let mut command = tarn(&["--config", "tarn.toml", "--shards", "2"]);
        command
            .args(["--wal-mode", wal_mode])
            .current_dir(&work_path);
        Server::spawn(command).expect("starts")
    };
    let server = start();
    let log = server.log_so_far();
    let data_dir = work_path.join("data");
    write(&server, 1..=100);
    common::snapshot(server.addr).expect("box.snapshot");
    write(&server, 101..=150);
    server.kill9();
    let snapshots = (0..2)
        .flat_map(|shard| std::fs::read_dir(data_dir.join(format!("shard-{shard}"))).unwrap())
        .filter(|entry| entry.as_ref().unwrap().path().extension() == Some("snap".as_ref()))
        .count();
    assert_eq!(
        snapshots, 2,
        "one snapshot per shard, under the working directory"
    );

    let server = start();
    assert_eq!(common::kv_values(server.addr), expected(1..=150));
    write(&server, 151..=160);
    common::snapshot(server.addr).expect("box.snapshot after recovery");
    assert_eq!(server.stop(), Some(0));

    let config = work_path.join("tarn.toml");
    for field in [
        format!("config={}", config.display()),
        format!("data_dir={}", data_dir.display()),
        format!("wal_mode={wal_mode}"),
        "shards=2".to_string(),
        "memory=1GiB".to_string(),
    ] {
        assert!(
            log.contains(&field),
            "the start-up log lacks {field}: {log}"
        );
    }
    assert!(
        !log.contains('\x1b'),
        "colour codes in a piped log: {log:?}"
    );
}

#[test]
fn a_relative_data_dir_works_in_write_mode() {
    a_relative_data_dir_works("write");
}

#[test]
fn a_relative_data_dir_works_in_fsync_mode() {
    a_relative_data_dir_works("fsync");
}

#[test]
fn a_second_server_on_the_same_data_dir_is_refused_and_touches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let first = Server::start_in(dir.path(), 1, "", &[]);
    write(&first, 1..=10);
    let before = common::dir_contents(&data_dir);

    let config = dir.path().join("tarn.toml");
    let mut second = tarn(&["--shards", "1", "--data-dir"]);
    second.arg(&data_dir).arg("--config").arg(&config);
    let (code, log) = refused_start(second);
    assert_eq!(code, Some(1), "{log}");
    let in_use = format!(
        "data_dir {} is in use by pid {}",
        data_dir.display(),
        first.pid()
    );
    assert!(log.contains(&in_use), "{log}");
    assert_unchanged(
        &before,
        &common::dir_contents(&data_dir),
        "the refused server",
    );

    // The first one goes on as if nothing happened.
    write(&first, 11..=20);
    assert_eq!(common::kv_values(first.addr), expected(1..=20));
    assert_eq!(first.stop(), Some(0));
}

#[test]
fn a_lock_file_left_by_a_killed_server_does_not_block_a_start() {
    let dir = tempfile::tempdir().unwrap();
    let lock_file = dir.path().join("data/tarn.lock");
    let killed = Server::start_in(dir.path(), 1, "", &[]);
    write(&killed, 1..=10);
    let killed_pid = killed.pid();
    killed.kill9();
    assert_eq!(
        std::fs::read_to_string(&lock_file).unwrap(),
        format!("{killed_pid}\n"),
        "the lock file stays behind with the dead server's pid"
    );
    let server = Server::start_in(dir.path(), 1, "", &[]);
    assert_eq!(common::kv_values(server.addr), expected(1..=10));
    assert_eq!(
        std::fs::read_to_string(&lock_file).unwrap(),
        format!("{}\n", server.pid())
    );
}

#[test]
fn a_lost_schema_record_is_rebuilt_from_the_data_files() {
    let dir = tempfile::tempdir().unwrap();
    let schema_file = dir.path().join("data/schema.bin");
    let server = Server::start_in(dir.path(), 2, "", &["--wal-mode", "write"]);
    write(&server, 1..=200);
    common::snapshot(server.addr).expect("box.snapshot");
    write(&server, 201..=300);
    assert_eq!(server.stop(), Some(0));
    let recorded = std::fs::read(&schema_file).unwrap();
    std::fs::remove_file(&schema_file).unwrap();

    let server = Server::start_in(dir.path(), 2, "", &[]);
    assert_eq!(common::kv_values(server.addr), expected(1..=300));
    let log = server.log_so_far();
    assert!(
        log.contains("WARN") && log.contains("schema.bin is missing: rebuilding it"),
        "{log}"
    );
    assert!(log.contains("could not be checked"), "{log}");
    assert_eq!(
        std::fs::read(&schema_file).unwrap(),
        recorded,
        "the same fingerprint and spaces again"
    );
    write(&server, 301..=310);
    assert_eq!(server.stop(), Some(0));

    let server = Server::start_in(dir.path(), 2, "", &[]);
    assert_eq!(common::kv_values(server.addr), expected(1..=310));
    assert!(!server.log_so_far().contains("rebuilding"));
}

/// A config with one more space than the shipped one: compatible with its data.
fn with_extra_space() -> String {
    format!(
        "{SHIPPED}\n[[space]]\nname = \"extra\"\nid = 600\n\
         format = [{{ name = \"id\", type = \"unsigned\" }}]\n\
         [[space.index]]\nname = \"primary\"\nparts = [\"id\"]\n"
    )
}

fn damage_the_middle_of(file: &Path) -> Vec<u8> {
    let original = std::fs::read(file).unwrap();
    let mut damaged = original.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x5a;
    std::fs::write(file, &damaged).unwrap();
    original
}

#[test]
fn a_failed_start_leaves_the_directory_byte_for_byte_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let server = Server::start_in(dir.path(), 1, "", &["--wal-mode", "write"]);
    write(&server, 1..=50);
    assert_eq!(server.stop(), Some(0));
    let refused = |config_toml: &str, what: &str| {
        let before = common::dir_contents(&data_dir);
        let log = match start_with_config(dir.path(), config_toml, 1) {
            Ok(_) => panic!("{what}: the start must be refused"),
            Err(log) => log,
        };
        assert_unchanged(&before, &common::dir_contents(&data_dir), what);
        log
    };

    // A change the data does not allow, refused after recovery, before anything is written.
    let changed = SHIPPED.replace(
        r#"{ name = "value", type = "string" }"#,
        r#"{ name = "value", type = "unsigned" }"#,
    );
    let log = refused(&changed, "changed space");
    assert!(
        log.contains("the config changes space 512 'kv' (field 3 'value' from string to unsigned)"),
        "{log}"
    );

    // Recovery fails on a damaged WAL: neither the added space nor a fingerprint is recorded.
    let wal_file = std::fs::read_dir(data_dir.join("shard-0"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.extension() == Some("wal".as_ref()))
        .expect("a WAL file");
    let original = damage_the_middle_of(&wal_file);
    let log = refused(&with_extra_space(), "damaged WAL, added space");
    assert!(log.contains("recovery of shard 0 failed"), "{log}");
    std::fs::remove_file(data_dir.join("schema.bin")).unwrap();
    let log = refused(SHIPPED, "damaged WAL, lost schema.bin");
    assert!(log.contains("recovery of shard 0 failed"), "{log}");
    assert!(!data_dir.join("schema.bin").exists());

    // Repaired, the directory starts with every row, the added space accepted.
    std::fs::write(&wal_file, original).unwrap();
    let server = start_with_config(dir.path(), &with_extra_space(), 1).expect("starts");
    assert_eq!(common::kv_values(server.addr), expected(1..=50));
    assert_eq!(server.stop(), Some(0));
}
