use super::*;
use crate::config::Config;
use crate::server::schema::build_engine;

fn engine() -> Engine {
    build_engine(&config(), 1 << 26).unwrap()
}

fn config() -> Config {
    Config::from_toml_str(crate::config::SHIPPED_CONFIG_TOML).unwrap()
}

/// Plans against the shipped schema over 2 shards (kv and customers spread).
fn plan(engine: &Engine, function: &str, args: &[u8]) -> Result<SchemaPlan, Raised> {
    let catalog = crate::server::schema::catalog_of(engine, &config(), 2);
    super::plan(engine, &catalog, function, args)
}

/// The call's arguments, a msgpack array written as JSON.
fn args(text: &str) -> Vec<u8> {
    crate::crud::tests::json(text)
}

fn refused(engine: &Engine, function: &str, values: &str) -> (u32, String) {
    match plan(engine, function, &args(values)) {
        Err(raised) => (raised.code.into(), raised.message),
        Ok(plan) => panic!("{function} planned {plan:?}"),
    }
}

fn change(engine: &Engine, function: &str, values: &str) -> DefinitionChange {
    match plan(engine, function, &args(values)) {
        Ok(SchemaPlan::Change { change, .. }) => change,
        other => panic!("{function}: {other:?}"),
    }
}

#[test]
fn space_create_takes_the_next_id_and_the_format() {
    let engine = engine();
    let DefinitionChange::Create(def) = change(
        &engine,
        "box.schema.space.create",
        r#"["t", {"format": [["id", "unsigned"], {"name": "v", "is_nullable": true}]}]"#,
    ) else {
        panic!("not a create");
    };
    assert_eq!(def.id, 514, "after kv 512 and customers 513");
    assert_eq!(&*def.name, "t");
    let fields: Vec<_> = def
        .format
        .fields
        .iter()
        .map(|field| (&*field.name, field.field_type, field.is_nullable))
        .collect();
    assert_eq!(
        fields,
        [
            ("id", FieldType::Unsigned, false),
            ("v", FieldType::Any, true)
        ]
    );
}

