//! Shared by the benchmarks: a counting global allocator and the measuring loop that
//! prints one row per operation (`name  ns/op  op/s  B/op  allocs/op`).

#![allow(dead_code)]

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
