//! Redefinitions prepared while writes go on: whatever the writes and wherever the walk is
//! when they come, the switched space indexes exactly its tuples, as a space built under
//! the new definition from them does.

use super::*;
use crate::msgpack;
use crate::storage::field_type::FieldType;
use crate::storage::key::KeyPart;
use crate::storage::memory::MemoryQuota;
use crate::storage::text::msgpack_to_text;
use crate::storage::tuple::FieldDef;
use std::rc::Rc;

fn tuple(fields: &[u64]) -> Vec<u8> {
    let mut out = Vec::new();
    msgpack::write_array_len(&mut out, fields.len() as u32);
    for &field in fields {
        msgpack::write_uint(&mut out, field);
    }
    out
}

fn key(field: u64) -> Vec<u8> {
    tuple(&[field])
}

/// `[id, group, value]`, all unsigned, under a primary index on `id` and `extra`.
fn def(extra: Vec<IndexDef>) -> SpaceDef {
    let primary = IndexDef::tree(0, "pk", true, vec![KeyPart::new(0, FieldType::Unsigned)]);
    SpaceDef {
        id: 512,
        name: "items".into(),
        format: SpaceFormat::new(vec![
            FieldDef::new("id", FieldType::Unsigned),
            FieldDef::new("group", FieldType::Unsigned),
        ]),
        indexes: std::iter::once(primary).chain(extra).collect(),
        is_sync: false,
    }
}

fn by_group(unique: bool) -> IndexDef {
    IndexDef::tree(
        1,
        "by_group",
        unique,
        vec![KeyPart::new(1, FieldType::Unsigned)],
    )
}

fn by_value() -> IndexDef {
    IndexDef::tree(
        2,
        "by_value",
        false,
        vec![
            KeyPart::new(2, FieldType::Unsigned),
            KeyPart::new(1, FieldType::Unsigned),
        ],
    )
}

fn space(extra: Vec<IndexDef>, rows: &[[u64; 3]]) -> Space {
    let mut space = Space::new(def(extra), Rc::new(MemoryQuota::unlimited())).unwrap();
    for row in rows {
        space.replace(&tuple(row)).unwrap();
    }
    space
}

/// Every index's tuples, in its order, as text.
fn contents(space: &Space) -> Vec<Vec<String>> {
    space
        .indexes()
        .iter()
        .map(|index| {
            space
                .select(index.def.id, IteratorType::All as u32, &[0x90])
                .unwrap()
                .map(|(_, tuple)| msgpack_to_text(tuple.data()))
                .collect()
        })
        .collect()
}

/// A space built under `def` from `space`'s tuples.
fn rebuilt(space: &Space, def: SpaceDef) -> Space {
    let mut fresh = Space::new(def, Rc::new(MemoryQuota::unlimited())).unwrap();
    let tuples: Vec<Vec<u8>> = space
        .select(0, IteratorType::All as u32, &[0x90])
        .unwrap()
        .map(|(_, tuple)| tuple.data().to_vec())
        .collect();
    fresh.bulk_load(tuples.iter().map(Vec::as_slice)).unwrap();
    fresh
}

fn walk_to_the_end(space: &mut Space) {
    while !space.redefinition_step(3).unwrap() {}
}

/// xorshift64: the same writes on every run.
struct Draw(u64);

