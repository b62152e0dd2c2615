//! An in-memory B+tree keyed by `u64`: the ordered map under every TREE index keyed by one
//! unsigned part (most primary keys).
//!
//! Owns the shape of the tree and nothing about what it stores: entries live only in
//! leaves, internal nodes hold separator keys that route a search, and every node keeps
//! its keys in one contiguous array apart from its values or children, so a search reads
//! a few adjacent cache lines per level instead of striding over entries. Nodes are wide
//! (see [`LEAF_CAPACITY`], [`INTERNAL_FANOUT`]) to keep the tree shallow: at a million
//! entries it has four levels, the upper two of which stay in cache.
//!
//! # Leaves: 8 bytes an entry
//!
//! A leaf entry is two `u32`s: the key's *hint* and the value's *handle*. The value lives
//! elsewhere (a tuple in its space's slab) and a [`Store`] turns a handle back into it;
//! the value also holds the full key, so the leaf repeats only what a search needs. The
//! hint is the key itself below `u32::MAX` and `u32::MAX` ([`SATURATED`]) from there on,
//! so hints are in key order, and below `u32::MAX` equal hints are equal keys: a lookup of
//! such a key compares hints only and reads one value, the one it returns. Keys from
//! `u32::MAX` on sort after every smaller key and tie among themselves; a search that
//! reaches them compares the keys the [`Store`] reads from their values.
//!
//! The arithmetic, per entry of a full leaf: 64 hints and 64 handles and a length are 520
//! bytes, a 528-byte malloc chunk, 8.25 bytes an entry; `(u64, pointer)` entries took 16
//! plus their share of 8 bytes in a 32-entry leaf (16.5). Internal nodes (1,040 bytes for
//! 64 children) add 0.25 bytes an entry in a tree of full leaves. Leaves filled in key
//! order end full (see `shift_into_left_leaf`); in random order they fill about three
//! quarters, 11 bytes an entry.
//!
//! Unused leaf slots hold the hint [`SATURATED`] and the handle 0, so a count of the hints
//! below a probe can run over the whole array, without the length, in two fixed steps.
//!
//! Internal nodes keep whole `u64` separators: a descent never reads a value. Their search
//! goes through a branch-free count, and a point lookup on a CPU with AVX2 runs a copy of
//! itself compiled for AVX2 with a vector count (see `simd`).
//!
//! Iteration keeps a path from the root to the current leaf (there are no parent or
//! sibling links): a range resolves both ends once, O(log n), then walks lazily from
//! either end, O(1) amortised per step.
//!
//! Knows nothing of tuples, indexes or Tarantool semantics.

pub mod bytes;
#[cfg(target_arch = "x86_64")]
mod simd;

use crate::storage::prefetch::{prefetch_line, prefetch_object};
use smallvec::SmallVec;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Entries per leaf: four cache lines of hints, four of handles.
pub const LEAF_CAPACITY: usize = 64;
/// Children per internal node.
pub const INTERNAL_FANOUT: usize = 64;
const SEPARATOR_CAPACITY: usize = INTERNAL_FANOUT - 1;
/// Below these a node (other than the root) borrows from or merges with a sibling. A third
/// rather than a half leaves room between the split point and the merge point, so
/// alternating inserts and removes at one spot do not split and merge the same node.
const LEAF_MIN: usize = LEAF_CAPACITY / 3;
const INTERNAL_MIN_SEPARATORS: usize = INTERNAL_FANOUT / 3;
/// The hint of every key from `u32::MAX` on, and of every unused leaf slot.
pub const SATURATED: u32 = u32::MAX;
/// The handle of an unused leaf slot; a [`Store`] never gives it to a value.
const NO_HANDLE: u32 = 0;
/// Hints per block of the leaf count: one cache line.
const HINT_BLOCK: usize = 16;
const HINT_BLOCKS: usize = LEAF_CAPACITY / HINT_BLOCK;
/// What malloc holds for a node: its size and an 8-byte size word, rounded to 16.
const LEAF_ALLOCATION_BYTES: usize = malloc_chunk_bytes(std::mem::size_of::<Leaf>());
const INTERNAL_ALLOCATION_BYTES: usize = malloc_chunk_bytes(std::mem::size_of::<Internal>());

const fn malloc_chunk_bytes(bytes: usize) -> usize {
    (bytes + std::mem::size_of::<usize>()).next_multiple_of(16)
}

/// The hint of `key` (see the module's documentation).
#[inline(always)]
pub fn hint(key: u64) -> u32 {
    if key < SATURATED as u64 {
        key as u32
    } else {
        SATURATED
    }
}

/// Where a tree's values live: it keeps each as a 32-bit handle, and reads through the
/// store the value a handle names and the key that value holds.
pub trait Store {
    /// A value as the tree takes and gives it back.
    type Value;
    /// A value as a lookup lends it.
    type Ref<'a>: Copy
    where
        Self: 'a;

    /// Takes `value`, stored under `key`, and returns its handle: never [`NO_HANDLE`].
    fn pack(&self, key: u64, value: Self::Value) -> u32;

    /// Gives back the value of `handle`, which is then no longer the tree's.
    ///
    /// # Safety
    ///
    /// `handle` came from [`Store::pack`] of this store and is unpacked once.
    unsafe fn unpack(&self, handle: u32) -> Self::Value;

    /// The value of `handle`, lent.
    ///
    /// # Safety
    ///
    /// `handle` came from [`Store::pack`] of this store and is not yet unpacked.
    unsafe fn get(&self, handle: u32) -> Self::Ref<'_>;

    /// The key the value of `handle` was stored under, read from the value.
    ///
    /// # Safety
    ///
    /// As [`Store::get`].
    unsafe fn key(&self, handle: u32) -> u64;
}

/// Keys per block of [`count_in_blocks`]: eight `u64`s are one cache line.
const SEARCH_BLOCK: usize = 8;

/// How many of the sorted `keys` satisfy `below` (true on a prefix of them), counted
/// without a data-dependent branch: first over the last key of each full block, which
/// picks the block where the prefix ends, then within that block. Sixteen comparisons
/// cover a 64-way node, where one count over all keys is a chain of 64, and a binary
/// search a chain of dependent loads and mispredicted branches.
#[inline(always)]
fn count_in_blocks<T: Copy>(keys: &[T], below: impl Fn(T) -> bool) -> usize {
    let full_blocks = keys.len() / SEARCH_BLOCK;
    let blocks_below: usize = (0..full_blocks)
        .map(|block| usize::from(below(keys[block * SEARCH_BLOCK + SEARCH_BLOCK - 1])))
        .sum();
    let start = blocks_below * SEARCH_BLOCK;
    let block = &keys[start..keys.len().min(start + SEARCH_BLOCK)];
    start
        + block
            .iter()
            .map(|&key| usize::from(below(key)))
            .sum::<usize>()
}

/// How many of the sorted `keys` are less than `probe`.
#[inline]
fn count_less(keys: &[u64], probe: u64) -> usize {
    count_in_blocks(keys, |key| key < probe)
}

/// How many of the sorted `keys` are less than or equal to `probe`.
#[inline]
fn count_not_greater(keys: &[u64], probe: u64) -> usize {
    count_in_blocks(keys, |key| key <= probe)
}

/// [`count_less`], or with `OR_EQUAL` [`count_not_greater`], over `keys[..len]`; with
/// `AVX2`, which only code compiled for AVX2 passes, the vector count of `simd`.
#[inline(always)]
fn count<const AVX2: bool, const OR_EQUAL: bool, const CAP: usize>(
    keys: &[u64; CAP],
    len: usize,
    probe: u64,
) -> usize {
    #[cfg(target_arch = "x86_64")]
    if AVX2 {
        // SAFETY: `AVX2` is set only in code compiled for it, which runs only on a CPU
        // that has it.
        return unsafe { simd::count::<OR_EQUAL, CAP>(keys, len, probe) };
    }
    if OR_EQUAL {
        count_not_greater(&keys[..len], probe)
    } else {
        count_less(&keys[..len], probe)
    }
}

