//! The per-operation table: each operation as `raw` (the storage API directly), `proto`
//! (an encoded IPROTO packet through decode, execute and reply encoding, the path a
//! request takes inside a shard) and, for the crud ops, `crud_<op>` (an IPROTO CALL of
//! `crud.<op>` through the server's decode (`protocol::crud_call::decode_packet`) and `crud::plan_and_run`: plan, apply, logging
//! hook, `{metadata, rows}` reply — the shape of the `proto` rows, which is what a
//! one-shard server and the owner of a forwarded crud point op run), so the cost the
//! protocol layer and the crud layer add is visible. No WAL in any row (`wal_mode = none`).
//!
//! crud calls are written as the Python connector sends them: `opts` an empty map, the
//! tuples' `bucket_id` nil (crud computes it), update/upsert ops 1-based.
//!
//! select_range is GE limit 10 on kv's primary key; select_secondary GE `[a, b]` limit 10
//! on customers' 5-part non-unique index, its `crud_` row the crud.select with that
//! condition and `first = 10` (which plans into that select).
//!
//! `cargo bench --bench operations` (100,000 `kv` tuples and as many `customers` rows;
//! `-- --tuples N` for more,
//! `-- --timed N` for N timed iterations per row instead of 200,000, `-- --only A,B` for
//! the rows whose name ends in A or B).
//! Rows read `operations/<op>_<raw|proto>` or `operations/crud_<op>`, then
//! `ns/op  op/s  B/op  allocs/op`.

mod common;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::hint::black_box;
use tarn::config::Config;
use tarn::crud::{self, CrudConfig};
use tarn::msgpack::{write_array_len, write_str, write_uint};
use tarn::protocol::client;
use tarn::protocol::crud_call as fast_call;
use tarn::protocol::decode_packet;
use tarn::protocol::request::{Select, Update, Upsert};
use tarn::server::schema;
use tarn::shard::Shard;
use tarn::storage::Engine;

const KV: u32 = 512;
const CUSTOMERS: u32 = 513;
/// `customers`' non-unique TREE index on (a, b, c, d, name).
const COMPOSITE: u32 = 1;
/// `customers.a`..`d` are drawn from `0..FIELD_RANGE`, as perf-simple-query's rows.
const FIELD_RANGE: u64 = 1000;
const WARMUP: usize = 20_000;
const TIMED: usize = 200_000;

/// Warm-up and timed iterations per row: `-- --timed N` shrinks a run for a profiler
/// (callgrind runs the bench some 50 times slower), keeping the warm-up a tenth of it.
static ITERATIONS: std::sync::OnceLock<(usize, usize)> = std::sync::OnceLock::new();

fn iterations() -> (usize, usize) {
    *ITERATIONS.get_or_init(|| match arg_after("--timed") {
        Some(timed) => (timed / 10, timed),
        None => (WARMUP, TIMED),
    })
}

/// Runs a row unless `-- --only A,B` names others (rows whose name ends in none of the
/// texts are skipped), so a profile can hold the rows it compares alone.
fn measure<T>(name: &str, warmup: &[T], timed: &[T], op: impl FnMut(&T)) {
    let only = std::env::args().skip_while(|arg| arg != "--only").nth(1);
    if only.is_some_and(|only| !only.split(',').any(|text| name.ends_with(text))) {
        return;
    }
    common::measure(name, warmup, timed, op);
}

fn arg_after(flag: &str) -> Option<usize> {
    std::env::args()
        .skip_while(|arg| arg != flag)
        .nth(1)
        .and_then(|n| n.parse().ok())
}

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

/// A `customers` row `[id, bucket_id, a, b, c, d, name]`, a..d drawn from `0..FIELD_RANGE`.
fn customer_row(rng: &mut StdRng, id: u64) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_len(&mut out, 7);
    write_uint(&mut out, id);
    write_uint(&mut out, id % 3000);
    for _ in 0..4 {
        write_uint(&mut out, rng.gen_range(0..FIELD_RANGE));
    }
    let name: Vec<u8> = (0..rng.gen_range(10..=20))
        .map(|_| rng.gen_range(b'a'..=b'z'))
        .collect();
    write_str(&mut out, &name);
    out
}

/// `tuples` kv tuples and as many `customers` rows.
fn loaded_shard(tuples: u64) -> Shard {
    let config = Config::from_toml_str(tarn::config::SHIPPED_CONFIG_TOML).expect("config");
    let mut engine: Engine = schema::build_engine(&config, u64::MAX / 2).expect("engine");
    let rows: Vec<Vec<u8>> = (0..tuples).map(kv_tuple).collect();
    engine
        .space_mut(KV)
        .expect("kv")
        .bulk_load(rows.iter().map(Vec::as_slice))
        .expect("load");
    let mut rng = StdRng::seed_from_u64(11);
    let rows: Vec<Vec<u8>> = (0..tuples).map(|id| customer_row(&mut rng, id)).collect();
    engine
        .space_mut(CUSTOMERS)
        .expect("customers")
        .bulk_load(rows.iter().map(Vec::as_slice))
        .expect("load");
    Shard::new(0, engine, None)
}

