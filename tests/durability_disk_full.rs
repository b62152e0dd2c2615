//! A real full disk under the real binary: tarn's data directory on a small tmpfs, in
//! `fsync` mode, written until the WAL refuses. Every refused write must be gone (from every
//! connection, from the snapshot, after a restart), every acknowledged one present, and once
//! space is freed writes and `box.snapshot` work again without a restart.
//!
//! Needs `mount` (root, as `.ci/run` runs); where the machine does not allow it the test says
//! so and does nothing; the fault-injecting sink of `tests/durability_model.rs` covers the
//! same ground in process.

use crate::common;

use common::{Client, Server};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use tarn::protocol::client::{self, decode_reply};
use tarn::protocol::ErrorCode;

/// A tmpfs mounted on a fresh directory, unmounted on drop.
struct Tmpfs {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size_mib: u32) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().expect("temp dir");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|status| status.success());
        mounted.then(|| Tmpfs {
            path: dir.path().to_path_buf(),
            _dir: dir,
        })
    }

    fn free_bytes(&self) -> u64 {
        let output = Command::new("df")
            .args(["--output=avail", "-B1"])
            .arg(&self.path)
            .output()
            .expect("df");
        let text = String::from_utf8_lossy(&output.stdout);
        text.lines()
            .nth(1)
            .expect("a df line")
            .trim()
            .parse()
            .expect("bytes")
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Fills the file system but for `leave_bytes`, with one file.
fn fill_but(tmpfs: &Tmpfs, leave_bytes: u64) -> PathBuf {
    let ballast = tmpfs.path.join("ballast");
    let size = tmpfs.free_bytes().saturating_sub(leave_bytes);
    std::fs::write(&ballast, vec![0u8; size as usize]).expect("ballast");
    ballast
}

const VALUE_BYTES: usize = 1024;

fn value(id: u64) -> String {
    format!("{id:08}").repeat(VALUE_BYTES / 8)
}

/// Replaces `ids` pipelined (all sent, then every reply read); returns the ids
/// acknowledged and those the log refused, and checks the refusal's code and text.
fn replace_all(client: &mut Client, ids: &[u64]) -> (Vec<u64>, Vec<u64>) {
    let mut request = Vec::new();
    for &id in ids {
        client::encode_replace(&mut request, id, 512, &common::kv_tuple(id, &value(id)));
    }
    client.send(&request);
    let (mut acknowledged, mut refused) = (Vec::new(), Vec::new());
    for _ in ids {
        let packet = client.read_packet().expect("a reply");
        let reply = decode_reply(&packet).expect("decodes");
        match reply.error_code() {
            None => acknowledged.push(reply.sync()),
            Some(ErrorCode::ER_WAL_IO) => {
                assert_eq!(reply.error_message(), Some("Failed to write to disk"));
                refused.push(reply.sync());
            }
            Some(other) => panic!("unexpected error {other:?}: {:?}", reply.error_message()),
        }
    }
    (acknowledged, refused)
}

fn expect_exactly(server: &Server, acknowledged: &BTreeSet<u64>) {
    let stored = common::kv_values(server.addr);
    let ids: BTreeSet<u64> = stored.iter().map(|(id, _)| *id).collect();
    assert_eq!(stored.len(), ids.len(), "no duplicates");
    assert_eq!(&ids, acknowledged, "exactly the acknowledged writes");
    assert!(stored.iter().all(|(id, text)| *text == value(*id)));
}

fn start(dir: &Path) -> Server {
    Server::start_in(dir, 2, "", &["--wal-mode", "fsync"])
}

#[test]
fn a_full_disk_refuses_writes_that_never_come_back_and_writing_resumes_when_space_is_freed() {
    let Some(tmpfs) = Tmpfs::mount(24) else {
        eprintln!("SKIPPED: mounting a tmpfs is not permitted here");
        return;
    };
    let server = start(&tmpfs.path);
    let ballast = fill_but(&tmpfs, 1 << 20);
    let mut writer = Client::connect(&server);
    let (mut acknowledged, mut refused) = (BTreeSet::new(), BTreeSet::new());
    let mut next_id = 0u64;
    while refused.len() < 300 {
        assert!(next_id < 100_000, "the disk never filled");
        let ids: Vec<u64> = (next_id..next_id + 64).collect();
        next_id += 64;
        let (done, failed) = replace_all(&mut writer, &ids);
        acknowledged.extend(done);
        refused.extend(failed);
    }
    assert!(
        acknowledged.len() > 100,
        "{} acknowledged",
        acknowledged.len()
    );

    // Gone for every connection, the writer's included.
    expect_exactly(&server, &acknowledged);
    let (done, failed) = replace_all(&mut writer, &[]);
    assert!(done.is_empty() && failed.is_empty());

    // Space is freed: writes resume with no restart, and a snapshot can be written.
    std::fs::remove_file(&ballast).expect("free the disk");
    let later: Vec<u64> = (next_id..next_id + 200).collect();
    let (done, failed) = replace_all(&mut writer, &later);
    assert_eq!((done.len(), failed.len()), (later.len(), 0));
    acknowledged.extend(done);
    common::snapshot(server.addr).expect("box.snapshot once there is room");
    expect_exactly(&server, &acknowledged);

    // A restart (from the snapshot and the WAL after it) brings back exactly the same.
    assert_eq!(server.stop(), Some(0));
    let server = start(&tmpfs.path);
    expect_exactly(&server, &acknowledged);
    // And after a crash, from the WAL written since.
    let crash_ids: Vec<u64> = (next_id + 200..next_id + 300).collect();
    let (done, _) = replace_all(&mut Client::connect(&server), &crash_ids);
    acknowledged.extend(done);
    server.kill9();
    let server = start(&tmpfs.path);
    expect_exactly(&server, &acknowledged);
    drop(server);
    assert!(refused.iter().all(|id| !acknowledged.contains(id)));
}
