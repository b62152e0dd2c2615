//! New non-unique TREE indexes built by sorting, a step at a time: what a redefinition
//! prepared while serving uses for them instead of inserting each tuple into the tree (a
//! descent of cache misses per tuple, more than twice the work of recovery's sort).
//!
//! The walk gives each tuple's key here; every 2,048 keys are sorted as one run (the sort
//! recovery uses). Once the walk is done the runs are merged, a bounded number of entries
//! a step, into a [`SortedLoader`] that fills the tree's leaves in order; the levels above
//! them are built at the end. Writes meanwhile are not put in these indexes but logged
//! (the tuple replaced, the tuple written) and replayed in order once the tree is built,
//! a bounded number a step, until the log is empty: from then on the indexes are kept
//! current by every write, as the others being built are.
//!
//! Replaying the whole log is right whatever the walk saw: a write before the walk reached
//! its key replaces a tuple the walk never took (taking it out finds nothing) and puts the
//! one the walk then took (putting it again changes nothing); a write after it replaces
//! what the walk took. Entry keys of a non-unique index end with the primary key, and the
//! walk takes each primary key once, so the merged keys are strictly increasing.
//!
//! Knows nothing of spaces or shards: it holds keys, tuples and the indexes' trees.

use crate::storage::btree::bytes::SortedLoader;
use crate::storage::bulk;
use crate::storage::error::Result;
use crate::storage::index::{Index, TreeTuples};
use crate::storage::key::SearchKeyBuf;
use crate::storage::tuple::{FieldMap, SpaceFormat, Tuple};
use std::collections::VecDeque;

/// Keys sorted at a time while the walk collects them (a few in tests, so that the merge
/// of many runs is what they exercise).
#[cfg(not(test))]
const RUN_KEYS: usize = 2048;
#[cfg(test)]
const RUN_KEYS: usize = 5;
/// Merged entries, or replayed writes, per unit of a step.
const ENTRIES_PER_UNIT: usize = 4;

/// The indexes a redefinition builds by sorting, and the writes they have not seen.
pub(super) struct SortedBuilds {
    /// Positions in the redefinition's `building`, with each one's collected keys.
    builds: Vec<(usize, Collected)>,
    /// Writes since the redefinition was prepared: `(replaced, written)`.
    pending: VecDeque<(Option<Tuple>, Option<Tuple>)>,
    stage: Stage,
    scratch: SearchKeyBuf,
}

enum Stage {
    Collecting,
    /// Merging the runs of `builds[at]` into `loader`.
    Merging {
        at: usize,
        merge: RunMerge,
        loader: Box<SortedLoader<TreeTuples>>,
    },
    Replaying,
}

/// One index's keys as the walk gave them: key `i` is `keys[bounds[i]..bounds[i + 1]]`.
#[derive(Default)]
struct Collected {
    keys: Vec<u8>,
    /// Each key's first 16 bytes, zero-padded, as one big-endian number: two keys whose
    /// heads differ are ordered by them (as the tree's leaves order keys).
    heads: Vec<u128>,
    bounds: Vec<usize>,
    tuples: Vec<Option<Tuple>>,
    /// Positions in key order, run by run: `order[..sorted]` holds the sorted runs.
    order: Vec<u32>,
    /// The keys the walk will give, about: what the buffers are sized for at the first
    /// key, so that none grows by a copy of tens of megabytes in one step.
    expected: usize,
}

impl Collected {
    fn len(&self) -> usize {
        self.tuples.len()
    }

    fn key(&self, position: u32) -> &[u8] {
        let position = position as usize;
        &self.keys[self.bounds[position]..self.bounds[position + 1]]
    }

    fn push(&mut self, key: &[u8], tuple: Tuple) {
        if self.bounds.is_empty() {
            let expected = self.expected;
            self.keys
                .reserve(expected.saturating_mul(key.len() + key.len() / 4));
            self.heads.reserve(expected);
            self.bounds.reserve(expected + 1);
            self.tuples.reserve(expected);
            self.order.reserve(expected);
            self.bounds.push(0);
        }
        self.keys.extend_from_slice(key);
        self.bounds.push(self.keys.len());
        let mut head = [0u8; 16];
        let known = key.len().min(16);
        head[..known].copy_from_slice(&key[..known]);
        self.heads.push(u128::from_be_bytes(head));
        self.tuples.push(Some(tuple));
        if self.len() - self.order.len() == RUN_KEYS {
            self.sort_run();
        }
    }