/// `repr(C)` keeps the hints at the start of the allocation, their blocks on whole lines
/// as far as malloc's 16-byte alignment allows.
#[repr(C)]
struct Leaf {
    /// Sorted hints in `..len`, [`SATURATED`] after.
    hints: [u32; LEAF_CAPACITY],
    /// Handles in `..len`, [`NO_HANDLE`] after.
    handles: [u32; LEAF_CAPACITY],
    len: usize,
}

/// Child `i` holds the keys `k` with `keys[i - 1] <= k < keys[i]` (unbounded at the
/// ends). A separator is the least key of its right subtree when it was made; removals may
/// leave it naming a key that is gone, which still routes correctly.
#[repr(C)]
struct Internal {
    /// Separators in use; children in use are one more.
    len: usize,
    keys: [u64; SEPARATOR_CAPACITY],
    /// `Some` exactly in `..=len`.
    children: [Option<BTreeNode>; INTERNAL_FANOUT],
}

/// All children of one node are of one kind: the tree is balanced.
enum BTreeNode {
    Leaf(Box<Leaf>),
    Internal(Box<Internal>),
}

const MISSING_CHILD: &str = "an internal node has a child in every slot up to its length";

/// Nodes made and freed by one change, for the tree's count of them.
#[derive(Default)]
struct NodeCounts {
    leaves: isize,
    internals: isize,
}

impl Leaf {
    fn empty() -> Box<Leaf> {
        Box::new(Leaf {
            hints: [SATURATED; LEAF_CAPACITY],
            handles: [NO_HANDLE; LEAF_CAPACITY],
            len: 0,
        })
    }

    /// How many hints are below `hint`: blocks first (the last hint of each), then
    /// within the block where they end. Unused slots hold [`SATURATED`], below no hint.
    #[inline(always)]
    fn count_hints_less(&self, hint: u32) -> usize {
        let (blocks, _) = self.hints.as_chunks::<HINT_BLOCK>();
        let ends: usize = blocks
            .iter()
            .map(|block| usize::from(block[HINT_BLOCK - 1] < hint))
            .sum();
        let at = ends.min(HINT_BLOCKS - 1);
        let within: usize = blocks[at]
            .iter()
            .map(|&entry| usize::from(entry < hint))
            .sum();
        at * HINT_BLOCK + within
    }

    /// The key of entry `position` (below `len`).
    #[inline]
    fn key_at<S: Store>(&self, store: &S, position: usize) -> u64 {
        debug_assert!(position < self.len);
        let hint = self.hints[position];
        if hint != SATURATED {
            return u64::from(hint);
        }
        // SAFETY: a handle below the leaf's length is a live packed one.
        unsafe { store.key(self.handles[position]) }
    }

    /// The value of entry `position` (below `len`), lent.
    #[inline]
    fn value<'s, S: Store>(&self, store: &'s S, position: usize) -> S::Ref<'s> {
        debug_assert!(position < self.len);
        // SAFETY: a handle below the leaf's length is a live packed one.
        unsafe { store.get(self.handles[position]) }
    }

    /// How many entries have keys below `probe` (`or_equal`: at most `probe`).
    #[inline(always)]
    fn position<S: Store>(&self, store: &S, probe: u64, or_equal: bool) -> usize {
        let probe_hint = hint(probe);
        if probe_hint != SATURATED {
            let below = self.count_hints_less(probe_hint);
            let equal = or_equal && self.hints.get(below) == Some(&probe_hint);
            return below + usize::from(equal);
        }
        self.saturated_position(store, probe, or_equal)
    }

    /// [`Leaf::position`] of a probe from `u32::MAX` on: the entries with smaller keys,
    /// then those of its saturated entries (all after them) whose keys the store reads.
    #[cold]
    #[inline(never)]
    fn saturated_position<S: Store>(&self, store: &S, probe: u64, or_equal: bool) -> usize {
        let first = self.count_hints_less(SATURATED);
        first
            + self.handles[first..self.len].partition_point(|&handle| {
                // SAFETY: a handle below the leaf's length is a live packed one.
                let key = unsafe { store.key(handle) };
                key < probe || (or_equal && key == probe)
            })
    }

    /// [`Leaf::count_hints_less`], with the vector count if `AVX2` (only in code compiled
    /// for it).
    #[inline(always)]
    fn count_hints_less_with<const AVX2: bool>(&self, hint: u32) -> usize {
        #[cfg(target_arch = "x86_64")]
        if AVX2 {
            // SAFETY: `AVX2` is set only in code compiled for it, which runs only on a CPU
            // that has it.
            return unsafe { simd::count_hints_less(&self.hints, hint) };
        }
        self.count_hints_less(hint)
    }

    /// Where `probe`'s entry is, if it is here.
    #[inline(always)]
    fn find<S: Store>(&self, store: &S, probe: u64) -> Option<usize> {
        self.find_with::<false, S>(store, probe)
    }

    /// [`Leaf::find`], counting hints with the vector count if `AVX2`.
    #[inline(always)]
    fn find_with<const AVX2: bool, S: Store>(&self, store: &S, probe: u64) -> Option<usize> {
        let probe_hint = hint(probe);
        if probe_hint != SATURATED {
            // Past the last entry the hint is SATURATED: no probe's of this kind.
            let position = self.count_hints_less_with::<AVX2>(probe_hint);
            return (self.hints.get(position) == Some(&probe_hint)).then_some(position);
        }
        let position = self.saturated_position(store, probe, false);
        self.holds_saturated(store, position, probe)
            .then_some(position)
    }

    /// Whether entry `position` is there and holds `probe`: equal hints below
    /// [`SATURATED`] are equal keys (and past the length every hint is saturated).
    #[inline]
    fn holds<S: Store>(&self, store: &S, position: usize, probe: u64) -> bool {
        let probe_hint = hint(probe);
        match self.hints.get(position) {
            Some(&entry) if entry != SATURATED => entry == probe_hint,
            Some(_) if probe_hint == SATURATED => self.holds_saturated(store, position, probe),
            _ => false,
        }
    }

    /// [`Leaf::holds`] of a saturated hint: the key is read from the value.
    #[cold]
    #[inline(never)]
    fn holds_saturated<S: Store>(&self, store: &S, position: usize, probe: u64) -> bool {
        position < self.len && self.key_at(store, position) == probe
    }

    /// Puts an entry at `position`; the leaf has room.
    fn insert_at(&mut self, position: usize, hint: u32, handle: u32) {
        debug_assert!(self.len < LEAF_CAPACITY && position <= self.len);
        let len = self.len;
        self.hints[position..=len].rotate_right(1);
        self.handles[position..=len].rotate_right(1);
        self.hints[position] = hint;
        self.handles[position] = handle;
        self.len += 1;
    }

    /// Takes the entry at `position` out; its handle.
    fn remove_at(&mut self, position: usize) -> u32 {
        debug_assert!(position < self.len);
        let len = self.len;
        let handle = self.handles[position];
        self.hints[position..len].rotate_left(1);
        self.handles[position..len].rotate_left(1);
        self.hints[len - 1] = SATURATED;
        self.handles[len - 1] = NO_HANDLE;
        self.len -= 1;
        handle
    }

    /// Inserts into a full leaf by moving its upper half to a new right sibling; returns
    /// the sibling.
    fn split_insert(&mut self, position: usize, hint: u32, handle: u32) -> Box<Leaf> {
        debug_assert_eq!(self.len, LEAF_CAPACITY);
        let mid = LEAF_CAPACITY / 2;
        let mut right = Leaf::empty();
        right.hints[..LEAF_CAPACITY - mid].copy_from_slice(&self.hints[mid..]);
        right.handles[..LEAF_CAPACITY - mid].copy_from_slice(&self.handles[mid..]);
        self.hints[mid..].fill(SATURATED);
        self.handles[mid..].fill(NO_HANDLE);
        right.len = LEAF_CAPACITY - mid;
        self.len = mid;
        if position < mid {
            self.insert_at(position, hint, handle);
        } else {
            right.insert_at(position - mid, hint, handle);
        }
        right
    }

    /// Moves the first `count` entries of `right` to the end of `self`.
    fn take_from_right(&mut self, right: &mut Leaf, count: usize) {
        debug_assert!(self.len + count <= LEAF_CAPACITY && count <= right.len);
        let (len, right_len) = (self.len, right.len);
        self.hints[len..len + count].copy_from_slice(&right.hints[..count]);
        self.handles[len..len + count].copy_from_slice(&right.handles[..count]);
        right.hints[..right_len].rotate_left(count);
        right.handles[..right_len].rotate_left(count);
        right.hints[right_len - count..right_len].fill(SATURATED);
        right.handles[right_len - count..right_len].fill(NO_HANDLE);
        self.len += count;
        right.len -= count;
    }

    /// Moves the last `count` entries of `self` to the front of `right`.
    fn give_to_right(&mut self, right: &mut Leaf, count: usize) {
        debug_assert!(right.len + count <= LEAF_CAPACITY && count <= self.len);
        let (first, right_len) = (self.len - count, right.len);
        right.hints[..right_len + count].rotate_right(count);
        right.handles[..right_len + count].rotate_right(count);
        right.hints[..count].copy_from_slice(&self.hints[first..self.len]);
        right.handles[..count].copy_from_slice(&self.handles[first..self.len]);
        self.hints[first..self.len].fill(SATURATED);
        self.handles[first..self.len].fill(NO_HANDLE);
        self.len -= count;
        right.len += count;
    }
}

