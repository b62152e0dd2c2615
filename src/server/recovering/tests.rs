use super::*;
use crate::config::{Config, SHIPPED_CONFIG_TOML};
use crate::server::schema::{build_engine, snapshot_schema, space_def};
use crate::wal::format::{encode_batch, encode_file_header, FileHeader, FileKind, Row, RowKind};
use crate::wal::{self, RecoveryConfig, SnapshotMeta};

const FINGERPRINT: u64 = 0x77;

/// `people` (id 600): the space the shipped config lacks, which the schema rows below make.
const PEOPLE: &str = r#"
[[space]]
name = "people"
id = 600
format = [{ name = "id", type = "unsigned" }, { name = "name", type = "string" }]
[[space.index]]
name = "primary"
parts = ["id"]
[[space.index]]
name = "by_name"
unique = false
parts = ["name"]
"#;

fn config(extra: &str) -> Config {
    Config::from_toml_str(&format!("{SHIPPED_CONFIG_TOML}\n{extra}")).unwrap()
}

fn people() -> SpaceDef {
    space_def(&config(PEOPLE).spaces[2])
}

fn recovery_config(dir: &std::path::Path) -> RecoveryConfig {
    RecoveryConfig {
        dir: dir.to_path_buf(),
        shard_id: 0,
        schema_fingerprint: FINGERPRINT,
        force: false,
        schema_version_committed: 2,
    }
}

fn schema_row_body(version: u64, def: Option<&SpaceDef>) -> Vec<u8> {
    let definition = def.map(space_rows).unwrap_or_default();
    let mut body = Vec::new();
    SchemaRow {
        version,
        definition: &definition,
    }
    .encode(&mut body);
    body
}

fn ids(engine: &Engine, space_id: u32) -> Vec<u64> {
    let space = engine.space(space_id).unwrap();
    space
        .select(0, 2, &[0x90])
        .unwrap()
        .map(|(_, tuple)| u64::from(tuple.data()[1]))
        .collect()
}

/// The snapshot (LSN 3) was written with `people` (version 1), holding [1, "a"]. Then:
/// [2, "b"]; `people` loses its secondary index (version 2); [3, "c"]; then a change to
/// version 3 that was never committed (a drop), and [4, "d"] after it. Returns `people` as
/// version 2 defines it.
fn people_snapshot_and_wal(dir: &std::path::Path) -> SpaceDef {
    let mut written = build_engine(&config(PEOPLE), 1 << 26).unwrap();
    written
        .space_mut(600)
        .unwrap()
        .insert(&[0x92, 1, 0xa1, b'a'])
        .unwrap();
    let section = snapshot_schema(&written, 1);
    let meta = SnapshotMeta {
        shard_id: 0,
        lsn: 3,
        schema_fingerprint: FINGERPRINT,
        schema: &section,
    };
    let tuple = [0x92, 1, 0xa1, b'a'];
    wal::snapshot::write_snapshot_blocking(dir, &meta, [(600u32, &tuple[..])]).unwrap();
    let mut narrower = people();
    narrower.indexes.truncate(1);
    let (two, three, four) = (
        [0x92, 2, 0xa1, b'b'],
        [0x92, 3, 0xa1, b'c'],
        [0x92, 4, 0xa1, b'd'],
    );
    let (changed, dropped) = (
        schema_row_body(2, Some(&narrower)),
        schema_row_body(3, None),
    );
    let row = |lsn, kind, body| Row {
        lsn,
        kind,
        space_id: 600,
        body,
    };
    let mut file = Vec::new();
    let header = FileHeader {
        kind: FileKind::Wal,
        shard_id: 0,
        lsn: 4,
        schema_fingerprint: FINGERPRINT,
    };
    encode_file_header(&header, &mut file);
    encode_batch([row(4, RowKind::Replace, &two[..])], &mut file);
    encode_batch(
        [
            row(5, RowKind::Schema, &changed),
            row(6, RowKind::Replace, &three),
        ],
        &mut file,
    );
    encode_batch(
        [
            row(7, RowKind::Schema, &dropped),
            row(8, RowKind::Replace, &four),
        ],
        &mut file,
    );
    std::fs::write(dir.join(wal::dir::wal_file_name(4)), file).unwrap();
    narrower
}

#[test]
fn a_snapshot_schema_and_schema_rows_are_followed_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let narrower = people_snapshot_and_wal(dir.path());
    // Recovery begins with the shipped spaces only.
    let mut engine = build_engine(&config(""), 1 << 26).unwrap();
    assert!(engine.space(600).is_err());
    let recovered = wal::recover(
        &recovery_config(dir.path()),
        &mut Recovering::new(&mut engine),
    )
    .unwrap();
    assert_eq!(recovered.lsn_last, 6);
    assert_eq!(recovered.uncommitted_cut.map(|cut| cut.version), Some(3));
    assert_eq!(ids(&engine, 600), [1, 2, 3]);
    let people = engine.space(600).unwrap();
    assert_eq!(space_rows(&people.def()), space_rows(&narrower));
    assert!(
        engine.space(512).is_ok(),
        "the snapshot's schema keeps the shipped spaces"
    );
}

#[test]
fn a_section_defines_its_spaces_the_baseline_comes_back_and_a_wrong_row_is_refused() {
    let mut engine = build_engine(&config(PEOPLE), 1 << 26).unwrap();
    let mut recovering = Recovering::new(&mut engine);
    let mut narrower = people();
    narrower.indexes.truncate(1);
    let mut other = build_engine(&config(""), 1 << 20).unwrap();
    other.create_space(narrower.clone()).unwrap();
    recovering
        .begin_snapshot(Some(&snapshot_schema(&other, 1)))
        .unwrap();
    let defined =
        |recovering: &Recovering<'_>| space_rows(&recovering.engine.space(600).unwrap().def());
    assert_eq!(
        defined(&recovering),
        space_rows(&narrower),
        "as the section says"
    );
    recovering.begin_snapshot(None).unwrap();
    assert_eq!(
        defined(&recovering),
        space_rows(&people()),
        "back to the baseline"
    );
    let shipped_only = build_engine(&config(""), 1 << 20).unwrap();
    recovering
        .begin_snapshot(Some(&snapshot_schema(&shipped_only, 1)))
        .unwrap();
    assert!(
        recovering.engine.space(600).is_ok(),
        "a space of the baseline the section lacks stays"
    );
    let def = people();
    let error = recovering
        .change_schema(
            601,
            SchemaRow {
                version: 1,
                definition: &space_rows(&def),
            },
        )
        .unwrap_err();
    assert_eq!(
        error,
        "schema version 1: a definition of space 600 in a row of space 601"
    );
}