impl Draw {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

#[test]
fn writes_during_the_walk_leave_the_new_indexes_as_a_fresh_build_would() {
    for seed in 1..=40u64 {
        let mut draw = Draw(seed * 0x9e37_79b9_7f4a_7c15);
        let rows: Vec<[u64; 3]> = (0..60)
            .map(|id| [id * 2, draw.below(7), draw.below(100)])
            .collect();
        let mut space = space(vec![by_group(false)], &rows);
        let target = def(vec![by_group(false), by_value()]);
        assert!(space.prepare_redefinition(target.clone()).unwrap());
        let mut done = false;
        for _ in 0..400 {
            let id = draw.below(130);
            let written = match draw.below(6) {
                0 => space.delete(0, &key(id)),
                1 => space.insert(&tuple(&[id, draw.below(7), draw.below(100)])),
                2 => space.update(0, &key(id), &[0x91, 0x93, 0xa1, b'=', 3, 5], 1),
                3 if draw.below(40) == 0 => {
                    space.truncate();
                    continue;
                }
                _ => space.replace(&tuple(&[id, draw.below(7), draw.below(100)])),
            };
            if let (Ok(change), 0) = (written, draw.below(8)) {
                space.undo(change).unwrap();
            }
            if !done && draw.below(3) == 0 {
                done = space.redefinition_step(1 + draw.below(4) as usize).unwrap();
            }
        }
        walk_to_the_end(&mut space);
        let expected = contents(&rebuilt(&space, target.clone()));
        let instance = space.instance();
        assert!(space.finish_redefinition());
        assert_eq!(contents(&space), expected, "seed {seed}");
        assert_ne!(
            space.instance(),
            instance,
            "a new definition is a new instance"
        );
        assert!(!space.finish_redefinition(), "nothing is left to switch to");
    }
}

#[test]
fn the_walk_refuses_a_duplicate_in_a_new_unique_index_and_the_cancel_changes_nothing() {
    let mut space = space(vec![], &[[1, 5, 0], [2, 6, 0], [3, 5, 0]]);
    let quota_before = space.quota.used_bytes();
    assert!(space
        .prepare_redefinition(def(vec![by_group(true)]))
        .unwrap());
    let refused = space.redefinition_step(10).expect_err("group 5 repeats");
    assert_eq!(
        refused.to_string(),
        "Duplicate key exists in unique index \"by_group\" in space \"items\" with old tuple - \
         [1, 5, 0] and new tuple - [3, 5, 0]"
    );
    space.cancel_redefinition();
    assert_eq!(space.quota.used_bytes(), quota_before);
    assert_eq!(space.indexes().len(), 1);
    assert!(!space.finish_redefinition());
}

#[test]
fn a_write_the_index_being_built_refuses_is_refused_and_changes_nothing() {
    let mut space = space(vec![], &[[1, 5, 0], [2, 6, 0], [3, 7, 0]]);
    assert!(space
        .prepare_redefinition(def(vec![by_group(true)]))
        .unwrap());
    assert!(!space.redefinition_step(2).unwrap());
    // Group 5 is in the new index (walked); group 7 is not yet, but a write puts it there.
    let refused = space
        .replace(&tuple(&[9, 5, 1]))
        .expect_err("group 5 is taken");
    assert!(
        matches!(refused, StorageError::TupleFound { ref index, .. } if &**index == "by_group")
    );
    space.replace(&tuple(&[8, 8, 1])).unwrap();
    // Replacing a tuple by one under the same new key is no duplicate.
    space.replace(&tuple(&[1, 5, 2])).unwrap();
    walk_to_the_end(&mut space);
    assert!(space.finish_redefinition());
    assert_eq!(
        contents(&space)[1],
        ["[1, 5, 2]", "[2, 6, 0]", "[3, 7, 0]", "[8, 8, 1]"]
    );
}

#[test]
fn deleting_an_unwalked_duplicate_keeps_the_tuple_a_write_put_under_its_key() {
    let mut space = space(vec![], &[[1, 5, 0], [2, 5, 0]]);
    assert!(space
        .prepare_redefinition(def(vec![by_group(true)]))
        .unwrap());
    space.replace(&tuple(&[3, 5, 0])).unwrap();
    space.delete(0, &key(1)).unwrap();
    space.delete(0, &key(2)).unwrap();
    walk_to_the_end(&mut space);
    assert!(space.finish_redefinition());
    assert_eq!(contents(&space)[1], ["[3, 5, 0]"]);
}

#[test]
fn a_new_format_is_checked_on_every_tuple_and_every_write_meanwhile() {
    let mut space = space(vec![], &[[1, 5, 0], [2, 6, 0]]);
    let mut target = def(vec![]);
    target
        .format
        .fields
        .push(FieldDef::new("value", FieldType::Unsigned));
    target.format.exact_field_count = 3;
    assert!(space.prepare_redefinition(target.clone()).unwrap());
    let refused = space
        .replace(&tuple(&[3, 5]))
        .expect_err("three fields now");
    assert_eq!(
        refused.to_string(),
        "Tuple field count 2 does not match space field count 3"
    );
    walk_to_the_end(&mut space);
    assert!(space.finish_redefinition());
    assert_eq!(space.format, target.format);

    let mut space = space_with_short_tuple();
    assert!(space.prepare_redefinition(target).unwrap());
    assert!(
        space.redefinition_step(10).is_err(),
        "[7, 1] has two fields"
    );
}

fn space_with_short_tuple() -> Space {
    let mut space = space(vec![], &[[1, 5, 0]]);
    space.replace(&tuple(&[7, 1])).unwrap();
    space
}

#[test]
fn a_dropped_index_is_freed_and_a_kept_one_is_not_rebuilt() {
    let rows: Vec<[u64; 3]> = (0..500).map(|id| [id, id % 10, id]).collect();
    let mut space = space(vec![by_group(false), by_value()], &rows);
    let quota_before = space.quota.used_bytes();
    let renamed = IndexDef {
        name: "groups".into(),
        ..by_group(false)
    };
    assert!(space.prepare_redefinition(def(vec![renamed])).unwrap());
    assert!(
        space.redefinition_step(1).unwrap(),
        "nothing to build: done at once"
    );
    assert!(space.finish_redefinition());
    assert!(
        space.quota.used_bytes() < quota_before,
        "by_value's nodes are freed"
    );
    let names: Vec<&str> = space.indexes().iter().map(|i| &*i.def.name).collect();
    assert_eq!(names, ["pk", "groups"]);
    assert_eq!(contents(&space)[1].len(), 500);
}

#[test]
fn a_new_primary_index_is_not_prepared_but_rebuilt() {
    let mut space = space(vec![], &[[1, 5, 0]]);
    let mut target = def(vec![]);
    target.indexes[0] = IndexDef::tree(0, "pk", true, vec![KeyPart::new(1, FieldType::Unsigned)]);
    assert!(!space.prepare_redefinition(target).unwrap());
    assert!(!space.redefinition_ready());
}

#[test]
fn a_redefinition_at_once_builds_only_what_it_adds_and_refuses_what_the_data_breaks() {
    let rows: Vec<[u64; 3]> = (0..300).map(|id| [id, id % 7, id % 11]).collect();
    let mut space = space(vec![by_group(false)], &rows);
    let target = def(vec![by_group(false), by_value()]);
    let expected = contents(&rebuilt(&space, target.clone()));
    space.redefine_at_once(target).unwrap();
    assert_eq!(contents(&space), expected);

    let refused = space
        .redefine_at_once(def(vec![by_group(true)]))
        .expect_err("groups repeat");
    assert!(
        matches!(refused, StorageError::TupleFound { .. }),
        "{refused:?}"
    );
    assert_eq!(
        contents(&space),
        expected,
        "a refused change changes nothing"
    );
    assert!(!space.redefinition_ready());
}