impl Internal {
    fn empty() -> Box<Internal> {
        Box::new(Internal {
            len: 0,
            keys: [0; SEPARATOR_CAPACITY],
            children: std::array::from_fn(|_| None),
        })
    }

    #[inline]
    fn keys(&self) -> &[u64] {
        &self.keys[..self.len]
    }

    #[inline]
    fn child(&self, index: usize) -> &BTreeNode {
        self.children[index].as_ref().expect(MISSING_CHILD)
    }

    #[inline]
    fn child_mut(&mut self, index: usize) -> &mut BTreeNode {
        self.children[index].as_mut().expect(MISSING_CHILD)
    }

    /// Adds `separator` at `index` and `child` right after it; the node has room.
    fn insert_at(&mut self, index: usize, separator: u64, child: BTreeNode) {
        debug_assert!(self.len < SEPARATOR_CAPACITY && index <= self.len);
        let len = self.len;
        self.keys[index..=len].rotate_right(1);
        self.keys[index] = separator;
        self.children[index + 1..=len + 1].rotate_right(1);
        self.children[index + 1] = Some(child);
        self.len += 1;
    }

    /// Removes separator `index` and the child to its right, returning both.
    fn remove_at(&mut self, index: usize) -> (u64, BTreeNode) {
        debug_assert!(index < self.len);
        let len = self.len;
        self.keys[index..len].rotate_left(1);
        self.children[index + 1..=len].rotate_left(1);
        self.len -= 1;
        let separator = std::mem::take(&mut self.keys[len - 1]);
        let child = self.children[len].take().expect(MISSING_CHILD);
        (separator, child)
    }

    /// Adds a separator and child to a full node by moving its upper half to a new right
    /// sibling; returns the separator that moves up to the parent and the sibling.
    fn split_insert(
        &mut self,
        index: usize,
        separator: u64,
        child: BTreeNode,
    ) -> (u64, Box<Internal>) {
        debug_assert_eq!(self.len, SEPARATOR_CAPACITY);
        let mid = SEPARATOR_CAPACITY / 2;
        let mut right = Internal::empty();
        for (to, from) in (mid + 1..SEPARATOR_CAPACITY).enumerate() {
            right.keys[to] = std::mem::take(&mut self.keys[from]);
        }
        for (to, from) in (mid + 1..=SEPARATOR_CAPACITY).enumerate() {
            right.children[to] = self.children[from].take();
        }
        right.len = SEPARATOR_CAPACITY - mid - 1;
        let up = std::mem::take(&mut self.keys[mid]);
        self.len = mid;
        if index <= mid {
            self.insert_at(index, separator, child);
        } else {
            right.insert_at(index - mid - 1, separator, child);
        }
        (up, right)
    }
}

impl BTreeNode {
    fn is_underfull(&self) -> bool {
        match self {
            BTreeNode::Leaf(leaf) => leaf.len < LEAF_MIN,
            BTreeNode::Internal(internal) => internal.len < INTERNAL_MIN_SEPARATORS,
        }
    }

    fn first_key<S: Store>(&self, store: &S) -> u64 {
        match self {
            BTreeNode::Leaf(leaf) => leaf.key_at(store, 0),
            BTreeNode::Internal(internal) => internal.child(0).first_key(store),
        }
    }
}

enum InsertOutcome {
    /// The key was there: its old handle.
    Replaced(u32),
    Added,
    /// The node split: this separator and right sibling go into the parent.
    Split(u64, BTreeNode),
}

fn insert_into<S: Store>(
    node: &mut BTreeNode,
    key: u64,
    handle: u32,
    store: &S,
    counts: &mut NodeCounts,
) -> InsertOutcome {
    match node {
        BTreeNode::Leaf(leaf) => {
            prefetch_object(&leaf.handles);
            let position = leaf.position(store, key, false);
            if leaf.holds(store, position, key) {
                let old = std::mem::replace(&mut leaf.handles[position], handle);
                return InsertOutcome::Replaced(old);
            }
            if leaf.len < LEAF_CAPACITY {
                leaf.insert_at(position, hint(key), handle);
                return InsertOutcome::Added;
            }
            let right = leaf.split_insert(position, hint(key), handle);
            counts.leaves += 1;
            InsertOutcome::Split(right.key_at(store, 0), BTreeNode::Leaf(right))
        }
        BTreeNode::Internal(internal) => {
            let mut index = count_not_greater(internal.keys(), key);
            if make_room_in_full_leaf(internal, index, key, store) {
                index = count_not_greater(internal.keys(), key);
            }
            match insert_into(internal.child_mut(index), key, handle, store, counts) {
                InsertOutcome::Split(separator, child) if internal.len < SEPARATOR_CAPACITY => {
                    internal.insert_at(index, separator, child);
                    InsertOutcome::Added
                }
                InsertOutcome::Split(separator, child) => {
                    let (up, right) = internal.split_insert(index, separator, child);
                    counts.internals += 1;
                    InsertOutcome::Split(up, BTreeNode::Internal(right))
                }
                outcome => outcome,
            }
        }
    }
}

/// Leaves and internal nodes under `node`.
fn count_nodes(node: &BTreeNode) -> (usize, usize) {
    match node {
        BTreeNode::Leaf(_) => (1, 0),
        BTreeNode::Internal(internal) => internal.children[..=internal.len]
            .iter()
            .flatten()
            .map(count_nodes)
            .fold((0, 1), |(leaves, internals), (l, i)| {
                (leaves + l, internals + i)
            }),
    }
}

