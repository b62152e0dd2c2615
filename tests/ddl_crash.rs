//! A schema change is atomic across shards and loses nothing: `kill -9` of the real binary
//! (fsync mode, 2 shards) at 24 moments around a `create_index` or a space `drop` made over
//! CALL while a writer replaces rows of that space, then a restart. After it every shard has
//! the old schema or every shard the new one (a select by the new index fans out to both:
//! it fails on a shard without it), an acknowledged change is there, every acknowledged
//! write is there, and the new index holds exactly the space's tuples.

use crate::common::{self, call, call_on, Client};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tarn::msgpack::{write_array_len, write_str, write_uint};
use tarn::protocol::client::{self, decode_reply};

const SPACE: u32 = 600;
const ROWS: u64 = 2000;
const CRASH_POINTS: u64 = 24;

fn tuple(id: u64, generation: u64) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_len(&mut out, 2);
    write_uint(&mut out, id);
    write_uint(&mut out, generation);
    out
}

/// The space `t` (id 600): `[id unsigned, v unsigned]`, primary on id, `ROWS` rows.
fn make_space(addr: SocketAddr) {
    let mut args = Vec::new();
    write_array_len(&mut args, 2);
    write_str(&mut args, b"t");
    args.extend_from_slice(&[0x82]);
    write_str(&mut args, b"id");
    write_uint(&mut args, u64::from(SPACE));
    write_str(&mut args, b"format");
    write_array_len(&mut args, 2);
    for name in ["id", "v"] {
        write_array_len(&mut args, 2);
        write_str(&mut args, name.as_bytes());
        write_str(&mut args, b"unsigned");
    }
    call(addr, "box.schema.space.create", &args).expect("space made");
    let mut args = Vec::new();
    write_array_len(&mut args, 1);
    write_str(&mut args, b"pk");
    call(addr, "box.space.t:create_index", &args).expect("primary made");
    let mut client = Client::connect_to(addr);
    let mut batch = Vec::new();
    for id in 0..ROWS {
        client::encode_replace(&mut batch, id, SPACE, &tuple(id, 0));
    }
    client.send(&batch);
    for _ in 0..ROWS {
        let packet = client.read_packet().expect("a reply");
        assert!(!decode_reply(&packet).unwrap().is_error());
    }
}

/// Replaces rows one at a time until stopped or the server is gone; the acknowledged
/// `(id, generation)` writes, the last per id winning.
fn write_until(addr: SocketAddr, stop: &AtomicBool, acknowledged: &Mutex<Vec<(u64, u64)>>) {
    let mut client = Client::connect_to(addr);
    let mut generation = 1;
    while !stop.load(Ordering::Relaxed) {
        let id = (generation * 7919) % ROWS;
        let mut request = Vec::new();
        client::encode_replace(&mut request, generation, SPACE, &tuple(id, generation));
        if client.try_send(&request).is_err() {
            return;
        }
        let Some(packet) = client.read_packet() else {
            return;
        };
        if !decode_reply(&packet).is_ok_and(|reply| !reply.is_error()) {
            return;
        }
        acknowledged.lock().unwrap().push((id, generation));
        generation += 1;
    }
}

/// The DDL at crash point `point`: even points create an index, odd ones drop the space.
fn ddl_of(point: u64) -> (&'static str, Vec<u8>) {
    let mut args = Vec::new();
    if point.is_multiple_of(2) {
        write_array_len(&mut args, 2);
        write_str(&mut args, b"by_v");
        args.push(0x82);
        write_str(&mut args, b"parts");
        write_array_len(&mut args, 1);
        write_str(&mut args, b"v");
        write_str(&mut args, b"unique");
        args.push(0xc2);
        ("box.space.t:create_index", args)
    } else {
        write_array_len(&mut args, 0);
        ("box.space.t:drop", args)
    }
}

