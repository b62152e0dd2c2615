//! Recovery that uses what it kept, against the real binary: a damaged newest snapshot is
//! replaced by the older checkpoint and the WAL after it with `--force-recovery` (and refused,
//! naming both, without it); a bad last batch after a clean shutdown is refused as corruption
//! (the shutdown marked the file), not cut as a torn write.

use crate::common;

use common::{Client, Server};
use std::path::{Path, PathBuf};
use tarn::protocol::client::{self, decode_reply};
use tarn::wal::format::trailing_close_mark;
use tarn::wal::{ReadMode, WalFile};

const SHIPPED: &str = include_str!("../conf/tarn.toml");
const WRITE_MODE: [&str; 2] = ["--wal-mode", "write"];
const FORCED: [&str; 3] = ["--wal-mode", "write", "--force-recovery"];

/// Replaces `ids` one at a time, each acknowledged before the next, so each is one batch.
fn write_one_by_one(client: &mut Client, ids: std::ops::RangeInclusive<u64>) {
    for id in ids {
        let mut request = Vec::new();
        client::encode_replace(&mut request, id, 512, &common::kv_tuple(id, "value"));
        client.send(&request);
        let reply = client.read_packet().expect("reply");
        assert!(!decode_reply(&reply).unwrap().is_error());
    }
}

fn snapshot(client: &mut Client) {
    let mut call = Vec::new();
    client::encode_call(&mut call, 77, "box.snapshot", &[0x90]);
    client.send(&call);
    let reply = client.read_packet().expect("snapshot reply");
    let reply = decode_reply(&reply).unwrap();
    assert!(!reply.is_error(), "{:?}", reply.error_message());
}

/// Shard 0's files whose names end with `suffix`, sorted (so by LSN).
fn shard_files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("data/shard-0"))
        .expect("shard dir")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().ends_with(suffix))
        .collect();
    files.sort();
    files
}

fn refused(dir: &Path, args: &[&str]) -> String {
    match Server::try_start_with(dir, SHIPPED, 1, args) {
        Ok(_) => panic!("start-up must be refused"),
        Err(log) => log,
    }
}

#[test]
fn a_truncated_newest_snapshot_is_replaced_by_the_older_checkpoint_with_force_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(dir.path(), 1, "", &WRITE_MODE);
    let mut client = Client::connect(&server);
    write_one_by_one(&mut client, 1..=30);
    snapshot(&mut client);
    write_one_by_one(&mut client, 31..=60);
    snapshot(&mut client);
    write_one_by_one(&mut client, 61..=90);
    drop(client);
    assert_eq!(server.stop(), Some(0));

    // checkpoint_count = 2 (the shipped config) kept both snapshots and the WAL after the older.
    let snapshots = shard_files(dir.path(), ".snap");
    let [older, newest] = snapshots.as_slice() else {
        panic!("two snapshots kept: {snapshots:?}");
    };
    let bytes = std::fs::read(newest).unwrap();
    std::fs::write(newest, &bytes[..bytes.len() / 2]).unwrap();

    let log = refused(dir.path(), &WRITE_MODE);
    let expected = format!(
        "snapshot {} is damaged: corrupt file {} at offset ",
        newest.display(),
        newest.display()
    );
    assert!(log.contains(&expected), "names the damaged snapshot: {log}");
    let expected = format!(
        ". An older checkpoint can replace it: the older snapshot {} and the WAL files after it \
         are kept. Start with --force-recovery to recover from them instead (the damaged \
         snapshot is then renamed to {}.damaged and kept)",
        older.display(),
        newest.display()
    );
    assert!(log.contains(&expected), "names the older checkpoint: {log}");
    assert_eq!(
        std::fs::metadata(newest).unwrap().len(),
        bytes.len() as u64 / 2,
        "a refused start changes nothing"
    );

    let server = Server::try_start_with(dir.path(), SHIPPED, 1, &FORCED).expect("forced start");
    assert_eq!(common::kv_ids(server.addr), (1..=90).collect::<Vec<_>>());
    let (status, log) = server.stop_with_log();
    assert_eq!(status, Some(0));
    let warning = log
        .lines()
        .find(|line| line.contains("the snapshot is damaged; recovering from the older checkpoint"))
        .unwrap_or_else(|| panic!("a warning says what was used instead: {log}"));
    assert!(warning.contains("WARN"), "{warning}");
    assert!(
        warning.contains(&format!("snapshot={}", newest.display())),
        "{warning}"
    );
    assert!(
        warning.contains(&format!(
            "instead=the older snapshot {} and",
            older.display()
        )),
        "{warning}"
    );
    assert!(
        log.contains("every row of the damaged snapshot was recovered from the older checkpoint"),
        "{log}"
    );
    let set_aside = PathBuf::from(format!("{}.damaged", newest.display()));
    assert!(!newest.exists() && set_aside.exists());

    // Set aside, the damaged snapshot no longer stops a start without the flag.
    let server = Server::try_start_with(dir.path(), SHIPPED, 1, &WRITE_MODE).expect("start");
    assert_eq!(common::kv_ids(server.addr), (1..=90).collect::<Vec<_>>());
}

