use super::*;
use proptest::prelude::*;
use std::cell::RefCell;
use std::collections::BTreeMap;

/// A store of values that hold their keys, for the tests: a value is `(key, payload)`,
/// kept in a slot whose number plus one is its handle. Counts what it holds, so a test
/// sees every value the tree let go of, and the keys it wrote, so a test sees how often a
/// search compared whole keys.
/// A value: the key it holds, and a payload.
type KeyedValue = (Vec<u8>, u64);

#[derive(Default)]
struct KeyedValues {
    slots: RefCell<Vec<Option<KeyedValue>>>,
    free: RefCell<Vec<u32>>,
    key_writes: std::cell::Cell<usize>,
}

impl KeyedValues {
    fn live(&self) -> usize {
        self.slots.borrow().len() - self.free.borrow().len()
    }
}

impl KeyStore for KeyedValues {
    type Value = (Vec<u8>, u64);
    type Ref<'a> = u64;

    fn pack(&self, value: (Vec<u8>, u64)) -> u32 {
        let mut slots = self.slots.borrow_mut();
        let index = match self.free.borrow_mut().pop() {
            Some(index) => index as usize,
            None => {
                slots.push(None);
                slots.len() - 1
            }
        };
        slots[index] = Some(value);
        index as u32 + 1
    }

    unsafe fn unpack(&self, handle: u32) -> (Vec<u8>, u64) {
        let taken = self.slots.borrow_mut()[handle as usize - 1].take();
        self.free.borrow_mut().push(handle - 1);
        taken.expect("a live handle")
    }

    unsafe fn get(&self, handle: u32) -> u64 {
        self.slots.borrow()[handle as usize - 1]
            .as_ref()
            .expect("a live handle")
            .1
    }

    unsafe fn write_key(&self, handle: u32, out: &mut SearchKeyBuf) {
        self.key_writes.set(self.key_writes.get() + 1);
        let slots = self.slots.borrow();
        out.extend_from_slice(
            &slots[handle as usize - 1]
                .as_ref()
                .expect("a live handle")
                .0,
        );
    }
}

type KeyedTree = BytesTree<KeyedValues>;

fn check(tree: &KeyedTree) {
    tree.check_invariants();
    assert_eq!(
        tree.store().live(),
        tree.len(),
        "the store holds the tree's values"
    );
}

/// Keys from a small alphabet, short and long, many sharing their first 16 bytes, so that
/// heads tie often and the whole-key comparisons run.
fn key() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::sample::select(vec![0usize, 3, 8, 15, 16, 17, 24]),
        proptest::collection::vec(proptest::sample::select(vec![0u8, 1, 0xff]), 0..6),
    )
        .prop_map(|(shared, tail)| {
            let mut key = vec![7u8; shared];
            key.extend(tail);
            key
        })
}

#[derive(Debug, Clone)]
enum KeyedOperation {
    Insert(Vec<u8>, u64),
    Remove(Vec<u8>),
    Get(Vec<u8>),
    Range(Bound<Vec<u8>>, Bound<Vec<u8>>, bool),
}

fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        3 => key().prop_map(Bound::Included),
        3 => key().prop_map(Bound::Excluded),
    ]
}

fn operation() -> impl Strategy<Value = KeyedOperation> {
    prop_oneof![
        5 => (key(), any::<u64>()).prop_map(|(k, v)| KeyedOperation::Insert(k, v)),
        3 => key().prop_map(KeyedOperation::Remove),
        1 => key().prop_map(KeyedOperation::Get),
        1 => (bound(), bound(), any::<bool>())
            .prop_map(|(start, end, backward)| KeyedOperation::Range(start, end, backward)),
    ]
}

fn as_ref_bound(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match bound {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(key) => Bound::Included(key),
        Bound::Excluded(key) => Bound::Excluded(key),
    }
}

/// Whether std's map would take these bounds without a panic (it refuses inverted ones).
fn valid_bounds(start: &Bound<Vec<u8>>, end: &Bound<Vec<u8>>) -> bool {
    match (start, end) {
        (Bound::Excluded(s), Bound::Excluded(e)) => s < e,
        (Bound::Included(s) | Bound::Excluded(s), Bound::Included(e) | Bound::Excluded(e)) => {
            s <= e
        }
        _ => true,
    }
}

