//! Pipelined fan-outs answer exactly what one shard answers: the same seeded stream of
//! writes and selects (every iterator, offsets, limits, positions, on unique and
//! non-unique indexes, keys from empty to whole) goes down one connection to a 1-shard and
//! to a 2-shard server, hundreds of requests in flight at once, and every reply of the
//! 2-shard server must be byte for byte the 1-shard server's. On two shards most of those
//! selects fan out and are merged while later writes of the same pipeline are already
//! queued behind them, so this checks the merge (rows, order, offset/limit, ties in a
//! non-unique index) and that a fan-out sees exactly the writes before it. crud's reads
//! (crud.select, crud.count, crud.len), which every core answers a part of, are pipelined
//! the same way and are in the stream too, with crud.replace among the writes.

use crate::common;

use common::{kv_key, kv_tuple, Client, KV};
use tarn::msgpack::{read_value, write_array_len, write_map_len, write_str, write_uint, Value};
use tarn::protocol::client::{self, decode_reply};
use tarn::protocol::request::Select;

const CUSTOMERS: u32 = 513;
/// Indexes of `customers` in the shipped config: primary (id), composite (a, b, c, d,
/// name, non-unique), bucket_id (non-unique).
const CUSTOMER_INDEXES: u64 = 3;
/// Few distinct ids and field values, so that ranges cover many rows and the non-unique
/// indexes hold many equal keys.
const KV_IDS: u64 = 300;
const CUSTOMER_IDS: u64 = 200;
const FIELD_VALUES: u64 = 4;
const PIPELINES: u64 = 12;
const REQUESTS_PER_PIPELINE: u64 = 400;

/// SplitMix64, seeded: the stream is the same for both servers and for every run.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn customer(random: &mut Random, id: u64) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_len(&mut out, 7);
    write_uint(&mut out, id);
    write_uint(&mut out, id % 7);
    for _ in 0..4 {
        write_uint(&mut out, random.below(FIELD_VALUES));
    }
    let name = format!("n{}", random.below(3));
    write_str(&mut out, name.as_bytes());
    out
}

/// A key of `parts` parts, each drawn like the field it matches.
fn key_of(random: &mut Random, parts: u64, bound: u64) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_len(&mut out, parts as u32);
    for part in 0..parts {
        if part == 4 {
            write_str(&mut out, format!("n{}", random.below(3)).as_bytes());
        } else {
            write_uint(&mut out, random.below(bound));
        }
    }
    out
}

/// A random select: space, index, iterator, a key of a fitting length (empty too), offset,
/// limit, and now and then a position to fetch.
fn encode_random_select(out: &mut Vec<u8>, random: &mut Random, sync: u64) {
    let (space_id, index_id) = if random.chance(50) {
        (KV, 0)
    } else {
        (CUSTOMERS, random.below(CUSTOMER_INDEXES) as u32)
    };
    let (max_parts, bound) = match (space_id, index_id) {
        (KV, _) => (1, KV_IDS),
        (_, 0) => (1, CUSTOMER_IDS),
        (_, 1) => (5, FIELD_VALUES),
        _ => (1, 7),
    };
    let parts = if random.chance(15) {
        0
    } else {
        1 + random.below(max_parts)
    };
    let key = key_of(random, parts, bound);
    // EQ, REQ, ALL, LT, LE, GE, GT.
    let iterator = random.below(7) as u32;
    let offset = if random.chance(60) {
        0
    } else {
        random.below(6) as u32
    };
    let limit = match random.below(10) {
        0 => u32::MAX,
        1 => 0,
        _ => 1 + random.below(15) as u32,
    };
    let select = Select {
        space_id,
        index_id,
        limit,
        offset,
        iterator,
        key: &key,
        fetch_position: random.chance(10),
        after_position: None,
        after_tuple: None,
    };
    client::encode_select(out, sync, &select);
}

/// A random crud read: crud.select with a condition on a primary or secondary index and a
/// `first` limit, crud.count with a condition, or crud.len.
fn encode_random_crud_read(out: &mut Vec<u8>, random: &mut Random, sync: u64) {
    let (space, index, bound) = match random.below(3) {
        0 => ("kv", "primary", KV_IDS),
        1 => ("customers", "primary", CUSTOMER_IDS),
        _ => ("customers", "composite", FIELD_VALUES),
    };
    let operator: &[u8] = match random.below(4) {
        0 => b"==",
        1 => b">=",
        2 => b"<",
        _ => b">",
    };
    let mut args = Vec::new();
    let function = match random.below(10) {
        0 => {
            write_array_len(&mut args, 1);
            write_str(&mut args, space.as_bytes());
            "crud.len"
        }
        1..=3 => "crud.count",
        _ => "crud.select",
    };
    if function != "crud.len" {
        let with_first = function == "crud.select";
        write_array_len(&mut args, 2 + u32::from(with_first));
        write_str(&mut args, space.as_bytes());
        write_array_len(&mut args, 1);
        write_array_len(&mut args, 3);
        write_str(&mut args, operator);
        write_str(&mut args, index.as_bytes());
        write_uint(&mut args, random.below(bound));
        if with_first {
            write_map_len(&mut args, 1);
            write_str(&mut args, b"first");
            write_uint(&mut args, 1 + random.below(12));
        }
    }
    client::encode_call(out, sync, function, &args);
}

