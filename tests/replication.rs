//! Replication between real `tarn` processes on loopback: a replica copies its master
//! (snapshot, then WAL), follows a pipelined write load, resumes after a kill -9 without
//! copying again, and reconnects after its master restarts; with one shard following two
//! and two following one.

use crate::common::{call, kv_rows, snapshot, Client, Server, KV};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tarn::protocol::client::{decode_reply, encode_delete, encode_replace};

/// Replaces `ids` in `kv` with `value`, pipelined on one connection; every reply checked.
fn replace_kv(addr: SocketAddr, ids: impl Iterator<Item = u64>, value: &str) {
    let codes = crate::common::kv_replace_codes(addr, ids, value);
    assert!(codes.iter().all(|code| *code == 0), "{codes:?}");
}

/// Deletes `ids` from `kv`, pipelined.
fn delete_kv(addr: SocketAddr, ids: impl Iterator<Item = u64>) {
    let mut client = Client::connect_to(addr);
    let mut requests = Vec::new();
    let mut sent = 0;
    for id in ids {
        encode_delete(&mut requests, id, KV, 0, &crate::common::kv_key(id));
        sent += 1;
    }
    client.send(&requests);
    for _ in 0..sent {
        let packet = client.read_packet().expect("a reply");
        assert!(!decode_reply(&packet).expect("decodes").is_error());
    }
}

