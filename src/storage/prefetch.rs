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
    let start_address = start as usize;
    for line_address in touched_lines(start_address, std::mem::size_of_val(items)) {
        prefetch_line(start.wrapping_add(line_address.wrapping_sub(start_address)));
    }
}

/// Starts fetching every cache line of `object`, whose size the compiler knows: a fetch
/// every line's width from its start and one of its last byte, unrolled, where
/// [`prefetch_slice`] loops over lines it works out at run time (a 256-byte array: five
/// prefetches and nothing else, against some thirty instructions).
#[inline(always)]
pub fn prefetch_object<T>(object: &T) {
    let start = (object as *const T).cast::<u8>();
    let size = std::mem::size_of::<T>();
    let mut offset = 0;
    while offset < size {
        prefetch_line(start.wrapping_add(offset));
        offset += CACHE_LINE_BYTES;
    }
    if size > 0 {
        // The line an object that starts mid-line ends in (for an aligned one, a repeat).
        prefetch_line(start.wrapping_add(size - 1));
    }
}

/// The address of each cache line that `len_bytes` bytes from `start_address` touch. Not
/// steps of a line from `start_address`: an object that starts mid-line ends in a line
/// such steps miss (a 35-byte tuple at offset 48 of its line ends 19 bytes into the next).
#[inline(always)]
fn touched_lines(start_address: usize, len_bytes: usize) -> impl Iterator<Item = usize> {
    let first_line = start_address - start_address % CACHE_LINE_BYTES;
    let end = if len_bytes == 0 {
        first_line
    } else {
        start_address + len_bytes
    };
    (first_line..end).step_by(CACHE_LINE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(start_address: usize, len_bytes: usize) -> Vec<usize> {
        touched_lines(start_address, len_bytes).collect()
    }

    #[test]
    fn every_line_an_object_touches_is_fetched() {
        assert_eq!(lines(128, 0), Vec::<usize>::new());
        assert_eq!(lines(130, 0), Vec::<usize>::new());
        assert_eq!(lines(128, 64), vec![128]);
        assert_eq!(lines(128, 65), vec![128, 192]);
        assert_eq!(lines(176, 35), vec![128, 192], "a tuple across two lines");
        assert_eq!(lines(191, 1), vec![128]);
        assert_eq!(lines(191, 2), vec![128, 192]);
        assert_eq!(lines(130, 190), vec![128, 192, 256]);
    }
}
