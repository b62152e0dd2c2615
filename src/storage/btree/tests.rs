use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// Byte-string keys searched by slice, as index keys are.
impl TreeKey for Vec<u8> {
    type Probe = [u8];

    fn probe(&self) -> &[u8] {
        self
    }
}

#[derive(Debug, Clone)]
enum TreeOperation {
    Insert(u64, u64),
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
        6 => (keys.clone(), any::<u64>()).prop_map(|(k, v)| TreeOperation::Insert(k, v)),
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

fn walk(
    tree: &BTree<u64, u64>,
    start: Bound<u64>,
    end: Bound<u64>,
    how: RangeDirection,
) -> Vec<(u64, u64)> {
    let mut range = tree.range(start.as_ref(), end.as_ref());
    match how {
        RangeDirection::Forward => range.map(|(k, v)| (*k, *v)).collect(),
        RangeDirection::Backward => {
            let mut entries: Vec<_> = range.rev().map(|(k, v)| (*k, *v)).collect();
            entries.reverse();
            entries
        }
        RangeDirection::Both => {
            let (mut front, mut back) = (Vec::new(), Vec::new());
            while let Some((k, v)) = range.next() {
                front.push((*k, *v));
                let Some((k, v)) = range.next_back() else {
                    break;
                };
                back.push((*k, *v));
            }
            assert!(range.next().is_none() && range.next_back().is_none());
            back.reverse();
            front.extend(back);
            front
        }
    }
}

fn run_against_model(initial: Vec<u64>, ops: Vec<TreeOperation>) {
    let mut model: BTreeMap<u64, u64> = initial.iter().map(|&k| (k, k * 7)).collect();
    let mut tree = BTree::from_sorted(model.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>());
    tree.check_invariants();
    for op in ops {
        match op {
            TreeOperation::Insert(key, value) => {
                assert_eq!(tree.insert(key, value), model.insert(key, value))
            }
            TreeOperation::Remove(key) => assert_eq!(tree.remove(&key), model.remove(&key)),
            TreeOperation::Get(key) => {
                assert_eq!(tree.get_key_value(&key), model.get_key_value(&key))
            }
            TreeOperation::Range(start, end, how) => {
                assert_eq!(
                    walk(&tree, start, end, how),
                    model_range(&model, start, end)
                );
            }
        }
        assert_eq!(tree.len(), model.len());
    }
    tree.check_invariants();
    let all: Vec<_> = tree.iter().map(|(k, v)| (*k, *v)).collect();
    assert_eq!(all, model.into_iter().collect::<Vec<_>>());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn behaves_like_std_btreemap_when_small(
        ops in prop::collection::vec(op(0..200), 0..3000),
    ) {
        run_against_model(Vec::new(), ops);
    }

    #[test]
    fn behaves_like_std_btreemap_after_bulk_build(
        initial in prop::collection::btree_set(0..20_000u64, 0..6000),
        ops in prop::collection::vec(op(0..20_000), 0..4000),
    ) {
        run_against_model(initial.into_iter().collect(), ops);
    }

    #[test]
    fn emptying_a_bulk_built_tree_keeps_it_valid(
        initial in prop::collection::btree_set(0..100_000u64, 0..5000),
        seed in any::<u64>(),
    ) {
        let keys: Vec<u64> = initial.iter().copied().collect();
        let mut tree = BTree::from_sorted(keys.iter().map(|&k| (k, k)).collect::<Vec<_>>());
        let mut order = keys.clone();
        // A cheap deterministic shuffle, so merges happen all over the tree.
        let mut state = seed | 1;
        for i in (1..order.len()).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            order.swap(i, (state % (i as u64 + 1)) as usize);
        }
        for (done, key) in order.iter().enumerate() {
            prop_assert_eq!(tree.remove(key), Some(*key));
            if done % 257 == 0 {
                tree.check_invariants();
            }
        }
        prop_assert!(tree.is_empty());
        tree.check_invariants();
        prop_assert_eq!(tree.iter().next(), None);
    }