    /// Sorts the keys collected since the last run as a run of their own.
    fn sort_run(&mut self) {
        let start = self.order.len();
        let count = self.len() - start;
        if count == 0 {
            return;
        }
        let sorted = bulk::sort_by_key(count, |at| self.key((start + at) as u32));
        self.order
            .extend(sorted.order.into_iter().map(|at| (start + at) as u32));
    }
}

/// A k-way merge of the sorted runs of [`Collected::order`]: a binary heap of the runs by
/// their next key, each with that key's head, so that most comparisons read the heap alone.
struct RunMerge {
    /// Per run, the next place in `order` and the run's end.
    cursors: Vec<(usize, usize)>,
    /// Runs not yet exhausted, with their next key's head: a heap by that key, least first.
    heap: Vec<(u128, usize)>,
}

impl RunMerge {
    fn new(collected: &Collected) -> RunMerge {
        let total = collected.order.len();
        let cursors: Vec<(usize, usize)> = (0..total.div_ceil(RUN_KEYS))
            .map(|run| (run * RUN_KEYS, ((run + 1) * RUN_KEYS).min(total)))
            .collect();
        let mut merge = RunMerge {
            heap: Vec::with_capacity(cursors.len()),
            cursors,
        };
        for run in 0..merge.cursors.len() {
            let head = collected.heads[collected.order[merge.cursors[run].0] as usize];
            merge.heap.push((head, run));
            merge.sift_up(merge.heap.len() - 1, collected);
        }
        merge
    }

    fn next_key<'c>(&self, run: usize, collected: &'c Collected) -> &'c [u8] {
        collected.key(collected.order[self.cursors[run].0])
    }

    fn less(&self, a: usize, b: usize, collected: &Collected) -> bool {
        let ((head_a, run_a), (head_b, run_b)) = (self.heap[a], self.heap[b]);
        if head_a != head_b {
            return head_a < head_b;
        }
        self.next_key(run_a, collected) < self.next_key(run_b, collected)
    }

    fn sift_up(&mut self, mut at: usize, collected: &Collected) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if !self.less(at, parent, collected) {
                break;
            }
            self.heap.swap(at, parent);
            at = parent;
        }
    }

    fn sift_down(&mut self, mut at: usize, collected: &Collected) {
        loop {
            let (left, right) = (2 * at + 1, 2 * at + 2);
            let mut least = at;
            if left < self.heap.len() && self.less(left, least, collected) {
                least = left;
            }
            if right < self.heap.len() && self.less(right, least, collected) {
                least = right;
            }
            if least == at {
                return;
            }
            self.heap.swap(at, least);
            at = least;
        }
    }

    /// The position of the least key not yet taken, or `None` once every run is done.
    fn pop(&mut self, collected: &Collected) -> Option<u32> {
        let &(_, run) = self.heap.first()?;
        let (next, end) = &mut self.cursors[run];
        let position = collected.order[*next];
        *next += 1;
        if *next == *end {
            let last = self.heap.len() - 1;
            self.heap.swap(0, last);
            self.heap.pop();
        } else {
            let following = collected.order[*next] as usize;
            self.heap[0].0 = collected.heads[following];
            // Its tuple is read when it is taken: ask for it now.
            if let Some(tuple) = &collected.tuples[following] {
                tuple.prefetch_for_read();
            }
        }
        self.sift_down(0, collected);
        Some(position)
    }
}

impl SortedBuilds {
    /// Builds by sorting the indexes at `positions` of the redefinition's `building`, over
    /// about `expected` tuples.
    pub(super) fn new(
        positions: impl IntoIterator<Item = usize>,
        expected: usize,
    ) -> Option<Box<SortedBuilds>> {
        let builds: Vec<(usize, Collected)> = positions
            .into_iter()
            .map(|position| {
                let collected = Collected {
                    expected,
                    ..Collected::default()
                };
                (position, collected)
            })
            .collect();
        (!builds.is_empty()).then(|| {
            Box::new(SortedBuilds {
                builds,
                pending: VecDeque::new(),
                stage: Stage::Collecting,
                scratch: SearchKeyBuf::new(),
            })
        })
    }

