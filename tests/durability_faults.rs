//! Damaged data directories against the real binary: a torn last write is cut with a
//! warning, a damaged middle refuses start-up (naming file and offset) unless
//! `--force-recovery`, a missing WAL file refuses start-up (schema changes: `schema_changes.rs`).

use crate::common;

use common::Client;
use common::Server;
use std::path::{Path, PathBuf};
use tarn::protocol::client::{self, decode_reply};

const SHIPPED: &str = include_str!("../conf/tarn.toml");

fn write_mode() -> [&'static str; 2] {
    ["--wal-mode", "write"]
}

/// Replaces `ids` one at a time, each acknowledged before the next, so each is one batch.
fn write_one_by_one(server: &Server, ids: std::ops::RangeInclusive<u64>) {
    let mut client = Client::connect(server);
    for id in ids {
        let mut request = Vec::new();
        client::encode_replace(&mut request, id, 512, &common::kv_tuple(id, "value"));
        client.send(&request);
        let reply = client.read_packet().expect("reply");
        assert!(!decode_reply(&reply).unwrap().is_error());
    }
}

fn wal_files(dir: &Path) -> Vec<PathBuf> {
    shard_wal_files(dir, 0)
}

fn shard_wal_files(dir: &Path, shard: u32) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(format!("data/shard-{shard}")))
        .expect("shard dir")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "wal"))
        .collect();
    files.sort();
    files
}

/// A one-shard server in `dir` that wrote ids 1..=50 and stopped cleanly.
fn fifty_rows_written(dir: &Path) {
    let server = Server::start_in(dir, 1, "", &write_mode());
    write_one_by_one(&server, 1..=50);
    assert_eq!(server.stop(), Some(0));
}

#[test]
fn a_torn_last_write_is_cut_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    // A crash, not a clean stop: a clean stop marks the file, and damage before the mark is
    // corruption (tests/recovery_damage.rs).
    let server = Server::start_in(dir.path(), 1, "", &write_mode());
    write_one_by_one(&server, 1..=50);
    server.kill9();
    let newest = wal_files(dir.path()).pop().expect("a WAL file");
    let len = std::fs::metadata(&newest).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap();
    file.set_len(len - 3).unwrap();
    let server = Server::start_in(dir.path(), 1, "", &write_mode());
    assert_eq!(common::kv_ids(server.addr), (1..=49).collect::<Vec<_>>());
}

#[test]
fn a_damaged_middle_refuses_start_up_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    fifty_rows_written(dir.path());
    let file = wal_files(dir.path()).pop().expect("a WAL file");
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(&file, &bytes).unwrap();

    let config = SHIPPED.to_string();
    let log = match Server::try_start_with(dir.path(), &config, 1, &write_mode()) {
        Ok(_) => panic!("start-up must be refused"),
        Err(log) => log,
    };
    let name = file.file_name().unwrap().to_string_lossy().to_string();
    assert!(log.contains(&name), "names the file: {log}");
    assert!(log.contains("offset"), "names the offset: {log}");
    assert!(log.contains("--force-recovery"), "says how to go on: {log}");

    let mut args = write_mode().to_vec();
    args.push("--force-recovery");
    let server = Server::try_start_with(dir.path(), &config, 1, &args).expect("forced start");
    let recovered = common::kv_ids(server.addr);
    assert_eq!(
        recovered.len(),
        49,
        "exactly the damaged row is skipped: {recovered:?}"
    );
}

#[test]
fn a_missing_wal_file_refuses_start_up() {
    let dir = tempfile::tempdir().unwrap();
    fifty_rows_written(dir.path());
    let server = Server::start_in(dir.path(), 1, "", &write_mode());
    write_one_by_one(&server, 51..=60);
    assert_eq!(server.stop(), Some(0));
    let files = wal_files(dir.path());
    assert!(
        files.len() >= 2,
        "a restart starts a new WAL file: {files:?}"
    );
    std::fs::remove_file(&files[0]).unwrap();
    let log = match Server::try_start_with(dir.path(), SHIPPED, 1, &write_mode()) {
        Ok(_) => panic!("start-up must be refused"),
        Err(log) => log,
    };
    let missing = files[0].file_name().unwrap().to_string_lossy().to_string();
    assert!(log.contains(&missing), "names the missing file: {log}");
}

#[test]
fn one_damaged_shard_stops_the_whole_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(dir.path(), 2, "", &write_mode());
    write_one_by_one(&server, 1..=100);
    assert_eq!(server.stop(), Some(0));
    let file = shard_wal_files(dir.path(), 1)
        .pop()
        .expect("shard 1 has a WAL file");
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(&file, &bytes).unwrap();
    let log = match Server::try_start_with(dir.path(), SHIPPED, 2, &write_mode()) {
        Ok(_) => panic!("a server missing a shard must not serve"),
        Err(log) => log,
    };
    assert!(log.contains("recovery of shard 1 failed"), "{log}");
}
