//! Iterator types and the key range a scan walks.
//!
//! A range is two borrowed encoded keys and one byte of packed flags, so describing a scan
//! never allocates. The mapping from Tarantool's iterator types to ranges lives here, and
//! with it the rules of partial keys: GT skips every key that starts with the given parts,
//! LE includes them, an empty key means the whole index.
//!
//! Knows nothing of what an index stores; it speaks in encoded key bytes.

use crate::storage::error::{Result, StorageError};
use std::ops::Bound;

/// A range as the pair of std bounds that `BTreeMap::range` takes.
pub type StdBounds<'k> = (Bound<&'k [u8]>, Bound<&'k [u8]>);

/// Tarantool's iterator types (the IPROTO_ITERATOR codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum IteratorType {
    Eq = 0,
    Req = 1,
    All = 2,
    Lt = 3,
    Le = 4,
    Ge = 5,
    Gt = 6,
    BitsAllSet = 7,
    BitsAnySet = 8,
    BitsAllNotSet = 9,
    Overlaps = 10,
    Neighbor = 11,
}

impl IteratorType {
    /// Whether `code` is an iterator type Tarantool knows (`from_code` accepts it): a
    /// compare, for request paths that check it before anything else.
    #[inline(always)]
    pub fn is_known_code(code: u32) -> bool {
        code <= IteratorType::Neighbor as u32
    }

    pub fn from_code(code: u32) -> Result<IteratorType> {
        use IteratorType::*;
        Ok(match code {
            0 => Eq,
            1 => Req,
            2 => All,
            3 => Lt,
            4 => Le,
            5 => Ge,
            6 => Gt,
            7 => BitsAllSet,
            8 => BitsAnySet,
            9 => BitsAllNotSet,
            10 => Overlaps,
            11 => Neighbor,
            _ => {
                return Err(StorageError::IllegalParams("Invalid iterator type".into()));
            }
        })
    }

    /// LT, LE and REQ walk in descending order.
    pub fn is_descending(self) -> bool {
        matches!(
            self,
            IteratorType::Req | IteratorType::Lt | IteratorType::Le
        )
    }
}

/// Packed range flags: one byte, not a struct of options.
pub mod flags {
    pub const START_UNBOUNDED: u8 = 1 << 0;
    pub const START_EXCLUSIVE: u8 = 1 << 1;
    pub const END_UNBOUNDED: u8 = 1 << 2;
    pub const END_EXCLUSIVE: u8 = 1 << 3;
    pub const DESCENDING: u8 = 1 << 4;
    /// Nothing can match (e.g. GT of the greatest possible key).
    pub const EMPTY: u8 = 1 << 5;
}

/// One end of a range: a key and the flags that qualify it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyBound<'k> {
    pub key: &'k [u8],
    pub flags: u8,
}

/// A scan over encoded keys: `[start, end]` with each end inclusive, exclusive or open,
/// walked ascending or descending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRange<'k> {
    pub start: &'k [u8],
    pub end: &'k [u8],
    pub flags: u8,
}