    /// Whether the index at `position` of `building` is built here (writes do not go to it).
    pub(super) fn builds(&self, position: usize) -> bool {
        self.builds.iter().any(|(at, _)| *at == position)
    }

    /// The walk's `tuple` under `key` in the index at `position`.
    pub(super) fn collect(&mut self, position: usize, key: &[u8], tuple: &Tuple) {
        if let Some((_, collected)) = self.builds.iter_mut().find(|(at, _)| *at == position) {
            collected.push(key, tuple.clone());
        }
    }

    /// A write the indexes built here have not seen.
    pub(super) fn log(&mut self, replaced: Option<&Tuple>, written: Option<&Tuple>) {
        self.pending
            .push_back((replaced.cloned(), written.cloned()));
    }

    /// Starts over, as after a truncate: the walk starts again from the first tuple.
    pub(super) fn reset(&mut self) {
        for (_, collected) in &mut self.builds {
            *collected = Collected::default();
        }
        self.pending.clear();
        self.stage = Stage::Collecting;
    }

    /// Once the walk is done: up to `units` units of merging or replaying. `Ok(true)` once
    /// every index is built and the log replayed (the caller then drops this).
    pub(super) fn step(
        &mut self,
        building: &mut [Index],
        (field_map, format): (&FieldMap, &SpaceFormat),
        units: usize,
    ) -> Result<bool> {
        let mut budget = units.saturating_mul(ENTRIES_PER_UNIT);
        while budget > 0 {
            match &mut self.stage {
                Stage::Collecting => self.start_merge(0, building),
                Stage::Merging { at, merge, loader } => {
                    let collected = &mut self.builds[*at].1;
                    while budget > 0 {
                        budget -= 1;
                        let Some(position) = merge.pop(collected) else {
                            break;
                        };
                        let tuple = collected.tuples[position as usize].take();
                        if let Some(tuple) = tuple {
                            loader.push(collected.key(position), tuple);
                        }
                    }
                    if merge.heap.is_empty() {
                        self.finish_merge(building);
                    }
                }
                Stage::Replaying => {
                    let Some((replaced, written)) = self.pending.pop_front() else {
                        return Ok(true);
                    };
                    budget -= 1;
                    self.replay(building, (field_map, format), replaced, written)?;
                }
            }
        }
        Ok(false)
    }

    /// Merges the runs of `builds[at]` next, or replays the log once every index is built.
    fn start_merge(&mut self, at: usize, building: &[Index]) {
        let Some((position, collected)) = self.builds.get_mut(at) else {
            self.stage = Stage::Replaying;
            return;
        };
        collected.sort_run();
        let loader = building[*position].sorted_loader(collected.len());
        match loader {
            Some(loader) => {
                let merge = RunMerge::new(collected);
                let loader = Box::new(loader);
                self.stage = Stage::Merging { at, merge, loader };
            }
            None => {
                debug_assert!(false, "only TREE indexes of keys as bytes are built here");
                self.stage = Stage::Replaying;
            }
        }
    }

    fn finish_merge(&mut self, building: &mut [Index]) {
        let stage = std::mem::replace(&mut self.stage, Stage::Replaying);
        if let Stage::Merging { at, loader, .. } = stage {
            let (position, collected) = &mut self.builds[at];
            building[*position].install(loader.finish());
            *collected = Collected::default();
            self.start_merge(at + 1, building);
        }
    }

    /// One logged write, onto every index built here.
    fn replay(
        &mut self,
        building: &mut [Index],
        (field_map, format): (&FieldMap, &SpaceFormat),
        replaced: Option<Tuple>,
        written: Option<Tuple>,
    ) -> Result<()> {
        for &(position, _) in &self.builds {
            let index = &mut building[position];
            if let Some(replaced) = &replaced {
                self.scratch.clear();
                if index
                    .encode_tuple_key(replaced, field_map, format, &mut self.scratch)
                    .is_ok()
                {
                    super::remove_if_held(index, &self.scratch, replaced);
                }
            }
            if let Some(written) = &written {
                self.scratch.clear();
                index.encode_tuple_key(written, field_map, format, &mut self.scratch)?;
                index.insert_slice(&self.scratch, written.clone());
            }
        }
        Ok(())
    }
}
