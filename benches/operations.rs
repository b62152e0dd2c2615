//! The per-operation table: each operation twice, `raw` (the storage API directly) and
//! `proto` (an encoded IPROTO packet through decode, execute and reply encoding, the
//! path a request takes inside a shard), so the cost the protocol layer adds is visible.
//!
//! `cargo bench --bench operations` (100,000 `kv` tuples; `-- --tuples N` for more).
//! Rows read `operations/<op>_<raw|proto>  ns/op  op/s  B/op  allocs/op`.

mod common;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::hint::black_box;
use tarn::config::Config;
use tarn::protocol::client;
use tarn::protocol::decode_packet;
use tarn::protocol::request::{Select, Update, Upsert};
use tarn::server::schema;
use tarn::shard::Shard;
use tarn::storage::msgpack::{write_array_len, write_str, write_uint};
use tarn::storage::Engine;

const KV: u32 = 512;
const WARMUP: usize = 20_000;
const TIMED: usize = 200_000;

fn kv_tuple(id: u64) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_len(&mut out, 3);
    write_uint(&mut out, id);
    write_uint(&mut out, id % 3000);
    write_str(&mut out, &[b'v'; 100]);
    out
}

fn key(id: u64) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_len(&mut out, 1);
    write_uint(&mut out, id);
    out
}

/// `[["+", 1, 1]]`: add one to bucket_id (0-based field numbers, as on the wire).
fn plus_one() -> Vec<u8> {
    vec![0x91, 0x93, 0xa1, b'+', 0x01, 0x01]
}

fn loaded_shard(tuples: u64) -> Shard {
    let config = Config::from_toml_str(tarn::config::SHIPPED_CONFIG_TOML).expect("config");
    let mut engine: Engine = schema::build_engine(&config, u64::MAX / 2).expect("engine");
    let rows: Vec<Vec<u8>> = (0..tuples).map(kv_tuple).collect();
    engine
        .space_mut(KV)
        .expect("kv")
        .bulk_load(rows.iter().map(Vec::as_slice))
        .expect("load");
    Shard::new(0, engine, None)
}

fn split<T>(mut inputs: Vec<T>) -> (Vec<T>, Vec<T>) {
    let timed = inputs.split_off(WARMUP);
    (inputs, timed)
}

/// Times the protocol path for pre-encoded packets: decode, execute, encode the reply.
fn measure_proto(name: &str, shard: &mut Shard, packets: Vec<Vec<u8>>) {
    let (warmup, timed) = split(packets);
    let mut out = Vec::with_capacity(64 * 1024);
    common::measure(
        &format!("operations/{name}_proto"),
        &warmup,
        &timed,
        |packet| {
            out.clear();
            // Skip the 5-byte size prefix the client encoders write.
            let (header, request) = decode_packet(&packet[5..]).expect("decodes");
            shard.execute(header.sync, 1, &request, &mut out);
            black_box(&out);
        },
    );
}

