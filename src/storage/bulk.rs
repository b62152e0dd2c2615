//! Sorting the keys of many tuples at once, for bulk index builds (recovery, a new index).
//!
//! Recovery sorts millions of keys per index; spilled keys (longer than an entry holds inline)
//! made every comparison two pointer chases to random heap addresses and a `memcmp`. Here the
//! keys of a build are encoded into one buffer, and each is represented during the sort by a
//! 16-byte abbreviation — the bytes right after the prefix that every key of the build shares —
//! held next to its position. Most comparisons settle on the abbreviations alone (PostgreSQL's
//! "abbreviated keys"); only ties read the keys. The sort yields positions, so the caller
//! moves its tuple handles once, without touching the tuples themselves.
//!
//! Knows nothing of indexes or tuples: keys are bytes, and order is their byte order.

use std::cmp::Ordering;

/// The encoded keys of one build, in the order of the tuples they were taken from.
#[derive(Debug, Default)]
pub struct EncodedKeys {
    bytes: Vec<u8>,
    /// `ends[i]` is one past the last byte of key `i`.
    ends: Vec<usize>,
}

/// A key during the sort: its abbreviation, then its position (for ties and the result).
#[derive(Debug, Clone, Copy)]
struct Abbreviated {
    high: u64,
    low: u64,
    position: usize,
}

/// The outcome of [`EncodedKeys::sort`].
#[derive(Debug)]
pub struct SortedKeys {
    /// Positions of the keys in ascending key order; equal keys in any order.
    pub order: Vec<usize>,
    /// Positions of two equal keys, if any.
    pub first_duplicate: Option<(usize, usize)>,
}

impl EncodedKeys {
    pub fn with_capacity(key_count: usize, bytes_per_key: usize) -> EncodedKeys {
        EncodedKeys {
            bytes: Vec::with_capacity(key_count.saturating_mul(bytes_per_key)),
            ends: Vec::with_capacity(key_count),
        }
    }

    /// Appends a key by letting `encode` write it at the end of the buffer.
    pub fn push_with<E>(
        &mut self,
        encode: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        let start = self.bytes.len();
        if let Err(error) = encode(&mut self.bytes) {
            self.bytes.truncate(start);
            return Err(error);
        }
        self.ends.push(self.bytes.len());
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn get(&self, position: usize) -> &[u8] {
        let start = match position {
            0 => 0,
            _ => self.ends[position - 1],
        };
        &self.bytes[start..self.ends[position]]
    }

    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        (0..self.len()).map(|position| self.get(position))
    }

    /// Sorts the keys by their bytes; see the module comment for how.
    pub fn sort(&self) -> SortedKeys {
        let skip = self.shared_prefix_len();
        let mut items: Vec<Abbreviated> = self
            .iter()
            .enumerate()
            .map(|(position, key)| {
                let (high, low) = abbreviation(key.get(skip..).unwrap_or(&[]));
                Abbreviated {
                    high,
                    low,
                    position,
                }
            })
            .collect();
        let compare = |a: &Abbreviated, b: &Abbreviated| {
            (a.high, a.low)
                .cmp(&(b.high, b.low))
                .then_with(|| self.get(a.position).cmp(self.get(b.position)))
        };
        items.sort_unstable_by(compare);
        // Adjacent keys with different abbreviations differ; only ties need the bytes.
        let first_duplicate = items
            .windows(2)
            .find(|pair| compare(&pair[0], &pair[1]) == Ordering::Equal)
            .map(|pair| (pair[0].position, pair[1].position));
        debug_assert!(items
            .windows(2)
            .all(|pair| self.get(pair[0].position) <= self.get(pair[1].position)));
        SortedKeys {
            order: items.into_iter().map(|item| item.position).collect(),
            first_duplicate,
        }
    }

