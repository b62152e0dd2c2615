//! Schema changes in the config against the real binary: a recorded space that the config
//! changes is recovered as its data was written and then rebuilt under the config's
//! definition (new index, new field, wider type), on every shard; a change the data does
//! not allow refuses the start and leaves the directory as it was; a space gone from the
//! config is refused, or dropped for good with `--drop-missing-spaces`.

use crate::common;

use common::{Client, Server};
use std::path::Path;
use tarn::msgpack::{write_array_len, write_str, write_uint};
use tarn::protocol::client::{self, decode_reply};

const SHIPPED: &str = include_str!("../conf/tarn.toml");
const KV: u32 = 512;
const SHARDS: u32 = 2;

/// The shipped config with `kv` given a nullable `note` field and a non-unique TREE index
/// on `value` (index 1).
fn with_value_index() -> String {
    let kv_format = r#"    { name = "value", type = "string" },
]"#;
    assert!(SHIPPED.contains(kv_format));
    let changed = SHIPPED.replacen(
        kv_format,
        r#"    { name = "value", type = "string" },
    { name = "note", type = "string", is_nullable = true },
]"#,
        1,
    );
    let kv_primary = "parts = [\"id\"]\n";
    let at = changed.find(kv_primary).expect("kv's primary index") + kv_primary.len();
    let index = "\n[[space.index]]\nname = \"by_value\"\ntype = \"TREE\"\nunique = false\nparts = [\"value\"]\n";
    format!("{}{index}{}", &changed[..at], &changed[at..])
}

fn start(dir: &Path, config: &str) -> Result<Server, String> {
    Server::try_start_with(dir, config, SHARDS, &["--wal-mode", "write"])
}

/// The shipped config with `kv.value` of type `field_type`.
fn with_value_type(field_type: &str) -> String {
    let shipped = r#"{ name = "value", type = "string" }"#;
    assert!(SHIPPED.contains(shipped));
    let changed = format!(r#"{{ name = "value", type = "{field_type}" }}"#);
    SHIPPED.replacen(shipped, &changed, 1)
}

/// A server on `dir` under the shipped config that wrote kv rows `ids` and stopped.
fn rows_written(dir: &Path, ids: std::ops::Range<u64>) {
    let server = start(dir, SHIPPED).unwrap();
    write_rows(&server, ids);
    assert_eq!(server.stop(), Some(0));
}

/// The log of a start that must have been refused.
fn refused(started: Result<Server, String>) -> String {
    match started {
        Ok(_) => panic!("start-up must be refused"),
        Err(log) => log,
    }
}

/// Replaces kv rows `ids`, each `[id, id % 3000, "v{id % 7}"]`.
fn write_rows(server: &Server, ids: std::ops::Range<u64>) {
    let mut client = Client::connect(server);
    for id in ids {
        let mut request = Vec::new();
        let value = format!("v{}", id % 7);
        client::encode_replace(&mut request, id, KV, &common::kv_tuple(id, &value));
        client.send(&request);
        let reply = client.read_packet().expect("reply");
        assert!(!decode_reply(&reply).unwrap().is_error());
    }
}

/// The ids of the kv rows whose value is `value`, by index 1 (EQ), in the index's order.
fn ids_by_value(server: &Server, value: &str) -> Vec<u64> {
    let mut key = Vec::new();
    write_array_len(&mut key, 1);
    write_str(&mut key, value.as_bytes());
    common::select_rows(server.addr, KV, 1, 0, &key)
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}

#[test]
fn an_index_and_a_field_the_config_adds_are_built_over_the_recorded_data() {
    let dir = tempfile::tempdir().unwrap();
    rows_written(dir.path(), 0..200);

    let changed = with_value_index();
    let server = start(dir.path(), &changed).unwrap();
    let log = server.log_so_far();
    assert!(
        log.contains(
            "schema change: space 512 'kv' (field 4 'note' added as nullable string, index 1 \
             'by_value' added as non-unique tree on [3 string])"
        ),
        "{log}"
    );
    assert!(log.contains("schema change made"), "{log}");
    // Rows of both shards, in the new index's order: by value, then by primary key.
    let expected: Vec<u64> = (0..200).filter(|id| id % 7 == 3).collect();
    assert_eq!(ids_by_value(&server, "v3"), expected);
    // The new field is in the format: a string there is taken, a number refused.
    let mut with_note = Vec::new();
    write_array_len(&mut with_note, 4);
    write_uint(&mut with_note, 500);
    write_uint(&mut with_note, 500);
    write_str(&mut with_note, b"v3");
    write_str(&mut with_note, b"a note");
    let mut request = Vec::new();
    client::encode_replace(&mut request, 7, KV, &with_note);
    let mut client = Client::connect(&server);
    client.send(&request);
    let reply = client.read_packet().unwrap();
    assert!(!decode_reply(&reply).unwrap().is_error());
    assert_eq!(server.stop(), Some(0));

    // Recorded now: the next start changes nothing, and everything is still there.
    let server = start(dir.path(), &changed).unwrap();
    assert!(!server.log_so_far().contains("schema change"));
    let mut expected_with_new = expected.clone();
    expected_with_new.push(500);
    assert_eq!(ids_by_value(&server, "v3"), expected_with_new);
    assert_eq!(common::kv_ids(server.addr).len(), 201);
    assert_eq!(server.stop(), Some(0));
}

#[test]
fn a_change_the_data_does_not_allow_refuses_the_start_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    rows_written(dir.path(), 0..50);
    let narrowed = with_value_type("unsigned");
    let log = refused(start(dir.path(), &narrowed));
    assert!(
        log.contains(
            "the config changes space 512 'kv' (field 3 'value' from string to unsigned), which \
             its data does not allow: Tuple field 3 (value) type does not match one required by \
             operation: expected unsigned, got string. Nothing was changed on disk"
        ),
        "{log}"
    );
    let server = start(dir.path(), SHIPPED).unwrap();
    assert!(!server.log_so_far().contains("schema change"));
    assert_eq!(common::kv_ids(server.addr), (0..50).collect::<Vec<u64>>());
    assert_eq!(server.stop(), Some(0));
}

