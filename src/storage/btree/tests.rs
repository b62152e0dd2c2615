use super::*;
use proptest::prelude::*;
use std::cell::RefCell;
use std::collections::BTreeMap;

/// A store of `u64` values for the tests: each value kept in a slot with the key it was
/// stored under (as a tuple holds its key), its handle the slot's number plus one. Counts
/// what it holds, so a test sees every value the tree let go of.
#[derive(Default)]
struct Values {
    slots: RefCell<Vec<Option<(u64, u64)>>>,
    free: RefCell<Vec<u32>>,
    /// Keys read from values: what a tuple index pays a cache miss for.
    key_reads: std::cell::Cell<usize>,
}

impl Values {
    fn live(&self) -> usize {
        self.slots.borrow().len() - self.free.borrow().len()
    }

    fn slot(&self, handle: u32) -> (u64, u64) {
        self.slots.borrow()[handle as usize - 1].expect("a live handle")
    }
}

impl Store for Values {
    type Value = u64;
    type Ref<'a> = u64;

    fn pack(&self, key: u64, value: u64) -> u32 {
        let mut slots = self.slots.borrow_mut();
        let index = match self.free.borrow_mut().pop() {
            Some(index) => index as usize,
            None => {
                slots.push(None);
                slots.len() - 1
            }
        };
        slots[index] = Some((key, value));
        index as u32 + 1
    }

    unsafe fn unpack(&self, handle: u32) -> u64 {
        let taken = self.slots.borrow_mut()[handle as usize - 1].take();
        self.free.borrow_mut().push(handle - 1);
        taken.expect("a live handle").1
    }

    unsafe fn get(&self, handle: u32) -> u64 {
        self.slot(handle).1
    }

    unsafe fn key(&self, handle: u32) -> u64 {
        self.key_reads.set(self.key_reads.get() + 1);
        self.slot(handle).0
    }
}

type Tree = BTree<Values>;

fn tree() -> Tree {
    BTree::new(Values::default())
}

fn tree_from(entries: impl IntoIterator<Item = (u64, u64)>) -> Tree {
    let entries: Vec<(u64, u64)> = entries.into_iter().collect();
    BTree::from_sorted(Values::default(), entries)
}

/// Checks the tree and that the store holds exactly its values.
fn check(tree: &Tree) {
    tree.check_invariants();
    assert_eq!(
        tree.store().live(),
        tree.len(),
        "the store holds the tree's values"
    );
}

/// Where the tests' keys start: 0, or just below `u32::MAX`, so that about half of them
/// share the saturated hint and are told apart by the keys the store reads.
const KEY_BASES: [u64; 2] = [0, u32::MAX as u64 - 100];

#[derive(Debug, Clone)]
enum TreeOperation {
    Insert(u64, u64),
    /// An insert through the write path's leaf handle (`BTree::leaf_for_write`).
    Put(u64, u64),
    Remove(u64),
    Get(u64),
    Range(Bound<u64>, Bound<u64>, RangeDirection),
}

#[derive(Debug, Clone, Copy)]
enum RangeDirection {
    Forward,
    Backward,
    /// Alternates ends, to check that the two ends meet exactly once.
    Both,
}

fn bound(keys: std::ops::Range<u64>) -> impl Strategy<Value = Bound<u64>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        3 => keys.clone().prop_map(Bound::Included),
        3 => keys.prop_map(Bound::Excluded),
    ]
}

fn op(keys: std::ops::Range<u64>) -> impl Strategy<Value = TreeOperation> {
    let walk = prop_oneof![
        Just(RangeDirection::Forward),
        Just(RangeDirection::Backward),
        Just(RangeDirection::Both)
    ];
    prop_oneof![
        3 => (keys.clone(), any::<u64>()).prop_map(|(k, v)| TreeOperation::Insert(k, v)),
        3 => (keys.clone(), any::<u64>()).prop_map(|(k, v)| TreeOperation::Put(k, v)),
        4 => keys.clone().prop_map(TreeOperation::Remove),
        2 => keys.clone().prop_map(TreeOperation::Get),
        1 => (bound(keys.clone()), bound(keys), walk).prop_map(|(s, e, w)| TreeOperation::Range(s, e, w)),
    ]
}

