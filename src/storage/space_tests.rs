//! Space behaviour checked against what Tarantool does: iterator order, uniqueness,
//! error texts, atomicity of failed writes, quota, bulk build.

use super::*;
use crate::msgpack;
use crate::storage::field_type::FieldType;
use crate::storage::key::{KeyDef, KeyPart};
use crate::storage::slab::SUB_PAGE_BYTES;
use crate::storage::tuple::FieldDef;

/// What a space with only an unsigned TREE primary key of `entries` entries holds for
/// them, when they fit one leaf: the leaf's malloc chunk.
const ONE_LEAF_BYTES: u64 = 528;

/// Builds msgpack from a tiny literal language: numbers, "strings", nil, arrays.
#[derive(Clone, Debug)]
enum Literal {
    U(u64),
    I(i64),
    S(&'static str),
    F(f64),
    Nil,
    A(Vec<Literal>),
}

fn write(v: &Literal, out: &mut Vec<u8>) {
    match v {
        Literal::U(u) => msgpack::write_uint(out, *u),
        Literal::I(i) => msgpack::write_int(out, *i),
        Literal::S(s) => msgpack::write_str(out, s.as_bytes()),
        Literal::F(f) => msgpack::write_f64(out, *f),
        Literal::Nil => out.push(0xc0),
        Literal::A(items) => {
            msgpack::write_array_len(out, items.len() as u32);
            for item in items {
                write(item, out);
            }
        }
    }
}

fn mp(items: &[Literal]) -> Vec<u8> {
    let mut out = Vec::new();
    write(&Literal::A(items.to_vec()), &mut out);
    out
}

fn text(tuple: impl std::ops::Deref<Target = Tuple>) -> String {
    msgpack_to_text(tuple.data())
}

/// The spec's iterator table: a 2-part (unsigned, string) primary key.
fn two_part_space() -> Space {
    let def = SpaceDef {
        id: 512,
        name: "tester".into(),
        format: SpaceFormat::new(vec![
            FieldDef::new("a", FieldType::Unsigned),
            FieldDef::new("b", FieldType::String),
        ]),
        indexes: vec![IndexDef::tree(
            0,
            "primary",
            true,
            vec![
                KeyPart::new(0, FieldType::Unsigned),
                KeyPart::new(1, FieldType::String),
            ],
        )],
        is_sync: false,
    };
    let mut space = Space::new(def, Rc::new(MemoryQuota::unlimited())).unwrap();
    for (a, b) in [(1, "a"), (1, "b"), (2, "a"), (2, "c"), (3, "b")] {
        space.insert(&mp(&[Literal::U(a), Literal::S(b)])).unwrap();
    }
    space
}

fn select_text(space: &Space, index: u32, iterator: IteratorType, key: &[Literal]) -> Vec<String> {
    space
        .select(index, iterator as u32, &mp(key))
        .unwrap()
        .map(|(_, tuple)| text(tuple))
        .collect()
}

fn select_err(space: &Space, index: u32, iterator: u32, key: &[Literal]) -> String {
    match space.select(index, iterator, &mp(key)) {
        Ok(_) => panic!("select succeeded"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn tree_iterators_match_tarantools_table() {
    use IteratorType::*;
    let space = two_part_space();
    let t = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let two = [Literal::U(2)];
    assert_eq!(
        select_text(&space, 0, Eq, &two),
        t(&["[2, \"a\"]", "[2, \"c\"]"])
    );
    assert_eq!(
        select_text(&space, 0, Req, &two),
        t(&["[2, \"c\"]", "[2, \"a\"]"])
    );
    assert_eq!(
        select_text(&space, 0, All, &two),
        t(&["[2, \"a\"]", "[2, \"c\"]", "[3, \"b\"]"])
    );
    assert_eq!(
        select_text(&space, 0, Lt, &two),
        t(&["[1, \"b\"]", "[1, \"a\"]"])
    );
    assert_eq!(
        select_text(&space, 0, Le, &two),
        t(&["[2, \"c\"]", "[2, \"a\"]", "[1, \"b\"]", "[1, \"a\"]"])
    );
    assert_eq!(
        select_text(&space, 0, Ge, &two),
        t(&["[2, \"a\"]", "[2, \"c\"]", "[3, \"b\"]"])
    );
    assert_eq!(select_text(&space, 0, Gt, &two), t(&["[3, \"b\"]"]));

    let two_b = [Literal::U(2), Literal::S("b")];
    assert!(select_text(&space, 0, Eq, &two_b).is_empty());
    assert!(select_text(&space, 0, Req, &two_b).is_empty());
    assert_eq!(
        select_text(&space, 0, All, &two_b),
        t(&["[2, \"c\"]", "[3, \"b\"]"])
    );
    assert_eq!(
        select_text(&space, 0, Lt, &two_b),
        t(&["[2, \"a\"]", "[1, \"b\"]", "[1, \"a\"]"])
    );
    assert_eq!(
        select_text(&space, 0, Le, &two_b),
        t(&["[2, \"a\"]", "[1, \"b\"]", "[1, \"a\"]"])
    );
    assert_eq!(
        select_text(&space, 0, Ge, &two_b),
        t(&["[2, \"c\"]", "[3, \"b\"]"])
    );
    assert_eq!(
        select_text(&space, 0, Gt, &two_b),
        t(&["[2, \"c\"]", "[3, \"b\"]"])
    );

    let ascending = t(&[
        "[1, \"a\"]",
        "[1, \"b\"]",
        "[2, \"a\"]",
        "[2, \"c\"]",
        "[3, \"b\"]",
    ]);
    let mut descending = ascending.clone();
    descending.reverse();
    for it in [Eq, Ge, Gt, All] {
        assert_eq!(select_text(&space, 0, it, &[]), ascending, "{it:?}");
    }
    for it in [Req, Lt, Le] {
        assert_eq!(select_text(&space, 0, it, &[]), descending, "{it:?}");
    }
}

#[test]
fn select_errors_are_tarantools() {
    let space = two_part_space();
    assert_eq!(
        select_err(&space, 0, 12, &[]),
        "Illegal parameters, Invalid iterator type"
    );
    assert_eq!(
        select_err(&space, 0, 7, &[]),
        "Index 'primary' (TREE) of space 'tester' (memtx) does not support requested iterator type"
    );
    assert_eq!(
        select_err(
            &space,
            0,
            0,
            &[Literal::U(1), Literal::S("a"), Literal::U(3)]
        ),
        "Invalid key part count (expected [0..2], got 3)"
    );
    assert_eq!(
        select_err(&space, 0, 0, &[Literal::S("x")]),
        "Supplied key type of part 0 does not match index part type: expected unsigned"
    );
    assert_eq!(
        select_err(&space, 1, 0, &[]),
        "No index #1 is defined in space 'tester'"
    );
}

/// A HASH primary index on (unsigned, string), as `hash2` in tests/tarantool_replies.rs.
fn hash_two_part_space() -> Space {
    let def = SpaceDef {
        id: 601,
        name: "hash2".into(),
        format: SpaceFormat::new(vec![
            FieldDef::new("a", FieldType::Unsigned),
            FieldDef::new("b", FieldType::String),
        ]),
        indexes: vec![IndexDef {
            id: 0,
            name: "pk".into(),
            kind: IndexKind::Hash,
            unique: true,
            key_def: KeyDef::new([
                KeyPart::new(0, FieldType::Unsigned),
                KeyPart::new(1, FieldType::String),
            ]),
        }],
        is_sync: false,
    };
    let mut space = Space::new(def, Rc::new(MemoryQuota::unlimited())).unwrap();
    space
        .insert(&mp(&[Literal::U(1), Literal::S("a")]))
        .unwrap();
    space
}

#[test]
fn select_checks_come_in_tarantools_order() {
    // Expected texts as Tarantool 2.6 answered them (2026-12-02, docs/tarantool-reference.md):
    // the iterator, the index, the key's part count, a partial HASH key, the key's types,
    // and only then whether the index offers the iterator.
    let tree = two_part_space();
    let hash = hash_two_part_space();
    let invalid_iterator = "Illegal parameters, Invalid iterator type";
    assert_eq!(select_err(&tree, 7, 12, &[]), invalid_iterator);
    assert_eq!(
        select_err(&tree, 0, 12, &[Literal::S("x")]),
        invalid_iterator
    );
    assert_eq!(select_err(&tree, 0, u32::MAX, &[]), invalid_iterator);
    let partial = |got| {
        format!("HASH index  does not support selects via a partial key (expected 2 parts, got {got}). Please Consider changing index type to TREE.")
    };
    assert_eq!(select_err(&hash, 0, 0, &[Literal::S("x")]), partial(1));
    assert_eq!(select_err(&hash, 0, 5, &[Literal::U(1)]), partial(1));
    assert_eq!(select_err(&hash, 0, 5, &[]), partial(0));
    assert_eq!(select_err(&hash, 0, 2, &[Literal::U(1)]), partial(1));
    assert_eq!(
        select_err(
            &hash,
            0,
            0,
            &[Literal::S("x"), Literal::S("a"), Literal::S("b")]
        ),
        "Invalid key part count (expected [0..2], got 3)"
    );
    assert_eq!(
        select_err(&hash, 0, 5, &[Literal::S("x"), Literal::S("a")]),
        "Supplied key type of part 0 does not match index part type: expected unsigned"
    );
    assert_eq!(
        select_err(&hash, 0, 5, &[Literal::U(1), Literal::S("a")]),
        "Index 'pk' (HASH) of space 'hash2' (memtx) does not support requested iterator type"
    );
    assert_eq!(
        select_err(&tree, 0, 7, &[Literal::S("x")]),
        "Supplied key type of part 0 does not match index part type: expected unsigned"
    );
    assert_eq!(
        select_err(
            &tree,
            0,
            7,
            &[Literal::U(1), Literal::S("a"), Literal::U(3)]
        ),
        "Invalid key part count (expected [0..2], got 3)"
    );
    // An empty key is fine for ALL, and for GT on HASH (2.6 answers the whole space).
    assert_eq!(hash.select(0, 2, &mp(&[])).unwrap().count(), 1);
    assert_eq!(hash.select(0, 6, &mp(&[])).unwrap().count(), 1);
}

#[test]
fn exact_matches_check_the_part_count_before_the_types() {
    // Tarantool 2.6 (2026-12-02): DELETE and UPDATE answer 19 for a key of the wrong length
    // whatever its parts hold, and 18 for a nil even in a nullable part of a unique index.
    let mut tree = two_part_space();
    let mut hash = hash_two_part_space();
    let exact = |got| format!("Invalid key part count in an exact match (expected 2, got {got})");
    let wrong_type =
        "Supplied key type of part 0 does not match index part type: expected unsigned";
    for space in [&mut tree, &mut hash] {
        for (key, expected) in [
            (vec![Literal::S("x")], exact(1)),
            (vec![Literal::U(1)], exact(1)),
            (vec![], exact(0)),
            (
                vec![Literal::U(1), Literal::S("a"), Literal::U(3)],
                exact(3),
            ),
            (
                vec![Literal::S("x"), Literal::S("a"), Literal::S("b")],
                exact(3),
            ),
            (
                vec![Literal::S("x"), Literal::S("a")],
                wrong_type.to_string(),
            ),
        ] {
            let key = mp(&key);
            assert_eq!(space.get(0, &key).unwrap_err().to_string(), expected);
            assert_eq!(space.delete(0, &key).unwrap_err().to_string(), expected);
            let update = space.update(0, &key, &mp(&[]), 0);
            assert_eq!(update.unwrap_err().to_string(), expected);
        }
    }
    let mut nullable = people_with_unique_nullable_age();
    nullable
        .insert(&mp(&[Literal::U(1), Literal::S("a"), Literal::Nil]))
        .unwrap();
    let nil_key = mp(&[Literal::Nil]);
    assert_eq!(nullable.select(2, 0, &nil_key).unwrap().count(), 1);
    for error in [
        nullable.get(2, &nil_key).unwrap_err(),
        nullable.delete(2, &nil_key).unwrap_err(),
        nullable.update(2, &nil_key, &mp(&[]), 0).unwrap_err(),
    ] {
        assert_eq!(error.to_string(), wrong_type);
    }
    assert_eq!(nullable.len(), 1);
}

/// [`people`] with its `age` index unique.
fn people_with_unique_nullable_age() -> Space {
    let mut def = people_def();
    def.indexes[2].unique = true;
    Space::new(def, Rc::new(MemoryQuota::unlimited())).unwrap()
}

#[test]
fn update_moving_the_primary_key_onto_a_taken_key_is_3() {
    // Tarantool 2.6 (2026-12-02) replaces in the primary index first: a taken key is 3 with
    // the tuple holding it as the old tuple, a free one 94; a secondary conflict comes after.
    let mut space = people();
    space
        .insert(&mp(&[Literal::U(1), Literal::S("a"), Literal::U(10)]))
        .unwrap();
    space
        .insert(&mp(&[Literal::U(2), Literal::S("b"), Literal::U(20)]))
        .unwrap();
    let set =
        |field: u64, value: Literal| Literal::A(vec![Literal::S("="), Literal::U(field), value]);
    let update = |space: &mut Space, ops: Vec<Literal>| {
        space
            .update(0, &mp(&[Literal::U(1)]), &mp(&ops), 0)
            .unwrap_err()
            .to_string()
    };
    let taken = "Duplicate key exists in unique index \"primary\" in space \"people\" with old tuple - [2, \"b\", 20] and new tuple - [2, \"a\", 10]";
    assert_eq!(update(&mut space, vec![set(0, Literal::U(2))]), taken);
    assert_eq!(
        update(
            &mut space,
            vec![Literal::A(vec![
                Literal::S("+"),
                Literal::U(0),
                Literal::U(1)
            ])]
        ),
        taken
    );
    let moved = "Attempt to modify a tuple field which is part of primary index in space 'people'";
    assert_eq!(update(&mut space, vec![set(0, Literal::U(3))]), moved);
    // The primary index first: a free key with a taken name is still 94, a taken key 3.
    assert_eq!(
        update(
            &mut space,
            vec![set(0, Literal::U(3)), set(1, Literal::S("b"))]
        ),
        moved
    );
    assert!(update(
        &mut space,
        vec![set(0, Literal::U(2)), set(1, Literal::S("b"))]
    )
    .contains("\"primary\""));
    // The new tuple is checked against the format before any index.
    assert_eq!(
        update(&mut space, vec![set(0, Literal::U(2)), set(1, Literal::U(7))]),
        "Tuple field 2 (name) type does not match one required by operation: expected string, got unsigned"
    );
    assert_eq!(
        text(space.get(0, &mp(&[Literal::U(1)])).unwrap().unwrap()),
        "[1, \"a\", 10]"
    );
    assert_eq!(space.len(), 2);
}

/// kv-like space with a unique HASH on `name` and a non-unique TREE on nullable `age`.
fn people() -> Space {
    Space::new(people_def(), Rc::new(MemoryQuota::unlimited())).unwrap()
}

fn people_def() -> SpaceDef {
    SpaceDef {
        id: 513,
        name: "people".into(),
        format: SpaceFormat::new(vec![
            FieldDef::new("id", FieldType::Unsigned),
            FieldDef::new("name", FieldType::String),
            FieldDef::new("age", FieldType::Unsigned).nullable(),
        ]),
        indexes: vec![
            IndexDef::tree(
                0,
                "primary",
                true,
                vec![KeyPart::new(0, FieldType::Unsigned)],
            ),
            IndexDef {
                id: 1,
                name: "name".into(),
                kind: IndexKind::Hash,
                unique: true,
                key_def: KeyDef::new([KeyPart::new(1, FieldType::String)]),
            },
            IndexDef::tree(
                2,
                "age",
                false,
                vec![KeyPart::new(2, FieldType::Unsigned).nullable()],
            ),
        ],
        is_sync: false,
    }
}

#[test]
fn non_unique_index_orders_ties_by_primary_key_and_nil_first() {
    use IteratorType::*;
    let mut space = people();
    for (id, name, age) in [
        (5, "e", Literal::U(30)),
        (1, "a", Literal::U(30)),
        (3, "c", Literal::Nil),
        (2, "b", Literal::U(20)),
        (4, "d", Literal::U(30)),
    ] {
        space
            .insert(&mp(&[Literal::U(id), Literal::S(name), age]))
            .unwrap();
    }
    let ids = |iterator, key: &[Literal]| -> Vec<u64> {
        space
            .select(2, iterator as u32, &mp(key))
            .unwrap()
            .map(|(_, t)| {
                let mut cursor = &t.data()[1..];
                match msgpack::read_value(&mut cursor).unwrap() {
                    msgpack::Value::Uint(id) => id,
                    other => panic!("{other:?}"),
                }
            })
            .collect()
    };
    assert_eq!(ids(All, &[]), vec![3, 2, 1, 4, 5]);
    assert_eq!(ids(Eq, &[Literal::U(30)]), vec![1, 4, 5]);
    assert_eq!(ids(Req, &[Literal::U(30)]), vec![5, 4, 1]);
    assert_eq!(ids(Lt, &[Literal::U(30)]), vec![2, 3]);
    assert_eq!(ids(Eq, &[Literal::Nil]), vec![3]);
    assert_eq!(
        space
            .get(2, &mp(&[Literal::U(30)]))
            .unwrap_err()
            .to_string(),
        "Get() doesn't support partial keys and non-unique indexes"
    );
}

#[test]
fn hash_index_lookups_and_errors() {
    let mut space = people();
    space
        .insert(&mp(&[Literal::U(1), Literal::S("a")]))
        .unwrap();
    space
        .insert(&mp(&[Literal::U(2), Literal::S("b")]))
        .unwrap();
    let found: Vec<String> = space
        .select(1, 0, &mp(&[Literal::S("b")]))
        .unwrap()
        .map(|(_, t)| text(t))
        .collect();
    assert_eq!(found, vec!["[2, \"b\"]"]);
    assert_eq!(space.select(1, 2, &mp(&[])).unwrap().count(), 2);
    assert_eq!(
        select_err(&space, 1, 0, &[]),
        "HASH index  does not support selects via a partial key (expected 1 parts, got 0). Please Consider changing index type to TREE."
    );
    assert_eq!(
        select_err(&space, 1, 3, &[Literal::S("a")]),
        "Index 'name' (HASH) of space 'people' (memtx) does not support requested iterator type"
    );
    assert_eq!(
        text(space.get(1, &mp(&[Literal::S("a")])).unwrap().unwrap()),
        "[1, \"a\"]"
    );
}

#[test]
fn duplicates_are_refused_and_change_nothing() {
    let mut space = people();
    space
        .insert(&mp(&[Literal::U(1), Literal::S("a"), Literal::U(10)]))
        .unwrap();
    space
        .insert(&mp(&[Literal::U(2), Literal::S("b"), Literal::U(20)]))
        .unwrap();
    let err = space
        .insert(&mp(&[Literal::U(1), Literal::S("z")]))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Duplicate key exists in unique index \"primary\" in space \"people\" with old tuple - [1, \"a\", 10] and new tuple - [1, \"z\"]"
    );
    // REPLACE may overwrite by primary key but not collide in a unique secondary.
    let err = space
        .replace(&mp(&[Literal::U(1), Literal::S("b")]))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Duplicate key exists in unique index \"name\" in space \"people\" with old tuple - [2, \"b\", 20] and new tuple - [1, \"b\"]"
    );
    assert_eq!(
        text(space.get(0, &mp(&[Literal::U(1)])).unwrap().unwrap()),
        "[1, \"a\", 10]"
    );
    assert_eq!(space.select(2, 2, &mp(&[])).unwrap().count(), 2);
    // Replacing a tuple by itself under a new secondary key moves its entries.
    space
        .replace(&mp(&[Literal::U(1), Literal::S("c"), Literal::U(5)]))
        .unwrap();
    assert!(space.get(1, &mp(&[Literal::S("a")])).unwrap().is_none());
    assert_eq!(
        text(space.get(1, &mp(&[Literal::S("c")])).unwrap().unwrap()),
        "[1, \"c\", 5]"
    );
    let ages: Vec<String> = space
        .select(2, 2, &mp(&[]))
        .unwrap()
        .map(|(_, t)| text(t))
        .collect();
    assert_eq!(ages, vec!["[1, \"c\", 5]", "[2, \"b\", 20]"]);
}

#[test]
fn delete_removes_from_every_index() {
    let mut space = people();
    space
        .insert(&mp(&[Literal::U(1), Literal::S("a"), Literal::U(10)]))
        .unwrap();
    let deleted = space
        .delete(1, &mp(&[Literal::S("a")]))
        .unwrap()
        .old
        .unwrap();
    assert_eq!(text(&deleted), "[1, \"a\", 10]");
    assert!(space.is_empty());
    assert!(space.indexes().iter().all(|index| index.is_empty()));
    assert!(space.delete(0, &mp(&[Literal::U(1)])).unwrap().is_none());
    assert_eq!(
        space.delete(0, &mp(&[])).unwrap_err().to_string(),
        "Invalid key part count in an exact match (expected 1, got 0)"
    );
    // The deleted tuple keeps its page while it is held (by the change, here), and gives
    // it back with its last reference.
    assert_eq!(space.memory().tuple_bytes, SUB_PAGE_BYTES);
    drop(deleted);
    assert_eq!(space.memory().tuple_bytes, 0);
}

#[test]
fn quota_refuses_writes_that_do_not_fit_and_changes_nothing() {
    let def = SpaceDef {
        id: 600,
        name: "small".into(),
        format: SpaceFormat::default(),
        indexes: vec![IndexDef::tree(
            0,
            "primary",
            true,
            vec![KeyPart::new(0, FieldType::Unsigned)],
        )],
        is_sync: false,
    };
    // Room for one sub-page of tuples (a size class's first page) and the one leaf of
    // their index.
    let quota = Rc::new(MemoryQuota::new(SUB_PAGE_BYTES as u64 + ONE_LEAF_BYTES));
    let mut space = Space::new(def, quota.clone()).unwrap();
    space
        .insert(&mp(&[Literal::U(1), Literal::S("x")]))
        .unwrap();
    let used = quota.used_bytes();
    assert_eq!(used, SUB_PAGE_BYTES as u64 + ONE_LEAF_BYTES);
    // A tuple of another size class needs a page of its own, and there is no room for it.
    let err = space
        .insert(&mp(&[
            Literal::U(2),
            Literal::S("a string too long for the quota that remains"),
        ]))
        .unwrap_err();
    assert!(matches!(err, StorageError::MemoryIssue { .. }), "{err}");
    assert!(err.to_string().starts_with("Failed to allocate "), "{err}");
    assert_eq!(space.len(), 1);
    assert_eq!(quota.used_bytes(), used);
    // One of the same class takes a slot of the page it has.
    space
        .insert(&mp(&[Literal::U(3), Literal::S("y")]))
        .unwrap();
    assert_eq!(quota.used_bytes(), used);
    space.delete(0, &mp(&[Literal::U(1)])).unwrap();
    assert_eq!(quota.used_bytes(), used);
    space.delete(0, &mp(&[Literal::U(3)])).unwrap();
    assert_eq!(quota.used_bytes(), 0);
}

#[test]
fn bulk_load_builds_every_index_and_refuses_duplicates() {
    let mut space = people();
    let rows: Vec<Vec<u8>> = (0..100u64)
        .rev()
        .map(|id| {
            let name: &'static str = Box::leak(format!("n{id}").into_boxed_str());
            mp(&[Literal::U(id), Literal::S(name), Literal::U(id % 7)])
        })
        .collect();
    space.bulk_load(rows.iter().map(Vec::as_slice)).unwrap();
    assert_eq!(space.len(), 100);
    let by_age: Vec<u64> = space
        .select(2, 0, &mp(&[Literal::U(3)]))
        .unwrap()
        .map(|_| 0)
        .collect();
    assert_eq!(by_age.len(), 14);
    assert_eq!(
        text(space.get(1, &mp(&[Literal::S("n42")])).unwrap().unwrap()),
        "[42, \"n42\", 0]"
    );

    let duplicate = [
        mp(&[Literal::U(1), Literal::S("x")]),
        mp(&[Literal::U(1), Literal::S("y")]),
    ];
    let err = space
        .bulk_load(duplicate.iter().map(Vec::as_slice))
        .unwrap_err();
    assert!(matches!(err, StorageError::TupleFound { .. }));
    assert!(space.is_empty());
}

#[test]
fn add_index_builds_over_existing_tuples() {
    let mut space = two_part_space();
    space
        .add_index(IndexDef::tree(
            1,
            "by_b",
            false,
            vec![KeyPart::new(1, FieldType::String)],
        ))
        .unwrap();
    let ordered = select_text(&space, 1, IteratorType::All, &[]);
    assert_eq!(
        ordered,
        vec![
            "[1, \"a\"]",
            "[2, \"a\"]",
            "[1, \"b\"]",
            "[3, \"b\"]",
            "[2, \"c\"]"
        ]
    );
    let err = space
        .add_index(IndexDef::tree(
            2,
            "unique_b",
            true,
            vec![KeyPart::new(1, FieldType::String)],
        ))
        .unwrap_err();
    assert!(matches!(err, StorageError::TupleFound { .. }));
    assert_eq!(space.indexes().len(), 2);
    assert_eq!(
        select_text(&space, 1, IteratorType::Eq, &[Literal::S("b")]).len(),
        2
    );
}

/// `two_part_space`'s definition with `b` as `b_type` and the indexes `extra` after the
/// primary one.
fn two_part_def(name: &str, b_type: FieldType, extra: Vec<IndexDef>) -> SpaceDef {
    let primary = IndexDef::tree(
        0,
        "primary",
        true,
        vec![
            KeyPart::new(0, FieldType::Unsigned),
            KeyPart::new(1, FieldType::String),
        ],
    );
    SpaceDef {
        id: 512,
        name: name.into(),
        format: SpaceFormat::new(vec![
            FieldDef::new("a", FieldType::Unsigned),
            FieldDef::new("b", b_type),
        ]),
        indexes: std::iter::once(primary).chain(extra).collect(),
        is_sync: false,
    }
}

#[test]
fn a_redefined_space_keeps_its_tuples_under_the_new_indexes_and_name() {
    let space = two_part_space();
    let by_b = IndexDef::tree(1, "by_b", false, vec![KeyPart::new(1, FieldType::String)]);
    let redefined = space
        .redefined(two_part_def("renamed", FieldType::Scalar, vec![by_b]))
        .unwrap();
    assert_eq!(&*redefined.name, "renamed");
    assert_eq!(
        select_text(&redefined, 1, IteratorType::All, &[]),
        [
            "[1, \"a\"]",
            "[2, \"a\"]",
            "[1, \"b\"]",
            "[3, \"b\"]",
            "[2, \"c\"]"
        ]
    );
    assert_eq!(select_text(&redefined, 0, IteratorType::All, &[]).len(), 5);
    // The old space is untouched until the caller swaps them.
    assert_eq!(space.indexes().len(), 1);
    assert_eq!(&*space.name, "tester");
}

#[test]
fn a_redefinition_the_tuples_break_is_refused_as_storage_refuses_them() {
    let space = two_part_space();
    let unique_b = IndexDef::tree(
        1,
        "unique_b",
        true,
        vec![KeyPart::new(1, FieldType::String)],
    );
    let duplicate = space
        .redefined(two_part_def("tester", FieldType::String, vec![unique_b]))
        .err()
        .expect("b repeats");
    assert!(
        matches!(duplicate, StorageError::TupleFound { .. }),
        "{duplicate:?}"
    );
    let narrowed = space
        .redefined(two_part_def("tester", FieldType::Unsigned, Vec::new()))
        .err()
        .expect("b holds strings");
    assert_eq!(
        narrowed.to_string(),
        "Tuple field 2 (b) type does not match one required by operation: expected unsigned, got string"
    );
    assert_eq!(space.len(), 5);
}

#[test]
fn scalar_and_number_indexes_treat_equal_numbers_as_one_key() {
    let def = SpaceDef {
        id: 700,
        name: "nums".into(),
        format: SpaceFormat::default(),
        indexes: vec![IndexDef::tree(
            0,
            "primary",
            true,
            vec![KeyPart::new(0, FieldType::Scalar)],
        )],
        is_sync: false,
    };
    let mut space = Space::new(def, Rc::new(MemoryQuota::unlimited())).unwrap();
    space.insert(&mp(&[Literal::U(1)])).unwrap();
    assert!(space.insert(&mp(&[Literal::F(1.0)])).is_err());
    space.insert(&mp(&[Literal::I(-1)])).unwrap();
    space.insert(&mp(&[Literal::S("a")])).unwrap();
    space.insert(&mp(&[Literal::F(0.5)])).unwrap();
    let all = select_text(&space, 0, IteratorType::All, &[]);
    assert_eq!(all, vec!["[-1]", "[0.5]", "[1]", "[\"a\"]"]);
}

#[test]
fn entry_and_tuple_handles_stay_small() {
    // Held by the million: one per tuple per index.
    assert_eq!(std::mem::size_of::<Tuple>(), 8);
    assert_eq!(std::mem::size_of::<crate::storage::index::Entry>(), 32);
    assert_eq!(
        std::mem::size_of::<crate::storage::index::UnsignedEntry>(),
        16
    );
}

#[test]
fn unsigned_primary_keys_iterate_correctly_at_byte_edges() {
    use IteratorType::*;
    let def = SpaceDef {
        id: 800,
        name: "edges".into(),
        format: SpaceFormat::default(),
        indexes: vec![IndexDef::tree(
            0,
            "primary",
            true,
            [KeyPart::new(0, FieldType::Unsigned)],
        )],
        is_sync: false,
    };
    let mut space = Space::new(def, Rc::new(MemoryQuota::unlimited())).unwrap();
    for id in [0, 255, 256, 65535, u64::MAX - 1, u64::MAX] {
        space.insert(&mp(&[Literal::U(id)])).unwrap();
    }
    let ids = |iterator: IteratorType, key: &[Literal]| -> Vec<String> {
        select_text(&space, 0, iterator, key)
    };
    assert_eq!(
        ids(Gt, &[Literal::U(255)]),
        [
            "[256]",
            "[65535]",
            "[18446744073709551614]",
            "[18446744073709551615]"
        ]
    );
    assert_eq!(ids(Le, &[Literal::U(255)]), ["[255]", "[0]"]);
    assert_eq!(ids(Lt, &[Literal::U(256)]), ["[255]", "[0]"]);
    assert_eq!(ids(Eq, &[Literal::U(65535)]), ["[65535]"]);
    assert!(ids(Gt, &[Literal::U(u64::MAX)]).is_empty());
    assert_eq!(ids(Ge, &[Literal::U(u64::MAX)]), ["[18446744073709551615]"]);
    assert_eq!(ids(Le, &[Literal::U(u64::MAX)]).len(), 6);
    assert!(ids(Lt, &[Literal::U(0)]).is_empty());
    assert_eq!(
        ids(Req, &[Literal::U(u64::MAX - 1)]),
        ["[18446744073709551614]"]
    );
    assert!(ids(Eq, &[Literal::U(1)]).is_empty());
}

#[test]
fn primary_only_space_refuses_duplicates_and_quota_without_changes() {
    let def = SpaceDef {
        id: 900,
        name: "kv".into(),
        format: SpaceFormat::default(),
        indexes: vec![IndexDef::tree(
            0,
            "primary",
            true,
            [KeyPart::new(0, FieldType::Unsigned)],
        )],
        is_sync: false,
    };
    // Room for one sub-page of tuples (a size class's first page) and the one leaf of
    // their index.
    let quota = Rc::new(MemoryQuota::new(SUB_PAGE_BYTES as u64 + ONE_LEAF_BYTES));
    let mut space = Space::new(def, quota.clone()).unwrap();
    space
        .insert(&mp(&[Literal::U(1), Literal::S("a")]))
        .unwrap();
    let used = quota.used_bytes();
    let err = space
        .insert(&mp(&[Literal::U(1), Literal::S("b")]))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Duplicate key exists in unique index \"primary\" in space \"kv\" with old tuple - [1, \"a\"] and new tuple - [1, \"b\"]"
    );
    assert_eq!(
        text(space.get(0, &mp(&[Literal::U(1)])).unwrap().unwrap()),
        "[1, \"a\"]"
    );
    assert_eq!(quota.used_bytes(), used);
    // A replace into another size class, which has no page and no room for one, leaves the
    // old tuple in place.
    let err = space
        .replace(&mp(&[
            Literal::U(1),
            Literal::S(
                "a value much longer than the quota has room for, even with the old tuple freed",
            ),
        ]))
        .unwrap_err();
    assert!(matches!(err, StorageError::MemoryIssue { .. }));
    assert_eq!(
        text(space.get(0, &mp(&[Literal::U(1)])).unwrap().unwrap()),
        "[1, \"a\"]"
    );
    assert_eq!(quota.used_bytes(), used);
    // An insert that does not fit leaves no trace.
    let err = space
        .insert(&mp(&[
            Literal::U(2),
            Literal::S(
                "another value much longer than the quota has room for, whatever else happens",
            ),
        ]))
        .unwrap_err();
    assert!(matches!(err, StorageError::MemoryIssue { .. }));
    assert_eq!(space.len(), 1);
    assert_eq!(quota.used_bytes(), used);
    space
        .replace(&mp(&[Literal::U(1), Literal::S("z")]))
        .unwrap();
    assert_eq!(quota.used_bytes(), used);
    assert_eq!(space.memory().tuple_bytes as u64 + ONE_LEAF_BYTES, used);
}

#[test]
fn the_prefetch_hint_reads_the_unsigned_key_field_or_nothing() {
    let hint = |data: &[u8], field_no| unvalidated_uint_field(data, field_no);
    let tuple = mp(&[
        Literal::U(7),
        Literal::S("x"),
        Literal::U(300),
        Literal::Nil,
    ]);
    assert_eq!(hint(&tuple, 0), Some(7));
    assert_eq!(hint(&tuple, 1), None, "a string is no unsigned key");
    assert_eq!(hint(&tuple, 2), Some(300));
    assert_eq!(hint(&tuple, 3), None);
    assert_eq!(hint(&tuple, 4), None, "past the last field");
    assert_eq!(hint(&tuple[..tuple.len() - 2], 2), None, "cut short");
    assert_eq!(
        hint(&mp(&[Literal::A(vec![]), Literal::U(1)]), 1),
        None,
        "behind an array"
    );
    assert_eq!(hint(&[0xdc, 0x00, 0x01, 0x05], 0), Some(5), "array 16");
    assert_eq!(hint(&[0xdd, 0x00, 0x00, 0x00, 0x01, 0x05], 0), Some(5));
    assert_eq!(hint(&[0x05], 0), None, "not an array");
    assert_eq!(hint(&[], 0), None);
}

#[test]
fn primary_only_space_on_a_later_field_replaces_and_refuses_like_any_other() {
    let def = SpaceDef {
        id: 901,
        name: "by_second".into(),
        format: SpaceFormat::default(),
        indexes: vec![IndexDef::tree(
            0,
            "primary",
            true,
            [KeyPart::new(1, FieldType::Unsigned)],
        )],
        is_sync: false,
    };
    let mut space = Space::new(def, Rc::new(MemoryQuota::unlimited())).unwrap();
    space
        .insert(&mp(&[Literal::S("a"), Literal::U(5)]))
        .unwrap();
    space
        .replace(&mp(&[Literal::S("b"), Literal::U(5)]))
        .unwrap();
    space
        .replace(&mp(&[Literal::S("c"), Literal::U(6)]))
        .unwrap();
    assert_eq!(space.len(), 2);
    assert_eq!(
        text(space.get(0, &mp(&[Literal::U(5)])).unwrap().unwrap()),
        "[\"b\", 5]"
    );
    let err = space
        .replace(&mp(&[Literal::S("d"), Literal::S("5")]))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Tuple field 2 type does not match one required by operation: expected unsigned, got string"
    );
    let err = space
        .insert(&mp(&[Literal::S("e"), Literal::U(6)]))
        .unwrap_err();
    assert!(matches!(err, StorageError::TupleFound { .. }), "{err}");
    assert_eq!(space.len(), 2);
}

