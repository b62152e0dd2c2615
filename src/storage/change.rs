//! What one write did to a space: the tuple it stored and the tuple it displaced. Every
//! write returns one, so whoever logs the write (the WAL row is the new tuple, or the
//! deleted key) and whoever may have to undo it (a write the log refused) holds both
//! tuples without looking anything up again.
//!
//! Knows nothing of logs or requests: it is two tuple handles.

use crate::storage::tuple::Tuple;

/// `new` is the tuple the write stored (`None` for a delete); `old` the tuple it replaced
/// or deleted (`None` when the key was free). Both `None`: the write changed nothing (an
/// update or delete of a missing key, an upsert that was skipped).
#[derive(Debug, Default)]
pub struct Change {
    pub old: Option<Tuple>,
    pub new: Option<Tuple>,
}

impl Change {
    /// A write that changed nothing.
    pub const NONE: Change = Change {
        old: None,
        new: None,
    };

    pub fn is_none(&self) -> bool {
        self.old.is_none() && self.new.is_none()
    }

    /// The tuple a reply to the write carries: the stored one, or for a delete the deleted
    /// one.
    pub fn tuple(&self) -> Option<&Tuple> {
        self.new.as_ref().or(self.old.as_ref())
    }
}

/// How many writes a displaced tuple outlives its replacement by, in [`RetiredTuples`].
const RETIRED_TUPLES: usize = 16;

/// Tuples that writes displaced, freed a few writes later. Freeing a tuple touches its
/// reference count and its page's header, cold lines by the time a write finds the tuple
/// in the tree; prefetched at retirement, they are warm at the free, which takes a cache
/// miss off the end of every replace, update and upsert. Their slots are still held (and
/// counted by the quota, with their pages) until then; at most `RETIRED_TUPLES` tuples
/// wait.
#[derive(Default)]
pub struct RetiredTuples {
    slots: [Option<Tuple>; RETIRED_TUPLES],
    next: usize,
}

impl RetiredTuples {
    /// Keeps `tuple` and drops the one retired `RETIRED_TUPLES` calls ago.
    #[inline]
    pub fn retire(&mut self, tuple: Tuple) {
        tuple.prefetch_for_drop();
        self.slots[self.next] = Some(tuple);
        self.next = (self.next + 1) % RETIRED_TUPLES;
    }
}
