//! A global allocator that counts heap allocations, shared by the tests that pin how many a
//! request costs (`tests/request_path_allocations.rs`, `tests/crud_allocations.rs`), the
//! benchmarks (`benches/common`) and `perf-simple-query` (its `allocs/op` column). A binary
//! installs it with `#[global_allocator] static GLOBAL: CountingAllocator =
//! CountingAllocator::CALLS;` (or [`CountingAllocator::CALLS_AND_BYTES`] where it reads the
//! byte totals too).
//!
//! Counting bytes costs two more atomic adds per allocation and one per free: on
//! perf-simple-query's replace loop (one allocation and one free per request) that was 6-11%
//! of its throughput, so what only the benchmarks read is counted only where they ask.
//!
//! Owns: the counters and the forwarding to `System`. Must not know: anything of tarn; no
//! other module uses it at run time.
//!
//! Each thread counts into a slot: slot 0 (shared) until it registers one of its own with
//! [`register_counter`], or, once [`give_each_thread_its_own_slot`] was called (for a
//! process whose threads it does not spawn itself), a slot of its own from its next
//! allocation on. A slot is a cache line of atomics, so
//! executors on different cores do not share a line, and one core can read another's slot
//! at the edges of a window it alone delimits. Reallocations count as allocations: each may
//! move the block. Deallocations only lower the live bytes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};

/// How many slots there are (slot 0 included).
pub const SLOT_COUNT: usize = 64;

pub struct CountingAllocator {
    /// Whether [`allocated_bytes_total`] and [`live_bytes_total`] are kept (else they stay 0).
    count_bytes: bool,
}

impl CountingAllocator {
    /// Counts allocation calls only.
    pub const CALLS: CountingAllocator = CountingAllocator { count_bytes: false };
    /// Counts allocation calls, bytes allocated and bytes live.
    pub const CALLS_AND_BYTES: CountingAllocator = CountingAllocator { count_bytes: true };

    #[inline]
    fn count_allocation(&self, size_bytes: usize) {
        let slot = my_slot();
        slot.calls.fetch_add(1, Relaxed);
        if self.count_bytes {
            slot.bytes.fetch_add(size_bytes as u64, Relaxed);
            slot.live_bytes.fetch_add(size_bytes as i64, Relaxed);
        }
    }

    #[inline]
    fn count_free(&self, size_bytes: usize) {
        if self.count_bytes {
            my_slot().live_bytes.fetch_sub(size_bytes as i64, Relaxed);
        }
    }
}

#[repr(align(128))]
struct CounterSlot {
    calls: AtomicU64,
    bytes: AtomicU64,
    live_bytes: AtomicI64,
}

static SLOTS: [CounterSlot; SLOT_COUNT] = [const {
    CounterSlot {
        calls: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        live_bytes: AtomicI64::new(0),
    }
}; SLOT_COUNT];
static NEXT_OWN_SLOT: AtomicUsize = AtomicUsize::new(0);
static EACH_THREAD_ITS_OWN_SLOT: AtomicBool = AtomicBool::new(false);

thread_local! {
    static MY_SLOT: Cell<usize> = const { Cell::new(0) };
}

fn my_slot() -> &'static CounterSlot {
    // During thread teardown the local may be gone; count those in slot 0.
    let slot = MY_SLOT
        .try_with(|slot| {
            if slot.get() == 0 && EACH_THREAD_ITS_OWN_SLOT.load(Relaxed) {
                slot.set(1 + NEXT_OWN_SLOT.fetch_add(1, Relaxed) % (SLOT_COUNT - 1));
            }
            slot.get()
        })
        .unwrap_or(0);
    &SLOTS[slot]
}

/// Counts this thread's allocations in its own `slot` (1..[`SLOT_COUNT`]) from now on.
pub fn register_counter(slot: usize) {
    assert!(slot > 0 && slot < SLOT_COUNT);
    MY_SLOT.with(|current| current.set(slot));
}

/// From now on, every thread not yet registered takes a slot of its own at its next
/// allocation (the next free one; past [`SLOT_COUNT`] threads, slots are shared).
pub fn give_each_thread_its_own_slot() {
    EACH_THREAD_ITS_OWN_SLOT.store(true, Relaxed);
}

/// Allocations made so far by the thread registered in `slot`.
pub fn allocations_in(slot: usize) -> u64 {
    SLOTS[slot].calls.load(Relaxed)
}

/// Allocations made so far by this thread (by every unregistered thread, if it is one).
pub fn allocations() -> u64 {
    allocations_in(MY_SLOT.with(Cell::get))
}

/// Allocations made so far by all threads.
pub fn allocations_total() -> u64 {
    SLOTS.iter().map(|slot| slot.calls.load(Relaxed)).sum()
}

/// Bytes requested so far by all threads' allocations (a reallocation counts its new size).
pub fn allocated_bytes_total() -> u64 {
    SLOTS.iter().map(|slot| slot.bytes.load(Relaxed)).sum()
}

/// Bytes allocated and not yet freed, all threads.
pub fn live_bytes_total() -> i64 {
    SLOTS.iter().map(|slot| slot.live_bytes.load(Relaxed)).sum()
}

// SAFETY: every method forwards to `System` unchanged, with the caller's arguments and so
// under the caller's guarantees; the counters only observe sizes and touch no allocation.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.count_allocation(layout.size());
        // SAFETY: forwarded; the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.count_allocation(layout.size());
        // SAFETY: forwarded; the caller upholds `GlobalAlloc::alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.count_allocation(new_size);
        self.count_free(layout.size());
        // SAFETY: forwarded; the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.count_free(layout.size());
        // SAFETY: forwarded; the caller upholds `GlobalAlloc::dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}
