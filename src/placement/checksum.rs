//! CRC-32C of the few bytes of a key: placement (`shard_of_key`) and crud's `bucket_id`
//! checksum one per request. Owns nothing but the arithmetic; what the checksum means is
//! its callers' business.
//!
//! The `crc32c` crate is right for long inputs (the WAL's), but a key is a handful of
//! bytes, for which the crate's set-up (alignment split, feature check, loop entry) costs
//! more than the checksum. Here such inputs take the CPU's `crc32` instruction directly,
//! a word at a time: a chain of two or three 3-cycle steps instead of one dependent table
//! load per byte. The values are the crate's, bit for bit (see the tests).

/// Inputs longer than this go to the crate, whose loop is the faster from here on.
const SHORT_MAX: usize = 64;

/// `crc32c::crc32c_append(crc, bytes)`: the standard CRC-32C continued over `bytes`.
#[inline]
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    if bytes.len() > SHORT_MAX {
        return crc32c::crc32c_append(crc, bytes);
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE4.2, checked just above.
        return unsafe { append_by_instruction(crc, bytes) };
    }
    append_by_table(crc, bytes)
}

/// `crc32c::crc32c(bytes)`.
#[inline]
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c_append(0, bytes)
}

/// The same checksum as [`append_by_table`], by the SSE4.2 `crc32` instruction.
///
/// # Safety
/// The CPU must have SSE4.2 (`is_x86_feature_detected!("sse4.2")`): the function is
/// compiled for it, and running it elsewhere is undefined behaviour.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn append_by_instruction(crc: u32, bytes: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};
    // The instruction works on the register as the table loop does: reflected, with no
    // inversion of its own, so the standard pre- and post-inversion are done here.
    let mut register = !crc;
    let mut rest = bytes;
    while let Some((word, tail)) = rest.split_first_chunk::<8>() {
        register = _mm_crc32_u64(u64::from(register), u64::from_le_bytes(*word)) as u32;
        rest = tail;
    }
    if let Some((word, tail)) = rest.split_first_chunk::<4>() {
        register = _mm_crc32_u32(register, u32::from_le_bytes(*word));
        rest = tail;
    }
    if let Some((word, tail)) = rest.split_first_chunk::<2>() {
        register = _mm_crc32_u16(register, u16::from_le_bytes(*word));
        rest = tail;
    }
    if let Some(&byte) = rest.first() {
        register = _mm_crc32_u8(register, byte);
    }
    !register
}

/// CRC-32C (reflected polynomial 0x82F63B78) one byte at a time.
const TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = byte as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[byte] = crc;
        byte += 1;
    }
    table
};

/// [`crc32c_append`] on a CPU without the instruction.
fn append_by_table(crc: u32, bytes: &[u8]) -> u32 {
    let mut register = !crc;
    for &byte in bytes {
        register = TABLE[((register ^ u32::from(byte)) & 0xff) as usize] ^ (register >> 8);
    }
    !register
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_check_value_of_crc32c() {
        // The catalogue's check value: CRC-32C of the ASCII digits 1 to 9.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(append_by_table(0, b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    proptest! {
        #[test]
        fn every_way_agrees_with_the_crate(
            start in any::<u32>(),
            bytes in proptest::collection::vec(any::<u8>(), 0..100),
        ) {
            let expected = crc32c::crc32c_append(start, &bytes);
            prop_assert_eq!(crc32c_append(start, &bytes), expected);
            prop_assert_eq!(append_by_table(start, &bytes), expected);
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("sse4.2") {
                // SAFETY: checked just above.
                prop_assert_eq!(unsafe { append_by_instruction(start, &bytes) }, expected);
            }
        }
    }
}
