//! A B+tree keyed by byte strings whose values hold their own keys: the ordered map under
//! every TREE index kept as bytes (secondary indexes, keys of several parts or of another
//! type than one unsigned).
//!
//! Owns the shape of the tree; what a key is made of, it leaves to its [`KeyStore`].
//!
//! # Leaves: 20 bytes an entry, no key
//!
//! A leaf entry is the key's *head*, its first 16 bytes zero-padded as two big-endian
//! words, and the value's 32-bit handle. The key itself lives in the value (an index entry's
//! key is made of its tuple's fields), so the leaf does not repeat it: where heads tie, the
//! store writes the key out of the value for a whole comparison. Heads order keys as their
//! bytes do (see [`head_of`]), and on the shipped 5-part `customers` index the first two
//! parts, 16 bytes, nearly always differ, so a search reads one value at most, the one it
//! returns. std's map of `(key, tuple)` took 40 bytes an entry plus a heap copy of each key
//! longer than 16 bytes; its searches followed those copies and its nodes of 11 entries
//! made a million-entry tree six levels deep.
//!
//! Heads sit in one array apart from the handles, so a search counts through a few adjacent
//! lines. Unused leaf slots hold the greatest head, below no probe, so counts run over the
//! whole array.
//!
//! # Internal nodes: whole separators
//!
//! Separators are whole keys (heads in one array, bytes beside them): a descent never reads
//! a value. A separator is the least key of its right subtree when it was made; removals may
//! leave it naming a key that is gone, which still routes correctly.
//!
//! Iteration keeps a path from the root to the current leaf, as [`super::BTree`] does.
//!
//! Knows nothing of tuples, indexes or Tarantool semantics.

use super::{count_in_blocks, even_sizes, malloc_chunk_bytes, NodeCounts, Side};
use crate::storage::key::{KeyBuf, SearchKeyBuf};
use crate::storage::prefetch::prefetch_object;
use smallvec::SmallVec;
use std::cmp::Ordering;
use std::ops::Bound;

/// Entries per leaf: sixteen lines of heads, four of handles.
pub const LEAF_CAPACITY: usize = 64;
/// Children per internal node.
pub const INTERNAL_FANOUT: usize = 64;
const SEPARATOR_CAPACITY: usize = INTERNAL_FANOUT - 1;
/// Below these a node (other than the root) borrows from or merges with a sibling.
const LEAF_MIN: usize = LEAF_CAPACITY / 3;
const INTERNAL_MIN_SEPARATORS: usize = INTERNAL_FANOUT / 3;
/// The handle of an unused leaf slot; a [`KeyStore`] never gives it to a value.
const NO_HANDLE: u32 = 0;
/// The head of every unused slot: no head is above it.
const UNUSED_HEAD: KeyHead = [u64::MAX; 2];
const LEAF_ALLOCATION_BYTES: usize = malloc_chunk_bytes(std::mem::size_of::<BytesLeaf>());
const INTERNAL_ALLOCATION_BYTES: usize = malloc_chunk_bytes(std::mem::size_of::<BytesInternal>());

/// A key's first 16 bytes, zero-padded, as two big-endian words.
pub type KeyHead = [u64; 2];

/// The head of `bytes`. Heads compare as the padded bytes do: where two differ, the first
/// differing padded byte is a real byte of both keys (which order them there), or a real
/// byte of one against the other's padding, where the shorter key is a proper prefix of
/// the longer and so the smaller, and the real byte, not equal to the padding's zero, is
/// above it. So unequal heads order two keys as their bytes do, and equal heads say
/// nothing.
#[inline]
pub fn head_of(bytes: &[u8]) -> KeyHead {
    let mut padded = [0u8; 16];
    let len = bytes.len().min(16);
    padded[..len].copy_from_slice(&bytes[..len]);
    let (high, low) = padded.split_at(8);
    [
        u64::from_be_bytes(high.try_into().unwrap_or_default()),
        u64::from_be_bytes(low.try_into().unwrap_or_default()),
    ]
}

#[inline(always)]
fn head_less(a: KeyHead, b: KeyHead) -> bool {
    (a[0] < b[0]) | ((a[0] == b[0]) & (a[1] < b[1]))
}

/// How many of the sorted `heads` are below `probe`.
#[inline]
fn count_heads_less(heads: &[KeyHead], probe: KeyHead) -> usize {
    count_in_blocks(heads, |head| head_less(head, probe))
}

/// A key to look for: its bytes, and its head worked out once.
#[derive(Debug, Clone, Copy)]
pub struct Probe<'a> {
    head: KeyHead,
    bytes: &'a [u8],
}

impl<'a> Probe<'a> {
    #[inline]
    pub fn new(bytes: &'a [u8]) -> Probe<'a> {
        Probe {
            head: head_of(bytes),
            bytes,
        }
    }

    /// Compares with a separator of an internal node.
    #[inline]
    fn cmp_separator(&self, head: KeyHead, bytes: &[u8]) -> Ordering {
        self.head.cmp(&head).then_with(|| self.bytes.cmp(bytes))
    }
}

/// Where a tree's values live: it keeps each as a 32-bit handle, and asks the store for the
/// value a handle names and for the key that value holds.
pub trait KeyStore {
    /// A value as the tree takes and gives it back.
    type Value;
    /// A value as a lookup lends it.
    type Ref<'a>: Copy
    where
        Self: 'a;

    /// Takes `value` and returns its handle: never 0.
    fn pack(&self, value: Self::Value) -> u32;

    /// Gives back the value of `handle`, which is then no longer the tree's.
    ///
    /// # Safety
    ///
    /// `handle` came from [`KeyStore::pack`] of this store and is unpacked once.
    unsafe fn unpack(&self, handle: u32) -> Self::Value;

