//! Heap allocations of crud point calls on the shard that owns the key, counted exactly by
//! a counting global allocator (a slot per test: the tests of this file run in parallel).
//!
//! * `crud.get` allocates nothing beyond the reply, which goes into a buffer the caller
//!   owns and reuses: found or not, key scalar or array, through `plan_and_run` (a
//!   one-shard server, the owner of a forwarded call) or `plan` + `run` (the
//!   accepting core running it locally).
//! * `crud.delete` allocates nothing either; nor do `crud.update`, `crud.upsert` and
//!   `crud.replace`, whose one allocation is the stored tuple, as an IPROTO write's is, and
//!   that takes a slot of its space's slab (the slot the tuple it displaces gave back),
//!   not the heap; whether or not the caller sent `bucket_id` (a nil one is filled in a
//!   per-thread buffer kept from call to call). Before the slab each was one malloc.
//!
//! No timing anywhere: only counts.

use tarn::config::{Config, SHIPPED_CONFIG_TOML};
use tarn::counting_allocator::{allocations, register_counter, CountingAllocator};
use tarn::crud::{self, CrudConfig};
use tarn::msgpack::{write_array_len, write_str, write_uint};
use tarn::protocol::client;
use tarn::protocol::request::Request;
use tarn::server::schema;
use tarn::shard::Shard;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator::CALLS;

/// Counter slots: the tests of this file run in parallel threads of one process.
const GET_SLOT: usize = 1;
const WRITES_SLOT: usize = 2;

const KV_SPACE_ID: u32 = 512;
const KEYS: u64 = 1000;
const CALLS: u64 = 500;

fn kv_tuple(id: u64, bucket_id: Option<u64>) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_len(&mut out, 3);
    write_uint(&mut out, id);
    match bucket_id {
        Some(bucket_id) => write_uint(&mut out, bucket_id),
        None => out.push(0xc0),
    }
    write_str(&mut out, format!("value-{id:06}").as_bytes());
    out
}

/// The shipped spaces, `kv` holding keys `0..KEYS`; no WAL.
fn loaded_shard() -> Shard {
    let config = Config::from_toml_str(SHIPPED_CONFIG_TOML).expect("shipped config");
    let mut engine = schema::build_engine(&config, u64::MAX / 2).expect("engine");
    let tuples: Vec<Vec<u8>> = (0..KEYS).map(|id| kv_tuple(id, Some(id % 3000))).collect();
    engine
        .space_mut(KV_SPACE_ID)
        .expect("kv")
        .bulk_load(tuples.iter().map(Vec::as_slice))
        .expect("load");
    Shard::new(0, engine, None)
}

fn crud_config() -> CrudConfig {
    CrudConfig::for_instance(3000, "aaaaaaaa-0000-4000-8000-000000000001")
}

/// A `crud.<function>` CALL packet (without its size prefix) with args
/// `["kv", <values>..., {}]`, as the Python connector sends them.
fn crud_call(function: &str, values: &[&[u8]]) -> Vec<u8> {
    let mut args = Vec::new();
    write_array_len(&mut args, values.len() as u32 + 2);
    write_str(&mut args, b"kv");
    for value in values {
        args.extend_from_slice(value);
    }
    args.push(0x80);
    let mut framed = Vec::new();
    client::encode_call(&mut framed, 7, &format!("crud.{function}"), &args);
    framed.split_off(5)
}

fn uint(value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    write_uint(&mut out, value);
    out
}

fn array_key(id: u64) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_len(&mut out, 1);
    write_uint(&mut out, id);
    out
}

/// How the call reaches the shard.
#[derive(Clone, Copy, Debug)]
enum Path {
    /// `crud::plan_and_run`: plans and runs in one go.
    ExecuteOnShard,
    /// `crud::plan`, then `crud::run`: the accepting core's local run.
    PlanThenRun,
}

