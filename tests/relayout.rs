//! The shard count of a data directory can change between starts (`shards`, or `shards = 0` on
//! a host with another core count): every row is moved to its new owner before the server
//! serves, so every key is found by primary key, select-all shows each row once, secondary
//! indexes see every row and an insert of an existing key is refused. A crash anywhere in a
//! move leaves a directory that the next start recovers completely.

use crate::common;

use common::{Client, Server};
use std::collections::BTreeMap;
use std::path::Path;
use tarn::msgpack::{self, write_array_len, write_str, write_uint, Value};
use tarn::protocol::client::{self, decode_reply};
use tarn::protocol::error_code::ErrorCode;

const KV: u32 = 512;
const CUSTOMERS: u32 = 513;
const ROWS: u64 = 10_000;
/// Requests sent before their replies are read (bounded, so neither side's socket fills).
const CHUNK: usize = 500;
const FSYNC: [&str; 2] = ["--wal-mode", "fsync"];
/// The log line a start that moved rows writes (`server::layout`).
const MOVED: &str = "rows moved to the new layout";

/// What the server must hold: per space, primary key to tuple.
#[derive(Default, Clone)]
struct Model {
    kv: BTreeMap<u64, Vec<u8>>,
    customers: BTreeMap<u64, Vec<u8>>,
}

fn kv_tuple(id: u64, generation: u32) -> Vec<u8> {
    common::kv_tuple(id, &format!("value-{id}-{generation}"))
}

/// `[id, bucket_id, a, b, c, d, name]`: `a` splits the rows 7 ways for the composite index.
fn customer_tuple(id: u64) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_len(&mut out, 7);
    for field in [id, id % 3000, id % 7, id % 11, id % 13, id % 5] {
        write_uint(&mut out, field);
    }
    write_str(&mut out, format!("customer-{id}").as_bytes());
    out
}

fn key(parts: &[u64]) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_len(&mut out, parts.len() as u32);
    for &part in parts {
        write_uint(&mut out, part);
    }
    out
}

/// Sends the requests `encode(i, sync)` writes for `0..count`, a chunk at a time, and returns
/// the reply packets in order.
fn exchange(
    client: &mut Client,
    count: usize,
    mut encode: impl FnMut(usize, &mut Vec<u8>, u64),
) -> Vec<Vec<u8>> {
    let mut replies = Vec::with_capacity(count);
    for start in (0..count).step_by(CHUNK) {
        let end = (start + CHUNK).min(count);
        let mut packets = Vec::new();
        for at in start..end {
            encode(at, &mut packets, at as u64 + 1);
        }
        client.send(&packets);
        for at in start..end {
            let packet = client.read_packet().expect("reply");
            let reply = decode_reply(&packet).expect("reply decodes");
            assert_eq!(reply.sync(), at as u64 + 1, "replies in order");
            replies.push(packet);
        }
    }
    replies
}

/// Every request must succeed.
fn exchange_ok(client: &mut Client, count: usize, encode: impl FnMut(usize, &mut Vec<u8>, u64)) {
    for packet in exchange(client, count, encode) {
        let reply = decode_reply(&packet).expect("decodes");
        assert!(!reply.is_error(), "{:?}", reply.error_message());
    }
}

/// The tuples of a select reply.
fn tuples(packet: &[u8]) -> Vec<Vec<u8>> {
    let reply = decode_reply(packet).expect("decodes");
    assert!(!reply.is_error(), "{:?}", reply.error_message());
    let mut data = reply.data().expect("data");
    let Ok(Value::Array(count)) = msgpack::read_value(&mut data) else {
        panic!("rows are an array");
    };
    (0..count)
        .map(|_| msgpack::take_value(&mut data).expect("tuple").to_vec())
        .collect()
}

fn id_of(tuple: &[u8]) -> u64 {
    let mut fields = &tuple[1..];
    match msgpack::read_value(&mut fields) {
        Ok(Value::Uint(id)) => id,
        other => panic!("id: {other:?}"),
    }
}