fn model_range(model: &BTreeMap<u64, u64>, start: Bound<u64>, end: Bound<u64>) -> Vec<(u64, u64)> {
    // std panics on inverted bounds; the tree gives nothing, as no key lies within them.
    let within = |key: &u64| start_admits(start, *key) && end_admits(end, *key);
    model
        .iter()
        .filter(|(k, _)| within(k))
        .map(|(k, v)| (*k, *v))
        .collect()
}

fn start_admits(start: Bound<u64>, key: u64) -> bool {
    match start {
        Bound::Included(s) => key >= s,
        Bound::Excluded(s) => key > s,
        Bound::Unbounded => true,
    }
}

fn end_admits(end: Bound<u64>, key: u64) -> bool {
    match end {
        Bound::Included(e) => key <= e,
        Bound::Excluded(e) => key < e,
        Bound::Unbounded => true,
    }
}

fn walk(tree: &Tree, start: Bound<u64>, end: Bound<u64>, how: RangeDirection) -> Vec<(u64, u64)> {
    let mut range = tree.range(start, end);
    match how {
        RangeDirection::Forward => range.collect(),
        RangeDirection::Backward => {
            let mut entries: Vec<_> = range.rev().collect();
            entries.reverse();
            entries
        }
        RangeDirection::Both => {
            let (mut front, mut back) = (Vec::new(), Vec::new());
            while let Some(entry) = range.next() {
                front.push(entry);
                let Some(entry) = range.next_back() else {
                    break;
                };
                back.push(entry);
            }
            assert!(range.next().is_none() && range.next_back().is_none());
            back.reverse();
            front.extend(back);
            front
        }
    }
}

/// An insert as a space's write makes it: into the leaf found first, or through `insert`
/// when that leaf is full (or the tree empty).
fn put(tree: &mut Tree, key: u64, value: u64) -> Option<u64> {
    let Some(leaf) = tree.leaf_for_write(key) else {
        return tree.insert(key, value);
    };
    let position = leaf.search(key);
    let seen = position.value();
    match position.put(key, value) {
        Ok(old) => {
            assert_eq!(old, seen);
            old
        }
        Err((key, value)) => {
            assert_eq!(seen, None, "only a new key is handed back");
            tree.insert(key, value)
        }
    }
}

fn shifted(bound: Bound<u64>, base: u64) -> Bound<u64> {
    bound.map(|key| key + base)
}

fn run_against_model(initial: Vec<u64>, ops: Vec<TreeOperation>, base: u64) {
    let mut model: BTreeMap<u64, u64> = initial.iter().map(|&k| (k + base, k * 7)).collect();
    let mut tree = tree_from(model.iter().map(|(k, v)| (*k, *v)));
    check(&tree);
    for op in ops {
        match op {
            TreeOperation::Insert(key, value) => {
                assert_eq!(
                    tree.insert(key + base, value),
                    model.insert(key + base, value)
                )
            }
            TreeOperation::Put(key, value) => {
                let key = key + base;
                assert_eq!(put(&mut tree, key, value), model.insert(key, value))
            }
            TreeOperation::Remove(key) => {
                assert_eq!(tree.remove(key + base), model.remove(&(key + base)))
            }
            TreeOperation::Get(key) => {
                let key = key + base;
                assert_eq!(tree.get(key), model.get(&key).copied());
                assert_eq!(tree.get_for_write(key), model.get(&key).copied());
            }
            TreeOperation::Range(start, end, how) => {
                let (start, end) = (shifted(start, base), shifted(end, base));
                assert_eq!(
                    walk(&tree, start, end, how),
                    model_range(&model, start, end)
                );
            }
        }
        assert_eq!(tree.len(), model.len());
        assert_eq!(tree.store().live(), model.len());
    }
    check(&tree);
    let all: Vec<_> = tree.iter().collect();
    assert_eq!(all, model.into_iter().collect::<Vec<_>>());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn behaves_like_std_btreemap_when_small(
        ops in prop::collection::vec(op(0..200), 0..3000),
        base in prop::sample::select(KEY_BASES.to_vec()),
    ) {
        run_against_model(Vec::new(), ops, base);
    }

    #[test]
    fn behaves_like_std_btreemap_after_bulk_build(
        initial in prop::collection::btree_set(0..20_000u64, 0..6000),
        ops in prop::collection::vec(op(0..20_000), 0..4000),
        base in prop::sample::select(KEY_BASES.to_vec()),
    ) {
        run_against_model(initial.into_iter().collect(), ops, base);
    }

    #[test]
    fn emptying_a_bulk_built_tree_keeps_it_valid(
        initial in prop::collection::btree_set(0..100_000u64, 0..5000),
        seed in any::<u64>(),
    ) {
        let keys: Vec<u64> = initial.iter().copied().collect();
        let mut tree = tree_from(keys.iter().map(|&k| (k, k)));
        let mut order = keys.clone();
        // A cheap deterministic shuffle, so merges happen all over the tree.
        let mut state = seed | 1;
        for i in (1..order.len()).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            order.swap(i, (state % (i as u64 + 1)) as usize);
        }
        for (done, &key) in order.iter().enumerate() {
            prop_assert_eq!(tree.remove(key), Some(key));
            if done % 257 == 0 {
                check(&tree);
            }
        }
        prop_assert!(tree.is_empty());
        check(&tree);
        prop_assert_eq!(tree.iter().next(), None);
        prop_assert_eq!(tree.node_bytes(), 0);
    }
}

