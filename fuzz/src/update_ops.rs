//! Update and upsert through the public storage API: a space chosen by the first byte
//! (formats of most field types, nullable fields, composite and secondary keys, TREE and
//! HASH, a small memory quota or none), then a run of inserts, replaces, updates, upserts
//! and deletes with fuzzed tuples, keys and operations (mostly well formed: see
//! [`super::gen`]). Besides "no panic": a write that fails changes nothing (every index,
//! the byte counts, the quota); a write that succeeds leaves only tuples that are one
//! whole msgpack array valid for the format and every key, in every index alike; and the
//! ops decoder agrees with the space about which op lists are malformed.

use super::check::{check_space, picture, tuple_problem};
use super::gen::{self, Bytes};
use tarn::storage::update::UpdateOps;
use tarn::storage::{
    Collation, Engine, FieldDef, FieldType, IndexDef, IndexKind, KeyDef, KeyPart, SpaceDef,
    SpaceFormat,
};

const SPACE_ID: u32 = 512;

fn part(field_no: u32, field_type: FieldType) -> KeyPart {
    KeyPart::new(field_no, field_type)
}

fn index(id: u32, kind: IndexKind, unique: bool, parts: Vec<KeyPart>) -> IndexDef {
    IndexDef {
        id,
        name: format!("i{id}").into(),
        kind,
        unique,
        key_def: KeyDef::new(parts),
    }
}

/// The spaces the target writes to, by number.
pub fn space_def(variant: u8) -> SpaceDef {
    use FieldType::*;
    let field = FieldDef::new;
    let (format, indexes) = match variant % 6 {
        // The common shape: one unsigned primary key (the one-walk write paths).
        0 => (
            SpaceFormat::new(vec![
                field("id", Unsigned),
                field("name", String),
                field("n", Number).nullable(),
                field("tags", Any).nullable(),
            ]),
            vec![index(0, IndexKind::Tree, true, vec![part(0, Unsigned)])],
        ),
        // Secondary keys: unique string, non-unique nullable number.
        1 => (
            SpaceFormat::new(vec![
                field("id", Unsigned),
                field("name", String),
                field("n", Number).nullable(),
                field("tags", Any).nullable(),
            ]),
            vec![
                index(0, IndexKind::Tree, true, vec![part(0, Unsigned)]),
                index(1, IndexKind::Tree, true, vec![part(1, String)]),
                index(2, IndexKind::Tree, false, vec![part(2, Number).nullable()]),
            ],
        ),
        // A composite HASH primary key and a unique nullable integer.
        2 => (
            SpaceFormat {
                exact_field_count: 0,
                ..SpaceFormat::new(vec![
                    field("id", Unsigned),
                    field("name", String),
                    field("n", Integer).nullable(),
                ])
            },
            vec![
                index(
                    0,
                    IndexKind::Hash,
                    true,
                    vec![part(0, Unsigned), part(1, String)],
                ),
                index(1, IndexKind::Tree, true, vec![part(2, Integer).nullable()]),
            ],
        ),
        // Every scalar type, a string primary key with a collation.
        3 => (
            SpaceFormat::new(vec![
                field("id", Integer),
                field("name", String),
                field("n", Double).nullable(),
                field("tags", Array).nullable(),
                field("b", Boolean).nullable(),
                field("s", Scalar).nullable(),
                field("f", Varbinary).nullable(),
                field("u", Uuid).nullable(),
                field("d", Datetime).nullable(),
                field("m", Map).nullable(),
            ]),
            vec![
                index(
                    0,
                    IndexKind::Tree,
                    true,
                    vec![KeyPart {
                        collation: Collation::UnicodeCi,
                        ..part(1, String)
                    }],
                ),
                index(1, IndexKind::Tree, false, vec![part(5, Scalar).nullable()]),
                index(2, IndexKind::Hash, true, vec![part(0, Integer)]),
            ],
        ),
        // No format at all, an exact field count, keys past the format.
        4 => (
            SpaceFormat {
                exact_field_count: 3,
                ..SpaceFormat::default()
            },
            vec![
                index(0, IndexKind::Tree, true, vec![part(0, Integer)]),
                index(1, IndexKind::Tree, false, vec![part(2, Scalar).nullable()]),
            ],
        ),
        // A primary key on a later field, decimals and numbers.
        _ => (
            SpaceFormat::new(vec![
                field("id", Any),
                field("name", Decimal).nullable(),
                field("n", Number),
            ]),
            vec![
                index(0, IndexKind::Tree, true, vec![part(2, Number)]),
                index(1, IndexKind::Tree, false, vec![part(1, Decimal).nullable()]),
            ],
        ),
    };
    SpaceDef {
        id: SPACE_ID,
        name: "fuzz".into(),
        format,
        indexes,
        is_sync: false,
    }
}