    /// The value of `handle`, lent.
    ///
    /// # Safety
    ///
    /// `handle` came from [`KeyStore::pack`] of this store and is not yet unpacked.
    unsafe fn get(&self, handle: u32) -> Self::Ref<'_>;

    /// Appends the key the value of `handle` is stored under to `out`.
    ///
    /// # Safety
    ///
    /// As [`KeyStore::get`].
    unsafe fn write_key(&self, handle: u32, out: &mut SearchKeyBuf);

    /// No key is shorter than this. A probe of at most 16 bytes and shorter than this
    /// whose head ties a key's is a proper prefix of that key, so below it: a search by a
    /// key prefix (a select on the first parts of an index) then writes no key.
    fn shortest_key(&self) -> usize {
        0
    }
}

/// The key of `handle`, written by `store`.
#[inline]
fn key_of<S: KeyStore>(store: &S, handle: u32) -> SearchKeyBuf {
    let mut key = SearchKeyBuf::new();
    // SAFETY: callers pass handles of live entries.
    unsafe { store.write_key(handle, &mut key) };
    key
}

/// A separator: a head, and the whole key it is the head of.
type Separator = (KeyHead, KeyBuf);

fn separator_of(key: &[u8]) -> Separator {
    (head_of(key), KeyBuf::from_slice(key))
}

/// Heap bytes of a separator too long to stay inline.
fn spilled_bytes(key: &KeyBuf) -> isize {
    if key.spilled() {
        key.capacity() as isize
    } else {
        0
    }
}

/// Nodes and separator bytes made and freed by one change, for the tree's count of them.
#[derive(Default)]
struct Counts {
    nodes: NodeCounts,
    separator_bytes: isize,
}

#[repr(C)]
struct BytesLeaf {
    /// Sorted heads in `..len`, [`UNUSED_HEAD`] after.
    heads: [KeyHead; LEAF_CAPACITY],
    /// Handles in `..len`, [`NO_HANDLE`] after.
    handles: [u32; LEAF_CAPACITY],
    len: usize,
}

/// Child `i` holds the keys `k` with `separator[i - 1] <= k < separator[i]` (unbounded at
/// the ends).
struct BytesInternal {
    /// Separators in use; children in use are one more.
    len: usize,
    heads: [KeyHead; SEPARATOR_CAPACITY],
    keys: [KeyBuf; SEPARATOR_CAPACITY],
    /// `Some` exactly in `..=len`.
    children: [Option<BytesNode>; INTERNAL_FANOUT],
}

/// All children of one node are of one kind: the tree is balanced.
enum BytesNode {
    Leaf(Box<BytesLeaf>),
    Internal(Box<BytesInternal>),
}

const MISSING_CHILD: &str = "an internal node has a child in every slot up to its length";

impl BytesLeaf {
    fn empty() -> Box<BytesLeaf> {
        Box::new(BytesLeaf {
            heads: [UNUSED_HEAD; LEAF_CAPACITY],
            handles: [NO_HANDLE; LEAF_CAPACITY],
            len: 0,
        })
    }

    #[inline]
    fn value<'s, S: KeyStore>(&self, store: &'s S, position: usize) -> S::Ref<'s> {
        debug_assert!(position < self.len);
        // SAFETY: a handle below the leaf's length is a live packed one.
        unsafe { store.get(self.handles[position]) }
    }

    fn key_at<S: KeyStore>(&self, store: &S, position: usize) -> SearchKeyBuf {
        debug_assert!(position < self.len);
        key_of(store, self.handles[position])
    }

    /// How many entries have keys below `probe`, and whether the entry after them holds
    /// it. Only entries whose heads tie the probe's are compared whole, and none when the
    /// probe is a prefix of every key its head ties ([`KeyStore::shortest_key`]).
    #[inline]
    fn search<S: KeyStore>(&self, store: &S, probe: &Probe<'_>) -> (usize, bool) {
        let mut position = count_heads_less(&self.heads, probe.head);
        if probe.bytes.len() <= 16 && probe.bytes.len() < store.shortest_key() {
            return (position, false);
        }
        while position < self.len && self.heads[position] == probe.head {
            match self.key_at(store, position).as_slice().cmp(probe.bytes) {
                Ordering::Less => position += 1,
                Ordering::Equal => return (position, true),
                Ordering::Greater => break,
            }
        }
        (position, false)
    }

    /// How many entries have keys below `probe` (`or_equal`: at most `probe`).
    #[inline]
    fn position<S: KeyStore>(&self, store: &S, probe: &Probe<'_>, or_equal: bool) -> usize {
        let (position, found) = self.search(store, probe);
        position + usize::from(found && or_equal)
    }

    fn insert_at(&mut self, position: usize, head: KeyHead, handle: u32) {
        debug_assert!(self.len < LEAF_CAPACITY && position <= self.len);
        let len = self.len;
        self.heads[position..=len].rotate_right(1);
        self.handles[position..=len].rotate_right(1);
        self.heads[position] = head;
        self.handles[position] = handle;
        self.len += 1;
    }

    fn remove_at(&mut self, position: usize) -> u32 {
        debug_assert!(position < self.len);
        let len = self.len;
        let handle = self.handles[position];
        self.heads[position..len].rotate_left(1);
        self.handles[position..len].rotate_left(1);
        self.heads[len - 1] = UNUSED_HEAD;
        self.handles[len - 1] = NO_HANDLE;
        self.len -= 1;
        handle
    }

    /// Inserts into a full leaf by moving its upper half to a new right sibling.
    fn split_insert(&mut self, position: usize, head: KeyHead, handle: u32) -> Box<BytesLeaf> {
        debug_assert_eq!(self.len, LEAF_CAPACITY);
        let mid = LEAF_CAPACITY / 2;
        let mut right = BytesLeaf::empty();
        self.give_to_right(&mut right, LEAF_CAPACITY - mid);
        if position < mid {
            self.insert_at(position, head, handle);
        } else {
            right.insert_at(position - mid, head, handle);
        }
        right
    }

    /// Moves the first `count` entries of `right` to the end of `self`.
    fn take_from_right(&mut self, right: &mut BytesLeaf, count: usize) {
        debug_assert!(self.len + count <= LEAF_CAPACITY && count <= right.len);
        let (len, right_len) = (self.len, right.len);
        self.heads[len..len + count].copy_from_slice(&right.heads[..count]);
        self.handles[len..len + count].copy_from_slice(&right.handles[..count]);
        right.heads[..right_len].rotate_left(count);
        right.handles[..right_len].rotate_left(count);
        right.heads[right_len - count..right_len].fill(UNUSED_HEAD);
        right.handles[right_len - count..right_len].fill(NO_HANDLE);
        self.len += count;
        right.len -= count;
    }

    /// Moves the last `count` entries of `self` to the front of `right`.
    fn give_to_right(&mut self, right: &mut BytesLeaf, count: usize) {
        debug_assert!(right.len + count <= LEAF_CAPACITY && count <= self.len);
        let (first, right_len) = (self.len - count, right.len);
        right.heads[..right_len + count].rotate_right(count);
        right.handles[..right_len + count].rotate_right(count);
        right.heads[..count].copy_from_slice(&self.heads[first..self.len]);
        right.handles[..count].copy_from_slice(&self.handles[first..self.len]);
        self.heads[first..self.len].fill(UNUSED_HEAD);
        self.handles[first..self.len].fill(NO_HANDLE);
        self.len -= count;
        right.len += count;
    }
}