fn crash_during_ddl(point: u64) {
    let dir = tempfile::tempdir().expect("dir");
    let args = ["--wal-mode", "fsync"];
    let server = common::Server::start_in(dir.path(), 2, "", &args);
    let addr = server.addr;
    make_space(addr);
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let writer = {
        let (stop, acknowledged) = (stop.clone(), acknowledged.clone());
        std::thread::spawn(move || write_until(addr, &stop, &acknowledged))
    };
    std::thread::sleep(Duration::from_millis(20));
    let (function, ddl_args) = ddl_of(point);
    let mut ddl_client = Client::connect_to(addr);
    let ddl = std::thread::spawn(move || call_on(&mut ddl_client, function, &ddl_args));
    // From before the change reaches the shards to after it is committed: 0 to 6 ms (a
    // check, a switch and an fsync on each shard, then schema.bin's) on this machine.
    std::thread::sleep(Duration::from_micros(point * 250));
    server.kill9();
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
    let ddl_acknowledged = ddl.join().expect("ddl").is_ok();

    let restarted = common::Server::start_in(dir.path(), 2, "", &args);
    let addr = restarted.addr;
    assert_every_core_sees_the_same_indexes(addr, point);
    let log = restarted.log_so_far();
    let cut = log.contains("never committed: cutting the WAL");
    eprintln!(
        "point {point}: {function} acknowledged {ddl_acknowledged}, {} writes acknowledged, \
         uncommitted change cut at recovery: {cut}",
        acknowledged.lock().unwrap().len()
    );
    let rows = match select_all(addr, 0) {
        Ok(rows) => rows,
        Err(message) => {
            assert!(!point.is_multiple_of(2), "point {point}: {message}");
            assert!(
                message.contains("does not exist"),
                "point {point}: {message}"
            );
            return;
        }
    };
    assert!(
        point.is_multiple_of(2) || !ddl_acknowledged,
        "point {point}: an acknowledged drop came back"
    );
    let mut last = std::collections::BTreeMap::new();
    for (id, generation) in acknowledged.lock().unwrap().iter() {
        last.insert(*id, *generation);
    }
    assert_eq!(rows.len() as u64, ROWS, "point {point}: every row is there");
    for (id, generation) in last {
        let found = rows.iter().find(|(row_id, _)| *row_id == id).expect("row");
        let stored = generation_of(&found.1);
        assert!(
            stored >= generation,
            "point {point}: acknowledged write {id}@{generation} lost (holds {stored})"
        );
    }
    if point.is_multiple_of(2) {
        match select_all(addr, 1) {
            Ok(by_index) => assert_eq!(by_index, rows, "point {point}: the index holds the tuples"),
            Err(message) => {
                assert!(
                    !ddl_acknowledged,
                    "point {point}: an acknowledged index is gone"
                );
                assert!(message.contains("No index #1"), "point {point}: {message}");
            }
        }
    }
}

/// Every tuple of the space by index `index_id` (a select that fans out to both shards),
/// with its id; the error message if a shard refuses it.
fn select_all(addr: SocketAddr, index_id: u32) -> Result<BTreeSet<(u64, Vec<u8>)>, String> {
    common::try_select_rows(addr, SPACE, index_id, 2, &[0x90])
        .map(|rows| rows.into_iter().collect())
}

/// The `v` of a `[id, v]` tuple.
fn generation_of(tuple: &[u8]) -> u64 {
    use tarn::msgpack::{read_value, take_value, Value};
    let mut fields = &tuple[1..];
    take_value(&mut fields).expect("an id");
    match read_value(&mut fields) {
        Ok(Value::Uint(generation)) => generation,
        other => panic!("a generation: {other:?}"),
    }
}

/// `_vindex` rows of the space as each core's shard has them: two connections open at
/// once are served by the two cores (connections go to the core serving fewer).
fn assert_every_core_sees_the_same_indexes(addr: SocketAddr, point: u64) {
    let mut clients = [Client::connect_to(addr), Client::connect_to(addr)];
    let mut key = Vec::new();
    write_array_len(&mut key, 1);
    write_uint(&mut key, u64::from(SPACE));
    let counts: Vec<Vec<u8>> = clients
        .iter_mut()
        .map(|client| {
            let mut request = Vec::new();
            common::encode_select_all(&mut request, 1, 289, 0, 0, &key);
            client.send(&request);
            let packet = client.read_packet().expect("a reply");
            let reply = decode_reply(&packet).unwrap();
            reply.data().expect("rows").to_vec()
        })
        .collect();
    assert_eq!(
        counts[0], counts[1],
        "point {point}: the cores' schemas differ"
    );
}

#[test]
fn kill_9_at_any_moment_of_a_schema_change_leaves_all_old_or_all_new() {
    for point in 0..CRASH_POINTS {
        crash_during_ddl(point);
    }
}
