//! Storage benchmarks: one row per operation on a loaded space, with time and allocations.
//!
//! `cargo bench --bench storage` loads 1,000,000 tuples per space; `-- --quick` loads
//! 100,000 and runs fewer iterations; `-- --only A,B` runs only the rows whose name ends
//! in A or B (delete runs only with insert, whose keys it removes), so a profile holds them
//! alone. Every request (keys, tuples, ops) is generated from a
//! fixed-seed RNG and msgpack-encoded before the timed loop, into one buffer read in order,
//! so the loop measures the space alone. Each operation runs a warm-up on its own inputs,
//! then the timed iterations.
//!
//! Spaces:
//! * `kv`: `[id unsigned, bucket_id unsigned, value string(100)]`, primary TREE on `id`.
//! * `customers`: `[id, region, city, segment, tier (unsigned), name string]`, primary TREE
//!   on `id` and a non-unique TREE on `(region, city, segment, tier, name)`; 10 * 10 * 10 * 100
//!   = 100,000 distinct 4-part prefixes, about 10 rows each at 1,000,000 rows.
//!
//! A counting global allocator (this binary only) reports allocation calls and bytes per
//! operation (a tuple's slot in its space's slab is not one: the slab's regions come from
//! the kernel). Memory per tuple is reported twice: what the space holds after a bulk load
//! (its slab's pages and its index's nodes, `Space::memory`, what the quota counts), and
//! the growth of the process's RSS while tuples are replaced one by one.

mod common;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::hint::black_box;
use std::rc::Rc;
use std::time::Instant;
use tarn::msgpack;
use tarn::storage::change::RetiredTuples;
use tarn::storage::Change;
use tarn::storage::{
    FieldDef, FieldType, IndexDef, KeyPart, MemoryQuota, Space, SpaceDef, SpaceFormat,
};

struct Config {
    tuple_count: u64,
    iterations: usize,
    warmup_iterations: usize,
}

impl Config {
    fn from_args() -> Config {
        if std::env::args().any(|arg| arg == "--quick") {
            Config {
                tuple_count: 100_000,
                iterations: 20_000,
                warmup_iterations: 2_000,
            }
        } else {
            Config {
                tuple_count: 1_000_000,
                iterations: 200_000,
                warmup_iterations: 20_000,
            }
        }
    }
}

/// Whether `-- --only A,B` leaves the row `name` in.
fn selected(name: &str) -> bool {
    let only = std::env::args().skip_while(|arg| arg != "--only").nth(1);
    only.is_none_or(|only| only.split(',').any(|text| name.ends_with(text)))
}

/// Runs `op` on the warm-up inputs, then times it on the others, and prints one row,
/// unless `--only` leaves the row out.
///
/// The inputs are first packed into one buffer, in order, so the timed loop reads them
/// sequentially, as a server reads requests from its socket buffer. Left in an allocation
/// each, they are scattered over the heap and every read of an input is a cache miss of
/// the harness's own, charged to the operation.
fn measure(name: &str, warmup: &[Vec<u8>], timed: &[Vec<u8>], mut op: impl FnMut(&[u8])) {
    if !selected(name) {
        return;
    }
    let warmup_bytes = warmup.concat();
    let timed_bytes = timed.concat();
    let warmup = slices(&warmup_bytes, warmup);
    let timed = slices(&timed_bytes, timed);
    common::measure(&format!("storage/{name}"), &warmup, &timed, |input| {
        op(input)
    });
}

/// Slices of `packed` (the concatenation of `inputs`) holding each input.
fn slices<'a>(packed: &'a [u8], inputs: &[Vec<u8>]) -> Vec<&'a [u8]> {
    let mut start = 0;
    inputs
        .iter()
        .map(|input| {
            let slice = &packed[start..start + input.len()];
            start += input.len();
            slice
        })
        .collect()
}

/// Writes one msgpack item into a buffer.
type WriteItem<'a> = &'a dyn Fn(&mut Vec<u8>);