/// One write of the primary-only model test: what, on which id, with how long a value.
#[derive(Debug, Clone, Copy)]
enum Write {
    Insert(u64, usize),
    Replace(u64, usize),
    Delete(u64),
    /// A replace whose key is a string: refused, whatever is stored.
    ReplaceWithStringKey(u64),
}

fn write_op() -> impl proptest::strategy::Strategy<Value = Write> {
    use proptest::prelude::*;
    // Enough ids to split and merge leaves; values long enough to fill the quota.
    let id = 0u64..300;
    prop_oneof![
        (id.clone(), 0usize..60).prop_map(|(id, len)| Write::Insert(id, len)),
        (id.clone(), 0usize..60).prop_map(|(id, len)| Write::Replace(id, len)),
        id.clone().prop_map(Write::Delete),
        id.prop_map(Write::ReplaceWithStringKey),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// The one-leaf write path of a space with only an unsigned TREE primary key agrees
    /// with a sorted map: outcomes, contents in order, and the quota to the byte (the
    /// slab's pages and the index's nodes), with a quota small enough to refuse some
    /// writes: those whose tuple needs a page (a sub-page, mostly) the quota has no room
    /// for, and every write while the index's nodes have taken the quota past its limit.
    #[test]
    fn primary_only_unsigned_space_agrees_with_a_map(
        writes in proptest::collection::vec(write_op(), 1..600)
    ) {
        const LIMIT: u64 = 5 * SUB_PAGE_BYTES as u64 + 3_000;
        let def = SpaceDef {
            id: 902,
            name: "kv".into(),
            format: SpaceFormat::new(vec![FieldDef::new("id", FieldType::Unsigned)]),
            indexes: vec![IndexDef::tree(0, "primary", true, [KeyPart::new(0, FieldType::Unsigned)])],
            is_sync: false,
        };
        let quota = Rc::new(MemoryQuota::new(LIMIT));
        let mut space = Space::new(def, quota.clone()).unwrap();
        let mut model: std::collections::BTreeMap<u64, Vec<u8>> = Default::default();
        let value = |len: usize| Literal::S(&"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefgh"[..len]);
        for write in writes {
            let used = quota.used_bytes();
            match write {
                Write::Insert(id, len) | Write::Replace(id, len) => {
                    let data = mp(&[Literal::U(id), value(len)]);
                    let insert = matches!(write, Write::Insert(..));
                    // A 5-byte header and the data: the key, field 0, takes no slot.
                    let room = space.slab().room_for(5 + data.len());
                    let result = if insert { space.insert(&data) } else { space.replace(&data) };
                    // Tarantool's order: the tuple's memory, the duplicate, then the rest.
                    if room.is_err_and(|page_bytes| used + page_bytes as u64 > LIMIT) {
                        let refused = matches!(result, Err(StorageError::MemoryIssue { .. }));
                        proptest::prop_assert!(refused, "no room for a page");
                        proptest::prop_assert_eq!(quota.used_bytes(), used, "a refusal changes nothing");
                    } else if insert && model.contains_key(&id) {
                        let refused = matches!(result, Err(StorageError::TupleFound { .. }));
                        proptest::prop_assert!(refused, "duplicate");
                    } else if used > LIMIT {
                        let refused = matches!(result, Err(StorageError::MemoryIssue { .. }));
                        proptest::prop_assert!(refused, "over the limit");
                        proptest::prop_assert_eq!(quota.used_bytes(), used, "a refusal changes nothing");
                    } else {
                        let stored = result.unwrap().new.unwrap();
                        proptest::prop_assert_eq!(stored.data(), &data[..]);
                        model.insert(id, data);
                    }
                }
                Write::Delete(id) => {
                    let deleted = space.delete(0, &mp(&[Literal::U(id)])).unwrap();
                    let expected = model.remove(&id);
                    proptest::prop_assert_eq!(deleted.old.as_ref().map(Tuple::data), expected.as_deref());
                }
                Write::ReplaceWithStringKey(id) => {
                    let err = space.replace(&mp(&[Literal::S("1"), Literal::U(id)])).unwrap_err();
                    let refused = matches!(err, StorageError::FieldType { .. });
                    proptest::prop_assert!(refused, "{}", err);
                    proptest::prop_assert_eq!(quota.used_bytes(), used);
                }
            }
            let stored: Vec<Vec<u8>> = space
                .select(0, IteratorType::All as u32, &mp(&[]))
                .unwrap()
                .map(|(_, tuple)| tuple.data().to_vec())
                .collect();
            let expected: Vec<Vec<u8>> = model.values().cloned().collect();
            proptest::prop_assert_eq!(stored, expected);
            proptest::prop_assert_eq!(space.len(), model.len());
            let memory = space.memory();
            let slots: usize = space.indexes()[0].entries().map(|(_, t)| t.allocated_bytes()).sum();
            proptest::prop_assert!(memory.tuple_bytes >= slots);
            proptest::prop_assert_eq!(memory.tuple_bytes == 0, model.is_empty());
            let index_bytes: usize = memory.index_bytes.iter().map(|(_, bytes)| bytes).sum();
            proptest::prop_assert_eq!(quota.used_bytes(), (memory.tuple_bytes + index_bytes) as u64);
        }
    }
}

/// Every kind of bulk build: unsigned TREE and HASH keys, byte keys inline and spilled,
/// unique and not, strings with zero bytes (escaped in keys). Only a repeated `id` is a
/// duplicate.
fn bulk_space() -> Space {
    let def = SpaceDef {
        id: 530,
        name: "bulk".into(),
        format: SpaceFormat::new(vec![
            FieldDef::new("id", FieldType::Unsigned),
            FieldDef::new("a", FieldType::Unsigned),
            FieldDef::new("name", FieldType::String),
        ]),
        indexes: vec![
            IndexDef::tree(
                0,
                "primary",
                true,
                vec![KeyPart::new(0, FieldType::Unsigned)],
            ),
            IndexDef::tree(
                1,
                "a_name",
                false,
                vec![
                    KeyPart::new(1, FieldType::Unsigned),
                    KeyPart::new(2, FieldType::String),
                ],
            ),
            IndexDef::tree(2, "a", false, vec![KeyPart::new(1, FieldType::Unsigned)]),
            IndexDef {
                kind: IndexKind::Hash,
                ..IndexDef::tree(
                    3,
                    "id_hash",
                    true,
                    vec![KeyPart::new(0, FieldType::Unsigned)],
                )
            },
            IndexDef {
                kind: IndexKind::Hash,
                ..IndexDef::tree(
                    4,
                    "id_name_hash",
                    true,
                    vec![
                        KeyPart::new(0, FieldType::Unsigned),
                        KeyPart::new(2, FieldType::String),
                    ],
                )
            },
        ],
        is_sync: false,
    };
    Space::new(def, Rc::new(MemoryQuota::unlimited())).unwrap()
}

/// Each index's entries as (key bytes, tuple text); HASH indexes sorted, as their order
/// is the hasher's.
fn index_contents(space: &Space) -> Vec<Vec<(Vec<u8>, String)>> {
    space
        .indexes()
        .iter()
        .map(|index| {
            let mut entries: Vec<(Vec<u8>, String)> = index
                .entries()
                .map(|(key, tuple)| {
                    let mut scratch = crate::storage::key::SearchKeyBuf::new();
                    (key.bytes(&tuple, &mut scratch).to_vec(), text(tuple))
                })
                .collect();
            if index.def.kind == IndexKind::Hash {
                entries.sort();
            }
            entries
        })
        .collect()
}

proptest::proptest! {
    #[test]
    fn bulk_load_builds_what_inserting_one_by_one_builds(
        rows in proptest::collection::vec(
            (
                0u64..40,
                0u64..3,
                proptest::collection::vec(proptest::sample::select(vec![0u8, b'a', b'b']), 0..20),
            ),
            0..60,
        ),
    ) {
        let rows: Vec<Vec<u8>> = rows
            .into_iter()
            .map(|(id, a, name)| {
                let mut out = Vec::new();
                msgpack::write_array_len(&mut out, 3);
                msgpack::write_uint(&mut out, id);
                msgpack::write_uint(&mut out, a);
                msgpack::write_str(&mut out, &name);
                out
            })
            .collect();
        let mut one_by_one = bulk_space();
        let inserted: Result<Vec<Tuple>> = rows
            .iter()
            .map(|row| one_by_one.insert(row).map(|c| c.new.expect("stored")))
            .collect();
        let mut bulk = bulk_space();
        let loaded = bulk.bulk_load(rows.iter().map(Vec::as_slice));
        match inserted {
            Ok(_) => {
                proptest::prop_assert!(loaded.is_ok(), "{:?}", loaded);
                proptest::prop_assert_eq!(index_contents(&bulk), index_contents(&one_by_one));
                proptest::prop_assert_eq!(bulk.memory(), one_by_one.memory());
            }
            Err(error) => {
                let duplicate = matches!(error, StorageError::TupleFound { .. });
                proptest::prop_assert!(duplicate, "{}", error);
                let refused = matches!(loaded, Err(StorageError::TupleFound { .. }));
                proptest::prop_assert!(refused, "{:?}", loaded);
                proptest::prop_assert!(bulk.is_empty());
                proptest::prop_assert_eq!(bulk.memory().tuple_bytes, 0);
            }
        }
    }
}

/// `insert_pieces` / `replace_pieces` are `insert` / `replace` of the joined bytes: the
/// same tuples, the same errors (bad types, missing fields, not an array, torn or
/// trailing bytes, duplicates), wherever the pieces are cut, on the one-unsigned-key
/// leaf path and on the general one.
#[test]
fn pieces_writes_match_writes_of_the_joined_bytes() {
    fn kv() -> Space {
        let def = SpaceDef {
            id: 514,
            name: "kv".into(),
            format: SpaceFormat::new(vec![
                FieldDef::new("id", FieldType::Unsigned),
                FieldDef::new("bucket_id", FieldType::Unsigned),
                FieldDef::new("s", FieldType::String),
            ]),
            indexes: vec![IndexDef::tree(
                0,
                "primary",
                true,
                vec![KeyPart::new(0, FieldType::Unsigned)],
            )],
            is_sync: false,
        };
        Space::new(def, Rc::new(MemoryQuota::unlimited())).unwrap()
    }
    let outcome = |written: Result<Tuple>| match written {
        Ok(tuple) => text(&tuple),
        Err(error) => format!("error: {error}"),
    };
    let tuples: Vec<Vec<u8>> = vec![
        mp(&[Literal::U(1), Literal::U(7), Literal::S("a")]),
        mp(&[Literal::U(300), Literal::Nil, Literal::S("b")]),
        mp(&[Literal::U(1), Literal::S("a")]),
        mp(&[Literal::U(2), Literal::S("b"), Literal::U(30)]),
        mp(&[Literal::S("x"), Literal::U(7), Literal::S("a")]),
        mp(&[Literal::I(-1), Literal::U(7), Literal::S("a")]),
        mp(&[Literal::U(1)]),
        mp(&[]),
        vec![0x05],
        vec![0x93, 0x01, 0x07],
        [
            mp(&[Literal::U(4), Literal::U(7), Literal::S("a")]),
            vec![0xc0],
        ]
        .concat(),
    ];
    for make in [kv as fn() -> Space, people, two_part_space] {
        for tuple in &tuples {
            for i in 0..=tuple.len() {
                for j in i..=tuple.len() {
                    let pieces = [&tuple[..i], &tuple[i..j], &tuple[j..]];
                    let (mut joined, mut split) = (make(), make());
                    for _ in 0..2 {
                        assert_eq!(
                            outcome(split.insert_pieces(&pieces).map(|c| c.new.expect("stored"))),
                            outcome(joined.insert(tuple).map(|c| c.new.expect("stored"))),
                            "insert {tuple:02x?} cut at {i}, {j}"
                        );
                    }
                    assert_eq!(
                        outcome(
                            split
                                .replace_pieces(&pieces)
                                .map(|c| c.new.expect("stored"))
                        ),
                        outcome(joined.replace(tuple).map(|c| c.new.expect("stored"))),
                        "replace {tuple:02x?} cut at {i}, {j}"
                    );
                    assert_eq!(split.len(), joined.len());
                }
            }
        }
    }
}

/// A write of the undo test, on `people` (secondary HASH and non-unique TREE indexes) or on
/// a one-index unsigned space (the one-leaf write path).
#[derive(Debug, Clone)]
enum UndoneWrite {
    Insert(u64, u8, Option<u64>),
    Replace(u64, u8, Option<u64>),
    Delete(u64),
    UpdateAge(u64, u64),
    Upsert(u64, u8, u64),
}

fn undone_write() -> impl proptest::strategy::Strategy<Value = UndoneWrite> {
    use proptest::prelude::*;
    // Few ids and names, so writes collide: replaces, duplicates, moved secondary keys.
    let (id, name, age) = (0u64..40, 0u8..12, proptest::option::of(0u64..5));
    prop_oneof![
        (id.clone(), name.clone(), age.clone()).prop_map(|(i, n, a)| UndoneWrite::Insert(i, n, a)),
        (id.clone(), name.clone(), age).prop_map(|(i, n, a)| UndoneWrite::Replace(i, n, a)),
        id.clone().prop_map(UndoneWrite::Delete),
        (id.clone(), 0u64..5).prop_map(|(i, a)| UndoneWrite::UpdateAge(i, a)),
        (id, name, 0u64..5).prop_map(|(i, n, a)| UndoneWrite::Upsert(i, n, a)),
    ]
}

const NAMES: [&str; 12] = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"];

fn person(id: u64, name: u8, age: Option<u64>) -> Vec<u8> {
    let age = age.map_or(Literal::Nil, Literal::U);
    mp(&[Literal::U(id), Literal::S(NAMES[name as usize]), age])
}

fn apply_undone_write(space: &mut Space, write: &UndoneWrite) -> Result<Change> {
    let set_age = |age: u64| {
        mp(&[Literal::A(vec![
            Literal::S("="),
            Literal::U(2),
            Literal::U(age),
        ])])
    };
    match write {
        UndoneWrite::Insert(id, name, age) => space.insert(&person(*id, *name, *age)),
        UndoneWrite::Replace(id, name, age) => space.replace(&person(*id, *name, *age)),
        UndoneWrite::Delete(id) => space.delete(0, &mp(&[Literal::U(*id)])),
        UndoneWrite::UpdateAge(id, age) => {
            space.update(0, &mp(&[Literal::U(*id)]), &set_age(*age), 0)
        }
        UndoneWrite::Upsert(id, name, age) => {
            space.upsert_stored(&person(*id, *name, None), &set_age(*age), 0)
        }
    }
}

/// Each index's entries (see [`index_contents`]), the byte counts, the quota used.
type SpaceState = (Vec<Vec<(Vec<u8>, String)>>, usize, u64);

/// Everything undo must restore exactly: every index's entries, the tuples' bytes, the
/// quota. (An index's own bytes are its nodes', and a delete empties nodes without
/// giving them back, so after an undo they may only be as many or more: see
/// `index_bytes_kept`.)
fn space_state(space: &Space, quota: &MemoryQuota) -> SpaceState {
    (
        index_contents(space),
        space.memory().tuple_bytes,
        quota.used_bytes(),
    )
}

/// Whether every index holds at least the bytes it held in `before`.
fn index_bytes_kept(space: &Space, before: &SpaceMemory) -> bool {
    let now = space.memory();
    now.index_bytes.len() == before.index_bytes.len()
        && now
            .index_bytes
            .iter()
            .zip(&before.index_bytes)
            .all(|(now, before)| now.0 == before.0 && now.1 >= before.1)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// The rollback of writes the log refused: undoing the changes of any sequence of
    /// writes, newest first, from any point on, gives back the space exactly as it was at
    /// that point (every index, tuple bytes, quota), on the general write path and on the
    /// one-leaf path of a single unsigned index.
    #[test]
    fn undoing_writes_newest_first_restores_the_space_exactly(
        writes in proptest::collection::vec(undone_write(), 1..120),
        keep in 0usize..120,
        primary_only: bool,
    ) {
        let quota = Rc::new(MemoryQuota::new(1 << 20));
        let mut space = if primary_only {
            let def = SpaceDef {
                id: 903,
                name: "kv".into(),
                format: SpaceFormat::new(vec![FieldDef::new("id", FieldType::Unsigned)]),
                indexes: vec![IndexDef::tree(0, "primary", true, [KeyPart::new(0, FieldType::Unsigned)])],
                is_sync: false,
            };
            Space::new(def, quota.clone()).unwrap()
        } else {
            let mut def = people_def();
            def.id = 904;
            Space::new(def, quota.clone()).unwrap()
        };
        let keep = keep.min(writes.len());
        let mut states = Vec::new();
        let mut memories = Vec::new();
        let mut changes = Vec::new();
        for write in &writes {
            states.push(space_state(&space, &quota));
            memories.push(space.memory());
            // A refused write changes nothing and leaves nothing to undo.
            let change = apply_undone_write(&mut space, write).unwrap_or_default();
            changes.push(change);
        }
        while changes.len() > keep {
            let change = changes.pop().unwrap();
            space.undo(change).unwrap();
            proptest::prop_assert_eq!(&space_state(&space, &quota), &states[changes.len()]);
            proptest::prop_assert!(index_bytes_kept(&space, &memories[changes.len()]));
        }
    }
}

/// A space of `[id]` rows keyed by `id` as `part_type`.
fn ids_space(id: u32, part_type: FieldType, ids: &[u64]) -> Space {
    let def = SpaceDef {
        id,
        name: "ids".into(),
        format: SpaceFormat::new(vec![FieldDef::new("id", part_type)]),
        indexes: vec![IndexDef::tree(
            0,
            "primary",
            true,
            [KeyPart::new(0, part_type)],
        )],
        is_sync: false,
    };
    let mut space = Space::new(def, Rc::new(MemoryQuota::new(1 << 24))).unwrap();
    for &id in ids {
        space.replace(&mp(&[Literal::U(id)])).unwrap();
    }
    space
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// A range select from a whole unsigned key in a TREE keyed by one unsigned part takes
    /// the index's own walk (`Index::range_unsigned`), not the encoded-bounds path; both
    /// give the same rows in the same order for every ordered iterator and any key, there
    /// or not. The general path is the same rows keyed as `integer`.
    #[test]
    fn an_unsigned_range_walk_selects_what_the_general_path_selects(
        ids in proptest::collection::btree_set(0u64..400, 0..120),
        keys in proptest::collection::vec(0u64..420, 1..20),
    ) {
        let ids: Vec<u64> = ids.into_iter().collect();
        let fast = ids_space(905, FieldType::Unsigned, &ids);
        let general = ids_space(906, FieldType::Integer, &ids);
        let rows = |space: &Space, iterator: IteratorType, key: u64| -> Vec<String> {
            space
                .select(0, iterator as u32, &mp(&[Literal::U(key)]))
                .unwrap()
                .map(|(_, tuple)| text(tuple))
                .collect()
        };
        for key in keys {
            for iterator in [IteratorType::Ge, IteratorType::Gt, IteratorType::Le, IteratorType::Lt] {
                proptest::prop_assert_eq!(
                    rows(&fast, iterator, key),
                    rows(&general, iterator, key),
                    "{:?} from {}", iterator, key
                );
            }
        }
    }
}

#[test]
fn entry_keys_compared_from_tuples_order_as_the_index_does() {
    let mut def = people_def();
    // Names may repeat: the unique HASH index on them goes, a TREE on (name, age) comes.
    def.indexes.retain(|index| index.id != 1);
    def.indexes.push(IndexDef::tree(
        3,
        "name_age",
        false,
        vec![
            KeyPart::new(1, FieldType::String),
            KeyPart::new(2, FieldType::Unsigned).nullable(),
        ],
    ));
    let mut space = Space::new(def, Rc::new(MemoryQuota::unlimited())).unwrap();
    // Names longer than a head and sharing it, one a prefix of others, some with a zero
    // byte: most pairs tie on their first 16 bytes and are told apart further on, by the
    // age after the name, or by the id after both.
    let names = [
        "a",
        "aaaaaaaaaaaaaaaaaaaa",
        "aaaaaaaaaaaaaaaaaaab",
        "aaaaaaaaaaaaaaa\0b",
        "aaaaaaaaaaaaaaa\0",
        "aaaaaaaaaaaaaaaa",
    ];
    let ages = [Literal::Nil, Literal::U(0), Literal::U(7), Literal::U(7)];
    let mut id = 0;
    for name in names {
        for age in &ages {
            id += 1;
            space
                .insert(&mp(&[Literal::U(id), Literal::S(name), age.clone()]))
                .unwrap();
        }
    }
    for index_id in [2, 3] {
        let index = space.index(index_id).unwrap();
        let in_order: Vec<Vec<u8>> = index.entries().map(|(_, t)| t.data().to_vec()).collect();
        assert_eq!(in_order.len(), 24);
        for (i, a) in in_order.iter().enumerate() {
            for (j, b) in in_order.iter().enumerate() {
                let order = index.compare_entry_keys(a, b);
                assert_eq!(order, i.cmp(&j), "index {index_id}: entry {i} against {j}");
            }
        }
    }
}