pub fn run(data: &[u8]) {
    let mut bytes = Bytes::new(data);
    let variant = bytes.byte();
    // A quota small enough to refuse writes now and then, or none to speak of.
    let memory_bytes = match bytes.byte() % 4 {
        0 => 256 + u64::from(bytes.u16() % 4096),
        _ => 1 << 30,
    };
    let mut engine = Engine::new(memory_bytes);
    engine
        .create_space(space_def(variant))
        .expect("the fuzz spaces are valid");
    let (mut tuple, mut key, mut ops) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..64 {
        if bytes.is_empty() {
            break;
        }
        let command = bytes.byte();
        let index_base = u32::from(command >> 7);
        tuple.clear();
        key.clear();
        ops.clear();
        let before = picture(engine.space(SPACE_ID).unwrap(), engine.quota().used_bytes());
        let space = engine.space_mut(SPACE_ID).unwrap();
        let index_count = space.indexes().len();
        let changed = match command % 8 {
            0 | 1 => {
                gen::tuple(&mut bytes, &mut tuple);
                {
                    let result = space.insert(&tuple);
                    written(space, result, &tuple, command)
                }
            }
            2 => {
                gen::tuple(&mut bytes, &mut tuple);
                {
                    let result = space.replace(&tuple);
                    written(space, result, &tuple, command)
                }
            }
            3 | 4 => {
                let index_id = bytes.below(index_count + 1) as u32;
                gen::key(&mut bytes, &mut key);
                gen::update_ops(&mut bytes, &mut ops);
                let result = space.update(index_id, &key, &ops, index_base);
                check_decode_agrees(space, &ops, index_base, &result, true);
                written(space, result, &ops, command)
            }
            5 | 6 => {
                gen::tuple(&mut bytes, &mut tuple);
                gen::update_ops(&mut bytes, &mut ops);
                let result = space.upsert_stored(&tuple, &ops, index_base);
                check_decode_agrees(space, &ops, index_base, &result, false);
                written(space, result, &ops, command)
            }
            _ => {
                let index_id = bytes.below(index_count + 1) as u32;
                gen::key(&mut bytes, &mut key);
                let result = space.delete(index_id, &key);
                written(space, result, &key, command)
            }
        };
        let space = engine.space(SPACE_ID).unwrap();
        let after = picture(space, engine.quota().used_bytes());
        if !changed {
            assert_eq!(
                before, after,
                "command {command} failed or found nothing, yet changed the space"
            );
        }
        check_space(space);
    }
}

/// Whether a write that returned `result` may have changed the space; checks the tuple
/// it stored. One command in four (bit 6) is then undone, as the rollback of a write the
/// log refused undoes it: the caller then finds the space exactly as before.
fn written(
    space: &mut tarn::storage::Space,
    result: tarn::storage::Result<tarn::storage::Change>,
    input: &[u8],
    command: u8,
) -> bool {
    let Ok(change) = result else {
        return false;
    };
    if let Some(stored) = &change.new {
        assert!(
            tuple_problem_free(stored.data()),
            "command {command} on {input:02x?} stored {:02x?}",
            stored.data()
        );
    }
    if change.is_none() {
        return false;
    }
    if command & 0x60 == 0x60 {
        space.undo(change).expect("the latest write is undone");
        return false;
    }
    true
}

fn tuple_problem_free(data: &[u8]) -> bool {
    super::check::is_one_value(data)
}

/// An op list the decoder refuses is refused by the write too, with the same error, except
/// where the write is refused earlier (no such index or key, an invalid upsert tuple) or,
/// for update, finds no tuple and so never reads the ops.
fn check_decode_agrees(
    space: &tarn::storage::Space,
    ops: &[u8],
    index_base: u32,
    result: &tarn::storage::Result<tarn::storage::Change>,
    is_update: bool,
) {
    let format = &space.format;
    let decoded = UpdateOps::decode(ops, index_base, &|name| format.field_no_by_name(name));
    let stored = result.as_ref().map(|change| change.new.as_ref());
    match (decoded, stored) {
        (Err(decode_error), Ok(Some(_))) => {
            panic!("ops {ops:02x?} do not decode ({decode_error}), yet the write stored a tuple")
        }
        (Err(decode_error), Ok(None)) if !is_update => {
            panic!("ops {ops:02x?} do not decode ({decode_error}), yet the upsert went on")
        }
        (Ok(_), Ok(Some(stored))) => {
            assert_eq!(tuple_problem(space, stored.data()), None, "{ops:02x?}");
        }
        _ => {}
    }
}