/// One pipeline: writes to both spaces (replaces and deletes) interleaved with selects and
/// crud reads.
fn encode_pipeline(out: &mut Vec<u8>, random: &mut Random, first_sync: u64) {
    for sync in first_sync..first_sync + REQUESTS_PER_PIPELINE {
        match random.below(100) {
            0..=29 => {
                let id = random.below(KV_IDS);
                let tuple = kv_tuple(id, &format!("v{}", random.below(1000)));
                client::encode_replace(out, sync, KV, &tuple);
            }
            30..=37 => client::encode_delete(out, sync, KV, 0, &kv_key(random.below(KV_IDS))),
            38..=49 => {
                let id = random.below(CUSTOMER_IDS);
                let tuple = customer(random, id);
                client::encode_replace(out, sync, CUSTOMERS, &tuple);
            }
            50..=54 => {
                let key = kv_key(random.below(CUSTOMER_IDS));
                client::encode_delete(out, sync, CUSTOMERS, 0, &key);
            }
            55..=64 => encode_random_crud_read(out, random, sync),
            65..=69 => {
                // crud.replace('kv', {id, nil, value}): a write run where the fan-outs
                // before it also scan (crud fills in bucket_id).
                let mut args = Vec::new();
                write_array_len(&mut args, 2);
                write_str(&mut args, b"kv");
                write_array_len(&mut args, 3);
                write_uint(&mut args, random.below(KV_IDS));
                args.push(0xc0);
                write_str(&mut args, format!("c{}", random.below(1000)).as_bytes());
                client::encode_call(out, sync, "crud.replace", &args);
            }
            _ => encode_random_select(out, random, sync),
        }
    }
}

fn replies(client: &mut Client, count: u64) -> Vec<Vec<u8>> {
    (0..count)
        .map(|_| client.read_packet().expect("a reply for every request"))
        .collect()
}

#[test]
fn pipelined_fan_outs_answer_exactly_what_one_shard_answers() {
    let one = common::Server::start(1, "");
    let two = common::Server::start(2, "");
    let (mut single, mut sharded) = (Client::connect(&one), Client::connect(&two));
    let mut random = Random(0x5EED_FA40);
    let (mut requests, mut many_row_replies, mut crud_rows) = (Vec::new(), 0usize, 0usize);
    for pipeline in 0..PIPELINES {
        requests.clear();
        let first_sync = pipeline * REQUESTS_PER_PIPELINE + 1;
        encode_pipeline(&mut requests, &mut random, first_sync);
        single.send(&requests);
        sharded.send(&requests);
        let expected = replies(&mut single, REQUESTS_PER_PIPELINE);
        let answered = replies(&mut sharded, REQUESTS_PER_PIPELINE);
        for (n, (want, got)) in expected.iter().zip(&answered).enumerate() {
            let sync = first_sync + n as u64;
            let reply = decode_reply(want).expect("the 1-shard reply decodes");
            assert_eq!(reply.sync(), sync, "the 1-shard server answers in order");
            assert!(
                !reply.is_error(),
                "sync {sync}: the stream sends only valid requests: {:?}",
                reply.error_message()
            );
            assert_eq!(
                got, want,
                "sync {sync}: the 2-shard reply differs from the 1-shard one"
            );
            let mut data = reply.data().unwrap_or_default();
            if matches!(read_value(&mut data), Ok(Value::Array(rows)) if rows > 1) {
                many_row_replies += 1;
            }
            if crud_select_rows(reply.data().unwrap_or_default()) > 1 {
                crud_rows += 1;
            }
        }
    }
    // Only selects return more than one row; most must, or the comparison proved little.
    assert!(
        many_row_replies > 1000,
        "only {many_row_replies} replies carried more than one row"
    );
    assert!(
        crud_rows > 100,
        "only {crud_rows} crud.select replies carried more than one row"
    );
}

/// The rows of a crud.select reply's result object (`[{metadata = ..., rows = [...]}, nil]`);
/// 0 for any other reply.
fn crud_select_rows(mut data: &[u8]) -> u32 {
    let (Ok(Value::Array(2)), Ok(Value::Map(fields))) =
        (read_value(&mut data), read_value(&mut data))
    else {
        return 0;
    };
    for _ in 0..fields {
        let Ok(Value::Str(name)) = read_value(&mut data) else {
            return 0;
        };
        if name == b"rows" {
            return match read_value(&mut data) {
                Ok(Value::Array(rows)) => rows,
                _ => 0,
            };
        }
        if tarn::msgpack::skip_value(&mut data).is_err() {
            return 0;
        }
    }
    0
}
