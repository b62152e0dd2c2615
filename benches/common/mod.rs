//! Shared by the benchmarks: a counting global allocator and the measuring loop that
//! prints one row per operation (`name  ns/op  op/s  B/op  allocs/op`).

#![allow(dead_code)]

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::Instant;

struct CountingAllocator;

static ALLOCATION_CALLS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED_BYTES: AtomicU64 = AtomicU64::new(0);
pub static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is forwarded to `System` unchanged; the counters only observe.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATION_CALLS.fetch_add(1, Relaxed);
        ALLOCATED_BYTES.fetch_add(layout.size() as u64, Relaxed);
        LIVE_BYTES.fetch_add(layout.size() as i64, Relaxed);
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATION_CALLS.fetch_add(1, Relaxed);
        ALLOCATED_BYTES.fetch_add(layout.size() as u64, Relaxed);
        LIVE_BYTES.fetch_add(layout.size() as i64, Relaxed);
        System.alloc_zeroed(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as i64, Relaxed);
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATION_CALLS.fetch_add(1, Relaxed);
        ALLOCATED_BYTES.fetch_add(new_size as u64, Relaxed);
        LIVE_BYTES.fetch_add(new_size as i64 - layout.size() as i64, Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

#[derive(Clone, Copy)]
pub struct Counters {
    pub calls: u64,
    pub bytes: u64,
}

pub fn counters() -> Counters {
    Counters {
        calls: ALLOCATION_CALLS.load(Relaxed),
        bytes: ALLOCATED_BYTES.load(Relaxed),
    }
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