/// `[a, b]`: a key prefix of `customers`' composite index.
fn composite_prefix(rng: &mut StdRng) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_len(&mut out, 2);
    write_uint(&mut out, rng.gen_range(0..FIELD_RANGE));
    write_uint(&mut out, rng.gen_range(0..FIELD_RANGE));
    out
}

/// A `crud.select(space, {{'>=', index, key}}, {first = 10})` CALL packet.
fn crud_select_ge(space: &str, index: &str, key: &[u8]) -> Vec<u8> {
    let mut args = Vec::new();
    write_array_len(&mut args, 3);
    write_str(&mut args, space.as_bytes());
    write_array_len(&mut args, 1);
    write_array_len(&mut args, 3);
    write_str(&mut args, b">=");
    write_str(&mut args, index.as_bytes());
    args.extend_from_slice(key);
    args.push(0x81);
    write_str(&mut args, b"first");
    write_uint(&mut args, 10);
    let mut out = Vec::new();
    client::encode_call(&mut out, 1, "crud.select", &args);
    out
}

fn split<T>(mut inputs: Vec<T>) -> (Vec<T>, Vec<T>) {
    let timed = inputs.split_off(iterations().0);
    (inputs, timed)
}

/// A crud tuple as the connector sends it: bucket_id nil.
fn crud_tuple(id: u64) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_len(&mut out, 3);
    write_uint(&mut out, id);
    out.push(0xc0);
    write_str(&mut out, &[b'v'; 100]);
    out
}

/// `[["+", 2, 1]]`: add one to bucket_id (crud numbers fields from 1).
fn crud_plus_one() -> Vec<u8> {
    vec![0x91, 0x93, 0xa1, b'+', 0x02, 0x01]
}

/// A `crud.<function>` CALL packet with args `["kv", <values>..., {}]`.
fn crud_call(function: &str, values: &[&[u8]]) -> Vec<u8> {
    let mut args = Vec::new();
    write_array_len(&mut args, values.len() as u32 + 2);
    write_str(&mut args, b"kv");
    for value in values {
        args.extend_from_slice(value);
    }
    args.push(0x80);
    let mut out = Vec::new();
    client::encode_call(&mut out, 1, &format!("crud.{function}"), &args);
    out
}

fn uint(value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    write_uint(&mut out, value);
    out
}

/// Times the crud path for pre-encoded CALL packets: decode, plan, run, encode the reply.
fn measure_crud(name: &str, shard: &mut Shard, packets: Vec<Vec<u8>>) {
    let config = CrudConfig::for_instance(3000, "aaaaaaaa-0000-4000-8000-000000000001");
    let (warmup, timed) = split(packets);
    let mut out = Vec::with_capacity(64 * 1024);
    measure(
        &format!("operations/crud_{name}"),
        &warmup,
        &timed,
        |packet| {
            out.clear();
            // As the server decodes packets: crud calls in one pass, the rest the general way.
            let (header, request) = fast_call::decode_packet(&packet[5..]).expect("decodes");
            let tarn::protocol::request::Request::Call(call) = request else {
                panic!("a CALL")
            };
            // No WAL here: nothing to wait for.
            let _ran = crud::plan_and_run(
                shard,
                &config,
                header.sync,
                1,
                call.function_name,
                call.args,
                &mut out,
            );
            debug_assert!(out.len() > 20, "a reply with data");
            black_box(&out);
        },
    );
}

/// Times the protocol path for pre-encoded packets: decode, execute, encode the reply.
fn measure_proto(name: &str, shard: &mut Shard, packets: Vec<Vec<u8>>) {
    let (warmup, timed) = split(packets);
    let mut out = Vec::with_capacity(64 * 1024);
    measure(
        &format!("operations/{name}_proto"),
        &warmup,
        &timed,
        |packet| {
            out.clear();
            // Skip the 5-byte size prefix the client encoders write.
            let (header, request) = decode_packet(&packet[5..]).expect("decodes");
            let _executed = shard.execute(header.sync, 1, &request, None, &mut out);
            black_box(&out);
        },
    );
}