#[test]
fn sequential_inserts_and_removes_at_scale() {
    for base in KEY_BASES {
        let mut tree = tree();
        for key in (0..200_000u64).map(|key| key + base) {
            assert_eq!(tree.insert(key, key), None);
        }
        check(&tree);
        for key in (0..200_000u64).rev().step_by(3).map(|key| key + base) {
            assert_eq!(tree.remove(key), Some(key));
        }
        check(&tree);
        assert_eq!(tree.len(), 200_000 - 66_667);
    }
    let bulk = tree_from((0..1_000_003u64).map(|k| (k, k)));
    check(&bulk);
    assert_eq!(bulk.len(), 1_000_003);
    assert!(bulk.iter().map(|(k, _)| k).eq(0..1_000_003));
    assert!(bulk.iter().rev().map(|(k, _)| k).eq((0..1_000_003).rev()));
}

/// A lookup of a key below `u32::MAX` reads no value's key, and one from there on reads a
/// few (those of its leaf's saturated entries its search compares).
#[test]
fn lookups_compare_hints_and_read_keys_only_when_they_tie() {
    // A binary search of 64 saturated entries and the check of the one it lands on: 8.
    for (base, most_reads_per_get) in [(0, 0), (u32::MAX as u64, 8)] {
        let tree = tree_from((0..100_000u64).map(|k| (k * 3 + base, k)));
        for offset in 0..300_000u64 {
            tree.store().key_reads.set(0);
            let expected = (offset % 3 == 0).then_some(offset / 3);
            assert_eq!(tree.get(offset + base), expected, "offset {offset}");
            let reads = tree.store().key_reads.get();
            assert!(
                reads <= most_reads_per_get,
                "offset {offset}: {reads} reads"
            );
        }
    }
}

#[test]
fn ranges_between_keys_and_inverted_are_empty() {
    let tree = tree_from((0..1000u64).map(|k| (k * 2, k)));
    assert_eq!(
        tree.range(Bound::Included(5), Bound::Included(5)).count(),
        0
    );
    assert_eq!(
        tree.range(Bound::Excluded(4), Bound::Excluded(6)).count(),
        0
    );
    assert_eq!(
        tree.range(Bound::Included(9), Bound::Included(3)).count(),
        0
    );
    assert_eq!(
        tree.range(Bound::Excluded(4), Bound::Excluded(4)).count(),
        0
    );
    assert_eq!(
        tree.range(Bound::Included(4), Bound::Included(4)).count(),
        1
    );
    assert_eq!(
        tree.range(Bound::Excluded(1998), Bound::Unbounded).count(),
        0
    );
    assert_eq!(tree.range(Bound::Unbounded, Bound::Excluded(0)).count(), 0);
    assert_eq!(self::tree().iter().count(), 0);
    assert_eq!(tree_from([]).iter().count(), 0);
}