impl BytesInternal {
    fn empty() -> Box<BytesInternal> {
        Box::new(BytesInternal {
            len: 0,
            heads: [UNUSED_HEAD; SEPARATOR_CAPACITY],
            keys: std::array::from_fn(|_| KeyBuf::new()),
            children: std::array::from_fn(|_| None),
        })
    }

    /// The child `probe` belongs under: how many separators are at most it.
    #[inline]
    fn route(&self, probe: &Probe<'_>) -> usize {
        let mut index = count_heads_less(&self.heads[..self.len], probe.head);
        while index < self.len
            && probe.cmp_separator(self.heads[index], &self.keys[index]) != Ordering::Less
        {
            index += 1;
        }
        index
    }

    #[inline]
    fn child(&self, index: usize) -> &BytesNode {
        self.children[index].as_ref().expect(MISSING_CHILD)
    }

    #[inline]
    fn child_mut(&mut self, index: usize) -> &mut BytesNode {
        self.children[index].as_mut().expect(MISSING_CHILD)
    }

    fn set_separator(&mut self, index: usize, (head, key): Separator) {
        self.heads[index] = head;
        self.keys[index] = key;
    }

    fn take_separator(&mut self, index: usize) -> Separator {
        let head = std::mem::replace(&mut self.heads[index], UNUSED_HEAD);
        (head, std::mem::take(&mut self.keys[index]))
    }

    /// Adds `separator` at `index` and `child` right after it; the node has room.
    fn insert_at(&mut self, index: usize, separator: Separator, child: BytesNode) {
        debug_assert!(self.len < SEPARATOR_CAPACITY && index <= self.len);
        let len = self.len;
        self.heads[index..=len].rotate_right(1);
        self.keys[index..=len].rotate_right(1);
        self.set_separator(index, separator);
        self.children[index + 1..=len + 1].rotate_right(1);
        self.children[index + 1] = Some(child);
        self.len += 1;
    }

    /// Removes separator `index` and the child to its right; returns the separator.
    fn remove_at(&mut self, index: usize) -> Separator {
        debug_assert!(index < self.len);
        let len = self.len;
        self.heads[index..len].rotate_left(1);
        self.keys[index..len].rotate_left(1);
        self.children[index + 1..=len].rotate_left(1);
        self.children[len] = None;
        self.len -= 1;
        self.take_separator(len - 1)
    }

    /// Adds a separator and child to a full node by moving its upper half to a new right
    /// sibling; returns the separator that moves up to the parent and the sibling.
    fn split_insert(
        &mut self,
        index: usize,
        separator: Separator,
        child: BytesNode,
    ) -> (Separator, Box<BytesInternal>) {
        debug_assert_eq!(self.len, SEPARATOR_CAPACITY);
        let mid = SEPARATOR_CAPACITY / 2;
        let mut right = BytesInternal::empty();
        for (to, from) in (mid + 1..SEPARATOR_CAPACITY).enumerate() {
            let moved = self.take_separator(from);
            right.set_separator(to, moved);
        }
        for (to, from) in (mid + 1..=SEPARATOR_CAPACITY).enumerate() {
            right.children[to] = self.children[from].take();
        }
        right.len = SEPARATOR_CAPACITY - mid - 1;
        let up = self.take_separator(mid);
        self.len = mid;
        if index <= mid {
            self.insert_at(index, separator, child);
        } else {
            right.insert_at(index - mid - 1, separator, child);
        }
        (up, right)
    }
}

impl BytesNode {
    fn is_underfull(&self) -> bool {
        match self {
            BytesNode::Leaf(leaf) => leaf.len < LEAF_MIN,
            BytesNode::Internal(internal) => internal.len < INTERNAL_MIN_SEPARATORS,
        }
    }
}

enum BytesInsertOutcome {
    /// The key was there: its old handle.
    Replaced(u32),
    Added,
    /// The node split: this separator and right sibling go into the parent.
    Split(Separator, BytesNode),
}