/// A msgpack array of the items the writers produce.
fn array(items: &[WriteItem<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    msgpack::write_array_len(&mut out, items.len() as u32);
    for item in items {
        item(&mut out);
    }
    out
}

fn uint_key(id: u64) -> Vec<u8> {
    array(&[&|o| msgpack::write_uint(o, id)])
}

fn kv_space() -> Space {
    let def = SpaceDef {
        id: 512,
        name: "kv".into(),
        format: SpaceFormat::new(vec![
            FieldDef::new("id", FieldType::Unsigned),
            FieldDef::new("bucket_id", FieldType::Unsigned),
            FieldDef::new("value", FieldType::String),
        ]),
        indexes: vec![IndexDef::tree(
            0,
            "primary",
            true,
            vec![KeyPart::new(0, FieldType::Unsigned)],
        )],
        is_sync: false,
    };
    Space::new(def, Rc::new(MemoryQuota::unlimited())).expect("valid kv space")
}

fn kv_tuple(id: u64, rng: &mut StdRng) -> Vec<u8> {
    let bucket_id: u64 = rng.gen_range(0..30_000);
    let value: Vec<u8> = (0..100).map(|_| rng.gen_range(b'a'..=b'z')).collect();
    array(&[
        &|o| msgpack::write_uint(o, id),
        &|o| msgpack::write_uint(o, bucket_id),
        &|o| msgpack::write_str(o, &value),
    ])
}

fn customers_space() -> Space {
    let def = SpaceDef {
        id: 513,
        name: "customers".into(),
        format: SpaceFormat::new(vec![
            FieldDef::new("id", FieldType::Unsigned),
            FieldDef::new("region", FieldType::Unsigned),
            FieldDef::new("city", FieldType::Unsigned),
            FieldDef::new("segment", FieldType::Unsigned),
            FieldDef::new("tier", FieldType::Unsigned),
            FieldDef::new("name", FieldType::String),
        ]),
        indexes: vec![
            IndexDef::tree(
                0,
                "primary",
                true,
                vec![KeyPart::new(0, FieldType::Unsigned)],
            ),
            IndexDef::tree(
                1,
                "region_city_segment_tier_name",
                false,
                vec![
                    KeyPart::new(1, FieldType::Unsigned),
                    KeyPart::new(2, FieldType::Unsigned),
                    KeyPart::new(3, FieldType::Unsigned),
                    KeyPart::new(4, FieldType::Unsigned),
                    KeyPart::new(5, FieldType::String),
                ],
            ),
        ],
        is_sync: false,
    };
    Space::new(def, Rc::new(MemoryQuota::unlimited())).expect("valid customers space")
}

fn customer_prefix(rng: &mut StdRng) -> [u64; 4] {
    [
        rng.gen_range(0..10),
        rng.gen_range(0..10),
        rng.gen_range(0..10),
        rng.gen_range(0..100),
    ]
}

fn customer_tuple(id: u64, rng: &mut StdRng) -> Vec<u8> {
    let [region, city, segment, tier] = customer_prefix(rng);
    let name = format!("customer-{:08}", rng.gen_range(0..100_000_000u32));
    array(&[
        &|o| msgpack::write_uint(o, id),
        &|o| msgpack::write_uint(o, region),
        &|o| msgpack::write_uint(o, city),
        &|o| msgpack::write_uint(o, segment),
        &|o| msgpack::write_uint(o, tier),
        &|o| msgpack::write_str(o, name.as_bytes()),
    ])
}

/// The growth of the process's RSS per tuple while `tuples` are replaced one by one into a
/// fresh kv space, in key order and then (into another) in a random order: what the
/// server holds for them, slab pages and index node slack included. Both spaces live until
/// both are measured: memory the first freed would be reused by the second without
/// showing in RSS.
fn rss_per_inserted_tuple(tuples: &[Vec<u8>]) -> (f64, f64) {
    let mut order: Vec<usize> = (0..tuples.len()).collect();
    let fill = |order: &[usize]| {
        let before = common::rss_bytes();
        let mut space = kv_space();
        for &position in order {
            black_box(space.replace(&tuples[position]).expect("replace"));
        }
        let grown = common::rss_bytes() - before;
        (grown as f64 / tuples.len() as f64, space)
    };
    let (ascending, first) = fill(&order);
    let mut rng = StdRng::seed_from_u64(0x5eed);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.gen_range(0..=i));
    }
    let (random, second) = fill(&order);
    drop((first, second));
    (ascending, random)
}