/// Leaves per `LEAF_CAPACITY` entries after inserting `keys` one by one.
fn leaves_per_full_leaf(keys: impl Iterator<Item = u64>) -> f64 {
    let mut tree = tree();
    for key in keys {
        tree.insert(key, key);
    }
    check(&tree);
    let leaves = tree.root.as_ref().map_or(0, |root| count_nodes(root).0);
    leaves as f64 / (tree.len() as f64 / LEAF_CAPACITY as f64)
}

#[test]
fn ascending_inserts_fill_their_leaves() {
    // Splitting in halves alone left every leaf but the last half full (2.0).
    let ascending = leaves_per_full_leaf(0..100_000);
    assert!(ascending < 1.01, "{ascending}");
    // Sixteen ascending runs interleaved, as sixteen loading clients write them.
    let runs = (0..100_000u64).map(|i| (i % 16) * 1_000_000 + i / 16);
    let interleaved = leaves_per_full_leaf(runs);
    assert!(interleaved < 1.05, "{interleaved}");
    // Random order: between the halves of splits (1.44, ln 2 full) and full (measured:
    // 1.36 of a full leaf, 11.2 bytes an entry).
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let random = (0..100_000).map(|_| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    });
    let random = leaves_per_full_leaf(random);
    eprintln!("leaves per full leaf: interleaved {interleaved}, random {random}");
    assert!(random < 1.4, "{random}");
}

#[test]
fn node_layout_is_as_sized() {
    use std::mem::size_of;
    assert_eq!(size_of::<Option<BTreeNode>>(), 16);
    // A full leaf costs 8 bytes an entry plus its length: 520 bytes, a 528-byte malloc
    // chunk, 8.25 bytes an entry (a million entries: 8.25 MB).
    assert_eq!(size_of::<Leaf>(), LEAF_CAPACITY * (4 + 4) + 8);
    assert_eq!(LEAF_ALLOCATION_BYTES, 528);
    assert_eq!(
        size_of::<Internal>(),
        8 + SEPARATOR_CAPACITY * 8 + INTERNAL_FANOUT * 16
    );
    assert_eq!(INTERNAL_ALLOCATION_BYTES, 1552);
    // A split leaves both halves at or above the minimum.
    const { assert!(LEAF_MIN >= 1 && LEAF_MIN <= LEAF_CAPACITY / 2) };
    const { assert!(INTERNAL_MIN_SEPARATORS >= 1 && INTERNAL_MIN_SEPARATORS < SEPARATOR_CAPACITY / 2) };
}

#[test]
fn even_sizes_cover_the_total_without_underfull_groups() {
    for total in [1usize, 2, 31, 32, 33, 63, 64, 65, 1000, 1_000_003] {
        let sizes: Vec<usize> = even_sizes(total, LEAF_CAPACITY).collect();
        assert_eq!(sizes.iter().sum::<usize>(), total);
        assert!(sizes.iter().all(|&s| s <= LEAF_CAPACITY));
        if sizes.len() > 1 {
            assert!(sizes.iter().all(|&s| s >= LEAF_CAPACITY / 2));
        }
    }
}

#[test]
fn block_counts_match_a_plain_count() {
    for len in 0..=SEPARATOR_CAPACITY {
        let keys: Vec<u64> = (0..len as u64).map(|k| k * 3 + 1).collect();
        for probe in 0..(len as u64 * 3 + 3) {
            let less = keys.iter().filter(|&&k| k < probe).count();
            let not_greater = keys.iter().filter(|&&k| k <= probe).count();
            assert_eq!(count_less(&keys, probe), less, "len {len} probe {probe}");
            assert_eq!(count_not_greater(&keys, probe), not_greater);
        }
    }
    assert_eq!(count_not_greater(&[1, u64::MAX], u64::MAX), 2);
}