fn main() {
    // As the server runs: with its heap on huge pages where the kernel offers them.
    tarn::server::os::heap::restart_with_huge_pages();
    tarn::server::os::heap::tuple_regions_from_the_kernel();
    let tuples = arg_after("--tuples").map_or(100_000, |n| n as u64);
    let (warmup_count, timed_count) = iterations();
    let total = warmup_count + timed_count;
    let mut rng = StdRng::seed_from_u64(7);
    println!(
        "# {tuples} kv tuples and {tuples} customers rows, {warmup_count} warm-up + {timed_count} timed iterations per row"
    );
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
    measure("operations/get_raw", &warmup, &timed, |key| {
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
    measure_crud(
        "get",
        &mut shard,
        ids.iter()
            .map(|&id| crud_call("get", &[&uint(id)]))
            .collect(),
    );

    // select-range: GE, limit 10
    let ids = existing(&mut rng);
    let (warmup, timed) = split(ids.iter().map(|&id| key(id)).collect());
    measure("operations/select_range_raw", &warmup, &timed, |key| {
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
    measure_crud(
        "select_range",
        &mut shard,
        ids.iter()
            .map(|&id| crud_select_ge("kv", "primary", &key(id)))
            .collect(),
    );

    // select-secondary: GE [a, b], limit 10, on customers' composite index; crud.select
    // with that condition plans into the same select.
    let prefixes: Vec<Vec<u8>> = (0..total).map(|_| composite_prefix(&mut rng)).collect();
    let (warmup, timed) = split(prefixes.clone());
    measure("operations/select_secondary_raw", &warmup, &timed, |key| {
        let rows = shard
            .engine
            .space(CUSTOMERS)
            .unwrap()
            .select(COMPOSITE, 5, key)
            .unwrap()
            .take(10);
        black_box(rows.count());
    });
    let select_customers = |key: &[u8]| {
        packet(&|out| {
            let select = Select {
                space_id: CUSTOMERS,
                index_id: COMPOSITE,
                limit: 10,
                offset: 0,
                iterator: 5,
                key,
                fetch_position: false,
                after_position: None,
                after_tuple: None,
            };
            client::encode_select(out, 1, &select)
        })
    };
    measure_proto(
        "select_secondary",
        &mut shard,
        prefixes.iter().map(|key| select_customers(key)).collect(),
    );
    measure_crud(
        "select_secondary",
        &mut shard,
        prefixes
            .iter()
            .map(|key| crud_select_ge("customers", "composite", key))
            .collect(),
    );

    // replace (existing keys)
    let ids = existing(&mut rng);
    let (warmup, timed) = split(ids.iter().map(|&id| kv_tuple(id)).collect());
    measure("operations/replace_raw", &warmup, &timed, |tuple| {
        black_box(shard.engine.space_mut(KV).unwrap().replace(tuple).unwrap());
    });
    measure_proto(
        "replace",
        &mut shard,
        ids.iter()
            .map(|&id| packet(&|out| client::encode_replace(out, 1, KV, &kv_tuple(id))))
            .collect(),
    );
    measure_crud(
        "replace",
        &mut shard,
        ids.iter()
            .map(|&id| crud_call("replace", &[&crud_tuple(id)]))
            .collect(),
    );

    // update: + on bucket_id
    let ops = plus_one();
    let ids = existing(&mut rng);
    let (warmup, timed) = split(ids.iter().map(|&id| key(id)).collect());
    measure("operations/update_raw", &warmup, &timed, |key| {
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
    let crud_ops = crud_plus_one();
    measure_crud(
        "update",
        &mut shard,
        ids.iter()
            .map(|&id| crud_call("update", &[&uint(id), &crud_ops]))
            .collect(),
    );

    // upsert (existing keys: the ops apply)
    let ids = existing(&mut rng);
    let (warmup, timed) = split(ids.iter().map(|&id| kv_tuple(id)).collect());
    measure("operations/upsert_raw", &warmup, &timed, |tuple| {
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
    measure_crud(
        "upsert",
        &mut shard,
        ids.iter()
            .map(|&id| crud_call("upsert", &[&crud_tuple(id), &crud_ops]))
            .collect(),
    );

    // insert (new keys), then delete exactly those keys
    let raw_ids: Vec<u64> = (tuples..tuples + total as u64).collect();
    let proto_ids: Vec<u64> = (tuples + total as u64..tuples + 2 * total as u64).collect();
    let crud_ids: Vec<u64> = (tuples + 2 * total as u64..tuples + 3 * total as u64).collect();
    let (warmup, timed) = split(raw_ids.iter().map(|&id| kv_tuple(id)).collect());
    measure("operations/insert_raw", &warmup, &timed, |tuple| {
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
    measure_crud(
        "insert",
        &mut shard,
        crud_ids
            .iter()
            .map(|&id| crud_call("insert", &[&crud_tuple(id)]))
            .collect(),
    );
    let (warmup, timed) = split(raw_ids.iter().map(|&id| key(id)).collect());
    measure("operations/delete_raw", &warmup, &timed, |key| {
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
    measure_crud(
        "delete",
        &mut shard,
        crud_ids
            .iter()
            .map(|&id| crud_call("delete", &[&uint(id)]))
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
    measure(
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
    measure(
        "operations/batch10_proto",
        &warmup,
        &timed,
        |packets: &Vec<u8>| {
            out.clear();
            let mut rest = &packets[..];
            while let Ok(Some((packet, used))) = tarn::protocol::frame::split_frame(rest) {
                let (header, request) = decode_packet(packet).expect("decodes");
                let _executed = shard.execute(header.sync, 1, &request, None, &mut out);
                rest = &rest[used..];
            }
            black_box(&out);
        },
    );
    measure_crud(
        "replace_many10",
        &mut shard,
        batches
            .iter()
            .map(|ids| {
                let mut list = Vec::new();
                write_array_len(&mut list, ids.len() as u32);
                for &id in ids {
                    list.extend_from_slice(&crud_tuple(id));
                }
                crud_call("replace_many", &[&list])
            })
            .collect(),
    );
}