/// Tarantool 2.6's answers, `docs/tarantool-reference.md` (o).
#[test]
fn space_create_refuses_as_tarantool_does() {
    let engine = engine();
    let create = "box.schema.space.create";
    assert_eq!(
        refused(&engine, create, r#"["kv"]"#),
        (10, "Space 'kv' already exists".into())
    );
    assert_eq!(
        refused(&engine, create, r#"[1]"#),
        (1, "Illegal parameters, name should be a string".into())
    );
    assert_eq!(
        refused(&engine, create, r#"[""]"#),
        (
            70,
            "Invalid identifier '' (expected printable symbols only or it is too long)".into()
        )
    );
    assert_eq!(
        refused(&engine, create, r#"["a", 5]"#),
        (1, "Illegal parameters, options should be a table".into())
    );
    assert_eq!(
        refused(&engine, create, r#"["a", {"bogus": 1}]"#),
        (1, "Illegal parameters, unexpected option 'bogus'".into())
    );
}

#[test]
fn space_create_refuses_options_as_tarantool_does() {
    let engine = engine();
    let create = "box.schema.space.create";
    assert_eq!(
        refused(&engine, create, r#"["a", {"id": 512}]"#),
        (
            3,
            "Duplicate key exists in unique index 'primary' in space '_space'".into()
        )
    );
    assert_eq!(
        refused(&engine, create, r#"["a", {"id": "x"}]"#),
        (
            1,
            "Illegal parameters, options parameter 'id' should be of type number".into()
        )
    );
    assert_eq!(
        refused(&engine, create, r#"["a", {"engine": "bogus"}]"#),
        (57, "Space engine 'bogus' does not exist".into())
    );
    assert_eq!(
        refused(
            &engine,
            create,
            r#"["a", {"format": [{"name": "id", "type": "bogus"}]}]"#
        ),
        (
            9,
            "Failed to create space 'a': field 1 has unknown field type".into()
        )
    );
    assert_eq!(
        refused(
            &engine,
            create,
            r#"["a", {"format": [{"type": "unsigned"}]}]"#
        ),
        (
            1,
            "Illegal parameters, format[1]: name (string) is expected".into()
        )
    );
    assert_eq!(
        refused(&engine, create, r#"["a", {"format": [["id"], ["id"]]}]"#),
        (149, "Space field 'id' is duplicate".into())
    );
    assert!(matches!(
        plan(&engine, create, &args(r#"["kv", {"if_not_exists": true}]"#)),
        Ok(SchemaPlan::Unchanged(DdlReply::SpaceRow { space_id: 512 }))
    ));
}

#[test]
fn create_index_reads_every_form_of_parts() {
    let engine = engine();
    let index = |values: &str| {
        let DefinitionChange::Redefine(def) =
            change(&engine, "box.space.customers:create_index", values)
        else {
            panic!("not a redefine");
        };
        let index = def.indexes.last().unwrap().clone();
        let parts: Vec<_> = index
            .key_def
            .parts
            .iter()
            .map(|part| (part.field_no, part.field_type, part.is_nullable))
            .collect();
        (index.id, index.unique, parts)
    };
    assert_eq!(
        index(r#"["by_name", {"parts": ["name"], "unique": false}]"#),
        (3, false, vec![(6, FieldType::String, false)])
    );
    assert_eq!(
        index(r#"["ab", {"parts": [3, "unsigned", 4, "unsigned"], "unique": false}]"#),
        (
            3,
            false,
            vec![
                (2, FieldType::Unsigned, false),
                (3, FieldType::Unsigned, false)
            ]
        )
    );
    assert_eq!(
        index(
            r#"["n", {"parts": [{"field": 7, "type": "string", "is_nullable": true}], "unique": false}]"#
        ),
        (3, false, vec![(6, FieldType::String, true)])
    );
    assert_eq!(
        index(r#"["x", {"parts": [[8]], "unique": false}]"#),
        (3, false, vec![(7, FieldType::Scalar, false)])
    );
}

#[test]
fn create_index_refuses_as_tarantool_does() {
    let engine = engine();
    let create = "box.space.customers:create_index";
    assert_eq!(
        refused(&engine, create, r#"["primary"]"#),
        (85, "Index 'primary' already exists".into())
    );
    assert_eq!(
        refused(
            &engine,
            create,
            r#"["h", {"type": "hash", "unique": false, "parts": [2, "unsigned"]}]"#
        ),
        (
            14,
            "Can't create or modify index 'h' in space 'customers': HASH index must be unique"
                .into()
        )
    );
    assert_eq!(
        refused(
            &engine,
            create,
            r#"["s", {"parts": [3, "string"], "unique": false}]"#
        ),
        (
            24,
            "Field 3 has type 'unsigned' in one index, but type 'string' in another".into()
        )
    );
    assert_eq!(
        refused(&engine, create, r#"["s", {"bogus": 1}]"#),
        (1, "Illegal parameters, unexpected option 'bogus'".into())
    );
    assert_eq!(
        refused(&engine, create, r#"[5]"#),
        (1, "Illegal parameters, name should be a string".into())
    );
    assert_eq!(
        refused(&engine, create, r#"["u", {"parts": ["name"]}]"#),
        (14, "Can't create or modify index 'u' in space 'customers': a unique secondary index needs the whole space on one shard, and tarn spreads this space's rows over the shards by primary key; create it with unique = false".into())
    );
    assert!(matches!(
        plan(
            &engine,
            create,
            &args(r#"["primary", {"if_not_exists": true}]"#)
        ),
        Ok(SchemaPlan::Unchanged(DdlReply::Index {
            space_id: 513,
            index_id: 0,
            not_created: true
        }))
    ));
}

#[test]
fn drops_and_renames() {
    let engine = engine();
    assert!(matches!(
        change(&engine, "box.space.kv:drop", "[]"),
        DefinitionChange::Drop(512)
    ));
    assert_eq!(
        refused(&engine, "box.space.customers.index.primary:drop", "[]"),
        (
            17,
            "Can't drop primary key in space 'customers' while secondary keys exist".into()
        )
    );
    let DefinitionChange::Redefine(def) =
        change(&engine, "box.space.customers.index.composite:drop", "[]")
    else {
        panic!()
    };
    assert_eq!(
        def.indexes.iter().map(|index| index.id).collect::<Vec<_>>(),
        [0, 2]
    );
    let DefinitionChange::Redefine(def) = change(&engine, "box.space.kv:rename", r#"["kv2"]"#)
    else {
        panic!()
    };
    assert_eq!(&*def.name, "kv2");
    assert_eq!(
        refused(&engine, "box.space.kv:rename", r#"["customers"]"#),
        (
            3,
            "Duplicate key exists in unique index 'name' in space '_space'".into()
        )
    );
    assert_eq!(
        refused(&engine, "box.space.kv:rename", r#"[5]"#),
        (
            1,
            "Illegal parameters, space_name should be a string".into()
        )
    );
    assert_eq!(
        refused(&engine, "box.space._space:drop", "[]"),
        (
            15,
            "Can't drop the primary key in a system space, space '_space'".into()
        )
    );
    assert_eq!(
        refused(&engine, "box.space.nope:drop", "[]"),
        (33, "Procedure 'box.space.nope:drop' is not defined".into())
    );
}

#[test]
fn index_alter_keeps_what_it_is_not_given_and_refuses_what_tarn_cannot_place() {
    let engine = engine();
    let DefinitionChange::Redefine(def) = change(
        &engine,
        "box.space.customers.index.composite:alter",
        r#"[{"name": "abcd", "parts": ["a", "b"]}]"#,
    ) else {
        panic!("not a redefinition");
    };
    let altered = &def.indexes[1];
    assert_eq!((altered.id, &*altered.name), (1, "abcd"));
    assert_eq!((altered.kind, altered.unique), (IndexKind::Tree, false));
    let fields: Vec<u32> = altered.key_def.parts.iter().map(|p| p.field_no).collect();
    assert_eq!(fields, [2, 3]);
    assert!(matches!(
        plan(
            &engine,
            "box.space.customers.index.composite:alter",
            &args("[{}]")
        ),
        Ok(SchemaPlan::Rewritten(DdlReply::Nothing))
    ));
    assert!(matches!(
        plan(
            &engine,
            "box.space.customers.index.composite:alter",
            &args("[]")
        ),
        Ok(SchemaPlan::Unchanged(DdlReply::Nothing))
    ));
    let (code, message) = refused(
        &engine,
        "box.space.customers.index.primary:alter",
        r#"[{"parts": ["a"]}]"#,
    );
    assert_eq!(code, 14);
    assert!(
        message.contains("so the primary key's parts cannot change"),
        "{message}"
    );
    let (code, message) = refused(
        &engine,
        "box.space.customers.index.composite:alter",
        r#"[{"unique": true}]"#,
    );
    assert_eq!(code, 14);
    assert!(
        message.contains("a unique secondary index needs the whole space"),
        "{message}"
    );
}

/// Which refusals Tarantool's Lua raises before the first write to a system space (on a
/// read-only instance the others become 7), as observed (`docs/tarantool-reference.md` (p)).
#[test]
fn errors_raised_before_the_first_write_are_told_from_the_triggers_ones() {
    let engine = engine();
    let before = |function: &str, values: &str| {
        let raised = plan(&engine, function, &args(values)).expect_err("refused");
        raised_before_writing(function, &raised)
    };
    assert!(before(SPACE_CREATE, r#"["t4", {"bogus": 1}]"#)); // 1
    assert!(before(SPACE_CREATE, r#"["kv"]"#)); // 10
    assert!(before("box.space.kv:create_index", r#"["primary"]"#)); // 85
    assert!(before("box.space.kv:create_index", "[5]")); // 1
    assert!(before("box.space.nope:drop", "[]")); // 33
    assert!(before("box.space.kv:format", r#"[[{"name": 5}]]"#)); // 1, in format()'s Lua
    assert!(!before(
        SPACE_CREATE,
        r#"["t5", {"format": [{"name": 5}]}]"#
    )); // 1, in _space's trigger
    assert!(!before(
        SPACE_CREATE,
        r#"["t5", {"format": [{"name": "id", "type": "bogus"}]}]"#
    )); // 9
    assert!(!before(SPACE_CREATE, r#"["", {}]"#)); // 70
    assert!(!before("box.space._space:drop", "[]")); // 15
    assert!(!before(
        "box.space.kv.index.primary:alter",
        r#"[{"unique": false}]"#
    )); // 14
}