/// Inserts `ids` into both spaces (kv at `generation`), each acknowledged.
fn insert_rows(server: &Server, model: &mut Model, ids: &[u64], generation: u32) {
    let mut client = Client::connect(server);
    exchange_ok(&mut client, ids.len(), |at, out, sync| {
        client::encode_insert(out, sync, KV, &kv_tuple(ids[at], generation))
    });
    exchange_ok(&mut client, ids.len(), |at, out, sync| {
        client::encode_insert(out, sync, CUSTOMERS, &customer_tuple(ids[at]))
    });
    for &id in ids {
        model.kv.insert(id, kv_tuple(id, generation));
        model.customers.insert(id, customer_tuple(id));
    }
}

/// Replaces `kv` rows `ids` at `generation` and deletes `kv` and `customers` rows `deleted`.
fn change_rows(server: &Server, model: &mut Model, ids: &[u64], deleted: &[u64], generation: u32) {
    let mut client = Client::connect(server);
    exchange_ok(&mut client, ids.len(), |at, out, sync| {
        client::encode_replace(out, sync, KV, &kv_tuple(ids[at], generation))
    });
    for space_id in [KV, CUSTOMERS] {
        exchange_ok(&mut client, deleted.len(), |at, out, sync| {
            client::encode_delete(out, sync, space_id, 0, &key(&[deleted[at]]))
        });
    }
    for &id in ids {
        model.kv.insert(id, kv_tuple(id, generation));
    }
    for id in deleted {
        model.kv.remove(id);
        model.customers.remove(id);
    }
}

fn snapshot(server: &Server) {
    let mut client = Client::connect(server);
    let mut call = Vec::new();
    client::encode_call(&mut call, 1, "box.snapshot", &[0x90]);
    client.send(&call);
    let reply = client.read_packet().expect("snapshot reply");
    assert!(!decode_reply(&reply).expect("decodes").is_error());
}