fn insert_into<S: KeyStore>(
    node: &mut BytesNode,
    probe: &Probe<'_>,
    handle: u32,
    store: &S,
    counts: &mut Counts,
) -> BytesInsertOutcome {
    match node {
        BytesNode::Leaf(leaf) => {
            let (position, found) = leaf.search(store, probe);
            if found {
                return BytesInsertOutcome::Replaced(std::mem::replace(
                    &mut leaf.handles[position],
                    handle,
                ));
            }
            if leaf.len < LEAF_CAPACITY {
                leaf.insert_at(position, probe.head, handle);
                return BytesInsertOutcome::Added;
            }
            let right = leaf.split_insert(position, probe.head, handle);
            counts.nodes.leaves += 1;
            let separator = separator_of(&right.key_at(store, 0));
            counts.separator_bytes += spilled_bytes(&separator.1);
            BytesInsertOutcome::Split(separator, BytesNode::Leaf(right))
        }
        BytesNode::Internal(internal) => {
            let index = internal.route(probe);
            match insert_into(internal.child_mut(index), probe, handle, store, counts) {
                BytesInsertOutcome::Split(separator, child)
                    if internal.len < SEPARATOR_CAPACITY =>
                {
                    internal.insert_at(index, separator, child);
                    BytesInsertOutcome::Added
                }
                BytesInsertOutcome::Split(separator, child) => {
                    let (up, right) = internal.split_insert(index, separator, child);
                    counts.nodes.internals += 1;
                    BytesInsertOutcome::Split(up, BytesNode::Internal(right))
                }
                outcome => outcome,
            }
        }
    }
}

