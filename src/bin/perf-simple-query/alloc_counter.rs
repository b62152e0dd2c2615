//! Counts heap allocations of the whole process (the `allocs/op` column).
//!
//! The global allocator wraps `System` and adds one to a per-thread slot on every `alloc`,
//! `alloc_zeroed` and `realloc`. Slots are cache-line padded atomics, indexed by a
//! thread-local number, so executors on different cores do not share a line; the sampler
//! sums them. With `--connect` this counts the load generator's own allocations only.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const SLOT_COUNT: usize = 64;

#[repr(align(128))]
struct Slot(AtomicU64);

static SLOTS: [Slot; SLOT_COUNT] = [const { Slot(AtomicU64::new(0)) }; SLOT_COUNT];
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static MY_SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn count_one() {
    // `try_with`: during thread teardown the local may be gone; count in slot 0 then.
    let slot = MY_SLOT
        .try_with(|slot| {
            if slot.get() == usize::MAX {
                slot.set(NEXT_SLOT.fetch_add(1, Ordering::Relaxed) % SLOT_COUNT);
            }
            slot.get()
        })
        .unwrap_or(0);
    SLOTS[slot].0.fetch_add(1, Ordering::Relaxed);
}

/// Allocations so far, all threads.
pub fn allocations() -> u64 {
    SLOTS.iter().map(|s| s.0.load(Ordering::Relaxed)).sum()
}

pub struct CountingAllocator;

// SAFETY: every method forwards to `System` unchanged; counting touches no allocation.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        System.alloc_zeroed(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        System.realloc(ptr, layout, new_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_a_box() {
        let before = allocations();
        let boxed = std::hint::black_box(Box::new([7u8; 100]));
        assert!(allocations() > before);
        drop(boxed);
    }
}
