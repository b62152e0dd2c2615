//! An in-memory B+tree: the ordered map under every TREE index.
//!
//! Owns the shape of the tree and nothing about what it stores: entries live only in
//! leaves, internal nodes hold separator keys that route a search, and every node keeps
//! its keys in one contiguous array apart from its values or children, so a search reads
//! a few adjacent cache lines per level instead of striding over entries. Nodes are wide
//! (see [`LEAF_CAPACITY`], [`INTERNAL_FANOUT`]) to keep the tree shallow: at a million
//! entries it has four levels, the upper two of which stay in cache.
//!
//! Searches within a node go through [`TreeKey`], so a key type can bring its own search;
//! `u64` counts the smaller keys with a branch-free loop, and a point lookup on a CPU with
//! AVX2 runs a copy of itself compiled for AVX2 with a vector count (see `simd`).
//!
//! Iteration keeps a path from the root to the current leaf (there are no parent or
//! sibling links, and so no `unsafe`): a range resolves both ends once, O(log n), then
//! walks lazily from either end, O(1) amortised per step.
//!
//! Knows nothing of tuples, indexes or Tarantool semantics.

#[cfg(target_arch = "x86_64")]
mod simd;

use crate::storage::prefetch::{prefetch_line, prefetch_slice};
use smallvec::SmallVec;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Entries per leaf. Measured on u64 keys and 16-byte values at a million random keys:
/// wider leaves make the tree shallower but a search reads more key lines per leaf.
pub const LEAF_CAPACITY: usize = 32;
/// Children per internal node.
pub const INTERNAL_FANOUT: usize = 64;
const SEPARATOR_CAPACITY: usize = INTERNAL_FANOUT - 1;
/// Below these a node (other than the root) borrows from or merges with a sibling. A third
/// rather than a half leaves room between the split point and the merge point, so
/// alternating inserts and removes at one spot do not split and merge the same node.
const LEAF_MIN: usize = LEAF_CAPACITY / 3;
const INTERNAL_MIN_SEPARATORS: usize = INTERNAL_FANOUT / 3;

/// A key the tree can order, with the borrowed form (`Probe`) searches take — `[u8]` for a
/// byte-string key, so a lookup needs no owned key.
///
/// `Default` fills the unused slots of a node's key array (no `MaybeUninit`); it should
/// not allocate.
pub trait TreeKey: Ord + Clone + Default {
    type Probe: ?Sized + Ord;

    fn probe(&self) -> &Self::Probe;

    /// How many of the sorted `keys` are less than `probe`.
    #[inline]
    fn count_less(keys: &[Self], probe: &Self::Probe) -> usize {
        keys.partition_point(|key| key.probe() < probe)
    }

    /// How many of the sorted `keys` are less than or equal to `probe`.
    #[inline]
    fn count_not_greater(keys: &[Self], probe: &Self::Probe) -> usize {
        keys.partition_point(|key| key.probe() <= probe)
    }

    /// Whether [`TreeKey::count_avx2`] is a count of its own, worth a lookup compiled for
    /// AVX2 (see `simd`).
    #[cfg(target_arch = "x86_64")]
    const AVX2_COUNT: bool = false;

    /// [`TreeKey::count_less`], or with `OR_EQUAL` [`TreeKey::count_not_greater`], over
    /// `keys[..len]`, for code compiled with AVX2, into which it is inlined. Takes the
    /// node's whole key array so that a vector count needs no bounds (see `simd`).
    ///
    /// # Safety
    ///
    /// The CPU has the features `simd::available` asks for.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn count_avx2<const OR_EQUAL: bool, const CAP: usize>(
        keys: &[Self; CAP],
        len: usize,
        probe: &Self::Probe,
    ) -> usize {
        if OR_EQUAL {
            Self::count_not_greater(&keys[..len], probe)
        } else {
            Self::count_less(&keys[..len], probe)
        }
    }
}

impl TreeKey for u64 {
    type Probe = u64;

    #[inline]
    fn probe(&self) -> &u64 {
        self
    }

    #[inline]
    fn count_less(keys: &[u64], probe: &u64) -> usize {
        let probe = *probe;
        count_in_blocks(keys, |key| key < probe)
    }

    #[inline]
    fn count_not_greater(keys: &[u64], probe: &u64) -> usize {
        let probe = *probe;
        count_in_blocks(keys, |key| key <= probe)
    }

    #[cfg(target_arch = "x86_64")]
    const AVX2_COUNT: bool = true;

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn count_avx2<const OR_EQUAL: bool, const CAP: usize>(
        keys: &[u64; CAP],
        len: usize,
        probe: &u64,
    ) -> usize {
        // SAFETY: the caller's CPU has the features `simd::count` is compiled for.
        unsafe { simd::count::<OR_EQUAL, CAP>(keys, len, *probe) }
    }
}

/// Keys per block of [`count_in_blocks`]: eight `u64`s are one cache line.
const SEARCH_BLOCK: usize = 8;