/// The leaf's two-step count of hints agrees with a plain one at every fill, for probes
/// at, between and beyond the hints, saturated ones included.
#[test]
fn hint_counts_match_a_plain_count() {
    for len in 0..=LEAF_CAPACITY {
        for saturated in [0, len / 2, len] {
            let mut leaf = Leaf::empty();
            for at in 0..len {
                leaf.hints[at] = if at >= len - saturated {
                    SATURATED
                } else {
                    at as u32 * 3 + 1
                };
                leaf.handles[at] = 1;
            }
            leaf.len = len;
            let hints = &leaf.hints[..len];
            for probe in (0..len as u32 * 3 + 3).chain([SATURATED - 1, SATURATED]) {
                let less = hints.iter().filter(|&&h| h < probe).count();
                assert_eq!(
                    leaf.count_hints_less(probe),
                    less,
                    "len {len} probe {probe}"
                );
                #[cfg(target_arch = "x86_64")]
                if simd::available() {
                    // SAFETY: the CPU has AVX2, checked just above.
                    let vector = unsafe { simd::count_hints_less(&leaf.hints, probe) };
                    assert_eq!(vector, less, "vector count, len {len} probe {probe}");
                }
            }
        }
    }
}

proptest! {
    /// The leaf's counts of hints agree with a plain count for hints anywhere in the u32
    /// range (the vector count compares them signed, with the sign bit flipped).
    #[test]
    fn hint_counts_match_across_the_range(
        mut hints in prop::collection::vec(
            prop_oneof![Just(0u32), Just(0x7fff_ffff), Just(0x8000_0000), Just(SATURATED - 1), any::<u32>()],
            0..=LEAF_CAPACITY,
        ),
        probes in prop::collection::vec(any::<u32>(), 1..20),
    ) {
        hints.sort_unstable();
        let mut leaf = Leaf::empty();
        leaf.hints[..hints.len()].copy_from_slice(&hints);
        leaf.len = hints.len();
        let edges = [0, 1, 0x7fff_ffff, 0x8000_0000, 0x8000_0001, SATURATED - 1, SATURATED];
        for probe in probes.into_iter().chain(edges).chain(hints.iter().copied()) {
            let less = hints.iter().filter(|&&h| h < probe).count();
            prop_assert_eq!(leaf.count_hints_less(probe), less);
            #[cfg(target_arch = "x86_64")]
            if simd::available() {
                // SAFETY: the CPU has AVX2, checked just above.
                let vector = unsafe { simd::count_hints_less(&leaf.hints, probe) };
                prop_assert_eq!(vector, less);
            }
        }
    }
}

/// A node's key array for the vector count: `len` sorted keys drawn from a few values (so
/// that they repeat) and the ends of the range, then stale keys in any order.
fn key_array<const CAP: usize>() -> impl Strategy<Value = ([u64; CAP], usize)> {
    let key = prop_oneof![
        Just(0),
        Just(u64::MAX),
        0..8u64,
        u64::MAX - 8..,
        any::<u64>()
    ];
    (0..=CAP, prop::array::uniform::<_, CAP>(key)).prop_map(|(len, mut keys)| {
        keys[..len].sort_unstable();
        (keys, len)
    })
}

/// Probes at, next to, below and above the keys in use, and anywhere.
fn probes(keys: &[u64]) -> Vec<u64> {
    let mut probes = vec![0, 1, u64::MAX - 1, u64::MAX, 1 << 63, (1 << 63) - 1];
    for &key in keys {
        probes.extend([key, key.wrapping_sub(1), key.wrapping_add(1)]);
    }
    probes
}

/// The AVX2 count agrees with the scalar one (see `simd`); the stale keys past `len` are
/// not counted.
#[cfg(target_arch = "x86_64")]
fn check_vector_count<const CAP: usize>(keys: &[u64; CAP], len: usize) {
    if !simd::available() {
        return;
    }
    for probe in probes(&keys[..len]) {
        // SAFETY: the CPU has AVX2, checked above.
        let (less, not_greater) = unsafe {
            (
                simd::count::<false, CAP>(keys, len, probe),
                simd::count::<true, CAP>(keys, len, probe),
            )
        };
        let context = format!("len {len} probe {probe} keys {keys:?}");
        assert_eq!(less, count_less(&keys[..len], probe), "{context}");
        assert_eq!(
            not_greater,
            count_not_greater(&keys[..len], probe),
            "{context}"
        );
    }
}