/// Waits until the replica's `kv` is the master's; panics with both sizes after 30 s.
fn wait_identical(master: &Server, replica: &Server) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (on_master, on_replica) = (kv_rows(master.addr), kv_rows(replica.addr));
        if on_master == on_replica {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the replica did not catch up: master {} rows, replica {}\n{}",
            on_master.len(),
            on_replica.len(),
            replica.log_so_far()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the replica in `dir` has recorded a position (its copy is done and durable):
/// a replica killed before that copies its master again when it comes back.
fn wait_position_recorded(dir: &std::path::Path) {
    let position = dir.join("data").join("replica.toml");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !position.exists() {
        assert!(
            Instant::now() < deadline,
            "no position recorded in {}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn start_replica(dir: &std::path::Path, shards: u32, master: &Server) -> Server {
    let upstream = master.addr.to_string();
    Server::start_in(dir, shards, "", &["--replication", &upstream])
}

/// A master with data in its snapshot and in its WAL after it, copied by a replica with
/// another shard count, which then follows writes made while it copies and after.
fn copy_and_follow(master_shards: u32, replica_shards: u32) {
    let master = Server::start(master_shards, "");
    replace_kv(master.addr, 0..3000, "before the snapshot");
    snapshot(master.addr).expect("box.snapshot");
    replace_kv(master.addr, 2000..4000, "after the snapshot");
    delete_kv(master.addr, (0..3000).step_by(7));

    let replica_dir = tempfile::tempdir().unwrap();
    let replica = start_replica(replica_dir.path(), replica_shards, &master);
    replace_kv(master.addr, 3500..5000, "while the replica copies");
    wait_identical(&master, &replica);
    let copied = "copied the master; following its WAL";
    assert!(replica.wait_for_log(copied, Duration::from_secs(10)));

    let writer = std::thread::spawn({
        let addr = master.addr;
        move || {
            for round in 0..20u64 {
                replace_kv(
                    addr,
                    (round * 100)..(round * 100 + 400),
                    &format!("round {round}"),
                );
                delete_kv(addr, (round * 100..round * 100 + 400).step_by(11));
            }
        }
    });
    writer.join().unwrap();
    wait_identical(&master, &replica);
    assert_eq!(kv_rows(replica.addr).len(), kv_rows(master.addr).len());
}

#[test]
fn a_replica_of_one_shard_copies_and_follows_a_master_of_two() {
    copy_and_follow(2, 1);
}

#[test]
fn a_replica_of_two_shards_copies_and_follows_a_master_of_one() {
    copy_and_follow(1, 2);
}

#[test]
fn a_replica_killed_mid_stream_resumes_without_copying_and_a_restarted_master_is_followed() {
    let master_dir = tempfile::tempdir().unwrap();
    let master = Server::start_in(master_dir.path(), 2, "", &[]);
    replace_kv(master.addr, 0..2000, "first");
    let replica_dir = tempfile::tempdir().unwrap();
    let replica = start_replica(replica_dir.path(), 2, &master);
    wait_identical(&master, &replica);
    wait_position_recorded(replica_dir.path());

    // Writes stream while the replica is killed.
    let writer = std::thread::spawn({
        let addr = master.addr;
        move || {
            for round in 0..10u64 {
                replace_kv(addr, 0..2000, &format!("killed round {round}"));
            }
        }
    });
    std::thread::sleep(Duration::from_millis(100));
    replica.kill9();
    writer.join().unwrap();
    let replica = start_replica(replica_dir.path(), 2, &master);
    wait_identical(&master, &replica);
    let log = replica.log_so_far();
    assert!(!log.contains("spaces emptied before copying"), "{log}");
    assert!(
        log.contains("replication: subscribed") && log.contains("from=[Some("),
        "{log}"
    );

    // The master restarts (same port): the replica reconnects and follows.
    let master_addr = master.addr;
    assert_eq!(master.stop(), Some(0));
    let master = crate::common::restart_on(master_dir.path(), 2, master_addr, &[]);
    replace_kv(master.addr, 1000..3000, "after the master's restart");
    wait_identical(&master, &replica);
}

#[test]
fn a_subscribe_without_tarns_protocol_is_answered_as_before_and_the_link_survives() {
    use tarn::msgpack::{write_map_len, write_uint};
    let master = Server::start(1, "");
    let mut client = Client::connect_to(master.addr);
    // A Tarantool replica's SUBSCRIBE: its keys, not tarn's.
    let mut body = Vec::new();
    write_map_len(&mut body, 1);
    write_uint(&mut body, 0x26);
    write_map_len(&mut body, 0);
    let mut packet = vec![0xce, 0, 0, 0, 0, 0x82, 0x00, 66, 0x01, 7];
    packet.extend_from_slice(&body);
    let length = u32::try_from(packet.len() - 5).unwrap();
    packet[1..5].copy_from_slice(&length.to_be_bytes());
    client.send(&packet);
    let reply = client.read_packet().expect("a reply");
    let reply = decode_reply(&reply).expect("decodes");
    assert_eq!(reply.sync(), 7);
    assert_eq!(reply.status(), 0x8000 | 48);
    assert_eq!(reply.error_message(), Some("Unknown request type 66"));
    // The connection still serves requests.
    replace_kv(master.addr, 0..1, "x");
    let mut ping = Vec::new();
    tarn::protocol::client::encode_ping(&mut ping, 8);
    client.send(&ping);
    assert!(!decode_reply(&client.read_packet().unwrap())
        .unwrap()
        .is_error());
}

/// `tests/python/test_replication_pool.py`: `tarantool.ConnectionPool` over a master and its
/// read-only replica (a user with the read grant follows, as Tarantool's replication role).
#[test]
fn the_python_connection_pool_writes_to_the_master_and_reads_the_replica() {
    crate::common::run_pool_test("test_replication_pool.py", "TARN_REPLICA_ADDR");
}

/// A master that keeps one checkpoint, with `wal_cleanup_delay` seconds for a replica that
/// left; the replica is killed, the master writes and checkpoints twice (its older WAL files
/// go, but for what the replica needs while the delay runs), and the replica comes back.
fn replica_returns_after_checkpoints(wal_cleanup_delay: u64) -> Server {
    let shipped = include_str!("../conf/tarn.toml");
    let config = shipped
        .replace("checkpoint_count = 2", "checkpoint_count = 1")
        .replace(
            "wal_cleanup_delay = 14400",
            &format!("wal_cleanup_delay = {wal_cleanup_delay}"),
        );
    let master_dir = tempfile::tempdir().unwrap();
    let master = Server::try_start_with(master_dir.path(), &config, 2, &[]).unwrap();
    replace_kv(master.addr, 0..1000, "first");
    let replica_dir = tempfile::tempdir().unwrap();
    let replica = start_replica(replica_dir.path(), 1, &master);
    wait_identical(&master, &replica);
    wait_position_recorded(replica_dir.path());
    replica.kill9();
    for round in 0..2 {
        replace_kv(master.addr, 500..1500, &format!("checkpoint {round}"));
        snapshot(master.addr).expect("box.snapshot");
    }
    delete_kv(master.addr, 0..100);
    let replica = start_replica(replica_dir.path(), 1, &master);
    wait_identical(&master, &replica);
    let _ = master_dir.keep();
    replica
}

#[test]
fn a_master_keeps_the_wal_a_replica_that_left_needs_for_wal_cleanup_delay() {
    let replica = replica_returns_after_checkpoints(14_400);
    let log = replica.log_so_far();
    assert!(!log.contains("copying it again"), "{log}");
    assert!(!log.contains("spaces emptied before copying"), "{log}");
}

#[test]
fn a_replica_behind_what_its_master_kept_copies_it_again_by_itself() {
    let replica = replica_returns_after_checkpoints(0);
    assert!(replica.wait_for_log("copying it again", Duration::from_secs(10)));
    assert!(replica.wait_for_log("spaces emptied before copying", Duration::from_secs(10)));
}

#[test]
fn an_instance_with_data_of_its_own_is_not_emptied_to_become_a_replica() {
    let master = Server::start(1, "");
    replace_kv(master.addr, 0..10, "the master's");
    let dir = tempfile::tempdir().unwrap();
    let own = Server::start_in(dir.path(), 1, "", &[]);
    replace_kv(own.addr, 100..150, "its own");
    assert_eq!(own.stop(), Some(0));
    let replica = start_replica(dir.path(), 1, &master);
    assert!(replica.wait_for_log("holds 50 rows and has no position", Duration::from_secs(10)));
    let ids: Vec<u64> = kv_rows(replica.addr)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(ids, (100..150).collect::<Vec<u64>>(), "its rows are kept");
}

#[test]
fn schema_changes_replicate_in_order_with_the_rows() {
    use tarn::msgpack::{write_array_len, write_map_len, write_str};
    let master = Server::start(2, "");
    replace_kv(master.addr, 0..500, "before the change");
    let replica_dir = tempfile::tempdir().unwrap();
    let replica = start_replica(replica_dir.path(), 1, &master);
    wait_identical(&master, &replica);

    // A new index on kv, rows written around it; then a new space with rows.
    let mut args = Vec::new();
    write_array_len(&mut args, 2);
    write_str(&mut args, b"by_value");
    write_map_len(&mut args, 2);
    write_str(&mut args, b"parts");
    write_array_len(&mut args, 1);
    write_str(&mut args, b"value");
    write_str(&mut args, b"unique");
    args.push(0xc2);
    call(master.addr, "box.space.kv:create_index", &args).expect("index made");
    replace_kv(master.addr, 400..900, "after the change");
    create_space_with_pk(master.addr, "things", 700);
    replace_ids(master.addr, 700, 50);

    wait_identical(&master, &replica);
    // The replica answers by the new index, in its order, as the master does.
    let by_value = |addr| crate::common::select_rows(addr, KV, 1, 0, &[0x90]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while crate::common::try_select_rows(replica.addr, 700, 0, 0, &[0x90]).map(|rows| rows.len())
        != Ok(50)
    {
        assert!(Instant::now() < deadline, "{}", replica.log_so_far());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(by_value(replica.addr), by_value(master.addr));
    assert!(replica
        .log_so_far()
        .contains("made the master's schema change"));
}

/// `box.schema.space.create(name, {id = id})` and its primary index `pk` over CALL.
fn create_space_with_pk(addr: SocketAddr, name: &str, id: u64) {
    use tarn::msgpack::{write_array_len, write_map_len, write_str, write_uint};
    let mut args = Vec::new();
    write_array_len(&mut args, 2);
    write_str(&mut args, name.as_bytes());
    write_map_len(&mut args, 1);
    write_str(&mut args, b"id");
    write_uint(&mut args, id);
    call(addr, "box.schema.space.create", &args).expect("space made");
    let mut args = Vec::new();
    write_array_len(&mut args, 1);
    write_str(&mut args, b"pk");
    let function = format!("box.space.{name}:create_index");
    call(addr, &function, &args).expect("its primary made");
}

/// `[id]` tuples 0..count replaced into `space_id`, pipelined.
fn replace_ids(addr: SocketAddr, space_id: u32, count: u64) {
    use tarn::msgpack::{write_array_len, write_uint};
    let mut client = Client::connect_to(addr);
    let mut requests = Vec::new();
    for id in 0..count {
        let mut tuple = Vec::new();
        write_array_len(&mut tuple, 1);
        write_uint(&mut tuple, id);
        encode_replace(&mut requests, id, space_id, &tuple);
    }
    client.send(&requests);
    for _ in 0..count {
        assert!(!decode_reply(&client.read_packet().unwrap())
            .unwrap()
            .is_error());
    }
}

#[test]
fn a_copy_brings_the_masters_spaces_the_replicas_config_does_not_name() {
    let from_config = "\n[[space]]\nname = \"things\"\nid = 700\nshard = \"all\"\nformat = [{ name = \"id\", type = \"unsigned\" }]\n[[space.index]]\nname = \"pk\"\ntype = \"TREE\"\nunique = true\nparts = [\"id\"]\n";
    // No snapshot on the master yet: the copy takes one first.
    let master = Server::start(2, from_config);
    replace_ids(master.addr, 700, 300);
    create_space_with_pk(master.addr, "made", 701);
    replace_ids(master.addr, 701, 200);

    // The replica's config has the shipped spaces only.
    let replica_dir = tempfile::tempdir().unwrap();
    let replica = start_replica(replica_dir.path(), 1, &master);
    let rows = |addr, space| crate::common::try_select_rows(addr, space, 0, 0, &[0x90]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while rows(replica.addr, 700).map(|r| r.len()) != Ok(300)
        || rows(replica.addr, 701).map(|r| r.len()) != Ok(200)
    {
        assert!(Instant::now() < deadline, "{}", replica.log_so_far());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(rows(replica.addr, 700), rows(master.addr, 700));
    assert_eq!(rows(replica.addr, 701), rows(master.addr, 701));
    // Rows written after the copy land in the spaces it made.
    replace_ids(master.addr, 701, 250);
    let deadline = Instant::now() + Duration::from_secs(20);
    while rows(replica.addr, 701).map(|r| r.len()) != Ok(250) {
        assert!(Instant::now() < deadline, "{}", replica.log_so_far());
        std::thread::sleep(Duration::from_millis(50));
    }
}