/// Makes room for `probe` in the full leaf at `index` by moving its first entries to the
/// leaf on its left, where that one has room; returns whether it moved any. Without this
/// a full leaf splits in halves, and keys that arrive in ascending order (ids from a
/// sequence, a load in key order) would leave every leaf behind them half empty: 32 of
/// 64 entries, 16.5 bytes an entry instead of 8.25. With it the half that stays left of a
/// split is topped up before the next split, so such leaves end full.
/// The probe is not among the moved entries' places: it lands in one of the two leaves
/// with a free slot (the caller routes it again), so the insert that follows never splits.
/// Moving entries frees no node, so lookup cursors stay valid (see [`BTree::found_at`]).
fn shift_into_left_leaf<S: Store>(
    internal: &mut Internal,
    index: usize,
    probe: u64,
    store: &S,
) -> bool {
    debug_assert!(index > 0 && index <= internal.len);
    let (left_part, right_part) = internal.children.split_at_mut(index);
    let (Some(BTreeNode::Leaf(left)), Some(BTreeNode::Leaf(child))) =
        (&mut left_part[index - 1], &mut right_part[0])
    else {
        return false;
    };
    if child.len < LEAF_CAPACITY {
        return false;
    }
    let room = LEAF_CAPACITY - left.len;
    if room == 0 {
        return false;
    }
    let position = child.position(store, probe, false);
    // Moved entries stay below the probe; when the probe would then come first in `child`
    // it routes to `left`, which must keep a slot for it.
    let mut count = room.min(position);
    if count == room && count == position {
        count -= 1;
    }
    if count == 0 {
        return false;
    }
    left.take_from_right(child, count);
    internal.keys[index - 1] = child.key_at(store, 0);
    true
}

/// Makes room for `probe` in the full leaf at `index`, if it is one, in a sibling: the
/// left one first (see [`shift_into_left_leaf`]), else the right one (see
/// [`shift_into_right_leaf`]). Returns whether it moved entries.
fn make_room_in_full_leaf<S: Store>(
    internal: &mut Internal,
    index: usize,
    probe: u64,
    store: &S,
) -> bool {
    (index > 0 && shift_into_left_leaf(internal, index, probe, store))
        || (index < internal.len && shift_into_right_leaf(internal, index, probe, store))
}

/// Makes room for `probe` in the full leaf at `index` by moving its last entries to the
/// leaf on its right, where that one has room and the left one had none; returns whether
/// it moved any. Keys that arrive in random order find a sibling with room most of the
/// time, so a split waits until both are full: leaves end about 86% full instead of 78%
/// (measured at 100,000 random keys), 9.6 bytes an entry instead of 10.6. Half the room
/// moves, so that the next insert into either leaf finds room too. As on the left, the
/// probe lands in a leaf with a free slot, and no node is freed.
fn shift_into_right_leaf<S: Store>(
    internal: &mut Internal,
    index: usize,
    probe: u64,
    store: &S,
) -> bool {
    debug_assert!(index < internal.len);
    let (left_part, right_part) = internal.children.split_at_mut(index + 1);
    let (Some(BTreeNode::Leaf(child)), Some(BTreeNode::Leaf(right))) =
        (&mut left_part[index], &mut right_part[0])
    else {
        return false;
    };
    if child.len < LEAF_CAPACITY {
        return false;
    }
    let room = LEAF_CAPACITY - right.len;
    if room == 0 {
        return false;
    }
    let above = child.len - child.position(store, probe, false);
    // The probe goes wherever the new separator routes it: to `right` when every moved
    // entry is below it, which then must keep a slot for it.
    let mut count = room.div_ceil(2);
    if count == room && count > above {
        count -= 1;
    }
    if count == 0 {
        return false;
    }
    child.give_to_right(right, count);
    internal.keys[index] = right.key_at(store, 0);
    true
}

fn remove_from<S: Store>(
    node: &mut BTreeNode,
    probe: u64,
    store: &S,
    counts: &mut NodeCounts,
) -> Option<u32> {
    match node {
        BTreeNode::Leaf(leaf) => {
            let position = leaf.find(store, probe)?;
            Some(leaf.remove_at(position))
        }
        BTreeNode::Internal(internal) => {
            let index = count_not_greater(internal.keys(), probe);
            let removed = remove_from(internal.child_mut(index), probe, store, counts)?;
            if internal.child(index).is_underfull() {
                rebalance(internal, index, store, counts);
            }
            Some(removed)
        }
    }
}

/// Brings the underfull child at `index` back to its minimum by merging it with a sibling
/// when both fit in one node, or else by moving entries over from the sibling.
fn rebalance<S: Store>(parent: &mut Internal, index: usize, store: &S, counts: &mut NodeCounts) {
    debug_assert!(parent.len >= 1, "a child with no sibling is the root's job");
    let left_index = if index > 0 { index - 1 } else { 0 };
    let (left_part, right_part) = parent.children.split_at_mut(left_index + 1);
    let (Some(left), Some(right)) = (&mut left_part[left_index], &mut right_part[0]) else {
        unreachable!("{MISSING_CHILD}");
    };
    let separator = &mut parent.keys[left_index];
    let merged = match (left, right) {
        (BTreeNode::Leaf(left), BTreeNode::Leaf(right)) => {
            let total = left.len + right.len;
            if total <= LEAF_CAPACITY {
                let count = right.len;
                left.take_from_right(right, count);
                counts.leaves -= 1;
                true
            } else {
                let left_target = total / 2;
                if left.len < left_target {
                    left.take_from_right(right, left_target - left.len);
                } else {
                    left.give_to_right(right, left.len - left_target);
                }
                *separator = right.key_at(store, 0);
                false
            }
        }
        (BTreeNode::Internal(left), BTreeNode::Internal(right)) => {
            let total = left.len + 1 + right.len;
            if total <= SEPARATOR_CAPACITY {
                merge_internal(left, std::mem::take(separator), right);
                counts.internals -= 1;
                true
            } else {
                // Children on each side after the move: about half of all of them.
                let children = left.len + right.len + 2;
                let left_target = children / 2;
                let left_children = left.len + 1;
                if left_children < left_target {
                    rotate_to_left(left, separator, right, left_target - left_children);
                } else {
                    rotate_to_right(left, separator, right, left_children - left_target);
                }
                false
            }
        }
        _ => unreachable!("siblings are at the same depth"),
    };
    if merged {
        parent.remove_at(left_index);
    }
}

/// Appends `separator` and all of `right` to `left`, leaving `right` empty.
fn merge_internal(left: &mut Internal, separator: u64, right: &mut Internal) {
    let base = left.len;
    left.keys[base] = separator;
    for from in 0..right.len {
        left.keys[base + 1 + from] = std::mem::take(&mut right.keys[from]);
    }
    for from in 0..=right.len {
        left.children[base + 1 + from] = right.children[from].take();
    }
    left.len = base + 1 + right.len;
    right.len = 0;
}

/// Moves the first `count` children of `right` to `left`, through the parent separator.
fn rotate_to_left(left: &mut Internal, separator: &mut u64, right: &mut Internal, count: usize) {
    debug_assert!(count >= 1 && count <= right.len);
    let base = left.len;
    left.keys[base] = std::mem::take(separator);
    left.children[base + 1] = right.children[0].take();
    for moved in 1..count {
        left.keys[base + moved] = std::mem::take(&mut right.keys[moved - 1]);
        left.children[base + 1 + moved] = right.children[moved].take();
    }
    *separator = std::mem::take(&mut right.keys[count - 1]);
    right.keys[..right.len].rotate_left(count);
    right.children[..=right.len].rotate_left(count);
    left.len += count;
    right.len -= count;
}

/// Moves the last `count` children of `left` to `right`, through the parent separator.
fn rotate_to_right(left: &mut Internal, separator: &mut u64, right: &mut Internal, count: usize) {
    debug_assert!(count >= 1 && count <= left.len);
    right.keys[..right.len + count].rotate_right(count);
    right.children[..right.len + 1 + count].rotate_right(count);
    let first_child = left.len + 1 - count;
    for to in 0..count {
        right.children[to] = left.children[first_child + to].take();
    }
    for to in 0..count - 1 {
        right.keys[to] = std::mem::take(&mut left.keys[left.len - count + 1 + to]);
    }
    let new_separator = std::mem::take(&mut left.keys[left.len - count]);
    right.keys[count - 1] = std::mem::replace(separator, new_separator);
    left.len -= count;
    right.len += count;
}

