//! Tuple validation against a format: the first bytes choose a format (up to six fields of
//! any of the fourteen types, nullable or not, an exact field count or none) and a primary
//! and maybe a secondary key over them (any indexable type, TREE or HASH, collations,
//! fields past the format); the rest is the tuple, generated or raw. It is inserted into
//! the empty space, and the space's verdict must be this file's own validator's
//! ([`super::check::tuple_problem`]). The same tuple given in two pieces (as crud's
//! spliced tuples are) gets the same verdict; an accepted tuple is then refused as a
//! duplicate, replaced, and deleted by its key, each leaving the space as it should.

use super::check::{check_space, picture, tuple_problem};
use super::gen::{self, Bytes};
use tarn::storage::{
    Collation, Engine, FieldDef, FieldType, IndexDef, IndexKind, KeyDef, KeyPart, SpaceDef,
    SpaceFormat,
};

const SPACE_ID: u32 = 512;

const INDEXABLE: [FieldType; 11] = [
    FieldType::Unsigned,
    FieldType::Integer,
    FieldType::Number,
    FieldType::Double,
    FieldType::String,
    FieldType::Boolean,
    FieldType::Varbinary,
    FieldType::Scalar,
    FieldType::Uuid,
    FieldType::Decimal,
    FieldType::Datetime,
];

/// A key part on a field chosen by `bytes`: of the field's type when that is indexable.
fn key_part(bytes: &mut Bytes<'_>, format: &SpaceFormat, nullable: bool) -> KeyPart {
    let field_no = bytes.below(format.fields.len() + 2) as u32;
    let choice = bytes.byte();
    let field_type = match format.fields.get(field_no as usize) {
        Some(field) if field.field_type.is_indexable() && !choice.is_multiple_of(4) => {
            field.field_type
        }
        _ => INDEXABLE[usize::from(choice / 4) % INDEXABLE.len()],
    };
    let collation = match bytes.byte() % 8 {
        0 => Collation::Unicode,
        1 => Collation::UnicodeCi,
        2 => Collation::Binary,
        _ => Collation::None,
    };
    KeyPart {
        field_no,
        field_type,
        is_nullable: nullable,
        collation,
    }
}

/// The space the first bytes describe (`Space::new` may refuse it).
pub fn space_def(bytes: &mut Bytes<'_>) -> SpaceDef {
    let field_count = bytes.below(7);
    let names = ["a", "b", "c", "d", "e", "f"];
    let fields = (0..field_count)
        .map(|no| {
            let choice = bytes.byte();
            let field = FieldDef::new(
                names[no],
                FieldType::ALL[usize::from(choice >> 1) % FieldType::ALL.len()],
            );
            if choice & 1 == 1 {
                field.nullable()
            } else {
                field
            }
        })
        .collect();
    let mut format = SpaceFormat::new(fields);
    if bytes.byte().is_multiple_of(4) {
        format.exact_field_count = bytes.below(5) as u32;
    }
    let shape = bytes.byte();
    let mut primary_parts = vec![key_part(bytes, &format, false)];
    if shape & 1 == 1 {
        primary_parts.push(key_part(bytes, &format, false));
    }
    let kind = |hash: bool| {
        if hash {
            IndexKind::Hash
        } else {
            IndexKind::Tree
        }
    };
    let mut indexes = vec![IndexDef {
        id: 0,
        name: "primary".into(),
        kind: kind(shape & 2 == 2),
        unique: true,
        key_def: KeyDef::new(primary_parts),
    }];
    if shape & 4 == 4 {
        let hash = shape & 8 == 8;
        let nullable = shape & 16 == 16;
        indexes.push(IndexDef {
            id: 1,
            name: "secondary".into(),
            kind: kind(hash),
            unique: hash || shape & 32 == 32,
            key_def: KeyDef::new([key_part(bytes, &format, nullable)]),
        });
    }
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
    let def = space_def(&mut bytes);
    let mut engine = Engine::new(1 << 30);
    if engine.create_space(def).is_err() {
        return;
    }
    let mut tuple = Vec::new();
    gen::tuple(&mut bytes, &mut tuple);
    let split_at = bytes.below(tuple.len() + 1);
    let space = engine.space_mut(SPACE_ID).unwrap();
    let expected = tuple_problem(space, &tuple);
    let inserted = space.insert(&tuple);
    let verdict = |result: &tarn::storage::Result<tarn::storage::Change>| match result {
        Ok(_) => None,
        Err(error) => Some(error.to_string()),
    };
    assert_eq!(
        expected.is_none(),
        inserted.is_ok(),
        "tuple {tuple:02x?}: this validator says {expected:?}, the space {:?}",
        verdict(&inserted)
    );
    let refused = verdict(&inserted);
    let space = engine.space_mut(SPACE_ID).unwrap();
    let Some(stored) = inserted.ok().and_then(|change| change.new) else {
        assert!(space.is_empty());
        // The same verdict for the same bytes in two pieces.
        let (head, tail) = tuple.split_at(split_at);
        let pieces = space.insert_pieces(&[head, tail]);
        assert_eq!(verdict(&pieces), refused, "{tuple:02x?} in pieces");
        assert!(space.is_empty());
        return;
    };
    assert_eq!(stored.data(), &tuple[..]);
    check_space(space);
    let (head, tail) = tuple.split_at(split_at);
    assert!(
        space.insert_pieces(&[head, tail]).is_err(),
        "{tuple:02x?} twice"
    );
    let before = picture(space, 0);
    assert!(space.insert(&tuple).is_err(), "{tuple:02x?} twice");
    assert_eq!(before, picture(space, 0));
    let replaced = space.replace_pieces(&[head, tail]);
    assert!(replaced.is_ok(), "{tuple:02x?} replaced: {replaced:?}");
    assert_eq!(space.len(), 1);
    check_space(space);
    // The tuple's own primary key finds and deletes it.
    let mut key = Vec::new();
    space.write_primary_key(&stored, &mut key);
    let deleted = space.delete(0, &key);
    assert!(
        matches!(&deleted, Ok(change) if change.old.as_ref().is_some_and(|old| old.data() == &tuple[..])),
        "{tuple:02x?} by its key {key:02x?}: {deleted:?}"
    );
    assert!(space.is_empty());
}