impl<'k> KeyRange<'k> {
    pub const ALL: KeyRange<'static> = KeyRange {
        start: &[],
        end: &[],
        flags: flags::START_UNBOUNDED | flags::END_UNBOUNDED,
    };

    /// The range of a TREE iterator over `key` (the encoding of the given parts, possibly
    /// none). `successor` is the least key above every key that starts with `key`, or `None`
    /// when no such key exists.
    pub fn for_iterator(
        iterator: IteratorType,
        key: &'k [u8],
        successor: Option<&'k [u8]>,
    ) -> KeyRange<'k> {
        use flags::*;
        let descending = if iterator.is_descending() {
            DESCENDING
        } else {
            0
        };
        if key.is_empty() {
            return KeyRange {
                flags: KeyRange::ALL.flags | descending,
                ..KeyRange::ALL
            };
        }
        let until_successor = |start: &'k [u8], start_flags: u8| match successor {
            Some(end) => KeyRange {
                start,
                end,
                flags: start_flags | END_EXCLUSIVE | descending,
            },
            None => KeyRange {
                start,
                end: &[],
                flags: start_flags | END_UNBOUNDED | descending,
            },
        };
        match iterator {
            IteratorType::Eq | IteratorType::Req => until_successor(key, 0),
            IteratorType::Ge | IteratorType::All => KeyRange {
                start: key,
                end: &[],
                flags: END_UNBOUNDED,
            },
            IteratorType::Gt => match successor {
                Some(start) => KeyRange {
                    start,
                    end: &[],
                    flags: END_UNBOUNDED,
                },
                None => KeyRange {
                    start: key,
                    end: key,
                    flags: EMPTY,
                },
            },
            IteratorType::Lt => KeyRange {
                start: &[],
                end: key,
                flags: START_UNBOUNDED | END_EXCLUSIVE | DESCENDING,
            },
            IteratorType::Le => until_successor(&[], START_UNBOUNDED),
            _ => KeyRange {
                start: key,
                end: key,
                flags: EMPTY,
            },
        }
    }

    pub fn is_descending(&self) -> bool {
        self.flags & flags::DESCENDING != 0
    }

    pub fn is_empty(&self) -> bool {
        self.flags & flags::EMPTY != 0
    }

    pub fn start_bound(&self) -> KeyBound<'k> {
        KeyBound {
            key: self.start,
            flags: self.flags & (flags::START_UNBOUNDED | flags::START_EXCLUSIVE),
        }
    }

    pub fn end_bound(&self) -> KeyBound<'k> {
        KeyBound {
            key: self.end,
            flags: self.flags & (flags::END_UNBOUNDED | flags::END_EXCLUSIVE),
        }
    }

    /// The range as std bounds, for `BTreeMap::range`; `None` when it can match nothing
    /// (which `BTreeMap::range` would reject with a panic).
    pub fn std_bounds(&self) -> Option<StdBounds<'k>> {
        if self.is_empty() {
            return None;
        }
        let start = if self.flags & flags::START_UNBOUNDED != 0 {
            Bound::Unbounded
        } else if self.flags & flags::START_EXCLUSIVE != 0 {
            Bound::Excluded(self.start)
        } else {
            Bound::Included(self.start)
        };
        let end = if self.flags & flags::END_UNBOUNDED != 0 {
            Bound::Unbounded
        } else if self.flags & flags::END_EXCLUSIVE != 0 {
            Bound::Excluded(self.end)
        } else {
            Bound::Included(self.end)
        };
        fn bounded<'a>(bound: &Bound<&'a [u8]>) -> Option<&'a [u8]> {
            match bound {
                Bound::Included(key) | Bound::Excluded(key) => Some(key),
                Bound::Unbounded => None,
            }
        }
        if let (Some(s), Some(e)) = (bounded(&start), bounded(&end)) {
            let both_excluded =
                matches!(start, Bound::Excluded(_)) && matches!(end, Bound::Excluded(_));
            if s > e || (s == e && both_excluded) {
                return None;
            }
        }
        Some((start, end))
    }

    /// Whether `key` lies inside the range (direction aside).
    pub fn contains(&self, key: &[u8]) -> bool {
        let Some((start, end)) = self.std_bounds() else {
            return false;
        };
        let after_start = match start {
            Bound::Included(s) => key >= s,
            Bound::Excluded(s) => key > s,
            Bound::Unbounded => true,
        };
        let before_end = match end {
            Bound::Included(e) => key <= e,
            Bound::Excluded(e) => key < e,
            Bound::Unbounded => true,
        };
        after_start && before_end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_bounds_stay_small() {
        assert_eq!(std::mem::size_of::<KeyBound<'_>>(), 24);
        assert_eq!(std::mem::size_of::<KeyRange<'_>>(), 40);
        assert_eq!(std::mem::size_of::<IteratorType>(), 1);
    }

    #[test]
    fn iterator_codes_beyond_neighbor_are_illegal() {
        assert_eq!(IteratorType::from_code(6), Ok(IteratorType::Gt));
        for code in [0, 11, 12, u32::MAX] {
            assert_eq!(
                IteratorType::is_known_code(code),
                IteratorType::from_code(code).is_ok()
            );
        }
        assert_eq!(
            IteratorType::from_code(12).unwrap_err().to_string(),
            "Illegal parameters, Invalid iterator type"
        );
    }

    #[test]
    fn partial_key_ranges_follow_prefix_semantics() {
        let key: &[u8] = &[5];
        let succ: &[u8] = &[6];
        let keys: [&[u8]; 5] = [&[4, 9], &[5], &[5, 0], &[5, 9], &[6]];
        let matching = |it| {
            let range = KeyRange::for_iterator(it, key, Some(succ));
            keys.iter().filter(|k| range.contains(k)).count()
        };
        assert_eq!(matching(IteratorType::Eq), 3);
        assert_eq!(matching(IteratorType::Ge), 4);
        assert_eq!(matching(IteratorType::Gt), 1);
        assert_eq!(matching(IteratorType::Lt), 1);
        assert_eq!(matching(IteratorType::Le), 4);
        assert!(KeyRange::for_iterator(IteratorType::Le, key, Some(succ)).is_descending());
        let nothing_above = KeyRange::for_iterator(IteratorType::Gt, &[0xff], None);
        assert!(nothing_above.std_bounds().is_none());
        let empty_key = KeyRange::for_iterator(IteratorType::Lt, &[], None);
        assert!(empty_key.contains(&[1]) && empty_key.is_descending());
    }
}
