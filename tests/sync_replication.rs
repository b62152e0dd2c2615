//! Synchronous replication between real `tarn` processes on loopback
//! (`docs/replication.md`, Synchronous replication): with `replication_synchro_quorum = 2` a
//! write to an `is_sync` space is acknowledged only once the replica has it; with the replica
//! gone it times out with Tarantool's ER_SYNC_QUORUM_TIMEOUT, the writes behind it get
//! ER_SYNC_ROLLBACK, and none of them comes back, on the master after a restart or on the
//! replica when it catches up; with the default quorum of 1 a sync space waits for nobody.

use crate::common::{kv_tuple, select_rows, Client, Server, KV};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tarn::msgpack::{write_array_len, write_str, write_uint};
use tarn::protocol::client::{decode_reply, encode_replace};
use tarn::protocol::ErrorCode;

/// A synchronous space, on the master and (the copy does not carry schema) on the replica.
const LEDGER: u32 = 600;
const LEDGER_SPACE: &str = r#"
[[space]]
name = "ledger"
id = 600
is_sync = true
format = [{ name = "id", type = "unsigned" }, { name = "value", type = "string" }]

[[space.index]]
name = "primary"
parts = ["id"]
"#;

fn ledger_tuple(id: u64, value: &str) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_len(&mut out, 2);
    write_uint(&mut out, id);
    write_str(&mut out, value.as_bytes());
    out
}

fn rows(addr: SocketAddr, space_id: u32) -> Vec<Vec<u8>> {
    let rows = select_rows(addr, space_id, 0, 2, &[0x90]);
    rows.into_iter().map(|(_, tuple)| tuple).collect()
}

/// Replaces `tuple` in `space_id`: the error code and message, if refused.
fn replace(client: &mut Client, space_id: u32, tuple: &[u8]) -> Result<(), (u32, String)> {
    let mut request = Vec::new();
    encode_replace(&mut request, 1, space_id, tuple);
    client.send(&request);
    reply_outcome(client)
}

fn reply_outcome(client: &mut Client) -> Result<(), (u32, String)> {
    let packet = client.read_packet().expect("a reply");
    let reply = decode_reply(&packet).expect("decodes");
    match reply.error_code() {
        None => Ok(()),
        Some(code) => Err((code.0, reply.error_message().unwrap_or("").to_owned())),
    }
}

fn start_master(dir: &std::path::Path, shards: u32, quorum: u32, timeout: &str) -> Server {
    let quorum = quorum.to_string();
    let args = [
        "--replication-synchro-quorum",
        quorum.as_str(),
        "--replication-synchro-timeout",
        timeout,
    ];
    Server::start_in(dir, shards, LEDGER_SPACE, &args)
}

fn start_replica(dir: &std::path::Path, master: &Server) -> Server {
    let upstream = master.addr.to_string();
    let replica = Server::start_in(dir, 1, LEDGER_SPACE, &["--replication", &upstream]);
    let following = "copied the master; following its WAL";
    assert!(replica.wait_for_log(following, Duration::from_secs(20)));
    replica
}

