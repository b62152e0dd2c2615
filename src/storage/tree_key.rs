//! The key of an entry of a TREE index kept as bytes (every TREE index but a unique one on
//! one unsigned part): the encoded key, and its first 16 bytes as two numbers beside it.
//!
//! # Why
//!
//! A key longer than `KeyBuf`'s 16 inline bytes lives on the heap, and a search in std's
//! map compares the probe with each key it passes, so every comparison followed a pointer
//! to a line of its own: on the shipped `customers` index (a, b, c, d, name, then id, 45
//! bytes) a quarter of a secondary select's time was `memcmp` on keys not in cache. The
//! head, two big-endian words of the key's first 16 bytes padded with zeros, sits in the
//! entry and orders two keys whenever their first 16 bytes differ, which on that index is
//! nearly always (a and b); only keys equal so far are compared as bytes.
//!
//! # Order
//!
//! Heads compare as the padded bytes do. When they differ, the first differing padded
//! byte is a real byte of both keys (their bytes order them there) or a real byte of one
//! against the other's padding, where the shorter key is a proper prefix and so the
//! smaller, and a real byte above zero is above the padding's zero (a zero byte would not
//! differ). So comparing heads first, then bytes, is the bytes' own order, which every
//! search with a probe ([`KeyProbe`]) relies on.
//!
//! Knows nothing of tuples or of the index around it.

use crate::storage::key::KeyBuf;
use std::borrow::Borrow;
use std::cmp::Ordering;

/// The first 16 bytes of a key, zero-padded, as two big-endian words.
type KeyHead = [u64; 2];

#[inline]
fn head_of(bytes: &[u8]) -> KeyHead {
    let mut padded = [0u8; 16];
    let len = bytes.len().min(16);
    padded[..len].copy_from_slice(&bytes[..len]);
    let (high, low) = padded.split_at(8);
    [
        u64::from_be_bytes(high.try_into().unwrap_or_default()),
        u64::from_be_bytes(low.try_into().unwrap_or_default()),
    ]
}

#[inline]
fn compare(a_head: &KeyHead, a: &[u8], b_head: &KeyHead, b: &[u8]) -> Ordering {
    a_head.cmp(b_head).then_with(|| a.cmp(b))
}

/// A stored key: its bytes and its head.
pub struct TreeKey {
    head: KeyHead,
    bytes: KeyBuf,
}

impl TreeKey {
    #[inline]
    pub fn new(bytes: KeyBuf) -> TreeKey {
        TreeKey {
            head: head_of(&bytes),
            bytes,
        }
    }

    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// A key to search for, borrowed: what a lookup or a range bound gives the map.
pub struct KeyProbe<'a> {
    head: KeyHead,
    bytes: &'a [u8],
}

impl<'a> KeyProbe<'a> {
    #[inline]
    pub fn new(bytes: &'a [u8]) -> KeyProbe<'a> {
        KeyProbe {
            head: head_of(bytes),
            bytes,
        }
    }

    /// The probe as the map's borrowed key type.
    #[inline]
    pub fn as_key(&self) -> &(dyn HeadedKey + 'a) {
        self
    }
}

/// What the map compares: a stored key and a probe alike (`TreeKey` borrows as it), so a
/// search needs no stored key built for it.
pub trait HeadedKey {
    fn head_and_bytes(&self) -> (&KeyHead, &[u8]);
}

impl HeadedKey for TreeKey {
    #[inline]
    fn head_and_bytes(&self) -> (&KeyHead, &[u8]) {
        (&self.head, &self.bytes)
    }
}

impl HeadedKey for KeyProbe<'_> {
    #[inline]
    fn head_and_bytes(&self) -> (&KeyHead, &[u8]) {
        (&self.head, self.bytes)
    }
}

impl<'a> Borrow<dyn HeadedKey + 'a> for TreeKey {
    #[inline]
    fn borrow(&self) -> &(dyn HeadedKey + 'a) {
        self
    }
}

impl Ord for dyn HeadedKey + '_ {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        let (a_head, a) = self.head_and_bytes();
        let (b_head, b) = other.head_and_bytes();
        compare(a_head, a, b_head, b)
    }
}

impl PartialOrd for dyn HeadedKey + '_ {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for dyn HeadedKey + '_ {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for dyn HeadedKey + '_ {}

impl Ord for TreeKey {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        compare(&self.head, &self.bytes, &other.head, &other.bytes)
    }
}

impl PartialOrd for TreeKey {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for TreeKey {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.head == other.head && self.bytes == other.bytes
    }
}

impl Eq for TreeKey {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key_bytes() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(proptest::sample::select(vec![0u8, 1, 0x7f, 0xff]), 0..24)
    }

    proptest! {
        #[test]
        fn keys_and_probes_order_as_their_bytes(a in key_bytes(), b in key_bytes()) {
            let (stored_a, stored_b) = (TreeKey::new(KeyBuf::from_slice(&a)), TreeKey::new(KeyBuf::from_slice(&b)));
            prop_assert_eq!(stored_a.cmp(&stored_b), a.cmp(&b));
            let (probe_a, probe_b) = (KeyProbe::new(&a), KeyProbe::new(&b));
            prop_assert_eq!(probe_a.as_key().cmp(probe_b.as_key()), a.cmp(&b));
            let borrowed: &dyn HeadedKey = stored_b.borrow();
            prop_assert_eq!(probe_a.as_key().cmp(borrowed), a.cmp(&b));
        }
    }

    #[test]
    fn a_key_is_its_bytes_and_a_head_on_the_side() {
        assert_eq!(
            std::mem::size_of::<TreeKey>(),
            16 + std::mem::size_of::<KeyBuf>()
        );
    }
}