#[cfg(target_arch = "x86_64")]
proptest! {
    #[test]
    fn vector_counts_match_the_scalar_counts((keys, len) in key_array::<64>()) {
        check_vector_count(&keys, len);
    }

    #[test]
    fn vector_counts_match_in_internal_nodes((keys, len) in key_array::<SEPARATOR_CAPACITY>()) {
        check_vector_count(&keys, len);
    }

}

/// Every length, with every probe near the keys, beside the random cases above.
#[cfg(target_arch = "x86_64")]
#[test]
fn vector_counts_match_at_every_length() {
    for len in 0..=64 {
        let mut keys = [7; 64];
        for (i, key) in keys[..len].iter_mut().enumerate() {
            *key = i as u64 / 3 * 2;
        }
        check_vector_count(&keys, len);
        keys[len..].fill(0);
        check_vector_count(&keys, len);
        keys[len..].fill(u64::MAX);
        check_vector_count(&keys, len);
    }
}

/// Steps a fetch-ahead cursor to its end; returns the value it reached and the steps taken.
fn walk_ahead(tree: &Tree, probe: u64) -> (Option<u64>, usize) {
    let mut cursor = tree.prefetch_start();
    let mut steps = 0;
    while !cursor.is_done() {
        steps += 1;
        assert!(steps <= 16, "a cursor walks a path of bounded length");
        if let Some(value) = tree.prefetch_step(probe, &mut cursor) {
            assert_eq!(tree.found_at(probe, &cursor), Some(value));
            assert!(cursor.is_done());
            return (Some(value), steps);
        }
    }
    (None, steps)
}

#[test]
fn a_fetch_ahead_cursor_reaches_the_value_a_lookup_finds() {
    for base in KEY_BASES {
        let tree = tree_from((0..200_000u64).map(|k| (k * 2 + base, k)));
        for probe in (0..400_010u64).step_by(7).map(|probe| probe + base) {
            let (reached, steps) = walk_ahead(&tree, probe);
            assert_eq!(reached, tree.get(probe), "probe {probe}");
            // Three levels: two steps on each internal node, then one on the leaf, whose
            // hints and handles loaded together.
            assert_eq!(steps, 5, "probe {probe}");
        }
    }
    assert_eq!(walk_ahead(&tree(), 1), (None, 0));
}

#[test]
fn a_cursor_of_a_tree_that_freed_nodes_walks_again_from_the_root() {
    let mut tree = tree_from((0..200_000u64).map(|k| (k, k)));
    let mut cursor = tree.prefetch_start();
    for _ in 0..3 {
        assert_eq!(tree.prefetch_step(50_000, &mut cursor), None);
    }
    let stale_stamp = cursor.stamp;
    // Emptying a leaf's neighbourhood merges leaves and frees some.
    for key in 49_000..49_990 {
        assert_eq!(tree.remove(key), Some(key));
    }
    assert_ne!(tree.stamp, stale_stamp);
    assert_eq!(tree.prefetch_step(50_000, &mut cursor), None);
    assert_eq!(
        cursor.stamp, tree.stamp,
        "restarted with the tree's new stamp"
    );
    let mut value = None;
    while !cursor.is_done() {
        value = tree.prefetch_step(50_000, &mut cursor).or(value);
    }
    assert_eq!(value, Some(50_000));
    // Inserts free nothing: a cursor survives them (and reads some live slot).
    let before = tree.stamp;
    tree.insert(1_000_000, 1);
    assert_eq!(tree.stamp, before);
}

#[test]
fn every_tree_gets_its_own_stamp() {
    let a = tree();
    let b = tree_from([(1, 1)]);
    let mut c = tree();
    let c_before = c.stamp;
    c.clear();
    assert!(a.stamp != b.stamp && b.stamp != c.stamp && a.stamp != c.stamp);
    assert_ne!(c.stamp, c_before);
}