fn run(operations: Vec<KeyedOperation>, tree: &mut KeyedTree, model: &mut BTreeMap<Vec<u8>, u64>) {
    for operation in operations {
        match operation {
            KeyedOperation::Insert(key, value) => {
                let old = tree.insert(&key, (key.clone(), value)).map(|(_, v)| v);
                assert_eq!(old, model.insert(key, value));
            }
            KeyedOperation::Remove(key) => {
                let removed = tree.remove(&key).map(|(k, v)| {
                    assert_eq!(k, key, "the removed value holds the key");
                    v
                });
                assert_eq!(removed, model.remove(&key));
            }
            KeyedOperation::Get(key) => assert_eq!(tree.get(&key), model.get(&key).copied()),
            KeyedOperation::Range(start, end, backward) => {
                let got: Vec<u64> = {
                    let range = tree
                        .range(as_ref_bound(&start), as_ref_bound(&end))
                        .map(|(_, value)| value);
                    if backward {
                        range.rev().collect()
                    } else {
                        range.collect()
                    }
                };
                let expected: Vec<u64> = if valid_bounds(&start, &end) {
                    let range = model.range((start, end)).map(|(_, &v)| v);
                    if backward {
                        range.rev().collect()
                    } else {
                        range.collect()
                    }
                } else {
                    Vec::new()
                };
                assert_eq!(got, expected);
            }
        }
        check(tree);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn behaves_as_std_map(operations in proptest::collection::vec(operation(), 1..400)) {
        let mut tree = BytesTree::new(KeyedValues::default());
        let mut model = BTreeMap::new();
        run(operations, &mut tree, &mut model);
    }

    #[test]
    fn a_bulk_built_tree_behaves_as_std_map(
        keys in proptest::collection::btree_set(key(), 0..600),
        operations in proptest::collection::vec(operation(), 0..100),
    ) {
        let entries: Vec<(Vec<u8>, u64)> = keys.iter().cloned().zip(0u64..).collect();
        let mut model: BTreeMap<Vec<u8>, u64> = entries.iter().cloned().collect();
        let mut tree = BytesTree::from_sorted(
            KeyedValues::default(),
            entries.iter().map(|(key, value)| (key.as_slice(), (key.clone(), *value))),
        );
        check(&tree);
        run(operations, &mut tree, &mut model);
    }
}

fn numbered_key(number: u64) -> Vec<u8> {
    // Two 8-byte parts, as an index on two unsigned fields encodes them, then a tail.
    let mut key = (number / 1000).to_be_bytes().to_vec();
    key.extend_from_slice(&(number % 1000).to_be_bytes());
    key.extend_from_slice(b"tail");
    key
}

#[test]
fn a_hundred_thousand_keys_in_and_out_keep_every_invariant() {
    let mut tree = BytesTree::new(KeyedValues::default());
    let mut model = BTreeMap::new();
    // A multiplicative walk over 0..100_000: every key once, in scattered order.
    let keys: Vec<u64> = (0..100_000u64).map(|i| i * 7919 % 100_000).collect();
    for &number in &keys {
        let key = numbered_key(number);
        assert_eq!(tree.insert(&key, (key.clone(), number)), None);
        model.insert(key, number);
    }
    check(&tree);
    assert!(tree
        .iter()
        .map(|(head, value)| {
            assert_eq!(head, head_of(&numbered_key(value)));
            value
        })
        .eq(model.values().copied()));
    for &number in keys.iter().step_by(2) {
        assert!(tree.remove(&numbered_key(number)).is_some());
        model.remove(&numbered_key(number));
    }
    check(&tree);
    assert!(tree
        .iter()
        .rev()
        .map(|(_, value)| value)
        .eq(model.values().rev().copied()));
    tree.clear();
    check(&tree);
}

#[test]
fn a_search_reads_whole_keys_only_where_heads_tie() {
    let mut tree = BytesTree::new(KeyedValues::default());
    for number in 0..10_000 {
        let key = numbered_key(number);
        tree.insert(&key, (key.clone(), number));
    }
    let writes_before = tree.store().key_writes.get();
    // The probe's 16 bytes are its key's head: one entry ties, and is compared whole.
    assert_eq!(tree.get(&numbered_key(4321)), Some(4321));
    assert_eq!(tree.store().key_writes.get() - writes_before, 1);
    // A prefix of one key: its head ties that key's, which is compared whole (and is
    // greater); no other entry's key is written.
    let prefix = &numbered_key(4321)[..16];
    let writes_before = tree.store().key_writes.get();
    let first = tree.range(Bound::Included(prefix), Bound::Unbounded).next();
    assert_eq!(first.map(|(_, value)| value), Some(4321));
    assert_eq!(tree.store().key_writes.get() - writes_before, 1);
}

#[test]
fn a_leaf_entry_is_a_head_and_a_handle() {
    assert_eq!(
        std::mem::size_of::<BytesLeaf>(),
        LEAF_CAPACITY * (16 + 4) + std::mem::size_of::<usize>()
    );
}