    #[test]
    fn byte_string_keys_search_by_slice(
        keys in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..12), 0..800),
        probes in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..12), 0..50),
    ) {
        let mut tree: BTree<Vec<u8>, usize> = BTree::new();
        let mut model = BTreeMap::new();
        for (n, key) in keys.iter().enumerate() {
            prop_assert_eq!(tree.insert(key.clone(), n), model.insert(key.clone(), n));
        }
        tree.check_invariants();
        for probe in &probes {
            prop_assert_eq!(tree.get(probe.as_slice()), model.get(probe));
            let ours: Vec<_> = tree
                .range(Bound::Excluded(probe.as_slice()), Bound::Unbounded)
                .rev()
                .collect();
            let theirs: Vec<_> = model
                .range::<[u8], _>((Bound::Excluded(probe.as_slice()), Bound::Unbounded))
                .rev()
                .collect();
            prop_assert_eq!(ours, theirs);
        }
        for key in keys.iter().step_by(2) {
            prop_assert_eq!(tree.remove(key.as_slice()), model.remove(key));
        }
        tree.check_invariants();
        let rebuilt = BTree::from_sorted(model.clone().into_iter().collect::<Vec<_>>());
        rebuilt.check_invariants();
        prop_assert!(rebuilt.iter().eq(model.iter()));
    }
}

#[test]
fn sequential_inserts_and_removes_at_scale() {
    let mut tree = BTree::new();
    for key in 0..200_000u64 {
        assert_eq!(tree.insert(key, key), None);
    }
    tree.check_invariants();
    for key in (0..200_000u64).rev().step_by(3) {
        assert_eq!(tree.remove(&key), Some(key));
    }
    tree.check_invariants();
    assert_eq!(tree.len(), 200_000 - 66_667);
    let bulk = BTree::from_sorted((0..1_000_003u64).map(|k| (k, k)).collect::<Vec<_>>());
    bulk.check_invariants();
    assert_eq!(bulk.len(), 1_000_003);
    assert!(bulk.iter().map(|(k, _)| *k).eq(0..1_000_003));
    assert!(bulk.iter().rev().map(|(k, _)| *k).eq((0..1_000_003).rev()));
}

#[test]
fn ranges_between_keys_and_inverted_are_empty() {
    let tree = BTree::from_sorted((0..1000u64).map(|k| (k * 2, k)).collect::<Vec<_>>());
    assert_eq!(
        tree.range(Bound::Included(&5), Bound::Included(&5)).count(),
        0
    );
    assert_eq!(
        tree.range(Bound::Excluded(&4), Bound::Excluded(&6)).count(),
        0
    );
    assert_eq!(
        tree.range(Bound::Included(&9), Bound::Included(&3)).count(),
        0
    );
    assert_eq!(
        tree.range(Bound::Excluded(&4), Bound::Excluded(&4)).count(),
        0
    );
    assert_eq!(
        tree.range(Bound::Included(&4), Bound::Included(&4)).count(),
        1
    );
    assert_eq!(
        tree.range(Bound::Excluded(&1998), Bound::Unbounded).count(),
        0
    );
    assert_eq!(tree.range(Bound::Unbounded, Bound::Excluded(&0)).count(), 0);
    let empty: BTree<u64, u64> = BTree::new();
    assert_eq!(empty.iter().count(), 0);
    assert_eq!(BTree::<u64, u64>::from_sorted(Vec::new()).iter().count(), 0);
}

/// Leaves per `LEAF_CAPACITY` entries after inserting `keys` one by one.
fn leaves_per_full_leaf(keys: impl Iterator<Item = u64>) -> f64 {
    let mut tree = BTree::new();
    for key in keys {
        tree.insert(key, key);
    }
    tree.check_invariants();
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
    // Random order: between the halves of splits (1.44, ln 2 full) and full.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let random = (0..100_000).map(|_| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    });
    let random = leaves_per_full_leaf(random);
    assert!(random < 1.4, "{random}");
}