fn remove_from<S: KeyStore>(
    node: &mut BytesNode,
    probe: &Probe<'_>,
    store: &S,
    counts: &mut Counts,
) -> Option<u32> {
    match node {
        BytesNode::Leaf(leaf) => match leaf.search(store, probe) {
            (position, true) => Some(leaf.remove_at(position)),
            (_, false) => None,
        },
        BytesNode::Internal(internal) => {
            let index = internal.route(probe);
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
fn rebalance<S: KeyStore>(
    parent: &mut BytesInternal,
    index: usize,
    store: &S,
    counts: &mut Counts,
) {
    debug_assert!(parent.len >= 1, "a child with no sibling is the root's job");
    let left_index = index.saturating_sub(1);
    let mut separator = parent.take_separator(left_index);
    let (left_part, right_part) = parent.children.split_at_mut(left_index + 1);
    let (Some(left), Some(right)) = (&mut left_part[left_index], &mut right_part[0]) else {
        unreachable!("{MISSING_CHILD}");
    };
    let merged = match (left, right) {
        (BytesNode::Leaf(left), BytesNode::Leaf(right)) => {
            let total = left.len + right.len;
            if total <= LEAF_CAPACITY {
                left.take_from_right(right, right.len);
                counts.nodes.leaves -= 1;
                true
            } else {
                let left_target = total / 2;
                if left.len < left_target {
                    left.take_from_right(right, left_target - left.len);
                } else {
                    left.give_to_right(right, left.len - left_target);
                }
                counts.separator_bytes -= spilled_bytes(&separator.1);
                separator = separator_of(&right.key_at(store, 0));
                counts.separator_bytes += spilled_bytes(&separator.1);
                false
            }
        }
        (BytesNode::Internal(left), BytesNode::Internal(right)) => {
            let total = left.len + 1 + right.len;
            if total <= SEPARATOR_CAPACITY {
                merge_internal(left, std::mem::take(&mut separator), right);
                counts.nodes.internals -= 1;
                true
            } else {
                let children = left.len + right.len + 2;
                let left_target = children / 2;
                let left_children = left.len + 1;
                if left_children < left_target {
                    rotate_to_left(left, &mut separator, right, left_target - left_children);
                } else {
                    rotate_to_right(left, &mut separator, right, left_children - left_target);
                }
                false
            }
        }
        _ => unreachable!("siblings are at the same depth"),
    };
    parent.set_separator(left_index, separator);
    if merged {
        counts.separator_bytes -= spilled_bytes(&parent.remove_at(left_index).1);
    }
}

/// Appends `separator` and all of `right` to `left`, leaving `right` empty.
fn merge_internal(left: &mut BytesInternal, separator: Separator, right: &mut BytesInternal) {
    let base = left.len;
    left.set_separator(base, separator);
    for from in 0..right.len {
        let moved = right.take_separator(from);
        left.set_separator(base + 1 + from, moved);
    }
    for from in 0..=right.len {
        left.children[base + 1 + from] = right.children[from].take();
    }
    left.len = base + 1 + right.len;
    right.len = 0;
}

/// Moves the first `count` children of `right` to `left`, through the parent separator.
fn rotate_to_left(
    left: &mut BytesInternal,
    separator: &mut Separator,
    right: &mut BytesInternal,
    count: usize,
) {
    debug_assert!(count >= 1 && count <= right.len);
    let base = left.len;
    left.set_separator(base, std::mem::take(separator));
    left.children[base + 1] = right.children[0].take();
    for moved in 1..count {
        let taken = right.take_separator(moved - 1);
        left.set_separator(base + moved, taken);
        left.children[base + 1 + moved] = right.children[moved].take();
    }
    *separator = right.take_separator(count - 1);
    let len = right.len;
    right.heads[..len].rotate_left(count);
    right.keys[..len].rotate_left(count);
    right.children[..=len].rotate_left(count);
    left.len += count;
    right.len -= count;
}

/// Moves the last `count` children of `left` to `right`, through the parent separator.
fn rotate_to_right(
    left: &mut BytesInternal,
    separator: &mut Separator,
    right: &mut BytesInternal,
    count: usize,
) {
    debug_assert!(count >= 1 && count <= left.len);
    let len = right.len;
    right.heads[..len + count].rotate_right(count);
    right.keys[..len + count].rotate_right(count);
    right.children[..len + 1 + count].rotate_right(count);
    let first_child = left.len + 1 - count;
    for to in 0..count {
        right.children[to] = left.children[first_child + to].take();
    }
    for to in 0..count - 1 {
        let moved = left.take_separator(left.len - count + 1 + to);
        right.set_separator(to, moved);
    }
    let new_separator = left.take_separator(left.len - count);
    right.set_separator(count - 1, std::mem::replace(separator, new_separator));
    left.len -= count;
    right.len += count;
}

/// Unpacks every value under `node`, for a tree being emptied.
fn unpack_all<S: KeyStore>(node: &mut BytesNode, store: &S) {
    match node {
        BytesNode::Leaf(leaf) => {
            let len = leaf.len;
            for handle in &mut leaf.handles[..len] {
                let taken = std::mem::replace(handle, NO_HANDLE);
                // SAFETY: a handle below the leaf's length is a live packed one, taken out
                // of the leaf here so it is unpacked once.
                drop(unsafe { store.unpack(taken) });
            }
            leaf.heads[..len].fill(UNUSED_HEAD);
            leaf.len = 0;
        }
        BytesNode::Internal(internal) => {
            for child in internal.children[..=internal.len].iter_mut().flatten() {
                unpack_all(child, store);
            }
        }
    }
}

/// An ordered map from byte-string keys, which its values hold, to the values of a
/// [`KeyStore`].
pub struct BytesTree<S: KeyStore> {
    root: Option<BytesNode>,
    len: usize,
    leaves: usize,
    internals: usize,
    /// Heap bytes of separators too long to stay inline.
    separator_bytes: usize,
    store: S,
}

impl<S: KeyStore> Drop for BytesTree<S> {
    fn drop(&mut self) {
        if let Some(root) = &mut self.root {
            unpack_all(root, &self.store);
        }
    }
}

impl<S: KeyStore> BytesTree<S> {
    pub fn new(store: S) -> BytesTree<S> {
        BytesTree {
            root: None,
            len: 0,
            leaves: 0,
            internals: 0,
            separator_bytes: 0,
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
        self.separator_bytes = 0;
    }

    fn count(&mut self, counts: Counts) {
        self.leaves = self.leaves.wrapping_add_signed(counts.nodes.leaves);
        self.internals = self.internals.wrapping_add_signed(counts.nodes.internals);
        self.separator_bytes = self
            .separator_bytes
            .wrapping_add_signed(counts.separator_bytes);
    }

    /// Bytes the tree holds as malloc counts them: its nodes, and the separators that left
    /// their nodes for the heap (keys over 16 bytes). Kept as they are made and freed, O(1).
    pub fn node_bytes(&self) -> usize {
        self.leaves * LEAF_ALLOCATION_BYTES
            + self.internals * INTERNAL_ALLOCATION_BYTES
            + self.separator_bytes
    }

    /// The leaf where `probe` is or would be.
    #[inline]
    fn leaf_for(&self, probe: &Probe<'_>) -> Option<&BytesLeaf> {
        let mut node = self.root.as_ref()?;
        loop {
            match node {
                BytesNode::Internal(internal) => node = internal.child(internal.route(probe)),
                BytesNode::Leaf(leaf) => return Some(leaf),
            }
        }
    }

    /// The entry stored under exactly `key`: its value.
    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<S::Ref<'_>> {
        let probe = Probe::new(key);
        let leaf = self.leaf_for(&probe)?;
        prefetch_object(&leaf.handles);
        match leaf.search(&self.store, &probe) {
            (position, true) => Some(leaf.value(&self.store, position)),
            (_, false) => None,
        }
    }

    /// Inserts or overwrites; returns the value previously stored under `key`, which is
    /// the key `value` holds.
    pub fn insert(&mut self, key: &[u8], value: S::Value) -> Option<S::Value> {
        let handle = self.store.pack(value);
        debug_assert_ne!(handle, NO_HANDLE);
        debug_assert_eq!(
            key_of(&self.store, handle).as_slice(),
            key,
            "a value's own key"
        );
        let probe = Probe::new(key);
        let Some(root) = &mut self.root else {
            let mut leaf = BytesLeaf::empty();
            leaf.insert_at(0, probe.head, handle);
            self.root = Some(BytesNode::Leaf(leaf));
            self.len = 1;
            self.leaves = 1;
            return None;
        };
        let mut counts = Counts::default();
        match insert_into(root, &probe, handle, &self.store, &mut counts) {
            // SAFETY: the handle was in the leaf, taken out by `insert_into`.
            BytesInsertOutcome::Replaced(old) => return Some(unsafe { self.store.unpack(old) }),
            BytesInsertOutcome::Added => {}
            BytesInsertOutcome::Split(separator, right) => {
                let mut new_root = BytesInternal::empty();
                new_root.children[0] = self.root.take();
                new_root.children[1] = Some(right);
                new_root.set_separator(0, separator);
                new_root.len = 1;
                self.root = Some(BytesNode::Internal(new_root));
                counts.nodes.internals += 1;
            }
        }
        self.count(counts);
        self.len += 1;
        None
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<S::Value> {
        let root = self.root.as_mut()?;
        let mut counts = Counts::default();
        let removed = remove_from(root, &Probe::new(key), &self.store, &mut counts)?;
        self.len -= 1;
        let collapsed = match root {
            BytesNode::Internal(internal) if internal.len == 0 => {
                counts.nodes.internals -= 1;
                Some(internal.children[0].take())
            }
            BytesNode::Leaf(leaf) if leaf.len == 0 => {
                counts.nodes.leaves -= 1;
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

    /// Builds a tree from entries sorted by strictly increasing key, each with the key its
    /// value holds, filling every leaf (spreading the remainder so none is underfull) and
    /// then each level above it: O(n), no searches. See [`SortedLoader`] for the same a
    /// step at a time.
    pub fn from_sorted<'k, I>(store: S, entries: I) -> BytesTree<S>
    where
        I: IntoIterator<Item = (&'k [u8], S::Value)>,
        I::IntoIter: ExactSizeIterator,
    {
        let entries = entries.into_iter();
        let mut loader = SortedLoader::new(store, entries.len());
        for (key, value) in entries {
            loader.push(key, value);
        }
        loader.finish()
    }

    /// Entries with keys within the bounds, lazily, from either end. Bounds that admit no
    /// key (including inverted ones) give an empty range.
    pub fn range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>) -> BytesRange<'_, S> {
        let empty = BytesRange {
            root: None,
            store: &self.store,
            front: RangeEnd::Edge,
            back: RangeEnd::Edge,
        };
        let Some(root) = &self.root else {
            return empty;
        };
        let store = &self.store;
        // An unbounded end is the tree's edge, found only if the walk comes from that side.
        let front = match start {
            Bound::Unbounded => RangeEnd::Edge,
            bounded => match BytesCursor::first_in(root, bounded, store) {
                Some(cursor) => RangeEnd::At(cursor),
                None => return empty,
            },
        };
        let back = match end {
            Bound::Unbounded => RangeEnd::Edge,
            bounded => match BytesCursor::last_in(root, bounded, store) {
                Some(cursor) => RangeEnd::At(cursor),
                None => return empty,
            },
        };
        if let (RangeEnd::At(front), RangeEnd::At(back)) = (&front, &back) {
            if front.is_after(back) {
                return empty;
            }
        }
        BytesRange {
            root: Some(root),
            store,
            front,
            back,
        }
    }

    pub fn iter(&self) -> BytesRange<'_, S> {
        self.range(Bound::Unbounded, Bound::Unbounded)
    }
}

/// A [`BytesTree`] built as [`BytesTree::from_sorted`] builds it, from `len` entries in
/// strictly increasing key order given one at a time, so that a build can be spread over
/// many steps with other work between them: the leaves are filled as the entries come, the
/// levels above them built by [`SortedLoader::finish`] (a node per 64 leaves: fast). A
/// loader dropped unfinished gives back the values it holds.
pub struct SortedLoader<S: KeyStore> {
    /// `None` once finished.
    tree: Option<BytesTree<S>>,
    /// Entries the tree will hold, and those pushed so far.
    len: usize,
    pushed: usize,
    /// The leaf being filled, the least key in it, and the leaf's number.
    leaf: Box<BytesLeaf>,
    first: KeyBuf,
    leaf_no: usize,
    /// Leaves as `even_sizes` sizes them: `base` entries each, one more in the first
    /// `larger`.
    base: usize,
    larger: usize,
    /// The filled leaves, each with its least key.
    level: Vec<(KeyBuf, BytesNode)>,
}

impl<S: KeyStore> SortedLoader<S> {
    pub fn new(store: S, len: usize) -> SortedLoader<S> {
        let leaves = len.div_ceil(LEAF_CAPACITY).max(1);
        SortedLoader {
            tree: Some(BytesTree::new(store)),
            len,
            pushed: 0,
            leaf: BytesLeaf::empty(),
            first: KeyBuf::new(),
            leaf_no: 0,
            base: len / leaves,
            larger: len % leaves,
            level: Vec::with_capacity(len.div_ceil(LEAF_CAPACITY)),
        }
    }

    /// Adds the next entry: its key must be above every key pushed before.
    pub fn push(&mut self, key: &[u8], value: S::Value) {
        debug_assert!(self.pushed < self.len, "more entries than announced");
        let Some(tree) = &self.tree else {
            return;
        };
        let slot = self.leaf.len;
        if slot == 0 {
            self.first = KeyBuf::from_slice(key);
        }
        self.leaf.heads[slot] = head_of(key);
        self.leaf.handles[slot] = tree.store.pack(value);
        self.leaf.len = slot + 1;
        self.pushed += 1;
        let size = self.base + usize::from(self.leaf_no < self.larger);
        if self.leaf.len == size {
            let leaf = std::mem::replace(&mut self.leaf, BytesLeaf::empty());
            self.level
                .push((std::mem::take(&mut self.first), BytesNode::Leaf(leaf)));
            self.leaf_no += 1;
        }
    }

    /// The tree of every entry pushed (all `len` of them), its levels built over the leaves.
    pub fn finish(mut self) -> BytesTree<S> {
        debug_assert_eq!(self.pushed, self.len, "fewer entries than announced");
        let mut tree = self.tree.take().expect("a loader finishes once");
        let mut level = std::mem::take(&mut self.level);
        tree.leaves = level.len();
        while level.len() > 1 {
            let mut nodes = level.into_iter();
            let count = nodes.len();
            let mut parents = Vec::with_capacity(count.div_ceil(INTERNAL_FANOUT));
            for size in even_sizes(count, INTERNAL_FANOUT) {
                let mut parent = BytesInternal::empty();
                let mut first = KeyBuf::new();
                for (slot, (key, child)) in nodes.by_ref().take(size).enumerate() {
                    if slot == 0 {
                        first = key;
                    } else {
                        let separator = (head_of(&key), key);
                        tree.separator_bytes += spilled_bytes(&separator.1) as usize;
                        parent.set_separator(slot - 1, separator);
                    }
                    parent.children[slot] = Some(child);
                }
                parent.len = size - 1;
                parents.push((first, BytesNode::Internal(parent)));
            }
            tree.internals += parents.len();
            level = parents;
        }
        tree.root = level.pop().map(|(_, root)| root);
        tree.len = self.pushed;
        tree
    }
}

impl<S: KeyStore> Drop for SortedLoader<S> {
    fn drop(&mut self) {
        let Some(tree) = &self.tree else {
            return;
        };
        for (_, node) in &mut self.level {
            unpack_all(node, &tree.store);
        }
        let mut leaf = BytesNode::Leaf(std::mem::replace(&mut self.leaf, BytesLeaf::empty()));
        unpack_all(&mut leaf, &tree.store);
    }
}

/// A position in the tree: an entry of a leaf and the path of internal nodes to it.
#[derive(Clone)]
struct BytesCursor<'a> {
    /// Each internal node from the root down, with the child index taken.
    path: SmallVec<[(&'a BytesInternal, usize); 8]>,
    leaf: &'a BytesLeaf,
    position: usize,
}

impl<'a> BytesCursor<'a> {
    /// Descends from `node` along its first or last children to a leaf.
    fn to_edge(
        mut path: SmallVec<[(&'a BytesInternal, usize); 8]>,
        mut node: &'a BytesNode,
        side: Side,
    ) -> BytesCursor<'a> {
        loop {
            match node {
                BytesNode::Internal(internal) => {
                    let index = match side {
                        Side::First => 0,
                        Side::Last => internal.len,
                    };
                    path.push((internal, index));
                    node = internal.child(index);
                }
                BytesNode::Leaf(leaf) => {
                    let position = match side {
                        Side::First => 0,
                        Side::Last => leaf.len - 1,
                    };
                    return BytesCursor {
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
    fn towards<S: KeyStore>(
        root: &'a BytesNode,
        probe: &Probe<'_>,
        inclusive: bool,
        store: &S,
    ) -> BytesCursor<'a> {
        let mut path = SmallVec::new();
        let mut node = root;
        loop {
            match node {
                BytesNode::Internal(internal) => {
                    let index = internal.route(probe);
                    path.push((&**internal, index));
                    node = internal.child(index);
                }
                BytesNode::Leaf(leaf) => {
                    // The first entry's value is read right after the search.
                    prefetch_object(&leaf.handles);
                    let position = leaf.position(store, probe, inclusive);
                    return BytesCursor {
                        path,
                        leaf,
                        position,
                    };
                }
            }
        }
    }

    /// The least entry within `start`, if any.
    fn first_in<S: KeyStore>(
        root: &'a BytesNode,
        start: Bound<&[u8]>,
        store: &S,
    ) -> Option<BytesCursor<'a>> {
        let mut cursor = match start {
            Bound::Unbounded => {
                return Some(BytesCursor::to_edge(SmallVec::new(), root, Side::First))
            }
            Bound::Included(key) => BytesCursor::towards(root, &Probe::new(key), false, store),
            Bound::Excluded(key) => BytesCursor::towards(root, &Probe::new(key), true, store),
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
    fn last_in<S: KeyStore>(
        root: &'a BytesNode,
        end: Bound<&[u8]>,
        store: &S,
    ) -> Option<BytesCursor<'a>> {
        let mut cursor = match end {
            Bound::Unbounded => {
                return Some(BytesCursor::to_edge(SmallVec::new(), root, Side::Last))
            }
            Bound::Included(key) => BytesCursor::towards(root, &Probe::new(key), true, store),
            Bound::Excluded(key) => BytesCursor::towards(root, &Probe::new(key), false, store),
        };
        // `position` counts the keys within the bound; the last of them precedes it.
        if cursor.position == 0 {
            return cursor.step_backward().then_some(cursor);
        }
        cursor.position -= 1;
        Some(cursor)
    }

    /// Whether this cursor is past `other` in key order: compares their paths, the child
    /// indexes from the root down, then the leaf positions (both come from one tree).
    fn is_after(&self, other: &BytesCursor<'a>) -> bool {
        let own = self.path.iter().map(|&(_, index)| index);
        let theirs = other.path.iter().map(|&(_, index)| index);
        match own.cmp(theirs) {
            Ordering::Equal => self.position > other.position,
            order => order == Ordering::Greater,
        }
    }

    #[inline]
    fn entry<'s, S: KeyStore>(&self, store: &'s S) -> (KeyHead, S::Ref<'s>) {
        (
            self.leaf.heads[self.position],
            self.leaf.value(store, self.position),
        )
    }

    fn same_position(&self, other: &BytesCursor<'a>) -> bool {
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
                *self = BytesCursor::to_edge(path, internal.child(index + 1), Side::First);
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
                *self = BytesCursor::to_edge(path, internal.child(index - 1), Side::Last);
                return true;
            }
        }
        false
    }
}

/// One end of a range: a located entry still to be yielded, or the tree's first or last
/// entry, not yet looked for.
enum RangeEnd<'a> {
    Edge,
    At(BytesCursor<'a>),
}

impl<'a> RangeEnd<'a> {
    #[inline]
    fn locate(&mut self, root: &'a BytesNode, side: Side) -> &mut BytesCursor<'a> {
        if let RangeEnd::Edge = self {
            *self = RangeEnd::At(BytesCursor::to_edge(SmallVec::new(), root, side));
        }
        match self {
            RangeEnd::At(cursor) => cursor,
            RangeEnd::Edge => unreachable!("located just above"),
        }
    }

    #[inline]
    fn is_at(&self, cursor: &BytesCursor<'a>) -> bool {
        match self {
            RangeEnd::At(end) => end.same_position(cursor),
            RangeEnd::Edge => false,
        }
    }
}

/// A lazy, double-ended walk over the entries between two ends; it yields each entry's
/// head and value (the store writes a whole key on request, [`KeyStore::write_key`]).
pub struct BytesRange<'a, S: KeyStore> {
    /// `None` for an empty range, and once the two ends have met.
    root: Option<&'a BytesNode>,
    store: &'a S,
    front: RangeEnd<'a>,
    back: RangeEnd<'a>,
}

impl<'a, S: KeyStore> Iterator for BytesRange<'a, S> {
    type Item = (KeyHead, S::Ref<'a>);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let root = self.root?;
        let front = self.front.locate(root, Side::First);
        let value = front.entry(self.store);
        // An unlocated back end is the last entry: stepping past it ends the walk too.
        if self.back.is_at(front) || !front.step_forward() {
            self.root = None;
        }
        Some(value)
    }
}

impl<S: KeyStore> DoubleEndedIterator for BytesRange<'_, S> {
    #[inline]
    fn next_back(&mut self) -> Option<Self::Item> {
        let root = self.root?;
        let back = self.back.locate(root, Side::Last);
        let value = back.entry(self.store);
        if self.front.is_at(back) || !back.step_backward() {
            self.root = None;
        }
        Some(value)
    }
}

impl<S: KeyStore> BytesTree<S> {
    /// Checks every structural invariant (order, heads, fill, balance, separators, length,
    /// node counts); panics with the first one broken. For tests.
    pub fn check_invariants(&self) {
        let Some(root) = &self.root else {
            assert_eq!(self.len, 0, "an empty tree has no entries");
            assert_eq!((self.leaves, self.internals), (0, 0), "no nodes");
            return;
        };
        let mut leaf_depth = None;
        let mut nodes = (0, 0);
        let counted = check_node(root, (None, None), 0, &mut leaf_depth, &mut nodes, self);
        assert_eq!(counted, self.len, "len matches the entries");
        assert_eq!(nodes, (self.leaves, self.internals), "node counts");
        assert_eq!(
            spilled_separator_bytes(root),
            self.separator_bytes,
            "separator bytes"
        );
    }
}

/// Heap bytes of the separators under `node` too long to stay inline.
fn spilled_separator_bytes(node: &BytesNode) -> usize {
    match node {
        BytesNode::Leaf(_) => 0,
        BytesNode::Internal(internal) => {
            let own: usize = internal.keys[..internal.len]
                .iter()
                .map(|key| spilled_bytes(key) as usize)
                .sum();
            own + internal.children[..=internal.len]
                .iter()
                .flatten()
                .map(spilled_separator_bytes)
                .sum::<usize>()
        }
    }
}

fn check_leaf<S: KeyStore>(
    leaf: &BytesLeaf,
    in_bounds: impl Fn(&[u8]) -> bool,
    is_root: bool,
    store: &S,
) -> usize {
    assert!((1..=LEAF_CAPACITY).contains(&leaf.len));
    assert!(is_root || leaf.len >= LEAF_MIN, "leaf fill {}", leaf.len);
    let keys: Vec<SearchKeyBuf> = (0..leaf.len).map(|at| leaf.key_at(store, at)).collect();
    assert!(keys.windows(2).all(|pair| pair[0] < pair[1]), "leaf order");
    for (at, key) in keys.iter().enumerate() {
        assert!(in_bounds(key), "leaf key within its separators");
        assert_eq!(leaf.heads[at], head_of(key), "head of entry {at}");
        assert_ne!(leaf.handles[at], NO_HANDLE, "handle of entry {at}");
    }
    assert!(leaf.heads[leaf.len..].iter().all(|&h| h == UNUSED_HEAD));
    assert!(leaf.handles[leaf.len..].iter().all(|&h| h == NO_HANDLE));
    leaf.len
}

fn check_node<S: KeyStore>(
    node: &BytesNode,
    (lower, upper): (Option<&[u8]>, Option<&[u8]>),
    depth: usize,
    leaf_depth: &mut Option<usize>,
    nodes: &mut (usize, usize),
    tree: &BytesTree<S>,
) -> usize {
    let is_root = depth == 0;
    let in_bounds = |key: &[u8]| lower.is_none_or(|l| l <= key) && upper.is_none_or(|u| key < u);
    match node {
        BytesNode::Leaf(leaf) => {
            nodes.0 += 1;
            assert_eq!(
                *leaf_depth.get_or_insert(depth),
                depth,
                "leaves at one depth"
            );
            check_leaf(leaf, in_bounds, is_root, &tree.store)
        }
        BytesNode::Internal(internal) => {
            nodes.1 += 1;
            let len = internal.len;
            assert!((1..=SEPARATOR_CAPACITY).contains(&len));
            assert!(
                is_root || len >= INTERNAL_MIN_SEPARATORS,
                "internal fill {len}"
            );
            let keys = &internal.keys[..len];
            assert!(
                keys.windows(2).all(|pair| pair[0] < pair[1]),
                "separator order"
            );
            for (at, key) in keys.iter().enumerate() {
                assert!(in_bounds(key), "separator within its parent's");
                assert_eq!(internal.heads[at], head_of(key), "head of separator {at}");
            }
            assert!(internal.heads[len..].iter().all(|&h| h == UNUSED_HEAD));
            assert!(internal
                .children
                .iter()
                .enumerate()
                .all(|(slot, c)| c.is_some() == (slot <= len)));
            (0..=len)
                .map(|index| {
                    let lower = if index == 0 {
                        lower
                    } else {
                        Some(&keys[index - 1][..])
                    };
                    let upper = if index == len {
                        upper
                    } else {
                        Some(&keys[index][..])
                    };
                    let child = internal.child(index);
                    check_node(child, (lower, upper), depth + 1, leaf_depth, nodes, tree)
                })
                .sum()
        }
    }
}

#[cfg(test)]
mod tests;
