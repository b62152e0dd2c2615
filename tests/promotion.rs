//! Promotion (`docs/replication.md`): `box.ctl.promote()` over CALL makes a read-only replica
//! the writable master of a new term; the term it announces fences the former master (it
//! refuses writes with ER_READONLY from then on, across restarts), and a former master
//! started as the new one's replica discards the rows the new master never received and
//! copies it. Real processes on loopback.

use crate::common::{call, kv_replace_codes, kv_rows, Server};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn replace_all(addr: SocketAddr, ids: std::ops::Range<u64>, value: &str) {
    let codes = kv_replace_codes(addr, ids, value);
    assert!(codes.iter().all(|code| *code == 0), "{codes:?}");
}

const ER_READONLY: u32 = 7;

fn promote(addr: SocketAddr) {
    call(addr, "box.ctl.promote", &[0x90]).expect("box.ctl.promote()");
}

/// Waits until `addr` refuses a write with ER_READONLY (the write it tries is to id 0).
fn wait_fenced(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while kv_replace_codes(server.addr, 0..1, "fence probe") != [ER_READONLY] {
        assert!(
            Instant::now() < deadline,
            "not fenced\n{}",
            server.log_so_far()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the replica's copy of its master has ended (its position is recorded): one
/// still copying is not promoted.
fn wait_copied(replica: &Server) {
    let copied = "copied the master; following its WAL";
    assert!(
        replica.wait_for_log(copied, Duration::from_secs(10)),
        "{}",
        replica.log_so_far()
    );
}

fn wait_rows(server: &Server, rows: &[(u64, Vec<u8>)]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while kv_rows(server.addr) != rows {
        assert!(
            Instant::now() < deadline,
            "{} rows, {} expected\n{}",
            kv_rows(server.addr).len(),
            rows.len(),
            server.log_so_far()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_promoted_replica_fences_its_live_master_and_takes_the_writes() {
    let master = Server::start(2, "");
    replace_all(master.addr, 0..500, "first");
    let replica_dir = tempfile::tempdir().unwrap();
    let upstream = master.addr.to_string();
    let replica = Server::start_in(
        replica_dir.path(),
        1,
        "",
        &["--replication", &upstream, "--read-only"],
    );
    wait_rows(&replica, &kv_rows(master.addr));
    wait_copied(&replica);
    assert_eq!(kv_replace_codes(replica.addr, 0..1, "x"), [ER_READONLY]);

    promote(replica.addr);
    replace_all(replica.addr, 1000..1100, "on the new master");
    // The new master told the old one its term: the old one refuses writes now.
    wait_fenced(&master);
    assert!(master.wait_for_log("leads a newer term", Duration::from_secs(5)));
    assert!(!kv_rows(master.addr).iter().any(|(id, _)| *id >= 1000));
    // Promoting the master of the current term again changes nothing.
    promote(replica.addr);
    replace_all(replica.addr, 1100..1101, "still the master");
}

#[test]
fn a_former_master_discards_what_the_new_one_never_got_and_follows_it() {
    let master_dir = tempfile::tempdir().unwrap();
    let master = Server::start_in(master_dir.path(), 2, "", &[]);
    replace_all(master.addr, 0..1000, "acknowledged and replicated");
    let replica_dir = tempfile::tempdir().unwrap();
    let upstream = master.addr.to_string();
    let replica_args = ["--replication", upstream.as_str(), "--read-only"];
    let replica = Server::start_in(replica_dir.path(), 1, "", &replica_args);
    wait_rows(&replica, &kv_rows(master.addr));
    wait_copied(&replica);
    // The replica stops; the master acknowledges rows the replica never receives, then dies.
    let replica_addr = replica.addr;
    assert_eq!(replica.stop(), Some(0));
    replace_all(master.addr, 2000..2050, "the tail no one else has");
    master.kill9();

    let replica = crate::common::restart_on(replica_dir.path(), 1, replica_addr, &replica_args);
    promote(replica.addr);
    replace_all(replica.addr, 3000..3100, "written on the new master");
    let expected = kv_rows(replica.addr);
    assert_eq!(expected.len(), 1100);

    // The former master comes back configured to follow the new one: it hears term 2,
    // stops accepting writes, discards its tail and copies the new master.
    let new_master = replica.addr.to_string();
    let former = Server::start_in(master_dir.path(), 2, "", &["--replication", &new_master]);
    wait_rows(&former, &expected);
    assert!(former.wait_for_log("its rows are discarded", Duration::from_secs(5)));
    wait_fenced(&former);
    // And it stays fenced across a restart, whatever its config says.
    let former_addr = former.addr;
    assert_eq!(former.stop(), Some(0));
    let former = crate::common::restart_on(master_dir.path(), 2, former_addr, &[]);
    assert_eq!(kv_replace_codes(former.addr, 0..1, "x"), [ER_READONLY]);
    assert!(former
        .log_so_far()
        .contains("it starts read-only, whatever read_only says"));
}

/// `tests/python/test_promotion_pool.py`: `tarantool.ConnectionPool` over a master and its
/// read-only replica, which is promoted: the pool's writes then go to it.
#[test]
fn the_python_connection_pool_writes_to_the_promoted_replica() {
    crate::common::run_pool_test("test_promotion_pool.py", "TARN_PROMOTE_ADDR");
}

#[test]
fn a_replica_that_has_not_finished_copying_is_not_promoted() {
    let dir = tempfile::tempdir().unwrap();
    // A copy was under way when it stopped; its master is gone.
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::write(dir.path().join("data/replica.copying"), "").unwrap();
    let replica = Server::start_in(
        dir.path(),
        1,
        "",
        &["--replication", "127.0.0.1:1", "--read-only"],
    );
    let refused = call(replica.addr, "box.ctl.promote", &[0x90]).unwrap_err();
    assert!(
        refused.contains("has not finished copying its master"),
        "{refused}"
    );
    assert_eq!(kv_replace_codes(replica.addr, 0..1, "x"), [ER_READONLY]);
}

#[test]
fn a_promoted_replica_waits_for_its_own_quorum_on_sync_spaces() {
    let config = crate::common::sync_kv_config("2");
    let master_dir = tempfile::tempdir().unwrap();
    let master = Server::try_start_with(master_dir.path(), &config, 2, &[]).unwrap();
    let replica_dir = tempfile::tempdir().unwrap();
    let upstream = master.addr.to_string();
    let args = ["--replication", upstream.as_str(), "--read-only"];
    let replica = Server::try_start_with(replica_dir.path(), &config, 1, &args).unwrap();
    wait_copied(&replica);
    // The replica applies the master's sync rows without a quorum of its own.
    replace_all(master.addr, 0..100, "acknowledged by both");
    let before = kv_rows(master.addr);
    wait_rows(&replica, &before);
    master.kill9();
    promote(replica.addr);
    // The new master has no replica: quorum 2 is not reached, ER_SYNC_QUORUM_TIMEOUT (216).
    assert_eq!(kv_replace_codes(replica.addr, 7..8, "no quorum"), [216]);
    assert_eq!(
        kv_rows(replica.addr),
        before,
        "the refused write is rolled back"
    );
}