/// Unpacks every value under `node`, for a tree being emptied.
fn unpack_all<S: Store>(node: &mut BTreeNode, store: &S) {
    match node {
        BTreeNode::Leaf(leaf) => {
            let len = leaf.len;
            for handle in &mut leaf.handles[..len] {
                let taken = std::mem::replace(handle, NO_HANDLE);
                // SAFETY: a handle below the leaf's length is a live packed one, taken out
                // of the leaf here so it is unpacked once.
                drop(unsafe { store.unpack(taken) });
            }
            leaf.hints[..len].fill(SATURATED);
            leaf.len = 0;
        }
        BTreeNode::Internal(internal) => {
            for child in internal.children[..=internal.len].iter_mut().flatten() {
                unpack_all(child, store);
            }
        }
    }
}

/// How far a lookup fetched ahead has got (see [`BTree::prefetch_step`]): which line it
/// reads next. Holds raw pointers into the tree, valid only while the tree's stamp is the
/// one recorded here; the tree checks that before following them.
#[derive(Debug, Clone, Copy)]
pub struct LookupCursor {
    stamp: u64,
    at: CursorAt,
}

impl LookupCursor {
    /// Whether the path has been fetched to its end (or found no value).
    pub fn is_done(&self) -> bool {
        matches!(self.at, CursorAt::Done | CursorAt::Found { .. })
    }
}

#[derive(Debug, Clone, Copy)]
enum CursorAt {
    /// Search this internal node's keys (their lines are loading).
    SearchInternal(*const u8),
    /// Read this child slot of an internal node.
    ReadChild(*const u8),
    /// Search this leaf's hints and read the value found (hints and handles are loading).
    SearchLeaf(*const u8),
    /// The probe was at `position` of this leaf when the search ran.
    Found {
        leaf: *const u8,
        position: usize,
    },
    Done,
}

/// Starts loading `node`'s length and keys and says it is to be searched next. A leaf's
/// handles load along with its hints: reading the value in the same step as the search
/// gives the value's load one more request of lead, which took a tenth off a get at a
/// million keys (in process, 386-400 -> 347-349 ns), while loading an internal node's
/// children with its keys (to save a step per level) gained nothing.
#[inline]
fn node_position(node: &BTreeNode) -> CursorAt {
    match node {
        BTreeNode::Internal(internal) => {
            prefetch_line((&internal.len as *const usize).cast());
            prefetch_object(&internal.keys);
            CursorAt::SearchInternal((&**internal as *const Internal).cast())
        }
        BTreeNode::Leaf(leaf) => {
            prefetch_object(&**leaf);
            CursorAt::SearchLeaf((&**leaf as *const Leaf).cast())
        }
    }
}

/// An ordered map from `u64` keys to the values of a [`Store`].
pub struct BTree<S: Store> {
    root: Option<BTreeNode>,
    len: usize,
    leaves: usize,
    internals: usize,
    /// Changes whenever a node may have been freed (and when the tree is made), and is
    /// never the same in two trees: a [`LookupCursor`] taken with this stamp may follow
    /// its node pointers as long as the stamp is unchanged.
    stamp: u64,
    store: S,
}

/// A source of stamps no two trees (or two states of one tree) share.
fn fresh_stamp() -> u64 {
    static NEXT_STAMP: AtomicU64 = AtomicU64::new(1);
    NEXT_STAMP.fetch_add(1, Relaxed)
}

impl<S: Store> Drop for BTree<S> {
    fn drop(&mut self) {
        if let Some(root) = &mut self.root {
            unpack_all(root, &self.store);
        }
    }
}

impl<S: Store> BTree<S> {
    pub fn new(store: S) -> BTree<S> {
        BTree {
            root: None,
            len: 0,
            leaves: 0,
            internals: 0,
            stamp: fresh_stamp(),
            store,
        }
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn clear(&mut self) {
        if let Some(root) = &mut self.root {
            unpack_all(root, &self.store);
        }
        self.root = None;
        self.len = 0;
        self.leaves = 0;
        self.internals = 0;
        self.stamp = fresh_stamp();
    }

    fn count(&mut self, counts: NodeCounts) {
        self.leaves = self.leaves.wrapping_add_signed(counts.leaves);
        self.internals = self.internals.wrapping_add_signed(counts.internals);
    }

    /// Bytes the tree's nodes hold (malloc's chunks, not what their values point to): kept
    /// as nodes are made and freed, O(1).
    pub fn node_bytes(&self) -> usize {
        self.leaves * LEAF_ALLOCATION_BYTES + self.internals * INTERNAL_ALLOCATION_BYTES
    }

    #[inline]
    pub fn get(&self, probe: u64) -> Option<S::Ref<'_>> {
        #[cfg(target_arch = "x86_64")]
        if simd::available() {
            // SAFETY: the CPU has the features `simd::available` asks for.
            return unsafe { self.get_avx2(probe) };
        }
        self.lookup::<false>(probe)
    }

