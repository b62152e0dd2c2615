//! Shared by the benchmarks: the counting global allocator (`tarn::counting_allocator`)
//! and the measuring loop that prints one row per operation
//! (`name  ns/op  op/s  B/op  allocs/op`).

#![allow(dead_code)]

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::time::Instant;
use tarn::counting_allocator::{
    allocated_bytes_total, allocations_total, live_bytes_total, CountingAllocator,
};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator::CALLS_AND_BYTES;

#[derive(Clone, Copy)]
pub struct Counters {
    pub calls: u64,
    pub bytes: u64,
}

pub fn counters() -> Counters {
    Counters {
        calls: allocations_total(),
        bytes: allocated_bytes_total(),
    }
}

/// Bytes allocated and not yet freed, all threads.
pub fn live_bytes() -> i64 {
    live_bytes_total()
}

/// The process's resident set (VmRSS in /proc/self/status), in bytes; 0 where it is not
/// reported.
pub fn rss_bytes() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<i64>()
                .ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// Runs `op` on each warm-up input untimed, then on each timed input, and prints one row.
pub fn measure<T>(name: &str, warmup: &[T], timed: &[T], mut op: impl FnMut(&T)) {
    for input in warmup {
        op(input);
    }
    let before = counters();
    let start = Instant::now();
    for input in timed {
        op(input);
    }
    let elapsed = start.elapsed();
    let after = counters();
    let count = timed.len() as f64;
    let ns_per_op = elapsed.as_nanos() as f64 / count;
    println!(
        "{:<28} {:>8.1} ns/op {:>10.0} op/s {:>6.0} B/op {:>6.2} allocs/op",
        name,
        ns_per_op,
        1e9 / ns_per_op,
        (after.bytes - before.bytes) as f64 / count,
        (after.calls - before.calls) as f64 / count,
    );
}

/// Nanoseconds of one load whose address depends on the load before, each to a random cache
/// line of a buffer eight times the size of this machine's last-level cache: the time of one
/// cache miss to memory, page walk included, as the operations above meet it. A lookup in a
/// large index is a short chain of such misses, so its ns/op reads best in these units;
/// the absolute figure drifts with the load on the host, the ratio much less.
pub fn memory_latency_ns() -> f64 {
    const LINE_WORDS: usize = 64 / std::mem::size_of::<u64>();
    const BUFFER_BYTES: usize = 256 << 20;
    const LOADS: usize = 2_000_000;
    let line_count = BUFFER_BYTES / 64;
    // Every line in a shuffled order, each pointing at the next and the last at the first:
    // the prefetchers cannot guess the next line, and no line is visited twice before all are.
    let mut order: Vec<u64> = (0..line_count as u64).collect();
    order.shuffle(&mut StdRng::seed_from_u64(0x9E37_79B9));
    let mut lines = vec![0u64; line_count * LINE_WORDS];
    for (position, &line) in order.iter().enumerate() {
        let next = order[(position + 1) % line_count];
        lines[line as usize * LINE_WORDS] = next * LINE_WORDS as u64;
    }
    drop(order);
    let mut at = 0u64;
    for _ in 0..LOADS / 4 {
        at = lines[at as usize];
    }
    let start = Instant::now();
    for _ in 0..LOADS {
        at = lines[at as usize];
    }
    let elapsed = start.elapsed();
    std::hint::black_box(at);
    elapsed.as_nanos() as f64 / LOADS as f64
}

/// Prints the reference row of [`memory_latency_ns`].
pub fn print_memory_latency() {
    let latency_ns = memory_latency_ns();
    println!(
        "{:<28} {:>8.1} ns/op (one dependent cache miss to memory: the unit of a lookup)",
        "reference/memory_latency", latency_ns
    );
}
