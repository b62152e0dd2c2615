//! Cache prefetch hints: the one place the storage core asks the CPU to start a load it
//! will need later, so that a known-coming cache miss overlaps other work.
//!
//! A hint has no effect on the program's meaning; on targets without one it does nothing.

const CACHE_LINE_BYTES: usize = 64;

/// Starts fetching the cache line holding `address`; any address is allowed, even one
/// outside every object.
#[inline(always)]
pub fn prefetch_line(address: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint with no architectural effect: it reads nothing into the
    // program and cannot fault, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(address.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

/// Starts fetching every cache line of `items`.
#[inline(always)]
pub fn prefetch_slice<T>(items: &[T]) {
    let start = items.as_ptr().cast::<u8>();
    for offset in (0..std::mem::size_of_val(items)).step_by(CACHE_LINE_BYTES) {
        prefetch_line(start.wrapping_add(offset));
    }
}