/// Everything a client can see of the model, checked exactly.
fn assert_serves(server: &Server, model: &Model, shards: u32) {
    let mut client = Client::connect(server);
    for (space_id, rows) in [(KV, &model.kv), (CUSTOMERS, &model.customers)] {
        // Every key by primary key, plus keys that must be absent.
        let probes: Vec<u64> = (0..ROWS + 2_000).collect();
        let replies = exchange(&mut client, probes.len(), |at, out, sync| {
            common::encode_select_all(out, sync, space_id, 0, 0, &key(&[probes[at]]))
        });
        let mut missing = Vec::new();
        for (id, packet) in probes.iter().zip(&replies) {
            let found = tuples(packet);
            let expected: Vec<Vec<u8>> = rows.get(id).cloned().into_iter().collect();
            if found != expected {
                missing.push(*id);
            }
        }
        assert!(
            missing.is_empty(),
            "space {space_id} at {shards} shards: {} keys read wrong by primary key, first {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        );
        // Select-all: each row once, in key order.
        let mut request = Vec::new();
        common::encode_select_all(&mut request, 1, space_id, 0, 2, &[0x90]);
        client.send(&request);
        let all = tuples(&client.read_packet().expect("select-all"));
        let ids: Vec<u64> = all.iter().map(|tuple| id_of(tuple)).collect();
        assert_eq!(
            ids.len(),
            rows.len(),
            "space {space_id} at {shards} shards: select-all count"
        );
        assert_eq!(all, rows.values().cloned().collect::<Vec<_>>());
    }
    // Secondary indexes: the composite by its first part, bucket_id by its value.
    for a in 0..7 {
        let mut expected: Vec<&Vec<u8>> = model
            .customers
            .iter()
            .filter(|(id, _)| *id % 7 == a)
            .map(|(_, tuple)| tuple)
            .collect();
        let composite_key = |tuple: &[u8]| {
            let id = id_of(tuple);
            (id % 7, id % 11, id % 13, id % 5, format!("customer-{id}"))
        };
        expected.sort_by_key(|tuple| composite_key(tuple));
        let mut request = Vec::new();
        common::encode_select_all(&mut request, 1, CUSTOMERS, 1, 0, &key(&[a]));
        client.send(&request);
        let found = tuples(&client.read_packet().expect("composite"));
        assert_eq!(
            found.len(),
            expected.len(),
            "composite a = {a} at {shards} shards"
        );
        assert!(found.iter().eq(expected.into_iter()), "composite a = {a}");
    }
    for bucket in [0, 1, 1_234, 2_999] {
        let expected: Vec<Vec<u8>> = model
            .customers
            .iter()
            .filter(|(id, _)| *id % 3000 == bucket)
            .map(|(_, tuple)| tuple.clone())
            .collect();
        let mut request = Vec::new();
        common::encode_select_all(&mut request, 1, CUSTOMERS, 2, 0, &key(&[bucket]));
        client.send(&request);
        let found = tuples(&client.read_packet().expect("bucket_id"));
        assert_eq!(found, expected, "bucket_id = {bucket} at {shards} shards");
    }
    // An insert of an existing key is refused, whichever shard owns it now.
    let existing: Vec<u64> = model.kv.keys().copied().step_by(97).take(64).collect();
    let replies = exchange(&mut client, existing.len(), |at, out, sync| {
        client::encode_insert(out, sync, KV, &kv_tuple(existing[at], 999))
    });
    for (id, packet) in existing.iter().zip(&replies) {
        let reply = decode_reply(packet).expect("decodes");
        assert_eq!(
            reply.error_code(),
            Some(ErrorCode::ER_TUPLE_FOUND),
            "insert of existing kv {id} at {shards} shards: {:?}",
            reply.error_message()
        );
    }
}

/// The `shards = N` line of the layout record, and the `shard-<k>` and staging entries.
fn on_disk(data_dir: &Path) -> (Option<u32>, Vec<String>) {
    let record = std::fs::read_to_string(data_dir.join("layout.toml")).ok();
    let shards = record.as_deref().and_then(|text| {
        text.lines()
            .find_map(|line| line.strip_prefix("shards = "))
            .and_then(|count| count.parse().ok())
    });
    let mut names: Vec<String> = std::fs::read_dir(data_dir)
        .expect("data dir")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .into_string()
                .expect("name")
        })
        .filter(|name| name.starts_with("shard-") || name.starts_with("relayout-"))
        .collect();
    names.sort();
    (shards, names)
}

fn shard_dirs(count: u32) -> Vec<String> {
    (0..count).map(|k| format!("shard-{k}")).collect()
}

/// 10,000 rows in both spaces at 2 shards, half of them before a snapshot, with replaces and
/// deletes after it; ends with kill -9, so the newest rows are only in the WAL.
fn write_history(dir: &Path) -> Model {
    let mut model = Model::default();
    let server = Server::start_in(dir, 2, "", &FSYNC);
    let first: Vec<u64> = (0..ROWS / 2).collect();
    insert_rows(&server, &mut model, &first, 0);
    snapshot(&server);
    let second: Vec<u64> = (ROWS / 2..ROWS).collect();
    insert_rows(&server, &mut model, &second, 0);
    let replaced: Vec<u64> = (0..ROWS).step_by(7).collect();
    let deleted: Vec<u64> = (3..ROWS).step_by(101).collect();
    change_rows(&server, &mut model, &replaced, &deleted, 1);
    assert_serves(&server, &model, 2);
    server.kill9();
    model
}

