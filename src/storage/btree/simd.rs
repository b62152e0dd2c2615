//! The AVX2 form of [`count_in_blocks`](super::count_in_blocks) for the `u64` separators
//! of internal nodes (leaves search 32-bit hints, which baseline SSE2 compares).
//!
//! The binary is built for baseline x86_64, whose SSE2 has no 64-bit compare, so the
//! scalar count spends most of a lookup's instructions. Fewer instructions per lookup let
//! the out-of-order core hold the next lookup's loads in flight while this one waits on a
//! cache miss. A CPU without AVX2 keeps the scalar count.
//!
//! Only [`BTree::get`](super::BTree::get) uses it, dispatching once per
//! lookup into a copy compiled for AVX2, into which this count is inlined: a check and a
//! call per node cost more than the vector count saved. Measured on the storage bench
//! (Zen 4): 457 → 303 instructions per `get` at 100,000 keys, about a sixth off a `get`
//! at 1,000,000. A gather of the block ends was fewer instructions but slower (its latency
//! sits on the path to the next node); clamping the block ends to `len` rather than
//! reading stale keys cost a hundred instructions per lookup and the gain with them.
//! Writes, and the lookups of writes (`BTree::get_for_write`: delete, update), still count
//! with the scalar loop: the leaf a write looks up is often the one the write before it
//! just changed, and 32-byte loads cannot take their data from the 8-byte stores still in
//! flight. Deleting keys in order with this count (the bench's `delete` row) was 17% slower;
//! with the scalar lookup it is as before.
//!
//! Same two steps as the scalar count, over a node's whole key array rather than the
//! slice in use, so that no load needs a bound: the last key of each 8-key block picks the
//! block where the keys that count end, then the eight keys of that block are counted.
//! Keys past `len` are stale but initialised; counting only the leading run of keys that
//! count (trailing ones of the lane bits) and clamping to `len` makes them harmless.

use std::arch::x86_64::*;

/// Whether this CPU can run [`count`].
#[inline(always)]
pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx2")
}

/// How many of the sorted `keys[..len]` are less than `probe`, or with `OR_EQUAL` less
/// than or equal to it. `keys` is a node's whole key array: its keys from `len` on are
/// stale, and are read but not counted.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn count<const OR_EQUAL: bool, const CAP: usize>(
    keys: &[u64; CAP],
    len: usize,
    probe: u64,
) -> usize {
    const { assert!(CAP >= 8 && CAP <= 64, "one or two vectors of block ends") };
    debug_assert!(len <= CAP);
    // Unsigned order is signed order with the sign bit flipped: AVX2 has only a signed
    // compare.
    let flip = _mm256_set1_epi64x(i64::MIN);
    let probe = _mm256_set1_epi64x((probe ^ (1 << 63)) as i64);
    // All-ones lanes where a key, sign-flipped, stops the run of keys that count.
    let stops = |keys: __m256i| {
        let keys = _mm256_xor_si256(keys, flip);
        if OR_EQUAL {
            _mm256_cmpgt_epi64(keys, probe)
        } else {
            // Below the probe: `run` takes the complement.
            _mm256_cmpgt_epi64(probe, keys)
        }
    };
    // The length of the run of keys that count, from lane bits in key order up to `lanes`.
    let run = |bits: u32, lanes: u32| {
        let stop = if OR_EQUAL { bits } else { !bits };
        (stop | 1 << lanes).trailing_zeros() as usize
    };

    // Step 1: how many blocks end in a key that counts. Lanes past the last block of the
    // array repeat its last key; a block past `len` ends in a stale key, which matters only
    // after every block up to `len` counts, and then the window below is the last eight.
    let end = |block: usize| keys[(block * 8 + 7).min(CAP - 1)] as i64;
    let blocks = if CAP > 32 {
        // Even blocks in one vector, odd in the other: a blend that takes the low half of
        // each even lane and the high half of each odd one puts the lanes in block order,
        // one bit each.
        let even = stops(_mm256_setr_epi64x(end(0), end(2), end(4), end(6)));
        let odd = stops(_mm256_setr_epi64x(end(1), end(3), end(5), end(7)));
        let lanes = _mm256_blend_epi32::<0b1010_1010>(even, odd);
        run(_mm256_movemask_ps(_mm256_castsi256_ps(lanes)) as u32, 8)
    } else {
        let ends = stops(_mm256_setr_epi64x(end(0), end(1), end(2), end(3)));
        run(_mm256_movemask_pd(_mm256_castsi256_pd(ends)) as u32, 4)
    };

    // Step 2: within the first block whose last key does not count, or else within the
    // last eight keys in use (the first eight when `len < 8`). The keys before the window
    // all count; the result is clamped to `len` for the stale ones a short node counts.
    let start = (blocks * 8).min(len.saturating_sub(8));
    let window = &keys[start..start + 8];
    // SAFETY: `window` holds eight keys, two 256-bit loads; `loadu` needs no alignment.
    let (low, high) = unsafe {
        let window = window.as_ptr().cast::<__m256i>();
        (
            _mm256_loadu_si256(window),
            _mm256_loadu_si256(window.add(1)),
        )
    };
    let bits = |keys| _mm256_movemask_pd(_mm256_castsi256_pd(stops(keys))) as u32;
    let within = run(bits(low) | bits(high) << 4, 8);
    (start + within).min(len)
}

/// How many of a leaf's hints are below `hint`: the leaf count of
/// [`Leaf::count_hints_less`](super::Leaf) in vectors. The same two steps: the last hint of
/// each 16-hint block (one line) in one compare picks the block where the hints below end,
/// then that block's two vectors are counted. Unused slots hold `u32::MAX`, below no hint,
/// so the whole array is read and nothing is clamped; the hints below a probe are a prefix,
/// so each count is the run of trailing lane bits.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn count_hints_less(hints: &[u32; 64], hint: u32) -> usize {
    // Unsigned order is signed order with the sign bit flipped.
    let flip = i32::MIN;
    let probe = (hint as i32) ^ flip;
    let ends = _mm_setr_epi32(
        hints[15] as i32 ^ flip,
        hints[31] as i32 ^ flip,
        hints[47] as i32 ^ flip,
        hints[63] as i32 ^ flip,
    );
    let ends_below = _mm_cmpgt_epi32(_mm_set1_epi32(probe), ends);
    let ends_bits = _mm_movemask_ps(_mm_castsi128_ps(ends_below)) as u32;
    // The fourth block is the last: a probe above every end still counts within it.
    let block = (!ends_bits | 0b1000).trailing_zeros() as usize;
    let window = &hints[block * 16..block * 16 + 16];
    let flip = _mm256_set1_epi32(flip);
    let probe = _mm256_set1_epi32(probe);
    // SAFETY: `window` holds sixteen hints, two 256-bit loads; `loadu` needs no alignment.
    let (low, high) = unsafe {
        let window = window.as_ptr().cast::<__m256i>();
        (
            _mm256_loadu_si256(window),
            _mm256_loadu_si256(window.add(1)),
        )
    };
    let below = |keys: __m256i| {
        let lanes = _mm256_cmpgt_epi32(probe, _mm256_xor_si256(keys, flip));
        _mm256_movemask_ps(_mm256_castsi256_ps(lanes)) as u32
    };
    let bits = below(low) | below(high) << 8;
    // Bits 16 and up of the complement are set: at most 16.
    block * 16 + (!bits).trailing_zeros() as usize
}
