//! A global allocator that counts allocation calls per thread, for the tests that pin how
//! many a request costs. A test binary installs it with
//! `#[global_allocator] static GLOBAL: CountingAllocator = CountingAllocator;`.
//!
//! A thread counts into slot 0 until it registers a slot of its own; counters are atomics,
//! so that one core can read another's at the edges of a window it alone delimits.
//! Reallocations count as allocations: each may move the block.

#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

pub struct CountingAllocator;

static COUNTERS: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];

thread_local! {
    static SLOT: Cell<usize> = const { Cell::new(0) };
}

fn count_one() {
    // During thread teardown the slot may be gone; count those in slot 0.
    let slot = SLOT.try_with(Cell::get).unwrap_or(0);
    COUNTERS[slot].fetch_add(1, Ordering::Relaxed);
}

/// Counts this thread's allocations in its own `slot` (1..8) from now on.
pub fn register_counter(slot: usize) {
    assert!(slot > 0 && slot < COUNTERS.len());
    SLOT.with(|current| current.set(slot));
}

/// Allocations made so far by the thread registered in `slot`.
pub fn allocations_in(slot: usize) -> u64 {
    COUNTERS[slot].load(Ordering::Relaxed)
}

/// Allocations made so far by this thread (by every unregistered thread, if it is one).
pub fn allocations() -> u64 {
    allocations_in(SLOT.with(Cell::get))
}

// SAFETY: every call is forwarded to `System` unchanged; the counters only observe.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        System.realloc(ptr, layout, new_size)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}
