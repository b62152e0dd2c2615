//! Cross-core batching keeps every reply matched and in order: several connections to a
//! 2-shard server pipeline writes and reads over keys of both shards at once, and every
//! reply is checked byte for byte (sync, and the exact tuples).

use crate::common;

use common::{encode_kv_select, kv_key, kv_tuple, Client, KV};
use tarn::msgpack::{read_value, Value};
use tarn::protocol::client::{self, decode_reply};

const CONNECTIONS: u64 = 8;
const ROUNDS: u64 = 25;
const KEYS_PER_CONNECTION: u64 = 120;

/// What one reply must carry.
enum Expected {
    /// No error, no data check (PING).
    Ok,
    /// Exactly these tuples, in this order.
    Tuples(Vec<Vec<u8>>),
}

/// One round of one connection: replace every key and read it back, PINGs in between, and
/// every tenth key two fan-out range selects (ascending and descending) that must see
/// exactly the writes before them in the pipeline and none after; then delete one key and
/// miss it, and a last fan-out range select over the connection's keys.
fn round(connection: u64, round: u64, requests: &mut Vec<u8>, expected: &mut Vec<(u64, Expected)>) {
    let base = 1_000_000 * (connection + 1);
    let mut sync = round * 10_000;
    let mut next_sync = || {
        sync += 1;
        sync
    };
    let value_in = |round: u64, k: u64| kv_tuple(base + k, &format!("c{connection}-k{k}-r{round}"));
    let value = |k: u64| value_in(round, k);
    // What key k holds after this round's replace of key `written`: this round's value up to
    // it, the round before's after it (but the key that round deleted).
    let held = |written: u64, k: u64| match (k <= written, round) {
        (true, _) => Some(value(k)),
        (false, 0) => None,
        (false, _) if k == (round - 1) % KEYS_PER_CONNECTION => None,
        (false, _) => Some(value_in(round - 1, k)),
    };
    for k in 0..KEYS_PER_CONNECTION {
        let s = next_sync();
        client::encode_replace(requests, s, KV, &value(k));
        expected.push((s, Expected::Tuples(vec![value(k)])));
        let s = next_sync();
        encode_kv_select(requests, s, 0, base + k, u32::MAX);
        expected.push((s, Expected::Tuples(vec![value(k)])));
        if k % 10 == 0 {
            let s = next_sync();
            client::encode_ping(requests, s);
            expected.push((s, Expected::Ok));
        }
        if k % 10 == 5 {
            // Limited to the keys held, as other connections' keys lie beyond and before.
            let ascending: Vec<_> = (0..KEYS_PER_CONNECTION)
                .filter_map(|j| held(k, j))
                .collect();
            let s = next_sync();
            encode_kv_select(requests, s, 5, base, ascending.len() as u32);
            let descending = ascending.iter().rev().take(5).cloned().collect();
            expected.push((s, Expected::Tuples(ascending)));
            let s = next_sync();
            // LE the last key: the five highest keys held, highest first.
            encode_kv_select(requests, s, 4, base + KEYS_PER_CONNECTION - 1, 5);
            expected.push((s, Expected::Tuples(descending)));
        }
    }
    let deleted = round % KEYS_PER_CONNECTION;
    let s = next_sync();
    client::encode_delete(requests, s, KV, 0, &kv_key(base + deleted));
    expected.push((s, Expected::Tuples(vec![value(deleted)])));
    let s = next_sync();
    encode_kv_select(requests, s, 0, base + deleted, u32::MAX);
    expected.push((s, Expected::Tuples(vec![])));
    let s = next_sync();
    // GE base, limit: exactly this connection's keys, as no other connection writes them.
    encode_kv_select(requests, s, 5, base, KEYS_PER_CONNECTION as u32 - 1);
    let remaining = (0..KEYS_PER_CONNECTION)
        .filter(|&k| k != deleted)
        .map(value);
    expected.push((s, Expected::Tuples(remaining.collect())));
}

fn check(connection: u64, packet: &[u8], sync: u64, expected: &Expected) {
    let reply = decode_reply(packet).expect("decodes");
    assert_eq!(
        reply.sync(),
        sync,
        "connection {connection}: replies out of order"
    );
    assert!(
        !reply.is_error(),
        "connection {connection} sync {sync}: {:?}",
        reply.error_message()
    );
    let Expected::Tuples(tuples) = expected else {
        return;
    };
    let mut data = reply.data().expect("data");
    match read_value(&mut data).unwrap() {
        Value::Array(count) => assert_eq!(count as usize, tuples.len(), "sync {sync}"),
        other => panic!("sync {sync}: {other:?}"),
    }
    assert_eq!(data, tuples.concat(), "connection {connection} sync {sync}");
}

fn run_connection(server: &common::Server, connection: u64) {
    let mut client = Client::connect(server);
    let (mut requests, mut expected) = (Vec::new(), Vec::new());
    for r in 0..ROUNDS {
        requests.clear();
        expected.clear();
        round(connection, r, &mut requests, &mut expected);
        client.send(&requests);
        for (sync, want) in &expected {
            let packet = client.read_packet().expect("a reply");
            check(connection, &packet, *sync, want);
        }
    }
}

#[test]
fn concurrent_pipelined_cross_shard_traffic_is_answered_exactly_and_in_order() {
    let server = common::Server::start(2, "");
    std::thread::scope(|scope| {
        for connection in 0..CONNECTIONS {
            let server = &server;
            scope.spawn(move || run_connection(server, connection));
        }
    });
}