fn main() {
    let tuples: u64 = std::env::args()
        .skip_while(|arg| arg != "--tuples")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000);
    let total = WARMUP + TIMED;
    let mut rng = StdRng::seed_from_u64(7);
    println!("# {tuples} kv tuples, {WARMUP} warm-up + {TIMED} timed iterations per row");
    let mut shard = loaded_shard(tuples);
    let existing =
        |rng: &mut StdRng| -> Vec<u64> { (0..total).map(|_| rng.gen_range(0..tuples)).collect() };
    let packet = |write: &dyn Fn(&mut Vec<u8>)| {
        let mut out = Vec::new();
        write(&mut out);
        out
    };

    // get
    let ids = existing(&mut rng);
    let (warmup, timed) = split(ids.iter().map(|&id| key(id)).collect());
    // Raw rows copy the tuples they find, as any caller of the storage API does with them;
    // the proto rows do the same into the reply, so the difference is the protocol's.
    let mut copied = Vec::with_capacity(64 * 1024);
    common::measure("operations/get_raw", &warmup, &timed, |key| {
        copied.clear();
        let tuple = shard.engine.space(KV).unwrap().get(0, key).unwrap();
        copied.extend_from_slice(tuple.expect("present").data());
        black_box(&copied);
    });
    let select = |key: &[u8], iterator: u32, limit: u32| {
        packet(&|out| {
            client::encode_select(
                out,
                1,
                &Select {
                    space_id: KV,
                    index_id: 0,
                    limit,
                    offset: 0,
                    iterator,
                    key,
                    fetch_position: false,
                    after_position: None,
                    after_tuple: None,
                },
            )
        })
    };
    measure_proto(
        "get",
        &mut shard,
        ids.iter().map(|&id| select(&key(id), 0, 1)).collect(),
    );

    // select-range: GE, limit 10
    let ids = existing(&mut rng);
    let (warmup, timed) = split(ids.iter().map(|&id| key(id)).collect());
    common::measure("operations/select_range_raw", &warmup, &timed, |key| {
        let rows = shard
            .engine
            .space(KV)
            .unwrap()
            .select(0, 5, key)
            .unwrap()
            .take(10);
        black_box(rows.count());
    });
    measure_proto(
        "select_range",
        &mut shard,
        ids.iter().map(|&id| select(&key(id), 5, 10)).collect(),
    );

    // replace (existing keys)
    let ids = existing(&mut rng);
    let (warmup, timed) = split(ids.iter().map(|&id| kv_tuple(id)).collect());
    common::measure("operations/replace_raw", &warmup, &timed, |tuple| {
        black_box(shard.engine.space_mut(KV).unwrap().replace(tuple).unwrap());
    });
    measure_proto(
        "replace",
        &mut shard,
        ids.iter()
            .map(|&id| packet(&|out| client::encode_replace(out, 1, KV, &kv_tuple(id))))
            .collect(),
    );

    // update: + on bucket_id
    let ops = plus_one();
    let ids = existing(&mut rng);
    let (warmup, timed) = split(ids.iter().map(|&id| key(id)).collect());
    common::measure("operations/update_raw", &warmup, &timed, |key| {
        black_box(
            shard
                .engine
                .space_mut(KV)
                .unwrap()
                .update(0, key, &ops, 0)
                .unwrap(),
        );
    });
    let update = |id: u64| {
        let key = key(id);
        packet(&|out| {
            client::encode_update(
                out,
                1,
                &Update {
                    space_id: KV,
                    index_id: 0,
                    key: &key,
                    ops: &ops,
                    index_base: 0,
                },
            )
        })
    };
    measure_proto(
        "update",
        &mut shard,
        ids.iter().map(|&id| update(id)).collect(),
    );

    // upsert (existing keys: the ops apply)
    let ids = existing(&mut rng);
    let (warmup, timed) = split(ids.iter().map(|&id| kv_tuple(id)).collect());
    common::measure("operations/upsert_raw", &warmup, &timed, |tuple| {
        shard
            .engine
            .space_mut(KV)
            .unwrap()
            .upsert(tuple, &ops, 0)
            .unwrap();
    });
    let upsert = |id: u64| {
        let tuple = kv_tuple(id);
        packet(&|out| {
            client::encode_upsert(
                out,
                1,
                &Upsert {
                    space_id: KV,
                    index_id: 0,
                    tuple: &tuple,
                    ops: &ops,
                    index_base: 0,
                },
            )
        })
    };
    measure_proto(
        "upsert",
        &mut shard,
        ids.iter().map(|&id| upsert(id)).collect(),
    );

    // insert (new keys), then delete exactly those keys
    let raw_ids: Vec<u64> = (tuples..tuples + total as u64).collect();
    let proto_ids: Vec<u64> = (tuples + total as u64..tuples + 2 * total as u64).collect();
    let (warmup, timed) = split(raw_ids.iter().map(|&id| kv_tuple(id)).collect());
    common::measure("operations/insert_raw", &warmup, &timed, |tuple| {
        black_box(shard.engine.space_mut(KV).unwrap().insert(tuple).unwrap());
    });
    measure_proto(
        "insert",
        &mut shard,
        proto_ids
            .iter()
            .map(|&id| packet(&|out| client::encode_insert(out, 1, KV, &kv_tuple(id))))
            .collect(),
    );
    let (warmup, timed) = split(raw_ids.iter().map(|&id| key(id)).collect());
    common::measure("operations/delete_raw", &warmup, &timed, |key| {
        black_box(shard.engine.space_mut(KV).unwrap().delete(0, key).unwrap());
    });
    measure_proto(
        "delete",
        &mut shard,
        proto_ids
            .iter()
            .map(|&id| packet(&|out| client::encode_delete(out, 1, KV, 0, &key(id))))
            .collect(),
    );

    // a 10-row batch (the *_many shape): 10 replaces per op
    let batches: Vec<Vec<u64>> = (0..total)
        .map(|_| (0..10).map(|_| rng.gen_range(0..tuples)).collect())
        .collect();
    let (warmup, timed) = split(
        batches
            .iter()
            .map(|ids| ids.iter().map(|&id| kv_tuple(id)).collect::<Vec<_>>())
            .collect(),
    );
    common::measure(
        "operations/batch10_raw",
        &warmup,
        &timed,
        |tuples: &Vec<Vec<u8>>| {
            let space = shard.engine.space_mut(KV).unwrap();
            for tuple in tuples {
                black_box(space.replace(tuple).unwrap());
            }
        },
    );
    let (warmup, timed) = split(
        batches
            .iter()
            .map(|ids| {
                let mut packets = Vec::new();
                for &id in ids {
                    client::encode_replace(&mut packets, 1, KV, &kv_tuple(id));
                }
                packets
            })
            .collect(),
    );
    let mut out = Vec::with_capacity(64 * 1024);
    common::measure(
        "operations/batch10_proto",
        &warmup,
        &timed,
        |packets: &Vec<u8>| {
            out.clear();
            let mut rest = &packets[..];
            while let Ok(Some((packet, used))) = tarn::protocol::frame::split_frame(rest) {
                let (header, request) = decode_packet(packet).expect("decodes");
                shard.execute(header.sync, 1, &request, &mut out);
                rest = &rest[used..];
            }
            black_box(&out);
        },
    );
}