#[test]
fn rows_follow_their_keys_when_the_shard_count_changes() {
    let dir = tempfile::tempdir().expect("dir");
    let data_dir = dir.path().join("data");
    let mut model = write_history(dir.path());
    // On a host with fewer CPUs than shards, the shards share them (not pinned).
    for shards in [1, 3, 2] {
        let server = Server::start_in(dir.path(), shards, "", &FSYNC);
        assert_serves(&server, &model, shards);
        assert_eq!(on_disk(&data_dir), (Some(shards), shard_dirs(shards)));
        let (_, log) = server.stop_with_log();
        assert!(
            log.contains(MOVED),
            "the start at {shards} moved rows:\n{log}"
        );
    }
    // More writes at the new count, a crash, and a start at the same count: nothing moves.
    let server = Server::start_in(dir.path(), 2, "", &FSYNC);
    let more: Vec<u64> = (ROWS..ROWS + 1_000).collect();
    insert_rows(&server, &mut model, &more, 2);
    let replaced: Vec<u64> = (1..ROWS + 1_000).step_by(13).collect();
    let deleted: Vec<u64> = (5..ROWS + 1_000).step_by(89).collect();
    change_rows(&server, &mut model, &replaced, &deleted, 3);
    server.kill9();
    let server = Server::start_in(dir.path(), 2, "", &FSYNC);
    assert_serves(&server, &model, 2);
    let (_, log) = server.stop_with_log();
    assert!(
        !log.contains(MOVED),
        "nothing to move at the same count:\n{log}"
    );
    assert_eq!(on_disk(&data_dir), (Some(2), shard_dirs(2)));
}

/// Starts tarn at `shards` with the test hook that kills it at `step` of the move; returns
/// its log.
fn crash_at(dir: &Path, shards: u32, step: &str) -> String {
    let shipped = include_str!("../conf/tarn.toml");
    let hook = [("TARN_TEST_RELAYOUT_CRASH_AT", step)];
    match Server::try_start_with_env(dir, shipped, shards, &FSYNC, &hook) {
        Ok(_) => panic!("tarn served although it was to be killed at {step}"),
        Err(log) => {
            assert!(log.contains("killing the process (test hook)"), "{log}");
            log
        }
    }
}

#[test]
fn a_crash_in_the_middle_of_a_move_loses_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    let data_dir = dir.path().join("data");
    let model = write_history(dir.path());

    // 2 -> 1, killed after the new shard was staged: the old layout is intact and serves.
    crash_at(dir.path(), 1, "staging");
    let mut staged = shard_dirs(2);
    staged.insert(0, "relayout-1.inprogress".into());
    assert_eq!(on_disk(&data_dir), (Some(2), staged));
    let server = Server::start_in(dir.path(), 2, "", &FSYNC);
    assert_eq!(on_disk(&data_dir), (Some(2), shard_dirs(2)));
    assert_serves(&server, &model, 2);
    let (_, log) = server.stop_with_log();
    assert!(!log.contains(MOVED), "{log}");
    // The move is done again from the start.
    let server = Server::start_in(dir.path(), 1, "", &FSYNC);
    assert_eq!(on_disk(&data_dir), (Some(1), shard_dirs(1)));
    assert_serves(&server, &model, 1);
    server.stop();

    // 1 -> 2, killed right after the commit: the next start finishes the move.
    crash_at(dir.path(), 2, "committed");
    let mut committed = shard_dirs(1);
    committed.insert(0, "relayout-2.inprogress".into());
    assert_eq!(on_disk(&data_dir), (Some(2), committed));
    let server = Server::start_in(dir.path(), 2, "", &FSYNC);
    assert_eq!(on_disk(&data_dir), (Some(2), shard_dirs(2)));
    assert_serves(&server, &model, 2);
    server.stop();

    // 2 -> 1, killed after the new shard-0 was put in place, before the old shard-1 went.
    crash_at(dir.path(), 1, "moving");
    let mut moving = shard_dirs(2);
    moving.insert(0, "relayout-3.inprogress".into());
    assert_eq!(on_disk(&data_dir), (Some(1), moving));
    let server = Server::start_in(dir.path(), 1, "", &FSYNC);
    assert_eq!(on_disk(&data_dir), (Some(1), shard_dirs(1)));
    assert_serves(&server, &model, 1);
    let (_, log) = server.stop_with_log();
    assert!(
        !log.contains(MOVED),
        "a committed move is finished, not redone:\n{log}"
    );
}