    /// [`BTree::get`] for a write about to change what it finds (a delete, an update): the
    /// scalar count. The leaf such a lookup reads is often the one the write before it
    /// just changed, its keys still on their way to the cache in narrow stores, which the
    /// vector count's wide loads cannot take their data from.
    #[inline]
    pub fn get_for_write(&self, probe: u64) -> Option<S::Ref<'_>> {
        self.lookup::<false>(probe)
    }

    /// [`BTree::get`] compiled for AVX2, with the counts inlined: one feature check per
    /// lookup rather than per node.
    ///
    /// # Safety
    ///
    /// The CPU has the features `simd::available` asks for.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn get_avx2(&self, probe: u64) -> Option<S::Ref<'_>> {
        self.lookup::<true>(probe)
    }

    /// The lookup under [`BTree::get`], counting internal nodes with the vector count if
    /// `AVX2` (only where the CPU has it).
    #[inline(always)]
    fn lookup<const AVX2: bool>(&self, probe: u64) -> Option<S::Ref<'_>> {
        let leaf = self.find_leaf::<AVX2>(probe)?;
        // The handle lines load while the hints are searched, so the handle read after the
        // search hits cache instead of taking a second miss in series (measured: about a
        // tenth off a lookup at a million keys).
        prefetch_object(&leaf.handles);
        let position = leaf.find_with::<AVX2, S>(&self.store, probe)?;
        Some(leaf.value(&self.store, position))
    }

    /// Starts a lookup of `probe` that is fetched ahead one cache line per
    /// [`BTree::prefetch_step`], so that it can run a few requests before the lookup itself.
    #[inline]
    pub fn prefetch_start(&self) -> LookupCursor {
        let at = match &self.root {
            None => CursorAt::Done,
            Some(node) => node_position(node),
        };
        LookupCursor {
            stamp: self.stamp,
            at,
        }
    }

    /// Takes `cursor` one load further along the path to `probe`: it reads only the lines
    /// the previous step started loading (by now in cache, or close) and starts loading
    /// the next ones, so that every load of the path overlaps other work. Returns the value
    /// once the path reaches it, for the caller to fetch what the value points to.
    ///
    /// A cursor is used with the tree that made it and the same probe; a cursor whose tree
    /// has since freed nodes (or is another tree) starts again from the root.
    #[inline]
    pub fn prefetch_step(&self, probe: u64, cursor: &mut LookupCursor) -> Option<S::Ref<'_>> {
        if cursor.stamp != self.stamp {
            *cursor = self.prefetch_start();
        }
        // SAFETY: the cursor's pointers were taken from this tree (stamps are unique to
        // one tree) and no node has been freed since (a free changes the stamp): each
        // points into a live node of the type its variant names. Only shared reads follow,
        // and `&self` keeps every writer out until they end.
        unsafe {
            match cursor.at {
                CursorAt::Done | CursorAt::Found { .. } => None,
                CursorAt::SearchInternal(node) => {
                    let internal = &*node.cast::<Internal>();
                    let slot = &internal.children[count_not_greater(internal.keys(), probe)];
                    prefetch_line((slot as *const Option<BTreeNode>).cast());
                    cursor.at = CursorAt::ReadChild((slot as *const Option<BTreeNode>).cast());
                    None
                }
                CursorAt::ReadChild(slot) => {
                    cursor.at = match &*slot.cast::<Option<BTreeNode>>() {
                        Some(child) => node_position(child),
                        None => CursorAt::Done,
                    };
                    None
                }
                CursorAt::SearchLeaf(node) => {
                    let leaf = &*node.cast::<Leaf>();
                    match leaf.find(&self.store, probe) {
                        Some(position) => {
                            cursor.at = CursorAt::Found {
                                leaf: node,
                                position,
                            };
                            Some(leaf.value(&self.store, position))
                        }
                        None => {
                            cursor.at = CursorAt::Done;
                            None
                        }
                    }
                }
            }
        }
    }

    /// The value of `probe` where a fetch-ahead `cursor` found it, when that still holds:
    /// no node freed since (the stamp), and the probe still at that place of that leaf.
    /// Keys are unique, so then the entry is there whatever else changed. `None` when the
    /// cursor proves nothing (not walked to a value, stale, or the leaf changed): the
    /// caller looks up from the root.
    #[inline]
    pub fn found_at(&self, probe: u64, cursor: &LookupCursor) -> Option<S::Ref<'_>> {
        let CursorAt::Found { leaf, position } = cursor.at else {
            return None;
        };
        if cursor.stamp != self.stamp {
            return None;
        }
        // SAFETY: the pointer was taken from this tree's live leaf (stamps are unique to one
        // tree) and no node has been freed since (a free changes the stamp), so it still
        // points at a leaf of this tree; `&self` keeps writers out while we read.
        let leaf = unsafe { &*leaf.cast::<Leaf>() };
        leaf.holds(&self.store, position, probe)
            .then(|| leaf.value(&self.store, position))
    }

    #[inline]
    fn leaf_for(&self, probe: u64) -> Option<&Leaf> {
        self.find_leaf::<false>(probe)
    }

    /// The leaf where `probe` is or would be, counting as [`count`] does with `AVX2`.
    #[inline(always)]
    fn find_leaf<const AVX2: bool>(&self, probe: u64) -> Option<&Leaf> {
        let mut node = self.root.as_ref()?;
        loop {
            match node {
                BTreeNode::Internal(internal) => {
                    let index = count::<AVX2, true, _>(&internal.keys, internal.len, probe);
                    node = internal.child(index);
                }
                BTreeNode::Leaf(leaf) => return Some(leaf),
            }
        }
    }

    /// Starts loading the leaf where `probe` is or would be: its hints and its handles, so
    /// a write that looks it up a little later finds them in cache. The walk to the leaf
    /// reads the internal nodes, which a large tree's upper levels keep in cache anyway.
    #[inline]
    pub fn prefetch_leaf(&self, probe: u64) {
        if let Some(leaf) = self.leaf_for(probe) {
            prefetch_object(leaf);
        }
    }

    /// The leaf where `probe` is or would be, its lines already loading, for a write that
    /// has other work to do before it looks there: the walk down pays the upper levels'
    /// loads now, and the leaf's cache miss overlaps that work. `None` on an empty tree.
    /// Always inlined, as `Index::unsigned_leaf` is.
    #[inline(always)]
    pub fn leaf_for_write(&mut self, probe: u64) -> Option<LeafHandle<'_, S>> {
        let BTree {
            root, len, store, ..
        } = self;
        let mut node = root.as_mut()?;
        loop {
            match node {
                BTreeNode::Internal(internal) => {
                    let index = count_not_greater(internal.keys(), probe);
                    node = internal.child_mut(index);
                }
                BTreeNode::Leaf(leaf) => {
                    prefetch_object(&**leaf);
                    return Some(LeafHandle {
                        leaf,
                        tree_len: len,
                        store,
                    });
                }
            }
        }
    }

    /// Inserts or overwrites; returns the value previously stored under `key`.
    ///
    /// One loop down to the leaf, which takes the entry in place unless it is full; only a
    /// split walks the tree again, recursively, to carry separators up.
    pub fn insert(&mut self, key: u64, value: S::Value) -> Option<S::Value> {
        let handle = self.store.pack(key, value);
        debug_assert_ne!(handle, NO_HANDLE);
        if let Some(root) = &mut self.root {
            let mut node = root;
            loop {
                match node {
                    BTreeNode::Internal(internal) => {
                        let index = count_not_greater(internal.keys(), key);
                        node = internal.child_mut(index);
                    }
                    BTreeNode::Leaf(leaf) => {
                        prefetch_object(&leaf.handles);
                        let position = leaf.position(&self.store, key, false);
                        if leaf.holds(&self.store, position, key) {
                            let old = std::mem::replace(&mut leaf.handles[position], handle);
                            // SAFETY: the handle was in the leaf, taken out here.
                            return Some(unsafe { self.store.unpack(old) });
                        }
                        if leaf.len < LEAF_CAPACITY {
                            leaf.insert_at(position, hint(key), handle);
                            self.len += 1;
                            return None;
                        }
                        break;
                    }
                }
            }
        }
        self.insert_splitting(key, handle)
    }

    /// `insert` of a packed value when the root is missing or the key's leaf is full.
    #[inline(never)]
    fn insert_splitting(&mut self, key: u64, handle: u32) -> Option<S::Value> {
        let Some(root) = &mut self.root else {
            let mut leaf = Leaf::empty();
            leaf.insert_at(0, hint(key), handle);
            self.root = Some(BTreeNode::Leaf(leaf));
            self.len = 1;
            self.leaves = 1;
            return None;
        };
        let mut counts = NodeCounts::default();
        let outcome = insert_into(root, key, handle, &self.store, &mut counts);
        match outcome {
            // SAFETY: the handle was in the leaf, taken out by `insert_into`.
            InsertOutcome::Replaced(old) => return Some(unsafe { self.store.unpack(old) }),
            InsertOutcome::Added => {}
            InsertOutcome::Split(separator, right) => {
                let mut new_root = Internal::empty();
                new_root.children[0] = self.root.take();
                new_root.children[1] = Some(right);
                new_root.keys[0] = separator;
                new_root.len = 1;
                self.root = Some(BTreeNode::Internal(new_root));
                counts.internals += 1;
            }
        }
        self.count(counts);
        self.len += 1;
        None
    }

    pub fn remove(&mut self, probe: u64) -> Option<S::Value> {
        let root = self.root.as_mut()?;
        let mut counts = NodeCounts::default();
        let removed = remove_from(root, probe, &self.store, &mut counts)?;
        // A removal may merge nodes and free one.
        self.stamp = fresh_stamp();
        self.len -= 1;
        let collapsed = match root {
            BTreeNode::Internal(internal) if internal.len == 0 => {
                counts.internals -= 1;
                Some(internal.children[0].take())
            }
            BTreeNode::Leaf(leaf) if leaf.len == 0 => {
                counts.leaves -= 1;
                Some(None)
            }
            _ => None,
        };
        if let Some(new_root) = collapsed {
            self.root = new_root;
        }
        self.count(counts);
        // SAFETY: the handle was in the leaf, taken out by `remove_from`.
        Some(unsafe { self.store.unpack(removed) })
    }

    /// Builds a tree from entries sorted by strictly increasing key, filling every leaf
    /// (spreading the remainder so none is underfull) and then each level above it: O(n),
    /// no searches.
    pub fn from_sorted<I>(store: S, entries: I) -> BTree<S>
    where
        I: IntoIterator<Item = (u64, S::Value)>,
        I::IntoIter: ExactSizeIterator,
    {
        let mut entries = entries.into_iter();
        let len = entries.len();
        let mut tree = BTree::new(store);
        if len == 0 {
            return tree;
        }
        let mut level: Vec<BTreeNode> = Vec::with_capacity(len.div_ceil(LEAF_CAPACITY));
        let mut last_key = None;
        for size in even_sizes(len, LEAF_CAPACITY) {
            let mut leaf = Leaf::empty();
            for (slot, (key, value)) in entries.by_ref().take(size).enumerate() {
                debug_assert!(last_key.is_none_or(|last| last < key), "sorted input");
                last_key = Some(key);
                leaf.hints[slot] = hint(key);
                leaf.handles[slot] = tree.store.pack(key, value);
                leaf.len = slot + 1;
            }
            level.push(BTreeNode::Leaf(leaf));
        }
        debug_assert!(entries.next().is_none(), "ExactSizeIterator told the truth");
        tree.leaves = level.len();
        while level.len() > 1 {
            let mut nodes = level.into_iter();
            let count = nodes.len();
            let mut parents = Vec::with_capacity(count.div_ceil(INTERNAL_FANOUT));
            for size in even_sizes(count, INTERNAL_FANOUT) {
                let mut parent = Internal::empty();
                for (slot, child) in nodes.by_ref().take(size).enumerate() {
                    if slot > 0 {
                        parent.keys[slot - 1] = child.first_key(&tree.store);
                    }
                    parent.children[slot] = Some(child);
                }
                parent.len = size - 1;
                parents.push(BTreeNode::Internal(parent));
            }
            tree.internals += parents.len();
            level = parents;
        }
        tree.root = level.pop();
        tree.len = len;
        debug_assert!(tree.root.is_some());
        tree
    }

    /// Entries with keys within the bounds, lazily, from either end. Bounds that admit
    /// no key (including inverted ones) give an empty range rather than a panic.
    pub fn range(&self, start: Bound<u64>, end: Bound<u64>) -> Range<'_, S> {
        let empty = Range {
            root: None,
            store: &self.store,
            front: End::Edge,
            back: End::Edge,
        };
        let Some(root) = &self.root else {
            return empty;
        };
        let store = &self.store;
        // An unbounded end is the tree's edge, found only if the walk comes from that side:
        // a forward scan from a key then costs one descent, not two.
        let front = match start {
            Bound::Unbounded => End::Edge,
            bounded => match Cursor::first_in(root, bounded, store) {
                Some(cursor) => End::At(cursor),
                None => return empty,
            },
        };
        let back = match end {
            Bound::Unbounded => End::Edge,
            bounded => match Cursor::last_in(root, bounded, store) {
                Some(cursor) => End::At(cursor),
                None => return empty,
            },
        };
        if let (End::At(front), End::At(back)) = (&front, &back) {
            if front.key(store) > back.key(store) {
                return empty;
            }
        }
        Range {
            root: Some(root),
            store,
            front,
            back,
        }
    }

    pub fn iter(&self) -> Range<'_, S> {
        self.range(Bound::Unbounded, Bound::Unbounded)
    }
}