    /// The length of the prefix all keys share: bytes that would only waste abbreviations.
    fn shared_prefix_len(&self) -> usize {
        let mut keys = self.iter();
        let Some(first) = keys.next() else {
            return 0;
        };
        let mut shared = first.len();
        for key in keys {
            shared = first[..shared]
                .iter()
                .zip(key)
                .take_while(|(a, b)| a == b)
                .count();
            if shared == 0 {
                break;
            }
        }
        shared
    }
}

/// The first 16 bytes of `bytes` as two big-endian integers, zero-padded. Zero padding keeps
/// the abbreviation order consistent with byte order: a key that ends inside the window is a
/// prefix of, or smaller than, any key it is abbreviated as smaller than; equal abbreviations
/// say nothing and fall back to the bytes.
fn abbreviation(bytes: &[u8]) -> (u64, u64) {
    let mut window = [0u8; 16];
    let taken = bytes.len().min(16);
    window[..taken].copy_from_slice(&bytes[..taken]);
    let (high, low) = window.split_at(8);
    (
        u64::from_be_bytes(high.try_into().unwrap_or_default()),
        u64::from_be_bytes(low.try_into().unwrap_or_default()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn keys_of(list: &[Vec<u8>]) -> EncodedKeys {
        let mut keys = EncodedKeys::with_capacity(list.len(), 8);
        for key in list {
            keys.push_with(|out| {
                out.extend_from_slice(key);
                Ok::<(), ()>(())
            })
            .unwrap();
        }
        keys
    }

    #[test]
    fn a_failed_encoding_leaves_no_bytes_behind() {
        let mut keys = EncodedKeys::default();
        keys.push_with(|out| {
            out.push(1);
            Ok::<(), ()>(())
        })
        .unwrap();
        let failed = keys.push_with(|out| {
            out.extend_from_slice(&[9, 9]);
            Err("bad field")
        });
        assert_eq!(failed, Err("bad field"));
        keys.push_with(|out| {
            out.push(2);
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(
            keys.iter().collect::<Vec<_>>(),
            vec![&[1u8][..], &[2u8][..]]
        );
    }

    #[test]
    fn keys_sharing_a_long_prefix_sort_by_what_follows_it() {
        let prefix = vec![7u8; 40];
        let with = |tail: &[u8]| [prefix.as_slice(), tail].concat();
        let list = vec![
            with(&[3]),
            with(&[1, 0]),
            prefix.clone(),
            with(&[1]),
            with(&[2]),
        ];
        let sorted = keys_of(&list).sort();
        assert_eq!(sorted.order, vec![2, 3, 1, 4, 0]);
        assert_eq!(sorted.first_duplicate, None);
    }

    #[test]
    fn equal_keys_are_reported_as_a_duplicate() {
        let list = vec![vec![1, 2, 3], vec![0], vec![1, 2, 3]];
        let sorted = keys_of(&list).sort();
        let (a, b) = sorted.first_duplicate.expect("a duplicate");
        assert_eq!((a.min(b), a.max(b)), (0, 2));
    }

    proptest! {
        #[test]
        fn sort_matches_sorting_the_keys_themselves(
            list in proptest::collection::vec(
                proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), any::<u8>()], 0..40),
                0..200,
            ),
            shared in proptest::collection::vec(any::<u8>(), 0..20),
        ) {
            let list: Vec<Vec<u8>> =
                list.into_iter().map(|key| [shared.as_slice(), &key].concat()).collect();
            let keys = keys_of(&list);
            let sorted = keys.sort();
            let mut expected = list.clone();
            expected.sort();
            let got: Vec<Vec<u8>> =
                sorted.order.iter().map(|&position| list[position].clone()).collect();
            prop_assert_eq!(&got, &expected);
            let has_duplicate = expected.windows(2).any(|pair| pair[0] == pair[1]);
            prop_assert_eq!(sorted.first_duplicate.is_some(), has_duplicate);
            if let Some((a, b)) = sorted.first_duplicate {
                prop_assert_ne!(a, b);
                prop_assert_eq!(&list[a], &list[b]);
            }
        }
    }
}
