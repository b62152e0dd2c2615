//! Durability of the real binary: `kill -9` in the middle of acknowledged writes, restart,
//! and every acknowledged write is there, whole; nothing else is half there.

use crate::common;

use common::Client;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tarn::protocol::client::{self, decode_reply};

const WRITERS: u64 = 4;
const ROWS_PER_WRITER: u64 = 50_000;
/// The crash comes once this many writes were acknowledged: mid-stream, whatever the speed.
const ACKNOWLEDGED_BEFORE_CRASH: usize = 20_000;
const WINDOW: u64 = 32;

fn kv_tuple(id: u64) -> Vec<u8> {
    common::kv_tuple(id, &format!("value-{id}"))
}

/// Writes rows `first..first + count` with a window of replaces in flight, adding to
/// `acknowledged` the ids whose replies said OK, until the connection dies.
fn write_rows(
    server: std::net::SocketAddr,
    first: u64,
    count: u64,
    acknowledged: &Mutex<BTreeSet<u64>>,
) {
    let mut client = Client::connect_to(server);
    let mut next = first;
    let end = first + count;
    let mut in_flight = 0;
    loop {
        let mut batch = Vec::new();
        while in_flight < WINDOW && next < end {
            client::encode_replace(&mut batch, next, 512, &kv_tuple(next));
            next += 1;
            in_flight += 1;
        }
        if (!batch.is_empty() && client.try_send(&batch).is_err()) || in_flight == 0 {
            return;
        }
        let Some(packet) = client.read_packet() else {
            return;
        };
        in_flight -= 1;
        let reply = decode_reply(&packet).expect("reply decodes");
        assert!(!reply.is_error(), "{:?}", reply.error_message());
        acknowledged.lock().unwrap().insert(reply.sync());
    }
}

fn crash_mid_stream(snapshot_mid_stream: bool) {
    let dir = tempfile::tempdir().expect("dir");
    let args = ["--wal-mode", "fsync"];
    let server = common::Server::start_in(dir.path(), 2, "", &args);
    let addr = server.addr;
    let acknowledged = Arc::new(Mutex::new(BTreeSet::new()));
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let acknowledged = acknowledged.clone();
            std::thread::spawn(move || {
                write_rows(
                    addr,
                    1 + writer * ROWS_PER_WRITER,
                    ROWS_PER_WRITER,
                    &acknowledged,
                )
            })
        })
        .collect();
    let wait_for = |count: usize| {
        while acknowledged.lock().unwrap().len() < count {
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    if snapshot_mid_stream {
        wait_for(ACKNOWLEDGED_BEFORE_CRASH / 4);
        let mut admin = Client::connect_to(addr);
        let mut call = Vec::new();
        client::encode_call(&mut call, 77, "box.snapshot", &[0x90]);
        admin.send(&call);
        let reply = admin.read_packet().expect("snapshot reply");
        assert!(!decode_reply(&reply).unwrap().is_error());
    }
    wait_for(ACKNOWLEDGED_BEFORE_CRASH);
    server.kill9();
    for writer in writers {
        writer.join().expect("writer");
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(
        !acknowledged.is_empty(),
        "some writes were acknowledged before the crash"
    );
    assert!(
        acknowledged.len() < (WRITERS * ROWS_PER_WRITER) as usize,
        "the crash came mid-stream"
    );

    let restarted = common::Server::start_in(dir.path(), 2, "", &args);
    let rows = common::kv_rows(restarted.addr);
    eprintln!(
        "acknowledged {} of {} writes before kill -9; {} rows after restart",
        acknowledged.len(),
        WRITERS * ROWS_PER_WRITER,
        rows.len()
    );
    let present: BTreeSet<u64> = rows.iter().map(|(id, _)| *id).collect();
    let missing: Vec<_> = acknowledged.difference(&present).take(5).collect();
    assert!(missing.is_empty(), "acknowledged but lost: {missing:?}");
    for (id, tuple) in &rows {
        assert_eq!(tuple, &kv_tuple(*id), "row {id} is whole");
    }
}

#[test]
fn every_acknowledged_write_survives_kill_9() {
    crash_mid_stream(false);
}

#[test]
fn every_acknowledged_write_survives_kill_9_after_a_snapshot() {
    crash_mid_stream(true);
}