/// The leaf a key belongs in, held for one write (see [`BTree::leaf_for_write`]); the tree
/// stays borrowed, so nothing else changes it in between.
pub struct LeafHandle<'a, S: Store> {
    leaf: &'a mut Leaf,
    tree_len: &'a mut usize,
    store: &'a S,
}

impl<'a, S: Store> LeafHandle<'a, S> {
    /// Searches the leaf for `probe`: where its entry is, or would go.
    #[inline]
    pub fn search(self, probe: u64) -> LeafPosition<'a, S> {
        let position = self.leaf.position(self.store, probe, false);
        let found = self.leaf.holds(self.store, position, probe);
        LeafPosition {
            handle: self,
            position,
            found,
        }
    }
}

/// A key's place in its leaf, found by [`LeafHandle::search`].
pub struct LeafPosition<'a, S: Store> {
    handle: LeafHandle<'a, S>,
    position: usize,
    found: bool,
}

impl<S: Store> LeafPosition<'_, S> {
    /// The value stored under the searched key, if any.
    #[inline]
    pub fn value(&self) -> Option<S::Ref<'_>> {
        self.found
            .then(|| self.handle.leaf.value(self.handle.store, self.position))
    }

    /// Stores `value` under `key`, the key searched for, and returns the value it
    /// displaced, as [`BTree::insert`] does; or hands the entry back when the key is new
    /// and the leaf full, for `BTree::insert` to split it.
    #[inline]
    pub fn put(self, key: u64, value: S::Value) -> Result<Option<S::Value>, (u64, S::Value)> {
        let LeafPosition {
            handle:
                LeafHandle {
                    leaf,
                    tree_len,
                    store,
                },
            position,
            found,
        } = self;
        debug_assert_eq!(position, leaf.position(store, key, false));
        if !found && leaf.len == LEAF_CAPACITY {
            return Err((key, value));
        }
        let handle = store.pack(key, value);
        if found {
            let old = std::mem::replace(&mut leaf.handles[position], handle);
            // SAFETY: the handle was in the leaf, taken out here.
            return Ok(Some(unsafe { store.unpack(old) }));
        }
        leaf.insert_at(position, hint(key), handle);
        *tree_len += 1;
        Ok(None)
    }
}

/// Sizes of `ceil(total / capacity)` groups that add up to `total` and differ by at most
/// one, so each is at least half full whenever there are two or more.
fn even_sizes(total: usize, capacity: usize) -> impl Iterator<Item = usize> {
    let groups = total.div_ceil(capacity);
    let (base, larger) = (total / groups.max(1), total % groups.max(1));
    (0..groups).map(move |group| base + usize::from(group < larger))
}

/// A position in the tree: an entry of a leaf and the path of internal nodes to it.
struct Cursor<'a> {
    /// Each internal node from the root down, with the child index taken.
    path: SmallVec<[(&'a Internal, usize); 8]>,
    leaf: &'a Leaf,
    position: usize,
}

impl Clone for Cursor<'_> {
    fn clone(&self) -> Self {
        Cursor {
            path: self.path.clone(),
            leaf: self.leaf,
            position: self.position,
        }
    }
}

enum Side {
    First,
    Last,
}

impl<'a> Cursor<'a> {
    /// Descends from `node` along its first or last children to a leaf.
    fn to_edge(
        mut path: SmallVec<[(&'a Internal, usize); 8]>,
        mut node: &'a BTreeNode,
        side: Side,
    ) -> Cursor<'a> {
        loop {
            match node {
                BTreeNode::Internal(internal) => {
                    let index = match side {
                        Side::First => 0,
                        Side::Last => internal.len,
                    };
                    path.push((internal, index));
                    node = internal.child(index);
                }
                BTreeNode::Leaf(leaf) => {
                    let position = match side {
                        Side::First => 0,
                        Side::Last => leaf.len - 1,
                    };
                    return Cursor {
                        path,
                        leaf,
                        position,
                    };
                }
            }
        }
    }

    /// Descends towards `probe`; the leaf position is how many of its keys are below it
    /// (`inclusive`: are at most it), which may be the leaf's length.
    fn towards<S: Store>(
        root: &'a BTreeNode,
        probe: u64,
        inclusive: bool,
        store: &S,
    ) -> Cursor<'a> {
        let mut path = SmallVec::new();
        let mut node = root;
        loop {
            match node {
                BTreeNode::Internal(internal) => {
                    let index = count_not_greater(internal.keys(), probe);
                    path.push((&**internal, index));
                    node = internal.child(index);
                }
                BTreeNode::Leaf(leaf) => {
                    // As in `get`: the first entry's value is read right after the search.
                    prefetch_object(&leaf.handles);
                    let position = leaf.position(store, probe, inclusive);
                    return Cursor {
                        path,
                        leaf,
                        position,
                    };
                }
            }
        }
    }