/// Waits until `space_id` holds the same rows on both.
fn wait_identical(master: SocketAddr, replica: SocketAddr, space_id: u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while rows(master, space_id) != rows(replica, space_id) {
        assert!(
            Instant::now() < deadline,
            "space {space_id} did not catch up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn with_quorum_2_a_sync_write_is_on_the_replica_when_it_is_acknowledged() {
    let (master_dir, replica_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let master = start_master(master_dir.path(), 2, 2, "5");
    let replica = start_replica(replica_dir.path(), &master);
    let mut client = Client::connect_to(master.addr);
    for id in 0..40u64 {
        let tuple = ledger_tuple(id, &format!("value {id}"));
        let started = Instant::now();
        replace(&mut client, LEDGER, &tuple).expect("acknowledged with the replica attached");
        assert!(started.elapsed() < Duration::from_secs(2), "no timeout");
        let on_replica = select_rows(replica.addr, LEDGER, 0, 0, &[0x91, id as u8]);
        assert_eq!(
            on_replica.len(),
            1,
            "row {id} is on the replica when acknowledged"
        );
        assert_eq!(on_replica[0].1, tuple);
        // An asynchronous write behind it is acknowledged too.
        replace(&mut client, KV, &kv_tuple(id, "plain")).expect("a plain write");
    }
    assert_eq!(rows(master.addr, LEDGER).len(), 40);
}

#[test]
fn with_the_replica_gone_a_sync_write_times_out_and_is_rolled_back_everywhere() {
    let (master_dir, replica_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let master = start_master(master_dir.path(), 1, 2, "2");
    let replica = start_replica(replica_dir.path(), &master);
    let mut client = Client::connect_to(master.addr);
    replace(&mut client, LEDGER, &ledger_tuple(1, "old")).expect("acknowledged");
    replace(&mut client, KV, &kv_tuple(1, "old")).expect("acknowledged");
    wait_identical(master.addr, replica.addr, KV);
    assert_eq!(replica.stop(), Some(0));

    // Pipelined on one connection, all on the master's one shard: the sync write, then two
    // plain writes logged behind it (one replaces a row, one makes a new key).
    let mut requests = Vec::new();
    encode_replace(&mut requests, 1, LEDGER, &ledger_tuple(1, "refused"));
    encode_replace(&mut requests, 2, KV, &kv_tuple(1, "refused"));
    encode_replace(&mut requests, 3, KV, &kv_tuple(7, "refused"));
    let started = Instant::now();
    client.send(&requests);
    let sync = reply_outcome(&mut client);
    let waited = started.elapsed();
    let behind = [reply_outcome(&mut client), reply_outcome(&mut client)];
    let timeout_text = "Quorum collection for a synchronous transaction is timed out";
    assert_eq!(
        sync,
        Err((ErrorCode::ER_SYNC_QUORUM_TIMEOUT.0, timeout_text.into()))
    );
    assert_eq!(ErrorCode::ER_SYNC_QUORUM_TIMEOUT.0, 216);
    let rollback_text = "A rollback for a synchronous transaction is received";
    for outcome in behind {
        assert_eq!(outcome, Err((217, rollback_text.into())));
    }
    assert!(waited >= Duration::from_millis(1900), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    let expected_ledger = vec![ledger_tuple(1, "old")];
    let expected_kv = vec![kv_tuple(1, "old")];
    assert_eq!(rows(master.addr, LEDGER), expected_ledger);
    assert_eq!(rows(master.addr, KV), expected_kv);

    // Nothing refused comes back: not after a restart of the master ...
    let addr = master.addr;
    assert_eq!(master.stop(), Some(0));
    let master = restart_master(master_dir.path(), addr);
    assert_eq!(rows(master.addr, LEDGER), expected_ledger);
    assert_eq!(rows(master.addr, KV), expected_kv);
    // ... nor on the replica, which had the rows before they were refused or gets them now.
    let upstream = master.addr.to_string();
    let replica = Server::start_in(
        replica_dir.path(),
        1,
        LEDGER_SPACE,
        &["--replication", &upstream],
    );
    // Acknowledged once the replica is back (attempts before that time out, rolled back).
    let marker = ledger_tuple(2, "after");
    let deadline = Instant::now() + Duration::from_secs(20);
    while let Err(refused) = replace(&mut Client::connect_to(master.addr), LEDGER, &marker) {
        assert_eq!(refused.0, 216, "{refused:?}");
        assert!(Instant::now() < deadline, "the replica did not come back");
    }
    wait_identical(master.addr, replica.addr, LEDGER);
    wait_identical(master.addr, replica.addr, KV);
    assert_eq!(rows(replica.addr, KV), expected_kv);
    assert_eq!(
        rows(replica.addr, LEDGER),
        vec![ledger_tuple(1, "old"), marker]
    );
}

/// The master of `dir` again, on `addr`, with the same quorum and timeout.
fn restart_master(dir: &std::path::Path, addr: SocketAddr) -> Server {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_tarn"));
    command
        .arg("--config")
        .arg(dir.join("tarn.toml"))
        .args(["--listen", &addr.to_string(), "--shards", "1"])
        .args(["--replication-synchro-quorum", "2"])
        .args(["--replication-synchro-timeout", "2"])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info");
    Server::spawn(command).unwrap_or_else(|log| panic!("tarn did not restart:\n{log}"))
}

#[test]
fn with_the_default_quorum_a_sync_space_waits_for_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let master = Server::start_in(dir.path(), 2, LEDGER_SPACE, &[]);
    let mut client = Client::connect_to(master.addr);
    let started = Instant::now();
    for id in 0..100u64 {
        replace(&mut client, LEDGER, &ledger_tuple(id, "solo")).expect("no replica needed");
    }
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(rows(master.addr, LEDGER).len(), 100);
}

/// `_space`'s row of space `id` (a uint16 id), raw.
fn space_row(addr: SocketAddr, id: u16) -> Option<Vec<u8>> {
    let [high, low] = id.to_be_bytes();
    let rows = crate::common::try_select_rows(addr, 280, 0, 0, &[0x91, 0xcd, high, low]);
    rows.ok()?.into_iter().next().map(|(_, tuple)| tuple)
}

fn has_sync_flag(row: &[u8]) -> bool {
    // `{is_sync = true}`, as Tarantool 2.6's `box.space._space:get(id)` shows it.
    let flags = b"\x81\xa7is_sync\xc3";
    row.windows(flags.len()).any(|window| window == flags)
}

#[test]
fn a_space_made_sync_over_call_is_sync_on_the_replica_and_after_a_restart() {
    use crate::common::call;
    let (master_dir, replica_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let master = start_master(master_dir.path(), 1, 2, "2");
    let replica = start_replica(replica_dir.path(), &master);
    let mut args = Vec::new();
    write_array_len(&mut args, 2);
    write_str(&mut args, b"made");
    tarn::msgpack::write_map_len(&mut args, 2);
    write_str(&mut args, b"id");
    write_uint(&mut args, 701);
    write_str(&mut args, b"is_sync");
    args.push(0xc3);
    call(master.addr, "box.schema.space.create", &args).expect("space made");
    let mut args = Vec::new();
    write_array_len(&mut args, 1);
    write_str(&mut args, b"pk");
    call(master.addr, "box.space.made:create_index", &args).expect("its primary made");
    let on_master = space_row(master.addr, 701).expect("in _space");
    assert!(has_sync_flag(&on_master), "{on_master:x?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while space_row(replica.addr, 701).is_none() {
        assert!(Instant::now() < deadline, "the change did not replicate");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(space_row(replica.addr, 701), Some(on_master.clone()));
    let mut client = Client::connect_to(master.addr);
    replace(&mut client, 701, &[0x91, 1]).expect("the replica acknowledges");
    assert_eq!(replica.stop(), Some(0));
    let refused = replace(&mut client, 701, &[0x91, 2]).expect_err("no quorum");
    assert_eq!(refused.0, 216);

    let addr = master.addr;
    assert_eq!(master.stop(), Some(0));
    let master = restart_master(master_dir.path(), addr);
    assert_eq!(space_row(master.addr, 701), Some(on_master));
    let mut client = Client::connect_to(master.addr);
    let refused = replace(&mut client, 701, &[0x91, 3]).expect_err("still sync");
    assert_eq!(refused.0, 216);
    assert_eq!(rows(master.addr, 701), vec![vec![0x91, 1]]);
}
