//! Failover under load (`docs/replication.md`, "Failover and acknowledged writes"): clients
//! replace distinct keys on the master, pipelined, and note every write acknowledged; the
//! master is killed (-9) mid-load and its replica promoted. Every key on the new master must
//! be one a client sent; with synchronous replication (quorum 2 of 2, `is_sync` space) every
//! acknowledged key must be there too (0 lost). With asynchronous replication the count of
//! acknowledged writes lost is printed (`scripts/failover-loss.sh` repeats it).

use crate::common::{call, kv_rows, kv_tuple, Client, Server, KV};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tarn::protocol::client::{decode_reply, encode_replace};

const WRITERS: u64 = 4;
const IN_FLIGHT: u64 = 64;

/// Replaces keys `writer, writer + WRITERS, ...` until `stop` or the link breaks; the keys
/// acknowledged, and the highest key sent.
fn write_until_broken(addr: SocketAddr, writer: u64, stop: &AtomicBool) -> (Vec<u64>, u64) {
    let mut client = Client::connect_to(addr);
    let mut acknowledged = Vec::new();
    let mut next = writer;
    let mut sent_last = 0;
    while !stop.load(Ordering::Relaxed) {
        let mut requests = Vec::new();
        let ids: Vec<u64> = (0..IN_FLIGHT).map(|i| next + i * WRITERS).collect();
        next += IN_FLIGHT * WRITERS;
        for id in &ids {
            encode_replace(&mut requests, *id, KV, &kv_tuple(*id, "acknowledged?"));
        }
        sent_last = *ids.last().unwrap_or(&0);
        if client.try_send(&requests).is_err() {
            break;
        }
        for _ in &ids {
            let Some(packet) = client.read_packet() else {
                return (acknowledged, sent_last);
            };
            let reply = decode_reply(&packet).expect("a reply decodes");
            if !reply.is_error() {
                acknowledged.push(reply.sync());
            }
        }
    }
    (acknowledged, sent_last)
}

/// Runs the load on a master and replica started on `config`, kills the master after
/// `load_for`, promotes the replica; returns the acknowledged keys the new master lacks, and
/// how many were acknowledged.
fn fail_over(config: &str, load_for: Duration) -> (Vec<u64>, usize) {
    let master_dir = tempfile::tempdir().unwrap();
    let master = Server::try_start_with(master_dir.path(), config, 2, &[]).unwrap();
    let replica_dir = tempfile::tempdir().unwrap();
    let upstream = master.addr.to_string();
    let replica_args = ["--replication", upstream.as_str(), "--read-only"];
    let replica = Server::try_start_with(replica_dir.path(), config, 1, &replica_args).unwrap();
    assert!(replica.wait_for_log("copied the master", Duration::from_secs(10)));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let (stop, addr) = (stop.clone(), master.addr);
            std::thread::spawn(move || write_until_broken(addr, writer, &stop))
        })
        .collect();
    std::thread::sleep(load_for);
    master.kill9();
    stop.store(true, Ordering::Relaxed);
    let mut acknowledged = BTreeSet::new();
    let mut sent_last = 0;
    for writer in writers {
        let (keys, last) = writer.join().unwrap();
        acknowledged.extend(keys);
        sent_last = sent_last.max(last);
    }
    call(replica.addr, "box.ctl.promote", &[0x90]).expect("promoted");
    let on_new_master: BTreeSet<u64> = kv_rows(replica.addr).into_iter().map(|r| r.0).collect();
    assert!(
        on_new_master.iter().all(|id| *id <= sent_last),
        "a key no client sent"
    );
    let lost: Vec<u64> = acknowledged.difference(&on_new_master).copied().collect();
    (lost, acknowledged.len())
}

#[test]
fn with_asynchronous_replication_a_failover_reports_the_acknowledged_writes_lost() {
    let shipped = include_str!("../conf/tarn.toml");
    let (lost, acknowledged) = fail_over(shipped, Duration::from_millis(1500));
    assert!(acknowledged > 1000, "the load ran: {acknowledged}");
    eprintln!(
        "failover, asynchronous: {} of {acknowledged} acknowledged writes lost",
        lost.len()
    );
}

#[test]
fn with_synchronous_replication_a_failover_loses_no_acknowledged_write() {
    let config = crate::common::sync_kv_config("5");
    let (lost, acknowledged) = fail_over(&config, Duration::from_millis(1500));
    assert!(acknowledged > 1000, "the load ran: {acknowledged}");
    eprintln!(
        "failover, synchronous (quorum 2 of 2): {} of {acknowledged} acknowledged writes lost",
        lost.len()
    );
    assert_eq!(lost, Vec::<u64>::new(), "acknowledged writes lost");
}