    /// The least entry within `start`, if any.
    fn first_in<S: Store>(root: &'a BTreeNode, start: Bound<u64>, store: &S) -> Option<Cursor<'a>> {
        let mut cursor = match start {
            Bound::Unbounded => return Some(Cursor::to_edge(SmallVec::new(), root, Side::First)),
            Bound::Included(probe) => Cursor::towards(root, probe, false, store),
            Bound::Excluded(probe) => Cursor::towards(root, probe, true, store),
        };
        if cursor.position == cursor.leaf.len {
            cursor.position -= 1;
            if !cursor.step_forward() {
                return None;
            }
        }
        Some(cursor)
    }

    /// The greatest entry within `end`, if any.
    fn last_in<S: Store>(root: &'a BTreeNode, end: Bound<u64>, store: &S) -> Option<Cursor<'a>> {
        let mut cursor = match end {
            Bound::Unbounded => return Some(Cursor::to_edge(SmallVec::new(), root, Side::Last)),
            Bound::Included(probe) => Cursor::towards(root, probe, true, store),
            Bound::Excluded(probe) => Cursor::towards(root, probe, false, store),
        };
        // `position` counts the keys within the bound; the last of them precedes it.
        if cursor.position == 0 {
            return cursor.step_backward().then_some(cursor);
        }
        cursor.position -= 1;
        Some(cursor)
    }

    #[inline]
    fn key<S: Store>(&self, store: &S) -> u64 {
        self.leaf.key_at(store, self.position)
    }

    fn same_position(&self, other: &Cursor<'a>) -> bool {
        std::ptr::eq(self.leaf, other.leaf) && self.position == other.position
    }

    /// Moves to the next entry; false (and the cursor is spent) after the last one.
    #[inline]
    fn step_forward(&mut self) -> bool {
        if self.position + 1 < self.leaf.len {
            self.position += 1;
            return true;
        }
        while let Some((internal, index)) = self.path.pop() {
            if index < internal.len {
                self.path.push((internal, index + 1));
                let path = std::mem::take(&mut self.path);
                *self = Cursor::to_edge(path, internal.child(index + 1), Side::First);
                return true;
            }
        }
        false
    }

    /// Moves to the previous entry; false (and the cursor is spent) before the first one.
    #[inline]
    fn step_backward(&mut self) -> bool {
        if self.position > 0 {
            self.position -= 1;
            return true;
        }
        while let Some((internal, index)) = self.path.pop() {
            if index > 0 {
                self.path.push((internal, index - 1));
                let path = std::mem::take(&mut self.path);
                *self = Cursor::to_edge(path, internal.child(index - 1), Side::Last);
                return true;
            }
        }
        false
    }
}

/// One end of a range: a located entry still to be yielded, or the tree's first or last
/// entry, not yet looked for.
enum End<'a> {
    Edge,
    At(Cursor<'a>),
}

impl<'a> End<'a> {
    #[inline]
    fn locate(&mut self, root: &'a BTreeNode, side: Side) -> &mut Cursor<'a> {
        if let End::Edge = self {
            *self = End::At(Cursor::to_edge(SmallVec::new(), root, side));
        }
        match self {
            End::At(cursor) => cursor,
            End::Edge => unreachable!("located just above"),
        }
    }

    #[inline]
    fn is_at(&self, cursor: &Cursor<'a>) -> bool {
        match self {
            End::At(end) => end.same_position(cursor),
            End::Edge => false,
        }
    }
}

/// A lazy, double-ended walk over the entries between two ends.
pub struct Range<'a, S: Store> {
    /// `None` for an empty range, and once the two ends have met.
    root: Option<&'a BTreeNode>,
    store: &'a S,
    front: End<'a>,
    back: End<'a>,
}

impl<'a, S: Store> Iterator for Range<'a, S> {
    type Item = (u64, S::Ref<'a>);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let root = self.root?;
        let front = self.front.locate(root, Side::First);
        let entry = (
            front.key(self.store),
            front.leaf.value(self.store, front.position),
        );
        // An unlocated back end is the last entry: stepping past it ends the walk too.
        if self.back.is_at(front) || !front.step_forward() {
            self.root = None;
        }
        Some(entry)
    }
}

impl<S: Store> DoubleEndedIterator for Range<'_, S> {
    #[inline]
    fn next_back(&mut self) -> Option<Self::Item> {
        let root = self.root?;
        let back = self.back.locate(root, Side::Last);
        let entry = (
            back.key(self.store),
            back.leaf.value(self.store, back.position),
        );
        if self.front.is_at(back) || !back.step_backward() {
            self.root = None;
        }
        Some(entry)
    }
}

impl<S: Store> BTree<S> {
    /// Checks every structural invariant (order, hints, fill, balance, separators, length,
    /// node counts); panics with the first one broken. For tests.
    pub fn check_invariants(&self) {
        let Some(root) = &self.root else {
            assert_eq!(self.len, 0, "an empty tree has no entries");
            assert_eq!(
                (self.leaves, self.internals),
                (0, 0),
                "an empty tree has no nodes"
            );
            return;
        };
        let mut leaf_depth = None;
        let bounds = (None, None);
        let counted = check_node(root, bounds, 0, true, &mut leaf_depth, &self.store);
        assert_eq!(counted, self.len, "len matches the entries");
        assert_eq!(
            count_nodes(root),
            (self.leaves, self.internals),
            "node counts"
        );
    }
}

fn check_leaf<S: Store>(
    leaf: &Leaf,
    in_bounds: impl Fn(u64) -> bool,
    is_root: bool,
    store: &S,
) -> usize {
    assert!(leaf.len >= 1 && leaf.len <= LEAF_CAPACITY);
    assert!(is_root || leaf.len >= LEAF_MIN, "leaf fill {}", leaf.len);
    let keys: Vec<u64> = (0..leaf.len).map(|at| leaf.key_at(store, at)).collect();
    assert!(keys.windows(2).all(|pair| pair[0] < pair[1]), "leaf order");
    assert!(
        keys.iter().all(|&key| in_bounds(key)),
        "leaf keys within separators"
    );
    for (at, &key) in keys.iter().enumerate() {
        assert_eq!(leaf.hints[at], hint(key), "hint of entry {at}");
        assert_ne!(leaf.handles[at], NO_HANDLE, "handle of entry {at}");
    }
    assert!(leaf.hints[leaf.len..].iter().all(|&h| h == SATURATED));
    assert!(leaf.handles[leaf.len..].iter().all(|&h| h == NO_HANDLE));
    leaf.len
}

fn check_node<S: Store>(
    node: &BTreeNode,
    (lower, upper): (Option<u64>, Option<u64>),
    depth: usize,
    is_root: bool,
    leaf_depth: &mut Option<usize>,
    store: &S,
) -> usize {
    let in_bounds =
        |key: u64| lower.is_none_or(|lower| lower <= key) && upper.is_none_or(|upper| key < upper);
    match node {
        BTreeNode::Leaf(leaf) => {
            assert_eq!(
                *leaf_depth.get_or_insert(depth),
                depth,
                "all leaves at one depth"
            );
            check_leaf(leaf, in_bounds, is_root, store)
        }
        BTreeNode::Internal(internal) => {
            assert!(internal.len >= 1 && internal.len <= SEPARATOR_CAPACITY);
            assert!(
                is_root || internal.len >= INTERNAL_MIN_SEPARATORS,
                "internal fill {}",
                internal.len
            );
            assert!(internal.keys().windows(2).all(|pair| pair[0] < pair[1]));
            assert!(internal.keys().iter().all(|&key| in_bounds(key)));
            assert!(internal
                .children
                .iter()
                .enumerate()
                .all(|(slot, c)| c.is_some() == (slot <= internal.len)));
            (0..=internal.len)
                .map(|index| {
                    let lower = if index == 0 {
                        lower
                    } else {
                        Some(internal.keys[index - 1])
                    };
                    let upper = if index == internal.len {
                        upper
                    } else {
                        Some(internal.keys[index])
                    };
                    let child = internal.child(index);
                    check_node(child, (lower, upper), depth + 1, false, leaf_depth, store)
                })
                .sum()
        }
    }
}

#[cfg(test)]
mod tests;