fn run(shard: &mut Shard, config: &CrudConfig, path: Path, packet: &[u8], out: &mut Vec<u8>) {
    // Decoded as the server decodes it: crud calls in one pass.
    let (header, request) =
        tarn::protocol::crud_call::decode_packet(packet).expect("a CALL packet");
    let Request::Call(call) = request else {
        panic!("not a CALL")
    };
    // No WAL here: nothing to wait for.
    let _ran = match path {
        Path::ExecuteOnShard => crud::plan_and_run(
            shard,
            config,
            header.sync,
            1,
            call.function_name,
            call.args,
            out,
        ),
        Path::PlanThenRun => {
            let plan =
                crud::plan(&shard.engine, config, call.function_name, call.args).expect("a plan");
            let work = crud::Work::Call {
                plan: &plan,
                sync: header.sync,
                schema_version: 1,
                out,
            };
            crud::run(shard, config, work)
        }
    };
}

/// Allocations per call, over `packets` run twice: the first round warms up what is
/// kept (the reply buffer's capacity, the per-space metadata), the second is counted.
fn allocations_per_call(path: Path, packets: &[Vec<u8>]) -> f64 {
    let mut shard = loaded_shard();
    let config = crud_config();
    let mut out = Vec::with_capacity(4096);
    for packet in packets {
        out.clear();
        run(&mut shard, &config, path, packet, &mut out);
    }
    let before = allocations();
    for packet in packets {
        out.clear();
        run(&mut shard, &config, path, packet, &mut out);
        assert!(out.len() > 20, "a reply");
    }
    (allocations() - before) as f64 / packets.len() as f64
}

#[test]
fn crud_get_allocates_nothing_beyond_the_reply() {
    register_counter(GET_SLOT);
    let scalar: Vec<Vec<u8>> = (0..CALLS)
        .map(|id| crud_call("get", &[&uint(id * 7 % KEYS)]))
        .collect();
    let array: Vec<Vec<u8>> = (0..CALLS)
        .map(|id| crud_call("get", &[&array_key(id * 7 % KEYS)]))
        .collect();
    let missing: Vec<Vec<u8>> = (0..CALLS)
        .map(|id| crud_call("get", &[&uint(KEYS + id)]))
        .collect();
    for path in [Path::ExecuteOnShard, Path::PlanThenRun] {
        for (keys, packets) in [
            ("scalar", &scalar),
            ("array", &array),
            ("missing", &missing),
        ] {
            assert_eq!(
                allocations_per_call(path, packets),
                0.0,
                "crud.get, {keys} keys, {path:?}"
            );
        }
    }
}

#[test]
fn crud_writes_allocate_the_stored_tuple_only() {
    // The stored tuple is the one allocation of a write, in its space's slab: none of the
    // heap's. (1.0 per write when tuples were malloc'd.)
    register_counter(WRITES_SLOT);
    let cases: [(&str, Vec<Vec<u8>>, f64); 5] = [
        (
            // Deleting keys that are gone after the warm-up round.
            "delete",
            (0..CALLS)
                .map(|id| crud_call("delete", &[&uint(id)]))
                .collect(),
            0.0,
        ),
        (
            "update",
            (0..CALLS)
                .map(|id| {
                    crud_call(
                        "update",
                        &[&uint(id), &[0x91, 0x93, 0xa1, b'+', 0x02, 0x01]],
                    )
                })
                .collect(),
            0.0,
        ),
        (
            "replace, bucket_id nil",
            (0..CALLS)
                .map(|id| crud_call("replace", &[&kv_tuple(id, None)]))
                .collect(),
            0.0,
        ),
        (
            "upsert, bucket_id nil",
            (0..CALLS)
                .map(|id| {
                    crud_call(
                        "upsert",
                        &[&kv_tuple(id, None), &[0x91, 0x93, 0xa1, b'+', 0x02, 0x01]],
                    )
                })
                .collect(),
            0.0,
        ),
        (
            "replace, bucket_id sent",
            (0..CALLS)
                .map(|id| crud_call("replace", &[&kv_tuple(id, Some(id % 3000 + 1))]))
                .collect(),
            0.0,
        ),
    ];
    for (name, packets, expected) in cases {
        for path in [Path::ExecuteOnShard, Path::PlanThenRun] {
            assert_eq!(
                allocations_per_call(path, &packets),
                expected,
                "crud.{name}, {path:?}"
            );
        }
    }
}
