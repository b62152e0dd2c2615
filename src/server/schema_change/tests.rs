use super::*;
use crate::config::{Config, SHIPPED_CONFIG_TOML};
use crate::server::schema;

/// A space with every kind of field and part the record writes: nullable fields, a HASH
/// index, parts with a collation and nullable parts.
const PEOPLE: &str = r#"
[[space]]
name = "people"
id = 600
format = [
    { name = "id", type = "unsigned" },
    { name = "name", type = "string" },
    { name = "nick", type = "string", is_nullable = true },
    { name = "score", type = "number" },
]

[[space.index]]
name = "primary"
type = "HASH"
parts = ["id"]

[[space.index]]
name = "by_name"
unique = false
parts = [{ field = "name", type = "string", collation = "unicode_ci" }, { field = "nick", type = "string", is_nullable = true }]
"#;

fn config(extra: &str) -> Config {
    Config::from_toml_str(&format!("{SHIPPED_CONFIG_TOML}\n{extra}")).unwrap()
}

/// What `DataDir::open` hands to [`plan`]: each config space's id, name, rows, definition.
fn wanted(config: &Config) -> Vec<(u32, String, Vec<u8>, SpaceDef)> {
    schema::user_space_rows(config)
        .into_iter()
        .zip(&config.spaces)
        .map(|((id, name, rows), space)| (id, name, rows, schema::space_def(space)))
        .collect()
}

fn recorded(config: &Config) -> Vec<(u32, Vec<u8>)> {
    schema::user_space_rows(config)
        .into_iter()
        .map(|(id, _, rows)| (id, rows))
        .collect()
}

#[test]
fn recorded_rows_decode_to_the_definitions_they_were_written_from() {
    let config = config(PEOPLE);
    for ((id, _, rows), space) in schema::user_space_rows(&config).iter().zip(&config.spaces) {
        let decoded = decode_space_rows(rows).unwrap();
        assert_eq!(decoded.id, *id);
        assert_eq!(
            format!("{decoded:?}"),
            format!("{:?}", schema::space_def(space)),
            "space {id}"
        );
    }
}

#[test]
fn every_cut_of_a_record_is_refused_without_a_panic() {
    let config = config(PEOPLE);
    let rows = &schema::user_space_rows(&config)[2].2;
    for end in 0..rows.len() {
        let cut = &rows[..end];
        // A cut between two rows is a shorter record: a space with fewer indexes.
        if let Ok(def) = decode_space_rows(cut) {
            assert!(def.indexes.len() < 2, "a cut at {end} lost no index");
        }
    }
    assert!(decode_space_rows(b"\x91\x01").is_err());
}

#[test]
fn an_unchanged_schema_plans_nothing() {
    let config = config(PEOPLE);
    assert!(plan(&recorded(&config), &wanted(&config), false)
        .unwrap()
        .is_empty());
}

#[test]
fn a_new_index_and_a_new_nullable_field_are_one_change_of_their_space() {
    let before = config(PEOPLE);
    let after = config(
        &(PEOPLE.replace(
            r#"    { name = "score", type = "number" },
]"#,
            r#"    { name = "score", type = "scalar" },
    { name = "email", type = "string", is_nullable = true },
]"#,
        ) + r#"
[[space.index]]
name = "by_score"
unique = false
parts = ["score"]
"#),
    );
    let changes = plan(&recorded(&before), &wanted(&after), false).unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(
        changes[0].describe(),
        "space 600 'people' (field 4 'score' from number to scalar, field 5 'email' added as \
         nullable string, index 2 'by_score' added as non-unique tree on [4 scalar])"
    );
    assert_eq!(changes[0].recorded.indexes.len(), 2);
    assert_eq!(
        changes[0].wanted.as_ref().map(|def| def.indexes.len()),
        Some(3)
    );
}

