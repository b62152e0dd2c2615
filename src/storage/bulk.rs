//! Sorting the entries of a bulk index build (recovery, a new index) by key.
//!
//! Recovery sorts millions of keys per index; spilled keys (longer than an entry holds inline)
//! make every comparison two pointer chases to random heap addresses and a `memcmp`, and a
//! sort of whole entries moves 40 bytes per swap. Here each key is represented during the
//! sort by a 16-byte abbreviation held next to its position, and most comparisons settle on
//! the abbreviations alone (PostgreSQL's "abbreviated keys"); only ties read the keys. The
//! sort yields positions, so the caller moves each entry once.
//!
//! The abbreviation is made of the key's bytes at the first 16 *varying* positions: those
//! where some key of the build differs from the first one or ends. Keys of small numbers
//! are mostly zero bytes at fixed places (an unsigned part is 8 big-endian bytes), so a
//! plain 16-byte prefix would hold one or two parts' worth of information; the varying
//! bytes of a four-part key of numbers below 65,536 fit in 8. Byte order is kept: at every
//! position before the first varying one that differs, two keys are equal (or one has
//! ended, and a missing byte abbreviates as 0, not above any byte), so abbreviations never
//! order two keys against their bytes; equal abbreviations fall back to the bytes.
//!
//! Knows nothing of indexes or tuples: keys are bytes, and order is their byte order.

use smallvec::SmallVec;

/// A key during the sort: its abbreviation, then its position (for ties and the result).
#[derive(Debug, Clone, Copy)]
struct Abbreviated {
    high: u64,
    low: u64,
    position: usize,
}

impl Abbreviated {
    #[inline]
    fn as_u128(&self) -> u128 {
        (u128::from(self.high) << 64) | u128::from(self.low)
    }
}

/// The outcome of [`sort_by_key`].
#[derive(Debug)]
pub struct SortedKeys {
    /// Positions of the items in ascending key order; equal keys in any order.
    pub order: Vec<usize>,
    /// Positions of two items with equal keys, if any.
    pub first_duplicate: Option<(usize, usize)>,
}

/// Sorts the items `0..count` by the bytes `key` gives for each; see the module comment
/// for how.
pub fn sort_by_key<'k>(count: usize, key: impl Fn(usize) -> &'k [u8]) -> SortedKeys {
    let positions = varying_positions((0..count).map(&key));
    let mut sorted: Vec<Abbreviated> = (0..count)
        .map(|position| {
            let (high, low) = abbreviation(key(position), &positions);
            Abbreviated {
                high,
                low,
                position,
            }
        })
        .collect();
    // The abbreviations alone, as one 128-bit integer each, sort with branch-free
    // comparisons; the rare runs of equal abbreviations are then ordered by their keys.
    sorted.sort_unstable_by_key(Abbreviated::as_u128);
    let mut first_duplicate = None;
    let mut run_start = 0;
    while run_start < sorted.len() {
        let abbreviation = sorted[run_start].as_u128();
        let run_len = sorted[run_start..]
            .iter()
            .take_while(|item| item.as_u128() == abbreviation)
            .count();
        let run = &mut sorted[run_start..run_start + run_len];
        if run.len() > 1 {
            run.sort_unstable_by(|a, b| key(a.position).cmp(key(b.position)));
            if first_duplicate.is_none() {
                first_duplicate = run
                    .windows(2)
                    .find(|pair| key(pair[0].position) == key(pair[1].position))
                    .map(|pair| (pair[0].position, pair[1].position));
            }
        }
        run_start += run_len;
    }
    debug_assert!(sorted
        .windows(2)
        .all(|pair| key(pair[0].position) <= key(pair[1].position)));
    SortedKeys {
        order: sorted.into_iter().map(|item| item.position).collect(),
        first_duplicate,
    }
}

/// Byte positions looked at for varying bytes; a key's bytes past them are never
/// abbreviated. Wide enough for four 8-byte parts and the start of a fifth.
const SCANNED_BYTES: usize = 64;
const ABBREVIATION_BYTES: usize = 16;

/// The first [`ABBREVIATION_BYTES`] positions (ascending) at which some key differs from
/// the first key or has ended; see the module comment.
fn varying_positions<'a>(
    mut keys: impl Iterator<Item = &'a [u8]>,
) -> SmallVec<[u8; ABBREVIATION_BYTES]> {
    let Some(first) = keys.next() else {
        return SmallVec::new();
    };
    let mut reference = [0u8; SCANNED_BYTES];
    let scanned_first = first.len().min(SCANNED_BYTES);
    reference[..scanned_first].copy_from_slice(&first[..scanned_first]);
    // A position past the end of the first key varies as soon as another key reaches it,
    // and one where any key ends varies too: `ended` marks both.
    let mut differs = [0u8; SCANNED_BYTES];
    let mut shortest = scanned_first;
    let mut longest = scanned_first;
    for key in keys {
        let scanned = key.len().min(SCANNED_BYTES);
        for ((mark, byte), reference) in differs.iter_mut().zip(&key[..scanned]).zip(&reference) {
            *mark |= byte ^ reference;
        }
        shortest = shortest.min(scanned);
        longest = longest.max(scanned);
    }
    (0..SCANNED_BYTES)
        .filter(|&position| differs[position] != 0 || (position >= shortest && position < longest))
        .take(ABBREVIATION_BYTES)
        .map(|position| position as u8)
        .collect()
}

/// The key's bytes at `positions` as two big-endian integers, a missing byte (past the
/// key's end) and unused slots as 0.
fn abbreviation(key: &[u8], positions: &[u8]) -> (u64, u64) {
    let mut window = [0u8; ABBREVIATION_BYTES];
    for (slot, &position) in window.iter_mut().zip(positions) {
        *slot = key.get(usize::from(position)).copied().unwrap_or(0);
    }
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

    fn sort(list: &[Vec<u8>]) -> SortedKeys {
        sort_by_key(list.len(), |position| list[position].as_slice())
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
        let sorted = sort(&list);
        assert_eq!(sorted.order, vec![2, 3, 1, 4, 0]);
        assert_eq!(sorted.first_duplicate, None);
    }

    #[test]
    fn small_numbers_abbreviate_by_their_low_bytes() {
        let key = |a: u64, b: u64| [a.to_be_bytes(), b.to_be_bytes()].concat();
        let list = vec![key(999, 7), key(3, 65_535), key(3, 2), key(0, 0)];
        let positions = varying_positions(list.iter().map(Vec::as_slice));
        assert_eq!(positions.as_slice(), &[6, 7, 14, 15]);
        // Every key is told apart by its abbreviation alone.
        let mut abbreviations: Vec<_> = list.iter().map(|k| abbreviation(k, &positions)).collect();
        abbreviations.sort_unstable();
        abbreviations.dedup();
        assert_eq!(abbreviations.len(), list.len());
        assert_eq!(sort(&list).order, vec![3, 2, 1, 0]);
    }

    #[test]
    fn a_key_ending_early_varies_where_the_others_go_on() {
        let list = vec![vec![5, 1], vec![5], vec![5, 0], vec![5, 1, 0]];
        let positions = varying_positions(list.iter().map(Vec::as_slice));
        assert_eq!(positions.as_slice(), &[1, 2]);
        assert_eq!(sort(&list).order, vec![1, 2, 0, 3]);
    }

    #[test]
    fn equal_keys_are_reported_as_a_duplicate() {
        let list = vec![vec![1, 2, 3], vec![0], vec![1, 2, 3]];
        let sorted = sort(&list);
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
            let sorted = sort(&list);
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