#[test]
fn node_layout_is_as_sized() {
    use crate::storage::tuple::Tuple;
    use std::mem::size_of;
    // A value slot is the bare pointer: `None` lives in the pointer's niche.
    assert_eq!(size_of::<Option<Tuple>>(), size_of::<Tuple>());
    assert_eq!(size_of::<Tuple>(), 8);
    assert_eq!(size_of::<Option<BTreeNode<u64, Tuple>>>(), 16);
    // A full leaf costs 16 bytes an entry plus its length (a million entries: 16 MB).
    assert_eq!(size_of::<Leaf<u64, Tuple>>(), 8 + LEAF_CAPACITY * (8 + 8));
    assert_eq!(
        size_of::<Internal<u64, Tuple>>(),
        8 + SEPARATOR_CAPACITY * 8 + INTERNAL_FANOUT * 16
    );
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
            assert_eq!(
                u64::count_less(&keys, &probe),
                less,
                "len {len} probe {probe}"
            );
            assert_eq!(u64::count_not_greater(&keys, &probe), not_greater);
        }
    }
    assert_eq!(u64::count_not_greater(&[1, u64::MAX], &u64::MAX), 2);
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
        assert_eq!(less, u64::count_less(&keys[..len], &probe), "{context}");
        assert_eq!(
            not_greater,
            u64::count_not_greater(&keys[..len], &probe),
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

    #[test]
    fn vector_counts_match_in_leaves((keys, len) in key_array::<LEAF_CAPACITY>()) {
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
fn walk_ahead(tree: &BTree<u64, u64>, probe: u64) -> (Option<u64>, usize) {
    let mut cursor = tree.prefetch_start();
    let mut steps = 0;
    while !cursor.is_done() {
        steps += 1;
        assert!(steps <= 16, "a cursor walks a path of bounded length");
        if let Some(&value) = tree.prefetch_step(&probe, &mut cursor) {
            assert!(cursor.is_done());
            return (Some(value), steps);
        }
    }
    (None, steps)
}

#[test]
fn a_fetch_ahead_cursor_reaches_the_value_a_lookup_finds() {
    let tree = BTree::from_sorted((0..100_000u32).map(|k| (u64::from(k) * 2, u64::from(k))));
    for probe in (0..200_010u64).step_by(7) {
        let (reached, steps) = walk_ahead(&tree, probe);
        assert_eq!(reached, tree.get(&probe).copied(), "probe {probe}");
        // Three levels: two steps on each internal node, then one on the leaf, whose keys
        // and values loaded together.
        assert_eq!(steps, 5, "probe {probe}");
    }
    let empty = BTree::<u64, u64>::new();
    assert_eq!(walk_ahead(&empty, 1), (None, 0));
}

#[test]
fn a_cursor_of_a_tree_that_freed_nodes_walks_again_from_the_root() {
    let mut tree = BTree::from_sorted((0..100_000u32).map(|k| (u64::from(k), u64::from(k))));
    let mut cursor = tree.prefetch_start();
    for _ in 0..3 {
        assert_eq!(tree.prefetch_step(&50_000, &mut cursor), None);
    }
    let stale_stamp = cursor.stamp;
    // Emptying a leaf's neighbourhood merges leaves and frees some.
    for key in 49_000..49_990 {
        assert_eq!(tree.remove(&key), Some(key));
    }
    assert_ne!(tree.stamp, stale_stamp);
    assert_eq!(tree.prefetch_step(&50_000, &mut cursor), None);
    assert_eq!(
        cursor.stamp, tree.stamp,
        "restarted with the tree's new stamp"
    );
    let mut value = None;
    while !cursor.is_done() {
        value = tree.prefetch_step(&50_000, &mut cursor).copied().or(value);
    }
    assert_eq!(value, Some(50_000));
    // Inserts free nothing: a cursor survives them (and reads some live slot).
    let before = tree.stamp;
    tree.insert(1_000_000, 1);
    assert_eq!(tree.stamp, before);
}

#[test]
fn every_tree_gets_its_own_stamp() {
    let a = BTree::<u64, u64>::new();
    let b = BTree::<u64, u64>::from_sorted([(1, 1)]);
    let mut c = BTree::<u64, u64>::new();
    let c_before = c.stamp;
    c.clear();
    assert!(a.stamp != b.stamp && b.stamp != c.stamp && a.stamp != c.stamp);
    assert_ne!(c.stamp, c_before);
}