#[test]
fn dropped_and_rebuilt_indexes_and_a_rename_are_named() {
    let before = config(PEOPLE);
    let after = config(
        &PEOPLE
            .replace(r#"name = "people""#, r#"name = "persons""#)
            .replace(r#"collation = "unicode_ci""#, r#"collation = "unicode""#),
    );
    let changes = plan(&recorded(&before), &wanted(&after), false).unwrap();
    assert_eq!(
        changes[0].what,
        [
            "renamed from 'people'",
            "index 1 'by_name' rebuilt as non-unique tree on [2 string, 3 string]"
        ]
    );
    let without_index =
        config(&PEOPLE[..PEOPLE.find("[[space.index]]\nname = \"by_name\"").unwrap()]);
    let changes = plan(&recorded(&before), &wanted(&without_index), false).unwrap();
    assert_eq!(changes[0].what, ["index 1 'by_name' dropped"]);
}

#[test]
fn a_space_gone_from_the_config_is_refused_with_its_record_or_dropped_on_the_word() {
    let before = config(PEOPLE);
    let error = plan(&recorded(&before), &wanted(&config("")), false).unwrap_err();
    assert!(
        error.starts_with(
            "space 600 holds data on disk but is not in the config (on disk: [600, 1, \"people\""
        ),
        "{error}"
    );
    assert!(
        error.ends_with(
            "put the space back in the config, or start once with --drop-missing-spaces to \
             drop its data"
        ),
        "{error}"
    );
    let dropped = plan(&recorded(&before), &wanted(&config("")), true).unwrap();
    assert_eq!(dropped.len(), 1);
    assert!(dropped[0].wanted.is_none());
    assert_eq!(
        dropped[0].describe(),
        "space 600 'people' (dropped: not in the config, --drop-missing-spaces)"
    );
}

#[test]
fn a_new_primary_key_is_refused() {
    let before = config(PEOPLE);
    let after = config(&PEOPLE.replacen(r#"parts = ["id"]"#, r#"parts = ["id", "name"]"#, 1));
    let error = plan(&recorded(&before), &wanted(&after), false).unwrap_err();
    assert!(
        error.starts_with(
            "space 600 'people' changes its primary key: rows are placed on shards by it"
        ),
        "{error}"
    );
}

#[test]
fn the_fuzz_seeds_are_the_records_of_the_shipped_spaces() {
    let shipped = config("");
    let rows = schema::user_space_rows(&shipped);
    let kv: &[u8] = include_bytes!("../../../fuzz/seeds/schema_record/kv");
    let customers: &[u8] = include_bytes!("../../../fuzz/seeds/schema_record/customers");
    assert_eq!(rows[0].2, kv);
    assert_eq!(rows[1].2, customers);
}

#[test]
fn rows_that_spell_the_same_definition_otherwise_are_no_change() {
    let config = config("");
    let mut recorded = recorded(&config);
    // kv's primary part `[0, "unsigned"]` as a map: `{"field": 0, "type": "unsigned"}`.
    let short = b"\x91\x92\x00\xa8unsigned";
    let long = b"\x91\x82\xa5field\x00\xa4type\xa8unsigned";
    let rows = &mut recorded[0].1;
    let at = rows
        .windows(short.len())
        .position(|window| window == short)
        .expect("kv's primary part");
    rows.splice(at..at + short.len(), long.iter().copied());
    assert_eq!(
        format!("{:?}", decode_space_rows(rows).unwrap()),
        format!("{:?}", schema::space_def(&config.spaces[0]))
    );
    assert!(plan(&recorded, &wanted(&config), false).unwrap().is_empty());
}

#[test]
fn is_sync_is_recorded_in_the_space_flags_and_setting_it_is_a_change() {
    let sync = PEOPLE.replace("id = 600\n", "id = 600\nis_sync = true\n");
    let config_sync = config(&sync);
    let rows = &schema::user_space_rows(&config_sync)
        .into_iter()
        .find(|(id, _, _)| *id == 600)
        .unwrap()
        .2;
    // `{is_sync = true}`, as Tarantool 2.6 shows it in `_space`.
    let flags = b"\x81\xa7is_sync\xc3";
    assert!(rows.windows(flags.len()).any(|window| window == flags));
    assert!(decode_space_rows(rows).unwrap().is_sync);
    // A space without it keeps the record it always had: an empty flags map.
    let plain = schema::user_space_rows(&config(PEOPLE));
    let (_, _, people) = plain.iter().find(|(id, _, _)| *id == 600).unwrap();
    assert!(people.windows(2).any(|window| window == b"\x00\x80"));
    assert!(!decode_space_rows(people).unwrap().is_sync);

    let changes = plan(&recorded(&config(PEOPLE)), &wanted(&config_sync), false).unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].what, ["is_sync set to true"]);
}