#[test]
fn a_space_gone_from_the_config_is_refused_or_dropped_for_good_on_the_operators_word() {
    let dir = tempfile::tempdir().unwrap();
    rows_written(dir.path(), 0..10);
    let kv_start = SHIPPED.find("[[space]]\nname = \"kv\"").expect("kv");
    let kv_end = kv_start
        + SHIPPED[kv_start..]
            .find("\n# A space with secondary")
            .expect("the next space");
    let without_kv = format!("{}{}", &SHIPPED[..kv_start], &SHIPPED[kv_end..]);
    let log = refused(start(dir.path(), &without_kv));
    assert!(
        log.contains("space 512 holds data on disk but is not in the config"),
        "{log}"
    );
    assert!(
        log.contains("or start once with --drop-missing-spaces to drop its data"),
        "{log}"
    );

    let args = ["--wal-mode", "write", "--drop-missing-spaces"];
    let server = Server::try_start_with(dir.path(), &without_kv, SHARDS, &args).unwrap();
    let log = server.log_so_far();
    assert!(
        log.contains("schema change made: space 512 'kv' (dropped: not in the config"),
        "{log}"
    );
    assert_eq!(server.stop(), Some(0));
    // Recorded without it: the same config starts without the flag.
    let server = start(dir.path(), &without_kv).unwrap();
    assert_eq!(server.stop(), Some(0));
    // Given back to the config, the space starts empty: its old rows never come back.
    let server = start(dir.path(), SHIPPED).unwrap();
    assert_eq!(common::kv_ids(server.addr), Vec::<u64>::new());
    write_rows(&server, 3..4);
    assert_eq!(server.stop(), Some(0));
    let server = start(dir.path(), SHIPPED).unwrap();
    assert_eq!(common::kv_ids(server.addr), [3]);
    assert_eq!(server.stop(), Some(0));
}

#[test]
fn a_schema_change_and_a_new_shard_count_at_once_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    rows_written(dir.path(), 0..20);
    let log = refused(Server::try_start_with(
        dir.path(),
        &with_value_index(),
        1,
        &[],
    ));
    assert!(
        log.contains("and the data was written over 2 shards, not 1: rows move between shards under the recorded schema only"),
        "{log}"
    );
    // Nothing moved: the recorded schema at the recorded count starts as before.
    let server = start(dir.path(), SHIPPED).unwrap();
    assert_eq!(common::kv_ids(server.addr), (0..20).collect::<Vec<u64>>());
    assert_eq!(server.stop(), Some(0));
}