#[test]
fn a_bad_last_batch_after_a_clean_shutdown_is_corruption_not_a_torn_write() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(dir.path(), 1, "", &WRITE_MODE);
    write_one_by_one(&mut Client::connect(&server), 1..=50);
    assert_eq!(server.stop(), Some(0), "SIGTERM stops it cleanly");

    let wal = shard_files(dir.path(), ".wal").pop().expect("a WAL file");
    let (last_offset, last_size_bytes) = {
        let file = WalFile::open(&wal).expect("the WAL reads");
        let mut batches = file.batches(ReadMode::Strict);
        let mut last = None;
        loop {
            let offset = batches.offset();
            match batches.next() {
                Some(batch) => last = Some((offset, batch.expect("valid").size_bytes as u64)),
                None => break,
            }
        }
        last.expect("a batch")
    };
    let mut bytes = std::fs::read(&wal).unwrap();
    // The second-last byte of the row's body: the batch's checksum is its last 4 bytes.
    let flip_at = (last_offset + last_size_bytes - 4 - 2) as usize;
    bytes[flip_at] ^= 0x01;
    std::fs::write(&wal, &bytes).unwrap();

    let log = refused(dir.path(), &WRITE_MODE);
    let expected = format!(
        "corrupt file {} at offset {last_offset}: batch checksum mismatch (the file was closed \
         cleanly, so this is not a torn write)",
        wal.display()
    );
    assert!(log.contains(&expected), "refused as corruption: {log}");
    assert!(!log.contains("cutting a torn write"), "{log}");
    assert_eq!(std::fs::read(&wal).unwrap(), bytes, "nothing is cut");
    assert!(
        trailing_close_mark(&bytes).is_some(),
        "the clean stop marked the file"
    );

    let server = Server::try_start_with(dir.path(), SHIPPED, 1, &FORCED).expect("forced start");
    assert_eq!(common::kv_ids(server.addr), (1..=49).collect::<Vec<_>>());
    // What the forced start skipped is replaced by a snapshot at once.
    let written = server.wait_for_log("snapshot written", std::time::Duration::from_secs(10));
    let (status, log) = server.stop_with_log();
    assert!(written && log.contains("taking a snapshot now"), "{log}");
    assert_eq!(status, Some(0));
    let skipped = log
        .lines()
        .find(|line| line.contains("force recovery: skipping damaged data"))
        .unwrap_or_else(|| panic!("the skipped batch is reported: {log}"));
    assert!(skipped.contains(&expected), "{skipped}");
    assert!(
        log.contains("force_recovery skipped damaged data") && log.contains("batches=1"),
        "{log}"
    );

    // So a start without the flag no longer meets the damaged batch.
    let server =
        Server::try_start_with(dir.path(), SHIPPED, 1, &WRITE_MODE).expect("a plain start");
    assert_eq!(common::kv_ids(server.addr), (1..=49).collect::<Vec<_>>());
}