fn main() {
    // As the server runs: with its heap on huge pages where the kernel offers them.
    tarn::server::os::heap::restart_with_huge_pages();
    tarn::server::os::heap::tuple_regions_from_the_kernel();
    let config = Config::from_args();
    let n = config.tuple_count;
    let total = config.warmup_iterations + config.iterations;
    let mut rng = StdRng::seed_from_u64(0x7a42);
    println!(
        "# {} tuples per space, {} warm-up + {} timed iterations per op",
        n, config.warmup_iterations, config.iterations
    );
    if selected("memory_latency") {
        common::print_memory_latency();
    }

    // kv: load, and measure what the loaded tuples cost.
    let tuples: Vec<Vec<u8>> = (0..n).map(|id| kv_tuple(id, &mut rng)).collect();
    let rss_inserted = selected("memory_rss").then(|| rss_per_inserted_tuple(&tuples));
    let mut kv = kv_space();
    let load_start = Instant::now();
    kv.bulk_load(tuples.iter().map(Vec::as_slice))
        .expect("kv loads");
    let load_elapsed = load_start.elapsed();
    let loaded = kv.memory();
    drop(tuples);
    assert_eq!(kv.len() as u64, n);

    let split = |inputs: Vec<Vec<u8>>| {
        let mut inputs = inputs;
        let timed = inputs.split_off(config.warmup_iterations);
        (inputs, timed)
    };
    let existing_keys =
        |rng: &mut StdRng| split((0..total).map(|_| uint_key(rng.gen_range(0..n))).collect());

    let (warmup, timed) = existing_keys(&mut rng);
    measure("get", &warmup, &timed, |key| {
        black_box(kv.get(0, key).expect("get").expect("present"));
    });

    // New keys above every loaded id; delete removes exactly these later.
    let new_ids: Vec<u64> = (n..n + total as u64).collect();
    let (warmup, timed) = split(new_ids.iter().map(|&id| kv_tuple(id, &mut rng)).collect());
    // Displaced tuples are freed a few writes later, as the server's shard does.
    let mut retired = RetiredTuples::default();
    let mut keep = |change: Change| {
        if let Some(old) = change.old {
            retired.retire(old);
        }
        change.new
    };
    measure("insert", &warmup, &timed, |tuple| {
        black_box(keep(kv.insert(tuple).expect("insert")));
    });

    let (warmup, timed) = split(
        (0..total)
            .map(|_| kv_tuple(rng.gen_range(0..n), &mut rng))
            .collect(),
    );
    measure("replace", &warmup, &timed, |tuple| {
        black_box(keep(kv.replace(tuple).expect("replace")));
    });

    let plus_one = array(&[&|o| {
        msgpack::write_array_len(o, 3);
        msgpack::write_str(o, b"+");
        msgpack::write_uint(o, 1);
        msgpack::write_uint(o, 1);
    }]);
    let (warmup, timed) = existing_keys(&mut rng);
    measure("update", &warmup, &timed, |key| {
        black_box(keep(kv.update(0, key, &plus_one, 0).expect("update")));
    });

    let (warmup, timed) = split(
        (0..total)
            .map(|_| kv_tuple(rng.gen_range(0..n), &mut rng))
            .collect(),
    );
    measure("upsert", &warmup, &timed, |tuple| {
        black_box(keep(kv.upsert_stored(tuple, &plus_one, 0).expect("upsert")));
    });

    let (warmup, timed) = split(new_ids.iter().map(|&id| uint_key(id)).collect());
    if selected("insert") {
        measure("delete", &warmup, &timed, |key| {
            black_box(kv.delete(0, key).expect("delete").old.expect("present"));
        });
    }
    if selected("insert") && selected("delete") {
        assert_eq!(kv.len() as u64, n);
    }
    let (warmup, timed) = existing_keys(&mut rng);
    measure("select_ge_limit10", &warmup, &timed, |key| {
        let iter = kv.select(0, 5, key).expect("select");
        for entry in iter.take(10) {
            black_box(entry);
        }
    });

    // customers: a 5-part non-unique secondary, searched by a 4-part prefix.
    let tuples: Vec<Vec<u8>> = (0..n).map(|id| customer_tuple(id, &mut rng)).collect();
    let mut customers = customers_space();
    let load_start = Instant::now();
    customers
        .bulk_load(tuples.iter().map(Vec::as_slice))
        .expect("customers load");
    println!(
        "# customers bulk_load (primary + 5-part secondary, unsorted keys): {:.2} s for {} tuples",
        load_start.elapsed().as_secs_f64(),
        n
    );
    drop(tuples);
    let (warmup, timed) = split(
        (0..total)
            .map(|_| {
                let [region, city, segment, tier] = customer_prefix(&mut rng);
                array(&[
                    &|o| msgpack::write_uint(o, region),
                    &|o| msgpack::write_uint(o, city),
                    &|o| msgpack::write_uint(o, segment),
                    &|o| msgpack::write_uint(o, tier),
                ])
            })
            .collect(),
    );
    let mut found = 0usize;
    measure("select_eq4_limit10", &warmup, &timed, |key| {
        let iter = customers.select(1, 0, key).expect("select");
        for entry in iter.take(10) {
            black_box(entry);
            found += 1;
        }
    });
    let tuple_count = total as f64;
    println!(
        "# select_eq4_limit10 returned {:.1} tuples per call on average",
        found as f64 / tuple_count
    );

    let loaded_index: usize = loaded.index_bytes.iter().map(|(_, bytes)| bytes).sum();
    println!(
        "memory per tuple: {:.1} bytes ({:.1} slab pages + {:.1} index nodes, what the quota \
         counts), kv space, {} tuples, bulk_load {:.2} s",
        (loaded.tuple_bytes + loaded_index) as f64 / n as f64,
        loaded.tuple_bytes as f64 / n as f64,
        loaded_index as f64 / n as f64,
        n,
        load_elapsed.as_secs_f64()
    );
    if let Some((ascending, random)) = rss_inserted {
        println!(
            "RSS per tuple: {ascending:.1} bytes inserting {n} kv tuples one by one in key order, \
             {random:.1} in random order (growth of VmRSS; slab pages, index nodes and their slack)"
        );
    }
    let memory = kv.memory();
    let index_bytes: usize = memory.index_bytes.iter().map(|(_, bytes)| bytes).sum();
    println!(
        "space.memory() per tuple: {:.1} bytes ({:.1} tuple + {:.1} index), after the ops above",
        (memory.tuple_bytes + index_bytes) as f64 / kv.len() as f64,
        memory.tuple_bytes as f64 / kv.len() as f64,
        index_bytes as f64 / kv.len() as f64,
    );
}
