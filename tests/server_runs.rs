//! A pipelined run of packets (what one socket read brings) is answered exactly as the same
//! packets one at a time, on shards large enough to fetch lookups ahead: each packet is
//! decoded once, a few packets before its turn, on the accepting core and again on the
//! owner for a batch from another core, and every reply must still be its own packet's.

use crate::common;

use common::{encode_kv_select, KV};
use std::time::Duration;
use tarn::config::{Config, SHIPPED_CONFIG_TOML};
use tarn::placement::shard_of_key;
use tarn::protocol::client;
use tarn::protocol::frame::split_frame;
use tarn::server::session::Session;
use tarn::server::start_cores;

/// 1 KiB tuples, 40 MiB per shard: over the 32 MiB from which shards fetch ahead.
const KEYS: u64 = 80_000;
const VALUE_BYTES: usize = 1000;

fn config() -> Config {
    let mut config = Config::from_toml_str(SHIPPED_CONFIG_TOML).expect("shipped config");
    config.data_dir = tempfile::tempdir().expect("data dir").keep();
    // What is checked is the replies; 80 MiB of WAL would only slow the test down.
    config.durability.wal_mode = tarn::config::WalMode::None;
    config.idle_poll = Duration::ZERO;
    config
}

fn kv_tuple(id: u64) -> Vec<u8> {
    common::kv_tuple(id, &format!("{id:0width$}", width = VALUE_BYTES))
}

fn owner(id: u64) -> usize {
    shard_of_key(&id.to_be_bytes(), 2)
}

/// `encoded` without its size prefix: the packet a session is given.
fn packet(encoded: Vec<u8>) -> Vec<u8> {
    let (body, _) = split_frame(&encoded).expect("frame").expect("whole");
    body.to_vec()
}

fn select(sync: u64, iterator: u32, id: u64, limit: u32) -> Vec<u8> {
    let mut out = Vec::new();
    encode_kv_select(&mut out, sync, iterator, id, limit);
    packet(out)
}

/// Gets of keys of both cores, present and absent; a stretch of 40 packets for the other
/// core (past what a run keeps decoded ahead); and requests of other kinds among them.
fn mixed_packets() -> Vec<Vec<u8>> {
    let mut packets = Vec::new();
    let mut sync = 0;
    let mut next_sync = || {
        sync += 1;
        sync
    };
    for i in 0..60 {
        packets.push(select(next_sync(), 0, i * 1_299 % KEYS, 1));
    }
    let remote: Vec<u64> = (0..KEYS).filter(|&id| owner(id) == 1).take(40).collect();
    for id in remote {
        packets.push(select(next_sync(), 0, id, 1));
    }
    for i in 0..10 {
        packets.push(select(next_sync(), 0, KEYS + i, 1));
        let mut ping = Vec::new();
        client::encode_ping(&mut ping, next_sync());
        packets.push(packet(ping));
        let mut replace = Vec::new();
        client::encode_replace(&mut replace, next_sync(), KV, &kv_tuple(i * 7));
        packets.push(packet(replace));
        let mut insert = Vec::new();
        client::encode_insert(&mut insert, next_sync(), KV, &kv_tuple(i * 11));
        packets.push(packet(insert));
        // A select whose body is not a map: the decoder's error, answered in its place.
        let mut bad = select(next_sync(), 0, i, 1);
        let last = bad.len() - 1;
        bad.truncate(last);
        packets.push(bad);
        packets.push(select(next_sync(), 0, i * 31 % KEYS, 1));
    }
    packets.push(select(next_sync(), 6, KEYS - 5, 3));
    for i in 0..60 {
        packets.push(select(next_sync(), 0, (i * 7_919 + 3) % KEYS, 1));
    }
    packets
}

#[test]
fn a_run_is_answered_as_its_packets_one_at_a_time() {
    let outputs = start_cores(config(), 2, |core| async move {
        if core.id() != 0 {
            return None;
        }
        let mut session = Session::new(core);
        let mut out = Vec::new();
        for ids in (0..KEYS).collect::<Vec<_>>().chunks(256) {
            for &id in ids {
                let mut replace = Vec::new();
                client::encode_replace(&mut replace, id, KV, &kv_tuple(id));
                session.submit(&packet(replace), &mut out).await;
            }
            session.finish(&mut out).await;
            out.clear();
        }
        let packets = mixed_packets();

        let mut one_run = Vec::new();
        let mut run = session.start_run();
        for at in 0..packets.len() {
            session.prefetch_before(&mut run, at, |ahead| packets.get(ahead).map(Vec::as_slice));
            if let Some(deferred) = session.submit_in(&mut run, at, &packets[at], &mut one_run) {
                session
                    .run_deferred(&packets[at], deferred, &mut one_run)
                    .await;
            }
        }
        session.finish(&mut one_run).await;

        let mut one_at_a_time = Vec::new();
        for packet in &packets {
            session.submit(packet, &mut one_at_a_time).await;
            session.finish(&mut one_at_a_time).await;
        }
        Some((one_run, one_at_a_time))
    })
    .expect("cores");
    let (one_run, one_at_a_time) = outputs.into_iter().flatten().next().expect("core 0");
    assert!(
        one_run.len() > 100 * VALUE_BYTES,
        "the gets found their tuples"
    );
    assert!(one_run == one_at_a_time, "a run answered differently");
}