/// How many of the sorted `keys` satisfy `below` (true on a prefix of them), counted
/// without a data-dependent branch: first over the last key of each full block, which
/// picks the block where the prefix ends, then within that block. Sixteen comparisons
/// cover a 64-way node, where one count over all keys is a chain of 64, and a binary
/// search a chain of dependent loads and mispredicted branches.
#[inline(always)]
fn count_in_blocks(keys: &[u64], below: impl Fn(u64) -> bool) -> usize {
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

/// [`TreeKey::count_less`], or with `OR_EQUAL` [`TreeKey::count_not_greater`], over
/// `keys[..len]`; with `AVX2`, which only code compiled for AVX2 passes,
/// [`TreeKey::count_avx2`].
#[inline(always)]
fn count<K: TreeKey, const AVX2: bool, const OR_EQUAL: bool, const CAP: usize>(
    keys: &[K; CAP],
    len: usize,
    probe: &K::Probe,
) -> usize {
    #[cfg(target_arch = "x86_64")]
    if AVX2 {
        // SAFETY: `AVX2` is set only in code compiled for it, which runs only on a CPU
        // that has it.
        return unsafe { K::count_avx2::<OR_EQUAL, CAP>(keys, len, probe) };
    }
    if OR_EQUAL {
        K::count_not_greater(&keys[..len], probe)
    } else {
        K::count_less(&keys[..len], probe)
    }
}

/// `repr(C)` keeps `len` next to the first keys: read together, one cache miss, not two.
#[repr(C)]
struct Leaf<K, V> {
    len: usize,
    keys: [K; LEAF_CAPACITY],
    /// `Some` exactly in `..len`; `Option` of a pointer-like value costs no space.
    values: [Option<V>; LEAF_CAPACITY],
}

/// Child `i` holds the keys `k` with `keys[i - 1] <= k < keys[i]` (unbounded at the
/// ends). A separator is the least key of its right subtree when it was made; removals may
/// leave it naming a key that is gone, which still routes correctly.
#[repr(C)]
struct Internal<K, V> {
    /// Separators in use; children in use are one more.
    len: usize,
    keys: [K; SEPARATOR_CAPACITY],
    /// `Some` exactly in `..=len`.
    children: [Option<BTreeNode<K, V>>; INTERNAL_FANOUT],
}

/// All children of one node are of one kind: the tree is balanced.
enum BTreeNode<K, V> {
    Leaf(Box<Leaf<K, V>>),
    Internal(Box<Internal<K, V>>),
}

const MISSING_VALUE: &str = "a leaf has a value in every slot below its length";
const MISSING_CHILD: &str = "an internal node has a child in every slot up to its length";

impl<K: TreeKey, V> Leaf<K, V> {
    fn empty() -> Box<Leaf<K, V>> {
        Box::new(Leaf {
            len: 0,
            keys: std::array::from_fn(|_| K::default()),
            values: std::array::from_fn(|_| None),
        })
    }

    #[inline]
    fn keys(&self) -> &[K] {
        &self.keys[..self.len]
    }

    #[inline]
    fn value(&self, position: usize) -> &V {
        self.values[position].as_ref().expect(MISSING_VALUE)
    }

    /// Puts an entry at `position`; the leaf has room.
    fn insert_at(&mut self, position: usize, key: K, value: V) {
        debug_assert!(self.len < LEAF_CAPACITY && position <= self.len);
        let len = self.len;
        self.keys[position..=len].rotate_right(1);
        self.values[position..=len].rotate_right(1);
        self.keys[position] = key;
        self.values[position] = Some(value);
        self.len += 1;
    }

    fn remove_at(&mut self, position: usize) -> (K, V) {
        debug_assert!(position < self.len);
        let len = self.len;
        self.keys[position..len].rotate_left(1);
        self.values[position..len].rotate_left(1);
        self.len -= 1;
        let key = std::mem::take(&mut self.keys[len - 1]);
        let value = self.values[len - 1].take().expect(MISSING_VALUE);
        (key, value)
    }

    /// Inserts into a full leaf by moving its upper half to a new right sibling; returns the
    /// sibling's least key (its separator) and the sibling.
    fn split_insert(&mut self, position: usize, key: K, value: V) -> (K, Box<Leaf<K, V>>) {
        debug_assert_eq!(self.len, LEAF_CAPACITY);
        let mid = LEAF_CAPACITY / 2;
        let mut right = Leaf::empty();
        for (to, from) in (mid..LEAF_CAPACITY).enumerate() {
            right.keys[to] = std::mem::take(&mut self.keys[from]);
            right.values[to] = self.values[from].take();
        }
        right.len = LEAF_CAPACITY - mid;
        self.len = mid;
        if position < mid {
            self.insert_at(position, key, value);
        } else {
            right.insert_at(position - mid, key, value);
        }
        (right.keys[0].clone(), right)
    }

    /// Moves the first `count` entries of `right` to the end of `self`.
    fn take_from_right(&mut self, right: &mut Leaf<K, V>, count: usize) {
        debug_assert!(self.len + count <= LEAF_CAPACITY && count <= right.len);
        for from in 0..count {
            self.keys[self.len + from] = std::mem::take(&mut right.keys[from]);
            self.values[self.len + from] = right.values[from].take();
        }
        right.keys[..right.len].rotate_left(count);
        right.values[..right.len].rotate_left(count);
        self.len += count;
        right.len -= count;
    }

    /// Moves the last `count` entries of `self` to the front of `right`.
    fn give_to_right(&mut self, right: &mut Leaf<K, V>, count: usize) {
        debug_assert!(right.len + count <= LEAF_CAPACITY && count <= self.len);
        right.keys[..right.len + count].rotate_right(count);
        right.values[..right.len + count].rotate_right(count);
        let first = self.len - count;
        for to in 0..count {
            right.keys[to] = std::mem::take(&mut self.keys[first + to]);
            right.values[to] = self.values[first + to].take();
        }
        self.len -= count;
        right.len += count;
    }
}

impl<K: TreeKey, V> Internal<K, V> {
    fn empty() -> Box<Internal<K, V>> {
        Box::new(Internal {
            len: 0,
            keys: std::array::from_fn(|_| K::default()),
            children: std::array::from_fn(|_| None),
        })
    }

    #[inline]
    fn keys(&self) -> &[K] {
        &self.keys[..self.len]
    }

    #[inline]
    fn child(&self, index: usize) -> &BTreeNode<K, V> {
        self.children[index].as_ref().expect(MISSING_CHILD)
    }

    #[inline]
    fn child_mut(&mut self, index: usize) -> &mut BTreeNode<K, V> {
        self.children[index].as_mut().expect(MISSING_CHILD)
    }

    /// Adds `separator` at `index` and `child` right after it; the node has room.
    fn insert_at(&mut self, index: usize, separator: K, child: BTreeNode<K, V>) {
        debug_assert!(self.len < SEPARATOR_CAPACITY && index <= self.len);
        let len = self.len;
        self.keys[index..=len].rotate_right(1);
        self.keys[index] = separator;
        self.children[index + 1..=len + 1].rotate_right(1);
        self.children[index + 1] = Some(child);
        self.len += 1;
    }

    /// Removes separator `index` and the child to its right, returning both.
    fn remove_at(&mut self, index: usize) -> (K, BTreeNode<K, V>) {
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
        separator: K,
        child: BTreeNode<K, V>,
    ) -> (K, Box<Internal<K, V>>) {
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

impl<K: TreeKey, V> BTreeNode<K, V> {
    fn is_underfull(&self) -> bool {
        match self {
            BTreeNode::Leaf(leaf) => leaf.len < LEAF_MIN,
            BTreeNode::Internal(internal) => internal.len < INTERNAL_MIN_SEPARATORS,
        }
    }

    fn first_key(&self) -> &K {
        match self {
            BTreeNode::Leaf(leaf) => &leaf.keys[0],
            BTreeNode::Internal(internal) => internal.child(0).first_key(),
        }
    }
}

enum InsertOutcome<K, V> {
    Replaced(V),
    Added,
    /// The node split: this separator and right sibling go into the parent.
    Split(K, BTreeNode<K, V>),
}

fn insert_into<K: TreeKey, V>(node: &mut BTreeNode<K, V>, key: K, value: V) -> InsertOutcome<K, V> {
    match node {
        BTreeNode::Leaf(leaf) => {
            prefetch_slice(&leaf.values[..]);
            let position = K::count_less(leaf.keys(), key.probe());
            if position < leaf.len && leaf.keys[position] == key {
                let old = leaf.values[position].replace(value);
                return InsertOutcome::Replaced(old.expect(MISSING_VALUE));
            }
            if leaf.len < LEAF_CAPACITY {
                leaf.insert_at(position, key, value);
                return InsertOutcome::Added;
            }
            let (separator, right) = leaf.split_insert(position, key, value);
            InsertOutcome::Split(separator, BTreeNode::Leaf(right))
        }
        BTreeNode::Internal(internal) => {
            let mut index = K::count_not_greater(internal.keys(), key.probe());
            if index > 0 && shift_into_left_leaf(internal, index, key.probe()) {
                index = K::count_not_greater(internal.keys(), key.probe());
            }
            match insert_into(internal.child_mut(index), key, value) {
                InsertOutcome::Split(separator, child) if internal.len < SEPARATOR_CAPACITY => {
                    internal.insert_at(index, separator, child);
                    InsertOutcome::Added
                }
                InsertOutcome::Split(separator, child) => {
                    let (up, right) = internal.split_insert(index, separator, child);
                    InsertOutcome::Split(up, BTreeNode::Internal(right))
                }
                outcome => outcome,
            }
        }
    }
}

/// Leaves and internal nodes under `node`.
fn count_nodes<K, V>(node: &BTreeNode<K, V>) -> (usize, usize) {
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
/// sequence, a load in key order) would leave every leaf behind them half empty: 16 of
/// 32 entries, 48 bytes per `(u64, tuple)` entry instead of 24. With it the half that
/// stays left of a split is topped up before the next split, so such leaves end full.
/// The probe is not among the moved entries' places: it lands in one of the two leaves
/// with a free slot (the caller routes it again), so the insert that follows never splits.
/// Moving entries frees no node, so lookup cursors stay valid (see [`BTree::found_at`]).
fn shift_into_left_leaf<K: TreeKey, V>(
    internal: &mut Internal<K, V>,
    index: usize,
    probe: &K::Probe,
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
    let position = K::count_less(child.keys(), probe);
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
    internal.keys[index - 1] = child.keys[0].clone();
    true
}

fn remove_from<K: TreeKey, V>(node: &mut BTreeNode<K, V>, probe: &K::Probe) -> Option<(K, V)> {
    match node {
        BTreeNode::Leaf(leaf) => {
            let position = K::count_less(leaf.keys(), probe);
            if position < leaf.len && leaf.keys[position].probe() == probe {
                Some(leaf.remove_at(position))
            } else {
                None
            }
        }
        BTreeNode::Internal(internal) => {
            let index = K::count_not_greater(internal.keys(), probe);
            let removed = remove_from(internal.child_mut(index), probe)?;
            if internal.child(index).is_underfull() {
                rebalance(internal, index);
            }
            Some(removed)
        }
    }
}

/// Brings the underfull child at `index` back to its minimum by merging it with a sibling
/// when both fit in one node, or else by moving entries over from the sibling.
fn rebalance<K: TreeKey, V>(parent: &mut Internal<K, V>, index: usize) {
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
                true
            } else {
                let left_target = total / 2;
                if left.len < left_target {
                    left.take_from_right(right, left_target - left.len);
                } else {
                    left.give_to_right(right, left.len - left_target);
                }
                *separator = right.keys[0].clone();
                false
            }
        }
        (BTreeNode::Internal(left), BTreeNode::Internal(right)) => {
            let total = left.len + 1 + right.len;
            if total <= SEPARATOR_CAPACITY {
                merge_internal(left, std::mem::take(separator), right);
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
fn merge_internal<K: TreeKey, V>(
    left: &mut Internal<K, V>,
    separator: K,
    right: &mut Internal<K, V>,
) {
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
fn rotate_to_left<K: TreeKey, V>(
    left: &mut Internal<K, V>,
    separator: &mut K,
    right: &mut Internal<K, V>,
    count: usize,
) {
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
fn rotate_to_right<K: TreeKey, V>(
    left: &mut Internal<K, V>,
    separator: &mut K,
    right: &mut Internal<K, V>,
    count: usize,
) {
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
    /// Search this leaf's keys and read the value found (keys and values are loading).
    SearchLeaf(*const u8),
    /// The probe was at `position` of this leaf when the search ran.
    Found {
        leaf: *const u8,
        position: usize,
    },
    Done,
}

/// Starts loading `node`'s length and keys and says it is to be searched next. A leaf's
/// values load along with its keys: reading the value in the same step as the search gives
/// the tuple's load one more request of lead, which took a tenth off a get at a million
/// keys (in process, 386-400 -> 347-349 ns), while loading an internal node's children
/// with its keys (to save a step per level) gained nothing.
#[inline]
fn node_position<K, V>(node: &BTreeNode<K, V>) -> CursorAt {
    match node {
        BTreeNode::Internal(internal) => {
            prefetch_line((&internal.len as *const usize).cast());
            prefetch_slice(&internal.keys[..]);
            CursorAt::SearchInternal((&**internal as *const Internal<K, V>).cast())
        }
        BTreeNode::Leaf(leaf) => {
            prefetch_line((&leaf.len as *const usize).cast());
            prefetch_slice(&leaf.keys[..]);
            prefetch_slice(&leaf.values[..]);
            CursorAt::SearchLeaf((&**leaf as *const Leaf<K, V>).cast())
        }
    }
}

/// An ordered map from `K` to `V`.
pub struct BTree<K, V> {
    root: Option<BTreeNode<K, V>>,
    len: usize,
    /// Changes whenever a node may have been freed (and when the tree is made), and is
    /// never the same in two trees: a [`LookupCursor`] taken with this stamp may follow
    /// its node pointers as long as the stamp is unchanged.
    stamp: u64,
}

/// A source of stamps no two trees (or two states of one tree) share.
fn fresh_stamp() -> u64 {
    static NEXT_STAMP: AtomicU64 = AtomicU64::new(1);
    NEXT_STAMP.fetch_add(1, Relaxed)
}

impl<K: TreeKey, V> Default for BTree<K, V> {
    fn default() -> Self {
        BTree::new()
    }
}

impl<K: TreeKey, V> BTree<K, V> {
    pub fn new() -> BTree<K, V> {
        BTree {
            root: None,
            len: 0,
            stamp: fresh_stamp(),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn clear(&mut self) {
        self.root = None;
        self.len = 0;
        self.stamp = fresh_stamp();
    }

    #[inline]
    pub fn get(&self, probe: &K::Probe) -> Option<&V> {
        self.get_key_value(probe).map(|(_, value)| value)
    }

    #[inline]
    pub fn get_key_value(&self, probe: &K::Probe) -> Option<(&K, &V)> {
        #[cfg(target_arch = "x86_64")]
        if K::AVX2_COUNT && simd::available() {
            // SAFETY: the CPU has the features `simd::available` asks for.
            return unsafe { self.get_key_value_avx2(probe) };
        }
        self.lookup::<false>(probe)
    }

    /// [`BTree::get`] for a write about to change what it finds (a delete, an update): the
    /// scalar count. The leaf such a lookup reads is often the one the write before it
    /// just changed, its keys still on their way to the cache in 8-byte stores, which
    /// the vector count's 32-byte loads cannot take their data from.
    #[inline]
    pub fn get_for_write(&self, probe: &K::Probe) -> Option<&V> {
        self.lookup::<false>(probe).map(|(_, value)| value)
    }

    /// [`BTree::get_key_value`] compiled for AVX2, with the counts inlined: one feature
    /// check per lookup rather than per node.
    ///
    /// # Safety
    ///
    /// The CPU has the features `simd::available` asks for.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn get_key_value_avx2(&self, probe: &K::Probe) -> Option<(&K, &V)> {
        self.lookup::<true>(probe)
    }

    /// The lookup under [`BTree::get_key_value`], counting with [`TreeKey::count_avx2`]
    /// if `AVX2` (only where the CPU has it).
    #[inline(always)]
    fn lookup<const AVX2: bool>(&self, probe: &K::Probe) -> Option<(&K, &V)> {
        let leaf = self.find_leaf::<AVX2>(probe)?;
        // The value lines load while the keys are searched, so the value read after the
        // search hits cache instead of taking a second miss in series (measured: about a
        // tenth off a lookup at a million keys).
        prefetch_slice(&leaf.values[..]);
        let position = count::<K, AVX2, false, _>(&leaf.keys, leaf.len, probe);
        let key = leaf.keys().get(position)?;
        (key.probe() == probe).then(|| (key, leaf.value(position)))
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
    pub fn prefetch_step(&self, probe: &K::Probe, cursor: &mut LookupCursor) -> Option<&V> {
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
                    let internal = &*node.cast::<Internal<K, V>>();
                    let slot = &internal.children[K::count_not_greater(internal.keys(), probe)];
                    prefetch_line((slot as *const Option<BTreeNode<K, V>>).cast());
                    cursor.at =
                        CursorAt::ReadChild((slot as *const Option<BTreeNode<K, V>>).cast());
                    None
                }
                CursorAt::ReadChild(slot) => {
                    cursor.at = match &*slot.cast::<Option<BTreeNode<K, V>>>() {
                        Some(child) => node_position(child),
                        None => CursorAt::Done,
                    };
                    None
                }
                CursorAt::SearchLeaf(node) => {
                    let leaf = &*node.cast::<Leaf<K, V>>();
                    let position = K::count_less(leaf.keys(), probe);
                    match leaf.keys().get(position) {
                        Some(key) if key.probe() == probe => {
                            cursor.at = CursorAt::Found {
                                leaf: node,
                                position,
                            };
                            leaf.values[position].as_ref()
                        }
                        _ => {
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
    pub fn found_at(&self, probe: &K::Probe, cursor: &LookupCursor) -> Option<&V> {
        let CursorAt::Found { leaf, position } = cursor.at else {
            return None;
        };
        if cursor.stamp != self.stamp {
            return None;
        }
        // SAFETY: the pointer was taken from this tree's live leaf (stamps are unique to one
        // tree) and no node has been freed since (a free changes the stamp), so it still
        // points at a leaf of this tree; `&self` keeps writers out while we read.
        let leaf = unsafe { &*leaf.cast::<Leaf<K, V>>() };
        match leaf.keys().get(position) {
            Some(key) if key.probe() == probe => leaf.values[position].as_ref(),
            _ => None,
        }
    }

    #[inline]
    fn leaf_for(&self, probe: &K::Probe) -> Option<&Leaf<K, V>> {
        self.find_leaf::<false>(probe)
    }

    /// The leaf where `probe` is or would be, counting as [`count`] does with `AVX2`.
    #[inline(always)]
    fn find_leaf<const AVX2: bool>(&self, probe: &K::Probe) -> Option<&Leaf<K, V>> {
        let mut node = self.root.as_ref()?;
        loop {
            match node {
                BTreeNode::Internal(internal) => {
                    let index = count::<K, AVX2, true, _>(&internal.keys, internal.len, probe);
                    node = internal.child(index);
                }
                BTreeNode::Leaf(leaf) => return Some(leaf),
            }
        }
    }

    /// Starts loading the leaf where `probe` is or would be: its keys and its values, so
    /// a write that looks it up a little later finds them in cache. The walk to the leaf
    /// reads the internal nodes, which a large tree's upper levels keep in cache anyway.
    #[inline]
    pub fn prefetch_leaf(&self, probe: &K::Probe) {
        if let Some(leaf) = self.leaf_for(probe) {
            prefetch_slice(std::slice::from_ref(leaf));
        }
    }

    /// The leaf where `probe` is or would be, its lines already loading, for a write that
    /// has other work to do before it looks there: the walk down pays the upper levels'
    /// loads now, and the leaf's cache miss overlaps that work. `None` on an empty tree.
    /// Always inlined, as `Index::unsigned_leaf` is.
    #[inline(always)]
    pub fn leaf_for_write(&mut self, probe: &K::Probe) -> Option<LeafHandle<'_, K, V>> {
        let BTree { root, len, .. } = self;
        let mut node = root.as_mut()?;
        loop {
            match node {
                BTreeNode::Internal(internal) => {
                    let index = K::count_not_greater(internal.keys(), probe);
                    node = internal.child_mut(index);
                }
                BTreeNode::Leaf(leaf) => {
                    prefetch_slice(std::slice::from_ref(&**leaf));
                    return Some(LeafHandle {
                        leaf,
                        tree_len: len,
                    });
                }
            }
        }
    }

    /// Inserts or overwrites; returns the value previously stored under `key`. An
    /// overwrite keeps the stored key.
    ///
    /// One loop down to the leaf, which takes the entry in place unless it is full; only a
    /// split walks the tree again, recursively, to carry separators up.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        if let Some(root) = &mut self.root {
            let mut node = root;
            loop {
                match node {
                    BTreeNode::Internal(internal) => {
                        let index = K::count_not_greater(internal.keys(), key.probe());
                        node = internal.child_mut(index);
                    }
                    BTreeNode::Leaf(leaf) => {
                        prefetch_slice(&leaf.values[..]);
                        let position = K::count_less(leaf.keys(), key.probe());
                        if position < leaf.len && leaf.keys[position] == key {
                            let old = leaf.values[position].replace(value);
                            return Some(old.expect(MISSING_VALUE));
                        }
                        if leaf.len < LEAF_CAPACITY {
                            leaf.insert_at(position, key, value);
                            self.len += 1;
                            return None;
                        }
                        break;
                    }
                }
            }
        }
        self.insert_splitting(key, value)
    }

    /// `insert` when the root is missing or the key's leaf is full.
    #[inline(never)]
    fn insert_splitting(&mut self, key: K, value: V) -> Option<V> {
        let Some(root) = &mut self.root else {
            let mut leaf = Leaf::empty();
            leaf.insert_at(0, key, value);
            self.root = Some(BTreeNode::Leaf(leaf));
            self.len = 1;
            return None;
        };
        match insert_into(root, key, value) {
            InsertOutcome::Replaced(old) => return Some(old),
            InsertOutcome::Added => {}
            InsertOutcome::Split(separator, right) => {
                let mut new_root = Internal::empty();
                new_root.children[0] = self.root.take();
                new_root.children[1] = Some(right);
                new_root.keys[0] = separator;
                new_root.len = 1;
                self.root = Some(BTreeNode::Internal(new_root));
            }
        }
        self.len += 1;
        None
    }

    pub fn remove(&mut self, probe: &K::Probe) -> Option<V> {
        self.remove_entry(probe).map(|(_, value)| value)
    }

    pub fn remove_entry(&mut self, probe: &K::Probe) -> Option<(K, V)> {
        let root = self.root.as_mut()?;
        let removed = remove_from(root, probe)?;
        // A removal may merge nodes and free one.
        self.stamp = fresh_stamp();
        self.len -= 1;
        let collapsed = match root {
            BTreeNode::Internal(internal) if internal.len == 0 => internal.children[0].take(),
            BTreeNode::Leaf(leaf) if leaf.len == 0 => None,
            _ => return Some(removed),
        };
        self.root = collapsed;
        Some(removed)
    }

    /// Heap bytes of the tree's nodes (without what its values point to), counted by a
    /// walk over the internal nodes: O(entries / LEAF_CAPACITY), for memory reports.
    pub fn node_bytes(&self) -> usize {
        let (leaves, internals) = self.root.as_ref().map_or((0, 0), count_nodes);
        leaves * std::mem::size_of::<Leaf<K, V>>()
            + internals * std::mem::size_of::<Internal<K, V>>()
    }

    /// Builds a tree from entries sorted by strictly increasing key, filling every leaf
    /// (spreading the remainder so none is underfull) and then each level above it: O(n),
    /// no searches.
    pub fn from_sorted<I>(entries: I) -> BTree<K, V>
    where
        I: IntoIterator<Item = (K, V)>,
        I::IntoIter: ExactSizeIterator,
    {
        let mut entries = entries.into_iter();
        let len = entries.len();
        if len == 0 {
            return BTree::new();
        }
        let mut level: Vec<BTreeNode<K, V>> = Vec::with_capacity(len.div_ceil(LEAF_CAPACITY));
        for size in even_sizes(len, LEAF_CAPACITY) {
            let mut leaf = Leaf::empty();
            for (slot, (key, value)) in entries.by_ref().take(size).enumerate() {
                debug_assert!(slot == 0 || leaf.keys[slot - 1] < key, "sorted input");
                leaf.keys[slot] = key;
                leaf.values[slot] = Some(value);
                leaf.len = slot + 1;
            }
            level.push(BTreeNode::Leaf(leaf));
        }
        debug_assert!(entries.next().is_none(), "ExactSizeIterator told the truth");
        while level.len() > 1 {
            let mut nodes = level.into_iter();
            let count = nodes.len();
            let mut parents = Vec::with_capacity(count.div_ceil(INTERNAL_FANOUT));
            for size in even_sizes(count, INTERNAL_FANOUT) {
                let mut parent = Internal::empty();
                for (slot, child) in nodes.by_ref().take(size).enumerate() {
                    if slot > 0 {
                        parent.keys[slot - 1] = child.first_key().clone();
                    }
                    parent.children[slot] = Some(child);
                }
                parent.len = size - 1;
                parents.push(BTreeNode::Internal(parent));
            }
            level = parents;
        }
        let tree = BTree {
            root: level.pop(),
            len,
            stamp: fresh_stamp(),
        };
        debug_assert!(tree.root.is_some());
        tree
    }

    /// Entries with keys within the bounds, lazily, from either end. Bounds that admit
    /// no key (including inverted ones) give an empty range rather than a panic.
    pub fn range(&self, start: Bound<&K::Probe>, end: Bound<&K::Probe>) -> Range<'_, K, V> {
        let empty = Range {
            root: None,
            front: End::Edge,
            back: End::Edge,
        };
        let Some(root) = &self.root else {
            return empty;
        };
        // An unbounded end is the tree's edge, found only if the walk comes from that side:
        // a forward scan from a key then costs one descent, not two.
        let front = match start {
            Bound::Unbounded => End::Edge,
            bounded => match Cursor::first_in(root, bounded) {
                Some(cursor) => End::At(cursor),
                None => return empty,
            },
        };
        let back = match end {
            Bound::Unbounded => End::Edge,
            bounded => match Cursor::last_in(root, bounded) {
                Some(cursor) => End::At(cursor),
                None => return empty,
            },
        };
        if let (End::At(front), End::At(back)) = (&front, &back) {
            if front.key() > back.key() {
                return empty;
            }
        }
        Range {
            root: Some(root),
            front,
            back,
        }
    }

    pub fn iter(&self) -> Range<'_, K, V> {
        self.range(Bound::Unbounded, Bound::Unbounded)
    }
}

/// The leaf a key belongs in, held for one write (see [`BTree::leaf_for_write`]); the tree
/// stays borrowed, so nothing else changes it in between.
pub struct LeafHandle<'a, K, V> {
    leaf: &'a mut Leaf<K, V>,
    tree_len: &'a mut usize,
}

impl<'a, K: TreeKey, V> LeafHandle<'a, K, V> {
    /// Searches the leaf for `probe`: where its entry is, or would go.
    #[inline]
    pub fn search(self, probe: &K::Probe) -> LeafPosition<'a, K, V> {
        let position = K::count_less(self.leaf.keys(), probe);
        let found = position < self.leaf.len && self.leaf.keys[position].probe() == probe;
        LeafPosition {
            handle: self,
            position,
            found,
        }
    }
}

/// A key's place in its leaf, found by [`LeafHandle::search`].
pub struct LeafPosition<'a, K, V> {
    handle: LeafHandle<'a, K, V>,
    position: usize,
    found: bool,
}

impl<K: TreeKey, V> LeafPosition<'_, K, V> {
    /// The value stored under the searched key, if any.
    #[inline]
    pub fn value(&self) -> Option<&V> {
        self.found.then(|| self.handle.leaf.value(self.position))
    }

    /// Stores `value` under `key`, the key searched for, and returns the value it
    /// displaced, as [`BTree::insert`] does; or hands the entry back when the key is new
    /// and the leaf full, for `BTree::insert` to split it.
    #[inline]
    pub fn put(self, key: K, value: V) -> Result<Option<V>, (K, V)> {
        let LeafPosition {
            handle: LeafHandle { leaf, tree_len },
            position,
            found,
        } = self;
        debug_assert_eq!(position, K::count_less(leaf.keys(), key.probe()));
        if found {
            let old = leaf.values[position].replace(value);
            return Ok(Some(old.expect(MISSING_VALUE)));
        }
        if leaf.len == LEAF_CAPACITY {
            return Err((key, value));
        }
        leaf.insert_at(position, key, value);
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
struct Cursor<'a, K, V> {
    /// Each internal node from the root down, with the child index taken.
    path: SmallVec<[(&'a Internal<K, V>, usize); 8]>,
    leaf: &'a Leaf<K, V>,
    position: usize,
}

impl<K, V> Clone for Cursor<'_, K, V> {
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

impl<'a, K: TreeKey, V> Cursor<'a, K, V> {
    /// Descends from `node` along its first or last children to a leaf.
    fn to_edge(
        mut path: SmallVec<[(&'a Internal<K, V>, usize); 8]>,
        mut node: &'a BTreeNode<K, V>,
        side: Side,
    ) -> Cursor<'a, K, V> {
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
    fn towards(root: &'a BTreeNode<K, V>, probe: &K::Probe, inclusive: bool) -> Cursor<'a, K, V> {
        let mut path = SmallVec::new();
        let mut node = root;
        loop {
            match node {
                BTreeNode::Internal(internal) => {
                    let index = K::count_not_greater(internal.keys(), probe);
                    path.push((&**internal, index));
                    node = internal.child(index);
                }
                BTreeNode::Leaf(leaf) => {
                    // As in `get`: the first entry's value is read right after the search.
                    prefetch_slice(&leaf.values[..]);
                    let position = if inclusive {
                        K::count_not_greater(leaf.keys(), probe)
                    } else {
                        K::count_less(leaf.keys(), probe)
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

    /// The least entry within `start`, if any.
    fn first_in(root: &'a BTreeNode<K, V>, start: Bound<&K::Probe>) -> Option<Cursor<'a, K, V>> {
        let mut cursor = match start {
            Bound::Unbounded => return Some(Cursor::to_edge(SmallVec::new(), root, Side::First)),
            Bound::Included(probe) => Cursor::towards(root, probe, false),
            Bound::Excluded(probe) => Cursor::towards(root, probe, true),
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
    fn last_in(root: &'a BTreeNode<K, V>, end: Bound<&K::Probe>) -> Option<Cursor<'a, K, V>> {
        let mut cursor = match end {
            Bound::Unbounded => return Some(Cursor::to_edge(SmallVec::new(), root, Side::Last)),
            Bound::Included(probe) => Cursor::towards(root, probe, true),
            Bound::Excluded(probe) => Cursor::towards(root, probe, false),
        };
        // `position` counts the keys within the bound; the last of them precedes it.
        if cursor.position == 0 {
            return cursor.step_backward().then_some(cursor);
        }
        cursor.position -= 1;
        Some(cursor)
    }

    #[inline]
    fn key(&self) -> &'a K {
        &self.leaf.keys[self.position]
    }

    #[inline]
    fn entry(&self) -> (&'a K, &'a V) {
        (
            &self.leaf.keys[self.position],
            self.leaf.value(self.position),
        )
    }

    fn same_position(&self, other: &Cursor<'a, K, V>) -> bool {
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
enum End<'a, K, V> {
    Edge,
    At(Cursor<'a, K, V>),
}

impl<'a, K: TreeKey, V> End<'a, K, V> {
    #[inline]
    fn locate(&mut self, root: &'a BTreeNode<K, V>, side: Side) -> &mut Cursor<'a, K, V> {
        if let End::Edge = self {
            *self = End::At(Cursor::to_edge(SmallVec::new(), root, side));
        }
        match self {
            End::At(cursor) => cursor,
            End::Edge => unreachable!("located just above"),
        }
    }

    #[inline]
    fn is_at(&self, cursor: &Cursor<'a, K, V>) -> bool {
        match self {
            End::At(end) => end.same_position(cursor),
            End::Edge => false,
        }
    }
}

/// A lazy, double-ended walk over the entries between two ends.
pub struct Range<'a, K, V> {
    /// `None` for an empty range, and once the two ends have met.
    root: Option<&'a BTreeNode<K, V>>,
    front: End<'a, K, V>,
    back: End<'a, K, V>,
}

impl<'a, K: TreeKey, V> Iterator for Range<'a, K, V> {
    type Item = (&'a K, &'a V);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let root = self.root?;
        let front = self.front.locate(root, Side::First);
        let entry = front.entry();
        // An unlocated back end is the last entry: stepping past it ends the walk too.
        if self.back.is_at(front) || !front.step_forward() {
            self.root = None;
        }
        Some(entry)
    }
}

impl<K: TreeKey, V> DoubleEndedIterator for Range<'_, K, V> {
    #[inline]
    fn next_back(&mut self) -> Option<Self::Item> {
        let root = self.root?;
        let back = self.back.locate(root, Side::Last);
        let entry = back.entry();
        if self.front.is_at(back) || !back.step_backward() {
            self.root = None;
        }
        Some(entry)
    }
}

impl<K: TreeKey + std::fmt::Debug, V> BTree<K, V> {
    /// Checks every structural invariant (order, fill, balance, separators, length);
    /// panics with the first one broken. For tests.
    pub fn check_invariants(&self) {
        let Some(root) = &self.root else {
            assert_eq!(self.len, 0, "an empty tree has no entries");
            return;
        };
        let mut leaf_depth = None;
        let counted = check_node(root, None, None, 0, true, &mut leaf_depth);
        assert_eq!(counted, self.len, "len matches the entries");
    }
}

fn check_node<K: TreeKey + std::fmt::Debug, V>(
    node: &BTreeNode<K, V>,
    lower: Option<&K>,
    upper: Option<&K>,
    depth: usize,
    is_root: bool,
    leaf_depth: &mut Option<usize>,
) -> usize {
    let in_bounds =
        |key: &K| lower.is_none_or(|lower| lower <= key) && upper.is_none_or(|upper| key < upper);
    match node {
        BTreeNode::Leaf(leaf) => {
            assert_eq!(
                *leaf_depth.get_or_insert(depth),
                depth,
                "all leaves at one depth"
            );
            assert!(leaf.len >= 1 && leaf.len <= LEAF_CAPACITY);
            assert!(is_root || leaf.len >= LEAF_MIN, "leaf fill {}", leaf.len);
            assert!(leaf.keys().windows(2).all(|pair| pair[0] < pair[1]));
            assert!(
                leaf.keys().iter().all(in_bounds),
                "leaf keys within separators"
            );
            assert!(leaf
                .values
                .iter()
                .enumerate()
                .all(|(slot, v)| v.is_some() == (slot < leaf.len)));
            leaf.len
        }
        BTreeNode::Internal(internal) => {
            assert!(internal.len >= 1 && internal.len <= SEPARATOR_CAPACITY);
            assert!(
                is_root || internal.len >= INTERNAL_MIN_SEPARATORS,
                "internal fill {}",
                internal.len
            );
            assert!(internal.keys().windows(2).all(|pair| pair[0] < pair[1]));
            assert!(internal.keys().iter().all(in_bounds));
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
                        Some(&internal.keys[index - 1])
                    };
                    let upper = if index == internal.len {
                        upper
                    } else {
                        Some(&internal.keys[index])
                    };
                    check_node(
                        internal.child(index),
                        lower,
                        upper,
                        depth + 1,
                        false,
                        leaf_depth,
                    )
                })
                .sum()
        }
    }
}

#[cfg(test)]
mod tests;