#[test]
fn a_change_that_fails_on_one_shard_writes_nothing_on_the_others() {
    let scalar_value = with_value_type("scalar");
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &scalar_value).unwrap();
    let mut client = Client::connect(&server);
    // Unsigned values but one string: the rows of the other shard all fit `unsigned`.
    for id in 0..40u64 {
        let mut tuple = Vec::new();
        write_array_len(&mut tuple, 3);
        write_uint(&mut tuple, id);
        write_uint(&mut tuple, id);
        match id {
            17 => write_str(&mut tuple, b"seventeen"),
            _ => write_uint(&mut tuple, id * 10),
        }
        let mut request = Vec::new();
        client::encode_replace(&mut request, id, KV, &tuple);
        client.send(&request);
        assert!(!decode_reply(&client.read_packet().unwrap())
            .unwrap()
            .is_error());
    }
    assert_eq!(server.stop(), Some(0));
    let before = common::dir_contents(dir.path());
    let unsigned_value = with_value_type("unsigned");
    let log = refused(start(dir.path(), &unsigned_value));
    assert!(
        log.contains("field 3 'value' from scalar to unsigned), which its data does not allow"),
        "{log}"
    );
    assert!(
        log.contains("schema change made"),
        "the other shard made it: {log}"
    );
    assert!(!log.contains("snapshot written"), "{log}");
    let after = common::dir_contents(dir.path());
    // The config file is the test's; the data directory is as it was, byte for byte.
    let data = |files: &std::collections::BTreeMap<std::path::PathBuf, Option<Vec<u8>>>| {
        files
            .iter()
            .filter(|(path, _)| path.starts_with(dir.path().join("data")))
            .map(|(path, bytes)| (path.clone(), bytes.clone()))
            .collect::<Vec<_>>()
    };
    assert!(data(&before) == data(&after), "the data directory changed");
    let server = start(dir.path(), &scalar_value).unwrap();
    assert_eq!(common::kv_ids(server.addr).len(), 40);
    assert_eq!(server.stop(), Some(0));
}

/// A space the config may add: `notes`, id 520, one unsigned field.
const NOTES_SPACE: &str = r#"
[[space]]
name = "notes"
id = 520
shard = "all"
format = [{ name = "id", type = "unsigned" }]

[[space.index]]
name = "primary"
type = "TREE"
unique = true
parts = ["id"]
"#;

fn hang_up(server: &Server) {
    let sent = std::process::Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

#[test]
fn sighup_makes_the_configs_new_index_field_and_space_while_serving() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), SHIPPED).unwrap();
    write_rows(&server, 0..200);
    let config_path = dir.path().join("tarn.toml");
    let changed = format!("{}{NOTES_SPACE}", with_value_index());
    std::fs::write(&config_path, &changed).unwrap();
    hang_up(&server);
    let made = "SIGHUP: schema change made: space 520 'notes' created";
    let waited = std::time::Duration::from_secs(20);
    assert!(server.wait_for_log(made, waited), "{}", server.log_so_far());
    assert!(server.log_so_far().contains(
        "SIGHUP: schema change made: space 512 'kv' (field 4 'note' added as nullable string, \
         index 1 'by_value' added as non-unique tree on [3 string])"
    ));
    let expected: Vec<u64> = (0..200).filter(|id| id % 7 == 3).collect();
    assert_eq!(ids_by_value(&server, "v3"), expected);
    assert!(common::select_rows(server.addr, 520, 0, 2, &[0x90]).is_empty());

    // A change SIGHUP does not make (a new primary key) is logged; nothing changes.
    let new_primary = changed.replacen("parts = [\"id\"]", "parts = [\"value\"]", 1);
    std::fs::write(&config_path, new_primary).unwrap();
    hang_up(&server);
    let refused = "SIGHUP: the config's spaces were not changed";
    assert!(
        server.wait_for_log(refused, waited),
        "{}",
        server.log_so_far()
    );
    assert_eq!(ids_by_value(&server, "v3"), expected);
    assert_eq!(server.stop(), Some(0));

    // Recorded: a start under the changed config has nothing to change.
    let server = start(dir.path(), &changed).unwrap();
    assert!(
        !server.log_so_far().contains("schema change"),
        "{}",
        server.log_so_far()
    );
    assert_eq!(ids_by_value(&server, "v3"), expected);
    assert_eq!(server.stop(), Some(0));
}
